"""TrainConfig validation and round trip; precision resolution."""

import dataclasses
import json
import logging

import pytest
import torch

from ctxemb.core import precision as loop  # the one precision module (resolve_precision was training.loop's)
from ctxemb.training.config import TrainConfig, epochs_to_steps
from ctxemb.core.precision import resolve_training_precision as resolve_precision


def test_round_trip_through_json():
    cfg = TrainConfig(learning_rate=3e-4, max_steps=100, warmup_ratio=0.1, out_dir="runs/x", resume=True,
                      precision="fp32")
    d = json.loads(json.dumps(cfg.to_dict()))
    assert TrainConfig.from_dict(d) == cfg
    assert "out_dir" not in TrainConfig(learning_rate=1.0, max_steps=1).to_dict()  # no None for TOML
    assert cfg.resolved_warmup_steps == 10
    assert dataclasses.replace(cfg, warmup_ratio=0.0, warmup_steps=3).resolved_warmup_steps == 3


@pytest.mark.parametrize("kwargs, field", [
    ({"learning_rate": 0.0}, "learning_rate"),
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 2.5}, "max_steps"),
    ({"weight_decay": -0.1}, "weight_decay"),
    ({"adam_beta2": 1.0}, "adam_beta2"),
    ({"adam_epsilon": 0}, "adam_epsilon"),
    ({"warmup_steps": 11}, "warmup_steps"),
    ({"warmup_steps": 2, "warmup_ratio": 0.1}, "not both"),
    ({"warmup_ratio": 1.5}, "warmup_ratio"),
    ({"grad_accumulation_steps": 0}, "grad_accumulation_steps"),
    ({"max_grad_norm": -1.0}, "max_grad_norm"),
    ({"precision": "fp16"}, "precision"),
    ({"log_every": 0}, "log_every"),
    ({"keep_last_checkpoints": -1}, "keep_last_checkpoints"),
    ({"save_every": 5}, "save_every"),
    ({"resume": True}, "resume"),
    ({"progress_bar": 1}, "progress_bar"),
    ({"seed": True}, "seed"),
])
def test_invalid_values_name_the_field(kwargs, field):
    args = {"learning_rate": 1e-3, "max_steps": 10, **kwargs}
    with pytest.raises(ValueError, match=field):
        TrainConfig(**args)


def test_from_dict_rejects_unknown_and_missing_fields():
    with pytest.raises(ValueError, match="lerning_rate"):
        TrainConfig.from_dict({"lerning_rate": 1.0, "max_steps": 1})
    with pytest.raises(ValueError, match="learning_rate"):
        TrainConfig.from_dict({"max_steps": 1})
    # max_steps may stay unset until a recipe resolves it from its epochs; the loop refuses to run without it
    assert TrainConfig.from_dict({"learning_rate": 1.0}).max_steps is None


def test_auto_precision_follows_hardware_bf16(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: False)
    assert resolve_precision("auto", cpu) == "fp32"
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: None)  # unknown CPU: stay exact
    assert resolve_precision("auto", cpu) == "fp32"
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", cpu) == "bf16"
    assert resolve_precision("fp32", cpu) == "fp32"
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("half", cpu)


def test_explicit_bf16_without_hardware_warns(monkeypatch, caplog):
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: False)
    loop.warn_emulated_bf16.cache_clear()
    with caplog.at_level(logging.WARNING, logger="ctxemb.core.precision"):
        assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    assert "emulated" in caplog.text


def test_epochs_to_steps():
    assert epochs_to_steps(3, batches_per_epoch=10, grad_accumulation_steps=4) == 8
    assert epochs_to_steps(0.5, batches_per_epoch=10) == 5
    with pytest.raises(ValueError, match="epochs"):
        epochs_to_steps(0, 10)
