"""The int8 path's native attention (``attention.cpp`` of ctxemb.runtime.kernels) against float64 attention on both
of its branches (float32 products, and bfloat16 products where the CPU has AVX512-BF16, each forced), the choice of
branch from the CPU's flags, and the quantized hand-overs between the int8 kernels (an output quantized by the kernel
that produces it, for the Linear that reads it next) against quantizing that output separately."""

import pytest
import torch
import torch.nn.functional as F

from ctxemb.core.precision import CpuInfo
from ctxemb.modeling.encoder import Encoder
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.runtime import int8 as quantization
from ctxemb.runtime import kernels
from ctxemb.runtime.int8 import (Int8Intermediate, Int8Linear, Int8ResidualNorm, Int8SelfAttention, QuantizedRows,
                                 quantize_int8)
from ctxemb.runtime.kernels import attention_bf16_cpu, int8_vnni_cpu, int8_vnni_ops

OPS = int8_vnni_ops()
pytestmark = pytest.mark.skipif(OPS is None, reason=f"no native kernel here: {int8_vnni_cpu()[1]} (or no build)")
BRANCHES = ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not attention_bf16_cpu()[0], reason=f"bf16 attention needs AVX512-BF16: {attention_bf16_cpu()[1]}"))]
NEG = torch.finfo(torch.float32).min


def _qkv(B, T, N, D, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B * T, 3 * N * D, generator=gen) * scale


def _padding(lengths, T):
    mask = torch.zeros(len(lengths), 1, 1, T)
    for b, n in enumerate(lengths):
        mask[b, ..., n:] = NEG
    return mask


def _reference(qkv, B, N, mask, bf16=False):
    """softmax(q k^T / sqrt(D) + mask) v in float64, (B*T, 3H) -> (B*T, H); with bf16, q, k, v and p rounded to
    bfloat16 first (what the kernel's bf16 products multiply)."""
    T, H = qkv.shape[0] // B, qkv.shape[1] // 3
    D = H // N
    rnd = (lambda t: t.bfloat16().double()) if bf16 else (lambda t: t.double())
    q, k, v = qkv.view(B, T, 3, N, D).permute(2, 0, 3, 1, 4).unbind(0)
    s = rnd(q) @ rnd(k).transpose(-1, -2) * D ** -0.5
    if mask is not None:
        s = s + mask.double()
    e = (s - s.amax(-1, keepdim=True)).exp()
    return ((rnd(e) @ rnd(v)) / e.sum(-1, keepdim=True)).transpose(1, 2).reshape(B * T, H)


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("B, T, N, D", [(3, 7, 4, 16), (2, 33, 3, 32), (1, 70, 2, 64), (2, 5, 3, 48)])
def test_native_attention_matches_float64_attention(branch, B, T, N, D):
    """Sequence lengths off the kernel's 16-key vectors, two blocks of query rows (70 > 64), head sizes 16-64; masks:
    key padding (B, 1, 1, T), padding plus a position bias per head (B, N, T, T) as MPNet's, none, and one that is
    not contiguous over keys (read through a copy)."""
    bf16 = branch == "bf16"
    qkv = _qkv(B, T, N, D, seed=T)
    lengths = [T] + [max(1, T - 3 * b) for b in range(1, B)]
    padding = _padding(lengths, T)
    bias = torch.randn(1, N, T, T, generator=torch.Generator().manual_seed(1))
    per_query = torch.zeros(B, 1, T, 1).masked_fill(torch.rand(B, 1, T, 1) < 0.3, -5.0)
    for mask in (padding, padding + bias, None, per_query):
        got = OPS.attention(qkv, B, N, mask, bf16).double()
        if bf16:  # float64 with the same bf16 operands (up to a p rounded to the neighbouring bf16), and within
            # bf16's rounding of float64 attention
            torch.testing.assert_close(got, _reference(qkv, B, N, mask, bf16=True), rtol=0, atol=2e-3)
            torch.testing.assert_close(got, _reference(qkv, B, N, mask), rtol=0, atol=0.05)
        else:
            torch.testing.assert_close(got, _reference(qkv, B, N, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("branch", BRANCHES)
def test_a_sequence_gets_the_same_bits_alone_and_padded_in_a_batch(branch):
    """Masked keys contribute exactly nothing (their exp is 0, not a tiny number), so a sequence's attention is
    bitwise the same alone and padded to a longer batch, float32 or quantized."""
    bf16, N, D, n = branch == "bf16", 3, 32, 9
    alone = _qkv(1, n, N, D, seed=5)
    mates = _qkv(2, 40, N, D, seed=6)
    batch = mates.view(2, 40, -1).clone()
    batch[1, :n] = alone
    batch[1, n:] = 1e3 * torch.randn(40 - n, 3 * N * D)  # padding rows with anything in them
    batch = batch.view(80, -1)
    mask = _padding([40, n], 40)
    keep, index = torch.ones(N * D), torch.tensor([4, 50])
    keep[index] = 0
    a = OPS.attention(alone, 1, N, None, bf16)
    b = OPS.attention(batch, 2, N, mask, bf16)[40:40 + n]
    assert torch.equal(a, b)
    qa = OPS.attention_quantized(alone, 1, N, _padding([n], n), bf16, keep, index)
    qb = OPS.attention_quantized(batch, 2, N, mask, bf16, keep, index)
    assert all(torch.equal(x, y[40:40 + n]) for x, y in zip(qa, qb))


@pytest.mark.parametrize("branch", BRANCHES)
def test_quantized_attention_equals_quantizing_its_output(branch):
    bf16, B, T, N, D = branch == "bf16", 3, 21, 2, 32
    qkv, mask = _qkv(B, T, N, D, seed=7, scale=2.0), _padding([21, 4, 13], T)
    keep, index = torch.ones(N * D), torch.tensor([0, 17, 63])
    keep[index] = 0
    got = OPS.attention_quantized(qkv, B, N, mask, bf16, keep, index)
    want = OPS.quantize_rows(OPS.attention(qkv, B, N, mask, bf16), keep, index)
    assert all(torch.equal(x, y) for x, y in zip(got, want))


@pytest.mark.skipif(not attention_bf16_cpu()[0], reason="bf16 attention needs AVX512-BF16")
@pytest.mark.parametrize("B, T, N, D", [(3, 7, 2, 16), (2, 33, 3, 32), (1, 70, 2, 64), (2, 5, 3, 48)])
def test_bfloat16_qkv_gives_the_bits_of_float32_qkv_rounded_by_the_kernel(B, T, N, D):
    """q/k/v in bfloat16 (torch's round to nearest even) are the operands the bf16 products round float32 q/k/v to:
    the same attention to the last bit, plain and quantized."""
    qkv, mask = _qkv(B, T, N, D, seed=3, scale=2.0), _padding([T] + [max(1, T - 3)] * (B - 1), T)
    qkv[0, :4] = torch.tensor([0.0, -0.0, 1e-39, -3e-39])  # zeros and denormals: the kernel flushes denormals
    half = qkv.bfloat16()
    half[0, 2:4] = torch.tensor([0.0, -0.0])  # (to a zero of their sign, as vcvtneps2bf16 does)
    assert torch.equal(OPS.attention(half, B, N, mask, True), OPS.attention(qkv, B, N, mask, True))
    got = OPS.attention_quantized(half, B, N, mask, True, None, None)
    assert all(torch.equal(x, y) for x, y in zip(got, OPS.attention_quantized(qkv, B, N, mask, True, None, None)))
    with pytest.raises(RuntimeError, match="bfloat16 q/k/v need the bf16 products"):
        OPS.attention(half, B, N, mask, False)


def test_a_bf16_product_output_is_the_float32_output_rounded_to_nearest_even():
    torch.manual_seed(5)
    q = Int8Linear.from_linear(torch.nn.Linear(64, 96), (3, 40), mode="vnni")
    x = torch.randn(2, 37, 64) * 3
    with torch.inference_mode():
        got = q(x, torch.bfloat16)
        assert got.dtype == torch.bfloat16 and got.shape == (2, 37, 96) and torch.equal(got, q(x).bfloat16())
        with pytest.raises(ValueError, match="out_dtype must be torch.float32 or torch.bfloat16"):
            q(x, torch.float16)
        gelu = Int8Linear.from_linear(torch.nn.Linear(64, 96), activation="gelu", mode="vnni")
        with pytest.raises(ValueError, match="needs the 'vnni' mode and no activation"):
            gelu(x, torch.bfloat16)


def test_the_bf16_branch_follows_the_cpu_flags(monkeypatch):
    flags = kernels.cpu_info().flags
    monkeypatch.setattr(kernels, "int8_vnni_cpu", lambda: (True, "the CPU has AVX512-VNNI"))
    monkeypatch.setattr(kernels, "cpu_info", lambda: CpuInfo("a CPU", flags - {"avx512_bf16"}))
    assert attention_bf16_cpu() == (False, "the CPU lacks avx512_bf16")
    monkeypatch.setattr(kernels, "cpu_info", lambda: CpuInfo("a CPU", flags | {"avx512_bf16"}))
    assert attention_bf16_cpu()[0]
    monkeypatch.undo()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # torch limited below AVX-512: no native kernel at all
    assert attention_bf16_cpu() == (False, "ATEN_CPU_CAPABILITY=avx2 limits torch to instructions below AVX-512")


def _config(heads=4, hidden=64, layers=2):
    return EncoderConfig(vocab_size=60, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=96, max_position_embeddings=64, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)


def _encoder(seed=0, **kw):
    torch.manual_seed(seed)
    enc = Encoder(_config(**kw)).eval()
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return enc


def _inputs(B=4, T=19, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (B, T), generator=gen)
    mask = torch.ones(B, T, dtype=torch.long)
    for b in range(1, B):
        mask[b, T - 4 * b:] = 0
    return ids, mask


@pytest.mark.parametrize("cpu_has_bf16", [False, True])
def test_the_attention_branch_is_the_cpus_unless_asked(monkeypatch, cpu_has_bf16):
    monkeypatch.setattr(quantization, "attention_bf16_cpu", lambda: (cpu_has_bf16, "forced by the test"))
    sa = _encoder().encoder.layer[0].attention.self
    assert Int8SelfAttention(sa, mode="vnni").bf16 is cpu_has_bf16
    assert Int8SelfAttention(sa, mode="vnni", bf16=False).bf16 is False
    if cpu_has_bf16:
        assert Int8SelfAttention(sa, mode="vnni", bf16=True).bf16 is True
    else:
        with pytest.raises(ValueError, match="bf16=True needs a CPU with AVX512-BF16"):
            Int8SelfAttention(sa, mode="vnni", bf16=True)
    # head size 8 (not a multiple of 16), or another kernel mode: attention in float32 by torch
    odd = _encoder(heads=8).encoder.layer[0].attention.self
    assert not Int8SelfAttention(odd, mode="vnni").native and not Int8SelfAttention(sa, mode="eager").native


@pytest.mark.parametrize("branch", BRANCHES)
def test_int8_encoder_with_native_attention_is_as_close_to_fp32_as_with_float32_attention(branch, monkeypatch):
    """The whole int8 encoder on each branch, forced: per-token cosine to the exact encoder as good as with the
    attention by torch in float32 (within 1e-4), and the two int8 encoders close to each other."""
    monkeypatch.setattr(quantization, "attention_bf16_cpu", lambda: (branch == "bf16", "forced by the test"))
    enc = _encoder(seed=1)
    ids, mask = _inputs()
    outliers = {"encoder.layer.0.output.dense": [3, 40]}
    native = quantize_int8(enc, outliers, fused=True)
    torch_attention = quantize_int8(enc, outliers, fused=True)
    for m in torch_attention.modules():
        if isinstance(m, Int8SelfAttention):
            assert m.native and m.bf16 is (branch == "bf16")
            m.native, m._consumer = False, ()
    real = mask.bool()
    with torch.inference_mode():
        exact = enc(ids, mask).hidden_states
        a, b = native(ids, mask).hidden_states, torch_attention(ids, mask).hidden_states
    for x, y, z in zip(exact[1:], a[1:], b[1:]):
        cos_native = F.cosine_similarity(y[real].double(), x[real].double(), dim=-1)
        cos_torch = F.cosine_similarity(z[real].double(), x[real].double(), dim=-1)
        assert float(cos_native.min()) > 0.99 and float(cos_native.mean()) >= float(cos_torch.mean()) - 1e-4
        torch.testing.assert_close(y[real], z[real], rtol=0, atol=0.05 if branch == "bf16" else 1e-3)


def _feeds(q):
    return {name: m._consumer for name, m in q.named_modules()
            if isinstance(m, (Int8SelfAttention, Int8Intermediate, Int8ResidualNorm))}


@pytest.mark.parametrize("branch", BRANCHES)
def test_handing_over_quantized_outputs_changes_no_bit(branch, monkeypatch):
    """Every producer that can quantizes its output for the Linear that reads it next (attention -> attention output;
    its LayerNorm -> the up-projection; up-projection -> down-projection; a block's output -> the next block's
    Q/K/V): the same integers as quantizing those outputs separately, so bitwise the same hidden states."""
    monkeypatch.setattr(quantization, "attention_bf16_cpu", lambda: (branch == "bf16", "forced by the test"))
    enc = _encoder(seed=2, layers=3)
    q = quantize_int8(enc, {"encoder.layer.1.attention.self.query": [5], "encoder.layer.1.intermediate.dense": [7],
                            "encoder.layer.2.attention.self.key": [1, 2]}, fused=True)
    layers = q.encoder.layer
    feeds = _feeds(q)
    for i, layer in enumerate(layers):
        assert feeds[f"encoder.layer.{i}.attention.self"] == (layer.attention.output.dense,)
        assert feeds[f"encoder.layer.{i}.attention.output"] == (layer.intermediate.dense,)
        assert feeds[f"encoder.layer.{i}.intermediate"] == (layer.output.dense,)
        assert feeds[f"encoder.layer.{i}.output"] == ((layers[i + 1].attention.self.qkv,) if i + 1 < len(layers)
                                                      else ())
    ids, mask = _inputs(seed=3)
    with torch.inference_mode():
        fed = q(ids, mask).hidden_states
        for name, m in q.named_modules():
            if name in feeds:
                m._consumer = ()
        plain = q(ids, mask).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(fed, plain))
    assert not any(quantization._HANDED_OVER in h.__dict__ for h in fed[:-1])  # each taken by its consumer


def test_a_handed_over_form_goes_only_to_its_consumer_and_only_with_its_tensor():
    enc = _encoder(seed=3, layers=1)
    layer = enc.encoder.layer[0]
    norm = Int8ResidualNorm(layer.attention.output, outliers=(2,), mode="vnni")
    up = Int8Linear.from_linear(layer.intermediate.dense, (9,), mode="vnni")
    other = Int8Linear.from_linear(layer.intermediate.dense, (), mode="vnni")
    norm.feed(up)
    h, residual = torch.randn(2, 5, 64), torch.randn(2, 5, 64)
    with torch.inference_mode():
        y = norm(h, residual)
        _, rows = y.__dict__[quantization._HANDED_OVER]
        assert isinstance(rows, QuantizedRows)
        assert all(torch.equal(a, b) for a, b in zip(rows[:3], up.quantize_input(y.reshape(-1, 64))[:3]))
        want_other, want_up = other(y.clone()), up(y.clone())  # quantized by themselves
        assert torch.equal(other(y), want_other)  # another Linear quantizes the tensor itself ...
        assert quantization._HANDED_OVER in y.__dict__  # ... and leaves the form to its consumer
        assert torch.equal(up(y.clone()), want_up)  # a copy of the tensor carries nothing
        assert torch.equal(up(y), want_up) and quantization._HANDED_OVER not in y.__dict__  # taken once


def test_the_int8_linears_profile_of_encode_throughput_sees_every_product(monkeypatch):
    """benchmarks.encode_throughput counts the int8 products by module hooks: the Q/K/V product, bfloat16 output or
    not, must go through its module call (4 products per layer)."""
    from benchmarks.encode_throughput import _profile_pass

    torch.manual_seed(0)
    cfg = EncoderConfig(vocab_size=60, hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                        intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    enc = Encoder(cfg).eval()
    q = quantize_int8(enc, {})

    class Backend:
        encoder = q

        @staticmethod
        def hidden_states(ids, mask, layers):
            with torch.inference_mode():
                states = q(ids, mask, compute_pooler=False).hidden_states
            return torch.stack([states[i] for i in layers], dim=2)

    ids = torch.randint(5, 60, (3, 9))

    class Batch:
        pass

    batch = Batch()
    batch.ids, batch.mask, batch.rows, batch.spans = ids, torch.ones_like(ids), [0, 1, 2], None
    monkeypatch.setattr("benchmarks.encode_throughput.word_pass",
                        lambda batches, items, fn: [fn(b.ids, b.mask) for b in batches])
    stats = _profile_pass(Backend, [batch], None, enc)
    assert stats["calls"] == 4 * cfg.num_hidden_layers
    assert stats["flops"] == cfg.num_hidden_layers * 2 * 27 * (64 * 192 + 64 * 64 + 2 * 64 * 128)
