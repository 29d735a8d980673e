"""Running an encoder over many tokenized texts: length-sorted batches under a token budget, windows for long
texts stitched back, only the requested hidden states kept, fp32 or bf16.

Shapes: B batch, T tokens of a model input, T_i content tokens of text i, n requested layers, H hidden size.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Callable, Iterator, Literal, Sequence

import torch
from tqdm.auto import tqdm

from ctxemb._validation import check_int
from ctxemb.modeling.encoder import Encoder
from ctxemb.tokenization import TokenizedText, Tokenizer, Window

logger = logging.getLogger(__name__)

Precision = Literal["fp32", "bf16"]
PRECISIONS = ("fp32", "bf16")


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16() -> bool | None:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX512-BF16 or AMX-BF16); None if unknown.

    Read from ``/proc/cpuinfo`` (Linux only).
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def precision_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 runs the matrix products in bfloat16 (AMX on recent Intel CPUs) while autocast keeps LayerNorm and
    softmax in float32; fp32 is exact."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "bf16":
        if device.type == "cpu" and cpu_has_native_bf16() is False:
            _warn_slow_bf16()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=1)
def _warn_slow_bf16() -> None:
    # Without hardware bf16 the products are emulated: on a 2-core AVX2 EPYC, all-MiniLM-L6-v2 ran 7x slower than fp32.
    logger.warning("precision='bf16' on a CPU without AVX512-BF16 or AMX: bfloat16 is emulated here and usually "
                   "several times slower than fp32; use precision='fp32'")


def make_batches(lengths: Sequence[int], batch_size: int, max_tokens_per_batch: int | None) -> list[list[int]]:
    """Group indices, longest first, so that each batch has at most ``batch_size`` inputs and (padded)
    ``len(batch) * longest`` at most ``max_tokens_per_batch`` tokens (a single longer input still gets a batch)."""
    batch_size = check_int(batch_size, "batch_size", low=1)
    if max_tokens_per_batch is not None:
        max_tokens_per_batch = check_int(max_tokens_per_batch, "max_tokens_per_batch", low=1)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        full = len(current) >= batch_size or (
            max_tokens_per_batch is not None and current and (len(current) + 1) * longest > max_tokens_per_batch)
        if full:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def run_encoder(
    encoder: Encoder,
    tokenizer: Tokenizer,
    items: Sequence[TokenizedText],
    *,
    layers: Sequence[int],
    reduce_layers: Callable[[torch.Tensor], torch.Tensor] | None = None,
    precision: Precision = "fp32",
    batch_size: int = 32,
    max_tokens_per_batch: int | None = 16384,
    show_progress_bar: bool = False,
    stride: int | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Encode texts and yield ``(index into items, states)`` as soon as each text is complete.

    Texts are yielded in length-sorted order, not the caller's; the index says which text it is.

    Args:
        encoder: the encoder (its device is used).
        tokenizer: adds the special tokens and plans windows for texts longer than its ``max_length``.
        items: tokenized texts.
        layers: hidden-state indices to keep (0 = embedding output, -1 = last layer).
        reduce_layers: maps a batch's stacked states (B, T, n, H) to what is kept per token, e.g. the mean over
            layers (B, T, H); default keeps (B, T, n, H).
        precision: "fp32" (exact) or "bf16".
        batch_size: most model inputs per batch.
        max_tokens_per_batch: most padded tokens per batch (None: no budget).
        show_progress_bar: show a tqdm bar over texts.
        stride: window step for long texts (default half a window).

    Yields:
        (i, states): states is a float32 CPU tensor (T_i + 2, ...) for text i: [CLS], its T_i tokens, [SEP].
        For a text split into windows, [CLS] comes from the first window, [SEP] from the last, and every content
        token from the window where it has the most context.
    """
    layer_idx = encoder.resolve_layers(list(layers))
    if precision not in PRECISIONS:  # before any work, not at the first batch
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if stride is not None:
        check_int(stride, "stride", low=1)
    device = next(encoder.parameters()).device
    windows = tokenizer.windows(items, stride=stride)
    n_windows = [0] * len(items)
    for w in windows:
        n_windows[w.item] += 1
    lengths = [w.stop - w.start + tokenizer.num_special_tokens for w in windows]
    pending: dict[int, list[tuple[Window, torch.Tensor]]] = {}
    bar = tqdm(total=len(items), disable=not show_progress_bar, desc="encoding", unit="text")
    was_training = encoder.training
    encoder.eval()
    try:
        for batch in make_batches(lengths, batch_size, max_tokens_per_batch):
            T = max(lengths[j] for j in batch)
            ids = torch.full((len(batch), T), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), T), dtype=torch.long)
            for row, j in enumerate(batch):
                w = windows[j]
                seq, _ = tokenizer.with_specials(items[w.item].ids[w.start:w.stop])
                ids[row, :len(seq)] = torch.tensor(seq)
                mask[row, :len(seq)] = 1
            with torch.inference_mode(), precision_context(precision, device):
                out = encoder(ids.to(device), mask.to(device), hidden_state_indices=layer_idx, compute_pooler=False)
                by_index = dict(zip(out.hidden_state_indices, out.hidden_states))
                states = torch.stack([by_index[i] for i in layer_idx], dim=2).float()  # (B, T, n, H)
                if reduce_layers is not None:
                    states = reduce_layers(states)
                states = states.cpu()
            for row, j in enumerate(batch):
                w = windows[j]
                pending.setdefault(w.item, []).append((w, states[row, :lengths[j]]))
                if len(pending[w.item]) == n_windows[w.item]:
                    yield w.item, _stitch(pending.pop(w.item))
                    bar.update(1)
    finally:
        bar.close()
        encoder.train(was_training)


def _stitch(parts: list[tuple[Window, torch.Tensor]]) -> torch.Tensor:
    """Join the windows of one text: (1 + T_i + 1, ...) from windows that each hold [CLS] + content + [SEP]."""
    if len(parts) == 1:
        return parts[0][1].clone()
    parts.sort(key=lambda p: p[0].start)
    pieces = [parts[0][1][:1]]  # [CLS] of the first window
    for w, s in parts:
        pieces.append(s[1 + w.keep_start - w.start: 1 + w.keep_stop - w.start])
    pieces.append(parts[-1][1][-1:])  # [SEP] of the last window
    return torch.cat(pieces, dim=0)
