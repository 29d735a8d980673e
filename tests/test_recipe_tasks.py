"""Pretraining and sense training as tasks of the one contract and registry: the registry lists them (families
"pretraining" and "sense"), a config's heads pick its pretraining task, and both train through run_task (the path
every recipe takes) with a primary metric that model selection can follow."""

from __future__ import annotations

import argparse

import pytest

import ctxemb.wsd  # noqa: F401  (registers the sense tasks)
from ctxemb.training.registry import get_task, task_names
from ctxemb.training.runner import run_task
from ctxemb.training.task import Task
from ctxemb.tasks.pretraining.config import PretrainConfig
from ctxemb.tasks.pretraining.task import PretrainingTask, objectives, task_for_config
from ctxemb.training.config import TrainConfig
from ctxemb.training.recipe import read_run_record
from ctxemb.tasks.sense.config import SenseTrainConfig
from ctxemb.tasks.sense.task import SenseTask
from tests.helpers import write_corpus, write_tiny_model
from tests.test_wsd_training import TRAIN, PlantedInventory
from tests.test_wsd_training import config as sense_config

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("recipe-tasks")
    write_corpus(d / "corpus.txt", 12, seed=0)
    return {"model": write_tiny_model(d / "tiny", num_hidden_layers=3), "corpus": d / "corpus.txt"}


def _pretrain_config(data, out, **kw) -> PretrainConfig:
    train = TrainConfig(learning_rate=3e-3, max_steps=3, out_dir=str(out), progress_bar=False, precision="fp32",
                        seed=0, log_every=1, **kw.pop("train", {}))
    return PretrainConfig(train_corpus=[str(data["corpus"])], eval_corpus=[str(data["corpus"])], eval_batches=2,
                          tokenizer=str(data["model"]), model=TINY, max_length=24, batch_size=8, train=train, **kw)


def test_the_registry_lists_every_recipe_family():
    assert task_names(family="pretraining") == ("mlm", "mlm-nsp", "mlm-sbo", "mlm-nsp-sbo")
    assert task_names(family="sense") == ("wsd-bem", "wsd-supcon")
    assert set(task_names(command="pretrain")) == set(task_names(family="pretraining"))
    assert task_names(command="wsd train") == ("wsd-bem", "wsd-supcon")
    finetune = task_names(command="finetune")
    assert {"sst2", "conll2003-ner", "xquad"} <= set(finetune) and not {"mlm", "wsd-bem"} & set(finetune)
    for name in task_names():
        task = get_task(name)
        assert isinstance(task, Task) and task.name == name and task.primary_metric and task.config_class
    assert get_task("wsd-supcon").config_class is SenseTrainConfig and get_task("mlm").config_class is PretrainConfig
    assert get_task("mlm-nsp").primary_metric == "loss" and not get_task("mlm-nsp").greater_is_better


def test_finetune_does_not_offer_other_commands_tasks(capsys):
    from ctxemb.cli import finetune

    parser = argparse.ArgumentParser()
    finetune.add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "mlm", "--out-dir", "x"])
    assert "invalid choice: 'mlm'" in capsys.readouterr().err


def test_finetune_names_the_registrys_tasks_without_importing_them():
    """`ctxemb finetune --help` lists the built-in tasks from the settings modules (the registry imports every task,
    and torch): the two lists agree, in order."""
    from ctxemb.tasks.catalog import FINETUNE_TASKS

    assert FINETUNE_TASKS == task_names(command="finetune")


def test_finetune_accepts_a_task_registered_from_python(capsys):
    from ctxemb.cli import finetune
    from ctxemb.training.registry import register_task, task_names, unregister_task

    class Mine(Task):
        name = "my-task"

    parser = argparse.ArgumentParser()
    command = finetune.add_parser(parser.add_subparsers())
    last_builtin = task_names(command="finetune")[-1]
    register_task(Mine())
    try:
        assert parser.parse_args(["finetune", "my-task", "--out-dir", "x"]).task == "my-task"
        assert f"{last_builtin},my-task}}" in command.format_usage()  # listed after the built-in tasks
    finally:
        unregister_task("my-task")
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "my-task", "--out-dir", "x"])
    assert "invalid choice: 'my-task'" in capsys.readouterr().err


def test_a_configs_heads_pick_its_pretraining_task(data, tmp_path):
    cases = {(): "mlm", (("sequences", "nsp"),): "mlm-nsp", (("masking", "span"),): "mlm-sbo",
             (("masking", "span"), ("sbo", False)): "mlm", (("sequences", "nsp"), ("sbo", True)): "mlm-nsp-sbo"}
    for settings, name in cases.items():
        config = _pretrain_config(data, tmp_path, **dict(settings))
        assert task_for_config(config) is get_task(name) and objectives(config) == tuple(name.split("-"))
    with pytest.raises(ValueError, match=r"'mlm-nsp' trains mlm \+ nsp.*sequences = \"nsp\".*or run task 'mlm'"):
        get_task("mlm-nsp").read(_pretrain_config(data, tmp_path))
    with pytest.raises(ValueError, match="must not train sbo"):
        get_task("mlm").read(_pretrain_config(data, tmp_path, masking="span"))


def test_a_pretraining_task_trains_saves_loads_and_predicts_through_run_task(data, tmp_path):
    task = get_task("mlm-sbo")
    done = run_task(task, _pretrain_config(data, tmp_path / "run", masking="span"))
    record = read_run_record(done.model_dir)
    assert record["recipe"] == "pretrain" and record["training"]["steps"] == 3
    assert record["metrics"]["primary_metric"] == "loss" and record["metrics"]["greater_is_better"] is False
    assert "loss" in record["metrics"]["final"]
    model = task.load(done.model_dir)
    from ctxemb.models.tokenization import Tokenizer

    fills = task.predict(model, Tokenizer.from_pretrained(done.model_dir), ["he sat [MASK] the river ."], {})
    assert len(fills) == 1 and len(fills[0]) == 1 and len(fills[0][0]) == 5  # one text, one mask, top 5
    assert sum(f.probability for f in fills[0][0]) <= 1.0 + 1e-6


def test_a_sense_task_selects_its_best_checkpoint_by_held_out_accuracy(data, tmp_path):
    cfg = sense_config("supcon", tmp_path / "run", model=str(data["model"]), max_steps=4, held_out_fraction=0.25,
                       eval_sentences=40, train={"eval_every": 1, "keep_best": True})
    task = SenseTask("supcon", corpus=TRAIN, inventory=PlantedInventory())
    assert task.primary(cfg) == ("accuracy", True)
    done = run_task(task, cfg)
    metrics = read_run_record(done.model_dir)["metrics"]
    assert metrics["primary_metric"] == "accuracy" and len(metrics["history"]) == 4
    assert metrics["best_step"] is not None
    assert metrics["final"]["accuracy"] == max(h["accuracy"] for h in metrics["history"])
    assert done.data.info["record"]["held_out"]["documents"]  # wsd_training.json's record of the held-out split
    with pytest.raises(ValueError, match="task 'wsd-bem' trains recipe 'bem'; the config says 'supcon'"):
        get_task("wsd-bem").read(cfg)


def test_pretraining_task_objects_are_one_per_objective():
    assert isinstance(get_task("mlm"), PretrainingTask) and isinstance(get_task("wsd-bem"), SenseTask)
    assert get_task("mlm").command == "pretrain" and get_task("wsd-bem").command == "wsd train"
