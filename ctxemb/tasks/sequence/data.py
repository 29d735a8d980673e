"""Readers for sentence and sentence-pair fine-tuning data: the shared GLUE-style tasks and a user's own files.

Two layers, as in the similarity readers:

- :func:`read_table` reads one table with named columns (a TSV, CSV, JSONL, JSON or Parquet file, a ``datasets``
  table, a DataFrame or a list: :mod:`ctxemb.io.tables` reads the rows) and knows nothing about where files
  live;
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

File rules, for the shared files and :func:`read_table` alike (other formats: :mod:`ctxemb.io.tables`):

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

import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ctxemb.core.validation import check_choice, check_string_batch, is_int
from ctxemb.io.tables import BadRow, check_keys, is_path, open_rows, row_error
from ctxemb.io.text_files import read_lines
from ctxemb.core.paths import shared_data_dir

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
        label_values: the classes as the data gave them (ints, floats, bools or strings; ``label_names`` are their
            ``str``), for a custom task whose labels were made classes; None where the names are the labels.

    Raises:
        ValueError: if a classification label is not an int in ``[0, len(label_names))``, a regression label is not
            a finite number, or ``label_names``/``metrics`` is empty or repeats a name.
    """

    name: str
    splits: dict[str, list[TextExample]]
    label_names: tuple[str, ...] | None
    metrics: tuple[str, ...]
    label_values: tuple | None = None

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


_read_lines = read_lines  # conll.py's name for it


def _text(value: Any, where: str, column) -> str:
    if not isinstance(value, str):
        raise ValueError("%s: column %r must be a string; got %r" % (where, column, value))
    if not value.strip():
        raise ValueError("%s: column %r is blank" % (where, column))
    return value


def _integer(value: Any) -> int | None:
    """An int from a JSON int or a TSV field such as "1" or "-1"; None when it is neither."""
    if is_int(value):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _label(value: Any, where: str, column, label_names: tuple[str, ...] | None,
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
            raise ValueError("%s: label column %r must be a finite number (a score: regression=True); got %r"
                             % (where, column, value))
        return out
    if label_names is not None:
        if isinstance(value, str) and value in label_names:
            return label_names.index(value)
        index = _integer(value)
        if index is not None and 0 <= index < len(label_names):
            return index
        raise ValueError("%s: label %r in column %r is neither one of %s nor a class index 0-%d"
                         % (where, value, column, ", ".join(label_names), len(label_names) - 1))
    index = _integer(value)
    if index is None or index < 0:
        raise ValueError("%s: label %r in column %r is not a class index (an int >= 0); pass label_names "
                         "to map label names to ids, or regression=True for real-valued scores"
                         % (where, value, column))
    return index


def _example_id(value: Any, where: str, column) -> str:
    if is_int(value):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError("%s: id column %r must be a non-blank string or an int; got %r" % (where, column, value))
    return value


class _UniqueIds:
    """Remembers where each id of one source was, to name both rows of a duplicate."""

    def __init__(self):
        self.seen: dict[str, str] = {}

    def check(self, example_id: str, where: str) -> str:
        first = self.seen.setdefault(example_id, where)
        if first != where:
            # where ends in "line N" or "row I": name the first one's
            raise ValueError("%s: id %r repeats the id of %s" % (where, example_id, " ".join(first.split(" ")[-2:])))
        return example_id


# --------------------------------------------------------------------------------------------------- tables


def _read_examples(source: Any, *, text_a, text_b, label, id_columns: tuple = (),
                   label_names: tuple[str, ...] | None, regression: bool, what: str,
                   split: str | None = None, raw_labels: bool = False) -> list[TextExample]:
    columns = [text_a, label, *id_columns] + ([text_b] if text_b is not None else [])
    table = open_rows(source, required=columns, what=what, split=split)
    if label_names is None and not regression and label in table.class_names:
        label_names = table.class_names[label]  # a datasets ClassLabel column: its ints index these names
        raw_labels = False
    if raw_labels:
        from ctxemb.tasks.sequence.label_classes import class_label
    ids = _UniqueIds()
    out = []
    for n, (where, row) in enumerate(table.rows, 1):
        if isinstance(row, BadRow):
            raise row_error(where, row)
        if table.columns is None:
            check_keys(where, row, columns)
        if id_columns:
            example_id = "-".join(_example_id(row[c], where, c) for c in id_columns)
        elif is_path(source):
            example_id = "%s:%s" % (Path(source).name, where.rpartition(" ")[2])
        else:
            example_id = "%s:%d" % (table.name, n - 1)
        out.append(TextExample(
            text_a=_text(row[text_a], where, text_a),
            text_b=None if text_b is None else _text(row[text_b], where, text_b),
            label=class_label(row[label], where, label) if raw_labels else _label(row[label], where, label,
                                                                                   label_names, regression),
            id=ids.check(example_id, where),
        ))
    return out


def read_table(source: Any, *, text_a: str | int = "sentence", text_b: str | int | None = None,
               label: str | int = "label", id: str | int | None = None, label_names: Iterable[str] | None = None,
               regression: bool = False, split: str | None = None, raw_labels: bool = False) -> list[TextExample]:
    """Read a user's own table of sentences or sentence pairs with named columns.

    ``source`` is any table :func:`ctxemb.io.tables.open_rows` reads: a ``.tsv`` (header, tab-separated,
    quoting off), ``.csv``, ``.jsonl``, ``.json`` or ``.parquet`` file, a directory written by ``datasets``'
    ``save_to_disk``, a ``datasets.Dataset``/``DatasetDict`` (``split`` picks the split), a ``pandas.DataFrame``, or
    a list of dicts or tuples (a tuple's columns are its positions: ``text_a=0, label=1``). See the module
    docstring for the file rules.

    Labels become class ids like this:

    - ``regression=True``: a number (or a text field that parses as one) becomes a float.
    - ``label_names`` given: a label equal to ``label_names[i]`` becomes ``i``; an integer label ``i`` (an int or a
      text field such as ``"1"``) in ``[0, len(label_names))`` stays ``i``. A name is matched first.
    - neither: a ``datasets`` ``ClassLabel`` column gives its names; otherwise the label must be an integer >= 0
      and is used as it is. String labels need ``label_names``, so that every file of a task maps them the same way
      (or ``raw_labels``).
    - ``raw_labels=True`` (and no ``ClassLabel`` column): each label is kept as read, a string, int, float or bool
      (checked by :func:`ctxemb.tasks.sequence.label_classes.class_label`), for
      :func:`~ctxemb.tasks.sequence.label_classes.encode_labels` to make the classes of all of a task's splits at once
      (a custom task without ``label_names`` does).

    Args:
        source: the table (see above).
        text_a: the column of the (first) sentence.
        text_b: the column of the second sentence of a pair; None for single sentences.
        label: the column of the label.
        id: the column of a unique example id; None gives ids ``"<file name>:<line or row>"`` (``"<type>:<row>"``
            for an in-memory table).
        label_names: the class names in class-id order (classification only).
        regression: labels are real-valued scores.
        split: the split of a ``DatasetDict`` (or of a saved one).

    Returns:
        The examples in table order.

    Raises:
        FileNotFoundError: if the file does not exist.
        TypeError: a column that is neither a name nor a position, or a source of another type.
        ImportError: Parquet or ``datasets`` without its package (naming the extra to install).
        ValueError: for an unknown extension, ``label_names`` together with ``regression``, or a bad table (naming
            the file and line, or the row): no column for a requested column (naming the columns there are), a
            wrong field count, a bad label, a blank text or id, a repeated id, invalid JSON, bytes that are not
            UTF-8, or an empty table.
    """
    for name, value in (("text_a", text_a), ("label", label), ("text_b", text_b), ("id", id)):
        if value is None and name in ("text_b", "id"):
            continue
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise TypeError("%s must be a column name (str) or a tuple position (int)%s; got %r"
                            % (name, " or None" if name in ("text_b", "id") else "", value))
    if regression and label_names is not None:
        raise ValueError("label_names is for classification; pass either label_names or regression=True, not both")
    names = None if label_names is None else _check_label_names(label_names, "label_names")
    return _read_examples(source, text_a=text_a, text_b=text_b, label=label, id_columns=() if id is None else (id,),
                          label_names=names, regression=regression, what="a table of examples", split=split,
                          raw_labels=raw_labels and names is None and not regression)


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
    s1 = read_lines(s1_path, "SNLI premises")
    s2 = read_lines(s2_path, "SNLI hypotheses")
    gold = read_lines(labels_path, "SNLI gold labels")
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
        out.append(TextExample(_text(a, "%s line %d" % (s1_path, line_no), "premise"),
                               _text(b, "%s line %d" % (s2_path, line_no), "hypothesis"),
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
    ids = _UniqueIds()
    out = []
    for line_no, line in enumerate(read_lines(path, "STS-B pairs"), 1):
        parts = line.split("\t")
        if len(parts) < 7:
            raise ValueError("%s line %d: expected at least 7 tab-separated fields, got %d: %r"
                             % (path, line_no, len(parts), line[:200]))
        where = "%s line %d" % (path, line_no)
        score = _label(parts[4], where, "score", None, regression=True)
        if not 0.0 <= score <= 5.0:
            raise ValueError("%s line %d: STS score must be in [0, 5]; got %s" % (path, line_no, score))
        out.append(TextExample(_text(parts[5], where, "sentence1"), _text(parts[6], where, "sentence2"),
                               score, ids.check("/".join(parts[:4]), where)))
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
            None reads the shared data folder (``ctxemb.core.paths.shared_data_dir()``).
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
