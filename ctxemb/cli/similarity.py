"""``ctxemb similarity eval``: run the similarity harnesses from the command line.

Example::

    ctxemb similarity eval --tasks wic,stsb --model all-MiniLM-L6-v2 --postprocess none,whiten --json sim.json

:func:`add_parser` adds the ``similarity`` command (with its ``eval`` subcommand) to an argparse
sub-parser group; the parsed arguments carry ``func``, which runs the command and returns an exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ctxemb.cli._common import UsageError, comma_list, command_help, load_embedder, positive_int, write_text
from ctxemb.evaluation.similarity.options import (DEFAULT_TASKS, FIT_ON, LAYER_MODES, POSTPROCESS_NAMES,
                                                  SENTENCE_POOLINGS, TASKS, WORD_SIM_TASKS)
from ctxemb.core.precision import INFERENCE_PRECISION_CHOICES as PRECISION_CHOICES
from ctxemb.models.hub import DEFAULT_MODEL

logger = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``similarity`` (with the subcommand ``eval``) to ``subparsers`` (from ``parser.add_subparsers()``).

    Returns:
        The ``similarity`` parser.
    """
    parser = subparsers.add_parser("similarity",
                                   help=command_help("similarity"),
                                   description="Similarity benchmarks for contextual embeddings.")
    sub = parser.add_subparsers(dest="similarity_command", metavar="COMMAND")
    sub.required = True
    ev = sub.add_parser("eval", help="evaluate a model on similarity tasks",
                        description="Evaluate a model on similarity tasks; every value is x 100.")
    ev.add_argument("--tasks", type=comma_list(TASKS), default=list(DEFAULT_TASKS),
                    help="comma-separated tasks from: %s (default: %s)" % (", ".join(TASKS), ",".join(DEFAULT_TASKS)))
    ev.add_argument("--model", default=DEFAULT_MODEL, help="model name or path (default: %(default)s)")
    ev.add_argument("--postprocess", type=comma_list(POSTPROCESS_NAMES), default=["none"],
                    help="comma-separated post-processing from: %s (default: none)" % ", ".join(POSTPROCESS_NAMES))
    ev.add_argument("--n-components", type=positive_int, default=None,
                    help="directions removed by abtt / dimensions kept by whiten (default: their own)")
    ev.add_argument("--fit-on", choices=FIT_ON, default="task",
                    help="corpus post-processing is fitted on: each task's train split (wikitext-2 valid where "
                         "there is none) or wikitext-2 valid for all (default: task)")
    ev.add_argument("--layers", choices=LAYER_MODES, default="sweep",
                    help="sweep: every hidden state plus the last-four average; default: the model's configuration")
    ev.add_argument("--include-train", action="store_true",
                    help="also score STS-B and SICK train (for layer selection)")
    ev.add_argument("--sentence-poolings", type=comma_list(SENTENCE_POOLINGS), default=list(SENTENCE_POOLINGS),
                    help="for STS-B and SICK, from: %s" % ", ".join(SENTENCE_POOLINGS))
    ev.add_argument("--word-sim-tasks", type=comma_list(WORD_SIM_TASKS), default=list(WORD_SIM_TASKS),
                    help="word-similarity sets, from: %s" % ", ".join(WORD_SIM_TASKS))
    ev.add_argument("--max-occurrences", type=positive_int, default=100,
                    help="corpus sentences averaged per word for word similarity (default: 100)")
    ev.add_argument("--scws", type=Path, default=None, help="path of SCWS ratings.txt (needed for the scws task)")
    ev.add_argument("--data", type=Path, default=None,
                    help="the similarity data folder (default: <shared data>/similarity)")
    ev.add_argument("--limit", type=positive_int, default=None,
                    help="only the first N examples of each split (smoke test)")
    ev.add_argument("--batch-size", type=positive_int, default=32, help="texts per batch (default %(default)s)")
    ev.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    ev.add_argument("--precision", default="fp32", choices=PRECISION_CHOICES,
                    help="encoder path: fp32 (exact), bf16, int8, onnx-fp32, onnx-int8 or auto (default %(default)s)")
    ev.add_argument("--seed", type=int, default=0,
                    help="seed of every sample: corpus sentences, fit samples (default %(default)s)")
    ev.add_argument("--json", type=Path, default=None, help="write all rows to this JSON file (atomically)")
    ev.add_argument("--markdown", type=Path, default=None, help="write the table to this markdown file")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    ev.set_defaults(func=run_similarity_command)
    return parser


def run_similarity_command(args: argparse.Namespace) -> int:
    """Run ``similarity eval`` with parsed arguments; print the table (layer "last4"/"all"/"last" rows when the
    layers were swept, every row with ``--json``/``--markdown``). Returns the exit code."""
    from ctxemb.evaluation.similarity import results_to_markdown, run_similarity_tasks, save_results_json

    if args.scws is None and "scws" in args.tasks:
        raise UsageError("--tasks scws needs --scws PATH (SCWS is held out of the shared data folder)")
    embedder = load_embedder(args.model, device=args.device, precision=args.precision)
    rows = run_similarity_tasks(
        embedder, args.tasks, root=args.data, postprocess=args.postprocess, n_components=args.n_components,
        fit_on=args.fit_on, layers=args.layers, include_train=args.include_train, limit=args.limit,
        word_sim_tasks=args.word_sim_tasks, max_occurrences=args.max_occurrences,
        sentence_poolings=args.sentence_poolings, scws_path=args.scws, batch_size=args.batch_size,
        show_progress_bar=not args.no_progress, seed=args.seed,
    )
    meta = {"model": args.model, "config": embedder.config.to_dict(), "tasks": args.tasks,
            "postprocess": args.postprocess,
            "n_components": args.n_components, "fit_on": args.fit_on, "layers": args.layers, "limit": args.limit,
            "max_occurrences": args.max_occurrences, "seed": args.seed}
    if args.json is not None:
        save_results_json(rows, args.json, metadata=meta)
    table = results_to_markdown(rows)
    if args.markdown is not None:
        write_text(args.markdown, table)
    shown = rows if args.layers == "default" else [r for r in rows if r.layer in ("last4", "all", "last")]
    sys.stdout.write(results_to_markdown(shown))
    return 0
