"""Recall@k, MRR@k and nDCG@k against brute force and scikit-learn's ndcg_score."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from ctxemb.metrics.retrieval import mrr_at_k, ndcg_at_k, recall_at_k, retrieval_scores


def random_case(seed: int, n_queries: int = 40, n_docs: int = 25):
    """Q rankings (permutations of the docs, cut to random lengths) and 1-4 relevant docs per query, plus (Q, N)
    scores from which the rankings come (distinct, decreasing along each ranking)."""
    rng = np.random.default_rng(seed)
    ranked, relevant, scores = [], [], np.zeros((n_queries, n_docs))
    for _ in range(n_queries):
        s = rng.permutation(n_docs).astype(float) + 1  # distinct scores: no ties for sklearn to average over
        order = np.argsort(-s).tolist()
        ranked.append(["d%d" % d for d in order])
        relevant.append({"d%d" % d for d in rng.choice(n_docs, size=rng.integers(1, 5), replace=False)})
        scores[len(ranked) - 1] = s
    return ranked, relevant, scores


def brute(ranked, relevant, k):
    recall, mrr, ndcg = [], [], []
    for r, rel in zip(ranked, relevant):
        top = r[:k]
        recall.append(len([i for i in top if i in rel]) / len(rel))
        ranks = [pos + 1 for pos, i in enumerate(top) if i in rel]
        mrr.append(1 / ranks[0] if ranks else 0.0)
        dcg = sum(1 / math.log2(pos + 2) for pos, i in enumerate(top) if i in rel)
        idcg = sum(1 / math.log2(pos + 2) for pos in range(min(k, len(rel))))
        ndcg.append(dcg / idcg)
    return np.mean(recall), np.mean(mrr), np.mean(ndcg)


@pytest.mark.parametrize("seed,k", list(itertools.product(range(3), (1, 3, 10, 30))))
def test_metrics_equal_brute_force(seed, k):
    ranked, relevant, _ = random_case(seed)
    ranked = [r[: 5 + i % 20] for i, r in enumerate(ranked)]  # some rankings shorter than k
    want = brute(ranked, relevant, k)
    got = (recall_at_k(ranked, relevant, k), mrr_at_k(ranked, relevant, k), ndcg_at_k(ranked, relevant, k))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert retrieval_scores(ranked, relevant, ks=(k,)) == {
        "recall@%d" % k: got[0], "mrr@%d" % k: got[1], "ndcg@%d" % k: got[2]}


@pytest.mark.parametrize("k", (1, 5, 10, 25))
def test_ndcg_equals_sklearn(k):
    ranked, relevant, scores = random_case(7)
    y_true = np.array([[("d%d" % d) in rel for d in range(scores.shape[1])] for rel in relevant], dtype=float)
    want = ndcg_score(y_true, scores, k=k)
    assert ndcg_at_k(ranked, relevant, k) == pytest.approx(want, rel=1e-12)
    per_query = ndcg_at_k(ranked, relevant, k, per_query=True)
    for q in range(len(ranked)):
        assert per_query[q] == pytest.approx(ndcg_score(y_true[q:q + 1], scores[q:q + 1], k=k), rel=1e-12)


def test_single_relevant_values_by_hand():
    ranked = [["a", "b", "c"], ["b", "a", "c"], ["c", "b", "d"]]
    relevant = [["a"], ["a"], ["a"]]
    assert recall_at_k(ranked, relevant, 1) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, relevant, 2) == pytest.approx(2 / 3)
    assert mrr_at_k(ranked, relevant, 10) == pytest.approx((1 + 1 / 2 + 0) / 3)
    assert ndcg_at_k(ranked, relevant, 10) == pytest.approx((1 + 1 / math.log2(3)) / 3)
    np.testing.assert_allclose(mrr_at_k(ranked, relevant, 1, per_query=True), [1, 0, 0])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="ranked has 2 queries but relevant has 1"):
        recall_at_k([["a"], ["b"]], [["a"]], 1)
    with pytest.raises(ValueError, match="query 1 has no relevant id"):
        mrr_at_k([["a"], ["b"]], [["a"], []], 1)
    with pytest.raises(ValueError, match="query 0: the ranking repeats an id"):
        ndcg_at_k([["a", "a"]], [["a"]], 2)
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k([["a"]], [["a"]], 0)
    with pytest.raises(TypeError, match="query 0: .* not one str"):
        recall_at_k([["a"]], ["a"], 1)
    with pytest.raises(ValueError, match="no queries"):
        recall_at_k([], [], 1)
