"""``ctxemb pretrain``: masked-LM pretraining from a TOML settings file, flags overriding it.

    ctxemb pretrain --config run.toml
    ctxemb pretrain --train-corpus wiki.txt --tokenizer vocab/ --out-dir runs/bert-small --max-steps 2000
    torchrun --nproc_per_node 2 -m ctxemb pretrain --config run.toml      # data parallel, one process per core/GPU
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxemb.cli._common import command_help, fraction, non_negative_float, positive_int
from ctxemb.pretraining.recipe import (
    CORPUS_MODES,
    MASKING_STRATEGIES,
    REPLACEMENTS,
    SEQUENCE_MODES,
    PretrainConfig,
    run_pretraining,
)
from ctxemb.training.loop import TrainConfig

# flag -> (PretrainConfig field, or "train.<TrainConfig field>")
_OVERRIDES = {
    "train_corpus": "train_corpus", "eval_corpus": "eval_corpus", "corpus_mode": "corpus_mode",
    "tokenizer": "tokenizer", "init_from": "init_from", "sequences": "sequences", "max_len": "max_len",
    "batch_size": "batch_size", "masking": "masking", "mlm_probability": "mlm_probability",
    "replacement": "replacement", "eval_batches": "eval_batches", "shards_dir": "shards_dir",
    "out_dir": "train.out_dir", "max_steps": "train.max_steps", "learning_rate": "train.learning_rate",
    "warmup_ratio": "train.warmup_ratio", "grad_accumulation_steps": "train.grad_accumulation_steps",
    "precision": "train.precision", "seed": "train.seed", "eval_every": "train.eval_every",
    "save_every": "train.save_every", "log_every": "train.log_every", "device": "train.device",
}


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "pretrain", help=command_help("pretrain"),
        description=__doc__.split("\n\n")[0] + " Run it under torchrun to train on several processes or machines.")
    p.add_argument("--config", default=None, help="TOML file of PretrainConfig settings ([train] for the loop)")
    g = p.add_argument_group("data and model (override the TOML file)")
    g.add_argument("--train-corpus", nargs="+", default=None, help="plain-text training files")
    g.add_argument("--eval-corpus", nargs="+", default=None, help="held-out plain-text files")
    g.add_argument("--corpus-mode", choices=CORPUS_MODES, default=None)
    g.add_argument("--tokenizer", default=None, help="vocabulary directory (ctxemb vocab) or model name")
    g.add_argument("--init-from", default=None, help="continue pretraining this encoder (fresh heads if it has none)")
    g.add_argument("--model", default=None, help="JSON of EncoderConfig fields for a fresh model, e.g. "
                   "'{\"hidden_size\": 256, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
                   "\"intermediate_size\": 1024}'")
    g.add_argument("--sequences", choices=SEQUENCE_MODES, default=None)
    g.add_argument("--max-len", type=positive_int, default=None)
    g.add_argument("--batch-size", type=positive_int, default=None)
    g.add_argument("--masking", choices=MASKING_STRATEGIES, default=None)
    g.add_argument("--mlm-probability", type=fraction, default=None)
    g.add_argument("--replacement", choices=REPLACEMENTS, default=None)
    g.add_argument("--eval-batches", type=positive_int, default=None)
    g.add_argument("--shards-dir", default=None)
    t = p.add_argument_group("training loop (override the TOML file's [train])")
    t.add_argument("--out-dir", default=None)
    t.add_argument("--max-steps", type=positive_int, default=None)
    t.add_argument("--learning-rate", type=non_negative_float, default=None)
    t.add_argument("--warmup-ratio", type=fraction, default=None)
    t.add_argument("--grad-accumulation-steps", type=positive_int, default=None)
    t.add_argument("--precision", choices=("auto", "fp32", "bf16"), default=None)
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--eval-every", type=positive_int, default=None)
    t.add_argument("--save-every", type=positive_int, default=None)
    t.add_argument("--log-every", type=positive_int, default=None)
    t.add_argument("--device", default=None)
    t.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out-dir")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_pretrain)
    return p


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    """The TOML file's settings (if any) with the flags the user gave on top."""
    d: dict[str, Any] = {}
    if args.config:
        d = PretrainConfig.from_toml(args.config).to_dict()
    train = dict(d.pop("train", {}) or {})
    train.setdefault("learning_rate", 5e-4)
    train.setdefault("max_steps", 1000)
    for flag, target in _OVERRIDES.items():
        value = getattr(args, flag)
        if value is None:
            continue
        if target.startswith("train."):
            train[target[len("train."):]] = value
        else:
            d[target] = value
    if args.model is not None:
        try:
            d["model"] = json.loads(args.model)
        except json.JSONDecodeError as e:
            raise ValueError(f"--model must be a JSON object of EncoderConfig fields: {e}") from None
    if args.resume:
        train["resume"] = True
    if args.no_progress:
        train["progress_bar"] = False
    return PretrainConfig.from_dict({**d, "train": TrainConfig.from_dict(train)})


def run_pretrain(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    result = run_pretraining(config)
    if result.eval_metrics:
        shown = {k: round(v, 4) for k, v in result.eval_metrics.items()}
        print(f"held-out after step {result.step}: {shown}")
    print(f"model: {config.train.out_dir}/model (metrics: {config.train.out_dir}/metrics.jsonl)")
    return 0



