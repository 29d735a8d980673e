"""WiC (Pilehvar & Camacho-Collados 2019): does a word have the same sense in two sentences?

The cosine of the target's two contextual vectors, thresholded at the value that maximises train accuracy;
accuracy on dev. Also a logistic regression on the cosines of all layer views plus "same surface form".

Shape legend: N examples (train then dev), H hidden size.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ctxemb.evaluation.similarity.records import WicExample
from ctxemb.evaluation.similarity.results import ResultCell, SimilarityResult
from ctxemb.evaluation.similarity.scoring import paired_cosine, score_word_spans
from ctxemb.evaluation.similarity.spans import unique_sentences
from ctxemb.evaluation.similarity.views import LayerMode
from ctxemb.metrics.classification import accuracy, best_threshold
from ctxemb.core.protocols import EmbedderLike


def evaluate_wic(embedder: EmbedderLike, train: Sequence[WicExample], dev: Sequence[WicExample], *,
                 postprocess="none", n_components: int | None = None, fit_corpus: Sequence[Sequence[str]] | None = None,
                 fit_corpus_name: str | None = None, layers: LayerMode = "sweep", logreg: bool = True,
                 max_fit_tokens: int = 8192, batch_size: int | None = None, show_progress_bar: bool = True,
                 seed: int = 0) -> list[SimilarityResult]:
    """WiC: cosine of the target's two contextual vectors, thresholded at the value best on train.

    Rows per (post-processing, layer view): "accuracy" on dev (threshold from train; ``extra["threshold"]``) and on
    train (the threshold's own accuracy, for choosing a layer without touching dev). With ``logreg`` also
    "accuracy_logreg" on dev (layer "all"): a logistic regression on the cosine of every layer view plus a
    "same surface form" feature, trained on train.

    Args:
        embedder: see :class:`ctxemb.core.protocols.EmbedderLike`.
        train, dev: labelled WiC examples (:func:`ctxemb.evaluation.similarity.data.load_wic`).
        postprocess: a name in ``POSTPROCESS_NAMES``, an unfitted estimator, or a sequence of them.
        n_components: for "abtt" (directions removed) and "whiten" (dimensions kept); None: their defaults.
        fit_corpus, fit_corpus_name: sentences (word lists) to fit post-processing on, and their label;
            default the train sentences ("wic/train").
        layers: "sweep" (every hidden state, 0 = embedding output ... L = last layer, and "last4") or "default"
            (the embedder's configuration).
        logreg: add the logistic-regression variant.
        max_fit_tokens: word vectors sampled from the fit corpus to fit each post-processor.
        batch_size: texts per forward pass; None (default): the embedder's own batching.
        show_progress_bar: show progress bars.
        seed: for the fit sample.

    Raises:
        ValueError: on empty or unlabelled data, or bad option values.
    """
    for name, data in (("train", train), ("dev", dev)):
        if not data:
            raise ValueError("WiC %s is empty" % name)
        if any(e.label is None for e in data):
            raise ValueError("WiC %s has unlabelled examples; load it with its gold file" % name)
    examples = list(train) + list(dev)
    spans = [s for e in examples for s in (e.first, e.second)]
    n_tr = len(train)
    y_tr = np.array([e.label for e in train], dtype=bool)
    y_dev = np.array([e.label for e in dev], dtype=bool)
    same_form = np.array([e.first.word.lower() == e.second.word.lower() for e in examples], dtype=np.float64)
    cosines: list[tuple[str, np.ndarray]] = []  # (layer view, (N,) cosines) of the option being scored

    def score(X: np.ndarray, cell: ResultCell) -> list[SimilarityResult]:
        cos = paired_cosine(X[0::2], X[1::2])  # (N,)
        if logreg:
            cosines.append((cell.layer, cos))
        threshold, train_acc = best_threshold(cos[:n_tr], y_tr)
        dev_acc = accuracy(y_dev, cos[n_tr:] >= threshold)
        return [cell.row("train", "accuracy", train_acc, n_tr, threshold=threshold),
                cell.row("dev", "accuracy", dev_acc, len(dev), threshold=threshold, threshold_from="wic/train")]

    def logreg_row(cell: ResultCell) -> list[SimilarityResult]:
        feats = np.column_stack([cos for _, cos in cosines] + [same_form])  # (N, n_views + 1)
        names = [layer for layer, _ in cosines] + ["same_form"]
        cosines.clear()
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        clf.fit(feats[:n_tr], y_tr)
        return [cell.row("dev", "accuracy_logreg", accuracy(y_dev, clf.predict(feats[n_tr:])), len(dev),
                         features=names, train_accuracy=100.0 * accuracy(y_tr, clf.predict(feats[:n_tr])))]

    return score_word_spans(embedder, spans, task="wic", label="WiC", score=score,
                            finish_option=logreg_row if logreg else None,
                            default_fit=(unique_sentences(spans[: 2 * n_tr]), "wic/train"), postprocess=postprocess,
                            n_components=n_components, fit_corpus=fit_corpus, fit_corpus_name=fit_corpus_name,
                            layers=layers, max_fit_tokens=max_fit_tokens, batch_size=batch_size,
                            show_progress_bar=show_progress_bar, seed=seed)
