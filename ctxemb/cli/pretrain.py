"""``ctxemb pretrain``: masked-LM pretraining from a TOML settings file, flags overriding it.

    ctxemb pretrain --preset run.toml
    ctxemb pretrain --train-corpus wiki.txt --tokenizer vocab/ --out-dir runs/bert-small --max-steps 2000
    torchrun --nproc_per_node 2 -m ctxemb pretrain --config run.toml      # data parallel, one process per core/GPU
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxemb.cli._common import (DeprecatedAlias, add_train_flags, command_help, fraction, load_preset,
                                positive_int, train_overrides)
from ctxemb.pretraining.recipe import (
    CORPUS_MODES,
    MASKING_STRATEGIES,
    REPLACEMENTS,
    SEQUENCE_MODES,
    PretrainConfig,
    nest_flat_masking_keys,
    run_pretraining,
)
from ctxemb.training.config import TrainConfig

# flag -> PretrainConfig field (the loop's flags are generated from TrainConfig: cli._common.add_train_flags)
_OVERRIDES = {
    "train_corpus": "train_corpus", "eval_corpus": "eval_corpus", "corpus_mode": "corpus_mode",
    "tokenizer": "tokenizer", "init_from": "init_from", "sequences": "sequences", "max_len": "max_len",
    "batch_size": "batch_size", "eval_batches": "eval_batches", "shards_dir": "shards_dir",
}
# flag -> field of the [masking] table (PretrainMaskingConfig)
_MASKING_OVERRIDES = {"masking": "strategy", "mlm_probability": "mlm_probability", "replacement": "replacement"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "pretrain", help=command_help("pretrain"),
        description=__doc__.split("\n\n")[0] + " Run it under torchrun to train on several processes or machines.")
    p.add_argument("--preset", "--config", dest="config", default=None,
                   help="TOML file of PretrainConfig settings ([train] for the loop), or a preset shipped in "
                        "ctxemb/presets (e.g. 'mlm-tiny' for pretrain-mlm-tiny.toml)")
    g = p.add_argument_group("data and model (override the TOML file)")
    g.add_argument("--train-corpus", nargs="+", default=None, help="plain-text training files")
    g.add_argument("--eval-corpus", nargs="+", default=None, help="held-out plain-text files")
    g.add_argument("--corpus-mode", choices=CORPUS_MODES, default=None, help="documents separated by blank lines, or one document per line")
    g.add_argument("--tokenizer", default=None, help="vocabulary directory (ctxemb vocab) or model name")
    g.add_argument("--init-from", default=None, help="continue pretraining this encoder (fresh heads if it has none)")
    g.add_argument("--model", default=None, help="JSON of EncoderConfig fields for a fresh model, e.g. "
                   "'{\"hidden_size\": 256, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
                   "\"intermediate_size\": 1024}'")
    g.add_argument("--sequences", choices=SEQUENCE_MODES, default=None, help="how training sequences are built: NSP pairs, packed full sentences, or sentences within a document")
    g.add_argument("--max-length", "--max-len", dest="max_len", type=positive_int, default=None,
                   action=DeprecatedAlias, deprecated=["--max-len"], help="tokens per sequence (default 128)")
    g.add_argument("--batch-size", type=positive_int, default=None, help="sequences per micro-batch (per process)")
    g.add_argument("--masking", choices=MASKING_STRATEGIES, default=None, help="which tokens are masked: single tokens, whole words, or spans (SpanBERT)")
    g.add_argument("--mlm-probability", type=fraction, default=None, help="fraction of tokens selected for prediction (BERT: 0.15)")
    g.add_argument("--replacement", choices=REPLACEMENTS, default=None, help="random replacements drawn from the corpus unigram distribution or uniformly")
    g.add_argument("--eval-batches", type=positive_int, default=None, help="batches of the evaluation corpus per evaluation")
    g.add_argument("--shards-dir", default=None, help="where the tokenized corpus shards are written (default: OUT_DIR/shards)")
    add_train_flags(p, shown_defaults={"learning_rate": 5e-4, "max_steps": 1000})
    p.set_defaults(func=run_pretrain)
    return p


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    """The TOML file's settings (if any) with the flags the user gave on top."""
    d: dict[str, Any] = {}
    if args.config:
        d = nest_flat_masking_keys(load_preset(args.config, "pretrain"))  # validated below, with the flags on top
    train = dict(d.pop("train", {}) or {})
    train.setdefault("learning_rate", 5e-4)
    train.setdefault("max_steps", 1000)
    for flag, target in _OVERRIDES.items():
        value = getattr(args, flag)
        if value is None:
            continue
        d[target] = value
    masking = {target: getattr(args, flag) for flag, target in _MASKING_OVERRIDES.items()
               if getattr(args, flag) is not None}
    if masking:
        d["masking"] = {**d.get("masking", {}), **masking}
    if args.model is not None:
        try:
            d["model"] = json.loads(args.model)
        except json.JSONDecodeError as e:
            raise ValueError(f"--model must be a JSON object of EncoderConfig fields: {e}") from None
    train.update(train_overrides(args))
    return PretrainConfig.from_dict({**d, "train": TrainConfig.from_dict(train)})


def run_pretrain(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    result = run_pretraining(config)
    if result.eval_metrics:
        shown = {k: round(v, 4) for k, v in result.eval_metrics.items()}
        print(f"held-out after step {result.step}: {shown}")
    print(f"model: {config.train.out_dir}/model (metrics: {config.train.out_dir}/metrics.jsonl)")
    return 0



