"""The one run skeleton every recipe uses (pretraining, fine-tuning, sense training, a user's own task).

    seed -> build the model -> features and batches -> resolve steps from epochs -> train(...) with the task's
    evaluator -> (best weights, then their interpolation with the starting ones, if asked) -> one atomic save of
    ``<out_dir>/model`` with the training-run stamp and the run record

A recipe describes its run with a :class:`RunSpec` (its settings, what may change on resume, its epochs) and two
callables: ``build_model()`` (called right after seeding, so a fresh head or a model pretrained from scratch is
the same in every run with that seed) and ``make_data(model, ctx)`` returning :class:`RunData` (the batch source
and the evaluator). :func:`run_training` does the rest, the same way for every recipe.

Every run directory has one shape::

    <out_dir>/
        run_settings.json    the recipe's settings; a resumed run is compared with them (check_run_settings)
        metrics.jsonl  loss.png  tensorboard/  checkpoint-<step>/     (the loop's)
        model/               written atomically at the end:
            config.json          with "ctxemb_training_run": "<label>-<digest of the weights>"
            model.safetensors    tokenizer files, the recipe's own files (e.g. finetune_config.json)
            run.json             the run record (run_record): settings, the resolved TrainConfig, versions,
                                 the precision asked for and what it resolved to, the machine, steps, metrics
            README.md            the model card, rendered from run.json (ctxemb.training.model_card)
        best.json            with model selection (keep_best): the best step, its metrics and checkpoint
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch
from torch import nn

from ctxemb.core.validation import read_json_file
from ctxemb._version import __version__
from ctxemb.core.machine import describe_machine
from ctxemb.core.precision import explain_training_precision
from ctxemb.modeling.checkpoint import stamp_training_run
from ctxemb.core.atomic import atomic_directory, atomic_write
from ctxemb.training.callbacks import BestWeights, Callback, EarlyStopping, TrainResult
# MODEL_DIR lives in training.config (the fine-tuning configuration reads it without torch); importable from here
from ctxemb.training.config import MODEL_DIR, TrainConfig, epochs_to_steps
from ctxemb.runtime.distributed import DistributedContext, barrier, distributed_session
from ctxemb.training.interpolation import choose_interpolation, interpolated_module, snapshot
from ctxemb.training.loop import check_fresh_out_dir, seed_everything, train
from ctxemb.training.model_card import CARD_FILE, render_model_card
from ctxemb.training.state import CHECKPOINT_PREFIX

logger = logging.getLogger(__name__)

SETTINGS_FILE = "run_settings.json"
RUN_RECORD_FILE = "run.json"
BEST_FILE = "best.json"


def resolve_steps(train_config: TrainConfig, *, epochs: float | None, batches_per_epoch: int | None,
                  evaluate_each_epoch: bool = True) -> TrainConfig:
    """The loop's settings with ``max_steps`` resolved: kept if set, else ``epochs`` passes over
    ``batches_per_epoch`` micro-batches; ``eval_every`` (if 0 and ``evaluate_each_epoch``) becomes once per epoch.

    Raises:
        ValueError: neither ``max_steps`` nor ``epochs`` is set.
    """
    steps = train_config.max_steps
    if steps is None:
        if epochs is None or not batches_per_epoch:
            raise ValueError("set train.max_steps, or the recipe's epochs over data with a known number of batches "
                             "per epoch: the run's length is unknown")
        steps = epochs_to_steps(epochs, batches_per_epoch, train_config.grad_accumulation_steps)
    eval_every = train_config.eval_every
    if not eval_every and evaluate_each_epoch and epochs:
        eval_every = max(1, steps // math.ceil(epochs))
    return dataclasses.replace(train_config, max_steps=steps, eval_every=eval_every)


def machine_info() -> dict[str, Any]:
    """The machine a run trained on: CPU model name and the instruction-set flags that matter, cores, threads,
    platform, GPU (None on a CPU): :func:`ctxemb.core.machine.describe_machine`, in the run record's shape."""
    machine = describe_machine()
    return {"cpu": machine.cpu, "cpu_flags": machine.cpu_flags, "cpu_count": machine.cpu_count,
            "torch_threads": machine.torch_threads, "platform": machine.os, "cuda": machine.gpu}


def versions() -> dict[str, str]:
    """The versions that decide what a run computes."""
    return {"ctxemb": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0]}


#: How a run whose settings file predates a recipe setting ran, where the setting's default now does something else
#: (what a resumed run compares with; as ``ctxemb.training.config.BEFORE_THEY_EXISTED`` for the loop's settings).
SETTINGS_BEFORE_THEY_EXISTED: dict[str, Any] = {"full_last_layer": True}


def check_run_settings(out_dir: str | os.PathLike, settings: Mapping[str, Any], *, resume: bool | str,
                       resume_free: Iterable[str] = ()) -> None:
    """A fresh run writes its recipe settings to ``out_dir/run_settings.json``; a resumed run compares its own with
    them and logs one warning naming every setting that changed (the resumed run then does not match an
    uninterrupted one). The same check for every recipe; the loop compares its own TrainConfig in the checkpoint.

    Args:
        out_dir: the run directory.
        settings: the recipe's settings as JSON values (without the loop's ``train``).
        resume: the run's ``TrainConfig.resume``.
        resume_free: settings that may change on resume without changing what is computed (e.g. a time budget).
    """
    path = Path(out_dir) / SETTINGS_FILE
    now = json.loads(json.dumps(dict(settings), default=str))
    if resume is not False and path.is_file():
        saved = read_json_file(path, "run settings")
        saved = {**{k: v for k, v in SETTINGS_BEFORE_THEY_EXISTED.items() if k in now}, **saved}
        free = set(resume_free)
        changed = sorted(k for k in set(saved) | set(now) if k not in free and saved.get(k) != now.get(k))
        if changed:
            logger.warning("resuming %s with changed recipe settings (the run will not match an uninterrupted one): "
                           "%s", out_dir, ", ".join(f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in changed))
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with atomic_write(path, encoding="utf-8") as f:
        f.write(json.dumps(now, indent=2) + "\n")


@dataclass
class RunSpec:
    """What a recipe tells the skeleton about its run.

    Attributes:
        recipe: the recipe's name, recorded (e.g. ``"finetune"``, ``"pretrain"``, ``"wsd-bem"``).
        label: the prefix of the training-run stamp (letters, digits, ``.``, ``_``, ``-``; e.g. ``"finetune-sst2"``).
        settings: the recipe's settings as JSON values, without the loop's (recorded; compared on resume).
        train: the loop's settings (``out_dir`` required; ``max_steps`` may be None if ``epochs`` is given).
        epochs: passes over the training data (None: ``train.max_steps`` must be set).
        evaluate_each_epoch: evaluate once per epoch unless ``train.eval_every`` says otherwise.
        resume_free: settings that may change on resume.
        primary_metric, greater_is_better: what model selection (``keep_best``, early stopping) optimises.
        card: model-card hints recorded in the run record (e.g. ``{"pipeline_tag": "sentence-similarity"}``; by
            default the card derives them from the recipe and its settings).
        timing: wall seconds the recipe spent before :func:`run_training` by phase (e.g. ``{"read": 0.4}``),
            recorded first in the run record's ``timing``.
    """

    recipe: str
    label: str
    settings: dict[str, Any]
    train: TrainConfig
    epochs: float | None = None
    evaluate_each_epoch: bool = True
    resume_free: frozenset[str] = frozenset()
    primary_metric: str | None = None
    greater_is_better: bool = True
    card: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)


@dataclass
class RunData:
    """What ``make_data`` returns: the batch source and the evaluation.

    Attributes:
        source: an endless :class:`~ctxemb.training.data.BatchSource` of this rank's micro-batches (its
            ``batches_per_epoch`` resolves epochs into steps).
        eval_data: held-out batches for the loop's mean loss (optional).
        evaluate: ``evaluate(model) -> {metric: number}``, the task's evaluator (optional).
        param_groups: AdamW parameter groups (default: the loop's).
        stats: counts to record (examples, features, ...).
    """

    source: Any
    eval_data: Any = None
    evaluate: Callable[[nn.Module], Mapping[str, float]] | None = None
    param_groups: list[dict] | None = None
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    """What :func:`run_training` did.

    Attributes:
        train: the loop's result.
        train_config: the loop's settings as run (``max_steps`` resolved).
        model: the trained model (the best evaluation's weights with ``keep_best``).
        model_dir: the saved model directory (``<out_dir>/model``).
        training_run: its stamp (None on ranks other than 0).
        eval_history: each evaluation's metrics (the task evaluator's), in order.
        final_metrics: the saved model's metrics (the last evaluation, or the best one with ``keep_best``, or the
            chosen interpolation's with ``interpolate``).
        best_step: the step whose weights were saved with ``keep_best`` (None otherwise).
        eval_seconds: of the run's wall time, spent in the task's evaluator.
        interpolation: what the ``interpolate`` setting chose (alpha, metrics, the candidates), or None.
        record: the run record written to ``model/run.json``.
        data: the task's data (:class:`~ctxemb.training.task.TaskData`, set by
            :func:`~ctxemb.training.runner.run_task`; e.g. sense training's feature counts in ``data.info``).
        trials: for a search or repeated seeds (:func:`~ctxemb.training.runner.run_task`'s ``search``/``seeds``):
            ``kind`` ("grid" or "seeds"), the trials' rows (and the seeds' summary), the chosen trial.

    ``model`` is None for a run read back from its directory (:func:`read_run_result`).
    """

    train: TrainResult
    train_config: TrainConfig
    model: nn.Module | None
    model_dir: Path
    training_run: str | None
    eval_history: list[dict[str, float]]
    final_metrics: dict[str, float]
    best_step: int | None = None
    eval_seconds: float = 0.0
    interpolation: dict[str, Any] | None = None
    record: dict[str, Any] = field(default_factory=dict)
    data: Any = None
    trials: dict[str, Any] | None = None


def run_record(spec: RunSpec, train_config: TrainConfig, result: TrainResult, *, device: torch.device,
               eval_history: list[dict[str, float]], final_metrics: Mapping[str, float], best_step: int | None,
               stats: Mapping[str, Any], total_seconds: float, world_size: int,
               extra: Mapping[str, Any] | None = None, best_checkpoint: str | None = None,
               history_steps: list[int] | None = None, timing: Mapping[str, float] | None = None,
               interpolation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run record (``model/run.json``): one shape for every recipe (see the module docstring).

    ``timing`` (wall seconds by phase, see :func:`run_training`) is recorded when given.

    ``metrics.best_checkpoint`` names the checkpoint directory of ``best_step`` (None where none was written at
    that step); ``metrics.history_steps`` the step of each evaluation in ``metrics.history``;
    ``metrics.interpolation`` what :func:`ctxemb.training.interpolation.choose_interpolation` chose (None when the
    run did not interpolate).
    """
    card = dict(getattr(spec, "card", None) or {})
    return {
        "recipe": spec.recipe,
        "settings": spec.settings,
        "train": train_config.to_dict(),
        "precision": explain_training_precision(train_config.precision, device).to_dict(),
        "versions": versions(),
        "machine": {**machine_info(), "world_size": world_size},
        "data": dict(stats),
        "training": {"steps": result.step, "max_steps": train_config.max_steps, "stopped_early": result.stopped_early,
                     "train_seconds": result.elapsed, "total_seconds": total_seconds,
                     "final_loss": float(np.mean(result.losses[-50:])) if result.losses else None},
        "metrics": {"primary_metric": spec.primary_metric, "greater_is_better": spec.greater_is_better,
                    "final": dict(final_metrics), "history": eval_history, "history_steps": history_steps,
                    "best_step": best_step, "best_checkpoint": best_checkpoint, "loop_eval": result.eval_metrics,
                    "interpolation": dict(interpolation) if interpolation else None},
        **({"card": card} if card else {}),
        **({"timing": dict(timing)} if timing else {}),
        **dict(extra or {}),
    }


def run_training(spec: RunSpec, *, build_model: Callable[[], nn.Module],
                 make_data: Callable[[nn.Module, DistributedContext], RunData],
                 save_files: Callable[[nn.Module, Path], None],
                 extra_record: Callable[[RunResult], Mapping[str, Any]] | None = None,
                 callbacks: Iterable[Callback] = (),
                 after_train: Callable[[RunResult], None] | None = None) -> RunResult:
    """Run one recipe through the skeleton (module docstring) and save ``<out_dir>/model``.

    Args:
        spec: the run's description.
        build_model: returns the model in training mode (called after seeding).
        make_data: ``make_data(model, ctx)`` -> :class:`RunData` (called under the distributed session).
        save_files: ``save_files(model, directory)`` writes the model's files into ``directory`` (a temporary
            directory that replaces ``<out_dir>/model`` once complete); the stamp and run record are added after.
        extra_record: recipe-specific entries for the run record (called on rank 0 before saving).
        callbacks: extra loop callbacks.
        after_train: called with the result before saving (e.g. to calibrate a threshold on dev; may update
            ``final_metrics``).

    The run record's ``timing`` says where the wall time went, in seconds: the recipe's own phases
    (``spec.timing``), ``model`` (build_model), ``data`` (make_data: features and batches), the loop's ``setup``,
    ``first_step``, ``steps``, ``eval``, ``checkpoints`` and ``loss_plot``, ``after_train``; and two wall-clock
    times (Unix seconds): ``started_at`` (the recipe's start) and ``recorded_at`` (the record is written; the model
    save follows, logged with its duration).

    Returns:
        A :class:`RunResult`.

    Raises:
        FileExistsError: a fresh run into an ``out_dir`` that already holds checkpoints.
        ValueError: bad settings (see :func:`ctxemb.training.loop.train`).
    """
    t_start = time.perf_counter()
    timing: dict[str, float] = {"started_at": time.time() - sum(spec.timing.values()), **spec.timing}
    if not spec.train.out_dir:
        raise ValueError("train.out_dir is required: checkpoints, metrics and the model go there")
    out_dir = Path(spec.train.out_dir)
    check_fresh_out_dir(spec.train)
    cbs = list(callbacks)
    history: list[dict[str, float]] = []
    eval_seconds = [0.0]
    with distributed_session(spec.train.device) as ctx:
        if ctx.is_main:
            check_run_settings(out_dir, spec.settings, resume=spec.train.resume, resume_free=spec.resume_free)
        seed_everything(spec.train.seed)  # before the model: a fresh head (or a fresh model) belongs to the seed
        t = time.perf_counter()
        model = build_model()
        # the weights interpolation returns towards (a resumed run's model is rebuilt the same way, then loaded)
        start = snapshot(interpolated_module(model)) if spec.train.interpolate else None
        timing["model"] = time.perf_counter() - t
        t = time.perf_counter()
        data = make_data(model, ctx)
        timing["data"] = time.perf_counter() - t
        train_config = resolve_steps(spec.train, epochs=spec.epochs,
                                     batches_per_epoch=getattr(data.source, "batches_per_epoch", None),
                                     evaluate_each_epoch=spec.evaluate_each_epoch)

        def timed_evaluate(m: nn.Module) -> dict[str, float]:
            t = time.perf_counter()
            metrics = dict(data.evaluate(m))
            eval_seconds[0] += time.perf_counter() - t
            history.append(metrics)
            return metrics
        best = None
        if spec.primary_metric and (data.evaluate is not None or data.eval_data is not None):
            if train_config.keep_best:
                best = BestWeights(model, spec.primary_metric, greater_is_better=spec.greater_is_better)
                cbs.append(best)
            if train_config.early_stopping_patience:
                cbs.append(EarlyStopping(spec.primary_metric, train_config.early_stopping_patience,
                                         greater_is_better=spec.greater_is_better))
        elif train_config.keep_best or train_config.early_stopping_patience:
            raise ValueError(f"keep_best and early_stopping_patience need an evaluation and a primary metric; the "
                             f"{spec.recipe} run has {'no evaluation' if spec.primary_metric else 'no primary metric'}")
        if train_config.interpolate and not (spec.primary_metric and data.evaluate is not None):
            raise ValueError(f"interpolate chooses its weight on the task's dev evaluator and primary metric; the "
                             f"{spec.recipe} run has {'no evaluator' if spec.primary_metric else 'no primary metric'}")
        result = train(model, data.source, train_config, eval_data=data.eval_data,
                       eval_fn=timed_evaluate if data.evaluate is not None else None,
                       param_groups=data.param_groups, callbacks=cbs)
        if not history:  # a recipe evaluated by the loop's held-out batches alone (pretraining, sense training)
            history.extend({k[len("eval_"):]: v for k, v in r.items() if k.startswith("eval_")}
                           for r in result.history if any(k.startswith("eval_") for k in r))
        final = dict(history[-1]) if history else dict(result.eval_metrics or {})
        best_step = best_checkpoint = None
        steps = _eval_steps(result)
        if best is not None and best.restore():
            best_step = best.best_step
            # an evaluation before a resume is not in this call's history: the checkpoint recorded its metrics
            final = next((h for h, s in zip(history, steps) if s == best_step), dict(best.best_metrics))
            ckpt = out_dir / f"{CHECKPOINT_PREFIX}{best_step}"
            best_checkpoint = ckpt.name if ckpt.is_dir() else None
        interpolation = None
        if start is not None:
            t = time.perf_counter()
            interpolation = choose_interpolation(model, start, train_config.interpolate, data.evaluate,
                                                 spec.primary_metric, greater_is_better=spec.greater_is_better,
                                                 trained_metrics=final)
            final = dict(interpolation["metrics"])
            timing["interpolate"] = time.perf_counter() - t
            eval_seconds[0] += timing["interpolate"]
            logger.info("interpolation: alpha %s chosen on %s (%s)", interpolation["alpha"], spec.primary_metric,
                        final.get(spec.primary_metric))
        outcome = RunResult(train=result, train_config=train_config, model=model, model_dir=out_dir / MODEL_DIR,
                            training_run=None, eval_history=history, final_metrics=final, best_step=best_step,
                            eval_seconds=eval_seconds[0], interpolation=interpolation)
        timing.update(result.timing)
        t = time.perf_counter()
        if after_train is not None:
            after_train(outcome)
        timing["after_train"] = time.perf_counter() - t
        if ctx.is_main:
            timing["recorded_at"] = time.time()
            record = run_record(spec, train_config, result, device=ctx.device, eval_history=history,
                                final_metrics=outcome.final_metrics, best_step=best_step, stats=data.stats,
                                total_seconds=time.perf_counter() - t_start, world_size=ctx.world_size,
                                extra=extra_record(outcome) if extra_record else None,
                                best_checkpoint=best_checkpoint, history_steps=steps, interpolation=interpolation,
                                timing={k: round(v, 3) for k, v in timing.items()})
            t = time.perf_counter()
            if best is not None:
                write_best(out_dir, best, final_metrics=outcome.final_metrics, best_checkpoint=best_checkpoint)
            outcome.training_run = save_run(outcome.model_dir, lambda d: save_files(model, d), label=spec.label,
                                            record=record)
            outcome.record = record
            logger.info("saved the %s model (%s) to %s in %.1f s", spec.recipe, outcome.training_run,
                        outcome.model_dir, time.perf_counter() - t)
        barrier(ctx)
    return outcome


def _eval_steps(result: TrainResult) -> list[int]:
    # the steps at which this call evaluated, in order (records with eval_ keys)
    return [int(r["step"]) for r in result.history if any(k.startswith("eval_") for k in r)]


def write_best(out_dir: str | os.PathLike, best: BestWeights, *, final_metrics: Mapping[str, Any],
               best_checkpoint: str | None) -> Path:
    """Write ``<out_dir>/best.json`` (atomically): which evaluation model selection chose, like the
    ``best_model_checkpoint`` of transformers' ``trainer_state.json``.

    Keys: ``metric``, ``greater_is_better``, ``best_step`` (None if nothing was evaluated), ``best_value``,
    ``metrics`` (that evaluation's), ``best_checkpoint`` (the checkpoint directory of that step, None where none
    was written at it) and ``model_dir`` (``model``: the saved model holds those weights).
    """
    path = Path(out_dir) / BEST_FILE
    info = {"metric": best.metric, "greater_is_better": best.greater_is_better, "best_step": best.best_step,
            "best_value": best.best_value, "metrics": dict(final_metrics), "best_checkpoint": best_checkpoint,
            "model_dir": MODEL_DIR}
    with atomic_write(path, encoding="utf-8") as f:
        f.write(json.dumps(info, indent=2, default=str) + "\n")
    return path


def save_run(model_dir: str | os.PathLike, write_files: Callable[[Path], None], *, label: str,
             record: Mapping[str, Any]) -> str:
    """Write a model directory atomically: ``write_files(tmp)`` fills it, then the training-run stamp goes into its
    ``config.json``, the run record (with the stamp) into ``run.json`` and the model card rendered from it into
    ``README.md`` (:func:`ctxemb.training.model_card.render_model_card`); the directory replaces ``model_dir``
    only once complete.

    Returns:
        The training-run identity (``<label>-<digest of the weights>``).
    """
    with atomic_directory(model_dir) as tmp:
        write_files(tmp)
        run_id = stamp_training_run(tmp, label)
        full = json.loads(json.dumps({"training_run": run_id, **record}, default=str))  # as run.json reads back
        with open(tmp / RUN_RECORD_FILE, "w", encoding="utf-8") as f:
            f.write(json.dumps(full, indent=2) + "\n")
        with open(tmp / CARD_FILE, "w", encoding="utf-8") as f:
            f.write(render_model_card(full, tmp))
    return run_id


def read_run_record(model_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run record a recipe saved with a model (``run.json``), or None for a model no recipe saved."""
    path = Path(model_dir) / RUN_RECORD_FILE
    return read_json_file(path, "run record") if path.is_file() else None


def read_run_result(model_dir: str | os.PathLike) -> RunResult:
    """The :class:`RunResult` of a finished run, read back from its saved model directory (its run record): steps,
    metrics, settings; ``model`` is None and the loop's per-step losses are not kept.

    Raises:
        FileNotFoundError: ``model_dir`` holds no run record.
    """
    record = read_run_record(model_dir)
    if record is None:
        raise FileNotFoundError(f"{model_dir} holds no run record ({RUN_RECORD_FILE}): not a finished training run")
    training, metrics = record.get("training", {}), record.get("metrics", {})
    train = TrainResult(step=training.get("steps", 0), start_step=training.get("steps", 0),
                        eval_metrics=metrics.get("loop_eval"), elapsed=training.get("train_seconds") or 0.0,
                        stopped_early=bool(training.get("stopped_early")))
    return RunResult(train=train, train_config=TrainConfig.from_dict(record["train"]), model=None,
                     model_dir=Path(model_dir), training_run=record.get("training_run"),
                     eval_history=list(metrics.get("history") or []), final_metrics=dict(metrics.get("final") or {}),
                     best_step=metrics.get("best_step"), interpolation=metrics.get("interpolation"), record=record)
