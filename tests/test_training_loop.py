"""The training loop on a tiny classifier: it learns, accumulation is exact, metrics and plots are written."""

import json
import logging
import math
import sys
import types

import pytest
import torch

from ctxemb.training import Callback, DatasetBatches, EvalBatches, TrainConfig, train
from ctxemb.training.loop import write_loss_plot
from tests.training_scripts.tiny import TinyOutput, make_examples, make_model


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest


def _config(**kw):
    base = dict(learning_rate=0.05, max_steps=20, precision="fp32", device="cpu", progress_bar=False, seed=0)
    return TrainConfig(**{**base, **kw})


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, loss):
        return step >= self.step


def test_tiny_model_overfits_a_tiny_task():
    examples = make_examples(16)
    model = make_model(dropout=0.1)
    result = train(model, DatasetBatches(examples, batch_size=8, seed=0), _config(max_steps=150, warmup_steps=10),
                   eval_data=EvalBatches(examples, batch_size=5))
    assert len(result.losses) == 150 and result.step == 150 and result.start_step == 0
    assert result.losses[0] > 0.5
    assert result.eval_metrics["loss"] < 0.05 and result.eval_metrics["accuracy"] == 1.0
    assert model.training  # back in train mode after the evaluation


def test_accumulation_equals_one_big_batch():
    examples = make_examples(32)
    big, small = make_model(), make_model()
    r_big = train(big, DatasetBatches(examples, batch_size=8, seed=2), _config(max_steps=10, warmup_steps=2))
    r_small = train(small, DatasetBatches(examples, batch_size=4, seed=2),
                    _config(max_steps=10, warmup_steps=2, grad_accumulation_steps=2))
    torch.testing.assert_close(r_small.losses, r_big.losses, rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(big.state_dict().items(), small.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.equal(big.dense.weight, make_model().dense.weight)  # it did train


def test_metrics_jsonl_checkpoint_and_plot(tmp_path):
    examples = make_examples(16)
    result = train(make_model(), DatasetBatches(examples, batch_size=4), _config(max_steps=6, log_every=2,
                   eval_every=3, out_dir=str(tmp_path)), eval_data=EvalBatches(examples, batch_size=8),
                   eval_fn=lambda model: {"custom": 0.5})
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 3, 4, 6]
    train_keys = {"step", "loss", "lr", "tokens_per_s", "elapsed", "grad_norm", "accuracy"}
    eval_keys = {"eval_loss", "eval_accuracy", "eval_custom"}
    assert set(records[0]) == train_keys
    assert set(records[1]) == {"step", "elapsed"} | eval_keys
    assert set(records[3]) == train_keys | eval_keys  # step 6: a log step and an evaluation step
    assert records[1]["eval_custom"] == 0.5
    assert result.history == records
    # 4 examples x 8 positions with a mask: tokens/s counts only the unmasked ones
    assert all(r["tokens_per_s"] > 0 for r in records if "loss" in r)
    assert result.checkpoint == tmp_path / "checkpoint-6" and result.checkpoint.is_dir()
    pytest.importorskip("matplotlib")
    png = tmp_path / "loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loss_plot_without_matplotlib_warns(tmp_path, monkeypatch, caplog):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.logging"):
        assert write_loss_plot(metrics, tmp_path / "loss.png") is None
    assert "ctxemb[plot]" in caplog.text
    assert not (tmp_path / "loss.png").exists()


def test_callback_stops_early_and_saves(tmp_path):
    seen = []

    class Record(Callback):
        def on_save(self, step, path):
            seen.append(("save", step))

        def on_train_end(self, result):
            seen.append(("end", result.step))

    result = train(make_model(), DatasetBatches(make_examples(8), batch_size=4),
                   _config(max_steps=10, out_dir=str(tmp_path)), callbacks=[StopAt(3), Record()])
    assert result.stopped_early and result.step == 3 and len(result.losses) == 3
    assert seen == [("save", 3), ("end", 3)]
    assert (tmp_path / "checkpoint-3").is_dir()


def test_evaluate_callback_can_stop(tmp_path):
    class EarlyStop(Callback):
        def on_evaluate(self, step, metrics):
            return metrics["loss"] < 10  # always

    examples = make_examples(8)
    result = train(make_model(), DatasetBatches(examples, batch_size=4), _config(max_steps=10, eval_every=2),
                   eval_data=EvalBatches(examples, batch_size=4), callbacks=[EarlyStop()])
    assert result.step == 2 and result.stopped_early


def test_contract_errors(tmp_path):
    examples = make_examples(8)
    with pytest.raises(TypeError, match="BatchSource"):
        train(make_model(), [examples], _config())
    with pytest.raises(ValueError, match="world_size"):
        train(make_model(), DatasetBatches(examples, batch_size=2, rank=0, world_size=2), _config())

    class NoLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(1, 1)

        def forward(self, **batch):
            return {"logits": self.w(torch.ones(1, 1))}

    with pytest.raises(TypeError, match="loss"):
        train(NoLoss(), DatasetBatches(examples, batch_size=2), _config())

    class NaNLoss(NoLoss):
        def forward(self, **batch):
            return TinyOutput(self.w(torch.ones(1, 1)).sum() * float("nan"))

    with pytest.raises(FloatingPointError, match="step 1"):
        train(NaNLoss(), DatasetBatches(examples, batch_size=2), _config())
    train(make_model(), DatasetBatches(examples, batch_size=4), _config(max_steps=1, out_dir=str(tmp_path)))
    with pytest.raises(FileExistsError, match="resume=True"):
        train(make_model(), DatasetBatches(examples, batch_size=4), _config(max_steps=1, out_dir=str(tmp_path)))


def test_layerwise_param_groups_are_used():
    model = make_model()
    groups = [{"params": list(model.classifier.parameters()), "lr_scale": 1.0},
              {"params": [p for n, p in model.named_parameters() if not n.startswith("classifier")], "lr_scale": 1e-6}]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train(model, DatasetBatches(make_examples(8), batch_size=4), _config(max_steps=3, weight_decay=0.0,
          learning_rate=0.1), param_groups=groups)
    moved = {n: (p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters()}
    assert moved["classifier.weight"] > 1e-2
    assert moved["dense.weight"] < 1e-6


def test_tensorboard_is_used_when_asked(tmp_path, monkeypatch):
    calls = []

    class FakeWriter:
        def __init__(self, logdir, purge_step=None):
            calls.append(("init", logdir))

        def add_scalar(self, tag, value, step):
            calls.append((tag, step))

        def close(self):
            calls.append(("close",))

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    train(make_model(), DatasetBatches(make_examples(8), batch_size=4), _config(max_steps=2, log_every=1,
          out_dir=str(tmp_path / "quiet")))
    assert calls == []  # report_to defaults to "none"
    train(make_model(), DatasetBatches(make_examples(8), batch_size=4), _config(max_steps=2, log_every=1,
          out_dir=str(tmp_path), report_to="tensorboard"))
    assert calls[0] == ("init", str(tmp_path / "tensorboard"))
    assert ("train/loss", 1) in calls and ("train/loss", 2) in calls and ("train/lr", 2) in calls
    assert calls[-1] == ("close",)


def test_progress_bar_on_rank_0(capsys):
    train(make_model(), DatasetBatches(make_examples(8), batch_size=4), _config(max_steps=3, log_every=1,
          progress_bar=True))
    err = capsys.readouterr().err
    assert "train" in err and "3/3" in err and "loss=" in err


def test_bf16_autocast_trains(caplog):
    with caplog.at_level(logging.WARNING):
        result = train(make_model(), DatasetBatches(make_examples(8), batch_size=4), _config(max_steps=3,
                       precision="bf16"))
    assert len(result.losses) == 3 and all(math.isfinite(x) for x in result.losses)
