"""ctxemb.metrics.trec against pytrec_eval (trec_eval's own code), graded qrels and tied scores included."""

from __future__ import annotations

import random

import pytest

from ctxemb.metrics.trec import evaluate_run, parse_measures, trec_order

pytrec_eval = pytest.importorskip("pytrec_eval")


def _random_case(seed: int, n_queries: int = 40, n_docs: int = 60):
    rng = random.Random(seed)
    docs = ["d%d" % i for i in range(n_docs)]
    qrels, run = {}, {}
    for q in range(n_queries):
        qid = "q%d" % q
        judged = rng.sample(docs, rng.randint(1, 12))
        qrels[qid] = {d: rng.choice([-1, 0, 1, 1, 2, 3]) for d in judged}
        if not any(g > 0 for g in qrels[qid].values()):
            qrels[qid][judged[0]] = 1
        retrieved = rng.sample(docs, rng.randint(1, n_docs))
        # few distinct scores, so that many ties must be broken as trec_eval breaks them
        run[qid] = {d: float(rng.randint(0, 5)) / 2 for d in retrieved}
    return qrels, run


@pytest.mark.parametrize("seed", range(5))
def test_every_measure_equals_pytrec_eval_with_graded_qrels_and_ties(seed):
    qrels, run = _random_case(seed)
    ours = evaluate_run(run, qrels, ["ndcg@10", "ndcg@3", "recall@5", "recall@100", "p@5", "mrr@10"])
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3,10", "recall.5,100", "P.5"}).evaluate(run)
    # MRR@k is recip_rank of the run cut at its k best, ranked as trec_eval ranks
    cut = {q: {d: s for d, s in scores.items() if d in set(trec_order(scores)[:10])} for q, scores in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
    for qid, values in ours.per_query.items():
        assert values["ndcg@10"] == pytest.approx(ref[qid]["ndcg_cut_10"], abs=1e-6)
        assert values["ndcg@3"] == pytest.approx(ref[qid]["ndcg_cut_3"], abs=1e-6)
        assert values["recall@5"] == pytest.approx(ref[qid]["recall_5"], abs=1e-6)
        assert values["recall@100"] == pytest.approx(ref[qid]["recall_100"], abs=1e-6)
        assert values["p@5"] == pytest.approx(ref[qid]["P_5"], abs=1e-6)
        assert values["mrr@10"] == pytest.approx(rr[qid]["recip_rank"], abs=1e-6)


def test_ties_are_broken_by_document_id_descending():
    assert trec_order({"a": 1.0, "c": 1.0, "b": 2.0, "d": 1.0}) == ["b", "d", "c", "a"]
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "z": 1.0}}  # z ranks first
    ours = evaluate_run(run, qrels, ["mrr@10"]).mean["mrr@10"]
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)["q"]["recip_rank"]
    assert ours == ref == 0.5


def test_missing_queries_score_zero_or_are_skipped():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}  # q3 has no relevant document: not counted
    run = {"q1": {"a": 1.0}, "other": {"a": 1.0}}
    zero = evaluate_run(run, qrels, ["ndcg@10"])
    assert (zero.n_queries, zero.n_missing, zero.mean["ndcg@10"]) == (2, 1, 0.5)
    skip = evaluate_run(run, qrels, ["ndcg@10"], missing="skip")
    assert (skip.n_queries, skip.mean["ndcg@10"]) == (1, 1.0)


@pytest.mark.parametrize("bad", [["ndcg"], ["ndcg@0"], ["map"], []])
def test_bad_measures_are_named(bad):
    with pytest.raises(ValueError, match="measure"):
        parse_measures(bad)


def test_no_relevant_query_and_non_finite_scores_are_errors():
    with pytest.raises(ValueError, match="no query has a relevant"):
        evaluate_run({"q": {"a": 1.0}}, {"q": {"a": 0}})
    with pytest.raises(ValueError, match="finite"):
        evaluate_run({"q": {"a": float("nan")}}, {"q": {"a": 1}})
