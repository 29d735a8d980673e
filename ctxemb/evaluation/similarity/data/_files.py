"""What every similarity data reader shares: where the data folder is, reading lines, and parsing fields with errors
that name the file, the line and the field."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from ctxemb.core.paths import shared_data_dir

PathLike = str | os.PathLike


def similarity_data_dir(root: PathLike | None = None) -> Path:
    """The folder that holds wic/, stsb/, sick/, cosimlex/, coinco-usim/ and word-sim/.

    Args:
        root: use this folder instead of ``shared_data_dir() / "similarity"``.

    Raises:
        FileNotFoundError: if the folder does not exist.
    """
    path = Path(root) if root is not None else shared_data_dir() / "similarity"
    if not path.is_dir():
        raise FileNotFoundError("similarity data folder %s does not exist" % path)
    return path


def require_file(path: Path, what: str, held_out: bool = False) -> Path:
    if path.is_file():
        return path
    if held_out:
        raise FileNotFoundError(
            "%s is not in the shared data folder (expected at %s): this split is held out for independent "
            "evaluation. Pass the path of your own copy to the matching read_* function." % (what, path)
        )
    raise FileNotFoundError("%s not found at %s" % (what, path))


def read_lines(path: PathLike) -> list[str]:
    """Lines of a UTF-8 text file without their line endings (CRLF files included); a trailing empty line is dropped."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError("%s is not UTF-8 text (%s at byte %d)" % (path, e.reason, e.start)) from None
    lines = re.split(r"\r\n|\n|\r", text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def parse_float(value: str, path: PathLike, line_no: int, field: str) -> float:
    try:
        out = float(value)
    except ValueError:
        raise ValueError("%s line %d: %s must be a number; got %r" % (path, line_no, field, value)) from None
    if not math.isfinite(out):
        raise ValueError("%s line %d: %s must be finite; got %r" % (path, line_no, field, value))
    return out


def parse_int(value: str, path: PathLike, line_no: int, field: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError("%s line %d: %s must be an integer; got %r" % (path, line_no, field, value)) from None


def split_fields(line: str, path: PathLike, line_no: int, expected: int | tuple[int, int],
            sep: str | None = "\t") -> list[str]:
    parts = line.split(sep)
    low, high = (expected, expected) if isinstance(expected, int) else expected
    if not (low <= len(parts) <= high):
        want = str(low) if low == high else "%d to %d" % (low, high)
        raise ValueError("%s line %d: expected %s %s-separated fields, got %d: %r"
                         % (path, line_no, want, "tab" if sep == "\t" else "whitespace", len(parts), line[:200]))
    return parts
