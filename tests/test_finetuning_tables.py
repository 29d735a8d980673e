"""Training data from any table: CSV, Parquet, JSON, datasets (object and saved directory), DataFrames and lists give
the examples and features a TSV of the same content gives; column mapping; errors that name the source, the row and
the column; ``ctxemb finetune custom`` from CSV/Parquet/datasets trains the same model as from the TSV."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch

from ctxemb.tasks.sequence.features import model_inputs
from ctxemb.tasks.sequence.data import read_table
from ctxemb.io.tables import open_rows, parse_columns, resolve_columns
from ctxemb.modeling.loading import load_tokenizer
from tests.helpers import write_tiny_model

pd = pytest.importorskip("pandas")
datasets = pytest.importorskip("datasets")
pytest.importorskip("pyarrow")

WORDS = ["the", "river", "money", "sat", "on", "of", "he", "she", "a", "mouse", "cell", "plant", "bank"]


def _rows(n, seed, regression=False):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a = " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
        b = " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
        label = round(rng.uniform(0, 5), 2) if regression else rng.choice(["neg", "pos"])
        out.append({"premise": a, "hypothesis": b, "gold": label})
    return out


def _tsv(path, rows):
    cols = list(rows[0])
    path.write_text("\n".join(["\t".join(cols)] + ["\t".join(str(r[c]) for c in cols) for r in rows]) + "\n")
    return path


def _all_formats(tmp_path, rows):
    """The same rows as TSV, CSV, JSONL, JSON, Parquet, a saved datasets directory, a Dataset, a DatasetDict, a
    DataFrame, a list of dicts."""
    df = pd.DataFrame(rows)
    df.to_csv(tmp_path / "t.csv", index=False)
    df.to_parquet(tmp_path / "t.parquet")
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "t.json").write_text(json.dumps(rows))
    ds = datasets.Dataset.from_list(rows)
    datasets.DatasetDict(train=ds).save_to_disk(str(tmp_path / "saved"))
    return {"tsv": _tsv(tmp_path / "t.tsv", rows), "csv": tmp_path / "t.csv", "jsonl": tmp_path / "t.jsonl",
            "json": tmp_path / "t.json", "parquet": tmp_path / "t.parquet", "saved": tmp_path / "saved",
            "dataset": ds, "datasetdict": datasets.DatasetDict(train=ds), "dataframe": df, "list": rows}


@pytest.mark.parametrize("regression", [False, True])
def test_every_format_gives_the_tsvs_examples_and_features(tmp_path, regression):
    rows = _rows(24, 0, regression)
    rows[3]["premise"] = 'a "quoted, comma" bank'  # CSV quoting; TSV keeps quotes as text
    sources = _all_formats(tmp_path, rows)
    kw = dict(text_a="premise", text_b="hypothesis", label="gold", split="train",
              **({"regression": True} if regression else {"label_names": ["neg", "pos"]}))
    tok = load_tokenizer(write_tiny_model(tmp_path / "m"))
    reference = read_table(sources["tsv"], **kw)
    ref_features, _ = model_inputs(tok, reference, head="checkpoint", regression=regression, max_length=32)
    assert len(reference) == 24 and reference[3].text_a == 'a "quoted, comma" bank'
    for name, source in sources.items():
        got = read_table(source, **kw)
        assert [(e.text_a, e.text_b, e.label) for e in got] == [(e.text_a, e.text_b, e.label) for e in reference], name
        features, _ = model_inputs(tok, got, head="checkpoint", regression=regression, max_length=32)
        assert features == ref_features, name
    tuples = [(r["premise"], r["hypothesis"], r["gold"]) for r in rows]
    got = read_table(tuples, **{**kw, "text_a": 0, "text_b": 1, "label": 2})
    assert [(e.text_a, e.text_b, e.label) for e in got] == [(e.text_a, e.text_b, e.label) for e in reference]


def test_a_classlabel_column_gives_its_names_and_files_keep_line_ids(tmp_path):
    features = datasets.Features({"s": datasets.Value("string"), "y": datasets.ClassLabel(names=["no", "yes"])})
    ds = datasets.Dataset.from_dict({"s": ["a bank", "the river"], "y": [1, 0]}, features=features)
    ds.to_parquet(str(tmp_path / "c.parquet"))
    from ctxemb.io.tables import class_names

    assert class_names(ds, "y") == ("no", "yes") == class_names(tmp_path / "c.parquet", "y")
    assert [e.label for e in read_table(ds, text_a="s", label="y")] == [1, 0]
    csv_path = tmp_path / "c.csv"
    csv_path.write_text('s,y\n"two\nlines",1\nb,0\n')
    assert [(e.text_a, e.id) for e in read_table(csv_path, text_a="s", label="y")] == [("two\nlines", "c.csv:3"),
                                                                                       ("b", "c.csv:4")]


def test_column_mapping_parses_and_refuses_unknown_roles():
    assert parse_columns("text=sentence, label = score") == {"text": "sentence", "label": "score"}
    for bad in ("text", "text=a,text=b", "=x"):
        with pytest.raises(ValueError, match="ROLE=COLUMN|twice"):
            parse_columns(bad)
    defaults = {"text_a": "sentence", "text_b": None, "label": "label", "id": None}
    assert resolve_columns({"text": "review", "label": "stars"}, defaults, aliases={"text": "text_a"}) == {
        "text_a": "review", "text_b": None, "label": "stars", "id": None}
    with pytest.raises(ValueError, match="unknown role 'txet'; this task reads the roles text_a, text_b, label, id"):
        resolve_columns({"txet": "x"}, defaults)


ERRORS = [  # (file name, how to write it, read_table keywords, the message)
    ("miss.csv", "s,lab\na,0\n", {}, r"miss.csv line 1: no column 'l'; its columns are 's', 'lab'"),
    ("empty.csv", "", {}, r"empty.csv line 1: the file is empty"),
    ("header.csv", "s,l\n", {}, r"header.csv line 2: no rows after the header"),
    ("fields.csv", "s,l\na,0\nb,1,2\n", {}, r"fields.csv line 3: expected 2 comma-separated fields"),
    ("label.csv", "s,l\na,0\nb,maybe\n", {"label_names": ["no", "yes"]},
     r"label.csv line 3: label 'maybe' in column 'l' is neither one of no, yes nor a class index 0-1"),
    ("blank.csv", 's,l\na,0\n" ",1\n', {}, r"blank.csv line 3: column 's' is blank"),
    ("nonobj.json", "[{\"s\": \"a\", \"l\": 0}, 3]", {}, r"nonobj.json row 1: expected a JSON object; got a int"),
    ("key.jsonl", '{"s": "a", "l": 0}\n{"s": "b"}\n', {}, r"key.jsonl line 2: no key 'l'; its keys are 's'"),
]


@pytest.mark.parametrize("name, content, kw, message", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_files_name_the_file_the_row_and_the_column(tmp_path, name, content, kw, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_table(path, text_a="s", label="l", **kw)


def test_bad_tables_name_the_row_and_the_columns_present(tmp_path):
    pd.DataFrame({"s": ["a", "b"], "n": [1, 2]}).to_parquet(tmp_path / "p.parquet")
    with pytest.raises(ValueError, match=r"p.parquet: no column 'l'; its columns are 's', 'n'"):
        read_table(tmp_path / "p.parquet", text_a="s", label="l")
    with pytest.raises(ValueError, match=r"p.parquet row 0: column 'n' must be a string; got 1"):
        read_table(tmp_path / "p.parquet", text_a="n", label="n")
    pd.DataFrame({"s": pd.Series([], dtype=str), "l": pd.Series([], dtype=int)}).to_parquet(tmp_path / "e.parquet")
    with pytest.raises(ValueError, match=r"e.parquet: the file has no rows"):
        read_table(tmp_path / "e.parquet", text_a="s", label="l")
    ds = datasets.Dataset.from_dict({"s": ["a", "b"], "l": [0, 7]})
    with pytest.raises(ValueError, match=r"Dataset row 1: label 7 in column 'l' is neither one of x, y"):
        read_table(ds, text_a="s", label="l", label_names=["x", "y"])
    with pytest.raises(ValueError, match=r"Dataset: no column 'text'; its columns are 's', 'l'"):
        read_table(ds, text_a="text", label="l")
    with pytest.raises(ValueError, match=r"DatasetDict: a DatasetDict needs a split; asked for 'test', it has 'train'"):
        read_table(datasets.DatasetDict(train=ds), text_a="s", label="l", split="test")
    with pytest.raises(ValueError, match=r"list row 1: column 's' must be a string; got None"):
        read_table([{"s": "a", "l": 0}, {"s": None, "l": 1}], text_a="s", label="l")
    with pytest.raises(ValueError, match=r"list row 1: expected a tuple of 2 values like row 0"):
        read_table([("a", 0), ("b",)], text_a=0, label=1)
    with pytest.raises(ValueError, match=r"DataFrame: no column 'l'; its columns are 's', 'n'"):
        read_table(pd.DataFrame({"s": ["a"], "n": [1]}), text_a="s", label="l")
    with pytest.raises(ValueError, match=r"list: it has no rows"):
        read_table([], text_a="s", label="l")
    with pytest.raises(TypeError, match=r"a table must be a file path, a datasets.Dataset"):
        read_table({"s": ["a"]}, text_a="s", label="l")


def test_missing_optional_packages_name_the_extra(tmp_path, monkeypatch):
    import importlib

    real = importlib.import_module

    def no_pyarrow(name, *a, **k):
        if name.startswith(("pyarrow", "datasets")):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", no_pyarrow)
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    with pytest.raises(ImportError, match=r"needs the 'pyarrow' package.*pip install 'ctxemb\[tables\]'"):
        open_rows(tmp_path / "x.parquet")
    (tmp_path / "d").mkdir()
    with pytest.raises(ImportError, match=r"needs the 'datasets' package.*ctxemb\[tables\]"):
        open_rows(tmp_path / "d")


def test_tagged_tables_read_like_the_conll_file(tmp_path):
    from ctxemb.tasks.token.conll import read_conll, write_conll
    from ctxemb.tasks.token.tagged_tables import read_tagged_table

    words = [["Jane", "Doe", "sat"], ["on", "the", "River", "Bank"]]
    tags = [["I-PER", "I-PER", "O"], ["O", "O", "B-LOC", "I-LOC"]]  # IOB1 in the first: converted to BIO
    write_conll(tmp_path / "t.conll", words, [tags])
    reference = [(s.words, s.ner) for s in read_conll(tmp_path / "t.conll")]
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                               "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    ds = datasets.Dataset.from_dict({"tokens": words, "ner_tags": [[names.index(t) for t in s] for s in tags]},
                                    features=feats)
    ds.to_parquet(str(tmp_path / "t.parquet"))
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in zip(words, tags)))
    for source, kw in ((ds, {"tags": "ner_tags"}), (tmp_path / "t.parquet", {"tags": "ner_tags"}),
                       (tmp_path / "t.jsonl", {}), (list(zip(words, tags)), {"tokens": 0, "tags": 1})):
        assert [(s.words, s.ner) for s in read_tagged_table(source, **kw)] == reference, source
    bad = [{"tokens": ["a", "b"], "tags": ["O"]}]
    with pytest.raises(ValueError, match=r"list row 0: 2 words in column 'tokens' but 1 tags in column 'tags'"):
        read_tagged_table(bad)
    with pytest.raises(ValueError, match=r"list row 0: column 'tags', tag 0: tag 'X' is not 'O'"):
        read_tagged_table([{"tokens": ["a"], "tags": ["X"]}])
    with pytest.raises(ValueError, match=r"list row 0: column 'tags' holds the int 1 .* no tag names"):
        read_tagged_table([{"tokens": ["a"], "tags": [1]}])


# ------------------------------------------------------------------------------------------------ training


def _train(d, train_file, dev_file, name, **kw):
    from ctxemb.cli import main

    args = ["finetune", "custom", "--model", str(d / "tiny"), "--train-file", str(train_file), "--dev-file",
            str(dev_file), "--columns", "text=premise,text_b=hypothesis,label=gold", "--label-names", "neg", "pos",
            "--head", "cls", "--epochs", "1", "--batch-size", "8", "--max-length", "24", "--learning-rate", "1e-3",
            "--precision", "fp32", "--seed", "0", "--out-dir", str(d / name)]
    assert main(args) == 0
    from safetensors.torch import load_file

    return load_file(str(d / name / "model" / "model.safetensors"))


@pytest.fixture(scope="module")
def tables_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    write_tiny_model(d / "tiny")
    (d / "train").mkdir()
    (d / "dev").mkdir()
    return d, _all_formats(d / "train", _rows(40, 1)), _all_formats(d / "dev", _rows(16, 2))


def test_finetune_from_csv_parquet_and_a_saved_dataset_gives_the_tsvs_model(tables_dir):
    d, train, dev = tables_dir
    reference = _train(d, train["tsv"], dev["tsv"], "tsv")
    for fmt, dev_fmt in (("csv", "csv"), ("parquet", "parquet"), ("saved", "jsonl")):
        weights = _train(d, train[fmt], dev[dev_fmt], fmt)
        assert weights.keys() == reference.keys()
        for k in reference:
            torch.testing.assert_close(weights[k], reference[k], rtol=0, atol=0, msg=f"{fmt}: {k}")


def test_python_api_trains_from_a_list_and_a_dataset_and_records_them(tables_dir):
    from ctxemb.tasks.sequence.config import FinetuneConfig
    from ctxemb.training.config import TrainConfig
    from ctxemb.training.registry import get_task
    from ctxemb.training.runner import run_task

    d, train, dev = tables_dir
    config = FinetuneConfig(task="custom", model=str(d / "tiny"), head="cls", epochs=1, batch_size=8, max_length=24,
                            train_file=train["list"], dev_file=dev["dataset"], label_names=["neg", "pos"],
                            columns={"text": "premise", "text_b": "hypothesis", "label": "gold"},
                            train=TrainConfig(learning_rate=1e-3, out_dir=str(d / "api"), progress_bar=False,
                                              precision="fp32", seed=0))
    result = run_task(get_task(config.task), config)
    from safetensors.torch import load_file

    weights, reference = load_file(str(result.model_dir / "model.safetensors")), _train(d, train["tsv"], dev["tsv"],
                                                                                         "tsv2")
    for k in reference:
        torch.testing.assert_close(weights[k], reference[k], rtol=0, atol=0)
    saved = json.loads((result.model_dir / "finetune_config.json").read_text())
    assert saved["train_file"].startswith("list(40 rows, sha256 ")
    assert saved["dev_file"].startswith("datasets.Dataset(16 rows, fingerprint ")
    with pytest.raises(ValueError, match="unknown role 'txt'"):
        FinetuneConfig(task="custom", train_file=[], dev_file=[], columns={"txt": "x"},
                       train=TrainConfig(learning_rate=1e-3, out_dir=str(d / "x")))
    with pytest.raises(ValueError, match="columns maps the columns of a custom task's table"):
        FinetuneConfig(task="sst2", columns={"text": "x"}, train=TrainConfig(learning_rate=1e-3, out_dir=str(d / "x")))


def _squad(n, seed):
    rng = random.Random(seed)
    paragraphs = []
    for k in range(n):
        words = rng.choices(WORDS[:-1], k=rng.randint(4, 12))
        at = rng.randrange(len(words))
        words[at] = "mouse"
        context = " ".join(words)
        start = len(" ".join(words[:at])) + (at > 0)
        paragraphs.append({"context": context, "qas": [{"id": f"q{seed}-{k}", "question": "what animal ?",
                                                       "answers": [{"text": "mouse", "answer_start": start}]}]})
    return {"data": [{"title": "t", "paragraphs": paragraphs}]}


def _squad_rows(squad):
    return [{"id": q["id"], "title": a["title"], "context": p["context"], "question": q["question"],
             "answers": {"text": [x["text"] for x in q["answers"]],
                         "answer_start": [x["answer_start"] for x in q["answers"]]}}
            for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]


def test_qa_tables_read_like_squad_json(tmp_path):
    from ctxemb.tasks.qa.tables import read_qa_table
    from ctxemb.tasks.qa.squad import read_squad

    squad = _squad(6, 0)
    (tmp_path / "s.json").write_text(json.dumps(squad))
    reference = read_squad(tmp_path / "s.json")
    rows = _squad_rows(squad)
    ds = datasets.Dataset.from_list(rows)
    (tmp_path / "s.jsonl").write_text("".join(json.dumps({**r, "answers": [
        {"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])]}) + "\n"
        for r in rows))
    pd.DataFrame([{**r, "answers": json.dumps(r["answers"])} for r in rows]).to_csv(tmp_path / "s.csv", index=False)
    renamed = [{"qid": r["id"], "passage": r["context"], "q": r["question"], "gold": r["answers"],
                "title": r["title"]} for r in rows]
    for source, cols in ((ds, None), (tmp_path / "s.jsonl", None), (tmp_path / "s.csv", None), (rows, None),
                         (renamed, {"id": "qid", "context": "passage", "question": "q", "answers": "gold"})):
        assert read_qa_table(source, columns=cols) == reference, source
    bad = [{**rows[0], "answers": {"text": ["mouse"], "answer_start": [0]}}]
    if rows[0]["context"].startswith("mouse"):
        bad[0]["answers"]["answer_start"] = [1]
    with pytest.raises(ValueError, match=r"list row 0: column 'answers', answer 0: 'mouse' is not in the context"):
        read_qa_table(bad)
    with pytest.raises(ValueError, match=r"list row 1: question id 'q0-0' repeats the id of list row 0"):
        read_qa_table([rows[0], rows[0]])


def test_token_and_qa_tasks_train_the_same_model_from_tables(tables_dir, tmp_path):
    from safetensors.torch import load_file

    from ctxemb.cli import main
    from ctxemb.tasks.token.conll import write_conll

    d = tables_dir[0]
    rng = random.Random(5)
    words = [rng.choices(WORDS, k=rng.randint(2, 6)) for _ in range(24)]
    tags = [["B-LOC" if w == "river" else "O" for w in ws] for ws in words]
    write_conll(tmp_path / "t.conll", words, [tags])
    names = ["O", "B-LOC", "I-LOC"]
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                               "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    datasets.Dataset.from_dict({"tokens": words, "ner_tags": [[names.index(t) for t in s] for s in tags]},
                               features=feats).to_parquet(str(tmp_path / "t.parquet"))
    squad = _squad(12, 1)
    (tmp_path / "s.json").write_text(json.dumps(squad))
    datasets.Dataset.from_list(_squad_rows(squad)).save_to_disk(str(tmp_path / "s_saved"))

    def train(task, source, name, *extra):
        assert main(["finetune", task, "--model", str(d / "tiny"), "--train-file", str(source), "--dev-file",
                     str(source), "--epochs", "1", "--batch-size", "8", "--max-length", "32", "--precision", "fp32",
                     "--seed", "0", "--out-dir", str(tmp_path / name), *extra]) == 0
        return load_file(str(tmp_path / name / "model" / "model.safetensors"))

    for task, a, b, extra in (("conll-file", tmp_path / "t.conll", tmp_path / "t.parquet",
                               ("--columns", "tags=ner_tags")),
                              ("squad-file", tmp_path / "s.json", tmp_path / "s_saved",
                               ("--doc-stride", "8", "--max-query-length", "8"))):
        reference = train(task, a, task + "-ref", *(x for x in extra if x != "--columns" and "=" not in x))
        weights = train(task, b, task + "-table", *extra)
        for k in reference:
            torch.testing.assert_close(weights[k], reference[k], rtol=0, atol=0, msg=f"{task}: {k}")


def test_lines_are_read_lazily_with_any_line_end_and_named_errors(tmp_path):
    from ctxemb.io.text_files import iter_lines

    path = tmp_path / "l.txt"
    path.write_bytes("\ufeffa\rb\r\n\r\nc\n\n \n".encode("utf-8"))
    assert list(iter_lines(path, "lines")) == [(1, "a"), (2, "b"), (3, ""), (4, "c")]  # trailing blanks dropped
    path.write_bytes(b"ok\n\xff\n")
    lines = iter_lines(path, "lines")
    assert next(lines) == (1, "ok")  # read as it goes: the bad line is met only when reached
    with pytest.raises(ValueError, match=r"l.txt line 2: not UTF-8 text \(byte 0xff"):
        next(lines)
    path.write_text("\n \n")
    with pytest.raises(ValueError, match=r"l.txt line 1: the file is empty \(it should hold lines\)"):
        list(iter_lines(path, "lines"))
    (tmp_path / "b.csv").write_bytes("\ufeffs,l\r\na,0\r\n".encode("utf-8"))
    assert [(e.text_a, e.label) for e in read_table(tmp_path / "b.csv", text_a="s", label="l")] == [("a", 0)]


# ------------------------------------------------------------------------------------------------ strict CSV (#46)
# The acceptance: the CSV reader loses no row silently on any malformed input. Each malformed file stops the read
# with a MalformedFileError (a ValueError) naming the file, the line, what was expected and what was found: in
# training, in ctxemb predict with or without --skip-bad-rows, and through the command line.

MALFORMED_CSV = [  # (name, bytes, the line named, the message after "FILE line N")
    ("unclosed-quote", b'text,label\n1,"he said\n0,good\n1,bad\n0,fine\n', 2,
     r" \(column 3\): this quoted field never closes: expected a closing quote, found the end of the file \(after "
     r"line 5\), so lines 2-5 would be read as one field"),
    ("unclosed-quote-last-line", b'review,stars\ngreat film,good\n"dull,bad', 3,
     r" \(column 1\): this quoted field never closes: expected a closing quote, found the end of the file"),
    ("quote-closes-rows-later", b'review,stars\n"great film,good\nawful,bad\n"fine",good\n', 4,
     r" \(column 2\): expected a comma or the end of the line after the closing quote of a quoted field \(it opens "
     r"on line 2: does a quote there never close\?\); found 'fine\",good'"),
    ("quote-in-unquoted-field", b'review,stars\ngreat film,good\na 5" screen,bad\n', 3,
     r" \(column 4\): a quote inside a field that is not quoted \('a 5\" screen,bad'\); expected no quote there: "
     r"a field holding a quote.* is quoted and each quote in it written twice"),
    ("space-before-quote", b'review,stars\ngreat film, "good"\n', 2,
     r" \(column 13\): a quote inside a field that is not quoted \(' \"good\"'\); expected no quote there: a "
     r"quoted field opens right after the comma: remove the spaces before the quote"),
    ("text-after-closing-quote", b'review,stars\n"great" film,good\n', 2,
     r" \(column 8\): expected a comma or the end of the line after the closing quote of a quoted field; "
     r"found ' film,good'"),
    ("nul-byte", b'review,stars\ngreat\x00film,good\n', 2, r": a NUL byte \(column 6\); expected UTF-8 text"),
    ("utf-16", "review,stars\ngreat film,good\n".encode("utf-16-le"), 1, r": a NUL byte \(column 2\)"),
    ("latin-1", "review,stars\ncaf\u00e9 film,good\n".encode("latin-1"), 2,
     r": not UTF-8 text \(byte 0xe9: invalid continuation byte\); save the file as UTF-8"),
]


@pytest.mark.parametrize("name, content, line, message", MALFORMED_CSV, ids=[c[0] for c in MALFORMED_CSV])
def test_a_malformed_csv_is_refused_naming_its_line_never_read_short(tmp_path, name, content, line, message):
    from ctxemb.io.text_files import MalformedFileError

    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    pattern = re.escape(f"{path} line {line}") + message
    text_a, label = ("text", "label") if content.startswith(b"text") else ("review", "stars")
    with pytest.raises(MalformedFileError, match=pattern) as e:
        read_table(path, text_a=text_a, label=label, label_names=["bad", "good"])
    assert isinstance(e.value, ValueError) and e.value.line == line and e.value.path == path
    with pytest.raises(MalformedFileError, match=pattern):
        list(open_rows(path).rows)


def _echo_predictor():
    """A registered task's predictor that predicts each row's review length: predict_file without a model."""
    from types import SimpleNamespace

    from ctxemb.training.task import TaskPredictor

    class EchoPredictor(TaskPredictor):
        def __init__(self):  # no saved model to load: the task's predict alone
            self.task = SimpleNamespace(predict=lambda model, tokenizer, rows, saved: [len(r["review"]) for r in rows])
            self.model, self.tokenizer, self.saved = torch.nn.Identity(), None, {}

    return EchoPredictor()


@pytest.mark.parametrize("name, content, line, message", MALFORMED_CSV, ids=[c[0] for c in MALFORMED_CSV])
def test_predict_over_a_malformed_csv_stops_and_writes_nothing_even_skipping_bad_rows(tmp_path, name, content, line,
                                                                                      message):
    from ctxemb.tasks.predict_files import predict_file
    from ctxemb.io.text_files import MalformedFileError

    path, out = tmp_path / f"{name}.csv", tmp_path / "out.jsonl"
    path.write_bytes(content.replace(b"text,label", b"review,stars"))
    for skip in (False, True):
        with pytest.raises(MalformedFileError, match=re.escape(f"{path} line {line}") + message):
            predict_file(_echo_predictor(), path, out, batch_size=2, skip_bad_rows=skip, progress_bar=False)
        assert not out.exists()


def test_wrong_field_counts_are_named_in_training_and_reported_when_predict_skips_them(tmp_path):
    from ctxemb.tasks.predict_files import predict_file

    path, out = tmp_path / "f.csv", tmp_path / "out.jsonl"
    path.write_text('review,stars\ngreat,good\nawful,bad,extra\n"two\nlines",good,x\nfine,good\n,\n')
    with pytest.raises(ValueError, match=r"f.csv line 3: expected 2 comma-separated fields \(as in the header\), "
                                         r"got 3$"):
        read_table(path, text_a="review", label="stars", label_names=["bad", "good"])
    skipped = []
    result = predict_file(_echo_predictor(), path, out, skip_bad_rows=True, progress_bar=False,
                          on_skip=lambda where, reason: skipped.append((where, reason)))
    assert skipped == [(f"{path} line 3", "expected 2 comma-separated fields (as in the header), got 3"),
                       (f"{path} line 5", "expected 2 comma-separated fields (as in the header), got 3 in the "
                                          "record of lines 4-5 (a quoted field holds line breaks)")]
    assert (result.rows, result.written) == (5, 3)  # a line of commas is a row (of empty fields), not a blank line
    assert [json.loads(x)["review"] for x in out.read_text().splitlines()] == ["great", "fine", ""]
    path.write_text("review,stars\ngreat,good\n,\n")
    with pytest.raises(ValueError, match=r"f.csv line 3: column 'review' is blank"):  # not skipped as a blank line
        read_table(path, text_a="review", label="stars", label_names=["bad", "good"])


def test_well_formed_csv_quoting_reads_every_row_as_written(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_bytes(b'review,stars\r\n"a ""quoted"", comma",good\r\n\r\n"two\r\nlines",bad\r\nplain,"good"\r\n'
                     b'"",bad\r\n')
    assert [(where.rpartition(" ")[2], row) for where, row in open_rows(path).rows] == [
        ("2", {"review": 'a "quoted", comma', "stars": "good"}), ("5", {"review": "two\nlines", "stars": "bad"}),
        ("6", {"review": "plain", "stars": "good"}), ("7", {"review": "", "stars": "bad"})]


def test_the_command_line_refuses_a_malformed_csv_in_training_and_predict(tables_dir, tmp_path, capsys):
    from ctxemb.cli import main

    d = tables_dir[0]
    good = tmp_path / "good.csv"
    pd.DataFrame([{"review": r["premise"], "stars": r["gold"]} for r in _rows(16, 3)]).to_csv(good, index=False)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b'review,stars\n"great film,pos\nawful,neg\nfine,pos\n')
    args = ["finetune", "custom", "--model", str(d / "tiny"), "--columns", "text=review,label=stars", "--label-names",
            "neg", "pos", "--head", "cls", "--epochs", "1", "--batch-size", "8", "--max-length", "24", "--precision",
            "fp32", "--no-progress"]
    assert main([*args, "--train-file", str(bad), "--dev-file", str(good), "--out-dir", str(tmp_path / "r1")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ctxemb finetune: error: MalformedFileError: {bad} line 2 (column 1): this quoted field "
                          f"never closes") and "Traceback" not in err
    assert main([*args, "--train-file", str(good), "--dev-file", str(good), "--out-dir", str(tmp_path / "r2")]) == 0
    out = tmp_path / "p.jsonl"
    assert main(["predict", str(tmp_path / "r2" / "model"), "--input", str(bad), "--output", str(out),
                 "--skip-bad-rows", "--no-progress-bar"]) == 1
    assert f"ctxemb predict: error: MalformedFileError: {bad} line 2 (column 1)" in capsys.readouterr().err
    assert not out.exists()
    assert main(["predict", str(tmp_path / "r2" / "model"), "--input", str(good), "--output", str(out),
                 "--columns", "text=stars", "--no-progress-bar"]) == 0  # a mapping of one role
    capsys.readouterr()
    for columns, message in (("text=review,label=review", "roles 'text' and 'label' both read column 'review'"),
                             ("text=review,text_a=stars", "'text' and 'text_a' are two names of one role")):
        assert main([*args, "--train-file", str(good), "--dev-file", str(good), "--out-dir", str(tmp_path / "r3"),
                     "--columns", columns]) == 2  # a usage error of the task's flags: one line
        err = capsys.readouterr().err
        assert f"ctxemb finetune custom: argument --columns: {repr(columns)}: {message}" in err and "usage:" not in err
    assert main(["predict", str(tmp_path / "r2" / "model"), "--input", str(good), "--output", str(out),
                 "--columns", "text=body", "--no-progress-bar"]) == 1
    assert ("no column 'body'; its columns are 'review', 'stars': read role 'text' from one of them with --columns "
            "text=COLUMN") in capsys.readouterr().err


def test_columns_refuse_one_role_twice_and_one_column_for_two_roles():
    defaults = {"text_a": "sentence", "text_b": None, "label": "label", "id": None}
    for bad, message in ((dict(text="a", text_a="b"), "'text' and 'text_a' are two names of one role; give it once"),
                         (dict(text="review", label="review"), "roles 'text' and 'label' both read column 'review'; "
                                                               "each role reads a column of its own"),
                         (dict(text_a="x", text_b="x"), "roles 'text_a' and 'text_b' both read column 'x'")):
        with pytest.raises(ValueError, match=re.escape("columns: " + message)):
            resolve_columns(bad, defaults, aliases={"text": "text_a"})
        text = ",".join(f"{k}={v}" for k, v in bad.items())
        with pytest.raises(ValueError, match=re.escape(f"{text!r}: {message}")):
            parse_columns(text)
    assert resolve_columns({"text": "review"}, defaults, aliases={"text": "text_a"})["text_a"] == "review"
