"""Inference attention on the CPU: of two formulations of the same product, the one that is faster here for the
sequence length at hand.

``F.scaled_dot_product_attention`` runs a blocked (flash) kernel on the CPU; for the short sequences of sentence
encoding its blocking costs more than it saves: on a 2-core EPYC (Zen 4), head size 32 and ~2,048 tokens per call,
the explicit product - softmax - product was 2-3x faster at 8-24 tokens, 1.2-1.9x at 32-64, about even at 80 and
slower from 96 on. Where the crossover lies depends on the CPU, its threads and the head size, so it is measured
once per process (:func:`math_attention_limit`, under a second), not assumed. Both compute softmax(q k^T / sqrt(D) + mask) v
in float32; they differ by rounding (~1e-6).

Used by the int8 path (:class:`ctxemb.runtime.int8.Int8SelfAttention`) where its native attention kernel does not run
(CPUs without AVX512-VNNI, head sizes that are not a multiple of 16); the exact path keeps SDPA, so its vectors stay
bitwise reproducible from run to run.

Shapes: q, k, v (B, N, T, D); mask additive, broadcastable to (B, N, T, T).
"""

from __future__ import annotations

import functools
import logging
import time

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

#: Sequence lengths timed, and the tokens per timed call (the size of an encoding batch).
_LENGTHS = (16, 32, 64, 128, 256)
_TOKENS = 2048
_HEADS = 12


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v with explicit products: (B, N, T, D) -> (B, N, T, D)."""
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)
    if mask is not None:
        scores.add_(mask)
    return torch.matmul(scores.softmax(-1), v)


def _best_times(first, second, rounds: int = 9) -> tuple[float, float]:
    """The best time of each of two calls over ``rounds`` alternating rounds (alternating, so that a slow spell of
    the machine hits both)."""
    first(), second()
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((first, second)):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0], best[1]


@functools.lru_cache(maxsize=None)
def math_attention_limit(head_size: int, threads: int) -> int:
    """The longest sequence length up to which :func:`math_attention` beat SDPA on this machine (0: at no length),
    timed once per head size and thread count on random inputs of ~2,048 tokens, at 16, 32, 64, 128 and 256 tokens
    (stopping at the first length where SDPA wins)."""
    gen = torch.Generator().manual_seed(0)
    limit = 0
    with torch.inference_mode():
        for T in _LENGTHS:
            B = max(1, _TOKENS // T)
            q, k, v = torch.randn(3, B, _HEADS, T, head_size, generator=gen).unbind(0)
            mask = torch.zeros(B, 1, 1, T)
            mask[::2, ..., T // 2:] = torch.finfo(torch.float32).min
            sdpa, math = _best_times(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                     lambda: math_attention(q, k, v, mask))
            if math >= sdpa:
                break
            limit = T
    logger.info("attention: explicit products up to %d tokens, SDPA beyond (timed here, head size %d, %d threads)",
                limit, head_size, threads)
    return limit


def inference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v by whichever formulation is faster here at this length (see the module
    docstring); SDPA off the CPU. (B, N, T, D) -> (B, N, T, D)."""
    if q.device.type == "cpu" and q.shape[-2] <= math_attention_limit(q.shape[-1], torch.get_num_threads()):
        return math_attention(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
