"""How an :class:`~ctxemb.embedding.embedder.Embedder` makes its vectors (:class:`EmbedderConfig`, recorded with sense stores
and search indexes), and the checks of the options the configuration and the Embedder's methods share.

Hidden-state indices follow transformers' convention: 0 is the embedding output, -1 the last layer.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any, Sequence

from ctxemb.core.validation import check_choice, check_int
from ctxemb.core.precision import INFERENCE_PRECISION_CHOICES as PRECISION_CHOICES
from ctxemb.models.hub import DEFAULT_MODEL
from ctxemb.models.tokenization import check_texts, check_word_lists

LAYER_POOLINGS = ("mean", "sum", "concat", "weighted", "stack")
SUBWORD_POOLINGS = ("mean", "first", "last")
SPAN_MODES = ("mean", "endpoints")
OUTPUTS = ("numpy", "torch")


@dataclass(frozen=True)
class EmbedderConfig:
    """How embeddings are made; stored with sense stores and search indexes so that queries match.

    Attributes:
        model: model name or path (see :mod:`ctxemb.models.hub`).
        layers: hidden-state indices to pool (0 = embedding output, -1 = last layer).
        layer_pooling: "mean", "sum", "concat" (H * n dimensions), "weighted" (average with ``layer_weights``).
        layer_weights: one weight per entry of ``layers`` for "weighted".
        subword_pooling: how a word's subword vectors become one: "mean", "first" or "last".
        precision: the path that runs the encoder (see :mod:`ctxemb.runtime.engine`, which gives each one's accuracy
            bound): "fp32" (exact), "bf16", "int8", "onnx-fp32", "onnx-int8", or "auto": the fastest of them that
            meets its bound on the machine at hand (:mod:`ctxemb.runtime.autoprecision`). An :class:`Embedder` made with
            "auto" replaces it by the path it chose, so sense stores and indexes record what made their vectors.
        training_run: the identity of the training run that made the model's weights (``ctxemb_training_run`` in
            its ``config.json``, written by :func:`ctxemb.modeling.checkpoint.stamp_training_run`), or None for a
            model no ctxemb recipe stamped (released checkpoints). :meth:`Embedder.from_pretrained` fills it in from
            the model directory. Stores and indexes compare it like the other fields, so vectors from one fine-tuned
            encoder are never queried with another of the same architecture; :meth:`to_dict` leaves it out when
            None, so what older stores recorded still matches.
        dimensions: keep only the first ``dimensions`` components of every vector (word, token, span and sentence
            vectors; the last axis with "stack"), as Matryoshka-trained models allow; vectors that are normalised
            (``embed_sentences(normalize=True)``) are normalised after truncation. None keeps them whole (and
            :meth:`to_dict` leaves it out, so what older stores recorded still matches).
    """

    model: str = DEFAULT_MODEL
    layers: tuple[int, ...] = (-4, -3, -2, -1)
    layer_pooling: str = "mean"
    layer_weights: tuple[float, ...] | None = None
    subword_pooling: str = "mean"
    precision: str = "fp32"
    training_run: str | None = None
    dimensions: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str):
            raise TypeError(f"model must be a str (a name or a path), got {type(self.model).__name__}")
        if isinstance(self.layers, str):
            raise ValueError(f"layers={self.layers!r} is a per-call option (e.g. embed_words(..., layers='all')); a "
                             "configuration needs a list of hidden-state indices, e.g. list(range(num_layers + 1))")
        object.__setattr__(self, "layers", _check_layer_list(self.layers))
        if self.layer_weights is not None:
            object.__setattr__(self, "layer_weights", _check_weights(self.layer_weights))
        _check_layer_args(self.layers, self.layer_pooling, self.layer_weights)
        if self.layer_pooling == "stack":
            raise ValueError("layer_pooling 'stack' is a per-call option, not a configuration")
        check_choice(self.subword_pooling, "subword_pooling", SUBWORD_POOLINGS)
        check_choice(self.precision, "precision", PRECISION_CHOICES)
        if self.training_run is not None and not isinstance(self.training_run, str):
            raise TypeError(f"training_run must be a str or None, got {type(self.training_run).__name__}")
        if self.training_run == "":
            raise ValueError("training_run must be a non-empty str or None, got ''")
        if self.dimensions is not None:
            object.__setattr__(self, "dimensions", check_int(self.dimensions, "dimensions", low=1))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layers"] = list(self.layers)
        d["layer_weights"] = None if self.layer_weights is None else list(self.layer_weights)
        for name in ("training_run", "dimensions"):  # absent when None, as in what stores and indexes recorded
            if d[name] is None:                       # before the field existed
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EmbedderConfig":
        if not isinstance(d, Mapping):
            raise TypeError(f"an EmbedderConfig dict must be a dict, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown EmbedderConfig fields {unknown}; expected some of {sorted(known)}")
        return cls(**d)


def _check_layer_list(layers) -> tuple[int, ...]:
    """``layers`` as a tuple of ints; refuses an int, None, a str and non-integer items (by index)."""
    if isinstance(layers, bool) or isinstance(layers, numbers.Integral):
        raise TypeError(f"layers must be a list of hidden-state indices, got the int {layers!r}; pass a list, "
                        f"e.g. layers=[{int(layers)}]")
    if layers is None or isinstance(layers, (bytes, Mapping, Set)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"layers must be a list of hidden-state indices (0 = embedding output, -1 = last layer), "
                        f"got {type(layers).__name__}")
    out = []
    for i, v in enumerate(layers):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"layers[{i}] must be an int hidden-state index, got {v!r} ({type(v).__name__})")
        out.append(int(v))
    return tuple(out)


def _check_weights(weights) -> tuple[float, ...]:
    """``layer_weights`` as a tuple of floats; each must be a finite real number."""
    if isinstance(weights, (str, bytes, Mapping, Set)) or not hasattr(weights, "__iter__"):
        raise TypeError(f"layer_weights must be a list of numbers, got {type(weights).__name__}")
    out = []
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise TypeError(f"layer_weights[{i}] must be a number, got {w!r} ({type(w).__name__})")
        if not math.isfinite(w):
            raise ValueError(f"layer_weights[{i}] is {w!r}; every layer weight must be a finite number (a NaN or "
                             "infinite weight would make every vector NaN)")
        out.append(float(w))
    return tuple(out)


def _check_token_budget(value) -> int | str | None:
    """``max_tokens_per_batch``: an int >= 1, None (no budget) or "auto" (resolved by the Embedder)."""
    if value is None or value == "auto":
        return value
    if isinstance(value, str):
        raise ValueError(f"max_tokens_per_batch must be an int >= 1, None (no budget) or 'auto'; got {value!r}")
    return check_int(value, "max_tokens_per_batch", low=1)


def _text_batch(texts) -> list[str]:
    """Raw texts as a list of str, all checked before any work (an empty batch is allowed: empty result)."""
    texts = _as_list(texts, "texts")
    check_texts(texts, "texts")
    return texts


def _word_batch(sentences) -> list[list[str]]:
    """Pre-tokenized sentences as lists of str, all checked before any work (an empty batch is allowed)."""
    return check_word_lists(_as_list(sentences, "sentences"), "sentences")


def _check_spans(spans, sentences: list[list[str]]) -> list[tuple[int, int]]:
    spans = _as_list(spans, "spans")
    if len(spans) != len(sentences):
        raise ValueError(f"spans has {len(spans)} entries but sentences has {len(sentences)}; expected one each")
    out = []
    for i, span in enumerate(spans):
        pair = None if isinstance(span, (str, bytes)) or not hasattr(span, "__len__") or len(span) != 2 else span
        if pair is None or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in pair):
            raise TypeError(f"spans[{i}] must be a pair (start, end) of ints, got {span!r}")
        s, e = int(pair[0]), int(pair[1])
        if not 0 <= s < e <= len(sentences[i]):
            raise ValueError(f"spans[{i}] = ({s}, {e}) is empty or outside sentence {i} of {len(sentences[i])} words")
        out.append((s, e))
    return out


def _check_layer_args(layers: Sequence[int], pooling: str, weights: Sequence[float] | None) -> None:
    check_choice(pooling, "layer_pooling", LAYER_POOLINGS)
    if len(layers) == 0:
        raise ValueError("layers is empty: expected at least one hidden-state index (0 = embedding output, -1 = last)")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers has repeated indices: {list(layers)}")
    if pooling == "weighted":
        if weights is None or len(weights) != len(layers):
            raise ValueError(f"layer_pooling 'weighted' needs layer_weights with one weight per layer ({len(layers)}); "
                             f"got {None if weights is None else list(weights)}")
        if sum(weights) == 0:
            raise ValueError("layer_weights sum to 0")
    elif weights is not None:
        raise ValueError(f"layer_weights are only used with layer_pooling='weighted', not {pooling!r}")


def _as_list(x, name: str) -> list:
    if x is None:
        raise TypeError(f"{name} is None; expected a list")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a list, got a single {type(x).__name__}; wrap it in a list")
    if isinstance(x, (Mapping, Set)):
        raise TypeError(f"{name} must be a list (an ordered sequence), got a {type(x).__name__}")
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{name} must be a list, got {type(x).__name__}") from None


# ---- pooling of layers and subwords (the Embedder applies them per batch) --------------------------------------
def _layer_reducer(pooling: str, weights: Sequence[float] | None, dimensions: int | None = None):
    """A function (B, T, n, H) -> pooled states, applied per batch so only the pooled result is kept; with
    ``dimensions``, only the first ``dimensions`` components of the pooled states' last axis are kept."""
    reduce = _layer_pooling(pooling, weights)
    if dimensions is None:
        return reduce
    if reduce is None:  # stack
        return lambda s: s[..., :dimensions].contiguous()
    return lambda s: reduce(s)[..., :dimensions].contiguous()


def _layer_pooling(pooling: str, weights: Sequence[float] | None):
    if pooling == "mean":
        return lambda s: s.mean(dim=2)
    if pooling == "sum":
        return lambda s: s.sum(dim=2)
    if pooling == "concat":
        return lambda s: s.flatten(2)
    if pooling == "weighted":
        import torch  # here, not at the top: the command line reads this module's choices without loading torch

        w = torch.tensor(weights, dtype=torch.float32)
        w = w / w.sum()
        return lambda s: torch.einsum("btnh,n->bth", s, w.to(s.device))
    return None  # stack: keep the layer axis


def _pool_rows(x, pooling: str):
    check_choice(pooling, "pooling", SUBWORD_POOLINGS)
    return x.mean(0) if pooling == "mean" else (x[0] if pooling == "first" else x[-1])
