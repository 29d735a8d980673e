"""Checkpoints: exact resume (same losses, identical weights), pruning, clear errors for broken checkpoints."""

import json
import logging
import random

import numpy as np
import pytest
import torch

from ctxemb.training import Callback, ResumeStateError, DatasetBatches, EvalBatches, TrainConfig, train
from ctxemb.training.state import latest_checkpoint, list_checkpoints, read_checkpoint_weights
from tests.training_scripts.tiny import make_examples, make_model


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, loss):
        return step >= self.step


def _run(out_dir, *, stop_at=None, resume=False, steps=8, **kw):
    examples = make_examples(24)
    model = make_model(seed=0, dropout=0.3)
    config = TrainConfig(learning_rate=0.05, max_steps=steps, grad_accumulation_steps=2, warmup_steps=2, log_every=2,
                         eval_every=3, precision="fp32", device="cpu", progress_bar=False, seed=5,
                         out_dir=str(out_dir), resume=resume, **kw)
    result = train(model, DatasetBatches(examples, batch_size=4, seed=9), config,
                   eval_data=EvalBatches(examples[:8], batch_size=4),
                   eval_fn=lambda m: {"noise": random.random() + float(np.random.rand()) + float(torch.rand(()))},
                   callbacks=[StopAt(stop_at)] if stop_at else None)
    return model, result


def _records(out_dir):
    return {r["step"]: r for r in map(json.loads, (out_dir / "metrics.jsonl").read_text().splitlines())}


def test_resume_gives_exactly_the_uninterrupted_run(tmp_path):
    straight_model, straight = _run(tmp_path / "straight")
    _, first = _run(tmp_path / "split", stop_at=5)
    assert first.step == 5 and (tmp_path / "split" / "checkpoint-5").is_dir()
    # a new process would start with other generator states: disturb them all
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    resumed_model, second = _run(tmp_path / "split", resume=True)
    assert second.start_step == 5 and second.step == 8
    assert first.losses + second.losses == straight.losses  # exact, with dropout and accumulation
    for (name, a), b in zip(straight_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name
    # logged running averages and evaluations (the eval_fn draws from all three generators) match too
    want, got = _records(tmp_path / "straight"), _records(tmp_path / "split")
    assert sorted(got) == sorted(want) == [2, 3, 4, 6, 8]
    for step, r in want.items():
        for key in ("loss", "lr", "accuracy", "eval_loss", "eval_noise"):
            assert got[step].get(key) == r.get(key), (step, key)


def test_explicit_resume_path_and_nothing_left_to_do(tmp_path):
    _run(tmp_path / "a", steps=4)
    model, result = _run(tmp_path / "b", resume=str(tmp_path / "a" / "checkpoint-4"), steps=4)
    assert result.step == 4 and result.losses == []
    with pytest.raises(FileNotFoundError, match="checkpoint-7"):
        _run(tmp_path / "c", resume=str(tmp_path / "a" / "checkpoint-7"))


def test_resume_true_without_checkpoint_starts_fresh(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.loop"):
        _, result = _run(tmp_path, resume=True, steps=2)
    assert result.start_step == 0 and result.step == 2
    assert "no checkpoint" in caplog.text


def test_only_the_last_checkpoints_are_kept(tmp_path):
    _run(tmp_path, steps=5, save_every=1, keep_last_checkpoints=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 5]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-5"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".ctxemb.lock"]  # no temporaries
    _run(tmp_path / "all", steps=3, save_every=1, keep_last_checkpoints=0)
    assert [s for s, _ in list_checkpoints(tmp_path / "all")] == [1, 2, 3]


def test_checkpoint_layout(tmp_path):
    _run(tmp_path, steps=2)
    ckpt = tmp_path / "checkpoint-2"
    assert sorted(p.name for p in ckpt.iterdir()) == ["model.safetensors", "optimizer.pt", "rank-0.pt",
                                                      "scheduler.pt", "trainer_state.json"]
    info = json.loads((ckpt / "trainer_state.json").read_text())
    assert info["step"] == 2 and info["world_size"] == 1 and info["config"]["max_steps"] == 2
    rank = torch.load(ckpt / "rank-0.pt", weights_only=True)
    assert set(rank) == {"rng", "data", "running"}
    assert set(rank["rng"]) >= {"python", "numpy", "torch"}
    assert set(read_checkpoint_weights(ckpt)) == set(make_model().state_dict())
    assert info["format"] == 2


@pytest.mark.parametrize("name, damage, error", [
    ("model.safetensors", "corrupt", ResumeStateError),
    ("optimizer.pt", "corrupt", ResumeStateError),
    ("rank-0.pt", "corrupt", ResumeStateError),
    ("trainer_state.json", "corrupt", ResumeStateError),
    ("scheduler.pt", "missing", FileNotFoundError),
    ("model.safetensors", "missing", FileNotFoundError),
])
def test_broken_checkpoint_names_the_file(tmp_path, name, damage, error):
    _run(tmp_path, steps=2)
    target = tmp_path / "checkpoint-2" / name
    if damage == "missing":
        target.unlink()
    else:
        target.write_bytes(b"\x00not a checkpoint{")
    with pytest.raises(error, match=name.replace(".", r"\.")):
        _run(tmp_path, resume=True, steps=4)


def test_checkpoint_of_another_model_is_refused(tmp_path):
    _run(tmp_path, steps=2)
    from safetensors.torch import save_file

    sd = read_checkpoint_weights(tmp_path / "checkpoint-2")
    sd.pop("dense.bias")
    save_file(sd, tmp_path / "checkpoint-2" / "model.safetensors")
    with pytest.raises(ResumeStateError, match=r"(?s)model\.safetensors.*dense\.bias"):
        _run(tmp_path, resume=True, steps=4)


def test_data_state_with_numpy_fails_when_saving(tmp_path):
    class NumpyState(DatasetBatches):
        def state_dict(self):
            return dict(super().state_dict(), order=np.arange(3))

    config = TrainConfig(learning_rate=0.01, max_steps=1, precision="fp32", device="cpu", progress_bar=False,
                         out_dir=str(tmp_path))
    with pytest.raises(TypeError, match=r"order.*numpy"):
        train(make_model(), NumpyState(make_examples(4), batch_size=2), config)
    assert not list_checkpoints(tmp_path)
