"""Sentence similarity (STS-B, SICK-R): Spearman and Pearson of the cosine of two sentence vectors, for [CLS] and
mean pooling of the last layer (:meth:`embed_sentences`) and for word-mean pooling of every layer view.

Shape legend:
    N   pairs (all splits, one after another)
    P   distinct texts (the pairs' sentences, then the fit sentences)
    S   stacked hidden states
    H   hidden size
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from ctxemb.core.validation import check_choice
from ctxemb.evaluation.similarity.options import SENTENCE_POOLINGS, SentencePooling
from ctxemb.evaluation.similarity.records import SentencePair, WordInContext
from ctxemb.evaluation.similarity.results import ResultCell, SimilarityResult
from ctxemb.evaluation.similarity.scoring import (
    FitRows,
    check_splits,
    model_label,
    paired_cosine,
    score_layer_views,
    split_correlations,
)
from ctxemb.evaluation.similarity.spans import embed_spans
from ctxemb.evaluation.similarity.views import (
    LayerMode,
    LayerView,
    PostprocessOption,
    layer_setup,
    needs_fit,
    postprocess_options,
)
from ctxemb.core.protocols import EmbedderLike, batch_size_kwargs



def evaluate_sentence_similarity(embedder: EmbedderLike, splits: Mapping[str, Sequence[SentencePair]], *, task: str,
                                 poolings: Sequence[SentencePooling] = SENTENCE_POOLINGS, postprocess="none",
                                 n_components: int | None = None, fit_texts: Sequence[str] | None = None,
                                 fit_name: str | None = None, layers: LayerMode = "sweep",
                                 max_fit_sentences: int = 20000, batch_size: int | None = None,
                                 show_progress_bar: bool = True, seed: int = 0) -> list[SimilarityResult]:
    """Sentence similarity (STS-B, SICK-R): Spearman and Pearson (x 100) of the cosine of two sentence vectors.

    Poolings:
        "cls": the [CLS] vector of the last layer (``embed_sentences(pooling="cls", layers=[-1])``), layer "last".
        "mean": the mean of the last layer's token vectors, special tokens included, as sentence-transformers
            (``embed_sentences(pooling="mean", layers=[-1])``), layer "last".
        "layers": the mean of the sentence's word vectors (whitespace-split words) for each layer view, pooling
            "word-mean"; with ``layers="sweep"`` every hidden state (0 = embedding output ... L = last layer),
            "last4" and "first-last".

    Post-processing is fitted on sentence vectors made the same way: of ``fit_texts`` if given, else of the
    "train" split's sentences; at most ``max_fit_sentences`` of them (a seeded sample).

    Args:
        splits: split name -> pairs, e.g. ``{"train": ..., "dev": ...}``; every split is scored.
        task: recorded in the rows ("stsb", "sick").
        poolings: names in ``SENTENCE_POOLINGS``.
        fit_texts, fit_name: texts to fit post-processing on, and their label.
        max_fit_sentences: the most fit sentences used.
        Others: as in :func:`ctxemb.evaluation.similarity.wic.evaluate_wic`.

    Raises:
        ValueError: on an empty split, an unknown pooling, or post-processing with neither "train" nor ``fit_texts``.
    """
    check_splits(splits, task, example="dev")
    poolings = list(poolings)
    if not poolings:
        raise ValueError("poolings is empty; choose from %s" % (SENTENCE_POOLINGS,))
    for p in poolings:
        check_choice(p, "pooling", SENTENCE_POOLINGS)
    options = postprocess_options(postprocess, n_components)
    names = list(splits)
    pairs = [p for n in names for p in splits[n]]
    fit_list, fit_name = _fit_sentences(options, splits, fit_texts, fit_name, task, max_fit_sentences, seed)
    texts = list(dict.fromkeys(unique_texts(pairs) + fit_list))  # the pairs' sentences, then the fit-only ones
    position = {t: i for i, t in enumerate(texts)}
    idx1 = np.array([position[p.sentence1] for p in pairs])
    idx2 = np.array([position[p.sentence2] for p in pairs])
    fit = FitRows(fit_name, "sentences", index=np.array([position[t] for t in fit_list], dtype=np.int64))
    gold = np.array([p.score for p in pairs], dtype=np.float64)
    sizes = [(name, len(splits[name])) for name in names]
    cell = ResultCell(task=task, layer="", pooling="", postprocess="", fitted_on="", model=model_label(embedder))

    def score(X: np.ndarray, cell: ResultCell) -> list[SimilarityResult]:  # X (P, H)
        return split_correlations(cell, paired_cosine(X[idx1], X[idx2]), gold, sizes, ("spearman", "pearson"))

    rows: list[SimilarityResult] = []
    for pooling in poolings:
        if pooling in ("cls", "mean"):
            vectors = np.asarray(embedder.embed_sentences(texts, pooling=pooling, **batch_size_kwargs(batch_size),
                                                          show_progress_bar=show_progress_bar, layers=(-1,),
                                                          layer_pooling="mean", normalize=False),
                                 dtype=np.float32)  # unnormalised, whatever the model's modules: post-processing
                                                    # is fitted on the raw vectors
            if vectors.ndim != 2 or vectors.shape[0] != len(texts):
                raise RuntimeError("embed_sentences returned shape %s for %d texts" % (vectors.shape, len(texts)))
            stacked, views, label = vectors[:, None, :], [LayerView("last", (0,))], pooling  # (P, 1, H)
        else:
            stack, views = layer_setup(embedder, layers, first_last=True)
            stacked = embed_spans(embedder, _whole_sentences(texts, task), stack_layers=stack, batch_size=batch_size,
                                  show_progress_bar=show_progress_bar, desc="%s words" % task)  # (P, S, H)
            label = "word-mean"
        # View by view, each under every option: the order sentence rows have always come in.
        for view in views:
            rows.extend(score_layer_views(stacked, [view], options, cell=dataclasses.replace(cell, pooling=label),
                                          where="%s, %s pooling" % (task, label), fit=fit, score=score))
    return rows


def _fit_sentences(options: Sequence[PostprocessOption], splits: Mapping[str, Sequence[SentencePair]],
                   fit_texts: Sequence[str] | None, fit_name: str | None, task: str, max_fit_sentences: int,
                   seed: int) -> tuple[list[str], str | None]:
    """The distinct sentences post-processing is fitted on (a seeded sample of at most ``max_fit_sentences``) and
    their label; none when no option needs fitting."""
    if not needs_fit(options):
        return [], fit_name
    if fit_texts is not None:
        if fit_name is None:
            raise ValueError("fit_name must name fit_texts (it is recorded in the results)")
        candidates = list(dict.fromkeys(fit_texts))
    elif "train" in splits:
        candidates = unique_texts(splits["train"])
        fit_name = "%s/train" % task
    else:
        raise ValueError("%s has no 'train' split to fit post-processing on: pass fit_texts and fit_name" % task)
    if len(candidates) > max_fit_sentences:
        keep = np.sort(np.random.default_rng(seed).choice(len(candidates), max_fit_sentences, replace=False))
        candidates = [candidates[i] for i in keep]
    return candidates, fit_name


def unique_texts(pairs: Sequence[SentencePair]) -> list[str]:
    """The distinct sentences of ``pairs`` in first-seen order (sentence1, sentence2, next pair, ...)."""
    return list(dict.fromkeys(t for p in pairs for t in (p.sentence1, p.sentence2)))


def _whole_sentences(texts: Sequence[str], task: str) -> list[WordInContext]:
    """Each text as one span over all its whitespace-split words."""
    spans = []
    for t in texts:
        words = tuple(t.split())
        if not words:
            raise ValueError("%s has an empty sentence; cannot pool its words" % task)
        spans.append(WordInContext(words, 0, len(words)))
    return spans
