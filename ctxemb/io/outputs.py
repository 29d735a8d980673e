"""The formats a file of predictions is written in (``ctxemb predict ... --output FILE``, a sense store's tagging):
JSON lines or CSV, told by the extension unless named."""

from __future__ import annotations

import os
from pathlib import Path

from ctxemb.core.validation import check_choice

__all__ = ["OUTPUT_FORMATS", "output_format"]

OUTPUT_FORMATS: tuple[str, ...] = ("jsonl", "csv")


def output_format(path: str | os.PathLike, format: str | None = None,
                  formats: tuple[str, ...] = OUTPUT_FORMATS) -> str:
    """The output format: ``format`` if given, else from the extension (``.jsonl``, ``.csv``; a caller with more
    ``formats``, such as a sense store's ``key``, passes them).

    Raises:
        ValueError: an unknown format, or an extension that names none.
    """
    if format is not None:
        return check_choice(format, "output format", formats)
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ValueError(f"cannot tell the output format of {path} from its extension {Path(path).suffix!r}: name "
                         f"it {', '.join('.' + f for f in formats)}, or give the format ({', '.join(formats)})")
    return suffix
