"""Named-entity recognition with a CRF: fine-tune on CoNLL-2003, then tag raw text and a CoNLL file.

A linear-chain CRF over words (each word's emission is its first subword's logits) with BIO constraints in training
and decoding, so that no `I-X` follows an `O`. One epoch over CoNLL-2003's 14,041 sentences gives dev F1 86.3
(the softmax tagger: 80.4; `benchmarks/results/finetune.md`). Needs the shared data folder (`CTXEMB_DATA`).

    python examples/ner/conll_crf.py --out runs/ner-crf          # 1 epoch: about 8 min on a 2-core CPU
    python examples/ner/conll_crf.py --out /tmp/ner --fast       # about 30 s: 32 training and 8 dev sentences,
        # written as CoNLL files and read as your own data (task conll-file with --train-file/--dev-file)
"""

from __future__ import annotations

import argparse
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


def head_of_conll(source: Path, target: Path, n_sentences: int) -> Path:
    """The first ``n_sentences`` sentences (blank-line separated blocks; -DOCSTART- lines kept) of a CoNLL file."""
    out, seen = [], 0
    for line in source.read_text(encoding="utf-8").splitlines():
        out.append(line)
        if not line.strip() and out[:-1] and out[-2].strip() and not out[-2].startswith("-DOCSTART-"):
            seen += 1
            if seen == n_sentences:
                break
    target.write_text("\n".join(out) + "\n", encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the run folder")
    parser.add_argument("--fast", action="store_true", help="32 training and 8 dev sentences")
    args = parser.parse_args(argv)

    conll = shared_data_dir() / "finetune" / "conll2003"
    # Flags as today's CLI spells them (the training restructure keeps these spellings as aliases).
    recipe = ["--head", "crf", "--epochs", "1", "--batch-size", "32", "--learning-rate", "5e-5", "--seed", "0",
              "--out-dir", str(args.out / "run")]
    if args.fast:
        args.out.mkdir(parents=True, exist_ok=True)
        train = head_of_conll(conll / "eng.train", args.out / "train.conll", 32)
        dev = head_of_conll(conll / "eng.testa", args.out / "dev.conll", 8)
        run(["finetune", "conll-file", "--train-file", str(train), "--dev-file", str(dev), "--no-progress", *recipe])
    else:
        dev = conll / "eng.testa"
        run(["finetune", "conll2003-ner", *recipe])
    model = str(args.out / "run" / "model")
    run(["predict", model, "Jane Villanueva of United Airlines Holding discussed it in Chicago."])
    run(["predict", model, "--conll", str(dev), "--output", str(args.out / "dev.tagged.conll")])  # word, gold, predicted
    print(f"tagged dev file: {args.out / 'dev.tagged.conll'}")


if __name__ == "__main__":
    main()
