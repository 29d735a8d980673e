"""``ctxemb predict DIR --input FILE --output FILE`` for every model kind: the output rows are the input rows, in
order, with the Python predictors' predictions appended; bad rows stop the run (nothing written) or, with
``--skip-bad-rows``, are reported with their line and counted."""

from __future__ import annotations

import csv
import json
import random

import pytest

from ctxemb.cli import main
from ctxemb.tasks.sequence.predict import SequencePredictor
from ctxemb.tasks.token.predict import QAPredictor, TokenPredictor
from tests.helpers import write_tiny_model

WORDS = ["the", "river", "money", "sat", "on", "of", "he", "she", "a", "mouse", "cell", "plant", "bank"]


def _texts(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(2, 7))) for _ in range(n)]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _finetune(d, name, task, *args):
    assert main(["finetune", task, "--model", str(d / "tiny"), "--epochs", "1", "--batch-size", "8",
                 "--max-length", "24", "--learning-rate", "1e-3", "--precision", "fp32", "--seed", "0",
                 "--out-dir", str(d / name), *args]) == 0
    return d / name / "model"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One tiny model of each kind, trained for a few steps (the test is about files, not accuracy)."""
    d = tmp_path_factory.mktemp("predict")
    write_tiny_model(d / "tiny", max_position_embeddings=64)
    rng = random.Random(0)
    a, b = _texts(24, 1), _texts(24, 2)
    single = [{"review": t, "stars": rng.choice(["bad", "good"])} for t in a]
    pairs = [{"s1": x, "s2": y, "score": round(rng.uniform(0, 5), 1), "y": rng.randint(0, 2)} for x, y in zip(a, b)]
    for name, rows in (("single", single), ("pairs", pairs)):
        _write_jsonl(d / f"{name}.jsonl", rows)
    out = {"sequence": _finetune(d, "seq", "custom", "--train-file", str(d / "single.jsonl"), "--dev-file",
                                 str(d / "single.jsonl"), "--columns", "text=review,label=stars", "--label-names",
                                 "bad", "good", "--head", "cls"),
           "pair": _finetune(d, "pair", "custom", "--train-file", str(d / "pairs.jsonl"), "--dev-file",
                             str(d / "pairs.jsonl"), "--columns", "text=s1,text_b=s2,label=y"),
           "regression": _finetune(d, "reg", "custom", "--train-file", str(d / "pairs.jsonl"), "--dev-file",
                                   str(d / "pairs.jsonl"), "--columns", "text=s1,text_b=s2,label=score",
                                   "--regression"),
           "bi-encoder": _finetune(d, "bi", "custom", "--train-file", str(d / "pairs.jsonl"), "--dev-file",
                                   str(d / "pairs.jsonl"), "--columns", "text=s1,text_b=s2,label=score",
                                   "--regression", "--head", "cosine")}
    tagged = []
    for t in _texts(24, 3):
        words = t.split()
        tagged.append({"words": words, "ner": ["B-LOC" if w == "river" else "B-PER" if w == "she" else "O"
                                               for w in words]})
    _write_jsonl(d / "tagged.jsonl", tagged)
    for head in ("softmax", "crf", "span"):
        out[head] = _finetune(d, head, "conll-file", "--train-file", str(d / "tagged.jsonl"), "--dev-file",
                              str(d / "tagged.jsonl"), "--columns", "tokens=words,tags=ner", "--head", head,
                              "--max-span-length", "3", *(("--epochs", "6", "--learning-rate", "5e-3") if head == "crf" else ()))
    paragraphs = []
    for k, t in enumerate(_texts(16, 4)):
        context = t + " a mouse sat"
        paragraphs.append({"context": context, "qas": [{"id": f"q{k}", "question": "what animal ?", "answers": [
            {"text": "mouse", "answer_start": context.index("a mouse") + 2}]}]})
    (d / "squad.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}))
    out["qa"] = _finetune(d, "qa", "squad-file", "--train-file", str(d / "squad.json"), "--dev-file",
                          str(d / "squad.json"), "--max-length", "32", "--doc-stride", "8", "--max-query-length", "8")
    return d, out


def _read_output(path):
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _predict(model_dir, inp, out, *extra):
    assert main(["predict", str(model_dir), "--input", str(inp), "--output", str(out), "--no-progress",
                 "--batch-size", "5", *extra]) == 0
    return _read_output(out)


@pytest.mark.parametrize("kind, fmt", [(k, f) for k in ("sequence", "pair", "regression", "bi-encoder")
                                       for f in ("jsonl", "csv", "tsv", "parquet", "txt")
                                       if f != "txt" or k == "sequence"])  # a text file has no pairs
def test_sequence_models_write_what_the_predictor_gives(models, tmp_path, kind, fmt):
    d, dirs = models
    a, b = _texts(13, 10), _texts(13, 11)
    cols = ["review"] if kind == "sequence" else ["s1", "s2"]
    rows = [dict(zip(["id"] + cols, [f"r{i}", x, y])) for i, (x, y) in enumerate(zip(a, b))]
    inp = tmp_path / f"in.{fmt}"
    if fmt == "jsonl":
        _write_jsonl(inp, rows)
    elif fmt == "parquet":
        pytest.importorskip("pandas").DataFrame(rows).to_parquet(inp)
    elif fmt == "txt":
        inp.write_text("\n".join(a) + "\n")
        rows = [{"id": None} for _ in a]
    else:
        sep = "," if fmt == "csv" else "\t"
        inp.write_text("\n".join([sep.join(rows[0])] + [sep.join(r.values()) for r in rows]) + "\n")
    expected = SequencePredictor.from_pretrained(dirs[kind]).predict(a, None if kind == "sequence" else b)
    for out_fmt in ("jsonl", "csv"):
        got = _predict(dirs[kind], inp, tmp_path / f"out.{out_fmt}")  # columns named as in training
        if fmt == "txt":
            assert [r["text"] for r in got] == a
        else:
            assert [r["id"] for r in got] == [r["id"] for r in rows]  # input order, input columns kept
        for row, p in zip(got, expected):
            assert float(row["score"]) == pytest.approx(p.score, abs=1e-5)
            if p.label is None:
                assert "predicted_label" not in row
            else:
                # a label as the training data gave it (here the int 2); CSV has no types: its text
                assert row["predicted_label"] == (p.label if out_fmt == "jsonl" else str(p.label))
                probs = row["probabilities"] if out_fmt == "jsonl" else json.loads(row["probabilities"])
                assert probs == pytest.approx(p.probabilities, abs=1e-5)


def test_columns_map_other_names_and_a_missing_column_is_named(models, tmp_path, capsys):
    _, dirs = models
    texts = _texts(4, 12)
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"body": t} for t in texts])
    got = _predict(dirs["sequence"], inp, tmp_path / "out.jsonl", "--columns", "text=body")
    expected = SequencePredictor.from_pretrained(dirs["sequence"]).predict(texts)
    assert [r["predicted_label"] for r in got] == [p.label for p in expected]
    csv_in = tmp_path / "in.csv"
    csv_in.write_text("body\n" + "\n".join(texts) + "\n")
    assert main(["predict", str(dirs["sequence"]), "--input", str(csv_in), "--output", str(tmp_path / "o.csv"),
                 "--no-progress"]) == 1
    assert "in.csv: no column 'review'; its columns are 'body'" in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("head", ["softmax", "crf", "span"])
def test_taggers_write_entities_for_texts_and_tags_for_tokens(models, tmp_path, head):
    _, dirs = models
    texts = _texts(9, 13)
    predictor = TokenPredictor.from_pretrained(dirs[head])
    inp = tmp_path / "in.txt"  # plain text: one text per line
    inp.write_text("\n".join(texts) + "\n")
    got = _predict(dirs[head], inp, tmp_path / "out.jsonl")
    assert [r["text"] for r in got] == texts
    expected = [[e.__dict__ for e in ents] for ents in predictor.entities(texts)]
    # the same entities; scores equal up to float rounding (batches are padded differently, and with 2 threads the
    # reductions may add in another order)
    strip = [[{k: v for k, v in e.items() if k != "score"} for e in ents] for ents in expected]
    assert [[{k: v for k, v in e.items() if k != "score"} for e in r["entities"]] for r in got] == strip
    scores = zip([e["score"] for r in got for e in r["entities"]], [e["score"] for ents in expected for e in ents])
    assert all(a == b if b is None else a == pytest.approx(b, rel=1e-5, abs=1e-6) for a, b in scores)
    assert any(r["entities"] for r in got)  # a model that finds something, so the comparison can fail
    words = [t.split() for t in texts]
    inp = _write_jsonl(tmp_path / "words.jsonl", [{"words": w} for w in words])
    got = _predict(dirs[head], inp, tmp_path / "tags.csv")  # the training's tokens column and no text: pre-tokenized
    assert [json.loads(r["predicted_tags"]) for r in got] == predictor.tag_words(words)
    inp = tmp_path / "words.tsv"
    inp.write_text("w\n" + "\n".join(" ".join(ws) for ws in words) + "\n")
    got = _predict(dirs[head], inp, tmp_path / "tags.jsonl", "--columns", "tokens=w")  # space-separated words
    assert [r["predicted_tags"] for r in got] == predictor.tag_words(words)


def test_qa_writes_answers_with_offsets(models, tmp_path):
    _, dirs = models
    contexts = [t + " a mouse sat" for t in _texts(6, 14)]
    inp = tmp_path / "in.csv"
    with open(inp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["q", "context"])
        w.writerows([["what animal ?", c] for c in contexts])
    got = _predict(dirs["qa"], inp, tmp_path / "out.jsonl", "--columns", "question=q")
    expected = QAPredictor.from_pretrained(dirs["qa"]).answer(["what animal ?"] * 6, contexts)
    assert [(r["answer"], r["answer_start"], r["answer_end"]) for r in got] == [
        (a.text, a.start_char, a.end_char) for a in expected]
    assert [r["answer_score"] for r in got] == pytest.approx([a.score for a in expected], abs=1e-5)


def test_a_bad_row_stops_the_run_and_leaves_no_partial_output(models, tmp_path, capsys):
    _, dirs = models
    lines = [json.dumps({"review": t}) for t in _texts(12, 15)]
    lines[7] = '{"review": "the bank"'  # line 8: not JSON
    lines[9] = json.dumps({"review": "   "})  # line 10: blank
    lines[10] = json.dumps({"text": "a river"})  # line 11: no review
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    assert main(["predict", str(dirs["sequence"]), "--input", str(inp), "--output", str(out), "--no-progress",
                 "--batch-size", "2"]) == 1
    assert "in.jsonl line 8: not valid JSON" in capsys.readouterr().err
    assert out.read_text() == "previous\n"  # the old file stays; no partial output
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl", "out.jsonl"] or sorted(
        p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]
    assert main(["predict", str(dirs["sequence"]), "--input", str(inp), "--output", str(out), "--no-progress",
                 "--batch-size", "2", "--skip-bad-rows"]) == 0
    err = capsys.readouterr().err
    assert "in.jsonl line 8: skipped: not valid JSON" in err
    assert "in.jsonl line 10: skipped: column 'review' is blank" in err
    assert "in.jsonl line 11: skipped: no column 'review'; its columns are 'text'" in err
    assert "skipped 3 bad row(s) of 12" in err
    kept = [json.loads(x)["review"] for i, x in enumerate(lines) if i not in (7, 9, 10)]
    assert [r["review"] for r in _read_output(out)] == kept


def test_usage_errors(models, tmp_path, capsys):
    _, dirs = models
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"review": "a bank"}])
    for args, message in (([], "--input needs --output"),
                          (["--output", str(tmp_path / "o.xml")], "cannot tell the output format"),
                          (["--output", str(inp)], "is the input file"),
                          (["--output", str(tmp_path / "o.jsonl"), "--columns", "txt=review"], "unknown role 'txt'")):
        assert main(["predict", str(dirs["sequence"]), "--input", str(inp), *args]) != 0
        assert message in capsys.readouterr().err
    assert main(["predict", str(dirs["sequence"]), "a text", "--skip-bad-rows"]) == 2
    assert "go with --input FILE" in capsys.readouterr().err
