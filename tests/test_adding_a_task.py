"""A new task added from outside the library: a toy multiple-choice task ((B, C, T) inputs) whose reader, features,
collator, evaluation and prediction live in this file, with the one head module it needs
(``ctxemb/modeling/multiple_choice.py``). It registers, trains through the CLI's code path (``ctxemb finetune``),
saves, reloads and predicts. docs/adding-a-task.md walks through this file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import pytest
import torch

from ctxemb.cli import main
from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.tasks.sequence.features import encode_examples
from ctxemb.tasks.predictor import load_predictor
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.training.registry import register_task, task_names, unregister_task
from ctxemb.training.task import Task, TaskData, TaskPredictor
from ctxemb.modeling.checkpoint import read_training_run
from ctxemb.modeling.multiple_choice import EncoderForMultipleChoice
from ctxemb.models.hub import resolve_model_dir
from ctxemb.training.data import EvalBatches, move_to_device
from ctxemb.training.recipe import read_run_record
from tests.helpers import write_choice_questions, write_tiny_model



# ---- 1. the reader: one JSON object per line {"context", "choices", "label"} -------------------------------------
def read_mc(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ---- 2. features and the collator: (B, C, T) ------------------------------------------------------------------------
@dataclass(frozen=True)
class MCFeature:
    choices: list  # C EncodedExample, one (context, choice) pair each
    label: int | None


class MCCollator:
    def __init__(self, pad_token_id: int):
        self.pad = pad_token_id

    def __call__(self, items, rng=None) -> dict[str, torch.Tensor]:
        B, C = len(items), len(items[0].choices)
        T = max(len(e.input_ids) for it in items for e in it.choices)
        ids = torch.full((B, C, T), self.pad, dtype=torch.long)
        types = torch.zeros((B, C, T), dtype=torch.long)
        mask = torch.zeros((B, C, T), dtype=torch.long)
        for b, it in enumerate(items):
            for c, e in enumerate(it.choices):
                n = len(e.input_ids)
                ids[b, c, :n] = torch.tensor(e.input_ids)
                types[b, c, :n] = torch.tensor(e.token_type_ids)
                mask[b, c, :n] = 1
        batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
        if items[0].label is not None:
            batch["labels"] = torch.tensor([it.label for it in items])
        return batch


def encode_mc(tokenizer, examples, max_length: int, with_labels: bool = True) -> list[MCFeature]:
    out = []
    for ex in examples:
        pairs = [TextExample(ex["context"], choice, 0, str(i)) for i, choice in enumerate(ex["choices"])]
        out.append(MCFeature(encode_examples(tokenizer, pairs, max_length=max_length, with_labels=False),
                             ex.get("label") if with_labels else None))
    return out


@torch.inference_mode()
def choice_logits(model, batches) -> torch.Tensor:
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = [model(**{k: v for k, v in move_to_device(b, device).items() if k != "labels"}).logits for b in batches]
    model.train(was_training)
    return torch.cat(out)  # (N, C)


# ---- 3. the settings and the task -----------------------------------------------------------------------------------
@dataclass
class ToyMCConfig(FinetuneRunConfig):
    """The shared fine-tuning settings; the loop's defaults declared once, here (a tiny model learns at 3e-3)."""

    TRAIN_DEFAULTS: ClassVar[Mapping[str, Any]] = {**FinetuneRunConfig.TRAIN_DEFAULTS, "learning_rate": 3e-3}


class ToyMultipleChoice(Task):
    name = "toy-mc"
    family = "multiple_choice"
    primary_metric = "accuracy"
    greater_is_better = True
    config_class = ToyMCConfig

    def read(self, config):
        return TaskData(train=read_mc(config.train_file), eval=read_mc(config.dev_file))

    def build_model(self, config, data):
        return config.apply_regime(EncoderForMultipleChoice.from_pretrained(resolve_model_dir(config.model)))

    def encode(self, config, tokenizer, examples, data):
        return encode_mc(tokenizer, examples, config.max_length), MCCollator(tokenizer.pad_token_id)

    def evaluator(self, config, tokenizer, data, features, collate):
        batches = EvalBatches(features, batch_size=64, collate=collate)
        gold = torch.tensor([ex["label"] for ex in data.eval])
        return lambda m: {"accuracy": 100.0 * float((choice_logits(m, batches).argmax(-1) == gold).float().mean())}

    def load(self, model_dir):
        return EncoderForMultipleChoice.from_pretrained(model_dir)

    def predict(self, model, tokenizer, inputs, saved):
        features = encode_mc(tokenizer, inputs, saved["max_length"], with_labels=False)
        logits = choice_logits(model, EvalBatches(features, batch_size=64, collate=MCCollator(tokenizer.pad_token_id)))
        return [int(i) for i in logits.argmax(-1)]


@pytest.fixture
def toy_task():
    task = register_task(ToyMultipleChoice())
    yield task
    unregister_task(task.name)


def test_a_task_defined_outside_the_library_trains_through_the_cli_saves_reloads_and_predicts(tmp_path, toy_task,
                                                                                              capsys):
    assert "toy-mc" in task_names()
    model = write_tiny_model(tmp_path / "tiny")
    write_choice_questions(tmp_path / "train.jsonl", 240, seed=0)
    write_choice_questions(tmp_path / "dev.jsonl", 60, seed=1)
    out = tmp_path / "run"
    assert main(["finetune", "toy-mc", "--model", str(model), "--train-file", str(tmp_path / "train.jsonl"),
                 "--dev-file", str(tmp_path / "dev.jsonl"), "--out-dir", str(out), "--epochs", "6",
                 "--batch-size", "16", "--max-length", "24", "--precision", "fp32", "--no-progress"]) == 0
    assert "accuracy" in capsys.readouterr().out

    model_dir = out / "model"
    record = read_run_record(model_dir)
    assert record["recipe"] == "finetune-multiple_choice" and record["metrics"]["primary_metric"] == "accuracy"
    assert record["metrics"]["final"]["accuracy"] >= 95.0  # the planted rule is learned
    assert record["train"]["learning_rate"] == 3e-3  # the settings class's TRAIN_DEFAULTS
    assert read_training_run(model_dir) == record["training_run"]
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == ["BertForMultipleChoice"]

    predictor = load_predictor(model_dir)
    assert isinstance(predictor, TaskPredictor)
    dev = read_mc(tmp_path / "dev.jsonl")
    predicted = predictor.predict([{"context": ex["context"], "choices": ex["choices"]} for ex in dev])
    assert sum(p == ex["label"] for p, ex in zip(predicted, dev)) / len(dev) >= 0.95
    # the CLI's predict path dispatches to the registered task too
    capsys.readouterr()
    assert main(["predict", str(model_dir), json.dumps({"context": dev[0]["context"], "choices": dev[0]["choices"]})]) == 0
    assert json.loads(capsys.readouterr().out)["prediction"] == predicted[0]
    # and so does predicting a file: each row is the task's input, its prediction appended
    assert main(["predict", str(model_dir), "--input", str(tmp_path / "dev.jsonl"), "--output",
                 str(tmp_path / "pred.jsonl"), "--no-progress-bar"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in rows] == predicted


def test_the_multiple_choice_head_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = EncoderForMultipleChoice.from_pretrained(write_tiny_model(tmp_path / "tiny")).eval()
    model.save_pretrained(tmp_path / "mc")
    theirs = transformers.AutoModelForMultipleChoice.from_pretrained(tmp_path / "mc").eval()
    ids = torch.randint(5, 40, (2, 3, 7))
    mask = torch.ones_like(ids)
    mask[0, 1, 5:] = 0
    with torch.no_grad():
        ours = model(ids, mask).logits
        ref = theirs(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
