"""The ``ctxemb`` command line: one argparse tree, one module per command group.

    ctxemb [--version] demo | analyze | wsd {build,eval,tag,train} | similarity eval | embed
           | index {build,query,train-quantizer,add-shard,merge} | retrieval {eval,pairs} | vocab | pretrain
           | fill-mask | finetune | predict

Every command module has ``add_parser(subparsers)``, whose leaf parsers set ``func(args) -> exit code``; a parser
imports only what its flags need (the libraries a command runs on are imported by the function that runs it), so
``--help`` answers at once. Commands
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


# what `ctxemb --help` says above the commands (plain text: argparse prints it as it is)
_DESCRIPTION = ("Contextual embeddings from BERT-style encoders: embed text, search it, evaluate and analyse the "
                "vectors, disambiguate word senses, pretrain and fine-tune encoders.")
_EPILOG = "Run 'ctxemb COMMAND --help' for the options of a command."


def build_parser(command: str | None = None, subcommand: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, with the full parser of ``command`` (every command's when None) and, for the others,
    only their name and help: only the modules whose parsers are built are imported. A command module that defines
    ``SUBCOMMANDS`` builds the full parser of ``subcommand`` alone (``""``: none, for ``ctxemb wsd --help``)."""
    parser = argparse.ArgumentParser(prog="ctxemb", description=_DESCRIPTION, epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=f"ctxemb {__version__}",
                        help="print ctxemb's version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = COMMANDS if command is None else {command: COMMANDS[command]} if command in COMMANDS else {}
    for name in dict.fromkeys(m for m, _ in wanted.values()):
        module = importlib.import_module(f"ctxemb.cli.{name}")
        if subcommand is not None and hasattr(module, "SUBCOMMANDS"):
            module.add_parser(sub, only=subcommand)
        else:
            module.add_parser(sub)
    for name, (_, help_text) in COMMANDS.items():
        if name not in sub.choices:  # listed in --help; never run (its own parser is built when it is the command)
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _words_of(argv: Sequence[str]) -> tuple[str | None, str]:
    """The command word of ``argv`` (the first argument after the global flags; None for ``--help`` and the like)
    and the word after it ("" when an option or nothing follows)."""
    for i, arg in enumerate(argv):
        if arg in ("-v", "--verbose", "--debug"):
            continue
        if arg.startswith("-"):
            return None, ""
        following = argv[i + 1] if i + 1 < len(argv) else ""
        return arg, "" if following.startswith("-") else following
    return None, ""


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (:func:`_words_of`)."""
    return _words_of(argv)[0]


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
    command, subcommand = _words_of(argv)
    args = build_parser(command or "", subcommand).parse_args(argv)  # "": no command given, build none
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
