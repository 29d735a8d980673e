"""Checkpoints that resume exactly: weights, optimizer, schedule, step, running averages, data position, and
every random number generator.

A checkpoint is one directory, written under a temporary name and renamed into place (so a crash never leaves
a half-written ``checkpoint-{step}``):

    out_dir/checkpoint-{step}/
        trainer_state.json   step, world size, elapsed seconds, the TrainConfig, format version, and (with
                             model selection) the best evaluation so far: best_step, best_metric, best_value
        model.safetensors    state_dict of the unwrapped model (no "module." prefix; a tied tensor is stored
                             once, as safetensors.torch.save_model does)
        optimizer.pt         optimizer state_dict (identical on every rank under DDP, saved by rank 0)
        scheduler.pt         LR scheduler state_dict
        rank-{r}.pt          per rank r: RNG states (python, numpy, torch CPU, CUDA), the batch source's
                             state_dict, the running loss/metric/token accumulators since the last log

Rank 0 gathers the per-rank states and writes the directory alone; on resume every rank reads the model,
optimizer and scheduler files and its own ``rank-{r}.pt``. The torch files are loaded with ``weights_only=True``.

Format 1 (ctxemb before the safetensors checkpoints) kept the weights in ``model.pt``; such checkpoints still
resume (:func:`read_checkpoint_weights` reads either).
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file as load_safetensors
from safetensors.torch import load_model as load_safetensors_model
from safetensors.torch import save_model as save_safetensors_model
from torch import nn

from ctxemb.core.validation import read_json_file
from ctxemb.core.atomic import atomic_directory, recover_folder, resolve_saved_directory
from ctxemb.training import faults
from ctxemb.runtime.distributed import DistributedContext, barrier, gather_to_main, unwrap_model

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: weights in model.safetensors; 1: weights in model.pt (still read)
CHECKPOINT_PREFIX = "checkpoint-"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
MODEL_FILE = "model.safetensors"
LEGACY_MODEL_FILE = "model.pt"  # format 1
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"


class ResumeStateError(RuntimeError):
    """A checkpoint file is corrupt, unreadable, or does not fit the model/optimizer/run it is loaded into."""


def rank_file(rank: int) -> str:
    return f"rank-{rank}.pt"


# --------------------------------------------------------------------------------------------------- RNG states

def capture_rng_state(device: torch.device | None = None) -> dict:
    """The state of every global generator: python ``random``, numpy's legacy global one, torch's CPU one and,
    when ``device`` is a CUDA device, that device's (only plain types and tensors, for ``weights_only`` loads)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state = {
        "python": random.getstate(),
        "numpy": {"name": name, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict, device: torch.device | None = None) -> None:
    """Set the generators back to a :func:`capture_rng_state` result."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if device is not None and device.type == "cuda":
        if "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], device)
        else:
            logger.warning("the checkpoint has no CUDA generator state (saved on another device type); "
                           "dropout on %s will differ from the original run", device)


def _check_plain(obj: Any, where: str) -> None:
    """Raise TypeError if ``obj`` holds something ``torch.load(weights_only=True)`` would refuse (numpy arrays,
    arbitrary objects) so that the problem shows when saving, not when resuming."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.Tensor, torch.Size)):
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; use str or int keys")
            _check_plain(v, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where} is a {type(obj).__module__}.{type(obj).__name__}; checkpoint state may only hold "
                    f"Python numbers, strings, lists, tuples, dicts and torch tensors (convert numpy arrays with "
                    f"torch.from_numpy)")


# --------------------------------------------------------------------------------------------------- listing

def list_checkpoints(out_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete ``checkpoint-{step}`` directory in ``out_dir``, oldest first."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    recover_folder(out_dir)  # restores a checkpoint a crash interrupted; deletes leftovers of crashed saves
    found = []
    for p in out_dir.iterdir():
        m = _CHECKPOINT_RE.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint with the highest step in ``out_dir``, or None."""
    found = list_checkpoints(out_dir)
    return found[-1][1] if found else None


def prune_checkpoints(out_dir: str | Path, keep: int, *, protect: int | None = None) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints (``keep`` = 0 keeps all); returns the deleted paths.

    Args:
        protect: the step of a checkpoint never deleted (the best evaluation's, under model selection), kept
            besides the ``keep`` newest.
    """
    if keep <= 0:
        return []
    found = list_checkpoints(out_dir)
    doomed = [p for s, p in found[:-keep] if s != protect] if len(found) > keep else []
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
        logger.info("deleted old checkpoint %s", p)
    return doomed


# --------------------------------------------------------------------------------------------------- save

def save_checkpoint(out_dir: str | Path, step: int, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, rank_state: dict, trainer_state: dict,
                    ctx: DistributedContext | None = None) -> Path:
    """Write ``out_dir/checkpoint-{step}`` atomically (replacing one of the same step).

    Every rank must call this (rank 0 gathers the others' ``rank_state``); only rank 0 writes.

    Args:
        model: the model, DDP-wrapped or not (its unwrapped state_dict is saved).
        rank_state: this rank's RNG/data/accumulator state (plain types and tensors only).
        trainer_state: JSON-serialisable run information (step and format are added).

    Returns:
        the checkpoint directory.

    Raises:
        TypeError: ``rank_state`` holds a type ``weights_only`` loading would refuse.
    """
    ctx = ctx or DistributedContext()
    _check_plain(rank_state, "rank_state")
    states = gather_to_main(rank_state, ctx)
    path = Path(out_dir) / f"{CHECKPOINT_PREFIX}{step}"
    if ctx.is_main:
        info = dict(trainer_state, step=step, world_size=ctx.world_size, format=FORMAT_VERSION)
        with atomic_directory(path) as tmp:
            (tmp / TRAINER_STATE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            save_safetensors_model(unwrap_model(model), str(tmp / MODEL_FILE), metadata={"format": "pt"})
            faults.kill_point(faults.checkpoint_phase(step, trainer_state))
            torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            torch.save(scheduler.state_dict(), tmp / SCHEDULER_FILE)
            for r, s in enumerate(states):
                torch.save(s, tmp / rank_file(r))
        logger.info("saved checkpoint %s", path)
    barrier(ctx)
    return path


# --------------------------------------------------------------------------------------------------- load

def _load(path: Path, device: torch.device | str = "cpu") -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file {path} is missing")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # pickle, zip and EOF errors all mean the same to the caller
        raise ResumeStateError(f"checkpoint file {path} is corrupt or unreadable: {type(e).__name__}: {e}") from e


def read_trainer_state(path: str | Path) -> dict:
    """The ``trainer_state.json`` of a checkpoint directory.

    Raises:
        FileNotFoundError: the directory or the file is missing.
        ResumeStateError: the file is not valid JSON or lacks the step.
    """
    path = resolve_saved_directory(path)  # restores a checkpoint a crash interrupted
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint directory {path} does not exist")
    f = path / TRAINER_STATE
    if not f.is_file():
        raise FileNotFoundError(f"checkpoint file {f} is missing")
    try:
        info = read_json_file(f, "checkpoint file", expected=None)
    except ValueError as e:  # not UTF-8, not JSON (named by the reader)
        raise ResumeStateError(f"checkpoint file {f} is corrupt: {e}") from e
    if not isinstance(info, dict) or not isinstance(info.get("step"), int):
        raise ResumeStateError(f"checkpoint file {f} has no integer 'step'")
    if info.get("format", FORMAT_VERSION) > FORMAT_VERSION:
        raise ResumeStateError(f"checkpoint file {f} has format {info['format']}, newer than this ctxemb "
                              f"understands ({FORMAT_VERSION})")
    return info


def _model_file(path: Path, info: dict) -> Path:
    # format 2 keeps the weights in model.safetensors, format 1 (or a checkpoint without a format) in model.pt
    legacy = info.get("format", 1) < 2
    name = LEGACY_MODEL_FILE if legacy else MODEL_FILE
    f = path / name
    if not f.is_file():
        other = path / (MODEL_FILE if legacy else LEGACY_MODEL_FILE)
        hint = (f" (it has {other.name}, which format {info.get('format', 1)} does not use: the checkpoint is a mix "
                f"of two formats)" if other.is_file() else "")
        raise FileNotFoundError(f"checkpoint file {f} is missing: a format-{info.get('format', 1)} checkpoint keeps "
                                f"its weights in {name}{hint}")
    return f


def _load_weights(path: Path, model: nn.Module, device: torch.device | str, info: dict) -> None:
    f = _model_file(path, info)
    if f.name == LEGACY_MODEL_FILE:
        logger.info("checkpoint %s is in format 1 (weights in %s); the checkpoints this run writes keep them in %s",
                    path, LEGACY_MODEL_FILE, MODEL_FILE)
        state_dict = _load(f, device)
        try:
            model.load_state_dict(state_dict)
        except RuntimeError as e:
            raise ResumeStateError(f"checkpoint file {f} does not fit the model: {e}") from e
        return
    try:
        load_safetensors_model(model, str(f), device=str(device))
    except SafetensorError as e:
        raise ResumeStateError(f"checkpoint file {f} is corrupt or unreadable: {type(e).__name__}: {e}") from e
    except RuntimeError as e:
        raise ResumeStateError(f"checkpoint file {f} does not fit the model: {e}") from e


def read_checkpoint_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The model weights a checkpoint directory holds, as a state dict on the CPU, from either format
    (``model.safetensors``, or a format-1 checkpoint's ``model.pt``). A tied tensor appears under the one name it
    was stored under.

    Raises:
        FileNotFoundError: the directory, its ``trainer_state.json`` or its weights file is missing.
        ResumeStateError: a file is corrupt.
    """
    path = Path(path)
    info = read_trainer_state(path)
    f = _model_file(path, info)
    if f.name == LEGACY_MODEL_FILE:
        return _load(f)
    try:
        return load_safetensors(str(f))
    except SafetensorError as e:
        raise ResumeStateError(f"checkpoint file {f} is corrupt or unreadable: {type(e).__name__}: {e}") from e


@dataclass
class LoadedCheckpoint:
    """What :func:`load_checkpoint` read besides what it loaded in place."""

    path: Path
    step: int
    trainer_state: dict
    rank_state: dict


def load_checkpoint(path: str | Path, *, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    scheduler: Any = None, ctx: DistributedContext | None = None,
                    device: torch.device | None = None) -> LoadedCheckpoint:
    """Load weights, optimizer and scheduler state in place and return this rank's saved state.

    RNG states and the data position are *not* applied here (the loop restores them last, right before the
    first step, so nothing in between can draw from the generators).

    Raises:
        FileNotFoundError: the directory or one of its files is missing (the message names it).
        ResumeStateError: a file is corrupt, or does not fit ``model``/``optimizer`` (names the file).
        ValueError: the checkpoint was written by a run with another number of processes.
    """
    ctx = ctx or DistributedContext()
    device = device or ctx.device
    path = Path(path)
    info = read_trainer_state(path)
    saved_world = info.get("world_size", 1)
    if saved_world != ctx.world_size:
        raise ValueError(f"checkpoint {path} was written by a run with {saved_world} process(es); this run has "
                         f"{ctx.world_size} (the data positions and RNG states are per process)")
    _load_weights(path, unwrap_model(model), device, info)
    if optimizer is not None:
        f = path / OPTIMIZER_FILE
        try:
            optimizer.load_state_dict(_load(f, device))
        except (ValueError, KeyError, RuntimeError) as e:
            if isinstance(e, ResumeStateError):
                raise
            raise ResumeStateError(f"checkpoint file {f} does not fit the optimizer: {e}") from e
    if scheduler is not None:
        f = path / SCHEDULER_FILE
        state = _load(f)
        try:
            scheduler.load_state_dict(state)
        except (ValueError, KeyError, TypeError) as e:
            raise ResumeStateError(f"checkpoint file {f} does not fit the scheduler: {e}") from e
    f = path / rank_file(ctx.rank)
    rank_state = _load(f)
    if not isinstance(rank_state, dict):
        raise ResumeStateError(f"checkpoint file {f} does not hold a dict")
    return LoadedCheckpoint(path=path, step=info["step"], trainer_state=info, rank_state=rank_state)
