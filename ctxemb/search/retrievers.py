"""Retrievers over a corpus of texts, with one interface so that they compose and a BEIR run can score any of them.

A retriever is built over ``{doc id: text}`` and answers ``retrieve({query id: text}, k)`` with a run,
``{query id: {doc id: score}}`` (higher is better). The ones here:

- :class:`BM25Retriever`: ``bm25s`` (Lucene BM25, English stopwords), as the hybrid index uses it;
- :class:`DenseRetriever`: one vector per text (the Embedder's sentence vectors), exact inner product on FAISS;
- :class:`DocumentRetriever`: a :class:`~ctxemb.search.documents.DocumentIndex` (whole text + best passage);
- :class:`LateInteractionRetriever`: token vectors in a :class:`~ctxemb.search.late.LateInteractionIndex`
  (compressed; candidates by centroid probes, MaxSim re-scoring), or exhaustive exact MaxSim (``exhaustive=True``);
- :class:`FusionRetriever`: reciprocal rank fusion of any retrievers' rankings;
- :class:`RerankRetriever`: re-scores another retriever's top ``depth`` with exact MaxSim.

Shape legend: Q queries, N documents, H vector width.
"""

from __future__ import annotations

import time
from typing import Mapping, Protocol, Sequence

import numpy as np

from ctxemb.core.validation import check_int
from ctxemb.search.chunking import late_chunk_means
from ctxemb.search.fusion import HybridParams
from ctxemb.search.late.index import LateInteractionIndex
from ctxemb.search.late.scoring import MaxSimReranker, maxsim_concatenated
from ctxemb.search.late.pooling import pool_documents
from ctxemb.search.lexical import BM25Index

Run = dict[str, dict[str, float]]


class Retriever(Protocol):
    """Anything that answers queries with a run (see the module docstring)."""

    name: str

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        """{query id: {doc id: score}} with at most ``k`` documents per query."""
        ...


def _check_corpus(corpus: Mapping[str, str]) -> tuple[list[str], list[str]]:
    if not isinstance(corpus, Mapping):
        raise TypeError("corpus must be a mapping {doc id: text}, got %s" % type(corpus).__name__)
    if not corpus:
        raise ValueError("corpus is empty: a retriever needs at least one document")
    ids, texts = list(corpus), list(corpus.values())
    for i, t in zip(ids, texts):
        if not isinstance(i, str) or not isinstance(t, str):
            raise TypeError("corpus must map str ids to str texts; got %r -> %s" % (i, type(t).__name__))
    return ids, texts


def _check_queries(queries: Mapping[str, str], k) -> tuple[list[str], list[str], int]:
    if not isinstance(queries, Mapping):
        raise TypeError("queries must be a mapping {query id: text}, got %s" % type(queries).__name__)
    return list(queries), [str(t) for t in queries.values()], check_int(k, "k", low=1)


class BM25Retriever:
    """BM25 over the corpus (``bm25s``, needs ``ctxemb[hybrid]``). A query with no indexed term (only stop words or
    punctuation) gets an empty ranking."""

    name = "bm25"

    def __init__(self, corpus: Mapping[str, str], params: HybridParams | None = None):
        self.ids, texts = _check_corpus(corpus)
        self._bm25 = BM25Index(params or HybridParams())
        self._bm25.add(texts, 0)

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        qids, texts, k = _check_queries(queries, k)
        scores, labels = self._bm25.top(texts, k) if texts else (np.zeros((0, k)), np.zeros((0, k), int))
        return {q: {self.ids[l]: float(s) for s, l in zip(srow, lrow) if l >= 0}
                for q, srow, lrow in zip(qids, scores, labels)}


class DenseRetriever:
    """One vector per text (or per chunk of a long text): the embedder's sentence vectors, exact inner product.

    Chunking, for texts longer than the encoder's window:

    - ``None``: one vector per text, as ``embed_sentences`` gives it (the model's maximum length; longer texts are
      cut by a sentence-transformers model, windowed otherwise);
    - ``"naive"``: the text cut into pieces of ``chunk_tokens`` subword tokens, each embedded alone;
    - ``"late"`` (late chunking, Günther et al. 2024): the whole text encoded once (in overlapping windows of the
      model's maximum length when longer), then each piece's token vectors mean-pooled, so every chunk vector saw
      the text around it.

    A document scores as its best chunk.

    Args:
        embedder: an :class:`~ctxemb.embedding.embedder.Embedder`.
        corpus: {doc id: text}.
        vectors: the corpus's (N, H) vectors if already computed (``chunking=None`` only).
        chunking: None, "naive" or "late".
        chunk_tokens: subword tokens per chunk.
        batch_size / show_progress_bar: for encoding.
    """

    name = "dense"

    def __init__(self, embedder, corpus: Mapping[str, str], *, vectors: np.ndarray | None = None,
                 chunking: str | None = None, chunk_tokens: int = 256, batch_size: int = 32,
                 show_progress_bar: bool = True):
        import faiss

        if chunking not in (None, "naive", "late"):
            raise ValueError("chunking must be None, 'naive' or 'late', got %r" % (chunking,))
        if vectors is not None and chunking is not None:
            raise ValueError("vectors= gives one vector per text: it cannot be combined with chunking")
        chunk_tokens = check_int(chunk_tokens, "chunk_tokens", low=1)
        self.ids, texts = _check_corpus(corpus)
        self.embedder = embedder
        owners = np.arange(len(texts))
        if chunking is not None:
            vectors, owners = _chunk_vectors(embedder, texts, chunking, chunk_tokens, batch_size, show_progress_bar)
            self.name = "dense-%s-chunks-%d" % (chunking, chunk_tokens)
        elif vectors is None:
            vectors = embedder.embed_sentences(texts, batch_size=batch_size, show_progress_bar=show_progress_bar,
                                               normalize=True)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(owners):
            raise ValueError("vectors has %d rows for %d documents" % (vectors.shape[0], len(self.ids)))
        self._owner = owners
        self._index = faiss.IndexFlatIP(vectors.shape[1])
        self._index.add(vectors)

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        qids, texts, k = _check_queries(queries, k)
        if not texts:
            return {}
        q = np.ascontiguousarray(self.embedder.embed_sentences(texts, normalize=True, show_progress_bar=False),
                                 dtype=np.float32)
        depth = min(self._index.ntotal, k * max(1, round(len(self._owner) / len(self.ids))) * 2)
        scores, rows = self._index.search(q, depth)
        run = {}
        for qid, srow, rrow in zip(qids, scores, rows):
            best: dict[str, float] = {}
            for score, row in zip(srow, rrow):
                if row >= 0:
                    doc = self.ids[self._owner[row]]
                    best.setdefault(doc, float(score))  # rows come best first: the first is the document's best
            run[qid] = dict(list(best.items())[:k])
        return run


def _chunk_vectors(embedder, texts: list[str], chunking: str, chunk_tokens: int, batch_size: int,
                   show_progress_bar: bool) -> tuple[np.ndarray, np.ndarray]:
    """(C, H) unit chunk vectors and (C,) the text each belongs to (see :class:`DenseRetriever`)."""
    owners = []
    if chunking == "late":
        def runs(_, tokenized):
            return [(lo, min(lo + chunk_tokens, len(tokenized))) for lo in range(0, len(tokenized), chunk_tokens)]

        means = late_chunk_means(embedder, texts, runs, batch_size=batch_size, show_progress_bar=show_progress_bar,
                                 layers=[-1])
        x = np.concatenate(means).astype(np.float32, copy=False)  # (C, H)
        owners = np.repeat(np.arange(len(texts)), [len(m) for m in means])
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12), owners
    pieces = []
    for n, item in enumerate(embedder.tokenizer.tokenize(texts)):
        offsets = item.offsets
        for lo in range(0, max(1, len(offsets)), chunk_tokens):
            span = offsets[lo:lo + chunk_tokens]
            if span:
                pieces.append(texts[n][span[0][0]:span[-1][1]])
                owners.append(n)
    x = embedder.embed_sentences(pieces, batch_size=batch_size, show_progress_bar=show_progress_bar, normalize=True)
    return np.asarray(x, dtype=np.float32), np.asarray(owners)


class DocumentRetriever:
    """A :class:`~ctxemb.search.documents.DocumentIndex` over the corpus (whole text + best passage; ``hybrid``
    adds BM25)."""

    name = "document"

    def __init__(self, embedder, corpus: Mapping[str, str], *, hybrid: bool = False, show_progress_bar: bool = True):
        from ctxemb.search.documents import build_document_index

        ids, texts = _check_corpus(corpus)
        self.embedder = embedder
        self._index = build_document_index(embedder, texts, ids, hybrid=hybrid, show_progress_bar=show_progress_bar)

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        qids, texts, k = _check_queries(queries, k)
        if not texts:
            return {}
        hits = self._index.search(self.embedder, texts, k=k)
        return {q: {h.id: float(h.score) for h in row} for q, row in zip(qids, hits)}


class LateInteractionRetriever:
    """Late interaction (MaxSim over token vectors).

    Args:
        encoder: a :class:`~ctxemb.search.late.LateInteractionEncoder`.
        corpus: {doc id: text} to encode and index; or None with ``index``.
        index: a built :class:`~ctxemb.search.late.LateInteractionIndex` (its documents must match the encoder).
        document_vectors: the corpus's token vectors, if already computed (one (T_i, D) array per document).
        exhaustive: score every document by exact MaxSim on uncompressed vectors (no index; the reference).
        nbits, n_centroids: the index's codec (ignored when ``exhaustive``).
        nprobe, candidates: search settings (see ``LateInteractionIndex.search``).
        pool_factor: merge each document's token vectors into about ``T / pool_factor`` (token pooling,
            :mod:`ctxemb.search.late.pooling`); 1 keeps every token.
    """

    name = "late-interaction"

    def __init__(self, encoder, corpus: Mapping[str, str] | None = None, *, index: LateInteractionIndex | None = None,
                 document_vectors: Sequence[np.ndarray] | None = None, exhaustive: bool = False, nbits: int = 2,
                 n_centroids: int | None = None, nprobe: int = 4, candidates: int = 256, pool_factor: int = 1,
                 show_progress_bar: bool = True):
        self.encoder = encoder
        self.nprobe, self.candidates = nprobe, candidates
        self.exhaustive = exhaustive
        self.index = index
        self.encode_seconds = 0.0
        if index is None:
            ids, texts = _check_corpus(corpus)
            if document_vectors is None:
                start = time.perf_counter()
                document_vectors = encoder.encode_documents(texts, show_progress_bar=show_progress_bar)
                self.encode_seconds = time.perf_counter() - start
            if len(document_vectors) != len(ids):
                raise ValueError("document_vectors has %d entries for %d documents" % (len(document_vectors), len(ids)))
            if pool_factor != 1:
                document_vectors = pool_documents(document_vectors, pool_factor)
            if exhaustive:
                self.ids = ids
                self._offsets = np.concatenate([[0], np.cumsum([len(d) for d in document_vectors])])
                self._tokens = np.concatenate(document_vectors).astype(np.float32)
            else:
                self.index = LateInteractionIndex(encoder.dim, nbits=nbits, n_centroids=n_centroids,
                                                  encoder_config=encoder.config.to_dict())
                self.index.add(ids, document_vectors)
        elif exhaustive:
            raise ValueError("exhaustive=True scores uncompressed vectors: give the corpus, not an index")

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        qids, texts, k = _check_queries(queries, k)
        if not texts:
            return {}
        vectors = self.encoder.encode_queries(texts)
        run = {}
        for qid, q in zip(qids, vectors):
            if self.exhaustive:
                scores = maxsim_concatenated(q, self._tokens, self._offsets)
                top = np.lexsort((np.arange(len(scores)), -scores))[:k]
                run[qid] = {self.ids[i]: float(scores[i]) for i in top}
            else:
                run[qid] = dict(self.index.search(q, k, nprobe=self.nprobe, candidates=self.candidates))
        return run


class FusionRetriever:
    """Reciprocal rank fusion (Cormack et al. 2009): ``sum_r 1 / (rrf_k + rank_r)`` over the retrievers' top
    ``depth`` lists (ranks from 1)."""

    def __init__(self, retrievers: Sequence[Retriever], *, rrf_k: float = 60.0, depth: int = 100):
        if len(retrievers) < 2:
            raise ValueError("FusionRetriever needs at least two retrievers, got %d" % len(retrievers))
        self.retrievers = list(retrievers)
        self.rrf_k, self.depth = float(rrf_k), check_int(depth, "depth", low=1)
        self.name = "rrf(" + ",".join(r.name for r in self.retrievers) + ")"

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        from ctxemb.metrics.trec import trec_order

        qids, _, k = _check_queries(queries, k)
        runs = [r.retrieve(queries, max(k, self.depth)) for r in self.retrievers]
        out = {}
        for q in qids:
            total: dict[str, float] = {}
            for run in runs:
                for rank, d in enumerate(trec_order(run.get(q, {}))[:self.depth], start=1):
                    total[d] = total.get(d, 0.0) + 1.0 / (self.rrf_k + rank)
            out[q] = {d: total[d] for d in trec_order(total)[:k]}
        return out


class RerankRetriever:
    """Another retriever's top ``depth``, re-scored by exact MaxSim (:class:`~ctxemb.search.late.MaxSimReranker`)."""

    def __init__(self, first: Retriever, reranker: MaxSimReranker, corpus: Mapping[str, str], *, depth: int = 100):
        self.first, self.reranker = first, reranker
        self.corpus = corpus
        self.depth = check_int(depth, "depth", low=1)
        self.name = "rerank(%s)" % first.name

    def retrieve(self, queries: Mapping[str, str], k: int) -> Run:
        qids, _, k = _check_queries(queries, k)
        first = self.first.retrieve(queries, self.depth)
        return {q: self.reranker.rerank(queries[q], {d: self.corpus[d] for d in first.get(q, {})}, k) for q in qids}
