"""BEIR-style retrieval evaluation: run any retriever over a data set's queries, write the TREC run, score it.

    data = load_beir("scifact", "test")
    report = evaluate_retrieval(BM25Retriever(data.texts()), data, run_file="bm25.trec")
    report.scores.mean   # {"ndcg@10": ..., "recall@100": ..., "mrr@10": ...}

Scores are trec_eval's (:mod:`ctxemb.metrics.trec`): graded nDCG, ties broken by document id; a judged query that
the retriever leaves unanswered counts 0.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ctxemb.core.validation import check_int
from ctxemb.io.beir import BeirData, write_run
from ctxemb.metrics.trec import DEFAULT_MEASURES, RunScores, evaluate_run
from ctxemb.search.retrievers import Retriever


@dataclass
class RetrievalReport:
    """One retriever on one query set.

    Attributes:
        retriever: its name.
        scores: the means, the per-query values and the query counts.
        seconds: time to answer every query (encoding the queries included; the index build not).
        run: {query id: {doc id: score}}.
        run_file: where the TREC run was written, if it was.
    """

    retriever: str
    scores: RunScores
    seconds: float
    run: dict
    run_file: Path | None = None

    @property
    def ms_per_query(self) -> float:
        return 1000 * self.seconds / max(1, len(self.run))

    def to_dict(self, per_query: bool = False) -> dict:
        out = {"retriever": self.retriever, **self.scores.mean, "queries": self.scores.n_queries,
               "unanswered": self.scores.n_missing, "ms_per_query": self.ms_per_query,
               "run_file": None if self.run_file is None else str(self.run_file)}
        if per_query:
            out["per_query"] = self.scores.per_query
        return out


def evaluate_retrieval(retriever: Retriever, data: BeirData, *, k: int = 100,
                       measures: Sequence[str] = DEFAULT_MEASURES, run_file: str | os.PathLike | None = None,
                       tag: str | None = None) -> RetrievalReport:
    """Answer ``data.queries`` with ``retriever`` (``k`` documents each), write the run if asked, and score it.

    Raises:
        ValueError: ``k`` < 1, an unknown measure, a run with a non-finite score.
    """
    k = check_int(k, "k", low=1)
    start = time.perf_counter()
    run = retriever.retrieve(data.queries, k)
    seconds = time.perf_counter() - start
    unknown = {d for scores in run.values() for d in scores if d not in data.corpus}
    if unknown:
        raise ValueError("the retriever %s returned %d document ids that are not in the corpus (first: %r)"
                         % (retriever.name, len(unknown), sorted(unknown)[0]))
    scores = evaluate_run(run, data.qrels, measures)
    path = None
    if run_file is not None:
        safe = "".join(c if c.isalnum() or c in "-_.+" else "-" for c in (tag or retriever.name))
        path = write_run(run_file, run, tag=safe)
    return RetrievalReport(retriever.name, scores, seconds, run, path)


def reports_markdown(reports: Sequence[RetrievalReport], measures: Sequence[str] = DEFAULT_MEASURES) -> str:
    """A Markdown table of several reports, values x 100."""
    lines = ["| retriever | " + " | ".join(measures) + " | ms/query |", "|---|" + "---:|" * (len(measures) + 1)]
    for r in reports:
        lines.append("| %s | %s | %.1f |" % (r.retriever, " | ".join("%.2f" % (100 * r.scores.mean[m])
                                                                     for m in measures), r.ms_per_query))
    return "\n".join(lines)
