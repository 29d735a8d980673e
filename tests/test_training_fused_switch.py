"""The training loop's ``fused_training`` setting: the fused ops are given to the model for the steps only, a bad value
names the flag, and "on" says where the ops cannot run."""

from __future__ import annotations

import logging

import pytest
import torch

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.fused_training import fused_training_modules
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from ctxemb.runtime.kernels import train_ops_available
from ctxemb.training import Callback, DatasetBatches, TrainConfig, train

PAD = 0


def _classifier(dropout=0.1):
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=48, max_position_embeddings=16, hidden_dropout_prob=dropout,
                           attention_probs_dropout_prob=dropout)
    return EncoderForSequenceClassification(Encoder(config), num_labels=2, problem="classification")


def _examples(n=16):
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(n):
        ids = torch.randint(5, 40, (8,), generator=g)
        ids[6:] = PAD
        rows.append({"input_ids": ids, "attention_mask": (ids != PAD).long(), "labels": torch.tensor(int(ids[0]) % 2)})
    return rows


class SeesOps(Callback):
    """Records, at each step's end, whether every flaggable module holds the fused ops."""

    def __init__(self, model):
        self.model, self.seen = model, []

    def on_step_end(self, step, loss):
        self.seen.append([m.fused_training_ops is not None for m in fused_training_modules(self.model)])


def _run(setting, model=None):
    model = model if model is not None else _classifier()
    sees = SeesOps(model)
    config = TrainConfig(learning_rate=1e-3, max_steps=3, precision="fp32", device="cpu", progress_bar=False, seed=1,
                         fused_training=setting)
    result = train(model, DatasetBatches(_examples(), batch_size=4, seed=0), config, callbacks=[sees])
    return model, sees.seen, result


def test_a_bad_value_names_the_flag():
    with pytest.raises(ValueError, match=r"--fused-training.*'auto', 'on', 'off'; got 'sometimes'"):
        TrainConfig(learning_rate=1e-3, fused_training="sometimes")


def test_off_keeps_torch_ops():
    model, seen, result = _run("off")
    assert seen == [[False] * 7] * 3  # 2 layers x (attention, its output, the feed-forward output) + the embeddings
    assert all(torch.isfinite(torch.tensor(result.losses)))


@pytest.mark.skipif(not train_ops_available()[0], reason="the native training ops do not run here")
@pytest.mark.parametrize("setting", ["auto", "on"])
def test_the_ops_are_given_for_the_steps_only(setting):
    model, seen, result = _run(setting)
    assert seen == [[True] * 7] * 3
    assert [m.fused_training_ops for m in fused_training_modules(model)] == [None] * 7  # the caller's model as it came
    assert all(torch.isfinite(torch.tensor(result.losses)))


@pytest.mark.skipif(not train_ops_available()[0], reason="the native training ops do not run here")
def test_the_same_seed_gives_the_same_run():
    first, second = _run("on")[2].losses, _run("on")[2].losses
    assert first == second


def test_on_warns_where_the_ops_cannot_run(monkeypatch, caplog):
    import ctxemb.training.loop as loop

    monkeypatch.setattr(loop, "enable_fused_training", lambda model: (False, "no AVX-512 here (test)"))
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.loop"):
        _, seen, _ = _run("on")
    assert seen == [[False] * 7] * 3
    assert any("no AVX-512 here (test)" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ctxemb.training.loop"):
        _run("auto")
    assert all(r.levelno < logging.WARNING for r in caplog.records if "no AVX-512 here" in r.getMessage())


def test_compile_refuses_the_fused_ops_on_and_runs_torch_ops_under_auto(caplog):
    with pytest.raises(ValueError, match=r"--compile.*--fused-training.*not 'on'"):
        TrainConfig(learning_rate=1e-3, compile=True, fused_training="on")
    model = _classifier(dropout=0.0)  # compiled dropout draws from Inductor's generator: other masks
    sees = SeesOps(model)
    config = TrainConfig(learning_rate=1e-3, max_steps=3, precision="fp32", device="cpu", progress_bar=False, seed=1,
                         compile=True, fused_training="auto")
    with caplog.at_level(logging.INFO, logger="ctxemb.training.loop"):
        compiled = train(model, DatasetBatches(_examples(), batch_size=4, seed=0), config, callbacks=[sees])
    assert sees.seen == [[False] * len(sees.seen[0])] * 3
    assert "compile=True traces torch's own ops" in caplog.text
    eager = train(_classifier(dropout=0.0), DatasetBatches(_examples(), batch_size=4, seed=0),
                  TrainConfig(learning_rate=1e-3, max_steps=3, precision="fp32", device="cpu", progress_bar=False,
                              seed=1, fused_training="off"))
    # the same forward; AdamW's first steps (about lr per weight, whatever the gradient's size) turn the compiled
    # kernels' rounding into small differences after that
    assert compiled.losses[0] == pytest.approx(eager.losses[0], rel=1e-5)
    assert compiled.losses == pytest.approx(eager.losses, rel=3e-3)
