"""SenseStore: running means, candidate scoring, global kNN, persistence, errors, size and load time."""

import time

import numpy as np
import pytest

from ctxemb.wsd.sense_store import QueryTransform, SenseStore
from ctxemb.wsd.sense_store_files import directory_size


def _random_occurrences(rng, n_keys=50, n=600, dim=16):
    keys = ["k%03d%%1:00:00::" % i for i in range(n_keys)]
    occ_keys = [keys[i] for i in rng.integers(0, n_keys, n)]
    vecs = rng.standard_normal((n, dim)).astype(np.float32) + 3.0  # offset: means far from zero
    return keys, occ_keys, vecs


def _numpy_means(occ_keys, vecs):
    out = {}
    for k in set(occ_keys):
        out[k] = vecs[[i for i, x in enumerate(occ_keys) if x == k]].astype(np.float64).mean(axis=0)
    return out


def test_running_means_match_numpy():
    rng = np.random.default_rng(0)
    _, occ_keys, vecs = _random_occurrences(rng)
    store = SenseStore(16)
    for lo in range(0, len(occ_keys), 97):  # incremental adds in uneven batches
        store.add(occ_keys[lo : lo + 97], vecs[lo : lo + 97])
    ref = _numpy_means(occ_keys, vecs)
    assert len(store) == len(ref)
    keys = sorted(ref)
    np.testing.assert_allclose(store.vectors(keys), np.stack([ref[k] for k in keys]), rtol=1e-5, atol=1e-5)
    counts = {k: occ_keys.count(k) for k in keys}
    assert store.counts(keys).tolist() == [counts[k] for k in keys]
    assert store.count(keys[0]) == counts[keys[0]]
    assert store.origin(keys[0]) == "corpus"
    np.testing.assert_allclose(np.linalg.norm(store.unit_vectors(keys), axis=1), 1.0, rtol=1e-6)


def test_caller_arrays_untouched_and_set_vectors():
    store = SenseStore(3)
    v = np.array([[3.0, 4.0, 0.0]], dtype=np.float32)
    store.add(["a%1:00:00::"], v)
    assert v.tolist() == [[3.0, 4.0, 0.0]]
    store.set_vectors(["b%1:00:00::"], np.array([[0.0, 2.0, 0.0]]), origin="synset")
    assert store.count("b%1:00:00::") == 0 and store.origin("b%1:00:00::") == "synset"
    store.add(["b%1:00:00::"], np.array([[1.0, 0.0, 0.0]]))  # a corpus occurrence replaces a propagated vector
    np.testing.assert_allclose(store.vector("b%1:00:00::"), [1.0, 0.0, 0.0])
    assert store.origins() == {"corpus": 2}


def test_score_matches_brute_force():
    rng = np.random.default_rng(1)
    keys, occ_keys, vecs = _random_occurrences(rng)
    store = SenseStore(16)
    store.add(occ_keys, vecs)
    ref = _numpy_means(occ_keys, vecs)
    q = rng.standard_normal(16)
    cands = [k for k in keys[::3] if k in ref]
    expect = [ref[k] @ q / np.linalg.norm(ref[k]) / np.linalg.norm(q) for k in cands]
    np.testing.assert_allclose(store.score(q, cands), expect, rtol=1e-5, atol=1e-6)
    assert store.score(q, []).shape == (0,)
    assert store.score(np.zeros(16), cands[:2]).tolist() == [0.0, 0.0]


def test_global_knn_matches_brute_force():
    rng = np.random.default_rng(2)
    _, occ_keys, vecs = _random_occurrences(rng, n_keys=200, n=2000, dim=32)
    vecs -= 3.0
    store = SenseStore(32)
    store.add(occ_keys, vecs)
    Q = rng.standard_normal((7, 32)).astype(np.float32)
    scores, keys = store.search(Q, k=5)
    allkeys = list(store.keys)
    M = store.vectors()
    cos = (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ (M / np.linalg.norm(M, axis=1, keepdims=True)).T
    top = np.argsort(-cos, axis=1)[:, :5]
    assert keys == [[allkeys[j] for j in row] for row in top]
    np.testing.assert_allclose(scores, np.take_along_axis(cos, top, axis=1), rtol=1e-5, atol=1e-6)
    s1, k1 = store.search(Q[0], k=3)
    assert s1.shape == (3,) and k1 == keys[0][:3]


def test_save_load_identical(tmp_path):
    rng = np.random.default_rng(3)
    _, occ_keys, vecs = _random_occurrences(rng, dim=8)
    qt = QueryTransform(4, mean=rng.standard_normal(4), scale=rng.random(4) + 0.5, n_copies=2)
    store = SenseStore(8, metadata={"embedder": {"model": "fake", "layers": [-4, -3, -2, -1]}}, query_transform=qt)
    store.add(occ_keys, vecs)
    store.set_vectors(["zz%1:00:00::"], rng.standard_normal((1, 8)), origin="lexname")
    path = store.save(tmp_path / "store")
    loaded = SenseStore.load(path)
    assert loaded.keys == store.keys
    assert loaded.metadata == store.metadata
    np.testing.assert_array_equal(loaded.unit_vectors(), store.unit_vectors())
    np.testing.assert_array_equal(loaded.vectors(), store.vectors())
    np.testing.assert_array_equal(loaded.counts(), store.counts())
    assert loaded.origins() == store.origins() and loaded.origin("zz%1:00:00::") == "lexname"
    np.testing.assert_array_equal(loaded.query_transform.mean, qt.mean)
    assert loaded.query_transform.n_copies == 2
    Q = rng.standard_normal((5, 8)).astype(np.float32)
    D1, I1 = store.search(Q, k=4)
    D2, I2 = loaded.search(Q, k=4)
    np.testing.assert_array_equal(D1, D2)
    assert I1 == I2
    cands = list(store.keys[:5])
    np.testing.assert_array_equal(loaded.score(Q[0], cands), store.score(Q[0], cands))
    # loaded stores stay updatable, and keep matching the original under the same updates
    more = rng.standard_normal((3, 8)).astype(np.float32)
    for s in (store, loaded):
        s.add([cands[0], cands[0], "new%1:00:00::"], more)
    np.testing.assert_array_equal(loaded.vectors(), store.vectors())
    # saving over an existing store replaces it
    loaded.save(path)
    assert len(SenseStore.load(path)) == len(store)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and not p.name.endswith(".ctxemb.lock")]  # no temporary leftovers


def test_query_transform():
    qt = QueryTransform(2, mean=np.array([1.0, 1.0]), scale=np.array([2.0, 1.0]), n_copies=2)
    out = qt(np.array([[3.0, 1.0]]))
    np.testing.assert_allclose(out, [[1.0, 0.0, 1.0, 0.0]])
    assert qt(np.array([3.0, 1.0])).shape == (4,)
    with pytest.raises(ValueError, match="together"):
        QueryTransform(2, mean=np.zeros(2))
    with pytest.raises(ValueError, match="positive"):
        QueryTransform(2, mean=np.zeros(2), scale=np.zeros(2))
    with pytest.raises(ValueError, match="output"):
        SenseStore(3, query_transform=qt)


def test_bad_input_errors(tmp_path):
    store = SenseStore(4)
    with pytest.raises(ValueError, match="empty SenseStore"):
        store.search(np.ones(4), k=1)
    with pytest.raises(ValueError, match="empty"):
        store.add([], np.zeros((0, 4)))
    with pytest.raises(ValueError, match="dimension 3, but the store's dimension is 4"):
        store.add(["a%1:00:00::"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="2 keys but 1 vectors"):
        store.add(["a%1:00:00::", "b%1:00:00::"], np.ones((1, 4)))
    with pytest.raises(ValueError, match="NaN"):
        store.add(["a%1:00:00::"], np.array([[np.nan, 0, 0, 0]]))
    with pytest.raises(TypeError, match="single str"):
        store.add("a%1:00:00::", np.ones((1, 4)))
    with pytest.raises(ValueError, match="whitespace"):
        store.add(["a b"], np.ones((1, 4)))
    assert len(store) == 0  # failed adds created nothing
    store.add(["a%1:00:00::"], np.ones((1, 4)))
    with pytest.raises(KeyError, match="not in the store"):
        store.score(np.ones(4), ["a%1:00:00::", "missing%1:00:00::"])
    with pytest.raises(ValueError, match="dimension"):
        store.score(np.ones(5), ["a%1:00:00::"])
    with pytest.raises(ValueError, match="1-D"):
        store.score(np.ones((1, 4)), ["a%1:00:00::"])
    with pytest.raises(ValueError, match="k must be"):
        store.search(np.ones(4), k=2)
    with pytest.raises(ValueError, match="distinct"):
        store.set_vectors(["x%1:00:00::", "x%1:00:00::"], np.ones((2, 4)))
    with pytest.raises(ValueError, match="origin"):
        store.set_vectors(["x%1:00:00::"], np.ones((1, 4)), origin="magic")
    with pytest.raises(FileNotFoundError, match="meta.json"):
        SenseStore.load(tmp_path)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        SenseStore(4, metadata={"bad": object()})


def test_synthetic_semcor_sized_store_is_small_and_loads_fast(tmp_path):
    """~33k senses x 384 dims (SemCor with MiniLM): < 100 MB on disk and < 1 s to load."""
    rng = np.random.default_rng(4)
    n, dim = 33_000, 384
    store = SenseStore(dim)
    keys = ["lemma%d%%1:00:00::" % i for i in range(n)]
    store.set_vectors(keys, rng.standard_normal((n, dim)).astype(np.float32), origin="corpus", counts=np.ones(n, int))
    path = store.save(tmp_path / "big")
    size = directory_size(path)
    assert size < 100e6, size
    t = time.perf_counter()
    loaded = SenseStore.load(path)
    seconds = time.perf_counter() - t
    assert seconds < 1.0, seconds
    assert len(loaded) == n
    q = rng.standard_normal(dim).astype(np.float32)
    np.testing.assert_array_equal(loaded.score(q, keys[:10]), store.score(q, keys[:10]))
