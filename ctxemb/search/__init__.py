"""Semantic search over embeddings: ``SemanticIndex`` (flat / HNSW / IVF-PQ on FAISS) and text helpers.

Array level (no model needed)::

    index = SemanticIndex(384, kind="hnsw", params=HNSWParams(m=32, ef_search=128))
    index.add(ids, vectors, metadata)           # vectors (N, H); ids unique strings
    hits = index.search(queries, k=10)          # queries (Q, H) -> Q lists of Hit(id, score, metadata)
    index.save("my_index"); SemanticIndex.load("my_index")
    # expected_config=emb.config.to_dict() checks queries against the configuration the index records: one built
    # with SemanticIndex(..., embedder_config=emb.config), or by build_sentence_index / build_word_index

With an embedder: ``build_sentence_index``, ``build_word_index``, ``query_sentences``, ``query_words``; and
``build_document_index`` for documents longer than a sentence (a ``DocumentIndex``: each document scored by its whole
text and its best passage, ``index.search(embedder, queries)``). One query at a time, for serving:
``QuerySearcher(index, QueryEncoder(emb, **query_options(index, emb)))``, its set-up done once.

Hybrid (BM25 beside the vectors, ids shared; needs ``bm25s``)::

    index = SemanticIndex(384, hybrid=HybridParams(fusion="rrf", rrf_k=60))
    index.add(ids, vectors, texts=texts)
    hits = index.search(queries, k=10, texts=query_texts)            # mode="hybrid"; or "vector", "bm25"

A corrupt, truncated or inconsistent saved file raises ``CorruptFileError`` (a ``ValueError``) naming the file.
``embedder_config_differences`` is the configuration comparison that indexes and the WSD sense store share.

Concurrency: a save holds the directory's lock (a second writer gets ``DirectoryLockedError``, from
``ctxemb.core.locks``, or waits with ``lock_timeout=``); loads see one complete save; an index is thread-safe
(concurrent searches, exclusive mutation). See docs/guide/reliability.md.

Modules: ``params`` (index kinds and their parameter objects), ``index`` (``SemanticIndex``), ``inputs`` (argument
checks, the embedder-configuration comparison), ``results`` (``Hit``), ``persistence`` (save, load, the on-disk write
lock), ``storage`` (the saved directory), ``faiss_structures`` (the FAISS structures), ``text`` (the embedder
helpers), ``documents`` (``DocumentIndex``), ``serving`` (``QuerySearcher``: one query text at a time, for
serving), ``chunking`` (late chunking: passages pooled from the whole
document's token vectors), ``fusion`` (hybrid settings, rank fusion), ``lexical`` (the BM25 half,
on ``bm25s``), ``sharded`` (one on-disk IVF-PQ index from shards added by several processes or machines),
``shard_files`` (its trained-quantizer and partial directories) and ``ray_build`` (an index from the vector shards a
Ray cluster embedded).

The names below are imported on first use: reading the option names of :mod:`~ctxemb.search.params` and
:mod:`~ctxemb.search.fusion` (what ``ctxemb index --help`` does) loads no FAISS.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "CorruptFileError": "ctxemb.search.storage",
    "DirectoryLockedError": "ctxemb.core.locks",
    "DocumentHit": "ctxemb.search.documents",
    "DocumentIndex": "ctxemb.search.documents",
    "FUSION_METHODS": "ctxemb.search.fusion",
    "INDEX_KINDS": "ctxemb.search.params",
    "METRICS": "ctxemb.search.params",
    "SEARCH_MODES": "ctxemb.search.fusion",
    "FlatParams": "ctxemb.search.params",
    "HNSWParams": "ctxemb.search.params",
    "Hit": "ctxemb.search.index",
    "HybridParams": "ctxemb.search.fusion",
    "IVFPQParams": "ctxemb.search.params",
    "IndexKind": "ctxemb.search.params",
    "IndexParams": "ctxemb.search.params",
    "Metric": "ctxemb.search.params",
    "QuerySearcher": "ctxemb.search.serving",
    "SemanticIndex": "ctxemb.search.index",
    "build_document_index": "ctxemb.search.documents",
    "build_sentence_index": "ctxemb.search.text",
    "build_word_index": "ctxemb.search.text",
    "embedder_config_differences": "ctxemb.search.inputs",
    "make_params": "ctxemb.search.params",
    "query_options": "ctxemb.search.serving",
    "query_sentences": "ctxemb.search.text",
    "query_words": "ctxemb.search.text",
    "split_passages": "ctxemb.search.documents",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
