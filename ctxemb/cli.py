"""The ``ctxemb`` command line: ``demo``, ``analyze``, ``wsd``, ``similarity`` and ``index``."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

import numpy as np

from ctxemb.registry import DEFAULT_MODEL

BANK_SENTENCES = [
    ("river", "He sat on the bank of the river and watched the boats .".split(), 4),
    ("river", "The river overflowed its bank after the storm .".split(), 4),
    ("money", "She deposited her salary at the bank on Monday .".split(), 6),
]


def run_demo(args: argparse.Namespace) -> int:
    """Show what contextual embeddings do on the default model: one word, different senses."""
    from ctxemb.embedding import Embedder

    emb = Embedder.from_pretrained(args.model)
    print(f"model: {args.model} ({emb.num_layers} layers, hidden size {emb.hidden_size}); "
          f"word vectors = mean of hidden states {list(emb.config.layers)}, subwords mean-pooled\n")
    vecs = emb.embed_words([s for _, s, _ in BANK_SENTENCES], show_progress_bar=False)
    bank = np.stack([v[i] for v, (_, _, i) in zip(vecs, BANK_SENTENCES)])
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    cos = bank @ bank.T
    for k, (sense, words, i) in enumerate(BANK_SENTENCES):
        marked = " ".join(f"[{w}]" if j == i else w for j, w in enumerate(words))
        print(f"  ({k + 1}) {sense:5s}  {marked}")
    print("\ncosine of 'bank' between contexts:")
    print(f"  river (1) vs river (2): {cos[0, 1]:.3f}")
    print(f"  river (1) vs money (3): {cos[0, 2]:.3f}")
    print(f"  river (2) vs money (3): {cos[1, 2]:.3f}")
    verdict = "closer" if cos[0, 1] > max(cos[0, 2], cos[1, 2]) else "NOT closer"
    print(f"  -> the two river uses are {verdict} to each other than to the money use\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxemb", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="contextual embeddings of 'bank' in river and money contexts")
    demo.add_argument("--model", default=DEFAULT_MODEL, help="model name or HF-format directory")
    demo.set_defaults(func=run_demo)

    from ctxemb.geometry.analysis import add_analyze_subparser

    add_analyze_subparser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.func(args) or 0
    except (FileNotFoundError, ValueError, KeyError, TypeError) as e:
        print(f"ctxemb {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
