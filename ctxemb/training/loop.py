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

With ``embedding_update`` "sparse" or "lazy" (one process), the word embeddings are looked up through
:class:`~ctxemb.training.embedding_rows.RowLookupSwap` while steps run and updated by rows; saving and evaluating
see the model's own lookup module and torch's AdamW weights (``RowLookupSwap.plain``), and so does the caller when
``train`` returns or raises.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ctxemb.core.allocator import keep_freed_memory
from ctxemb.core.atomic import resolve_saved_directory
from ctxemb.core.precision import bf16_autocast as autocast
from ctxemb.core.precision import explain_training_precision
from ctxemb.core.precision import resolve_training_precision as resolve_precision
from ctxemb.training import faults
from ctxemb.training.callbacks import Callback, TrainResult
from ctxemb.training.config import BEFORE_THEY_EXISTED, TrainConfig
from ctxemb.training.data import Batch, batch_size_of, count_tokens, move_to_device
from ctxemb.training.embedding_rows import EmbeddingRowAdamW, RowLookupSwap, find_row_embeddings
from ctxemb.modeling.fused_training import set_fused_training
from ctxemb.runtime.kernels import enable_fused_training
from ctxemb.runtime.distributed import (DistributedContext, all_reduce_mean, all_reduce_sum, any_process,
                                         init_distributed, shutdown, unwrap_model, wrap_model)
from ctxemb.training.logging import LOSS_PLOT_FILE, METRICS_FILE, MetricWriters, write_loss_plot
from ctxemb.training.optim import linear_schedule, make_optimizer
from ctxemb.training.state import (capture_rng_state, latest_checkpoint, list_checkpoints, load_checkpoint,
                                   prune_checkpoints, restore_rng_state, save_checkpoint)

logger = logging.getLogger(__name__)

# Kept importable from here (their homes are training.config, .callbacks, .logging and ctxemb.core.precision).
__all__ = ["Callback", "LOSS_PLOT_FILE", "METRICS_FILE", "TrainConfig", "TrainResult", "check_fresh_out_dir", "evaluate", "resolve_precision", "seed_everything", "train", "write_loss_plot"]


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
                with autocast(precision, device):
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
                "keep_last_checkpoints", "device", "report_to", "keep_freed_memory"}


def _switch_on_fused_training(model: nn.Module, setting: str, device: torch.device) -> bool:
    """Give ``model``'s BERT-layout modules the fused training ops where ``setting`` ("auto", "on", "off") asks for
    them and they run (a CPU with AVX-512; the first use builds them, about a minute, so before the first step);
    returns whether they were switched on. Why not is logged: a warning for "on", information for "auto"."""
    if setting == "off":
        return False
    if device.type != "cpu":
        on, why = False, f"the fused training ops run on the CPU; this run trains on {device}"
    else:
        on, why = enable_fused_training(model)
    (logger.info if on or setting == "auto" else logger.warning)("fused training ops (fused_training=%r): %s",
                                                                  setting, why)
    return on


def _warn_config_changes(saved: Mapping[str, Any] | None, config: TrainConfig, path: Path) -> None:
    if not saved:
        return
    now = config.to_dict()
    # a setting newer than the checkpoint ran as it did before it existed: its default, or what the default did then
    # (to_dict leaves None out)
    saved = {**{f.name: f.default for f in dataclasses.fields(TrainConfig)
                if f.default not in (None, dataclasses.MISSING)}, **BEFORE_THEY_EXISTED, **saved}
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
        ValueError: ``train_data`` was built for another world size, or ``config.max_steps`` is unset.
        FileExistsError: a fresh run (``resume=False``) into an ``out_dir`` that already holds checkpoints.
        FloatingPointError: the loss became NaN or infinite (the step is named).
        RuntimeError: ``train_data`` ran out (a BatchSource must be endless).
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if config.max_steps is None:
        raise ValueError("config.max_steps is unset: set it, or run through a recipe "
                         "(ctxemb.training.recipe.resolve_steps turns epochs into steps)")
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
    t_setup = time.perf_counter()
    device = ctx.device
    chosen = explain_training_precision(config.precision, device)
    precision = chosen.resolved
    if config.precision == "auto" and ctx.is_main:
        logger.info("precision auto -> %s (%s)", precision, chosen.reason)
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
    word_embeddings = find_row_embeddings(raw, config.embedding_update, ctx.world_size)  # None: the dense update
    optimizer = make_optimizer(raw if groups is None else groups, lr=config.learning_rate,
                               weight_decay=config.weight_decay, betas=(config.adam_beta1, config.adam_beta2),
                               eps=config.adam_epsilon, word_embeddings=word_embeddings,
                               embedding_update="dense" if word_embeddings is None else config.embedding_update)
    rows = optimizer if isinstance(optimizer, EmbeddingRowAdamW) else None
    swap: RowLookupSwap | None = None  # the row lookup, in place while steps run
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
        for cb in callbacks:
            cb.on_resume(loaded.trainer_state, loaded.path)
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

    writers = MetricWriters(config, ctx, start_step)
    result = TrainResult(step=start_step, start_step=start_step, elapsed=elapsed_before)
    t_start = time.perf_counter()
    timing = result.timing
    timing.update(setup=t_start - t_setup, first_step=0.0, steps=0.0, eval=0.0, checkpoints=0.0, loss_plot=0.0)
    last_log_time = t_start
    last_saved = start_step if loaded is not None else -1
    accum = config.grad_accumulation_steps
    tokens_known = False
    params = [p for p in raw.parameters() if p.requires_grad]

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - t_start

    def save(step: int) -> None:
        nonlocal last_saved
        t = time.perf_counter()
        rank_state = {
            "rng": capture_rng_state(device),
            "data": train_data.state_dict(),
            "running": {"loss_sum": float(running["loss_sum"]), "steps": int(running["steps"]),
                        "tokens": int(running["tokens"]),
                        "metric_sums": {k: float(v) for k, v in running["metric_sums"].items()}},
        }
        info = {k: v for cb in callbacks for k, v in cb.checkpoint_info().items()}  # e.g. the best evaluation
        with swap.plain() if swap is not None else nullcontext():  # the model's own modules and AdamW's values
            path = save_checkpoint(out_dir, step, model=raw, optimizer=optimizer, scheduler=scheduler,
                                   rank_state=rank_state, ctx=ctx,
                                   trainer_state={**info, "elapsed": elapsed(), "config": config.to_dict(),
                                                  "torch_version": torch.__version__})
        if ctx.is_main and config.keep_last_checkpoints:
            prune_checkpoints(out_dir, config.keep_last_checkpoints, protect=info.get("best_step"))
        last_saved = step
        result.checkpoint = path
        for cb in callbacks:
            cb.on_save(step, path)
        timing["checkpoints"] += time.perf_counter() - t

    def run_eval(step: int) -> tuple[dict[str, float], bool]:
        t = time.perf_counter()
        with swap.plain() if swap is not None else nullcontext():  # what keep_best snapshots is AdamW's too
            metrics = evaluate(raw, eval_data, eval_fn=eval_fn, device=device, precision=precision, ctx=ctx)
            result.eval_metrics = metrics
            stop = any([bool(cb.on_evaluate(step, metrics)) for cb in callbacks])
        timing["eval"] += time.perf_counter() - t
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

    if rows is not None:
        swap = RowLookupSwap(raw, rows)
    fused = _switch_on_fused_training(raw, "off" if config.compile else config.fused_training,
                                      device)  # switched off again in `finally`
    if config.compile and config.fused_training == "auto" and ctx.is_main:
        logger.info("fused training ops off: compile=True traces torch's own ops")
    forward = torch.compile(ddp, dynamic=True) if config.compile else ddp  # compiled on the first batch
    if config.keep_freed_memory:
        logger.info("allocator: %s", keep_freed_memory()[1])
    data_iter = iter(train_data)
    can_evaluate = eval_data is not None or eval_fn is not None
    step = start_step
    grad_norm = None
    try:
        while step < config.max_steps:
            faults.kill_point("between_steps")
            step += 1
            t_step = time.perf_counter()
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
                with autocast(precision, device):
                    loss, metrics = _unpack(forward(**batch))
                (loss / accum).backward()
                if rows is not None:
                    rows.end_micro_batch()
                step_loss += loss.detach().float()
                for k, v in metrics.items():
                    running["metric_sums"][k] = running["metric_sums"].get(k, 0.0) + _as_tensor(v) / accum
            loss_value = step_loss.item() / accum
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"the training loss is {loss_value} at step {step}")
            if config.max_grad_norm > 0:
                grad_norm = (torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm) if rows is None
                             else rows.clip_grad_norm_(params, config.max_grad_norm))
            lr = max(g["lr"] for g in optimizer.param_groups)  # the rate this step uses
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            running["loss_sum"] += loss_value
            running["steps"] += 1
            result.losses.append(loss_value)
            result.step = step
            writers.bar.update(1)
            timing["first_step" if step == start_step + 1 else "steps"] += time.perf_counter() - t_step
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
        if swap is not None:  # also after an error: the caller's model has its own modules and AdamW's values
            swap.restore()
        if fused:  # the caller's model as it came (a model holding native ops cannot be pickled whole)
            set_fused_training(raw, None)
        writers.close()
    if ctx.is_main and out_dir is not None and (out_dir / METRICS_FILE).exists():
        t = time.perf_counter()
        write_loss_plot(out_dir / METRICS_FILE, out_dir / LOSS_PLOT_FILE)
        timing["loss_plot"] = time.perf_counter() - t
    for cb in callbacks:
        cb.on_train_end(result)
    return result
