"""torchrun: two CPU processes (gloo) train to the same weights as one process with the same global batch,
and resume exactly; the context is read from torchrun's environment."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ctxemb.training import DatasetBatches, EvalBatches, TrainConfig, train
from ctxemb.runtime.distributed import (DistributedContext, all_reduce_mean, any_process, init_distributed,
                                         resolve_device, unwrap_model, wrap_model)
from tests.training_scripts.tiny import make_examples, make_model

SCRIPT = Path(__file__).parent / "training_scripts" / "ddp_train.py"
REPO = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest


def _torchrun() -> str | None:
    beside = Path(sys.executable).parent / "torchrun"
    return str(beside) if beside.exists() else shutil.which("torchrun")


def test_single_process_needs_no_environment(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    ctx = init_distributed("cpu")
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.is_distributed, ctx.backend) == (0, 1, True, False, None)
    model = torch.nn.Linear(2, 2)
    assert wrap_model(model, ctx) is model and unwrap_model(model) is model
    assert all_reduce_mean({"a": 2.0}, ctx) == {"a": 2.0} and any_process(True, ctx)


def test_context_from_torchrun_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    ctx = DistributedContext.from_env("cpu")
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size) == (3, 1, 4, 2)
    assert not ctx.is_main and ctx.is_distributed
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK"):
        DistributedContext.from_env("cpu")
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK"):
        DistributedContext.from_env("cpu")


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)  # never everyone on GPU 0
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("gpu0")


@pytest.mark.skipif(_torchrun() is None or not torch.distributed.is_available(),
                    reason="torchrun / torch.distributed not available")
def test_two_processes_match_one_process_with_the_global_batch(tmp_path):
    out = tmp_path / "ddp.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [_torchrun(), "--standalone", "--nproc_per_node", "2", str(SCRIPT), str(out), str(tmp_path / "work")]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    got = torch.load(out, weights_only=True)
    assert got["world_size"] == 2
    assert got["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)  # cores / processes, not torchrun's 1

    # one process, the same global batch (2 ranks x 4) and schedule
    model = make_model(seed=0, dropout=0.0)
    config = TrainConfig(learning_rate=0.05, max_steps=6, grad_accumulation_steps=2, warmup_steps=2, precision="fp32",
                         device="cpu", progress_bar=False, seed=3, eval_every=3)
    single = train(model, DatasetBatches(make_examples(40), batch_size=8, seed=1), config,
                   eval_data=EvalBatches(make_examples(7, seed=5), batch_size=2))
    for name, w in model.state_dict().items():
        torch.testing.assert_close(got["plain"][name], w, rtol=0, atol=1e-6, msg=name)
    # the evaluation over uneven shards is the mean over all 7 examples
    assert got["plain_eval"]["loss"] == pytest.approx(single.eval_metrics["loss"], rel=1e-5)
    assert got["plain_eval"]["accuracy"] == pytest.approx(single.eval_metrics["accuracy"], rel=1e-5)
    assert got["plain_eval"]["rank"] == 0.5

    # exact resume under DDP, with dropout (different per rank) and accumulation
    assert got["second_start"] == 3
    assert got["resumed_losses"] == got["straight_losses"]
    for name, w in got["straight"].items():
        assert torch.equal(got["resumed"][name], w), name
