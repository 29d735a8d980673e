"""``ctxemb fill-mask MODEL "text with [MASK]"``: the top-k tokens for every mask, with probabilities."""

from __future__ import annotations

import argparse
import json

from ctxemb.cli._common import command_help, positive_int


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fill-mask", help=command_help("fill-mask"),
        description="The cloze query of J&M 11.2 ('Please turn [MASK] homework in'): for every mask token in each "
                    "text, the most probable vocabulary tokens. Needs a checkpoint with an MLM head (ours from "
                    "`ctxemb pretrain`, or transformers' *ForMaskedLM / BertForPreTraining).")
    p.add_argument("model", help="model name or HF-format directory with an MLM head")
    p.add_argument("text", nargs="+", help="texts holding the model's mask token ([MASK] or <mask>)")
    p.add_argument("-k", "--top-k", type=positive_int, default=5, help="candidates per mask (default %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON list per text instead of a table")
    p.set_defaults(func=run_fill_mask)
    return p


def run_fill_mask(args: argparse.Namespace) -> int:
    from ctxemb.embedding.fill_mask import MaskFiller

    filler = MaskFiller.from_pretrained(args.model, device=args.device)
    for text, masks in zip(args.text, filler(list(args.text), top_k=args.top_k)):
        if args.json:
            print(json.dumps([[{"token": f.token, "id": f.token_id, "p": round(f.probability, 6)} for f in m]
                              for m in masks], ensure_ascii=False))
            continue
        print(text)
        for k, fills in enumerate(masks, start=1):
            print("  mask %d: %s" % (k, "  ".join("%s %.3f" % (f.token, f.probability) for f in fills)))
    return 0
