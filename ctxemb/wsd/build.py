"""Building a :class:`~ctxemb.wsd.sense_store.SenseStore` from a sense-annotated corpus (SemCor) with any embedder.

Shapes: W words in a sentence, H the embedder's dimension, S senses, K senses to fill.

The plain recipe is J&M 11.3.1: embed every training sentence, take the vector of each annotated word, and
average the vectors of each sense (eq. 11.8). :class:`BuildConfig` adds documented switches:

- ``standardize``: z-score every vector (J&M eqs. 11.10-11.12) with the mean and standard deviation of all word
  embeddings of the training sentences. Since z-scoring is affine, a sense's standardised centroid equals the
  standardised raw centroid, so one pass over the corpus serves both variants. Queries are standardised
  with the same statistics (saved with the store).
- ``propagate``: give senses the corpus never shows a vector (after Loureiro & Jorge 2019, LMMS): first the
  average of the covered senses of the same synset; else the average of the covered synsets that share a
  direct hypernym with it; else the average of the covered synsets of its lexicographer file
  (``noun.artifact`` ...). ``propagation_scope`` says which senses to fill: all senses of the lemmas the corpus
  annotates (``"corpus_lemmas"``) or every WordNet sense (``"all"``, ~207k vectors).
- ``gloss``: embed ``"<lemma> - <gloss>"`` for each sense in the same scope (the mean of its word vectors,
  from the same layers) and combine with the corpus vector: ``"concat"`` = [unit(corpus), unit(gloss)]
  (queries become [unit(q), unit(q)], so the score is the mean of the two cosines), or ``"average"`` =
  (unit(corpus) + unit(gloss)) / 2. A sense with no corpus vector uses its gloss vector in both places.
- ``prior_weight``: add ``prior_weight * log p(sense | lemma)`` to each candidate's cosine, where p is the sense's
  add-one smoothed share of the corpus occurrences among the scored candidates (recorded in the store; the
  disambiguator reads it). Sense frequency is strong evidence (WordNet's first sense beats the plain 1-NN of small
  encoders); this lets the nearest-neighbour cosine overrule it only when the context is clear. 0 = off.
- ``back_off``: ``"first_sense"`` lets the disambiguator answer WordNet's first sense when no candidate has a
  vector (recorded in the store; the :class:`~ctxemb.wsd.disambiguate.Disambiguator` reads it).
- ``multiword``: how a multiword token such as ``New_York`` reaches the embedder: ``"space"`` passes the word
  ``"New York"`` (its subwords are pooled into one vector), ``"underscore"`` passes it unchanged.

The expensive corpus pass (:func:`embed_corpus`) is separate from :func:`build_from_embeddings`, so several
configurations can be built from one pass (the benchmark does this). :func:`build_sense_store` does both.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from ctxemb.geometry.postprocessing import Standardizer
from ctxemb.paths import atomic_directory
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.corpus import Corpus, Sentence, regex_tokenize, split_corpus_by_document
from ctxemb.wsd.sense_store import QueryTransform, SenseStore, _unit_rows

logger = logging.getLogger(__name__)

__all__ = [
    "BuildConfig",
    "CorpusEmbeddings",
    "embed_corpus",
    "embed_glosses",
    "gloss_text",
    "propagation_targets",
    "propagate_senses",
    "build_from_embeddings",
    "build_sense_store",
    "embedder_words",
    "split_corpus_by_document",
]

_GLOSS_MODES = ("none", "concat", "average")
_SCOPES = ("corpus_lemmas", "all")
_BACK_OFFS = ("first_sense", "none")
_MULTIWORD = ("space", "underscore")
_CORPUS_FORMAT_VERSION = 1


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
        gloss: ``"none"``, ``"concat"`` or ``"average"``: combine corpus and gloss embeddings.
        back_off: ``"first_sense"`` or ``"none"``: what the disambiguator does when no candidate has a vector.
        prior_weight: weight of the log sense-frequency prior added to the cosine (0 = plain nearest sense).
        multiword: ``"space"`` or ``"underscore"``: how ``_``-joined multiword tokens are passed to the embedder.
        max_sentences: use only the first N training sentences (None = all); for quick runs.
        batch_size: the embedder's batch size.
        chunk_sentences: sentences per ``embed_words`` call (the embedder sorts each chunk by length).
    """

    standardize: bool = False
    propagate: bool = False
    propagation_scope: Literal["corpus_lemmas", "all"] = "corpus_lemmas"
    gloss: Literal["none", "concat", "average"] = "none"
    back_off: Literal["first_sense", "none"] = "first_sense"
    # Chosen on the dev sets (SemEval-2007 and held-out SemCor) for both shipped models: benchmarks/results/wsd_*.md.
    prior_weight: float = 0.03
    multiword: Literal["space", "underscore"] = "space"
    max_sentences: int | None = None
    batch_size: int = 32
    chunk_sentences: int = 1024

    def __post_init__(self):
        for name, allowed in (
            ("propagation_scope", _SCOPES),
            ("gloss", _GLOSS_MODES),
            ("back_off", _BACK_OFFS),
            ("multiword", _MULTIWORD),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError("%s must be one of %s, got %r" % (name, allowed, getattr(self, name)))
        for name in ("standardize", "propagate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError("%s must be a bool, got %r" % (name, getattr(self, name)))
        if isinstance(self.prior_weight, bool) or not isinstance(self.prior_weight, (int, float)) \
                or not 0 <= self.prior_weight < float("inf"):
            raise ValueError("prior_weight must be a finite number >= 0, got %r" % (self.prior_weight,))
        if self.max_sentences is not None and (not isinstance(self.max_sentences, int) or self.max_sentences < 1):
            raise ValueError("max_sentences must be None or an int >= 1, got %r" % (self.max_sentences,))
        for name in ("batch_size", "chunk_sentences"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError("%s must be an int >= 1, got %r" % (name, v))

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
        if self.prior_weight:
            parts.append("prior%g" % self.prior_weight)
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
            elif part.startswith("gloss-") and part[len("gloss-"):] in _GLOSS_MODES[1:]:
                fields["gloss"] = part[len("gloss-"):]
            elif part == "no-backoff":
                fields["back_off"] = "none"
            elif part.startswith("prior") and _is_number(part[len("prior"):]):
                fields["prior_weight"] = float(part[len("prior"):])
            else:
                raise ValueError(
                    "unknown part %r in configuration name %r (known: std, prop, prop-all, gloss-concat, "
                    "gloss-average, prior<weight>, no-backoff)" % (part, name)
                )
        fields.update(overrides)
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BuildConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError("unknown BuildConfig fields %s (known: %s)" % (sorted(unknown), sorted(known)))
        return cls(**d)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def embedder_words(words: Sequence[str], multiword: str = "space") -> list[str]:
    """The words handed to the embedder: with ``multiword="space"``, ``New_York`` becomes ``New York``."""
    if multiword == "space":
        return [w.replace("_", " ") if "_" in w and w.strip("_") else w for w in words]
    return list(words)


def _embedder_config(embedder) -> dict[str, Any]:
    cfg = getattr(embedder, "config", None)
    if cfg is None:
        return {"class": type(embedder).__name__}
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)
    return dict(d)


@dataclass
class CorpusEmbeddings:
    """The result of one pass of an embedder over a sense-annotated corpus.

    Attributes:
        store: raw sense centroids (no post-processing), origin ``corpus``.
        standardizer: fitted on every word embedding of the embedded sentences (``mean_``, ``scale_``), or None.
        lemma_pos: the (lemma, POS) pairs of the corpus's instances.
        embedder_config: the embedder's ``config.to_dict()``.
        multiword: how multiword tokens were passed (see :class:`BuildConfig`).
        stats: corpus name, sentence/instance/word counts, seconds, sentences per second.
    """

    store: SenseStore
    standardizer: Any
    lemma_pos: set[tuple[str, str]]
    embedder_config: dict[str, Any]
    multiword: str
    stats: dict[str, Any] = field(default_factory=dict)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the corpus pass to a directory, atomically, so that configurations can be built later without
        embedding the corpus again (``store/`` = a :class:`SenseStore`, ``standardizer.npz``, ``corpus.json``).

        Returns:
            The directory.
        """
        directory = Path(directory)
        with atomic_directory(directory) as tmp:
            self.store.save(tmp / "store")
            if self.standardizer is not None:
                self.standardizer.save(tmp / "standardizer.npz")
            info = {
                "format_version": _CORPUS_FORMAT_VERSION,
                "lemma_pos": sorted([list(lp) for lp in self.lemma_pos], key=lambda lp: (lp[0] or "", lp[1] or "")),
                "embedder_config": self.embedder_config,
                "multiword": self.multiword,
                "stats": self.stats,
            }
            (tmp / "corpus.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "CorpusEmbeddings":
        """Read a corpus pass written by :meth:`save`.

        Raises:
            FileNotFoundError: ``directory`` or its ``corpus.json`` is missing.
            ValueError: an unsupported format version.
        """
        directory = Path(directory)
        if not (directory / "corpus.json").is_file():
            raise FileNotFoundError("%s is not a saved CorpusEmbeddings directory: corpus.json is missing" % directory)
        info = json.loads((directory / "corpus.json").read_text(encoding="utf-8"))
        if info.get("format_version") != _CORPUS_FORMAT_VERSION:
            raise ValueError("%s has CorpusEmbeddings format version %r; this ctxemb reads version %d"
                             % (directory, info.get("format_version"), _CORPUS_FORMAT_VERSION))
        std_path = directory / "standardizer.npz"
        return cls(
            store=SenseStore.load(directory / "store"),
            standardizer=Standardizer.load(std_path) if std_path.is_file() else None,
            lemma_pos={tuple(lp) for lp in info["lemma_pos"]},
            embedder_config=info["embedder_config"],
            multiword=info["multiword"],
            stats=info["stats"],
        )


def _check_embedder_output(out, n_expected: int, sentences) -> None:
    if len(out) != n_expected:
        raise ValueError("embedder.embed_words returned %d arrays for %d sentences" % (len(out), n_expected))
    for arr, words in zip(out, sentences):
        if arr.ndim != 2 or arr.shape[0] != len(words):
            raise ValueError(
                "embedder.embed_words returned shape %s for a sentence of %d words (expected (W, H))"
                % (arr.shape, len(words))
            )


def _accumulate(sentences, outputs, store: SenseStore, standardizer, lemma_pos: set) -> tuple[int, int]:
    """Add each instance's vector under its gold keys and feed all word vectors to the standardizer.

    Returns:
        (instances added, words seen).
    """
    keys, rows = [], []
    n_instances = n_words = 0
    for s, vecs in zip(sentences, outputs):
        for inst in s.instances:
            lemma_pos.add((inst.lemma, inst.pos))
            for k in inst.gold_keys:
                keys.append(k)
                rows.append(vecs[inst.position])
            n_instances += 1
        n_words += vecs.shape[0]
    if keys:
        store.add(keys, np.stack(rows))
    if standardizer is not None and outputs:
        standardizer.partial_fit(np.concatenate(outputs, axis=0))
    return n_instances, n_words


def extend_corpus_embeddings(base: "CorpusEmbeddings", sentences: Sequence[Sentence],
                             word_vectors: Sequence[np.ndarray]) -> "CorpusEmbeddings":
    """A new :class:`CorpusEmbeddings`: ``base`` plus sentences that were already embedded with the same embedder.

    Used by the benchmark: SemCor minus a held-out split is embedded once; the held-out split is embedded once for
    evaluation; adding those vectors gives the full-SemCor centroids without a second pass over the corpus. The
    result equals one pass over all the sentences (running means and exact partial standardisation).

    Args:
        base: the first pass (not modified).
        sentences: S sentences with instances and gold keys.
        word_vectors: S arrays (W_s, H), the embedder's output for those sentences.
    """
    if len(sentences) != len(word_vectors):
        raise ValueError("sentences (%d) and word_vectors (%d) must have the same length"
                         % (len(sentences), len(word_vectors)))
    store = SenseStore(base.store.dim)
    keys = list(base.store.keys)
    if keys:
        store.set_vectors(keys, base.store.vectors(keys), origin="corpus", counts=base.store.counts(keys))
    standardizer = copy.deepcopy(base.standardizer)
    lemma_pos = set(base.lemma_pos)
    pairs = [(s, v) for s, v in zip(sentences, word_vectors) if s.instances]
    n_instances, n_words = _accumulate([s for s, _ in pairs], [v for _, v in pairs], store, standardizer, lemma_pos)
    stats = dict(base.stats)
    for name, extra in (("n_sentences", len(pairs)), ("n_instances", n_instances), ("n_words", n_words)):
        if name in stats:
            stats[name] += extra
    return CorpusEmbeddings(store=store, standardizer=standardizer, lemma_pos=lemma_pos,
                            embedder_config=base.embedder_config, multiword=base.multiword, stats=stats)


def embed_corpus(
    corpus: Corpus | Iterable[Sentence],
    embedder,
    *,
    multiword: str = "space",
    standardize: bool = True,
    max_sentences: int | None = None,
    batch_size: int = 32,
    chunk_sentences: int = 1024,
    show_progress_bar: bool = True,
) -> CorpusEmbeddings:
    """Embed every training sentence that has instances and average the vectors of each gold sense.

    Each instance's vector is added under every one of its gold keys (SemCor has one; some sets have several).
    Sentences without instances are skipped.

    Args:
        corpus: the training corpus (or its sentences).
        embedder: anything with ``embed_words(sentences, batch_size=..., show_progress_bar=...)`` returning one
            (W, H) array per sentence, and ``dim``; ``config.to_dict()`` is recorded if present.
        multiword: ``"space"`` or ``"underscore"`` (see :class:`BuildConfig`).
        standardize: also fit standardisation statistics on all word vectors (cheap; needed for
            ``BuildConfig(standardize=True)``).
        max_sentences: stop after this many sentences with instances.
        batch_size: passed to the embedder.
        chunk_sentences: sentences per ``embed_words`` call.
        show_progress_bar: tqdm bar over sentences.

    Returns:
        A :class:`CorpusEmbeddings`.

    Raises:
        ValueError: the corpus has no instances with gold keys, or the embedder's output has the wrong shape.
    """
    from tqdm.auto import tqdm

    if multiword not in _MULTIWORD:
        raise ValueError("multiword must be one of %s, got %r" % (_MULTIWORD, multiword))
    name = corpus.name if isinstance(corpus, Corpus) else "corpus"
    sentences = [s for s in (corpus.sentences() if isinstance(corpus, Corpus) else corpus) if s.instances]
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    if not any(i.gold_keys for s in sentences for i in s.instances):
        raise ValueError("corpus %r has no instances with gold keys to build sense vectors from" % name)
    dim = int(embedder.dim)
    store = SenseStore(dim)
    standardizer = Standardizer() if standardize else None
    lemma_pos: set[tuple[str, str]] = set()
    n_instances = n_words = 0
    t0 = time.perf_counter()
    bar = tqdm(total=len(sentences), desc="embedding corpus", unit="sent", disable=not show_progress_bar)
    for start in range(0, len(sentences), chunk_sentences):
        chunk = sentences[start : start + chunk_sentences]
        words = [embedder_words(s.words, multiword) for s in chunk]
        out = embedder.embed_words(words, batch_size=batch_size, show_progress_bar=False)
        _check_embedder_output(out, len(chunk), words)
        ni, nw = _accumulate(chunk, out, store, standardizer, lemma_pos)
        n_instances += ni
        n_words += nw
        bar.update(len(chunk))
    bar.close()
    seconds = time.perf_counter() - t0
    stats = dict(
        corpus=name,
        n_sentences=len(sentences),
        n_instances=n_instances,
        n_words=n_words,
        n_corpus_senses=len(store),
        seconds_embedding=seconds,
        sentences_per_second=len(sentences) / max(seconds, 1e-9),
    )
    logger.info(
        "embedded %d sentences (%d instances, %d senses) in %.1f s (%.1f sentences/s)",
        len(sentences), n_instances, len(store), seconds, stats["sentences_per_second"],
    )
    return CorpusEmbeddings(store, standardizer, lemma_pos, _embedder_config(embedder), multiword, stats)


def propagation_targets(lemma_pos: Iterable[tuple[str, str]], scope: str = "corpus_lemmas") -> list[str]:
    """Sense keys to fill: every sense of the given (lemma, POS) pairs, or every WordNet sense (``scope="all"``)."""
    if scope not in _SCOPES:
        raise ValueError("scope must be one of %s, got %r" % (_SCOPES, scope))
    if scope == "all":
        return list(dict.fromkeys(wnu.all_sense_keys()))
    keys: dict[str, None] = {}
    for lemma, pos in sorted(lemma_pos, key=lambda lp: (lp[0] or "", lp[1] or "")):
        if not lemma:
            continue
        try:
            letters = wnu.wordnet_pos(pos) if pos else None
        except ValueError:
            letters = None
        if pos and letters is None:
            continue
        keys.update(dict.fromkeys(wnu.candidate_keys(lemma, pos or None)))
    return list(keys)


def _group_mean(groups: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    return {g: np.mean(vs, axis=0) for g, vs in groups.items()}


def propagate_senses(store: SenseStore, targets: Iterable[str], *, show_progress_bar: bool = True) -> dict[str, int]:
    """Give the target senses that lack a vector one from WordNet's structure (LMMS-style), in place.

    Only vectors that came from the corpus (origin ``corpus``) are propagated. For each missing sense, in order:

    1. ``synset``: the mean of the covered senses of its own synset;
    2. ``hypernym``: the mean, over its synset's direct (instance) hypernyms h, of the mean vector of the
       covered synsets whose hypernym is h (its covered "siblings");
    3. ``lexname``: the mean of the covered synsets of its lexicographer file.

    A covered synset's vector is the mean of its covered senses' vectors.

    Args:
        store: the store to fill (its vectors are used as they are, e.g. already standardised).
        targets: sense keys to fill; keys already in the store are left alone.
        show_progress_bar: tqdm bar over the targets.

    Returns:
        Number of senses filled per level, e.g. ``{"synset": 120, "hypernym": 3000, "lexname": 900}``.
    """
    from tqdm.auto import tqdm

    corpus_keys = [k for k in store.keys if store.origin(k) == "corpus"]
    if not corpus_keys:
        raise ValueError("the store has no corpus vectors to propagate from")
    means = store.vectors(corpus_keys).astype(np.float64)
    by_synset: dict[str, list[np.ndarray]] = {}
    for k, v in zip(corpus_keys, means):
        by_synset.setdefault(wnu.synset_of(k), []).append(v)
    synset_vec = _group_mean(by_synset)
    by_hypernym: dict[str, list[np.ndarray]] = {}
    by_lexname: dict[str, list[np.ndarray]] = {}
    for s, v in synset_vec.items():
        for h in wnu.hypernyms(s):
            by_hypernym.setdefault(h, []).append(v)
        by_lexname.setdefault(wnu.lexname(s), []).append(v)
    hypernym_vec = _group_mean(by_hypernym)
    lexname_vec = _group_mean(by_lexname)

    filled: dict[str, tuple[list[str], list[np.ndarray]]] = {o: ([], []) for o in ("synset", "hypernym", "lexname")}
    missing = [k for k in dict.fromkeys(targets) if k not in store]
    for k in tqdm(missing, desc="propagating", unit="sense", disable=not show_progress_bar):
        s = wnu.synset_of(k)
        if s in synset_vec:
            level, v = "synset", synset_vec[s]
        else:
            hs = [hypernym_vec[h] for h in wnu.hypernyms(s) if h in hypernym_vec]
            if hs:
                level, v = "hypernym", np.mean(hs, axis=0)
            elif wnu.lexname(s) in lexname_vec:
                level, v = "lexname", lexname_vec[wnu.lexname(s)]
            else:
                continue
        filled[level][0].append(k)
        filled[level][1].append(v)
    for level, (keys, vecs) in filled.items():
        if keys:
            store.set_vectors(keys, np.stack(vecs), origin=level)
    counts = {level: len(keys) for level, (keys, _) in filled.items()}
    logger.info("propagated %s (of %d senses without corpus vectors)", counts, len(missing))
    return counts


def gloss_text(key: str) -> str:
    """The text embedded for a sense's gloss: ``"<lemma> - <definition>"`` (``bank - sloping land ...``)."""
    info = wnu.sense_info(key)
    return "%s - %s" % (info.lemma.replace("_", " "), info.gloss)


def embed_glosses(
    keys: Sequence[str],
    embedder,
    *,
    batch_size: int = 32,
    chunk_sentences: int = 1024,
    show_progress_bar: bool = True,
) -> np.ndarray:
    """Embed each sense's :func:`gloss_text` as the mean of its word vectors (same layers as corpus vectors).

    Args:
        keys: K sense keys.
        embedder: see :func:`embed_corpus`.

    Returns:
        (K, H) float32 raw gloss embeddings.
    """
    from tqdm.auto import tqdm

    out = np.zeros((len(keys), int(embedder.dim)), dtype=np.float32)
    bar = tqdm(total=len(keys), desc="embedding glosses", unit="gloss", disable=not show_progress_bar)
    for start in range(0, len(keys), chunk_sentences):
        chunk = keys[start : start + chunk_sentences]
        words = [regex_tokenize(gloss_text(k)) or [wnu.sense_info(k).lemma] for k in chunk]
        vecs = embedder.embed_words(words, batch_size=batch_size, show_progress_bar=False)
        _check_embedder_output(vecs, len(chunk), words)
        out[start : start + len(chunk)] = np.stack([v.mean(axis=0) for v in vecs])
        bar.update(len(chunk))
    bar.close()
    return out


def build_from_embeddings(
    base: CorpusEmbeddings,
    config: BuildConfig = BuildConfig(),
    *,
    embedder=None,
    gloss_vectors: Mapping[str, np.ndarray] | None = None,
    show_progress_bar: bool = True,
) -> SenseStore:
    """Make a sense store from a corpus pass, applying the configuration's switches (see the module docstring).

    Args:
        base: the output of :func:`embed_corpus` (not modified).
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
    store = SenseStore(h)
    store.set_vectors(list(raw.keys), raw.vectors(), origin="corpus", counts=raw.counts())
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
        store = _combine_with_glosses(
            store, targets, config, embedder, gloss_vectors, mean, scale, show_progress_bar=show_progress_bar
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


def _combine_with_glosses(store, targets, config, embedder, gloss_vectors, mean, scale, *, show_progress_bar):
    keys = list(dict.fromkeys(list(store.keys) + targets))
    have = dict(gloss_vectors or {})
    todo = [k for k in keys if k not in have]
    if todo:
        if embedder is None:
            raise ValueError("config.gloss=%r needs an embedder (or gloss_vectors) for %d senses" % (config.gloss, len(todo)))
        vecs = embed_glosses(todo, embedder, batch_size=config.batch_size, show_progress_bar=show_progress_bar)
        have.update(zip(todo, vecs))
    g = np.stack([np.asarray(have[k], dtype=np.float64) for k in keys])  # (K, H)
    if mean is not None:
        g = (g - mean) / scale
    g_unit, _ = _unit_rows(g)
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
    if config.gloss == "concat":
        combined = np.concatenate([c_unit, g_unit], axis=1)  # (K, 2H)
    else:
        combined = (c_unit.astype(np.float64) + g_unit) / 2
    out = SenseStore(combined.shape[1])
    for origin in dict.fromkeys(origins):
        idx = [i for i, o in enumerate(origins) if o == origin]
        out.set_vectors([keys[i] for i in idx], combined[idx], origin=origin, counts=counts[idx])
    return out


def build_sense_store(
    corpus: Corpus,
    embedder,
    config: BuildConfig = BuildConfig(),
    *,
    show_progress_bar: bool = True,
) -> SenseStore:
    """Embed a sense-annotated corpus and build a sense store: :func:`embed_corpus` + :func:`build_from_embeddings`.

    Args:
        corpus: training corpus, e.g. ``read_dataset(".../Training_Corpora/SemCor")`` or the training part of
            :func:`split_corpus_by_document`.
        embedder: an :class:`~ctxemb.embedding.Embedder` (or anything with ``embed_words`` and ``dim``).
        config: the switches.
        show_progress_bar: tqdm bars.

    Returns:
        The store.
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
    return build_from_embeddings(base, config, embedder=embedder, show_progress_bar=show_progress_bar)
