"""CoSimLex (Armendariz et al. 2020; SemEval-2020 Task 3): the similarity of two words inside each of two contexts.

Predicted similarity in a context is the cosine of the two marked words' vectors in it. Subtask 1, the change of
similarity between the two contexts: uncentered Pearson (the official metric) and Pearson. Subtask 2, the
similarity in each context (both contexts pooled, 2N values): Spearman, Pearson and their harmonic mean (the
official metric).

Shape legend: N examples, H hidden size.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ctxemb.evaluation.similarity.records import CoSimLexExample
from ctxemb.evaluation.similarity.results import ResultCell, SimilarityResult
from ctxemb.evaluation.similarity.scoring import paired_cosine, score_word_spans
from ctxemb.evaluation.similarity.views import LayerMode
from ctxemb.metrics.correlation import harmonic_mean, pearson, spearman, uncentered_pearson
from ctxemb.core.protocols import EmbedderLike


def evaluate_cosimlex(embedder: EmbedderLike, examples: Sequence[CoSimLexExample], *, postprocess="none",
                      n_components: int | None = None, fit_corpus: Sequence[Sequence[str]] | None = None,
                      fit_corpus_name: str | None = None, layers: LayerMode = "sweep", split: str = "test",
                      max_fit_tokens: int = 8192, batch_size: int | None = None, show_progress_bar: bool = True,
                      seed: int = 0) -> list[SimilarityResult]:
    """CoSimLex (SemEval-2020 Task 3): similarity of two words inside each of two contexts.

    Predicted similarity in a context is the cosine of the two marked words' vectors in it.

    - Subtask 1 (change, predicted ``sim2 - sim1`` against gold ``sim2 - sim1``, N values):
      "subtask1_uncentered_pearson" (official) and "subtask1_pearson".
    - Subtask 2 (both contexts' similarities pooled, 2N values): "subtask2_spearman", "subtask2_pearson" and
      "subtask2_harmonic_mean" of the two (official).

    CoSimLex has no train split: post-processing needs ``fit_corpus`` (e.g. WikiText-2 sentences).

    Args:
        split: the split name recorded in the rows.
        Others: as in :func:`ctxemb.evaluation.similarity.wic.evaluate_wic`.

    Raises:
        ValueError: on empty data, examples without gold, or post-processing without ``fit_corpus``.
    """
    if not examples:
        raise ValueError("CoSimLex examples are empty")
    if any(e.sim1 is None or e.sim2 is None for e in examples):
        raise ValueError("CoSimLex examples need gold sim1/sim2; load the full data set or pass the gold file")
    spans = [s for e in examples for s in (e.context1_word1, e.context1_word2, e.context2_word1, e.context2_word2)]
    gold1 = np.array([e.sim1 for e in examples])
    gold2 = np.array([e.sim2 for e in examples])
    n = len(examples)

    def score(X: np.ndarray, cell: ResultCell) -> list[SimilarityResult]:  # X (4N, H): w1@c1, w2@c1, w1@c2, w2@c2
        pred1, pred2 = paired_cosine(X[0::4], X[1::4]), paired_cosine(X[2::4], X[3::4])
        sp = spearman(np.r_[pred1, pred2], np.r_[gold1, gold2])
        pe = pearson(np.r_[pred1, pred2], np.r_[gold1, gold2])
        return [cell.row(split, metric, value, count) for metric, value, count in (
            ("subtask1_uncentered_pearson", uncentered_pearson(pred2 - pred1, gold2 - gold1), n),
            ("subtask1_pearson", pearson(pred2 - pred1, gold2 - gold1), n),
            ("subtask2_spearman", sp, 2 * n),
            ("subtask2_pearson", pe, 2 * n),
            ("subtask2_harmonic_mean", harmonic_mean(sp, pe), 2 * n),
        )]

    return score_word_spans(embedder, spans, task="cosimlex", label="CoSimLex", score=score, postprocess=postprocess,
                            n_components=n_components, fit_corpus=fit_corpus, fit_corpus_name=fit_corpus_name,
                            layers=layers, max_fit_tokens=max_fit_tokens, batch_size=batch_size,
                            show_progress_bar=show_progress_bar, seed=seed)
