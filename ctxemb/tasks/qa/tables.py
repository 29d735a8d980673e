"""Extractive-QA examples from tables: one question per row, in the layout of Hugging Face's ``squad`` dataset.

The table counterpart of :func:`ctxemb.tasks.qa.squad.read_squad` for any source
:func:`ctxemb.io.tables.open_rows` reads (JSONL, CSV, Parquet, a ``datasets`` table or directory, a
DataFrame, a list of dicts). Columns (roles, renamed with ``columns``): ``id``, ``title`` (optional: a missing
column gives ``""``), ``context``, ``question``, and ``answers``: ``{"text": [...], "answer_start": [...]}`` as
``datasets`` stores it, a list of ``{"text", "answer_start"}`` objects as SQuAD's JSON does, or either as JSON text
(a CSV cell). Every answer must be the passage's text at its offset, as ``read_squad`` checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ctxemb.core.validation import is_int
from ctxemb.tasks.qa.squad import QAExample
from ctxemb.io.tables import BadRow, check_keys, is_path, open_rows, row_error

QA_ROLES = {"id": "id", "title": "title", "context": "context", "question": "question", "answers": "answers"}


def is_qa_table(source: Any) -> bool:
    """Whether ``squad-file`` reads ``source`` as a table: anything but a ``.json`` file (SQuAD's own layout)."""
    return not (is_path(source) and Path(source).suffix.lower() == ".json")


def _answers(value: Any, where: str, column, context: str) -> tuple[tuple[str, int], ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError("%s: column %r is not JSON answers (%s): %r" % (where, column, e.msg, value[:200])) from None
    if isinstance(value, Mapping) and set(value) >= {"text", "answer_start"}:
        texts, starts = value["text"], value["answer_start"]
        if not isinstance(texts, (list, tuple)) or not isinstance(starts, (list, tuple)) or len(texts) != len(starts):
            raise ValueError("%s: column %r needs lists 'text' and 'answer_start' of equal length; got %r"
                             % (where, column, value))
        pairs = list(zip(texts, starts))
    elif isinstance(value, (list, tuple)) and all(isinstance(a, Mapping) for a in value):
        pairs = [(a.get("text"), a.get("answer_start")) for a in value]
    else:
        raise ValueError("%s: column %r must hold {'text': [...], 'answer_start': [...]} or a list of "
                         "{'text', 'answer_start'} objects; got %r" % (where, column, value))
    out = []
    for n, (text, start) in enumerate(pairs):
        if not isinstance(text, str) or not is_int(start) or start < 0:
            raise ValueError("%s: column %r, answer %d: expected a str text and an int answer_start >= 0; got %r, %r"
                             % (where, column, n, text, start))
        if context[start:start + len(text)] != text:
            raise ValueError("%s: column %r, answer %d: %r is not in the context at answer_start=%d (it reads %r)"
                             % (where, column, n, text, start, context[start:start + len(text)]))
        out.append((text, int(start)))
    return tuple(out)


def read_qa_table(source: Any, *, columns: Mapping[str, Any] | None = None,
                  split: str | None = None) -> list[QAExample]:
    """Read one question per row (see the module docstring).

    Args:
        source: the table.
        columns: role -> column for the roles ``id``, ``title``, ``context``, ``question``, ``answers``.
        split: the split of a ``DatasetDict``.

    Returns:
        The questions in table order.

    Raises:
        ValueError: a missing column (naming the columns there are), an empty table, or a bad row (naming it): a
            blank text, a repeated id, answers in another layout or not found at their offsets.
    """
    from ctxemb.io.tables import resolve_columns

    roles = resolve_columns(columns, QA_ROLES)
    required = [roles[k] for k in ("id", "context", "question", "answers")]
    table = open_rows(source, required=required, what="questions (id, context, question, answers)", split=split)
    out: list[QAExample] = []
    seen: dict[str, str] = {}
    for where, row in table.rows:
        if isinstance(row, BadRow):
            raise row_error(where, row)
        if table.columns is None:
            check_keys(where, row, required)
        texts = {}
        for role in ("context", "question"):
            value = row[roles[role]]
            if not isinstance(value, str) or not value.strip():
                raise ValueError("%s: column %r must be a non-blank string; got %r" % (where, roles[role], value))
            texts[role] = value
        qid = row[roles["id"]]
        if not (is_int(qid) or (isinstance(qid, str) and qid.strip())):
            raise ValueError("%s: id column %r must be a non-blank string or an int; got %r" % (where, roles["id"], qid))
        qid = str(qid)
        first = seen.setdefault(qid, where)
        if first != where:
            raise ValueError("%s: question id %r repeats the id of %s" % (where, qid, first))
        title = row.get(roles["title"], "") or ""
        out.append(QAExample(id=qid, title=str(title), context=texts["context"], question=texts["question"],
                             answers=_answers(row[roles["answers"]], where, roles["answers"], texts["context"])))
    return out
