"""Ranking metrics for retrieval with binary relevance: Recall@k, MRR@k and nDCG@k.

Each query has a ranked list of retrieved ids (best first) and a non-empty collection of relevant ids. Per query:

- ``recall@k = |relevant ∩ top k| / |relevant|`` (with one relevant id per query, the hit rate at k);
- ``MRR@k = 1 / rank`` of the first relevant id within the top k (ranks from 1), 0 if none;
- ``nDCG@k = DCG@k / IDCG@k`` with ``DCG@k = sum over ranks r <= k of rel_r / log2(r + 1)`` and IDCG@k the DCG of
  a ranking with every relevant id first (``min(k, |relevant|)`` of them), as ``sklearn.metrics.ndcg_score``
  computes it for 0/1 gains.

The functions return the mean over queries (``per_query=True``: the (Q,) values). A ranking shorter than k counts
what it has. A ranking that repeats an id, or a query with no relevant id, is an error.
"""

from __future__ import annotations

from typing import Collection, Hashable, Sequence

import numpy as np

from ctxemb.core.validation import check_int


def _check(ranked: Sequence[Sequence[Hashable]], relevant: Sequence[Collection[Hashable]], k: int
           ) -> tuple[list[list], list[set]]:
    k = check_int(k, "k", low=1)
    if isinstance(ranked, (str, bytes)) or isinstance(relevant, (str, bytes)):
        raise TypeError("ranked and relevant must be sequences with one entry per query; got a str")
    ranked, relevant = list(ranked), list(relevant)
    if len(ranked) != len(relevant):
        raise ValueError("ranked has %d queries but relevant has %d" % (len(ranked), len(relevant)))
    if not ranked:
        raise ValueError("no queries: ranked and relevant are empty")
    rankings, sets = [], []
    for q, (r, rel) in enumerate(zip(ranked, relevant)):
        if isinstance(r, (str, bytes)) or isinstance(rel, (str, bytes)):
            raise TypeError("query %d: the ranking and the relevant ids must be sequences of ids, not one str "
                            "(wrap a single id in a list)" % q)
        r = list(r)
        if len(set(r)) != len(r):
            raise ValueError("query %d: the ranking repeats an id" % q)
        rel = set(rel)
        if not rel:
            raise ValueError("query %d has no relevant id; every query needs at least one" % q)
        rankings.append(r[:k])
        sets.append(rel)
    return rankings, sets


def recall_at_k(ranked: Sequence[Sequence[Hashable]], relevant: Sequence[Collection[Hashable]], k: int, *,
                per_query: bool = False) -> float | np.ndarray:
    """Recall@k: the share of each query's relevant ids found in its top k, averaged over queries.

    Args:
        ranked: Q rankings of ids, best first.
        relevant: Q non-empty collections of relevant ids.
        k: the cut-off (>= 1).
        per_query: return the (Q,) values instead of their mean.

    Raises:
        TypeError / ValueError: mismatched lengths, no queries, a repeated id in a ranking, a query without
            relevant ids, or a bad ``k``.
    """
    rankings, sets = _check(ranked, relevant, k)
    values = np.array([sum(i in rel for i in r) / len(rel) for r, rel in zip(rankings, sets)], dtype=np.float64)
    return values if per_query else float(values.mean())


def mrr_at_k(ranked: Sequence[Sequence[Hashable]], relevant: Sequence[Collection[Hashable]], k: int, *,
             per_query: bool = False) -> float | np.ndarray:
    """MRR@k: the reciprocal rank of the first relevant id within the top k (0 if none), averaged over queries.

    Args / Raises: as for :func:`recall_at_k`.
    """
    rankings, sets = _check(ranked, relevant, k)
    values = np.zeros(len(rankings), dtype=np.float64)
    for q, (r, rel) in enumerate(zip(rankings, sets)):
        first = next((rank for rank, i in enumerate(r, start=1) if i in rel), None)
        values[q] = 0.0 if first is None else 1.0 / first
    return values if per_query else float(values.mean())


def ndcg_at_k(ranked: Sequence[Sequence[Hashable]], relevant: Sequence[Collection[Hashable]], k: int, *,
              per_query: bool = False) -> float | np.ndarray:
    """nDCG@k with binary gains (see the module docstring), averaged over queries.

    Args / Raises: as for :func:`recall_at_k`.
    """
    rankings, sets = _check(ranked, relevant, k)
    discounts = 1.0 / np.log2(np.arange(2, k + 2))  # rank r -> 1 / log2(r + 1)
    values = np.zeros(len(rankings), dtype=np.float64)
    for q, (r, rel) in enumerate(zip(rankings, sets)):
        gains = np.array([i in rel for i in r], dtype=np.float64)
        dcg = float(gains @ discounts[: len(gains)])
        idcg = float(discounts[: min(k, len(rel))].sum())
        values[q] = dcg / idcg
    return values if per_query else float(values.mean())


def retrieval_scores(ranked: Sequence[Sequence[Hashable]], relevant: Sequence[Collection[Hashable]],
                     ks: Sequence[int] = (1, 10)) -> dict[str, float]:
    """``recall@k``, ``mrr@k`` and ``ndcg@k`` for every k in ``ks``, as one dict (means over queries)."""
    out = {}
    for k in ks:
        out["recall@%d" % k] = recall_at_k(ranked, relevant, k)
        out["mrr@%d" % k] = mrr_at_k(ranked, relevant, k)
        out["ndcg@%d" % k] = ndcg_at_k(ranked, relevant, k)
    return out
