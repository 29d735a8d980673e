"""Precision paths (bf16, int8, ONNX Runtime fp32/int8) against the exact fp32 path, the ONNX export, and
precision="auto": it picks a path, caches the choice, reuses it, records it, and never picks emulated bf16."""

import json
import re

import numpy as np
import pytest
import torch

from ctxemb.runtime import autoprecision

from ctxemb.runtime import backends

from ctxemb.runtime import engine as inference

from ctxemb.runtime import int8 as quantization
from ctxemb.runtime.autoprecision import available_precisions, choose_precision
from ctxemb.runtime.backends import OnnxBackend, load_backend, onnx_model_path
from ctxemb.embedding.embedder import Embedder, EmbedderConfig
from ctxemb.core.precision import ACCURACY_BOUNDS, INFERENCE_PRECISIONS as PRECISIONS
from ctxemb.runtime.engine import run_encoder
from ctxemb.modeling.loading import load_encoder
from ctxemb.core.protocols import embedder_config_dict
from tests.helpers import write_tiny_model

SENTS = [["the", "banks", "of", "the", "river"], ["she", "sat"], ["a", "mouse", "die", "bat", "cell", "plant", "the"],
         ["money", "sat", "on", "the", "bank", "of", "a", "river", "plant"]]


def _needs_onnxruntime(precision: str) -> None:
    if precision.startswith("onnx"):
        pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the 'onnx' extra): "
                                                  "the ONNX Runtime paths cannot run here")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "m", num_hidden_layers=4)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def cache(module_cache, monkeypatch):
    """ONNX exports and auto-precision choices go to a folder of this module's (exports are shared by its tests)."""
    monkeypatch.setenv("CTXEMB_CACHE", str(module_cache))
    return module_cache


@pytest.fixture(scope="module")
def exact(tiny):
    return Embedder.from_pretrained(tiny)


def _word_cosines(a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    a, b = np.concatenate(a).astype(np.float64), np.concatenate(b).astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("precision", ["bf16", "int8", "onnx-fp32", "onnx-int8"])
def test_each_path_is_close_to_exact_within_its_bound(tiny, exact, precision):
    _needs_onnxruntime(precision)
    emb = Embedder.from_pretrained(tiny, precision=precision)
    ref = exact.embed_words(SENTS, show_progress_bar=False)
    got = emb.embed_words(SENTS, show_progress_bar=False)
    assert [g.shape for g in got] == [r.shape for r in ref]
    cos = _word_cosines(got, ref)
    assert cos.min() >= ACCURACY_BOUNDS[precision], (precision, cos.min())
    assert emb.backend.precision == precision and emb.config.precision == precision


def test_int8_vectors_do_not_depend_on_the_rest_of_the_batch(tiny):
    # one activation scale per token and outlier features fixed per model: a sentence's int8 vectors are the same
    # alone and batched with others (padded to another length here; the kernel file tests equal lengths at 1e-6)
    emb = Embedder.from_pretrained(tiny, precision="int8")
    batched = emb.embed_words(SENTS, batch_size=4, show_progress_bar=False)
    alone = [emb.embed_words([s], batch_size=1, show_progress_bar=False)[0] for s in SENTS]
    for a, b in zip(alone, batched):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_fp32_path_is_still_the_encoder_itself(tiny, exact):
    enc = load_encoder(tiny)
    [item] = exact.tokenizer.tokenize_words([SENTS[0]])
    ids, _ = exact.tokenizer.with_specials(item.ids)
    with torch.inference_mode():
        states = torch.stack(enc(torch.tensor([ids])).hidden_states[-4:]).mean(0)[0, 1:-1]
    [vecs] = exact.embed_words([SENTS[0]], show_progress_bar=False, output="torch", subword_pooling="first")
    torch.testing.assert_close(vecs, states[[s for s, _ in item.word_spans]], rtol=1e-5, atol=1e-6)


def test_paths_other_than_fp32_and_bf16_need_a_backend(tiny, exact):
    items = exact.tokenizer.tokenize_words(SENTS)
    with pytest.raises(ValueError, match="needs a backend.*load_backend"):
        next(run_encoder(exact.encoder, exact.tokenizer, items, layers=[-1], precision="int8"))
    with pytest.raises(ValueError, match="precision must be one of"):
        EmbedderConfig(precision="fp16")
    assert EmbedderConfig(precision="auto").precision == "auto"


@pytest.mark.parametrize("model_type", ["bert", "mpnet"])
def test_onnx_export_round_trip(tiny, tmp_path, model_type):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the 'onnx' extra)")
    # bert: the module's model (its export is shared with the other tests); mpnet: relative position buckets too
    enc = load_encoder(tiny if model_type == "bert" else write_tiny_model(tmp_path / "m", model_type=model_type))
    onnx = OnnxBackend(onnx_model_path(enc), num_layers=enc.num_layers)
    pad = enc.config.pad_token_id
    for B, T in [(1, 2), (3, 17), (2, enc.config.max_tokens)]:  # sizes unlike the example batch of the export
        ids = torch.randint(5, enc.config.vocab_size, (B, T))
        mask = torch.ones_like(ids)
        if B > 1:
            ids[1, T // 2:], mask[1, T // 2:] = pad, 0
        layers = list(range(enc.num_layers + 1))
        with torch.inference_mode():
            ref = torch.stack(enc(ids, mask, compute_pooler=False).hidden_states, dim=2)
        got = onnx.hidden_states(ids, mask, layers)
        real = mask.bool()
        torch.testing.assert_close(got[real], ref[real], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(onnx.hidden_states(ids, mask, [2, 0]), got[:, :, [2, 0]])


def test_onnx_export_is_cached_per_model_and_version(tiny, monkeypatch, cache):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the 'onnx' extra)")
    enc = load_encoder(tiny)
    first = onnx_model_path(enc, quantized=True, model_name=str(tiny))
    expected = "model.int8.onnx" if quantization.weight_levels() == 127 else "model.int8-7bit.onnx"  # no VNNI
    assert first.name == expected and (first.parent / "model.onnx").is_file()
    assert first.is_relative_to(cache) and "ctxemb-" in first.parent.name
    assert json.loads((first.parent / "model.json").read_text())["fingerprint"] == backends.encoder_fingerprint(enc)

    def no_export(*args, **kwargs):
        raise AssertionError("exported again despite the cache")

    monkeypatch.setattr(backends, "export_onnx", no_export)
    monkeypatch.setattr(backends, "quantize_onnx_int8", no_export)
    assert onnx_model_path(enc, quantized=True, model_name="another name, same weights") == first
    other = load_encoder(write_tiny_model(cache / "other", seed=1, num_hidden_layers=4))
    assert backends.onnx_cache_folder(other) != first.parent  # other weights, other export


def test_missing_onnxruntime_names_the_extra(tiny, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(ImportError, match=r"ctxemb\[onnx\]"):
        Embedder.from_pretrained(tiny, precision="onnx-int8")
    assert backends.onnxruntime_version() is None
    _, skipped = available_precisions(torch.device("cpu"))
    assert "onnxruntime is not installed" in skipped["onnx-fp32"]


def test_auto_picks_a_path_caches_it_reuses_it_and_records_it(tiny, monkeypatch, cache):
    from ctxemb.search.text import build_sentence_index

    first = Embedder.from_pretrained(tiny, precision="auto")
    choice = first.precision_choice
    assert choice is not None and not choice.from_cache
    assert first.config.precision == choice.precision and choice.precision in PRECISIONS
    assert all(r.passed == (r.cosine_mean >= r.bound and (r.precision == "fp32" or
                                                            r.cosine_min >= autoprecision.LEAST_WORD_COSINE))
               for r in choice.results.values())
    assert choice.results[choice.precision].passed
    saved = json.loads(choice.cache_file.read_text())
    assert saved["precision"] == choice.precision and saved["key"]["model"] == first.fingerprint
    assert choice.cache_file.is_relative_to(cache)

    def no_probe(*args, **kwargs):
        raise AssertionError("probed again despite the cache")

    monkeypatch.setattr(autoprecision, "probe_precisions", no_probe)
    monkeypatch.setattr(autoprecision, "MAX_PROBES", 1)  # a close call on this tiny model is not probed again
    again = Embedder.from_pretrained(tiny, precision="auto")
    assert again.precision_choice.from_cache and again.config.precision == choice.precision
    assert again.config == EmbedderConfig(model=str(tiny), precision=choice.precision)
    vecs = again.embed_words(SENTS, show_progress_bar=False)  # the backend is built from the cached choice
    assert [v.shape[0] for v in vecs] == [len(s) for s in SENTS]
    # stores and indexes record the chosen path, not "auto"
    assert embedder_config_dict(again)["precision"] == choice.precision
    index = build_sentence_index(again, ["the bank of the river", "she sat", "money"], show_progress_bar=False)
    assert index.embedder_config["precision"] == choice.precision


def test_a_damaged_cache_file_is_probed_again(tiny, caplog):
    enc = load_encoder(tiny)
    tok = Embedder.from_pretrained(tiny).tokenizer
    choice = choose_precision(enc, tok, layers=[-1], model_name="tiny", repeats=1)
    choice.cache_file.write_text("{ not json")
    with caplog.at_level("WARNING", logger="ctxemb.runtime.autoprecision"):
        again = choose_precision(enc, tok, layers=[-1], model_name="tiny", repeats=1)
    assert not again.from_cache and "probing again" in caplog.text
    assert json.loads(again.cache_file.read_text())["precision"] == again.precision


def test_a_probe_says_what_it_measures_and_records_its_noise(tiny, caplog):
    """(The cache's rules for busy and close probes: tests/test_autoprecision_cache.py, with faked timings.)"""
    enc = load_encoder(tiny)
    tok = Embedder.from_pretrained(tiny).tokenizer
    with caplog.at_level("WARNING", logger="ctxemb.runtime.autoprecision"):
        choice = autoprecision.probe_precisions(enc, tok, layers=[-1], candidates=["fp32", "int8"], model_name="tiny",
                                                repeats=2)
    assert re.search(r"measuring fp32, int8 on this CPU for tiny \(about \d+ s; cached afterwards\)", caplog.text)
    assert all(r.noise >= 0 for r in choice.results.values()) and choice.noise >= autoprecision.NOISE_FLOOR


@pytest.mark.parametrize("native", [False, None])
def test_bf16_is_never_probed_or_chosen_without_native_bf16(tiny, monkeypatch, native):
    monkeypatch.setattr("ctxemb.core.precision.cpu_has_native_bf16", lambda: native)
    candidates, skipped = available_precisions(torch.device("cpu"))
    assert "bf16" not in candidates and "bf16" in skipped
    enc = load_encoder(tiny)
    choice = choose_precision(enc, Embedder.from_pretrained(tiny).tokenizer, layers=[-1], use_cache=False, repeats=1)
    assert "bf16" not in choice.results and choice.precision != "bf16"
    # ...while a CPU with it gets bf16 probed (so the test above is not vacuous)
    monkeypatch.setattr("ctxemb.core.precision.cpu_has_native_bf16", lambda: True)
    assert "bf16" in available_precisions(torch.device("cpu"))[0]


def test_auto_keeps_fp32_when_no_path_meets_its_bound(tiny, monkeypatch):
    for p in PRECISIONS:
        if p != "fp32":
            monkeypatch.setitem(ACCURACY_BOUNDS, p, 1.01)  # unreachable
    choice = autoprecision.probe_precisions(load_encoder(tiny), Embedder.from_pretrained(tiny).tokenizer,
                                            layers=[3, 4], candidates=["fp32", "int8"], repeats=1)
    assert choice.precision == "fp32" and not choice.results["int8"].passed
    assert choice.backend.precision == "fp32"


def test_auto_needs_every_word_above_the_least_cosine(tiny, monkeypatch):
    monkeypatch.setitem(ACCURACY_BOUNDS, "int8", 0.0)  # any mean passes ...
    monkeypatch.setattr(autoprecision, "LEAST_WORD_COSINE", 1.01)  # ... but no word reaches the least cosine
    choice = autoprecision.probe_precisions(load_encoder(tiny), Embedder.from_pretrained(tiny).tokenizer,
                                            layers=[3, 4], candidates=["fp32", "int8"], repeats=1)
    assert choice.precision == "fp32" and not choice.results["int8"].passed and choice.results["fp32"].passed


@pytest.mark.parametrize("speeds, expected", [
    ({"fp32": 1000, "int8": 1040}, "fp32"),  # under 5% faster: not worth any accuracy
    ({"fp32": 1000, "int8": 1500, "onnx-int8": 3000}, "onnx-int8"),
    ({"fp32": 1000, "bf16": 2000, "onnx-int8": 2050}, "bf16"),  # a tie on speed: the more accurate
    ({"fp32": 1000, "int8": 1500, "onnx-fp32": 9000}, "int8"),  # the fastest failed its bound
])
def test_selection_rule(speeds, expected):
    cosine = {"fp32": 1.0, "bf16": 0.99999, "int8": 0.995, "onnx-int8": 0.994, "onnx-fp32": 0.99}
    results = {p: autoprecision.ProbeResult(p, float(v), cosine[p], cosine[p], ACCURACY_BOUNDS[p],
                                            cosine[p] >= ACCURACY_BOUNDS[p], 0.0) for p, v in speeds.items()}
    assert autoprecision.select_precision(results) == expected


def test_with_config_shares_the_backend(tiny):
    emb = Embedder.from_pretrained(tiny, precision="int8")
    backend = emb.backend
    assert emb.with_config(layers=(-1,)).backend is backend
    assert emb.with_config(precision="fp32").backend.precision == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        load_backend(emb.encoder, "fp16")
