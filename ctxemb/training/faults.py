"""Fault injection for the kill tests, and the lock of a training run directory.

Kill points. ``CTXEMB_TEST_KILL_AT=<phase>:<count>`` makes the process SIGKILL itself the ``count``-th time
(1-based, counted from the start of this process) it reaches a point of that phase. The phases:

- ``between_steps``: at the top of every optimizer step of the loop;
- ``checkpoint_write``: inside the write of a checkpoint (its directory half written);
- ``final_save``: the same, inside the write of the checkpoint at ``max_steps``;
- ``metrics_line``: inside the append of a record to ``metrics.jsonl`` (half the line written and flushed).

Without the variable every point is a no-op (one dictionary lookup). Tests only: nothing else sets it.

Run lock. :func:`lock_run_directory` holds ``<out_dir>/.ctxemb.lock`` (``ctxemb.core.locks``) for a training run, so a
second run into the same ``out_dir`` fails at once with :class:`~ctxemb.core.locks.DirectoryLockedError` instead of both
writing checkpoints and metrics there.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import IO, Iterator

from ctxemb.core.locks import DirectoryLock, lock_file_inside

ENV = "CTXEMB_TEST_KILL_AT"
PHASES = ("between_steps", "checkpoint_write", "final_save", "metrics_line")
_reached: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    phase, _, count = spec.partition(":")
    if phase not in PHASES or not count.isdigit() or int(count) < 1:
        raise ValueError("%s must be <phase>:<count> with a phase among %s and a count >= 1; got %r"
                         % (ENV, ", ".join(PHASES), spec))
    return phase, int(count)


def kill_point(phase: str, partial: tuple[IO, str] | None = None) -> None:
    """SIGKILL this process if ``CTXEMB_TEST_KILL_AT`` names this ``phase`` and this is its count-th visit.

    Args:
        phase: one of :data:`PHASES`.
        partial: (an open text file, a line): written half before the kill and flushed, to leave a torn line.
    """
    target = _target()
    if target is None:
        return
    _reached[phase] = _reached.get(phase, 0) + 1
    if target != (phase, _reached[phase]):
        return
    if partial is not None:
        f, line = partial
        f.write(line[: max(1, len(line) // 2)])
        f.flush()
        os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def checkpoint_phase(step: int, trainer_state: dict) -> str:
    """``final_save`` for the checkpoint at the run's ``max_steps``, else ``checkpoint_write``."""
    return "final_save" if step == (trainer_state.get("config") or {}).get("max_steps") else "checkpoint_write"


@contextlib.contextmanager
def lock_run_directory(out_dir: str | os.PathLike | None, is_main: bool = True) -> Iterator[DirectoryLock | None]:
    """Hold the lock of a training run directory for the duration of the block (rank 0 only; no-op without one).

    Raises:
        DirectoryLockedError: another run (process) is writing ``out_dir``.
    """
    if out_dir is None or not is_main:
        yield None
        return
    lock = DirectoryLock(lock_file_inside(out_dir), what="the training run directory %s (another run is writing "
                                                          "it: give this run another --out)" % Path(out_dir))
    with lock.hold(timeout=0):
        yield lock
