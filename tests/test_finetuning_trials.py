"""Several runs of one task: the grid search on dev and repeated seeds (ctxemb.training.trials), with a fake
trainer for the bookkeeping and one real tiny run through the command line."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from ctxemb.training.registry import get_task
from ctxemb.tasks.sequence.task import FinetuneConfig
from ctxemb.training.trials import (apply_overrides, parse_grid, run_grid, run_seeds, setting_name,
                                     summarize_seeds)
from ctxemb.training.config import TrainConfig
from tests.helpers import write_tiny_model
from tests.test_finetuning_tasks import _write_task


def _config(tmp_path, **kw):
    return FinetuneConfig(task="sst2", epochs=1.0, train=TrainConfig(learning_rate=2e-5, out_dir=str(tmp_path / "s"),
                                                                     seed=0), **kw)


class FakeTrainer:
    """Records each trial's config; the dev accuracy is a known function of the learning rate and seed."""

    def __init__(self, fail_at: int | None = None):
        self.configs, self.fail_at = [], fail_at

    def __call__(self, task, config):
        if self.fail_at is not None and len(self.configs) == self.fail_at:
            raise KeyboardInterrupt  # a run killed mid-way: no row is written
        self.configs.append(config)
        model_dir = Path(config.train.out_dir) / "model"
        model_dir.mkdir(parents=True)
        (model_dir / "run.json").write_text(json.dumps({"metrics": {"best_step": 7}}))
        acc = 80 + 1e5 * config.train.learning_rate + config.train.seed + config.epochs
        return SimpleNamespace(final_metrics={"accuracy": acc}, model_dir=model_dir)


def test_parse_grid_reads_numbers_and_strings():
    assert parse_grid(["learning-rate=2e-5,5e-5", "head=mean,cls", "train.keep_best=true"]) == {
        "learning_rate": [2e-5, 5e-5], "head": ["mean", "cls"], "train.keep_best": [True]}
    for bad in (["lr"], ["=1"], ["lr="]):
        with pytest.raises(ValueError, match="NAME=V1,V2"):
            parse_grid(bad)
    with pytest.raises(ValueError, match="given twice"):
        parse_grid(["epochs=1", "epochs=2"])


def test_overrides_reach_the_recipe_and_the_loop_and_are_validated(tmp_path):
    base = _config(tmp_path)
    new = apply_overrides(base, {"learning_rate": 5e-5, "head": "mean", "train.seed": 4}, out_dir="x")
    assert (new.train.learning_rate, new.head, new.train.seed, new.train.out_dir) == (5e-5, "mean", 4, "x")
    assert (base.train.learning_rate, base.head, base.train.out_dir) == (2e-5, "checkpoint", str(tmp_path / "s"))
    with pytest.raises(ValueError, match="neither a setting of FinetuneConfig nor of the training loop"):
        apply_overrides(base, {"lr": 1}, out_dir="x")
    with pytest.raises(ValueError, match="head must be one of"):
        apply_overrides(base, {"head": "max"}, out_dir="x")


def test_grid_runs_every_trial_writes_rows_as_they_land_and_resumes(tmp_path):
    task, config = get_task("sst2"), _config(tmp_path)
    grid = {"learning_rate": [1e-5, 3e-5], "epochs": [1.0, 2.0]}
    trainer = FakeTrainer(fail_at=3)
    with pytest.raises(KeyboardInterrupt):
        run_grid(task, config, grid, train_fn=trainer)
    out = Path(config.train.out_dir)
    assert len((out / "trials.jsonl").read_text().splitlines()) == 3  # the rows of the finished trials survive
    (out / "trial-3").mkdir()  # the killed trial left a directory behind
    again = FakeTrainer()
    rows = run_grid(task, config, grid, train_fn=again)
    assert len(again.configs) == 1 and again.configs[0].train.out_dir == str(out / "trial-3")
    assert [r["name"] for r in rows] == ["trial-0", "trial-1", "trial-2", "trial-3"]
    assert [(r["settings"]["learning_rate"], r["settings"]["epochs"]) for r in rows] == [
        (1e-5, 1.0), (1e-5, 2.0), (3e-5, 1.0), (3e-5, 2.0)]
    assert rows[3]["primary"] == pytest.approx(80 + 3 + 0 + 2) and rows[3]["best_step"] == 7
    table = (out / "trials.md").read_text()
    assert table.index("| trial-3 |") < table.index("| trial-0 |")  # best first
    assert "dev accuracy" in table and "budget: none" in table
    with pytest.raises(ValueError, match="holds another search"):
        run_grid(task, config, {"learning_rate": [1e-5]}, train_fn=FakeTrainer())
    with pytest.raises(ValueError, match="neither a setting"):  # checked before any run
        run_grid(task, _config(tmp_path / "b"), {"nope": [1]}, train_fn=FakeTrainer())


def test_budget_stops_starting_trials(tmp_path):
    trainer = FakeTrainer()
    rows = run_grid(get_task("sst2"), _config(tmp_path), {"learning_rate": [1e-5, 2e-5, 3e-5]}, train_fn=trainer,
                    budget_minutes=0)
    assert rows == [] and trainer.configs == []


def test_seeds_report_mean_and_sample_std(tmp_path):
    summary = run_seeds(get_task("sst2"), _config(tmp_path), 3, train_fn=FakeTrainer())
    values = [80 + 2 + s + 1 for s in range(3)]
    assert summary["seeds"] == [0, 1, 2]
    assert summary["summary"]["accuracy"]["mean"] == pytest.approx(statistics.fmean(values))
    assert summary["summary"]["accuracy"]["std"] == pytest.approx(statistics.stdev(values))
    assert json.loads((Path(tmp_path) / "s" / "seeds.json").read_text())["runs"]["seed-2"]["accuracy"] == values[2]
    assert summarize_seeds([5.0])["std"] == 0.0
    with pytest.raises(ValueError, match="seeds must be a positive integer"):
        run_seeds(get_task("sst2"), _config(tmp_path / "z"), 0, train_fn=FakeTrainer())


def test_a_search_through_the_command_line_on_a_tiny_model(tmp_path, capsys):
    from ctxemb.cli import main
    model = write_tiny_model(tmp_path / "tiny")
    train, dev = _write_task(tmp_path / "train.tsv", 96, 0), _write_task(tmp_path / "dev.tsv", 32, 1)
    argv = ["finetune", "custom", "--model", str(model), "--train-file", str(train), "--dev-file", str(dev),
            "--head", "cls", "--epochs", "1", "--max-length", "32", "--precision", "fp32", "--no-progress",
            "--out-dir", str(tmp_path / "search"), "--search", "learning-rate=1e-3,3e-3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "best on dev: trial-" in out
    rows = [json.loads(x) for x in (tmp_path / "search" / "trials.jsonl").read_text().splitlines()]
    assert [r["settings"] for r in rows] == [{"learning_rate": 1e-3}, {"learning_rate": 3e-3}]
    for r in rows:  # each trial is a full run: its model and run record
        run = json.loads((tmp_path / "search" / r["name"] / "model" / "run.json").read_text())
        assert run["metrics"]["final"]["accuracy"] == pytest.approx(r["primary"])
    assert main(argv[:-2] + ["--seeds", "2", "--search", "epochs=1"]) != 0
    assert "either --search" in capsys.readouterr().err


# ---- a search started again must be the same search: same data, model and settings outside the grid (issue #46) --


def _custom(tmp_path, train_file, **kw):
    train = dict(learning_rate=2e-5, out_dir=str(tmp_path / "s"), seed=0)
    train.update(kw.pop("train", {}))
    return FinetuneConfig(task="custom", epochs=1.0, train_file=str(train_file), dev_file=str(train_file),
                          train=TrainConfig(**train), **kw)


def test_a_rerun_with_other_data_or_settings_is_refused_not_reused(tmp_path):
    task, data = get_task("custom"), _write_task(tmp_path / "train.tsv", 8, 0)
    grid = {"learning_rate": [1e-5, 3e-5]}
    first = FakeTrainer()
    run_grid(task, _custom(tmp_path, data), grid, train_fn=first)
    assert len(first.configs) == 2
    again = FakeTrainer()  # the same search: its trials are skipped
    assert [r["name"] for r in run_grid(task, _custom(tmp_path, data), grid, train_fn=again)] == ["trial-0", "trial-1"]
    assert again.configs == []
    out = tmp_path / "s"
    changes = [  # (what changes, the setting the error names)
        (lambda: _custom(tmp_path, data, train={"seed": 1}), r"train\.seed 0 then, 1 now"),
        (lambda: _custom(tmp_path, data, max_train_examples=4), r"max_train_examples \(not set\) then, 4 now"),
        (lambda: _custom(tmp_path, data, model=str(tmp_path / "other-model")), r"model \"all-MiniLM"),
        (lambda: _custom(tmp_path, data, train={"warmup_ratio": 0.2}), r"train\.warmup_ratio"),
        (lambda: _custom(tmp_path, _write_task(tmp_path / "train2.tsv", 8, 0)), r"train_file \".*train\.tsv\" then"),
    ]
    for config, setting in changes:
        trainer = FakeTrainer()
        with pytest.raises(ValueError, match=r"holds the trials of this search run with other settings") as e:
            run_grid(task, config(), grid, train_fn=trainer)
        assert str(out) in str(e.value) and re.search(setting, str(e.value)), str(e.value)
        assert "Use a new --out-dir" in str(e.value) and trainer.configs == []
    _write_task(data, 8, 1)  # the same path, other rows
    with pytest.raises(ValueError, match=r"train_file \(contents\) \"sha256 [0-9a-f]{16}, \d+ bytes\" then, "
                                         r"\"sha256 [0-9a-f]{16}, \d+ bytes\" now"):
        run_grid(task, _custom(tmp_path, data), grid, train_fn=FakeTrainer())
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2 and (out / "trial-0").is_dir()  # nothing deleted
    # what only watches or stores a run is not a setting of its result
    _write_task(data, 8, 0)
    watched = _custom(tmp_path, data, train={"progress_bar": False, "log_every": 3, "keep_last_checkpoints": 1})
    assert run_grid(task, watched, grid, train_fn=FakeTrainer())[1]["name"] == "trial-1"


def test_seeds_rerun_with_other_settings_is_refused(tmp_path):
    task, data = get_task("custom"), _write_task(tmp_path / "train.tsv", 8, 0)
    run_seeds(task, _custom(tmp_path, data), 2, train_fn=FakeTrainer())
    with pytest.raises(ValueError, match=r"max_length 128 then, 64 now"):
        run_seeds(task, _custom(tmp_path, data, max_length=64), 2, train_fn=FakeTrainer())


def test_a_search_recorded_without_its_settings_is_refused(tmp_path):
    task, config = get_task("sst2"), _config(tmp_path)
    out = Path(config.train.out_dir)
    out.mkdir(parents=True)
    (out / "search.json").write_text(json.dumps({"kind": "grid", "task": "sst2", "grid": {"learning_rate": [1e-5]}}))
    with pytest.raises(ValueError, match="recorded by an earlier ctxemb without the settings its trials ran with"):
        run_grid(task, config, {"learning_rate": [1e-5]}, train_fn=FakeTrainer())


def test_two_names_of_one_setting_are_refused(tmp_path):
    task, config = get_task("sst2"), _config(tmp_path)
    for grid in ({"learning_rate": [1e-5], "train.learning_rate": [3e-5]}, {"seed": [1], "train.seed": [2]}):
        trainer = FakeTrainer()
        with pytest.raises(ValueError, match=r"are two names of one setting \(train\.(learning_rate|seed)\)"):
            run_grid(task, config, grid, train_fn=trainer)
        assert trainer.configs == [] and not Path(config.train.out_dir).exists()
    with pytest.raises(ValueError, match="two names of one setting"):
        apply_overrides(config, {"learning_rate": 1e-5, "train.learning_rate": 3e-5}, out_dir="x")
    assert setting_name(config, "epochs") == "epochs" and setting_name(config, "seed") == "train.seed"


def test_a_search_on_other_data_through_the_command_line_is_refused(tmp_path, capsys):
    from ctxemb.cli import main
    model = write_tiny_model(tmp_path / "tiny")
    train, dev = _write_task(tmp_path / "train.tsv", 32, 0), _write_task(tmp_path / "dev.tsv", 16, 1)
    out = tmp_path / "search"
    argv = ["finetune", "custom", "--model", str(model), "--train-file", str(train), "--dev-file", str(dev),
            "--head", "cls", "--epochs", "1", "--max-length", "32", "--precision", "fp32", "--no-progress",
            "--out-dir", str(out), "--search", "learning-rate=1e-3"]
    assert main(argv) == 0
    assert "best on dev: trial-0" in capsys.readouterr().out
    _write_task(train, 32, 5)  # new training data, same file name
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{out} holds the trials of this search run with other settings" in err
    assert "--train-file (contents)" in err and "Use a new --out-dir" in err and "Traceback" not in err
    assert len((out / "trials.jsonl").read_text().splitlines()) == 1
    assert main(argv[:-2] + ["--seed", "3", "--search", "learning-rate=1e-3"]) == 1
    assert "--seed 0 then, 3 now" in capsys.readouterr().err
    assert main(argv[:-1] + ["learning_rate=1e-3", "train.learning-rate=3e-3"]) != 0  # one setting, two spellings
    assert "'learning_rate' and 'train.learning_rate' are two names of one setting" in capsys.readouterr().err


def test_one_axis_under_two_spellings_is_named_with_both():
    with pytest.raises(ValueError, match=r"search axis 'learning_rate' is given twice \(as 'learning-rate' and "
                                         r"'learning_rate'\): give each setting once"):
        parse_grid(["learning-rate=1e-5", "learning_rate=3e-5"])
