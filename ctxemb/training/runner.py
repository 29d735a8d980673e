"""Train any registered task through the one run skeleton: :func:`run_task`.

    read the data -> seed -> build the model -> features, batches -> steps from epochs -> train with the task's
    evaluator (its primary metric drives keep_best / early stopping) -> save <out_dir>/model atomically with the
    training-run stamp and the run record

``ctxemb finetune NAME``, ``ctxemb pretrain`` and ``ctxemb wsd train`` call this for every task, built-in or
registered by a user.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ctxemb.training.task import Task, TaskData, stamp_label
from ctxemb.modeling.dropout import set_dropout
from ctxemb.training.callbacks import Callback
from ctxemb.training.recipe import RunResult, run_training

logger = logging.getLogger(__name__)


@dataclass
class TaskRun:
    """What :func:`run_task` did: the skeleton's result, the task and its data."""

    run: RunResult
    task: Task
    data: TaskData

    @property
    def model_dir(self) -> Path:
        return self.run.model_dir

    @property
    def final_metrics(self) -> dict[str, float]:
        return self.run.final_metrics


def run_task(task: Task, config, *,
             after_train: Callable[[RunResult, TaskData], None] | None = None,
             extra_record: Callable[[RunResult, TaskData], dict[str, Any]] | None = None,
             callbacks: Iterable[Callback] = (), data: TaskData | None = None) -> TaskRun:
    """Train ``task`` and save ``<config.train.out_dir>/model``: every recipe (fine-tuning, pretraining, sense
    training, a user's task) runs through here the same way.

    Args:
        task: the task object (``ctxemb.training.registry.get_task(name)`` for a registered one).
        config: the run's settings (the task's ``config_class``).
        after_train: called after training, before saving (e.g. to calibrate a threshold on dev), after the
            task's own ``after_train``.
        extra_record: recipe entries for the run record (over the task's ``extra_record``).
        callbacks: extra loop callbacks (after the task's own).
        data: the task's data, already read (default: ``task.read(config)``).

    Returns:
        A :class:`TaskRun`.

    Raises:
        TypeError: ``config`` is not the task's ``config_class``.
        ValueError: ``config.intermediate`` is set (train through :func:`ctxemb.training.intermediate.train`).
    """
    if getattr(config, "intermediate", None):
        raise ValueError("config.intermediate is set: a run with an intermediate stage goes through "
                         "ctxemb.training.intermediate.train(task, config) (as ctxemb finetune does), which trains "
                         "the stage first")
    if not isinstance(config, task.config_class):
        raise TypeError(f"task {task.name!r} takes a {task.config_class.__name__}, got {type(config).__name__}")
    t = time.perf_counter()
    data = task.limit(config, task.read(config) if data is None else data)
    spec = task.run_spec(config, data)
    spec.timing["read"] = time.perf_counter() - t  # recorded first in the run record's timing
    t = time.perf_counter()
    tokenizer = task.load_tokenizer(config)
    spec.timing["tokenizer"] = time.perf_counter() - t

    resolved: dict[str, Any] = {}  # the loop's settings as run (max_steps resolved), saved with the model

    def after(outcome: RunResult) -> None:
        resolved["train"] = outcome.train_config
        task.after_train(outcome, config, data)
        if after_train is not None:
            after_train(outcome, data)

    def record(outcome: RunResult) -> dict[str, Any]:
        return {**dict(task.extra_record(outcome, config, data) or {}),
                **(extra_record(outcome, data) if extra_record is not None else {})}

    def save_files(model, directory: Path) -> None:
        task.save(model, directory, config, data, tokenizer, train_config=resolved["train"])

    def build_model():
        model = task.build_model(config, data)
        dropout = getattr(config, "dropout", None)
        return model if dropout is None else set_dropout(model, dropout)

    run = run_training(spec, build_model=build_model,
                       make_data=lambda model, ctx: task.make_data(config, tokenizer, data, model, ctx),
                       save_files=save_files, after_train=after, extra_record=record,
                       callbacks=[*task.callbacks(config, data), *callbacks])
    return TaskRun(run=run, task=task, data=data)


def _label(name: str) -> str:
    return stamp_label(name)
