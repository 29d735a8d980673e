"""Readers for sentence and sentence-pair fine-tuning data: the shared GLUE-style tasks and a user's own files.

Two layers, as in the similarity readers:

- :func:`read_table` reads one TSV or JSONL file with named columns and knows nothing about where files live;
- :func:`load_task` maps a task name and split names to the files of the shared data folder
  (``shared_data_dir() / "finetune" / <task>``; STS-B is read from ``shared_data_dir() / "similarity" / "stsb"``)
  and returns a :class:`TaskData`.

Every example is one :class:`TextExample`. Class labels are ints in ``[0, len(label_names))`` with the same order
GLUE and the HF datasets use:

========  =====================================================  ===============================  ==================
task      files                                                  label ids                        metrics
========  =====================================================  ===============================  ==================
sst2      ``alps_{train,dev,test}.tsv``                          0 negative, 1 positive           accuracy
mrpc      ``msr-para-{train,val,test}.tsv`` (MSRP = GLUE MRPC)   0 not_equivalent, 1 equivalent   accuracy, f1
rte       ``{train,dev}.tsv``                                    0 entailment, 1 not_entailment   accuracy
snli      ``{s1,s2,labels}.<split>``                             0 entailment, 1 neutral,         accuracy
                                                                 2 contradiction
stsb      ``sts-<split>.csv`` (tab-separated)                    none: a float score in [0, 5]    pearson, spearman
========  =====================================================  ===============================  ==================

Splits and the protocol. Tune (model selection, early stopping, hyperparameters) on ``dev`` only. ``test`` is held
back for independent evaluation: the readers read it when it is there, but nothing in a tuning loop should.
What each task's splits are:

- sst2: ``train`` and ``dev`` are the ALPS split of GLUE's training set (60,614 + 6,735 = 67,349); ``test`` is
  GLUE's dev set (872), the split papers report.
- mrpc: ``train`` 3,576, ``dev`` 500 (``msr-para-val.tsv``: the last 500 training pairs), ``test`` 1,725.
- rte: ``train`` 2,490, ``dev`` 277. GLUE withholds the test labels (``test.tsv`` holds -1), so asking for
  ``test`` raises: papers report RTE on dev.
- snli: only ``dev`` (9,842) and ``test`` (9,824) are shared; ``train`` is read when ``root`` holds it. Pairs whose
  gold label is ``-`` (no annotator majority) are skipped and their number logged, as everyone does.
- stsb: ``train`` 5,749, ``dev`` 1,500; ``test`` is held out of the shared folder (pass ``root`` to your copy).
  Pairs, scores and ids are exactly those of :func:`ctxemb.evaluation.similarity.data.read_stsb` (this module sits
  below evaluation in the layering, so it has its own few-line parser).

File rules, for the shared files and :func:`read_table` alike:

- UTF-8 (a byte-order mark is allowed), LF or CRLF line ends, no empty file.
- TSV: a header line naming the columns, then one example per line with exactly as many tab-separated fields.
  Quoting is off: a quote character is text, as GLUE's own files need (MRPC and RTE hold unbalanced quotes), so a
  field can hold neither a tab nor a line break.
- JSONL: one JSON object per line.
- Texts are kept exactly as written (tokenizers ignore surrounding spaces); a blank text is an error.
- A file with no id column gives each example the id ``"<file name>:<line number>"``; ids are unique per file.

Every problem with a file raises one error that names the file and the line: ``FileNotFoundError`` for a missing
file, ``ValueError`` for the rest (missing column, wrong field count, bad label, blank text, duplicate id, bytes
that are not UTF-8, an empty file).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ctxemb._validation import check_choice, check_string_batch, is_int
from ctxemb.paths import shared_data_dir

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

TASKS = ("sst2", "mrpc", "rte", "snli", "stsb")


# --------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class TextExample:
    """One labelled sentence or sentence pair.

    Attributes:
        text_a: the sentence (or the first of the pair: premise, sentence1), as written in the file.
        text_b: the second sentence of a pair (hypothesis, sentence2); None for single-sentence tasks.
        label: the class id, an int in ``[0, len(label_names))``; a float for regression (STS-B's score).
        id: the example's id, unique within its file (the file's own id column, else ``"<file name>:<line>"``).
    """

    text_a: str
    text_b: str | None
    label: int | float
    id: str


@dataclass(frozen=True)
class TaskData:
    """The splits of one fine-tuning task and what its labels mean.

    Attributes:
        name: the task's name (e.g. "rte").
        splits: split name ("train", "dev", "test") -> its examples in file order.
        label_names: ``label_names[i]`` is the name of class id ``i``; None for a regression task.
        metrics: the names of the metrics the task is reported with, first the main one (e.g. ("accuracy", "f1")).

    Raises:
        ValueError: if a classification label is not an int in ``[0, len(label_names))``, a regression label is not
            a finite number, or ``label_names``/``metrics`` is empty or repeats a name.
    """

    name: str
    splits: dict[str, list[TextExample]]
    label_names: tuple[str, ...] | None
    metrics: tuple[str, ...]

    def __post_init__(self):
        if self.label_names is not None:
            object.__setattr__(self, "label_names", _check_label_names(self.label_names, "label_names"))
        metrics = tuple(check_string_batch(self.metrics, "metrics"))
        if len(set(metrics)) != len(metrics):
            raise ValueError("metrics repeats a name: %r" % (metrics,))
        object.__setattr__(self, "metrics", metrics)
        for split, examples in self.splits.items():
            for i, ex in enumerate(examples):
                if self.label_names is None:
                    ok = _is_number(ex.label) and math.isfinite(ex.label)
                    want = "a finite number (regression task)"
                else:
                    ok = is_int(ex.label) and 0 <= ex.label < len(self.label_names)
                    want = "an int in [0, %d)" % len(self.label_names)
                if not ok:
                    raise ValueError("task %s: splits[%r][%d] (id %r) has label %r; expected %s"
                                     % (self.name, split, i, ex.id, ex.label, want))

    @property
    def is_regression(self) -> bool:
        """True when labels are real-valued scores (``label_names`` is None)."""
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        """The number of classes; 1 (one output) for a regression task."""
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def sizes(self) -> dict[str, int]:
        """Split name -> number of examples."""
        return {split: len(examples) for split, examples in self.splits.items()}


# --------------------------------------------------------------------------------------------------- file helpers


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_label_names(names, what: str) -> tuple[str, ...]:
    names = tuple(check_string_batch(names, what))
    if len(names) < 2:
        raise ValueError("%s needs at least 2 class names; got %r" % (what, names))
    if len(set(names)) != len(names):
        raise ValueError("%s repeats a name: %r" % (what, names))
    return names


def _read_lines(path: Path, what: str) -> list[str]:
    """The lines of a UTF-8 text file (BOM dropped; LF, CRLF or CR ends), trailing blank lines dropped.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a byte sequence is not UTF-8 (naming its line), or the file holds nothing but blank lines.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError("%s not found (it should hold %s)" % (path, what)) from None
    except IsADirectoryError:
        raise FileNotFoundError("%s is a directory, not a file (it should hold %s)" % (path, what)) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError("%s line %d: not UTF-8 text (byte 0x%02x: %s); save the file as UTF-8"
                         % (path, line, data[e.start], e.reason)) from None
    lines = re.split(r"\r\n|\n|\r", text)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError("%s line 1: the file is empty (it should hold %s)" % (path, what))
    return lines


def _text(value: Any, path: Path, line_no: int, column: str) -> str:
    if not isinstance(value, str):
        raise ValueError("%s line %d: column %r must be a string; got %r" % (path, line_no, column, value))
    if not value.strip():
        raise ValueError("%s line %d: column %r is blank" % (path, line_no, column))
    return value


def _integer(value: Any) -> int | None:
    """An int from a JSON int or a TSV field such as "1" or "-1"; None when it is neither."""
    if is_int(value):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _label(value: Any, path: Path, line_no: int, column: str, label_names: tuple[str, ...] | None,
           regression: bool) -> int | float:
    """Map a label field to a class id (a name in ``label_names``, else an index) or, for regression, a float."""
    if regression:
        out = None
        if _is_number(value):
            out = float(value)
        elif isinstance(value, str):
            try:
                out = float(value)
            except ValueError:
                pass
        if out is None or not math.isfinite(out):
            raise ValueError("%s line %d: label column %r must be a finite number (regression); got %r"
                             % (path, line_no, column, value))
        return out
    if label_names is not None:
        if isinstance(value, str) and value in label_names:
            return label_names.index(value)
        index = _integer(value)
        if index is not None and 0 <= index < len(label_names):
            return index
        raise ValueError("%s line %d: label %r in column %r is neither one of %s nor a class index 0-%d"
                         % (path, line_no, value, column, ", ".join(label_names), len(label_names) - 1))
    index = _integer(value)
    if index is None or index < 0:
        raise ValueError("%s line %d: label %r in column %r is not a class index (an int >= 0); pass label_names "
                         "to map label names to ids, or regression=True for real-valued scores"
                         % (path, line_no, value, column))
    return index


def _example_id(value: Any, path: Path, line_no: int, column: str) -> str:
    if is_int(value):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError("%s line %d: id column %r must be a non-blank string or an int; got %r"
                         % (path, line_no, column, value))
    return value


class _UniqueIds:
    """Remembers the line of each id of one file, to name both lines of a duplicate."""

    def __init__(self, path: Path):
        self.path = path
        self.seen: dict[str, int] = {}

    def check(self, example_id: str, line_no: int) -> str:
        first = self.seen.setdefault(example_id, line_no)
        if first != line_no:
            raise ValueError("%s line %d: id %r repeats the id of line %d" % (self.path, line_no, example_id, first))
        return example_id


# --------------------------------------------------------------------------------------------------- tables


def _tsv_rows(path: Path, required: Iterable[str], what: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, column -> field) for each example line of a headed, unquoted TSV file."""
    lines = _read_lines(path, what)
    header = [name.strip() for name in lines[0].split("\t")]
    if len(set(header)) != len(header):
        raise ValueError("%s line 1: the header repeats a column name: %r" % (path, header))
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError("%s line 1: the header has no column %s; its columns are %s"
                         % (path, ", ".join(repr(c) for c in missing), ", ".join(repr(c) for c in header)))
    if len(lines) == 1:
        raise ValueError("%s line 2: no examples after the header" % path)
    for line_no, line in enumerate(lines[1:], 2):
        fields = line.split("\t")
        if len(fields) != len(header):
            raise ValueError("%s line %d: expected %d tab-separated fields (as in the header), got %d: %r"
                             % (path, line_no, len(header), len(fields), line[:200]))
        yield line_no, dict(zip(header, fields))


def _jsonl_rows(path: Path, required: Iterable[str], what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each line of a JSONL file, each checked for the required keys."""
    required = list(required)
    for line_no, line in enumerate(_read_lines(path, what), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError("%s line %d: not valid JSON (%s): %r" % (path, line_no, e.msg, line[:200])) from None
        if not isinstance(row, dict):
            raise ValueError("%s line %d: expected a JSON object; got a %s" % (path, line_no, type(row).__name__))
        missing = [c for c in required if c not in row]
        if missing:
            raise ValueError("%s line %d: no key %s; its keys are %s" % (
                path, line_no, ", ".join(repr(c) for c in missing), ", ".join(repr(k) for k in row) or "none"))
        yield line_no, row


def _read_examples(path: Path, *, text_a: str, text_b: str | None, label: str, id_columns: tuple[str, ...],
                   label_names: tuple[str, ...] | None, regression: bool, what: str) -> list[TextExample]:
    columns = [text_a, label, *id_columns] + ([text_b] if text_b is not None else [])
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        rows: Iterator[tuple[int, Mapping[str, Any]]] = _tsv_rows(path, columns, what)
    elif suffix == ".jsonl":
        rows = _jsonl_rows(path, columns, what)
    else:
        raise ValueError("%s: cannot tell the format from the extension %r; expected .tsv or .jsonl"
                         % (path, path.suffix))
    ids = _UniqueIds(path)
    out = []
    for line_no, row in rows:
        if id_columns:
            example_id = "-".join(_example_id(row[c], path, line_no, c) for c in id_columns)
        else:
            example_id = "%s:%d" % (path.name, line_no)
        out.append(TextExample(
            text_a=_text(row[text_a], path, line_no, text_a),
            text_b=None if text_b is None else _text(row[text_b], path, line_no, text_b),
            label=_label(row[label], path, line_no, label, label_names, regression),
            id=ids.check(example_id, line_no),
        ))
    return out


def read_table(path: PathLike, *, text_a: str, text_b: str | None = None, label: str, id: str | None = None,
               label_names: Iterable[str] | None = None, regression: bool = False) -> list[TextExample]:
    """Read a user's own TSV or JSONL file of sentences or sentence pairs with named columns.

    The format comes from the extension: ``.tsv`` (a header line, then tab-separated fields, quoting off) or
    ``.jsonl`` (one JSON object per line, the columns being its keys). See the module docstring for the file rules.

    Labels become class ids like this:

    - ``regression=True``: a number (or a TSV field that parses as one) becomes a float.
    - ``label_names`` given: a label equal to ``label_names[i]`` becomes ``i``; an integer label ``i`` (a JSON int
      or a TSV field such as ``"1"``) in ``[0, len(label_names))`` stays ``i``. A name is matched first.
    - neither: the label must be an integer >= 0 and is used as it is. String labels need ``label_names``, so that
      every file of a task maps them the same way.

    Args:
        path: the ``.tsv`` or ``.jsonl`` file.
        text_a: the column of the (first) sentence.
        text_b: the column of the second sentence of a pair; None for single sentences.
        label: the column of the label.
        id: the column of a unique example id; None gives ids ``"<file name>:<line number>"``.
        label_names: the class names in class-id order (classification only).
        regression: labels are real-valued scores.

    Returns:
        The examples in file order.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: for an unknown extension, ``label_names`` together with ``regression``, or a bad file (naming
            the file and line): no header column or key for a requested column, a wrong field count, a bad label, a
            blank text or id, a repeated id, invalid JSON, bytes that are not UTF-8, or an empty file.
    """
    for name, value in (("text_a", text_a), ("label", label)):
        if not isinstance(value, str):
            raise TypeError("%s must be a column name (str); got %r" % (name, value))
    for name, value in (("text_b", text_b), ("id", id)):
        if value is not None and not isinstance(value, str):
            raise TypeError("%s must be a column name (str) or None; got %r" % (name, value))
    if regression and label_names is not None:
        raise ValueError("label_names is for classification; pass either label_names or regression=True, not both")
    names = None if label_names is None else _check_label_names(label_names, "label_names")
    return _read_examples(Path(path), text_a=text_a, text_b=text_b, label=label,
                          id_columns=() if id is None else (id,), label_names=names, regression=regression,
                          what="a table of examples")


# --------------------------------------------------------------------------------------------------- task readers


SST2_LABELS = ("negative", "positive")
MRPC_LABELS = ("not_equivalent", "equivalent")
RTE_LABELS = ("entailment", "not_entailment")
SNLI_LABELS = ("entailment", "neutral", "contradiction")


def _read_sst2(path: Path) -> list[TextExample]:
    return _read_examples(path, text_a="sentence", text_b=None, label="label", id_columns=(),
                          label_names=SST2_LABELS, regression=False, what="SST-2 sentences")


def _read_mrpc(path: Path) -> list[TextExample]:
    # Quality is 1 for a paraphrase; the pair's id joins the two sentence ids ("702876-702977"), unique per file.
    return _read_examples(path, text_a="#1 String", text_b="#2 String", label="Quality",
                          id_columns=("#1 ID", "#2 ID"), label_names=MRPC_LABELS, regression=False,
                          what="MSRP/MRPC pairs")


def _read_rte(path: Path) -> list[TextExample]:
    return _read_examples(path, text_a="sentence1", text_b="sentence2", label="label", id_columns=("idx",),
                          label_names=RTE_LABELS, regression=False, what="RTE pairs")


def read_snli(s1_path: PathLike, s2_path: PathLike, labels_path: PathLike) -> list[TextExample]:
    """Read SNLI in the one-sentence-per-line layout: premises, hypotheses and gold labels in three parallel files.

    Pairs whose gold label is ``-`` (the annotators reached no majority) are skipped; their number is logged.
    Ids are ``"<premise file name>:<line number>"``, so they keep pointing at the right line after a skip.

    Raises:
        FileNotFoundError: if a file does not exist.
        ValueError: if the files have different numbers of lines, a label is not entailment, neutral, contradiction
            or ``-``, a sentence is blank, or a file is empty or not UTF-8 (naming the file and line).
    """
    s1_path, s2_path, labels_path = Path(s1_path), Path(s2_path), Path(labels_path)
    s1 = _read_lines(s1_path, "SNLI premises")
    s2 = _read_lines(s2_path, "SNLI hypotheses")
    gold = _read_lines(labels_path, "SNLI gold labels")
    if not len(s1) == len(s2) == len(gold):
        counts = {s1_path: len(s1), s2_path: len(s2), labels_path: len(gold)}
        short, longest = min(counts, key=counts.get), max(counts, key=counts.get)
        raise ValueError("%s line %d: missing; the file ends after %d lines but %s has %d (SNLI's three files "
                         "hold one line per pair)"
                         % (short, counts[short] + 1, counts[short], longest, counts[longest]))
    out, skipped = [], 0
    for line_no, (a, b, g) in enumerate(zip(s1, s2, gold), 1):
        g = g.strip()
        if g == "-":
            skipped += 1
            continue
        if g not in SNLI_LABELS:
            raise ValueError("%s line %d: the label is not one of %s or '-'; got %r"
                             % (labels_path, line_no, ", ".join(SNLI_LABELS), g))
        out.append(TextExample(_text(a, s1_path, line_no, "premise"), _text(b, s2_path, line_no, "hypothesis"),
                               SNLI_LABELS.index(g), "%s:%d" % (s1_path.name, line_no)))
    if skipped:
        logger.info("%s: skipped %d of %d pairs whose gold label is '-' (no annotator majority)",
                    labels_path, skipped, len(gold))
    return out


def read_stsb(path: PathLike) -> list[TextExample]:
    """Read an STS Benchmark ``sts-*.csv`` file as regression examples (label = the 0-5 score).

    Lines are tab-separated ``genre, filename, year, id, score, sentence1, sentence2`` with optional licence fields
    after sentence2; quotes are text. Pairs, scores and ids ("genre/filename/year/id") are those of
    :func:`ctxemb.evaluation.similarity.data.read_stsb`.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: on a line with fewer than 7 fields, a score that is not a number in [0, 5], a blank sentence,
            or an empty or non-UTF-8 file (naming the file and line).
    """
    path = Path(path)
    ids = _UniqueIds(path)
    out = []
    for line_no, line in enumerate(_read_lines(path, "STS-B pairs"), 1):
        parts = line.split("\t")
        if len(parts) < 7:
            raise ValueError("%s line %d: expected at least 7 tab-separated fields, got %d: %r"
                             % (path, line_no, len(parts), line[:200]))
        score = _label(parts[4], path, line_no, "score", None, regression=True)
        if not 0.0 <= score <= 5.0:
            raise ValueError("%s line %d: STS score must be in [0, 5]; got %s" % (path, line_no, score))
        out.append(TextExample(_text(parts[5], path, line_no, "sentence1"), _text(parts[6], path, line_no, "sentence2"),
                               score, ids.check("/".join(parts[:4]), line_no)))
    return out


# --------------------------------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class _TaskSpec:
    """Where one task's files are and how to read them.

    Attributes:
        folder: the task's folder under the shared data folder.
        files: split -> the file(s) of that split, relative to the task's folder.
        read: reads the files of one split.
        shared: the splits the shared data folder holds (the default of ``load_task``).
        unlabelled: splits whose published file has no gold labels.
    """

    folder: tuple[str, ...]
    files: dict[str, tuple[str, ...]]
    read: Callable[..., list[TextExample]]
    shared: tuple[str, ...]
    label_names: tuple[str, ...] | None
    metrics: tuple[str, ...]
    unlabelled: tuple[str, ...] = ()


_SPECS: dict[str, _TaskSpec] = {
    "sst2": _TaskSpec(("finetune", "sst2"), {s: ("alps_%s.tsv" % s,) for s in ("train", "dev", "test")},
                      _read_sst2, ("train", "dev", "test"), SST2_LABELS, ("accuracy",)),
    "mrpc": _TaskSpec(("finetune", "msrp"),
                      {"train": ("msr-para-train.tsv",), "dev": ("msr-para-val.tsv",), "test": ("msr-para-test.tsv",)},
                      _read_mrpc, ("train", "dev", "test"), MRPC_LABELS, ("accuracy", "f1")),
    "rte": _TaskSpec(("finetune", "rte"), {s: ("%s.tsv" % s,) for s in ("train", "dev", "test")},
                     _read_rte, ("train", "dev"), RTE_LABELS, ("accuracy",), unlabelled=("test",)),
    "snli": _TaskSpec(("finetune", "snli"), {s: tuple("%s.%s" % (f, s) for f in ("s1", "s2", "labels"))
                                             for s in ("train", "dev", "test")},
                      read_snli, ("dev", "test"), SNLI_LABELS, ("accuracy",)),
    "stsb": _TaskSpec(("similarity", "stsb"), {s: ("sts-%s.csv" % s,) for s in ("train", "dev", "test")},
                      read_stsb, ("train", "dev"), None, ("pearson", "spearman")),
}


def task_dir(name: str, root: PathLike | None = None) -> Path:
    """The folder of task ``name``'s files: ``root`` if given, else its place in the shared data folder.

    Raises:
        ValueError: for an unknown task.
        FileNotFoundError: if the folder does not exist (or the shared data folder cannot be found).
    """
    spec = _SPECS[check_choice(name, "task name", TASKS)]
    path = Path(root) if root is not None else shared_data_dir().joinpath(*spec.folder)
    if not path.is_dir():
        raise FileNotFoundError("data folder of task %s does not exist: %s" % (name, path))
    return path


def load_task(name: str, *, root: PathLike | None = None, splits: Iterable[str] | None = None) -> TaskData:
    """Load the splits of a fine-tuning task (see the module docstring for the files, label ids and split sizes).

    Tune on ``dev``; ``test`` is held back for independent evaluation and is read only when asked for (it is part
    of the default for sst2, mrpc and snli, whose test files are shared: keep it out of any tuning loop).

    Args:
        name: one of :data:`TASKS`: "sst2", "mrpc" (the MSRP files), "rte", "snli", "stsb".
        root: the folder that holds the task's files under their published names (e.g. ``train.tsv`` for RTE);
            None reads the shared data folder (``ctxemb.paths.shared_data_dir()``).
        splits: the split names to read, e.g. ("train", "dev"); None reads every split the shared folder holds
            for the task.

    Returns:
        A :class:`TaskData` with the splits in the order asked for.

    Raises:
        ValueError: for an unknown task or split, a split given twice, an unlabelled split (RTE test), or a bad file.
        FileNotFoundError: if the task's folder or a split's file is missing (saying when a split is held out of
            the shared folder).
        TypeError: if ``splits`` is a single string.
    """
    check_choice(name, "task name", TASKS)
    spec = _SPECS[name]
    wanted = spec.shared if splits is None else tuple(check_string_batch(splits, "splits"))
    for split in wanted:
        check_choice(split, "split of task %s" % name, tuple(spec.files))
        if split in spec.unlabelled:
            raise ValueError("the %s split of task %s has no gold labels (its published file holds none): "
                             "evaluate on dev, as papers report it" % (split, name))
    if len(set(wanted)) != len(wanted):
        raise ValueError("splits names a split twice: %r" % (wanted,))
    base = task_dir(name, root)
    data = {}
    for split in wanted:
        paths = [base / f for f in spec.files[split]]
        for path in paths:
            if not path.is_file():
                held = "" if split in spec.shared else (
                    " (the shared data folder holds only the %s split(s) of %s: the others are held out for "
                    "independent evaluation or not distributed; pass root= a folder with your own copy)"
                    % ("/".join(spec.shared), name))
                raise FileNotFoundError("%s %s file not found: %s%s" % (name, split, path, held))
        data[split] = spec.read(*paths)
        logger.debug("%s %s: %d examples from %s", name, split, len(data[split]), base)
    return TaskData(name=name, splits=data, label_names=spec.label_names, metrics=spec.metrics)
