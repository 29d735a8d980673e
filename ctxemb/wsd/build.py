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

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ctxemb._validation import check_choice, check_int
from ctxemb.protocols import EmbedderLike
from ctxemb.wsd.corpus import Corpus
from ctxemb.wsd.corpus_pass import (
    MULTIWORD_MODES,
    CorpusEmbeddings,
    MultiwordMode,
    add_example_contexts,
    copy_as_corpus_vectors,
    embed_corpus,
)
from ctxemb.wsd.disambiguate import BACK_OFFS, BackOff
from ctxemb.wsd.glosses import GLOSS_MODES, GlossMode, combine_with_glosses
from ctxemb.wsd.prior import PriorWeight, check_prior_weight, prior_from_name_part, prior_name_part
from ctxemb.wsd.propagation import PROPAGATION_SCOPES, PropagationScope, propagate_senses, propagation_targets
from ctxemb.wsd.sense_store import QueryTransform, SenseStore

logger = logging.getLogger(__name__)

__all__ = ["BuildConfig", "build_from_embeddings", "build_sense_store"]


@dataclass(frozen=True)
class BuildConfig:
    """How to turn corpus embeddings into sense vectors. The defaults are the configuration chosen on the dev sets
    for both shipped models: SemCor centroids (J&M 11.3.1), a sense-frequency prior of weight 0.03, first-sense
    back-off.
    ``BuildConfig.from_name("1nn")`` is the plain 1-NN recipe (no prior).

    Attributes:
        standardize: z-score vectors with statistics of the training sentences' word embeddings.
        propagate: fill senses the corpus never shows from their synset, hypernym or lexicographer file.
        propagation_scope: ``"corpus_lemmas"`` (all senses of the lemma/POS pairs annotated in the corpus) or
            ``"all"`` (every WordNet sense); also the scope of gloss embeddings.
        gloss: one of :data:`~ctxemb.wsd.glosses.GLOSS_MODES` (``"none"``, ``"concat"``, ``"average"``): combine
            corpus and gloss embeddings.
        back_off: one of :data:`~ctxemb.wsd.disambiguate.BACK_OFFS` (``"first_sense"``, ``"none"``): what the
            disambiguator does when no candidate has a vector.
        prior_weight: weight of the log sense-frequency prior added to the cosine (0 = plain nearest sense): a
            number, or a mapping ``{NOUN, VERB, ADJ, ADV -> weight}`` (stored normalised:
            :func:`~ctxemb.wsd.prior.check_prior_weight`).
        multiword: one of :data:`~ctxemb.wsd.corpus_pass.MULTIWORD_MODES` (``"space"``, ``"underscore"``): how
            ``_``-joined multiword tokens are passed to the embedder.
        max_sentences: use only the first N training sentences (None = all); for quick runs.
        batch_size: texts per forward pass; None (default): the embedder's own batching.
        chunk_sentences: sentences per ``embed_words`` call (the embedder sorts each chunk by length).

    Raises:
        ValueError: an unknown option string, a negative or non-finite ``prior_weight``, a count below 1.
        TypeError: ``standardize``/``propagate`` not a bool, a count not an int.
    """

    standardize: bool = False
    propagate: bool = False
    propagation_scope: PropagationScope = "corpus_lemmas"
    gloss: GlossMode = "none"
    back_off: BackOff = "first_sense"
    # Chosen on the dev sets (SemEval-2007 and held-out SemCor) for both shipped models: benchmarks/results/wsd_*.md.
    prior_weight: PriorWeight = 0.03
    multiword: MultiwordMode = "space"
    max_sentences: int | None = None
    batch_size: int | None = None
    chunk_sentences: int = 1024

    def __post_init__(self):
        check_choice(self.propagation_scope, "propagation_scope", PROPAGATION_SCOPES)
        check_choice(self.gloss, "gloss", GLOSS_MODES)
        check_choice(self.back_off, "back_off", BACK_OFFS)
        check_choice(self.multiword, "multiword", MULTIWORD_MODES)
        for name in ("standardize", "propagate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError("%s must be a bool, got %r" % (name, getattr(self, name)))
        object.__setattr__(self, "prior_weight", check_prior_weight(self.prior_weight))
        if self.max_sentences is not None:
            check_int(self.max_sentences, "max_sentences", low=1)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", low=1)
        check_int(self.chunk_sentences, "chunk_sentences", low=1)

    @property
    def name(self) -> str:
        """A short label such as ``1nn``, ``1nn+std+prop+gloss-concat``, ``1nn+std+prior0.1``."""
        parts = ["1nn"]
        if self.standardize:
            parts.append("std")
        if self.propagate:
            parts.append("prop" if self.propagation_scope == "corpus_lemmas" else "prop-all")
        if self.gloss != "none":
            parts.append("gloss-" + self.gloss)
        prior = prior_name_part(self.prior_weight)
        if prior:
            parts.append(prior)
        if self.back_off == "none":
            parts.append("no-backoff")
        return "+".join(parts)

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> "BuildConfig":
        """Parse a label made by :attr:`name` (``1nn+std+prop+gloss-concat``); ``overrides`` set other fields.

        Raises:
            ValueError: the label does not start with ``1nn`` or has an unknown part.
        """
        parts = name.strip().split("+")
        if parts[0] != "1nn":
            raise ValueError("a configuration name starts with '1nn', got %r" % (name,))
        # "1nn" is the plain recipe whatever the class defaults are.
        fields: dict[str, Any] = dict(standardize=False, propagate=False, propagation_scope="corpus_lemmas",
                                      gloss="none", back_off="first_sense", prior_weight=0.0)
        for part in parts[1:]:
            if part == "std":
                fields["standardize"] = True
            elif part in ("prop", "prop-all"):
                fields.update(propagate=True, propagation_scope="all" if part == "prop-all" else "corpus_lemmas")
            elif part.startswith("gloss-") and part[len("gloss-"):] in GLOSS_MODES[1:]:
                fields["gloss"] = part[len("gloss-"):]
            elif part == "no-backoff":
                fields["back_off"] = "none"
            elif (prior := prior_from_name_part(part)) is not None:
                fields["prior_weight"] = prior
            else:
                raise ValueError(
                    "unknown part %r in configuration name %r (known: std, prop, prop-all, gloss-concat, "
                    "gloss-average, prior<weight>, prior-n<w>-v<w>-a<w>-r<w>, no-backoff)" % (part, name)
                )
        fields.update(overrides)
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (recorded in a store's ``metadata["build"]["config"]``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BuildConfig":
        """The inverse of :meth:`to_dict`.

        Raises:
            ValueError: ``d`` has keys that are not fields (or a field's value is invalid).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError("unknown BuildConfig fields %s (known: %s)" % (sorted(unknown), sorted(known)))
        return cls(**d)


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
        embedder: an :class:`~ctxemb.embedding.Embedder` (any :class:`~ctxemb.protocols.EmbedderLike` with ``dim``).
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
