"""Tagged sentences from tables: a tokens column and a tags column of list type, one sentence per row.

The token-level counterpart of :func:`ctxemb.tasks.sequence.data.read_table`: any source
:func:`ctxemb.io.tables.open_rows` reads whose cells can hold lists (JSONL, JSON, Parquet, a ``datasets``
table or directory, a DataFrame, a list of dicts or tuples), e.g. Hugging Face's ``conll2003`` with
``tags="ner_tags"``. Tags are BIO or IOB1 strings (converted to BIO, as :func:`~ctxemb.tasks.token.conll.read_conll`
does), or ints that index the column's ``ClassLabel`` names (a ``datasets`` table, or a Parquet file that
``datasets`` wrote) or the ``tag_names`` given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ctxemb.core.validation import is_int
from ctxemb.tasks.token.conll import NO_POS, TaggedSentence, _bad_tag, iob1_to_bio
from ctxemb.io.tables import BadRow, check_keys, is_path, open_rows, row_error

TABLE_SUFFIXES = (".jsonl", ".json", ".parquet")


def is_tagged_table(source: Any) -> bool:
    """Whether a token task reads ``source`` as a table (:func:`read_tagged_table`) rather than a CoNLL file: an
    in-memory table, a ``datasets`` directory, or a ``.jsonl``/``.json``/``.parquet`` file."""
    if not is_path(source):
        return True
    path = Path(source)
    return path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES


def _strings(value: Any, where: str, column, names: Sequence[str] | None) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ValueError("%s: column %r must be a list (one item per word); got %r" % (where, column, value))
    out = []
    for i, item in enumerate(value):
        if is_int(item):
            if names is None:
                raise ValueError("%s: column %r holds the int %r at position %d but the table gives no tag names "
                                 "(a datasets ClassLabel); pass tag_names or store the tags as strings"
                                 % (where, column, item, i))
            if not 0 <= item < len(names):
                raise ValueError("%s: column %r: tag id %d at position %d is not in [0, %d)"
                                 % (where, column, item, i, len(names)))
            item = names[item]
        if not isinstance(item, str) or not item.strip():
            raise ValueError("%s: column %r: item %d must be a non-blank string; got %r" % (where, column, i, item))
        out.append(item)
    return tuple(out)


def read_tagged_table(source: Any, *, tokens: str | int = "tokens", tags: str | int = "tags",
                      tag_names: Sequence[str] | None = None, split: str | None = None) -> list[TaggedSentence]:
    """Read one sentence per row: its words from ``tokens`` and its NER tags from ``tags`` (lists of equal length).

    Args:
        source: the table (see the module docstring).
        tokens: the column of the words (a list of str).
        tags: the column of the tags (a list of BIO/IOB1 str, or ints into the tag names).
        tag_names: the names of int tags; default: the column's ``ClassLabel`` names.
        split: the split of a ``DatasetDict``.

    Returns:
        The sentences in table order, tags in BIO, POS ``"-"``; ids ``"<file name or type>:<row>"``.

    Raises:
        ValueError: a missing column (naming the source, the column and the columns there are), an empty table, or
            a bad row (naming it): a cell that is not a list, a blank word, an int tag without names, a tag that is
            not ``O``/``B-X``/``I-X``, lists of different lengths, an empty sentence.
        ImportError: Parquet or ``datasets`` without its package.
    """
    table = open_rows(source, required=(tokens, tags), what="tagged sentences (tokens and tags columns)", split=split)
    names = tuple(tag_names) if tag_names is not None else table.class_names.get(tags)
    label = Path(source).name if is_path(source) else table.name
    out = []
    for n, (where, row) in enumerate(table.rows):
        if isinstance(row, BadRow):
            raise row_error(where, row)
        if table.columns is None:
            check_keys(where, row, (tokens, tags))
        words = _strings(row[tokens], where, tokens, None)
        ner = _strings(row[tags], where, tags, names)
        if not words:
            raise ValueError("%s: the sentence has no words (column %r is empty)" % (where, tokens))
        if len(words) != len(ner):
            raise ValueError("%s: %d words in column %r but %d tags in column %r"
                             % (where, len(words), tokens, len(ner), tags))
        for i, tag in enumerate(ner):
            why = _bad_tag(tag)
            if why is not None:
                raise ValueError("%s: column %r, tag %d: %s" % (where, tags, i, why))
        out.append(TaggedSentence(words, (NO_POS,) * len(words), tuple(iob1_to_bio(ner)), 0,
                                  "%s:%s" % (label, where.rpartition(" ")[2] if is_path(source) else n)))
    return out
