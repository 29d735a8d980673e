"""Word sense predictions for files (`ctxemb.wsd.tag_files.tag_file`): tables of texts and Raganato data sets."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from ctxemb.evaluation.wsd import evaluate_wsd
from ctxemb.metrics.wsd import read_key_file, score, score_files
from ctxemb.wsd import build_sense_store, read_dataset
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.tag_files import (PREDICTION_FIELDS, is_sense_store, load_disambiguator, store_embedder_config,
                                  tag_file, tag_output_format)
from tests.fixtures.wsd.fake_embedder import FakeEmbedder

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"
EVAL = FIXTURES / "tiny_eval"
TEXTS = ["He sat on the bank of the river.", "The bank lent more money.", "of the", "She deposited money at the bank.",
         "The muddy river bank.", "A big glade."]


@pytest.fixture(scope="module", autouse=True)
def _needs_wordnet(wordnet):
    """Every test here needs WordNet (skipped cleanly without it)."""


@pytest.fixture(scope="module")
def dis():
    emb = FakeEmbedder(dim=64)
    store = build_sense_store(read_dataset(FIXTURES / "tiny_train"), emb, show_progress_bar=False)
    return Disambiguator(store, emb)


def _as_record(p) -> dict:
    d = dataclasses.asdict(p)
    d.pop("instance_id")
    return d


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _csv_records(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _csv_cell(v) -> str:
    return "" if v is None else str(v)


def test_tag_texts_equals_tag_one_by_one(dis):
    batched = dis.tag_texts(TEXTS)
    assert batched == [dis.tag(t) for t in TEXTS]
    assert batched[2] == [] and [p.word for p in batched[0]] == ["sat", "bank", "river"]
    with pytest.raises(TypeError, match="single str"):
        dis.tag_texts("He sat.")


@pytest.mark.parametrize("batch_size", [1, 4, 32])
def test_jsonl_rows_keep_their_columns_and_get_the_tag_predictions(dis, tmp_path, batch_size):
    src = _jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t, "extra": [i]} for i, t in enumerate(TEXTS)])
    result = tag_file(dis, src, tmp_path / "out.jsonl", batch_size=batch_size, progress_bar=False)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))  # input order
    assert [r["extra"] for r in rows] == [[i] for i in range(len(TEXTS))]
    for row, text in zip(rows, TEXTS):
        assert row["predictions"] == [_as_record(p) for p in dis.tag(text)]
    assert (result.rows, result.written, result.skipped) == (len(TEXTS), len(TEXTS), [])
    assert result.tagged == sum(len(dis.tag(t)) for t in TEXTS)


def test_csv_output_is_one_record_per_tagged_word_with_its_row(dis, tmp_path):
    src = tmp_path / "in.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["doc", "sentence"])
        for i, t in enumerate(TEXTS):
            w.writerow([f"doc{i}", t])
    tag_file(dis, src, tmp_path / "out.csv", columns={"text": "sentence", "id": "doc"}, batch_size=2,
             progress_bar=False)
    records = _csv_records(tmp_path / "out.csv")
    assert list(records[0]) == ["row", "id", *PREDICTION_FIELDS]
    expected = []
    for i, t in enumerate(TEXTS):
        preds = dis.tag(t)
        if not preds:  # a row without a word to tag keeps one record, its prediction fields blank
            expected.append({"row": str(i), "id": f"doc{i}", **{k: "" for k in PREDICTION_FIELDS}})
        for p in preds:
            expected.append({"row": str(i), "id": f"doc{i}", **{k: _csv_cell(v) for k, v in _as_record(p).items()}})
    assert records == expected
    # the floats survive the CSV round trip exactly
    p = dis.tag(TEXTS[0])[1]
    assert float(records[1]["score"]) == p.score and float(records[1]["runner_up_score"]) == p.runner_up_score


@pytest.mark.parametrize("fmt", ["txt", "tsv"])
def test_plain_text_and_tsv_inputs(dis, tmp_path, fmt):
    if fmt == "txt":
        src = tmp_path / "in.txt"
        src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    else:
        src = tmp_path / "in.tsv"
        src.write_text("text\tn\n" + "".join(f"{t}\t{i}\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    tag_file(dis, src, tmp_path / "out.jsonl", progress_bar=False)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == TEXTS
    assert [r["predictions"] for r in rows] == [[_as_record(p) for p in dis.tag(t)] for t in TEXTS]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_raganato_records_equal_the_corpus_predictions_in_document_order(dis, tmp_path, fmt):
    corpus = read_dataset(EVAL)
    expected = dis.predict_corpus(corpus, show_progress_bar=False)
    sentence_of = {i.id: s.id for s in corpus.sentences() for i in s.instances}
    out = tmp_path / f"out.{fmt}"
    result = tag_file(dis, EVAL / "tiny_eval.data.xml", out, batch_size=2, progress_bar=False)
    if fmt == "jsonl":
        records = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        records = _csv_records(out)
    assert [r["instance_id"] for r in records] == [i.id for i in corpus.instances()]
    for r in records:
        p = expected[r["instance_id"]]
        want = {"instance_id": p.instance_id, "sentence_id": sentence_of[p.instance_id], **_as_record(p)}
        assert r == (want if fmt == "jsonl" else {k: _csv_cell(v) for k, v in want.items()})
    assert result.rows == result.written == corpus.n_instances


def test_raganato_key_output_scores_as_the_in_memory_predictions(dis, tmp_path):
    out = tmp_path / "pred.key"
    result = tag_file(dis, EVAL, out, batch_size=3, progress_bar=False)  # the folder: its one *.data.xml
    corpus = read_dataset(EVAL)
    details = dis.predict_corpus(corpus, show_progress_bar=False)
    answered = {iid: p.sense_key for iid, p in details.items() if p.sense_key is not None}
    assert read_key_file(out) == {iid: {k} for iid, k in answered.items()}
    assert result.written == result.tagged == len(answered) and result.rows == corpus.n_instances
    gold = EVAL / "tiny_eval.gold.key.txt"
    from_file = score_files(gold, out)
    assert from_file == score(corpus.gold(), answered)
    assert from_file == evaluate_wsd(dis, corpus, show_progress_bar=False).overall
    assert 0 < from_file.f1 <= 1


def test_key_format_by_name_and_its_limits(dis, tmp_path):
    out = tmp_path / "pred.txt"
    tag_file(dis, EVAL, out, format="key", progress_bar=False)
    assert read_key_file(out)
    src = _jsonl(tmp_path / "in.jsonl", [{"text": "the bank"}])
    with pytest.raises(ValueError, match="Raganato XML input"):
        tag_file(dis, src, tmp_path / "x.key", progress_bar=False)
    with pytest.raises(ValueError, match="columns applies to tables"):
        tag_file(dis, EVAL, tmp_path / "x.jsonl", columns={"text": "t"}, progress_bar=False)
    with pytest.raises(ValueError, match="skip_bad_rows applies to tables"):
        tag_file(dis, EVAL, tmp_path / "x.jsonl", skip_bad_rows=True, progress_bar=False)
    with pytest.raises(ValueError, match="cannot tell the output format"):
        tag_output_format(tmp_path / "x.tsv")
    assert tag_output_format("a.csv") == "csv" and tag_output_format("a.txt", "key") == "key"
    assert not (tmp_path / "x.key").exists() and not (tmp_path / "x.jsonl").exists()


BAD_ROWS = [{"text": "He sat on the bank."}, {"text": 3}, "{not json", {"text": "   "}, {"other": "bank"},
            {"text": "The bank lent money."}]


def test_a_bad_row_is_named(dis, tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", BAD_ROWS)
    with pytest.raises(ValueError, match=r"in\.jsonl line 2: column 'text' must be a string; got 3 .*--skip-bad-rows"):
        tag_file(dis, src, tmp_path / "out.jsonl", progress_bar=False)
    assert not (tmp_path / "out.jsonl").exists()


def test_skipped_rows_are_reported_and_counted(dis, tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", BAD_ROWS)
    seen = []
    result = tag_file(dis, src, tmp_path / "out.csv", skip_bad_rows=True, progress_bar=False,
                      on_skip=lambda where, reason: seen.append((where, reason)))
    assert [w for w, _ in seen] == [f"{src} line {n}" for n in (2, 3, 4, 5)]
    assert "must be a string" in seen[0][1] and "not valid JSON" in seen[1][1] and "blank" in seen[2][1]
    assert "no column 'text'" in seen[3][1]
    assert result.skipped == seen and (result.rows, result.written) == (6, 2)
    records = _csv_records(tmp_path / "out.csv")
    assert sorted({r["row"] for r in records}) == ["0", "5"]  # the input's row index, skipped rows counted
    assert [r["word"] for r in records if r["row"] == "5"] == [p.word for p in dis.tag("The bank lent money.")]


def test_an_error_leaves_an_existing_output_untouched(dis, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("previous predictions\n")
    src = _jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS * 3] + [{"text": None}])
    with pytest.raises(ValueError, match=r"line 19: column 'text' must be a string; got None"):
        tag_file(dis, src, out, batch_size=2, progress_bar=False)  # fails after several chunks were written
    assert out.read_text() == "previous predictions\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]  # no temporary file left
    src = _jsonl(tmp_path / "in.jsonl", [{"text": ""}, {"text": 1}])
    with pytest.raises(ValueError, match="all 2 rows were bad; nothing was written"):
        tag_file(dis, src, out, skip_bad_rows=True, progress_bar=False, on_skip=lambda *a: None)
    assert out.read_text() == "previous predictions\n"


def test_whole_file_problems(dis, tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("sentence,n\nthe bank,1\n")
    with pytest.raises(ValueError, match=r"no column 'text'; its columns are 'sentence', 'n' .*--columns text="):
        tag_file(dis, src, tmp_path / "out.jsonl", progress_bar=False)
    with pytest.raises(ValueError, match="is the input file"):
        tag_file(dis, src, src.with_suffix(".csv"), format="csv", progress_bar=False)
    with pytest.raises(ValueError, match="unknown role 'label'"):
        tag_file(dis, src, tmp_path / "out.jsonl", columns={"label": "n"}, progress_bar=False)
    _jsonl(tmp_path / "p.jsonl", [{"predictions": 1, "text": "the bank"}])
    with pytest.raises(ValueError, match="already has a column 'predictions'"):
        tag_file(dis, tmp_path / "p.jsonl", tmp_path / "out.jsonl", progress_bar=False)
    with pytest.raises(FileNotFoundError):
        tag_file(dis, tmp_path / "missing.xml", tmp_path / "out.jsonl", progress_bar=False)
    (tmp_path / "empty.xml").write_text('<corpus lang="en"></corpus>')
    with pytest.raises(ValueError, match="no <instance> to disambiguate"):
        tag_file(dis, tmp_path / "empty.xml", tmp_path / "out.jsonl", progress_bar=False)
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------ a store directory with its embedder


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    """A store built with a tiny random BERT whose config.json carries a training-run stamp (as `wsd train`'s)."""
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.modeling.checkpoint import stamp_training_run
    from tests.helpers import write_tiny_model

    root = tmp_path_factory.mktemp("tiny_store")
    model = write_tiny_model(root / "model")
    run = stamp_training_run(model, "wsd-test")
    emb = Embedder.from_pretrained(model, layers=[-1])
    assert emb.config.training_run == run
    store = build_sense_store(read_dataset(FIXTURES / "tiny_train"), emb, show_progress_bar=False)
    store.save(root / "store")
    return root / "store", emb, store


def test_a_store_directory_is_used_with_the_embedder_it_records(tiny_store, tmp_path):
    store_dir, emb, store = tiny_store
    assert is_sense_store(store_dir) and not is_sense_store(tmp_path) and not is_sense_store(FIXTURES)
    src = _jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    tag_file(store_dir, src, tmp_path / "out.jsonl", batch_size=4, progress_bar=False)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    reference = Disambiguator(store, emb)
    for row, text in zip(rows, TEXTS):
        want = [_as_record(p) for p in reference.tag(text)]
        got = row["predictions"]
        assert [{k: v for k, v in p.items() if "score" not in k} for p in got] == \
               [{k: v for k, v in p.items() if "score" not in k} for p in want]
        for g, w in zip(got, want):  # batched with padding: equal up to float noise
            for k in ("score", "runner_up_score"):
                assert (g[k] is None) == (w[k] is None)
                if w[k] is not None:
                    assert g[k] == pytest.approx(w[k], abs=1e-5)
    loaded = load_disambiguator(store_dir)
    assert loaded.embedder.config.training_run == emb.config.training_run


def test_a_model_that_does_not_match_the_store_is_refused(tiny_store, tmp_path):
    store_dir, emb, store = tiny_store
    assert store_embedder_config(store, emb.config.model)["model"] == emb.config.model
    with pytest.raises(ValueError, match="(?s)does not match the sense store.*model: store has"):
        store_embedder_config(store, "all-MiniLM-L6-v2")
    # the same path holding other weights: the training-run stamp differs
    from ctxemb.modeling.checkpoint import stamp_training_run
    from tests.helpers import write_tiny_model

    other = tmp_path / "copy"
    write_tiny_model(other, seed=1)
    stamp_training_run(other, "wsd-test")
    recorded = store.metadata["embedder"]
    store.metadata["embedder"] = dict(recorded, model=str(other))
    try:
        with pytest.raises(ValueError, match="made by training run .*other weights"):
            load_disambiguator(store)
    finally:
        store.metadata["embedder"] = recorded


# ------------------------------------------------------------------------ the command line


def test_predict_and_wsd_tag_write_what_tag_file_writes(tiny_store, tmp_path, capsys):
    from ctxemb.cli import main

    store_dir, _, _ = tiny_store
    src = _jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    tag_file(store_dir, src, tmp_path / "lib.csv", batch_size=4, progress_bar=False)
    assert main(["predict", str(store_dir), "--input", str(src), "--output", str(tmp_path / "p.csv"),
                 "--batch-size", "4", "--no-progress"]) == 0
    assert "tagged" in capsys.readouterr().out
    assert main(["wsd", "tag", "--store", str(store_dir), "--input", str(src), "--output", str(tmp_path / "t.out"),
                 "--format", "csv", "--batch-size", "4", "--no-progress"]) == 0
    lib = (tmp_path / "lib.csv").read_text()
    assert (tmp_path / "p.csv").read_text() == lib and (tmp_path / "t.out").read_text() == lib

    # a Raganato data set to a key file, scored as `wsd eval` scores it
    key = tmp_path / "tiny_eval.key"
    assert main(["predict", str(store_dir), "--input", str(EVAL / "tiny_eval.data.xml"), "--output", str(key),
                 "--no-progress"]) == 0
    assert "disambiguated 10 instance(s)" in capsys.readouterr().out
    res = tmp_path / "res.json"
    assert main(["wsd", "eval", str(store_dir), str(EVAL), "--json", str(res), "--no-progress"]) == 0
    capsys.readouterr()
    f1 = json.loads(res.read_text())["tiny_eval"]["F1"]
    assert 100 * score_files(EVAL / "tiny_eval.gold.key.txt", key).f1 == pytest.approx(f1)


def test_the_command_line_reports_skips_and_refuses_misuse(tiny_store, tmp_path, capsys):
    from ctxemb.cli import main

    store_dir, emb, _ = tiny_store
    src = _jsonl(tmp_path / "in.jsonl", BAD_ROWS)
    out = tmp_path / "out.jsonl"
    assert main(["predict", str(store_dir), "--input", str(src), "--output", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{src} line 2: column 'text' must be a string" in err and not out.exists()
    assert main(["wsd", "tag", "--store", str(store_dir), "--input", str(src), "--output", str(out),
                 "--skip-bad-rows", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"{src} line 3: skipped: not valid JSON" in err and "skipped 4 bad row(s) of 6" in err
    assert len(out.read_text().splitlines()) == 2
    for argv, message in [
        (["predict", str(store_dir), "the bank"], "is a sense store: give --input FILE --output FILE"),
        (["predict", str(store_dir), "--input", str(src), "--output", str(out), "--json"], "drop --json"),
        (["predict", str(store_dir), "--input", str(src)], "--input needs --output"),
        (["wsd", "tag", "--store", str(store_dir), "--input", str(src), "--output", str(out), "the"], "drop text"),
        (["wsd", "tag", "--store", str(store_dir), "--output", str(out), "the bank"], "--output go with --input"),
        (["wsd", "tag", "--store", str(store_dir)], "give the text to tag"),
        (["predict", str(store_dir), "--input", str(src), "--output", str(out), "--model", "all-MiniLM-L6-v2"],
         "does not match the sense store"),
        (["wsd", "tag", "--store", str(store_dir), "--model", "all-MiniLM-L6-v2", "the bank"],
         "does not match the sense store"),
        (["predict", str(tmp_path), "the bank", "--model", "all-MiniLM-L6-v2"], "--model goes with a sense store"),
    ]:
        assert main(argv) != 0, argv
        assert message in capsys.readouterr().err, argv
    # --model naming the recorded model is accepted
    assert main(["wsd", "tag", "--store", str(store_dir), "--model", emb.config.model, "--json", "the bank"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["word"] == "bank"


def test_input_format_overrides_the_extension(dis, tmp_path):
    xml = tmp_path / "data.dat"
    xml.write_bytes((EVAL / "tiny_eval.data.xml").read_bytes())
    tag_file(dis, xml, tmp_path / "a.key", input_format="raganato", progress_bar=False)
    tag_file(dis, EVAL / "tiny_eval.data.xml", tmp_path / "b.key", progress_bar=False)
    assert (tmp_path / "a.key").read_text() == (tmp_path / "b.key").read_text()
    lines = tmp_path / "lines.dat"
    lines.write_text("\n".join(TEXTS) + "\n")
    tag_file(dis, lines, tmp_path / "c.jsonl", input_format="txt", progress_bar=False)
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == len(TEXTS)
    with pytest.raises(ValueError, match="input format"):
        tag_file(dis, lines, tmp_path / "d.jsonl", input_format="xls", progress_bar=False)
