"""Hardening of search indexes and sense stores (issue 15): no silent wrong answers, no lost items, and one clear
error naming the file for every corrupt, truncated or inconsistent file they read.

Each silent-wrong case below failed before its fix:
- a Disambiguator accepted an embedder with another configuration of the same dimension;
- an index built with a per-call ``layer_pooling="concat"`` override failed after embedding (sized from the
  embedder's default dimension);
- ``upsert`` removed the old item before finding that the new vector overflows float32;
- an on-disk IVF-PQ ``remove`` never saved made the next load return one id twice and lose another;
- a sense vector too large for a float64 norm was stored as a zero vector.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import logging
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pytest

from ctxemb.search import (
    CorruptFileError,
    IVFPQParams,
    SemanticIndex,
    build_sentence_index,
    build_word_index,
    embedder_config_differences,
    query_sentences,
    query_words,
)
from ctxemb.search.storage import UNSAVED_CHANGES_FILE
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.sense_store import SenseStore
from tests.fixtures.wsd.fake_embedder import FakeEmbedder as WsdFakeEmbedder
from tests.fixtures.wsd.fake_embedder import FakeEmbedderConfig


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


IVF = dict(nlist=16, pq_m=8, nbits=6, nprobe=16, k_factor=20)


def _vectors(n=300, d=32, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def _index(kind: str, directory: Path | None = None, d: int = 32) -> SemanticIndex:
    if kind == "ivfpq-ondisk":
        return SemanticIndex(d, params=IVFPQParams(on_disk=True, **IVF), directory=directory)
    if kind == "ivfpq":
        return SemanticIndex(d, params=IVFPQParams(**IVF))
    return SemanticIndex(d, kind=kind)


# ---------------------------------------------------------------------------------------------------------------
# 1. the Disambiguator compares the whole embedder configuration with the store's


def _tiny_store(config: dict | None) -> SenseStore:
    store = SenseStore(64, metadata=None if config is None else {"embedder": config})
    store.set_vectors(["bank%1:14:00::", "bank%1:17:01::"], np.eye(2, 64))
    return store


def test_disambiguator_refuses_an_embedder_with_other_layers_of_the_same_dimension():
    built_with = WsdFakeEmbedder(dim=64)
    store = _tiny_store(built_with.config.to_dict())
    Disambiguator(store, WsdFakeEmbedder(dim=64))  # the same configuration: fine

    other = WsdFakeEmbedder(dim=64)
    other.config = FakeEmbedderConfig(dim=64, layers=(-2, -1))  # same dimension, other layers
    with pytest.raises(ValueError, match=r"(?s)differs from the one the sense store was built with in 1 field.*"
                                         r"layers: store has \[-4, -3, -2, -1\], given \[-2, -1\]"):
        Disambiguator(store, other)

    dis = Disambiguator(store, built_with)
    with pytest.raises(ValueError, match="layers: store has"):
        dis.embedder = other  # replacing the embedder is checked too
    assert dis.embedder is built_with
    other_dis = Disambiguator(_tiny_store(other.config.to_dict()), other)
    with pytest.raises(ValueError, match="layers: store has"):
        other_dis.store = store  # and replacing the store
    with pytest.raises(TypeError, match="config"):
        Disambiguator(store, object())


def test_disambiguator_on_a_store_without_a_recorded_configuration_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="ctxemb.wsd.disambiguate"):
        Disambiguator(_tiny_store(None), WsdFakeEmbedder(dim=64))
    assert "records no embedder configuration" in caplog.text


def test_the_index_and_the_disambiguator_share_one_comparison():
    a = {"model": "m", "layers": (-1,), "precision": "fp32"}
    b = {"model": "m", "layers": [-2, -1]}
    assert embedder_config_differences(a, dict(a, layers=[-1])) == []  # tuples and lists compare equal
    assert embedder_config_differences(a, b, stored_name="store") == [
        "  layers: store has [-1], given [-2, -1]",
        '  precision: store has "fp32", given (absent)',
    ]


def test_another_precision_path_is_a_warning_not_a_difference(caplog):
    """int8 or bf16 vectors are within a documented bound of fp32 ones, and "auto" picks per machine."""
    a = {"model": "m", "layers": [-1], "precision": "fp32"}
    with caplog.at_level(logging.WARNING, logger="ctxemb.search.index"):
        assert embedder_config_differences(a, dict(a, precision="onnx-int8"), stored_name="store") == []
    assert 'precision: store has "fp32", given "onnx-int8"' in caplog.text


# ---------------------------------------------------------------------------------------------------------------
# 2. per-call layer overrides size the index (and are recorded in its configuration)


@dataclass(frozen=True)
class LayerConfig:
    model: str = "fake-layers"
    layers: tuple = (-1,)
    layer_pooling: str = "mean"
    layer_weights: tuple | None = None

    def to_dict(self):
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d


class LayerEmbedder:
    """Honours layers/layer_pooling like the real Embedder: "concat" of n layers gives n * HIDDEN dimensions."""

    hidden_size = 8

    def __init__(self, **config):
        self.config = LayerConfig(**{k: tuple(v) if k == "layers" else v for k, v in config.items()})
        self.calls = []

    @property
    def dim(self):
        n = len(self.config.layers) if self.config.layer_pooling == "concat" else 1
        return self.hidden_size * n

    def _word(self, w: str, layer: int) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(("%s|%d" % (w.lower(), layer)).encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.hidden_size).astype(np.float32)

    def _pool(self, words, layers, layer_pooling):
        layers = tuple(self.config.layers if layers is None else layers)
        pooling = layer_pooling or self.config.layer_pooling
        per_layer = [np.stack([self._word(w, layer) for w in words]) for layer in layers]  # n x (W, H)
        per_layer = [v + 0.5 * v.mean(0) for v in per_layer]  # a little context
        return np.concatenate(per_layer, axis=1) if pooling == "concat" else np.mean(per_layer, axis=0)

    def embed_words(self, sentences, *, batch_size=32, show_progress_bar=True, layers=None, layer_pooling=None):
        self.calls.append("words")
        return [self._pool(s, layers, layer_pooling) for s in sentences]

    def embed_sentences(self, texts, *, pooling="mean", batch_size=32, show_progress_bar=True, normalize=False,
                        layers=None, layer_pooling=None):
        self.calls.append("sentences")
        return np.stack([self._pool(t.split(), layers, layer_pooling).mean(0) for t in texts])


SENTENCES = [
    "the river bank was muddy after the flood",
    "she opened an account at the bank downtown",
    "fish swim near the grassy bank of the stream",
    "the bank raised its interest rates again",
]


def test_sentence_index_with_a_concat_layer_override(tmp_path):
    emb = LayerEmbedder()
    index = build_sentence_index(emb, SENTENCES, layers=[-2, -1], layer_pooling="concat", show_progress_bar=False)
    assert index.dim == 16 and len(index) == 4
    assert index.embedder_config["layers"] == [-2, -1] and index.embedder_config["layer_pooling"] == "concat"
    assert query_sentences(index, emb, SENTENCES[2], k=1)[0].id == "2"
    index.save(tmp_path / "idx")
    loaded = SemanticIndex.load(tmp_path / "idx", expected_config=emb.config)
    assert query_sentences(loaded, emb, SENTENCES[1], k=1)[0].id == "1"
    # An embedder configured with the recorded layers (as `ctxemb index query` makes it) is accepted too.
    assert query_sentences(loaded, LayerEmbedder(**loaded.embedder_config), SENTENCES[3], k=1)[0].id == "3"
    with pytest.raises(ValueError, match="model: index has"):
        query_sentences(loaded, LayerEmbedder(model="other"), SENTENCES[0], k=1)


def test_word_index_with_a_concat_layer_override():
    emb = LayerEmbedder()
    sentences = [s.split() for s in SENTENCES]
    index = build_word_index(emb, sentences, "bank", layers=[-3, -2, -1], layer_pooling="concat",
                             show_progress_bar=False)
    assert index.dim == 24 and len(index) == 4
    assert query_words(index, emb, sentences[3], k=1)[0].id == "3:1"


def test_a_layer_override_is_checked_against_the_index_before_embedding(tmp_path):
    emb = LayerEmbedder()
    # 3 concatenated layers give 24 dimensions, which pq_m=16 does not divide: refused before any embedding.
    with pytest.raises(ValueError, match=r"pq_m \(16\) must divide the dimension dim \(24\)"):
        build_sentence_index(emb, SENTENCES, layers=[-3, -2, -1], layer_pooling="concat",
                             params=IVFPQParams(pq_m=16))
    with pytest.raises(TypeError, match="layers must be a sequence"):
        build_sentence_index(emb, SENTENCES, layers=-1)
    with pytest.raises(ValueError, match="layers repeats"):
        build_word_index(emb, [s.split() for s in SENTENCES], "bank", layers=[-1, -1])
    assert emb.calls == []


def test_an_index_saved_before_overrides_were_recorded_still_accepts_its_embedder(tmp_path):
    """Older saves record the embedder's own configuration beside the recipe's override; both sides of the
    comparison get the recipe's layer choice, so they keep loading and answering."""
    emb = LayerEmbedder(layers=(-4, -3, -2, -1))
    build_sentence_index(emb, SENTENCES, layers=[-1], show_progress_bar=False).save(tmp_path / "idx")
    manifest_path = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["embedder_config"] = emb.config.to_dict()  # the old form
    manifest_path.write_text(json.dumps(manifest))
    loaded = SemanticIndex.load(tmp_path / "idx", expected_config=emb.config)
    assert query_sentences(loaded, emb, SENTENCES[0], k=1)[0].id == "0"


def test_cli_builds_and_queries_a_concat_index_with_a_real_model(tmp_path, capsys):
    from ctxemb.cli import index as search_cli
    from tests.helpers import write_tiny_model

    model = write_tiny_model(tmp_path / "tiny", num_hidden_layers=4)  # hidden size 32; the default layers exist
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the river bank\nmoney in the bank\nshe sat on a plant\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    search_cli.add_parser(parser.add_subparsers(dest="command"))
    for extra, out in (([], "lines"), (["--words", "bank"], "words")):
        args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / out), "--model", str(model),
                                  "--layers", "-2", "-1", "--layer-pooling", "concat", "--no-progress"] + extra)
        assert args.func(args) == 0
        index = SemanticIndex.load(tmp_path / out)
        assert index.dim == 64 and index.embedder_config["layer_pooling"] == "concat"
        args = parser.parse_args(["index", "query", str(tmp_path / out), "money in the bank", "-k", "1", "--json"])
        assert args.func(args) == 0
        hit = json.loads(capsys.readouterr().out.strip().splitlines()[-1])[0]
        assert hit["id"] == ("1" if out == "lines" else "1:3")


def test_cli_names_a_corpus_that_is_not_utf8(tmp_path):
    from ctxemb.cli.index import _read_corpus

    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("café au lait\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"corpus .*latin1\.txt is not UTF-8 text"):
        _read_corpus(corpus)


# ---------------------------------------------------------------------------------------------------------------
# 3. upsert validates everything before it removes anything


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq-ondisk"])
def test_a_failed_upsert_keeps_the_old_item(kind, tmp_path):
    x = _vectors()
    ids = [str(i) for i in range(len(x))]
    index = _index(kind, tmp_path / "od").add(ids, x, show_progress_bar=False)
    before = index.get_vector("7").copy()
    bad = {
        "overflows float32": np.full((1, 32), 1e39),
        "NaN": np.full((1, 32), np.nan),
        "dimension 31": np.ones((1, 31)),
    }
    for message, vector in bad.items():
        with pytest.raises(ValueError, match=message):
            index.upsert(["7"], vector)
        assert "7" in index and len(index) == len(x)
        np.testing.assert_array_equal(index.get_vector("7"), before)
    with pytest.raises(TypeError, match="JSON"):
        index.upsert(["7"], x[:1], metadata=[{"bad": object()}])
    assert index.search(x[7], k=1)[0].id == "7"
    # a batch whose last row overflows adds nothing either
    with pytest.raises(ValueError, match="overflows float32.*row 1"):
        index.add(["new0", "new1"], np.stack([np.ones(32), np.full(32, -1e39)]))
    assert "new0" not in index and len(index) == len(x)


# ---------------------------------------------------------------------------------------------------------------
# 4. on-disk IVF-PQ: changes never touch the files of the last save


def _on_disk(tmp_path) -> tuple[SemanticIndex, np.ndarray, list[str]]:
    x = _vectors()
    ids = [str(i) for i in range(len(x))]
    index = _index("ivfpq-ondisk", tmp_path / "od").add(ids, x, show_progress_bar=False)
    index.save()
    return index, x, ids


def _saved_files(directory: Path) -> dict[str, bytes]:
    """The bytes of every file the committed manifest names (vectors.f32 only up to the rows it counts)."""
    m = json.loads((directory / "manifest.json").read_text())
    out = {}
    for key, name in m["files"].items():
        if name:
            data = (directory / name).read_bytes()
            out[name] = data[: m["n_labels"] * 32 * 4] if key == "vectors" else data
    return out


def test_on_disk_changes_never_touch_the_saved_files_until_save(tmp_path):
    index, x, ids = _on_disk(tmp_path)
    before = _saved_files(tmp_path / "od")
    d0, i0 = SemanticIndex.load(tmp_path / "od").search_array(x[:5], 10)
    index.remove(["5", "17", "42"])  # ... and the process dies before save(): nothing saved changed
    index.add(["extra"], x[:1] + 1)
    assert _saved_files(tmp_path / "od") == before
    index.close()
    loaded = SemanticIndex.load(tmp_path / "od")  # the last save, exact
    d1, i1 = loaded.search_array(x[:5], 10)
    np.testing.assert_array_equal(i0, i1)
    np.testing.assert_array_equal(d0, d1)
    assert "5" in loaded and "extra" not in loaded
    assert len(list((tmp_path / "od").glob("lists.*.ivfdata"))) == 1  # the abandoned copy was removed on open


def test_on_disk_changes_are_committed_by_save_and_a_save_elsewhere_leaves_the_directory_alone(tmp_path):
    index, x, ids = _on_disk(tmp_path)
    before = _saved_files(tmp_path / "od")
    index.add(["extra"], x[:1] + 1)
    index.save(tmp_path / "copy")  # a consistent copy elsewhere ...
    assert "extra" in SemanticIndex.load(tmp_path / "copy")
    assert _saved_files(tmp_path / "od") == before  # ... the live directory keeps its last save
    index.remove(["5"])
    index.save()
    loaded = SemanticIndex.load(tmp_path / "od")
    assert "extra" in loaded and "5" not in loaded
    _, found = loaded.search_array(x[:3], len(loaded))
    for row in found:
        counts = Counter(i for i in row if i is not None)
        assert max(counts.values()) == 1 and set(counts) == (set(ids) - {"5"}) | {"extra"}
    assert len(list((tmp_path / "od").glob("lists.*.ivfdata"))) == 1  # the previous save's lists were deleted


def test_an_older_versions_unsaved_changes_marker_is_still_refused(tmp_path):
    _on_disk(tmp_path)
    gen = json.loads((tmp_path / "od" / "manifest.json").read_text())["generation"]
    (tmp_path / "od" / UNSAVED_CHANGES_FILE).write_text(json.dumps({"generation": gen}))
    with pytest.raises(CorruptFileError, match=r"(?s)changed by add/upsert/remove after its last save.*Rebuild"):
        SemanticIndex.load(tmp_path / "od")


def test_on_disk_crash_between_the_faiss_file_and_the_manifest_keeps_the_last_save(tmp_path, monkeypatch):
    from ctxemb.search import storage

    index, x, _ = _on_disk(tmp_path)
    before = _saved_files(tmp_path / "od")
    index.remove(["3"])

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed")

    real_atomic_write = storage.atomic_write

    def atomic_write(path, *args, **kwargs):
        if Path(path).name == storage.MANIFEST_FILE:
            crash()
        return real_atomic_write(path, *args, **kwargs)

    monkeypatch.setattr(storage, "atomic_write", atomic_write)
    with pytest.raises(KeyboardInterrupt):
        index.save()
    monkeypatch.undo()
    index.close()
    assert _saved_files(tmp_path / "od") == before
    loaded = SemanticIndex.load(tmp_path / "od")
    assert "3" in loaded and len(loaded) == len(x)
    names = sorted(p.name for p in (tmp_path / "od").iterdir())  # the interrupted save's files are gone
    assert len([n for n in names if n.startswith("index.")]) == 1, names


# ---------------------------------------------------------------------------------------------------------------
# 5. corrupt, truncated and inconsistent files: one CorruptFileError naming the file


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xffnot what it should be" * 7)


def _latin1(path: Path) -> None:
    path.write_bytes('{"text": "café"}'.encode("latin-1"))


def _one(directory: Path, pattern: str) -> Path:
    (found,) = glob.glob(str(directory / pattern))
    return Path(found)


def _edit_json(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


INDEX_DAMAGE = {
    "truncated faiss": ("index.*.faiss", _truncate, "cannot be read by FAISS"),
    "garbage faiss": ("index.*.faiss", _garbage, "cannot be read by FAISS"),
    "truncated items": ("items.*.json", _truncate, "not valid JSON"),
    "latin-1 items": ("items.*.json", _latin1, "not (valid )?UTF-8"),
    "items with a number id": ("items.*.json", lambda p: _edit_json(p, lambda v: v["ids"].__setitem__(0, 7)),
                               r"ids\[0\] must be a string"),
    "items cut short": ("items.*.json", lambda p: _edit_json(p, lambda v: (v["ids"].pop(), v["metadata"].pop())),
                        "the manifest says 300"),
    "truncated manifest": ("manifest.json", _truncate, "not valid JSON"),
    "latin-1 manifest": ("manifest.json", _latin1, "not (valid )?UTF-8"),
    "manifest list": ("manifest.json", lambda p: p.write_text("[1, 2]"), "must hold a JSON object"),
    "manifest without params": ("manifest.json", lambda p: _edit_json(p, lambda v: v.pop("params")), "'params'"),
    "manifest without a param": ("manifest.json",
                                 lambda p: _edit_json(p, lambda v: (v["params"].pop("nbits"), v["params"].pop("hnsw_m"))),
                                 "lacks the field '(nbits|hnsw_m)'"),
    "manifest with a bad dim": ("manifest.json", lambda p: _edit_json(p, lambda v: v.__setitem__("dim", "x")),
                                "dim"),
    "manifest with another dim": ("manifest.json", lambda p: _edit_json(p, lambda v: v.__setitem__("dim", 64)),
                                  "32-dimensional vectors but the manifest says dim=64"),
    "manifest with a bad file name": ("manifest.json",
                                      lambda p: _edit_json(p, lambda v: v["files"].__setitem__("items", "../x")),
                                      "files.items must be a file name"),
    "manifest without n_labels": ("manifest.json", lambda p: _edit_json(p, lambda v: v.pop("n_labels")),
                                  "n_labels must be an integer"),
    "manifest of another kind": ("manifest.json", lambda p: _edit_json(p, lambda v: v.__setitem__("kind", "flat")),
                                 "the manifest says kind='flat'"),
}


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq", "ivfpq-ondisk"])
@pytest.mark.parametrize("damage", list(INDEX_DAMAGE))
def test_a_damaged_index_file_gives_one_error_naming_it(kind, damage, tmp_path):
    directory = tmp_path / "idx"
    index = _index(kind, directory).add([str(i) for i in range(300)], _vectors(), show_progress_bar=False)
    index.save(directory)
    pattern, damage_fn, message = INDEX_DAMAGE[damage]
    path = _one(directory, pattern)
    if damage == "manifest of another kind" and kind == "flat":
        _edit_json(path, lambda v: v.__setitem__("kind", "hnsw"))
        message = "the manifest says kind='hnsw'"
    else:
        damage_fn(path)
    if damage == "manifest without a param" and kind == "flat":
        assert len(SemanticIndex.load(directory)) == 300  # a flat index has no parameters to lose
        return
    with pytest.raises(CorruptFileError, match=message) as info:
        SemanticIndex.load(directory)
    text = str(info.value)
    assert path.name in text or str(directory) in text
    assert "Error in " not in text and "index_read.cpp" not in text  # FAISS's C++ location is not the user's business


@pytest.mark.parametrize("name, damage, error, message", [
    ("lists.*.ivfdata", _truncate, CorruptFileError, "inverted lists are truncated"),
    ("lists.*.ivfdata", os.unlink, FileNotFoundError, r"lists\.[a-z0-9]{8}\.ivfdata not found"),
    ("vectors.f32", _truncate, CorruptFileError, "vectors.f32 has .* it is truncated"),
    ("vectors.f32", os.unlink, FileNotFoundError, "vectors.f32 not found"),
    ("index.*.faiss", os.unlink, FileNotFoundError, r"FAISS index file not found: .*index\.000001-[a-z0-9]{8}\.faiss"),
    ("items.*.json", os.unlink, FileNotFoundError, r"items file not found: .*items\.000001-[a-z0-9]{8}\.json"),
])
def test_missing_or_truncated_on_disk_files(name, damage, error, message, tmp_path):
    _on_disk(tmp_path)
    damage(_one(tmp_path / "od", name))
    with pytest.raises(error, match=message):
        SemanticIndex.load(tmp_path / "od")


def test_corrupt_metadata_inside_a_valid_items_file(tmp_path):
    SemanticIndex(4).add(["a"], np.ones((1, 4)), [{"x": 1}]).save(tmp_path)
    _edit_json(_one(tmp_path, "items.*.json"), lambda v: v["metadata"].__setitem__(0, "{not json"))
    loaded = SemanticIndex.load(tmp_path)
    with pytest.raises(CorruptFileError, match="metadata of item 'a' is not valid JSON"):
        loaded.search(np.ones(4), k=1)


def _saved_store(directory: Path) -> Path:
    store = SenseStore(8, metadata={"embedder": {"model": "m"}})
    rng = np.random.default_rng(0)
    store.add(["k%d%%1:00:00::" % i for i in range(20)], rng.standard_normal((20, 8)))
    return store.save(directory)


def _write_npz(path: Path, **arrays) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _write_npy(path: Path, array) -> None:
    with open(path, "wb") as f:
        np.save(f, array)


def _npz_with(path: Path, **arrays) -> None:
    with np.load(path) as z:
        current = {k: z[k] for k in z.files}
    current.update(arrays)
    _write_npz(path, **current)


STORE_DAMAGE = {
    "truncated index": ("index.faiss", _truncate, "cannot be read by FAISS"),
    "garbage index": ("index.faiss", _garbage, "cannot be read by FAISS"),
    "truncated npz": ("senses.npz", _truncate, "cannot be read"),
    "garbage npz": ("senses.npz", _garbage, "cannot be read"),
    "npy instead of npz": ("senses.npz", lambda p: _write_npy(p, np.zeros(20)), "single array"),
    "pickled npz": ("senses.npz", lambda p: _npz_with(p, norms=np.array([object()] * 20)), "cannot be read"),
    "npz without counts": ("senses.npz", lambda p: _write_npz(p, norms=np.ones(20), origins=np.zeros(20)),
                           "lack 'counts'"),
    "npz with short norms": ("senses.npz", lambda p: _npz_with(p, norms=np.ones(3)), "'norms' must be 20 numbers"),
    "npz with bad origins": ("senses.npz", lambda p: _npz_with(p, origins=np.full(20, 99)), "origins must be codes"),
    "npz with NaN norms": ("senses.npz", lambda p: _npz_with(p, norms=np.full(20, np.nan)), "norms must be finite"),
    "truncated meta": ("meta.json", _truncate, "not valid JSON"),
    "latin-1 meta": ("meta.json", _latin1, "not (valid )?UTF-8"),
    "meta with a bad dim": ("meta.json", lambda p: _edit_json(p, lambda v: v.__setitem__("dim", "8")),
                            "dim must be an integer"),
    "meta with another dim": ("meta.json", lambda p: _edit_json(p, lambda v: v.__setitem__("dim", 16)),
                              "inconsistent"),
    "meta with a bad embedder": ("meta.json", lambda p: _edit_json(p, lambda v: v.__setitem__("embedder", "m")),
                                 "'embedder' must be an object"),
    "latin-1 keys": ("keys.txt", lambda p: p.write_bytes(p.read_bytes() + "café\n".encode("latin-1")), "not UTF-8"),
    "truncated keys": ("keys.txt", _truncate, "truncated|n_senses"),
    "keys with a blank line": ("keys.txt", lambda p: p.write_text("\n" + p.read_text()), "line 1"),
    "keys repeated": ("keys.txt", lambda p: p.write_text("\n".join(["k0%1:00:00::"] * 20) + "\n"), "repeats"),
}


@pytest.mark.parametrize("damage", list(STORE_DAMAGE))
def test_a_damaged_sense_store_file_gives_one_error_naming_it(damage, tmp_path):
    directory = _saved_store(tmp_path / "store")
    name, damage_fn, message = STORE_DAMAGE[damage]
    damage_fn(directory / name)
    with pytest.raises(CorruptFileError, match=message) as info:
        SenseStore.load(directory)
    text = str(info.value)
    assert name in text or "inconsistent" in text
    assert "Error in " not in text


def test_an_empty_sense_store_round_trips(tmp_path):
    loaded = SenseStore.load(SenseStore(4).save(tmp_path / "empty"))
    assert len(loaded) == 0 and loaded.dim == 4


# ---------------------------------------------------------------------------------------------------------------
# the sense store never stores a vector it cannot represent


def test_sense_vectors_too_large_for_a_norm_are_refused_and_change_nothing():
    store = SenseStore(4)
    store.set_vectors(["a%1:00:00::"], np.ones((1, 4)))
    with pytest.raises(ValueError, match="too large"):
        store.set_vectors(["a%1:00:00::", "b%1:00:00::"], np.full((2, 4), 1e200))
    with pytest.raises(ValueError, match="too large"):
        store.add(["c%1:00:00::"], np.full((1, 4), -1e200))
    assert store.keys == ("a%1:00:00::",)
    np.testing.assert_allclose(store.vector("a%1:00:00::"), np.ones(4))
    store.add(["c%1:00:00::"], np.full((1, 4), 2.0))  # the store still works
    assert store.keys == ("a%1:00:00::", "c%1:00:00::") and store.count("c%1:00:00::") == 1
