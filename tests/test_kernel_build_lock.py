"""The native kernel's build lock (ctxemb.runtime.kernels.build_lock): a build killed while it holds the lock (and torch's own
lock file) never blocks later loads; a live build is waited for, with a warning naming the lock file and the process,
and only up to ``BUILD_WAIT`` seconds.

Nothing is compiled: ``torch.utils.cpp_extension.load`` is replaced by a stand-in that takes and releases torch's
lock file as torch does (``FileBaton`` on ``<build directory>/lock``), and fails instead of waiting for it forever.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.utils.cpp_extension
from torch.utils.file_baton import FileBaton

from ctxemb.runtime import kernels

REPO = Path(__file__).resolve().parent.parent

# A build that takes torch's lock and then hangs (until it is killed), as a compiler run would take its time.
CHILD = """
import json, os, sys, time
from pathlib import Path

import torch.utils.cpp_extension
from torch.utils.file_baton import FileBaton

spec = json.loads(sys.argv[1])


def load(name, sources, build_directory, **kwargs):
    assert FileBaton(os.path.join(build_directory, "lock")).try_acquire()
    Path(spec["ready"]).write_text("building")
    time.sleep(300)


torch.utils.cpp_extension.load = load
from ctxemb.runtime import kernels

kernels._load_int8_vnni()
"""


class TorchLoad:
    """A stand-in for ``torch.utils.cpp_extension.load``: torch's lock file handling, without the compiler."""

    def __init__(self):
        self.calls = 0

    def __call__(self, name, sources, build_directory, **kwargs):
        baton = FileBaton(os.path.join(build_directory, "lock"))
        if not baton.try_acquire():
            raise AssertionError(f"torch would wait without end for {baton.lock_file_path} to go")
        try:
            self.calls += 1
        finally:
            baton.release()


@pytest.fixture
def build(tmp_path, monkeypatch):
    """An empty kernel cache (``$CTXEMB_CACHE``) and the stand-in build; yields (build directory, the stand-in)."""
    monkeypatch.setenv("CTXEMB_CACHE", str(tmp_path / "cache"))
    load = TorchLoad()
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    return kernels.int8_vnni_build_dir(), load


@pytest.fixture(scope="module")
def dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(p.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    return pid


def test_a_build_killed_while_holding_the_locks_does_not_block_the_next_load(tmp_path, build, monkeypatch, caplog):
    build_dir, load = build
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(REPO), CTXEMB_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps({"ready": str(ready)})], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, child.stderr.read()
            assert time.monotonic() < deadline, "the child never started its build"
            time.sleep(0.05)
        lock_file = build_dir / ".ctxemb.lock"
        assert lock_file.read_text().strip() == str(child.pid)  # the holder is recorded
        # while the build is alive: a warning names the lock file and the process, and the wait has an end
        monkeypatch.setattr(kernels, "BUILD_WAIT", 0.5)
        caplog.set_level(logging.WARNING, logger="ctxemb.runtime.kernels")
        with pytest.raises(TimeoutError, match=rf"gave up waiting 0.5 s for .* by process {child.pid} \(lock file "
                                               rf"{lock_file}\)"):
            kernels._load_int8_vnni()
        assert load.calls == 0
        waiting = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for")]
        assert waiting == [f"waiting for the build of the int8 VNNI kernel by process {child.pid} to finish (lock "
                           f"file {lock_file}; giving up after 0.5 s)"]
    finally:
        child.kill()  # SIGKILL, mid-build: it leaves torch's lock file and its pid in ours
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert (build_dir / "lock").exists()
    caplog.clear()
    start = time.monotonic()
    kernels._load_int8_vnni()
    assert time.monotonic() - start < 5
    assert load.calls == 1 and not (build_dir / "lock").exists()
    assert any("deleted torch's build lock %s" % (build_dir / "lock") in r.getMessage() for r in caplog.records)
    assert lock_file.read_text() == ""  # released: nobody recorded


def test_lock_files_a_dead_process_left_by_hand_do_not_block_the_load(build, dead_pid):
    build_dir, load = build
    build_dir.mkdir(parents=True)
    (build_dir / ".ctxemb.lock").write_text("%d\n" % dead_pid)
    (build_dir / "lock").write_text("")
    kernels._load_int8_vnni()
    kernels._load_int8_vnni()  # (and again, as every later process does)
    assert load.calls == 2 and not (build_dir / "lock").exists()


def test_a_load_waits_for_a_live_build_and_proceeds_when_it_ends(build, caplog):
    build_dir, load = build
    build_dir.mkdir(parents=True)
    held, release = threading.Event(), threading.Event()

    def other_build():  # another holder (a lock object of its own excludes this process's others too)
        with kernels.build_lock(build_dir, "the build of the int8 VNNI kernel"):
            held.set()
            release.wait(30)

    t = threading.Thread(target=other_build)
    t.start()
    try:
        assert held.wait(30)
        threading.Timer(0.3, release.set).start()
        caplog.set_level(logging.WARNING, logger="ctxemb.runtime.kernels")
        kernels._load_int8_vnni()
    finally:
        release.set()
        t.join()
    assert load.calls == 1
    assert any(r.getMessage().startswith("waiting for the build of the int8 VNNI kernel by process %d" % os.getpid())
               for r in caplog.records)


def test_int8_falls_back_with_a_warning_naming_the_lock_when_the_wait_runs_out(build, monkeypatch, caplog):
    build_dir, load = build
    monkeypatch.setattr(kernels, "int8_vnni_cpu", lambda: (True, "the CPU has AVX512-VNNI"))
    monkeypatch.setattr(kernels, "BUILD_WAIT", 0.2)
    # a cache of this test's own: clearing the process's cache would make a later test load the kernel library a
    # second time into this process, which torch refuses by aborting (its ops are registered once per process)
    monkeypatch.setattr(kernels, "int8_vnni_ops", functools.lru_cache(maxsize=1)(kernels.int8_vnni_ops.__wrapped__))
    build_dir.mkdir(parents=True)
    with kernels.build_lock(build_dir, "another build"):
        caplog.set_level(logging.WARNING, logger="ctxemb.runtime.kernels")
        assert kernels.int8_vnni_ops() is None  # no hang: the int8 path runs without the kernel
    assert load.calls == 0
    assert any("TimeoutError" in r.getMessage() and str(build_dir / ".ctxemb.lock") in r.getMessage()
               for r in caplog.records)
