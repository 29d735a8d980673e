"""One word in two contexts with a graded gold score (CoInCo usage similarity, SCWS): Spearman of the cosine of
the two target vectors against the gold scores.

Shape legend: N pairs (all splits, one after another), H hidden size.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import numpy as np

from ctxemb.evaluation.similarity.records import WordInContext
from ctxemb.evaluation.similarity.results import ResultCell, SimilarityResult
from ctxemb.evaluation.similarity.scoring import check_splits, paired_cosine, score_word_spans, split_correlations
from ctxemb.evaluation.similarity.spans import unique_sentences
from ctxemb.evaluation.similarity.views import LayerMode
from ctxemb.core.protocols import EmbedderLike


class GradedPair(Protocol):
    """One word in two contexts with a graded gold score (:class:`UsimExample`, :class:`ScwsExample`)."""

    first: WordInContext
    second: WordInContext
    score: float


def evaluate_graded_pairs(embedder: EmbedderLike, splits: Mapping[str, Sequence[GradedPair]], *, task: str,
                          postprocess="none", n_components: int | None = None,
                          fit_corpus: Sequence[Sequence[str]] | None = None, fit_corpus_name: str | None = None,
                          layers: LayerMode = "sweep", max_fit_tokens: int = 8192, batch_size: int | None = None,
                          show_progress_bar: bool = True, seed: int = 0) -> list[SimilarityResult]:
    """Graded similarity of a word in two contexts (CoInCo usage similarity, SCWS): Spearman of the cosine of the
    two target vectors against the gold score, per split ("spearman").

    Args:
        splits: split name -> pairs, e.g. ``{"train": ..., "test": ...}``. Post-processing fits on the "train"
            split's sentences when there is one and no ``fit_corpus`` is given.
        task: the task name recorded in the rows, e.g. "usim" or "scws".
        Others: as in :func:`ctxemb.evaluation.similarity.wic.evaluate_wic`.

    Raises:
        ValueError: on an empty split or post-processing with neither a "train" split nor ``fit_corpus``.
    """
    check_splits(splits, task, example="test")
    names = list(splits)
    pairs = [e for name in names for e in splits[name]]
    spans = [s for e in pairs for s in (e.first, e.second)]
    default = unique_sentences(s for e in splits["train"] for s in (e.first, e.second)) if "train" in splits else None
    gold = np.array([e.score for e in pairs], dtype=np.float64)
    sizes = [(name, len(splits[name])) for name in names]

    def score(X: np.ndarray, cell: ResultCell) -> list[SimilarityResult]:
        return split_correlations(cell, paired_cosine(X[0::2], X[1::2]), gold, sizes, ("spearman",))

    return score_word_spans(embedder, spans, task=task, label=task, score=score,
                            default_fit=(default, "%s/train" % task), postprocess=postprocess,
                            n_components=n_components, fit_corpus=fit_corpus, fit_corpus_name=fit_corpus_name,
                            layers=layers, max_fit_tokens=max_fit_tokens, batch_size=batch_size,
                            show_progress_bar=show_progress_bar, seed=seed)
