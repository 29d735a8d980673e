"""Contextual embeddings of words, tokens, spans and sentences (Jurafsky & Martin 11.3).

An :class:`Embedder` runs an encoder once and pools twice: over layers (default: the average of the last four hidden
states) and over the subword tokens of each word (default: mean). Hidden-state indices follow transformers'
convention everywhere: 0 is the embedding output, -1 the last layer, L the last of an L-layer encoder.

Shapes: N texts, W words of a text, T subword tokens of a text, n pooled layers, H hidden size.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from ctxemb._validation import check_choice
from ctxemb.inference import PRECISIONS, run_encoder
from ctxemb.loading import load_encoder, load_tokenizer
from ctxemb.modeling.encoder import Encoder
from ctxemb.registry import DEFAULT_MODEL
from ctxemb.tokenization import TokenizedText, Tokenizer

logger = logging.getLogger(__name__)

LAYER_POOLINGS = ("mean", "sum", "concat", "weighted", "stack")
SUBWORD_POOLINGS = ("mean", "first", "last")
SENTENCE_POOLINGS = ("mean", "cls")
SPAN_MODES = ("mean", "endpoints")
OUTPUTS = ("numpy", "torch")
_CHUNK = 4096  # texts sorted and batched together; bounds memory for corpora of any size


@dataclass(frozen=True)
class EmbedderConfig:
    """How embeddings are made; stored with sense stores and search indexes so that queries match.

    Attributes:
        model: model name or path (see :mod:`ctxemb.registry`).
        layers: hidden-state indices to pool (0 = embedding output, -1 = last layer).
        layer_pooling: "mean", "sum", "concat" (H * n dimensions), "weighted" (average with ``layer_weights``).
        layer_weights: one weight per entry of ``layers`` for "weighted".
        subword_pooling: how a word's subword vectors become one: "mean", "first" or "last".
        precision: "fp32" (exact) or "bf16" (faster on CPUs with AMX).
    """

    model: str = DEFAULT_MODEL
    layers: tuple[int, ...] = (-4, -3, -2, -1)
    layer_pooling: str = "mean"
    layer_weights: tuple[float, ...] | None = None
    subword_pooling: str = "mean"
    precision: str = "fp32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if self.layer_weights is not None:
            object.__setattr__(self, "layer_weights", tuple(float(w) for w in self.layer_weights))
        _check_layer_args(self.layers, self.layer_pooling, self.layer_weights)
        if self.layer_pooling == "stack":
            raise ValueError("layer_pooling 'stack' is a per-call option, not a configuration")
        check_choice(self.subword_pooling, "subword_pooling", SUBWORD_POOLINGS)
        check_choice(self.precision, "precision", PRECISIONS)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layers"] = list(self.layers)
        d["layer_weights"] = None if self.layer_weights is None else list(self.layer_weights)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EmbedderConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown EmbedderConfig fields {unknown}; expected some of {sorted(known)}")
        return cls(**d)


@dataclass
class TokenEmbeddings:
    """Token vectors of one raw text, with what is needed to look up words and character spans.

    Attributes:
        vectors: (T, H) one vector per subword token (special tokens excluded).
        tokenized: the tokenization (ids, character offsets, words and their token spans).
    """

    vectors: np.ndarray | torch.Tensor
    tokenized: TokenizedText

    def span(self, begin: int, end: int, pooling: str = "mean") -> np.ndarray | torch.Tensor:
        """The pooled vector (H,) of the tokens covering characters ``[begin, end)`` of the text."""
        start, stop = self.tokenized.char_span_to_tokens(begin, end)
        return _pool_rows(self.vectors[start:stop], pooling)


class Embedder:
    """Contextual embeddings from a pretrained encoder.

    Example:
        >>> emb = Embedder.from_pretrained("all-MiniLM-L6-v2")
        >>> vecs = emb.embed_words([["He", "sat", "on", "the", "bank"]])   # [(5, 384)]
        >>> sent = emb.embed_sentences(["A sentence."], layers=[-1])      # (1, 384), as sentence-transformers

    Args:
        encoder: a loaded :class:`Encoder`.
        tokenizer: its tokenizer.
        config: pooling choices; ``config.model`` is recorded, not loaded.
        batch_size: most texts (or windows) per forward pass.
        max_tokens_per_batch: most padded tokens per forward pass.
    """

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, config: EmbedderConfig | None = None, *,
                 batch_size: int = 64, max_tokens_per_batch: int = 8192):
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.config = config or EmbedderConfig()
        encoder.resolve_layers(list(self.config.layers))
        self.batch_size = batch_size
        self.max_tokens_per_batch = max_tokens_per_batch

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
                        batch_size: int = 64, max_tokens_per_batch: int = 8192, **config: Any) -> "Embedder":
        """Load a model by name or path; keyword arguments are :class:`EmbedderConfig` fields."""
        cfg = EmbedderConfig(model=str(model), **config)
        return cls(load_encoder(model, device=device), load_tokenizer(model), cfg, batch_size=batch_size,
                   max_tokens_per_batch=max_tokens_per_batch)

    def with_config(self, **changes: Any) -> "Embedder":
        """The same loaded model with other pooling choices (no reload)."""
        return Embedder(self.encoder, self.tokenizer, dataclasses.replace(self.config, **changes),
                        batch_size=self.batch_size, max_tokens_per_batch=self.max_tokens_per_batch)

    @property
    def num_layers(self) -> int:
        """L: hidden-state indices run 0..L (0 = embedding output, -1 = last layer)."""
        return self.encoder.num_layers

    @property
    def hidden_size(self) -> int:
        return self.encoder.config.hidden_size

    @property
    def dim(self) -> int:
        """Dimension of the vectors this configuration gives (``concat`` multiplies the hidden size)."""
        n = len(self.config.layers) if self.config.layer_pooling == "concat" else 1
        return self.hidden_size * n

    # ---- core ---------------------------------------------------------------------------------------------
    def _layer_args(self, layers, layer_pooling, layer_weights):
        if isinstance(layers, str):
            if layers != "all":
                raise ValueError(f"layers must be a sequence of hidden-state indices or 'all', got {layers!r}")
            layers = tuple(range(self.num_layers + 1))
        layers = tuple(self.config.layers if layers is None else layers)
        pooling = layer_pooling or self.config.layer_pooling
        weights = layer_weights if layer_weights is not None else (
            self.config.layer_weights if pooling == "weighted" else None)
        _check_layer_args(layers, pooling, weights)
        self.encoder.resolve_layers(list(layers))
        return layers, pooling, weights

    def _stream(self, items: Sequence[TokenizedText], layers, pooling, weights, show_progress_bar: bool,
                batch_size: int | None) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (index, (T_i + 2, ...) layer-pooled states) in length-sorted order."""
        reduce = _layer_reducer(pooling, weights)
        yield from run_encoder(self.encoder, self.tokenizer, items, layers=layers, reduce_layers=reduce,
                               precision=self.config.precision, batch_size=batch_size or self.batch_size,
                               max_tokens_per_batch=self.max_tokens_per_batch, show_progress_bar=show_progress_bar)

    def _chunks(self, n: int, show_progress_bar: bool):
        """Chunks of texts, so that tokenized text and pending outputs never hold a whole corpus."""
        from tqdm.auto import tqdm
        bar = tqdm(total=n, disable=not show_progress_bar or n <= _CHUNK, desc="texts", unit="text")
        for start in range(0, n, _CHUNK):
            yield start, min(n, start + _CHUNK)
            bar.update(min(n, start + _CHUNK) - start)
        bar.close()

    # ---- words --------------------------------------------------------------------------------------------
    def embed_words(self, sentences: Sequence[Sequence[str]], *, batch_size: int | None = None,
                    show_progress_bar: bool = True, layers: Sequence[int] | str | None = None,
                    layer_pooling: str | None = None, layer_weights: Sequence[float] | None = None,
                    subword_pooling: str | None = None, output: str = "numpy") -> list:
        """One vector per word of pre-tokenized sentences.

        Args:
            sentences: N lists of words. A word may contain spaces (e.g. a multiword expression "New York"): its
                subwords are pooled into one vector.
            layers: hidden-state indices (0 = embedding output, -1 = last layer) or "all"; default the config's.
            layer_pooling: "mean", "sum", "concat", "weighted", or "stack" to keep a layer axis.
            layer_weights: weights for "weighted".
            subword_pooling: "mean", "first" or "last"; default the config's.
            output: "numpy" (float32) or "torch".

        Returns:
            N arrays, each (W_i, H) (``concat``: (W_i, n * H); ``stack``: (W_i, n, H)), in the caller's order.
        """
        check_choice(output, "output", OUTPUTS)
        sub = subword_pooling or self.config.subword_pooling
        check_choice(sub, "subword_pooling", SUBWORD_POOLINGS)
        layers, pooling, weights = self._layer_args(layers, layer_pooling, layer_weights)
        sentences = _as_list(sentences, "sentences")
        results: list = [None] * len(sentences)
        for lo, hi in self._chunks(len(sentences), show_progress_bar):
            items = self.tokenizer.tokenize_words(sentences[lo:hi])
            for i, states in self._stream(items, layers, pooling, weights, show_progress_bar, batch_size):
                words = pool_subwords(states[1:-1], items[i].word_spans, sub)
                results[lo + i] = _convert(words, output)
        return results

    def embed_spans(self, sentences: Sequence[Sequence[str]], spans: Sequence[tuple[int, int]], *,
                    mode: str = "mean", **kwargs: Any) -> np.ndarray | torch.Tensor:
        """One vector per word span (J&M eq. 11.21-11.22).

        Args:
            sentences: N lists of words.
            spans: N pairs ``(start, end)``: words ``[start, end)`` of the matching sentence.
            mode: "mean" (mean of the span's word vectors, (N, H)) or "endpoints" ([first word; last word; mean],
                (N, 3H)).
            kwargs: passed to :meth:`embed_words`.
        """
        check_choice(mode, "mode", SPAN_MODES)
        sentences = _as_list(sentences, "sentences")
        spans = list(spans)
        if len(spans) != len(sentences):
            raise ValueError(f"spans has {len(spans)} entries but sentences has {len(sentences)}; expected one each")
        for i, (s, e) in enumerate(spans):
            if not 0 <= s < e <= len(sentences[i]):
                raise ValueError(f"spans[{i}] = ({s}, {e}) is empty or outside sentence {i} of {len(sentences[i])} words")
        output = kwargs.pop("output", "numpy")
        words = self.embed_words(sentences, output="torch", **kwargs)
        rows = []
        for w, (s, e) in zip(words, spans):
            mean = w[s:e].mean(0)
            rows.append(mean if mode == "mean" else torch.cat([w[s], w[e - 1], mean]))
        return _convert(torch.stack(rows) if rows else torch.zeros(0, self.dim), output)

    # ---- raw text -----------------------------------------------------------------------------------------
    def embed_tokens(self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool = True,
                     layers: Sequence[int] | str | None = None, layer_pooling: str | None = None,
                     layer_weights: Sequence[float] | None = None, output: str = "numpy") -> list[TokenEmbeddings]:
        """Token vectors of raw texts with character offsets; ``result[i].span(begin, end)`` pools a character span.

        Returns:
            N :class:`TokenEmbeddings`, each with (T_i, H) vectors, in the caller's order.
        """
        check_choice(output, "output", OUTPUTS)
        layers, pooling, weights = self._layer_args(layers, layer_pooling, layer_weights)
        texts = _as_list(texts, "texts")
        results: list = [None] * len(texts)
        for lo, hi in self._chunks(len(texts), show_progress_bar):
            items = self.tokenizer.tokenize(texts[lo:hi])
            for i, states in self._stream(items, layers, pooling, weights, show_progress_bar, batch_size):
                results[lo + i] = TokenEmbeddings(_convert(states[1:-1], output), items[i])
        return results

    # ---- sentences ----------------------------------------------------------------------------------------
    def embed_sentences(self, texts: Sequence[str], *, pooling: str = "mean", batch_size: int | None = None,
                        show_progress_bar: bool = True, normalize: bool = False,
                        layers: Sequence[int] | str | None = None, layer_pooling: str | None = None,
                        layer_weights: Sequence[float] | None = None, output: str = "numpy",
                        out_path: str | os.PathLike | None = None) -> np.ndarray | torch.Tensor:
        """One vector per text.

        ``pooling="mean"`` with ``layers=[-1]`` is what sentence-transformers computes for all-MiniLM-L6-v2 and
        all-mpnet-base-v2 (before their optional normalisation).

        Args:
            texts: N strings (a single string gives one (H,) vector).
            pooling: "mean" over the text's tokens ([CLS] and [SEP] included, as sentence-transformers does) or
                "cls" (the first token's vector).
            normalize: L2-normalise each vector.
            layers, layer_pooling, layer_weights: as in :meth:`embed_words`.
            output: "numpy" (float32) or "torch".
            out_path: write the (N, H) float32 result into a ``.npy`` memory map at this path (for corpora larger
                than RAM) and return the memory map; the file appears only when complete.

        Returns:
            (N, H) array, (H,) for a single string.
        """
        check_choice(pooling, "pooling", SENTENCE_POOLINGS)
        check_choice(output, "output", OUTPUTS)
        single = isinstance(texts, str)
        texts = [texts] if single else _as_list(texts, "texts")
        layers, lp, weights = self._layer_args(layers, layer_pooling, layer_weights)
        if lp == "stack":
            raise ValueError("layer_pooling 'stack' is not available for sentence embeddings")
        dim = self.hidden_size * (len(layers) if lp == "concat" else 1)
        if out_path is not None:
            out_path = Path(out_path)
            if out_path.suffix != ".npy":
                raise ValueError(f"out_path must end in .npy, got {out_path}")
            tmp = out_path.with_name("." + out_path.name + ".partial.npy")
            result = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(texts), dim))
        else:
            result = np.zeros((len(texts), dim), dtype=np.float32)
        for lo, hi in self._chunks(len(texts), show_progress_bar):
            items = self.tokenizer.tokenize(texts[lo:hi])
            for i, states in self._stream(items, layers, lp, weights, show_progress_bar, batch_size):
                v = states.mean(0) if pooling == "mean" else states[0]
                if normalize:
                    v = v / v.norm().clamp(min=1e-12)
                result[lo + i] = v.numpy()
        if out_path is not None:
            result.flush()
            del result
            os.replace(tmp, out_path)
            result = np.load(out_path, mmap_mode="r")
            return result[0] if single else result
        if single:
            result = result[0]
        return torch.from_numpy(result) if output == "torch" else result


# ---- pooling helpers ------------------------------------------------------------------------------------------
def _layer_reducer(pooling: str, weights: Sequence[float] | None):
    """A function (B, T, n, H) -> pooled states, applied per batch so only the pooled result is kept."""
    if pooling == "mean":
        return lambda s: s.mean(dim=2)
    if pooling == "sum":
        return lambda s: s.sum(dim=2)
    if pooling == "concat":
        return lambda s: s.flatten(2)
    if pooling == "weighted":
        w = torch.tensor(weights, dtype=torch.float32)
        w = w / w.sum()
        return lambda s: torch.einsum("btnh,n->bth", s, w.to(s.device))
    return None  # stack: keep the layer axis


def pool_subwords(states: torch.Tensor, word_spans: Sequence[tuple[int, int]], pooling: str = "mean") -> torch.Tensor:
    """Pool subword vectors into word vectors.

    Args:
        states: (T, ...) one row per content token.
        word_spans: W pairs ``(start, end)`` of token indices.
        pooling: "mean", "first" or "last".

    Returns:
        (W, ...) tensor.
    """
    starts = torch.tensor([s for s, _ in word_spans], dtype=torch.long)
    ends = torch.tensor([e for _, e in word_spans], dtype=torch.long)
    if pooling == "first":
        return states[starts]
    if pooling == "last":
        return states[ends - 1]
    # mean: a cumulative sum gives every span's sum in one subtraction
    csum = torch.cat([torch.zeros_like(states[:1]), states.cumsum(0, dtype=torch.float64)], dim=0)
    counts = (ends - starts).to(torch.float64).view(-1, *([1] * (states.dim() - 1)))
    return ((csum[ends] - csum[starts]) / counts).to(states.dtype)


def _pool_rows(x, pooling: str):
    check_choice(pooling, "pooling", SUBWORD_POOLINGS)
    return x.mean(0) if pooling == "mean" else (x[0] if pooling == "first" else x[-1])


def _convert(t: torch.Tensor, output: str):
    return t if output == "torch" else t.numpy().astype(np.float32, copy=False)


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
    if isinstance(x, str):
        raise TypeError(f"{name} must be a list, got a single str; wrap it in a list")
    return list(x)
