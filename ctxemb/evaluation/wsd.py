"""Running word sense disambiguation over a Raganato et al. (2017) data set and scoring it.

:func:`evaluate_wsd` runs a :class:`~ctxemb.wsd.disambiguate.Disambiguator` over every instance of a data set;
:func:`evaluate_first_sense` is the WordNet first-sense baseline. Both score with :mod:`ctxemb.metrics.wsd`
(``Scorer.java``-exact), overall and per part of speech.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Mapping

from ctxemb.metrics.wsd import WSDScore, score, score_by_pos, write_key_file
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.corpus import Corpus, read_dataset
from ctxemb.wsd.disambiguate import Disambiguator, SensePrediction

logger = logging.getLogger(__name__)

__all__ = ["WSDEvaluation", "evaluate_wsd", "evaluate_first_sense"]


@dataclass
class WSDEvaluation:
    """The result of :func:`evaluate_wsd` on one data set.

    Attributes:
        dataset: the data set's name.
        overall: the overall score.
        per_pos: score per POS tag.
        predictions: instance id -> predicted key (instances without candidates are absent).
        details: instance id -> the full :class:`~ctxemb.wsd.disambiguate.SensePrediction`.
        n_backed_off: predictions that used the back-off (no candidate sense in the store).
        seconds: wall time of disambiguation (embedding included).
    """

    dataset: str
    overall: WSDScore
    per_pos: dict[str, WSDScore]
    predictions: dict[str, str]
    details: dict[str, SensePrediction] = field(repr=False, default_factory=dict)
    n_backed_off: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """JSON-able summary: percentages, counts and per-POS scores (no per-instance details)."""
        d = self.overall.as_percent()
        d.update(
            n_answered=self.overall.n_answered,
            n_backed_off=self.n_backed_off,
            seconds=self.seconds,
            per_pos={k: v.as_percent() for k, v in self.per_pos.items()},
        )
        return d


def _gold_corpus(dataset: Corpus | str | os.PathLike) -> tuple[Corpus, dict[str, tuple[str, ...]]]:
    """The data set (read if given as a path) and its gold keys; raises ValueError if it has none."""
    corpus = dataset if isinstance(dataset, Corpus) else read_dataset(dataset)
    gold = corpus.gold()
    if not gold:
        raise ValueError("dataset %r has no gold keys to score against" % corpus.name)
    return corpus, gold


def _scored(corpus: Corpus, gold: Mapping[str, tuple[str, ...]], predictions: dict[str, str],
            **fields) -> WSDEvaluation:
    """Score ``predictions`` overall and per POS (the POS of each instance as the data set gives it)."""
    pos_of = {i.id: i.pos for i in corpus.instances()}
    return WSDEvaluation(
        dataset=corpus.name,
        overall=score(gold, predictions),
        per_pos=score_by_pos(gold, predictions, pos_of),
        predictions=predictions,
        **fields,
    )


def evaluate_wsd(
    disambiguator: Disambiguator,
    dataset: Corpus | str | os.PathLike,
    *,
    predictions_path: str | os.PathLike | None = None,
    embeddings=None,
    show_progress_bar: bool = True,
) -> WSDEvaluation:
    """Disambiguate every instance of a Raganato-format data set and score the answers.

    Args:
        disambiguator: the system to evaluate.
        dataset: a :class:`~ctxemb.wsd.corpus.Corpus`, or a data set folder / ``.data.xml`` path.
        predictions_path: if given, also write the predictions there as a key file for ``Scorer.java``.
        embeddings: optional precomputed word embeddings, one (W_i, H) array per sentence of the data set, in
            order (see :meth:`~ctxemb.wsd.disambiguate.Disambiguator.predict_corpus`).
        show_progress_bar: show a tqdm bar while embedding.

    Returns:
        A :class:`WSDEvaluation`.

    Raises:
        ValueError: the data set has no gold keys.
    """
    corpus, gold = _gold_corpus(dataset)
    t0 = time.perf_counter()
    details = disambiguator.predict_corpus(corpus, embeddings=embeddings, show_progress_bar=show_progress_bar)
    seconds = time.perf_counter() - t0
    predictions = {iid: p.sense_key for iid, p in details.items() if p.sense_key is not None}
    if predictions_path is not None:
        write_key_file(predictions, predictions_path)
    result = _scored(corpus, gold, predictions, details=details,
                     n_backed_off=sum(p.backed_off for p in details.values()), seconds=seconds)
    logger.info(
        "%s: F1 %.1f (P %.1f, R %.1f) on %d instances, %d backed off, %.1f s",
        corpus.name,
        100 * result.overall.f1,
        100 * result.overall.precision,
        100 * result.overall.recall,
        result.overall.n_gold,
        result.n_backed_off,
        seconds,
    )
    return result


def evaluate_first_sense(dataset: Corpus | str | os.PathLike) -> WSDEvaluation:
    """The WordNet first-sense baseline: every instance gets the first sense of its lemma and POS.

    Args:
        dataset: a :class:`~ctxemb.wsd.corpus.Corpus`, or a data set folder / ``.data.xml`` path.

    Returns:
        A :class:`WSDEvaluation` (``details`` empty; every answer counts as backed off).

    Raises:
        ValueError: the data set has no gold keys.
    """
    corpus, gold = _gold_corpus(dataset)
    t0 = time.perf_counter()
    predictions = {}
    for inst in corpus.instances():
        key = wnu.first_sense(inst.lemma, inst.pos)
        if key is not None:
            predictions[inst.id] = key
    return _scored(corpus, gold, predictions, n_backed_off=len(predictions), seconds=time.perf_counter() - t0)
