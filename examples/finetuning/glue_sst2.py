"""Fine-tune all-MiniLM-L6-v2 on a GLUE task (SST-2 sentiment), then predict.

The recipe of the benchmark (`benchmarks/finetune.py`): one epoch over the first 10,000 training sentences, batch
32, lr 5e-5, 10% warm-up, the checkpoint's head (BERT pooler + classifier); GLUE dev accuracy 85.1. The run folder
holds checkpoints, `metrics.jsonl` and `model/`, which `ctxemb predict` and `Embedder.from_pretrained` read. Needs
the shared data folder (`CTXEMB_DATA`).

    python examples/finetuning/glue_sst2.py --out runs/sst2           # about 5 min on a 2-core CPU
    python examples/finetuning/glue_sst2.py --out /tmp/sst2 --fast    # about 30 s: the same recipe on 64 training
        # and 32 dev sentences of SST-2, written to TSV files and read as a custom task (--train-file/--dev-file)
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
from pathlib import Path

from ctxemb.cli import main as ctxemb
from ctxemb.core.paths import shared_data_dir


def run(argv: list[str]) -> None:
    print("$ ctxemb " + shlex.join(argv), flush=True)
    code = ctxemb(argv)
    if code:
        sys.exit(code)


def head_of_tsv(source: Path, target: Path, n: int) -> Path:
    """The header and the first ``n`` rows of a TSV file."""
    with open(source, encoding="utf-8", newline="") as f:
        rows = [row for _, row in zip(range(n + 1), csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))]
    with open(target, "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\").writerows(rows)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the run folder")
    parser.add_argument("--fast", action="store_true", help="64 training and 32 dev sentences, read as a custom task")
    args = parser.parse_args(argv)

    # Flags as today's CLI spells them (the training restructure keeps these spellings as aliases).
    recipe = ["--batch-size", "32", "--learning-rate", "5e-5", "--warmup-ratio", "0.1", "--max-length", "128",
              "--seed", "0"]
    if args.fast:
        sst2 = shared_data_dir() / "finetune" / "sst2"
        args.out.mkdir(parents=True, exist_ok=True)
        train = head_of_tsv(sst2 / "alps_train.tsv", args.out / "train.tsv", 64)
        dev = head_of_tsv(sst2 / "alps_dev.tsv", args.out / "dev.tsv", 32)
        run(["finetune", "custom", "--train-file", str(train), "--dev-file", str(dev), "--text-a", "sentence",
             "--label", "label", "--label-names", "negative", "positive", "--epochs", "1", "--no-progress",
             "--out-dir", str(args.out / "run"), *recipe])
    else:
        run(["finetune", "sst2", "--epochs", "1", "--max-train-examples", "10000", "--out-dir", str(args.out / "run"),
             *recipe])
    run(["predict", str(args.out / "run" / "model"), "A gripping, funny film.", "Dull and far too long."])


if __name__ == "__main__":
    main()
