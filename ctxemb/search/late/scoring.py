"""MaxSim, the late-interaction score, computed exactly; and a re-ranker over any candidate list, with no index.

``MaxSim(q, d) = sum_i max_j <q_i, d_j>`` over the query's token vectors q_i and the document's d_j (unit vectors,
so each term is a cosine): every query token finds its best-matching document token.

Shape legend: Tq query tokens, M document tokens in all, N documents, D dimensions.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def maxsim_concatenated(query: np.ndarray, tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(N,) MaxSim of one (Tq, D) query against N documents whose (M, D) tokens are concatenated, document n owning
    rows ``offsets[n]:offsets[n + 1]`` ((N + 1,) offsets; every document has at least one token)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(offsets) < 2:
        return np.zeros(0, dtype=np.float32)
    if np.any(np.diff(offsets) <= 0):
        raise ValueError("every document needs at least one token vector")
    sims = np.asarray(query, dtype=np.float32) @ np.asarray(tokens, dtype=np.float32).T  # (Tq, M)
    return np.maximum.reduceat(sims, offsets[:-1], axis=1).sum(axis=0)  # (N,)


def maxsim(query: np.ndarray, documents: Sequence[np.ndarray]) -> np.ndarray:
    """(N,) MaxSim of one (Tq, D) query against N documents given as (T_n, D) arrays (exhaustive, exact)."""
    if not len(documents):
        return np.zeros(0, dtype=np.float32)
    lengths = [len(d) for d in documents]
    empty = [n for n, t in enumerate(lengths) if t == 0]
    if empty:
        raise ValueError("documents[%d] has no token vector" % empty[0])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return maxsim_concatenated(query, np.concatenate(documents), offsets)


class MaxSimReranker:
    """Re-rank any retriever's candidates by exact MaxSim, encoding the candidates' texts on the fly.

    Args:
        encoder: a :class:`~ctxemb.search.late.encoding.LateInteractionEncoder`.
        cache_size: document vectors kept between calls (most recently used; 0 keeps none).
    """

    def __init__(self, encoder, *, cache_size: int = 10_000):
        self.encoder = encoder
        self.cache_size = cache_size
        self._cache: dict[str, np.ndarray] = {}

    def _documents(self, texts: Mapping[str, str]) -> dict[str, np.ndarray]:
        todo = [d for d in texts if d not in self._cache]
        vectors = dict(zip(todo, self.encoder.encode_documents([texts[d] for d in todo], show_progress_bar=False)))
        out = {d: self._cache[d] if d in self._cache else vectors[d] for d in texts}
        if self.cache_size:
            for d in todo:
                self._cache[d] = vectors[d]
            while len(self._cache) > self.cache_size:
                self._cache.pop(next(iter(self._cache)))
        return out

    def rerank(self, query: str, candidates: Mapping[str, str], k: int | None = None) -> dict[str, float]:
        """{doc id: MaxSim} of the ``k`` best of ``candidates`` ({doc id: text}; None: all), best first."""
        if not candidates:
            return {}
        docs = self._documents(candidates)
        ids = list(docs)
        scores = maxsim(self.encoder.encode_queries(query), [docs[d] for d in ids])
        order = np.argsort(-scores, kind="stable")[:k]
        return {ids[i]: float(scores[i]) for i in order}
