"""Hooks into the training loop (:class:`Callback`), what a call of the loop returns (:class:`TrainResult`), and
the two hooks model selection needs: :class:`BestWeights` (keep the weights of the best evaluation) and
:class:`EarlyStopping` (stop when the primary metric stops improving).

A task declares its primary metric and whether greater is better (:class:`ctxemb.training.registry.Task`);
the run skeleton (:mod:`ctxemb.training.recipe`) builds these hooks from ``TrainConfig.keep_best`` and
``TrainConfig.early_stopping_patience``. Both are off by default.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from ctxemb.training.config import TrainConfig

logger = logging.getLogger(__name__)


class Callback:
    """Hooks into :func:`train`; override the ones you need. They run on every rank.

    ``on_step_end`` and ``on_evaluate`` may return True to stop training after this step (a final checkpoint
    is written, as at the normal end); a stop requested on any rank stops all of them.
    """

    def on_train_begin(self, config: TrainConfig, start_step: int) -> None: ...

    def on_step_end(self, step: int, loss: float) -> bool | None: ...

    def on_log(self, step: int, record: dict[str, float]) -> None: ...

    def on_evaluate(self, step: int, metrics: dict[str, float]) -> bool | None: ...

    def on_save(self, step: int, path: Path) -> None: ...

    def checkpoint_info(self) -> dict:
        """JSON values to record in the ``trainer_state.json`` of the checkpoint being written (rank 0's)."""
        return {}

    def on_resume(self, trainer_state: dict, path: Path) -> None:
        """Called when the loop resumes from the checkpoint at ``path``, with its ``trainer_state.json``."""

    def on_train_end(self, result: "TrainResult") -> None: ...


@dataclass
class TrainResult:
    """What a call to :func:`train` did.

    Attributes:
        step: the global step reached.
        start_step: the step this call started from (0, or the resumed checkpoint's).
        losses: this rank's loss of each step ``start_step + 1 .. step`` (mean over its micro-batches).
        history: the records logged by this call (as in metrics.jsonl; the same on every rank).
        eval_metrics: the last evaluation (unprefixed keys, "loss" first), or None.
        checkpoint: the last checkpoint written, or None.
        elapsed: training seconds, including those before a resume.
        stopped_early: a callback stopped the run before ``max_steps``.
        timing: wall seconds of this call by phase: ``setup`` (device, optimizer, resume), ``first_step`` (the
            first optimizer step), ``steps`` (the others), ``eval``, ``checkpoints`` (writing them), ``loss_plot``.
    """

    step: int
    start_step: int
    losses: list[float] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    eval_metrics: dict[str, float] | None = None
    checkpoint: Path | None = None
    elapsed: float = 0.0
    stopped_early: bool = False
    timing: dict[str, float] = field(default_factory=dict)




def _improves(value: float, best: float | None, greater_is_better: bool) -> bool:
    if not math.isfinite(value):
        return False
    return best is None or (value > best if greater_is_better else value < best)


def _metric(metrics: dict[str, float], name: str) -> float:
    if name not in metrics:
        raise KeyError(f"the primary metric {name!r} is not among the evaluation's metrics {sorted(metrics)}")
    return float(metrics[name])


class BestWeights(Callback):
    """Keep a CPU copy of the model's weights at the evaluation with the best ``metric``; :meth:`restore` puts them
    back (the run skeleton does so before saving the model).

    Every checkpoint records the best evaluation so far (:meth:`checkpoint_info`: ``best_step``, ``best_metric``,
    ``best_value``); the loop never prunes the checkpoint of the best step. A resumed run takes the best evaluation
    back from the checkpoint it resumes from, with its weights from ``checkpoint-<best_step>`` (or from the resumed
    checkpoint itself); where that checkpoint was never written, the search starts afresh, with a warning.

    Args:
        model: the (unwrapped) model being trained.
        metric: the metric to select by (the task's primary metric, unprefixed as in ``TrainResult.eval_metrics``).
        greater_is_better: whether a higher value is better.
    """

    def __init__(self, model: nn.Module, metric: str, *, greater_is_better: bool = True):
        self.model = model
        self.metric = metric
        self.greater_is_better = greater_is_better
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.best_metrics: dict[str, float] = {}
        self._state: dict[str, torch.Tensor] | None = None

    def on_evaluate(self, step: int, metrics: dict[str, float]) -> None:
        value = _metric(metrics, self.metric)
        if _improves(value, self.best_value, self.greater_is_better):
            self.best_value, self.best_step, self.best_metrics = value, step, dict(metrics)
            self._state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return None

    def checkpoint_info(self) -> dict:
        if self.best_step is None:
            return {}
        return {"best_step": self.best_step, "best_metric": self.metric, "best_value": self.best_value,
                "greater_is_better": self.greater_is_better, "best_metrics": self.best_metrics}

    def on_resume(self, trainer_state: dict, path: Path) -> None:
        step, value = trainer_state.get("best_step"), trainer_state.get("best_value")
        if step is None or trainer_state.get("best_metric") != self.metric:
            return
        from ctxemb.training.state import CHECKPOINT_PREFIX, read_checkpoint_weights

        source = path if trainer_state.get("step") == step else Path(path).parent / f"{CHECKPOINT_PREFIX}{step}"
        if not source.is_dir():
            logger.warning("the best evaluation so far (step %d, %s %.4g) has no checkpoint (%s): the resumed run "
                           "looks for the best evaluation afresh; save a checkpoint at every evaluation (save_every "
                           "a multiple of eval_every) to keep it", step, self.metric, value, source)
            return
        saved = read_checkpoint_weights(source)
        current = self.model.state_dict()
        state = {}
        for name, tensor in current.items():  # a tied tensor is stored once: take it from the name it shares
            if name not in saved:
                name_saved = next((k for k in saved if k in current and current[k].data_ptr() == tensor.data_ptr()
                                   and current[k].shape == tensor.shape), None)
                if name_saved is None:
                    raise KeyError(f"checkpoint {source} has no tensor {name!r} of the model")
                state[name] = saved[name_saved].clone()
            else:
                state[name] = saved[name].clone()
        self.best_step, self.best_value, self._state = step, float(value), state
        self.best_metrics = dict(trainer_state.get("best_metrics") or {self.metric: float(value)})
        logger.info("resumed model selection: the best evaluation so far is step %d (%s %.4g)", step, self.metric,
                    value)

    def restore(self) -> bool:
        """Load the best weights into the model; False (and nothing changes) if no evaluation ran."""
        if self._state is None:
            return False
        self.model.load_state_dict(self._state)
        logger.info("restored the weights of step %d (%s %.4g, the best evaluation)", self.best_step, self.metric,
                    self.best_value)
        return True


class EarlyStopping(Callback):
    """Stop training after ``patience`` evaluations in a row without a better ``metric``.

    Args:
        metric: the metric to watch (the task's primary metric).
        patience: evaluations without improvement before stopping (>= 1).
        greater_is_better: whether a higher value is better.
    """

    def __init__(self, metric: str, patience: int, *, greater_is_better: bool = True):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be an int >= 1, got {patience!r}")
        self.metric = metric
        self.patience = patience
        self.greater_is_better = greater_is_better
        self.best_value: float | None = None
        self.bad_evaluations = 0
        self.stopped_at: int | None = None

    def on_evaluate(self, step: int, metrics: dict[str, float]) -> bool:
        value = _metric(metrics, self.metric)
        if _improves(value, self.best_value, self.greater_is_better):
            self.best_value, self.bad_evaluations = value, 0
            return False
        self.bad_evaluations += 1
        if self.bad_evaluations >= self.patience:
            self.stopped_at = step
            logger.info("early stopping at step %d: %s has not improved on %.4g for %d evaluation(s)", step,
                        self.metric, self.best_value if self.best_value is not None else float("nan"),
                        self.patience)
            return True
        return False
