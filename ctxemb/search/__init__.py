"""Semantic search over embeddings: ``SemanticIndex`` (flat / HNSW / IVF-PQ on FAISS) and text helpers.

Array level (no model needed)::

    index = SemanticIndex(384, kind="hnsw")
    index.add(ids, vectors, metadata)           # vectors (N, H); ids unique strings
    hits = index.search(queries, k=10)          # queries (Q, H) -> Q lists of Hit(id, score, metadata)
    index.save("my_index"); SemanticIndex.load("my_index", expected_config=emb.config.to_dict())

With an embedder: ``build_sentence_index``, ``build_word_index``, ``query_sentences``, ``query_words``.
"""

from ctxemb.search.index import INDEX_KINDS, METRICS, Hit, SemanticIndex
from ctxemb.search.text import build_sentence_index, build_word_index, query_sentences, query_words

__all__ = [
    "INDEX_KINDS",
    "METRICS",
    "Hit",
    "SemanticIndex",
    "build_sentence_index",
    "build_word_index",
    "query_sentences",
    "query_words",
]
