"""Building a :class:`~ctxemb.wsd.sense_store.SenseStore` from a sense-annotated corpus (SemCor) with any embedder.

Shapes: H the embedder's dimension, S senses.

The plain recipe is J&M 11.3.1: embed every training sentence, take the vector of each annotated word, and
average the vectors of each sense (eq. 11.8). :class:`BuildConfig` adds documented switches:

- ``standardize``: z-score every vector (J&M eqs. 11.10-11.12) with the mean and standard deviation of all word
  embeddings of the training sentences. Since z-scoring is affine, a sense's standardised centroid equals the
  standardised raw centroid, so one pass over the corpus serves both variants. Queries are standardised
  with the same statistics (saved with the store).
- ``propagate``: give senses the corpus never shows a vector from their synset, hypernym or lexicographer file
  (:mod:`~ctxemb.wsd.propagation`); ``propagation_scope`` says which senses to fill.
- ``gloss``: combine corpus vectors with ``"<lemma> - <gloss>"`` embeddings of the senses in the same scope
  (:mod:`~ctxemb.wsd.glosses`): ``"concat"`` or ``"average"``.
- ``prior_weight``: add ``prior_weight * log p(sense | lemma)`` to each candidate's cosine, where p is the sense's
  add-one smoothed share of the corpus occurrences among the scored candidates (recorded in the store; the
  disambiguator reads it); one number, or one per part of speech (:mod:`~ctxemb.wsd.prior`). Sense frequency is
  strong evidence (WordNet's first sense beats the plain 1-NN of small encoders); this lets the nearest-neighbour
  cosine overrule it only when the context is clear. 0 = off.
- ``back_off``: ``"first_sense"`` lets the disambiguator answer WordNet's first sense when no candidate has a
  vector (recorded in the store; the :class:`~ctxemb.wsd.disambiguate.Disambiguator` reads it).
- ``multiword``: how a multiword token such as ``New_York`` reaches the embedder (see
  :func:`~ctxemb.wsd.corpus_pass.embedder_words`).

A configuration has a short name (:attr:`BuildConfig.name`, parsed back by :meth:`BuildConfig.from_name`):
``1nn`` is the plain recipe; ``+std``, ``+prop`` / ``+prop-all``, ``+gloss-concat`` / ``+gloss-average``,
``+prior<w>`` (per POS: ``+prior-n<w>-v<w>-a<w>-r<w>``) and ``+no-backoff`` add switches
(``1nn+std+prop+gloss-concat``).

The expensive corpus pass (:func:`~ctxemb.wsd.corpus_pass.embed_corpus`) is separate from
:func:`build_from_embeddings`, so several configurations can be built from one pass (the benchmark does this).
:func:`build_sense_store` does both.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping

import numpy as np

from ctxemb.core.protocols import EmbedderLike
from ctxemb.wsd.corpus import Corpus
from ctxemb.wsd.corpus_pass import CorpusEmbeddings, add_example_contexts, copy_as_corpus_vectors, embed_corpus
from ctxemb.wsd.glosses import combine_with_glosses
from ctxemb.wsd.propagation import propagate_senses, propagation_targets
from ctxemb.wsd.sense_store import QueryTransform, SenseStore
from ctxemb.wsd.options import BuildConfig

logger = logging.getLogger(__name__)

__all__ = ["BuildConfig", "build_from_embeddings", "build_sense_store"]


def build_from_embeddings(
    base: CorpusEmbeddings,
    config: BuildConfig = BuildConfig(),
    *,
    embedder: EmbedderLike | None = None,
    gloss_vectors: Mapping[str, np.ndarray] | None = None,
    show_progress_bar: bool = True,
) -> SenseStore:
    """Make a sense store from a corpus pass, applying the configuration's switches (see the module docstring).

    Args:
        base: the output of :func:`~ctxemb.wsd.corpus_pass.embed_corpus` (not modified).
        config: the switches.
        embedder: needed only for gloss embeddings that ``gloss_vectors`` does not hold.
        gloss_vectors: precomputed raw gloss embeddings (key -> (H,)), e.g. shared by several configurations.
        show_progress_bar: tqdm bars.

    Returns:
        The store, with metadata describing the embedder, the configuration and the build.

    Raises:
        ValueError: standardisation asked for but ``base`` has no statistics; glosses asked for without an
            embedder or precomputed vectors.
    """
    t0 = time.perf_counter()
    raw = base.store
    h = raw.dim
    store = copy_as_corpus_vectors(raw)
    mean = scale = None
    if config.standardize:
        if base.standardizer is None:
            raise ValueError("config.standardize is set but the corpus pass fitted no standardizer (standardize=False)")
        mean = np.asarray(base.standardizer.mean_, dtype=np.float64)
        scale = np.asarray(base.standardizer.scale_, dtype=np.float64)
        store.transform_vectors(lambda m: (m - mean) / scale)
    propagated: dict[str, int] = {}
    targets: list[str] = []
    if config.propagate or config.gloss != "none":
        targets = propagation_targets(base.lemma_pos, config.propagation_scope)
    if config.propagate:
        propagated = propagate_senses(store, targets, show_progress_bar=show_progress_bar)
    n_copies = 1
    if config.gloss != "none":
        store = combine_with_glosses(
            store, targets, config.gloss, embedder=embedder, gloss_vectors=gloss_vectors, mean=mean, scale=scale,
            batch_size=config.batch_size, show_progress_bar=show_progress_bar,
        )
        n_copies = 2 if config.gloss == "concat" else 1
    qt = QueryTransform(h, mean=mean, scale=scale, n_copies=n_copies)
    store.query_transform = None if qt.is_identity else qt
    emb = dict(base.embedder_config)
    store.metadata = {
        "embedder": emb,
        "layers": emb.get("layers"),
        "layer_pooling": emb.get("layer_pooling"),
        "subword_pooling": emb.get("subword_pooling"),
        "post_processing": {
            "standardize": config.standardize,
            "propagate": config.propagate,
            "propagation_scope": config.propagation_scope,
            "gloss": config.gloss,
        },
        "back_off": config.back_off,
        "prior_weight": config.prior_weight,
        "multiword": base.multiword,
        "build": {
            "config": config.to_dict(),
            "name": config.name,
            **base.stats,
            "propagated": propagated,
            "seconds_post_processing": time.perf_counter() - t0,
        },
    }
    logger.info("built %r (%s): origins %s", store, config.name, store.origins())
    return store


def build_sense_store(
    corpus: Corpus,
    embedder: EmbedderLike,
    config: BuildConfig = BuildConfig(),
    *,
    examples: Corpus | None = None,
    show_progress_bar: bool = True,
) -> SenseStore:
    """Embed a sense-annotated corpus and build a sense store: :func:`~ctxemb.wsd.corpus_pass.embed_corpus`, then
    :func:`build_from_embeddings`.

    Args:
        corpus: training corpus, e.g. ``read_dataset(".../Training_Corpora/SemCor")`` or the training part of
            :func:`~ctxemb.wsd.corpus.split_corpus_by_document`.
        embedder: an :class:`~ctxemb.embedding.embedder.Embedder` (any :class:`~ctxemb.core.protocols.EmbedderLike` with ``dim``).
        config: the switches.
        examples: more contexts for the sense vectors but not for the prior's counts, e.g.
            :func:`~ctxemb.wsd.wordnet_examples.wordnet_example_corpus` (folded in by
            :func:`~ctxemb.wsd.corpus_pass.add_example_contexts`).
        show_progress_bar: tqdm bars.

    Returns:
        The store.

    Raises:
        ValueError: see :func:`~ctxemb.wsd.corpus_pass.embed_corpus` and :func:`build_from_embeddings`.
    """
    base = embed_corpus(
        corpus,
        embedder,
        multiword=config.multiword,
        standardize=config.standardize,
        max_sentences=config.max_sentences,
        batch_size=config.batch_size,
        chunk_sentences=config.chunk_sentences,
        show_progress_bar=show_progress_bar,
    )
    if examples is not None:
        extra = embed_corpus(examples, embedder, multiword=config.multiword, standardize=False,
                             batch_size=config.batch_size, chunk_sentences=config.chunk_sentences,
                             show_progress_bar=show_progress_bar)
        base = add_example_contexts(base, extra)
    return build_from_embeddings(base, config, embedder=embedder, show_progress_bar=show_progress_bar)
