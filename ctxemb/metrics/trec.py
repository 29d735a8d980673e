"""Ranking metrics over runs and graded qrels, computed as trec_eval computes them.

A run is ``{query id: {doc id: score}}``; qrels are ``{query id: {doc id: grade}}`` (grades > 0 are relevant,
0 or negative are judged not relevant). Each query's documents are ranked as trec_eval ranks them: score
descending, equal scores by document id descending (string order). Then, with ``rel_r`` the grade at rank r:

- ``ndcg@k``: ``sum_{r<=k} gain_r / log2(r + 1)`` over the same sum for the qrels' grades sorted descending, gains
  being the positive grades (trec_eval's ``ndcg_cut.k``; graded, not binary);
- ``recall@k``: relevant documents in the top k over all relevant documents of the query (``recall_k``);
- ``mrr@k``: 1 / rank of the first relevant document within the top k, 0 if none (``recip_rank`` of the run cut at
  k, as BEIR reports MRR@k);
- ``p@k``: relevant documents in the top k over k (``P_k``).

Which queries count: every query of the qrels with at least one relevant document. A query that the run does not
answer scores 0 (``missing="zero"``, trec_eval's ``-c``); ``missing="skip"`` drops it instead, as pytrec_eval and
BEIR's evaluation do. Queries of the run without judgements are ignored. ``tests/test_trec_metrics.py`` checks
every measure against ``pytrec_eval`` to 1e-6, ties included.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

DEFAULT_MEASURES = ("ndcg@10", "recall@100", "mrr@10")
_MEASURE = re.compile(r"^(ndcg|recall|mrr|p)@([1-9][0-9]*)$")


@dataclass
class RunScores:
    """Scores of one run.

    Attributes:
        mean: measure -> mean over the counted queries.
        per_query: query id -> {measure: value}, for the counted queries.
        n_queries: how many queries were counted.
        n_missing: judged queries that the run does not answer (scored 0, or skipped with ``missing="skip"``).
    """

    mean: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    n_missing: int


def parse_measures(measures: Sequence[str]) -> list[tuple[str, str, int]]:
    """(name as given, kind, k) for each measure such as ``"ndcg@10"``; a ValueError names a bad one."""
    if isinstance(measures, str):
        raise TypeError("measures must be a list of names such as ['ndcg@10', 'recall@100'], got a str")
    out = []
    for m in measures:
        match = _MEASURE.match(str(m).lower())
        if not match:
            raise ValueError("unknown measure %r: expected ndcg@K, recall@K, mrr@K or p@K with K >= 1" % (m,))
        out.append((str(m), match.group(1), int(match.group(2))))
    if not out:
        raise ValueError("measures is empty: name at least one, e.g. ndcg@10")
    return out


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval's order: score descending, equal scores by document id descending."""
    return [d for d, _ in sorted(sorted(scores.items(), key=lambda x: x[0], reverse=True),
                                 key=lambda x: x[1], reverse=True)]


def _dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(r + 2) for r, g in enumerate(gains) if g > 0)


def query_scores(ranking: Sequence[str], judged: Mapping[str, int], measures: list[tuple[str, str, int]]
                 ) -> dict[str, float]:
    """Every measure for one query: ``ranking`` best first, ``judged`` its qrels."""
    relevant = {d for d, g in judged.items() if g > 0}
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)
    out = {}
    for name, kind, k in measures:
        top = ranking[:k]
        if kind == "ndcg":
            idcg = _dcg(ideal[:k])
            out[name] = _dcg([max(judged.get(d, 0), 0) for d in top]) / idcg if idcg > 0 else 0.0
        elif kind == "recall":
            out[name] = sum(d in relevant for d in top) / len(relevant) if relevant else 0.0
        elif kind == "p":
            out[name] = sum(d in relevant for d in top) / k
        else:  # mrr
            out[name] = next((1.0 / r for r, d in enumerate(top, start=1) if d in relevant), 0.0)
    return out


def evaluate_run(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                 measures: Sequence[str] = DEFAULT_MEASURES, *,
                 missing: Literal["zero", "skip"] = "zero") -> RunScores:
    """Score ``run`` against ``qrels`` (see the module docstring for the definitions).

    Args:
        run: query id -> {doc id: score}.
        qrels: query id -> {doc id: grade}.
        measures: names such as ``"ndcg@10"``, ``"recall@100"``, ``"mrr@10"``, ``"p@5"``.
        missing: ``"zero"`` scores a judged query that the run does not answer as 0; ``"skip"`` leaves it out.

    Raises:
        ValueError: an unknown measure or ``missing`` value, no judged query with a relevant document, or (with
            ``"skip"``) no judged query answered by the run.
    """
    parsed = parse_measures(measures)
    if missing not in ("zero", "skip"):
        raise ValueError("missing must be 'zero' or 'skip', got %r" % (missing,))
    judged_queries = [q for q, docs in qrels.items() if any(g > 0 for g in docs.values())]
    if not judged_queries:
        raise ValueError("qrels: no query has a relevant document (a grade > 0)")
    per_query: dict[str, dict[str, float]] = {}
    n_missing = 0
    for qid in judged_queries:
        scores = run.get(qid)
        if not scores:
            n_missing += 1
            if missing == "skip":
                continue
            per_query[qid] = {name: 0.0 for name, _, _ in parsed}
            continue
        for d, s in scores.items():
            if not isinstance(s, (int, float)) or not math.isfinite(s):
                raise ValueError("run: query %r gives document %r the score %r; scores must be finite numbers"
                                 % (qid, d, s))
        per_query[qid] = query_scores(trec_order(scores), qrels[qid], parsed)
    if not per_query:
        raise ValueError("the run answers none of the %d judged queries" % len(judged_queries))
    mean = {name: sum(v[name] for v in per_query.values()) / len(per_query) for name, _, _ in parsed}
    return RunScores(mean, per_query, len(per_query), n_missing)
