"""The training loop shared by pretraining, fine-tuning and sense training (nanoGPT's ``train.py``, as a function).

    config = TrainConfig(learning_rate=1e-4, max_steps=10_000, grad_accumulation_steps=4, out_dir="runs/mlm")
    result = train(model, batches, config, eval_data=dev_batches)

Contracts:
- *Model*: ``model(**batch)`` returns an object with ``.loss`` (a scalar tensor, the mean over the
  micro-batch) and optionally ``.metrics`` (a dict of floats or scalar tensors, also means over the
  micro-batch; every rank must report the same keys). A dict with "loss" (and "metrics") works too.
- *Data*: ``train_data`` is a :class:`ctxemb.training.data.BatchSource`: an endless iterator of this rank's
  micro-batches (dicts of tensors on the CPU or the device) with ``state_dict``/``load_state_dict``.
  ``eval_data`` is any re-iterable of batches (e.g. :class:`ctxemb.training.data.EvalBatches`).

One optimizer step = ``grad_accumulation_steps`` micro-batches per process; the effective batch is
``micro-batch x grad_accumulation_steps x world_size``. Under torchrun each process runs this same function
(gradients are all-reduced by DDP only on the last micro-batch of a step); rank 0 alone logs and writes.

Per step, in order: forward/backward over the micro-batches, clip, optimizer and scheduler step, log
(``out_dir/metrics.jsonl``, TensorBoard if installed, the progress bar), evaluate (every ``eval_every`` steps
and at ``max_steps``), save a checkpoint, callbacks. At the end: a checkpoint and ``out_dir/loss.png``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, get_args

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from ctxemb.inference import cpu_has_native_bf16
from ctxemb.paths import atomic_path, atomic_write, resolve_saved_directory
from ctxemb.training import faults
from ctxemb.training.data import Batch, batch_size_of, count_tokens, move_to_device
from ctxemb.training.distributed import (DistributedContext, all_reduce_mean, all_reduce_sum, any_process,
                                         init_distributed, shutdown, unwrap_model, wrap_model)
from ctxemb.training.optim import linear_schedule, make_optimizer
from ctxemb.training.state import (capture_rng_state, latest_checkpoint, list_checkpoints, load_checkpoint,
                                   prune_checkpoints, restore_rng_state, save_checkpoint)

logger = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
METRICS_FILE = "metrics.jsonl"
LOSS_PLOT_FILE = "loss.png"
TENSORBOARD_DIR = "tensorboard"


# --------------------------------------------------------------------------------------------------- config

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(kw_only=True)
class TrainConfig:
    """Settings of one training run (mutable; override with ``dataclasses.replace``).

    Attributes:
        learning_rate: peak learning rate (groups with an ``lr_scale`` get ``learning_rate * lr_scale``).
        max_steps: optimizer steps in the whole run (callers that think in epochs convert with
            :func:`epochs_to_steps`).
        weight_decay: AdamW's decoupled decay (not applied to biases and norm weights).
        adam_beta1, adam_beta2, adam_epsilon: AdamW's moment coefficients and denominator term.
        warmup_steps: linear warm-up steps; or
        warmup_ratio: warm-up as a fraction of ``max_steps`` (set at most one of the two).
        grad_accumulation_steps: micro-batches per optimizer step (per process).
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        precision: "fp32"; "bf16" (autocast; slow where the CPU emulates bf16, which is warned about);
            "auto" = bf16 on a CUDA GPU that supports it or a CPU with AVX512-BF16/AMX, fp32 elsewhere.
        seed: seeds python, numpy and torch at the start (plus the rank, so dropout differs between processes).
        log_every: steps between log records (running averages since the previous record).
        eval_every: steps between evaluations (0: only at the end, if there is something to evaluate).
        save_every: steps between checkpoints (0: only at the end). Checkpoints need ``out_dir``.
        out_dir: where metrics.jsonl, checkpoints, tensorboard/ and loss.png go (None: write nothing).
        resume: True continues from the latest checkpoint in ``out_dir`` (from scratch, with a warning, if there
            is none); a path continues from that checkpoint directory; False starts fresh.
        keep_last_checkpoints: keep only this many newest checkpoints (0 keeps all).
        device: "auto" (this process's GPU if CUDA is available, else CPU) or a torch device string.
        progress_bar: show a tqdm bar (rank 0 only).
        find_unused_parameters: passed to DDP (needed when some parameters get no gradient in a step).
    """

    learning_rate: float
    max_steps: int
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    grad_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    precision: Precision = "auto"
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0
    save_every: int = 0
    out_dir: str | None = None
    resume: bool | str = False
    keep_last_checkpoints: int = 3
    device: str = "auto"
    progress_bar: bool = True
    find_unused_parameters: bool = False

    def __post_init__(self):
        if not (_is_number(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a positive finite number, got {self.learning_rate!r}")
        if not (_is_int(self.max_steps) and self.max_steps >= 1):
            raise ValueError(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if not (_is_number(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a number >= 0, got {self.weight_decay!r}")
        for name in ("adam_beta1", "adam_beta2"):
            v = getattr(self, name)
            if not (_is_number(v) and 0 <= v < 1):
                raise ValueError(f"{name} must be in [0, 1), got {v!r}")
        if not (_is_number(self.adam_epsilon) and self.adam_epsilon > 0):
            raise ValueError(f"adam_epsilon must be > 0, got {self.adam_epsilon!r}")
        if not (_is_int(self.warmup_steps) and 0 <= self.warmup_steps <= self.max_steps):
            raise ValueError(f"warmup_steps must be an integer in [0, max_steps ({self.max_steps})], "
                             f"got {self.warmup_steps!r}")
        if not (_is_number(self.warmup_ratio) and 0 <= self.warmup_ratio <= 1):
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio!r}")
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(f"set warmup_steps ({self.warmup_steps}) or warmup_ratio ({self.warmup_ratio}), "
                             "not both")
        for name, low in (("grad_accumulation_steps", 1), ("seed", 0), ("log_every", 1), ("eval_every", 0),
                          ("save_every", 0), ("keep_last_checkpoints", 0)):
            v = getattr(self, name)
            if not (_is_int(v) and v >= low):
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        if not (_is_number(self.max_grad_norm) and self.max_grad_norm >= 0):
            raise ValueError(f"max_grad_norm must be a number >= 0 (0 disables clipping), got {self.max_grad_norm!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.out_dir is not None:
            if isinstance(self.out_dir, os.PathLike):
                self.out_dir = os.fspath(self.out_dir)
            if not isinstance(self.out_dir, str) or not self.out_dir:
                raise ValueError(f"out_dir must be a non-empty path or None, got {self.out_dir!r}")
        if isinstance(self.resume, os.PathLike):
            self.resume = os.fspath(self.resume)
        if not isinstance(self.resume, (bool, str)) or self.resume == "":
            raise ValueError(f"resume must be True, False or a checkpoint path, got {self.resume!r}")
        if self.resume is True and self.out_dir is None:
            raise ValueError("resume=True looks for the latest checkpoint in out_dir, but out_dir is None")
        if self.save_every and self.out_dir is None:
            raise ValueError(f"save_every={self.save_every} needs an out_dir to write checkpoints to")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be 'auto' or a torch device string, got {self.device!r}")
        for name in ("progress_bar", "find_unused_parameters"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def resolved_warmup_steps(self) -> int:
        """``warmup_steps``, or ``warmup_ratio * max_steps`` rounded."""
        return self.warmup_steps or round(self.warmup_ratio * self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/TOML values; None fields (only ``out_dir`` can be None) are left out, as TOML has no null."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        """The inverse of :meth:`to_dict` (missing optional fields take their defaults).

        Raises:
            ValueError: unknown or missing required fields, or invalid values (naming the field).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; known: {sorted(names)}")
        missing = [n for n in ("learning_rate", "max_steps") if n not in d]
        if missing:
            raise ValueError(f"TrainConfig needs {missing}")
        return cls(**d)


def epochs_to_steps(epochs: float, batches_per_epoch: int, grad_accumulation_steps: int = 1) -> int:
    """Optimizer steps for ``epochs`` passes over data of ``batches_per_epoch`` micro-batches per process
    (``DatasetBatches.batches_per_epoch``), rounded up."""
    if not epochs > 0:
        raise ValueError(f"epochs must be > 0, got {epochs}")
    if batches_per_epoch < 1 or grad_accumulation_steps < 1:
        raise ValueError(f"batches_per_epoch ({batches_per_epoch}) and grad_accumulation_steps "
                         f"({grad_accumulation_steps}) must be >= 1")
    return max(1, math.ceil(epochs * batches_per_epoch / grad_accumulation_steps))


def resolve_precision(precision: str, device: torch.device) -> Literal["fp32", "bf16"]:
    """"auto" -> "bf16" where bfloat16 matrix products run in hardware (a CUDA GPU that supports bf16, or a CPU
    with AVX512-BF16/AMX), else "fp32". An explicit "bf16" on a CPU without it is kept, with a warning.

    Raises:
        ValueError: an unknown precision.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if device.type == "cuda":
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    elif device.type == "cpu":
        native = cpu_has_native_bf16() is True
    else:
        native = False
    if precision == "auto":
        return "bf16" if native else "fp32"
    if precision == "bf16" and not native:
        _warn_emulated_bf16(device.type)
    return precision  # type: ignore[return-value]


@functools.lru_cache(maxsize=None)
def _warn_emulated_bf16(device_type: str) -> None:
    logger.warning("precision='bf16' on a %s without hardware bfloat16 (AVX512-BF16/AMX on CPUs): it is emulated "
                   "and usually several times slower than fp32; use precision='auto' or 'fp32'", device_type)


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# --------------------------------------------------------------------------------------------------- hooks

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
    """

    step: int
    start_step: int
    losses: list[float] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    eval_metrics: dict[str, float] | None = None
    checkpoint: Path | None = None
    elapsed: float = 0.0
    stopped_early: bool = False


# --------------------------------------------------------------------------------------------------- evaluation

def _unpack(out: Any) -> tuple[torch.Tensor, Mapping[str, Any]]:
    if isinstance(out, Mapping):
        loss, metrics = out.get("loss"), out.get("metrics")
    else:
        loss, metrics = getattr(out, "loss", None), getattr(out, "metrics", None)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TypeError(f"the model must return an object with .loss, a scalar tensor; got "
                        f"{type(out).__name__} with loss {type(loss).__name__}")
    return loss.reshape(()), (metrics or {})


def _as_tensor(v: Any) -> torch.Tensor:
    return v.detach().float().reshape(()) if isinstance(v, torch.Tensor) else torch.tensor(float(v))


@torch.no_grad()
def evaluate(model: nn.Module, eval_data: Iterable[Batch] | None = None, *,
             eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
             device: torch.device | str | None = None, precision: str = "fp32",
             ctx: DistributedContext | None = None) -> dict[str, float]:
    """Mean loss and metrics over ``eval_data``, plus ``eval_fn(model)``'s numbers, in eval mode without gradients.

    The loss and ``.metrics`` are weighted by the examples in each batch (exact when the model's loss is a
    mean over examples) and summed over ranks, so shards of different sizes (``EvalBatches``) give the mean over
    the whole set. ``eval_fn`` runs on every rank with the unwrapped model; its numbers are averaged over ranks
    (compute them over the whole set on each rank, or over equal shards). The model is put back in train mode.

    Returns:
        ``{"loss": ..., **metrics, **eval_fn(...)}`` ("loss" only if ``eval_data`` had batches).
    """
    ctx = ctx or DistributedContext()
    raw = unwrap_model(model)
    if device is None:
        device = next(raw.parameters()).device
    device = torch.device(device)
    precision = resolve_precision(precision, device)
    was_training = raw.training
    raw.eval()
    try:
        results: dict[str, float] = {}
        if eval_data is not None:
            loss_sum, count, metric_sums = torch.zeros(()), 0, {}
            for batch in eval_data:
                n = batch_size_of(batch)
                with _autocast(precision, device):
                    loss, metrics = _unpack(raw(**move_to_device(batch, device)))
                loss_sum += loss.detach().float().cpu() * n
                for k, v in metrics.items():
                    metric_sums[k] = metric_sums.get(k, 0.0) + _as_tensor(v).cpu() * n
                count += n
            keys = sorted(metric_sums)
            totals = all_reduce_sum(torch.stack([loss_sum, torch.tensor(float(count))]
                                                + [metric_sums[k] for k in keys]), ctx).tolist()
            if totals[1] > 0:
                results["loss"] = totals[0] / totals[1]
                results.update({k: totals[2 + i] / totals[1] for i, k in enumerate(keys)})
        if eval_fn is not None:
            extra = eval_fn(raw)
            if not isinstance(extra, Mapping):
                raise TypeError(f"eval_fn must return a dict of numbers, got {type(extra).__name__}")
            results.update(all_reduce_mean({k: float(v) for k, v in extra.items()}, ctx))
        return results
    finally:
        raw.train(was_training)


# --------------------------------------------------------------------------------------------------- outputs

class _Writers:
    """metrics.jsonl, TensorBoard (if importable) and the progress bar; all no-ops except on rank 0."""

    def __init__(self, config: TrainConfig, ctx: DistributedContext, start_step: int):
        self.active = ctx.is_main
        self.out_dir = Path(config.out_dir) if config.out_dir else None
        self.metrics_path = self.out_dir / METRICS_FILE if self.out_dir else None
        self.tb = None
        self.bar = tqdm(total=config.max_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True,
                        disable=not (self.active and config.progress_bar))
        self.quiet_logs = self.active and config.progress_bar  # log lines would tear the bar
        if not (self.active and self.out_dir):
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._truncate_metrics(start_step)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            logger.debug("tensorboard is not installed; metrics go to %s only", self.metrics_path)
        else:
            self.tb = SummaryWriter(str(self.out_dir / TENSORBOARD_DIR), purge_step=start_step + 1)

    def _truncate_metrics(self, start_step: int) -> None:
        # Records after the step we (re)start from belong to a run that was cut off; they will be logged again.
        if not self.metrics_path.exists():
            return
        kept = []
        for line in self.metrics_path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= start_step:
                    kept.append(line)
            except (json.JSONDecodeError, AttributeError):
                continue
        with atomic_write(self.metrics_path, encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in kept))

    def record(self, record: dict[str, float]) -> None:
        if not self.active:
            return
        step = record["step"]
        if self.metrics_path:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                faults.kill_point("metrics_line", (f, json.dumps(record) + "\n"))
                f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(("eval/" + k[5:]) if k.startswith("eval_") else ("train/" + k), v, step)
        shown = {k: record[k] for k in ("loss", "lr", "tokens_per_s", "eval_loss") if k in record}
        if shown:
            self.bar.set_postfix({k: (f"{v:.2e}" if k == "lr" else f"{v:.4g}") for k, v in shown.items()},
                                 refresh=False)
        logger.log(logging.DEBUG if self.quiet_logs else logging.INFO, "step %d: %s", step,
                   ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step" and isinstance(v, float)))

    def close(self) -> None:
        self.bar.close()
        if self.tb is not None:
            self.tb.close()


def write_loss_plot(metrics_path: str | Path, out_path: str | Path) -> Path | None:
    """Plot training (and evaluation) loss against step from a metrics.jsonl file into a PNG.

    Returns:
        ``out_path``, or None if matplotlib is missing (a warning names the ``plot`` extra) or nothing was logged.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        logger.warning("matplotlib is not installed, so no loss plot was written; pip install 'ctxemb[plot]'")
        return None
    train_pts, eval_pts = [], []
    for line in Path(metrics_path).read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "loss" in r:
            train_pts.append((r["step"], r["loss"]))
        if "eval_loss" in r:
            eval_pts.append((r["step"], r["eval_loss"]))
    if not train_pts and not eval_pts:
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    if train_pts:
        ax.plot(*zip(*train_pts), label="train loss (running mean)")
    if eval_pts:
        ax.plot(*zip(*eval_pts), marker="o", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return out_path


# --------------------------------------------------------------------------------------------------- the loop

def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators (callers seed before building a model, so that a new head's
    initialisation is the same in every run with that seed)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def _resume_path(config: TrainConfig) -> Path | None:
    if config.resume is False:
        return None
    if config.resume is True:
        path = latest_checkpoint(config.out_dir)
        if path is None:
            logger.warning("resume=True but %s has no checkpoint; starting from step 0", config.out_dir)
        return path
    path = resolve_saved_directory(config.resume)  # a save cut off between its renames is restored first
    if not path.is_dir():
        raise FileNotFoundError(f"resume: checkpoint directory {path} does not exist")
    return path


def check_fresh_out_dir(config: TrainConfig) -> None:
    """A fresh run (``resume=False``) must not write into an ``out_dir`` that holds another run's checkpoints.

    Raises:
        FileExistsError: it does (the message says how to continue that run instead).
    """
    if config.resume is False and config.out_dir is not None and list_checkpoints(config.out_dir):
        raise FileExistsError(f"{config.out_dir} already holds checkpoints "
                              f"({list_checkpoints(config.out_dir)[-1][1].name} ...); set resume=True to continue that "
                              f"run, or choose another out_dir")


# Fields that may change between a run and its resumption without changing what is computed.
_RESUME_FREE = {"resume", "out_dir", "progress_bar", "log_every", "eval_every", "save_every",
                "keep_last_checkpoints", "device"}


def _warn_config_changes(saved: Mapping[str, Any] | None, config: TrainConfig, path: Path) -> None:
    if not saved:
        return
    now = config.to_dict()
    changed = sorted(k for k in set(saved) | set(now) if k not in _RESUME_FREE and saved.get(k) != now.get(k))
    if changed:
        logger.warning("resuming from %s with changed settings (the run will not match an uninterrupted one): %s",
                       path, ", ".join(f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in changed))


def train(model: nn.Module, train_data: Any, config: TrainConfig, *, eval_data: Iterable[Batch] | None = None,
          eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
          callbacks: Iterable[Callback] | None = None, param_groups: Iterable[dict] | None = None) -> TrainResult:
    """Train ``model`` on ``train_data`` for ``config.max_steps`` optimizer steps (see the module docstring for the
    model and data contracts).

    Under torchrun the process group is created here (gloo on CPU, nccl on CUDA) if the caller has not created
    one, and destroyed on return or error; the model is moved to the device and wrapped in DDP here, so pass the
    plain model with its weights already tied.

    Args:
        model: returns ``.loss`` (and optionally ``.metrics``) from ``model(**batch)``.
        train_data: an endless, resumable :class:`~ctxemb.training.data.BatchSource` of this rank's micro-batches.
        config: the run's settings.
        eval_data: batches to evaluate on every ``config.eval_every`` steps and at the end (:func:`evaluate`).
        eval_fn: ``eval_fn(unwrapped_model) -> {name: number}``, run at the same times in eval mode.
        callbacks: :class:`Callback` hooks.
        param_groups: parameter groups for AdamW (e.g. layer-wise learning-rate decay via ``lr_scale``);
            default :func:`ctxemb.training.optim.param_groups` (no decay for biases and norm weights).

    Returns:
        a :class:`TrainResult`.

    Raises:
        TypeError: ``train_data`` lacks the BatchSource methods, or the model output has no scalar ``.loss``.
        ValueError: ``train_data`` was built for another world size.
        FileExistsError: a fresh run (``resume=False``) into an ``out_dir`` that already holds checkpoints.
        FloatingPointError: the loss became NaN or infinite (the step is named).
        RuntimeError: ``train_data`` ran out (a BatchSource must be endless).
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    missing = [m for m in ("__iter__", "state_dict", "load_state_dict") if not hasattr(train_data, m)]
    if missing:
        raise TypeError(f"train_data must be a BatchSource (an endless iterable with state_dict/load_state_dict, "
                        f"e.g. ctxemb.training.data.DatasetBatches); {type(train_data).__name__} lacks {missing}")
    owns_group = dist.is_available() and not dist.is_initialized()
    ctx = init_distributed(config.device)
    try:
        with faults.lock_run_directory(config.out_dir, ctx.is_main):  # a second run into out_dir fails clearly
            return _train(model, train_data, config, ctx, eval_data, eval_fn, list(callbacks or []), param_groups)
    finally:
        if owns_group and ctx.is_distributed:
            shutdown()


def _train(model: nn.Module, train_data: Any, config: TrainConfig, ctx: DistributedContext,
           eval_data: Iterable[Batch] | None, eval_fn: Callable | None, callbacks: list[Callback],
           groups: Iterable[dict] | None) -> TrainResult:
    device = ctx.device
    precision = resolve_precision(config.precision, device)
    data_world = getattr(train_data, "world_size", ctx.world_size)
    if data_world != ctx.world_size:
        raise ValueError(f"train_data was built for world_size={data_world}, but this run has {ctx.world_size} "
                         f"processes (pass rank=ctx.rank, world_size=ctx.world_size)")
    out_dir = Path(config.out_dir) if config.out_dir else None
    check_fresh_out_dir(config)
    resume_from = _resume_path(config)

    seed_everything(config.seed + ctx.rank)
    raw = unwrap_model(model).to(device)
    raw.train()
    optimizer = make_optimizer(raw if groups is None else groups, lr=config.learning_rate,
                               weight_decay=config.weight_decay, betas=(config.adam_beta1, config.adam_beta2),
                               eps=config.adam_epsilon)
    scheduler = linear_schedule(optimizer, config.resolved_warmup_steps, config.max_steps)

    start_step, elapsed_before, loaded = 0, 0.0, None
    if resume_from is not None:
        loaded = load_checkpoint(resume_from, model=raw, optimizer=optimizer, scheduler=scheduler, ctx=ctx,
                                 device=device)
        start_step = loaded.step
        elapsed_before = float(loaded.trainer_state.get("elapsed", 0.0))
        _warn_config_changes(loaded.trainer_state.get("config"), config, resume_from)
        if ctx.is_main:
            logger.info("resuming from %s (step %d)", resume_from, start_step)
    ddp = wrap_model(raw, ctx, find_unused_parameters=config.find_unused_parameters)

    # Accumulators since the last log record (per rank; checkpointed so a resumed run logs the same averages).
    running = {"loss_sum": 0.0, "steps": 0, "tokens": 0, "metric_sums": {}}
    if loaded is not None:
        rank_state = loaded.rank_state
        train_data.load_state_dict(rank_state["data"])
        running = dict(running, **rank_state.get("running", {}))
        running["metric_sums"] = dict(running["metric_sums"])
        running["tokens"] = 0  # tokens/s is measured from this call's start
        restore_rng_state(rank_state["rng"], device)  # last, so nothing between here and step 1 draws from them

    writers = _Writers(config, ctx, start_step)
    result = TrainResult(step=start_step, start_step=start_step, elapsed=elapsed_before)
    t_start = time.perf_counter()
    last_log_time = t_start
    last_saved = start_step if loaded is not None else -1
    accum = config.grad_accumulation_steps
    tokens_known = False
    params = [p for p in raw.parameters() if p.requires_grad]

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - t_start

    def save(step: int) -> None:
        nonlocal last_saved
        rank_state = {
            "rng": capture_rng_state(device),
            "data": train_data.state_dict(),
            "running": {"loss_sum": float(running["loss_sum"]), "steps": int(running["steps"]),
                        "tokens": int(running["tokens"]),
                        "metric_sums": {k: float(v) for k, v in running["metric_sums"].items()}},
        }
        path = save_checkpoint(out_dir, step, model=raw, optimizer=optimizer, scheduler=scheduler,
                               rank_state=rank_state, ctx=ctx,
                               trainer_state={"elapsed": elapsed(), "config": config.to_dict(),
                                              "torch_version": torch.__version__})
        if ctx.is_main and config.keep_last_checkpoints:
            prune_checkpoints(out_dir, config.keep_last_checkpoints)
        last_saved = step
        result.checkpoint = path
        for cb in callbacks:
            cb.on_save(step, path)

    def run_eval(step: int) -> tuple[dict[str, float], bool]:
        metrics = evaluate(raw, eval_data, eval_fn=eval_fn, device=device, precision=precision, ctx=ctx)
        result.eval_metrics = metrics
        stop = any([bool(cb.on_evaluate(step, metrics)) for cb in callbacks])
        return {f"eval_{k}": v for k, v in metrics.items()}, stop

    def emit(record: dict[str, float]) -> None:
        result.history.append(record)
        writers.record(record)
        for cb in callbacks:
            cb.on_log(record["step"], record)

    for cb in callbacks:
        cb.on_train_begin(config, start_step)
    if start_step >= config.max_steps:
        if ctx.is_main:
            logger.info("the checkpoint is at step %d, max_steps is %d: nothing to train", start_step, config.max_steps)
        writers.close()
        return result

    data_iter = iter(train_data)
    can_evaluate = eval_data is not None or eval_fn is not None
    step = start_step
    grad_norm = None
    try:
        while step < config.max_steps:
            faults.kill_point("between_steps")
            step += 1
            # ---- forward/backward over the micro-batches of one optimizer step
            step_loss = torch.zeros((), device=device)
            for micro in range(accum):
                try:
                    batch = next(data_iter)
                except StopIteration:
                    raise RuntimeError(f"train_data ran out at step {step}; a BatchSource must be endless "
                                       f"(DatasetBatches is)") from None
                n_tokens = count_tokens(batch)
                if n_tokens is not None:
                    running["tokens"] += n_tokens
                    tokens_known = True
                batch = move_to_device(batch, device)
                if ddp is not raw:  # all-reduce gradients only on the last micro-batch (nanoGPT)
                    ddp.require_backward_grad_sync = micro == accum - 1
                with _autocast(precision, device):
                    loss, metrics = _unpack(ddp(**batch))
                (loss / accum).backward()
                step_loss += loss.detach().float()
                for k, v in metrics.items():
                    running["metric_sums"][k] = running["metric_sums"].get(k, 0.0) + _as_tensor(v) / accum
            loss_value = step_loss.item() / accum
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"the training loss is {loss_value} at step {step}")
            if config.max_grad_norm > 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            lr = max(g["lr"] for g in optimizer.param_groups)  # the rate this step uses
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            running["loss_sum"] += loss_value
            running["steps"] += 1
            result.losses.append(loss_value)
            result.step = step
            writers.bar.update(1)
            final = step == config.max_steps

            # ---- log / evaluate / save
            record: dict[str, float] = {}
            if step % config.log_every == 0 or final:
                keys = sorted(running["metric_sums"])
                sums = torch.tensor([running["loss_sum"], running["steps"], running["tokens"]]
                                    + [float(running["metric_sums"][k]) for k in keys], dtype=torch.float64)
                sums = all_reduce_sum(sums, ctx).tolist()
                now = time.perf_counter()
                record = {"step": step, "loss": sums[0] / sums[1], "lr": lr}
                if tokens_known:
                    record["tokens_per_s"] = sums[2] / max(now - last_log_time, 1e-9)
                if grad_norm is not None:
                    record["grad_norm"] = float(grad_norm)
                for i, k in enumerate(keys):
                    record[k if k not in record else f"train_{k}"] = sums[3 + i] / sums[1]
                record["elapsed"] = elapsed()
                running.update(loss_sum=0.0, steps=0, tokens=0, metric_sums={})
                last_log_time = now
            stop = False
            if can_evaluate and ((config.eval_every and step % config.eval_every == 0) or final):
                eval_record, stop = run_eval(step)
                record = dict(record or {"step": step, "elapsed": elapsed()}, **eval_record)
            if record:
                emit(record)
            if out_dir is not None and config.save_every and step % config.save_every == 0:
                save(step)
            stop = any([bool(cb.on_step_end(step, loss_value)) for cb in callbacks]) or stop
            if callbacks and any_process(stop, ctx):
                result.stopped_early = not final
                if ctx.is_main and not final:
                    logger.info("a callback stopped training at step %d", step)
                break
        # ---- the end (max_steps, evaluated above, or a callback's stop, not evaluated: that run will usually be
        # resumed, and an extra evaluation would make its metrics differ from an uninterrupted run's)
        if out_dir is not None and last_saved != step:
            save(step)
        result.elapsed = elapsed()
    finally:
        writers.close()
    if ctx.is_main and out_dir is not None and (out_dir / METRICS_FILE).exists():
        write_loss_plot(out_dir / METRICS_FILE, out_dir / LOSS_PLOT_FILE)
    for cb in callbacks:
        cb.on_train_end(result)
    return result
