"""One entry point for predictions from any saved model: :func:`load_predictor` finds the model's task and asks it
(:meth:`~ctxemb.training.task.Task.predictor`); built-in and registered tasks take the same path.

The task is the one the run's ``finetune_config.json`` names. A directory without one (a transformers checkpoint, a
model saved outside a run) is predicted by the built-in task its saved ``architectures`` fit
(:func:`ctxemb.modeling.architectures.architecture_task`): question answering -> ``squad-file``, token
classification -> ``conll-file``, anything else -> ``custom`` (sequence classification).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ctxemb.core.validation import read_json_file
from ctxemb.modeling.architectures import architecture_task
from ctxemb.models.hub import resolve_model_dir
from ctxemb.training.registry import get_task
from ctxemb.training.task import Task
from ctxemb.training.task_config import load_finetune_config

__all__ = ["load_predictor", "model_kind", "task_of"]

# the built-in task that predicts a checkpoint saved without a run, by its architecture's task
_BY_ARCHITECTURE = {"question_answering": "squad-file", "token_classification": "conll-file"}


def task_of(model_dir: str | os.PathLike) -> tuple[Task, dict[str, Any]]:
    """The task that predicts a saved model, and the run's ``finetune_config.json`` (``{}`` without one).

    Raises:
        KeyError: the run names a task that is not registered in this process (register it first).
    """
    path = Path(resolve_model_dir(model_dir))
    saved = load_finetune_config(path) or {}
    name = saved.get("task")
    if name is None:
        archs = read_json_file(path / "config.json", "config file").get("architectures") or [""]
        name = _BY_ARCHITECTURE.get(architecture_task(archs[0]), "custom")
    try:
        return get_task(name), saved
    except KeyError as e:
        raise KeyError(f"{path} was trained by the task {name!r}, which is not registered here: register it "
                       f"(ctxemb.training.registry.register_task) before predicting; {e.args[0]}") from None


def model_kind(model_dir: str | os.PathLike) -> str:
    """What ``ctxemb predict`` feeds a saved model: ``"sequence"``, ``"token"``, ``"qa"``, or ``"task:<name>"`` (a
    task whose inputs are JSON values), from its task (:meth:`~ctxemb.training.task.Task.prediction_kind`)."""
    task, saved = task_of(model_dir)
    kind = task.prediction_kind(saved)
    return f"task:{task.name}" if kind == "inputs" else kind


def load_predictor(model_dir: str | os.PathLike, *, device: str | torch.device = "cpu"):
    """The predictor of a saved model: its task's (:meth:`~ctxemb.training.task.Task.predictor`).

    Raises:
        KeyError: the run names a task that is not registered in this process (register it first).
    """
    task, _ = task_of(model_dir)
    return task.predictor(model_dir, device=device)
