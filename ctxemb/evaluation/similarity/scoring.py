"""The one scoring loop every similarity harness runs, and what the harnesses share around it.

:func:`score_layer_views`: for each post-processing option and each layer view, fit the option on the view's fit
rows, transform the view's target rows, and hand them to the task's ``score`` function, which turns them into
result rows. :func:`score_word_spans` puts the words-in-context pipeline in front of it (WiC, CoSimLex, graded
pairs): embed the target spans and a sample of the fit corpus in one pass, then score.

Shape legend:
    N   pairs (examples)
    P   target rows (word occurrences, sentences or words)
    T   rows a post-processor is fitted on
    S   stacked hidden states (L + 1 with ``layers="sweep"``, else 1)
    H   hidden size
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ctxemb.evaluation.similarity.records import WordInContext
from ctxemb.evaluation.similarity.results import ResultCell, SimilarityResult
from ctxemb.evaluation.similarity.spans import embed_spans, sample_fit_spans
from ctxemb.evaluation.similarity.views import (
    LayerMode,
    LayerView,
    PostprocessOption,
    apply_fitted,
    fit_label,
    fit_option,
    layer_setup,
    needs_fit,
    postprocess_options,
    take_view,
)
from ctxemb.metrics.correlation import pearson, spearman
from ctxemb.core.protocols import EmbedderLike, embedder_config_dict

# A task's scorer: the transformed (P, H) target rows of one cell -> that cell's result rows.
ScoreFn = Callable[[np.ndarray, ResultCell], list[SimilarityResult]]
# Called once per option after its views, with the cell of layer "all" (e.g. a classifier over every view).
FinishFn = Callable[[ResultCell], list[SimilarityResult]]

CORRELATIONS: dict[str, Callable[..., float]] = {"spearman": spearman, "pearson": pearson}


def paired_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows: a, b (N, H) -> (N,) float64. A zero row has cosine 0 with anything."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError("a and b must be (N, H) arrays of the same shape; got %s and %s" % (a.shape, b.shape))
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    den = na * nb
    out = np.zeros(len(a))
    ok = den > 0
    out[ok] = np.einsum("ij,ij->i", a[ok], b[ok]) / den[ok]
    return np.clip(out, -1.0, 1.0)


def model_label(embedder: EmbedderLike) -> str:
    """The model name recorded in result rows: the first of the config's model / model_name / name_or_path / name,
    else the embedder's class name."""
    d = embedder_config_dict(embedder)
    for key in ("model", "model_name", "name_or_path", "name"):
        if d.get(key):
            return str(d[key])
    return type(embedder).__name__


def check_splits(splits: Mapping[str, Sequence], task: str, example: str) -> None:
    """Refuse an empty mapping of splits or an empty split, naming the task and split.

    Raises:
        ValueError: as above.
    """
    if not splits:
        raise ValueError("splits is empty; pass e.g. {%r: pairs}" % example)
    for name, data in splits.items():
        if not data:
            raise ValueError("%s split %r is empty" % (task, name))


def split_correlations(cell: ResultCell, scores: np.ndarray, gold: np.ndarray,
                       split_sizes: Sequence[tuple[str, int]], metrics: Sequence[str]) -> list[SimilarityResult]:
    """Rows of correlations between ``scores`` and ``gold`` (N,), split by split.

    Args:
        cell: the cell the rows belong to.
        scores, gold: predictions and gold scores of the splits one after another.
        split_sizes: (split name, number of items) in the order of ``scores``.
        metrics: names in ``CORRELATIONS``, e.g. ("spearman", "pearson").
    """
    rows = []
    lo = 0
    for name, n in split_sizes:
        hi = lo + n
        for metric in metrics:
            rows.append(cell.row(name, metric, CORRELATIONS[metric](scores[lo:hi], gold[lo:hi]), n))
        lo = hi
    return rows


def resolve_fit_corpus(options: Sequence[PostprocessOption], fit_corpus: Sequence[Sequence[str]] | None,
                       fit_corpus_name: str | None, default: list[tuple[str, ...]] | None, default_name: str | None,
                       label: str) -> tuple[list[tuple[str, ...]] | None, str | None]:
    """The sentences (word tuples) post-processing is fitted on and their label: ``fit_corpus`` if given, else
    ``default`` (a task's train sentences); (None, None) when no option needs fitting.

    Raises:
        ValueError: if ``fit_corpus`` has no name, or a fit is needed with neither ``fit_corpus`` nor a default.
    """
    if not needs_fit(options):
        return None, None
    if fit_corpus is not None:
        if fit_corpus_name is None:
            raise ValueError("fit_corpus_name must name the fit corpus (it is recorded in the results)")
        return [tuple(s) for s in fit_corpus], fit_corpus_name
    if default is None:
        raise ValueError("%s has no train split to fit post-processing on: pass fit_corpus (sentences as word lists) "
                         "and fit_corpus_name" % label)
    return default, default_name


@dataclass(frozen=True)
class FitRows:
    """The rows post-processing is fitted on: a stacked array of their own, or rows of the targets.

    Attributes:
        name: the fit corpus's label, recorded in ``fitted_on`` (None when nothing is fitted).
        unit: what a row is, "words" or "sentences" (also recorded).
        stacked: (T, S, H) fit rows with the targets' stacked axis; or
        index: (T,) indices of the target rows to fit on. Exactly one of the two is given.
    """

    name: str | None
    unit: str
    stacked: np.ndarray | None = None
    index: np.ndarray | None = None

    def __post_init__(self):
        if (self.stacked is None) == (self.index is None):
            raise ValueError("FitRows needs exactly one of stacked (the fit rows) and index (into the targets)")

    @property
    def n_rows(self) -> int:
        """T."""
        return len(self.stacked if self.stacked is not None else self.index)

    def take(self, view: LayerView, target_view: np.ndarray) -> np.ndarray:
        """(T, H) float32 fit rows of ``view``; ``target_view`` is the (P, H) view of the targets."""
        return take_view(self.stacked, view) if self.stacked is not None else target_view[self.index]


def score_layer_views(targets: np.ndarray, views: Sequence[LayerView], options: Sequence[PostprocessOption], *,
                      cell: ResultCell, where: str, fit: FitRows, score: ScoreFn,
                      finish_option: FinishFn | None = None) -> list[SimilarityResult]:
    """The scoring loop: for each option, for each view, fit the option on the view's fit rows, transform the
    view's target rows and score them.

    Args:
        targets: (P, S, H) stacked target rows.
        views: the layer views to score (see :func:`ctxemb.evaluation.similarity.views.layer_setup`).
        options: the post-processing options, each fitted afresh per view.
        cell: task, pooling and model of the rows; layer, postprocess and fitted_on are filled in here.
        where: the task (and pooling) named in a fit error, e.g. "wic" or "stsb, mean pooling".
        fit: the fit rows and their label.
        score: ``score(X, cell)`` with X the (P, H) float32 transformed target rows of one view.
        finish_option: called after each option's views with the cell of layer "all".

    Returns:
        The rows, option by option, view by view.
    """
    rows: list[SimilarityResult] = []
    for option in options:
        fitted_on = fit_label(option, fit.name, fit.n_rows, fit.unit)
        option_cell = dataclasses.replace(cell, postprocess=option.label, fitted_on=fitted_on)
        for view in views:
            X = take_view(targets, view)  # (P, H)
            estimator = None
            if option.template is not None:
                estimator = fit_option(option, fit.take(view, X), "%s, layer %s" % (where, view.name))
            rows.extend(score(apply_fitted(estimator, X), dataclasses.replace(option_cell, layer=view.name)))
        if finish_option is not None:
            rows.extend(finish_option(dataclasses.replace(option_cell, layer="all")))
    return rows


def score_word_spans(embedder: EmbedderLike, spans: Sequence[WordInContext], *, task: str, label: str,
                     score: ScoreFn, finish_option: FinishFn | None = None,
                     default_fit: tuple[list[tuple[str, ...]] | None, str | None] = (None, None),
                     postprocess="none", n_components: int | None = None,
                     fit_corpus: Sequence[Sequence[str]] | None = None, fit_corpus_name: str | None = None,
                     layers: LayerMode = "sweep", max_fit_tokens: int = 8192, batch_size: int | None = None,
                     show_progress_bar: bool = True, seed: int = 0) -> list[SimilarityResult]:
    """Score words in context: embed ``spans`` and a fit sample in one pass, then run :func:`score_layer_views`
    with pooling "target".

    Args:
        embedder: see :class:`ctxemb.core.protocols.EmbedderLike`.
        spans: the target spans, in the order ``score`` expects its rows.
        task: recorded in the rows and named in fit errors, e.g. "wic".
        label: the data set's name in messages and the progress bar, e.g. "WiC".
        score, finish_option: as in :func:`score_layer_views`.
        default_fit: (sentences, label) to fit post-processing on when no ``fit_corpus`` is given, e.g. the train
            split's sentences; (None, None) when the task has none.
        Others: as in :func:`ctxemb.evaluation.similarity.wic.evaluate_wic`.

    Raises:
        ValueError: for bad options, or post-processing with neither ``fit_corpus`` nor a default.
    """
    options = postprocess_options(postprocess, n_components)
    stack, views = layer_setup(embedder, layers)
    fit_sents, fit_name = resolve_fit_corpus(options, fit_corpus, fit_corpus_name, *default_fit, label)
    fit_spans = sample_fit_spans(fit_sents, max_fit_tokens, seed) if fit_sents is not None else []
    stacked = embed_spans(embedder, list(spans) + fit_spans, stack_layers=stack, batch_size=batch_size,
                          show_progress_bar=show_progress_bar, desc=label)  # (P + T, S, H)
    n = len(spans)
    cell = ResultCell(task=task, layer="", pooling="target", postprocess="", fitted_on="", model=model_label(embedder))
    return score_layer_views(stacked[:n], views, options, cell=cell, where=task,
                             fit=FitRows(fit_name, "words", stacked=stacked[n:]), score=score,
                             finish_option=finish_option)
