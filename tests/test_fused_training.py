"""The fused training ops (ctxemb.modeling.fused_training; native kernels in ctxemb/runtime/kernels/train_ops.cpp).

- The masks: the native hash and masks equal the torch reference bit for bit; the keep rate is 1 - p within
  statistical bounds; neighbouring elements, and the masks of related keys, are uncorrelated.
- Each fused op, forward and backward, with the native ops and with the reference, against the composed torch ops
  (``F.layer_norm``, softmax, matmul) given the same mask, float32 to ~1e-5 and bfloat16 to bfloat16's precision;
  the hand-written backward formulas (the reference's, which the kernels mirror) pass float64 ``gradcheck``.
- The switch: ``set_fused_training(model, ops)`` gives the ops to the BERT-layout modules only, None takes them away,
  anything else raises; :func:`use_fused` gives them only when training with dropout on float32/bfloat16 CPU tensors
  and float32 parameters; ``ctxemb.runtime.kernels.enable_fused_training`` switches the native ops on where they run
  and says why not elsewhere; a model with them on can be deep-copied.
- A tiny BERT encoder: with the switch on and (virtually) no dropout it trains as the composed path does; with
  dropout it is deterministic given the seed, and a run that restores the RNG state between two steps equals an
  uninterrupted one bit for bit; with the switch off (the default, or after None) nothing of the fused path runs.

The native tests skip, with the reason, where the ops do not run (no AVX-512, no compiler); their reference twins
run everywhere.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.precision import CpuInfo, cpu_has_native_bf16
from ctxemb.modeling import fused_training as ft
from ctxemb.modeling.encoder import AttentionOutput, Embeddings, Encoder, Output, SelfAttention
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.runtime import kernels
from ctxemb.training.state import capture_rng_state, restore_rng_state

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KEYS = (0, 1, -1, 2**63 - 1, -2**63, 0x0123456789ABCDEF, -0x5DEECE66D)


@pytest.fixture(scope="module")
def native_ops():
    ok, why = kernels.train_ops_available()
    if not ok:
        pytest.skip(f"the native training ops do not run here: {why}")
    return kernels.train_ops()


@pytest.fixture(params=["native", "reference"])
def ops(request):
    """The ops the functions are given: the native ones (skipped where they do not run), and the reference."""
    return request.getfixturevalue("native_ops") if request.param == "native" else ft._Reference


def _close(actual, expected, dtype, what):
    """float32: 1e-5; bfloat16: its precision (2^-7 relative, or absolute at the tensor's scale where the values
    cancel), since the two computations round at different points."""
    actual, expected = actual.float(), expected.float()
    scale = expected.abs().max().item()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2**-7, atol=2**-7 * scale)
    torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{what}: {m}")


# ---- the masks ----------------------------------------------------------------------------------------------------
def test_native_hashes_and_masks_equal_the_reference_bit_for_bit(native_ops):
    for key in KEYS:
        for start, n in ((0, 1), (0, 1000), (5, 33), (2**32 - 40, 40)):
            assert torch.equal(native_ops.counter_hash(key, start, n), ft.counter_hash(key, n, start=start)), key
        for p in (0.0, 0.1, 0.5, 0.9):
            assert torch.equal(native_ops.dropout_keep(key, 4097, p), ft.keep_mask(key, (4097,), p)), (key, p)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_keep_rate_is_one_minus_p_within_statistical_bounds(p):
    n = 2**20
    for key in KEYS[-2:]:
        rate = ft.keep_mask(key, (n,), p).double().mean().item()
        assert abs(rate - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5, (key, rate)


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return ((a * b).mean() / (a.std() * b.std())).item()


def test_neighbouring_elements_and_related_keys_are_uncorrelated():
    n = 2**18
    bound = 5 / n ** 0.5  # five standard deviations of the correlation of n independent pairs
    key = 0x2545F4914F6CDD1D
    keep = ft.keep_mask(key, (n,), 0.5)
    for d in (1, 2, 15, 16, 32, 384):  # within a 16-lane vector, across vectors, a row of hidden 384 apart
        assert abs(_correlation(keep[:-d], keep[d:])) < bound, d
    # keys one bit apart in either half, and consecutive keys, give unrelated masks
    for other in (key ^ 1, key ^ (1 << 31), key ^ (1 << 32), key - 2**63, key + 1):  # key - 2^63: the top bit
        assert abs(_correlation(keep, ft.keep_mask(other, (n,), 0.5))) < bound, hex(other)
    # every bit of the hash is a fair coin
    bits = (ft.counter_hash(key, n)[:, None] >> torch.arange(32)) & 1
    assert ((bits.double().mean(0) - 0.5).abs() < 5 * 0.5 / n ** 0.5).all()


def test_the_keys_come_from_torchs_generator():
    torch.manual_seed(7)
    keys = [ft.draw_key() for _ in range(3)]
    torch.manual_seed(7)
    assert [ft.draw_key() for _ in range(3)] == keys and len(set(keys)) == 3


# ---- each op against the composed torch ops ---------------------------------------------------------------------
def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("keep_sum", [True, False])
@pytest.mark.parametrize("x_dtype, residual_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                                     (torch.bfloat16, torch.bfloat16)])
def test_dropout_add_layer_norm_equals_the_composed_ops(ops, monkeypatch, keep_sum, x_dtype, residual_dtype):
    monkeypatch.setattr(ft, "_KEEP_SUM", keep_sum)
    gen = torch.Generator().manual_seed(0)
    B, T, H, p, key = 3, 7, 40, 0.2, 12345  # H: two full 16-lane vectors and a partial one
    norm = nn.LayerNorm(H, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_(generator=gen), norm.bias.normal_(generator=gen)
    x0, r0 = torch.randn(B, T, H, generator=gen).to(x_dtype), torch.randn(B, T, H, generator=gen).to(residual_dtype)
    grad = torch.randn(B, T, H, generator=gen)

    x, r = _leaves(x0, r0)
    y = ft.dropout_add_layer_norm(x, r, norm, p, key, ops=ops)
    y.backward(grad)
    got = (y, x.grad, r.grad, norm.weight.grad, norm.bias.grad)
    norm.zero_grad()

    x, r = _leaves(x0, r0)
    keep = ft.keep_mask(key, x.shape, p)
    s = r.float() + torch.where(keep, x.float() * (1 / (1 - p)), 0.0)
    want_y = F.layer_norm(s, (H,), norm.weight, norm.bias, norm.eps)
    if x_dtype == residual_dtype == torch.bfloat16:  # outside autocast, bf16 in gives bf16 out
        want_y = want_y.bfloat16()
    want_y.backward(grad)
    want = (want_y, x.grad, r.grad, norm.weight.grad, norm.bias.grad)
    for name, a, b in zip(("y", "grad x", "grad residual", "grad weight", "grad bias"), got, want):
        assert a.dtype == b.dtype, name
        _close(a, b, a.dtype, name)
    assert (x.grad[~keep] == 0).all()


def test_the_native_ops_do_not_depend_on_the_number_of_threads(native_ops):
    # each LayerNorm backward sums its weight and bias gradients over fixed chunks of rows, added in order
    gen = torch.Generator().manual_seed(6)
    x, r, g = (torch.randn(300, 72, generator=gen) for _ in range(3))
    w, b = torch.randn(72, generator=gen), torch.randn(72, generator=gen)
    scores, grad_p = torch.randn(4, 6, 33, 33, generator=gen).bfloat16(), torch.randn(4, 6, 33, 33, generator=gen)

    def run():
        y, mean, rstd, s = native_ops.dropout_add_layer_norm(x, r, w, b, 1e-5, 0.1, 3, True)
        probs, dropped = native_ops.softmax_dropout(scores, None, 0.2, 0.1, 4)
        return (y, *native_ops.dropout_add_layer_norm_backward(g, s, x.new_empty(0), r.new_empty(0), mean, rstd, w,
                                                                0.1, 3),
                *native_ops.layer_norm_dropout_backward(g, x, mean, rstd, w, 0.1, 5), probs, dropped,
                native_ops.softmax_dropout_backward(grad_p.bfloat16(), probs, 0.2, 0.1, 4))

    one = run()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = run()
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_layer_norm_dropout_equals_the_composed_ops(ops):
    gen = torch.Generator().manual_seed(1)
    B, T, H, p, key = 2, 9, 48, 0.1, -987654321
    norm = nn.LayerNorm(H, eps=1e-12)
    with torch.no_grad():
        norm.weight.normal_(generator=gen), norm.bias.normal_(generator=gen)
    x0, grad = torch.randn(B, T, H, generator=gen) * 3 + 1, torch.randn(B, T, H, generator=gen)

    (x,) = _leaves(x0)
    y = ft.layer_norm_dropout(x, norm, p, key, ops=ops)
    y.backward(grad)
    got = (y, x.grad, norm.weight.grad, norm.bias.grad)
    norm.zero_grad()

    (x,) = _leaves(x0)
    keep = ft.keep_mask(key, x.shape, p)
    want_y = torch.where(keep, F.layer_norm(x, (H,), norm.weight, norm.bias, norm.eps) * (1 / (1 - p)), 0.0)
    want_y.backward(grad)
    for name, a, b in zip(("y", "grad x", "grad weight", "grad bias"), got,
                          (want_y, x.grad, norm.weight.grad, norm.bias.grad)):
        _close(a, b, torch.float32, name)


def _composed_attention(q, k, v, mask, p, key, dtype):
    """What the fused attention computes, in composed torch ops: the products in ``dtype``, softmax and dropout in
    float32 on the rounded scores."""
    scores = torch.matmul(q.to(dtype), k.to(dtype).transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    probs = torch.softmax(scores + mask, -1)
    dropped = torch.where(ft.keep_mask(key, probs.shape, p), probs * (1 / (1 - p)), 0.0)
    return torch.matmul(dropped.to(dtype), v.to(dtype)).to(q.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_equals_the_composed_ops(ops, dtype):
    gen = torch.Generator().manual_seed(2)
    B, N, T, D, p, key = 2, 3, 19, 16, 0.1, 4242
    q0, k0, v0, grad = (torch.randn(B, N, T, D, generator=gen).to(dtype) for _ in range(4))
    mask = torch.zeros(B, 1, 1, T)
    mask[1, ..., 11:] = torch.finfo(torch.float32).min  # a padded sequence
    product = dtype if dtype == torch.float32 or cpu_has_native_bf16() else torch.float32

    q, k, v = _leaves(q0, k0, v0)
    out = ft.attention(q, k, v, mask, p, key, ops=ops)
    out.backward(grad)
    got = (out, q.grad, k.grad, v.grad)
    q, k, v = _leaves(q0, k0, v0)
    want = _composed_attention(q, k, v, mask, p, key, product)
    want.backward(grad)
    for name, a, b in zip(("out", "grad q", "grad k", "grad v"), got, (want, q.grad, k.grad, v.grad)):
        assert a.dtype == b.dtype == dtype, name
        _close(a, b, dtype, name)


def test_attention_gives_a_learned_mask_its_gradient(ops):
    gen = torch.Generator().manual_seed(3)
    B, N, T, D, p, key = 2, 2, 8, 16, 0.2, 99
    q0, k0, v0, grad = (torch.randn(B, N, T, D, generator=gen) for _ in range(4))
    bias0 = torch.randn(1, N, T, T, generator=gen)  # MPNet's relative position bias, shared by the batch
    q, k, v, bias = _leaves(q0, k0, v0, bias0)
    ft.attention(q, k, v, bias, p, key, ops=ops).backward(grad)
    got = bias.grad
    q, k, v, bias = _leaves(q0, k0, v0, bias0)
    _composed_attention(q, k, v, bias, p, key, torch.float32).backward(grad)
    _close(got, bias.grad, torch.float32, "grad mask")


def test_a_row_with_every_key_masked_attends_to_nothing(ops):
    q = k = v = torch.randn(1, 1, 4, 16)
    mask = torch.full((1, 1, 1, 4), float("-inf"))
    assert torch.equal(ft.attention(q, k, v, mask, 0.1, 5, ops=ops), torch.zeros(1, 1, 4, 16))


# ---- the backward formulas: float64 gradcheck of the reference ----------------------------------------------------
def test_the_backward_formulas_pass_gradcheck_in_float64():
    gen = torch.Generator().manual_seed(4)
    f64 = dict(dtype=torch.float64)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, **f64).requires_grad_()

    ref = ft._Reference
    x, r, w, b = rand(2, 2, 6), rand(2, 2, 6), rand(6), rand(6)
    assert torch.autograd.gradcheck(lambda *a: ft._DropoutAddLayerNorm.apply(*a, 1e-5, 0.3, 11, ref), (x, r, w, b))
    assert torch.autograd.gradcheck(lambda *a: ft._LayerNormDropout.apply(*a, 1e-5, 0.3, 12, ref), (x, w, b))
    q, k, v, m = rand(1, 2, 4, 3), rand(1, 2, 4, 3), rand(1, 2, 4, 3), rand(1, 2, 4, 4)
    assert torch.autograd.gradcheck(
        lambda *a: ft._Attention.apply(*a, 0.3, 13, ref, torch.float64), (q, k, v, m))
    # and the public functions pick the reference for float64, whatever ops they are given, and without ops
    assert ft._ops_for(object(), x) is ref and ft._ops_for(None, x.float()) is ref


# ---- a tiny BERT encoder --------------------------------------------------------------------------------------------
FLAGGED = {Embeddings, SelfAttention, AttentionOutput, Output}


def _tiny_encoder(p: float, ops=None, *, seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    cfg = EncoderConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, hidden_dropout_prob=p, attention_probs_dropout_prob=p)
    return ft.set_fused_training(Encoder(cfg), ops).train()


def _batch():
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(5, 100, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return ids, mask


def _step(model: Encoder, precision: str = "fp32") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients of one forward and backward pass (bf16 under autocast, as the training loop runs it)."""
    ids, mask = _batch()
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = model(ids, mask).last_hidden_state
        loss = (out.float() * torch.linspace(-1, 1, out.shape[-1])).sum(-1).pow(2).mean()
    loss.backward()
    return loss.detach(), {n: w.grad.clone() for n, w in model.named_parameters() if w.grad is not None}


def _same_step(a, b) -> bool:
    return torch.equal(a[0], b[0]) and a[1].keys() == b[1].keys() and all(torch.equal(a[1][n], b[1][n]) for n in a[1])


def _count_fused_calls(monkeypatch) -> dict[str, int]:
    calls = dict.fromkeys(("layer_norm_dropout", "attention", "dropout_add_layer_norm"), 0)
    for name in calls:
        def counted(*args, _name=name, _fn=getattr(ft, name), **kwargs):
            calls[_name] += 1
            return _fn(*args, **kwargs)
        monkeypatch.setattr(ft, name, counted)
    return calls


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_without_dropout_the_fused_encoder_trains_as_the_composed_one(ops, monkeypatch, precision):
    # the fused path runs only at p > 0; at p = 1e-9 its threshold floor(p 2^32) = 4 drops an element with
    # probability 1e-9 and its scale 1 / (1 - p) is 1 in float32: dropout 0 in effect
    calls = _count_fused_calls(monkeypatch)
    fused_loss, fused_grads = _step(_tiny_encoder(1e-9, ops), precision)
    assert calls == {"layer_norm_dropout": 1, "attention": 2, "dropout_add_layer_norm": 4}
    loss, grads = _step(_tiny_encoder(0.0), precision)
    # bf16: the fused attention rounds its scores to bf16 (the product's output); SDPA's math path keeps float32
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    _close(fused_loss, loss, dtype, "loss")
    assert fused_grads.keys() == grads.keys()
    for name, g in grads.items():
        # the key bias's gradient is 0 in exact arithmetic (softmax ignores a constant added to a row of scores):
        # both paths give rounding noise, of their products' precision
        if not (dtype == torch.bfloat16 and name.endswith("key.bias")):
            _close(fused_grads[name], g, dtype, name)


def test_with_dropout_the_fused_encoder_is_deterministic_given_the_seed(ops):
    first = _step(_tiny_encoder(0.1, ops, seed=3), "bf16")
    assert _same_step(first, _step(_tiny_encoder(0.1, ops, seed=3), "bf16"))
    no_dropout = _step(_tiny_encoder(0.0, ops, seed=3), "bf16")
    assert not torch.equal(first[0], no_dropout[0])  # the masks do drop


def test_a_run_resumed_from_the_rng_state_equals_an_uninterrupted_one(ops):
    def two_steps(model, *, resume: bool):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(11)
        losses = []
        for step in range(2):
            if step == 1 and resume:  # a checkpoint, a new process (its own random draws), a resume
                saved = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), capture_rng_state())
                model = _tiny_encoder(0.1, ops, seed=99)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                torch.rand(1000)
                model.load_state_dict(saved[0])
                opt.load_state_dict(saved[1])
                restore_rng_state(saved[2])
            loss, _ = _step(model, "bf16")
            opt.step()
            losses.append(loss)
        return losses, [w.detach() for w in model.parameters()]

    straight = two_steps(_tiny_encoder(0.1, ops, seed=3), resume=False)
    resumed = two_steps(_tiny_encoder(0.1, ops, seed=3), resume=True)
    assert all(torch.equal(a, b) for a, b in zip(straight[0], resumed[0], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(straight[1], resumed[1], strict=True))


def test_the_default_path_is_untouched(monkeypatch):
    for cls in FLAGGED:
        assert cls.fused_training_ops is None
    model = _tiny_encoder(0.1, seed=3)
    assert all(m.fused_training_ops is None for m in ft.fused_training_modules(model))
    for name in ("layer_norm_dropout", "attention", "dropout_add_layer_norm"):
        monkeypatch.setattr(ft, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} ran with the switch off"))
    _step(model)
    assert all(ft.use_fused(m, 0.1, torch.zeros(1)) is None for m in model.modules())


def test_none_switches_the_fused_path_off(monkeypatch):
    model = _tiny_encoder(0.1, ft._Reference, seed=3)
    assert all(m.fused_training_ops is not None for m in ft.fused_training_modules(model))
    calls = _count_fused_calls(monkeypatch)
    _step(model)
    assert calls == {"layer_norm_dropout": 1, "attention": 2, "dropout_add_layer_norm": 4}
    assert ft.set_fused_training(model, None) is model
    assert all(m.fused_training_ops is None for m in ft.fused_training_modules(model))
    calls.update(dict.fromkeys(calls, 0))
    never = _tiny_encoder(0.1, seed=3)  # the same weights (no optimizer step was taken), never switched on
    torch.manual_seed(0)
    off = _step(model)
    assert calls == dict.fromkeys(calls, 0)
    # switched on and off again: bitwise today's path, the same random draws
    torch.manual_seed(0)
    assert _same_step(off, _step(never))


class _SomeOps:
    """Has all the ops but one."""
    dropout_add_layer_norm = dropout_add_layer_norm_backward = staticmethod(lambda *a: None)
    layer_norm_dropout = layer_norm_dropout_backward = softmax_dropout = staticmethod(lambda *a: None)


@pytest.mark.parametrize("wrong", [True, False, "ctxemb_train", _SomeOps])
def test_ops_of_a_wrong_type_raise_and_switch_nothing(wrong):
    model = _tiny_encoder(0.1)
    with pytest.raises(TypeError, match=r"ops must be None or an object with the fused training ops as methods.*"
                                        r"lacks .*softmax_dropout_backward"):
        ft.set_fused_training(model, wrong)
    assert all(m.fused_training_ops is None for m in ft.fused_training_modules(model))


def test_use_fused_gives_the_ops_only_where_the_fused_path_runs():
    model = _tiny_encoder(0.1, ft._Reference)
    emb = model.embeddings
    x = torch.zeros(2, 3, 32)
    ops = ft.use_fused(emb, 0.1, x, None)
    assert ops is not None and ops.layer_norm_dropout is ft._Reference.layer_norm_dropout
    assert ft.use_fused(emb, 0.1, x.bfloat16()) is ops
    assert ft.use_fused(emb, 0.0, x) is None  # no dropout
    assert ft.use_fused(emb, 0.1, x.double()) is None  # a dtype the native ops do not read
    assert ft.use_fused(emb.eval(), 0.1, x) is None  # not training
    assert ft.use_fused(model.encoder.layer[0].output.train().bfloat16(), 0.1, x) is None  # bf16 parameters
    assert ft.use_fused(nn.Linear(2, 2), 0.1, x) is None  # a module that runs no fused op


def test_in_eval_mode_the_switch_changes_nothing(ops):
    ids, mask = _batch()
    model = _tiny_encoder(0.1).eval()
    off = model(ids, mask).last_hidden_state
    on = ft.set_fused_training(model, ops)(ids, mask).last_hidden_state
    assert torch.equal(off, on)


def test_the_switch_flags_bert_layout_modules_only(caplog):
    model = _tiny_encoder(0.1, ft._Reference)
    assert {type(m) for m in ft.fused_training_modules(model)} == FLAGGED
    assert {type(m) for m in model.modules() if getattr(m, "fused_training_ops", None) is not None} == FLAGGED
    modern = Encoder(EncoderConfig(model_type="modernbert", vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=24, local_attention=4))
    assert ft.fused_training_modules(modern) == []
    with caplog.at_level(logging.WARNING, logger="ctxemb.modeling.fused_training"):
        ft.set_fused_training(modern, ft._Reference)
    assert not any(getattr(m, "fused_training_ops", None) is not None for m in modern.modules())
    assert "nothing switched on" in caplog.text
    # the runtime's switch says so, and builds nothing
    assert kernels.enable_fused_training(modern) == (
        False, "no module of this ModernBertEncoder runs fused training ops (only BERT-layout encoders do)")


def test_enable_fused_training_gives_the_native_ops(native_ops):
    model = _tiny_encoder(0.1)
    assert kernels.enable_fused_training(model) == (
        True, "the native training ops are loaded (AVX-512) and switched on in 7 modules")
    for m in ft.fused_training_modules(model):
        assert m.fused_training_ops.softmax_dropout is native_ops.softmax_dropout
    # a model with the native ops on deep-copies (torch.ops namespaces do not), and the copy runs them too
    twin = copy.deepcopy(model)
    assert twin.embeddings.fused_training_ops == model.embeddings.fused_training_ops  # the same ops
    torch.manual_seed(0)
    first = _step(model, "bf16")
    torch.manual_seed(0)
    assert _same_step(first, _step(twin, "bf16"))


def test_without_native_ops_the_encoder_runs_composed_ops_and_the_functions_the_reference(monkeypatch):
    monkeypatch.setattr(kernels, "cpu_info", lambda: CpuInfo("an AVX2 CPU", {"avx2", "fma"}))
    why = "the CPU lacks avx512f, avx512bw, avx512vl, avx512dq"
    assert kernels.train_ops_cpu() == (False, why)
    assert kernels.train_ops_available() == (False, why)
    model = _tiny_encoder(0.1)
    assert kernels.enable_fused_training(model) == (False, why)
    assert all(m.fused_training_ops is None for m in ft.fused_training_modules(model))
    assert ft._ops_for(None, torch.zeros(1)) is ft._Reference
    x = torch.randn(2, 4, 8)
    y = ft.layer_norm_dropout(x, nn.LayerNorm(8), 0.5, key=3)
    want = torch.where(ft.keep_mask(3, x.shape, 0.5), F.layer_norm(x, (8,)) * 2, 0.0)
    torch.testing.assert_close(y, want)


def test_checking_a_native_library_draws_nothing_from_torchs_generator(native_ops):
    """The check runs inside a seeded run, before its first step or just after a resume restored the generator: a
    draw from torch's generator there would give the first run of a process (and every resumed run) other dropout."""
    torch.manual_seed(3)
    before = torch.get_rng_state()
    kernels._check_train(native_ops)
    if kernels.int8_vnni_ops() is not None:
        kernels._check(kernels.int8_vnni_ops())
    assert torch.equal(torch.get_rng_state(), before)
