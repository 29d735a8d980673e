"""The BEIR runner and `ctxemb retrieval eval` on a small folder: every retriever runs, runs are written and scored."""

from __future__ import annotations

import json

import pytest

from ctxemb.cli import main
from ctxemb.evaluation.retrieval import evaluate_retrieval
from ctxemb.io import load_beir, read_run
from ctxemb.metrics.trec import evaluate_run
from ctxemb.search.retrievers import BM25Retriever

CORPUS = {"d1": ("River banks", "the river bank flooded"), "d2": ("", "money in the bank"),
          "d3": ("Plants", "she sat on a plant"), "d4": ("", "bats and mice of the river")}
QUERIES = {"q1": "river bank", "q2": "money", "q3": "plant", "q4": "the of a"}
QRELS = [("q1", "d1", 2), ("q1", "d4", 1), ("q2", "d2", 1), ("q3", "d3", 1), ("q4", "d3", 1)]


@pytest.fixture()
def folder(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n"
                                                   for i, (t, x) in CORPUS.items()))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in QUERIES.items()))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("%s\t%s\t%d\n" % r for r in QRELS))
    return tmp_path


def test_the_runner_scores_the_run_it_writes(folder, tmp_path):
    data = load_beir(folder)
    report = evaluate_retrieval(BM25Retriever(data.texts()), data, k=3, run_file=tmp_path / "out" / "bm25.trec")
    assert report.scores.n_queries == 4
    assert report.run["q4"] == {}  # only stop words: answered with nothing, scored 0
    assert report.scores.per_query["q4"]["ndcg@10"] == 0.0
    again = evaluate_run(read_run(report.run_file), data.qrels)
    assert again.mean == pytest.approx(report.scores.mean)
    assert report.scores.per_query["q2"]["mrr@10"] == 1.0


def test_the_cli_runs_every_retriever_on_a_tiny_model(folder, tmp_path, capsys):
    from tests.helpers import write_tiny_model

    model = write_tiny_model(tmp_path / "tiny", num_hidden_layers=4)
    (tmp_path / "ids.txt").write_text("q1\nq2\nq3\n")
    code = main(["retrieval", "eval", str(folder), "--queries", str(tmp_path / "ids.txt"), "--model", str(model),
                 "--run-dir", str(tmp_path / "runs"), "--json", str(tmp_path / "s.json"), "--no-progress",
                 "--retriever", "bm25", "--retriever", "late-exhaustive", "--retriever", "late",
                 "--retriever", "rerank", "--retriever", "late-hybrid", "--retriever", "dense",
                 "--retriever", "hybrid", "--retriever", "document"])
    assert code == 0
    out = capsys.readouterr().out
    assert "| late-exhaustive |" in out and "ndcg@10" in out
    scores = json.loads((tmp_path / "s.json").read_text())
    assert [s["retriever"] for s in scores][:2] == ["bm25", "late-exhaustive"] and scores[0]["queries"] == 3
    assert set(read_run(tmp_path / "runs" / "late.trec")) == {"q1", "q2", "q3"}


def test_cli_errors_are_one_line(folder, tmp_path, capsys):
    assert main(["retrieval", "eval", str(folder), "--split", "dev"]) == 1
    assert "dev.tsv: no such file" in capsys.readouterr().err
    (tmp_path / "ids.txt").write_text("q9\n")
    assert main(["retrieval", "eval", str(folder), "--queries", str(tmp_path / "ids.txt")]) == 1
    assert "not queries of this set" in capsys.readouterr().err
