"""Train any registered task: :func:`run_task`, the one entry every command and the Python API use.

    run_task(task, config)
        [--search / --seeds: each trial is a run_task of its own settings, into its own directory]
        [an intermediate stage: run_task of the stage's task first, then this task from its encoder]
        read the data -> seed -> build the model -> features, batches -> steps from epochs -> run_training
        (ctxemb.training.recipe) with the task's evaluator -> save <out_dir>/model atomically with the stamp and
        the run record

``ctxemb finetune NAME``, ``ctxemb pretrain`` and ``ctxemb wsd train`` call it for every task, built-in or
registered by a user; it returns one :class:`~ctxemb.training.recipe.RunResult`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ctxemb.modeling.dropout import set_dropout
from ctxemb.training.callbacks import Callback
from ctxemb.training.intermediate import intermediate_run
from ctxemb.training.recipe import MODEL_DIR, RunResult, read_run_result, run_training
from ctxemb.training.task import Task, TaskData
from ctxemb.training.trials import run_grid, run_seeds

logger = logging.getLogger(__name__)

__all__ = ["run_task"]


def run_task(task: Task, config, *, search: Mapping[str, Sequence[Any]] | None = None,
             search_budget: float | None = None, seeds: int | None = None,
             after_train: Callable[[RunResult, TaskData], None] | None = None,
             extra_record: Callable[[RunResult, TaskData], dict[str, Any]] | None = None,
             callbacks: Iterable[Callback] = (), data: TaskData | None = None) -> RunResult:
    """Train ``task`` and save ``<config.train.out_dir>/model``: every recipe (fine-tuning, pretraining, sense
    training, a user's task) runs through here the same way.

    Args:
        task: the task object (``ctxemb.training.registry.get_task(name)`` for a registered one).
        config: the run's settings (the task's ``config_class``). With ``config.intermediate`` set (fine-tuning),
            the intermediate stage is trained first into ``<out_dir>/intermediate`` (or reused when finished:
            :mod:`ctxemb.training.intermediate`), and this run starts from its encoder with a new head.
        search: a grid of settings (name -> values, :func:`ctxemb.training.trials.parse_grid`): every combination
            is a trial of its own under ``out_dir`` (:func:`ctxemb.training.trials.run_grid`), selected on dev.
        search_budget: with ``search``, stop starting trials after this many minutes.
        seeds: run the recipe with this many seeds (``seed``, ``seed + 1``, ...; :func:`~ctxemb.training.trials.run_seeds`).
        after_train: called after training, before saving (after the task's own ``after_train``).
        extra_record: recipe entries for the run record (over the task's ``extra_record``).
        callbacks: extra loop callbacks (after the task's own).
        data: the task's data, already read (default: ``task.read(config)``).

    Returns:
        The run's :class:`~ctxemb.training.recipe.RunResult` (with ``data``, the task's data). With ``search``: the
        best trial's on dev; with ``seeds``: the first seed's; either with ``trials`` (the rows, and the seeds'
        summary). A trial finished by an earlier call is read back from its directory (``model`` is None then).

    Raises:
        TypeError: ``config`` is not the task's ``config_class``.
        ValueError: ``search`` with ``seeds``, ``search_budget`` without ``search``, or a refused setting.
    """
    if not isinstance(config, task.config_class):
        raise TypeError(f"task {task.name!r} takes a {task.config_class.__name__}, got {type(config).__name__}")
    if search is not None or seeds is not None:
        if search is not None and seeds is not None:
            raise ValueError("give either search (a grid on dev) or seeds (one recipe, several seeds), not both")
        return _run_trials(task, config, search=search, search_budget=search_budget, seeds=seeds,
                           run=lambda c: run_task(task, c, after_train=after_train, extra_record=extra_record,
                                                  callbacks=callbacks, data=data))
    if search_budget is not None:
        raise ValueError("search_budget limits a search: give the grid with search=")
    if getattr(config, "intermediate", None):
        config = _after_intermediate_stage(task, config)
    return _run_one(task, config, after_train=after_train, extra_record=extra_record, callbacks=callbacks,
                    data=data)


def _after_intermediate_stage(task: Task, config):
    """Train ``config``'s intermediate stage unless it finished already; the target run's config from its encoder."""
    stage_task, stage_config = intermediate_run(config)  # checked before anything is trained
    model_dir = Path(stage_config.train.out_dir) / MODEL_DIR
    if (model_dir / "run.json").is_file():
        logger.info("intermediate stage %s: reusing the finished run in %s", stage_task.name, model_dir)
    else:
        logger.info("intermediate stage: %s into %s, then %s with a new head", stage_task.name,
                    stage_config.train.out_dir, task.name)
        run_task(stage_task, stage_config)
    return dataclasses.replace(config, model=str(model_dir), new_head=True, intermediate=None)


def _run_trials(task: Task, config, *, search, search_budget, seeds, run: Callable[[Any], RunResult]) -> RunResult:
    results: dict[str, RunResult] = {}

    def one(_task, trial_config) -> RunResult:
        result = run(trial_config)
        results[str(Path(trial_config.train.out_dir).resolve())] = result
        return result

    if seeds is not None:
        summary = run_seeds(task, config, seeds, train_fn=one)
        chosen, trials = f"seed-{summary['seeds'][0]}", {"kind": "seeds", **summary}
    else:
        rows = run_grid(task, config, search, train_fn=one, budget_minutes=search_budget)
        if not rows:
            raise ValueError(f"no trial finished within the search budget of {search_budget} minutes")
        _, greater = task.primary(config)
        chosen = (max if greater else min)(rows, key=lambda r: r["primary"])["name"]
        trials = {"kind": "grid", "rows": rows, "best": chosen}
    trial_dir = Path(config.train.out_dir) / chosen
    result = results.get(str(trial_dir.resolve())) or read_run_result(trial_dir / MODEL_DIR)
    result.trials = trials
    return result


def _run_one(task: Task, config, *, after_train, extra_record, callbacks, data) -> RunResult:
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

    result = run_training(spec, build_model=build_model,
                          make_data=lambda model, ctx: task.make_data(config, tokenizer, data, model, ctx),
                          save_files=save_files, after_train=after, extra_record=record,
                          callbacks=[*task.callbacks(config, data), *callbacks])
    result.data = data
    return result
