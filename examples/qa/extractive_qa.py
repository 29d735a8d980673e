"""Extractive question answering: fine-tune on XQuAD-en (SQuAD format), then answer questions about a passage.

Start and end scores per token (transformers' `qa_outputs`); passages longer than `--max-length` are read in
windows `--doc-stride` tokens apart, and the answer is the best span over all windows, mapped back to characters.
XQuAD-en is split by article into 36 training and 12 evaluation articles (839 / 351 questions): 3 epochs give EM
23.9 / F1 33.6 on the held-out articles (`benchmarks/results/finetune.md`; SQuAD-trained models see a hundred times
more questions). Needs the shared data folder (`CTXEMB_DATA`).

    python examples/qa/extractive_qa.py --out runs/qa              # 3 epochs: about 13 min on a 2-core CPU
    python examples/qa/extractive_qa.py --out /tmp/qa --fast       # about 30 s: one paragraph to train on and one
        # to evaluate on, written as SQuAD JSON files and read as your own data (task squad-file)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from ctxemb.cli import main as ctxemb
from ctxemb.core.paths import shared_data_dir

PASSAGE = ("The Panthers defense gave up just 308 points, ranking sixth in the league, while also leading the NFL "
           "in interceptions with 24.")


def run(argv: list[str]) -> None:
    print("$ ctxemb " + shlex.join(argv), flush=True)
    code = ctxemb(argv)
    if code:
        sys.exit(code)


def squad_subset(source: Path, target: Path, article: int, paragraphs: slice) -> Path:
    """A SQuAD JSON file holding some paragraphs of one article of ``source``."""
    data = json.loads(source.read_text(encoding="utf-8"))
    chosen = dict(data["data"][article], paragraphs=data["data"][article]["paragraphs"][paragraphs])
    target.write_text(json.dumps({"version": data.get("version", "1.1"), "data": [chosen]}), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the run folder")
    parser.add_argument("--fast", action="store_true", help="one training paragraph, one evaluation paragraph")
    args = parser.parse_args(argv)

    # Flags as today's CLI spells them (the training restructure keeps these spellings as aliases).
    recipe = ["--max-length", "256", "--doc-stride", "128", "--learning-rate", "1e-4", "--seed", "0",
              "--out-dir", str(args.out / "run")]
    if args.fast:
        xquad = shared_data_dir() / "finetune" / "xquad" / "xquad.en.json"
        args.out.mkdir(parents=True, exist_ok=True)
        train = squad_subset(xquad, args.out / "train.json", 0, slice(0, 1))
        dev = squad_subset(xquad, args.out / "dev.json", 1, slice(0, 1))
        run(["finetune", "squad-file", "--train-file", str(train), "--dev-file", str(dev), "--epochs", "1",
             "--batch-size", "8", "--no-progress", *recipe])
    else:
        run(["finetune", "xquad", "--epochs", "3", "--batch-size", "16", *recipe])  # the benchmark's recipe
    run(["predict", str(args.out / "run" / "model"), PASSAGE, "--question", "How many points did the defense allow?"])


if __name__ == "__main__":
    main()
