"""SemanticIndex: exactness against numpy, approximate recall, persistence, removal, config checks, text helpers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import re

import numpy as np
import pytest

from ctxemb.search import (
    Hit,
    IVFPQParams,
    SemanticIndex,
    build_sentence_index,
    build_word_index,
    query_sentences,
    query_words,
)

@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    """FAISS on one thread: these indexes are tiny, and spinning OpenMP threads on a busy 2-core machine cost more
    than they give (training a small IVF-PQ went from 0.9 s to 6 s with 2 threads under load)."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


# Small IVF-PQ settings so training takes milliseconds (d=32: 8 sub-quantisers of 4 dims, 64 centroids each).
IVF = dict(nlist=16, pq_m=8, nbits=6, nprobe=16, k_factor=20)


def clustered(n: int, d: int, seed: int = 0, n_clusters: int = 20, spread: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, d))
    return (centres[rng.integers(0, n_clusters, n)] + spread * rng.standard_normal((n, d))).astype(np.float32)


def brute_force(x: np.ndarray, q: np.ndarray, k: int, cosine: bool = True):
    """Top-k (scores, row indices) in float64 from the float32 values the index stores."""
    x = np.asarray(x, np.float32).astype(np.float64)
    q = np.asarray(q, np.float32).astype(np.float64)
    if cosine:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    s = q @ x.T
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(s, top, axis=1), top


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found.tolist(), truth.tolist())]))


def make_index(kind: str, d: int, tmp_path=None, **kw) -> SemanticIndex:
    if kind == "ivfpq-ondisk":
        return SemanticIndex(d, kind="ivfpq", params=IVFPQParams(on_disk=True, **IVF), directory=tmp_path / "ondisk",
                             **kw)
    if kind == "ivfpq":
        return SemanticIndex(d, kind="ivfpq", params=IVFPQParams(**IVF), **kw)
    return SemanticIndex(d, kind=kind, **kw)


KINDS = ["flat", "hnsw", "ivfpq", "ivfpq-ondisk"]


# ---------------------------------------------------------------------------------------------------------------
# exact search


@pytest.mark.parametrize("metric", ["cosine", "inner_product"])
def test_flat_matches_brute_force_on_odd_sizes(metric):
    rng = np.random.default_rng(1)
    n, d, k = 101, 17, 7
    x = rng.standard_normal((n, d))
    q = rng.standard_normal((9, d))
    ids = ["item%03d" % i for i in range(n)]
    index = SemanticIndex(d, metric=metric).add(ids, x)
    scores, found = index.search_array(q, k)
    want_scores, want_top = brute_force(x, q, k, cosine=metric == "cosine")
    assert found.tolist() == [[ids[j] for j in row] for row in want_top]
    # cosines are <= 1, so 1e-6 is absolute; raw inner products here reach ~10, so 1e-6 is relative (float32)
    tol = dict(rtol=0, atol=1e-6) if metric == "cosine" else dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(scores, want_scores, **tol)
    hits = index.search(q, k)
    assert [[h.id for h in row] for row in hits] == found.tolist()
    np.testing.assert_allclose([[h.score for h in row] for row in hits], want_scores, **tol)


def test_inputs_are_never_modified():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((50, 8)).astype(np.float32)
    q = rng.standard_normal((3, 8)).astype(np.float32)
    x0, q0 = x.copy(), q.copy()
    index = SemanticIndex(8).add([str(i) for i in range(50)], x)
    index.search(q, 5)
    index.upsert(["0"], x[:1])
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(q, q0)


def test_k_larger_than_size_returns_fewer_without_garbage():
    x = np.random.default_rng(3).standard_normal((5, 4))
    index = SemanticIndex(4).add(list("abcde"), x)
    scores, ids = index.search_array(x[:2], 50)
    assert ids.shape == (2, 5) and set(ids[0]) == set("abcde")
    assert np.isfinite(scores).all()
    assert all(len(row) == 5 for row in index.search(x[:2], 50))
    index.remove(["a", "b"])
    scores, ids = index.search_array(x[:2], 50)
    assert ids.shape == (2, 3) and set(ids[0]) == set("cde")


def test_single_query_gives_flat_results():
    x = np.random.default_rng(4).standard_normal((10, 4))
    index = SemanticIndex(4).add([str(i) for i in range(10)], x)
    hits = index.search(x[3], 3)
    assert isinstance(hits[0], Hit) and hits[0].id == "3" and hits[0].score == pytest.approx(1.0, abs=1e-6)
    scores, ids = index.search_array(x[3], 3)
    assert scores.shape == (3,) and ids[0] == "3"


# ---------------------------------------------------------------------------------------------------------------
# approximate kinds


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq", "ivfpq-ondisk"])
def test_approximate_recall_on_small_data(kind, tmp_path):
    x = clustered(3000, 32, seed=5)
    q = clustered(50, 32, seed=6)
    ids = [str(i) for i in range(len(x))]
    index = make_index(kind, 32, tmp_path).add(ids, x, show_progress_bar=False)
    _, truth = SemanticIndex(32).add(ids, x).search_array(q, 10)
    _, found = index.search_array(q, 10)
    assert recall(found, truth) >= 0.9
    # a stored vector finds itself among its 10 nearest (PQ may rank near-duplicates of it first)
    found = index.search_array(x[:20], 10)[1]
    assert all(ids[i] in found[i] for i in range(20))


def test_search_options_are_checked_per_kind():
    x = clustered(300, 32)
    ids = [str(i) for i in range(300)]
    flat = SemanticIndex(32).add(ids, x)
    with pytest.raises(ValueError, match="ef_search applies to kind='hnsw'"):
        flat.search(x[:1], 3, ef_search=10)
    hnsw = SemanticIndex(32, kind="hnsw").add(ids, x)
    with pytest.raises(ValueError, match="nprobe applies to kind='ivfpq'"):
        hnsw.search(x[:1], 3, nprobe=4)
    assert len(hnsw.search(x[0], 3, ef_search=8)) == 3
    with pytest.raises(ValueError, match="ef_search must be >= 1"):
        hnsw.search(x[:1], 3, ef_search=0)


def test_ivfpq_training_errors_and_explicit_train():
    x = clustered(2000, 32)
    with pytest.raises(ValueError, match="needs at least 64 vectors"):
        SemanticIndex(32, kind="ivfpq", params=IVFPQParams(**IVF)).add([str(i) for i in range(40)], x[:40])
    index = SemanticIndex(32, kind="ivfpq", params=IVFPQParams(**IVF))
    assert not index.is_trained
    index.train(x)
    assert index.is_trained and len(index) == 0
    index.add(["a", "b"], x[:2])  # a small batch is fine once trained
    assert index.search(x[0], 1)[0].id == "a"
    with pytest.raises(ValueError, match="already trained"):
        index.train(x)


# ---------------------------------------------------------------------------------------------------------------
# removal, upsert, metadata, persistence


@pytest.mark.parametrize("kind", KINDS)
def test_removal_really_removes(kind, tmp_path):
    x = clustered(1000, 32, seed=7)
    ids = [str(i) for i in range(1000)]
    index = make_index(kind, 32, tmp_path).add(ids, x)
    gone = ids[:50]
    index.remove(gone)
    assert len(index) == 950 and "0" not in index
    # each removed vector queried for itself, with k covering the whole index
    _, found = index.search_array(x[:50], 1000)
    returned = set(found[found != None].tolist())  # noqa: E711 - elementwise comparison on an object array
    assert not returned & set(gone)
    index.save(tmp_path / "saved")
    loaded = SemanticIndex.load(tmp_path / "saved")
    _, found = loaded.search_array(x[:50], 1000)
    assert not set(found[found != None].tolist()) & set(gone)  # noqa: E711
    with pytest.raises(KeyError, match="ids not in the index"):
        index.remove(["0"])
    index.add(["0"], x[:1])  # a removed id can be added again
    assert index.search(x[0], 1)[0].id == "0"


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_compact_drops_tombstones(kind):
    x = clustered(1000, 32, seed=8)
    ids = [str(i) for i in range(1000)]
    index = make_index(kind, 32).add(ids, x, metadata=[{"i": i} for i in range(1000)])
    index.remove(ids[::2])
    assert index.n_tombstones == 500
    before = index.search_array(x[1:40:2], 5)[1]
    index.compact(show_progress_bar=False)
    assert index.n_tombstones == 0 and len(index) == 500 and index.ids == ids[1::2]
    after = index.search_array(x[1:40:2], 5)[1]
    assert (before[:, 0] == after[:, 0]).all()  # each vector still finds itself
    assert index.get_metadata("7") == {"i": 7}


@pytest.mark.parametrize("kind", KINDS)
def test_upsert_replaces_vector_and_metadata(kind, tmp_path):
    x = clustered(500, 32, seed=9)
    ids = [str(i) for i in range(500)]
    index = make_index(kind, 32, tmp_path).add(ids, x, metadata=[{"v": 1}] * 500)
    target = clustered(1, 32, seed=99)[0]
    index.upsert(["3", "new"], np.vstack([target, x[0]]), metadata=[{"v": 2}, None])
    assert len(index) == 501
    top = index.search(target, 2)
    assert top[0].id == "3" and top[0].score == pytest.approx(1.0, abs=1e-5) and top[0].metadata == {"v": 2}
    assert index.get_metadata("new") is None
    np.testing.assert_allclose(index.get_vector("3"), target / np.linalg.norm(target), atol=1e-6)
    # the old vector of "3" is gone: querying it no longer finds "3" first with score 1
    old = index.search(x[3], 1)[0]
    assert not (old.id == "3" and old.score > 0.9999)


def test_metadata_round_trip(tmp_path):
    x = clustered(20, 8)
    meta = [{"text": "naïve café %d" % i, "tags": ["a", i], "nested": {"x": 1.5, "ok": True, "none": None}}
            for i in range(19)] + [None]
    index = SemanticIndex(8).add([str(i) for i in range(20)], x, metadata=meta)
    assert index.get_metadata("4") == meta[4]
    hits = index.search(x[4], 1)
    assert hits[0].metadata == meta[4]
    hits[0].metadata["text"] = "changed"  # callers get copies
    assert index.get_metadata("4") == meta[4]
    index.save(tmp_path / "idx")
    loaded = SemanticIndex.load(tmp_path / "idx")
    assert [loaded.get_metadata(str(i)) for i in range(20)] == meta
    with pytest.raises(TypeError, match=r"metadata\[1\] is not JSON-serialisable"):
        SemanticIndex(8).add(["a", "b"], x[:2], metadata=[{}, {"bad": object()}])
    with pytest.raises(TypeError, match="metadata must be a sequence of dicts"):
        SemanticIndex(8).add(["a"], x[:1], metadata={"a": 1})


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip_is_identical(kind, tmp_path):
    x = clustered(1500, 32, seed=10)
    q = clustered(30, 32, seed=11)
    ids = ["id-%d" % i for i in range(1500)]
    index = make_index(kind, 32, tmp_path).add(ids, x, metadata=[{"i": i} for i in range(1500)])
    index.remove(ids[100:110])
    d0, i0 = index.search_array(q, 10)
    index.save(tmp_path / "saved")
    loaded = SemanticIndex.load(tmp_path / "saved")
    d1, i1 = loaded.search_array(q, 10)
    np.testing.assert_array_equal(d0, d1)
    assert i0.tolist() == i1.tolist()
    assert loaded.ids == index.ids and loaded.kind == index.kind and loaded.params == index.params
    assert [h.metadata for h in loaded.search(q[0], 3)] == [h.metadata for h in index.search(q[0], 3)]


def test_saving_twice_replaces_the_generation_and_failures_keep_the_old_save(tmp_path, monkeypatch):
    x = clustered(100, 8)
    index = SemanticIndex(8).add([str(i) for i in range(100)], x)
    index.save(tmp_path)
    index.remove(["0"])
    index.save(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 4 and names[0] == ".ctxemb.lock" and names[3] == "manifest.json", names
    assert re.fullmatch(r"index\.000002-[a-z0-9]{8}\.faiss", names[1]) and names[2] == names[1].replace(
        "index.", "items.").replace(".faiss", ".json")
    index.remove(["1"])

    def broken(path):
        raise OSError("disk full")

    monkeypatch.setattr(index._backend, "write", broken)
    with pytest.raises(OSError, match="disk full"):
        index.save(tmp_path)
    loaded = SemanticIndex.load(tmp_path)  # still the second save
    assert len(loaded) == 99 and "1" in loaded
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no temporary files left


def test_ondisk_index_lives_in_its_directory_and_survives_a_move(tmp_path):
    x = clustered(2000, 32, seed=12)
    ids = [str(i) for i in range(2000)]
    d = tmp_path / "a"
    index = SemanticIndex(32, kind="ivfpq", params=IVFPQParams(on_disk=True, **IVF), directory=d).add(ids, x)
    assert len(list(d.glob("lists.*.ivfdata"))) == 1 and (d / "vectors.f32").stat().st_size == 2000 * 32 * 4
    with pytest.raises(FileExistsError):
        SemanticIndex(32, kind="ivfpq", params=IVFPQParams(on_disk=True, **IVF), directory=d)
    index.save()
    d0, i0 = index.search_array(x[:10], 5)
    moved = tmp_path / "b"
    d.rename(moved)
    loaded = SemanticIndex.load(moved)
    d1, i1 = loaded.search_array(x[:10], 5)
    np.testing.assert_array_equal(d0, d1)
    assert i0.tolist() == i1.tolist()
    loaded.add(["extra"], x[:1] * -1)  # the loaded index accepts new items
    assert loaded.search(-x[0], 1)[0].id == "extra"
    with pytest.raises(NotImplementedError, match="on-disk"):
        loaded.compact()


# ---------------------------------------------------------------------------------------------------------------
# configuration checks


CFG = {"model": "fake-mini", "layers": [-4, -3, -2, -1], "layer_pooling": "mean", "subword_pooling": "mean",
       "precision": "fp32"}


def test_config_check(tmp_path):
    x = clustered(20, 8)
    index = SemanticIndex(8, embedder_config=CFG).add([str(i) for i in range(20)], x)
    index.check_config(dict(CFG))
    index.check_config(dict(CFG, layers=(-4, -3, -2, -1)))  # tuples and lists compare equal
    with pytest.raises(ValueError) as err:
        index.check_config(dict(CFG, model="other", layers=[-1], extra=1))
    msg = str(err.value)
    assert "3 field(s)" in msg and 'model: index has "fake-mini", given "other"' in msg
    assert "layers: index has [-4, -3, -2, -1], given [-1]" in msg and "extra: index has (absent), given 1" in msg
    index.save(tmp_path)
    SemanticIndex.load(tmp_path, expected_config=CFG)
    with pytest.raises(ValueError, match="model"):
        SemanticIndex.load(tmp_path, expected_config=dict(CFG, model="other"))
    bare = SemanticIndex(8).add(["a"], x[:1])
    with pytest.raises(ValueError, match="stores no embedder configuration"):
        bare.check_config(CFG)


# ---------------------------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs_give_clear_errors(tmp_path):
    x = clustered(10, 8)
    ids = [str(i) for i in range(10)]
    with pytest.raises(ValueError, match="kind must be one of 'flat', 'hnsw', 'ivfpq'; got 'annoy'"):
        SemanticIndex(8, kind="annoy")
    with pytest.raises(ValueError, match="metric must be one of"):
        SemanticIndex(8, metric="l2")
    with pytest.raises(TypeError, match="dim must be an int"):
        SemanticIndex(8.0)
    with pytest.raises(ValueError, match=r"pq_m \(5\) must divide the dimension dim \(8\)"):
        SemanticIndex(8, kind="ivfpq", params=IVFPQParams(pq_m=5))
    with pytest.raises(ValueError, match="on_disk=True needs kind='ivfpq'"):
        SemanticIndex(8, kind="flat", params=IVFPQParams(on_disk=True), directory=tmp_path)
    with pytest.raises(ValueError, match="needs directory="):
        SemanticIndex(8, kind="ivfpq", params=IVFPQParams(on_disk=True))
    index = SemanticIndex(8)
    with pytest.raises(ValueError, match="the index is empty"):
        index.search(x[:1], 3)
    with pytest.raises(ValueError, match="vectors have dimension 7, but this index holds 8-dimensional"):
        index.add(ids, x[:, :7])
    with pytest.raises(ValueError, match="vectors has 9 rows but there are 10 ids"):
        index.add(ids, x[:9])
    with pytest.raises(ValueError, match="repeated: \\['1'\\]"):
        index.add(["0", "1", "1"], x[:3])
    with pytest.raises(TypeError, match="ids must hold strings; ids\\[1\\] is 1"):
        index.add(["0", 1], x[:2])
    with pytest.raises(TypeError, match="single str"):
        index.add("0", x[:1])
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity \\(first at row 3, column 2\\)"):
        index.add(ids, bad)
    with pytest.raises(TypeError, match="real numeric array"):
        index.add(ids[:1], [["a"] * 8])
    index.add(ids, x)
    with pytest.raises(ValueError, match="ids already in the index: \\['3'\\]; use upsert"):
        index.add(["3"], x[:1])
    with pytest.raises(ValueError, match="queries have dimension 9"):
        index.search(np.zeros((1, 9)), 3)
    with pytest.raises(ValueError, match="k must be >= 1; got 0"):
        index.search(x[:1], 0)
    with pytest.raises(TypeError, match="k must be an int"):
        index.search(x[:1], 2.5)
    with pytest.raises(KeyError, match="'nope'"):
        index.get_metadata("nope")
    with pytest.raises(FileNotFoundError, match="manifest.json not found"):
        SemanticIndex.load(tmp_path / "missing")
    assert len(index) == 10  # failed calls changed nothing


# ---------------------------------------------------------------------------------------------------------------
# text helpers with a fake embedder (no model is loaded)


@dataclass(frozen=True)
class FakeConfig:
    model: str = "fake"
    layers: tuple = (-1,)
    layer_pooling: str = "mean"

    def to_dict(self):
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d


class FakeEmbedder:
    """Deterministic contextual vectors: a word's hash vector plus half the mean of its sentence's words."""

    dim = 16

    def __init__(self, **config):
        self.config = FakeConfig(**config)
        self.calls = []

    def _word(self, w: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(w.lower().encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)

    def embed_words(self, sentences, *, batch_size=32, show_progress_bar=True, layers=None, layer_pooling=None):
        self.calls.append(("words", layers, layer_pooling))
        out = []
        for s in sentences:
            w = np.stack([self._word(t) for t in s])
            out.append(w + 0.5 * w.mean(0))
        return out

    def embed_sentences(self, texts, *, pooling="mean", batch_size=32, show_progress_bar=True, normalize=False,
                        layers=None, layer_pooling=None):
        self.calls.append(("sentences", pooling, layers))
        return np.stack([np.stack([self._word(t) for t in text.split()]).mean(0) for text in texts])


SENTENCES = [
    "the river bank was muddy after the flood",
    "she opened an account at the bank downtown",
    "fish swim near the grassy bank of the stream",
    "the bank raised its interest rates again",
    "we had a picnic on the bank of the river",
]


def test_sentence_index_round_trip_with_fake_embedder(tmp_path):
    emb = FakeEmbedder()
    index = build_sentence_index(emb, SENTENCES, kind="flat", show_progress_bar=False)
    assert index.recipe == {"mode": "sentences", "pooling": "mean", "layers": None, "layer_pooling": None,
                            "sentence_defaults": 2}
    hits = query_sentences(index, emb, SENTENCES[3], k=2)
    assert hits[0].id == "3" and hits[0].metadata == {"text": SENTENCES[3]}
    index.save(tmp_path)
    loaded = SemanticIndex.load(tmp_path, expected_config=emb.config)
    assert [h.id for h in query_sentences(loaded, emb, SENTENCES[:2], k=1)[1]] == ["1"]
    with pytest.raises(ValueError, match="model: index has \"fake\", given \"other\""):
        query_sentences(loaded, FakeEmbedder(model="other"), "x", k=1)
    with pytest.raises(ValueError, match="query_sentences"):
        query_words(loaded, emb, ["a", "bank"], 1)


def test_helpers_check_arguments_before_embedding():
    emb = FakeEmbedder()
    with pytest.raises(ValueError, match="kind must be one of"):
        build_sentence_index(emb, SENTENCES, kind="hsnw")
    with pytest.raises(ValueError, match="ids must be unique"):
        build_sentence_index(emb, SENTENCES[:2], ["a", "a"])
    with pytest.raises(ValueError, match="needs kind='ivfpq'"):
        build_word_index(emb, [s.split() for s in SENTENCES], "bank", kind="flat", params=IVFPQParams(on_disk=True))
    assert emb.calls == []  # nothing was embedded


def test_word_index_finds_uses_in_similar_contexts():
    emb = FakeEmbedder()
    sentences = [s.split() for s in SENTENCES]
    index = build_word_index(emb, sentences, "Bank", layers=[-2, -1], show_progress_bar=False)
    assert len(index) == 5 and index.get_metadata("0:2") == {
        "sentence": 0, "position": 2, "word": "bank", "text": SENTENCES[0]}
    assert ("words", (-2, -1), None) in emb.calls  # the layer override reaches the embedder
    hits = query_words(index, emb, "the muddy river bank after a flood".split(), k=5)
    assert hits[0].id == "0:2"  # the use of bank in the most similar context
    by_position = query_words(index, emb, ["money", "in", "the", "bank"], 3, k=1)
    assert len(by_position) == 1
    with pytest.raises(ValueError, match="does not contain the target word 'Bank'"):
        query_words(index, emb, ["no", "match", "here"], k=1)
    pos_index = build_word_index(emb, sentences, positions=[(0, 1), (1, 1)], show_progress_bar=False)
    assert pos_index.ids == ["0:1", "1:1"]
    with pytest.raises(ValueError, match=r"positions\[0\] = \(0, 99\) is out of range"):
        build_word_index(emb, sentences, positions=[(0, 99)])
    with pytest.raises(ValueError, match="occurs in none"):
        build_word_index(emb, sentences, "zebra")
    with pytest.raises(ValueError, match="exactly one of"):
        build_word_index(emb, sentences)


def test_cli_build_and_query(tmp_path, monkeypatch, capsys):
    from ctxemb.cli import index as search_cli

    emb = FakeEmbedder()
    monkeypatch.setattr(search_cli, "load_embedder", lambda model, device, config=None: emb)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES[:3] + [""] + SENTENCES[3:]) + "\n", encoding="utf-8")
    import argparse

    parser = argparse.ArgumentParser()
    search_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "idx"), "--no-progress"])
    assert args.func(args) == 0
    args = parser.parse_args(["index", "query", str(tmp_path / "idx"), SENTENCES[4], "-k", "2", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out[0]["id"] == "4" and out[0]["text"] == SENTENCES[4] and out[0]["line"] == 6  # blank line 4 skipped
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "w"), "--words", "bank",
                              "--no-progress"])
    assert args.func(args) == 0
    args = parser.parse_args(["index", "query", str(tmp_path / "w"), "muddy river bank", "-k", "1"])
    assert args.func(args) == 0
    assert "  0:2 " in capsys.readouterr().out  # line 0, word 2: the ids build_word_index gives


def test_sentence_index_built_before_model_sentence_defaults_is_queried_with_its_configured_layers():
    """An index whose recipe predates ``sentence_defaults`` was embedded with the embedder's configured layers; its
    queries must use them too (a sentence-transformers model's own modules now choose the layers by default)."""
    from types import SimpleNamespace

    from ctxemb.search.text import _layer_kwargs

    config = {"layers": [-4, -3, -2, -1], "layer_pooling": "mean", "layer_weights": None}
    embedder = SimpleNamespace(config=SimpleNamespace(to_dict=lambda: config))
    old = {"mode": "sentences", "pooling": "mean", "layers": None, "layer_pooling": None}
    assert _layer_kwargs(old, embedder) == {"layers": (-4, -3, -2, -1), "layer_pooling": "mean"}
    new = dict(old, sentence_defaults=2)
    assert _layer_kwargs(new, embedder) == {}
    assert _layer_kwargs(dict(old, layers=[-1]), embedder) == {"layers": (-1,)}
