"""The benchmarks' one harness and the shape of the ``benchmarks`` package.

- The statistic: the median of the timed runs, with min and max, the warm-up left out (:func:`harness.measure`,
  :func:`harness.measure_alternating`, :class:`harness.Stopwatch`), on a fake clock.
- The results writer: ``NAME.json`` and ``NAME.md`` naming the CPU and the versions, each written atomically.
- The package: no file puts anything on ``sys.path``; every benchmark module imports the harness; no module but the
  harness reads a clock or describes the machine itself; no module over 600 lines; ``python -m benchmarks.NAME
  --help`` works for every script.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import harness
from ctxemb.core.machine import describe_machine

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
MAX_LINES = 600
CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time",
          "process_time_ns"}


class FakeClock:
    """harness.clock, advanced by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(harness, "clock", fake)
    return fake


# ---- the statistic --------------------------------------------------------------------------------------------
def test_measure_leaves_out_the_warmup_and_reports_the_median_with_min_and_max(clock):
    durations = iter([100.0, 50.0, 3.0, 1.0, 2.0, 7.0])  # two warm-ups (slow: a cold cache), then four timed runs
    calls = []

    def run():
        clock.now += next(durations)
        calls.append(clock.now)
        return len(calls)

    timing = harness.measure(run, repeats=4, warmup=2)
    assert len(calls) == 6
    assert timing.seconds == (3.0, 1.0, 2.0, 7.0) and timing.warmup == 2 and timing.result == 6
    assert (timing.median, timing.min, timing.max, timing.repeats) == (2.5, 1.0, 7.0, 4)
    assert timing.to_dict() == {"statistic": "median", "median": 2.5, "min": 1.0, "max": 7.0, "repeats": 4,
                                "warmup": 2, "seconds": [3.0, 1.0, 2.0, 7.0]}
    assert harness.STATISTIC == "median" and harness.WARMUP == 1
    assert harness.measure(run_once(clock, 4.0), repeats=1).warmup == harness.WARMUP


def run_once(clock: FakeClock, seconds: float):
    def run():
        clock.now += seconds
    return run


def test_alternating_rounds_warm_up_every_run_first_then_alternate(clock, capsys):
    order, seen = [], []
    cost = {"a": iter([9.0, 1.0, 3.0, 2.0]), "b": iter([8.0, 5.0, 4.0, 6.0])}

    def make(name):
        def run():
            order.append(name)
            clock.now += next(cost[name])
            return f"{name}-output"
        return run

    timings = harness.measure_alternating({"a": make("a"), "b": make("b")}, repeats=3,
                                          on_warmup=lambda name, out: seen.append((name, out)))
    assert order == ["a", "b", "a", "b", "a", "b", "a", "b"]
    assert seen == [("a", "a-output"), ("b", "b-output")]  # the warm-up's output, for an accuracy check
    assert timings["a"].seconds == (1.0, 3.0, 2.0) and timings["a"].median == 2.0
    assert timings["b"].seconds == (5.0, 4.0, 6.0) and timings["b"].median == 5.0
    assert capsys.readouterr().out.count("round ") == 3


def test_summarize_and_the_note_name_the_statistic():
    timing = harness.summarize([0.3, 0.1, 0.2], warmup=5)
    assert (timing.median, timing.min, timing.max, timing.warmup) == (0.2, 0.1, 0.3, 5)
    with pytest.raises(ValueError):
        harness.summarize([])
    with pytest.raises(ValueError):
        harness.measure(lambda: None, repeats=0)
    assert harness.timing_note(4, alternating=True) == "median of 4 alternating rounds after a warm-up (min and max " \
                                                         "in the JSON)"
    assert harness.timing_note(5, 2).startswith("median of 5 runs after 2 warm-ups")
    assert harness.timing_note(3, 0) == "median of 3 runs (min and max in the JSON)"


def test_the_stopwatch_times_one_run(clock):
    with harness.Stopwatch() as sw:
        clock.now += 2.5
    clock.now += 10
    assert sw.seconds == 2.5 and sw.stop() == 2.5
    assert sw.stopped_at - sw.started_at == pytest.approx(2.5)
    running = harness.Stopwatch()
    clock.now += 1
    assert running.seconds == 1 and running.stop() == 1


# ---- the machine and the writer --------------------------------------------------------------------------------
def test_the_machine_is_the_librarys_description():
    import torch  # noqa: F401  (imported: its threads are part of the description)

    m = harness.machine()
    lib = describe_machine()
    assert m["cpu"] == lib.cpu and m["cpu"] and m["cpu_flags"] == lib.cpu_flags
    assert m["torch_threads"] == torch.get_num_threads() and m["python"] and m["torch"] and m["numpy"] and m["ctxemb"]
    line = harness.machine_line(m)
    assert line.startswith(lib.cpu) and f"{m['torch_threads']} torch threads" in line
    assert harness.machine_line({"cpu": "Old CPU", "threads": 4}) == "Old CPU, 4 torch threads"  # an older file
    assert f"torch {m['torch']}" in harness.versions_line(m)


def test_the_library_functions_delegate_to_the_one_description():
    from ctxemb.core.precision import cpu_info
    from ctxemb.training.recipe import machine_info

    lib = describe_machine()
    assert (cpu_info().name, cpu_info().flags) == (lib.cpu, lib.flags)
    info = machine_info()
    assert set(info) == {"cpu", "cpu_flags", "cpu_count", "torch_threads", "platform", "cuda"}
    assert info["cpu"] == lib.cpu and info["cpu_flags"] == lib.cpu_flags and info["platform"] == lib.os


def test_write_results_names_the_cpu_and_versions(tmp_path):
    payload = {"rows": [{"seconds": 1.5}], "vector": np.arange(3), "count": np.int64(7), "path": tmp_path}
    path = harness.write_results("demo", payload, "# Demo\n\n| a |\n|---|\n| 1 |\n", out_dir=tmp_path / "out")
    assert path == tmp_path / "out" / "demo.json"
    assert sorted(p.name for p in path.parent.iterdir()) == ["demo.json", "demo.md"]
    saved = json.loads(path.read_text())
    lib = describe_machine()
    assert saved["machine"]["cpu"] == lib.cpu and saved["machine"]["torch"] and saved["machine"]["numpy"]
    assert saved["rows"] == [{"seconds": 1.5}] and saved["vector"] == [0, 1, 2] and saved["count"] == 7
    assert "machine" not in payload  # the caller's payload is left as it was
    md = (tmp_path / "out" / "demo.md").read_text()
    assert md.startswith("# Demo\n\n| a |") and md.endswith("\n")
    last = md.rstrip().splitlines()[-1]
    assert last.startswith(f"Machine: {lib.cpu}") and f"Python {lib.python}" in last and f"numpy {lib.numpy}" in last


def test_a_payload_keeps_its_own_machine_and_strict_json_has_no_nan(tmp_path):
    old = {"cpu": "AMD EPYC", "cpu_count": 2, "threads": 2, "python": "3.11.7", "torch": "2.13.0+cpu"}
    harness.write_results("old", {"machine": old, "value": math.nan}, "# Old", out_dir=tmp_path, finite_only=True)
    saved = json.loads((tmp_path / "old.json").read_text())
    assert saved == {"machine": old, "value": None}
    assert "Machine: AMD EPYC, 2 cores, 2 torch threads; Python 3.11.7, torch 2.13.0+cpu." in \
        (tmp_path / "old.md").read_text()


def test_the_writer_is_atomic(tmp_path):
    harness.write_results("table", {"rows": [1]}, "# First", out_dir=tmp_path)

    class Unwritable:
        def tolist(self):
            raise RuntimeError("cannot serialise")

    with pytest.raises(RuntimeError, match="cannot serialise"):
        harness.write_results("table", {"rows": [2], "bad": Unwritable()}, "# Second", out_dir=tmp_path)
    assert json.loads((tmp_path / "table.json").read_text())["rows"] == [1]  # the previous version, whole
    assert (tmp_path / "table.md").read_text().startswith("# First")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json", "table.md"]  # no temporary left behind


def test_markdown_table_formats_as_before():
    table = harness.markdown_table([{"a": 1.23456, "b": 12345.6, "c": "x"}], ["a", "b", "c", "d"])
    assert table.splitlines() == ["| a | b | c | d |", "|---|---|---|---|", "| 1.235 | 12,346 | x |  |"]


# ---- the package -----------------------------------------------------------------------------------------------
def _modules() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in sorted(BENCHMARKS.rglob("*.py"))}


def _is_main_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _scripts() -> list[str]:
    """``benchmarks.NAME`` of every module run as a script (a ``__main__`` guard), a package by its ``__main__``."""
    names = []
    for path, tree in _modules().items():
        if any(_is_main_guard(node) for node in tree.body):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    return sorted(names)


def _imports_harness(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.module == "benchmarks.harness" or (node.module in ("benchmarks", None)
                                                      and any(a.name == "harness" for a in node.names)):
                return True
        elif isinstance(node, ast.Import) and any(a.name == "benchmarks.harness" for a in node.names):
            return True
    return False


def test_no_file_puts_anything_on_sys_path():
    found = []
    for path, tree in _modules().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                    and node.value.id == "sys"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr == "addsitedir":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"sys.path used (run benchmarks as python -m benchmarks.NAME instead): {found}"


def test_the_package_and_its_subpackages_have_an_init():
    for folder in [BENCHMARKS, *(p.parent for p in BENCHMARKS.rglob("*.py"))]:
        assert (folder / "__init__.py").is_file(), folder


def test_every_benchmark_module_imports_the_harness():
    # a benchmark module: one run as a script, or one that defines a main() (a package's command line)
    missing = [str(path.relative_to(ROOT)) for path, tree in _modules().items()
               if path.name not in ("__main__.py", "harness.py")
               and (any(_is_main_guard(n) for n in tree.body)
                    or any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body))
               and not _imports_harness(tree)]
    assert not missing, f"benchmark modules that do not import benchmarks.harness: {missing}"
    assert len(_scripts()) >= 20


def test_only_the_harness_reads_a_clock_or_describes_the_machine():
    found = []
    for path, tree in _modules().items():
        if path.name == "harness.py":
            continue
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in CLOCKS and isinstance(node.value, ast.Name)
                    and node.value.id == "time"):
                found.append(f"{where}:{node.lineno}: time.{node.attr} (use harness.measure / Stopwatch / clock)")
            elif isinstance(node, ast.ImportFrom) and node.module == "time":
                found.append(f"{where}:{node.lineno}: from time import ...")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    "lscpu" in node.value or "/proc/cpuinfo" in node.value):
                found.append(f"{where}:{node.lineno}: reads the CPU itself (use harness.machine)")
            elif isinstance(node, ast.Attribute) and node.attr == "processor" and isinstance(node.value, ast.Name) \
                    and node.value.id == "platform":
                found.append(f"{where}:{node.lineno}: platform.processor (use harness.machine)")
    assert not found, "\n".join(found)


def test_no_benchmark_module_is_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in BENCHMARKS.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


@pytest.mark.parametrize("script", _scripts())
def test_help_runs_as_a_module(script):
    proc = subprocess.run([sys.executable, "-m", script, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:")


def test_code_fingerprint_follows_the_sources_it_covers_and_no_others(tmp_path, monkeypatch):
    """Cached encodings are keyed by it: a change to a covered source must change it, another file must not."""
    import importlib.util
    from types import SimpleNamespace

    pkg = tmp_path / "ctxemb"
    for folder in ("runtime/kernels", "other"):
        (pkg / folder).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "runtime" / "kernels" / "k.cpp").write_text("a")
    (pkg / "runtime" / "notes.txt").write_text("not a source")
    (pkg / "other" / "x.py").write_text("b")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: SimpleNamespace(origin=str(pkg / "__init__.py")))
    first = harness.code_fingerprint("runtime")
    (pkg / "other" / "x.py").write_text("c")
    (pkg / "runtime" / "notes.txt").write_text("still not a source")
    assert harness.code_fingerprint("runtime") == first
    (pkg / "runtime" / "kernels" / "k.cpp").write_text("a2")
    assert harness.code_fingerprint("runtime") != first != harness.code_fingerprint("runtime", "other")
    with pytest.raises(ValueError, match="no subpackage 'nope'"):
        harness.code_fingerprint("nope")
