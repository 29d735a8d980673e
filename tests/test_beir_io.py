"""BEIR folders and TREC run files: strict reading, atomic writing, trec_eval's ranking order."""

from __future__ import annotations

import json

import pytest

from ctxemb.core.validation import CorruptFileError
from ctxemb.io import load_beir, read_qrels, read_run, split_queries, write_run


def _folder(tmp_path, corpus=None, queries=None, qrels=None):
    corpus = corpus if corpus is not None else [{"_id": "10", "title": "Rivers", "text": "A river has banks."},
                                                {"_id": "20", "title": "", "text": "Money in a bank."}]
    queries = queries if queries is not None else [{"_id": "q1", "text": "river bank"}, {"_id": "q2", "text": "cash"},
                                                   {"_id": "q3", "text": "unjudged"}]
    qrels = qrels if qrels is not None else "query-id\tcorpus-id\tscore\nq1\t10\t2\nq2\t20\t1\n"
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (tmp_path / "qrels" / "test.tsv").write_text(qrels)
    return tmp_path


def test_a_folder_reads_with_string_ids_and_judged_queries_only(tmp_path):
    data = load_beir(_folder(tmp_path))
    assert list(data.corpus) == ["10", "20"]
    assert data.corpus["10"].full_text == "Rivers A river has banks."
    assert data.corpus["20"].full_text == "Money in a bank."
    assert data.queries == {"q1": "river bank", "q2": "cash"}
    assert data.qrels == {"q1": {"10": 2}, "q2": {"20": 1}}
    assert list(data.subset(["q2"]).queries) == ["q2"]
    with pytest.raises(ValueError, match="not queries of this set"):
        data.subset(["q3"])


@pytest.mark.parametrize("corpus_line, message", [
    ("not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object"),
    ('{"title": "x", "text": "y"}', 'line 2: expected a non-empty string "_id"'),
    ('{"_id": 7, "text": "y"}', 'line 2: expected a non-empty string "_id"'),
    ('{"_id": "10", "text": "again"}', "line 2: the id '10' was already given"),
    ('{"_id": "a b", "text": "y"}', "white space"),
    ('{"_id": "30", "text": 5}', 'line 2: expected "text" to be a string'),
])
def test_malformed_corpus_lines_name_the_file_and_line(tmp_path, corpus_line, message):
    folder = _folder(tmp_path)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "10", "text": "t"}) + "\n" + corpus_line + "\n")
    with pytest.raises(CorruptFileError, match=message) as info:
        load_beir(folder)
    assert "corpus.jsonl" in str(info.value)


def test_missing_files_unknown_ids_and_empty_corpus_are_clear_errors(tmp_path):
    folder = _folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="dev.tsv: no such file; the folder .* holds corpus.jsonl"):
        load_beir(folder, "dev")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t99\t1\n")
    with pytest.raises(CorruptFileError, match="judges the document '99', which is not in"):
        load_beir(folder)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nqx\t10\t1\n")
    with pytest.raises(CorruptFileError, match="the query 'qx' is not in"):
        load_beir(folder)
    (folder / "corpus.jsonl").write_text("\n")
    with pytest.raises(CorruptFileError, match="holds no document"):
        load_beir(folder)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_beir(tmp_path / "nowhere")


@pytest.mark.parametrize("text, message", [
    ("q1\t10\n", "expected 3 columns"),
    ("q1\t10\tyes\n", "not an integer"),
    ("q1\t10\t1\nq1\t10\t2\n", "already judged"),
    ("query-id\tcorpus-id\tscore\n", "holds no judgement"),
    ("q1\t10\x00\t1\n", "NUL"),
])
def test_malformed_qrels(tmp_path, text, message):
    (tmp_path / "q.tsv").write_text(text)
    with pytest.raises(CorruptFileError, match=message):
        read_qrels(tmp_path / "q.tsv")


def test_trec_qrels_format_and_graded_values(tmp_path):
    (tmp_path / "q.txt").write_text("q1 0 d1 2\nq1 0 d2 0\nq2 0 d1 -1\n")
    assert read_qrels(tmp_path / "q.txt") == {"q1": {"d1": 2, "d2": 0}, "q2": {"d1": -1}}


def test_run_files_round_trip_in_trec_eval_order(tmp_path):
    run = {"q1": {"a": 1.0, "c": 1.0, "b": 2.5}, "q2": {"x": -0.5}}
    path = write_run(tmp_path / "run.trec", run, tag="mine")
    lines = path.read_text().splitlines()
    assert lines[:3] == ["q1 Q0 b 1 2.5 mine", "q1 Q0 c 2 1 mine", "q1 Q0 a 3 1 mine"]
    assert read_run(path) == run
    write_run(path, run, depth=1)
    assert read_run(path) == {"q1": {"b": 2.5}, "q2": {"x": -0.5}}


@pytest.mark.parametrize("run, message", [
    ({"q 1": {"a": 1.0}}, "query id"), ({"q": {"a b": 1.0}}, "document id"), ({"q": {"a": float("inf")}}, "finite"),
])
def test_bad_runs_are_refused_and_the_old_file_is_kept(tmp_path, run, message):
    path = write_run(tmp_path / "run.trec", {"q": {"a": 1.0}})
    with pytest.raises(ValueError, match=message):
        write_run(path, run)
    assert read_run(path) == {"q": {"a": 1.0}}
    (tmp_path / "bad.trec").write_text("q Q0 a 1 x tag\n")
    with pytest.raises(CorruptFileError, match="line 1: the score 'x'"):
        read_run(tmp_path / "bad.trec")


def test_split_queries_is_reproducible_and_disjoint():
    ids = [str(i) for i in range(50)]
    train, dev = split_queries(ids, 10, seed=3)
    assert set(split_queries(list(reversed(ids)), 10, seed=3)[1]) == set(dev)  # the order given does not matter
    assert len(dev) == 10 and not set(train) & set(dev) and set(train) | set(dev) == set(ids)
    assert split_queries(ids, 10, seed=3) == (train, dev)
    assert split_queries(ids, 10, seed=4)[1] != dev
    with pytest.raises(ValueError, match="dev_size"):
        split_queries(ids, 50)
