"""The ``ctxemb`` command line: one argparse tree, one module per command group.

    ctxemb demo | analyze | wsd {build,eval,tag} | similarity eval | index {build,query}
           | vocab | pretrain | fill-mask | finetune | predict

Every command module has ``add_parser(subparsers)``, whose leaf parsers set ``func(args) -> exit code``. Commands
raise; :func:`main` turns a user's mistake (a missing or unreadable file, a bad value, an unknown model) into one
line on stderr and a non-zero exit (2 for a usage error, 1 otherwise); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from ctxemb.cli import analyze, demo, fill_mask, finetune, index, pretrain, similarity, vocab, wsd
from ctxemb.cli._common import UsageError

COMMAND_MODULES = (demo, analyze, wsd, similarity, index, vocab, pretrain, fill_mask, finetune)

# What a user's mistake raises in the library: files (OSError: missing, unreadable, permissions, exists), values
# (ValueError, incl. corrupt JSON, bad encodings and checkpoint mismatches), unknown keys or names (KeyError),
# wrong types (TypeError), FAISS's errors on bad index files (RuntimeError), a missing optional extra (ImportError).
USER_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxemb", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_parser(sub)
    return parser


def _message(error: BaseException) -> str:
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
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
