"""``ctxemb vocab``: train a subword vocabulary (WordPiece, byte-level BPE or Unigram) for pretraining.

    ctxemb vocab wiki.txt brown.txt --out-dir vocab/ --kind wordpiece --vocab-size 16000
    ctxemb vocab --language en=fortunes/en.txt --language ga=fortunes/ga.txt --alpha 0.3 --out-dir vocab-ml/
"""

from __future__ import annotations

import argparse

from ctxemb.cli._common import UsageError, add_option, command_help, description, non_negative_float, positive_int
from ctxemb.tasks.pretraining.vocab import VOCAB_KINDS, train_vocabulary


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "vocab", help=command_help("vocab"),
        description=description(__doc__) + " With several --language files, text is sampled per language with "
                    "q_i ~ p_i^alpha (J&M eq. 11.7), so small languages get more of the vocabulary.")
    p.add_argument("files", nargs="*", help="plain-text training files (one corpus)")
    p.add_argument("--language", action="append", default=[], metavar="NAME=FILE",
                   help="a language's file(s) for a multilingual vocabulary (repeat; FILE may be a comma list)")
    add_option(p, "--out-dir", deprecated=["--out"], dest="out", required=True, help="the tokenizer folder to write")
    p.add_argument("--kind", choices=VOCAB_KINDS, default="wordpiece", help="default %(default)s")
    p.add_argument("--vocab-size", type=positive_int, default=30522, help="default %(default)s")
    p.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None,
                   help="default: on for wordpiece, off otherwise")
    p.add_argument("--min-frequency", type=positive_int, default=2,
                   help="least count of a merge or piece to enter the vocabulary (default %(default)s)")
    p.add_argument("--alpha", type=non_negative_float, default=0.3, help="language sampling exponent (default 0.3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the per-language line sampling (default %(default)s)")
    p.set_defaults(func=run_vocab)
    return p


def run_vocab(args: argparse.Namespace) -> int:
    if bool(args.files) == bool(args.language):
        raise UsageError("give either training files or --language NAME=FILE options (not both, not neither)")
    corpus = args.files
    if args.language:
        corpus = {}
        for item in args.language:
            name, sep, files = item.partition("=")
            if not sep or not name or not files:
                raise UsageError(f"--language expects NAME=FILE; got {item!r}")
            corpus[name] = files.split(",")
    tokenizer = train_vocabulary(corpus, args.out, kind=args.kind, vocab_size=args.vocab_size,
                                 lowercase=args.lowercase, min_frequency=args.min_frequency, alpha=args.alpha,
                                 seed=args.seed)
    print(f"{args.kind} vocabulary of {tokenizer.vocab_size} tokens -> {args.out}")
    return 0
