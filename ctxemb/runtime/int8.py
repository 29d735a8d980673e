"""The int8 path's kernel: an encoder whose matrix products run in int8, fused, with outlier features fixed per model.

Scheme (one Linear, y = x W^T + b, x (M, K) with M = B * T tokens):

- weights: int8, symmetric, one scale per output channel, s_w[o] = max|W[o]| / L, quantized once, with L = 127
  where the CPU multiplies int8 exactly and L = 63 where it does not (:func:`weight_levels`: CPUs without
  AVX512-VNNI or AMX);
- activations: int8, asymmetric, one scale and one integer zero point per token over the inlier features I:
  s_x[t] = (max(x[t, I], 0) - min(x[t, I], 0)) / 255, z[t] = round(-min(x[t, I], 0) / s_x[t]) - 128 (in
  [-128, 127]), q(x[t]) = clamp(round(x[t] / s_x[t]) + z[t], -128, 127), so x[t] ~ s_x[t] (q(x[t]) - z[t]): the
  whole 256-value grid spans the token's own range (half the step of a symmetric grid for one-sided inputs such as
  GELU outputs) and 0 stays exact;
- the products of the inlier features are summed exactly in int32 (``torch._int_mm``), and the zero point comes
  off through the weights' column sums c = sum_k q(W)[:, k], also in int32;
- the *outlier features* O (a fixed set of input features per Linear, found once per model on calibration text by
  :func:`~ctxemb.runtime.int8_calibration.calibrate_outliers`) are multiplied in float32 with the original weights
  (the mixed-precision decomposition of LLM.int8(), Dettmers et al. 2022, with the set fixed instead of found per
  call):

      y[t] = s_x[t] * s_w * (q(x[t, ~O]) @ q(W[:, ~O]).T - z[t] * c) + x[t, O] @ W[:, O].T + b

Every quantity of a token depends on that token alone (its own scale; O is fixed), so a text's vectors do not depend
on the rest of its batch, and the int32 sums are exact, so the int8 products are bitwise the same in any batch.

Kernels (:func:`kernel_mode`), in order of preference:

- "vnni", on CPUs with AVX512-VNNI: the native kernel of :mod:`ctxemb.runtime.kernels` (C++, compiled on first use). One
  call quantizes a Linear's input (to uint8, u = q + 128, zero point z + 128: the same integers), one computes the
  product with ``vpdpbusd`` on weights packed once, and applies dequantization, bias, outlier features and the
  activation (or residual add and LayerNorm) to each output tile while it is in registers, so the (M, N) output is
  written once, in float32, and never read back for an epilogue.
- "inductor": each quantized module's computation is one function run through ``torch.compile`` (Inductor, CPU):
  the per-token scale, the rounding and the cast to int8 become one pass over the input (with the gather of the
  outlier features), ``torch._int_mm`` and the small outlier product are library calls, and dequantization, bias,
  the activation or the residual add and LayerNorm become one pass over the output.
- "eager": the same functions unfused (no C++ compiler here; a warning says so).

Q, K and V are one product of the concatenated weights, so their shared input is quantized once. Attention itself is
not quantized: in the "vnni" mode (head sizes a multiple of 16) it is the native kernel's (``attention.cpp``), which
reads q, k and v from the Q/K/V product's output in place and runs the softmax between its two products, the
products in bfloat16 with float32 sums where the CPU has AVX512-BF16 (:func:`ctxemb.runtime.kernels.attention_bf16_cpu`,
read at run time) and in float32 elsewhere; otherwise :func:`ctxemb.modeling.attention.inference_attention` in
float32.

In the "vnni" mode every activation that feeds an int8 Linear is quantized by the kernel that produces it, while its
rows are in cache, instead of by a separate pass: the attention's output for the attention output Linear, each
residual + LayerNorm output for the next Linear (the block's up-projection, the next block's Q/K/V), the GELU output
for the down-projection. Where the float32 output is needed too (a LayerNorm's output is the next residual and a
hidden state), the kernel writes both, and the quantized form travels with the tensor to its consumer
(:meth:`Int8ResidualNorm.feed`). The integers are the same as those of quantizing separately, so the hidden states
are bitwise the same either way. The embeddings' lookups, sum and LayerNorm are one native call that quantizes for
the first block's Q/K/V (:class:`Int8Embeddings`); its LayerNorm is the kernels' own, so hidden state 0 differs from
torch's LayerNorm by float32 rounding.

The quantized copy is for inference: dropout is left out.

Shapes: M tokens (rows), K input features, N output features, |O| outlier features, B batch, T tokens, H hidden.
"""

from __future__ import annotations

import copy
import itertools
import logging
from typing import Callable, Mapping, NamedTuple, Sequence

import torch
from torch import nn

from ctxemb.runtime.int8_calibration import Int8Calibration
from ctxemb.runtime.int8_torch import (LINEAR_KERNELS, TINY, compiled, inductor_works, kernel_mode,
                                       residual_norm_kernel, weight_levels)
from ctxemb.runtime.kernels import attention_bf16_cpu, int8_vnni_ops
from ctxemb.modeling.attention import inference_attention
from ctxemb.modeling.encoder import (ACTIVATIONS, AttentionOutput, Embeddings, Encoder, Intermediate, Output,
                                     SelfAttention)

logger = logging.getLogger(__name__)

# Activations the fused feed-forward epilogue knows, by the encoder config's ``hidden_act``.
_ACTIVATION_NAMES = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
# The native kernel's activation codes (int8_vnni.cpp, enum Activation).
_NATIVE_ACTIVATIONS = {"none": 0, "gelu": 1, "gelu_tanh": 2, "relu": 3}


# ---- the quantized modules -------------------------------------------------------------------------------------
class QuantizedRows(NamedTuple):
    """A Linear's input in the "vnni" kernel's form: u = q + 128 (M, K) uint8, the per-token scale (M,) float32,
    zero point z + 128 (M,) int32, and the outlier features (M, |O|) float32 (None without outlier features)."""

    u: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    outliers: torch.Tensor | None


class Packed(NamedTuple):
    """The context the blocks take for a batch packed without its padding (:func:`packed_hidden_states`): sequence b's
    real tokens are rows [offsets[b], offsets[b + 1]) of (1, M, H) activations, where a padded batch has its mask."""

    offsets: torch.Tensor  # (B + 1,) int64


# A float32 output whose producer also quantized it for the Linear that reads it next (a residual + LayerNorm epilogue
# feeding the next block's product) carries that form in this attribute, as (consumer, QuantizedRows); the consumer
# takes it when it receives that very tensor, and quantizes the input itself otherwise.
_HANDED_OVER = "_ctxemb_int8_rows"


def _hand_over(y: torch.Tensor, consumer: Int8Linear, rows: QuantizedRows) -> torch.Tensor:
    setattr(y, _HANDED_OVER, (consumer, rows))
    return y


def _handed_over(x: torch.Tensor, consumer: Int8Linear) -> QuantizedRows | None:
    entry = x.__dict__.get(_HANDED_OVER)
    if entry is None or entry[0] is not consumer:
        return None
    del x.__dict__[_HANDED_OVER]
    return entry[1]


class Int8Linear(nn.Module):
    """``activation(x W^T + b)`` in int8 (see the module docstring for the scheme).

    Args:
        weight: (N, K) float weights (of one Linear, or Q, K and V concatenated).
        bias: (N,) or None.
        outliers: the outlier input features (float32 path).
        activation: "none", "gelu", "gelu_tanh" or "relu", fused into the dequantization.
        mode: "vnni", "inductor" or "eager" (:func:`kernel_mode`). "vnni" needs N a multiple of 16 and K of 4 (the
            kernel's panels); a Linear of another shape takes the next mode that works here.

    Shapes: x (..., K) float -> (..., N) float32.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, outliers: Sequence[int] = (), *,
                 activation: str = "none", mode: str = "eager"):
        super().__init__()
        if activation not in LINEAR_KERNELS:
            raise ValueError(f"activation must be 'none', 'gelu', 'gelu_tanh' or 'relu', got {activation!r}")
        if mode not in ("vnni", "inductor", "eager"):
            raise ValueError(f"mode must be 'vnni', 'inductor' or 'eager', got {mode!r}")
        weight = weight.detach().float()
        self.out_features, self.in_features = weight.shape
        if mode == "vnni" and (self.out_features % 16 or self.in_features % 4 or int8_vnni_ops() is None):
            mode = "inductor" if inductor_works() else "eager"
        outliers = sorted({int(i) for i in outliers})
        if outliers and not (0 <= outliers[0] and outliers[-1] < self.in_features):
            raise ValueError(f"outlier features must be in 0..{self.in_features - 1}, got {outliers}")
        self.activation, self.mode = activation, mode
        index = torch.tensor(outliers, dtype=torch.long)
        inliers = weight.index_fill(1, index, 0.0) if outliers else weight
        levels = weight_levels()
        scale = inliers.abs().amax(dim=1).clamp_min(TINY) / levels
        weight_int8 = torch.round(inliers / scale[:, None]).to(torch.int8)  # (N, K)
        self.register_buffer("weight_sum", weight_int8.sum(dim=1, dtype=torch.int32))  # (N,): c
        if mode == "vnni":  # the kernel's panels of 64 output channels
            self.register_buffer("weight_packed", int8_vnni_ops().pack_weights(weight_int8))
            self.weight_int8 = None
        else:  # (K, N) contiguous: the layout torch._int_mm multiplies fastest as its right operand
            self.register_buffer("weight_int8", weight_int8.t().contiguous())
            self.weight_packed = None
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", torch.zeros(self.out_features) if bias is None else bias.detach().float().clone())
        if outliers:
            keep = torch.ones(self.in_features).index_fill_(0, index, 0.0)
            self.register_buffer("keep", keep)
            self.register_buffer("outlier_index", index)
            self.register_buffer("outlier_weight", weight.index_select(1, index).t().contiguous())  # (|O|, N)
        else:
            self.keep = self.outlier_index = self.outlier_weight = None

    @classmethod
    def from_linear(cls, linear: nn.Linear, outliers: Sequence[int] = (), **kwargs) -> "Int8Linear":
        return cls(linear.weight, linear.bias, outliers, **kwargs)

    @property
    def outliers(self) -> list[int]:
        return [] if self.outlier_index is None else self.outlier_index.tolist()

    def _args(self, rows: torch.Tensor) -> tuple:
        return (rows, self.weight_int8, self.weight_sum, self.weight_scale, self.bias, self.keep, self.outlier_index,
                self.outlier_weight)

    def _fn(self, fn: Callable) -> Callable:
        return compiled(fn) if self.mode == "inductor" else fn

    def quantize_input(self, rows: torch.Tensor) -> QuantizedRows:
        """The "vnni" mode's quantized form of this Linear's input rows (M, K)."""
        u, scale, zero, xo = int8_vnni_ops().quantize_rows(rows.float().contiguous(), self.keep, self.outlier_index)
        return QuantizedRows(u, scale, zero, None if self.outlier_index is None else xo)

    def _native_args(self, q: QuantizedRows, activation: str) -> tuple:
        return (q.u, q.scale, q.zero, self.weight_packed, self.weight_sum, self.weight_scale, self.bias, q.outliers,
                self.outlier_weight, _NATIVE_ACTIVATIONS[activation])

    def _quantized_input(self, x: torch.Tensor | QuantizedRows) -> QuantizedRows:
        """The "vnni" mode's input: x (..., K) as its producer handed it over, or quantized here."""
        if isinstance(x, QuantizedRows):
            return x
        handed = _handed_over(x, self)
        return handed if handed is not None else self.quantize_input(x.reshape(-1, self.in_features))

    def _native(self, x: torch.Tensor | QuantizedRows, activation: str = "none",
                residual: torch.Tensor | None = None, norm: nn.LayerNorm | None = None) -> torch.Tensor:
        """The "vnni" mode: x (..., K), or its quantized rows, -> (M, N) float32 (two native calls: quantize, unless
        the producer did; product with its epilogue)."""
        return int8_vnni_ops().linear(*self._native_args(self._quantized_input(x), activation), residual,
                                      None if norm is None else norm.weight, None if norm is None else norm.bias,
                                      0.0 if norm is None else float(norm.eps))

    def _native_norm_quantized(self, x: torch.Tensor | QuantizedRows, residual: torch.Tensor, norm: nn.LayerNorm,
                               consumer: Int8Linear) -> tuple[torch.Tensor, QuantizedRows]:
        """The "vnni" mode: LayerNorm(residual + x W^T + b) (M, N), and the same quantized for ``consumer`` inside
        the same kernel."""
        y, u, scale, zero, xo = int8_vnni_ops().linear_norm_quantized(
            *self._native_args(self._quantized_input(x), "none")[:-1], residual, norm.weight, norm.bias,
            float(norm.eps), consumer.keep, consumer.outlier_index)
        return y, QuantizedRows(u, scale, zero, None if consumer.outlier_index is None else xo)

    def quantized_output(self, x: torch.Tensor, consumer: Int8Linear) -> QuantizedRows:
        """The "vnni" mode: this Linear's output (with its activation), quantized for ``consumer`` inside the product's
        epilogue, so the float32 output is never written out: x (..., K) -> rows (M, N) in ``consumer``'s form."""
        q = self._quantized_input(x)
        u, scale, zero, xo = int8_vnni_ops().linear_quantized(*self._native_args(q, self.activation), consumer.keep,
                                                              consumer.outlier_index)
        return QuantizedRows(u, scale, zero, None if consumer.outlier_index is None else xo)

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """x (..., K) -> (..., N) in ``out_dtype``: float32, or bfloat16 (the "vnni" mode, no activation), rounded to
        nearest even in the product's epilogue: half the bytes of the float32 output to write and read back."""
        if out_dtype == torch.bfloat16:
            if self.mode != "vnni" or self.activation != "none":
                raise ValueError(f"out_dtype=torch.bfloat16 needs the 'vnni' mode and no activation; this Linear runs "
                                 f"mode {self.mode!r} with activation {self.activation!r}")
            y = int8_vnni_ops().linear_bf16(*self._native_args(self._quantized_input(x), "none")[:-1])
            return y.reshape(*x.shape[:-1], self.out_features)
        if out_dtype != torch.float32:
            raise ValueError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype}")
        rows = x.reshape(-1, self.in_features)
        if self.mode == "vnni":
            y = self._native(x, self.activation)
        else:
            y = self._fn(LINEAR_KERNELS[self.activation])(*self._args(rows))
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, activation={self.activation}, "
                f"outliers={len(self.outliers)}, mode={self.mode}")


class Int8SelfAttention(nn.Module):
    """:class:`~ctxemb.modeling.encoder.SelfAttention` with Q, K and V as one int8 product (their shared input
    quantized once).

    Attention itself, where Q/K/V run the "vnni" kernel and the head size is a multiple of 16: the native kernel
    (``attention.cpp`` of :mod:`ctxemb.runtime.kernels`), reading q, k and v from the product's output in place, with
    its two products in bfloat16 (float32 sums) where the CPU has AVX512-BF16 (q, k and v then leave the Q/K/V product
    in bfloat16: :meth:`Int8Linear.forward`'s ``out_dtype``) and in float32 elsewhere, and the result quantized for the
    attention output Linear (:meth:`feed`). Otherwise
    :func:`ctxemb.modeling.attention.inference_attention` in float32.

    Args:
        attention: the float module.
        outliers: the outlier input features of Q, K and V (one set: they share their input).
        mode: see :func:`kernel_mode`.
        bf16: the native kernel's products in bfloat16; None: where the CPU has AVX512-BF16
            (:func:`ctxemb.runtime.kernels.attention_bf16_cpu`). Ignored without the native kernel.

    Raises:
        ValueError: ``bf16=True`` on a CPU without AVX512-BF16.
    """

    def __init__(self, attention: SelfAttention, outliers: Sequence[int] = (), mode: str = "eager", *,
                 bf16: bool | None = None):
        super().__init__()
        self.num_heads, self.head_size = attention.num_heads, attention.head_size
        parts = (attention.query, attention.key, attention.value)
        self.qkv = Int8Linear(torch.cat([p.weight for p in parts]), torch.cat([p.bias for p in parts]), outliers,
                              mode=mode)
        self.native = self.qkv.mode == "vnni" and self.head_size % 16 == 0
        has_bf16, why = attention_bf16_cpu()
        if bf16 and self.native and not has_bf16:
            raise ValueError(f"bf16=True needs a CPU with AVX512-BF16 for the attention kernel, and {why}")
        self.bf16 = self.native and (has_bf16 if bf16 is None else bool(bf16))
        self._consumer: tuple[Int8Linear, ...] = ()  # a tuple: not a submodule of this one

    def feed(self, consumer: Int8Linear) -> None:
        """Quantize the output for ``consumer`` (the attention output Linear) inside the native kernel: :meth:`forward`
        then returns :class:`QuantizedRows`, which :class:`Int8ResidualNorm` takes."""
        if self.native and consumer.mode == "vnni" and consumer.in_features == self.num_heads * self.head_size:
            self._consumer = (consumer,)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | Packed | None) -> torch.Tensor | QuantizedRows:
        """x (B, T, H) with the additive mask, or (1, M, H) packed sequences with their :class:`Packed` offsets."""
        B, T, H = x.shape
        if self.native:
            offsets = attn_mask.offsets if isinstance(attn_mask, Packed) else None
            if offsets is not None:
                B, mask = offsets.numel() - 1, None
            else:
                mask = None if attn_mask is None else attn_mask.float()
            # with the bf16 products, q/k/v leave the product in bfloat16: the operands those products round them to
            rows = self.qkv(x, torch.bfloat16 if self.bf16 else torch.float32).view(-1, 3 * H)
            if self._consumer:
                c = self._consumer[0]
                u, scale, zero, xo = int8_vnni_ops().attention_quantized(rows, B, self.num_heads, mask, self.bf16,
                                                                         c.keep, c.outlier_index, offsets)
                return QuantizedRows(u, scale, zero, None if c.outlier_index is None else xo)
            return int8_vnni_ops().attention(rows, B, self.num_heads, mask, self.bf16, offsets).view(x.shape)
        if isinstance(attn_mask, Packed):
            raise ValueError("packed sequences need the native attention kernel")
        qkv = self.qkv(x)  # (B, T, 3H): q, k, v, each head by head
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4).unbind(0)  # (B, N, T, D)
        y = inference_attention(q, k, v, attn_mask)
        return y.transpose(1, 2).reshape(B, T, H)

    def extra_repr(self) -> str:
        kernel = ("native, bf16 products" if self.bf16 else "native, float32") if self.native else "float32"
        return f"heads={self.num_heads}, attention={kernel}"


class Int8Intermediate(nn.Module):
    """:class:`~ctxemb.modeling.encoder.Intermediate` (up-projection and activation) with the activation fused into
    the int8 product's dequantization."""

    def __init__(self, intermediate: Intermediate, activation: str, outliers: Sequence[int] = (), mode: str = "eager"):
        super().__init__()
        self.dense = Int8Linear.from_linear(intermediate.dense, outliers, activation=activation, mode=mode)
        self._consumer: tuple[Int8Linear, ...] = ()  # a tuple: not a submodule of this one

    def feed(self, consumer: Int8Linear) -> None:
        """Quantize the output for ``consumer`` (the block's down-projection) inside the product, where both run the
        "vnni" kernel: :meth:`forward` then returns :class:`QuantizedRows`, which :class:`Int8ResidualNorm` takes."""
        if self.dense.mode == "vnni" and consumer.mode == "vnni" and consumer.in_features == self.dense.out_features:
            self._consumer = (consumer,)

    def forward(self, x: torch.Tensor) -> torch.Tensor | QuantizedRows:
        if self._consumer:
            return self.dense.quantized_output(x, self._consumer[0])
        return self.dense(x)


class Int8ResidualNorm(nn.Module):
    """:class:`~ctxemb.modeling.encoder.AttentionOutput` or :class:`~ctxemb.modeling.encoder.Output`:
    LayerNorm(residual + dense(h)), with the residual add and the LayerNorm fused into the int8 product's
    dequantization."""

    def __init__(self, block: AttentionOutput | Output, outliers: Sequence[int] = (), mode: str = "eager"):
        super().__init__()
        self.dense = Int8Linear.from_linear(block.dense, outliers, mode=mode)
        self.LayerNorm = copy.deepcopy(block.LayerNorm)
        self._consumer: tuple[Int8Linear, ...] = ()  # a tuple: not a submodule of this one

    def feed(self, consumer: Int8Linear) -> None:
        """Quantize the output for ``consumer`` (the Linear that reads it next: the block's up-projection, or the next
        layer's Q/K/V) inside the LayerNorm epilogue, where both run the "vnni" kernel: :meth:`forward` still returns
        the float32 output (it is the next residual and a hidden state), with the quantized form handed over to
        ``consumer``, which takes it when it receives that tensor."""
        if self.dense.mode == "vnni" and consumer.mode == "vnni" and consumer.in_features == self.dense.out_features:
            self._consumer = (consumer,)

    def forward(self, h: torch.Tensor | QuantizedRows, residual: torch.Tensor) -> torch.Tensor:
        """h (..., K) float, or already quantized for this block's Linear (:meth:`Int8Intermediate.feed`,
        :meth:`Int8SelfAttention.feed`); residual (..., N) -> (..., N)."""
        d = self.dense
        ln = self.LayerNorm
        flat = residual.reshape(-1, d.out_features).float()
        if d.mode == "vnni":
            if self._consumer:
                y, rows = d._native_norm_quantized(h, flat.contiguous(), ln, self._consumer[0])
                return _hand_over(y.view(*residual.shape[:-1], d.out_features), self._consumer[0], rows)
            y = d._native(h, residual=flat.contiguous(), norm=ln)
        else:
            rows = h if isinstance(h, QuantizedRows) else h.reshape(-1, d.in_features)
            y = d._fn(residual_norm_kernel)(*d._args(rows), flat, ln.weight, ln.bias, float(ln.eps))
        return y.reshape(*residual.shape[:-1], d.out_features)


class Int8Embeddings(Embeddings):
    """:class:`~ctxemb.modeling.encoder.Embeddings` (the same tables and LayerNorm, the same state dict) whose lookups,
    sum and LayerNorm run as one native call that also quantizes the result for the first block's Q/K/V
    (:meth:`feed`): the float32 result is still returned (hidden state 0, the first residual), with its quantized form
    handed over to that Linear. Without a consumer, in training mode or off the CPU, :class:`Embeddings`'
    computation."""

    def __init__(self, embeddings: Embeddings):
        nn.Module.__init__(self)
        self.config = embeddings.config
        self.word_embeddings, self.position_embeddings = embeddings.word_embeddings, embeddings.position_embeddings
        self.token_type_embeddings = embeddings.token_type_embeddings
        self.LayerNorm, self.dropout = embeddings.LayerNorm, embeddings.dropout
        self._consumer: tuple[Int8Linear, ...] = ()  # a tuple: not a submodule of this one
        self.train(embeddings.training)

    def feed(self, consumer: Int8Linear) -> None:
        """Quantize the output for ``consumer`` (the first block's Q/K/V) in the same native call, where it runs the
        "vnni" kernel and reads the embeddings' width (a multiple of 16) in float32."""
        ln, width = self.LayerNorm, self.word_embeddings.embedding_dim
        tables = [self.word_embeddings.weight, self.position_embeddings.weight, ln.weight, ln.bias]
        if self.token_type_embeddings is not None:
            tables.append(self.token_type_embeddings.weight)
        if (consumer.mode == "vnni" and consumer.in_features == width and width % 16 == 0
                and all(t is not None and t.dtype == torch.float32 for t in tables)):
            self._consumer = (consumer,)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        if not self._consumer or self.training or input_ids.device.type != "cpu":
            return super().forward(input_ids, token_type_ids)
        return self.native(input_ids, self.position_ids(input_ids), token_type_ids)

    def native(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
               token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """The native call, for a consumer given to :meth:`feed`: ids, positions and types (B, T), any integer type
        (as torch's lookups take them) -> (B, T, E)."""
        c, ln, types = self._consumer[0], self.LayerNorm, self.token_type_embeddings
        types_ids = None if types is None or token_type_ids is None else token_type_ids.long()
        y, u, scale, zero, xo = int8_vnni_ops().embed_norm_quantized(
            input_ids.long(), position_ids.long(), types_ids, self.word_embeddings.weight,
            self.position_embeddings.weight, None if types is None else types.weight, ln.weight, ln.bias,
            float(ln.eps), c.keep, c.outlier_index)
        rows = QuantizedRows(u, scale, zero, None if c.outlier_index is None else xo)
        return _hand_over(y.view(*input_ids.shape, -1), c, rows)


def packed_hidden_states(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         layers: Sequence[int]) -> torch.Tensor | None:
    """Hidden states ``layers`` (resolved indices 0..L) of a padded batch computed on its real tokens alone: the
    sequences packed one after another, so that no product and no attention works on a padding row.

    The real tokens' states are the same bits as the padded batch's (every int8 product is per token; attention's
    padding keys only ever added exact zeros); the padding rows' states are zeros (a padded batch gives them values
    no one reads).

    Args:
        encoder: an int8 encoder from :func:`quantize_int8`.
        input_ids: (B, T); attention_mask: (B, T), each row's real tokens first.

    Returns:
        (B, T, n, H), or None where this does not apply (the caller runs the encoder as usual): a batch without
        padding, a mask that is not each row's first tokens (or a row without any), an encoder whose embeddings,
        blocks or attention are not the native int8 ones of the BERT layout (MPNet's relative position bias).
    """
    emb, blocks = getattr(encoder, "embeddings", None), list(getattr(encoder, "blocks", ()))
    attention = [getattr(getattr(b, "attention", None), "self", None) for b in blocks]
    if (not isinstance(emb, Int8Embeddings) or not emb._consumer or not blocks or input_ids.device.type != "cpu"
            or type(encoder)._final is not Encoder._final
            or getattr(getattr(encoder, "encoder", None), "relative_attention_bias", None) is not None
            or not all(isinstance(a, Int8SelfAttention) and a.native for a in attention)):
        return None
    B, T = input_ids.shape
    real = attention_mask.bool()
    lengths = real.sum(1)
    if (int(lengths.sum()) == B * T or int(lengths.min()) == 0
            or not torch.equal(real, torch.arange(T) < lengths[:, None])):
        return None
    rows = real.view(-1).nonzero().squeeze(1)  # (M,): the real tokens' rows of the (B * T) layout
    offsets = torch.zeros(B + 1, dtype=torch.long)
    torch.cumsum(lengths, 0, out=offsets[1:])
    x = emb.native(input_ids.reshape(-1)[rows][None], emb.position_ids(input_ids).reshape(-1)[rows][None], None)
    wanted = set(layers)
    kept = {0: x} if 0 in wanted else {}
    context = Packed(offsets)
    for i, block in enumerate(blocks, start=1):
        x = block(x, context)
        if i in wanted:
            kept[i] = x
    return int8_vnni_ops().unpack_rows([kept[i][0] for i in layers], rows, B * T).view(B, T, len(layers), -1)


def quantize_int8(encoder: nn.Module, outliers: Mapping[str, Sequence[int]] | Int8Calibration | None = None, *,
                  fused: bool | None = None) -> nn.Module:
    """A copy of ``encoder`` (eval mode, CPU) with every ``nn.Linear`` in int8; the original is not changed.

    The BERT-family blocks of :mod:`ctxemb.modeling.encoder` get the fused modules (Q/K/V as one product; GELU, or
    residual and LayerNorm, fused into the dequantization); any other Linear (the pooler, other architectures) a
    plain :class:`Int8Linear`. Embeddings, LayerNorm and softmax stay float32, and so do the attention products, but
    in the native attention kernel on CPUs with AVX512-BF16, which multiplies them in bfloat16 (float32 sums). In the
    "vnni" mode each producer quantizes its output for the int8 Linear that reads it (see the module docstring).

    Args:
        encoder: the encoder (or a lone ``nn.Linear``, which gives an :class:`Int8Linear`).
        outliers: each Linear's outlier features by name (``encoder.named_modules()``), or an
            :class:`Int8Calibration`; None: no outlier features.
        fused: see :func:`kernel_mode`.

    Raises:
        KeyError: ``outliers`` names a module that is not a Linear of ``encoder``.
    """
    if isinstance(outliers, Int8Calibration):
        outliers = outliers.features
    outliers = dict(outliers or {})
    mode = kernel_mode(fused)
    if isinstance(encoder, nn.Linear):
        return Int8Linear.from_linear(encoder, outliers.get("", ()), mode=mode).eval()
    linear_names = {name for name, m in encoder.named_modules() if isinstance(m, nn.Linear)}
    unknown = sorted(set(outliers) - linear_names)
    if unknown:
        raise KeyError(f"outliers name modules that are not Linear layers of this encoder: {unknown[:5]}")
    was_training = encoder.training
    encoder.eval()
    try:
        quantized = copy.deepcopy(encoder)
    finally:
        encoder.train(was_training)
    hidden_act = getattr(getattr(encoder, "config", None), "hidden_act", None)
    activation = _ACTIVATION_NAMES.get(hidden_act) if hidden_act in ACTIVATIONS else None

    def features(*names: str) -> list[int]:
        return sorted(set().union(*(outliers.get(n, ()) for n in names)))

    replaced: dict[str, nn.Module] = {}
    for name, m in quantized.named_modules():
        if any(name.startswith(p + ".") for p in replaced):
            continue  # inside a block already replaced
        prefix = name + "." if name else ""
        if type(m) is SelfAttention:
            replaced[name] = Int8SelfAttention(m, features(prefix + "query", prefix + "key", prefix + "value"), mode)
        elif type(m) is Intermediate and activation is not None and m.act is ACTIVATIONS[hidden_act]:
            replaced[name] = Int8Intermediate(m, activation, features(prefix + "dense"), mode)
        elif type(m) in (AttentionOutput, Output):
            replaced[name] = Int8ResidualNorm(m, features(prefix + "dense"), mode)
        elif isinstance(m, nn.Linear):
            replaced[name] = Int8Linear.from_linear(m, features(name), mode=mode)
    for name, module in replaced.items():
        parent_name, _, child = name.rpartition(".")
        setattr(quantized.get_submodule(parent_name) if parent_name else quantized, child, module)
    for m in quantized.modules():  # a producer quantizes its output for the Linear that consumes it
        up, down = getattr(m, "intermediate", None), getattr(m, "output", None)
        if isinstance(up, Int8Intermediate) and isinstance(down, Int8ResidualNorm):
            up.feed(down.dense)
        attention, out = getattr(m, "self", None), getattr(m, "output", None)
        if isinstance(attention, Int8SelfAttention) and isinstance(out, Int8ResidualNorm):
            attention.feed(out.dense)  # the attention's output, for the attention output Linear
        out = getattr(getattr(m, "attention", None), "output", None)
        if isinstance(out, Int8ResidualNorm) and isinstance(up, Int8Intermediate):
            out.feed(up.dense)  # the attention block's LayerNorm output, for the up-projection
    blocks = list(getattr(quantized, "blocks", ()))  # the transformer blocks: each one's output is the next's input
    first = getattr(getattr(blocks[0], "attention", None), "self", None) if blocks else None
    if (type(getattr(quantized, "embeddings", None)) is Embeddings and isinstance(first, Int8SelfAttention)
            and getattr(quantized, "embeddings_project", None) is None):  # the embeddings feed the first Q/K/V
        quantized.embeddings = Int8Embeddings(quantized.embeddings)
        quantized.embeddings.feed(first.qkv)
    for block, after in itertools.pairwise(blocks):
        out, attention = getattr(block, "output", None), getattr(getattr(after, "attention", None), "self", None)
        if isinstance(out, Int8ResidualNorm) and isinstance(attention, Int8SelfAttention):
            out.feed(attention.qkv)  # a block's output, for the next block's Q/K/V
    return quantized.eval()
