"""The recipe-level flags of ``ctxemb pretrain``, ``ctxemb wsd train`` and ``ctxemb finetune TASK`` are generated from
their config dataclasses: every setting has a flag whose help is the field's ``metadata["help"]`` and whose default is
the dataclass's (for a fine-tuning task, its shipped recipe's), old spellings keep working with a warning, and the
flags reach the config."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Literal

import pytest

from ctxemb.cli import build_parser
from ctxemb.cli._common import add_dataclass_flags, dataclass_overrides
from ctxemb.models.encoder_config import field_help
from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.tasks.token.config import TokenFinetuneConfig
from ctxemb.tasks.pretraining.config import PretrainConfig, PretrainMaskingConfig
from ctxemb.tasks.sense.config import SenseTrainConfig


def _subparser(parser, *path):
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _actions(parser):
    return {a.dest: a for a in parser._actions}


@pytest.mark.parametrize("command, cls, prefix", [
    (("pretrain",), PretrainConfig, ""), (("pretrain",), PretrainMaskingConfig, "masking."),
    (("wsd", "train"), SenseTrainConfig, ""),
    (("finetune", "custom"), FinetuneRunConfig, ""), (("finetune", "conll-file"), FinetuneRunConfig, ""),
    (("finetune", "custom"), FinetuneConfig, ""), (("finetune", "conll-file"), TokenFinetuneConfig, ""),
])
def test_every_setting_has_a_flag_with_the_fields_help_and_default(command, cls, prefix):
    shown = {}
    if command[0] == "finetune":  # a task's own parser, with the defaults it runs with (its recipe's, if shipped)
        from ctxemb.cli.finetune import _config_class, _recipe_defaults, task_parser

        family = {f.name: f for f in dataclasses.fields(_config_class(command[1]))}
        actions = _actions(task_parser(command[1]))
        shown = _recipe_defaults(command[1], _config_class(command[1]))[0]
    else:
        actions = _actions(_subparser(build_parser(command[0]), *command))
    for f in dataclasses.fields(cls):
        if command[0] == "finetune" and family[f.name] is not f:
            continue  # a shared setting the family declares again: checked with the family's own fields
        if f.metadata.get("cli", True) is False or (prefix == "" and f.name == "masking"):
            assert prefix + f.name not in actions
            continue
        action = actions[prefix + f.name]
        assert action.help.startswith(f.metadata["help"]), f.name  # one source for the help text
        assert action.default is None  # not given = the config's own default (or the preset's)
        default = shown.get(f.name, f.default)
        if default not in (dataclasses.MISSING, None, False, True) and not isinstance(default, tuple):
            assert f"(default {default})" in action.help, f.name
    flags = {s for a in actions.values() for s in a.option_strings}
    assert {"--out-dir", "--learning-rate", "--keep-best"} <= flags  # the loop's, generated from TrainConfig


def test_old_spellings_of_recipe_flags_still_work_and_warn(tmp_path, caplog):
    from ctxemb.cli.pretrain import config_from_args
    from ctxemb.cli.wsd import train_config_from_args

    with caplog.at_level(logging.WARNING, logger="ctxemb.cli"):
        wsd = build_parser("wsd").parse_args(["wsd", "train", "--recipe", "bem", "--max-sentences", "7",
                                              "--out", str(tmp_path)])
        pre = build_parser("pretrain").parse_args(["pretrain", "--config", "mlm-tiny", "--max-len", "32",
                                                   "--train-corpus", "c.txt", "--tokenizer", "x",
                                                   "--out-dir", str(tmp_path)])
    assert train_config_from_args(wsd).max_train_examples == 7 and config_from_args(pre).max_length == 32
    assert "--max-sentences is deprecated" in caplog.text and "--max-len is deprecated" in caplog.text


def test_pretrain_flags_reach_the_config_and_its_masking_table(tmp_path):
    from ctxemb.cli.pretrain import config_from_args

    args = build_parser("pretrain").parse_args([
        "pretrain", "--train-corpus", "a.txt", "b.txt", "--tokenizer", "x", "--out-dir", str(tmp_path),
        "--masking", "span", "--max-span-length", "5", "--span-geometric-p", "0.3", "--no-sbo",
        "--no-sparse-prediction", "--nsp-input", "cls", "--sequences", "nsp", "--mask-fraction", "0.7"])
    config = config_from_args(args)
    assert config.train_corpus == ["a.txt", "b.txt"] and config.sbo is False and not config.sparse_prediction
    assert config.masking == PretrainMaskingConfig(strategy="span", max_span_length=5, span_geometric_p=0.3,
                                                   mask_fraction=0.7)
    assert (config.nsp_input, config.sequences) == ("cls", "nsp")
    # nothing given: the dataclass's defaults
    bare = config_from_args(build_parser("pretrain").parse_args(["pretrain", "--train-corpus", "a.txt",
                                                                 "--tokenizer", "x", "--out-dir", str(tmp_path)]))
    assert bare.masking == PretrainMaskingConfig() and bare.sbo is None and bare.sparse_prediction
    assert bare.train.learning_rate == 5e-4 and bare.train.max_steps == 1000


def test_wsd_flags_override_the_preset_even_at_their_default_value(tmp_path):
    from ctxemb.cli.wsd import train_config_from_args

    preset = tmp_path / "p.toml"
    preset.write_text("temperature = 0.5\nlayers = [-1]\n[train]\nlearning_rate = 1e-4\n")
    args = build_parser("wsd").parse_args(["wsd", "train", "--recipe", "supcon", "--preset", str(preset),
                                           "--temperature", "0.1", "--out-dir", str(tmp_path),
                                           "--layer-pooling", "sum", "--max-minutes", "2"])
    config = train_config_from_args(args)
    assert config.temperature == 0.1 and config.layers == (-1,) and config.layer_pooling == "sum"
    assert config.max_minutes == 2 and config.train.learning_rate == 1e-4 and config.train.save_every == 500
    defaults = train_config_from_args(build_parser("wsd").parse_args(["wsd", "train", "--recipe", "bem",
                                                                      "--out-dir", str(tmp_path)]))
    assert defaults == SenseTrainConfig(recipe="bem", train=defaults.train)
    with pytest.raises(SystemExit):  # choices come from the field's metadata
        build_parser("wsd").parse_args(["wsd", "train", "--recipe", "bem", "--layer-pooling", "median"])


def test_a_new_field_gets_its_flag_from_its_declaration():
    @dataclass
    class Settings:
        mode: Literal["a", "b"] = field(default="a", metadata=field_help("the mode"))
        sizes: list[int] = field(default_factory=list, metadata=field_help("sizes", type="positive_int"))
        rate: float = field(default=0.5, metadata=field_help("the rate", flag="--lr", aliases=("--old-rate",)))
        fast: bool = field(default=False, metadata=field_help("go fast"))
        tidy: bool = field(default=True, metadata=field_help("tidy up"))
        hidden: int = field(default=1, metadata=field_help("no flag", cli=False))

    parser = argparse.ArgumentParser()
    add_dataclass_flags(parser, Settings)
    args = parser.parse_args(["--mode", "b", "--sizes", "1", "2", "--old-rate", "0.1", "--fast", "--no-tidy"])
    assert dataclass_overrides(args, cls=Settings) == {"mode": "b", "sizes": [1, 2], "rate": 0.1, "fast": True,
                                                       "tidy": False}
    assert dataclass_overrides(parser.parse_args([]), cls=Settings) == {}
    for bad in (["--mode", "c"], ["--sizes", "0"], ["--hidden", "2"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_finetune_flags_reach_their_familys_config_and_are_refused_elsewhere(tmp_path):
    from ctxemb.cli._common import UsageError
    from ctxemb.cli.finetune import finetune_config_from_args

    def config(*argv):
        return finetune_config_from_args(build_parser("finetune").parse_args(["finetune", *argv,
                                                                              "--out-dir", str(tmp_path)]))[1]

    token = config("conll-file", "--train-file", "a", "--dev-file", "b", "--head", "span", "--span-lr-scale", "3",
                   "--crf-lr-scale", "50", "--max-length", "64", "--trainable-layers", "2")
    assert (token.span_lr_scale, token.crf_lr_scale, token.max_length) == (3, 50, 64)
    assert (token.regime, token.last_k) == ("last_k", 2)
    seq = config("custom", "--train-file", "a", "--dev-file", "b", "--text-a", "review", "--label-names", "neg",
                 "pos", "--regression", "--layerwise-lr-decay", "0.8")
    assert (seq.text_a, seq.label_names, seq.regression, seq.layerwise_lr_decay) == ("review", ["neg", "pos"], True,
                                                                                      0.8)
    with pytest.raises(UsageError, match="--text-a does not apply to task 'conll-file'"):
        config("conll-file", "--train-file", "a", "--dev-file", "b", "--text-a", "x")
    with pytest.raises(UsageError, match="--doc-stride does not apply to task 'custom'"):
        config("custom", "--train-file", "a", "--dev-file", "b", "--doc-stride", "64")


def test_renamed_settings_keep_their_old_names_with_a_warning(tmp_path, caplog):
    train = {"learning_rate": 1e-3, "max_steps": 2, "out_dir": str(tmp_path)}
    with caplog.at_level(logging.WARNING):
        pre = PretrainConfig.from_dict({"train_corpus": ["c.txt"], "tokenizer": "v", "max_len": 32, "train": train})
        sense = SenseTrainConfig(recipe="bem", max_train_sentences=5, train=train)
        assert (pre.max_length, pre.max_len, sense.max_train_examples, sense.max_train_sentences) == (32, 32, 5, 5)
    assert "max_len is deprecated" in caplog.text and "max_train_sentences is deprecated" in caplog.text
    assert "max_len" not in pre.to_dict() and pre.to_dict()["max_length"] == 32
    assert sense.to_dict()["max_train_examples"] == 5 and "max_train_sentences" not in sense.to_dict()
    with pytest.raises(ValueError, match="give max_length .* or its old name max_len"):
        PretrainConfig(train_corpus=["c.txt"], tokenizer="v", max_length=64, max_len=32, train=train)
    with pytest.raises(ValueError, match="give max_train_examples .* or its old name max_train_sentences"):
        SenseTrainConfig(recipe="bem", max_train_examples=4, max_train_sentences=5, train=train)
