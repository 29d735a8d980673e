"""One entry point for predictions from any saved fine-tuned model: :func:`load_predictor` dispatches on what the
directory says it is.

- A task registered by the user (``finetune_config.json`` names a task that is not built in): that task's
  ``load`` and ``predict`` (:class:`TaskPredictor`).
- Otherwise the saved ``architectures`` (:func:`ctxemb.modeling.architectures.architecture_task`), refined by the
  run's head where the architecture cannot say it (a span classifier is ``CtxembForSpanClassification``; models
  saved before ctxemb wrote ``modeling_ctxemb.py`` name the bare encoder class for it and for a ``cls``/``mean``
  sequence head): question answering -> :class:`~ctxemb.tasks.token.predict.QAPredictor`,
  token classification or a span head -> :class:`~ctxemb.tasks.token.predict.TokenPredictor`, anything
  else -> :class:`~ctxemb.tasks.sequence.predict.SequencePredictor`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch

from ctxemb.core.validation import read_json_file
from ctxemb.training.task_config import load_finetune_config
from ctxemb.tasks.sequence.predict import SequencePredictor
from ctxemb.tasks.token.predict import QAPredictor, TokenPredictor
from ctxemb.modeling.architectures import architecture_task
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import Tokenizer

_BUILT_IN_FAMILIES = ("sequence", "token", "qa")


class TaskPredictor:
    """A registered task's model with its tokenizer: ``predict(inputs)`` calls the task's ``predict``."""

    def __init__(self, task, model, tokenizer: Tokenizer, saved: dict[str, Any]):
        self.task, self.model, self.tokenizer, self.saved = task, model.eval(), tokenizer, saved

    def predict(self, inputs: Sequence) -> list:
        return self.task.predict(self.model, self.tokenizer, inputs, self.saved)


def model_kind(model_dir: str | os.PathLike) -> str:
    """``"qa"``, ``"token"`` (taggers and span classifiers), ``"sequence"``, or ``"task:<name>"`` for a task the user
    registered, from the run's ``finetune_config.json`` and the saved ``architectures``."""
    path = Path(resolve_model_dir(model_dir))
    saved = load_finetune_config(path) or {}
    name = saved.get("task")
    if name is not None:
        from ctxemb.training.registry import get_task

        try:
            task = get_task(name)
        except KeyError:
            task = None
        if task is not None and task.family not in _BUILT_IN_FAMILIES:
            return f"task:{name}"
    if saved.get("head") == "qa":
        return "qa"
    if saved.get("kind") == "token" or saved.get("head") == "span":
        return "token"
    archs = read_json_file(path / "config.json", "config file").get("architectures") or [""]
    kind = architecture_task(archs[0])
    if kind == "question_answering":
        return "qa"
    return "token" if kind == "token_classification" else "sequence"


def load_predictor(model_dir: str | os.PathLike, *, device: str | torch.device = "cpu"):
    """The predictor for a saved model (see the module docstring).

    Raises:
        KeyError: the run names a task that is not registered in this process (register it first).
    """
    kind = model_kind(model_dir)
    if kind == "qa":
        return QAPredictor.from_pretrained(model_dir, device=device)
    if kind == "token":
        return TokenPredictor.from_pretrained(model_dir, device=device)
    if kind == "sequence":
        return SequencePredictor.from_pretrained(model_dir, device=device)
    from ctxemb.training.registry import get_task

    path = Path(resolve_model_dir(model_dir))
    task = get_task(kind[len("task:"):])
    return TaskPredictor(task, task.load(path).to(device), Tokenizer.from_pretrained(path),
                         load_finetune_config(path) or {})
