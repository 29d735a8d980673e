"""Training runs killed (SIGKILL) at injected points and at random moments resume to exactly the uninterrupted run.

The harness (``tests/training_scripts/kill_child.py``) runs a tiny recipe in a child process; the environment
variable ``CTXEMB_TEST_KILL_AT=<phase>:<count>`` (``ctxemb.training.faults``) kills it inside a named phase: the
checkpoint write, the metrics line, the final save, between steps. After each kill the run is resumed
(``resume=True``), possibly to be killed again, until one run finishes; its final checkpoint must hold the weights of
an uninterrupted run, bit for bit, and its ``metrics.jsonl`` the same losses.

The default suite runs one chain on the training loop (each phase killed once); the ``slow`` tests kill every
phase three times per recipe (pretraining, fine-tuning, sense training, the loop) and 20 times at random moments.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ctxemb.core.locks import DirectoryLock, DirectoryLockedError, lock_file_inside
from ctxemb.training import DatasetBatches, TrainConfig, train
from ctxemb.training.faults import ENV, PHASES, kill_point
from ctxemb.training.state import read_checkpoint_weights
from tests.training_scripts.tiny import make_examples, make_model

CHILD = Path(__file__).resolve().parent / "training_scripts" / "kill_child.py"
RECIPES = ("loop", "pretraining", "finetuning", "sense")
# Every phase three times, in an order where each kill is reached (8 steps, a checkpoint every 2, logs every step):
# see the comments for the step each run resumes from.
CHAIN = ["metrics_line:1",      # from 0: step 1's line
         "between_steps:2",     # from 0
         "checkpoint_write:1",  # from 0: inside checkpoint-2
         "metrics_line:3",      # from 0: checkpoint-2 is saved first
         "between_steps:3",     # from 2: checkpoint-4 is saved first
         "checkpoint_write:1",  # from 4: inside checkpoint-6
         "metrics_line:2",      # from 4
         "between_steps:1",     # from 4
         "checkpoint_write:1",  # from 4: inside checkpoint-6
         "final_save:1",        # from 4: checkpoint-6 is saved, killed inside checkpoint-8
         "final_save:1",        # from 6
         "final_save:1"]        # from 6
QUICK_CHAIN = ["checkpoint_write:2",  # from 0: checkpoint-2 is saved, killed inside checkpoint-4
               "metrics_line:2"]      # from 2: step 4's line


def _child(recipe: str, work: Path, out: Path, resume: bool, kill_at: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(CHILD.parents[2]), OMP_NUM_THREADS="1")
    env.pop(ENV, None)
    if kill_at:
        env[ENV] = kill_at
    return subprocess.Popen([sys.executable, str(CHILD), recipe, str(work), str(out), "1" if resume else "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _final_state(out: Path) -> dict[str, torch.Tensor]:
    (final,) = [p for p in out.iterdir() if p.name == "checkpoint-8"]
    return read_checkpoint_weights(final)


def _losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def _reference(recipe: str, tmp_path: Path) -> tuple[Path, float]:
    if recipe == "loop":  # in this process: the same code, without a second interpreter's start-up
        from tests.training_scripts import kill_child

        threads = torch.get_num_threads()
        try:
            kill_child.run(recipe, tmp_path / "work", tmp_path / "reference", resume=False)
        finally:
            torch.set_num_threads(threads)
        return tmp_path / "reference", 0.0
    t0 = time.monotonic()
    code, err = _finish(_child(recipe, tmp_path / "work", tmp_path / "reference", resume=False))
    assert code == 0, err[-3000:]
    return tmp_path / "reference", time.monotonic() - t0


def _assert_same_run(reference: Path, out: Path) -> None:
    want, got = _final_state(reference), _final_state(out)
    assert list(want) == list(got)
    for name in want:
        assert torch.equal(want[name], got[name]), name
    assert _losses(out) == _losses(reference)  # the torn metrics lines were dropped, the steps logged again


def _run_chain(recipe: str, tmp_path: Path, chain: list[str]) -> dict[str, int]:
    reference, _ = _reference(recipe, tmp_path)
    out = tmp_path / "killed"
    kills = {phase: 0 for phase in PHASES}
    for i, spec in enumerate(chain):
        code, err = _finish(_child(recipe, tmp_path / "work", out, resume=i > 0, kill_at=spec))
        assert code == -signal.SIGKILL, "run %d (%s) was not killed (exit %s): %s" % (i, spec, code, err[-2000:])
        kills[spec.split(":")[0]] += 1
    code, err = _finish(_child(recipe, tmp_path / "work", out, resume=True))
    assert code == 0, err[-3000:]
    _assert_same_run(reference, out)
    return kills


def test_the_loop_killed_inside_a_checkpoint_and_a_metrics_line_resumes_exactly(tmp_path):
    kills = _run_chain("loop", tmp_path, QUICK_CHAIN)
    assert kills["checkpoint_write"] == kills["metrics_line"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_phase_killed_three_times_resumes_exactly(tmp_path, recipe):
    kills = _run_chain(recipe, tmp_path, CHAIN)
    assert all(kills[p] == 3 for p in PHASES), kills


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_twenty_random_kills_resume_exactly(tmp_path, recipe):
    reference, _ = _reference(recipe, tmp_path)
    t0 = time.monotonic()  # a whole run in a child, start-up included
    assert _finish(_child(recipe, tmp_path / "work", tmp_path / "timed", resume=False))[0] == 0
    duration = time.monotonic() - t0
    rng = random.Random(29)
    out = tmp_path / "killed"
    kills = attempts = 0
    while kills < 20:
        attempts += 1
        assert attempts < 200, "only %d of %d random kills landed before the run ended" % (kills, attempts)
        proc = _child(recipe, tmp_path / "work", out, resume=True)
        time.sleep(rng.uniform(0.3 * duration, 1.1 * duration))  # mostly after the imports, inside the run
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        code, err = _finish(proc)
        assert code in (0, -signal.SIGKILL), err[-3000:]
        if code == 0 and (out / "checkpoint-8").is_dir():
            shutil_rmtree(out)  # it finished before the kill: start over so that later kills land mid-run
    code, err = _finish(_child(recipe, tmp_path / "work", out, resume=True))
    assert code == 0, err[-3000:]
    _assert_same_run(reference, out)


def shutil_rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def test_a_second_run_into_the_same_out_dir_is_refused(tmp_path):
    config = TrainConfig(learning_rate=0.05, max_steps=2, out_dir=str(tmp_path / "run"), progress_bar=False,
                         device="cpu", precision="fp32")
    other = DirectoryLock(lock_file_inside(tmp_path / "run"), what="another run").acquire()  # a run in progress
    with pytest.raises(DirectoryLockedError, match=r"training run directory .*run.*another --out"):
        train(make_model(), DatasetBatches(make_examples(8), batch_size=4, seed=0), config)
    other.release()
    assert train(make_model(), DatasetBatches(make_examples(8), batch_size=4, seed=0), config).step == 2
    assert not list((tmp_path / "run").glob(".*.tmp"))


def test_kill_points_are_no_ops_without_the_variable_and_refuse_a_bad_one(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    for phase in PHASES:
        kill_point(phase)  # still alive
    monkeypatch.setenv(ENV, "checkpoint:1")
    with pytest.raises(ValueError, match="CTXEMB_TEST_KILL_AT must be <phase>:<count>"):
        kill_point("between_steps")
