"""The token budget of a batch: how many padded tokens one forward pass of the engine may hold.

On the CPU a batch runs fastest while its widest activation stays in the last-level cache, so the budget follows the
cache size (:func:`recommended_tokens_per_batch`); on a GPU its memory bounds it (:data:`GPU_TOKENS_PER_BATCH`).
:func:`resolve_tokens_per_batch` turns an Embedder's ``max_tokens_per_batch`` ("auto", a number or None) into the
budget that :func:`ctxemb.runtime.engine.plan_batches` batches by.
"""

from __future__ import annotations

import re
from pathlib import Path


def last_level_cache_bytes() -> int | None:
    """The size of this CPU's largest (last-level) cache in bytes, from Linux's sysfs; None where it is not known."""
    best = None
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", size)
        if kind == "Instruction" or match is None:
            continue
        value = int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]
        if best is None or level > best[0]:
            best = (level, value)
    return None if best is None else best[1]


#: The token budget where the cache size is unknown (the rule below on a 32 MiB last-level cache and MiniLM).
DEFAULT_TOKENS_PER_BATCH = 2048


def recommended_tokens_per_batch(config, cache_bytes: int | None = None) -> int:
    """A token budget per batch (padded tokens) for CPU inference that keeps a batch's widest activation, the
    feed-forward one of (tokens, intermediate_size) float32 values, within half of the last-level cache: the largest
    power of two in 512..8192 that fits (:data:`DEFAULT_TOKENS_PER_BATCH` where the cache size is unknown).

    On a 2-core EPYC (Zen 4, 32 MiB L3; one thread, CPU time), all-MiniLM-L6-v2's int8 path encoded 1,000
    WikiText-2 sentences, in length-sorted batches limited by the budget alone, at 8,410 real tokens/s with 2,048
    (7% padding) against 4,461 with 8,192 (22% padding; the activations of 8,192 tokens, 6 KiB each, exceed the L3
    cache), and 8,365 with 1,024; ``benchmarks/encode_throughput.py --sweep-tokens`` measures the sweep on the machine
    at hand; with 2,000 sentences (``benchmarks/results/encode_throughput_all-MiniLM-L6-v2.md``, 2 threads) int8
    ran at 15,823 / 15,540 / 16,266 / 9,411 tokens/s with 1,024 / 2,048 / 4,096 / 8,192 and fp32 at 6,962 / 6,839 /
    6,718 / 5,313. :class:`~ctxemb.embedding.embedder.Embedder` takes this budget by default on the CPU.

    Args:
        config: the encoder's configuration (its ``intermediate_size``, else 4 x ``hidden_size``).
        cache_bytes: the last-level cache size (default: :func:`last_level_cache_bytes`).
    """
    cache_bytes = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    width = getattr(config, "intermediate_size", None) or 4 * int(config.hidden_size)
    if not cache_bytes:
        return DEFAULT_TOKENS_PER_BATCH
    per_token = 4 * int(width)
    budget = 512
    while budget * 2 <= 8192 and budget * 2 * per_token <= cache_bytes // 2:
        budget *= 2
    return budget


#: The token budget on a GPU (and the Embedder's CPU default before "auto"): GPU memory, not a cache, bounds it there.
GPU_TOKENS_PER_BATCH = 8192


def resolve_tokens_per_batch(budget: int | str | None, encoder) -> int | None:
    """An Embedder's ``max_tokens_per_batch`` as a number: "auto" -> on the CPU the budget that keeps a batch's
    feed-forward activations within the last-level cache (:func:`recommended_tokens_per_batch`: 2,048 for MiniLM on
    a 32 MiB L3, where 8,192-token batches encoded 42% slower), on a GPU :data:`GPU_TOKENS_PER_BATCH`; a number or
    None (no budget) as given."""
    if budget != "auto":
        return budget
    if next(encoder.parameters()).device.type != "cpu":
        return GPU_TOKENS_PER_BATCH
    return recommended_tokens_per_batch(encoder.config)
