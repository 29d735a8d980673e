"""What the layers above the model stack need from an embedder, and nothing more.

``wsd``, ``search`` and ``evaluation`` drive an embedder but must not import the model stack (torch, the encoder),
so they type against :class:`EmbedderLike`; :class:`ctxemb.embedding.embedder.Embedder` satisfies it, and so do the
deterministic stand-ins the tests use.

Shapes: N texts, W_i words of sentence i, H the embedding dimension.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from ctxemb.core.validation import check_int


@runtime_checkable
class EmbedderLike(Protocol):
    """The embedder surface used above ``ctxemb.embedding.embedder`` (see :class:`ctxemb.embedding.embedder.Embedder`).

    Attributes:
        config: the embedder's configuration, with ``to_dict()`` (stores and indexes record it, so that a query
            made with another configuration is caught).
        num_layers: L, the number of transformer layers (hidden states are indexed 0..L: 0 is the embedding output).
        dim: H, the dimension of the vectors the embedder returns with its default configuration.
    """

    config: Any
    num_layers: int
    dim: int

    def embed_words(self, sentences: Sequence[Sequence[str]], **kwargs) -> list[np.ndarray]:
        """One (W_i, H) array per pre-split sentence."""
        ...

    def embed_sentences(self, texts: Sequence[str], **kwargs) -> np.ndarray:
        """(N, H) sentence vectors."""
        ...


def batch_size_kwargs(batch_size: int | None) -> dict[str, int]:
    """The ``batch_size`` keyword to pass to an embedder: ``{}`` for None (the embedder's own batching, e.g.
    :attr:`ctxemb.embedding.embedder.Embedder.batch_size`), else ``{"batch_size": batch_size}`` after checking it.

    Harnesses above the embedder take ``batch_size: int | None = None`` and pass it on through this, so that the
    embedder owns batching unless the caller chose otherwise.

    Raises:
        TypeError, ValueError: ``batch_size`` is not None and not an int >= 1.
    """
    if batch_size is None:
        return {}
    return {"batch_size": check_int(batch_size, "batch_size", low=1)}


def embedder_config_dict(embedder) -> dict[str, Any]:
    """The embedder's configuration as a plain dict (a copy).

    Raises:
        TypeError: if the embedder has no ``config``, or its config is neither a dict, a dataclass nor has ``to_dict()``.
    """
    cfg = getattr(embedder, "config", None)
    if cfg is None:
        raise TypeError("embedder must have a .config (with to_dict()); got %s" % type(embedder).__name__)
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict())
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if isinstance(cfg, dict):
        return dict(cfg)
    raise TypeError("embedder.config must be a dict, a dataclass or have to_dict(); got %s" % type(cfg).__name__)
