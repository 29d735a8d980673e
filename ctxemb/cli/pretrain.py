"""``ctxemb pretrain``: masked-LM pretraining from a TOML settings file, flags overriding it.

    ctxemb pretrain --preset run.toml
    ctxemb pretrain --train-corpus wiki.txt --tokenizer vocab/ --out-dir runs/bert-small --max-steps 2000
    torchrun --nproc_per_node 2 -m ctxemb pretrain --config run.toml      # data parallel, one process per core/GPU
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxemb.cli._common import (add_dataclass_flags, add_train_flags, command_help, dataclass_overrides, description,
                                load_preset, preset_errors, train_overrides)
# the parser reads the settings only (no torch); the task and the run are imported by run_pretrain
from ctxemb.tasks.pretraining.config import PretrainConfig, nest_flat_masking_keys
from ctxemb.training.task_config import loop_settings



def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "pretrain", help=command_help("pretrain"),
        description=description(__doc__) + " Run it under torchrun to train on several processes or machines.")
    p.add_argument("--preset", "--config", dest="config", default=None,
                   help="TOML file of PretrainConfig settings ([train] for the loop, [masking] for the masking), or a "
                        "preset shipped in ctxemb/presets (e.g. 'mlm-tiny' for pretrain-mlm-tiny.toml)")
    # the recipe's flags, generated from PretrainConfig and its [masking] table (help in the fields' metadata)
    add_dataclass_flags(p.add_argument_group("data, model and objectives (override the TOML file)"), PretrainConfig,
                        nested=("masking",))
    add_train_flags(p, shown_defaults=PretrainConfig.TRAIN_DEFAULTS)
    p.set_defaults(func=run_pretrain)
    return p


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    """The TOML file's settings (if any) with the flags the user gave on top.

    Raises:
        ValueError: ``--model`` is not a JSON object, or a setting is invalid (a PresetError naming the file when
            the preset's).
    """
    preset = load_preset(args.config, "pretrain") if args.config else None
    with preset_errors(preset, lambda: _config_from(args, None)):
        return _config_from(args, preset)


def _config_from(args: argparse.Namespace, preset: dict | None) -> PretrainConfig:
    d: dict[str, Any] = nest_flat_masking_keys(preset) if preset else {}  # validated below, with the flags on top
    train = loop_settings(PretrainConfig, d.pop("train", None), train_overrides(args))
    d.update(dataclass_overrides(args, cls=PretrainConfig))
    if args.model is not None:
        try:
            d["model"] = json.loads(args.model)
        except json.JSONDecodeError as e:
            raise ValueError(f"--model must be a JSON object of EncoderConfig fields: {e}") from None
    masking = dataclass_overrides(args, "masking.")
    if masking:
        d["masking"] = {**d.get("masking", {}), **masking}
    return PretrainConfig.from_dict({**d, "train": train})


def run_pretrain(args: argparse.Namespace) -> int:
    from ctxemb.tasks.pretraining.task import task_for_config
    from ctxemb.training.runner import run_task

    config = config_from_args(args)
    result = run_task(task_for_config(config), config).train
    if result.eval_metrics:
        shown = {k: round(v, 4) for k, v in result.eval_metrics.items()}
        print(f"held-out after step {result.step}: {shown}")
    print(f"model: {config.train.out_dir}/model (metrics: {config.train.out_dir}/metrics.jsonl)")
    return 0
