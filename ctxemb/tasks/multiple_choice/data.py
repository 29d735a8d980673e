"""Multiple-choice questions from tables: one row per question, with a context, a list of choices and the index of
the right one (JSONL, JSON, Parquet, a ``datasets`` table; :func:`ctxemb.io.tables.open_rows`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxemb.io.tables import BadRow, open_rows, row_error

__all__ = ["ChoiceQuestion", "question_from_input", "read_questions"]


@dataclass(frozen=True)
class ChoiceQuestion:
    """A context, its C choices, and the right choice's index (None when unknown)."""

    context: str
    choices: tuple[str, ...]
    label: int | None
    id: str


def _question(row: Any, where: str, *, context: str, choices: str, label: str | None) -> ChoiceQuestion:
    if not isinstance(row, dict) or not isinstance(row.get(context), str):
        raise ValueError(f"{where}: needs a text in column {context!r}; got {row!r:.200}")
    options = row.get(choices)
    if not isinstance(options, (list, tuple)) or len(options) < 2 or not all(isinstance(c, str) for c in options):
        raise ValueError(f"{where}: column {choices!r} must hold a list of at least two texts; got {options!r:.200}")
    gold = None
    if label is not None:
        gold = row.get(label)
        if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(options):
            raise ValueError(f"{where}: column {label!r} must be the right choice's index in [0, {len(options)}); "
                             f"got {gold!r}")
    return ChoiceQuestion(row[context], tuple(options), gold, str(row.get("id", where)))


def read_questions(source, *, context: str = "context", choices: str = "choices", label: str | None = "label",
                   split: str | None = None) -> list[ChoiceQuestion]:
    """The questions of a table, in order.

    Raises:
        ValueError: an empty table, a row without a context, with fewer than two choices, a label outside the
            choices, or rows with different numbers of choices (a batch holds one number); each names the row.
    """
    table = open_rows(source, what="multiple-choice questions (context, choices, label)", split=split)
    out: list[ChoiceQuestion] = []
    for where, row in table.rows:
        if isinstance(row, BadRow):
            raise row_error(where, row)
        q = _question(dict(row), where, context=context, choices=choices, label=label)
        if out and len(q.choices) != len(out[0].choices):
            raise ValueError(f"{where}: {len(q.choices)} choices, but the first question of {table.name} has "
                             f"{len(out[0].choices)}; every question of a file needs the same number")
        out.append(q)
    if not out:
        raise ValueError(f"{table.name} holds no questions")
    return out


def question_from_input(value: Any, index: int, *, context: str = "context",
                        choices: str = "choices") -> ChoiceQuestion:
    """A question to predict from one input (a mapping with the context and choices columns)."""
    return _question(dict(value) if isinstance(value, dict) else value, f"input {index}", context=context,
                     choices=choices, label=None)
