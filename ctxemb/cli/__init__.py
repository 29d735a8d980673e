"""The ``ctxemb`` command line: one argparse tree, one module per command group.

    ctxemb [--version] demo | analyze | wsd {build,eval,tag} | similarity eval | embed | index {build,query}
           | vocab | pretrain | fill-mask | finetune | predict

Every command module has ``add_parser(subparsers)``, whose leaf parsers set ``func(args) -> exit code``. Commands
raise; :func:`main` turns a user's mistake (a missing or unreadable file, a bad value, an unknown model) into one
line on stderr and a non-zero exit (2 for a usage error, 1 otherwise); ``--debug`` shows the traceback instead.
The classes caught are :data:`USER_ERRORS`; anything else (a bug) keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pickle
import sys
import zipfile
from typing import Sequence
from xml.etree.ElementTree import ParseError

from ctxemb._version import __version__
from ctxemb.cli._common import COMMANDS, UsageError

# What a user's mistake raises in the library: files (OSError: missing, unreadable, PermissionError,
# FileExistsError, IsADirectoryError, a full disk), values (ValueError, incl. CorruptFileError and CheckpointError for
# corrupt, truncated or wrongly encoded files, JSON and Unicode errors), unknown keys or names (KeyError), wrong types
# (TypeError), FAISS's errors on bad index files and torch's on a bad device (RuntimeError), a missing optional extra
# (ImportError), and what third-party readers raise when a file slips past the library's own checks: XML parse
# errors, unreadable pickles, broken zip (.npz) files, a file cut short (EOFError); a NaN loss in training
# (FloatingPointError) and running out of memory (MemoryError) also end in one line.
USER_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError, ParseError,
               pickle.UnpicklingError, zipfile.BadZipFile, EOFError, FloatingPointError, MemoryError)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, with the full parser of ``command`` (every command's when None) and, for the others,
    only their name and help: only the modules whose parsers are built are imported."""
    parser = argparse.ArgumentParser(prog="ctxemb", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"ctxemb {__version__}",
                        help="print ctxemb's version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = COMMANDS if command is None else {command: COMMANDS[command]} if command in COMMANDS else {}
    for module in dict.fromkeys(m for m, _ in wanted.values()):
        importlib.import_module(f"ctxemb.cli.{module}").add_parser(sub)
    for name, (_, help_text) in COMMANDS.items():
        if name not in sub.choices:  # listed in --help; never run (its own parser is built when it is the command)
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv``: the first argument after the global flags (None for ``--help`` and the like)."""
    for arg in argv:
        if arg in ("-v", "--verbose", "--debug"):
            continue
        return None if arg.startswith("-") else arg
    return None


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
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_command_of(argv) or "").parse_args(argv)  # "": no command given, build none
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
