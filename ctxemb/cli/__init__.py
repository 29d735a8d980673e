"""The ``ctxemb`` command line: one argparse tree, one module per command group.

    ctxemb demo | analyze | wsd {build,eval,tag} | similarity eval | index {build,query}
           | vocab | pretrain | fill-mask | finetune | predict

Every command module has ``add_parser(subparsers)``, whose leaf parsers set ``func(args) -> exit code``. Commands
raise; :func:`main` turns a user's mistake (a missing or unreadable file, a bad value, an unknown model) into one
line on stderr and a non-zero exit (2 for a usage error, 1 otherwise); ``--debug`` shows the traceback instead.
The classes caught are :data:`USER_ERRORS`; anything else (a bug) keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import pickle
import sys
import zipfile
from typing import Sequence
from xml.etree.ElementTree import ParseError

from ctxemb.cli import analyze, demo, fill_mask, finetune, index, pretrain, similarity, vocab, wsd
from ctxemb.cli._common import UsageError

COMMAND_MODULES = (demo, analyze, wsd, similarity, index, vocab, pretrain, fill_mask, finetune)

# What a user's mistake raises in the library: files (OSError: missing, unreadable, PermissionError,
# FileExistsError, IsADirectoryError, a full disk), values (ValueError, incl. CorruptFileError and CheckpointError for
# corrupt, truncated or wrongly encoded files, JSON and Unicode errors), unknown keys or names (KeyError), wrong types
# (TypeError), FAISS's errors on bad index files and torch's on a bad device (RuntimeError), a missing optional extra
# (ImportError), and what third-party readers raise when a file slips past the library's own checks: XML parse
# errors, unreadable pickles, broken zip (.npz) files, a file cut short (EOFError); a NaN loss in training
# (FloatingPointError) and running out of memory (MemoryError) also end in one line.
USER_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError, ParseError,
               pickle.UnpicklingError, zipfile.BadZipFile, EOFError, FloatingPointError, MemoryError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxemb", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_parser(sub)
    return parser


def _message(error: BaseException) -> str:
    """The error as one line: its type, its message with line breaks folded, and (for an error with no message of
    its own) the message of its cause."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    text = " ".join(text.split())
    cause = error.__cause__ or error.__context__
    if not text and cause is not None:
        text = " ".join(f"{type(cause).__name__}: {cause}".split())
    if not text:
        text = "(no message; run with --debug for the traceback)"
    return f"{type(error).__name__}: {text}" if not isinstance(error, UsageError) else text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (``python -m ctxemb`` and the ``ctxemb`` script exit with it)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        print(f"ctxemb {args.command}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        if args.debug:
            raise
        print(f"ctxemb {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
