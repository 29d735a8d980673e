"""Corpus embedding and index building on Ray: a local cluster of two nodes (a head and a worker, separate
processes, one CPU each) embeds a corpus with a pool of two actors into vector shards, and the results must be the
one-process build's: the same vectors bit for bit in the same rows, indexes that answer with the same ids and scores.
A rerun embeds only a missing shard; an actor killed in the middle of writing a shard loses and duplicates no row;
bad input is refused before anything is written.

Skipped where Ray is not installed (``pip install "ctxemb[ray]"``), except the check of the error that names it.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxemb.embedding.corpus import embed_corpus_to_file
from ctxemb.embedding.embedder import Embedder
from ctxemb.embedding.ray_corpus import KILL_ENV, embed_corpus_ray
from ctxemb.embedding.vector_shards import MANIFEST_FILE, read_vector_shards, shard_name
from ctxemb.search import (
    IVFPQParams,
    SemanticIndex,
    build_sentence_index,
    query_sentences,
)
from ctxemb.search.ray_build import build_index_ray
from tests.helpers import write_tiny_model

WORDS = "the bank river money sat on of he she a mouse die cell plant bat".split()
N_TEXTS, SHARD_ROWS = 60, 16  # four shards: 16, 16, 16 and 12 rows
TIME_BUDGET = 240  # seconds for any one test (the cluster's start included)
OPTIONS = dict(shard_rows=SHARD_ROWS, num_actors=2, show_progress_bar=False)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the actors run one torch thread each too


def _texts(n: int, seed: int = 0) -> list[str]:
    """Texts of very uneven lengths (1 to 150 words; the longest are cut into windows by the tiny model)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice((1, 2, 3, 5, 8, 20, 40, 90, 150))))
            for _ in range(n)]


@pytest.fixture(autouse=True)
def time_budget():
    """Fail a test (instead of hanging the suite) if a Ray job never finishes."""
    def expire(*_):
        raise TimeoutError(f"the test took more than its budget of {TIME_BUDGET} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TIME_BUDGET)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def kill_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kill")


@pytest.fixture(scope="module")
def cluster(kill_dir):
    """A head and a worker node, each its own raylet and processes on this machine, one CPU and 80 MB of object
    store each; the actors' kill switch (KILL_ENV) is in their environment."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KILL_ENV, str(kill_dir))
        node = dict(num_cpus=1, object_store_memory=80 * 2**20)
        c = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
        try:
            c.add_node(**node)
            ray.init(address=c.address, logging_level="WARNING")
            c.wait_for_nodes()
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "m", num_hidden_layers=4, max_position_embeddings=64)


@pytest.fixture(scope="module")
def emb(model):
    return Embedder.from_pretrained(model, batch_size=4)


@pytest.fixture(scope="module")
def texts():
    return _texts(N_TEXTS)


@pytest.fixture(scope="module")
def reference(emb, texts, tmp_path_factory):
    """The one-process build (embed_corpus_to_file, which the torchrun build equals bit for bit)."""
    return embed_corpus_to_file(emb, texts, tmp_path_factory.mktemp("ref") / "v.npy", show_progress_bar=False).load()


@pytest.fixture(scope="module")
def built(cluster, emb, texts, tmp_path_factory):
    return embed_corpus_ray(emb, texts, tmp_path_factory.mktemp("ray") / "shards", **OPTIONS)


def _listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


SHARD_DIRS = [shard_name(k) for k in range(4)]


def test_the_vectors_are_the_one_process_builds_bit_for_bit(built, reference, cluster):
    assert (built.num_texts, built.dim, built.num_shards, built.embedded) == (N_TEXTS, 32, 4, (0, 1, 2, 3))
    shards = built.shards()
    assert shards.read_ids().tolist() == list(range(N_TEXTS))  # every row once, in order
    assert np.array_equal(built.load(), reference)
    import ray

    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2 and set(built.writers) == {0, 1, 2, 3}
    assert {node for node, _ in built.writers.values()} <= nodes  # written by actors of the cluster's nodes
    assert _listing(built.directory) == [".ctxemb.lock"] + SHARD_DIRS + [MANIFEST_FILE]  # no temporary left


def test_a_flat_index_from_the_shards_answers_like_the_one_process_build(built, emb, texts, tmp_path):
    meta = [{"line": i + 1} for i in range(N_TEXTS)]
    index = build_index_ray(built.directory, tmp_path / "flat", metadata=meta, show_progress_bar=False)
    ref = build_sentence_index(emb, texts, metadata=meta, batch_size=4, show_progress_bar=False)  # the same batches
    assert index.recipe == ref.recipe and index.embedder_config == ref.embedder_config
    loaded = SemanticIndex.load(tmp_path / "flat", expected_config=emb.config.to_dict())
    queries = emb.embed_sentences(_texts(12, seed=5), show_progress_bar=False)
    for got in (index, loaded):
        s, i = got.search_array(queries, k=7)
        s_ref, i_ref = ref.search_array(queries, k=7)
        assert np.array_equal(i, i_ref) and np.array_equal(s, s_ref)
    hits = query_sentences(loaded, emb, "the river bank", k=3)  # queried as an index of sentences
    assert [h.id for h in hits] == [h.id for h in query_sentences(ref, emb, "the river bank", k=3)]
    assert loaded.get_metadata("7") == {"line": 8}


def test_an_ivfpq_index_from_the_shards_answers_like_the_one_process_build(built, emb, texts, tmp_path):
    params = IVFPQParams(nlist=4, pq_m=4, nbits=4, nprobe=2, k_factor=2, seed=3, on_disk=True)
    ids = ["doc-%02d" % i for i in range(N_TEXTS)]
    index = build_index_ray(built, tmp_path / "ivf", ids=ids, params=params, show_progress_bar=False)
    ref = build_sentence_index(emb, texts, ids, params=params, directory=tmp_path / "ref", store_text=False,
                               batch_size=4, show_progress_bar=False)
    assert index.kind == "ivfpq" and index.ids == ids and index.recipe == ref.recipe
    queries = emb.embed_sentences(_texts(12, seed=6), show_progress_bar=False)
    for nprobe in (1, 2, 4):
        s, i = index.search_array(queries, k=5, nprobe=nprobe)
        s_ref, i_ref = ref.search_array(queries, k=5, nprobe=nprobe)
        assert np.array_equal(i, i_ref) and np.array_equal(s, s_ref)
    assert not [p for p in os.listdir(tmp_path) if "ray-build" in p]  # the work directory is gone


def test_a_rerun_embeds_only_the_missing_shard(built, emb, texts, reference, tmp_path):
    out = tmp_path / "shards"
    shutil.copytree(built.directory, out)
    shutil.rmtree(out / shard_name(1))
    before = {k: os.stat(out / shard_name(k) / "vectors.npy") for k in (0, 2, 3)}
    again = embed_corpus_ray(emb, texts, out, shard_rows=SHARD_ROWS, show_progress_bar=False)  # actors: the CPUs'
    assert again.embedded == (1,) and set(again.writers) == {1}
    for k, st in before.items():  # the others were neither rewritten nor replaced
        now = os.stat(out / shard_name(k) / "vectors.npy")
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert np.array_equal(again.load(), reference)
    done = embed_corpus_ray(emb, texts, out, **OPTIONS)  # complete: no Ray job at all
    assert done.embedded == () and done.writers == {}


def test_an_actor_killed_while_writing_a_shard_loses_and_duplicates_no_row(cluster, kill_dir, emb, texts,
                                                                           reference, tmp_path):
    (kill_dir / shard_name(2)).touch()  # the actor that writes shard 2 SIGKILLs itself before the rename, once
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]  # the texts as two files, read in order
    files[0].write_text("\n".join(texts[:25]) + "\n")
    files[1].write_text("\n".join(texts[25:]))
    result = embed_corpus_ray(emb, files, tmp_path / "shards", **OPTIONS)
    killed = kill_dir / f"killed-{shard_name(2)}"
    assert killed.exists() and not (kill_dir / shard_name(2)).exists()  # the kill happened
    assert result.writers[2][1] != int(killed.read_text())  # a replacement actor wrote the shard
    assert result.shards().read_ids().tolist() == list(range(N_TEXTS))
    assert np.array_equal(result.load(), reference)
    assert _listing(tmp_path / "shards") == [".ctxemb.lock"] + SHARD_DIRS + [MANIFEST_FILE]  # its temporary is gone


def test_bad_input_is_refused_before_anything_is_written(built, emb, texts, tmp_path):
    with pytest.raises(ValueError, match="texts is empty"):
        embed_corpus_ray(emb, [], tmp_path / "a", **OPTIONS)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        embed_corpus_ray(emb, [Path(tmp_path / "missing.txt")], tmp_path / "a", **OPTIONS)
    with pytest.raises(TypeError, match="single str"):
        embed_corpus_ray(emb, "one text", tmp_path / "a", **OPTIONS)
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        embed_corpus_ray(emb, ["a text", "  "], tmp_path / "a", **OPTIONS)
    with pytest.raises(ValueError, match="shard_rows"):
        embed_corpus_ray(emb, texts, tmp_path / "a", **{**OPTIONS, "shard_rows": 0})
    assert not (tmp_path / "a").exists()
    # a directory holding another model's shards: refused, naming its manifest and what differs; left as it was
    other = write_tiny_model(tmp_path / "other", num_hidden_layers=4, seed=1)  # given by its path
    manifest = built.directory / MANIFEST_FILE
    before = manifest.read_bytes()
    with pytest.raises(ValueError, match=f"{manifest}.*another job(.|\n)*model weights \\(fingerprint\\)"):
        embed_corpus_ray(other, texts, built.directory, **OPTIONS)
    assert manifest.read_bytes() == before and read_vector_shards(built.directory).missing() == []
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="busy.*not empty"):
        embed_corpus_ray(emb, texts, tmp_path / "busy", **OPTIONS)
    # an index from an unfinished shard directory, from no shard directory, or over an existing index
    partial = tmp_path / "partial"
    shutil.copytree(built.directory, partial)
    shutil.rmtree(partial / shard_name(3))
    with pytest.raises(FileNotFoundError, match="shard-00003"):
        build_index_ray(partial, tmp_path / "index")
    with pytest.raises(FileNotFoundError, match="holds no shards.json"):
        build_index_ray(tmp_path / "busy", tmp_path / "index")
    with pytest.raises(FileExistsError, match="exists"):
        build_index_ray(built.directory, tmp_path / "busy")
    with pytest.raises(ValueError, match="ids has 3 entries"):
        build_index_ray(built.directory, tmp_path / "index", ids=["a", "b", "c"])
    assert not (tmp_path / "index").exists()


def test_without_ray_the_error_names_the_extra(emb, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    with pytest.raises(ImportError, match=r'pip install "ctxemb\[ray\]"'):
        embed_corpus_ray(emb, ["a text"], tmp_path / "shards", show_progress_bar=False)
    assert not (tmp_path / "shards").exists()


def test_the_shard_directory_writes_whole_shards_and_replaces_another_jobs_only_when_asked(tmp_path):
    """The format alone (no Ray): a shard is complete only with its rows' ids and vectors; a truncated file makes it
    missing again; overwrite=True clears another job's shards and nothing else."""
    from ctxemb.embedding.vector_shards import ShardLayout, prepare_shard_directory, write_shard

    layout = ShardLayout(num_rows=10, dim=3, shard_rows=4)  # rows [0, 4), [4, 8), [8, 10)
    shards = prepare_shard_directory(tmp_path / "s", layout, {"model": "a"})
    assert shards.num_shards == 3 and shards.missing() == [0, 1, 2]
    rows = np.arange(30, dtype=np.float32).reshape(10, 3)
    for k in range(3):
        first, end = layout.bounds(k)
        write_shard(shards, k, rows[first:end])
    assert shards.missing() == [] and np.array_equal(shards.load(), rows)
    assert shards.read_ids().tolist() == list(range(10))
    with pytest.raises(ValueError, match=r"expected \(2, 3\) vectors"):
        write_shard(shards, 2, rows[:4])
    with pytest.raises(ValueError, match="row 9 holds a NaN"):
        write_shard(shards, 2, np.array([[0, 0, 0], [0, np.nan, 0]], dtype=np.float32))
    vectors = shards.shard_dir(1) / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-4])  # truncated after the fact
    assert shards.missing() == [1]
    assert prepare_shard_directory(tmp_path / "s", layout, {"model": "a"}).missing() == [1]  # the same job: resumed
    with pytest.raises(ValueError, match=r"shards\.json records the shards of another job(.|\n)*model: the "
                                         r"directory has 'a', this call 'b'"):
        prepare_shard_directory(tmp_path / "s", layout, {"model": "b"})
    (tmp_path / "s" / "notes.txt").write_text("mine")
    again = prepare_shard_directory(tmp_path / "s", layout, {"model": "b"}, overwrite=True)
    assert again.missing() == [0, 1, 2] and again.job == {"model": "b"}
    assert _listing(tmp_path / "s") == ["notes.txt", MANIFEST_FILE]  # only its own files went
