"""Rows of named columns from any table: the one place fine-tuning and ``ctxemb predict`` read tabular data from.

:func:`open_rows` turns a *source* into a stream of rows, each a mapping column -> value with a *where* string that
error messages start with. Sources:

===============================  ==========================================================  ===================
source                           read as                                                     where
===============================  ==========================================================  ===================
``*.tsv``                        a header line, tab-separated fields, quoting off (a quote   ``FILE line N``
                                 is text, as GLUE's files need)
``*.csv``                        RFC 4180 CSV, read strictly (``text_files``): a header      ``FILE line N``
                                 record, then records; quoted fields may hold commas and
                                 line breaks; blank lines are skipped
``*.jsonl``                      one JSON object per line                                    ``FILE line N``
``*.json``                       one JSON array of objects                                   ``FILE row I``
``*.txt``                        one text per line, in a column named ``text``               ``FILE line N``
``*.parquet``                    Apache Parquet (``pyarrow``), read in record batches        ``FILE row I``
a directory                      a Hugging Face ``datasets`` directory (``save_to_disk``)    ``DIR row I``
``datasets.Dataset``             its rows; ``DatasetDict``: the split asked for              ``Dataset row I``
``pandas.DataFrame``             its rows                                                    ``DataFrame row I``
a list of dicts / of tuples      one row each; a tuple's columns are its positions 0, 1...   ``list row I``
===============================  ==========================================================  ===================

``N`` is the 1-based line number (of a CSV record's last line), ``I`` the 0-based row index, as Python and the
libraries index them. Text files are UTF-8 (a byte-order mark is allowed), with LF, CRLF or CR line ends; trailing
blank lines are dropped.

A problem with one row (invalid JSON on a JSONL line, a wrong field count, a row that is not an object) arrives as a
:class:`BadRow` in the stream, so that a caller may skip it (``ctxemb predict --skip-bad-rows``) or raise it
(training: :func:`row_error`). A problem with the whole source raises at once: a missing file, no header column for
a required column (naming the file, the column and the columns there are), an empty source, an unknown format, or a
missing optional package (``pip install 'ctxemb[tables]'`` for Parquet and ``datasets``). So does a text file that
cannot be read as written, where the stream stands (:class:`~ctxemb.io.text_files.MalformedFileError`,
naming the file, line and column): bytes that are not UTF-8, a NUL byte, and in CSV a quote in a field that is not
quoted, a quoted field followed by anything but a comma or the line's end, or a quoted field that never closes.
Where the structure of the rest of a file is in doubt no row is guessed, whether or not bad rows are skipped.

:func:`parse_columns` reads the ``--columns`` option (``text=sentence,label=score``); :func:`resolve_columns` maps a
user's column mapping onto a reader's roles (``text``/``text_a``, ``text_b``, ``label``, ``id``; ``tokens``,
``tags``; ``question``, ``context``), refusing unknown roles.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ctxemb.core.validation import check_choice, read_json_file
from ctxemb.io.text_files import iter_csv_records, iter_lines

PathLike = str | os.PathLike

FILE_FORMATS: tuple[str, ...] = ("tsv", "csv", "jsonl", "json", "txt", "parquet")
TABLES_EXTRA = "pip install 'ctxemb[tables]'"
_PARQUET_BATCH = 1024


@dataclass(frozen=True)
class BadRow:
    """A row that could not be read (e.g. a JSONL line that is not JSON): ``reason`` says why."""

    reason: str


@dataclass
class Rows:
    """A stream of rows from one source.

    Attributes:
        name: the source for messages (a file path, ``"Dataset"``, ``"DataFrame"``, ``"list"``).
        columns: the columns every row has, in order; None when rows carry their own keys (JSONL, JSON, lists of
            dicts: each row is checked on its own).
        rows: (where, row) pairs: ``row`` is a mapping column -> value, or a :class:`BadRow`.
        class_names: column -> class names, for a ``datasets`` column of ``ClassLabel`` (or a sequence of them):
            its int values are indices into these names.
    """

    name: str
    columns: tuple | None
    rows: Iterator[tuple[str, Mapping[str, Any] | BadRow]]
    class_names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def row_error(where: str, bad: BadRow) -> ValueError:
    """The error that stops a read at a bad row (``"<where>: <reason>"``)."""
    return ValueError("%s: %s" % (where, bad.reason))


# --------------------------------------------------------------------------------------------------- text files


def _missing(name: str, where: str, required: Iterable, present: Sequence) -> ValueError | None:
    missing = [c for c in required if c not in present]
    if not missing:
        return None
    return ValueError("%s%s: no column %s; its columns are %s" % (
        name, where, ", ".join(repr(c) for c in missing), ", ".join(repr(c) for c in present) or "none"))


def _tsv_rows(path: Path, required: Sequence, what: str) -> Rows:
    lines = iter_lines(path, what)
    _, head = next(lines)
    header = [name.strip() for name in head.split("\t")]
    if len(set(header)) != len(header):
        raise ValueError("%s line 1: the header repeats a column name: %r" % (path, header))
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError("%s line 1: the header has no column %s; its columns are %s"
                         % (path, ", ".join(repr(c) for c in missing), ", ".join(repr(c) for c in header)))

    def rows():
        empty = True
        for line_no, line in lines:
            empty = False
            fields = line.split("\t")
            if len(fields) != len(header):
                yield "%s line %d" % (path, line_no), BadRow(
                    "expected %d tab-separated fields (as in the header), got %d: %r"
                    % (len(header), len(fields), line[:200]))
            else:
                yield "%s line %d" % (path, line_no), dict(zip(header, fields))
        if empty:
            raise ValueError("%s line 2: no examples after the header" % path)
    return Rows(str(path), tuple(header), rows())


def _jsonl_rows(path: Path, what: str) -> Rows:
    def rows():
        for line_no, line in iter_lines(path, what):
            where = "%s line %d" % (path, line_no)
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield where, BadRow("not valid JSON (%s): %r" % (e.msg, line[:200]))
                continue
            yield where, row if isinstance(row, dict) else BadRow("expected a JSON object; got a %s"
                                                                  % type(row).__name__)
    return Rows(str(path), None, rows())


def _csv_rows(path: Path, required: Sequence, what: str) -> Rows:
    records = iter_csv_records(path, what)
    try:
        _, _, header = next(records)
    except StopIteration:
        raise ValueError("%s line 1: the file is empty (it should hold %s)" % (path, what)) from None
    header = [name.strip() for name in header]
    if len(set(header)) != len(header):
        raise ValueError("%s line 1: the header repeats a column name: %r" % (path, header))
    error = _missing(str(path), " line 1", required, header)
    if error is not None:
        raise error

    def rows():
        empty = True
        for first, last, record in records:
            empty = False
            where = "%s line %d" % (path, last)
            if len(record) != len(header):
                spans = "" if first == last else (" in the record of lines %d-%d (a quoted field holds line breaks)"
                                                  % (first, last))
                yield where, BadRow("expected %d comma-separated fields (as in the header), got %d%s"
                                    % (len(header), len(record), spans))
            else:
                yield where, dict(zip(header, record))
        if empty:
            raise ValueError("%s line 2: no rows after the header" % path)
    return Rows(str(path), tuple(header), rows())


def _txt_rows(path: Path, what: str) -> Rows:
    return Rows(str(path), ("text",), (("%s line %d" % (path, n), {"text": line})
                                       for n, line in iter_lines(path, what)))


def _json_rows(path: Path, what: str) -> Rows:
    data = read_json_file(path, what, expected=list)
    if not data:
        raise ValueError("%s: the JSON array is empty (it should hold %s)" % (path, what))
    return Rows(str(path), None, (("%s row %d" % (path, i), r if isinstance(r, dict) else
                                   BadRow("expected a JSON object; got a %s" % type(r).__name__))
                                  for i, r in enumerate(data)))


# --------------------------------------------------------------------------------------------------- columnar


def _import(module: str, what: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError("%s needs the %r package, which is not installed: %s"
                          % (what, module.split(".")[0], TABLES_EXTRA)) from None


def _parquet_rows(path: Path, required: Sequence, what: str) -> Rows:
    pq = _import("pyarrow.parquet", "reading Parquet (%s)" % path)
    if not path.is_file():
        raise FileNotFoundError("%s not found (it should hold %s)" % (path, what))
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid for a file that is not Parquet
        raise ValueError("%s: not a Parquet file (%s)" % (path, e)) from None
    columns = tuple(pf.schema_arrow.names)
    error = _missing(str(path), "", required, columns)
    if error is not None:
        raise error
    if pf.metadata.num_rows == 0:
        raise ValueError("%s: the file has no rows (it should hold %s)" % (path, what))

    def rows():
        i = 0
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH):
            for row in batch.to_pylist():
                yield "%s row %d" % (path, i), row
                i += 1
    return Rows(str(path), columns, rows(), _parquet_class_names(pf))


def _parquet_class_names(pf) -> dict[str, tuple[str, ...]]:
    """ClassLabel names that ``datasets`` stores in a Parquet file's schema metadata (``to_parquet``)."""
    meta = (pf.schema_arrow.metadata or {}).get(b"huggingface")
    if not meta:
        return {}
    try:
        features = json.loads(meta).get("info", {}).get("features", {})
    except (ValueError, AttributeError):
        return {}
    out = {}
    for name, feature in features.items():
        for f in (feature, feature.get("feature") if isinstance(feature, dict) else None):
            if isinstance(f, dict) and f.get("_type") == "ClassLabel" and f.get("names"):
                out[name] = tuple(f["names"])
        if isinstance(feature, list) and feature and isinstance(feature[0], dict) \
                and feature[0].get("_type") == "ClassLabel":
            out[name] = tuple(feature[0]["names"])
    return out


def _dataset_class_names(ds) -> dict[str, tuple[str, ...]]:
    out = {}
    for name, feature in ds.features.items():
        inner = getattr(feature, "feature", None)
        if isinstance(feature, list) and feature:
            inner = feature[0]
        for f in (feature, inner):
            if type(f).__name__ == "ClassLabel":
                out[name] = tuple(f.names)
    return out


def _is_from(obj: Any, module: str, *names: str) -> bool:
    cls = type(obj)
    return cls.__module__.split(".")[0] == module and any(c.__name__ in names for c in cls.__mro__)


def _dataset_rows(ds, label: str, required: Sequence, split: str | None) -> Rows:
    if _is_from(ds, "datasets", "DatasetDict"):
        splits = list(ds)
        if split is None or split not in ds:
            fallback = "validation" if split == "dev" and "validation" in ds else None
            if fallback is None:
                raise ValueError("%s: a DatasetDict needs a split; asked for %r, it has %s"
                                 % (label, split, ", ".join(repr(s) for s in splits)))
            split = fallback
        ds, label = ds[split], "%s[%r]" % (label, split)
    if len(ds) == 0:
        raise ValueError("%s: the dataset has no rows" % label)
    columns = tuple(ds.column_names)
    error = _missing(label, "", required, columns)
    if error is not None:
        raise error
    return Rows(label, columns, (("%s row %d" % (label, i), row) for i, row in enumerate(ds)),
                _dataset_class_names(ds))


def _frame_rows(df, required: Sequence) -> Rows:
    if len(df) == 0:
        raise ValueError("DataFrame: it has no rows")
    columns = tuple(df.columns)
    error = _missing("DataFrame", "", required, columns)
    if error is not None:
        raise error
    # to_dict gives Python scalars (int, float, str), not numpy ones
    return Rows("DataFrame", columns, (("DataFrame row %d" % i, row)
                                       for i, row in enumerate(df.to_dict(orient="records"))))


def _list_rows(items: Sequence, required: Sequence) -> Rows:
    if len(items) == 0:
        raise ValueError("list: it has no rows")
    first = items[0]
    if isinstance(first, Mapping):
        def rows():
            for i, r in enumerate(items):
                yield "list row %d" % i, r if isinstance(r, Mapping) else BadRow(
                    "expected a dict like row 0; got a %s" % type(r).__name__)
        return Rows("list", None, rows())
    if isinstance(first, (tuple, list)):
        width = len(first)
        columns = tuple(range(width))
        error = _missing("list", "", required, columns)
        if error is not None:
            raise error

        def tuples():
            for i, r in enumerate(items):
                if not isinstance(r, (tuple, list)) or len(r) != width:
                    yield "list row %d" % i, BadRow("expected a tuple of %d values like row 0; got %r"
                                                    % (width, r))
                else:
                    yield "list row %d" % i, dict(enumerate(r))
        return Rows("list", columns, tuples())
    raise TypeError("list: rows must be dicts (column -> value) or tuples; row 0 is a %s" % type(first).__name__)


# --------------------------------------------------------------------------------------------------- entry point


def is_path(source: Any) -> bool:
    return isinstance(source, (str, os.PathLike))


def open_rows(source: Any, *, required: Sequence = (), what: str = "a table of examples",
              split: str | None = None, format: str | None = None) -> Rows:
    """A stream of rows from any source (see the module docstring for the sources and their rules).

    Args:
        source: a file or ``datasets`` directory path, a ``datasets.Dataset``/``DatasetDict``, a
            ``pandas.DataFrame``, or a list of dicts or tuples.
        required: columns every row must have: checked once up front where the source has a schema (a header,
            Parquet, datasets, DataFrame, tuples); per row otherwise (by the caller).
        what: what the source should hold, for messages.
        split: the split of a ``DatasetDict`` (``"dev"`` falls back to ``"validation"``).
        format: one of :data:`FILE_FORMATS` instead of the file's extension.

    Returns:
        A :class:`Rows`.

    Raises:
        FileNotFoundError: a missing file.
        ValueError: an unknown format, a missing column, an empty source, bytes that are not UTF-8.
        TypeError: a source of another type.
        ImportError: Parquet or ``datasets`` without the package (naming the extra).
    """
    if is_path(source):
        path = Path(source)
        if path.is_dir():
            datasets = _import("datasets", "reading a saved datasets directory (%s)" % path)
            try:
                ds = datasets.load_from_disk(str(path))
            except FileNotFoundError as e:
                raise ValueError("%s: a directory, but not one written by datasets' save_to_disk (%s)"
                                 % (path, e)) from None
            return _dataset_rows(ds, str(path), required, split)
        fmt = format or path.suffix.lower().lstrip(".")
        check_choice(fmt, "format of %s (from its extension; expected one of %s)" % (path, ", ".join(FILE_FORMATS)),
                     FILE_FORMATS)
        if fmt == "tsv":
            return _tsv_rows(path, required, what)
        if fmt == "csv":
            return _csv_rows(path, required, what)
        if fmt == "jsonl":
            return _jsonl_rows(path, what)
        if fmt == "json":
            return _json_rows(path, what)
        if fmt == "txt":
            error = _missing(str(path), "", required, ("text",))
            if error is not None:
                raise error
            return _txt_rows(path, what)
        return _parquet_rows(path, required, what)
    if _is_from(source, "datasets", "Dataset", "DatasetDict"):
        return _dataset_rows(source, type(source).__name__, required, split)
    if _is_from(source, "pandas", "DataFrame"):
        return _frame_rows(source, required)
    if isinstance(source, (list, tuple)):
        return _list_rows(source, required)
    raise TypeError("a table must be a file path, a datasets.Dataset/DatasetDict, a pandas.DataFrame or a list of "
                    "dicts or tuples; got %s" % type(source).__name__)


def check_keys(where: str, row: Mapping, required: Iterable) -> None:
    """Raise when a row of a schema-less source (JSONL, lists of dicts) lacks a required column."""
    missing = [c for c in required if c not in row]
    if missing:
        raise ValueError("%s: no key %s; its keys are %s" % (
            where, ", ".join(repr(c) for c in missing), ", ".join(repr(k) for k in row) or "none"))


def describe_source(source: Any) -> str | None:
    """A JSON-able description of an in-memory table for a run's saved settings (a path stays a path): its type,
    row count and a content hash, so a resumed run can tell whether it was given the same data. None for None."""
    if source is None or is_path(source):
        return None if source is None else str(source)
    if _is_from(source, "datasets", "Dataset", "DatasetDict"):
        parts = source.items() if _is_from(source, "datasets", "DatasetDict") else [("", source)]
        return "datasets.%s(%s)" % (type(source).__name__, ", ".join(
            "%s%d rows, fingerprint %s" % (k + ": " if k else "", len(d), d._fingerprint) for k, d in parts))
    rows = source.to_dict(orient="records") if _is_from(source, "pandas", "DataFrame") else list(source)
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]
    return "%s(%d rows, sha256 %s)" % (type(source).__name__, len(rows), digest)


# --------------------------------------------------------------------------------------------------- columns


_COLUMN_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*(.+?)\s*")


_SAME_ROLE = {"text_a": "text"}  # two names of one role, in every reader that has it


def _check_mapping(columns: Mapping[str, Any], what: str, aliases: Mapping[str, str] | None = None) -> None:
    """Refuse a mapping that names one role twice (``text`` and ``text_a``) or gives one column to two roles: the
    later would silently win, or one column would be read as two things."""
    roles: dict[str, str] = {}
    readers: dict[Any, str] = {}
    for role, column in columns.items():
        key = (aliases or {}).get(role, role)
        first = roles.setdefault(_SAME_ROLE.get(key, key), role)
        if first != role:
            raise ValueError("%s: %r and %r are two names of one role; give it once" % (what, first, role))
        other = readers.setdefault(column, role)
        if other != role:
            raise ValueError("%s: roles %r and %r both read column %r; each role reads a column of its own"
                             % (what, other, role, column))


def parse_columns(text: str) -> dict[str, str]:
    """``"text=sentence,label=score"`` -> ``{"text": "sentence", "label": "score"}`` (the ``--columns`` option):
    role ``text`` reads the file's column ``sentence``.

    Raises:
        ValueError: an item without ``role=column``, a role given twice (or as ``text`` and ``text_a``), or one
            column given to two roles.
    """
    out: dict[str, str] = {}
    for item in text.split(","):
        m = _COLUMN_PAIR.fullmatch(item)
        if m is None:
            raise ValueError("expected ROLE=COLUMN items separated by commas (e.g. text=sentence,label=score: role "
                             "text reads the column sentence); got %r in %r" % (item, text))
        if m.group(1) in out:
            raise ValueError("role %r is given twice in %r" % (m.group(1), text))
        out[m.group(1)] = m.group(2)
    _check_mapping(out, repr(text))
    return out


def resolve_columns(columns: Mapping[str, Any] | None, defaults: Mapping[str, Any],
                    aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The column of each role: ``defaults`` updated by a user's mapping (``aliases`` maps other names of a role,
    e.g. ``text`` -> ``text_a``). A column may be a name or, for tuple rows, a position.

    Raises:
        ValueError: a role the reader does not know (naming the roles it does), one role given under two names
            (``text`` and ``text_a``), or one column given to two roles.
        TypeError: a mapping that is not a dict, or a column that is neither a str nor an int.
    """
    out = dict(defaults)
    if columns is None:
        return out
    if not isinstance(columns, Mapping):
        raise TypeError("columns must be a dict role -> column name; got %s" % type(columns).__name__)
    aliases = aliases or {}
    for role, column in columns.items():
        key = aliases.get(role, role)
        if key not in defaults:
            raise ValueError("columns: unknown role %r; this task reads the roles %s"
                             % (role, ", ".join(list(defaults) + list(aliases))))
        if not isinstance(column, (str, int)) or isinstance(column, bool):
            raise TypeError("columns[%r] must be a column name (str) or a tuple position (int); got %r"
                            % (role, column))
        out[key] = column
    _check_mapping(columns, "columns", aliases)
    return out


def class_names(source: Any, column, *, split: str | None = None) -> tuple[str, ...] | None:
    """The class names of a ``ClassLabel`` column of a ``datasets`` table (a Dataset, a saved directory, or a
    Parquet file that ``datasets`` wrote), or None (any other source or column)."""
    if is_path(source) and Path(source).suffix.lower() == ".parquet" and Path(source).is_file():
        return open_rows(source, split=split).class_names.get(column)
    if (is_path(source) and Path(source).is_dir()) or _is_from(source, "datasets", "Dataset", "DatasetDict"):
        return open_rows(source, split=split).class_names.get(column)
    return None
