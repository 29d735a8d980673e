"""The settings of word sense disambiguation that the command line offers, in a module that loads none of the WSD
stack (NumPy arrays, FAISS, nltk's WordNet, torch): ``ctxemb wsd --help`` builds its flags from it at once.

- :class:`BuildConfig`: how :func:`~ctxemb.wsd.build.build_sense_store` turns corpus embeddings into sense vectors
  (its switches are described in :mod:`ctxemb.wsd.build`).
- The choices of its fields: :data:`PROPAGATION_SCOPES`, :data:`GLOSS_MODES`, :data:`BACK_OFFS`,
  :data:`MULTIWORD_MODES`; and the file formats of :func:`~ctxemb.wsd.tag_files.tag_file` (:data:`INPUT_FORMATS`,
  :data:`OUTPUT_FORMATS`).

The WSD modules that use these names import them from here (``ctxemb.wsd.build.BuildConfig``,
``ctxemb.wsd.disambiguate.BACK_OFFS`` and the like still name the same objects).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping

from ctxemb.core.validation import check_choice, check_int
from ctxemb.io.tables import FILE_FORMATS

if TYPE_CHECKING:
    from ctxemb.wsd.prior import PriorWeight

__all__ = ["BACK_OFFS", "GLOSS_MODES", "INPUT_FORMATS", "MULTIWORD_MODES", "OUTPUT_FORMATS", "PROPAGATION_SCOPES",
           "BackOff", "BuildConfig", "GlossMode", "MultiwordMode", "PropagationScope"]

#: Which senses propagation fills (and gloss embeddings cover): those of the lemma/POS pairs the corpus annotates,
#: or every WordNet sense.
PropagationScope = Literal["corpus_lemmas", "all"]
PROPAGATION_SCOPES: tuple[PropagationScope, ...] = ("corpus_lemmas", "all")
#: How gloss embeddings are combined with corpus vectors.
GlossMode = Literal["none", "concat", "average"]
GLOSS_MODES: tuple[GlossMode, ...] = ("none", "concat", "average")
#: What to answer when no candidate sense has a vector: WordNet's first sense, or nothing.
BackOff = Literal["first_sense", "none"]
BACK_OFFS: tuple[BackOff, ...] = ("first_sense", "none")
#: How a ``_``-joined multiword token (``New_York``) reaches the embedder: "space" passes the word "New York" (its
#: subwords are pooled into one vector), "underscore" passes it unchanged.
MultiwordMode = Literal["space", "underscore"]
MULTIWORD_MODES: tuple[MultiwordMode, ...] = ("space", "underscore")
#: What :func:`~ctxemb.wsd.tag_files.tag_file` writes: one JSON line per input row, CSV records, or a Raganato key.
OUTPUT_FORMATS: tuple[str, ...] = ("jsonl", "csv", "key")
#: What it reads: a Raganato-format data set, or a table of texts.
INPUT_FORMATS: tuple[str, ...] = ("raganato",) + FILE_FORMATS


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
        from ctxemb.wsd.prior import check_prior_weight

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
        from ctxemb.wsd.prior import prior_name_part

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
        from ctxemb.wsd.prior import prior_from_name_part

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
