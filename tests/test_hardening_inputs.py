"""Hardening (issue 15): no silent wrong results, every bad argument and every corrupt file named in one clear error.

Part 1 has one test per silent-wrong case (each failed before the fix); the rest are tables of bad inputs with the
error type and the words the message must hold.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from ctxemb.core.validation import CorruptFileError, check_string_batch, unit_rows
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.embedding.embedder import Embedder, EmbedderConfig
from ctxemb.geometry import (
    AllButTheTop,
    MeanCenterer,
    Standardizer,
    Whitening,
    anisotropy,
    anisotropy_sampled,
    cosine_contributions,
    informativity,
    load_postprocessor,
    rogue_dimensions,
)
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.modeling.checkpoint import CheckpointError
from ctxemb.wsd.corpus import read_gold_keys, read_raganato
from tests.helpers import write_tiny_model

L = 6  # layers of the tiny model: hidden states 0..6


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("hardening") / "tiny", num_hidden_layers=L)


@pytest.fixture(scope="module")
def emb(model_dir):
    return Embedder.from_pretrained(model_dir)


SENTS = [["the", "river", "bank"], ["she", "sat", "on", "the", "bank"]]
NO_BAR = dict(show_progress_bar=False)


# ================================================================================================================
# 1. Silent wrong results (each of these returned a wrong answer without a word before the fix)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_weighted_layer_pooling_rejects_a_non_finite_weight(emb, model_dir, bad):
    # Before: every vector came out NaN.
    with pytest.raises(ValueError, match=r"layer_weights\[0\] is (nan|inf|-inf).*finite"):
        emb.embed_words(SENTS, layers=[-2, -1], layer_pooling="weighted", layer_weights=[bad, 1.0], **NO_BAR)
    with pytest.raises(ValueError, match=r"layer_weights\[1\]"):
        EmbedderConfig(layers=(-2, -1), layer_pooling="weighted", layer_weights=(1.0, bad))
    with pytest.raises(ValueError, match=r"layer_weights\[0\]"):
        Embedder.from_pretrained(model_dir, layers=[-2, -1], layer_pooling="weighted", layer_weights=[bad, 1])


@pytest.mark.parametrize("text", ["\x00\x01", "\x07\x1b", "\u200b", "\x00 \x01\t"])
def test_text_with_no_token_is_rejected_like_an_empty_one(emb, text):
    # Before: a text of control characters embedded as [CLS][SEP] while "" was an error.
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        emb.embed_sentences(["the bank", ""], **NO_BAR)
    with pytest.raises(ValueError, match=r"texts\[1\] (has no token|is empty)"):
        emb.embed_sentences(["the bank", text], **NO_BAR)
    with pytest.raises(ValueError, match=r"texts\[2\] (has no token|is empty)"):
        emb.embed_tokens(["the bank", "a", text], **NO_BAR)


def test_no_token_error_names_the_index_in_the_callers_batch(emb, monkeypatch, tmp_path):
    import ctxemb.embedding.embedder as embedding

    monkeypatch.setattr(embedding, "TEXTS_PER_PLAN", 2)  # tokenized in chunks: the index must stay global
    with pytest.raises(ValueError, match=r"texts\[3\] has no token"):
        emb.embed_sentences(["a", "b", "c", "\x00", "d"], **NO_BAR)
    out = tmp_path / "e.npy"
    with pytest.raises(ValueError, match=r"texts\[3\]"):
        emb.embed_sentences(["a", "b", "c", "\x00"], out_path=out, **NO_BAR)
    assert list(tmp_path.iterdir()) == []  # no half-written memory map left behind


@pytest.mark.parametrize("mode", ["mean", "endpoints"])
@pytest.mark.parametrize("layer_kwargs", [{}, {"layers": [-2, -1], "layer_pooling": "concat"},
                                          {"layers": [-3, -1], "layer_pooling": "stack"}])
def test_embed_spans_of_an_empty_batch_has_the_width_of_a_full_one(emb, mode, layer_kwargs):
    # Before: (0, H) for every mode and pooling; and "endpoints" with "stack" gave (N, 3n, H) rows.
    full = emb.embed_spans(SENTS, [(0, 2), (1, 4)], mode=mode, **layer_kwargs, **NO_BAR)
    empty = emb.embed_spans([], [], mode=mode, **layer_kwargs, **NO_BAR)
    assert empty.shape == (0, *full.shape[1:])
    per_word = emb.embed_words(SENTS, **layer_kwargs, **NO_BAR)[0]
    factor = 3 if mode == "endpoints" else 1
    assert full.shape == (2, *per_word.shape[1:-1], per_word.shape[-1] * factor)
    assert torch.is_tensor(emb.embed_spans([], [], mode=mode, output="torch", **layer_kwargs, **NO_BAR))


@pytest.mark.parametrize("scale", [1e200, 1e150, 1e-5])
def test_geometry_is_scale_invariant_where_squares_would_overflow(scale):
    # Before: anisotropy(1e200 * X) was -1/(N-1) (every unit vector zero), informativity NaN, shares 0.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 6)) + 1.5
    Y = X * scale
    assert anisotropy(Y) == pytest.approx(anisotropy(X), abs=1e-12)
    np.testing.assert_allclose(cosine_contributions(Y), cosine_contributions(X), atol=1e-12)
    assert anisotropy_sampled(Y, 500) == pytest.approx(anisotropy_sampled(X, 500), abs=1e-12)
    assert informativity(Y, 1) == pytest.approx(informativity(X, 1), abs=1e-9)
    r, rx = rogue_dimensions(Y, 2), rogue_dimensions(X, 2)
    np.testing.assert_array_equal(r.indices, rx.indices)
    np.testing.assert_allclose(r.shares, rx.shares, atol=1e-9)
    with np.errstate(over="ignore"):
        expected = rx.variances * scale * scale  # a variance of ~1e400 is inf, honestly, rather than garbage
    np.testing.assert_allclose(r.variances, expected, rtol=1e-9)


def test_vectors_below_the_zero_threshold_are_named_as_such():
    # The zero-row policy (ctxemb.core.validation): a norm <= 1e-12 has no reliable direction; the error says so.
    X = np.random.default_rng(0).normal(size=(5, 3)) * 1e-150
    with pytest.raises(ValueError, match=r"5 zero-length vectors \(norm <= 1e-12; first at row 0\)"):
        anisotropy(X)


def test_unit_rows_of_huge_vectors_are_unit():
    u = unit_rows(np.array([[3e200, 4e200], [3.0, 4.0], [0.0, 0.0]]), "X", zero="keep")
    np.testing.assert_allclose(u, [[0.6, 0.8], [0.6, 0.8], [0.0, 0.0]])


@pytest.mark.parametrize("est", [Standardizer(), AllButTheTop(n_components=1), Whitening()])
def test_postprocessing_refuses_statistics_that_overflow(est):
    # Before: Standardizer took every column for a constant one (inf <= inf) and only centred; the others failed
    # with "Eigenvalues did not converge".
    X = np.random.default_rng(0).normal(size=(20, 6)) * 1e200
    with pytest.raises(ValueError, match="too large for a float64.*rescale X"):
        est.fit(X)
    assert MeanCenterer().fit_transform(X).shape == X.shape  # a mean does not overflow


def test_batch_size_zero_is_an_error_not_the_default(emb):
    # Before: batch_size=0 silently meant the default.
    with pytest.raises(ValueError, match="batch_size must be >= 1; got 0"):
        emb.embed_sentences(["the bank"], batch_size=0, **NO_BAR)


def test_one_hidden_state_named_twice_is_an_error(emb, model_dir):
    # Before: [-1, 6] on a 6-layer model pooled the last layer twice.
    with pytest.raises(ValueError, match=r"name hidden state 6 twice: as -1 and as 6"):
        emb.embed_words(SENTS, layers=[-1, 6], **NO_BAR)
    with pytest.raises(ValueError, match=r"hidden state 0 twice: as 0 and as -7"):
        Embedder.from_pretrained(model_dir, layers=[0, -7])
    with pytest.raises(ValueError, match=r"hidden state 6 twice"):
        emb.with_config(layers=(6, -1))


def test_non_finite_numbers_in_model_files_are_refused(model_dir, tmp_path):
    # Before: a NaN layer_norm_eps or a NaN weight loaded and made every embedding NaN.
    d = shutil.copytree(model_dir, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "layer_norm_eps": float("nan")}))
    with pytest.raises(CorruptFileError, match=r"config\.json: layer_norm_eps must be a finite number"):
        load_encoder(d)
    (d / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import load_file, save_file

    state = load_file(str(d / "model.safetensors"))
    state["encoder.layer.0.output.dense.bias"][3] = float("nan")
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor encoder\.layer\.0\.output\.dense\.bias "
                                               r"holds 1 NaN"):
        load_encoder(d)


def test_wsd_instance_without_id_or_with_a_used_id_is_an_error(tmp_path):
    # Before: Instance(id=None) and two instances with one id (whose predictions overwrote each other).
    x = tmp_path / "c.data.xml"
    x.write_text(_xml(instance_id=None))
    with pytest.raises(CorruptFileError, match=r"c\.data\.xml: sentence d0\.s1: the <instance> at word 1 .* no id"):
        read_raganato(x, "")
    x.write_text(_xml(instance_id="d0.s0.t0"))
    with pytest.raises(CorruptFileError, match=r"sentence d0\.s1: instance id d0\.s0\.t0 is already used in "
                                               r"sentence d0\.s0"):
        read_raganato(x, "")


# ================================================================================================================
# 2. Arguments checked at the entry point

EMBED_CASES = [
    # (method, args, kwargs, error, message)
    ("embed_sentences", [None], {}, TypeError, "texts is None"),
    ("embed_sentences", [5], {}, TypeError, "texts must be a list, got int"),
    ("embed_sentences", [{"a": 1}], {}, TypeError, "got a dict"),
    ("embed_sentences", [{"a", "b"}], {}, TypeError, "got a set"),
    ("embed_sentences", [["a", None]], {}, TypeError, r"texts\[1\] must be a str, got NoneType"),
    ("embed_sentences", [[b"a"]], {}, TypeError, r"texts\[0\] must be a str, got bytes"),
    ("embed_sentences", [["a", "  "]], {}, ValueError, r"texts\[1\] is empty"),
    ("embed_sentences", [["ok", "a\ud800b"]], {}, ValueError, r"texts\[1\] holds a lone surrogate '\\ud800' at "
                                                               r"character 1"),
    ("embed_sentences", [["ok", "\udcff"]], {}, ValueError, r"texts\[1\] holds a lone surrogate"),
    ("embed_sentences", [["a"]], {"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ("embed_sentences", [["a"]], {"batch_size": -3}, ValueError, "batch_size must be >= 1"),
    ("embed_sentences", [["a"]], {"batch_size": 2.5}, TypeError, "batch_size must be an int"),
    ("embed_sentences", [["a"]], {"batch_size": "8"}, TypeError, "batch_size must be an int"),
    ("embed_sentences", [["a"]], {"normalize": "yes"}, TypeError, "normalize must be True or False"),
    ("embed_sentences", [["a"]], {"show_progress_bar": None}, TypeError, "show_progress_bar must be True or False"),
    ("embed_sentences", [["a"]], {"pooling": "maximum"}, ValueError, "pooling must be one of"),
    ("embed_sentences", [["a"]], {"output": "list"}, ValueError, "output must be one of"),
    ("embed_sentences", [["a"]], {"layer_pooling": "stack"}, ValueError, "'stack' is not available"),
    ("embed_sentences", [["a"]], {"out_path": "x.txt"}, ValueError, r"out_path must end in \.npy"),
    ("embed_sentences", [["a"]], {"out_path": "/no/such/dir/x.npy"}, FileNotFoundError, "does not exist"),
    ("embed_sentences", [["a"]], {"out_path": 3}, TypeError, "out_path must be a path"),
    ("embed_sentences", [["a"]], {"layers": -1}, TypeError, r"got the int -1; pass a list, e\.g\. layers=\[-1\]"),
    ("embed_sentences", [["a"]], {"layers": [-1.0]}, TypeError, r"layers\[0\] must be an int"),
    ("embed_sentences", [["a"]], {"layers": [True]}, TypeError, r"layers\[0\] must be an int"),
    ("embed_sentences", [["a"]], {"layers": []}, ValueError, "layers is empty"),
    ("embed_sentences", [["a"]], {"layers": "last"}, ValueError, "or 'all'"),
    ("embed_sentences", [["a"]], {"layers": [7]}, ValueError, r"valid indices are -7\.\.6"),
    ("embed_sentences", [["a"]], {"layers": [-1, 6]}, ValueError, "hidden state 6 twice"),
    ("embed_sentences", [["a"]], {"layers": [2, 2]}, ValueError, "repeated indices"),
    ("embed_sentences", [["a"]], {"layer_weights": [1.0]}, ValueError, "only used with layer_pooling='weighted'"),
    ("embed_sentences", [["a"]], {"layers": [-1, -2], "layer_pooling": "weighted", "layer_weights": [1]},
     ValueError, "one weight per layer"),
    ("embed_sentences", [["a"]], {"layers": [-1, -2], "layer_pooling": "weighted", "layer_weights": [1, -1]},
     ValueError, "sum to 0"),
    ("embed_sentences", [["a"]], {"layers": [-1, -2], "layer_pooling": "weighted", "layer_weights": ["1", 1]},
     TypeError, r"layer_weights\[0\] must be a number"),
    ("embed_sentences", [["a"]], {"layers": [-1, -2], "layer_pooling": "weighted", "layer_weights": 1.0},
     TypeError, "layer_weights must be a list"),
    ("embed_sentences", [["a"]], {"layer_pooling": 3}, TypeError, "layer_pooling must be a str"),
    ("embed_words", [None], {}, TypeError, "sentences is None"),
    ("embed_words", [["the bank"]], {}, TypeError, r"sentences\[0\] must be a list of words, got a str"),
    ("embed_words", [[["the", None]]], {}, TypeError, r"sentences\[0\]\[1\] must be a str"),
    ("embed_words", [[["the"], None]], {}, TypeError, r"sentences\[1\] must be a list of words, got NoneType"),
    ("embed_words", [[["the"], []]], {}, ValueError, r"sentences\[1\] is empty"),
    ("embed_words", [[["the", ""]]], {}, ValueError, r"sentences\[0\]\[1\] is an empty string"),
    ("embed_words", [[["the", "b\ud83dx"]]], {}, ValueError, r"sentences\[0\]\[1\] holds a lone surrogate"),
    ("embed_words", [SENTS], {"subword_pooling": "max"}, ValueError, "subword_pooling must be one of"),
    ("embed_words", [SENTS], {"subword_pooling": 1}, TypeError, "subword_pooling must be a str"),
    ("embed_words", [SENTS], {"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ("embed_words", [SENTS], {"layers": 6}, TypeError, "pass a list"),
    ("embed_tokens", ["the bank"], {}, TypeError, "got a single str; wrap it in a list"),
    ("embed_tokens", [[""]], {}, ValueError, r"texts\[0\] is empty"),
    ("embed_tokens", [["\ud800"]], {}, ValueError, r"texts\[0\] holds a lone surrogate"),
    ("embed_tokens", [["a"]], {"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ("embed_spans", [SENTS, None], {}, TypeError, "spans is None"),
    ("embed_spans", [SENTS, [(0, 1)]], {}, ValueError, "spans has 1 entries but sentences has 2"),
    ("embed_spans", [SENTS, [(0, 1), (0.0, 2)]], {}, TypeError, r"spans\[1\] must be a pair \(start, end\) of ints"),
    ("embed_spans", [SENTS, [(0, 1), (0, 1.5)]], {}, TypeError, r"spans\[1\] must be a pair"),
    ("embed_spans", [SENTS, [(0, 1), (False, True)]], {}, TypeError, r"spans\[1\] must be a pair"),
    ("embed_spans", [SENTS, [(0, 1), (0, 1, 2)]], {}, TypeError, r"spans\[1\] must be a pair"),
    ("embed_spans", [SENTS, [(0, 1), "ab"]], {}, TypeError, r"spans\[1\] must be a pair"),
    ("embed_spans", [SENTS, [(0, 1), 3]], {}, TypeError, r"spans\[1\] must be a pair"),
    ("embed_spans", [SENTS, [(0, 1), (3, 3)]], {}, ValueError, r"spans\[1\] = \(3, 3\) is empty or outside"),
    ("embed_spans", [SENTS, [(0, 1), (-1, 2)]], {}, ValueError, r"spans\[1\] = \(-1, 2\)"),
    ("embed_spans", [SENTS, [(0, 4), (0, 1)]], {}, ValueError, r"spans\[0\] = \(0, 4\) is empty or outside sentence 0"),
    ("embed_spans", [SENTS, [(0, 1), (0, 1)]], {"mode": "max"}, ValueError, "mode must be one of"),
    ("embed_spans", [SENTS, [(0, 1), (0, 1)]], {"output": "list"}, ValueError, "output must be one of"),
]


@pytest.mark.parametrize("method,args,kwargs,error,match", EMBED_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(EMBED_CASES)])
def test_embedder_arguments(emb, method, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        getattr(emb, method)(*args, **{"show_progress_bar": False, **kwargs})


def test_accepted_argument_forms(emb):
    """What is accepted: numpy ints for layers and spans, a numpy array of strings, a generator, empty batches."""
    a = emb.embed_spans(SENTS, np.array([[0, 2], [1, 4]]), layers=np.array([-2, -1]), **NO_BAR)
    b = emb.embed_spans(SENTS, [(0, 2), (1, 4)], layers=[-2, -1], **NO_BAR)
    np.testing.assert_array_equal(a, b)
    texts = ["the bank", "a river"]
    np.testing.assert_array_equal(emb.embed_sentences(np.array(texts), **NO_BAR), emb.embed_sentences(texts, **NO_BAR))
    assert emb.embed_sentences((t for t in texts), **NO_BAR).shape == (2, emb.hidden_size)
    # The README: the Tokenizer refuses an empty batch; the Embedder returns an empty result of the right shape.
    assert emb.embed_sentences([], **NO_BAR).shape == (0, emb.hidden_size)
    assert emb.embed_sentences([], layers=[-2, -1], layer_pooling="concat", **NO_BAR).shape == (0, 2 * emb.hidden_size)
    assert emb.embed_words([], **NO_BAR) == [] and emb.embed_tokens([], **NO_BAR) == []
    with pytest.raises(ValueError, match="texts is empty"):
        emb.tokenizer.tokenize([])


FROM_PRETRAINED_CASES = [
    ({"model": None}, TypeError, "model must be a name or a path, got NoneType"),
    ({"model": 3}, TypeError, "model must be a name or a path, got int"),
    ({"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ({"batch_size": None}, TypeError, "batch_size must be an int"),
    ({"max_tokens_per_batch": 0}, ValueError, "max_tokens_per_batch must be >= 1"),
    ({"max_tokens_per_batch": "big"}, ValueError, "max_tokens_per_batch must be an int >= 1, None .* or 'auto'"),
    ({"device": "gpu9"}, ValueError, "device 'gpu9' is not a torch device"),
    ({"device": 0.5}, TypeError, "device must be a str"),
    ({"pooling": "mean"}, TypeError, r"unknown option\(s\) \['pooling'\]"),
    ({"layers": -1}, TypeError, "pass a list"),
    ({"layers": None}, TypeError, "layers must be a list"),
    ({"layers": "all"}, ValueError, "per-call option"),
    ({"layers": [-1, 6]}, ValueError, "hidden state 6 twice"),
    ({"layers": [9]}, ValueError, "valid indices are -7..6"),
    ({"layer_pooling": "stack"}, ValueError, "per-call option"),
    ({"layer_pooling": "max"}, ValueError, "layer_pooling must be one of"),
    ({"subword_pooling": "max"}, ValueError, "subword_pooling must be one of"),
    ({"precision": "fp16"}, ValueError, "precision must be one of"),
    ({"layers": [-1, -2], "layer_pooling": "weighted", "layer_weights": [1, float("nan")]}, ValueError,
     r"layer_weights\[1\] is nan"),
]


@pytest.mark.parametrize("kwargs,error,match", FROM_PRETRAINED_CASES)
def test_from_pretrained_arguments(model_dir, kwargs, error, match):
    kwargs = dict(kwargs)
    model = kwargs.pop("model", model_dir)
    with pytest.raises(error, match=match):
        Embedder.from_pretrained(model, **kwargs)


def test_embedder_constructor_arguments(emb):
    with pytest.raises(TypeError, match="encoder must be a ctxemb Encoder"):
        Embedder(None, emb.tokenizer)
    with pytest.raises(TypeError, match="tokenizer must be a ctxemb Tokenizer"):
        Embedder(emb.encoder, "bert")
    with pytest.raises(TypeError, match="config must be an EmbedderConfig"):
        Embedder(emb.encoder, emb.tokenizer, {"layers": [-1]})
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        Embedder(emb.encoder, emb.tokenizer, batch_size=0)
    with pytest.raises(TypeError, match="an EmbedderConfig dict must be a dict"):
        EmbedderConfig.from_dict([("layers", [-1])])


X_OK = np.random.default_rng(1).normal(size=(8, 5)) + 1.0
GEOMETRY_CASES = [
    (anisotropy, (None,), {}, TypeError, "X is None"),
    (anisotropy, ("abc",), {}, TypeError, "got a str"),
    (anisotropy, ({"a": 1},), {}, TypeError, "got a dict"),
    (anisotropy, ([["a", "b"], ["c", "d"]],), {}, TypeError, "must be a numeric"),
    (anisotropy, ([[1.0, 2.0], [1.0]],), {}, ValueError, "rows of different lengths"),
    (anisotropy, ([1.0, 2.0],), {}, ValueError, "2-D array.*1-D"),
    (anisotropy, (np.ones((2, 2, 2)),), {}, ValueError, "2-D array.*3-D"),
    (anisotropy, (np.ones((1, 3)),), {}, ValueError, "at least 2 vectors"),
    (anisotropy, (np.ones((3, 0)),), {}, ValueError, "0 feature"),
    (anisotropy, (np.array([[1, 2], [np.nan, 1]]),), {}, ValueError, "NaN or infinity.*row 1, column 0"),
    (anisotropy, (np.array([[1, 2], [np.inf, 1]]),), {}, ValueError, "NaN or infinity"),
    (anisotropy, (np.array([[1, 2], [0, 0]]),), {}, ValueError, "zero-length vectors.*row 1"),
    (anisotropy, (np.ones((3, 2), dtype=complex),), {}, ValueError, "must be real"),
    (anisotropy_sampled, (X_OK, 0), {}, ValueError, "n_pairs must be >= 1"),
    (anisotropy_sampled, (X_OK, 10.0), {}, TypeError, "n_pairs must be an int"),
    (anisotropy_sampled, (X_OK, 10), {"seed": "a"}, TypeError, "seed must be an int or None"),
    (anisotropy_sampled, (X_OK, 10), {"seed": -1}, ValueError, "seed must be >= 0"),
    (cosine_contributions, (None,), {}, TypeError, "X is None"),
    (rogue_dimensions, (X_OK, None), {}, TypeError, "k must be an int"),
    (rogue_dimensions, (X_OK, 0), {}, ValueError, "k must be >= 1"),
    (rogue_dimensions, (X_OK, 6), {}, ValueError, "k must be <= 5"),
    (informativity, (X_OK, 5), {}, ValueError, "at least one dimension must remain"),
    (informativity, (X_OK, 1), {"n_pairs": 1}, ValueError, "n_pairs must be >= 2"),
    (informativity, (X_OK, 1), {"seed": 1.5}, TypeError, "seed must be an int or None"),
    (informativity, (X_OK[:2], 1), {}, ValueError, "at least 3"),
]


@pytest.mark.parametrize("fn,args,kwargs,error,match", GEOMETRY_CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(GEOMETRY_CASES)])
def test_geometry_arguments(fn, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        fn(*args, **kwargs)


def test_lone_surrogates_are_refused_by_every_string_batch():
    with pytest.raises(ValueError, match=r"queries\[2\] holds a lone surrogate '\\udc80' at character 3"):
        check_string_batch(["a", "b", "abc\udc80"], "queries")
    with pytest.raises(TypeError, match="queries is None"):
        check_string_batch(None, "queries")


# ================================================================================================================
# 3. Corrupt model files: one CorruptFileError (a ValueError; CheckpointError for weights) naming file and problem


def _set_config(**fields):
    def mutate(d):
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(fields)
        (d / "config.json").write_text(json.dumps(cfg))
    return mutate


def _write(name, data):
    def mutate(d):
        (d / name).write_bytes(data(d) if callable(data) else data)
    return mutate


def _bin(make):
    """Replace the safetensors weights by a pytorch_model.bin with the given bytes."""
    def mutate(d):
        from safetensors.torch import load_file

        state = load_file(str(d / "model.safetensors"))
        (d / "model.safetensors").unlink()
        (d / "pytorch_model.bin").write_bytes(make(state))
    return mutate


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


CORRUPT_FILES = [
    # (case, mutation, loader: "encoder" / "tokenizer", error, message)
    ("config-invalid-json", _write("config.json", b"{not json"), "encoder", CorruptFileError,
     r"config file .*config\.json is not valid JSON .*line 1, column 2"),
    ("config-invalid-json-tok", _write("config.json", b"{not json"), "tokenizer", CorruptFileError,
     r"config\.json is not valid JSON"),
    ("config-truncated", _write("config.json", lambda d: (d / "config.json").read_bytes()[:40]), "encoder",
     CorruptFileError, r"config\.json is not valid JSON \(truncated or corrupt\?\)"),
    ("config-empty", _write("config.json", b""), "encoder", CorruptFileError, r"config\.json is empty"),
    ("config-latin1", _write("config.json", lambda d: (d / "config.json").read_bytes().replace(
        b'"bert"', b'"b\xe9rt"')), "encoder", CorruptFileError,
     r"config\.json is not valid UTF-8: byte 0xe9 on line \d+"),
    ("config-latin1-tok", _write("config.json", lambda d: (d / "config.json").read_bytes().replace(
        b'"bert"', b'"b\xe9rt"')), "tokenizer", CorruptFileError, r"config\.json is not valid UTF-8"),
    ("config-utf16", _write("config.json", lambda d: (d / "config.json").read_text().encode("utf-16")), "encoder",
     CorruptFileError, r"config\.json is not valid UTF-8: byte 0xff on line 1"),
    ("config-array", _write("config.json", b"[1, 2]"), "encoder", CorruptFileError,
     r"config\.json must hold a JSON object; it holds an array"),
    ("config-null", _write("config.json", b"null"), "tokenizer", CorruptFileError, r"it holds null"),
    ("config-hidden-size-str", _set_config(hidden_size="32"), "encoder", CorruptFileError,
     r"config\.json: hidden_size must be an integer, got '32'"),
    ("config-layers-null", _set_config(num_hidden_layers=None), "encoder", CorruptFileError,
     r"config\.json: num_hidden_layers must be an integer, got None"),
    ("config-layers-fraction", _set_config(num_hidden_layers=2.5), "encoder", CorruptFileError,
     r"num_hidden_layers must be an integer, got 2\.5"),
    ("config-eps-str", _set_config(layer_norm_eps="x"), "encoder", CorruptFileError,
     r"layer_norm_eps must be a finite number"),
    ("config-dropout", _set_config(hidden_dropout_prob=1.5), "encoder", CorruptFileError,
     r"hidden_dropout_prob must be in \[0, 1\)"),
    ("config-pad-out-of-range", _set_config(pad_token_id=10**6), "encoder", CorruptFileError,
     r"pad_token_id must be a token id in 0\.\.\d+"),
    ("config-model-type-list", _set_config(model_type=["bert"]), "encoder", CorruptFileError,
     r"model_type must be a string"),
    ("config-model-type-list-tok", _set_config(model_type=["bert"]), "tokenizer", CorruptFileError,
     r"config\.json: model_type must be a string"),
    ("config-model-type-unknown", _set_config(model_type="gpt2"), "encoder", CorruptFileError,
     r"config\.json: model_type 'gpt2' is not supported"),
    ("config-max-positions-str-tok", _set_config(max_position_embeddings="64"), "tokenizer", CorruptFileError,
     r"max_position_embeddings must be an integer"),
    ("safetensors-truncated", _write("model.safetensors", lambda d: (d / "model.safetensors").read_bytes()[:5000]),
     "encoder", CheckpointError, r"cannot read weights file .*model\.safetensors \(truncated, corrupt"),
    ("safetensors-header-only", _write("model.safetensors", lambda d: (d / "model.safetensors").read_bytes()[:8]),
     "encoder", CheckpointError, r"model\.safetensors .*invalid header length"),
    ("safetensors-empty", _write("model.safetensors", b""), "encoder", CheckpointError,
     r"model\.safetensors: it is empty \(0 bytes\)"),
    ("safetensors-garbage", _write("model.safetensors", b"\x00" * 100), "encoder", CheckpointError,
     r"model\.safetensors \(truncated, corrupt or not a checkpoint\)"),
    ("safetensors-text", _write("model.safetensors", b"<html>404 Not Found</html>"), "encoder", CheckpointError,
     r"model\.safetensors"),
    ("bin-truncated", _bin(lambda s: _torch_bytes(s)[:3000]), "encoder", CheckpointError,
     r"pytorch_model\.bin \(truncated, corrupt or not a checkpoint\)"),
    ("bin-garbage", _bin(lambda s: b"garbage" * 10), "encoder", CheckpointError,
     r"pytorch_model\.bin: corrupt, truncated, or not a PyTorch checkpoint"),
    ("bin-empty", _bin(lambda s: b""), "encoder", CheckpointError, r"pytorch_model\.bin: it is empty"),
    ("bin-plain-pickle", _bin(lambda s: pickle.dumps([1, 2, 3])), "encoder", CheckpointError,
     r"pytorch_model\.bin: corrupt, truncated, or not a PyTorch checkpoint"),
    ("bin-list", _bin(lambda s: _torch_bytes([1, 2])), "encoder", CheckpointError,
     r"pytorch_model\.bin holds a list, not a mapping"),
    ("bin-not-tensors", _bin(lambda s: _torch_bytes({"a": 1})), "encoder", CheckpointError,
     r"pytorch_model\.bin holds 1 entries that are not named tensors"),
    ("bin-code", _bin(lambda s: _torch_bytes({"a": _Evil()})), "encoder", CheckpointError,
     r"pytorch_model\.bin: it holds Python objects other than tensors"),
    ("tokenizer-json-garbage", _write("tokenizer.json", b"garbage"), "tokenizer", CorruptFileError,
     r"tokenizer file .*tokenizer\.json is not valid JSON .*line 1, column 1"),
    ("tokenizer-json-empty", _write("tokenizer.json", b""), "tokenizer", CorruptFileError,
     r"tokenizer\.json is empty"),
    ("tokenizer-json-not-a-tokenizer", _write("tokenizer.json", b'{"a": 1}'), "tokenizer", CorruptFileError,
     r"tokenizer\.json cannot be read \(corrupt, truncated or not a tokenizer\)"),
    ("tokenizer-json-latin1", _write("tokenizer.json", b'{"version": "1.0", "x": "\xe9"}'), "tokenizer",
     CorruptFileError, r"tokenizer\.json is not valid UTF-8: byte 0xe9 on line 1"),
    ("vocab-latin1", _write("vocab.txt", lambda d: (d / "vocab.txt").read_bytes() + b"caf\xe9\n"), "tokenizer",
     CorruptFileError, r"vocabulary file .*vocab\.txt is not valid UTF-8: byte 0xe9 on line 56"),
    ("vocab-binary", _write("vocab.txt", bytes(range(256))), "tokenizer", CorruptFileError,
     r"vocab\.txt is not valid UTF-8"),
    ("vocab-empty", _write("vocab.txt", b""), "tokenizer", CorruptFileError,
     r"read from vocab\.txt\): special token cls_token='\[CLS\]' is not in the vocabulary"),
    ("vocab-without-specials", _write("vocab.txt", b"a\nb\n"), "tokenizer", CorruptFileError,
     r"read from vocab\.txt\): special token cls_token='\[CLS\]' is not in the vocabulary"),
    ("tokenizer-config-garbage", _write("tokenizer_config.json", b"{bad"), "tokenizer", CorruptFileError,
     r"tokenizer_config\.json is not valid JSON"),
    ("tokenizer-config-array", _write("tokenizer_config.json", b"[1]"), "tokenizer", CorruptFileError,
     r"tokenizer_config\.json must hold a JSON object"),
    ("tokenizer-config-bad-field", _write("tokenizer_config.json", b'{"do_lower_case": "no"}'), "tokenizer",
     CorruptFileError, r"tokenizer_config\.json: do_lower_case must be true or false, got 'no'"),
    ("special-tokens-map-utf16", _write("special_tokens_map.json", "{}".encode("utf-16")), "tokenizer",
     CorruptFileError, r"special_tokens_map\.json is not valid UTF-8"),
]


@pytest.mark.parametrize("mutate,loader,error,match", [c[1:] for c in CORRUPT_FILES],
                         ids=[c[0] for c in CORRUPT_FILES])
def test_corrupt_model_files(model_dir, tmp_path, capsys, mutate, loader, error, match):
    d = shutil.copytree(model_dir, tmp_path / "m")
    mutate(d)
    load = load_encoder if loader == "encoder" else load_tokenizer
    with pytest.raises(error, match=match) as e:
        load(d)
    assert isinstance(e.value, ValueError) and e.value.path is not None and e.value.path.parent == d
    assert "\n" not in str(e.value)
    assert "this must never run" not in capsys.readouterr().out


def test_a_corrupt_file_fails_from_pretrained_too(model_dir, tmp_path):
    d = shutil.copytree(model_dir, tmp_path / "m")
    (d / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(CorruptFileError, match=r"config\.json is not valid UTF-8"):
        Embedder.from_pretrained(d)


def test_a_byte_order_mark_is_accepted(model_dir, tmp_path):
    d = shutil.copytree(model_dir, tmp_path / "m")
    for name in ("config.json", "vocab.txt"):
        (d / name).write_bytes(b"\xef\xbb\xbf" + (d / name).read_bytes())
    assert EncoderConfig.from_json_file(d / "config.json").num_hidden_layers == L


def test_corrupt_postprocessor_files(tmp_path):
    p = tmp_path / "pp.npz"
    MeanCenterer().fit(X_OK).save(p)
    data = p.read_bytes()
    for name, content in [("truncated", data[: len(data) // 2]), ("garbage", b"garbage" * 20), ("empty", b"")]:
        bad = tmp_path / f"{name}.npz"
        bad.write_bytes(content)
        with pytest.raises(CorruptFileError, match=rf"{name}\.npz"):
            load_postprocessor(bad)
    np.save(tmp_path / "single.npy", np.ones(3))
    with pytest.raises(CorruptFileError, match="not a ctxemb post-processor"):
        load_postprocessor(tmp_path / "single.npy")


# ================================================================================================================
# 4. WSD readers: the file and the sentence id (the key file: the line)


def _xml(instance_id: str | None = "d0.s1.t0", word: str = "river", sentence_id: str | None = "d0.s1") -> str:
    iid = f' id="{instance_id}"' if instance_id is not None else ""
    sid = f' id="{sentence_id}"' if sentence_id is not None else ""
    return f"""<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="test">
<text id="d0">
<sentence id="d0.s0">
<wf lemma="the" pos="DET">The</wf>
<instance id="d0.s0.t0" lemma="bank" pos="NOUN">bank</instance>
</sentence>
<sentence{sid}>
<wf lemma="a" pos="DET">A</wf>
<instance{iid} lemma="river" pos="NOUN">{word}</instance>
</sentence>
</text>
</corpus>
"""


GOOD_XML = _xml()
WSD_XML_CASES = [
    ("instance-without-id", _xml(instance_id=None), r"c\.data\.xml: sentence d0\.s1: the <instance> at word 1 "
                                                     r"\('river'\) has no id"),
    ("instance-empty-id", _xml(instance_id=""), r"sentence d0\.s1: the <instance> at word 1"),
    ("empty-word", _xml(word=""), r"c\.data\.xml: sentence d0\.s1: word 1 \(<instance> id=\"d0\.s1\.t0\"\) is empty"),
    ("blank-word", _xml(word="  "), r"sentence d0\.s1: word 1 .* is empty"),
    ("empty-wf", GOOD_XML.replace(">A<", "><"), r"sentence d0\.s1: word 0 \(<wf>\) is empty"),
    ("sentence-without-id", _xml(sentence_id=None), r"the <sentence> without an id after sentence d0\.s0"),
    ("duplicate-instance-id", _xml(instance_id="d0.s0.t0"), r"instance id d0\.s0\.t0 is already used"),
    ("truncated", GOOD_XML[: len(GOOD_XML) * 2 // 3],
     r"c\.data\.xml is not well-formed XML: .* at line \d+, column \d+, in sentence d0\.s1"),
    ("truncated-early", GOOD_XML[:150], r"not well-formed XML: .*, in sentence d0\.s0"),
    ("empty-file", "", r"not well-formed XML: no element found \(empty or truncated file\) at line 1"),
    ("mismatched-tag", GOOD_XML.replace("</sentence>\n<sentence", "</sentense>\n<sentence", 1),
     r"not well-formed XML: mismatched tag at line 7, column 2, in sentence d0\.s0"),
    ("stray-ampersand", GOOD_XML.replace(">river<", ">R&D<"), r"not well-formed XML: .*in sentence d0\.s1"),
    ("latin1", GOOD_XML.replace("river", "rivi\xe8re").encode("latin-1"),
     r"XML file .*c\.data\.xml is not valid UTF-8: byte 0xe8 on line 10 .*\(the byte is in sentence d0\.s1\)"),
    ("token-outside-sentence", GOOD_XML.replace("</text>", '<wf lemma="x" pos="X">x</wf></text>'),
     r"tokens or sentences outside a <sentence>/<text> element \(after sentence d0\.s1\)"),
    ("wrong-root", "<html><body>404</body></html>", r"the root element is <html>, expected <corpus>"),
]


@pytest.mark.parametrize("xml,match", [c[1:] for c in WSD_XML_CASES], ids=[c[0] for c in WSD_XML_CASES])
def test_wsd_xml_errors(tmp_path, xml, match):
    x = tmp_path / "c.data.xml"
    x.write_bytes(xml if isinstance(xml, bytes) else xml.encode("utf-8"))
    with pytest.raises(CorruptFileError, match=match) as e:
        read_raganato(x, "")
    assert e.value.path == x and "\n" not in str(e.value)
    assert not isinstance(e.value, ET.ParseError)


def test_wsd_xml_in_a_declared_encoding_is_read(tmp_path):
    x = tmp_path / "c.data.xml"
    x.write_bytes(GOOD_XML.replace("UTF-8", "ISO-8859-1").replace("river", "rivi\xe8re").encode("latin-1"))
    assert list(read_raganato(x, "").sentences())[1].words[1] == "rivi\xe8re"


WSD_KEY_CASES = [
    ("latin1", "d0.s0.t0 bank%1:14:00::\nd0.s1.t0 rivi\xe8re%1:17:00::\n".encode("latin-1"),
     r"key file .*c\.gold\.key\.txt is not valid UTF-8: byte 0xe8 on line 2"),
    ("utf16", "d0.s0.t0 bank%1:14:00::\n".encode("utf-16"), r"c\.gold\.key\.txt line 1: holds a NUL byte"),
    ("binary", b"\x00\x01\x02", r"line 1: holds a NUL byte"),
    ("id-without-key", b"d0.s0.t0 bank%1:14:00::\n\nd0.s1.t0\n", r"c\.gold\.key\.txt line 3: expected 'instance_id "
                                                                r"key \[key \.\.\.\]', got 'd0\.s1\.t0'"),
]


@pytest.mark.parametrize("data,match", [c[1:] for c in WSD_KEY_CASES], ids=[c[0] for c in WSD_KEY_CASES])
def test_wsd_key_file_errors(tmp_path, data, match):
    k = tmp_path / "c.gold.key.txt"
    k.write_bytes(data)
    with pytest.raises(CorruptFileError, match=match):
        read_gold_keys(k)
    (tmp_path / "c.data.xml").write_text(GOOD_XML)
    with pytest.raises(CorruptFileError, match=match):
        read_raganato(tmp_path / "c.data.xml")


def test_wsd_key_file_with_windows_line_ends_and_a_bom(tmp_path):
    k = tmp_path / "k.txt"
    k.write_bytes(b"\xef\xbb\xbfd0.s0.t0 bank%1:14:00::\r\nd0.s1.t0 a%1 b%2\r\n")
    assert read_gold_keys(k) == {"d0.s0.t0": ("bank%1:14:00::",), "d0.s1.t0": ("a%1", "b%2")}


def test_every_error_above_is_a_value_error():
    assert issubclass(CorruptFileError, ValueError) and issubclass(CheckpointError, CorruptFileError)
    assert math.isfinite(anisotropy(X_OK))


ANALYZE_CASES = [
    ({"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ({"seed": "x"}, TypeError, "seed must be an int or None"),
    ({"plot": "no"}, TypeError, "plot must be True or False"),
    ({"projection_layer": "last"}, TypeError, "projection_layer must be an int or None"),
    ({"projection_layer": 9}, ValueError, "projection_layer must index one of the 7 hidden states"),
    ({"out_dir": 5}, TypeError, "out_dir must be a path"),
    ({"words": None}, TypeError, "words must be a list of strings"),
    ({"n_pairs": 1}, ValueError, "n_pairs must be >= 2"),
]


@pytest.mark.parametrize("kwargs,error,match", ANALYZE_CASES)
def test_analyze_arguments_are_checked_before_embedding(emb, monkeypatch, kwargs, error, match):
    from ctxemb.geometry import analyze

    monkeypatch.setattr(emb, "embed_words", lambda *a, **k: pytest.fail("embedded before checking the arguments"))
    with pytest.raises(error, match=match):
        analyze(emb, ["the river bank", "the money bank"], **{"show_progress_bar": False, **kwargs})


def test_character_span_arguments(emb):
    [t] = emb.embed_tokens(["the river bank"], **NO_BAR)
    assert t.span(np.int64(4), 9).shape == (emb.hidden_size,)
    with pytest.raises(TypeError, match="begin must be an int character offset, got 4.0"):
        t.span(4.0, 9)
    with pytest.raises(ValueError, match=r"character span \(9, 4\) is empty or outside"):
        t.span(9, 4)
    with pytest.raises(ValueError, match="pooling must be one of"):
        t.span(4, 9, pooling="max")
