"""The pretraining run's masking as one nested config (PretrainConfig.masking, a [masking] table in TOML), the
strategy-name shorthand, and the older flat keys (moved into the table with a deprecation warning)."""

from __future__ import annotations

import argparse
import logging
import types

import numpy as np
import pytest

from ctxemb.tasks.pretraining.masking import MaskingConfig
from ctxemb.tasks.pretraining.config import PretrainConfig, PretrainMaskingConfig, nest_flat_masking_keys
from ctxemb.tasks.pretraining.task import make_masker
from ctxemb.training.config import TrainConfig
from ctxemb.training.task_config import loop_settings


def _base(tmp_path, **kw):
    return {"train_corpus": ["c.txt"], "tokenizer": "vocab", "train": {"learning_rate": 1e-3, "max_steps": 2,
                                                                       "out_dir": str(tmp_path)}, **kw}


def test_the_masking_table_strategy_shorthand_and_a_masking_config_give_one_config(tmp_path):
    table = PretrainConfig.from_dict(_base(tmp_path, masking={"strategy": "span", "mlm_probability": 0.2,
                                                              "max_span_length": 5, "replacement": "uniform"}))
    assert table.masking == PretrainMaskingConfig(strategy="span", mlm_probability=0.2, max_span_length=5,
                                                  replacement="uniform")
    assert table.use_sbo  # SBO follows span masking unless sbo says otherwise
    short = PretrainConfig.from_dict(_base(tmp_path, masking="whole_word"))
    assert short.masking == PretrainMaskingConfig(strategy="whole_word") and not short.use_sbo
    plain = PretrainConfig(train_corpus=["c.txt"], tokenizer="v", masking=MaskingConfig(strategy="span",
                                                                                        mask_fraction=0.5),
                           train=TrainConfig(learning_rate=1e-3, max_steps=1, out_dir=str(tmp_path)))
    assert plain.masking == PretrainMaskingConfig(strategy="span", mask_fraction=0.5)
    assert PretrainConfig.from_dict(table.to_dict()) == table  # round trip (to_dict writes the table)
    assert table.to_dict()["masking"]["replacement"] == "uniform"


def test_flat_keys_of_older_files_still_load_with_a_deprecation_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ctxemb.tasks.pretraining.config"):
        old = PretrainConfig.from_dict(_base(tmp_path, masking="token", mlm_probability=0.3, selection="exact",
                                             replacement="uniform"))
    assert "deprecated" in caplog.text and "masking.mlm_probability" in caplog.text
    assert old.masking == PretrainMaskingConfig(strategy="token", mlm_probability=0.3, selection="exact",
                                                replacement="uniform")
    # no masking key at all: the flat keys go into a table of defaults
    assert nest_flat_masking_keys({"mlm_probability": 0.2}) == {"masking": {"mlm_probability": 0.2}}


def test_bad_masking_settings_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"mlm_probability.*both at the top level and in the \[masking\] table"):
        PretrainConfig.from_dict(_base(tmp_path, masking={"mlm_probability": 0.2}, mlm_probability=0.3))
    with pytest.raises(ValueError, match=r"unknown masking settings \['mlm_prob'\]"):
        PretrainConfig.from_dict(_base(tmp_path, masking={"mlm_prob": 0.2}))
    with pytest.raises(ValueError, match="masking must be one of"):
        PretrainConfig.from_dict(_base(tmp_path, masking="random"))
    with pytest.raises(ValueError, match="replacement must be one of"):
        PretrainConfig.from_dict(_base(tmp_path, masking={"replacement": "zipf"}))
    with pytest.raises(ValueError, match="mask_fraction"):
        PretrainConfig.from_dict(_base(tmp_path, masking={"mask_fraction": 1.5}))
    with pytest.raises(TypeError, match="masking must be"):
        PretrainConfig.from_dict(_base(tmp_path, masking=3))


def test_the_masker_gets_every_masking_setting(tmp_path):
    config = PretrainConfig.from_dict(_base(tmp_path, masking={"strategy": "token", "mask_fraction": 0.5,
                                                               "random_fraction": 0.5, "replacement": "uniform"}))
    shards = types.SimpleNamespace(unigram_counts=np.ones(20), special_token_ids=[0, 1, 2, 3])
    tokenizer = types.SimpleNamespace(vocab_size=20, mask_token_id=3)
    masker = make_masker(config, tokenizer, shards)
    assert masker.config is config.masking and masker.config.keep_fraction == 0


@pytest.mark.parametrize("preset", ["mlm-tiny", "spanbert"])
def test_shipped_presets_use_the_table_and_load_without_warnings(preset, tmp_path, caplog):
    from ctxemb.cli._common import load_preset

    d = load_preset(preset, "pretrain")
    assert isinstance(d["masking"], dict) and not {"mlm_probability", "selection", "replacement"} & set(d)
    with caplog.at_level(logging.WARNING):  # the preset's [train] over the settings class's loop defaults, as the CLI
        config = PretrainConfig.from_dict({**d, **_base(tmp_path), "train": loop_settings(
            PretrainConfig, d["train"], {"out_dir": str(tmp_path)})})
    assert "deprecated" not in caplog.text
    assert config.masking.strategy == ("span" if preset == "spanbert" else "token")


def test_cli_flags_override_the_masking_table_of_a_preset(tmp_path, caplog):
    from ctxemb.cli import pretrain as cli

    toml = tmp_path / "old.toml"  # an older file: flat masking keys
    toml.write_text('train_corpus = ["c.txt"]\ntokenizer = "v"\nmasking = "span"\nmlm_probability = 0.2\n'
                    'replacement = "uniform"\n[train]\nlearning_rate = 0.001\nmax_steps = 2\n'
                    f'out_dir = "{tmp_path / "out"}"\n')
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    with caplog.at_level(logging.WARNING):
        config = cli.config_from_args(parser.parse_args(["pretrain", "--preset", str(toml), "--masking", "token",
                                                         "--mlm-probability", "0.25"]))
    assert config.masking == PretrainMaskingConfig(strategy="token", mlm_probability=0.25, replacement="uniform")
    assert "deprecated" in caplog.text
