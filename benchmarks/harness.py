"""The one harness of the benchmarks: how a benchmark times, what it reports, how it names the machine, where it writes.

Timing. :func:`measure` runs a callable ``warmup`` times untimed (default :data:`WARMUP`), then ``repeats`` times
timed; :func:`measure_alternating` does the same for several callables, its timed runs in rounds that alternate
between them, so that a slow spell of a shared machine costs every callable one round rather than one callable all
of its runs. :class:`Stopwatch` times one run of something that is not repeated (a training run, an index build, a
child process). All of them read one clock, :func:`clock`.

The statistic. A :class:`Timing` holds the timed seconds (warm-up excluded); a benchmark reports their median
(:data:`STATISTIC`), with the min and max beside it in its JSON (:meth:`Timing.to_dict`). :func:`summarize` gives
the same statistic over seconds measured elsewhere (fresh processes, per-query latencies). A matrix-multiply peak
is the one number read from ``Timing.min`` instead: a peak is the best rate by definition.

The machine. :func:`machine` is the library's description (:func:`ctxemb.core.machine.describe_machine`) as JSON;
:func:`machine_line` is how a results header names it, :func:`versions_line` the versions.

Caches. :func:`code_fingerprint` hashes the sources of the ctxemb packages that compute something a benchmark
caches (encodings), so that a cache keyed by it is not reused after that code changes.

Results. :func:`write_results` writes ``NAME.json`` and ``NAME.md`` under :data:`RESULTS` (or ``out_dir``), each
atomically: the JSON gains a ``machine`` key (unless the payload brings its own, e.g. a re-rendered old run), the
Markdown ends with a line naming the CPU and the versions. :func:`markdown_table` formats a table.

This module imports no torch and no numpy: a child process that measures its own peak memory can import it.

Why not pyperf: pyperf is built for micro-benchmarks; it spawns worker processes, calibrates loop counts and owns
the command line. These benchmarks load a model once, run for seconds to minutes per repeat, compare several rows in
alternating rounds inside one process, and keep their own options; so the harness is this thin layer over
``time.perf_counter`` and ``statistics.median`` instead.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ctxemb.core.atomic import atomic_write
from ctxemb.core.machine import describe_machine

RESULTS = Path(__file__).resolve().parent / "results"
#: Untimed runs before the timed ones, unless a benchmark says otherwise.
WARMUP = 1
#: What a benchmark reports of its timed runs; min and max go beside it in the JSON.
STATISTIC = "median"

clock = time.perf_counter  # the one clock: monotonic, the highest resolution available


# ---- timing -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """Wall seconds of the timed runs of one thing, in order, warm-up excluded.

    ``result`` is what the last call returned (not part of the JSON).
    """

    seconds: tuple[float, ...]
    warmup: int = 0
    result: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if not self.seconds:
            raise ValueError("a Timing needs at least one timed run")

    @property
    def repeats(self) -> int:
        return len(self.seconds)

    @property
    def median(self) -> float:
        """The statistic (:data:`STATISTIC`)."""
        return statistics.median(self.seconds)

    @property
    def min(self) -> float:
        return min(self.seconds)

    @property
    def max(self) -> float:
        return max(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": STATISTIC, "median": self.median, "min": self.min, "max": self.max,
                "repeats": self.repeats, "warmup": self.warmup, "seconds": list(self.seconds)}


def summarize(seconds: Iterable[float], *, warmup: int = 0) -> Timing:
    """The statistic over seconds measured elsewhere (``warmup``: how many untimed runs came before them)."""
    return Timing(tuple(float(s) for s in seconds), warmup)


def measure(fn: Callable[[], Any], *, repeats: int, warmup: int = WARMUP) -> Timing:
    """``fn()`` ``warmup`` times untimed, then ``repeats`` times timed."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    result = None
    for _ in range(warmup):
        result = fn()
    seconds = []
    for _ in range(repeats):
        start = clock()
        result = fn()
        seconds.append(clock() - start)
    return Timing(tuple(seconds), warmup, result)


def measure_alternating(runs: Mapping[str, Callable[[], Any]], *, repeats: int, warmup: int = WARMUP,
                        on_warmup: Callable[[str, Any], None] | None = None,
                        progress: bool = True) -> dict[str, Timing]:
    """Each run ``warmup`` times untimed (all of them, in order), then ``repeats`` rounds, each timing every run once.

    Args:
        runs: name -> callable.
        on_warmup: called with (name, what the call returned) after each warm-up call; the value is not kept (a
            benchmark checks a row's output there, e.g. its accuracy, without holding every row's output).
        progress: print each round's seconds.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        for name, fn in runs.items():
            out = fn()
            if on_warmup is not None:
                on_warmup(name, out)
            del out
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(repeats):
        for name, fn in runs.items():
            start = clock()
            fn()
            seconds[name].append(clock() - start)
        if progress:
            print(f"  round {r + 1}/{repeats}: " + ", ".join(f"{s[-1]:.2f} s" for s in seconds.values()), flush=True)
    return {name: Timing(tuple(s), warmup) for name, s in seconds.items()}


def timing_note(repeats: int, warmup: int = WARMUP, *, alternating: bool = False) -> str:
    """How a table's times were taken, in the words its header uses."""
    runs = "alternating rounds" if alternating else ("runs" if repeats != 1 else "run")
    after = "" if not warmup else f" after {'a warm-up' if warmup == 1 else f'{warmup} warm-ups'}"
    return f"{STATISTIC} of {repeats} {runs}{after} (min and max in the JSON)"


class Stopwatch:
    """Wall seconds of one run of something that is not repeated: started when made, read with :meth:`stop`.

    Also a context manager (``with Stopwatch() as sw: ...``, then ``sw.seconds``). ``started_at`` and
    ``stopped_at`` are the same instants as Unix time (:func:`time.time`), to line up with timestamps another
    process recorded.
    """

    def __init__(self):
        self.started_at = time.time()
        self._start = clock()
        self._seconds: float | None = None
        self.stopped_at: float | None = None

    def stop(self) -> float:
        """Stop (the first call only) and return the seconds."""
        if self._seconds is None:
            self._seconds = clock() - self._start
            self.stopped_at = self.started_at + self._seconds
        return self._seconds

    @property
    def seconds(self) -> float:
        """The seconds so far, or up to :meth:`stop`."""
        return clock() - self._start if self._seconds is None else self._seconds

    def __enter__(self) -> Stopwatch:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- the machine ------------------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """The library's description of this machine (:func:`ctxemb.core.machine.describe_machine`), as JSON."""
    return describe_machine().as_dict()


def machine_line(m: Mapping[str, Any] | None = None) -> str:
    """``m`` (default: this machine) in one line: CPU, cores, torch threads, the CPU flags that matter.

    Reads older results' machine keys too (``threads`` for ``torch_threads``).
    """
    m = machine() if m is None else m
    parts = [str(m.get("cpu") or "unknown CPU")]
    if m.get("cpu_count"):
        parts.append(f"{m['cpu_count']} cores")
    threads = m.get("torch_threads", m.get("threads"))
    if threads:
        parts.append(f"{threads} torch threads")
    line = ", ".join(parts)
    flags = m.get("cpu_flags")
    return line + (f" ({', '.join(flags) or 'no AVX2'})" if flags is not None else "")


def versions_line(m: Mapping[str, Any] | None = None) -> str:
    """The versions and the operating system of ``m`` (default: this machine), in one line."""
    m = machine() if m is None else m
    names = (("python", "Python"), ("torch", "torch"), ("numpy", "numpy"), ("ctxemb", "ctxemb"))
    line = ", ".join(f"{label} {m[key]}" for key, label in names if m.get(key))
    os_name = m.get("os") or m.get("platform")
    return line + (f"; {os_name}" if os_name else "")


# ---- results ----------------------------------------------------------------------------------------------------
def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table of ``rows`` (dicts) in ``columns``: floats below 10 with three decimals, others with none."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.0f}"
        return str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def _json_value(o: Any) -> Any:
    """JSON for what :mod:`json` does not know: numpy arrays and scalars, paths, dataclass-like objects as text."""
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    return str(o)


def _finite(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Mapping):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def dir_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path`` (an index or a model on disk), subfolders included."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def write_json(path: str | Path, payload: Any, *, finite_only: bool = False, indent: int = 2) -> Path:
    """``payload`` as JSON at ``path``, atomically (``finite_only``: NaN and infinity become null, strict JSON)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8") as f:
        json.dump(_finite(payload) if finite_only else payload, f, indent=indent, default=_json_value,
                  allow_nan=not finite_only)
        f.write("\n")
    return path


def write_markdown(path: str | Path, text: str, m: Mapping[str, Any] | None = None) -> Path:
    """``text`` at ``path``, atomically, ending with a line that names the machine ``m`` (default: this one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    m = machine() if m is None else m
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip() + f"\n\nMachine: {machine_line(m)}; {versions_line(m)}.\n")
    return path


def write_results(name: str, payload: Mapping[str, Any], markdown: str, *, out_dir: str | Path | None = None,
                  finite_only: bool = False) -> Path:
    """``NAME.json`` (``payload`` with the machine under ``machine``) and ``NAME.md`` (``markdown`` with the machine
    line) in ``out_dir`` (default :data:`RESULTS`). Returns the JSON's path.

    A payload that has a ``machine`` dict keeps it (a report re-rendered from an earlier run names that run's
    machine); any other gets this machine's.
    """
    out = Path(out_dir) if out_dir is not None else RESULTS
    m = payload.get("machine")
    if not isinstance(m, Mapping):
        m = machine()
    path = write_json(out / f"{name}.json", {**payload, "machine": m}, finite_only=finite_only)
    write_markdown(out / f"{name}.md", markdown, m)
    return path


def code_fingerprint(*packages: str) -> str:
    """A short hash of the sources (``.py``, ``.cpp``, ``.h``) of ctxemb's subpackages ``packages`` (e.g.
    ``"runtime"``) and of the installed torch's version: cached encodings keyed by it are not reused after a change to
    the code that computed them (a kernel's rounding, a pooling), which would report old vectors, and old encoding
    times, as the current code's."""
    import hashlib
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("ctxemb")
    if spec is None or spec.origin is None:
        raise RuntimeError("code_fingerprint: ctxemb is not importable here")
    root = Path(spec.origin).resolve().parent
    digest = hashlib.sha1(importlib.metadata.version("torch").encode())
    for package in packages:
        folder = root / package
        if not folder.is_dir():
            raise ValueError(f"code_fingerprint: ctxemb has no subpackage {package!r} (looked for {folder})")
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".cpp", ".h"):
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:8]
