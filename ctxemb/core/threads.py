"""The thread count at which one small piece of work runs fastest here, measured where it runs, never assumed.

For one short input (a query of ten tokens through an encoder, one query vector through a FAISS index) more threads
can cost more than they give: each parallel region forks and joins its threads, and on a shared machine a thread may
wait for a core another process holds. Whether they do depends on the CPU, the work and what else runs, so
:func:`fastest_threads` times the work at each candidate count, in alternating rounds, and returns the fastest;
:func:`thread_candidates` says which counts are worth timing; :func:`running_on` runs a block at the chosen count.

Torch-free and FAISS-free: the caller passes the function that sets its library's thread count.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ctxemb.core.validation import check_int

#: The input the serving path's thread counts are chosen on: a short query (11 tokens with all-MiniLM-L6-v2's
#: vocabulary), encoded by :class:`ctxemb.embedding.query.QueryEncoder`, searched by
#: :class:`ctxemb.search.serving.QuerySearcher`.
PROBE_QUERY = "how do vaccines protect people against a new virus?"
#: Timed rounds after the warm-up; each round runs the work once at every candidate count.
ROUNDS = 9
#: A count within this fraction of the fastest median that uses fewer threads is chosen instead (fewer threads
#: leave cores to the rest of the process, and a difference this small is the noise of a shared machine).
TOLERANCE = 0.05


@dataclass(frozen=True)
class ThreadChoice:
    """What :func:`fastest_threads` measured and chose.

    Attributes:
        threads: the count chosen.
        seconds: median seconds of one run of the work at each candidate count.
    """

    threads: int
    seconds: dict[int, float]

    def describe(self) -> str:
        """One line: the choice and every count's median in milliseconds."""
        count = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        if not self.seconds:
            return f"{count} (the only count available)"
        times = ", ".join(f"{n}: {1e3 * s:.3f} ms" for n, s in sorted(self.seconds.items()))
        return f"{count} (median of one run at {times})"

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "seconds": {str(n): s for n, s in sorted(self.seconds.items())}}


def thread_candidates(available: int) -> list[int]:
    """1, 2, 4, ... below ``available``, and ``available`` itself: the counts worth timing.

    Raises:
        ValueError: ``available`` < 1.
    """
    available = check_int(available, "available", low=1)
    out, n = [], 1
    while n < available:
        out.append(n)
        n *= 2
    return out + [available]


def fastest_threads(run: Callable[[], Any], set_threads: Callable[[int], None], candidates: Sequence[int], *,
                    rounds: int = ROUNDS, warmup: int = 2, tolerance: float = TOLERANCE,
                    before: Callable[[], Any] | None = None) -> ThreadChoice:
    """Time ``run()`` at each thread count of ``candidates`` and return the fastest.

    Each count runs ``warmup`` times untimed, then ``rounds`` rounds time every count once in turn, so that a slow
    spell of a shared machine costs every count one round rather than one count all of its runs. The count with the
    least median wins, unless one with fewer threads is within ``tolerance`` of it. The caller restores its own
    thread count afterwards: this leaves the last candidate's set.

    Args:
        run: the work, one short input's worth.
        set_threads: sets the thread count ``run`` uses (e.g. ``torch.set_num_threads``).
        candidates: the counts to time (e.g. :func:`thread_candidates`), each >= 1.
        rounds: timed rounds, >= 1.
        warmup: untimed runs per count first, >= 0.
        tolerance: see above, >= 0.
        before: called untimed before every run of ``run``: what precedes the work where it runs (e.g. the query's
            encoding before its search, which leaves its data in the caches and its threads on the cores).

    Raises:
        ValueError: no candidate, a count < 1, ``rounds`` < 1, ``warmup`` < 0 or a negative ``tolerance``.
    """
    counts = sorted({check_int(n, "candidates[i]", low=1) for n in candidates})
    if not counts:
        raise ValueError("candidates is empty: expected at least one thread count")
    rounds = check_int(rounds, "rounds", low=1)
    warmup = check_int(warmup, "warmup", low=0)
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    if len(counts) == 1:
        return ThreadChoice(counts[0], {})
    for n in counts:
        set_threads(n)
        for _ in range(warmup):
            if before is not None:
                before()
            run()
    times: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(rounds):
        for n in counts:
            set_threads(n)
            if before is not None:
                before()
            start = time.perf_counter()
            run()
            times[n].append(time.perf_counter() - start)
    medians = {n: statistics.median(t) for n, t in times.items()}
    best = min(medians.values())
    chosen = next(n for n in counts if medians[n] <= best * (1 + tolerance))
    return ThreadChoice(chosen, medians)


@contextlib.contextmanager
def running_on(threads: int | None, get_threads: Callable[[], int], set_threads: Callable[[int], None]
               ) -> Iterator[None]:
    """Run the block at ``threads`` (set with ``set_threads``) and restore the count ``get_threads()`` gave before;
    None leaves the count alone. Nothing is set when the count is already ``threads``."""
    saved = None if threads is None else get_threads()
    if saved is not None and saved != threads:
        set_threads(threads)
    try:
        yield
    finally:
        if saved is not None and saved != threads:
            set_threads(saved)
