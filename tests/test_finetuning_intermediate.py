"""Intermediate-task transfer: a first run on another task, then the target task from its encoder with a new head."""

import json
import logging

import pytest
import torch

from ctxemb.training.intermediate import INTERMEDIATE_DIR, intermediate_run
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.tasks.sequence.task import SequenceTask
from ctxemb.modeling.loading import load_encoder
from ctxemb.training.config import TrainConfig
from tests.helpers import write_tiny_model
from tests.test_finetuning_tasks import _write_task


def _config(d, model, out, **kw):
    return FinetuneConfig(
        task="custom", model=str(model), head="mean", epochs=1, batch_size=16, max_length=32,
        train_file=str(_write_task(d / "train.tsv", 320, 0)), dev_file=str(_write_task(d / "dev.tsv", 100, 1)),
        label_names=["no", "yes"],
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(out), progress_bar=False,
                          precision="fp32", seed=0), **kw)


def test_the_stage_trains_first_and_the_target_starts_from_its_encoder(tmp_path, caplog):
    model = write_tiny_model(tmp_path / "tiny", num_hidden_layers=2)
    stage = {"task": "custom", "train_file": str(_write_task(tmp_path / "inter.tsv", 320, 2)),
             "dev_file": str(_write_task(tmp_path / "inter_dev.tsv", 60, 3)), "label_names": ["a", "b"],
             "head": "checkpoint", "epochs": 3, "train": {"learning_rate": 3e-3}}
    config = _config(tmp_path, model, tmp_path / "run", intermediate=stage)
    result = run_task(SequenceTask("custom"), config)  # the stage is a setting of the run: trained first
    inter_model = tmp_path / "run" / INTERMEDIATE_DIR / "model"
    assert (inter_model / "run.json").is_file()
    saved = json.loads((result.model_dir / "finetune_config.json").read_text())
    assert saved["model"] == str(inter_model) and saved["new_head"] is True and saved["intermediate"] is None
    # the stage's loop took the target's seed and precision, its own learning rate
    inter = json.loads((inter_model / "finetune_config.json").read_text())
    assert inter["train"]["seed"] == 0 and inter["train"]["precision"] == "fp32"
    assert inter["train"]["learning_rate"] == 3e-3 and inter["head"] == "checkpoint"
    # the stage's encoder learned the planted task: one epoch of the target gets much further on top of it
    alone = run_task(get_task("custom"), _config(tmp_path, model, tmp_path / "alone"))
    assert result.final_metrics["accuracy"] >= alone.final_metrics["accuracy"] + 20, (result.eval_history,
                                                                                    alone.eval_history)
    ids = torch.tensor([[2, 5, 6, 3]])
    assert not torch.equal(load_encoder(inter_model)(ids).last_hidden_state,
                           load_encoder(model)(ids).last_hidden_state)
    # started again: the finished stage is reused, not trained again
    before = (inter_model / "model.safetensors").stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="ctxemb.training.runner"):
        again = _config(tmp_path, model, tmp_path / "run", intermediate=stage)
        again.train.resume = True
        run_task(SequenceTask("custom"), again)
    assert "reusing the finished run" in caplog.text
    assert (inter_model / "model.safetensors").stat().st_mtime_ns == before


def test_bad_stages_are_refused_before_anything_is_trained(tmp_path):
    model = write_tiny_model(tmp_path / "tiny", num_hidden_layers=1)
    with pytest.raises(ValueError, match="intermediate must be None or a table of settings naming its task"):
        _config(tmp_path, model, tmp_path / "r0", intermediate={"epochs": 1})
    for stage, message in (({"task": "nope"}, "intermediate.task: no task named 'nope'"),
                           ({"task": "snli", "crf": True}, r"intermediate settings \['crf'\] do not apply"),
                           ({"task": "snli", "epochs": -1}, "intermediate \\(snli\\): epochs must be a positive"),
                           ({"task": "snli", "train": 3}, "intermediate.train must be a table")):
        config = _config(tmp_path, model, tmp_path / "r1", intermediate=stage)
        with pytest.raises(ValueError, match=message):
            intermediate_run(config)
        with pytest.raises(ValueError, match=message):
            run_task(SequenceTask("custom"), config)
        assert not (tmp_path / "r1").exists()
