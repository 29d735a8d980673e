"""Contextual embeddings of words, tokens, spans and sentences (Jurafsky & Martin 11.3).

An :class:`Embedder` runs an encoder once and pools twice: over layers (default: the average of the last four hidden
states) and over the subword tokens of each word (default: mean). Hidden-state indices follow transformers'
convention everywhere: 0 is the embedding output, -1 the last layer, L the last of an L-layer encoder.

Shapes: N texts, W words of a text, T subword tokens of a text, n pooled layers, H hidden size.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import torch

from ctxemb.core.validation import check_bool, check_choice, check_int
from ctxemb.runtime.autoprecision import PrecisionChoice, choose_precision
from ctxemb.runtime.backends import encoder_fingerprint, import_onnxruntime, load_backend
from ctxemb.models.encoder_config import SUPPORTED_MODEL_TYPES
from ctxemb.embedding.config import (OUTPUTS, SPAN_MODES, SUBWORD_POOLINGS, EmbedderConfig, _as_list,
                                     _check_layer_args, _check_layer_list, _check_spans, _check_token_budget,
                                     _check_weights, _layer_reducer, _pool_rows, _text_batch, _word_batch)
from ctxemb.runtime.engine import EncoderBackend, TorchBackend, plan_batches, pool_subwords, run_encoder
from ctxemb.runtime.token_budget import resolve_tokens_per_batch
from ctxemb.modeling.loading import BACKENDS, load_model
from ctxemb.modeling.checkpoint import read_training_run
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.transformers_backend import TransformersEncoder
from ctxemb.models.hub import DEFAULT_MODEL
from ctxemb.embedding.st_format import (
    SentenceModules,
    configured_layers_win,
    encoder_dir,
    resolve_sentence_options,
)
from ctxemb.models.tokenization import TokenizedText, Tokenizer

logger = logging.getLogger(__name__)

TEXTS_PER_PLAN = 4096  # texts sorted and batched together; bounds memory for corpora of any size


class PlannedBatch(NamedTuple):
    """One forward pass of :meth:`Embedder.embed_sentences` (see :meth:`Embedder.plan_sentence_batches`).

    Attributes:
        texts: indices of the texts it holds, longest first (a text cut into windows may be in several batches).
        padded_tokens: its size, inputs x longest input (special tokens included): what its cost grows with.
    """

    texts: tuple[int, ...]
    padded_tokens: int


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
        >>> sent = emb.embed_sentences(["A sentence."])                   # (1, 384), as sentence-transformers

    Args:
        encoder: a loaded :class:`Encoder`, or a transformers model behind
            :class:`~ctxemb.modeling.transformers_backend.TransformersEncoder` (see :func:`ctxemb.modeling.loading.load_encoder`;
            it runs "fp32" and "bf16" only).
        tokenizer: its tokenizer.
        config: pooling choices; ``config.model`` is recorded, not loaded.
        batch_size: most texts (or windows) per forward pass, >= 1.
        max_tokens_per_batch: most padded tokens per forward pass, >= 1 (None: no budget); "auto" (the default):
            the machine's budget (:func:`ctxemb.runtime.token_budget.resolve_tokens_per_batch`).

    Every method checks all its arguments (and every text) before any work: None or a wrong type is a TypeError
    (``layers=-1`` says to pass a list; a single str says to wrap it), a bad value a ValueError naming the argument
    and, for a text, its index: ``batch_size`` < 1, a non-finite layer weight, one hidden state named twice
    (``[-1, 6]`` on a 6-layer model), a span that is not a pair of ints or lies outside its sentence, an empty text or
    one that gives no token (only control characters), a lone surrogate. An empty batch is not an error: it gives an
    empty result of the right shape.

    Attributes:
        sentence_modules: the sentence-transformers modules of the model directory (pooling, layers, Dense,
            Normalize, maximum length, prompts), which :meth:`embed_sentences` follows by default; None for a model
            without them (set by :meth:`from_pretrained`; see :mod:`ctxemb.embedding.st_format`).
    """

    sentence_modules: SentenceModules | None = None

    def __init__(self, encoder: Encoder, tokenizer: Tokenizer, config: EmbedderConfig | None = None, *,
                 batch_size: int = 64, max_tokens_per_batch: int | str | None = "auto"):
        if not isinstance(encoder, (Encoder, TransformersEncoder)):
            raise TypeError("encoder must be a ctxemb Encoder or TransformersEncoder (see load_encoder), got "
                            f"{type(encoder).__name__}")
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError("tokenizer must be a ctxemb Tokenizer (see load_tokenizer), got "
                            f"{type(tokenizer).__name__}")
        if config is not None and not isinstance(config, EmbedderConfig):
            raise TypeError(f"config must be an EmbedderConfig or None, got {type(config).__name__}")
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.config = config or EmbedderConfig()
        _resolve_layers(encoder, self.config.layers)
        if self.config.dimensions is not None:
            self._width(self.config.layers, self.config.layer_pooling)  # checks dimensions against the width
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.max_tokens_per_batch = resolve_tokens_per_batch(_check_token_budget(max_tokens_per_batch), encoder)
        #: What ``precision="auto"`` chose and why (None when the configuration named a path).
        self.precision_choice: PrecisionChoice | None = None
        self._backend: EncoderBackend | None = None
        self._fingerprint: str | None = None
        precision = self.config.precision
        if isinstance(encoder, TransformersEncoder):
            precision = self._transformers_precision(precision)
        if precision == "auto":
            self.precision_choice = choose_precision(encoder, tokenizer, layers=self.config.layers,
                                                     model_name=self.config.model, fingerprint=self.fingerprint)
            self.config = dataclasses.replace(self.config, precision=self.precision_choice.precision)
            self._backend = self.precision_choice.backend
        elif precision in ("int8", "onnx-fp32", "onnx-int8"):  # fail now, not at the first batch
            device = next(encoder.parameters()).device
            if device.type != "cpu":
                raise ValueError(f"precision {precision!r} runs on the CPU only; the encoder is on {device}. Use "
                                 "'fp32', 'bf16' or 'auto' there")
            if precision.startswith("onnx"):
                import_onnxruntime()

    def _transformers_precision(self, precision: str) -> str:
        """The precision the transformers backend runs for the configured one: "fp32" and "bf16" as they are,
        "auto" as "fp32" (its other candidates are ctxemb's own int8 and ONNX paths); int8 and ONNX refused."""
        if precision == "auto":
            logger.info("precision 'auto' with the transformers backend (model_type %r): fp32 (the int8 and ONNX "
                        "paths need ctxemb's own encoder)", self.encoder.config.model_type)
            self.config = dataclasses.replace(self.config, precision="fp32")
            return "fp32"
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision {precision!r} is not available on the transformers backend (model_type "
                             f"{self.encoder.config.model_type!r}): ctxemb's int8 and ONNX paths run its own encoder "
                             "(model types " + ", ".join(SUPPORTED_MODEL_TYPES) + "); use 'fp32' or 'bf16'")
        return precision

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike = DEFAULT_MODEL, *, device: str | torch.device = "cpu",
                        batch_size: int = 64, max_tokens_per_batch: int | str | None = "auto", backend: str = "auto",
                        **config: Any) -> "Embedder":
        """Load a model by name or path; keyword arguments are :class:`EmbedderConfig` fields.

        A sentence-transformers directory (``modules.json``) is read with its modules (:attr:`sentence_modules`):
        :meth:`embed_sentences` follows them by default; word, token and span vectors keep the configuration's
        layers. A layer choice given here (``layers``, ``layer_pooling``, ``layer_weights``) replaces the modules'
        for sentence vectors too.

        ``backend`` runs the model on ctxemb's own encoder ("native") or on ``transformers.AutoModel``
        ("transformers"); "auto" (the default) takes the native encoder for the model types it implements
        (:data:`ctxemb.models.encoder_config.SUPPORTED_MODEL_TYPES`) and transformers for other encoders (see
        :func:`ctxemb.modeling.loading.choose_backend`).

        Every argument is checked before the model is loaded. ``training_run`` is read from the model directory
        (None for models no ctxemb recipe stamped); passing it (as a store's or index's recorded configuration does)
        checks that the directory still holds the weights of that run.

        Raises:
            TypeError: ``model`` is not a str or path, an argument has the wrong type, or a keyword is not an
                :class:`EmbedderConfig` field.
            ValueError: a bad value (batch sizes < 1, an unknown pooling, a layer index out of range or the same
                hidden state named twice, a non-finite layer weight, a device torch does not know), or a
                ``training_run`` other than the one the model directory records.
            FileNotFoundError: the model cannot be found.
            CorruptFileError: a model file is unreadable (see :func:`ctxemb.modeling.loading.load_encoder`).
            ImportError: an ONNX precision ("onnx-fp32", "onnx-int8") without onnxruntime, or the transformers
                backend without transformers; the message names the extra to install.
        """
        if model is None or not isinstance(model, (str, os.PathLike)):
            raise TypeError(f"model must be a name or a path, got {type(model).__name__}")
        known = {f.name for f in dataclasses.fields(EmbedderConfig)} - {"model"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise TypeError(f"Embedder.from_pretrained got unknown option(s) {unknown}; expected device, batch_size, "
                            f"max_tokens_per_batch, backend or EmbedderConfig fields {sorted(known)}")
        cfg = EmbedderConfig(model=os.fspath(model), **config)
        batch_size = check_int(batch_size, "batch_size", low=1)
        max_tokens_per_batch = _check_token_budget(max_tokens_per_batch)
        check_choice(backend, "backend", BACKENDS)
        if not isinstance(device, (str, torch.device)):
            raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
        try:
            torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device {device!r} is not a torch device: {e}") from None
        model_dir, modules = encoder_dir(model)  # an s-t directory: its Transformer folder and its modules
        recorded = read_training_run(model_dir)
        if cfg.training_run is not None and cfg.training_run != recorded:
            raise ValueError(f"the model at {os.fspath(model)!r} was made by training run {recorded!r}, not "
                             f"{cfg.training_run!r}: the directory now holds other weights than the ones asked for "
                             "(e.g. those a sense store or index was built with); use that run's model, or rebuild")
        cfg = dataclasses.replace(cfg, training_run=recorded, **(modules.recorded(config) if modules else {}))
        loaded = load_model(model_dir, device=device, backend=backend)  # one read of config.json for both
        embedder = cls(loaded.encoder, loaded.tokenizer, cfg, batch_size=batch_size,
                       max_tokens_per_batch=max_tokens_per_batch)
        embedder.sentence_modules = configured_layers_win(modules, config)  # layers=... given here win
        return embedder

    def with_config(self, **changes: Any) -> "Embedder":
        """The same loaded model with other pooling choices (no reload; the backend is shared when the precision
        stays the same)."""
        new = Embedder(self.encoder, self.tokenizer, dataclasses.replace(self.config, **changes),
                       batch_size=self.batch_size, max_tokens_per_batch=self.max_tokens_per_batch)
        new._fingerprint = new._fingerprint or self._fingerprint
        new.sentence_modules = configured_layers_win(self.sentence_modules, changes)
        if new._backend is None and new.config.precision == self.config.precision:
            new._backend = self._backend
        return new

    def save_pretrained(self, path: str | os.PathLike, *, pooling: str | None = None, normalize: bool | None = None,
                        layers: Sequence[int] | None = None, layer_pooling: str | None = None,
                        layer_weights: Sequence[float] | None = None, max_seq_length: int | None = None,
                        overwrite: bool = False) -> Path:
        """Save the model as a sentence-transformers directory whose sentence vectors are this Embedder's
        :meth:`embed_sentences` vectors with the same options: ``SentenceTransformer(path).encode(texts)`` and
        ``Embedder.from_pretrained(path).embed_sentences(texts)`` then agree with them.

        The options default as in :meth:`embed_sentences`; a layer average becomes s-t's WeightedLayerPooling. The
        model's Dense layers, prompts and lower-casing are kept, and this Embedder's layers and subword pooling (read
        back by ``from_pretrained``). Texts longer than ``max_seq_length`` (default the model's, else the tokenizer's
        maximum) are truncated by s-t, where an Embedder without modules cuts them into windows.

        Returns:
            ``path``.

        Raises:
            ValueError: a configuration sentence-transformers cannot express (a sum or concatenation of layers;
                the message names it), or a bad option; nothing is written.
            FileExistsError: ``path`` exists, is not empty and ``overwrite`` is False, or is a file in the way.
        """
        from ctxemb.embedding.st_writer import save_embedder

        return save_embedder(self, path, pooling=pooling, normalize=normalize, layers=layers,
                             layer_pooling=layer_pooling, layer_weights=layer_weights,
                             max_seq_length=max_seq_length, overwrite=overwrite)

    @property
    def fingerprint(self) -> str:
        """A hash of the encoder's configuration and weights (keys the ONNX export and the auto-precision cache)."""
        if self._fingerprint is None:
            self._fingerprint = encoder_fingerprint(self.encoder)
        return self._fingerprint

    @property
    def backend(self) -> EncoderBackend:
        """What runs the encoder on ``config.precision``; built on first use (int8: a quantized copy of the encoder;
        ONNX: the export, made once and cached, and an ONNX Runtime session)."""
        if self._backend is None and isinstance(self.encoder, TransformersEncoder):
            self._backend = TorchBackend(self.encoder, self.config.precision)
        if self._backend is None:
            fingerprint = self.fingerprint if self.config.precision not in ("fp32", "bf16") else None
            self._backend = load_backend(self.encoder, self.config.precision, model_name=self.config.model,
                                         fingerprint=fingerprint, tokenizer=self.tokenizer)
        return self._backend

    @property
    def num_layers(self) -> int:
        """L: hidden-state indices run 0..L (0 = embedding output, -1 = last layer)."""
        return self.encoder.num_layers

    @property
    def hidden_size(self) -> int:
        return self.encoder.config.hidden_size

    @property
    def dim(self) -> int:
        """Dimension of the vectors this configuration gives (``concat`` multiplies the hidden size;
        ``dimensions`` truncates)."""
        n = len(self.config.layers) if self.config.layer_pooling == "concat" else 1
        return self.config.dimensions or self.hidden_size * n

    def sentence_dim(self, *, layers: Sequence[int] | str | None = None, layer_pooling: str | None = None,
                     layer_weights: Sequence[float] | None = None, pooling: str | None = None) -> int:
        """The width of :meth:`embed_sentences`' vectors with these options, checked as it checks them (a model's
        Dense layers and concatenated pooling modes included).

        Raises:
            TypeError, ValueError: as :meth:`embed_sentences` for the same options ("stack" is a ValueError).
        """
        opts = resolve_sentence_options(self.sentence_modules, self.tokenizer, pooling=pooling, layers=layers,
                                        layer_pooling=layer_pooling, layer_weights=layer_weights,
                                        dimensions=self.config.dimensions)
        layers, lp, weights = self._layer_args(opts.layers, opts.layer_pooling, opts.layer_weights)
        if lp == "stack":
            raise ValueError("layer_pooling 'stack' is not available for sentence embeddings")
        (dim,) = self._width(layers, lp, cut=False)
        return opts.output_dim(dim)

    def plan_sentence_batches(self, token_counts: Sequence[int], *,
                              batch_size: int | None = None) -> list[PlannedBatch]:
        """The forward passes :meth:`embed_sentences` makes for texts with these numbers of content tokens
        (``len(tokenizer.tokenize([text])[0])``), in the order it makes them.

        Texts are planned in chunks of consecutive texts, each batch within one chunk. A text longer than the
        model's maximum length is cut into windows that may fall in different batches (it is then listed in each).
        Calling :meth:`embed_sentences` on the texts of some whole batches of one chunk, in the caller's order,
        makes exactly those batches again (the plan closes a batch when it is full, which depends on the batch
        alone), so each text gets the vector, bit for bit, that it gets when all the texts are embedded together.

        Args:
            token_counts: N numbers of content tokens (special tokens excluded), each >= 1.
            batch_size: as in :meth:`embed_sentences`.

        Returns:
            The batches, each with the (global) indices of its texts and its size in padded tokens.
        """
        batch_size = self.batch_size if batch_size is None else check_int(batch_size, "batch_size", low=1)
        counts = _as_list(token_counts, "token_counts")
        for i, n in enumerate(counts):
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                raise ValueError(f"token_counts[{i}] must be an int >= 1 (a text gives at least one token), got {n!r}")
        cap = resolve_sentence_options(self.sentence_modules, self.tokenizer).max_seq_length  # truncation, if any
        if cap is not None:
            counts = [min(n, cap - self.tokenizer.num_special_tokens) for n in counts]
        out = []
        for lo in range(0, len(counts), TEXTS_PER_PLAN):
            windows, lengths, batches = plan_batches(self.tokenizer, counts[lo:lo + TEXTS_PER_PLAN], batch_size=batch_size,
                                                     max_tokens_per_batch=self.max_tokens_per_batch)
            for batch in batches:
                texts = tuple(dict.fromkeys(lo + windows[j].item for j in batch))
                out.append(PlannedBatch(texts, len(batch) * max(lengths[j] for j in batch)))
        return out

    # ---- core ---------------------------------------------------------------------------------------------
    def _layer_args(self, layers, layer_pooling, layer_weights):
        """Check and resolve the per-call layer options against the configuration; returns (layers, pooling,
        weights)."""
        if isinstance(layers, str):
            if layers != "all":
                raise ValueError(f"layers must be a sequence of hidden-state indices or 'all', got {layers!r}")
            layers = tuple(range(self.num_layers + 1))
        layers = self.config.layers if layers is None else _check_layer_list(layers)
        if layer_pooling is not None and not isinstance(layer_pooling, str):
            raise TypeError(f"layer_pooling must be a str or None, got {type(layer_pooling).__name__}")
        pooling = layer_pooling or self.config.layer_pooling
        if layer_weights is not None:
            layer_weights = _check_weights(layer_weights)
        weights = layer_weights if layer_weights is not None else (
            self.config.layer_weights if pooling == "weighted" else None)
        _check_layer_args(layers, pooling, weights)
        _resolve_layers(self.encoder, layers)
        return layers, pooling, weights

    def _common_args(self, batch_size, show_progress_bar, output) -> int:
        """Check the options every method shares; returns the batch size to use."""
        check_bool(show_progress_bar, "show_progress_bar")
        check_choice(output, "output", OUTPUTS)
        return self.batch_size if batch_size is None else check_int(batch_size, "batch_size", low=1)

    def _width(self, layers, pooling, cut: bool = True) -> tuple[int, ...]:
        """The shape of one vector for these layer options: (H,), (n * H,) for concat, (n, H) for stack; the last
        axis cut to ``config.dimensions`` when set and ``cut`` (a ValueError if that is wider than the vectors)."""
        if pooling == "concat":
            shape = (self.hidden_size * len(layers),)
        elif pooling == "stack":
            shape = (len(layers), self.hidden_size)
        else:
            shape = (self.hidden_size,)
        k = self.config.dimensions if cut else None
        if k is None:
            return shape
        if k > shape[-1]:
            raise ValueError(f"dimensions={k} exceeds the width of the vectors ({shape[-1]} with layer_pooling "
                             f"{pooling!r} over {len(layers)} layer(s) of hidden size {self.hidden_size})")
        return (*shape[:-1], k)

    def _stream(self, items: Sequence[TokenizedText], layers, pooling, weights, show_progress_bar: bool,
                batch_size: int, cut: bool = True) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (index, (T_i + 2, ...) layer-pooled states) in length-sorted order (cut to ``config.dimensions``
        if ``cut``: the poolings that follow are per component, so cutting here equals cutting their results;
        sentence vectors are cut after the s-t modules instead, whose Dense layers mix components)."""
        reduce = _layer_reducer(pooling, weights, self.config.dimensions if cut else None)
        yield from run_encoder(self.encoder, self.tokenizer, items, layers=layers, reduce_layers=reduce,
                               backend=self.backend, batch_size=batch_size,
                               max_tokens_per_batch=self.max_tokens_per_batch, show_progress_bar=show_progress_bar)

    def _chunks(self, n: int, show_progress_bar: bool):
        """Chunks of texts, so that tokenized text and pending outputs never hold a whole corpus."""
        from tqdm.auto import tqdm
        bar = tqdm(total=n, disable=not show_progress_bar or n <= TEXTS_PER_PLAN, desc="texts", unit="text")
        for start in range(0, n, TEXTS_PER_PLAN):
            yield start, min(n, start + TEXTS_PER_PLAN)
            bar.update(min(n, start + TEXTS_PER_PLAN) - start)
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
        batch_size = self._common_args(batch_size, show_progress_bar, output)
        if subword_pooling is not None and not isinstance(subword_pooling, str):
            raise TypeError(f"subword_pooling must be a str or None, got {type(subword_pooling).__name__}")
        sub = subword_pooling or self.config.subword_pooling
        check_choice(sub, "subword_pooling", SUBWORD_POOLINGS)
        layers, pooling, weights = self._layer_args(layers, layer_pooling, layer_weights)
        sentences = _word_batch(sentences)
        results: list = [None] * len(sentences)
        for lo, hi in self._chunks(len(sentences), show_progress_bar):
            items = self.tokenizer.tokenize_words(sentences[lo:hi], first_index=lo)
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

        Returns:
            (N, H) or (N, 3H) (``concat``: H is n * H; ``stack``: (N, n, H) or (N, n, 3H)); N may be 0.

        Raises:
            TypeError: a span is not a pair of ints.
            ValueError: ``spans`` and ``sentences`` differ in length, or a span is empty or outside its sentence.
        """
        check_choice(mode, "mode", SPAN_MODES)
        output = kwargs.pop("output", "numpy")
        check_choice(output, "output", OUTPUTS)
        sentences = _word_batch(sentences)
        spans = _check_spans(spans, sentences)
        layers, pooling, _ = self._layer_args(kwargs.get("layers"), kwargs.get("layer_pooling"),
                                              kwargs.get("layer_weights"))
        words = self.embed_words(sentences, output="torch", **kwargs)
        rows = []
        for w, (s, e) in zip(words, spans):
            mean = w[s:e].mean(0)
            rows.append(mean if mode == "mean" else torch.cat([w[s], w[e - 1], mean], dim=-1))
        if rows:
            return _convert(torch.stack(rows), output)
        *lead, last = self._width(layers, pooling)
        return _convert(torch.zeros(0, *lead, last * (3 if mode == "endpoints" else 1)), output)

    # ---- raw text -----------------------------------------------------------------------------------------
    def embed_tokens(self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool = True,
                     layers: Sequence[int] | str | None = None, layer_pooling: str | None = None,
                     layer_weights: Sequence[float] | None = None, output: str = "numpy") -> list[TokenEmbeddings]:
        """Token vectors of raw texts with character offsets; ``result[i].span(begin, end)`` pools a character span.

        Returns:
            N :class:`TokenEmbeddings`, each with (T_i, H) vectors, in the caller's order.
        """
        batch_size = self._common_args(batch_size, show_progress_bar, output)
        layers, pooling, weights = self._layer_args(layers, layer_pooling, layer_weights)
        texts = _text_batch(texts)
        results: list = [None] * len(texts)
        for lo, hi in self._chunks(len(texts), show_progress_bar):
            items = self.tokenizer.tokenize(texts[lo:hi], first_index=lo)
            for i, states in self._stream(items, layers, pooling, weights, show_progress_bar, batch_size):
                results[lo + i] = TokenEmbeddings(_convert(states[1:-1], output), items[i])
        return results

    # ---- sentences ----------------------------------------------------------------------------------------
    def embed_sentences(self, texts: Sequence[str], *, pooling: str | None = None, batch_size: int | None = None,
                        show_progress_bar: bool = True, normalize: bool | None = None,
                        layers: Sequence[int] | str | None = None, layer_pooling: str | None = None,
                        layer_weights: Sequence[float] | None = None, max_seq_length: int | None = None,
                        prompt: str | None = None, prompt_name: str | None = None, output: str = "numpy",
                        out_path: str | os.PathLike | None = None) -> np.ndarray | torch.Tensor:
        """One vector per text.

        A sentence-transformers model (:attr:`sentence_modules`, e.g. the default all-MiniLM-L6-v2) gives by default
        what ``SentenceTransformer(dir).encode(texts)`` gives: its pooling, hidden states, Dense layers, Normalize,
        maximum length (longer inputs truncated) and default prompt. Each option given replaces the modules' choice
        (the choice is logged). A model without modules gives mean pooling of the configured layers, unnormalised,
        and cuts long texts into windows (see :mod:`ctxemb.runtime.engine`).

        Args:
            texts: N strings (a single string gives one (H,) vector).
            pooling: one of "mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken" (defined in
                :mod:`ctxemb.embedding.st_format`; all pool over the special tokens too, as
                sentence-transformers does); default the model's, else "mean".
            normalize: L2-normalise each vector (False also drops the model's Normalize); default the model's,
                else False.
            layers, layer_pooling, layer_weights: as in :meth:`embed_words`; default the model's (the last layer, or
                its WeightedLayerPooling), else the configuration's.
            max_seq_length: truncate every input to this many tokens, special tokens included (>= 3); default the
                model's; without one, long texts are cut into windows and stitched back.
            prompt: text prepended to every input; prompt_name: the name of one of the model's prompts (not both);
                default the model's default prompt, if it has one.
            output: "numpy" (float32) or "torch".
            out_path: write the (N, D) float32 result into a ``.npy`` memory map at this path (for corpora larger
                than RAM) and return the memory map; the file appears only when complete.

        Returns:
            (N, D) array, (D,) for a single string (D: :meth:`sentence_dim`).
        """
        opts = resolve_sentence_options(self.sentence_modules, self.tokenizer, pooling=pooling, normalize=normalize,
                                        layers=layers, layer_pooling=layer_pooling, layer_weights=layer_weights,
                                        max_seq_length=max_seq_length, prompt=prompt, prompt_name=prompt_name,
                                        dimensions=self.config.dimensions)  # cut after the modules' Dense
        batch_size = self._common_args(batch_size, show_progress_bar, output)
        single = isinstance(texts, str)
        texts = _text_batch([texts] if single else texts)
        layers, lp, weights = self._layer_args(opts.layers, opts.layer_pooling, opts.layer_weights)
        if lp == "stack":
            raise ValueError("layer_pooling 'stack' is not available for sentence embeddings")
        dim = opts.output_dim(self._width(layers, lp, cut=False)[0])
        if out_path is not None:
            if not isinstance(out_path, (str, os.PathLike)):
                raise TypeError(f"out_path must be a path or None, got {type(out_path).__name__}")
            out_path = Path(out_path)
            if out_path.suffix != ".npy":
                raise ValueError(f"out_path must end in .npy, got {out_path}")
            if not out_path.parent.is_dir():
                raise FileNotFoundError(f"out_path {out_path}: the folder {out_path.parent} does not exist")
            if out_path.is_dir():
                raise IsADirectoryError(f"out_path {out_path} is a directory")
            tmp = out_path.with_name("." + out_path.name + ".partial.npy")
            result = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(texts), dim))
        else:
            result = np.zeros((len(texts), dim), dtype=np.float32)
        try:
            for lo, hi in self._chunks(len(texts), show_progress_bar):
                items = opts.tokenize(self.tokenizer, texts[lo:hi], first_index=lo)
                for i, states in self._stream(items, layers, lp, weights, show_progress_bar, batch_size, cut=False):
                    result[lo + i] = opts.pool(states).numpy()
        except BaseException:
            if out_path is not None:  # no half-written memory map left behind
                del result
                tmp.unlink(missing_ok=True)
            raise
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
def _convert(t: torch.Tensor, output: str):
    return t if output == "torch" else t.numpy().astype(np.float32, copy=False)


def _resolve_layers(encoder: Encoder, layers: Sequence[int]) -> list[int]:
    """Resolve hidden-state indices against ``encoder``; refuses one hidden state named twice (e.g. -1 and L)."""
    resolved = encoder.resolve_layers(list(layers))
    seen: dict[int, int] = {}
    for given, r in zip(layers, resolved):
        if r in seen:
            L = encoder.num_layers
            raise ValueError(f"layers {list(layers)} name hidden state {r} twice: as {seen[r]} and as {given} (this "
                             f"encoder has {L + 1} hidden states 0..{L}; -1 is {L}, 0 the embedding output)")
        seen[r] = given
    return resolved


