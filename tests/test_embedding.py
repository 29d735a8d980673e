"""Embedder guarantees: layer and subword pooling, batch/padding invariance, spans, sentences, memory maps."""

import numpy as np
import pytest
import torch

from ctxemb.embedding.embedder import Embedder, EmbedderConfig
from ctxemb.modeling.loading import load_encoder
from tests.helpers import write_tiny_model

SENTS = [["the", "banks", "of", "the", "river"], ["she", "sat"], ["a", "mouse", "die", "bat", "cell", "plant", "the"],
         ["money"]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "m", num_hidden_layers=4)


@pytest.fixture(scope="module")
def emb(tiny):
    return Embedder.from_pretrained(tiny)


def _all_states(tiny, emb, words):
    """Reference: run the encoder on one sentence and return all hidden states (L+1, T+2, H)."""
    [item] = emb.tokenizer.tokenize_words([words])
    ids, _ = emb.tokenizer.with_specials(item.ids)
    with torch.inference_mode():
        out = load_encoder(tiny)(torch.tensor([ids]))
    return torch.stack(out.hidden_states)[:, 0], item


def test_default_is_mean_of_last_four_layers_and_mean_of_subwords(tiny, emb):
    states, item = _all_states(tiny, emb, SENTS[0])
    [vecs] = emb.embed_words([SENTS[0]], show_progress_bar=False, output="torch")
    pooled = states[-4:].mean(0)[1:-1]
    s, e = item.word_spans[1]  # "banks" = bank ##s
    assert e - s == 2
    torch.testing.assert_close(vecs[1], pooled[s:e].mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vecs[0], pooled[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pooling", ["mean", "sum", "concat", "weighted", "stack"])
def test_layer_poolings(tiny, emb, pooling):
    states, item = _all_states(tiny, emb, SENTS[2])
    layers = [0, 2, -1]
    sel = states[[0, 2, 4]][:, 1:-1]  # (3, T, H)
    weights = [1.0, 2.0, 3.0] if pooling == "weighted" else None
    [v] = emb.embed_words([SENTS[2]], layers=layers, layer_pooling=pooling, layer_weights=weights,
                          subword_pooling="first", show_progress_bar=False, output="torch")
    firsts = [s for s, _ in item.word_spans]
    expected = {
        "mean": lambda: sel.mean(0), "sum": lambda: sel.sum(0), "concat": lambda: sel.permute(1, 0, 2).flatten(1),
        "weighted": lambda: (sel * torch.tensor(weights)[:, None, None]).sum(0) / 6.0,
        "stack": lambda: sel.permute(1, 0, 2),
    }[pooling]()[firsts]
    torch.testing.assert_close(v, expected, rtol=1e-5, atol=1e-5)


def test_first_and_last_subword(tiny, emb):
    states, item = _all_states(tiny, emb, SENTS[0])
    pooled = states[-4:].mean(0)[1:-1]
    s, e = item.word_spans[1]
    [first] = emb.embed_words([SENTS[0]], subword_pooling="first", show_progress_bar=False, output="torch")
    [last] = emb.embed_words([SENTS[0]], subword_pooling="last", show_progress_bar=False, output="torch")
    torch.testing.assert_close(first[1], pooled[s])
    torch.testing.assert_close(last[1], pooled[e - 1])


def test_independent_of_batch_size_and_padding(emb):
    ref = [emb.embed_words([s], show_progress_bar=False)[0] for s in SENTS]
    for bs in (1, 2, 3, 16):
        got = emb.embed_words(SENTS, batch_size=bs, show_progress_bar=False)
        for a, b in zip(ref, got):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_caller_order_restored(emb):
    got = emb.embed_words(SENTS, show_progress_bar=False)
    assert [g.shape[0] for g in got] == [len(s) for s in SENTS]


def test_bad_layer_index_names_valid_range(emb):
    with pytest.raises(ValueError, match=r"valid indices are -5\.\.4"):
        emb.embed_words(SENTS, layers=[5], show_progress_bar=False)
    with pytest.raises(ValueError, match="layer_pooling must be one of"):
        EmbedderConfig(layer_pooling="max")
    with pytest.raises(ValueError, match="one weight per layer"):
        emb.embed_words(SENTS, layer_pooling="weighted", layer_weights=[1.0], show_progress_bar=False)


def test_spans(emb):
    words = emb.embed_words(SENTS[:2], show_progress_bar=False)
    mean = emb.embed_spans(SENTS[:2], [(1, 4), (0, 2)], show_progress_bar=False)
    np.testing.assert_allclose(mean[0], words[0][1:4].mean(0), rtol=1e-5, atol=1e-6)
    ends = emb.embed_spans(SENTS[:2], [(1, 4), (0, 2)], mode="endpoints", show_progress_bar=False)
    assert ends.shape == (2, 3 * emb.dim)
    np.testing.assert_allclose(ends[0], np.concatenate([words[0][1], words[0][3], words[0][1:4].mean(0)]),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"spans\[1\] = \(0, 3\)"):
        emb.embed_spans(SENTS[:2], [(1, 4), (0, 3)], show_progress_bar=False)


def test_tokens_and_character_spans(emb):
    [t] = emb.embed_tokens(["the banks of the river"], show_progress_bar=False)
    [w] = emb.embed_words([["the", "banks", "of", "the", "river"]], show_progress_bar=False)
    np.testing.assert_allclose(t.span(4, 9), w[1], rtol=1e-5, atol=1e-6)


def test_sentences_cls_mean_single_and_memmap(emb, tmp_path):
    texts = ["the bank of the river", "she sat", "money"]
    mean = emb.embed_sentences(texts, layers=[-1], show_progress_bar=False)
    [t] = emb.embed_tokens(["she sat"], layers=[-1], show_progress_bar=False)
    assert mean.shape == (3, emb.hidden_size) and mean.dtype == np.float32
    single = emb.embed_sentences("she sat", layers=[-1], show_progress_bar=False)
    assert single.shape == (emb.hidden_size,)
    np.testing.assert_allclose(single, mean[1], rtol=1e-5, atol=1e-6)
    cls = emb.embed_sentences(texts, pooling="cls", show_progress_bar=False, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(cls, axis=1), 1.0, rtol=1e-5)
    mm = emb.embed_sentences(texts, layers=[-1], show_progress_bar=False, out_path=tmp_path / "e.npy")
    assert isinstance(mm, np.memmap)
    np.testing.assert_array_equal(np.load(tmp_path / "e.npy"), mean)
    assert torch.is_tensor(emb.embed_sentences(texts, output="torch", show_progress_bar=False))
    assert emb.embed_sentences([], show_progress_bar=False).shape == (0, emb.hidden_size)


def test_config_round_trip():
    cfg = EmbedderConfig(layers=(0, -1), layer_pooling="weighted", layer_weights=(1, 3), subword_pooling="last")
    assert EmbedderConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown EmbedderConfig fields"):
        EmbedderConfig.from_dict({"modle": "x"})


def test_bf16_without_hardware_support_warns_once(emb, monkeypatch, caplog):
    import ctxemb.core.precision as precision

    assert precision.cpu_has_native_bf16() in (True, False, None)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    precision.warn_emulated_bf16.cache_clear()
    bf16 = emb.with_config(precision="bf16")
    with caplog.at_level("WARNING", logger="ctxemb.core.precision"):
        bf16.embed_words(SENTS, show_progress_bar=False)
        bf16.embed_words(SENTS, show_progress_bar=False)
    assert sum("emulated" in r.getMessage() for r in caplog.records) == 1


def test_token_budget_defaults_to_the_machines_and_keeps_a_given_one(tiny, monkeypatch):
    from ctxemb.runtime import token_budget

    emb = Embedder.from_pretrained(tiny)
    assert emb.max_tokens_per_batch == token_budget.recommended_tokens_per_batch(emb.encoder.config)
    monkeypatch.setattr(token_budget, "last_level_cache_bytes", lambda: 1 << 40)  # a huge cache: the largest budget
    assert Embedder.from_pretrained(tiny).max_tokens_per_batch == 8192
    monkeypatch.setattr(token_budget, "last_level_cache_bytes", lambda: None)  # unknown: the documented fallback
    assert Embedder.from_pretrained(tiny).max_tokens_per_batch == token_budget.DEFAULT_TOKENS_PER_BATCH
    assert Embedder.from_pretrained(tiny, max_tokens_per_batch=300).max_tokens_per_batch == 300
    assert Embedder.from_pretrained(tiny, max_tokens_per_batch=None).max_tokens_per_batch is None
    # the budget changes batching, never the vectors
    words = [["a", "b", "c"] * k for k in range(1, 9)]
    small = Embedder.from_pretrained(tiny, max_tokens_per_batch=16).embed_words(words)
    for a, b in zip(small, emb.embed_words(words)):
        np.testing.assert_allclose(a, b, atol=1e-5)
