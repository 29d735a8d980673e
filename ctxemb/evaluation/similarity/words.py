"""Word similarity out of context (SimLex-999, WordSim-353, MEN, RG-65, SimVerb-3500) with decontextualised word
vectors (Bommasani et al. 2020): a word's contextual vectors averaged over up to N corpus sentences that contain
it; a word the corpus never shows gets the vector of the word alone (counted as ``n_isolated`` in ``extra``).

Shape legend:
    P   spans (word occurrences) embedded
    S   stacked hidden states (L + 1 with ``layers="sweep"``, else 1)
    H   hidden size
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from ctxemb.evaluation.similarity.records import WordInContext, WordPair
from ctxemb.evaluation.similarity.results import ResultCell, SimilarityResult
from ctxemb.evaluation.similarity.scoring import (
    FitRows,
    model_label,
    paired_cosine,
    resolve_fit_corpus,
    score_layer_views,
)
from ctxemb.evaluation.similarity.spans import embed_spans, sample_fit_spans
from ctxemb.evaluation.similarity.views import LayerMode, layer_setup, postprocess_options
from ctxemb.metrics.correlation import spearman
from ctxemb.core.protocols import EmbedderLike

logger = logging.getLogger(__name__)


@dataclass
class DecontextualizedVectors:
    """Static word vectors made from contextual ones (Bommasani et al. 2020).

    Attributes:
        words: the words (as looked up: lower-cased when built with ``lowercase=True``).
        vectors: (n_words, S, H) float32, one vector per word and stacked hidden state.
        counts: (n_words,) the number of corpus sentences averaged; 0 means the word was embedded alone.
        stack_layers: the stacked hidden-state indices, or None for the embedder's configuration.
    """

    words: list[str]
    vectors: np.ndarray
    counts: np.ndarray
    stack_layers: tuple[int, ...] | None

    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}


def decontextualized_word_vectors(embedder: EmbedderLike, words: Iterable[str], corpus: Sequence[Sequence[str]], *,
                                  max_occurrences: int = 100, layers: LayerMode = "sweep", lowercase: bool = True,
                                  extra_spans: Sequence[WordInContext] = (), batch_size: int | None = None,
                                  show_progress_bar: bool = True,
                                  seed: int = 0) -> tuple[DecontextualizedVectors, np.ndarray]:
    """Average each word's contextual vectors over up to ``max_occurrences`` corpus sentences that contain it.

    A sentence counts once per word (its first occurrence of the word). Sentences are visited in a seeded random
    order, so a frequent word gets a random sample of its sentences. A word the corpus never shows as a whole
    token (including any word with a space in it) gets the vector of the word embedded alone, as a one-sentence
    text; its count is 0.

    Args:
        embedder: see :class:`ctxemb.core.protocols.EmbedderLike`.
        words: the vocabulary.
        corpus: sentences as word lists.
        max_occurrences: N, the most sentences averaged per word.
        layers: "sweep" (stack every hidden state) or "default".
        lowercase: match words to corpus tokens case-insensitively (the words are lower-cased).
        extra_spans: further spans embedded in the same pass (e.g. a post-processing fit sample); their
            vectors are returned separately.
        batch_size, show_progress_bar, seed: as elsewhere.

    Returns:
        (vectors, extra) with ``extra`` (len(extra_spans), S, H) float32.

    Raises:
        ValueError: if ``max_occurrences`` < 1 or ``words`` is empty.
    """
    if max_occurrences < 1:
        raise ValueError("max_occurrences must be >= 1; got %d" % max_occurrences)
    norm = (lambda w: w.lower()) if lowercase else (lambda w: w)
    vocab = list(dict.fromkeys(norm(w) for w in words))
    if not vocab:
        raise ValueError("words is empty")
    windex = {w: i for i, w in enumerate(vocab)}
    counts = np.zeros(len(vocab), dtype=np.int64)
    spans: list[WordInContext] = []
    groups: list[int] = []
    rng = np.random.default_rng(seed)
    for i in rng.permutation(len(corpus)):
        tokens = tuple(corpus[i])
        seen = set()
        for k, tok in enumerate(tokens):
            w = norm(tok)
            j = windex.get(w)
            if j is None or w in seen or counts[j] >= max_occurrences:
                continue
            seen.add(w)
            counts[j] += 1
            spans.append(WordInContext(tokens, k, k + 1))
            groups.append(j)
    isolated = [j for j in range(len(vocab)) if counts[j] == 0]
    for j in isolated:
        alone = tuple(vocab[j].split()) or (vocab[j],)
        spans.append(WordInContext(alone, 0, len(alone)))
        groups.append(j)
    n_extra = len(extra_spans)
    groups.extend(range(len(vocab), len(vocab) + n_extra))
    stack, _ = layer_setup(embedder, layers)
    sums = embed_spans(embedder, spans + list(extra_spans), stack_layers=stack, batch_size=batch_size,
                       show_progress_bar=show_progress_bar, desc="word vectors",
                       groups=np.asarray(groups), n_groups=len(vocab) + n_extra)
    denom = np.maximum(counts, 1).astype(np.float64)[:, None, None]
    vectors = (sums[: len(vocab)] / denom).astype(np.float32)
    mean_seen = counts[counts > 0].mean() if (counts > 0).any() else 0.0
    logger.info("word vectors: %d words, %d from the corpus (mean %.1f sentences), %d embedded alone",
                len(vocab), len(vocab) - len(isolated), mean_seen, len(isolated))
    return DecontextualizedVectors(vocab, vectors, counts, stack), sums[len(vocab) :].astype(np.float32)


def evaluate_word_similarity(embedder: EmbedderLike, datasets: Mapping[str, Mapping[str, Sequence[WordPair]]],
                             corpus: Sequence[Sequence[str]], *, corpus_name: str, max_occurrences: int = 100,
                             postprocess="none", n_components: int | None = None,
                             fit_corpus: Sequence[Sequence[str]] | None = None, fit_corpus_name: str | None = None,
                             layers: LayerMode = "sweep", lowercase: bool = True, max_fit_tokens: int = 8192,
                             batch_size: int | None = None, show_progress_bar: bool = True,
                             seed: int = 0) -> list[SimilarityResult]:
    """Word similarity out of context with decontextualised vectors (:func:`decontextualized_word_vectors`):
    Spearman (x 100) of the cosine of the two words' vectors against the gold scores.

    Post-processing is fitted on contextual word vectors of ``fit_corpus`` (default: ``corpus`` itself) and
    applied to the averaged word vectors. For the affine post-processors here (centring, standardising, ABTT,
    whitening) that equals averaging post-processed occurrences.

    Args:
        datasets: task -> split -> pairs, e.g.
            ``{"simlex999": {"all": pairs}, "simverb3500": {"all": ..., "dev": ...}}``.
        corpus, corpus_name: the sentences the vectors come from and their label (``extra["corpus"]``).
        max_occurrences: N.
        Others: as in :func:`ctxemb.evaluation.similarity.wic.evaluate_wic` /
            :func:`decontextualized_word_vectors`.

    Rows carry ``extra``: ``n_words`` (distinct words of that split), ``n_isolated`` (of them, never seen in the
    corpus), ``mean_occurrences`` (over the seen ones), ``corpus``, ``max_occurrences``.

    Raises:
        ValueError: on an empty data set or corpus.
    """
    if not datasets:
        raise ValueError("datasets is empty")
    for task, splits in datasets.items():
        if not splits or any(not pairs for pairs in splits.values()):
            raise ValueError("word-similarity task %r has an empty split" % task)
    if not corpus:
        raise ValueError("corpus is empty")
    options = postprocess_options(postprocess, n_components)
    _, views = layer_setup(embedder, layers)
    norm = (lambda w: w.lower()) if lowercase else (lambda w: w)
    words = [norm(w) for splits in datasets.values() for pairs in splits.values() for p in pairs
             for w in (p.word1, p.word2)]
    fit_sents, fit_name = resolve_fit_corpus(options, fit_corpus, fit_corpus_name, [tuple(s) for s in corpus],
                                             corpus_name, "word similarity")
    fit_spans = sample_fit_spans(fit_sents, max_fit_tokens, seed) if fit_sents is not None else []
    dv, fit_rows = decontextualized_word_vectors(embedder, words, corpus, max_occurrences=max_occurrences,
                                                 layers=layers, lowercase=lowercase, extra_spans=fit_spans,
                                                 batch_size=batch_size, show_progress_bar=show_progress_bar, seed=seed)
    index = dv.index()
    scored = []  # (task, split, pairs, i1, i2, extra) with i1, i2 the (N,) rows of each pair's words
    for task, splits in datasets.items():
        for split, pairs in splits.items():
            i1 = np.array([index[norm(p.word1)] for p in pairs])
            i2 = np.array([index[norm(p.word2)] for p in pairs])
            used = np.unique(np.r_[i1, i2])
            seen = dv.counts[used] > 0
            extra = dict(corpus=corpus_name, max_occurrences=max_occurrences, n_words=len(used),
                         n_isolated=int((~seen).sum()),
                         mean_occurrences=float(dv.counts[used][seen].mean()) if seen.any() else 0.0)
            scored.append((task, split, pairs, i1, i2, extra))

    def score(vectors: np.ndarray, cell: ResultCell) -> list[SimilarityResult]:  # vectors (n_words, H)
        return [dataclasses.replace(cell, task=task).row(
                    split, "spearman", spearman(paired_cosine(vectors[i1], vectors[i2]), [p.score for p in pairs]),
                    len(pairs), **extra)
                for task, split, pairs, i1, i2, extra in scored]

    cell = ResultCell(task="", layer="", pooling="decontext", postprocess="", fitted_on="", model=model_label(embedder))
    return score_layer_views(dv.vectors, views, options, cell=cell, where="word similarity",
                             fit=FitRows(fit_name, "words", stacked=fit_rows), score=score)
