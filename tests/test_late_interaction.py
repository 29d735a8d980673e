"""Late interaction: the residual codec, the compressed index against exhaustive MaxSim, saving and loading under
hostility, the ColBERT-convention encoder on a tiny model, the re-ranker and the retrievers that compose."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxemb.core.validation import CorruptFileError
from ctxemb.core.locks import DirectoryLock, DirectoryLockedError, lock_file_beside
from ctxemb.search.late import (LateInteractionConfig, LateInteractionEncoder, LateInteractionIndex, MaxSimReranker,
                                ResidualCodec, maxsim)
from ctxemb.search.late.codec import default_centroids


def _clustered_docs(n_docs=240, dim=32, n_topics=24, seed=0):
    rng = np.random.default_rng(seed)
    topics = rng.normal(size=(n_topics, dim))
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    docs = []
    for _ in range(n_docs):
        t = rng.integers(4, 30)
        v = topics[rng.integers(0, n_topics, t)] + 0.25 * rng.normal(size=(t, dim)) / np.sqrt(dim) * 4
        docs.append((v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32))
    return ["doc-%d" % i for i in range(n_docs)], docs


@pytest.fixture(scope="module")
def corpus():
    return _clustered_docs()


@pytest.fixture(scope="module")
def index(corpus):
    ids, docs = corpus
    return LateInteractionIndex(32, nbits=4).add(ids[:150], docs[:150]).add(ids[150:], docs[150:])


def test_codec_round_trip_is_close_and_more_bits_are_closer(corpus):
    _, docs = corpus
    x = np.concatenate(docs)
    errors = {}
    for nbits in (1, 2, 4, 8):
        codec = ResidualCodec.fit(x, n_centroids=64, nbits=nbits)
        codes, packed = codec.compress(x)
        assert packed.shape == (len(x), 32 * nbits // 8) and packed.dtype == np.uint8
        assert codec.bytes_per_vector == 32 * nbits // 8 + 2
        y = codec.decompress(codes, packed)
        assert np.allclose(np.linalg.norm(y, axis=1), 1, atol=1e-5)
        errors[nbits] = float(np.mean(np.sum(x * y, axis=1)))
    assert errors[1] < errors[2] < errors[4] < errors[8] and errors[8] > 0.999 and errors[2] > 0.9
    assert default_centroids(1_500_000) == 16384 and default_centroids(100) == 8


def test_decompression_is_the_centroid_plus_each_dimensions_bucket_value_normalised(corpus):
    """The decoding table gives what the definition gives: each dimension's packed bucket id, little end first."""
    x = np.concatenate(corpus[1])
    for nbits in (1, 2, 4, 8):
        codec = ResidualCodec.fit(x, n_centroids=16, nbits=nbits)
        codes, packed = codec.compress(x[:50])
        per_byte = 8 // nbits
        buckets = np.array([[(int(row[j // per_byte]) >> (nbits * (j % per_byte))) & (2 ** nbits - 1)
                             for j in range(32)] for row in packed])
        expected = codec.centroids[codes.astype(int)] + codec.values[np.arange(32), buckets]
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        assert np.allclose(codec.decompress(codes, packed), expected, atol=1e-6)


def test_search_with_every_document_a_candidate_equals_exhaustive_maxsim_on_the_decompressed_vectors(corpus, index):
    ids, docs = corpus
    decompressed = [index.document_vectors(i) for i in ids]
    for q in range(0, 240, 40):
        query = docs[q][:6]
        hits = index.search(query, 10, candidates=1000)
        exact = maxsim(query, decompressed)
        order = np.lexsort((np.arange(len(ids)), -exact))[:10]
        assert [h[0] for h in hits] == [ids[i] for i in order]
        assert np.allclose([h[1] for h in hits], exact[order], atol=1e-4)


def test_candidate_generation_finds_the_exhaustive_top_10(corpus, index):
    """The candidate stage alone: against exhaustive MaxSim over the same (decompressed) vectors."""
    ids, docs = corpus
    decompressed = [index.document_vectors(i) for i in ids]
    recall = []
    for q in range(0, 240, 8):
        query = docs[q][:8]
        top = set(np.argsort(-maxsim(query, decompressed))[:10].tolist())
        found = {int(h[0].split("-")[1]) for h in index.search(query, 10, nprobe=8, candidates=64)}
        recall.append(len(top & found) / 10)
    assert np.mean(recall) >= 0.95


def test_save_load_round_trip_is_exact_memory_mapped_or_not(tmp_path, corpus, index):
    ids, docs = corpus
    index.save(tmp_path / "ix")
    query = docs[3][:5]
    expected = index.search(query, 10, candidates=64)
    for mmap in (True, False):
        loaded = LateInteractionIndex.load(tmp_path / "ix", mmap=mmap)
        assert loaded.search(query, 10, candidates=64) == expected
        assert len(loaded) == 240 and loaded.ids == ids
    loaded = LateInteractionIndex.load(tmp_path / "ix")
    assert isinstance(loaded._shards[0].codes, np.memmap)


def test_remove_add_and_restriction_to_ids(tmp_path, corpus):
    ids, docs = corpus
    ix = LateInteractionIndex(32, nbits=2).add(ids[:100], docs[:100])
    top = ix.search(docs[5][:4], 1)[0][0]
    ix.remove([top])
    assert top not in ix and top not in [h[0] for h in ix.search(docs[5][:4], 100, candidates=1000)]
    with pytest.raises(KeyError, match="not in the index"):
        ix.remove([top])
    with pytest.raises(ValueError, match="already in the index"):
        ix.add([ids[1]], [docs[1]])
    ix.add([top], [docs[7]])  # a removed id can be added again, with new vectors
    assert top in ix and (np.sum(ix.document_vectors(top) * docs[7], axis=1) > 0.8).all()
    ix.remove([top])
    hits = ix.search(docs[5][:4], 10, ids=["doc-7", "doc-9"])
    assert sorted(h[0] for h in hits) == ["doc-7", "doc-9"]
    with pytest.raises(KeyError, match="doc-999"):
        ix.search(docs[5][:4], 10, ids=["doc-999"])
    ix.save(tmp_path / "ix")
    again = LateInteractionIndex.load(tmp_path / "ix").add(ids[100:120], docs[100:120])
    again.save()
    final = LateInteractionIndex.load(tmp_path / "ix")
    assert len(final) == 119 and top not in final and "doc-119" in final
    assert final._ids.count(None) == 1  # the first label of the id added twice


@pytest.mark.parametrize("bad, message", [
    (dict(ids=["a", "a"], docs=2), "given twice"),
    (dict(ids=["a"], docs=[np.zeros((0, 32), np.float32)]), "no token vector"),
    (dict(ids=["a"], docs=[np.ones((3, 16), np.float32)]), r"must be \(T, 32\)"),
    (dict(ids=["a"], docs=[np.full((3, 32), np.nan, np.float32)]), "non-finite"),
    (dict(ids=["a", "b"], docs=1), "ids has 2 entries but documents has 1"),
    (dict(ids=[7], docs=1), "must be a non-empty str"),
])
def test_bad_additions_change_nothing(corpus, bad, message):
    _, docs = corpus
    ix = LateInteractionIndex(32).add(["x", "y"], docs[:2])
    new_docs = bad["docs"] if not isinstance(bad["docs"], int) else docs[:bad["docs"]]
    with pytest.raises((ValueError, TypeError), match=message):
        ix.add(bad["ids"], new_docs)
    assert ix.ids == ["x", "y"] and ix.n_tokens == len(docs[0]) + len(docs[1])


def test_empty_index_and_bad_queries(corpus):
    ix = LateInteractionIndex(32)
    assert ix.search(np.ones((2, 32), np.float32), 5) == [] and len(ix) == 0
    with pytest.raises(ValueError, match=r"query must be \(Tq, 32\)"):
        ix.search(np.ones((2, 8), np.float32), 5)
    with pytest.raises(ValueError, match="k must"):
        ix.search(np.ones((2, 32), np.float32), 0)


def test_a_second_writer_is_refused_and_a_stale_writer_cannot_overwrite(tmp_path, corpus):
    ids, docs = corpus
    LateInteractionIndex(32).add(ids[:20], docs[:20]).save(tmp_path / "ix")
    first = LateInteractionIndex.load(tmp_path / "ix")
    second = LateInteractionIndex.load(tmp_path / "ix")
    with DirectoryLock(lock_file_beside(tmp_path / "ix"), what="test").hold():
        with pytest.raises(DirectoryLockedError):
            first.add(ids[20:22], docs[20:22]).save()
    first.save()
    with pytest.raises(RuntimeError, match="saved by another writer"):
        second.remove(["doc-0"]).save()
    assert "doc-0" in LateInteractionIndex.load(tmp_path / "ix") and len(LateInteractionIndex.load(tmp_path / "ix")) == 22


def test_corrupt_saves_are_named(tmp_path, corpus):
    ids, docs = corpus
    LateInteractionIndex(32).add(ids[:20], docs[:20]).save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    shard = manifest["shards"][0]["name"]
    np.save(tmp_path / "ix" / shard / "codes.npy", np.zeros(3, np.uint16))
    with pytest.raises(CorruptFileError, match="do not agree with the manifest"):
        LateInteractionIndex.load(tmp_path / "ix")
    (tmp_path / "ix" / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(CorruptFileError, match="not a late-interaction index"):
        LateInteractionIndex.load(tmp_path / "ix")
    with pytest.raises(FileNotFoundError):
        LateInteractionIndex.load(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------- the encoder
@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    from ctxemb import Embedder
    from tests.helpers import write_tiny_model

    return Embedder.from_pretrained(write_tiny_model(tmp_path_factory.mktemp("m") / "tiny", num_hidden_layers=4),
                                    precision="fp32")


def test_queries_are_padded_with_masks_that_nothing_attends_to(embedder):
    enc = LateInteractionEncoder(embedder, LateInteractionConfig(query_length=12, markers=("bat", "cell")))
    ids, mask = enc.query_inputs(["the river bank"])
    tok = embedder.tokenizer
    assert ids.shape == (1, 12) and ids[0, 1] == tok.backend.token_to_id("bat")
    n = int(mask.sum())
    assert (ids[0, n:] == tok.mask_token_id).all() and ids[0, n - 1] == tok.sep_token_id
    vectors = enc.encode_queries(["the river bank", "money"])
    assert vectors.shape == (2, 12, 32) and np.allclose(np.linalg.norm(vectors, axis=-1), 1, atol=1e-5)
    # the real tokens do not see the masks: a longer padding leaves them unchanged
    longer = LateInteractionEncoder(embedder, LateInteractionConfig(query_length=20, markers=("bat", "cell")))
    assert np.allclose(longer.encode_queries("the river bank")[:n], vectors[0, :n], atol=1e-5)
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        LateInteractionEncoder(embedder, LateInteractionConfig(markers=("[unused0]", "[unused1]")))


def test_documents_drop_punctuation_and_windows_keep_every_token(embedder):
    text = "the river bank , money . " * 12  # 72 tokens, 24 of them punctuation
    truncated = LateInteractionEncoder(embedder, LateInteractionConfig(document_length=32))
    windowed = LateInteractionEncoder(embedder, LateInteractionConfig(document_length=32, long_documents="window"))
    kept = LateInteractionEncoder(embedder, LateInteractionConfig(document_length=32, skip_punctuation=False))
    assert truncated.encode_documents([text])[0].shape == (2 + 20, 32)  # [CLS], 30 tokens less 10 punctuation, [SEP]
    assert kept.encode_documents([text])[0].shape == (32, 32)
    assert windowed.encode_documents([text])[0].shape == (2 + 48, 32)
    short = "the river bank"
    assert np.allclose(windowed.encode_documents([short])[0], truncated.encode_documents([short])[0], atol=1e-6)


def test_a_projection_must_be_bias_free_and_fit(embedder):
    import torch

    enc = LateInteractionEncoder(embedder, projection=np.eye(8, 32, dtype=np.float32))
    assert enc.dim == 8 and enc.encode_documents(["the bank"])[0].shape[1] == 8
    with pytest.raises(ValueError, match="no bias"):
        LateInteractionEncoder(embedder, projection=torch.nn.Linear(32, 8))
    with pytest.raises(ValueError, match="takes 16 inputs"):
        LateInteractionEncoder(embedder, projection=np.ones((8, 16), np.float32))


def test_reranker_and_retrievers_compose(embedder):
    from ctxemb.search.retrievers import (BM25Retriever, FusionRetriever, LateInteractionRetriever,
                                          RerankRetriever)

    corpus = {"a": "the river bank", "b": "money on the bank", "c": "she sat on a plant", "d": "bats and mice"}
    queries = {"q1": "river bank", "q2": "money", "q3": "the of a"}
    enc = LateInteractionEncoder(embedder, LateInteractionConfig(query_augmentation=False))
    exhaustive = LateInteractionRetriever(enc, corpus, exhaustive=True)
    indexed = LateInteractionRetriever(enc, corpus, n_centroids=4, candidates=10)
    run = exhaustive.retrieve(queries, 3)
    assert all(len(r) == 3 for r in run.values())
    reranked = MaxSimReranker(enc).rerank("river bank", corpus, 3)
    assert list(reranked) == list(run["q1"]) and np.allclose(list(reranked.values()), list(run["q1"].values()),
                                                             atol=1e-5)
    assert list(indexed.retrieve(queries, 4)) == ["q1", "q2", "q3"]
    bm25 = BM25Retriever(corpus)
    assert bm25.retrieve(queries, 3)["q3"] == {}  # only stop words: an empty ranking, not an error
    fused = FusionRetriever([bm25, exhaustive], depth=4).retrieve(queries, 2)
    assert all(len(r) <= 2 for r in fused.values())
    rerank = RerankRetriever(bm25, MaxSimReranker(enc), corpus, depth=3).retrieve(queries, 2)
    assert set(rerank["q1"]) <= set(bm25.retrieve(queries, 3)["q1"])
    with pytest.raises(ValueError, match="corpus is empty"):
        BM25Retriever({})


def test_token_pooling_merges_duplicates_exactly_and_shrinks_by_the_factor(corpus):
    from ctxemb.search.late.pooling import pool_tokens

    _, docs = corpus
    doc = docs[0]
    assert np.allclose(pool_tokens(doc, 1), doc, atol=1e-6)
    pooled = pool_tokens(doc, 2)
    assert len(pooled) <= -(-len(doc) // 2) and np.allclose(np.linalg.norm(pooled, axis=1), 1, atol=1e-5)
    twice = np.concatenate([doc[:5], doc[:5]])  # every token twice: pooling by 2 gives the 5 tokens back
    back = pool_tokens(twice, 2)
    assert len(back) == 5 and np.allclose(np.sort(back @ doc[:5].T, axis=1)[:, -1], 1, atol=1e-5)
    with pytest.raises(ValueError, match="pool_factor"):
        pool_tokens(doc, 0)


def test_dense_chunking_naive_and_late(embedder):
    from ctxemb.search.retrievers import DenseRetriever

    corpus = {"long": "the river bank sat on a money plant " * 6, "short": "bats and mice"}
    for chunking in ("naive", "late"):
        r = DenseRetriever(embedder, corpus, chunking=chunking, chunk_tokens=10, show_progress_bar=False)
        assert r._index.ntotal == 6 and list(r._owner).count(0) == 5
        run = r.retrieve({"q": "river bank"}, 2)
        assert set(run["q"]) == {"long", "short"}
    with pytest.raises(ValueError, match="chunking must be"):
        DenseRetriever(embedder, corpus, chunking="eager")
