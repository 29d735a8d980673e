"""The MTEB adapter: MTEB's encoder interface, prompt choice, and an MTEB STS task over local data whose score equals
ctxemb's own STS-B harness on the same model (MTEB cannot download data here). Skipped where mteb is not installed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ctxemb.embedding.embedder import Embedder
from ctxemb.evaluation.mteb_encoder import MTEBEncoder, local_sts_task, stsb_task
from ctxemb.evaluation.similarity.records import SentencePair
from ctxemb.evaluation.similarity.sentences import evaluate_sentence_similarity
from tests.helpers import write_tiny_model

PAIRS = [SentencePair(a, b, s) for a, b, s in [
    ("the river bank.", "a bank of the river.", 4.5), ("she sat on a plant.", "he sat on money.", 2.0),
    ("bats die.", "the mouse sang.", 0.5), ("cells of a plant.", "plant cells.", 4.8),
    ("money in the bank.", "the river.", 1.0), ("she was singing.", "she sang.", 4.0),
    ("a bat sat.", "bats sat on the bank.", 3.1), ("the money plant died.", "a mouse!", 0.2)]]


@pytest.fixture(scope="module")
def tiny_embedder(tmp_path_factory):
    return Embedder.from_pretrained(write_tiny_model(tmp_path_factory.mktemp("tiny") / "m", num_hidden_layers=3),
                                   batch_size=3)


def test_encode_takes_lists_and_mteb_batches_and_chooses_prompts(tiny_embedder):
    enc = MTEBEncoder(tiny_embedder, prompts={"query": "a ", "STS": "the ", "LocalSTS-document": "bank "},
                      normalize=True)
    texts = [p.sentence1 for p in PAIRS]
    sts = SimpleNamespace(name="LocalSTS", type="STS")
    plain = enc.encode(texts)
    assert plain.dtype == np.float32 and plain.shape == (len(texts), 32)
    np.testing.assert_allclose(np.linalg.norm(plain, axis=1), 1.0, rtol=1e-5)
    batches = [{"text": texts[:3]}, {"text": texts[3:]}]
    query = SimpleNamespace(value="query")
    document = SimpleNamespace(value="document")
    np.testing.assert_array_equal(enc.encode(batches, task_metadata=sts),
                                  tiny_embedder.embed_sentences(texts, prompt="the ", normalize=True,
                                                                show_progress_bar=False))
    assert enc.prompt_for(sts, query) == "the "  # the task type comes before the prompt type
    assert enc.prompt_for(sts, document) == "bank "  # "<task>-<type>" comes first
    assert enc.prompt_for(SimpleNamespace(name="X", type="Retrieval"), query) == "a "
    assert enc.prompt_for(SimpleNamespace(name="X", type="Retrieval"), document) is None
    sim = enc.similarity(plain[:3], plain)
    assert sim.shape == (3, len(texts))
    np.testing.assert_allclose(enc.similarity_pairwise(plain, plain[::-1]), (plain * plain[::-1]).sum(1), rtol=1e-5)
    with pytest.raises(TypeError, match="'text' column"):
        enc.encode([{"image": [1]}])
    with pytest.raises(TypeError, match="set per call"):
        MTEBEncoder(tiny_embedder, prompt="x")


def test_meets_mteb_encoder_protocol(tiny_embedder):
    mteb = pytest.importorskip("mteb", reason="mteb is an optional extra (pip install 'ctxemb[mteb]')")
    enc = MTEBEncoder(tiny_embedder)
    assert isinstance(enc, mteb.models.EncoderProtocol)
    meta = enc.mteb_model_meta
    assert meta.name == "ctxemb/m" and meta.embed_dim == 32 and meta.max_tokens == 64
    assert str(getattr(meta.similarity_fn_name, "value", meta.similarity_fn_name)) == "cosine"


def _harness_spearman(embedder, pairs) -> float:
    rows = evaluate_sentence_similarity(embedder, {"dev": pairs}, task="stsb", poolings=["mean"],
                                        show_progress_bar=False)
    return next(r.value for r in rows if r.metric == "spearman")


def test_local_task_score_equals_ctxemb_harness_tiny(tiny_embedder):
    mteb = pytest.importorskip("mteb", reason="mteb is an optional extra (pip install 'ctxemb[mteb]')")
    task = local_sts_task({"dev": PAIRS}, name="TinySTS")
    # the harness scores mean pooling of the last layer: ask MTEB for the same vectors
    result = mteb.evaluate(MTEBEncoder(tiny_embedder, layers=[-1], pooling="mean"), task, cache=None,
                           show_progress_bar=False)
    score = result.task_results[0].scores["dev"][0]
    assert score["main_score"] == score["cosine_spearman"]
    assert abs(100 * score["cosine_spearman"] - _harness_spearman(tiny_embedder, PAIRS)) < 1e-6
    with pytest.raises(ValueError, match="outside"):
        local_sts_task({"dev": [SentencePair("a", "b", 7.0)]})


@pytest.mark.parametrize("limit", [40, pytest.param(None, marks=pytest.mark.slow)])
def test_stsb_dev_score_equals_ctxemb_harness(shared_data, limit):
    """MTEB's STS evaluation of all-MiniLM-L6-v2 (its sentence-transformers defaults) on local STS-B dev equals
    ctxemb's STS-B harness (mean pooling of the last layer, cosine, Spearman x 100)."""
    mteb = pytest.importorskip("mteb", reason="mteb is an optional extra (pip install 'ctxemb[mteb]')")
    from ctxemb.evaluation.similarity.data import load_stsb

    emb = Embedder.from_pretrained("all-MiniLM-L6-v2")
    task = stsb_task("dev", shared_data / "similarity", limit=limit)
    result = mteb.evaluate(MTEBEncoder(emb), task, cache=None, show_progress_bar=False)
    ours = _harness_spearman(emb, load_stsb("dev", shared_data / "similarity")[:limit])
    assert abs(100 * result.task_results[0].scores["dev"][0]["cosine_spearman"] - ours) < 1e-6
