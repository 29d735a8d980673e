"""Semantic search over embeddings: ``SemanticIndex`` (flat / HNSW / IVF-PQ on FAISS) and text helpers.

Array level (no model needed)::

    index = SemanticIndex(384, kind="hnsw", params=HNSWParams(m=32, ef_search=128))
    index.add(ids, vectors, metadata)           # vectors (N, H); ids unique strings
    hits = index.search(queries, k=10)          # queries (Q, H) -> Q lists of Hit(id, score, metadata)
    index.save("my_index"); SemanticIndex.load("my_index", expected_config=emb.config.to_dict())

With an embedder: ``build_sentence_index``, ``build_word_index``, ``query_sentences``, ``query_words``; and
``build_document_index`` for documents longer than a sentence (a ``DocumentIndex``: each document scored by its whole
text and its best passage, ``index.search(embedder, queries)``).

Hybrid (BM25 beside the vectors, ids shared; needs ``bm25s``)::

    index = SemanticIndex(384, hybrid=HybridParams(fusion="rrf", rrf_k=60))
    index.add(ids, vectors, texts=texts)
    hits = index.search(queries, k=10, texts=query_texts)            # mode="hybrid"; or "vector", "bm25"

A corrupt, truncated or inconsistent saved file raises ``CorruptFileError`` (a ``ValueError``) naming the file.
``embedder_config_differences`` is the configuration comparison that indexes and the WSD sense store share.

Concurrency: a save holds the directory's lock (a second writer gets ``DirectoryLockedError``, from
``ctxemb.locks``, or waits with ``lock_timeout=``); loads see one complete save; an index is thread-safe (concurrent
searches, exclusive mutation). See docs/guide/reliability.md.

Modules: ``params`` (index kinds and their parameter objects), ``index`` (``SemanticIndex``), ``inputs`` (argument
checks, the embedder-configuration comparison), ``results`` (``Hit``), ``persistence`` (save, load, the on-disk
write lock), ``storage`` (the saved directory), ``_backends`` (the FAISS structures), ``text`` (the embedder helpers),
``documents`` (``DocumentIndex``), ``fusion`` (hybrid settings, rank fusion), ``lexical`` (the BM25 half, on ``bm25s``),
``sharded`` (one on-disk IVF-PQ index from shards added by several processes or machines) and ``shard_files`` (its
trained-quantizer and partial directories).
"""

from ctxemb.locks import DirectoryLockedError
from ctxemb.search.documents import DocumentHit, DocumentIndex, build_document_index, split_passages
from ctxemb.search.fusion import FUSION_METHODS, SEARCH_MODES, HybridParams
from ctxemb.search.index import Hit, SemanticIndex, embedder_config_differences
from ctxemb.search.params import (
    INDEX_KINDS,
    METRICS,
    FlatParams,
    HNSWParams,
    IndexKind,
    IndexParams,
    IVFPQParams,
    Metric,
    make_params,
)
from ctxemb.search.storage import CorruptFileError
from ctxemb.search.text import build_sentence_index, build_word_index, query_sentences, query_words

__all__ = [
    "CorruptFileError",
    "DirectoryLockedError",
    "DocumentHit",
    "DocumentIndex",
    "FUSION_METHODS",
    "INDEX_KINDS",
    "METRICS",
    "SEARCH_MODES",
    "FlatParams",
    "HNSWParams",
    "Hit",
    "HybridParams",
    "IVFPQParams",
    "IndexKind",
    "IndexParams",
    "Metric",
    "SemanticIndex",
    "build_document_index",
    "build_sentence_index",
    "build_word_index",
    "embedder_config_differences",
    "make_params",
    "query_sentences",
    "query_words",
    "split_passages",
]
