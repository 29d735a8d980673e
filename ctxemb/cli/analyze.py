"""``ctxemb analyze``: the geometry of an encoder's word vectors, layer by layer (anisotropy, rogue dimensions,
post-processing, word-sense projections), as a table, analysis.json and PNG plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxemb.cli._common import UsageError, command_help, load_embedder, positive_int
from ctxemb.geometry.options import DEFAULT_POSTPROCESSORS, DEFAULT_WORDS, POSTPROCESSOR_NAMES
from ctxemb.core.precision import INFERENCE_PRECISION_CHOICES as PRECISION_CHOICES
from ctxemb.models.hub import DEFAULT_MODEL


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``analyze`` command to an ``argparse`` subparsers object; its ``func`` default is :func:`run_analyze`."""
    p = subparsers.add_parser(
        "analyze",
        help=command_help("analyze"),
        description="Embed a corpus with every hidden state of an encoder and report, per layer, the anisotropy of "
        "the word vectors (raw and post-processed), their rogue dimensions and informativity; write "
        "analysis.json and PNG plots.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint name or folder (default: %(default)s)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="text file, one sentence per line, words separated by whitespace "
                   "(default: the corpus shipped in the package, ctxemb/data/analysis_corpus.txt)")
    p.add_argument("--words", nargs="+", default=list(DEFAULT_WORDS), help="words to project (default: %(default)s)")
    p.add_argument("--out-dir", type=Path, default=Path("analysis"), help="output folder (default: %(default)s)")
    p.add_argument("--postprocessors", nargs="*", default=list(DEFAULT_POSTPROCESSORS),
                   choices=[n for n in POSTPROCESSOR_NAMES if n != "none"],
                   help="post-processings to compare with the raw vectors (default: %(default)s)")
    p.add_argument("--projection-layer", default="-1",
                   help="hidden state whose vectors are projected (0 = embedding output, -1 = last), or 'default' "
                   "for the embedder's own layer pooling (default: %(default)s)")
    p.add_argument("--n-pairs", type=positive_int, default=20_000, help="most pairs for informativity (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pair sample for informativity (default %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per batch (default %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    p.add_argument("--precision", default="fp32", choices=PRECISION_CHOICES,
                   help="encoder path: fp32 (exact), bf16, int8, onnx-fp32, onnx-int8 or auto (default %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="write analysis.json only")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run_analyze)
    return p


def run_analyze(args: argparse.Namespace) -> int:
    """Run ``ctxemb analyze`` from parsed arguments: print the markdown table and where the files went.

    Returns:
        0 on success (the process exit code).
    """
    from ctxemb.geometry.analysis import analyze, format_analysis_table, read_corpus

    if args.projection_layer == "default":
        projection_layer = None
    else:
        try:
            projection_layer = int(args.projection_layer)
        except ValueError:
            raise UsageError("--projection-layer must be an int or 'default'; got %r" % args.projection_layer) from None
    sentences = read_corpus(args.corpus)
    embedder = load_embedder(args.model, device=args.device, precision=args.precision)
    result = analyze(
        embedder,
        sentences,
        words=args.words,
        out_dir=args.out_dir,
        postprocessors=args.postprocessors,
        projection_layer=projection_layer,
        n_pairs=args.n_pairs,
        seed=args.seed,
        batch_size=args.batch_size,
        plot=not args.no_plots,
        show_progress_bar=not args.no_progress,
    )
    print(format_analysis_table(result))
    print()
    for kind, path in result.files.items():
        print("%s: %s" % (kind, path))
    return 0
