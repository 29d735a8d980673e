"""Every recipe through the one run skeleton: the same run twice with the same seed gives bit-identical weights, and
every run directory has the same shape and the same run record (resolved precision, CPU, versions, metrics)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.tasks.token.config import TokenFinetuneConfig
from ctxemb.modeling.checkpoint import read_training_run
from ctxemb.tasks.pretraining.config import PretrainConfig
from ctxemb.tasks.pretraining.task import task_for_config
from ctxemb.tasks.sense.task import SenseTask
from ctxemb.training.callbacks import BestWeights, EarlyStopping
from ctxemb.training.config import TrainConfig
from ctxemb.training.recipe import RUN_RECORD_FILE, SETTINGS_FILE, check_run_settings, read_run_record, resolve_steps
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.helpers import write_corpus, write_tiny_model
from tests.test_finetuning_tasks import _write_task
from tests.test_finetuning_token_tasks import _write_conll_file, _write_squad
from tests.test_wsd_training import TRAIN, PlantedInventory
from tests.test_wsd_training import config as sense_config

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48)


def _train(out, **kw) -> TrainConfig:
    return TrainConfig(**{**dict(learning_rate=3e-3, max_steps=3, out_dir=str(out), progress_bar=False,
                                 precision="fp32", seed=0, log_every=1), **kw})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("recipes")
    write_corpus(d / "corpus.txt", 12, seed=0)
    return {"dir": d, "model": write_tiny_model(d / "tiny", num_hidden_layers=3), "corpus": d / "corpus.txt",
            "tsv": _write_task(d / "t.tsv", 48, 0), "conll": _write_conll_file(d / "c.conll", 24, 0),
            "squad": _write_squad(d / "q.json", 24, 0)}


def _pretrain(data, out, **kw):
    model = dict(init_from=str(data["model"])) if kw.pop("continued", False) else dict(tokenizer=str(data["model"]),
                                                                                        model=TINY)
    config = PretrainConfig(train_corpus=[str(data["corpus"])], eval_corpus=[str(data["corpus"])], eval_batches=2,
                            max_length=24, batch_size=8, train=_train(out), **model, **kw)
    return run_task(task_for_config(config), config).model_dir


def _finetune(data, out, **kw):
    return run_task(get_task("custom"), FinetuneConfig(
        task="custom", model=str(data["model"]), head="cls", batch_size=8, max_length=24, train_file=str(data["tsv"]),
        dev_file=str(data["tsv"]), train=_train(out), **kw)).model_dir


def _token(data, out, head):
    squad = head == "qa"
    files = data["squad"] if squad else data["conll"]
    extra = dict(doc_stride=8, max_query_length=8) if squad else dict(max_span_length=3)
    config = TokenFinetuneConfig(
        task="squad-file" if squad else "conll-file", head=head, model=str(data["model"]), batch_size=8,
        max_length=32, train_file=str(files), dev_file=str(files), train=_train(out), **extra)
    return run_task(get_task(config.task), config).model_dir


def _sense(data, out, recipe):
    cfg = sense_config(recipe, out, model=str(data["model"]), max_steps=3)
    return run_task(SenseTask(cfg.recipe, corpus=TRAIN, inventory=PlantedInventory()), cfg).model_dir


RECIPES = {
    "pretrain-scratch": lambda data, out: _pretrain(data, out),
    "pretrain-continued": lambda data, out: _pretrain(data, out, continued=True, masking="span"),
    "finetune-sequence": lambda data, out: _finetune(data, out),
    "finetune-token": lambda data, out: _token(data, out, "softmax"),
    "finetune-span": lambda data, out: _token(data, out, "span"),
    "finetune-qa": lambda data, out: _token(data, out, "qa"),
    "wsd-supcon": lambda data, out: _sense(data, out, "supcon"),
    "wsd-bem": lambda data, out: _sense(data, out, "bem"),
}
PIPELINE_TAGS = {"pretrain-scratch": "fill-mask", "pretrain-continued": "fill-mask",
                 "finetune-sequence": "text-classification", "finetune-token": "token-classification",
                 "finetune-span": "token-classification", "finetune-qa": "question-answering",
                 "wsd-supcon": "feature-extraction", "wsd-bem": "feature-extraction"}
RECORD_KEYS = {"training_run", "recipe", "settings", "train", "precision", "versions", "machine", "data", "training",
               "metrics"}


@pytest.fixture(scope="module")
def runs(data):
    """Each recipe run twice with the same seed: name -> (model_dir, model_dir)."""
    return {name: (run(data, data["dir"] / f"{name}-a"), run(data, data["dir"] / f"{name}-b"))
            for name, run in RECIPES.items()}


@pytest.mark.parametrize("name", list(RECIPES))
def test_the_same_seed_gives_bit_identical_weights(runs, name):
    a, b = runs[name]
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert read_training_run(a) == read_training_run(b) is not None


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_run_directory_has_one_shape_and_one_record(runs, name):
    model_dir = runs[name][0]
    run_dir = model_dir.parent
    assert {SETTINGS_FILE, "metrics.jsonl", "model"} <= {p.name for p in run_dir.iterdir()}
    assert any(p.name.startswith("checkpoint-") for p in run_dir.iterdir())
    assert {"config.json", "model.safetensors", RUN_RECORD_FILE} <= {p.name for p in model_dir.iterdir()}
    record = read_run_record(model_dir)
    assert RECORD_KEYS <= set(record)
    assert record["training_run"] == read_training_run(model_dir)
    assert record["precision"]["requested"] == "fp32" and record["precision"]["resolved"] == "fp32"
    assert record["machine"]["cpu"] and isinstance(record["machine"]["cpu_flags"], list)
    assert record["versions"]["torch"] == torch.__version__
    assert record["train"]["max_steps"] == 3 and record["training"]["steps"] == 3
    settings = json.loads((run_dir / SETTINGS_FILE).read_text())
    assert settings == json.loads(json.dumps(record["settings"], default=str))


def test_auto_precision_is_recorded_as_what_it_resolved_to(data, tmp_path, monkeypatch):
    from ctxemb.core import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    model_dir = run_task(get_task("custom"), FinetuneConfig(
        task="custom", model=str(data["model"]), head="cls", batch_size=8, max_length=24, train_file=str(data["tsv"]),
        dev_file=str(data["tsv"]), train=_train(tmp_path / "r", precision="auto", max_steps=1))).model_dir
    recorded = read_run_record(model_dir)["precision"]
    assert (recorded["requested"], recorded["resolved"]) == ("auto", "fp32")
    assert "no AVX512-BF16/AMX-BF16" in recorded["reason"]  # why auto became fp32


def test_a_resumed_run_with_a_changed_setting_is_named(tmp_path, caplog):
    check_run_settings(tmp_path, {"head": "cls", "max_minutes": 1}, resume=False)
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.recipe"):
        check_run_settings(tmp_path, {"head": "mean", "max_minutes": 2}, resume=True, resume_free={"max_minutes"})
    assert "changed recipe settings" in caplog.text and "head 'cls' -> 'mean'" in caplog.text
    assert "max_minutes" not in caplog.text


def test_steps_resolve_from_epochs_and_evaluate_once_per_epoch():
    cfg = TrainConfig(learning_rate=1e-3)
    assert cfg.max_steps is None
    done = resolve_steps(cfg, epochs=3, batches_per_epoch=10)
    assert done.max_steps == 30 and done.eval_every == 10
    assert resolve_steps(TrainConfig(learning_rate=1e-3, max_steps=7), epochs=3, batches_per_epoch=10).max_steps == 7
    with pytest.raises(ValueError, match="max_steps"):
        resolve_steps(cfg, epochs=None, batches_per_epoch=10)


def test_keep_best_restores_the_best_evaluation_and_early_stopping_stops():
    model = torch.nn.Linear(2, 1)
    best = BestWeights(model, "f1")
    with torch.no_grad():
        model.weight.fill_(1.0)
        best.on_evaluate(1, {"f1": 80.0})
        model.weight.fill_(2.0)
        best.on_evaluate(2, {"f1": 70.0})
    assert best.restore() and best.best_step == 1 and float(model.weight.detach()[0, 0]) == 1.0
    stop = EarlyStopping("loss", 2, greater_is_better=False)
    assert [stop.on_evaluate(s, {"loss": v}) for s, v in enumerate([3.0, 2.0, 2.5, 2.1], 1)] == [False, False, False,
                                                                                                 True]
    with pytest.raises(KeyError, match="f1"):
        BestWeights(model, "f1").on_evaluate(1, {"accuracy": 1.0})


def test_keep_best_in_a_finetuning_run_saves_the_best_evaluation(data, tmp_path):
    result = run_task(get_task("custom"), FinetuneConfig(
        task="custom", model=str(data["model"]), head="cls", batch_size=8, max_length=24, epochs=3,
        train_file=str(data["tsv"]), dev_file=str(data["tsv"]),
        train=_train(tmp_path / "r", max_steps=None, keep_best=True)))
    record = read_run_record(result.model_dir)
    history = record["metrics"]["history"]
    assert len(history) == 3 and record["metrics"]["best_step"] is not None
    assert record["metrics"]["final"]["accuracy"] == max(h["accuracy"] for h in history)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_run_has_a_model_card_rendered_from_its_record(runs, name):
    from huggingface_hub import ModelCard

    model_dir = runs[name][0]
    record = read_run_record(model_dir)
    card = ModelCard.load(model_dir / "README.md")
    assert card.data.library_name == "ctxemb" and card.data.pipeline_tag == PIPELINE_TAGS[name]
    assert "ctxemb" in card.data.tags and record["recipe"] in card.data.tags
    final = record["metrics"]["final"]
    if final:  # the model-index holds exactly the run record's metrics
        results = card.data.eval_results
        assert {r.metric_type: r.metric_value for r in results} == final
        assert {r.task_type for r in results} == {PIPELINE_TAGS[name]}
        assert card.data.model_name == record["training_run"]
    else:
        assert not card.data.eval_results
    text = card.text
    assert record["training_run"] in text and record["machine"]["cpu"] in text
    assert f"fp32 (resolved to {record['precision']['resolved']})" in text
    assert "## How to use" in text and "## Limitations" in text
    assert "from scratch" in text if name == "pretrain-scratch" else str(record["settings"].get("model") or
                                                                          record["settings"].get("init_from")) in text
