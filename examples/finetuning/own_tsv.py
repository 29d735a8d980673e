"""Fine-tune on your own TSV file: a classifier of restaurant reviews from two small tab-separated files.

A file with a header row names its columns; `--text-a` (and `--text-b` for pairs) says which hold the text,
`--label` which holds the label, `--label-names` the classes in order (a label is a name or a class index;
`--regression` for real-valued scores). JSONL works the same way. Replace the shipped files with yours:

    python examples/finetuning/own_tsv.py --out runs/reviews                  # 5 epochs: about 1 min on a 2-core CPU
    python examples/finetuning/own_tsv.py --out /tmp/reviews --fast           # 1 epoch: about 20 s
    python examples/finetuning/own_tsv.py --out runs/mine --train-file my.train.tsv --dev-file my.dev.tsv \\
        --text-a review --label verdict --label-names bad good
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ctxemb.cli import main as ctxemb

DATA = Path(__file__).resolve().parent / "data"


def run(argv: list[str]) -> None:
    print("$ ctxemb " + shlex.join(argv), flush=True)
    code = ctxemb(argv)
    if code:
        sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the run folder")
    parser.add_argument("--train-file", type=Path, default=DATA / "reviews_train.tsv")
    parser.add_argument("--dev-file", type=Path, default=DATA / "reviews_dev.tsv")
    parser.add_argument("--text-a", default="review", help="the column of the text")
    parser.add_argument("--label", default="verdict", help="the column of the label")
    parser.add_argument("--label-names", nargs="+", default=["bad", "good"], help="the classes, in order")
    parser.add_argument("--fast", action="store_true", help="one epoch instead of five")
    args = parser.parse_args(argv)

    # Flags as today's CLI spells them (the training restructure keeps these spellings as aliases).
    run(["finetune", "custom", "--train-file", str(args.train_file), "--dev-file", str(args.dev_file),
         "--text-a", args.text_a, "--label", args.label, "--label-names", *args.label_names,
         "--head", "mean",  # mean pooling suits an encoder trained for sentence embeddings
         "--epochs", "1" if args.fast else "5", "--batch-size", "8", "--learning-rate", "5e-5", "--seed", "0",
         "--out-dir", str(args.out / "run")] + (["--no-progress"] if args.fast else []))
    run(["predict", str(args.out / "run" / "model"), "The waiter was lovely and the soup delicious.",
         "Cold food and a rude manager."])


if __name__ == "__main__":
    main()
