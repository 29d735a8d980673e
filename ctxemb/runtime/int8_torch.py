"""The int8 scheme of :mod:`ctxemb.runtime.int8` as torch functions, what its "inductor" and "eager" modes run (the
"vnni" mode runs the native kernel of :mod:`ctxemb.runtime.kernels` instead), and the probes that choose the mode
(:func:`kernel_mode`) and the weights' range (:func:`weight_levels`).

Shapes: M tokens (rows), K input features, N output features, |O| outlier features.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import torch
import torch.nn.functional as F

from ctxemb.runtime.kernels import int8_vnni_ops

logger = logging.getLogger(__name__)

TINY = torch.finfo(torch.float32).tiny
# Up to this many outlier features are summed inside the fused dequantization, more by a matrix product.
_FUSED_OUTLIERS = 16

# ---- the fused functions ---------------------------------------------------------------------------------------
# Pure functions of tensors (the weights are arguments), so that one compiled graph serves every layer.
def _quantize(x: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(M, K) float -> (M, K) int8 q, (M, 1) per-token scale s and (M, 1) int32 zero point z over the kept (inlier)
    features, with x ~ s (q - z) (see the module docstring)."""
    if keep is not None:
        x = x * keep
    low = x.amin(dim=1, keepdim=True).clamp_max(0.0)
    scale = (x.amax(dim=1, keepdim=True).clamp_min(0.0) - low).clamp_min(TINY) / 255
    zero = torch.round(-low / scale) - 128
    # times the reciprocal, not divided by the scale: the native kernel does the same (a division per element cost
    # it a tenth of the down-projection's time), so every mode rounds to the same integers
    return torch.clamp(torch.round(x * (1.0 / scale)) + zero, -128, 127).to(torch.int8), scale, zero.to(torch.int32)


def _product(x: torch.Tensor, weight_int8: torch.Tensor, weight_sum: torch.Tensor, weight_scale: torch.Tensor,
             bias: torch.Tensor, keep: torch.Tensor | None, outlier_index: torch.Tensor | None,
             outlier_weight: torch.Tensor | None) -> torch.Tensor:
    """The dequantized product plus bias, (M, N) float32 (see the module docstring)."""
    x = x.float()
    q, scale, zero = _quantize(x, keep)
    # exact in int32: |z * c| <= 128 * 127 * K
    y = (torch._int_mm(q, weight_int8) - zero * weight_sum).float() * scale * weight_scale + bias
    if outlier_index is not None:
        xo = x.index_select(1, outlier_index)  # (M, |O|)
        if torch.compiler.is_compiling() and outlier_weight.shape[0] <= _FUSED_OUTLIERS:
            # a sum Inductor fuses into the dequantization pass; as a matrix product, a few outlier features cost a
            # full extra pass over the (M, N) output (measured: as much as the int8 product itself for one feature)
            y = y + (xo[:, :, None] * outlier_weight[None]).sum(1)
        else:
            y = y + torch.mm(xo, outlier_weight)
    return y


# One function per activation, not one with the activation as an argument: torch.compile keeps its compiled variants
# per function (a handful each: with and without outlier features, grad modes), so they do not crowd one cache.
def linear_kernel(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight):
    """x W^T + b in int8: (M, K) -> (M, N)."""
    return _product(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight)


def linear_gelu_kernel(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight):
    """GELU(x W^T + b) with the product in int8."""
    return F.gelu(_product(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight))


def linear_gelu_tanh_kernel(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight):
    """GELU (tanh approximation) of x W^T + b with the product in int8."""
    return F.gelu(_product(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight),
                  approximate="tanh")


def linear_relu_kernel(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight):
    """ReLU(x W^T + b) with the product in int8."""
    return F.relu(_product(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight))


LINEAR_KERNELS = {"none": linear_kernel, "gelu": linear_gelu_kernel, "gelu_tanh": linear_gelu_tanh_kernel,
                   "relu": linear_relu_kernel}


def residual_norm_kernel(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight,
                         residual, norm_weight, norm_bias, eps: float):
    """LayerNorm(residual + x W^T + b) with the product in int8: (M, K), (M, N) -> (M, N)."""
    y = _product(x, weight_int8, weight_sum, weight_scale, bias, keep, outlier_index, outlier_weight) + residual
    return F.layer_norm(y, (y.shape[-1],), norm_weight, norm_bias, eps)


# Compiled variants per kernel function: each (K, N) shape pair of a model's layers, with and without outlier
# features, is one (torch._int_mm's lowering fixes K and N), so two models in one process pass dynamo's default of 8;
# beyond the limit dynamo would run the function unfused.
_RECOMPILE_LIMIT = 64


@functools.lru_cache(maxsize=None)
def compiled(fn: Callable) -> Callable:
    graph = torch.compile(fn, dynamic=True, backend="inductor")

    @functools.wraps(fn)
    def run(*args):
        with torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT):
            return graph(*args)
    return run


@functools.lru_cache(maxsize=1)
def weight_levels() -> int:
    """The largest int8 weight magnitude L (127 or 63) for which ``torch._int_mm`` multiplies exactly on this CPU;
    probed once per process on random matrices against an int64 product.

    Why: ``torch._int_mm`` runs on oneDNN, whose s8 x s8 kernel on CPUs without AVX512-VNNI or AMX (AVX2, plain
    AVX-512) multiplies byte pairs with ``vpmaddubsw``, whose 16-bit pair sums saturate: full-range products come out
    wrong (measured with oneDNN limited to AVX2: off by 10^5 at K = 384, in eager and compiled calls alike). Weights in
    [-63, 63] keep every pair sum below 2^15 and the products exact (FBGEMM's "reduce_range", for the same reason), at
    the cost of one bit of weight resolution.

    Raises:
        RuntimeError: neither range multiplies exactly (the int8 path cannot be trusted here).
    """
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (16, 256), dtype=torch.int8, generator=gen)
    for levels in (127, 63):
        b = torch.randint(-levels, levels + 1, (256, 32), dtype=torch.int8, generator=gen)
        if torch.equal(torch._int_mm(a, b).long(), a.long() @ b.long()):
            if levels < 127:
                logger.info("torch._int_mm is exact on this CPU for weights in [-%d, %d] only; int8 weights use that "
                            "range", levels, levels)
            return levels
    raise RuntimeError("torch._int_mm gives wrong int8 products on this CPU even with 7-bit weights; the int8 path "
                       "cannot run here (use precision 'fp32' or 'bf16')")


@functools.lru_cache(maxsize=1)
def inductor_works() -> bool:
    """Whether ``torch.compile`` with Inductor can build a CPU kernel in this process (it needs a C++ compiler);
    tried once per process on a tiny function."""
    try:
        with torch.inference_mode():
            x = torch.randn(4, 8)
            torch.testing.assert_close(torch.compile(lambda t: (t * 2).amax(1), backend="inductor")(x), (x * 2).amax(1))
        return True
    except Exception as e:  # noqa: BLE001  (any failure means: no compiled kernels here)
        logger.warning("torch.compile (Inductor, CPU) does not work here (%s: %s); the int8 path runs its kernel "
                       "unfused, several times slower", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        return False


def kernel_mode(fused: bool | None = None) -> str:
    """"vnni" (the native kernel of :mod:`ctxemb.runtime.kernels`: quantization, product and epilogue in one C++ call per
    Linear, on CPUs with AVX512-VNNI), "inductor" (this module's functions fused by ``torch.compile``) or "eager" (the
    same functions, unfused).

    Args:
        fused: True requires a fused mode (raises if neither works), False runs eagerly, None: the first of "vnni",
            "inductor" that works here (a warning if neither does).
    """
    if fused is False:
        return "eager"
    if int8_vnni_ops() is not None:
        return "vnni"
    if inductor_works():
        return "inductor"
    if fused is True:
        raise RuntimeError("fused=True needs the native int8 kernel (an AVX512-VNNI CPU) or torch.compile with "
                           "Inductor on the CPU, and neither works here (a C++ compiler is required); pass "
                           "fused=False or None")
    return "eager"
