"""Fine-tuning readers: the real shared tasks (sizes, label ids), user tables in TSV and JSONL, and bad files."""

from __future__ import annotations

import logging
import re
from collections import Counter

import pytest

from ctxemb.tasks.sequence.data import (
    TASKS,
    TaskData,
    TextExample,
    load_task,
    read_snli,
    read_stsb,
    read_table,
    task_dir,
)

# Split sizes and class counts of the shared files (label ids as documented in the module: RTE 0 = entailment,
# SNLI 0/1/2 = entailment/neutral/contradiction, ...). STS-B is regression: sizes only.
EXPECTED = {
    "sst2": {"train": {0: 26786, 1: 33828}, "dev": {0: 2994, 1: 3741}, "test": {0: 428, 1: 444}},
    "mrpc": {"train": {0: 1169, 1: 2407}, "dev": {0: 154, 1: 346}, "test": {0: 578, 1: 1147}},
    "rte": {"train": {0: 1249, 1: 1241}, "dev": {0: 146, 1: 131}},
    "snli": {"dev": {0: 3329, 1: 3235, 2: 3278}, "test": {0: 3368, 1: 3219, 2: 3237}},
    "stsb": {"train": 5749, "dev": 1500},
}
SIZES = {task: {s: c if isinstance(c, int) else sum(c.values()) for s, c in splits.items()}
         for task, splits in EXPECTED.items()}
FIRST = {  # (split, first example's label, its id): pins the label mapping to the file's meaning
    "sst2": ("train", 1, "alps_train.tsv:2"),
    "mrpc": ("train", 1, "702876-702977"),
    "rte": ("dev", 1, "0"),  # "Christopher Reeve had an accident." does not follow: not_entailment
    "snli": ("dev", 1, "s1.dev:1"),  # "neutral"
    "stsb": ("train", 5.0, "main-captions/MSRvid/2012test/0001"),
}


def _write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


# ---- the real shared data ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_tasks(shared_data):
    tasks = {}
    for name in TASKS:
        try:
            task_dir(name)
        except FileNotFoundError as e:
            pytest.skip(str(e))
        tasks[name] = load_task(name)
    return tasks


@pytest.mark.parametrize("name", TASKS)
def test_real_task_sizes_and_labels(real_tasks, name):
    data = real_tasks[name]
    assert data.name == name and data.sizes == SIZES[name]
    if name == "stsb":
        assert data.is_regression and data.num_labels == 1 and data.metrics == ("pearson", "spearman")
        assert all(isinstance(e.label, float) and 0.0 <= e.label <= 5.0 for e in data.splits["train"])
    else:
        assert not data.is_regression and data.num_labels == len(data.label_names)
        counts = {s: dict(Counter(e.label for e in ex)) for s, ex in data.splits.items()}
        assert counts == EXPECTED[name]
    pairs = name != "sst2"
    assert all((e.text_b is not None) == pairs for ex in data.splits.values() for e in ex)
    split, label, first_id = FIRST[name]
    assert (data.splits[split][0].label, data.splits[split][0].id) == (label, first_id)
    for ex in data.splits.values():
        assert len({e.id for e in ex}) == len(ex)


def test_real_label_names(real_tasks):
    assert real_tasks["rte"].label_names == ("entailment", "not_entailment")
    assert real_tasks["snli"].label_names == ("entailment", "neutral", "contradiction")
    assert real_tasks["mrpc"].label_names == ("not_equivalent", "equivalent")
    assert real_tasks["mrpc"].metrics == ("accuracy", "f1")
    # MSRP quotes are text (quoting off); its BOM is not part of the first column name
    assert real_tasks["mrpc"].splits["train"][0].text_a.startswith('Amrozi accused his brother, whom he called "the')


def test_real_stsb_matches_the_similarity_reader(real_tasks, shared_data):
    from ctxemb.evaluation.similarity import data as sd

    for split in ("train", "dev"):
        ours = [(e.text_a, e.text_b, e.label, e.id) for e in real_tasks["stsb"].splits[split]]
        theirs = [(p.sentence1, p.sentence2, p.score, p.id) for p in sd.load_stsb(split)]
        assert ours == theirs


def test_real_held_back_splits(real_tasks):
    with pytest.raises(ValueError, match="the test split of task rte has no gold labels"):
        load_task("rte", splits=["test"])
    with pytest.raises(FileNotFoundError, match=r"held out.*root="):
        load_task("stsb", splits=["test"])
    with pytest.raises(FileNotFoundError, match=r"s1\.train.*only the dev/test"):
        load_task("snli", splits=["train"])
    assert load_task("rte", splits=("dev",)).sizes == {"dev": 277}


# ---- load_task on a folder of one's own ---------------------------------------------------------------------


def test_load_task_root_with_glue_string_labels(tmp_path):
    # GLUE's own RTE files spell the labels out; names are matched before indices, so the ids are the same
    _write(tmp_path / "dev.tsv", "index\tsentence1\tsentence2\tlabel\tidx\n"
                                 "0\tA man sleeps.\tA person sleeps.\tentailment\t0\n"
                                 "1\tA man sleeps.\tA dog barks.\tnot_entailment\t1\n")
    data = load_task("rte", root=tmp_path, splits=("dev",))
    assert [e.label for e in data.splits["dev"]] == [0, 1] and data.splits["dev"][1].id == "1"


def test_snli_skips_dash_labels_and_checks_files(tmp_path, caplog):
    _write(tmp_path / "s1.dev", "A man eats .\nA man eats .\nA dog runs .\n")
    _write(tmp_path / "s2.dev", "Someone eats .\nNobody eats .\nAn animal moves .\n")
    _write(tmp_path / "labels.dev", "entailment\n-\ncontradiction\n")
    with caplog.at_level(logging.INFO, logger="ctxemb.tasks.sequence.data"):
        data = load_task("snli", root=tmp_path, splits=["dev"])
    assert [(e.label, e.id) for e in data.splits["dev"]] == [(0, "s1.dev:1"), (2, "s1.dev:3")]
    assert "skipped 1 of 3" in caplog.text
    _write(tmp_path / "labels.dev", "entailment\nneutral\n")
    with pytest.raises(ValueError, match=r"labels\.dev line 3: missing; the file ends after 2 lines but .*s1\.dev has"):
        read_snli(tmp_path / "s1.dev", tmp_path / "s2.dev", tmp_path / "labels.dev")
    _write(tmp_path / "labels.dev", "entailment\nneutral\nhmm\n")
    with pytest.raises(ValueError, match=r"labels\.dev line 3: the label is not one of"):
        read_snli(tmp_path / "s1.dev", tmp_path / "s2.dev", tmp_path / "labels.dev")


def test_stsb_fixture(tmp_path):
    path = _write(tmp_path / "sts-dev.csv",
                  "main-news\tMSRpar\t2012test\t0001\t3.200\tBanks raise rates\tBank increases rates\tsrc\tlic\n"
                  'main-forum\tanswers\t2015\t0002\t0.000\tHe said "no".\tIt rains.\n')
    got = read_stsb(path)
    assert [(e.label, e.id) for e in got] == [(3.2, "main-news/MSRpar/2012test/0001"),
                                              (0.0, "main-forum/answers/2015/0002")]
    assert got[1].text_a == 'He said "no".'
    _write(path, "g\tf\t2012\t1\t5.5\ta\tb\n")
    with pytest.raises(ValueError, match=re.escape(str(path)) + r" line 1: STS score must be in \[0, 5\]"):
        read_stsb(path)


def test_load_task_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="task name must be one of"):
        load_task("mnli")
    with pytest.raises(ValueError, match="split of task rte must be one of"):
        load_task("rte", root=tmp_path, splits=["validation"])
    with pytest.raises(TypeError, match="single str"):
        load_task("rte", root=tmp_path, splits="dev")
    with pytest.raises(ValueError, match="twice"):
        load_task("rte", root=tmp_path, splits=["dev", "dev"])
    with pytest.raises(FileNotFoundError, match=r"rte dev file not found: .*dev\.tsv"):
        load_task("rte", root=tmp_path, splits=["dev"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_task("rte", root=tmp_path / "nowhere")


def test_task_data_checks_labels():
    ex = [TextExample("a", None, 2, "x")]
    with pytest.raises(ValueError, match=r"splits\['dev'\]\[0\] \(id 'x'\) has label 2; expected an int in \[0, 2\)"):
        TaskData("t", {"dev": ex}, ("neg", "pos"), ("accuracy",))
    data = TaskData("t", {"dev": ex}, ("a", "b", "c"), ("accuracy",))
    assert (data.num_labels, data.is_regression, data.sizes) == (3, False, {"dev": 1})
    with pytest.raises(ValueError, match="finite number"):
        TaskData("t", {"dev": [TextExample("a", None, float("nan"), "x")]}, None, ("pearson",))


# ---- read_table ------------------------------------------------------------------------------------------------


def test_read_table_tsv_pairs_names_and_indices(tmp_path):
    # BOM, CRLF, a quote that is text, a label given by name and one by index, a trailing blank line
    path = _write(tmp_path / "mine.tsv", "\ufeffq\tpremise\thypothesis\tgold\r\n"
                                         'a1\tHe said "yes.\tHe spoke.\tentail\r\n'
                                         "a2\tIt rains.\tIt is dry.\t1\r\n\r\n")
    got = read_table(path, text_a="premise", text_b="hypothesis", label="gold", id="q", label_names=["entail", "not"])
    assert got == [TextExample('He said "yes.', "He spoke.", 0, "a1"), TextExample("It rains.", "It is dry.", 1, "a2")]


def test_read_table_tsv_integer_labels_and_line_ids(tmp_path):
    path = _write(tmp_path / "single.tsv", "sentence\tlabel\nfine \t0\nbad\t3\n")
    got = read_table(path, text_a="sentence", label="label")
    assert got == [TextExample("fine ", None, 0, "single.tsv:2"), TextExample("bad", None, 3, "single.tsv:3")]


def test_read_table_jsonl(tmp_path):
    path = _write(tmp_path / "scores.jsonl", '{"s1": "A cat.", "s2": "A kitten.", "y": 4.5, "id": 7}\n'
                                             '{"s1": "A cat.", "s2": "A car.", "y": "0.5", "id": "b"}\n')
    got = read_table(path, text_a="s1", text_b="s2", label="y", id="id", regression=True)
    assert [(e.label, e.id) for e in got] == [(4.5, "7"), (0.5, "b")] and isinstance(got[0].label, float)
    path = _write(tmp_path / "cls.jsonl", '{"text": "good", "label": "pos"}\n{"text": "meh", "label": 0}\n')
    got = read_table(path, text_a="text", label="label", label_names=("neg", "pos"))
    assert [(e.label, e.id) for e in got] == [(1, "cls.jsonl:1"), (0, "cls.jsonl:2")]


def test_read_table_argument_errors(tmp_path):
    path = _write(tmp_path / "t.tsv", "s\tl\na\t0\n")
    with pytest.raises(ValueError, match="not both"):
        read_table(path, text_a="s", label="l", label_names=("a", "b"), regression=True)
    with pytest.raises(ValueError, match="at least 2 class names"):
        read_table(path, text_a="s", label="l", label_names=("a",))
    with pytest.raises(TypeError, match="text_b must be a column name"):
        read_table(path, text_a="s", text_b=1.5, label="l")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "t.xml")) + ".*expected one of tsv, csv, jsonl"):
        read_table(_write(tmp_path / "t.xml", "s,l\na,0\n"), text_a="s", label="l")
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none.tsv"))):
        read_table(tmp_path / "none.tsv", text_a="s", label="l")


BAD_FILES = [  # (file name, content, read_table keywords beyond text_a="s" and label="l", line, message)
    ("no_column.tsv", "s\tlabel\na\t0\n", {}, 1, "no column 'l'; its columns are 's', 'label'"),
    ("no_key.jsonl", '{"s": "a", "l": 0}\n{"s": "b"}\n', {}, 2, "no key 'l'"),
    ("fields.tsv", "s\tl\na\t0\nb\t1\textra\n", {}, 3, "expected 2 tab-separated fields"),
    ("name_label.tsv", "s\tl\na\tpos\n", {}, 2, "label 'pos' in column 'l' is not a class index"),
    ("outside.tsv", "s\tl\na\tneg\nb\t2\n", {"label_names": ("neg", "pos")}, 3, "neither one of neg, pos"),
    ("bool.jsonl", '{"s": "a", "l": true}\n', {}, 1, "is not a class index"),
    ("score.tsv", "s\tl\na\t1.5\nb\thigh\n", {"regression": True}, 3, "must be a finite number"),
    ("latin1.tsv", b"s\tl\na\t0\ncaf\xe9\t1\n", {}, 3, "not UTF-8 text"),
    ("empty.tsv", "", {}, 1, "the file is empty"),
    ("blank.jsonl", "\n  \n", {}, 1, "the file is empty"),
    ("header_only.tsv", "s\tl\n", {}, 2, "no examples after the header"),
    ("blank_text.tsv", "s\tl\na\t0\n \t1\n", {}, 3, "column 's' is blank"),
    ("dup_id.tsv", "i\ts\tl\nx\ta\t0\nx\tb\t1\n", {"id": "i"}, 3, "id 'x' repeats the id of line 2"),
    ("json.jsonl", '{"s": "a", "l": 0}\n{"s": "b", "l": 1\n', {}, 2, "not valid JSON"),
    ("list.jsonl", '["a", 0]\n', {}, 1, "expected a JSON object; got a list"),
    ("dup_header.tsv", "s\ts\tl\na\tb\t0\n", {}, 1, "repeats a column name"),
]


@pytest.mark.parametrize("name, content, kwargs, line, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file_error_names_file_and_line(tmp_path, name, content, kwargs, line, message):
    path = _write(tmp_path / name, content)
    with pytest.raises(ValueError) as info:
        read_table(path, text_a="s", label="l", **kwargs)
    assert str(info.value).startswith("%s line %d: " % (path, line))
    assert message in str(info.value)
