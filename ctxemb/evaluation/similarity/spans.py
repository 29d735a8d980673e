"""Contextual vectors of word spans: every distinct sentence runs through the encoder once, in chunks.

Shape legend:
    P   spans (word occurrences) embedded
    S   stacked hidden states (L + 1 with ``layers="sweep"``, else 1)
    H   hidden size
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from tqdm.auto import tqdm

from ctxemb.evaluation.similarity.records import WordInContext
from ctxemb.core.protocols import EmbedderLike, batch_size_kwargs

_CHUNK_SENTENCES = 512  # unique sentences per embed_words call: bounds the memory of stacked outputs


def embed_spans(embedder: EmbedderLike, spans: Sequence[WordInContext], *, stack_layers: tuple[int, ...] | None,
                batch_size: int | None, show_progress_bar: bool, desc: str = "embedding",
                groups: np.ndarray | None = None, n_groups: int | None = None) -> np.ndarray:
    """Contextual vectors of word spans, each sentence run through the encoder once.

    A span's vector is the mean of its word vectors. With ``groups`` (P,) the span vectors are summed per group
    instead of returned one by one, so that many occurrences of a word cost no memory.

    Args:
        embedder: see :class:`ctxemb.core.protocols.EmbedderLike`.
        spans: the word spans.
        stack_layers: hidden states to stack (0 = embedding output ... L = last layer), or None for the embedder's
            own configuration (S = 1).
        batch_size: texts per forward pass; None leaves it to the embedder (its own batching).
        show_progress_bar: show a progress bar.
        desc: the progress bar's label.
        groups, n_groups: sum the span vectors into ``n_groups`` rows, span p into row ``groups[p]``.

    Returns:
        (P, S, H) float32, or (n_groups, S, H) float32 sums with ``groups``.

    Raises:
        ValueError: if there are no spans.
        RuntimeError: if the embedder returns arrays of the wrong number or shape.
    """
    index: dict[tuple[str, ...], int] = {}
    by_sentence: list[list[int]] = []
    for p, span in enumerate(spans):
        i = index.setdefault(span.tokens, len(index))
        if i == len(by_sentence):
            by_sentence.append([])
        by_sentence[i].append(p)
    sentences = list(index)
    # Longest first: an out-of-memory or length error shows at once; similar lengths batch together.
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    n_stack = 1 if stack_layers is None else len(stack_layers)
    kwargs = {} if stack_layers is None else {"layers": stack_layers, "layer_pooling": "stack"}
    out: np.ndarray | None = None
    bar = tqdm(total=len(order), desc=desc, unit="sent", disable=not show_progress_bar)
    for lo in range(0, len(order), _CHUNK_SENTENCES):
        chunk = order[lo : lo + _CHUNK_SENTENCES]
        embs = embedder.embed_words([list(sentences[i]) for i in chunk], show_progress_bar=False,
                                    **batch_size_kwargs(batch_size), **kwargs)
        if len(embs) != len(chunk):
            raise RuntimeError("embed_words returned %d arrays for %d sentences" % (len(embs), len(chunk)))
        for i, e in zip(chunk, embs):
            e = np.asarray(e)
            if stack_layers is None and e.ndim == 2:
                e = e[:, None, :]
            if e.ndim != 3 or e.shape[0] != len(sentences[i]) or e.shape[1] != n_stack:
                raise RuntimeError(
                    "embed_words returned shape %s for a sentence of %d words; expected (%d, %d, H)%s"
                    % (e.shape, len(sentences[i]), len(sentences[i]), n_stack,
                       "" if stack_layers is None else " with layer_pooling='stack'")
                )
            if out is None:
                shape = ((len(spans) if groups is None else n_groups), n_stack, e.shape[2])
                out = np.zeros(shape, dtype=np.float32)  # float32 sums: a group adds at most a few hundred vectors
            for p in by_sentence[i]:
                span = spans[p]
                v = e[span.start] if span.end - span.start == 1 else e[span.start : span.end].mean(axis=0)
                if groups is None:
                    out[p] = v
                else:
                    out[groups[p]] += v
        bar.update(len(chunk))
    bar.close()
    if out is None:
        raise ValueError("no spans to embed")
    return out


def sample_fit_spans(sentences: Sequence[Sequence[str]], max_tokens: int, seed: int) -> list[WordInContext]:
    """Every word of a seeded random sample of sentences, up to ``max_tokens`` words in all."""
    if max_tokens < 1:
        raise ValueError("max_fit_tokens must be >= 1; got %d" % max_tokens)
    rng = np.random.default_rng(seed)
    spans: list[WordInContext] = []
    for i in rng.permutation(len(sentences)):
        tokens = tuple(sentences[i])
        for k in range(len(tokens)):
            spans.append(WordInContext(tokens, k, k + 1))
            if len(spans) >= max_tokens:
                return spans
    return spans


def unique_sentences(spans: Iterable[WordInContext]) -> list[tuple[str, ...]]:
    """The distinct sentences of ``spans``, in first-seen order."""
    return list(dict.fromkeys(s.tokens for s in spans))
