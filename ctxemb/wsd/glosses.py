"""Gloss embeddings: a sense's WordNet definition as a second view of it, combined with its corpus vector.

Shapes: K senses, H the embedder's dimension.

Each sense's ``"<lemma> - <gloss>"`` text (:func:`gloss_text`) is embedded as the mean of its word vectors, from the
same layers as the corpus vectors (:func:`embed_glosses`), and :func:`combine_with_glosses` joins it to the corpus
vector in one of two ways (:data:`GLOSS_MODES`, ``"none"`` being no glosses):

- ``"concat"``: [unit(corpus), unit(gloss)], (K, 2H); queries become [unit(q), unit(q)], so a sense's score is the
  mean of the two cosines;
- ``"average"``: (unit(corpus) + unit(gloss)) / 2, (K, H).

A sense with no corpus vector uses its gloss vector in both places (origin ``gloss``).
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np

from ctxemb.core.validation import check_choice, unit_rows
from ctxemb.core.protocols import EmbedderLike, batch_size_kwargs
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.corpus import regex_tokenize
from ctxemb.wsd.corpus_pass import check_word_vectors
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.wsd.options import GLOSS_MODES, GlossMode

logger = logging.getLogger(__name__)

__all__ = ["GLOSS_MODES", "GlossMode", "gloss_text", "gloss_words", "embed_glosses", "combine_with_glosses"]



def gloss_text(key: str) -> str:
    """The text embedded for a sense's gloss: ``"<lemma> - <definition>"`` (``bank - sloping land ...``)."""
    info = wnu.sense_info(key)
    return "%s - %s" % (info.lemma.replace("_", " "), info.gloss)


def gloss_words(key: str) -> list[str]:
    """The words of :func:`gloss_text`, as they are embedded (the lemma alone if the text has no word)."""
    return regex_tokenize(gloss_text(key)) or [wnu.sense_info(key).lemma]


def embed_glosses(
    keys: Sequence[str],
    embedder: EmbedderLike,
    *,
    batch_size: int | None = None,
    chunk_sentences: int = 1024,
    show_progress_bar: bool = True,
) -> np.ndarray:
    """Embed each sense's :func:`gloss_text` as the mean of its word vectors (same layers as corpus vectors).

    Args:
        keys: K sense keys.
        embedder: see :func:`~ctxemb.wsd.corpus_pass.embed_corpus`.
        batch_size: texts per forward pass; None (default): the embedder's own batching.
        chunk_sentences: glosses per ``embed_words`` call.
        show_progress_bar: tqdm bar over the glosses.

    Returns:
        (K, H) float32 raw gloss embeddings.

    Raises:
        ValueError: the embedder's output has the wrong shape.
    """
    from tqdm.auto import tqdm

    out = np.zeros((len(keys), int(embedder.dim)), dtype=np.float32)
    bar = tqdm(total=len(keys), desc="embedding glosses", unit="gloss", disable=not show_progress_bar)
    for start in range(0, len(keys), chunk_sentences):
        chunk = keys[start : start + chunk_sentences]
        words = [gloss_words(k) for k in chunk]
        vecs = embedder.embed_words(words, show_progress_bar=False, **batch_size_kwargs(batch_size))
        check_word_vectors(vecs, words)
        out[start : start + len(chunk)] = np.stack([v.mean(axis=0) for v in vecs])
        bar.update(len(chunk))
    bar.close()
    return out


def combine_with_glosses(
    store: SenseStore,
    targets: Sequence[str],
    mode: GlossMode,
    *,
    embedder: EmbedderLike | None = None,
    gloss_vectors: Mapping[str, np.ndarray] | None = None,
    mean: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    batch_size: int | None = None,
    show_progress_bar: bool = True,
) -> SenseStore:
    """A new store that joins each sense's vector in ``store`` with its gloss embedding (see the module docstring).

    Args:
        store: vectors of S senses (corpus or propagated), already in the store's space (e.g. standardised).
        targets: further sense keys to give a (gloss-only) vector; the result holds ``store``'s keys, then these.
        mode: ``"concat"`` or ``"average"``.
        embedder: embeds the glosses that ``gloss_vectors`` does not hold.
        gloss_vectors: precomputed raw gloss embeddings (key -> (H,)), e.g. shared by several configurations.
        mean, scale: (H,) standardisation applied to the raw gloss embeddings (both None: none).
        batch_size: texts per forward pass; None (default): the embedder's own batching.
        show_progress_bar: tqdm bar while embedding glosses.

    Returns:
        The combined store, (K, 2H) for ``"concat"`` or (K, H) for ``"average"``; origins and counts are kept
        (``gloss`` and 0 for senses that had no vector).

    Raises:
        ValueError: an unknown ``mode``, or glosses to embed without an embedder.
    """
    check_choice(mode, "gloss", GLOSS_MODES[1:])
    keys = list(dict.fromkeys(list(store.keys) + list(targets)))
    have = dict(gloss_vectors or {})
    todo = [k for k in keys if k not in have]
    if todo:
        if embedder is None:
            raise ValueError("gloss mode %r needs an embedder (or gloss_vectors) for %d senses" % (mode, len(todo)))
        vecs = embed_glosses(todo, embedder, batch_size=batch_size, show_progress_bar=show_progress_bar)
        have.update(zip(todo, vecs))
    g = np.stack([np.asarray(have[k], dtype=np.float64) for k in keys])  # (K, H)
    if mean is not None:
        g = (g - mean) / scale
    g_unit = unit_rows(g, "gloss vectors", zero="keep", dtype=np.float32)
    c_unit = g_unit.copy()
    origins = ["gloss"] * len(keys)
    counts = np.zeros(len(keys), dtype=np.int64)
    known = [i for i, k in enumerate(keys) if k in store]
    if known:
        known_keys = [keys[i] for i in known]
        c_unit[known] = store.unit_vectors(known_keys)
        counts[known] = store.counts(known_keys)
        for i, k in zip(known, known_keys):
            origins[i] = store.origin(k)
    if mode == "concat":
        combined = np.concatenate([c_unit, g_unit], axis=1)  # (K, 2H)
    else:
        combined = (c_unit.astype(np.float64) + g_unit) / 2  # (K, H)
    out = SenseStore(combined.shape[1])
    for origin in dict.fromkeys(origins):
        idx = [i for i, o in enumerate(origins) if o == origin]
        out.set_vectors([keys[i] for i in idx], combined[idx], origin=origin, counts=counts[idx])
    return out
