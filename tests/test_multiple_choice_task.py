"""A built-in task family added the way docs/adding-a-task.md says: the folder ``ctxemb/tasks/multiple_choice/``
(config, data, features, task), its preset ``ctxemb/presets/finetune-multiple-choice.toml``, and this file; nothing
else in the library names it. The test walks the page's steps: the family is found, gets its flags, trains through
the CLI on a fixture, saves, and predicts through the one predict path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ctxemb.cli import main
from ctxemb.tasks.catalog import catalog
from ctxemb.tasks.multiple_choice.data import read_questions
from ctxemb.tasks.predictor import load_predictor
from ctxemb.training.recipe import read_run_record
from ctxemb.training.registry import get_task
from tests.helpers import write_choice_questions, write_tiny_model

ROOT = Path(__file__).resolve().parent.parent
FAMILY_FILES = ("ctxemb/tasks/multiple_choice/", "ctxemb/presets/finetune-multiple-choice.toml")


def test_step_1_the_folder_is_the_registration():
    entry = catalog()["multiple-choice"]
    assert (entry.family, entry.command, entry.config_class.__name__) == ("multiple_choice", "finetune",
                                                                          "MultipleChoiceConfig")
    assert get_task("multiple-choice").config_class is entry.config_class


def test_step_2_nothing_outside_the_family_names_it():
    files = subprocess.run(["git", "ls-files", "ctxemb"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    files += subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "ctxemb"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    naming = [f for f in files if f.endswith((".py", ".toml"))
              and any(s in (ROOT / f).read_text(encoding="utf-8") for s in
                      ("tasks.multiple_choice", "MultipleChoiceTask", "MultipleChoiceConfig", "\"multiple-choice\"",
                       "finetune multiple-choice"))]
    assert naming and all(f.startswith(FAMILY_FILES) for f in naming), naming


def test_step_3_the_task_gets_the_flags_of_its_settings(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "multiple-choice", "--help"])
    text = capsys.readouterr().out
    assert "--context" in text and "--choices" in text and "MultipleChoiceConfig" in text
    assert "(default 16)" in text  # the preset's batch size is the default the help shows


def test_bad_questions_are_refused_naming_the_row(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"context": "a", "choices": ["x", "y"], "label": 0}) + "\n"
                    + json.dumps({"context": "b", "choices": ["x", "y", "z"], "label": 1}) + "\n")
    with pytest.raises(ValueError, match=r"line 2.*3 choices.*has 2"):
        read_questions(path)
    path.write_text(json.dumps({"context": "a", "choices": ["x", "y"], "label": 2}) + "\n")
    with pytest.raises(ValueError, match=r"index in \[0, 2\)"):
        read_questions(path)
    path.write_text(json.dumps({"context": "a", "choices": ["x"], "label": 0}) + "\n")
    with pytest.raises(ValueError, match="at least two"):
        read_questions(path)


def test_step_4_it_trains_saves_and_predicts_through_the_cli(tmp_path, capsys):
    model = write_tiny_model(tmp_path / "tiny")
    write_choice_questions(tmp_path / "train.jsonl", 240, seed=0)
    write_choice_questions(tmp_path / "dev.jsonl", 60, seed=1)
    out = tmp_path / "run"
    assert main(["finetune", "multiple-choice", "--model", str(model), "--train-file", str(tmp_path / "train.jsonl"),
                 "--dev-file", str(tmp_path / "dev.jsonl"), "--out-dir", str(out), "--epochs", "6",
                 "--max-length", "24", "--learning-rate", "3e-3", "--precision", "fp32", "--no-progress"]) == 0
    assert "accuracy" in capsys.readouterr().out
    record = read_run_record(out / "model")
    assert record["recipe"] == "finetune-multiple_choice" and record["settings"]["batch_size"] == 16
    assert record["metrics"]["final"]["accuracy"] >= 95.0  # the planted rule is learned
    assert json.loads((out / "model" / "config.json").read_text())["architectures"] == ["BertForMultipleChoice"]

    dev = read_questions(tmp_path / "dev.jsonl")
    inputs = [{"context": q.context, "choices": list(q.choices)} for q in dev]
    predicted = load_predictor(out / "model").predict(inputs)
    assert sum(p["choice"] == q.label for p, q in zip(predicted, dev)) / len(dev) >= 0.95
    assert all(abs(sum(p["probabilities"]) - 1) < 1e-4 for p in predicted)
    capsys.readouterr()
    assert main(["predict", str(out / "model"), json.dumps(inputs[0])]) == 0
    assert json.loads(capsys.readouterr().out)["prediction"] == predicted[0]
