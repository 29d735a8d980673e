"""Pretrain a small encoder from a TOML preset: a WordPiece vocabulary, masked-LM pretraining, then a cloze query.

The three steps are the three commands a user types (`ctxemb vocab`, `ctxemb pretrain --config`, `ctxemb
fill-mask`); this script runs them in-process and prints each command line. The result is an HF-format model
directory that transformers, `Embedder.from_pretrained` and `ctxemb fill-mask` load. Needs the shared data folder
(`CTXEMB_DATA`) for WikiText-2.

    python examples/pretraining/pretrain_small.py --out runs/small-bert          # small_bert.toml: about 50 min
    python examples/pretraining/pretrain_small.py --out /tmp/tiny --fast         # tiny_bert.toml: about 20 s
    python examples/pretraining/pretrain_small.py --out runs/small-bert --resume # continue after a stop (exact)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ctxemb.cli import main as ctxemb
from ctxemb.core.paths import shared_data_dir

HERE = Path(__file__).resolve().parent


def run(argv: list[str]) -> None:
    print("$ ctxemb " + shlex.join(argv), flush=True)
    code = ctxemb(argv)
    if code:
        sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the vocabulary and the run")
    parser.add_argument("--fast", action="store_true", help="the tiny preset (tiny_bert.toml) and a small vocabulary")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    args = parser.parse_args(argv)

    wikitext = shared_data_dir() / "corpora" / "wikitext-2"
    train, valid = str(wikitext / "valid.txt"), str(wikitext / "test.txt")
    vocab = args.out / "vocab"
    if not (vocab / "tokenizer.json").is_file():
        run(["vocab", train, "--out-dir", str(vocab), "--kind", "wordpiece",
             "--vocab-size", "2000" if args.fast else "16000"])
    preset = HERE / ("tiny_bert.toml" if args.fast else "small_bert.toml")
    # Flags as today's CLI spells them (the training restructure keeps these spellings as aliases).
    run(["pretrain", "--config", str(preset), "--train-corpus", train, "--eval-corpus", valid,
         "--tokenizer", str(vocab), "--out-dir", str(args.out / "run")]
        + (["--resume"] if args.resume else []) + (["--no-progress"] if args.fast else []))
    run(["fill-mask", str(args.out / "run" / "model"), "The river flooded its [MASK] after the storm.", "-k", "5"])


if __name__ == "__main__":
    main()
