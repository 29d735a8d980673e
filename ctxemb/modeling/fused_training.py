"""Fused ops for the training step on the CPU, which a model runs once it is given them.

A bf16 fine-tuning step of all-MiniLM-L6-v2 runs its Linear layers near the bf16 peak; much of what is left is
dropout masks drawn element by element from torch's generator (``bernoulli_``), attention upcast to float32 (SDPA
with dropout takes its math path), and separate passes for dropout, the residual add and LayerNorm
(``docs/design/bf16-training.md``). Three fused ops replace them, each an autograd Function whose forward and
backward are one pass over rows in native code (``ctxemb/runtime/kernels/train_ops.cpp``), the math in float32:

- :func:`dropout_add_layer_norm`: ``LayerNorm(residual + dropout(x))`` (after attention and after the feed-forward);
- :func:`layer_norm_dropout`: ``dropout(LayerNorm(x))`` (the embeddings);
- :func:`attention`: ``dropout(softmax(q k^T / sqrt(D) + mask)) v``, the two products (and the backward's four)
  ``torch.matmul`` in bfloat16 where the CPU multiplies bf16 in hardware, the softmax and dropout (and their
  backward) one fused pass between them. The scores come out of the bf16 product rounded to bf16, as in any eager
  attention under autocast, where SDPA's math path computes them in float32, and the probabilities the backward
  reads are kept in bf16: roundings of bf16's precision, the only differences beyond the order of float32 sums.

**The masks.** Each call draws one 64-bit key from torch's default generator (:func:`draw_key`) and keeps element i
of its tensor (i its flat index) iff a counter-based hash of (key, i) is at least ``floor(p 2^32)``
(:func:`counter_hash`, :func:`keep_mask`; the hash is defined in ``train_ops.cpp``'s opening comment). Since the keys come from
torch's generator, a resumed run that restores its RNG state (``ctxemb.training.state``) draws the same masks, bit
for bit. No mask is stored: the backward recomputes it from the key. The masks are not torch's: with the switch on,
a run takes another random path than with it off (with the same keep probability).

**The ops come in as an argument.** The native ops are ``torch.ops.ctxemb_train``, which
``ctxemb.runtime.kernels`` builds and loads; this module never loads them. :func:`set_fused_training` gives an ops
object (one with the ops as methods) to the BERT-layout modules of :mod:`ctxemb.modeling.encoder` that declare
``fused_training_ops`` (``Embeddings``, ``SelfAttention``, ``AttentionOutput``, ``Output``; None, the default, takes
it away); each then runs its fused op with those ops where :func:`use_fused` says so (training, dropout above 0, CPU
tensors, float32 parameters), and its composed torch ops otherwise (a model given no ops runs those alone).
``ctxemb.runtime.kernels.enable_fused_training(model)`` loads the native ops and gives them where they run here; the
training loop does so by default (``TrainConfig.fused_training``).

**The reference** (``_Reference``) is the native ops' arithmetic and masks in torch ops: what the functions here run
when given no ops, or tensors the native ops do not read (float64, not on the CPU). It is the tests' oracle (and
float64 ``gradcheck``'s subject), and slow.

Shapes: B batch, T tokens, H hidden size, N heads, D head size, M = B T rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from ctxemb.core.precision import cpu_has_native_bf16
from ctxemb.core.validation import check_probability

logger = logging.getLogger(__name__)

__all__ = ["attention", "counter_hash", "draw_key", "dropout_add_layer_norm", "fused_training_modules", "keep_mask",
           "layer_norm_dropout", "set_fused_training", "use_fused"]

#: The dtypes the native ops read and write.
_NATIVE_DTYPES = (torch.float32, torch.bfloat16)
#: dropout_add_layer_norm keeps ``residual + dropout(x)`` (float32: 4 bytes an element) for its backward rather
#: than recomputing it from x, residual and the key (which keeps x and residual: 6 bytes an element under autocast).
#: On a busy 2-core Zen 4 at MiniLM's shapes the op alone was ~10% faster recomputing (its inputs stay in cache
#: between its forward and backward there; ``benchmarks/fused_training_ops`` times both), a whole training step ~1%
#: faster keeping (0.862 against 0.873 s at 32 x 63 tokens), which also holds less memory.
_KEEP_SUM = True
_M32 = 0xFFFFFFFF
_MIX = (0x7FEB352D, 0x846CA68B)  # lowbias32's multipliers (train_ops.cpp)


# ---- the switch ---------------------------------------------------------------------------------------------------
class _OpsTable(NamedTuple):
    """The ops a flagged module runs: the methods of these names of the object given to :func:`set_fused_training`.
    A table of them rather than that object so that a model with the switch on can still be deep-copied (an EMA copy,
    a quantized copy): a ``torch.ops`` namespace cannot be copied, its ops can (a copy shares them)."""

    dropout_add_layer_norm: Callable
    dropout_add_layer_norm_backward: Callable
    layer_norm_dropout: Callable
    layer_norm_dropout_backward: Callable
    softmax_dropout: Callable
    softmax_dropout_backward: Callable


def fused_training_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` (itself included) that can run fused training ops: those whose class declares
    ``fused_training_ops`` (the BERT-layout ``Embeddings``, ``SelfAttention``, ``AttentionOutput`` and ``Output``)."""
    return [m for m in model.modules() if hasattr(type(m), "fused_training_ops")]


def set_fused_training(model: nn.Module, ops: object | None) -> nn.Module:
    """Give the fused training ops ``ops`` to every module of ``model`` that can run them
    (:func:`fused_training_modules`; ModernBERT and other families are left as they are), or take them away, in place.

    Args:
        model: the model; its flagged modules are found among its submodules.
        ops: the object whose methods are the ops: ``torch.ops.ctxemb_train`` (which
            ``ctxemb.runtime.kernels.enable_fused_training`` loads and gives where it runs), or ``_Reference`` (the
            tests'); None switches the fused path off (the default: the composed torch ops).

    Returns:
        ``model``.

    Raises:
        TypeError: ``ops`` is neither None nor an object with the ops as methods.
    """
    table = None if ops is None else _table(ops)
    modules = fused_training_modules(model)
    for module in modules:
        module.fused_training_ops = table
    if table is not None and not modules:
        logger.warning("no module of this %s runs fused training ops (only BERT-layout encoders do): nothing "
                       "switched on", type(model).__name__)
    return model


def _table(ops: object) -> _OpsTable:
    missing = [name for name in _OpsTable._fields if not callable(getattr(ops, name, None))]
    if missing:
        raise TypeError(f"ops must be None or an object with the fused training ops as methods "
                        f"(torch.ops.ctxemb_train: ctxemb.runtime.kernels.enable_fused_training(model) gives them), "
                        f"got {ops!r}, which lacks {', '.join(missing)}")
    return _OpsTable(*(getattr(ops, name) for name in _OpsTable._fields))


def use_fused(module: nn.Module, p: float, *tensors: torch.Tensor | None) -> _OpsTable | None:
    """The ops ``module`` runs its fused op with on ``tensors`` (None entries ignored) now, or None for its composed
    ops: it has ops (:func:`set_fused_training`) and is training, its dropout probability ``p`` is above 0, the tensors
    are float32 or bfloat16 on the CPU, and its parameters are float32 (autocast or fp32 training)."""
    ops = getattr(module, "fused_training_ops", None)
    if (ops is not None and module.training and p > 0
            and all(t.device.type == "cpu" and t.dtype in _NATIVE_DTYPES for t in tensors if t is not None)
            and all(w.dtype == torch.float32 for w in module.parameters())):
        return ops
    return None


# ---- the masks ----------------------------------------------------------------------------------------------------
def draw_key() -> int:
    """One 64-bit mask key from torch's default CPU generator (whose state a resumed run restores)."""
    return int(torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64))


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # x c mod 2^32 in int64 without overflow: x (c mod 2^16) + ((x (c >> 16)) mod 2^16) 2^16, each part below 2^48
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, _MIX[0])
    x = x ^ (x >> 15)
    x = _mul32(x, _MIX[1])
    return x ^ (x >> 16)


def counter_hash(key: int, n: int, *, start: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """The dropout hash of elements ``start .. start + n - 1`` under ``key``: ``mix(mix(i ^ k0) ^ k1)`` with k0, k1
    the low and high 32 bits of the key and mix Wellons' lowbias32, in torch's int64 arithmetic masked to 32 bits
    (bit for bit what the native ops compute). Returns (n,) int64 in [0, 2^32)."""
    if start < 0 or n < 0 or start + n > 2**32:
        raise ValueError(f"elements {start}..{start + n - 1} are outside the hash's 32-bit counter")
    i = torch.arange(start, start + n, dtype=torch.int64, device=device)
    return _mix(_mix(i ^ (key & _M32)) ^ ((key >> 32) & _M32))


def keep_mask(key: int, shape: tuple[int, ...] | torch.Size, p: float, *,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """Which elements of a tensor of ``shape`` dropout with probability ``p`` keeps under ``key`` (bool, ``shape``):
    those whose :func:`counter_hash` is at least ``floor(p 2^32)``."""
    n = 1
    for s in shape:
        n *= s
    return (counter_hash(key, n, device=device) >= int(p * 2**32)).view(shape)


def _dropout(t: torch.Tensor, key: int, p: float) -> torch.Tensor:
    return torch.where(keep_mask(key, t.shape, p, device=t.device), t * (1.0 / (1.0 - p)), 0.0)


# ---- the reference: the native ops' arithmetic in torch ops ---------------------------------------------------------
def _math_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float32, as the native ops compute, or float64 for float64 tensors (gradcheck)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _moments(s: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    mean = s.mean(-1)
    return mean, torch.rsqrt(((s - mean[:, None]) ** 2).mean(-1) + eps)


def _layer_norm_backward(g: torch.Tensor, xh: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """d loss / d input of each row of a LayerNorm, from g = d loss / d output and the normalized rows xh."""
    gw = g * w
    return rstd[:, None] * (gw - gw.mean(-1, keepdim=True) - xh * (gw * xh).mean(-1, keepdim=True))


class _Reference:
    """``torch.ops.ctxemb_train``'s ops (same arguments, same results up to rounding order) in torch ops."""

    @staticmethod
    def dropout_add_layer_norm(x, residual, weight, bias, eps, p, key, keep_sum):
        md = _math_dtype(x, residual, weight)
        s = residual.to(md) + _dropout(x.to(md), key, p)
        mean, rstd = _moments(s, eps)
        y = (s - mean[:, None]) * rstd[:, None] * weight.to(md) + bias.to(md)
        return y, mean, rstd, s if keep_sum else s.new_empty(0)

    @staticmethod
    def dropout_add_layer_norm_backward(grad_y, s, x, residual, mean, rstd, weight, p, key):
        md = mean.dtype
        if s.numel() == 0:
            s = residual.to(md) + _dropout(x.to(md), key, p)
        xh = (s - mean[:, None]) * rstd[:, None]
        ds = _layer_norm_backward(grad_y, xh, weight.to(md), rstd)
        return _dropout(ds, key, p).to(x.dtype), ds.to(residual.dtype), (grad_y * xh).sum(0), grad_y.sum(0)

    @staticmethod
    def layer_norm_dropout(x, weight, bias, eps, p, key):
        md = _math_dtype(x, weight)
        mean, rstd = _moments(x.to(md), eps)
        y = (x.to(md) - mean[:, None]) * rstd[:, None] * weight.to(md) + bias.to(md)
        return _dropout(y, key, p), mean, rstd

    @staticmethod
    def layer_norm_dropout_backward(grad_y, x, mean, rstd, weight, p, key):
        g = _dropout(grad_y, key, p)
        xh = (x.to(mean.dtype) - mean[:, None]) * rstd[:, None]
        return _layer_norm_backward(g, xh, weight.to(mean.dtype), rstd).to(x.dtype), (g * xh).sum(0), g.sum(0)

    @staticmethod
    def softmax_dropout(scores, mask, scale, p, key):
        md = _math_dtype(scores)
        s = scores.to(md) * scale
        if mask is not None:
            s = s + mask.to(md)
        # a row whose every score is -inf gets probabilities 0, as SDPA's softmax gives it
        probs = torch.where(s.amax(-1, keepdim=True) == float("-inf"), 0.0, torch.softmax(s, -1))
        return probs.to(scores.dtype), _dropout(probs, key, p).to(scores.dtype)

    @staticmethod
    def softmax_dropout_backward(grad_dropped, probs, scale, p, key):
        md = _math_dtype(probs)
        g, P = _dropout(grad_dropped.to(md), key, p), probs.to(md)
        return (P * (g - (P * g).sum(-1, keepdim=True)) * scale).to(probs.dtype)


def _ops_for(ops: object | None, *tensors: torch.Tensor):
    """``ops`` where given and these tensors are ones they read (float32 or bfloat16 on the CPU), else the reference
    (float64 for ``gradcheck``, tensors on another device)."""
    if ops is not None and all(t.device.type == "cpu" and t.dtype in _NATIVE_DTYPES for t in tensors):
        return ops
    return _Reference


# ---- the autograd Functions -----------------------------------------------------------------------------------------
class _DropoutAddLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps, p, key, ops):
        H = x.shape[-1]
        x2, r2 = x.reshape(-1, H).contiguous(), residual.reshape(-1, H).contiguous()
        with torch.autocast("cpu", enabled=False):
            y, mean, rstd, s = ops.dropout_add_layer_norm(x2, r2, weight.contiguous(), bias.contiguous(), eps, p,
                                                          key, _KEEP_SUM)
        # with the sum kept, x and residual are not: empty tensors carry their dtypes (those of their gradients)
        kept = (x2.new_empty(0), r2.new_empty(0)) if _KEEP_SUM else (x2, r2)
        ctx.save_for_backward(s, *kept, mean, rstd, weight)
        ctx.p, ctx.key, ctx.ops = p, key, ops
        return y.view(residual.shape)

    @staticmethod
    def backward(ctx, grad_y):
        s, x, residual, mean, rstd, weight = ctx.saved_tensors
        g = grad_y.reshape(-1, grad_y.shape[-1]).to(mean.dtype).contiguous()
        with torch.autocast("cpu", enabled=False):
            gx, gr, gw, gb = ctx.ops.dropout_add_layer_norm_backward(g, s, x, residual, mean, rstd, weight, ctx.p,
                                                                     ctx.key)
        return gx.view(grad_y.shape), gr.view(grad_y.shape), gw, gb, None, None, None, None


class _LayerNormDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, p, key, ops):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        with torch.autocast("cpu", enabled=False):
            y, mean, rstd = ops.layer_norm_dropout(x2, weight.contiguous(), bias.contiguous(), eps, p, key)
        ctx.save_for_backward(x2, mean, rstd, weight)
        ctx.p, ctx.key, ctx.ops = p, key, ops
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, grad_y):
        x, mean, rstd, weight = ctx.saved_tensors
        g = grad_y.reshape(-1, grad_y.shape[-1]).to(mean.dtype).contiguous()
        with torch.autocast("cpu", enabled=False):
            gx, gw, gb = ctx.ops.layer_norm_dropout_backward(g, x, mean, rstd, weight, ctx.p, ctx.key)
        return gx.view(grad_y.shape), gw, gb, None, None, None, None


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, p, key, ops, dtype):
        scale = q.shape[-1] ** -0.5
        with torch.autocast("cpu", enabled=False):
            # contiguous once (q, k, v are usually views of (B, T, H) Linear outputs), so that neither these
            # products nor the backward's copy them again
            q_, k_, v_ = (t.to(dtype).contiguous() for t in (q, k, v))
            scores = torch.matmul(q_, k_.transpose(-1, -2)).contiguous()  # (B, N, T, T)
            m = None if mask is None else mask.to(torch.float64 if dtype == torch.float64 else torch.float32)
            probs, dropped = ops.softmax_dropout(scores, m, scale, p, key)
            out = torch.matmul(dropped, v_)  # (B, N, T, D)
        ctx.save_for_backward(q_, k_, v_, probs, dropped)
        ctx.scale, ctx.p, ctx.key, ctx.ops = scale, p, key, ops
        ctx.dtypes = (q.dtype, k.dtype, v.dtype)
        ctx.mask_like = None if mask is None else (mask.shape, mask.dtype)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, probs, dropped = ctx.saved_tensors
        with torch.autocast("cpu", enabled=False):
            g = grad_out.to(q.dtype).contiguous()
            grad_dropped = torch.matmul(g, v.transpose(-1, -2)).contiguous()
            grad_v = torch.matmul(dropped.transpose(-1, -2), g)
            grad_scores = ctx.ops.softmax_dropout_backward(grad_dropped, probs, ctx.scale, ctx.p, ctx.key)
            grad_q = torch.matmul(grad_scores, k)
            grad_k = torch.matmul(grad_scores.transpose(-1, -2), q)
            grad_mask = None
            if ctx.needs_input_grad[3]:  # a learned bias in the mask (MPNet's relative positions)
                shape, dtype = ctx.mask_like
                grad_mask = (grad_scores.to(dtype) / ctx.scale).sum_to_size(shape)
        qd, kd, vd = ctx.dtypes
        return grad_q.to(qd), grad_k.to(kd), grad_v.to(vd), grad_mask, None, None, None, None


# ---- the functions ------------------------------------------------------------------------------------------------
def _affine(norm: nn.LayerNorm, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The LayerNorm's weight and bias (ones and zeros where it has none)."""
    H = norm.normalized_shape[-1]
    dtype = norm.weight.dtype if norm.weight is not None else like.dtype
    weight = norm.weight if norm.weight is not None else torch.ones(H, dtype=dtype, device=like.device)
    bias = norm.bias if norm.bias is not None else torch.zeros(H, dtype=dtype, device=like.device)
    return weight, bias


def _check_norm(norm: nn.LayerNorm, x: torch.Tensor) -> None:
    if not isinstance(norm, nn.LayerNorm) or len(norm.normalized_shape) != 1:
        raise TypeError(f"norm must be an nn.LayerNorm over the last dimension, got {norm!r}")
    if x.shape[-1] != norm.normalized_shape[0]:
        raise ValueError(f"the last dimension of x ({x.shape[-1]}) is not the LayerNorm's ({norm.normalized_shape[0]})")


def dropout_add_layer_norm(x: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm, p: float,
                           key: int | None = None, *, ops: object | None = None) -> torch.Tensor:
    """``norm(residual + dropout(x, p))`` in one pass forward and one backward, the mask from ``key``.

    Args:
        x: (..., H) float32 or bfloat16 (a Linear's output: bfloat16 under autocast).
        residual: (..., H) float32 or bfloat16, of x's shape.
        norm: the LayerNorm (its weight, bias and eps).
        p: the dropout probability, in [0, 1).
        key: the mask's key (:func:`keep_mask` of x's shape); drawn from torch's generator when None.
        ops: the ops (``torch.ops.ctxemb_train``, what :func:`use_fused` returns), or None for the reference in
            torch ops (which also runs for tensors the ops do not read).

    Returns:
        (..., H) float32 (what autocast's LayerNorm returns on a float32 sum), or bfloat16 when x and residual are
        both bfloat16 outside autocast. The gradients of x and residual come in their dtypes.
    """
    p = check_probability(p, "p")
    _check_norm(norm, x)
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ in shape")
    weight, bias = _affine(norm, x)
    key = draw_key() if key is None else key
    y = _DropoutAddLayerNorm.apply(x, residual, weight, bias, norm.eps, p, key, _ops_for(ops, x, residual, weight))
    if x.dtype == residual.dtype == torch.bfloat16 and not torch.is_autocast_enabled("cpu"):
        y = y.to(torch.bfloat16)
    return y


def layer_norm_dropout(x: torch.Tensor, norm: nn.LayerNorm, p: float, key: int | None = None, *,
                       ops: object | None = None) -> torch.Tensor:
    """``dropout(norm(x), p)`` in one pass forward and one backward, the mask from ``key``.

    Args:
        x: (..., H) float32 or bfloat16 (the embeddings' sum).
        norm: the LayerNorm (its weight, bias and eps).
        p: the dropout probability, in [0, 1).
        key: the mask's key (:func:`keep_mask` of x's shape); drawn from torch's generator when None.
        ops: the ops (``torch.ops.ctxemb_train``, what :func:`use_fused` returns), or None for the reference in
            torch ops (which also runs for tensors the ops do not read).

    Returns:
        (..., H) float32; x's gradient comes in x's dtype.
    """
    p = check_probability(p, "p")
    _check_norm(norm, x)
    weight, bias = _affine(norm, x)
    key = draw_key() if key is None else key
    return _LayerNormDropout.apply(x, weight, bias, norm.eps, p, key, _ops_for(ops, x, weight))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, p: float,
              key: int | None = None, *, ops: object | None = None) -> torch.Tensor:
    """``dropout(softmax(q k^T / sqrt(D) + mask), p) v``: the products ``torch.matmul`` in bfloat16 for bfloat16
    inputs where the CPU multiplies bf16 in hardware (in float32 otherwise), the softmax and dropout one fused pass
    in float32 between them (and their backward one pass between the backward's products).

    Args:
        q, k, v: (B, N, T, D), float32 or bfloat16.
        mask: additive, broadcastable to (B, N, T, T) (e.g. (B, 1, 1, T)), or None; its gradient is computed when it
            requires one (MPNet's learned position bias).
        p: the dropout probability of the attention probabilities, in [0, 1).
        key: the mask's key (:func:`keep_mask` of shape (B, N, T, T)); drawn from torch's generator when None.
        ops: the ops (``torch.ops.ctxemb_train``, what :func:`use_fused` returns), or None for the reference in
            torch ops (which also runs for tensors the ops do not read).

    Returns:
        (B, N, T, D) in q's dtype.
    """
    p = check_probability(p, "p")
    if q.dim() != 4 or k.shape != q.shape or v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"q, k, v must be (B, N, T, D) of one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.dtype == torch.bfloat16 and cpu_has_native_bf16():
        dtype = torch.bfloat16
    else:  # bf16 products would be emulated here: float32 ones are faster
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    key = draw_key() if key is None else key
    scores_like = torch.empty(0, dtype=dtype, device=q.device)
    return _Attention.apply(q, k, v, mask, p, key, _ops_for(ops, scores_like), dtype)
