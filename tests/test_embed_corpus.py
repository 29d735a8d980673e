"""Corpus embedding into one .npy file: the caller's order, the rows of one process bit for bit whatever the number
of processes (whole batches of the one-process plan dealt to ranks), clear errors before any file is touched, nothing
left behind by a failure, and ``torchrun --nproc_per_node 2 -m ctxemb embed`` equal to one process."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ctxemb.embedding.embedder as embedding
from ctxemb.cli import main
from ctxemb.embedding.corpus import _deal, batch_units, embed_corpus_to_file, read_text_lines
from ctxemb.embedding.embedder import Embedder, PlannedBatch
from ctxemb.runtime.distributed import DistributedContext, call_on_every_rank
from tests.helpers import write_tiny_model

REPO = Path(__file__).resolve().parent.parent
NO_BAR = {"show_progress_bar": False}
WORDS = "the bank river money sat on of he she a mouse die cell plant bat".split()


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # 62 content tokens per model input at most: the longest texts below are cut into windows
    return write_tiny_model(tmp_path_factory.mktemp("m") / "m", num_hidden_layers=4, max_position_embeddings=64)


@pytest.fixture(scope="module")
def emb(tiny):
    return Embedder.from_pretrained(tiny, batch_size=4)


def _texts(n: int, seed: int = 0, sizes=(1, 2, 3, 5, 8, 20, 40, 90, 150)) -> list[str]:
    """Texts of very uneven lengths (1 to 150 words, the longest cut into several windows)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice(sizes))) for _ in range(n)]


def test_one_process_equals_embed_sentences_bit_for_bit(emb, tmp_path):
    texts = _texts(40)
    result = embed_corpus_to_file(emb, texts, tmp_path / "v.npy", **NO_BAR)
    assert (result.num_texts, result.dim, result.world_size) == (40, 32, 1)
    assert result.texts_per_rank == (40,)
    got = np.load(tmp_path / "v.npy")
    assert got.dtype == np.float32 and got.shape == (40, 32)
    assert np.array_equal(got, emb.embed_sentences(texts, **NO_BAR))
    options = dict(pooling="cls", normalize=True, layers=[0, -1], layer_pooling="concat", batch_size=3)
    result = embed_corpus_to_file(emb, texts, tmp_path / "c.npy", **options, **NO_BAR)
    assert result.dim == 64
    assert np.array_equal(result.load(), emb.embed_sentences(texts, **options, **NO_BAR))
    assert sorted(os.listdir(tmp_path)) == ["c.npy", "v.npy"]  # no temporary left


def test_order_is_the_callers_with_very_uneven_lengths(emb, tmp_path):
    texts = _texts(30, seed=1, sizes=(1, 150, 2, 90))
    assert max(len(t) for t in emb.tokenizer.tokenize(texts)) > emb.tokenizer.max_length  # windows
    got = embed_corpus_to_file(emb, texts, tmp_path / "v.npy", **NO_BAR).load()
    for i in (0, 7, 29):  # each text alone: another batch, so equal to rounding, and in its own row
        np.testing.assert_allclose(got[i], emb.embed_sentences([texts[i]], **NO_BAR)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_every_rank_running_its_whole_batches_gives_the_same_bits(emb, monkeypatch, world_size):
    """The sharding claim, in one process: the texts of each rank's units, run through embed_sentences as the ranks
    run them, give exactly the rows of all the texts run together (with several chunks too)."""
    monkeypatch.setattr(embedding, "TEXTS_PER_PLAN", 16)
    texts = _texts(45, seed=2)
    reference = emb.embed_sentences(texts, batch_size=3, **NO_BAR)
    counts = [len(t) for t in emb.tokenizer.tokenize(texts)]
    plan = _deal(batch_units(emb.plan_sentence_batches(counts, batch_size=3)), world_size)
    seen = []
    for units in plan:
        for unit in units:
            rows = emb.embed_sentences([texts[i] for i in unit.texts], batch_size=3, **NO_BAR)
            assert np.array_equal(rows, reference[list(unit.texts)])
            seen.extend(unit.texts)
    assert sorted(seen) == list(range(45))  # every text in exactly one rank's shard
    loads = [sum(u.tokens for u in units) for units in plan]
    largest = max(u.tokens for units in plan for u in units)
    assert max(loads) - min(loads) <= largest  # LPT: within one unit of even
    # batching differently does change the last bits: the reason shards are whole batches
    assert not np.array_equal(emb.embed_sentences(texts, batch_size=1, **NO_BAR), reference)


def test_batches_sharing_a_windowed_text_stay_on_one_rank():
    batches = [PlannedBatch((5, 1), 40), PlannedBatch((2,), 30), PlannedBatch((5, 3), 20), PlannedBatch((4,), 10)]
    units = batch_units(batches)
    assert [(u.texts, u.tokens, u.order) for u in units] == [((1, 3, 5), 60, 0), ((2,), 30, 1), ((4,), 10, 3)]
    plan = _deal(units, 2)
    assert [[u.texts for u in shard] for shard in plan] == [[(1, 3, 5)], [(2,), (4,)]]


def test_texts_from_a_file(emb, tmp_path):
    f = tmp_path / "t.txt"
    f.write_bytes("\ufeffthe bank\r\nmoney  on the river \nhe sat".encode())
    assert read_text_lines(f) == ["the bank", "money  on the river ", "he sat"]
    got = embed_corpus_to_file(emb, f, tmp_path / "v.npy", **NO_BAR).load()
    assert np.array_equal(got, emb.embed_sentences(read_text_lines(f), **NO_BAR))
    for content, match in [("a\n\nb\n", "line 2 of .* is empty"), ("a\n  \n", r"line 2 .* \(only whitespace\)"),
                           ("", "is empty; expected one text per line")]:
        f.write_text(content)
        with pytest.raises(ValueError, match=match):
            read_text_lines(f)
    f.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match="not valid UTF-8: byte 0xff on line 2"):
        read_text_lines(f)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        embed_corpus_to_file(emb, tmp_path / "missing.txt", tmp_path / "w.npy", **NO_BAR)
    f.write_text("a\n\x00\n")  # a line that gives no token: named by its line
    with pytest.raises(ValueError, match=r"t.txt: texts\[1\] has no token.*line i \+ 1"):
        embed_corpus_to_file(emb, f, tmp_path / "w.npy", **NO_BAR)
    assert sorted(os.listdir(tmp_path)) == ["t.txt", "v.npy"]


def test_bad_arguments_are_refused_before_any_file_is_touched(emb, tmp_path):
    texts = ["the bank", "money"]
    cases = [
        (dict(out_path=tmp_path / "v.txt"), ValueError, "must end in .npy"),
        (dict(out_path=tmp_path / "no" / "v.npy"), FileNotFoundError, "does not exist"),
        (dict(out_path=tmp_path / "dir.npy"), IsADirectoryError, "is a directory"),
        (dict(out_path=tmp_path / "old.npy"), FileExistsError, "overwrite=True"),
        (dict(texts="the bank"), TypeError, "single str"),
        (dict(texts=[]), ValueError, "texts is empty"),
        (dict(texts=["a", "b", " "]), ValueError, r"texts\[2\] is empty"),
        (dict(pooling="maximum"), ValueError, "pooling"),
        (dict(layer_pooling="stack"), ValueError, "stack"),
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(overwrite="yes"), TypeError, "overwrite"),
        (dict(embedder="model"), TypeError, "Embedder"),
    ]
    (tmp_path / "dir.npy").mkdir()
    np.save(tmp_path / "old.npy", np.ones((2, 2), dtype=np.float32))
    before = sorted(os.listdir(tmp_path))
    for change, error, match in cases:
        kwargs = dict(embedder=emb, texts=texts, out_path=tmp_path / "v.npy", **NO_BAR)
        kwargs.update(change)
        with pytest.raises(error, match=match):
            embed_corpus_to_file(**kwargs)
        assert sorted(os.listdir(tmp_path)) == before, change
    assert np.array_equal(np.load(tmp_path / "old.npy"), np.ones((2, 2)))
    embed_corpus_to_file(emb, texts, tmp_path / "old.npy", overwrite=True, **NO_BAR)
    assert np.load(tmp_path / "old.npy").shape == (2, 32)


def test_a_failure_leaves_nothing_at_out_path(emb, tmp_path, monkeypatch):
    texts = _texts(20, seed=3)
    real = Embedder.embed_sentences
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory (simulated)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Embedder, "embed_sentences", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        embed_corpus_to_file(emb, texts, tmp_path / "v.npy", **NO_BAR)
    assert os.listdir(tmp_path) == []  # neither the output nor its temporary
    np.save(tmp_path / "v.npy", np.zeros((1, 1), dtype=np.float32))
    calls.clear()
    with pytest.raises(RuntimeError, match="simulated"):
        embed_corpus_to_file(emb, texts, tmp_path / "v.npy", overwrite=True, **NO_BAR)
    assert os.listdir(tmp_path) == ["v.npy"] and np.load(tmp_path / "v.npy").shape == (1, 1)  # the old file, as it was


def test_a_single_process_shares_its_own_error():
    ctx = DistributedContext()
    assert call_on_every_rank(lambda: 7, ctx) == [7]
    with pytest.raises(KeyError, match="x"):
        call_on_every_rank(lambda: {}["x"], ctx)


def test_command_line_one_process(tiny, emb, tmp_path, capsys):
    f = tmp_path / "t.txt"
    texts = _texts(12, seed=4)
    f.write_text("\n".join(texts) + "\n")
    out = tmp_path / "v.npy"
    argv = ["embed", "--model", str(tiny), "--input", str(f), "--output", str(out), "--no-progress", "--normalize",
            "--batch-size", "3"]
    assert main(argv) == 0
    assert "embedded 12 texts (dim 32)" in capsys.readouterr().out
    expected = emb.embed_sentences(texts, layers=[-1], normalize=True, batch_size=3, **NO_BAR)
    assert np.array_equal(np.load(out), expected)
    meta = json.loads((tmp_path / "v.npy.json").read_text())
    assert (meta["num_texts"], meta["dim"], meta["world_size"], meta["normalize"]) == (12, 32, 1, True)
    assert meta["embedder"]["layers"] == [-1] and meta["embedder"]["precision"] == "fp32"
    assert main(argv) == 1  # the output exists
    assert "--overwrite" in capsys.readouterr().err
    assert main(argv + ["--overwrite", "--pooling", "cls"]) == 0


def _torchrun() -> str | None:
    beside = Path(sys.executable).parent / "torchrun"
    return str(beside) if beside.exists() else shutil.which("torchrun")


@pytest.mark.skipif(_torchrun() is None or not torch.distributed.is_available(),
                    reason="torchrun / torch.distributed not available")
def test_two_processes_under_torchrun_equal_one_process(tiny, emb, tmp_path):
    f = tmp_path / "t.txt"
    texts = _texts(60, seed=5)
    f.write_text("\n".join(texts) + "\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [_torchrun(), "--standalone", "--nproc_per_node", "2", "-m", "ctxemb", "embed", "--model", str(tiny),
           "--input", str(f), "--output", str(tmp_path / "v.npy"), "--layers", "-2", "-1", "--batch-size", "3",
           "--threads", "1", "--no-progress"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stdout.count("embedded 60 texts") == 1  # rank 0 reports
    expected = emb.embed_sentences(texts, layers=[-2, -1], batch_size=3, **NO_BAR)
    assert np.array_equal(np.load(tmp_path / "v.npy"), expected)  # bit for bit
    meta = json.loads((tmp_path / "v.npy.json").read_text())
    assert meta["world_size"] == 2 and min(meta["texts_per_process"]) > 0
    assert sorted(os.listdir(tmp_path)) == ["t.txt", "v.npy", "v.npy.json"]


@pytest.mark.skipif(_torchrun() is None or not torch.distributed.is_available(),
                    reason="torchrun / torch.distributed not available")
def test_a_failing_rank_fails_every_rank_and_leaves_nothing(tiny, tmp_path):
    script = REPO / "tests" / "training_scripts" / "embed_failures.py"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [_torchrun(), "--standalone", "--nproc_per_node", "2", str(script), str(tiny), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # rank 1 runs out of memory while rank 0 is encoding: rank 0 stops after its current batch, both raise
    assert r1["write_fails"]["error"] == ["MemoryError", "simulated on rank 1"]
    assert r0["write_fails"]["error"] == ["RuntimeError", "rank 1 of 2 failed: MemoryError: simulated on rank 1"]
    assert r0["write_fails"]["calls"] <= 2  # of its 10 batches
    # rank 1 does not see the file rank 0 created (another filesystem)
    assert r1["not_shared"]["error"][0] == "FileNotFoundError"
    assert "filesystem all ranks share" in r0["not_shared"]["error"][1]
    # the ranks were given different texts
    for r in (r0, r1):
        assert r["other_texts"]["error"][0] == "ValueError"
        message = r["other_texts"]["error"][1]
        assert "rank 1 (on " in message and "other texts than rank 0" in message
        for name in ("write_fails", "not_shared", "other_texts"):
            assert r[name]["left"] == [], (name, r[name])  # neither the output nor a temporary nor a marker
        assert r["ok"] == {"error": [None, ""], "left": ["v.npy"]}
