"""Sharded IVF-PQ builds: train once, add shards apart (other processes, torchrun), merge on disk.

The reference is one process: ``SemanticIndex(params=IVFPQParams(on_disk=True)).add(everything)`` trains the same
quantizer on the same sample and must answer every search exactly as the merged index does (same ids, same scores).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxemb.core.locks import DirectoryLock, DirectoryLockedError, lock_file_beside
from ctxemb.search import CorruptFileError, IVFPQParams, SemanticIndex
from ctxemb.search.sharded import (
    add_shard,
    load_quantizer,
    merge_shards,
    open_trained_index,
    read_partial,
    train_ivfpq,
)

REPO = Path(__file__).resolve().parent.parent
PARAMS = IVFPQParams(nlist=16, pq_m=8, nbits=6, nprobe=4, k_factor=5, train_size=1500, seed=3, on_disk=True)
DIM = 32


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((24, DIM))
    return (centres[rng.integers(0, 24, n)] + 0.35 * rng.standard_normal((n, DIM))).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    x = clustered(2400)
    ids = ["doc-%05d" % i for i in range(len(x))]
    meta = [{"text": "text %d" % i, "n": i} for i in range(len(x))]
    queries = clustered(60, seed=7)
    return x, ids, meta, queries


CONFIG = {"model": "tiny", "layers": [-1], "layer_pooling": "mean", "precision": "fp32"}
BOUNDS = [0, 700, 1500, 2400]  # three uneven shards


def _build_shards(tmp_path, data, order=(0, 1, 2)):
    x, ids, meta, _ = data
    np.save(tmp_path / "all.npy", x)
    q = train_ivfpq([x[a:b] for a, b in zip(BOUNDS, BOUNDS[1:])], tmp_path / "quantizer", params=PARAMS,
                    embedder_config=CONFIG)
    parts = []
    for s in order:
        a, b = BOUNDS[s], BOUNDS[s + 1]
        parts.append(add_shard(q, tmp_path / "parts" / ("s%d" % s), ids[a:b], x[a:b], meta[a:b], shard_index=s))
    return q, parts


def _reference(tmp_path, data) -> SemanticIndex:
    x, ids, meta, _ = data
    ref = SemanticIndex(DIM, params=PARAMS, directory=tmp_path / "reference", embedder_config=CONFIG)
    ref.add(ids, x, meta, show_progress_bar=False)
    ref.save()
    return SemanticIndex.load(tmp_path / "reference")


def _same_results(a: SemanticIndex, b: SemanticIndex, queries, **kw) -> None:
    sa, ia = a.search_array(queries, k=10, **kw)
    sb, ib = b.search_array(queries, k=10, **kw)
    assert np.array_equal(ia, ib)
    assert np.array_equal(sa, sb)  # bit for bit


def test_merged_index_equals_the_one_process_build(tmp_path, data):
    x, ids, meta, queries = data
    q, _ = _build_shards(tmp_path, data, order=(2, 0, 1))  # added in any order; merged by shard_index
    result = merge_shards(q, [tmp_path / "parts" / n for n in ("s1", "s2", "s0")], tmp_path / "merged")
    assert result.n_items == len(x) and [p.name for p in result.shards] == ["s0", "s1", "s2"]
    merged = SemanticIndex.load(tmp_path / "merged", expected_config=CONFIG)
    ref = _reference(tmp_path, data)
    # the one-process build trained itself on the same sample: the same quantizer
    assert ref._backend.ivf.nlist == 16
    from ctxemb.search.shard_files import quantizer_fingerprint
    assert quantizer_fingerprint(ref._backend.ivf) == q.fingerprint
    assert merged.ids == ids and len(merged) == len(x)
    for nprobe in (1, 4, 16):
        _same_results(merged, ref, queries, nprobe=nprobe)
    assert merged.get_metadata("doc-01234") == meta[1234]
    assert np.array_equal(merged.get_vector("doc-02000"), ref.get_vector("doc-02000"))
    # the inverted lists hold the same entries in the same order
    for j in range(16):
        a, b = merged._backend.ivf.invlists, ref._backend.ivf.invlists
        import faiss
        la = faiss.rev_swig_ptr(a.get_ids(j), a.list_size(j)).copy()
        lb = faiss.rev_swig_ptr(b.get_ids(j), b.list_size(j)).copy()
        assert np.array_equal(la, lb)
    # sanity against exact search: recall@10 with every list probed and generous re-ranking
    exact = SemanticIndex(DIM)
    exact.add(ids, x, show_progress_bar=False)
    _, truth = exact.search_array(queries, k=10)
    _, got = merged.search_array(queries, k=10, nprobe=16, k_factor=50)
    assert np.mean([len(set(t) & set(g)) / 10 for t, g in zip(truth, got)]) > 0.97


def test_merged_index_accepts_changes_and_saves(tmp_path, data):
    """The merged lists are an ordinary on-disk index: adding after the merge must not overwrite merged entries
    (which FAISS's merge_from_multiple would do)."""
    x, ids, meta, queries = data
    q, parts = _build_shards(tmp_path, data)
    merge_shards(q, tmp_path / "parts", tmp_path / "merged")  # a folder of partials
    merged = SemanticIndex.load(tmp_path / "merged")
    ref = _reference(tmp_path, data)
    extra = clustered(300, seed=11)
    extra_ids = ["extra-%d" % i for i in range(300)]
    for index in (merged, ref):
        index.add(extra_ids, extra, show_progress_bar=False)
        index.remove(["doc-00005", "doc-02300"])
        index.save()
    both = np.vstack([queries, extra[:20]])
    _same_results(SemanticIndex.load(tmp_path / "merged"), SemanticIndex.load(tmp_path / "reference"), both,
                  nprobe=16)


def test_open_trained_index_is_the_one_process_build(tmp_path, data):
    x, ids, meta, queries = data
    q, _ = _build_shards(tmp_path, data)
    merge_shards(q, tmp_path / "parts", tmp_path / "merged")
    one = open_trained_index(q, tmp_path / "one")
    one.add(ids, x, meta, show_progress_bar=False)
    one.save()
    _same_results(SemanticIndex.load(tmp_path / "merged"), SemanticIndex.load(tmp_path / "one"), queries)


def test_train_from_npy_files_samples_deterministically(tmp_path, data):
    x = data[0]
    np.save(tmp_path / "a.npy", x[:1000])
    np.save(tmp_path / "b.npy", x[1000:])
    q1 = train_ivfpq([tmp_path / "a.npy", tmp_path / "b.npy"], tmp_path / "q1", params=PARAMS)
    q2 = train_ivfpq(x, tmp_path / "q2", params=PARAMS)
    assert q1.fingerprint == q2.fingerprint  # the same sample of the concatenation
    q3 = train_ivfpq(x, tmp_path / "q3", params=IVFPQParams(**{**PARAMS.__dict__, "seed": 4}))
    assert q3.fingerprint != q1.fingerprint
    with pytest.raises(FileExistsError, match="overwrite"):
        train_ivfpq(x, tmp_path / "q1", params=PARAMS)
    assert train_ivfpq(x, tmp_path / "q1", params=PARAMS, overwrite=True).fingerprint == q1.fingerprint
    with pytest.raises(ValueError, match="at least 64 vectors"):
        train_ivfpq(x[:50], tmp_path / "q4", params=PARAMS)


def test_shards_added_by_two_separate_processes_merge_like_one(tmp_path, data):
    x, ids, meta, queries = data
    np.save(tmp_path / "all.npy", x)
    q = train_ivfpq(tmp_path / "all.npy", tmp_path / "quantizer", params=PARAMS, embedder_config=CONFIG)
    script = (
        "import sys, json, numpy as np\n"
        "from ctxemb.search.sharded import add_shard\n"
        "s, a, b = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])\n"
        "x = np.load(sys.argv[4], mmap_mode='r')\n"
        "ids = ['doc-%05d' % i for i in range(a, b)]\n"
        "meta = [{'text': 'text %d' % i, 'n': i} for i in range(a, b)]\n"
        "add_shard(sys.argv[5], sys.argv[6] + '/p%d' % s, ids, x[a:b], meta, shard_index=s)\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(s), str(a), str(b), str(tmp_path / "all.npy"),
                               str(tmp_path / "quantizer"), str(tmp_path / "parts")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s, (a, b) in enumerate([(0, 1200), (1200, 2400)])]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
    merge_shards(q, tmp_path / "parts", tmp_path / "merged")
    _same_results(SemanticIndex.load(tmp_path / "merged"), _reference(tmp_path, data), queries)


def _torchrun() -> str | None:
    beside = Path(sys.executable).parent / "torchrun"
    return str(beside) if beside.exists() else shutil.which("torchrun")


@pytest.mark.skipif(_torchrun() is None, reason="torchrun not available")
def test_torchrun_ranks_add_their_shards_from_the_cli_and_merge(tmp_path, data):
    """``torchrun --nproc_per_node 2 -m ctxemb index add-shard``: each rank adds its slice of the embedded .npy
    into parts/shard-<rank>; ``ctxemb index merge`` gives the one-process index, ids the rows' positions and texts."""
    x, _, _, queries = data
    np.save(tmp_path / "v.npy", x)
    (tmp_path / "v.npy.json").write_text(json.dumps({"embedder": CONFIG, "pooling": "mean"}))
    texts = ["text %d" % i for i in range(len(x))]
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n")
    from ctxemb.cli import main

    assert main(["index", "train-quantizer", "--vectors", str(tmp_path / "v.npy"), "--out-dir", str(tmp_path / "q"),
                 "--nlist", "16", "--pq-m", "8", "--nbits", "6", "--nprobe", "4", "--k-factor", "5",
                 "--train-size", "1500", "--seed", "3"]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [_torchrun(), "--standalone", "--nproc_per_node", "2", "-m", "ctxemb", "index", "add-shard",
           "--quantizer", str(tmp_path / "q"), "--vectors", str(tmp_path / "v.npy"), "--texts", str(tmp_path / "t.txt"),
           "--out-dir", str(tmp_path / "parts"), "--no-progress"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert sorted(os.listdir(tmp_path / "parts")) == ["shard-00000", "shard-00001"]
    assert main(["index", "merge", "--quantizer", str(tmp_path / "q"), "--out-dir", str(tmp_path / "merged"),
                 str(tmp_path / "parts")]) == 0
    merged = SemanticIndex.load(tmp_path / "merged", expected_config=CONFIG)
    ids = [str(i) for i in range(len(x))]
    ref = SemanticIndex(DIM, params=PARAMS, directory=tmp_path / "ref", embedder_config=CONFIG)
    ref.add(ids, x, [{"text": t, "line": i + 1} for i, t in enumerate(texts)], show_progress_bar=False)
    _same_results(merged, ref, queries)
    assert merged.get_metadata("2399") == {"text": "text 2399", "line": 2400}
    assert merged.recipe["mode"] == "sentences" and merged.recipe["pooling"] == "mean"


# ----------------------------------------------------------------------------------------------------------------
# errors


def test_partials_from_another_quantizer_are_refused(tmp_path, data):
    x, ids, meta, _ = data
    q, parts = _build_shards(tmp_path, data)
    other = train_ivfpq(x, tmp_path / "other", params=IVFPQParams(**{**PARAMS.__dict__, "seed": 9}))
    odd = add_shard(other, tmp_path / "odd", ["z1", "z2"], x[:2], shard_index=7)
    with pytest.raises(ValueError, match="another trained quantizer.*fingerprint") as e:
        merge_shards(q, [*parts, odd], tmp_path / "merged")
    assert str(odd.directory) in str(e.value)
    assert not (tmp_path / "merged").exists()
    # a partial whose FAISS file was swapped for another quantizer's is caught from the file itself
    shutil.copyfile(odd.codes_file, parts[0].codes_file)
    with pytest.raises(CorruptFileError, match="fingerprint"):
        merge_shards(q, parts, tmp_path / "merged")


def test_different_embedder_configs_are_refused(tmp_path, data):
    x, ids, meta, _ = data
    q = train_ivfpq(x, tmp_path / "q", params=PARAMS)  # records no configuration
    a = add_shard(q, tmp_path / "a", ids[:10], x[:10], shard_index=0, embedder_config=CONFIG)
    b = add_shard(q, tmp_path / "b", ids[10:20], x[10:20], shard_index=1, embedder_config={**CONFIG, "layers": [-2]})
    with pytest.raises(ValueError, match="(?s)different embedder configurations.*layers"):
        merge_shards(q, [a, b], tmp_path / "m")
    c = add_shard(q, tmp_path / "c", ids[10:20], x[10:20], shard_index=1)
    with pytest.raises(ValueError, match="not embedded alike"):
        merge_shards(q, [a, c], tmp_path / "m")
    q2 = train_ivfpq(x, tmp_path / "q2", params=PARAMS, embedder_config=CONFIG)
    with pytest.raises(ValueError, match="(?s)quantizer.*layers"):
        add_shard(q2, tmp_path / "d", ids[:10], x[:10], shard_index=0, embedder_config={**CONFIG, "layers": [-2]})
    assert not (tmp_path / "d" / "partial.json").exists()


def test_duplicate_ids_and_shard_indexes_are_refused(tmp_path, data):
    x, ids, meta, _ = data
    q = train_ivfpq(x, tmp_path / "q", params=PARAMS)
    a = add_shard(q, tmp_path / "a", ids[:10], x[:10], shard_index=0)
    b = add_shard(q, tmp_path / "b", ids[5:15], x[5:15], shard_index=1)
    with pytest.raises(ValueError, match="'doc-00005' is in two shards") as e:
        merge_shards(q, [a, b], tmp_path / "m")
    assert str(a.directory) in str(e.value) and str(b.directory) in str(e.value)
    c = add_shard(q, tmp_path / "c", ids[10:20], x[10:20], shard_index=0)
    with pytest.raises(ValueError, match="same shard_index 0"):
        merge_shards(q, [a, c], tmp_path / "m")
    with pytest.raises(ValueError, match="unique; repeated: \\['doc-00001'\\]"):
        add_shard(q, tmp_path / "e", [ids[0], ids[1], ids[1]], x[:3], shard_index=2)
    with pytest.raises(ValueError, match="dimension 31"):
        add_shard(q, tmp_path / "e", ids[:3], x[:3, :31], shard_index=2)
    with pytest.raises(FileExistsError, match="overwrite"):
        add_shard(q, tmp_path / "a", ids[:10], x[:10], shard_index=0)
    add_shard(q, tmp_path / "a", ids[20:30], x[20:30], shard_index=0, overwrite=True)
    assert read_partial(tmp_path / "a").read_items()[0] == ids[20:30]
    assert len([n for n in os.listdir(tmp_path / "a") if n.startswith("codes.")]) == 1  # the old files are gone


def test_a_merge_that_fails_midway_leaves_no_index(tmp_path, data, monkeypatch):
    q, parts = _build_shards(tmp_path, data)
    import ctxemb.search.sharded as sharded

    def boom(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(sharded, "_merge_lists", boom)
    with pytest.raises(OSError, match="simulated"):
        merge_shards(q, parts, tmp_path / "merged")
    assert sorted(n for n in os.listdir(tmp_path) if "merged" in n) == [".merged.ctxemb.lock"]
    monkeypatch.undo()
    merge_shards(q, parts, tmp_path / "merged")
    assert len(SemanticIndex.load(tmp_path / "merged")) == 2400


def test_a_merge_killed_midway_leaves_nothing_that_loads(tmp_path, data):
    q, parts = _build_shards(tmp_path, data)
    script = (
        "import os, sys\n"
        "import ctxemb.search.sharded as s\n"
        "real = s._merge_lists\n"
        "def dying(*a, **k):\n"
        "    real(*a, **k)\n"
        "    os._exit(9)  # SIGKILL-like: no cleanup runs\n"
        "s._merge_lists = dying\n"
        "s.merge_shards(sys.argv[1], sys.argv[2], sys.argv[3])\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", script, str(q.directory), str(tmp_path / "parts"),
                           str(tmp_path / "merged")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr[-3000:]
    assert not (tmp_path / "merged").exists()
    assert any(n.startswith(".merged.") and n.endswith(".tmp") for n in os.listdir(tmp_path))
    with pytest.raises(FileNotFoundError):
        SemanticIndex.load(tmp_path / "merged")
    assert not (tmp_path / "merged").exists()  # a failed load creates nothing
    merge_shards(q, tmp_path / "parts", tmp_path / "merged")  # the next merge cleans up and succeeds
    assert sorted(n for n in os.listdir(tmp_path) if "merged" in n) == [".merged.ctxemb.lock", "merged"]
    assert len(SemanticIndex.load(tmp_path / "merged")) == 2400


def test_merge_locks_its_target_and_refuses_to_overwrite(tmp_path, data):
    q, parts = _build_shards(tmp_path, data)
    lock = DirectoryLock(lock_file_beside(tmp_path / "merged"), what="test").acquire()
    with pytest.raises(DirectoryLockedError):
        merge_shards(q, parts, tmp_path / "merged")
    lock.release()
    merge_shards(q, parts, tmp_path / "merged")
    with pytest.raises(FileExistsError, match="overwrite"):
        merge_shards(q, parts, tmp_path / "merged")
    merge_shards(q, parts[:2], tmp_path / "merged", overwrite=True)
    assert len(SemanticIndex.load(tmp_path / "merged")) == 1500


def test_unfinished_or_corrupt_partials_are_named(tmp_path, data):
    q, parts = _build_shards(tmp_path, data)
    (parts[1].directory / "partial.json").unlink()
    with pytest.raises(FileNotFoundError, match="did not finish"):
        merge_shards(q, [p.directory for p in parts], tmp_path / "m")
    with open(parts[0].vectors_file, "r+b") as f:
        f.truncate(100)
    with pytest.raises(CorruptFileError, match="truncated"):
        read_partial(parts[0].directory)
    with pytest.raises(FileNotFoundError, match="partial"):
        load_quantizer(parts[2].directory)


def test_cli_separate_machines_with_their_own_files_and_usage_errors(tmp_path, data, capsys):
    """Two machines, each with the .npy of its own part of the corpus: --shard-index alone, --first-line."""
    from ctxemb.cli import main

    x, _, _, queries = data
    np.save(tmp_path / "a.npy", x[:1000])
    np.save(tmp_path / "b.npy", x[1000:])
    assert main(["index", "train-quantizer", "--vectors", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"),
                 "--out-dir", str(tmp_path / "q"), "--nlist", "16", "--pq-m", "8", "--nbits", "6", "--nprobe", "4",
                 "--k-factor", "5", "--train-size", "1500", "--seed", "3"]) == 0
    assert main(["index", "add-shard", "--quantizer", str(tmp_path / "q"), "--vectors", str(tmp_path / "b.npy"),
                 "--shard-index", "1", "--first-line", "1001", "--out-dir", str(tmp_path / "parts"), "--no-progress"]) == 0
    assert main(["index", "add-shard", "--quantizer", str(tmp_path / "q"), "--vectors", str(tmp_path / "a.npy"),
                 "--shard-index", "0", "--out-dir", str(tmp_path / "parts"), "--no-progress"]) == 0
    assert main(["index", "merge", "--quantizer", str(tmp_path / "q"), "--out-dir", str(tmp_path / "m"),
                 str(tmp_path / "parts" / "shard-00001"), str(tmp_path / "parts" / "shard-00000")]) == 0
    assert "merged 2 shards (2400 items)" in capsys.readouterr().out
    merged = SemanticIndex.load(tmp_path / "m")
    ref = SemanticIndex(DIM, params=PARAMS, directory=tmp_path / "ref")
    ref.add([str(i) for i in range(len(x))], x, show_progress_bar=False)
    _same_results(merged, ref, queries)
    # rows of one shared file
    base = ["index", "add-shard", "--quantizer", str(tmp_path / "q"), "--vectors", str(tmp_path / "a.npy"),
            "--out-dir", str(tmp_path / "p2"), "--no-progress"]
    assert main(base + ["--shard-index", "1", "--num-shards", "3"]) == 0
    assert read_partial(tmp_path / "p2" / "shard-00001").read_items()[0][0] == "333"  # rows 333..665
    assert main(base + ["--rows", "10:20", "--shard-index", "5"]) == 0
    assert read_partial(tmp_path / "p2" / "shard-00005").n_items == 10
    capsys.readouterr()
    for extra, message in ((["--num-shards", "2"], "--num-shards needs --shard-index"),
                           (["--shard-index", "2", "--num-shards", "2"], "must be below --num-shards 2"),
                           (["--rows", "5:2000", "--shard-index", "0"], "outside the 1000 rows"),
                           (["--rows", "10:20"], "--rows needs --shard-index")):
        assert main(base + extra) == 2
        assert message in capsys.readouterr().err
    # merging into an existing index is refused (exit 1) and names --overwrite
    assert main(["index", "merge", "--quantizer", str(tmp_path / "q"), "--out-dir", str(tmp_path / "m"),
                 str(tmp_path / "parts")]) == 1
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.slow
def test_the_benchmark_runs_and_finds_identical_results(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.sharded_index", "--quick", "--out", str(tmp_path),
                           "--tmp", str(tmp_path)], env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "sharded_index_quick.json").read_text())
    assert all(s["identical_ids"] and s["identical_scores"] for s in result["searches"])
    assert (tmp_path / "sharded_index_quick.md").read_text().startswith("# Sharded IVF-PQ index build")
