"""What a run leaves behind: safetensors weights in mid-run checkpoints (and format-1 checkpoints that still resume),
the best evaluation recorded where a user looks for it (checkpoints, run.json, best.json, never pruned, taken back
on resume), and the loggers chosen with ``report_to`` (TensorBoard, wandb offline, rank 0 only)."""

from __future__ import annotations

import json
import random
import struct
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.training import Callback, DatasetBatches, TrainConfig, train
from ctxemb.training.config import parse_report_to
from ctxemb.runtime.distributed import DistributedContext
from ctxemb.training.logging import MetricWriters
from ctxemb.training.recipe import BEST_FILE, RunData, RunSpec, read_run_record, run_training
from ctxemb.training.state import (LEGACY_MODEL_FILE, MODEL_FILE, ResumeStateError, list_checkpoints,
                                   read_checkpoint_weights)
from tests.test_training_resume import _run
from tests.training_scripts.tiny import TinyOutput, make_examples, make_model


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest


# ------------------------------------------------------------------------------------ safetensors checkpoints

def _to_format_1(ckpt):
    """Rewrite a checkpoint as ctxemb before safetensors checkpoints wrote it: weights in model.pt, format 1."""
    torch.save(read_checkpoint_weights(ckpt), ckpt / LEGACY_MODEL_FILE)
    (ckpt / MODEL_FILE).unlink()
    info = json.loads((ckpt / "trainer_state.json").read_text())
    info["format"] = 1
    (ckpt / "trainer_state.json").write_text(json.dumps(info))


def test_a_format_1_checkpoint_resumes_exactly(tmp_path, caplog):
    straight_model, straight = _run(tmp_path / "straight")
    _, first = _run(tmp_path / "split", stop_at=5)
    _to_format_1(tmp_path / "split" / "checkpoint-5")
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    with caplog.at_level("INFO", logger="ctxemb.training.state"):
        resumed_model, second = _run(tmp_path / "split", resume=True)
    assert "format 1" in caplog.text
    assert first.losses + second.losses == straight.losses
    for (name, a), b in zip(straight_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name
    # the checkpoints the resumed run wrote are in the new format
    assert (tmp_path / "split" / "checkpoint-8" / MODEL_FILE).is_file()
    assert not (tmp_path / "split" / "checkpoint-8" / LEGACY_MODEL_FILE).exists()


def test_a_checkpoint_whose_weights_do_not_match_its_format_is_named(tmp_path):
    _run(tmp_path, steps=2)
    ckpt = tmp_path / "checkpoint-2"
    torch.save(read_checkpoint_weights(ckpt), ckpt / LEGACY_MODEL_FILE)
    (ckpt / MODEL_FILE).unlink()  # format 2 says model.safetensors; only model.pt is there
    with pytest.raises(FileNotFoundError, match=r"format-2 checkpoint keeps its weights in model\.safetensors.*"
                                                r"model\.pt"):
        _run(tmp_path, resume=True, steps=4)
    info = json.loads((ckpt / "trainer_state.json").read_text())
    (ckpt / "trainer_state.json").write_text(json.dumps(dict(info, format=3)))
    with pytest.raises(ResumeStateError, match="format 3, newer"):
        _run(tmp_path, resume=True, steps=4)


class TiedLM(nn.Module):
    """Embedding and output layer sharing one matrix (as BERT's MLM decoder and word embeddings do)."""

    def __init__(self, vocab=24, hidden=8):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.dropout = nn.Dropout(0.2)
        self.decoder = nn.Linear(hidden, vocab, bias=False)
        self.decoder.weight = self.embeddings.weight

    def forward(self, input_ids, attention_mask, labels):
        logits = self.decoder(self.dropout(self.embeddings(input_ids)))  # B T V
        return TinyOutput(F.cross_entropy(logits.flatten(0, 1), input_ids.flatten()))


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, loss):
        return step >= self.step


def test_tied_weights_are_stored_once_and_resume_exactly(tmp_path):
    def run(out, **kw):
        torch.manual_seed(0)
        model = TiedLM()
        cfg = TrainConfig(learning_rate=0.05, max_steps=6, precision="fp32", device="cpu", progress_bar=False,
                          seed=3, out_dir=str(out), **{k: v for k, v in kw.items() if k != "stop"})
        result = train(model, DatasetBatches(make_examples(16), batch_size=4, seed=1), cfg,
                       callbacks=[StopAt(kw["stop"])] if "stop" in kw else None)
        return model, result

    straight, r1 = run(tmp_path / "a")
    run(tmp_path / "b", stop=3)
    stored = read_checkpoint_weights(tmp_path / "b" / "checkpoint-3")
    assert len(stored) == 1  # one matrix under one name
    resumed, r2 = run(tmp_path / "b", resume=True)
    assert resumed.decoder.weight is resumed.embeddings.weight  # still tied after loading
    assert torch.equal(straight.embeddings.weight, resumed.embeddings.weight)


# ------------------------------------------------------------------------------------ the best evaluation

SCORES = {1: 1.0, 2: 5.0, 3: 2.0, 4: 3.0, 5: 4.0, 6: 0.5}  # step -> the scripted metric: step 2 is best


class StepClock(Callback):
    """Tells the scripted evaluator which step it evaluates (the loop evaluates before on_step_end)."""

    def __init__(self):
        self.done = 0

    def on_train_begin(self, config, start_step):
        self.done = start_step

    def on_step_end(self, step, loss):
        self.done = step


def _skeleton(out, *, stop=None, resume=False, keep=2):
    clock = StepClock()

    def make_data(model, ctx):
        return RunData(source=DatasetBatches(make_examples(16), batch_size=4, seed=1),
                       evaluate=lambda m: {"score": SCORES[clock.done + 1], "other": float(clock.done + 1)},
                       stats={"train_examples": 16})

    def save_files(model, directory):
        from safetensors.torch import save_model

        save_model(model, str(directory / "model.safetensors"))
        (directory / "config.json").write_text("{}")

    cfg = TrainConfig(learning_rate=0.05, max_steps=6, eval_every=1, save_every=1, keep_last_checkpoints=keep,
                      keep_best=True, precision="fp32", device="cpu", progress_bar=False, seed=0, out_dir=str(out),
                      resume=resume)
    spec = RunSpec(recipe="scripted", label="scripted", settings={}, train=cfg, primary_metric="score")
    cbs = [clock] + ([StopAt(stop)] if stop else [])
    return run_training(spec, build_model=lambda: make_model(seed=0), make_data=make_data, save_files=save_files,
                        callbacks=cbs)


def test_the_best_checkpoint_is_recorded_kept_and_found(tmp_path):
    run = _skeleton(tmp_path)
    assert run.best_step == 2
    # never pruned: the two newest plus the best
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 5, 6]
    record = read_run_record(run.model_dir)
    assert record["metrics"]["best_step"] == 2 and record["metrics"]["best_checkpoint"] == "checkpoint-2"
    assert record["metrics"]["final"] == {"score": 5.0, "other": 2.0}
    assert record["metrics"]["history_steps"] == [1, 2, 3, 4, 5, 6]
    best = json.loads((tmp_path / BEST_FILE).read_text())
    assert best == {"metric": "score", "greater_is_better": True, "best_step": 2, "best_value": 5.0,
                    "metrics": {"score": 5.0, "other": 2.0}, "best_checkpoint": "checkpoint-2", "model_dir": "model"}
    state = json.loads((tmp_path / "checkpoint-6" / "trainer_state.json").read_text())
    assert (state["best_step"], state["best_metric"], state["best_value"]) == (2, "score", 5.0)
    assert json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())["best_step"] == 2
    # the saved model holds the weights of checkpoint-2
    saved = read_checkpoint_weights(tmp_path / "checkpoint-2")
    from safetensors.torch import load_file

    model_weights = load_file(str(run.model_dir / "model.safetensors"))
    assert all(torch.equal(saved[k], model_weights[k]) for k in saved)
    card = (run.model_dir / "README.md").read_text()
    assert "weights of step 2" in card and "checkpoint-2" in card


def test_a_resumed_run_keeps_the_best_evaluation_from_before_the_resume(tmp_path):
    straight = _skeleton(tmp_path / "straight")
    first = _skeleton(tmp_path / "split", stop=4)
    assert first.best_step == 2
    resumed = _skeleton(tmp_path / "split", resume=True)
    assert resumed.best_step == 2
    assert (resumed.model_dir / "model.safetensors").read_bytes() == \
        (straight.model_dir / "model.safetensors").read_bytes()
    assert read_run_record(resumed.model_dir)["metrics"]["final"] == {"score": 5.0, "other": 2.0}


# ------------------------------------------------------------------------------------ report_to

def test_report_to_values_are_checked():
    assert parse_report_to("none") == ()
    assert parse_report_to("tensorboard, wandb") == ("tensorboard", "wandb")
    assert TrainConfig(learning_rate=1e-3, out_dir="x", report_to=["wandb", "tensorboard"]).report_to == \
        "wandb,tensorboard"
    with pytest.raises(ValueError, match="unknown: mlflow"):
        TrainConfig(learning_rate=1e-3, out_dir="x", report_to="tensorboard,mlflow")
    with pytest.raises(ValueError, match="'none' cannot be combined"):
        TrainConfig(learning_rate=1e-3, out_dir="x", report_to="none,wandb")
    with pytest.raises(ValueError, match="out_dir is None"):
        TrainConfig(learning_rate=1e-3, report_to="wandb")


def test_report_to_is_a_generated_flag():
    import argparse

    from ctxemb.cli._common import add_train_flags, train_overrides

    parser = argparse.ArgumentParser()
    add_train_flags(parser)
    args = parser.parse_args(["--report-to", "tensorboard,wandb", "--out-dir", "o"])
    cfg = TrainConfig(learning_rate=1e-3, **train_overrides(args))
    assert cfg.report_to == "tensorboard,wandb"


def _fake_wandb(calls):
    fake = types.ModuleType("wandb")

    class Run:
        id = "abc123"

        def log(self, data, step=None):
            calls.append(("log", step, dict(data)))

        def finish(self):
            calls.append(("finish",))

    def init(**kw):
        calls.append(("init", kw))
        return Run()

    fake.init = init
    fake.Settings = lambda **kw: kw
    return fake


def test_wandb_reports_offline_on_rank_0_and_continues_its_run_on_resume(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = dict(learning_rate=0.05, max_steps=2, log_every=1, precision="fp32", device="cpu", progress_bar=False,
               out_dir=str(tmp_path), report_to="wandb", save_every=1)
    train(make_model(), DatasetBatches(make_examples(8), batch_size=4), TrainConfig(**cfg))
    init = calls[0][1]
    assert init["mode"] == "offline" and init["dir"] == str(tmp_path) and init["id"] is None
    assert init["config"]["report_to"] == "wandb"
    logged = [c for c in calls if c[0] == "log"]
    assert [c[1] for c in logged] == [1, 2] and "train/loss" in logged[0][2] and "train/lr" in logged[0][2]
    assert calls[-1] == ("finish",)
    assert (tmp_path / "wandb" / "run_id").read_text().strip() == "abc123"
    calls.clear()
    train(make_model(), DatasetBatches(make_examples(8), batch_size=4), TrainConfig(**dict(cfg, max_steps=3,
                                                                                           resume=True)))
    assert calls[0][1]["id"] == "abc123" and calls[0][1]["resume"] == "allow"
    # another rank reports nothing
    calls.clear()
    writers = MetricWriters(TrainConfig(**cfg), DistributedContext(rank=1, world_size=2), 0)
    writers.record({"step": 1, "loss": 1.0})
    writers.close()
    assert calls == []


@pytest.mark.parametrize("name, module, extra", [("wandb", "wandb", "ctxemb[wandb]"),
                                                  ("tensorboard", "torch.utils.tensorboard", "ctxemb[tensorboard]")])
def test_a_missing_logger_names_its_extra(tmp_path, monkeypatch, name, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails
    with pytest.raises(ImportError, match=rf"'{name}'.*pip install '{extra.replace('[', '.').replace(']', '.')}'"):
        train(make_model(), DatasetBatches(make_examples(8), batch_size=4),
              TrainConfig(learning_rate=0.05, max_steps=1, progress_bar=False, device="cpu", out_dir=str(tmp_path),
                          report_to=name))


def _wandb_records(path):
    """The records of an offline W&B run file (a LevelDB-style log of protobuf records after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def test_wandb_offline_run_holds_the_logged_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = train(make_model(), DatasetBatches(make_examples(8), batch_size=4),
                   TrainConfig(learning_rate=0.05, max_steps=3, log_every=1, precision="fp32", device="cpu",
                               progress_bar=False, out_dir=str(tmp_path), report_to="wandb"))
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    history = {}
    for r in _wandb_records(run_file):
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            history[items["_step"]] = items
    want = {r["step"]: r["loss"] for r in result.history}
    assert {s: h["train/loss"] for s, h in history.items()} == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------------------------ the card's YAML

def test_card_yaml_names_hub_models_and_datasets_and_keeps_odd_values():
    import math

    from huggingface_hub import ModelCard

    from ctxemb.training.model_card import render_model_card

    record = {"training_run": 'finetune-stsb-"odd": name', "recipe": "finetune-sequence",
              "settings": {"task": "stsb", "model": "all-MiniLM-L6-v2", "head": "cosine", "eval_split": "dev"},
              "train": {"learning_rate": 2e-5, "out_dir": "runs/stsb"}, "data": {"train_examples": 5749},
              "metrics": {"primary_metric": "spearman", "greater_is_better": True,
                          "final": {"spearman": float("nan"), "pearson": 0.123456789012345678, "n": 1500},
                          "history": [], "best_step": None},
              "training": {"steps": 10}, "machine": {"cpu": "X"}, "precision": {"requested": "auto",
                                                                                "resolved": "fp32"}}
    card = ModelCard(render_model_card(record))
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.data.datasets == ["nyu-mll/glue"] and card.data.pipeline_tag == "sentence-similarity"
    assert card.data.model_name == 'finetune-stsb-"odd": name'
    got = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert math.isnan(got["spearman"]) and got["pearson"] == 0.123456789012345678 and got["n"] == 1500
    assert {r.dataset_name for r in card.data.eval_results} == {"GLUE STS-B"}
    # a local directory is no Hub id: no base_model in the YAML, the path in the text
    local = dict(record, settings=dict(record["settings"], model="/nonexistent/dir/model"))
    card = ModelCard(render_model_card(local))
    assert card.data.base_model is None and "/nonexistent/dir/model" in card.text


def test_a_bi_encoder_card_is_a_sentence_similarity_card(tmp_path):
    from huggingface_hub import ModelCard

    from ctxemb.tasks.sequence.config import FinetuneConfig
    from ctxemb.training.registry import get_task
    from ctxemb.training.runner import run_task
    from tests.helpers import write_tiny_model
    from tests.test_finetuning_tasks import _write_scored_pairs

    pairs = _write_scored_pairs(tmp_path / "pairs.tsv", 32, 0)
    result = run_task(get_task("custom"), FinetuneConfig(
        task="custom", model=str(write_tiny_model(tmp_path / "tiny")), head="cosine", batch_size=16, max_length=16,
        train_file=str(pairs), dev_file=str(pairs), text_a="sentence1", text_b="sentence2", label="score",
        regression=True, train=TrainConfig(learning_rate=1e-3, max_steps=2, out_dir=str(tmp_path / "run"),
                                           progress_bar=False, precision="fp32", seed=0)))
    card = ModelCard.load(result.model_dir / "README.md")
    assert card.data.pipeline_tag == "sentence-similarity" and "sentence-transformers" in card.data.tags
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == result.final_metrics
    assert "SentenceTransformer(" in card.text and "`modules.json`, so the pooling it was trained with" in card.text


def test_tensorboard_events_hold_the_logged_metrics(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = train(make_model(), DatasetBatches(make_examples(8), batch_size=4),
                   TrainConfig(learning_rate=0.05, max_steps=3, log_every=1, precision="fp32", device="cpu",
                               progress_bar=False, out_dir=str(tmp_path), report_to="tensorboard"))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    got = {e.step: e.value for e in events.Scalars("train/loss")}
    assert got == pytest.approx({r["step"]: r["loss"] for r in result.history}, rel=1e-6)  # stored as float32


def test_keep_best_in_pretraining_records_the_best_evaluation(tmp_path):
    from ctxemb.tasks.pretraining.config import PretrainConfig
    from ctxemb.tasks.pretraining.task import task_for_config
    from ctxemb.training.runner import run_task
    from tests.helpers import write_corpus, write_tiny_model

    write_corpus(tmp_path / "corpus.txt", 12, seed=0)
    config = PretrainConfig(
        train_corpus=[str(tmp_path / "corpus.txt")], eval_corpus=[str(tmp_path / "corpus.txt")], eval_batches=2,
        max_len=24, batch_size=8, init_from=str(write_tiny_model(tmp_path / "tiny")),
        train=TrainConfig(learning_rate=0.5, max_steps=3, eval_every=1, save_every=1, keep_best=True,
                          out_dir=str(tmp_path / "run"), progress_bar=False, precision="fp32", seed=0))
    run = run_task(task_for_config(config), config)
    evals = {int(r["step"]): r["eval_loss"] for r in run.train.history if "eval_loss" in r}
    best = min(evals, key=evals.get)
    assert best != max(evals)  # the best evaluation is not the last one (lr 0.5 overshoots at step 3)
    record = read_run_record(run.model_dir)
    assert record["metrics"]["best_step"] == best == run.best_step
    assert record["metrics"]["final"]["loss"] == evals[best]
    assert record["metrics"]["best_checkpoint"] == f"checkpoint-{best}"
    assert json.loads((tmp_path / "run" / BEST_FILE).read_text())["best_value"] == evals[best]
