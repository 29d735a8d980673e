"""Text files read strictly: UTF-8 lines (:func:`iter_lines`) and RFC 4180 CSV records (:func:`iter_csv_records`).

What :mod:`ctxemb.io.tables` (and through it every reader of TSV, CSV, JSONL and plain-text files in
fine-tuning and ``ctxemb predict``) reads text with. The rule: a file is read as written or not at all. A byte
sequence that is not UTF-8, a NUL byte, or CSV quoting that does not close where it should raises
:class:`MalformedFileError` naming the file, the line (and column), what was expected and what was found; nothing
is guessed. Python's :mod:`csv` module is not used for reading: in its default dialect it takes a quote inside an
unquoted field as text, and where a quote never closes it reads the rest of the file as one field (rows lost
without a word).

CSV, as RFC 4180 has it:

- records are separated by line breaks (LF, CRLF or CR), fields by commas;
- a field either holds no quote at all, or is quoted: it starts with ``"`` right after the comma (or at the start of
  the line), holds anything (commas, line breaks) with each ``"`` written twice, and ends with ``"`` right before
  a comma or the end of the line;
- a line break inside a quoted field is read as ``"\\n"``, whatever the file's line ends;
- blank lines between records are skipped; a line of commas is a record of empty fields.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

from ctxemb.core.validation import CorruptFileError

PathLike = str | os.PathLike

__all__ = ["MalformedFileError", "iter_csv_records", "iter_lines", "read_lines"]

_SHOWN = 40  # characters of the offending text shown in a message


class MalformedFileError(CorruptFileError):
    """A text file that cannot be read as it is (not UTF-8, a NUL byte, CSV quoting that does not close, a quote in a
    field that is not quoted): the message names the file, the line and column, what was expected and what was
    found. A ``ValueError`` (:class:`~ctxemb.core.validation.CorruptFileError`); ``path`` is the file, ``line`` the
    1-based line."""

    def __init__(self, message: str, path: PathLike, line: int):
        super().__init__(message, path)
        self.line = line


def _open(path: Path, what: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError("%s not found (it should hold %s)" % (path, what)) from None
    except IsADirectoryError:
        raise FileNotFoundError("%s is a directory, not a file (it should hold %s)" % (path, what)) from None


def iter_lines(path: PathLike, what: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, lazily: BOM dropped, LF/CRLF/CR ends, trailing blank lines dropped.

    Raises:
        FileNotFoundError: the file does not exist (or is a directory).
        MalformedFileError: a byte sequence that is not UTF-8 or a NUL byte (naming its line and byte).
        ValueError: the file holds nothing but blank lines.
    """
    path = Path(path)
    f = _open(path, what)
    line_no, blank, any_text = 0, [], False
    with f:
        for raw in f:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise MalformedFileError("%s line %d: not UTF-8 text (byte 0x%02x: %s); save the file as UTF-8"
                                         % (path, line_no + 1, raw[e.start], e.reason), path, line_no + 1) from None
            if line_no == 0:
                text = text.removeprefix("\ufeff")
            text = text[:-1] if text.endswith("\n") else text
            text = text[:-1] if text.endswith("\r") else text
            for part in text.split("\r"):
                line_no += 1
                if "\x00" in part:
                    raise MalformedFileError(
                        "%s line %d: a NUL byte (column %d); expected UTF-8 text (is it a binary file, or UTF-16? "
                        "save it as UTF-8)" % (path, line_no, part.index("\x00") + 1), path, line_no)
                if not part.strip():
                    blank.append((line_no, part))  # yielded only if a non-blank line follows
                    continue
                yield from blank
                blank.clear()
                any_text = True
                yield line_no, part
    if not any_text:
        raise ValueError("%s line 1: the file is empty (it should hold %s)" % (path, what))


def read_lines(path: PathLike, what: str) -> list[str]:
    """The lines of a UTF-8 text file (see :func:`iter_lines`) as a list."""
    return [line for _, line in iter_lines(path, what)]


# --------------------------------------------------------------------------------------------------- CSV

_PLAIN = re.compile(r'[^",]*')  # a field that is not quoted, up to its comma
_QUOTED = re.compile(r'[^"]*(?:""[^"]*)*')  # the inside of a quoted field, up to its closing quote or the text's end
_QUOTING = ('a field holding a quote, a comma or a line break is quoted and each quote in it written twice '
            '(5" screen as "5"" screen")')


def iter_csv_records(path: PathLike, what: str) -> Iterator[tuple[int, int, list[str]]]:
    """(first line, last line, fields) of each record of a CSV file (the header too), lazily; see the module
    docstring for the rules. A record spans several lines when a quoted field holds line breaks.

    Raises:
        FileNotFoundError: the file does not exist (or is a directory).
        MalformedFileError: bytes that are not UTF-8 or NUL; a quote in a field that is not quoted; a quoted field
            followed by anything but a comma or the end of the line; a quoted field that never closes (the rest of
            the file would be read as that field).
        ValueError: the file holds nothing but blank lines.
    """
    path = Path(path)
    lines = iter_lines(path, what)
    for first, line in lines:
        if not line.strip():
            continue  # a blank line between records
        if '"' not in line:
            yield first, first, line.split(",")
            continue
        fields, pos, line_no = [], 0, first
        while True:
            if line.startswith('"', pos):
                opened = (line_no, pos + 1)
                end = _QUOTED.match(line, pos + 1).end()
                parts = [line[pos + 1:end]]
                while end == len(line):  # no closing quote on this line: the field holds a line break
                    nxt = next(lines, None)
                    if nxt is None:
                        lost = "" if opened[0] == line_no else (", so lines %d-%d would be read as one field"
                                                                % (opened[0], line_no))
                        raise MalformedFileError(
                            "%s line %d (column %d): this quoted field never closes: expected a closing quote, found "
                            "the end of the file (after line %d)%s; %s"
                            % (path, *opened, line_no, lost, _QUOTING), path, opened[0])
                    line_no, line = nxt
                    end = _QUOTED.match(line).end()
                    parts.append(line[:end])
                fields.append("\n".join(part.replace('""', '"') for part in parts))
                pos = end + 1
                if pos == len(line):
                    break
                if line[pos] != ",":
                    span = ("" if opened[0] == line_no else
                            " (it opens on line %d: does a quote there never close?)" % opened[0])
                    raise MalformedFileError(
                        "%s line %d (column %d): expected a comma or the end of the line after the closing quote of a "
                        "quoted field%s; found %r; %s" % (path, line_no, pos + 1, span, line[pos:pos + _SHOWN],
                                                          _QUOTING), path, line_no)
                pos += 1
            else:
                end = _PLAIN.match(line, pos).end()
                if end < len(line) and line[end] == '"':
                    hint = ("a quoted field opens right after the comma: remove the spaces before the quote"
                            if line[pos:end].strip() == "" else _QUOTING)
                    raise MalformedFileError(
                        "%s line %d (column %d): a quote inside a field that is not quoted (%r); expected no quote "
                        "there: %s" % (path, line_no, end + 1, line[pos:pos + _SHOWN], hint), path, line_no)
                fields.append(line[pos:end])
                if end == len(line):
                    break
                pos = end + 1
        yield first, line_no, fields
