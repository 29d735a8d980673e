"""Late chunking (Günther et al. 2024): a text encoded once whole, then one vector per piece of it, the mean of the
piece's token vectors from that whole encoding, so that every piece's vector saw the text around it.

The encoding is the embedder's token-level API (``embed_tokens``): a text longer than the model's window is cut
into overlapping windows and stitched back, each token taken from the window where it has the most context. The
pieces are token ranges chosen by the caller: fixed-size runs of tokens
(:class:`~ctxemb.search.retrievers.DenseRetriever`) or the passages of a document
(:class:`~ctxemb.search.documents.DocumentIndex`, :func:`passage_token_ranges`).

Shape legend: T subword tokens of a text (special tokens excluded), C pieces of a text, H vector width.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Sequence

import numpy as np

from ctxemb.core.protocols import embedder_config_dict
from ctxemb.search.text import _layer_kwargs

__all__ = ["late_chunk_means", "passage_starts", "passage_token_ranges", "sentence_token_options"]

#: Texts handed to ``embed_tokens`` at a time: their token vectors are held until pooled, so this bounds memory.
_TEXTS_PER_CALL = 1024

TokenRanges = Callable[[int, object], Sequence[tuple[int, int]]]


def late_chunk_means(embedder, texts: Sequence[str], token_ranges: TokenRanges, *, batch_size: int,
                     show_progress_bar: bool, prefix: str = "", **layer_args) -> list[np.ndarray]:
    """Encode each text whole once and mean-pool pieces of its token vectors.

    Args:
        embedder: has ``embed_tokens`` (an :class:`~ctxemb.embedding.embedder.Embedder`).
        texts: N texts.
        token_ranges: ``(i, tokenized) -> [(start, stop), ...]``: the pieces of text i as token ranges of its
            tokenization (``tokenized.offsets`` are character offsets into ``prefix + texts[i]``); each range non-empty.
        batch_size / show_progress_bar: passed to ``embed_tokens``.
        prefix: prepended to every text before encoding (a model's prompt).
        **layer_args: ``layers``, ``layer_pooling``, ``layer_weights`` for ``embed_tokens`` (0 = embedding output,
            -1 = last layer); default the embedder's configuration.

    Returns:
        N float32 arrays (C_i, H), the means of the pieces in the order ``token_ranges`` gave them, not normalised.

    Raises:
        TypeError: the embedder has no ``embed_tokens``.
        ValueError: a range is empty or outside its text's tokens (naming the text).
    """
    if not callable(getattr(embedder, "embed_tokens", None)):
        raise TypeError("late chunking needs token vectors: the embedder (%s) has no embed_tokens; use an Embedder"
                        % type(embedder).__name__)
    out: list[np.ndarray] = []
    for lo in range(0, len(texts), _TEXTS_PER_CALL):
        chunk = [prefix + t for t in texts[lo:lo + _TEXTS_PER_CALL]]
        encoded = embedder.embed_tokens(chunk, batch_size=batch_size, show_progress_bar=show_progress_bar,
                                        **{k: v for k, v in layer_args.items() if v is not None})
        for i, tokens in enumerate(encoded, start=lo):
            x = np.asarray(tokens.vectors, dtype=np.float32)  # (T, H)
            rows = []
            for start, stop in token_ranges(i, tokens.tokenized):
                if not 0 <= start < stop <= len(x):
                    raise ValueError("texts[%d]: token range (%d, %d) is empty or outside its %d tokens"
                                     % (i, start, stop, len(x)))
                rows.append(x[start:stop].mean(axis=0))
            out.append(np.stack(rows) if rows else np.zeros((0, x.shape[1]), np.float32))
    return out


def passage_starts(text: str, passages: Sequence[str]) -> list[int]:
    """The character offset in ``text`` where each passage begins, for passages that are ``text``'s pieces in order,
    with only white space changed or dropped between and around them (what
    :func:`~ctxemb.search.documents.split_passages` gives): the non-space characters of the passages, in order, are
    those of the text.

    Raises:
        ValueError: the passages are not the text's pieces in that sense.
    """
    solid = [i for i, ch in enumerate(text) if not ch.isspace()]
    starts, seen = [], 0
    for p in passages:
        n = sum(not ch.isspace() for ch in p)
        if n == 0 or seen + n > len(solid):
            break
        starts.append(solid[seen])
        seen += n
    if len(starts) != len(passages) or seen != len(solid):
        raise ValueError("the passages are not the pieces of the text in order (their non-space characters differ)")
    return starts


def passage_token_ranges(offsets: Sequence[tuple[int, int]], starts: Sequence[int],
                         shift: int = 0) -> list[tuple[int, int]]:
    """The token range of each passage: a token belongs to the passage its first character falls in, so every token
    at or after the first passage (``shift`` characters into the encoded text, past a prompt) is in exactly one.

    Args:
        offsets: (begin, end) character offsets of the T tokens, in order.
        starts: each passage's first character in the text (:func:`passage_starts`), increasing.
        shift: characters before the text in what was encoded (a prompt's length).

    Returns:
        One (start, stop) token range per passage, contiguous, the last ending at T; a range may be empty if a
        passage gives no token (the caller refuses it).
    """
    begins = [b for b, _ in offsets]
    bounds = [bisect_left(begins, shift + s) for s in starts] + [len(begins)]
    return [(bounds[j], bounds[j + 1]) for j in range(len(starts))]


def sentence_token_options(embedder, recipe: dict) -> tuple[dict, str, Callable[[np.ndarray], np.ndarray]]:
    """How to make, from token vectors, vectors in the space of the embedder's sentence vectors under ``recipe``
    (that of :func:`~ctxemb.search.build_sentence_index`, ``normalize=False``): the layer arguments for
    ``embed_tokens``, the prompt prepended to each text, and what maps pooled (C, H) vectors to sentence vectors (a
    sentence-transformers model's Dense and LayerNorm modules; the identity without them; its Normalize is left to
    the index).

    Raises:
        ValueError: the recipe's pooling is not "mean", or the model's sentence vectors cannot be made from token
            vectors (``do_lower_case`` with a tokenizer that keeps case; ``dimensions`` cut before a Dense module).
    """
    if recipe.get("pooling") != "mean":
        raise ValueError("late chunking pools each passage's token vectors by their mean: pooling must be 'mean', "
                         "got %r" % (recipe.get("pooling"),))
    layer_args = _layer_kwargs(recipe, embedder)
    modules = getattr(embedder, "sentence_modules", None)
    if modules is None:  # the embedder's own sentence vectors: mean pooling of its configured layers, no prompt
        return layer_args, "", _identity
    from ctxemb.embedding.st_format import resolve_sentence_options

    dimensions = embedder_config_dict(embedder).get("dimensions")
    opts = resolve_sentence_options(modules, embedder.tokenizer, pooling="mean", normalize=False,
                                    dimensions=dimensions, **layer_args)
    if opts.do_lower_case:
        raise ValueError("late chunking encodes texts with the embedder's tokenizer as it is, but the model's "
                         "sentence vectors lower-case texts first (do_lower_case): use chunking='naive'")
    if opts.steps and dimensions is not None:
        raise ValueError("late chunking takes token vectors already cut to dimensions=%d, but the model's %s "
                         "module(s) need them whole: use chunking='naive'"
                         % (dimensions, "/".join(type(s).__name__ for s in opts.steps)))
    return ({"layers": opts.layers, "layer_pooling": opts.layer_pooling, "layer_weights": opts.layer_weights},
            opts.prompt, _modules(opts.steps) if opts.steps else _identity)


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _modules(steps: tuple) -> Callable[[np.ndarray], np.ndarray]:
    """The sentence-transformers steps after the pooling (torch modules), applied to (C, H) pooled vectors."""
    import torch

    def apply(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            v = torch.from_numpy(x)
            for step in steps:
                v = step(v)
            return v.numpy()

    return apply
