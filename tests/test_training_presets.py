"""Run presets shipped in ctxemb/presets load into their recipe's settings through the command line, flags override
them, and the training flags are the same generated set in every training command."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import ctxemb
from ctxemb.cli import build_parser
from ctxemb.cli._common import load_preset

PRESETS = sorted(p.stem for p in (Path(ctxemb.__file__).parent / "presets").glob("*.toml"))


def test_presets_are_shipped_for_every_recipe():
    assert {p.split("-")[0] for p in PRESETS} == {"finetune", "pretrain", "wsd"}
    with pytest.raises(FileNotFoundError, match="finetune-sst2"):
        load_preset("no-such-preset", "finetune")


@pytest.mark.parametrize("name", [p for p in PRESETS if p.startswith("finetune-")])
def test_finetune_presets_build_their_task_config(name, tmp_path):
    from ctxemb.cli.finetune import finetune_config_from_args

    task = "stsb" if name.startswith("finetune-stsb-") else "custom" if name.startswith("finetune-custom") \
        else name[len("finetune-"):]
    preset = load_preset(name, "finetune")
    args = build_parser("finetune").parse_args(["finetune", task, *_files(task), "--preset", name[len("finetune-"):],
                                                "--out-dir", str(tmp_path), "--seed", "3"])
    _, config = finetune_config_from_args(args)
    for key, value in preset.items():
        if key != "train":
            assert getattr(config, key) == value, key
    # the loop: the preset's [train] over the settings class's defaults (a preset states only what differs)
    loop = {**type(config).TRAIN_DEFAULTS, **preset.get("train", {}), "seed": 3}  # the flag wins
    assert all(getattr(config.train, key) == value for key, value in loop.items()), (loop, config.train)
    if config.intermediate:  # a preset's intermediate stage builds its own task's config, with the run's seed
        from ctxemb.training.intermediate import intermediate_run

        _, stage = intermediate_run(config)
        assert stage.train.seed == 3 and stage.train.out_dir == str(tmp_path / "intermediate")


def _files(task):
    """The flags of the training and dev tables, for the tasks that read only a user's tables."""
    return ["--train-file", "train.csv", "--dev-file", "dev.csv"] if task in ("custom", "multiple-choice") else []


def _finetune_config(tmp_path, *argv):
    from ctxemb.cli.finetune import finetune_config_from_args
    return finetune_config_from_args(build_parser("finetune").parse_args(
        ["finetune", *argv, "--out-dir", str(tmp_path)]))[1]


def test_a_task_with_a_shipped_recipe_uses_it_by_default(tmp_path, caplog):
    from ctxemb.cli._common import default_preset
    from ctxemb.training.registry import task_names
    with_recipe = [t for t in task_names() if default_preset("finetune", t)]
    assert {"sst2", "conll2003-ner", "xquad", "stsb", "mrpc", "rte"} <= set(with_recipe)
    with caplog.at_level(logging.INFO, logger="ctxemb.cli.finetune"):
        config = _finetune_config(tmp_path, "conll2003-ner")
    assert "default recipe finetune-conll2003-ner.toml" in caplog.text
    assert config.head == "crf" and config.train.keep_best  # chosen on dev; the best dev epoch is kept
    assert _finetune_config(tmp_path, "conll2003-ner", "--head", "softmax").head == "softmax"  # flags win
    bare = _finetune_config(tmp_path, "conll2003-ner", "--preset", "none")
    assert bare.head == "softmax" and not bare.train.keep_best  # the dataclass defaults
    for task in with_recipe:  # every shipped default recipe selects on dev
        assert _finetune_config(tmp_path, task, *_files(task)).train.keep_best, task


@pytest.mark.parametrize("name", [p for p in PRESETS if p.startswith("pretrain-")])
def test_pretrain_presets_build_a_pretraining_config(name, tmp_path):
    from ctxemb.cli.pretrain import config_from_args
    from ctxemb.tasks.pretraining.config import PretrainConfig

    source = ["--init-from", "x"] if name == "pretrain-spanbert" else ["--tokenizer", "x"]
    args = build_parser("pretrain").parse_args(["pretrain", "--preset", name[len("pretrain-"):], "--train-corpus",
                                                "c.txt", *source, "--out-dir", str(tmp_path), "--max-steps", "5"])
    config = config_from_args(args)
    loop = {**PretrainConfig.TRAIN_DEFAULTS, **load_preset(name, "")["train"], "max_steps": 5}  # the flag wins
    assert all(getattr(config.train, key) == value for key, value in loop.items()), (loop, config.train)


@pytest.mark.parametrize("name", [p for p in PRESETS if p.startswith("wsd-")])
def test_wsd_presets_build_a_sense_training_config(name, tmp_path):
    from ctxemb.cli.wsd import train_config_from_args

    recipe = name[len("wsd-"):]
    args = build_parser("wsd").parse_args(["wsd", "train", "--recipe", recipe, "--preset", recipe,
                                           "--out-dir", str(tmp_path), "--max-candidates", "3"])
    config = train_config_from_args(args)
    assert config.recipe == recipe and config.max_candidates == 3  # a flag overrides the preset
    assert config.train.save_every == 500


def test_old_flag_spellings_still_work_and_warn(tmp_path, caplog):
    from ctxemb.cli.pretrain import config_from_args

    with caplog.at_level(logging.WARNING, logger="ctxemb.cli"):
        args = build_parser("pretrain").parse_args(["pretrain", "--train-corpus", "c.txt", "--tokenizer", "x",
                                                    "--max-len", "32", "--out", str(tmp_path)])
    assert config_from_args(args).max_length == 32 and config_from_args(args).train.out_dir == str(tmp_path)
    assert "--max-len is deprecated" in caplog.text and "--out is deprecated" in caplog.text


def test_the_training_flags_are_the_same_in_every_training_command():
    def loop_flags(parser, *path):
        for name in path:
            parser = next(a for a in parser._actions if a.dest in ("command", "wsd_command") or a.choices and
                          name in (a.choices or {})).choices[name]
        group = next(g for g in parser._action_groups if g.title.startswith("training loop"))
        return {s for a in group._group_actions for s in a.option_strings}

    from ctxemb.cli.finetune import task_parser
    from ctxemb.training.registry import task_names

    flags = [loop_flags(build_parser("pretrain"), "pretrain"), loop_flags(build_parser("wsd"), "wsd", "train"),
             *(loop_flags(task_parser(task)) for task in task_names(command="finetune"))]  # each task's own flags
    assert all(f == flags[0] for f in flags)
    assert {"--out-dir", "--keep-best", "--early-stopping-patience", "--precision", "--seed"} <= flags[0]
