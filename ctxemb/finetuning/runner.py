"""Train any registered task through the one run skeleton: :func:`run_task`.

    read the data -> seed -> build the model -> features, batches -> steps from epochs -> train with the task's
    evaluator (its primary metric drives keep_best / early stopping) -> save <out_dir>/model atomically with the
    training-run stamp and the run record

``ctxemb finetune NAME`` calls this for every task, built-in or registered by a user.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ctxemb.finetuning.config import FinetuneRunConfig
from ctxemb.finetuning.task import Task, TaskData
from ctxemb.loading import load_tokenizer
from ctxemb.training.data import DatasetBatches
from ctxemb.training.recipe import RunData, RunResult, RunSpec, run_training

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


def run_task(task: Task, config: FinetuneRunConfig, *,
             after_train: Callable[[RunResult, TaskData], None] | None = None,
             extra_record: Callable[[RunResult, TaskData], dict[str, Any]] | None = None) -> TaskRun:
    """Fine-tune ``task`` and save ``<config.train.out_dir>/model``.

    Args:
        task: the task object (``ctxemb.finetuning.registry.get_task(name)`` for a registered one).
        config: the run's settings (the task's ``config_class``).
        after_train: called after training, before saving (e.g. to calibrate a threshold on dev).
        extra_record: recipe entries for the run record.

    Returns:
        A :class:`TaskRun`.

    Raises:
        TypeError: ``config`` is not the task's ``config_class``.
    """
    if not isinstance(config, task.config_class):
        raise TypeError(f"task {task.name!r} takes a {task.config_class.__name__}, got {type(config).__name__}")
    t = time.perf_counter()
    data = task.read(config)
    timing = {"read": time.perf_counter() - t}
    if config.max_train_examples:
        data.train = data.train[:config.max_train_examples]
    primary, greater = task.primary(config)
    settings = {k: v for k, v in config.to_dict().items() if k != "train"}
    spec = RunSpec(recipe=f"finetune-{task.family}", label=f"finetune-{_label(task.name)}", settings=settings,
                   train=config.train, epochs=config.epochs, primary_metric=primary, greater_is_better=greater,
                   timing=timing)
    t = time.perf_counter()
    tokenizer = load_tokenizer(config.model)
    timing["tokenizer"] = time.perf_counter() - t

    def make_data(model, ctx) -> RunData:
        train_features, collate = task.encode(config, tokenizer, data.train, data)
        eval_features, eval_collate = task.encode(config, tokenizer, data.eval, data)
        lengths = feature_lengths(train_features)  # None for features without input_ids (a user's task)
        grouped = config.group_by_length and lengths is not None
        source = DatasetBatches(train_features, batch_size=config.batch_size, collate=collate,
                                seed=config.train.seed, rank=ctx.rank, world_size=ctx.world_size,
                                lengths=lengths if grouped else None)
        stats = {"train_examples": len(data.train), "eval_examples": len(data.eval),
                 "train_features": len(train_features), "eval_features": len(eval_features),
                 "group_by_length": grouped}
        if lengths is not None:  # the share of padding in the first epoch's batches, as trained
            stats["padding_fraction"] = round(source.padding_fraction(0, lengths=lengths), 4)
            logger.info("training batches %s: padding is %.1f%% of the positions",
                        "grouped by length" if grouped else "drawn at random", 100 * stats["padding_fraction"])
        return RunData(source=source, evaluate=task.evaluator(config, tokenizer, data, eval_features, eval_collate),
                       param_groups=task.param_groups(model, config), stats=stats)

    resolved: dict[str, Any] = {}  # the loop's settings as run (max_steps resolved), saved with the model

    def after(outcome: RunResult) -> None:
        resolved["train"] = outcome.train_config
        if after_train is not None:
            after_train(outcome, data)

    def save_files(model, directory: Path) -> None:
        task.save(model, directory, config, data, tokenizer, train_config=resolved["train"])

    run = run_training(spec, build_model=lambda: task.build_model(config, data), make_data=make_data,
                       save_files=save_files, after_train=after,
                       extra_record=(lambda o: extra_record(o, data)) if extra_record else None)
    return TaskRun(run=run, task=task, data=data)


def feature_lengths(features) -> list[int] | None:
    """Each training feature's length in tokens (both texts of a bi-encoder pair), or None when the features do not
    carry ``input_ids``."""
    out = []
    for f in features:
        ids = getattr(f, "input_ids", None)
        if ids is None:
            return None
        out.append(len(ids) + len(getattr(f, "input_ids_b", None) or ()))
    return out


def _label(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name)
