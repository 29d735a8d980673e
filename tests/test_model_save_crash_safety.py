"""A model saved over an earlier one (``Embedder.save_pretrained``, the sentence-transformers writer) survives being
killed or failing at each step of the replace: every loader of the path (``Embedder.from_pretrained``, ``load_model``,
``resolve_model_dir``) and the next save find the old or the new model, and no hidden directory is left after them.

The save is interrupted for real, by a child process that SIGKILLs itself right before each rename (or swap) of its
replace, and in this process, by making the renames fail from the one that would put the new version in place on
(the rollback's too), which leaves what a crash between the two renames leaves: no directory at the path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxemb.core import exchange as _exchange
from ctxemb.embedding.embedder import Embedder
from ctxemb.modeling.loading import load_model
from ctxemb.models.hub import resolve_model_dir
from ctxemb.embedding.st_writer import save_sentence_transformers
from tests.helpers import write_tiny_model

REPO = Path(__file__).resolve().parent.parent
TEXTS = ["the river bank", "she sat on a money plant", "bats"]

CHILD = """
import json, os, signal, sys

from ctxemb.core import exchange as _exchange
from ctxemb.embedding.embedder import Embedder

spec = json.loads(sys.argv[1])
emb = Embedder.from_pretrained(spec["model"])
ops = []


def point(name):
    ops.append(name)
    if spec["kill_at"] == len(ops):
        os.kill(os.getpid(), signal.SIGKILL)


real_rename, real_exchange = os.rename, _exchange.exchange


def rename(src, dst):
    point("rename")
    return real_rename(src, dst)


def exchange(a, b):
    point("exchange")
    return real_exchange(a, b)


os.rename = rename
_exchange.exchange = exchange if spec["exchange"] else (lambda a, b: False)
emb.save_pretrained(spec["target"], overwrite=True)
with open(spec["log"], "w") as f:
    json.dump(ops, f)
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two tiny models (raw HF directories), and each saved once as a reference s-t directory."""
    root = tmp_path_factory.mktemp("models")
    raw = {v: write_tiny_model(root / ("raw-" + v), seed=seed, num_hidden_layers=4)
           for v, seed in (("old", 0), ("new", 1))}
    refs = {v: Embedder.from_pretrained(raw[v]).save_pretrained(root / ("ref-" + v)) for v in raw}
    return raw, refs


@pytest.fixture(scope="module")
def vectors(models):
    return {v: Embedder.from_pretrained(d).embed_sentences(TEXTS, show_progress_bar=False)
            for v, d in models[1].items()}


@pytest.fixture(autouse=True)
def rename_pair(monkeypatch):
    """Directory saves in this process replace with two renames (the way with a window), unless a test swaps."""
    monkeypatch.setattr(_exchange, "exchange", lambda a, b: False)


@pytest.fixture(scope="module")
def dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(p.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    return pid


def hidden(target: Path) -> list[str]:
    """The hidden entries beside ``target`` (temporaries of its saves; its lock file is never made here)."""
    return sorted(n for n in os.listdir(target.parent) if n.startswith("."))


def which(target: Path, vectors) -> str:
    """Load ``target`` as a user would and say which model it holds ("old" or "new")."""
    got = Embedder.from_pretrained(target).embed_sentences(TEXTS, show_progress_bar=False)
    for version, want in vectors.items():
        if np.allclose(got, want, rtol=1e-5, atol=1e-6):
            return version
    raise AssertionError(f"{target} holds neither the old nor the new model")


def save_in_child(tmp_path: Path, model: Path, target: Path, kill_at: int | None, exchange: bool):
    log = tmp_path / "ops.json"
    log.unlink(missing_ok=True)
    spec = dict(model=str(model), target=str(target), kill_at=kill_at, exchange=exchange, log=str(log))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    if kill_at is None:
        assert p.returncode == 0, p.stderr
        return json.loads(log.read_text())
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr)
    return None


@pytest.mark.parametrize("exchange", [False, True], ids=["two-renames", "swap"])
def test_a_model_save_killed_at_each_rename_loads_the_old_or_the_new_model(tmp_path, models, vectors, exchange):
    if exchange and not _exchange.exchange_available():
        pytest.skip("no renameat2 here")
    raw, refs = models
    dry = tmp_path / "dry" / "model"
    Embedder.from_pretrained(raw["old"]).save_pretrained(dry)
    steps = save_in_child(tmp_path, raw["new"], dry, None, exchange)
    # tmp -> new, path -> old, new -> path, old -> del; swapped: tmp -> new, the swap, new (the old model) -> del
    assert steps == (["rename", "exchange", "rename"] if exchange else ["rename"] * 4)
    got = []
    for i in range(1, len(steps) + 1):
        target = tmp_path / ("kill-%d" % i) / "model"
        Embedder.from_pretrained(raw["old"]).save_pretrained(target)
        save_in_child(tmp_path, raw["new"], target, i, exchange)
        if not exchange and i == 3:
            assert not target.exists()  # killed between the two renames: no model at the path, until a load
        assert target.exists() or not exchange
        got.append(which(target, vectors))  # Embedder.from_pretrained restores it
        assert hidden(target) == [], "killed before step %d: leftovers %s" % (i, hidden(target))
        Embedder.from_pretrained(raw["new"]).save_pretrained(target, overwrite=True)  # the next save
        assert which(target, vectors) == "new" and hidden(target) == []
    # the new model wins once the old one has left the path (path -> old, or the swap)
    assert got == (["old", "old", "new"] if exchange else ["old", "old", "new", "new"])


def _save_embedder(raw: Path, target: Path) -> None:
    Embedder.from_pretrained(raw).save_pretrained(target, overwrite=True)


def _save_st_writer(raw: Path, target: Path) -> None:
    # the sentence vectors of an Embedder of ``raw`` (the mean of the last four hidden states, mean-pooled)
    save_sentence_transformers(target, raw, overwrite=True, pooling="mean", layers=[-4, -3, -2, -1])


def _load_embedder(target: Path) -> None:
    Embedder.from_pretrained(target)


def _load_model(target: Path) -> None:
    load_model(target)


def _resolve(target: Path) -> None:
    assert resolve_model_dir(target) == target


class RenamesFailFrom:
    """``os.rename`` that raises from its n-th call on."""

    def __init__(self, n: int):
        self.n, self.calls, self.real = n, 0, os.rename

    def __call__(self, src, dst):
        self.calls += 1
        if self.calls >= self.n:
            raise OSError("injected failure of rename #%d (%s -> %s)" % (self.calls, src, dst))
        return self.real(src, dst)


@pytest.mark.parametrize("writer", [_save_embedder, _save_st_writer], ids=["Embedder.save_pretrained", "s-t writer"])
@pytest.mark.parametrize("loader", [_load_embedder, _load_model, _resolve], ids=["from_pretrained", "load_model",
                                                                                 "resolve_model_dir"])
def test_every_loader_restores_a_model_a_save_left_missing_between_its_renames(tmp_path, monkeypatch, models,
                                                                                vectors, writer, loader):
    raw, _ = models
    target = tmp_path / "model"
    _save_embedder(raw["old"], target)
    fault = RenamesFailFrom(3)  # tmp -> new, path -> old, then new -> path fails, and so does moving old back
    monkeypatch.setattr(os, "rename", fault)
    with pytest.raises(OSError, match="injected"):
        writer(raw["new"], target)
    monkeypatch.setattr(os, "rename", fault.real)
    assert not target.exists()
    assert {n.rsplit(".", 1)[1] for n in hidden(target)} == {"new", "old"}  # both complete, hidden
    loader(target)
    assert hidden(target) == []
    assert which(target, vectors) == "new"  # the save had completed: the new version wins


def test_the_next_save_restores_a_model_a_save_left_missing_before_refusing_to_overwrite(tmp_path, monkeypatch,
                                                                                         models, vectors):
    raw, _ = models
    target = tmp_path / "model"
    _save_embedder(raw["old"], target)
    fault = RenamesFailFrom(3)
    monkeypatch.setattr(os, "rename", fault)
    with pytest.raises(OSError, match="injected"):
        _save_embedder(raw["new"], target)
    monkeypatch.setattr(os, "rename", fault.real)
    with pytest.raises(FileExistsError, match="overwrite=True"):  # the restored model is not silently replaced
        Embedder.from_pretrained(raw["old"]).save_pretrained(target)
    assert which(target, vectors) == "new" and hidden(target) == []
    _save_embedder(raw["old"], target)
    assert which(target, vectors) == "old" and hidden(target) == []


def test_the_leftovers_of_the_earlier_s_t_writer_are_restored_and_removed(tmp_path, models, vectors, dead_pid):
    # what ctxemb's s-t writer left when killed between its two renames, before it saved through ctxemb.core.atomic:
    # the previous model in .<name>.old-<pid>, the new one (complete, but nothing says so) in .<name>.partial-<rand>
    _, refs = models
    target = tmp_path / "model"
    _copy(refs["old"], tmp_path / (".model.old-%d" % dead_pid))
    _copy(refs["new"], tmp_path / ".model.partial-k3j_x9ab")
    assert which(target, vectors) == "old"  # the previous model, whole
    assert hidden(target) == []
    # an interrupted write's partial directory beside a model is removed by the next load
    _copy(refs["new"], tmp_path / ".model.partial-abcdefgh")
    Embedder.from_pretrained(target)
    assert hidden(target) == []


def test_a_save_in_progress_in_a_live_process_is_left_alone(tmp_path, models):
    _, refs = models
    target = tmp_path / "model"
    _copy(refs["old"], target)
    live = tmp_path / (".model.%d-abcdefgh.tmp" % os.getppid())  # the parent process (pytest's): alive
    live.mkdir()
    Embedder.from_pretrained(target)
    assert hidden(target) == [live.name]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
