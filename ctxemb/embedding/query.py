"""One query at a time: sentence vectors at batch size 1, for serving.

:meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences` is built for many texts: every call resolves its sentence
options and layer choice, plans length-sorted batches under a token budget, builds padded input and mask tensors,
puts the encoder in evaluation mode and back (a walk over its ~200 modules, twice) and copies each text's states out
of its batch. For one short query that set-up is a sizeable share of the work: on a 2-core EPYC (Zen 4) with
all-MiniLM-L6-v2 on its int8 path, a SciFact claim (22 tokens) took 4.6 ms through ``embed_sentences``, of which the
forward pass was 3.5 ms and the mode switch alone 0.45 ms.

A :class:`QueryEncoder` does the set-up once, when it is made: the sentence options resolved, the layer indices and
their pooling, the backend built, and the number of torch threads measured for one short input
(:func:`ctxemb.core.threads.fastest_threads` on a query of ~10 tokens: at this size a second thread's fork and join
can cost more than it gives, and on a shared machine it waits for a busy core). A call then tokenizes the text, runs
one forward pass of its (1, T) input (no padding, no batch plan, no copy out of a batch), pools and applies the
model's modules, all on the input's device, with torch on the chosen thread count in the calling thread (restored
after the call).

The vectors are ``embedder.embed_sentences(text, **options)``'s for the same text: the same operations on the same
input (bit for bit on the same thread count; to rounding on another, as torch's kernels split their sums by thread).
A text longer than the model's window when no ``max_seq_length`` cuts it (a model without sentence-transformers
modules) is handed to ``embed_sentences`` itself, which cuts it into windows and stitches them back.

Shapes: T tokens of the model input (special tokens included), n pooled layers, H hidden size, D the vector's size.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from ctxemb.core.threads import PROBE_QUERY, ThreadChoice, fastest_threads, running_on, thread_candidates
from ctxemb.core.validation import check_choice, check_int
from ctxemb.embedding.config import OUTPUTS, _layer_reducer
from ctxemb.embedding.embedder import Embedder
from ctxemb.embedding.st_format import resolve_sentence_options

logger = logging.getLogger(__name__)

_OPTION_NAMES = ("pooling", "normalize", "layers", "layer_pooling", "layer_weights", "max_seq_length", "prompt",
                 "prompt_name")


class QueryEncoder:
    """Sentence vectors one text at a time, with the set-up done once (see the module docstring).

    Example:
        >>> emb = Embedder.from_pretrained("all-MiniLM-L6-v2", precision="auto")
        >>> encode = QueryEncoder(emb)
        >>> v = encode("what causes the seasons?")      # (384,), as emb.embed_sentences("what causes the seasons?")

    Args:
        embedder: the :class:`~ctxemb.embedding.embedder.Embedder` whose vectors to make.
        threads: torch threads for a call: "auto" (the default) times the counts of
            :func:`ctxemb.core.threads.thread_candidates` on :data:`ctxemb.core.threads.PROBE_QUERY` and takes the
            fastest; an int uses that count; None leaves torch's count alone (what a model off the CPU gets with
            "auto").
        output: "numpy" (a float32 array, the default) or "torch" (a tensor on the model's device).
        **options: the sentence options of :meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences`
            (``pooling``, ``normalize``, ``layers``, ``layer_pooling``, ``layer_weights``, ``max_seq_length``,
            ``prompt``, ``prompt_name``), fixed for every call.

    Attributes:
        embedder: as given.
        config: the embedder's configuration (what an index compares a query's vectors against).
        options: the sentence options given (a copy; lists as tuples).
        dim: D, the size of the vectors.
        threads: the torch thread count of a call (None: torch's own).
        thread_choice: what "auto" measured (None otherwise).

    Raises:
        TypeError: ``embedder`` is not an Embedder, or an option is unknown or of the wrong type.
        ValueError: a bad option value (as ``embed_sentences`` says it), ``threads`` < 1, or a bad ``output``.
    """

    def __init__(self, embedder: Embedder, *, threads: int | str | None = "auto", output: str = "numpy",
                 **options: Any):
        if not isinstance(embedder, Embedder):
            raise TypeError(f"embedder must be an Embedder, got {type(embedder).__name__}")
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"QueryEncoder got unknown option(s) {unknown}; expected threads, output or the sentence "
                            f"options of embed_sentences {list(_OPTION_NAMES)}")
        if threads != "auto" and threads is not None:
            threads = check_int(threads, "threads", low=1)
        self.output = check_choice(output, "output", OUTPUTS)
        self.embedder = embedder
        self.config = embedder.config
        self.options = {name: tuple(value) if isinstance(value, list) else value  # comparable with a recipe's
                        for name, value in options.items() if value is not None}
        opts = resolve_sentence_options(embedder.sentence_modules, embedder.tokenizer,
                                        dimensions=embedder.config.dimensions, **self.options)
        layers, pooling, weights = embedder._layer_args(opts.layers, opts.layer_pooling, opts.layer_weights)
        if pooling == "stack":
            raise ValueError("layer_pooling 'stack' is not available for sentence embeddings")
        self.dim = opts.output_dim(embedder._width(layers, pooling, cut=False)[0])
        self._opts = opts
        self._layers = embedder.encoder.resolve_layers(list(layers))
        self._reduce = _layer_reducer(pooling, weights)
        self._backend = embedder.backend
        self._device = self._backend.device
        self._tokenizer = embedder.tokenizer
        self._specials = self._tokenizer.num_special_tokens
        # every (1, T) mask is a view of this one: no padding, so all ones
        self._ones = torch.ones((1, self._tokenizer.max_length), dtype=torch.long, device=self._device)
        self.thread_choice: ThreadChoice | None = None
        if threads == "auto":
            threads = None if self._device.type != "cpu" else self._choose_threads()
        self.threads: int | None = threads

    def __repr__(self) -> str:
        return (f"QueryEncoder({self.config.model!r}, precision={self.config.precision!r}, dim={self.dim}, "
                f"threads={self.threads})")

    def _choose_threads(self) -> int:
        """The torch thread count at which :data:`PROBE_QUERY` encodes fastest here (see the module docstring)."""
        saved = torch.get_num_threads()
        self.threads = None
        try:
            choice = fastest_threads(lambda: self._encode(PROBE_QUERY), torch.set_num_threads,
                                     thread_candidates(saved))
        finally:
            torch.set_num_threads(saved)
        self.thread_choice = choice
        logger.info("QueryEncoder: torch on %s for one query", choice.describe())
        return choice.threads

    def __call__(self, text: str) -> np.ndarray | torch.Tensor:
        """The (D,) sentence vector of ``text``.

        Raises:
            TypeError: ``text`` is not a str.
            ValueError: ``text`` is empty, blank or gives no token (as ``embed_sentences`` says it).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str (one query), got {type(text).__name__}; embed many texts with "
                            "Embedder.embed_sentences")
        with running_on(self.threads, torch.get_num_threads, torch.set_num_threads):
            v = self._encode(text)
        return v if self.output == "torch" else v.numpy(force=True)

    encode = __call__

    def _encode(self, text: str) -> torch.Tensor:
        item = self._opts.tokenize(self._tokenizer, [text])[0]
        T = len(item) + self._specials
        if T > self._tokenizer.max_length:  # no max_seq_length cut it: windows, as embed_sentences makes them
            return self._batched(text)
        seq, _ = self._tokenizer.with_specials(item.ids)
        ids = torch.tensor([seq], dtype=torch.long, device=self._device)  # (1, T)
        encoder = self.embedder.encoder
        training = encoder.training  # run_encoder's switch to evaluation mode, paid only when needed
        if training:
            encoder.eval()
        try:
            states = self._backend.hidden_states(ids, self._ones[:, :T], self._layers)  # (1, T, n, H)
        finally:
            if training:
                encoder.train(True)
        with torch.inference_mode():
            states = states.float()
            if self._reduce is not None:
                states = self._reduce(states)  # (1, T, H)
            return self._opts.pool(states[0])  # (D,)

    def _batched(self, text: str) -> torch.Tensor:
        out = self.embedder.embed_sentences([text], show_progress_bar=False, output="torch", **self.options)
        return out[0].to(self._device)
