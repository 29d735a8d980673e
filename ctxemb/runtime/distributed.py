"""Several processes under torchrun: the process group, DDP wrapping and the few collectives the loop needs.

A run started with ``torchrun --nproc_per_node P ...`` gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and
``LOCAL_WORLD_SIZE`` in its environment (as in nanoGPT's ``train.py``); a plain ``python`` run has none of them
and is a world of one, with no process group and no DDP wrapper.

    with distributed_session() as ctx:          # init_process_group(gloo on CPU, nccl on CUDA) ... destroy
        model = wrap_model(model.to(ctx.device), ctx)
        ...
        if ctx.is_main:
            save(...)
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import nn

logger = logging.getLogger(__name__)

_ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in the run.

    Attributes:
        rank: global index of this process (0 .. world_size - 1).
        local_rank: index on this machine (picks the GPU).
        world_size: number of processes in the run.
        local_world_size: number of processes on this machine (they share its cores).
        device: the device this process computes on.
        backend: the process group's backend ("gloo" or "nccl"), None for a single process.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that logs, writes files and shows a progress bar."""
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str | torch.device = "auto") -> "DistributedContext":
        """Read torchrun's variables (all absent = a single process); no process group is created.

        Raises:
            ValueError: a variable is not an integer, or the ranks do not fit the world size.
        """
        values = {}
        for name in _ENV_VARS:
            raw = os.environ.get(name)
            if raw is None:
                continue
            try:
                values[name] = int(raw)
            except ValueError:
                raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None
        world_size = values.get("WORLD_SIZE", 1)
        rank = values.get("RANK", 0)
        local_rank = values.get("LOCAL_RANK", rank)
        local_world_size = values.get("LOCAL_WORLD_SIZE", world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"RANK ({rank}) must be in [0, WORLD_SIZE ({world_size}))")
        if local_world_size < 1 or not 0 <= local_rank < local_world_size:
            raise ValueError(f"LOCAL_RANK ({local_rank}) must be in [0, LOCAL_WORLD_SIZE ({local_world_size}))")
        return cls(rank=rank, local_rank=local_rank, world_size=world_size, local_world_size=local_world_size,
                   device=resolve_device(device, local_rank))


def resolve_device(device: str | torch.device = "auto", local_rank: int = 0) -> torch.device:
    """"auto" is this process's GPU (``cuda:{local_rank}``) when CUDA is available, else the CPU; a bare "cuda"
    also becomes ``cuda:{local_rank}`` so that several processes do not share GPU 0.

    Raises:
        ValueError: the device string is not one torch understands.
    """
    if isinstance(device, torch.device):
        dev = device
    else:
        if not isinstance(device, str) or not device:
            raise ValueError(f"device must be 'auto' or a torch device string such as 'cpu' or 'cuda:0', "
                             f"got {device!r}")
        if device == "auto":
            return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        try:
            dev = torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device must be 'auto' or a torch device string such as 'cpu' or 'cuda:0', "
                             f"got {device!r} ({e})") from None
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank)
    return dev


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def init_distributed(device: str | torch.device = "auto", *, backend: str | None = None,
                     timeout: datetime.timedelta | None = None, num_threads: int | None = None) -> DistributedContext:
    """Join the process group torchrun set up (a no-op for a single process) and return this process's context.

    Args:
        device: "auto" (this process's GPU if CUDA is available, else CPU) or a torch device string.
        backend: None picks nccl for CUDA devices and gloo for the CPU.
        timeout: how long collectives wait for a missing process (torch's default if None).
        num_threads: torch intra-op threads for this process; None gives ``cores // local_world_size`` (at least 1)
            when several processes share the machine, so that they do not oversubscribe its cores
            (torchrun itself would leave each process at 1 thread).

    Returns:
        The context; if a process group already exists it is reused (and not destroyed by :func:`shutdown`
        callers that did not create it, see :func:`distributed_session`).
    """
    ctx = DistributedContext.from_env(device)
    if not ctx.is_distributed:
        return ctx
    if ctx.device.type == "cuda":
        torch.cuda.set_device(ctx.device)
    if backend is None:
        backend = "nccl" if ctx.device.type == "cuda" else "gloo"
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed support")
    if not dist.is_initialized():
        kwargs = {} if timeout is None else {"timeout": timeout}
        dist.init_process_group(backend=backend, rank=ctx.rank, world_size=ctx.world_size, **kwargs)
    else:
        backend = dist.get_backend()
        if dist.get_world_size() != ctx.world_size or dist.get_rank() != ctx.rank:
            raise RuntimeError(f"the existing process group (rank {dist.get_rank()} of {dist.get_world_size()}) "
                               f"does not match RANK={ctx.rank} WORLD_SIZE={ctx.world_size}")
    if num_threads is None and ctx.local_world_size > 1:
        num_threads = max(1, _available_cores() // ctx.local_world_size)
    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        torch.set_num_threads(num_threads)
    ctx = DistributedContext(rank=ctx.rank, local_rank=ctx.local_rank, world_size=ctx.world_size,
                             local_world_size=ctx.local_world_size, device=ctx.device, backend=backend)
    if ctx.is_main:
        logger.info("distributed run: %d processes (%d on this machine), backend %s, %d torch threads each",
                    ctx.world_size, ctx.local_world_size, backend, torch.get_num_threads())
    return ctx


def shutdown() -> None:
    """Destroy the process group if there is one (safe to call twice, or in a single-process run)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def distributed_session(device: str | torch.device = "auto", **kwargs) -> Iterator[DistributedContext]:
    """:func:`init_distributed` on entry and, if this call created the process group, :func:`shutdown` on exit,
    also when the block raises (a rank that dies without it leaves the others waiting until the timeout)."""
    owned = dist.is_available() and not dist.is_initialized()
    ctx = init_distributed(device, **kwargs)
    try:
        yield ctx
    finally:
        if owned and ctx.is_distributed:
            shutdown()


def wrap_model(model: nn.Module, ctx: DistributedContext, *, find_unused_parameters: bool = False) -> nn.Module:
    """DistributedDataParallel around ``model`` (already on ``ctx.device``) in a distributed run, else ``model``.

    Tie weights (decoder to word embeddings) *before* wrapping: DDP registers the parameters it finds now, and a
    parameter assigned afterwards gets no gradient all-reduce.
    """
    if not ctx.is_distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside a DDP (or DataParallel, or torch.compile) wrapper; ``model`` itself otherwise."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


def barrier(ctx: DistributedContext) -> None:
    """Wait for every process (a no-op for a single process)."""
    if ctx.is_distributed:
        dist.barrier()


def all_reduce_sum(values: torch.Tensor, ctx: DistributedContext) -> torch.Tensor:
    """Sum a float tensor over processes (returns a new tensor; the input is unchanged)."""
    out = values.detach().to(torch.float64, copy=True)
    if ctx.is_distributed:
        out = out.to(ctx.device)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.cpu()


def all_reduce_mean(values: Mapping[str, float] | float, ctx: DistributedContext) -> dict[str, float] | float:
    """Mean over processes of one number or of a dict of numbers (for logging; every rank must pass the same keys).

    Returns:
        the same shape as ``values``: a float, or a dict with the same keys.
    """
    if isinstance(values, Mapping):
        keys = sorted(values)
        if not ctx.is_distributed:
            return {k: float(values[k]) for k in keys}
        summed = all_reduce_sum(torch.tensor([float(values[k]) for k in keys]), ctx)
        return {k: float(v) / ctx.world_size for k, v in zip(keys, summed.tolist())}
    if not ctx.is_distributed:
        return float(values)
    return float(all_reduce_sum(torch.tensor([float(values)]), ctx)[0]) / ctx.world_size


def any_process(flag: bool, ctx: DistributedContext) -> bool:
    """True on every rank if ``flag`` is true on any rank (so all of them stop together)."""
    if not ctx.is_distributed:
        return bool(flag)
    return bool(all_reduce_sum(torch.tensor([1.0 if flag else 0.0]), ctx)[0] > 0)


def gather_to_main(obj: object, ctx: DistributedContext) -> list | None:
    """Every rank's (picklable) ``obj`` as a list indexed by rank on rank 0; None on the other ranks."""
    if not ctx.is_distributed:
        return [obj]
    out = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(obj, out, dst=0)
    return out


def call_on_every_rank(fn: Callable[[], Any], ctx: DistributedContext) -> list:
    """Call ``fn()`` on every rank and share how it went, so that no rank is left waiting in a collective for one
    that failed, and every rank learns of a failure anywhere.

    Every rank must call this the same number of times (it is a collective: one ``all_gather_object``).

    Returns:
        every rank's (picklable) result, by rank; ``[fn()]`` for a single process.

    Raises:
        Exception: on every rank if ``fn`` raised on any: a rank where it raised re-raises its own exception (a single
            process: always); the others raise a RuntimeError naming each failing rank and its error.
    """
    try:
        result, error = fn(), None
    except Exception as e:  # KeyboardInterrupt and the like are not shared: they end the run
        result, error = None, e
    if not ctx.is_distributed:
        if error is not None:
            raise error
        return [result]
    gathered: list = [None] * ctx.world_size
    message = None if error is None else f"{type(error).__name__}: {error}"
    dist.all_gather_object(gathered, (message, result))
    if error is not None:
        raise error
    failed = [(rank, msg) for rank, (msg, _) in enumerate(gathered) if msg is not None]
    if failed:
        raise RuntimeError("; ".join(f"rank {rank} of {ctx.world_size} failed: {msg}" for rank, msg in failed))
    return [res for _, res in gathered]


def log_main(ctx: DistributedContext, msg: str, *args, level: int = logging.INFO) -> None:
    """Log on rank 0 only (the other ranks would repeat the same line)."""
    if ctx.is_main:
        logger.log(level, msg, *args)
