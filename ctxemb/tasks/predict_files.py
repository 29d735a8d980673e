"""Predictions for a file of inputs (``ctxemb predict DIR --input FILE --output FILE``), for every model kind.

:func:`predict_file` reads rows from any table :func:`ctxemb.io.tables.open_rows` reads (JSONL, CSV, TSV,
plain text with one text per line, JSON, Parquet), in input order, in batches; runs the model's predictor
(:func:`ctxemb.tasks.predictor.load_predictor`); and writes each input row with its prediction appended, as
JSONL or CSV, atomically (:mod:`ctxemb.core.atomic`): a run that stops leaves no partial output.

What a row needs (its *roles*; ``columns`` maps a role to another column name) and what is appended:

=====================  =========================================================  ===================================
model                  roles (defaults)                                           appended columns
=====================  =========================================================  ===================================
sequence (classifier)  ``text`` (the training run's ``text_a``, else              ``predicted_label``, ``score``,
                       ``sentence``; ``sentence1`` for built-in pair tasks),      ``probabilities`` (class -> p)
                       ``text_b`` for pairs (the run's, else ``sentence2``)
sequence (regression,  the same                                                   ``score``
bi-encoder)
tagger / span NER      ``text`` (raw text), or ``tokens`` (pre-tokenized words:   ``entities`` (type, text, start,
                       a list, or a space-separated string in CSV/TSV; the        end, first_word, end_word, score);
                       training's tokens column, else ``tokens``) when mapped     with tokens: ``predicted_tags`` and
                       or when the input has it and no ``text``                   entities by words
QA                     ``question``, ``context``                                  ``answer``, ``answer_start``,
                                                                                  ``answer_end``, ``answer_score``
a registered task      the whole row is the task's input                          ``prediction``
=====================  =========================================================  ===================================

A ``.txt`` input's lines are the ``text`` role whatever the training's column was called. The values equal the
Python predictors' (:class:`~ctxemb.tasks.sequence.predict.SequencePredictor` and the others). In
CSV, a list or dict value (probabilities, entities, tags) is written as JSON text.

Bad rows: a row whose input cannot be used (a missing or blank text, a value of the wrong type, a JSONL line that
is not JSON, a CSV record with a wrong field count) stops the run with a ``ValueError`` naming its line or row
(nothing is written); with ``skip_bad_rows=True`` it is reported through ``on_skip`` (default: a logged warning),
counted in the result, and left out of the output. A problem with the whole file (a missing column, an empty
file) always stops the run, and so does a file that cannot be read as written
(:class:`~ctxemb.io.text_files.MalformedFileError`: a CSV quote that never closes, a stray quote, a NUL
byte, bytes that are not UTF-8), whose later rows could not be told apart.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ctxemb.core.atomic import atomic_write
from ctxemb.training.task_config import load_finetune_config
from ctxemb.tasks.sequence.predict import SequencePredictor
from ctxemb.io.outputs import output_format
from ctxemb.tasks.predictor import load_predictor
from ctxemb.training.task import TaskPredictor
from ctxemb.io.tables import BadRow, is_path, open_rows, resolve_columns
from ctxemb.tasks.token.predict import QAPredictor, TokenPredictor
from ctxemb.models.hub import resolve_model_dir

logger = logging.getLogger(__name__)

_PAIR_TASKS = ("mrpc", "rte", "snli", "stsb")


@dataclass
class PredictFileResult:
    """What :func:`predict_file` did: rows read, rows written, and the skipped rows as (where, reason)."""

    rows: int
    written: int
    skipped: list[tuple[str, str]] = field(default_factory=list)
    output: Path | None = None


class _BadInput(Exception):
    """A row whose input cannot be used; its message is the reason."""


def default_roles(predictor, saved: Mapping[str, Any]) -> dict[str, Any]:
    """The input columns a model's rows are read from by default (see the module docstring)."""
    if isinstance(predictor, SequencePredictor):
        task = saved.get("task")
        if task == "custom":
            cols = resolve_columns(saved.get("columns"), {"text_a": saved.get("text_a", "sentence"),
                                                          "text_b": saved.get("text_b"), "label": None, "id": None},
                                   aliases={"text": "text_a"})
            return {"text": cols["text_a"], "text_b": cols["text_b"]}
        if task in _PAIR_TASKS or saved.get("head") == "cosine":
            return {"text": "sentence1", "text_b": "sentence2"}
        return {"text": "sentence", "text_b": None}
    if isinstance(predictor, TokenPredictor):
        trained = (saved.get("columns") or {}).get("tokens", "tokens")  # a tagger trained from a table
        return {"text": "text", "tokens": trained}
    if isinstance(predictor, QAPredictor):
        return {"question": "question", "context": "context"}
    return {}


def _text(row: Mapping, column) -> str:
    if column not in row:
        raise _BadInput(f"no column {column!r}; its columns are {', '.join(repr(k) for k in row) or 'none'}")
    value = row[column]
    if not isinstance(value, str):
        raise _BadInput(f"column {column!r} must be a string; got {value!r}")
    if not value.strip():
        raise _BadInput(f"column {column!r} is blank")
    return value


def _tokens(row: Mapping, column) -> list[str]:
    if column not in row:
        raise _BadInput(f"no column {column!r}; its columns are {', '.join(repr(k) for k in row) or 'none'}")
    value = row[column]
    words = value.split() if isinstance(value, str) else value
    if not isinstance(words, (list, tuple)) or not words:
        raise _BadInput(f"column {column!r} must be a non-empty list of words (or a space-separated string); "
                        f"got {value!r}")
    for i, w in enumerate(words):
        if not isinstance(w, str) or not w.strip() or any(c.isspace() for c in w):
            raise _BadInput(f"column {column!r}: word {i} must be a non-blank string without spaces; got {w!r}")
    return list(words)


class _Runner:
    """One model kind: the inputs of a row, and the appended columns of a batch of inputs."""

    def __init__(self, predictor, roles: dict[str, Any], batch_size: int, mode: str | None = None):
        self.predictor, self.roles, self.batch_size = predictor, roles, batch_size
        self.mode = mode  # token models: "text" or "tokens"; None: fixed by the first row

    def inputs(self, row: Mapping) -> Any:
        p, r = self.predictor, self.roles
        if isinstance(p, SequencePredictor):
            return _text(row, r["text"]), None if r.get("text_b") is None else _text(row, r["text_b"])
        if isinstance(p, TokenPredictor):
            if self.mode is None:  # schema-less input (JSONL): pre-tokenized if the first row has only tokens
                self.mode = "tokens" if r["tokens"] in row and r["text"] not in row else "text"
            return _tokens(row, r["tokens"]) if self.mode == "tokens" else _text(row, r["text"])
        if isinstance(p, QAPredictor):
            return _text(row, r["question"]), _text(row, r["context"])
        return dict(row)

    def predict(self, inputs: list) -> list[dict[str, Any]]:
        p, n = self.predictor, self.batch_size
        if isinstance(p, SequencePredictor):
            pairs = [b for _, b in inputs] if inputs[0][1] is not None else None
            out = []
            for pred in p.predict([a for a, _ in inputs], pairs, batch_size=n):
                if pred.label is None:
                    out.append({"score": pred.score})
                else:
                    out.append({"predicted_label": pred.label, "score": pred.score,
                                "probabilities": pred.probabilities})
            return out
        if isinstance(p, TokenPredictor):
            if self.mode == "tokens":
                tags = p.tag_words(inputs, batch_size=n)
                from ctxemb.tasks.token.features import bio_to_entities

                return [{"predicted_tags": t, "entities": [
                    {"type": etype, "text": " ".join(words[a:b]), "first_word": a, "end_word": b}
                    for etype, a, b in bio_to_entities(t)]} for words, t in zip(inputs, tags)]
            return [{"entities": [e.__dict__ for e in ents]} for ents in p.entities(inputs, batch_size=n)]
        if isinstance(p, QAPredictor):
            answers = p.answer([q for q, _ in inputs], [c for _, c in inputs], batch_size=n)
            return [{"answer": a.text, "answer_start": a.start_char, "answer_end": a.end_char,
                     "answer_score": a.score} for a in answers]
        return [{"prediction": x} for x in p.predict(inputs)]


class _Writer:
    def __init__(self, f, fmt: str):
        self.f, self.fmt, self.csv, self.fields = f, fmt, None, None

    def write(self, where: str, record: dict[str, Any]) -> None:
        if self.fmt == "jsonl":
            self.f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            return
        if self.csv is None:
            self.fields = list(record)
            self.csv = csv.writer(self.f, lineterminator="\n")
            self.csv.writerow([str(k) for k in self.fields])
        extra = [k for k in record if k not in self.fields]
        if extra:
            raise ValueError(f"{where}: columns {', '.join(repr(k) for k in extra)} are not in the first row's "
                             f"columns, which the CSV header holds; write JSONL for rows of varying columns")
        self.csv.writerow(["" if record.get(k) is None else _cell(record[k]) for k in self.fields])


def _cell(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (list, dict, tuple)) else value


def predict_file(model: Any, input: str | os.PathLike, output: str | os.PathLike, *,
                 columns: Mapping[str, Any] | None = None, input_format: str | None = None,
                 format: str | None = None, batch_size: int = 32, skip_bad_rows: bool = False,
                 progress_bar: bool = True, device: str = "cpu",
                 on_skip: Callable[[str, str], None] | None = None) -> PredictFileResult:
    """Predict for every row of ``input`` and write the rows with their predictions to ``output``.

    Args:
        model: a model directory written by ``ctxemb finetune`` (its predictor and its training columns are
            loaded), or a predictor object (then the default columns are ``sentence``, ``text``, ``question`` and
            ``context``: see the module docstring).
        input: the input file (JSONL, CSV, TSV, TXT, JSON or Parquet, by extension or ``input_format``).
        output: the output file, written atomically.
        columns: role -> input column, overriding the defaults (e.g. ``{"text": "review"}``).
        input_format: the input's format when its extension does not say it.
        format: ``"jsonl"`` or ``"csv"``; None: from the output's extension.
        batch_size: rows per model batch (and per streamed chunk).
        skip_bad_rows: skip (and report) rows whose input cannot be used instead of stopping at the first.
        progress_bar: show a tqdm bar on stderr.
        device: torch device when ``model`` is a directory.
        on_skip: called with (where, reason) for each skipped row; default: a logged warning.

    Returns:
        A :class:`PredictFileResult`.

    Raises:
        ValueError: a bad row (naming its line or row; unless ``skip_bad_rows``), a missing column, an empty input,
            an unknown format, a prediction column that the input already has, ``output`` equal to ``input``, or
            every row bad.
        FileNotFoundError: a missing input file or model directory.
    """
    from tqdm.auto import tqdm

    from ctxemb.core.validation import check_int

    batch_size = check_int(batch_size, "batch_size", low=1)
    fmt = output_format(output, format)
    if Path(output).resolve() == Path(input).resolve():
        raise ValueError(f"output {output} is the input file; write the predictions elsewhere")
    if is_path(model):
        predictor = load_predictor(model, device=device)
        saved = load_finetune_config(resolve_model_dir(model)) or {}
    else:
        predictor, saved = model, {}
    defaults = default_roles(predictor, saved)
    if isinstance(predictor, TaskPredictor) and columns:
        raise ValueError("columns does not apply to a registered task's model: each row is its input as a whole")
    roles = resolve_columns(columns, defaults, aliases={"text_a": "text"} if "text" in defaults else None)
    table = open_rows(input, what="inputs to predict for", format=input_format)
    if (input_format or Path(input).suffix.lower().lstrip(".")) == "txt" and "text" in roles \
            and "text" not in (columns or {}):
        roles["text"] = "text"  # plain text: its one column is the text, whatever the training called it
    mode = None
    if isinstance(predictor, TokenPredictor):
        if columns and ("tokens" in columns) != ("text" in columns):
            mode = "tokens" if "tokens" in columns else "text"  # the role the user mapped
        elif table.columns is not None:  # pre-tokenized input: a tokens column and no text column
            mode = "tokens" if roles["tokens"] in table.columns and roles["text"] not in table.columns else "text"
        if mode is not None:
            roles.pop("text" if mode == "tokens" else "tokens")
    if table.columns is not None:
        needed = [c for c in roles.values() if c is not None]
        missing = [c for c in needed if c not in table.columns]
        if missing:
            role = next(r for r, c in roles.items() if c == missing[0])
            raise ValueError("%s: no column %s; its columns are %s: read role %r from one of them with --columns "
                             "%s=COLUMN (Python: columns={%r: COLUMN})"
                             % (table.name, ", ".join(repr(c) for c in missing),
                                ", ".join(repr(c) for c in table.columns), role, role, role))
    runner = _Runner(predictor, roles, batch_size, mode)
    report = on_skip or (lambda where, reason: logger.warning("%s: skipped: %s", where, reason))
    result = PredictFileResult(rows=0, written=0, output=Path(output))
    with atomic_write(output, "w", encoding="utf-8", newline="") as f:
        writer = _Writer(f, fmt)
        batch: list[tuple[str, Mapping, Any]] = []

        def flush() -> None:
            for (where, row, _), pred in zip(batch, runner.predict([x for _, _, x in batch])):
                clash = [k for k in pred if k in row]
                if clash:
                    raise ValueError(f"{where}: the input already has a column {clash[0]!r}, which the predictions "
                                     f"add; rename it")
                writer.write(where, {**row, **pred})
                result.written += 1
            batch.clear()

        bar = tqdm(table.rows, desc="predict", unit="row", disable=True if not progress_bar else None)
        for where, row in bar:
            result.rows += 1
            try:
                if isinstance(row, BadRow):
                    raise _BadInput(row.reason)
                inputs = runner.inputs(row)
            except _BadInput as e:
                if not skip_bad_rows:
                    raise ValueError(f"{where}: {e} (skip such rows with skip_bad_rows / --skip-bad-rows)") from None
                result.skipped.append((where, str(e)))
                report(where, str(e))
                continue
            batch.append((where, row, inputs))
            if len(batch) == batch_size:
                flush()
        if batch:
            flush()
        if result.written == 0:
            raise ValueError(f"{table.name}: all {result.rows} rows were bad; nothing was written")
    return result
