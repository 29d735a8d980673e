"""One query text at a time against an index, for serving: :class:`QuerySearcher`.

A searcher holds an index, a :class:`~ctxemb.search.index.SemanticIndex` (vectors only or hybrid) or a
:class:`~ctxemb.search.documents.DocumentIndex`, and an encoder that embeds one text at batch size 1 as the index's
texts were embedded: a :class:`ctxemb.embedding.query.QueryEncoder`, made with :func:`query_options` for an index
built from texts. When it is made it checks the encoder's configuration and options against the index once
(``query_sentences`` checks them on every call) and measures the FAISS thread count for one query; each
:meth:`QuerySearcher.search` then encodes the text and runs the index's own search with it (vector, hybrid or BM25, as
``query_sentences`` and ``DocumentIndex.search`` do), FAISS on that thread count.

FAISS threads. One query gives FAISS little to share between threads: an HNSW search of one query runs on one thread
whatever the count, while exact and IVF-PQ searches enter parallel regions whose fork and join can cost more than a
second thread gives, and on a shared machine a second thread may wait for a core another process holds (an exact
search of one query over 200,000 vectors took 10 ms on one thread and 58 ms on two on a 2-core EPYC whose other core
was busy). So the count is measured, not assumed: :func:`ctxemb.core.threads.fastest_threads` over
:func:`~ctxemb.core.threads.thread_candidates` of FAISS's count, on the probe query
(:data:`ctxemb.core.threads.PROBE_QUERY`) searched in this index, each search timed right after the query's encoding
as in serving (what the encoding leaves in the caches and on the cores is part of a search's cost). Each search sets
the count in the calling thread (OpenMP keeps a thread count per thread) and restores the caller's after.

The results are those of ``query_sentences(index, embedder, text, ...)`` or ``DocumentIndex.search(embedder, text,
...)``, whose vectors the encoder's equal (see :mod:`ctxemb.embedding.query` for when they are equal bit for bit).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import faiss
import numpy as np

from ctxemb.core.protocols import embedder_config_dict
from ctxemb.core.threads import PROBE_QUERY, ThreadChoice, fastest_threads, running_on, thread_candidates
from ctxemb.core.validation import check_int
from ctxemb.search.documents import DocumentHit, DocumentIndex
from ctxemb.search.fusion import check_mode
from ctxemb.search.index import SemanticIndex
from ctxemb.search.results import Hit
from ctxemb.search.text import _layer_kwargs, _recipe

logger = logging.getLogger(__name__)

#: Seconds the FAISS thread choice may spend timing, at most (a 1M-vector exact search takes ~0.1 s a query).
_PROBE_SECONDS = 1.0


def query_options(index: SemanticIndex | DocumentIndex, embedder) -> dict[str, Any]:
    """The sentence options that embed a query of ``index`` as its texts were embedded (by
    :func:`~ctxemb.search.build_sentence_index` or :func:`~ctxemb.search.build_document_index`): keyword arguments
    for ``embed_sentences`` or :class:`~ctxemb.embedding.query.QueryEncoder`.

    Args:
        index: a sentence or document index.
        embedder: the embedder (or query encoder) its queries are embedded with; read only for an index whose recipe
            has no ``sentence_defaults`` (its queries name the embedder's configured layers).

    Raises:
        TypeError: ``index`` is neither a SemanticIndex nor a DocumentIndex.
        ValueError: the index was not built from texts.
    """
    recipe = _recipe(_vector_index(index), "sentences")
    options = {"pooling": recipe["pooling"], "normalize": False, **_layer_kwargs(recipe, embedder)}
    return {name: value for name, value in options.items() if value is not None}


def _vector_index(index) -> SemanticIndex:
    if isinstance(index, DocumentIndex):
        return index.documents
    if isinstance(index, SemanticIndex):
        return index
    raise TypeError(f"index must be a SemanticIndex or a DocumentIndex, got {type(index).__name__}")


class QuerySearcher:
    """Search an index one query text at a time (see the module docstring).

    Example:
        >>> encoder = QueryEncoder(emb, **query_options(index, emb))  # doctest: +SKIP
        >>> searcher = QuerySearcher(index, encoder)  # doctest: +SKIP
        >>> hits = searcher.search("how do vaccines work?", k=10)  # doctest: +SKIP

    Args:
        index: a :class:`~ctxemb.search.index.SemanticIndex` or a :class:`~ctxemb.search.documents.DocumentIndex`;
            not empty.
        encoder: ``encoder(text) -> (H,)`` float32 array, with the embedder's ``config`` and the ``options`` it
            embeds with: a :class:`~ctxemb.embedding.query.QueryEncoder`. For an index built from texts
            (``build_sentence_index``, ``build_document_index``) it must be made with :func:`query_options`; its
            configuration is checked against the one an index records. An index of the caller's own vectors takes
            the encoder that made them (e.g. ``QueryEncoder(emb)`` for ``emb.embed_sentences(texts)``).
        faiss_threads: FAISS threads for a search: "auto" (the default) measures them on this index; an int uses that
            count; None leaves FAISS's count alone.

    Attributes:
        index, encoder: as given.
        faiss_threads: the FAISS thread count of a search (None: FAISS's own).
        thread_choice: what "auto" measured (None otherwise).

    Raises:
        TypeError: a wrong type of index or encoder.
        ValueError: the index is empty, the encoder's configuration differs from the one the index records, or it
            embeds with other options than the queries of an index built from texts need.
    """

    def __init__(self, index: SemanticIndex | DocumentIndex, encoder: Callable[[str], np.ndarray], *,
                 faiss_threads: int | str | None = "auto"):
        vectors = _vector_index(index)
        if not callable(encoder):
            raise TypeError(f"encoder must be callable (text -> vector), got {type(encoder).__name__}")
        if vectors.embedder_config is not None:
            vectors.check_config(embedder_config_dict(encoder))
        if vectors.recipe is not None or isinstance(index, DocumentIndex):  # built from texts: its queries' options
            expected = query_options(index, encoder)
            given = getattr(encoder, "options", None)
            if given is None or dict(given) != expected:
                raise ValueError(f"the encoder embeds with options {given}, but this index's queries are embedded "
                                 f"with {expected}: make it with QueryEncoder(embedder, **query_options(index, "
                                 "embedder))")
        if faiss_threads != "auto" and faiss_threads is not None:
            faiss_threads = check_int(faiss_threads, "faiss_threads", low=1)
        if len(index) == 0:
            raise ValueError("the index is empty: add items before making a searcher")
        self.index, self.encoder = index, encoder
        self._hybrid = vectors.hybrid
        self.thread_choice: ThreadChoice | None = None
        self.faiss_threads: int | None = None
        if faiss_threads == "auto":
            faiss_threads = self._choose_threads()
        self.faiss_threads = faiss_threads

    def __repr__(self) -> str:
        return f"QuerySearcher({self.index!r}, {self.encoder!r}, faiss_threads={self.faiss_threads})"

    def _choose_threads(self) -> int:
        """The FAISS thread count at which the probe query is searched fastest in this index."""
        mode = check_mode(None, self._hybrid)
        v = self._vector(PROBE_QUERY)
        saved = faiss.omp_get_max_threads()
        try:
            start = time.perf_counter()
            self.search_encoded(v, PROBE_QUERY, mode=mode)
            once = time.perf_counter() - start
            rounds = max(3, min(9, int(_PROBE_SECONDS / (len(thread_candidates(saved)) * max(once, 1e-6)))))
            # each search right after an encoding, as in serving
            choice = fastest_threads(lambda: self.search_encoded(v, PROBE_QUERY, mode=mode),
                                     faiss.omp_set_num_threads, thread_candidates(saved), rounds=rounds, warmup=1,
                                     before=lambda: self._vector(PROBE_QUERY))
        finally:
            faiss.omp_set_num_threads(saved)
        self.thread_choice = choice
        logger.info("QuerySearcher: FAISS on %s for one query", choice.describe())
        return choice.threads

    def _vector(self, text: str) -> np.ndarray:
        return np.asarray(self.encoder(text), dtype=np.float32)

    def search(self, text: str, k: int = 10, *, mode: str | None = None,
               **options: Any) -> list[Hit] | list[DocumentHit]:
        """The ``k`` best items (or documents) for one query text, best first.

        Args:
            text: the query.
            k: results.
            mode: ``"vector"``, ``"hybrid"`` or ``"bm25"`` (nothing encoded); None: hybrid on a hybrid index, else
                vector.
            **options: the index's per-search options: ``ef_search``, ``nprobe``, ``k_factor``, ``fusion``,
                ``rrf_k``, ``alpha``, ``candidates`` for a SemanticIndex; ``passage_weight``, ``candidates``,
                ``fusion``, ``rrf_k``, ``alpha`` for a DocumentIndex.

        Returns:
            ``Hit`` (SemanticIndex) or ``DocumentHit`` (DocumentIndex) objects, as the index's own search gives them.

        Raises:
            TypeError: ``text`` is not a str.
            ValueError: as the encoder and the index's search raise them.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str (one query), got {type(text).__name__}")
        mode = check_mode(mode, self._hybrid)
        v = None if mode == "bm25" else self._vector(text)
        return self.search_encoded(v, text, k, mode=mode, **options)

    def search_encoded(self, vector: np.ndarray | None, text: str, k: int = 10, *, mode: str | None = None,
                       **options: Any) -> list[Hit] | list[DocumentHit]:
        """:meth:`search` with the query already encoded: ``vector`` is ``encoder(text)`` (None for mode "bm25").

        For a caller that times encoding and search apart, or encodes once and searches several ways.
        """
        mode = check_mode(mode, self._hybrid)
        if mode == "bm25":
            vector = None  # BM25 ranks by the text alone
        with running_on(self.faiss_threads, faiss.omp_get_max_threads, faiss.omp_set_num_threads):
            if isinstance(self.index, DocumentIndex):
                return self.index.search_embedded(vector, text, k, mode=mode, **options)
            return self.index.search(vector, k, texts=None if mode == "vector" else text, mode=mode, **options)
