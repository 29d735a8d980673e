"""The corpus pass: one embedder over a sense-annotated corpus (SemCor), giving raw sense centroids (J&M eq. 11.8).

Shapes: S sentences, W_s words of sentence s, H the embedder's dimension.

:func:`embed_corpus` is the expensive step of building a sense store; :class:`CorpusEmbeddings` holds its result
so that several :class:`~ctxemb.wsd.build.BuildConfig` configurations can be built from one pass (the benchmark
does this), and :meth:`CorpusEmbeddings.save` keeps it on disk. :func:`embedder_words` says how a corpus's words
reach the embedder (the ``multiword`` option, shared with the disambiguator).

On disk a corpus pass is a directory, written atomically::

    corpus.json        format version, the (lemma, POS) pairs annotated, embedder configuration, multiword mode, stats
    store/             a SenseStore of the raw centroids (origin ``corpus``, with occurrence counts)
    standardizer.npz   the Standardizer fitted on every word vector of the embedded sentences (if one was fitted)
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ctxemb.core.validation import check_choice, read_json_file
from ctxemb.geometry.postprocessing import Standardizer
from ctxemb.core.atomic import atomic_directory, resolve_saved_directory
from ctxemb.core.protocols import EmbedderLike, batch_size_kwargs, embedder_config_dict
from ctxemb.wsd.corpus import Corpus, Sentence
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.wsd.options import MULTIWORD_MODES, MultiwordMode

logger = logging.getLogger(__name__)

__all__ = [
    "MULTIWORD_MODES",
    "MultiwordMode",
    "CorpusEmbeddings",
    "embed_corpus",
    "embedder_words",
    "extend_corpus_embeddings",
    "add_example_contexts",
    "EXAMPLE_SENSES",
    "check_word_vectors",
    "copy_as_corpus_vectors",
]

# Which senses add_example_contexts gives the examples' contexts to.
EXAMPLE_SENSES: tuple[str, ...] = ("all", "seen", "unseen")
CORPUS_FORMAT_VERSION = 1


def embedder_words(words: Sequence[str], multiword: MultiwordMode = "space") -> list[str]:
    """The words handed to the embedder: with ``multiword="space"``, ``New_York`` becomes ``New York``."""
    if multiword == "space":
        return [w.replace("_", " ") if "_" in w and w.strip("_") else w for w in words]
    return list(words)


def check_word_vectors(out: Sequence[np.ndarray], sentences: Sequence[Sequence[str]]) -> None:
    """Check ``embed_words``'s output: one (W_s, H) array per sentence.

    Raises:
        ValueError: a different number of arrays, or an array that is not 2-D with one row per word.
    """
    if len(out) != len(sentences):
        raise ValueError("embedder.embed_words returned %d arrays for %d sentences" % (len(out), len(sentences)))
    for arr, words in zip(out, sentences):
        if arr.ndim != 2 or arr.shape[0] != len(words):
            raise ValueError(
                "embedder.embed_words returned shape %s for a sentence of %d words (expected (W, H))"
                % (arr.shape, len(words))
            )


@dataclass
class CorpusEmbeddings:
    """The result of one pass of an embedder over a sense-annotated corpus.

    Attributes:
        store: raw sense centroids (no post-processing), origin ``corpus``.
        standardizer: fitted on every word embedding of the embedded sentences (``mean_``, ``scale_``), or None.
        lemma_pos: the (lemma, POS) pairs of the corpus's instances.
        embedder_config: the embedder's ``config.to_dict()``.
        multiword: how multiword tokens were passed (see :func:`embedder_words`).
        stats: corpus name, sentence/instance/word counts, seconds, sentences per second.
    """

    store: SenseStore
    standardizer: Standardizer | None
    lemma_pos: set[tuple[str, str]]
    embedder_config: dict[str, Any]
    multiword: MultiwordMode
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
                "format_version": CORPUS_FORMAT_VERSION,
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
            CorruptFileError: (a ValueError) ``corpus.json`` is not UTF-8 JSON holding an object.
            ValueError: an unsupported format version.
        """
        directory = resolve_saved_directory(directory)  # restores a save a crash interrupted
        if not (directory / "corpus.json").is_file():
            raise FileNotFoundError("%s is not a saved CorpusEmbeddings directory: corpus.json is missing" % directory)
        info = read_json_file(directory / "corpus.json", "CorpusEmbeddings manifest")
        if info.get("format_version") != CORPUS_FORMAT_VERSION:
            raise ValueError("%s has CorpusEmbeddings format version %r; this ctxemb reads version %d"
                             % (directory, info.get("format_version"), CORPUS_FORMAT_VERSION))
        std_path = directory / "standardizer.npz"
        return cls(
            store=SenseStore.load(directory / "store"),
            standardizer=Standardizer.load(std_path) if std_path.is_file() else None,
            lemma_pos={tuple(lp) for lp in info["lemma_pos"]},
            embedder_config=info["embedder_config"],
            multiword=info["multiword"],
            stats=info["stats"],
        )


def copy_as_corpus_vectors(store: SenseStore) -> SenseStore:
    """A new store with ``store``'s mean vectors and counts, all of origin ``corpus`` (``store`` is not modified).

    The builder starts every configuration from such a copy, so one corpus pass serves several configurations.
    """
    out = SenseStore(store.dim)
    keys = list(store.keys)
    if keys:
        out.set_vectors(keys, store.vectors(keys), origin="corpus", counts=store.counts(keys))
    return out


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


def extend_corpus_embeddings(base: CorpusEmbeddings, sentences: Sequence[Sentence],
                             word_vectors: Sequence[np.ndarray]) -> CorpusEmbeddings:
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
    store = copy_as_corpus_vectors(base.store)
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


def add_example_contexts(base: CorpusEmbeddings, examples: CorpusEmbeddings, *, count: bool = False,
                         senses: str = "seen") -> CorpusEmbeddings:
    """``base``'s sense centroids with the contexts of a second pass folded in, e.g. WordNet's example sentences
    (:func:`~ctxemb.wsd.wordnet_examples.wordnet_example_corpus`) added to SemCor's.

    Each sense's vector becomes the mean over the occurrences of both passes (an example weighs as much as one
    corpus occurrence); senses only the examples show get their examples' mean. With ``count=False`` (the default)
    the recorded counts stay ``base``'s, so the sense-frequency prior still reads the corpus's frequencies:
    WordNet gives a sense one or two examples whatever its frequency. The standardizer and the (lemma, POS) pairs
    that scope propagation and glosses stay ``base``'s too. ``senses`` (:data:`EXAMPLE_SENSES`) says which senses
    take the examples: ``"seen"`` (the default: only those ``base`` has, no new senses), ``"all"`` or ``"unseen"``
    (only those it lacks: ``base``'s centroids stay as they are). On the dev sets (all-MiniLM-L6-v2, SemCor and
    WordNet 3.0's examples) ``"seen"`` raised both SemEval-2007 and held-out SemCor, while the senses the examples
    add cost held-out SemCor F1: they compete with the frequent senses as nearest neighbours
    (``benchmarks/results/wsd_train_all-MiniLM-L6-v2_wnex*.md``).

    Raises:
        ValueError: the two passes used different embedders, multiword modes or dimensions.
    """
    if base.embedder_config != examples.embedder_config or base.multiword != examples.multiword:
        raise ValueError("add_example_contexts: the two corpus passes must come from the same embedder and "
                         "multiword mode (got %s / %s and %s / %s)" % (base.embedder_config, base.multiword,
                                                                        examples.embedder_config, examples.multiword))
    if base.store.dim != examples.store.dim:
        raise ValueError("add_example_contexts: dimensions differ (%d and %d)" % (base.store.dim, examples.store.dim))
    check_choice(senses, "senses", EXAMPLE_SENSES)
    store = copy_as_corpus_vectors(base.store)
    given = [(k, k in store) for k in examples.store.keys if examples.store.count(k) > 0]
    given = [(k, known) for k, known in given if senses == "all" or known == (senses == "seen")]
    extra = [k for k, _ in given]
    have = np.array([known for _, known in given], dtype=bool)
    if extra:
        n_ex = examples.store.counts(extra).astype(np.float64)
        n_base = np.zeros(len(extra))
        sums = examples.store.vectors(extra).astype(np.float64) * n_ex[:, None]
        if have.any():
            old = [k for k, h in zip(extra, have) if h]
            n_base[have] = store.counts(old)
            sums[have] += store.vectors(old).astype(np.float64) * n_base[have, None]
        counts = n_base + n_ex if count else n_base
        store.set_vectors(extra, sums / (n_base + n_ex)[:, None], origin="corpus", counts=counts.astype(np.int64))
    stats = dict(base.stats)
    stats["example_contexts"] = {"corpus": examples.stats.get("corpus"), "senses": len(extra),
                                 "new_senses": int((~have).sum()),
                                 "instances": examples.stats.get("n_instances"), "counted": count,
                                 "senses_given": senses}
    return CorpusEmbeddings(store=store, standardizer=copy.deepcopy(base.standardizer), lemma_pos=set(base.lemma_pos),
                            embedder_config=base.embedder_config, multiword=base.multiword, stats=stats)


def embed_corpus(
    corpus: Corpus | Iterable[Sentence],
    embedder: EmbedderLike,
    *,
    multiword: MultiwordMode = "space",
    standardize: bool = True,
    max_sentences: int | None = None,
    batch_size: int | None = None,
    chunk_sentences: int = 1024,
    show_progress_bar: bool = True,
) -> CorpusEmbeddings:
    """Embed every training sentence that has instances and average the vectors of each gold sense.

    Each instance's vector is added under every one of its gold keys (SemCor has one; some sets have several).
    Sentences without instances are skipped.

    Args:
        corpus: the training corpus (or its sentences).
        embedder: an :class:`~ctxemb.core.protocols.EmbedderLike` with ``dim``: ``embed_words(sentences,
            batch_size=..., show_progress_bar=...)`` returns one (W, H) array per sentence; its configuration is
            recorded (see :func:`~ctxemb.core.protocols.embedder_config_dict`).
        multiword: one of :data:`MULTIWORD_MODES` (see :func:`embedder_words`).
        standardize: also fit standardisation statistics on all word vectors (cheap; needed for
            ``BuildConfig(standardize=True)``).
        max_sentences: stop after this many sentences with instances.
        batch_size: texts per forward pass; None (default): the embedder's own batching.
        chunk_sentences: sentences per ``embed_words`` call.
        show_progress_bar: tqdm bar over sentences.

    Returns:
        A :class:`CorpusEmbeddings`.

    Raises:
        ValueError: an unknown ``multiword``, a corpus without instances with gold keys, or embedder output of
            the wrong shape.
        TypeError: the embedder has no usable ``config``.
    """
    from tqdm.auto import tqdm

    check_choice(multiword, "multiword", MULTIWORD_MODES)
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
        out = embedder.embed_words(words, show_progress_bar=False, **batch_size_kwargs(batch_size))
        check_word_vectors(out, words)
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
    return CorpusEmbeddings(store, standardizer, lemma_pos, embedder_config_dict(embedder), multiword, stats)
