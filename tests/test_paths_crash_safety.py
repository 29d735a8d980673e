"""Crash-safe saves (ctxemb.core.atomic): fault injection at every step of a save, recovery, leftovers, fsync, modes.

A save is interrupted in two ways: in this process, by making ``os.rename`` fail at its n-th call (and optionally
at every later one, so that the rollback fails too, which leaves what a crash would); and for real, by a child
process that SIGKILLs itself right before its n-th file-system step (a rename, replace, fsync, rmtree, or a point
while it writes the files), for every n the save has. After each: the target loads as the old or the new version,
exactly, and the next save (or load) leaves no temporary behind.

A save over an existing directory swaps it with the new one in one step where the system can
(``renameat2(RENAME_EXCHANGE)``, :mod:`ctxemb.core.exchange`), else does two renames. Tests run the two-rename path
unless they ask for the swap (the ``swap`` fixture; ``exchange=True`` for a child), since it is the one with a window.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import inspect
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ctxemb.core import exchange as _exchange
from ctxemb.core import atomic as paths
from ctxemb.core.atomic import (
    atomic_directory,
    atomic_path,
    atomic_write,
    recover_directory,
    recover_folder,
)

REPO = Path(__file__).resolve().parent.parent
REAL_EXCHANGE = _exchange.exchange


# ------------------------------------------------------------------------------------------------------------------
# helpers (the first three also run in the child processes: their source is sent there)

def write_version(d, version, point=lambda name: None):
    """Fill directory ``d`` with the files of ``version``: a file, a file in a subfolder, a file only it has."""
    from pathlib import Path

    d = Path(d)
    (d / "a.txt").write_text(version * 1000)
    point("write")
    (d / "sub").mkdir()
    (d / "sub" / "b.bin").write_bytes(version.encode() * 5000)
    point("write")
    (d / ("only-" + version + ".txt")).write_text(version)


def make_store(seed):
    import numpy as np

    from ctxemb.wsd.sense_store import SenseStore

    rng = np.random.default_rng(seed)
    n = 10 + seed
    store = SenseStore(8)
    store.add(["k%d%03d%%1:00:00::" % (seed, i) for i in range(n)], rng.standard_normal((n, 8)).astype(np.float32))
    return store


def make_index(seed):
    import numpy as np

    from ctxemb.search import SemanticIndex

    rng = np.random.default_rng(seed)
    n = 20 + seed
    return SemanticIndex(8).add(["i%d_%d" % (seed, i) for i in range(n)], rng.standard_normal((n, 8)).astype(np.float32))


CHILD = """
import json, os, shutil, signal, sys

spec = json.loads(sys.argv[1])
ops = []


def point(name):
    ops.append(name)
    if spec["kill_at"] == len(ops):
        os.kill(os.getpid(), signal.SIGKILL)


def hook(module, name):
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        point(name)
        return real(*args, **kwargs)

    setattr(module, name, wrapper)

{helpers}

from ctxemb.core import exchange as _exchange
from ctxemb.core.atomic import atomic_directory, atomic_write
if spec["kind"] == "sense_store":
    obj = make_store(spec["version"])
elif spec["kind"] == "index":
    obj = make_index(spec["version"])
for module, name in ((os, "rename"), (os, "replace"), (os, "fsync"), (shutil, "rmtree")):
    hook(module, name)
if spec["exchange"]:
    hook(_exchange, "exchange")
else:
    _exchange.exchange = lambda a, b: False
if spec["kind"] == "dir":
    with atomic_directory(spec["target"]) as tmp:
        write_version(tmp, spec["version"], point)
elif spec["kind"] == "file":
    with atomic_write(spec["target"]) as f:
        f.write(spec["version"] * 1000)
        point("write")
        f.write(spec["version"] * 1000)
else:
    obj.save(spec["target"])
with open(spec["log"], "w") as f:
    json.dump(ops, f)
""".format(helpers="\n\n".join(textwrap.dedent(inspect.getsource(f)) for f in (write_version, make_store, make_index)))


def run_child(tmp_path: Path, kind: str, target: Path, version, kill_at: int | None,
              exchange: bool = False) -> list[str] | None:
    """Save ``version`` of ``target`` in a child process killed by SIGKILL right before its ``kill_at``-th step
    (swapping directories in one step if ``exchange``, else with two renames); returns the steps of a save that was
    not killed."""
    log = tmp_path / "ops.json"
    log.unlink(missing_ok=True)
    spec = dict(kind=kind, target=str(target), version=version, kill_at=kill_at, log=str(log), exchange=exchange)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    if kill_at is None:
        assert p.returncode == 0, p.stderr
        return json.loads(log.read_text())
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr)
    return None


def tree(d: Path) -> dict[str, bytes] | None:
    """Every file under ``d`` by relative path, with its bytes (None if ``d`` does not exist)."""
    if not os.path.lexists(d):
        return None
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def version_tree(tmp_path: Path, version: str) -> dict[str, bytes]:
    d = tmp_path / ("reference-" + version)
    if not d.exists():
        d.mkdir()
        write_version(d, version)
    return tree(d)


def others(target: Path) -> list[str]:
    """The names beside ``target`` in its folder (leftovers, since each test's folder holds only the target), but
    for the target's lock file (``ctxemb.core.locks``: never deleted, by design)."""
    return sorted(n for n in os.listdir(target.parent) if n not in (target.name, ".%s.ctxemb.lock" % target.name))


@pytest.fixture(autouse=True)
def rename_pair(monkeypatch):
    """Directory saves in this process replace with two renames (the path with a window; see the docstring)."""
    monkeypatch.setattr(_exchange, "exchange", lambda a, b: False)


@pytest.fixture
def swap(monkeypatch):
    """Directory saves in this process swap in one step (skipped where this system cannot)."""
    if not _exchange.exchange_available():
        pytest.skip("no renameat2 here")
    monkeypatch.setattr(_exchange, "exchange", REAL_EXCHANGE)


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The id of a process that has ended."""
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(p.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    return pid


@pytest.fixture
def umask():
    def set_umask(mask):
        os.umask(mask)

    before = os.umask(0o022)
    yield set_umask
    os.umask(before)


def save(target: Path, version: str) -> None:
    with atomic_directory(target) as tmp:
        write_version(tmp, version)


# ------------------------------------------------------------------------------------------------------------------
# in-process fault injection: os.rename fails at its n-th call

class RenameFault:
    """``os.rename`` that raises at its n-th call (and, if ``sticky``, at every later one)."""

    def __init__(self, n: int, sticky: bool):
        self.n, self.sticky, self.calls = n, sticky, 0
        self.real = os.rename

    def __call__(self, src, dst):
        self.calls += 1
        if self.calls == self.n or (self.sticky and self.calls > self.n):
            raise OSError("injected failure of rename #%d (%s -> %s)" % (self.calls, src, dst))
        return self.real(src, dst)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_a_rename_failing_at_each_step_leaves_the_old_version_or_the_new_one(tmp_path, monkeypatch, n):
    # renames of a save over an existing directory: tmp -> new, path -> old, new -> path, old -> del
    target = tmp_path / "store"
    save(target, "A")
    monkeypatch.setattr(os, "rename", RenameFault(n, sticky=False))
    if n <= 3:  # before the commit: the save raises and the old version stays
        with pytest.raises(OSError, match="injected"):
            save(target, "B")
        assert tree(target) == version_tree(tmp_path, "A")
    else:  # deleting the old version failed after the commit: the save succeeded all the same
        save(target, "B")
        assert tree(target) == version_tree(tmp_path, "B")
    assert others(target) == ["reference-" + ("A" if n <= 3 else "B")]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_renames_failing_from_each_step_on_are_recovered_by_the_next_load(tmp_path, monkeypatch, n):
    # every rename from the n-th on fails, the rollback's too: what a crash at that step leaves
    target = tmp_path / "store"
    save(target, "A")
    fault = RenameFault(n, sticky=True)
    monkeypatch.setattr(os, "rename", fault)
    if n <= 3:
        with pytest.raises(OSError, match="injected"):
            save(target, "B")
    else:
        save(target, "B")
    monkeypatch.setattr(os, "rename", fault.real)
    if n == 3:  # failed between the two renames, and could not move the old version back: no directory at all
        assert not target.exists()
        assert {name.rsplit(".", 1)[1] for name in others(target)} == {"new", "old"}
    restored = recover_directory(target)
    assert (restored is not None) == (n == 3)
    assert tree(target) == version_tree(tmp_path, "B" if n >= 3 else "A")
    assert [name for name in others(target) if not name.startswith("reference-")] == []


def test_an_exception_in_the_block_changes_nothing(tmp_path):
    target = tmp_path / "store"
    save(target, "A")
    with pytest.raises(KeyError):
        with atomic_directory(target) as tmp:
            write_version(tmp, "B")
            raise KeyError("boom")
    assert tree(target) == version_tree(tmp_path, "A")
    assert others(target) == ["reference-A"]


def test_a_failing_file_replace_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    with atomic_write(target) as f:
        f.write("old")

    def broken(src, dst):
        raise OSError("injected failure of os.replace")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="injected"):
        with atomic_write(target) as f:
            f.write("new")
    assert target.read_text() == "old" and others(target) == []


# ------------------------------------------------------------------------------------------------------------------
# the one-step swap (renameat2(RENAME_EXCHANGE)), and its absence

def test_exchange_swaps_two_directories_or_says_it_cannot(tmp_path, monkeypatch):
    if not _exchange.exchange_available():
        pytest.skip("no renameat2 here")
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "f").write_text(d.name)
    assert REAL_EXCHANGE(a, b) is True
    assert (a / "f").read_text() == "b" and (b / "f").read_text() == "a"
    with pytest.raises(FileNotFoundError, match="could not swap .*missing"):
        REAL_EXCHANGE(a, tmp_path / "missing")

    def refused(*args):  # what a file system (or kernel) without the exchange answers
        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(_exchange, "_function", lambda: refused)
    assert REAL_EXCHANGE(a, b) is False and (a / "f").read_text() == "b"
    monkeypatch.setattr(_exchange, "_function", lambda: None)  # a C library without renameat2
    assert REAL_EXCHANGE(a, b) is False and (a / "f").read_text() == "b"


def test_a_swapped_save_never_leaves_the_path_missing(tmp_path, monkeypatch, swap):
    target = tmp_path / "store"
    save(target, "A")
    renames, real = [], os.rename

    def watching(src, dst):
        renames.append((Path(src).name, Path(dst).name, target.is_dir()))
        return real(src, dst)

    monkeypatch.setattr(os, "rename", watching)
    save(target, "B")
    assert tree(target) == version_tree(tmp_path, "B")
    # tmp -> new, then (after the swap) the previous version, now under .new, goes to .del: store always there
    assert [(src.rsplit(".", 1)[1], dst.rsplit(".", 1)[1], present) for src, dst, present in renames] == [
        ("tmp", "new", True), ("new", "del", True)]
    assert others(target) == ["reference-B"]


def test_a_swap_whose_cleanup_fails_leaves_the_new_version_and_a_leftover_the_next_load_removes(
        tmp_path, monkeypatch, swap):
    target = tmp_path / "store"
    save(target, "A")
    fault, real_rmtree = RenameFault(2, sticky=True), shutil.rmtree
    monkeypatch.setattr(os, "rename", fault)  # every rename after tmp -> new fails, and nothing can be deleted
    monkeypatch.setattr(shutil, "rmtree", lambda *args, **kwargs: None)
    save(target, "B")  # committed by the swap: the save succeeds
    monkeypatch.setattr(os, "rename", fault.real)
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert tree(target) == version_tree(tmp_path, "B")
    (left,) = [n for n in others(target) if not n.startswith("reference-")]
    assert left.endswith(".new") and tree(tmp_path / left) == version_tree(tmp_path, "A")  # the previous version
    assert recover_directory(target) is None  # never restored over the path, only removed
    assert tree(target) == version_tree(tmp_path, "B") and others(target) == ["reference-A", "reference-B"]


# ------------------------------------------------------------------------------------------------------------------
# real crashes: a child process killed with SIGKILL right before each step of its save

@pytest.mark.parametrize("existing, exchange", [(True, False), (True, True), (False, False)],
                         ids=["over-an-old-version", "over-an-old-version-swapped", "first-save"])
def test_a_directory_save_killed_at_each_step(tmp_path, existing, exchange):
    if exchange and not _exchange.exchange_available():
        pytest.skip("no renameat2 here")
    steps = run_child(tmp_path, "dir", tmp_path / "dry" / "store", "B", None, exchange)
    assert Counter(steps)["rename"] == 2  # a first save: tmp -> new, new -> path
    if existing:
        save(tmp_path / "dry" / "store", "A")
        steps = run_child(tmp_path, "dir", tmp_path / "dry" / "store", "B", None, exchange)
        # tmp -> new, path -> old, new -> path, old -> del; swapped: tmp -> new, swap, new -> del
        assert Counter(steps)["rename"] == (2 if exchange else 4) and steps.count("exchange") == int(exchange)
    old = version_tree(tmp_path, "A") if existing else None
    new = version_tree(tmp_path, "B")
    seen = []
    for i, step in enumerate(steps, start=1):
        target = tmp_path / ("kill-%02d" % i) / "store"
        target.parent.mkdir()
        if existing:
            save(target, "A")
        run_child(tmp_path, "dir", target, "B", kill_at=i, exchange=exchange)
        renames_done = steps[: i - 1].count("rename")
        if existing and not exchange and renames_done == 2:  # killed between path -> old and new -> path
            assert not target.exists()
        assert target.exists() or not exchange  # a swap leaves no moment without the directory
        copy = tmp_path / ("kill-%02d-copy" % i)
        shutil.copytree(target.parent, copy, symlinks=True)
        # a load recovers the old or the new version, exactly, and leaves nothing else
        recover_directory(target)
        got = tree(target)
        assert got in (old, new), "killed before step %d (%s): neither the old nor the new version" % (i, step)
        assert others(target) == [], "killed before step %d (%s): leftovers %s" % (i, step, others(target))
        seen.append("new" if got == new else "old")
        # the next save, without a load first, also gives exactly its version and no leftover
        save(copy / "store", "C")
        assert tree(copy / "store") == version_tree(tmp_path, "C")
        assert others(copy / "store") == [], "killed before step %d (%s), then saved: leftovers" % (i, step)
    # the new version wins once the old one has left the path (path -> old, or the swap; for a first save,
    # tmp -> new)
    moves = [i for i, s in enumerate(steps, start=1) if s in ("rename", "exchange")]
    last_old = moves[1 if existing else 0]
    assert seen == ["old"] * last_old + ["new"] * (len(steps) - last_old)


def test_a_file_write_killed_at_each_step(tmp_path):
    target = tmp_path / "dry" / "f.txt"
    target.parent.mkdir()
    target.write_text("old")
    steps = run_child(tmp_path, "file", target, "N", None)
    assert steps == ["write", "fsync", "replace", "fsync"]  # one fsync of the file, one of its folder
    for i, step in enumerate(steps, start=1):
        target = tmp_path / ("kill-%d" % i) / "f.txt"
        target.parent.mkdir()
        target.write_text("old")
        run_child(tmp_path, "file", target, "N", kill_at=i)
        assert target.read_text() in ("old", "N" * 2000)
        with atomic_write(target) as f:
            f.write("next")
        assert target.read_text() == "next" and others(target) == [], "killed before step %d (%s)" % (i, step)


# ------------------------------------------------------------------------------------------------------------------
# leftovers, recovery choices, fsync, modes, files in the way

def test_stale_leftovers_are_removed_and_nothing_else(tmp_path, dead_pid):
    target = tmp_path / "store"
    save(target, "A")
    ours = [
        ".store.%d-abcdefgh.tmp" % dead_pid,  # an interrupted save
        ".store.%d-bcdefghi.new" % dead_pid,  # a complete one whose target was then saved again
        ".store.%d-cdefghij.old" % dead_pid,
        ".store.%d-defghijk.del" % dead_pid,
        ".store.%d-efghijkl.tmp" % os.getpid(),  # this process, but no save of it is in progress
        ".store.abcdefgh.tmp",  # the naming of ctxemb versions before the pid
        ".store.ijklmnop.old",
        ".store.partial-qrstuvwx",  # the naming of the sentence-transformers writer of earlier versions
        ".store.old-%d" % dead_pid,
    ]
    for name in ours:
        (tmp_path / name).mkdir()
        (tmp_path / name / "big.bin").write_bytes(b"x" * 100_000)
    (tmp_path / (".store.%d-fghijklm.tmp" % dead_pid)).write_bytes(b"a file temporary")
    ours.append(".store.%d-fghijklm.tmp" % dead_pid)
    live = ".store.%d-ghijklmn.tmp" % os.getppid()  # a save in progress in a live process
    foreign = [".store.keep", "store.bak", ".store.abcdefg.tmp", ".store.abcdefghi.tmp", ".store.ABCDEFGH.tmp",
               ".other.%d-abcdefgh.tmp" % dead_pid, ".store.%d-abcdefgh.tmp.x" % dead_pid, "store.abcdefgh.tmp",
               ".store.partial-abc", ".store.old-x", ".store.partial-rstuvwxy", live]  # (the s-t writer made dirs)
    for name in foreign:
        (tmp_path / name).write_text("not ours")
    (tmp_path / (".store.old-%d" % os.getppid())).mkdir()  # the earlier s-t writer's, in a live process
    foreign.append(".store.old-%d" % os.getppid())
    save(target, "B")
    assert tree(target) == version_tree(tmp_path, "B")
    assert others(target) == sorted(foreign + ["reference-B"])
    # loading removes them too
    for name in ours[:2]:
        (tmp_path / name).mkdir()
    assert paths.resolve_saved_directory(target) == target
    assert others(target) == sorted(foreign + ["reference-B"])


def test_a_file_writes_removes_the_temporaries_of_its_crashed_writes(tmp_path, dead_pid):
    target = tmp_path / "x.npy"
    stale = [tmp_path / (".x.npy.%d-abcdefgh.tmp" % dead_pid), tmp_path / ".x.npy.abcdefgh.tmp"]
    for p in stale:
        p.write_bytes(b"half written")
    with atomic_path(target) as tmp, open(tmp, "wb") as f:  # (np.save would add .npy to a name)
        np.save(f, np.arange(3))
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert others(target) == []


def test_recovery_prefers_the_complete_new_version_then_the_old_one(tmp_path, dead_pid):
    def case(names: dict[str, str]) -> str | None:
        d = tmp_path / ("case-%d" % len(list(tmp_path.iterdir())))
        d.mkdir()
        for name, version in names.items():
            (d / name).mkdir()
            (d / name / "v.txt").write_text(version)
            time.sleep(0.01)  # distinct ctimes: later entries are newer
        restored = recover_directory(d / "store")
        assert os.listdir(d) == (["store"] if restored else [])
        return (d / "store" / "v.txt").read_text() if restored else None

    t = dead_pid
    assert case({".store.%d-aaaaaaaa.old" % t: "old", ".store.%d-aaaaaaaa.new" % t: "new"}) == "new"
    assert case({".store.%d-aaaaaaaa.new" % t: "new", ".store.%d-aaaaaaaa.old" % t: "old"}) == "new"
    assert case({".store.%d-aaaaaaaa.old" % t: "old"}) == "old"
    assert case({".store.%d-aaaaaaaa.old" % t: "older", ".store.%d-bbbbbbbb.old" % t: "newer"}) == "newer"
    assert case({".store.abcdefgh.old": "legacy", ".store.abcdefgh.tmp": "legacy-tmp"}) == "legacy"
    # the sentence-transformers writer's rename pair before it used ctxemb.core.atomic, killed between its renames: the
    # previous version is restored (the partial one has no completion marker)
    assert case({".store.partial-abcdefgh": "unmarked", ".store.old-%d" % t: "previous"}) == "previous"
    assert case({".store.partial-abcdefgh": "unmarked"}) is None
    assert case({".store.%d-aaaaaaaa.tmp" % t: "incomplete"}) is None  # never restored, removed
    assert case({".store.%d-aaaaaaaa.del" % t: "half deleted"}) is None


def test_recovery_waits_for_a_save_in_progress_in_a_live_process(tmp_path):
    new = tmp_path / (".store.%d-aaaaaaaa.new" % os.getppid())  # the parent process: alive
    new.mkdir()
    start = time.monotonic()
    assert recover_directory(tmp_path / "store", wait=0.3) == new  # restored only once the wait ran out
    assert time.monotonic() - start >= 0.3


def test_saves_are_fsynced_once_per_file_and_directory(tmp_path, monkeypatch):
    synced = Counter()
    real = os.fsync

    def counting(fd):
        st = os.fstat(fd)
        synced[(st.st_dev, st.st_ino)] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    target = tmp_path / "store"
    for version in "AB":  # a first save, and one over an existing directory
        synced.clear()
        with atomic_directory(target) as tmp:
            write_version(tmp, version)
            with atomic_write(tmp / "manifest.json") as f:  # a nested atomic file write
                f.write("{}")
            with atomic_directory(tmp / "nested") as inner:  # a nested directory save (a corpus pass's store)
                (inner / "x.bin").write_bytes(b"x")
        entries = [target, tmp_path] + sorted(target.rglob("*"))
        keys = {(os.lstat(p).st_dev, os.lstat(p).st_ino): p for p in entries}
        assert {str(keys.get(k, k)): n for k, n in synced.items()} == {str(p): 1 for p in entries}
        assert sum(synced.values()) == 9  # 5 files, 3 directories (the save's own included), its folder
    synced.clear()
    with atomic_write(tmp_path / "f.txt") as f:
        f.write("x")
    assert sum(synced.values()) == 2  # the file and its folder
    synced.clear()
    with atomic_path(tmp_path / "g.npy") as tmp, open(tmp, "wb") as f:
        np.save(f, np.zeros(2))
    assert sum(synced.values()) == 2


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002], ids=oct)
def test_saved_directories_and_files_get_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    with atomic_directory(tmp_path / "store") as tmp:
        write_version(tmp, "A")
    with atomic_write(tmp_path / "f.txt") as f:
        f.write("x")
    with atomic_path(tmp_path / "g.bin") as tmp:
        tmp.write_bytes(b"x")
    assert stat.S_IMODE(os.stat(tmp_path / "store").st_mode) == 0o777 & ~mask
    assert stat.S_IMODE(os.stat(tmp_path / "f.txt").st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(os.stat(tmp_path / "g.bin").st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("kind", ["file", "symlink-to-file", "broken-symlink"])
def test_saving_a_directory_onto_a_file_raises(tmp_path, kind):
    target = tmp_path / "store"
    if kind == "file":
        target.write_text("precious")
    elif kind == "symlink-to-file":
        (tmp_path / "real").write_text("precious")
        target.symlink_to(tmp_path / "real")
    else:
        target.symlink_to(tmp_path / "nowhere")
    ran = []
    with pytest.raises(FileExistsError, match="not a directory") as e:
        with atomic_directory(target) as tmp:
            ran.append(tmp)
    assert str(target) in str(e.value) and e.value.filename == str(target)
    assert not ran  # refused before any work
    assert os.path.islink(target) == (kind != "file")
    if kind != "broken-symlink":
        assert target.read_text() == "precious"
    assert others(target) == (["real"] if kind == "symlink-to-file" else [])


def test_a_file_appearing_during_the_save_is_not_replaced(tmp_path):
    target = tmp_path / "store"
    with pytest.raises(FileExistsError):
        with atomic_directory(target) as tmp:
            write_version(tmp, "A")
            target.write_text("precious")
    assert target.read_text() == "precious" and others(target) == []


def test_recover_folder_restores_and_cleans_every_target(tmp_path, dead_pid):
    a = tmp_path / (".checkpoint-3.%d-aaaaaaaa.new" % dead_pid)
    a.mkdir()
    (a / "trainer_state.json").write_text("{}")
    (tmp_path / (".checkpoint-2.%d-bbbbbbbb.tmp" % dead_pid)).mkdir()  # a save killed, never saved again
    (tmp_path / (".metrics.jsonl.%d-cccccccc.tmp" % dead_pid)).write_text("")
    (tmp_path / ".notes.abcdefgh.tmp").write_text("a legacy name whose target does not exist: left alone")
    assert recover_folder(tmp_path) == [tmp_path / "checkpoint-3"]
    assert sorted(os.listdir(tmp_path)) == [".notes.abcdefgh.tmp", "checkpoint-3"]


# ------------------------------------------------------------------------------------------------------------------
# real callers

def test_a_sense_store_save_killed_at_each_rename_loads_old_or_new(tmp_path):
    from ctxemb.wsd.sense_store import SenseStore

    dry = tmp_path / "dry" / "store"
    make_store(1).save(dry)
    steps = run_child(tmp_path, "sense_store", dry, 2, None)
    renames = [i for i, s in enumerate(steps, start=1) if s == "rename"]
    assert len(renames) == 4
    versions = {seed: (make_store(seed).keys, make_store(seed).vectors()) for seed in (1, 2, 3)}
    got = []
    for n, i in enumerate(renames, start=1):
        target = tmp_path / ("kill-%d" % n) / "store"
        make_store(1).save(target)
        run_child(tmp_path, "sense_store", target, 2, kill_at=i)
        if n == 3:
            assert not target.exists()  # killed between the two renames
        loaded = SenseStore.load(target)  # its normal load recovers
        seed = 1 if len(loaded) == len(versions[1][0]) else 2
        assert loaded.keys == versions[seed][0]
        np.testing.assert_array_equal(loaded.vectors(), versions[seed][1])
        assert others(target) == []
        got.append(seed)
        make_store(3).save(target)
        assert SenseStore.load(target).keys == versions[3][0] and others(target) == []
    assert got == [1, 1, 2, 2]  # killed before path -> old: the old version; after it: the new one


def test_a_sense_store_save_failing_between_its_renames_is_recovered_by_load(tmp_path, monkeypatch):
    from ctxemb.wsd.sense_store import SenseStore

    target = tmp_path / "store"
    make_store(1).save(target)
    fault = RenameFault(3, sticky=True)
    monkeypatch.setattr(os, "rename", fault)
    with pytest.raises(OSError, match="injected"):
        make_store(2).save(target)
    monkeypatch.setattr(os, "rename", fault.real)
    assert not target.exists()
    loaded = SenseStore.load(target)
    assert loaded.keys == make_store(2).keys
    np.testing.assert_array_equal(loaded.vectors(), make_store(2).vectors())
    assert others(target) == []


def test_a_search_index_save_killed_at_each_step_loads_old_or_new(tmp_path):
    from ctxemb.search import SemanticIndex

    dry = tmp_path / "dry"
    make_index(1).save(dry)
    steps = run_child(tmp_path, "index", dry, 2, None)
    assert steps.count("replace") == 3  # the FAISS file, the items, the manifest
    a, b = make_index(1), make_index(2)
    got = []
    for i, step in enumerate(steps, start=1):
        d = tmp_path / ("kill-%02d" % i)
        make_index(1).save(d)
        run_child(tmp_path, "index", d, 2, kill_at=i)
        loaded = SemanticIndex.load(d)
        ref = a if loaded.ids == a.ids else b
        assert loaded.ids == ref.ids, "killed before step %d (%s)" % (i, step)
        q = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
        for x, y in zip(loaded.search_array(q, 5), ref.search_array(q, 5)):
            np.testing.assert_array_equal(x, y)
        got.append("new" if ref is b else "old")
        make_index(3).save(d)
        assert SemanticIndex.load(d).ids == make_index(3).ids
        assert not [n for n in os.listdir(d) if n.startswith(".") and n != ".ctxemb.lock"], "killed before step %d (%s)" % (i, step)
    last_replace = max(i for i, s in enumerate(steps, start=1) if s == "replace")
    assert got == ["old"] * last_replace + ["new"] * (len(steps) - last_replace)


def test_listing_checkpoints_restores_one_a_crash_left_missing(tmp_path, monkeypatch, dead_pid):
    from ctxemb.training.state import latest_checkpoint, read_trainer_state

    ckpt = tmp_path / "checkpoint-3"
    with atomic_directory(ckpt) as tmp:
        (tmp / "trainer_state.json").write_text(json.dumps({"step": 3, "saved": "first"}))
    fault = RenameFault(3, sticky=True)  # the second save of the same step fails between its renames
    monkeypatch.setattr(os, "rename", fault)
    with pytest.raises(OSError, match="injected"):
        with atomic_directory(ckpt) as tmp:
            (tmp / "trainer_state.json").write_text(json.dumps({"step": 3, "saved": "second"}))
    monkeypatch.setattr(os, "rename", fault.real)
    (tmp_path / (".checkpoint-2.%d-abcdefgh.tmp" % dead_pid)).mkdir()  # a killed save of a pruned step
    assert not ckpt.exists()
    assert latest_checkpoint(tmp_path) == ckpt
    assert read_trainer_state(ckpt)["saved"] == "second"
    assert os.listdir(tmp_path) == ["checkpoint-3"]


def _load_corpus_pass(d):
    from ctxemb.wsd.corpus_pass import CorpusEmbeddings

    CorpusEmbeddings.load(d)


def _open_token_shards(d):
    from ctxemb.tasks.pretraining.shards import TokenShards

    TokenShards.open(d)


def _load_sense_store(d):
    from ctxemb.wsd.sense_store import SenseStore

    SenseStore.load(d)


def _load_search_index(d):
    from ctxemb.search import SemanticIndex

    SemanticIndex.load(d)


def _load_checkpoint(d):
    import torch

    from ctxemb.training.state import load_checkpoint

    load_checkpoint(d, model=torch.nn.Linear(1, 1))


def _latest_checkpoint(d):
    from ctxemb.training.state import latest_checkpoint

    assert latest_checkpoint(d.parent) == d


@pytest.mark.parametrize("load", [_load_corpus_pass, _open_token_shards, _load_sense_store, _load_search_index,
                                  _load_checkpoint, _latest_checkpoint])
def test_every_loader_restores_a_directory_a_crash_left_missing(tmp_path, dead_pid, load):
    target = tmp_path / "checkpoint-5"
    new = tmp_path / (".checkpoint-5.%d-abcdefgh.new" % dead_pid)  # a crash between the renames left only this
    new.mkdir()
    (new / "marker").write_text("the new version")
    with contextlib.suppress(FileNotFoundError, ValueError):  # the loader then finds no files of its kind
        load(target)
    assert (target / "marker").read_text() == "the new version" and others(target) == []
