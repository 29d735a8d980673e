"""``ctxemb predict DIR``: the predictions of a model written by ``ctxemb finetune`` (labels, scores, entities,
answers), or of a sense store written by ``ctxemb wsd build``.

    ctxemb predict runs/sst2/model "A gripping, funny film." "Dull and far too long."
    ctxemb predict runs/ner/model --conll eng.testa --output predicted.conll
    ctxemb predict runs/reviews/model --input reviews.jsonl --output predicted.csv --skip-bad-rows
    ctxemb predict stores/minilm --input semeval2007.data.xml --output semeval2007.key    # a WSD sense store

The parser is here and imports nothing heavy; :func:`ctxemb.cli.finetune.run_predict` runs the command.
"""

from __future__ import annotations

import argparse

from ctxemb.cli._common import add_option, column_mapping, command_help, positive_int


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``predict`` to an argparse subparsers object; its ``func`` is :func:`run_predict`."""
    q = subparsers.add_parser("predict", help=command_help("predict"))
    q.add_argument("model_dir", help="a model directory written by `ctxemb finetune` (<out>/model), or a sense "
                   "store directory written by `ctxemb wsd build` (with --input/--output; see `ctxemb wsd tag`)")
    q.add_argument("text", nargs="*", help="texts (the first sentence of each pair; QA: the passages)")
    q.add_argument("--pair", nargs="+", default=None, help="second sentences, one per text")
    q.add_argument("--question", nargs="+", default=None, help="QA: one question per passage")
    q.add_argument("--conll", default=None,
                   help="taggers: a CoNLL file whose words to tag (`ctxemb predict DIR FILE` does the same); the "
                        "tagged file (word, gold, predicted) goes to --output, or to stdout")
    q.add_argument("--json", action="store_true", help="one JSON object per text")
    q.add_argument("--device", default="cpu", help="torch device for predictions (default %(default)s)")
    f = q.add_argument_group("a file of inputs")
    f.add_argument("--input", default=None, metavar="FILE",
                   help="predict for every row of FILE (JSONL, CSV, TSV, or TXT with one text per line; also JSON "
                        "and Parquet) instead of texts on the command line; needs --output")
    add_option(f, "--output", deprecated=["--out"], default=None, metavar="FILE",
               help="where the predictions go, written atomically (a run that stops leaves no partial file): with "
                    "--input, the input rows with their predictions appended (JSONL or CSV by extension or "
                    "--format); with --conll, the tagged CoNLL file")
    f.add_argument("--format", choices=("jsonl", "csv", "key"), default=None,
                   help="the output format (default: from the --output extension); key: a Raganato key file, for a "
                        "sense store given a Raganato XML data set")
    f.add_argument("--columns", type=column_mapping, default=None, metavar="ROLE=COLUMN,...",
                   help="input columns for the model's roles when they are not named as in training: text, text_b "
                        "(pairs), tokens (pre-tokenized words for taggers), question, context (QA); e.g. "
                        "text=review")
    f.add_argument("--skip-bad-rows", action="store_true",
                   help="skip rows whose input cannot be used (each reported on stderr with its line or row, and "
                        "counted) instead of stopping at the first with an error")
    f.add_argument("--batch-size", type=positive_int, default=32, help="rows per model batch (default %(default)s)")
    add_option(f, "--no-progress", deprecated=["--no-progress-bar"], store_true=True, default=False,
               help="do not show the progress bar on stderr")
    f.add_argument("--model", default=None,
                   help="a sense store: load this model instead of the one the store records (refused unless it "
                        "matches the store's embedder configuration)")
    q.set_defaults(func=run_predict)
    return q


def run_predict(args: argparse.Namespace) -> int:
    """Run ``ctxemb predict`` (:func:`ctxemb.cli.finetune.run_predict`, imported now: it loads torch)."""
    from ctxemb.cli.finetune import run_predict as run

    return run(args)
