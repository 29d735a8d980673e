"""Running an encoder over many tokenized texts: length-sorted batches under a token budget, windows for long
texts stitched back, only the requested hidden states kept, on one of several precision paths.

Precision paths (``precision=``; :mod:`ctxemb.runtime.backends` builds the ones that need more than the encoder itself).
The bound is what ``precision="auto"`` (:mod:`ctxemb.runtime.autoprecision`) requires of a path on its probe before it may
pick it: the mean over words of the cosine between the path's word vector and the exact one (last four layers
averaged, subwords averaged; the probe's pooling).

============  ===============================================================================  ============
path          what runs                                                                        bound
============  ===============================================================================  ============
fp32          the encoder in float32: exact (hidden states equal transformers' within 1e-5)    (reference)
bf16          autocast to bfloat16 for the matrix products, LayerNorm and softmax in float32;  >= 0.999
              pays only where the CPU multiplies bf16 in hardware (AVX512-BF16 or AMX)
int8          every Linear in int8: weights per output channel, activations with one scale     >= 0.99
              per token (dynamic), int32 sums (exact); attention products in float32, or
              with bf16 operands and float32 sums where the CPU has AVX512-BF16
onnx-fp32     the encoder exported to ONNX and run by ONNX Runtime in float32                  >= 0.9999
onnx-int8     that export with ONNX Runtime's dynamic int8 quantization of its weight          >= 0.99
              matrix products (per output channel; activations with one scale per batch)
============  ===============================================================================  ============

Shapes: B batch, T tokens of a model input, T_i content tokens of text i, W_i words of text i, n requested layers,
H hidden size.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterator, Protocol, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ctxemb.core import precision as _precision
from ctxemb.core.validation import check_int
from ctxemb.modeling.encoder import Encoder
from ctxemb.core.precision import InferencePrecision, bf16_autocast, check_inference_precision
from ctxemb.models.tokenization import TokenizedText, Tokenizer, Window

logger = logging.getLogger(__name__)


def precision_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 runs the matrix products in bfloat16 (AMX on recent Intel CPUs) while autocast keeps LayerNorm and
    softmax in float32; the other paths run as their modules are (fp32: exact). bf16 on a CPU known to emulate it
    logs :func:`ctxemb.core.precision.warn_emulated_bf16` once."""
    check_inference_precision(precision, allow_auto=False)
    if precision == "bf16" and device.type == "cpu" and _precision.cpu_has_native_bf16() is False:
        # emulated products: on a 2-core AVX2 EPYC, all-MiniLM-L6-v2 ran 7x slower than fp32
        _precision.warn_emulated_bf16("cpu")
    return bf16_autocast(precision, device)


class EncoderBackend(Protocol):
    """Something that runs an encoder on padded batches: :class:`TorchBackend` here, or one from
    :func:`ctxemb.runtime.backends.load_backend`.

    Attributes:
        precision: the path it runs (one of :data:`ctxemb.core.precision.INFERENCE_PRECISIONS`).
        device: where its inputs go.
    """

    precision: str
    device: torch.device

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      layers: Sequence[int]) -> torch.Tensor:
        """(B, T, n, H) hidden states ``layers`` (resolved indices 0..L, 0 = embedding output) of a (B, T) batch."""
        ...


class TorchBackend:
    """A torch module with the :class:`~ctxemb.modeling.encoder.Encoder` interface, run in ``precision``.

    Args:
        encoder: the encoder (or its int8-quantized copy, see :func:`ctxemb.runtime.backends.quantize_int8`).
        precision: "fp32" or "bf16" for the encoder itself, "int8" for a quantized copy.
    """

    def __init__(self, encoder: nn.Module, precision: str = "fp32"):
        if precision not in ("fp32", "bf16", "int8"):
            raise ValueError(f"a TorchBackend runs precision 'fp32', 'bf16' or 'int8', got {precision!r}; ONNX "
                             "paths need ctxemb.runtime.backends.load_backend")
        self.encoder = encoder
        self.precision = precision
        self.device = next(encoder.parameters(), torch.empty(0)).device

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      layers: Sequence[int]) -> torch.Tensor:
        with torch.inference_mode(), precision_context(self.precision, self.device):
            out = self.encoder(input_ids.to(self.device), attention_mask.to(self.device), hidden_state_indices=layers,
                               compute_pooler=False)
        by_index = dict(zip(out.hidden_state_indices, out.hidden_states))
        return torch.stack([by_index[i] for i in layers], dim=2)  # (B, T, n, H)


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


def plan_batches(tokenizer: Tokenizer, token_counts: Sequence[int], *, batch_size: int,
                 max_tokens_per_batch: int | None, stride: int | None = None) -> tuple[list[Window], list[int],
                                                                                   list[list[int]]]:
    """How :func:`run_encoder` runs texts with these numbers of content tokens: their model inputs, the inputs'
    lengths (special tokens included) and the batches (indices into the inputs).

    The plan depends on the token counts and the options only, so it can be computed by a process that has not
    tokenized the texts itself (:mod:`ctxemb.embedding.corpus` deals whole batches of it to several processes).

    Returns:
        (windows, lengths, batches): ``windows[j].item`` is the index of the text input j was cut from.
    """
    if stride is not None:
        check_int(stride, "stride", low=1)
    windows = tokenizer.windows_of_lengths(token_counts, stride=stride)
    lengths = [w.stop - w.start + tokenizer.num_special_tokens for w in windows]
    return windows, lengths, make_batches(lengths, batch_size, max_tokens_per_batch)


def run_encoder(
    encoder: Encoder,
    tokenizer: Tokenizer,
    items: Sequence[TokenizedText],
    *,
    layers: Sequence[int],
    reduce_layers: Callable[[torch.Tensor], torch.Tensor] | None = None,
    precision: InferencePrecision = "fp32",
    backend: EncoderBackend | None = None,
    batch_size: int = 32,
    max_tokens_per_batch: int | None = 16384,
    show_progress_bar: bool = False,
    stride: int | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Encode texts and yield ``(index into items, states)`` as soon as each text is complete.

    Texts are yielded in length-sorted order, not the caller's; the index says which text it is.

    Args:
        encoder: the encoder (its device is used; its layer count resolves ``layers``).
        tokenizer: adds the special tokens and plans windows for texts longer than its ``max_length``.
        items: tokenized texts.
        layers: hidden-state indices to keep (0 = embedding output, -1 = last layer).
        reduce_layers: maps a batch's stacked states (B, T, n, H) to what is kept per token, e.g. the mean over
            layers (B, T, H); default keeps (B, T, n, H).
        precision: "fp32" (exact) or "bf16" when ``backend`` is None; the other paths need a ``backend``.
        backend: what runs the batches (e.g. :func:`ctxemb.runtime.backends.load_backend`); its precision is used.
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
    if backend is None:  # checked before any work, not at the first batch
        check_inference_precision(precision, allow_auto=False)
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision {precision!r} needs a backend: pass "
                             f"backend=ctxemb.runtime.backends.load_backend(encoder, {precision!r})")
        backend = TorchBackend(encoder, precision)
    windows, lengths, batches = plan_batches(tokenizer, [len(item) for item in items], batch_size=batch_size,
                                             max_tokens_per_batch=max_tokens_per_batch, stride=stride)
    n_windows = [0] * len(items)
    for w in windows:
        n_windows[w.item] += 1
    pending: dict[int, list[tuple[Window, torch.Tensor]]] = {}
    bar = tqdm(total=len(items), disable=not show_progress_bar, desc="encoding", unit="text")
    was_training = encoder.training
    encoder.eval()
    try:
        for batch in batches:
            T = max(lengths[j] for j in batch)
            ids = torch.full((len(batch), T), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), T), dtype=torch.long)
            for row, j in enumerate(batch):
                w = windows[j]
                seq, _ = tokenizer.with_specials(items[w.item].ids[w.start:w.stop])
                ids[row, :len(seq)] = torch.tensor(seq)
                mask[row, :len(seq)] = 1
            states = backend.hidden_states(ids, mask, layer_idx)  # (B, T, n, H)
            with torch.inference_mode():
                states = states.float()
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


#: Up to this many words of several subwords, :func:`pool_subwords` sums each in its own call (about 2 us each);
#: past it, one cumulative sum over the text (whose cost grows with the text, not with the words).
_LOOPED_WORDS = 32


def pool_subwords(states: torch.Tensor, word_spans: Sequence[tuple[int, int]], pooling: str = "mean") -> torch.Tensor:
    """Pool subword vectors into word vectors.

    On CPU float tensors this runs in NumPy: a sentence's words in ~20 us, where a chain of small torch ops costs
    ~75 us (per text, that adds up to a tenth of an int8 encoding pass). Elsewhere (a GPU, autograd, other dtypes)
    in torch. Means are summed in float64 and rounded once to ``states``' dtype (the two paths agree to that rounding).

    Args:
        states: (T, ...) one row per content token.
        word_spans: W pairs ``(start, end)`` of token indices, ``0 <= start < end <= T``.
        pooling: "mean", "first" or "last".

    Returns:
        (W, ...) tensor of ``states``' dtype and device.

    Raises:
        ValueError: an unknown ``pooling``, or a span that is empty or reaches outside ``states``.
    """
    if pooling not in ("mean", "first", "last"):
        raise ValueError(f"pooling must be 'mean', 'first' or 'last', got {pooling!r}")
    spans = np.asarray(word_spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = spans[:, 0], spans[:, 1]
    T = states.shape[0]
    if spans.size and (starts.min() < 0 or ends.max() > T or (ends <= starts).any()):
        bad = int(np.flatnonzero((starts < 0) | (ends > T) | (ends <= starts))[0])
        raise ValueError(f"word_spans[{bad}] = {tuple(spans[bad].tolist())} is not a non-empty span of the {T} "
                         f"token states")
    if states.device.type != "cpu" or states.requires_grad or states.dtype not in (torch.float32, torch.float64):
        return _pool_subwords_torch(states, torch.from_numpy(starts).to(states.device),
                                    torch.from_numpy(ends).to(states.device), pooling)
    x = states.numpy()
    if pooling == "first":
        return torch.from_numpy(x[starts])
    if pooling == "last":
        return torch.from_numpy(x[ends - 1])
    counts = ends - starts
    multi = np.flatnonzero(counts > 1)
    if len(multi) <= _LOOPED_WORDS:  # most words are one token: copy those, sum the few others one by one
        out = x[starts].astype(np.float64)
        for w in multi:
            out[w] = x[starts[w]:ends[w]].sum(axis=0, dtype=np.float64) / counts[w]
    else:  # a cumulative sum gives every span's sum in one subtraction
        csum = np.zeros((T + 1, *x.shape[1:]), dtype=np.float64)
        np.cumsum(x, axis=0, dtype=np.float64, out=csum[1:])
        out = (csum[ends] - csum[starts]) / counts.astype(np.float64).reshape(-1, *([1] * (x.ndim - 1)))
    return torch.from_numpy(out.astype(x.dtype))


def _pool_subwords_torch(states: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, pooling: str) -> torch.Tensor:
    """:func:`pool_subwords` in torch ops (any device, autograd, any float dtype)."""
    if pooling == "first":
        return states[starts]
    if pooling == "last":
        return states[ends - 1]
    csum = torch.cat([torch.zeros_like(states[:1], dtype=torch.float64), states.cumsum(0, dtype=torch.float64)])
    counts = (ends - starts).to(torch.float64).view(-1, *([1] * (states.dim() - 1)))
    return ((csum[ends] - csum[starts]) / counts).to(states.dtype)
