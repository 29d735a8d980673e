"""The int8 kernel (ctxemb.runtime.int8) against its formula in float64, fused (Inductor) and unfused; its outlier
calibration and the cache of it; independence of a text's vectors from its batch-mates."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxemb.runtime import backends

from ctxemb.runtime import int8 as quantization
from ctxemb.runtime.kernels import int8_vnni_cpu, int8_vnni_ops
from ctxemb.embedding.embedder import Embedder, EmbedderConfig
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.modeling.encoder import Layer
from ctxemb.runtime.int8 import Int8Calibration, Int8Linear, Int8ResidualNorm, Int8SelfAttention, quantize_int8
from ctxemb.runtime.int8_calibration import calibrate_outliers
from tests.helpers import write_tiny_model

MODES = ["eager", pytest.param("inductor", marks=pytest.mark.skipif(
    not quantization.inductor_works(), reason="torch.compile (Inductor) needs a C++ compiler")),
         pytest.param("vnni", marks=pytest.mark.skipif(
             int8_vnni_ops() is None, reason=f"no native int8 kernel here: {int8_vnni_cpu()[1]} (or it did not build)"))]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "m", num_hidden_layers=4)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXEMB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def brute_force(weight, bias, x, outliers=(), activation=None):
    """The int8 Linear in float64: outlier features O in full precision with the original weights, the others
    quantized per token (activations: asymmetric, an integer zero point) and per output channel (weights)."""
    w = weight.detach().double()
    O = sorted(outliers)
    w_in, rows = w.clone(), x.reshape(-1, x.shape[-1]).double()
    w_in[:, O] = 0
    sw = w_in.abs().amax(1).clamp_min(1e-300) / quantization.weight_levels()  # 63 on CPUs without VNNI
    qw = torch.round(w_in / sw[:, None])
    x_in = rows.clone()
    x_in[:, O] = 0
    low = x_in.amin(1, keepdim=True).clamp_max(0)
    sx = (x_in.amax(1, keepdim=True).clamp_min(0) - low).clamp_min(1e-300) / 255
    zero = torch.round(-low / sx) - 128
    qx = torch.clamp(torch.round(x_in / sx) + zero, -128, 127)
    y = ((qx - zero) @ qw.T) * sx * sw + rows[:, O] @ w[:, O].T + bias.detach().double()
    if activation is not None:
        y = activation(y)
    return y.reshape(*x.shape[:-1], -1)


def test_weight_levels_make_int_mm_exact():
    """The probe's promise on this machine's CPU: full-range activations times weights within the chosen range
    multiply exactly (and the range is 127 where the CPU has VNNI or AMX)."""
    levels = quantization.weight_levels()
    assert levels in (127, 63)
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(-128, 128, (64, 384), dtype=torch.int8, generator=gen)
    b = torch.randint(-levels, levels + 1, (384, 1152), dtype=torch.int8, generator=gen)
    assert torch.equal(torch._int_mm(a, b).long(), a.long() @ b.long())
    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text() if cpuinfo.is_file() else ""
    if (" avx512_vnni" in flags or " amx_int8" in flags) and not os.environ.get("ONEDNN_MAX_CPU_ISA"):
        assert levels == 127


def _close(got, want):
    # a value at a rounding tie may round the other way in float32: one quantization step of one feature
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=2e-4 * float(want.abs().max()))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("outliers", [(), (5, 11), tuple(range(20))])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_int8_linear_matches_its_float64_formula(mode, outliers, activation):
    torch.manual_seed(0)
    linear = torch.nn.Linear(52, 80)  # the native kernel: a full and a partial panel, K not a multiple of 16
    x = torch.randn(2, 7, 52)
    x[1, 3, 5] = 300.0  # a massive activation on one token, in an outlier feature ...
    x[..., 11] *= 5
    x[0, 2, 30] = 45.0  # ... and one in a feature that is not (that token's own scale absorbs it)
    q = Int8Linear.from_linear(linear, outliers, activation=activation, mode=mode)
    with torch.inference_mode():
        got = q(x)
    act = torch.nn.functional.gelu if activation == "gelu" else None
    _close(got, brute_force(linear.weight, linear.bias, x, outliers, act))
    assert got.shape == (2, 7, 80) and got.dtype == torch.float32 and q.mode == mode
    if 5 in outliers and activation == "none":  # the token with the massive activation keeps its other features
        exact = linear(x).detach()
        plain = brute_force(linear.weight, linear.bias, x).float()  # no outlier features
        assert (plain - exact)[1, 3].norm() > 3 * (got - exact)[1, 3].norm()


@pytest.mark.parametrize("mode", MODES)
def test_fused_blocks_match_the_float64_formula(mode):
    """Q/K/V as one product and the residual + LayerNorm epilogue equal the float64 formula of their Linears."""
    from ctxemb.models.encoder_config import EncoderConfig

    torch.manual_seed(1)
    cfg = EncoderConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=48, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    layer = Layer(cfg).eval()
    x = torch.randn(3, 6, 32)
    mask = torch.zeros(3, 1, 1, 6)
    mask[2, ..., 4:] = torch.finfo(torch.float32).min
    sa = layer.attention.self
    qsa = Int8SelfAttention(sa, outliers=(3,), mode=mode)
    with torch.inference_mode():
        got = qsa(x, mask)
        proj = [brute_force(p.weight, p.bias, x, (3,)).float().view(3, 6, 4, 8).transpose(1, 2)
                for p in (sa.query, sa.key, sa.value)]
        want = torch.nn.functional.scaled_dot_product_attention(*proj, attn_mask=mask).transpose(1, 2).reshape(3, 6, 32)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    out = layer.output
    h, residual = torch.randn(3, 6, 48), torch.randn(3, 6, 32)
    with torch.inference_mode():
        got = Int8ResidualNorm(out, outliers=(0, 7), mode=mode)(h, residual)
        y = brute_force(out.dense.weight, out.dense.bias, h, (0, 7)).float() + residual
        want = out.LayerNorm(y)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_a_row_is_bitwise_the_same_alone_and_in_a_batch_with_outliers(mode):
    torch.manual_seed(2)
    q = Int8Linear.from_linear(torch.nn.Linear(64, 48), outliers=(7,), mode=mode)
    row = torch.randn(1, 64)
    mates = torch.randn(5, 64)
    mates[:, 7] = 500.0  # an outlier feature (float32 path) ...
    mates[1, 20] = -900.0  # ... and massive values elsewhere, which the old per-call branch made outliers for all
    mates[3, 33] = 250.0
    with torch.inference_mode():
        alone = q(row)
        batched = q(torch.cat([mates[:2], row, mates[2:]]))[2:3]
    assert torch.equal(alone, batched)


def _outlier_heavy_encoder(tiny):
    """The tiny model with a massive activation planted on the token "mouse" (absent from the calibration text)."""
    enc = load_encoder(tiny)
    tok = load_tokenizer(tiny)
    [mouse] = tok.tokenize_words([["mouse"]])[0].ids
    with torch.no_grad():
        enc.embeddings.word_embeddings.weight[mouse, 9] = 40.0
        enc.embeddings.LayerNorm.weight[9] = 8.0
    return enc, tok


@pytest.mark.parametrize("mode", MODES)
def test_int8_text_vectors_do_not_depend_on_outlier_heavy_batch_mates(tiny, mode, monkeypatch):
    monkeypatch.setattr(quantization, "kernel_mode", lambda fused=None: mode)
    enc, tok = _outlier_heavy_encoder(tiny)
    emb = Embedder(enc, tok, EmbedderConfig(precision="int8"))
    text = ["the", "bank", "of", "the", "river", "sat"]
    mates = [["mouse", "bank", "of", "the", "river", "sat"], ["the", "bank", "of", "mouse", "river", "mouse"],
             ["mouse", "mouse", "of", "the", "river", "sat"]]
    with torch.inference_mode():
        states = emb.backend.hidden_states(*_batch(tok, mates), [0])  # the input of the first Q, K, V
    assert float(states.abs().max()) > 20  # the batch-mates do carry massive activations
    alone = emb.embed_words([text], show_progress_bar=False)[0]
    batched = emb.embed_words(mates[:2] + [text] + mates[2:], batch_size=8, show_progress_bar=False)[2]
    np.testing.assert_allclose(batched, alone, rtol=0, atol=1e-6)


def _batch(tok, sentences):
    items = tok.tokenize_words(sentences)
    seqs = [tok.with_specials(it.ids)[0] for it in items]
    T = max(map(len, seqs))
    ids = torch.full((len(seqs), T), tok.pad_token_id)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
    return ids, mask


def test_calibration_finds_a_planted_outlier_feature_and_respects_the_cap(tiny):
    enc = load_encoder(tiny)
    tok = load_tokenizer(tiny)
    with torch.no_grad():
        enc.encoder.layer[0].intermediate.dense.bias[17] = 100.0  # a large input feature of layer 0's down-projection
    ids = [tok.with_specials(it.ids)[0] for it in tok.tokenize_words([["the", "bank"], ["she", "sat", "on", "a"]])]
    cal = calibrate_outliers(enc, ids, threshold=20.0, max_fraction=0.05)
    name = "encoder.layer.0.output.dense"
    assert 17 in cal.features[name] and cal.maxima[name] > 20
    assert all(len(v) <= int(0.05 * 48) for v in cal.features.values())
    assert cal.tokens == sum(map(len, ids))
    none = calibrate_outliers(enc, ids, threshold=1e9)
    assert not any(none.features.values())
    assert Int8Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    with pytest.raises(ValueError, match="calibration version"):
        Int8Calibration.from_dict({**cal.to_dict(), "version": -1})
    with pytest.raises(ValueError, match="threshold"):
        calibrate_outliers(enc, ids, threshold=0)
    with pytest.raises(ValueError, match="token_ids is empty"):
        calibrate_outliers(enc, [])
    # the quantized encoder takes the calibrated features
    q = quantize_int8(enc, cal, fused=False)
    assert 17 in q.encoder.layer[0].output.dense.outliers
    with pytest.raises(KeyError, match="not Linear layers"):
        quantize_int8(enc, {"encoder.nothing": [1]}, fused=False)


def test_calibration_is_cached_once_per_model(tiny, cache, monkeypatch, caplog):
    enc, tok = load_encoder(tiny), load_tokenizer(tiny)
    first = backends.int8_calibration(enc, tok, model_name="tiny")
    [path] = (cache / "autoprecision").glob("tiny-int8-calibration-*.json")
    assert json.loads(path.read_text())["calibration"]["features"] == first.features

    def no_calibration(*a, **k):
        raise AssertionError("calibrated again despite the cache")
    monkeypatch.setattr(backends, "calibrate_outliers", no_calibration)
    assert backends.int8_calibration(enc, tok, model_name="tiny") == first
    monkeypatch.undo()
    monkeypatch.setenv("CTXEMB_CACHE", str(cache))
    path.write_text("{not json")
    assert backends.int8_calibration(enc, tok, model_name="tiny") == first  # damaged: calibrated again, reported
    assert "ignoring the cached int8 calibration" in caplog.text


def test_int8_backend_needs_the_tokenizer(tiny):
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        backends.load_backend(load_encoder(tiny), "int8")


def test_unfused_mode_is_explicit_and_any_module_quantizes():
    lin = torch.nn.Linear(8, 4)
    q = quantize_int8(torch.nn.Sequential(lin, torch.nn.ReLU(), torch.nn.Linear(4, 2)), fused=False)
    assert isinstance(q[0], Int8Linear) and q[0].mode == "eager" and isinstance(lin, torch.nn.Linear)
    with pytest.raises(ValueError, match="activation must be"):
        Int8Linear.from_linear(lin, activation="swish")
    with pytest.raises(ValueError, match="outlier features must be in 0..7"):
        Int8Linear.from_linear(lin, outliers=[8])


@pytest.mark.skipif(int8_vnni_ops() is None, reason="no native int8 kernel here")
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu"])
def test_native_kernel_activations_and_sizes_match_the_float64_formula(activation):
    """The other activations, and sizes around the kernel's tiles: rows 1..13 (6-row micro-tiles, and the 48-row
    blocks split between threads), output panels of 16..80 channels, K from 4 to 388."""
    acts = {"gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"), "relu": torch.relu}
    torch.manual_seed(3)
    for rows, k, n in [(1, 4, 16), (5, 36, 32), (13, 388, 80), (97, 64, 48)]:
        linear = torch.nn.Linear(k, n)
        q = Int8Linear.from_linear(linear, (1,) if k > 4 else (), activation=activation, mode="vnni")
        x = torch.randn(rows, k) * 3
        with torch.inference_mode():
            got = q(x)
        assert q.mode == "vnni"
        _close(got, brute_force(linear.weight, linear.bias, x, (1,) if k > 4 else (), acts[activation]))


@pytest.mark.skipif(int8_vnni_ops() is None, reason="no native int8 kernel here")
def test_native_kernel_rows_split_between_threads_change_no_bit():
    """Each thread takes a contiguous part of the rows (whole micro-tiles); a row's result does not depend on which
    thread computed it or where its part began, with every epilogue (GELU, residual + LayerNorm, quantized output)."""
    torch.manual_seed(8)
    up = Int8Linear.from_linear(torch.nn.Linear(64, 96), (3,), activation="gelu", mode="vnni")
    down = Int8Linear.from_linear(torch.nn.Linear(96, 64), (5,), mode="vnni")
    norm = torch.nn.LayerNorm(64)
    threads = torch.get_num_threads()
    try:
        for rows in (1, 5, 7, 13, 49, 97, 145):
            x = torch.randn(rows, 64) * 2
            results = []
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                with torch.inference_mode():
                    h = up.quantized_output(x, down)
                    results.append((up(x), down._native(h, residual=x, norm=norm), h.u, h.scale))
            assert all(torch.equal(a, b) for r in results[1:] for a, b in zip(results[0], r)), rows
    finally:
        torch.set_num_threads(threads)


def test_a_linear_the_native_kernel_cannot_tile_takes_the_next_mode():
    torch.manual_seed(4)
    linear = torch.nn.Linear(8, 24)  # N = 24 is not a multiple of the kernel's 16 channels
    q = Int8Linear.from_linear(linear, mode="vnni")
    assert q.mode == ("inductor" if quantization.inductor_works() else "eager")
    x = torch.randn(3, 8)
    with torch.inference_mode():
        _close(q(x), brute_force(linear.weight, linear.bias, x))


def test_native_kernel_is_used_exactly_where_the_cpu_has_vnni():
    ok, why = int8_vnni_cpu()
    if not ok:
        assert int8_vnni_ops() is None and quantization.kernel_mode() != "vnni", why
    elif quantization.inductor_works():  # a C++ compiler is here, so the kernel must build, pass its check and run
        assert int8_vnni_ops() is not None and quantization.kernel_mode() == "vnni"


@pytest.mark.skipif(int8_vnni_ops() is None, reason="no native int8 kernel here")
def test_up_projection_quantizing_for_the_down_projection_changes_no_bit(tiny):
    """With the native kernel each block's up-projection hands the down-projection its input already quantized
    (the float32 GELU output stays in the kernel's scratch): the same integers, so bitwise the same hidden states."""
    enc, tok = _outlier_heavy_encoder(tiny)
    outliers = {name: ([3, 17] if name.endswith(".output.dense") and ".attention." not in name else [9])
                for name, m in enc.named_modules() if isinstance(m, torch.nn.Linear)}
    q = quantize_int8(enc, outliers, fused=True)
    ups = [m for m in q.modules() if isinstance(m, quantization.Int8Intermediate)]
    assert ups and all(m._consumer for m in ups) and any(m._consumer[0].outliers for m in ups)
    ids, mask = _batch(tok, [["the", "mouse", "sat", "on", "the", "bank"], ["river"]])
    with torch.inference_mode():
        fused = q(ids, mask).hidden_states
        for m in ups:
            m._consumer = ()
        plain = q(ids, mask).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(fused, plain))


@pytest.mark.parametrize("env", [{"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}])
def test_the_native_kernel_honours_torchs_instruction_set_limits(monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ok, why = int8_vnni_cpu()
    assert not ok and next(iter(env)) in why
