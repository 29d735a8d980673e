"""Scoring word sense disambiguation the way the Raganato et al. (2017) framework's ``Scorer.java`` does.

For every instance the system answers (and the gold standard knows), each of its ``k`` distinct answers counts
``1/k`` as correct if it is among the gold keys, else ``1/k`` as wrong. Then::

    P  = correct / (correct + wrong)          # NaN when the system answers nothing, as in Java
    R  = correct / number of gold instances
    F1 = 2 P R / (P + R)                      # 0 when P + R == 0

Key files are read with the Java scorer's rules: lines are split on single spaces, a line with fewer than two
fields is skipped, repeated ids merge their answers. Per-POS scores restrict both sides to the instances of one
POS (the way the framework's per-POS key files are scored).

:func:`evaluate_wsd` runs a :class:`~ctxemb.wsd.disambiguate.Disambiguator` on a Raganato-format data set and
scores it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from ctxemb.paths import atomic_write

if TYPE_CHECKING:  # evaluation sits above wsd; import lazily at run time
    from ctxemb.wsd.corpus import Corpus
    from ctxemb.wsd.disambiguate import Disambiguator, SensePrediction

logger = logging.getLogger(__name__)

__all__ = [
    "WSDScore",
    "WSDEvaluation",
    "read_key_file",
    "write_key_file",
    "score",
    "score_files",
    "score_by_pos",
    "evaluate_wsd",
    "evaluate_first_sense",
]


@dataclass(frozen=True)
class WSDScore:
    """Precision, recall and F1 (fractions in [0, 1]; multiply by 100 for the framework's percentages).

    Attributes:
        precision: correct / answered weight; NaN if nothing was answered (as ``Scorer.java`` gives).
        recall: correct / ``n_gold``.
        f1: harmonic mean of the two; 0 when both are 0, NaN when precision is NaN.
        n_gold: instances in the gold standard.
        n_answered: gold instances the system answered.
        correct: summed credit (``1/k`` per right answer among ``k``).
    """

    precision: float
    recall: float
    f1: float
    n_gold: int
    n_answered: int
    correct: float

    def as_percent(self) -> dict[str, float]:
        """``{"P", "R", "F1"}`` in percent (unrounded) plus ``"n"`` (gold instances)."""
        return {"P": 100 * self.precision, "R": 100 * self.recall, "F1": 100 * self.f1, "n": self.n_gold}

    def java_lines(self) -> str:
        """The three lines ``Scorer.java`` prints (``P=\\t62.3%`` ...)."""
        return "".join("%s=\t%s%%\n" % (n, _java_format(v)) for n, v in zip(("P", "R", "F1"), self[:3]))

    def __getitem__(self, i):  # (P, R, F1) unpacking, like the Java Double[3]
        return (self.precision, self.recall, self.f1)[i]


def _java_format(x: float) -> str:
    # String.format("%.1f", x*100): NaN prints as "NaN"; Java rounds half-up, Python half-even on the binary value.
    if math.isnan(x):
        return "NaN"
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(repr(x * 100)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def read_key_file(path: str | os.PathLike) -> dict[str, set[str]]:
    """Read a key file with ``Scorer.java``'s rules.

    Lines are split on single spaces (so a double space yields an empty answer, as in Java), trailing empty
    fields are dropped, lines with fewer than two fields are skipped with a warning, and repeated ids merge.

    Returns:
        Instance id -> set of answers.

    Raises:
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError("key file %s does not exist" % path)
    keys: dict[str, set[str]] = {}
    with open(path, encoding="utf-8", newline=None) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.rstrip("\r\n").split(" ")
            while fields and fields[-1] == "":  # Java's String.split drops trailing empty strings
                fields.pop()
            if len(fields) < 2:
                logger.warning("%s line %d not complete: %r", path, lineno, line.rstrip("\r\n"))
                continue
            keys.setdefault(fields[0], set()).update(fields[1:])
    return keys


def write_key_file(predictions: Mapping[str, str | Sequence[str]], path: str | os.PathLike) -> None:
    """Write predictions as a key file the official scorer reads (atomically).

    Args:
        predictions: instance id -> one sense key or a sequence of keys. Instances mapped to None or an empty
            sequence are left out (unanswered).
        path: the file to write; parent folders are created.

    Raises:
        ValueError: an id or key contains whitespace (it would split into several fields).
    """
    with atomic_write(path, encoding="utf-8") as f:
        for iid, keys in predictions.items():
            if keys is None:
                continue
            keys = [keys] if isinstance(keys, str) else list(keys)
            if not keys:
                continue
            for token in [iid, *keys]:
                if not token or any(c.isspace() for c in token):
                    raise ValueError("instance id and keys must be non-empty without whitespace, got %r" % token)
            f.write(iid + " " + " ".join(keys) + "\n")


def _as_sets(answers: Mapping[str, str | Collection[str]]) -> dict[str, set[str]]:
    out = {}
    for iid, keys in answers.items():
        if keys is None:
            continue
        s = {keys} if isinstance(keys, str) else set(keys)
        if s:
            out[iid] = s
    return out


def score(
    gold: Mapping[str, str | Collection[str]],
    system: Mapping[str, str | Collection[str]],
) -> WSDScore:
    """Score system answers against gold keys exactly as ``Scorer.score`` does.

    Args:
        gold: instance id -> gold key(s).
        system: instance id -> answered key(s); ids the gold standard lacks are ignored, None/empty = unanswered.

    Returns:
        The :class:`WSDScore`.
    """
    gold_sets = _as_sets(gold)
    system_sets = _as_sets(system)
    ok = notok = 0.0
    answered = 0
    for iid, answers in system_sets.items():
        g = gold_sets.get(iid)
        if g is None:
            continue
        answered += 1
        local_ok = sum(1 for a in answers if a in g)
        ok += local_ok / len(answers)
        notok += (len(answers) - local_ok) / len(answers)
    p = ok / (ok + notok) if ok + notok > 0 else math.nan
    r = ok / len(gold_sets) if gold_sets else math.nan
    if p + r == 0.0:
        f1 = 0.0
    else:
        f1 = 2 * p * r / (p + r)  # NaN propagates as in Java
    return WSDScore(p, r, f1, len(gold_sets), answered, ok)


def score_files(gold_path: str | os.PathLike, system_path: str | os.PathLike) -> WSDScore:
    """:func:`score` on two key files read with :func:`read_key_file` (the ``Scorer.java`` command line)."""
    return score(read_key_file(gold_path), read_key_file(system_path))


def score_by_pos(
    gold: Mapping[str, str | Collection[str]],
    system: Mapping[str, str | Collection[str]],
    pos_of: Mapping[str, str],
) -> dict[str, WSDScore]:
    """Scores per part of speech, each computed with :func:`score` on the instances of that POS.

    Args:
        gold: instance id -> gold key(s).
        system: instance id -> answered key(s).
        pos_of: instance id -> POS tag (e.g. from the data set's XML). Gold instances missing here are counted
            under ``"?"``.

    Returns:
        POS tag -> score, tags sorted.
    """
    by_pos: dict[str, dict[str, str | Collection[str]]] = {}
    for iid, keys in gold.items():
        by_pos.setdefault(pos_of.get(iid, "?"), {})[iid] = keys
    return {
        tag: score(g, {iid: system[iid] for iid in g if iid in system}) for tag, g in sorted(by_pos.items())
    }


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
    details: dict[str, "SensePrediction"] = field(repr=False, default_factory=dict)
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


def evaluate_wsd(
    disambiguator: "Disambiguator",
    dataset: "Corpus | str | os.PathLike",
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
    from ctxemb.wsd.corpus import Corpus, read_dataset

    corpus = dataset if isinstance(dataset, Corpus) else read_dataset(dataset)
    gold = corpus.gold()
    if not gold:
        raise ValueError("dataset %r has no gold keys to score against" % corpus.name)
    t0 = time.perf_counter()
    details = disambiguator.predict_corpus(corpus, embeddings=embeddings, show_progress_bar=show_progress_bar)
    seconds = time.perf_counter() - t0
    predictions = {iid: p.sense_key for iid, p in details.items() if p.sense_key is not None}
    if predictions_path is not None:
        write_key_file(predictions, predictions_path)
    pos_of = {i.id: i.pos for i in corpus.instances()}
    result = WSDEvaluation(
        dataset=corpus.name,
        overall=score(gold, predictions),
        per_pos=score_by_pos(gold, predictions, pos_of),
        predictions=predictions,
        details=details,
        n_backed_off=sum(p.backed_off for p in details.values()),
        seconds=seconds,
    )
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


def evaluate_first_sense(dataset: "Corpus | str | os.PathLike") -> WSDEvaluation:
    """The WordNet first-sense baseline: every instance gets the first sense of its lemma and POS.

    Args:
        dataset: a :class:`~ctxemb.wsd.corpus.Corpus`, or a data set folder / ``.data.xml`` path.

    Returns:
        A :class:`WSDEvaluation` (``details`` empty; every answer counts as backed off).
    """
    from ctxemb.wsd import wordnet as wnu
    from ctxemb.wsd.corpus import Corpus, read_dataset

    corpus = dataset if isinstance(dataset, Corpus) else read_dataset(dataset)
    gold = corpus.gold()
    if not gold:
        raise ValueError("dataset %r has no gold keys to score against" % corpus.name)
    t0 = time.perf_counter()
    predictions = {}
    for inst in corpus.instances():
        key = wnu.first_sense(inst.lemma, inst.pos)
        if key is not None:
            predictions[inst.id] = key
    pos_of = {i.id: i.pos for i in corpus.instances()}
    return WSDEvaluation(
        dataset=corpus.name,
        overall=score(gold, predictions),
        per_pos=score_by_pos(gold, predictions, pos_of),
        predictions=predictions,
        n_backed_off=len(predictions),
        seconds=time.perf_counter() - t0,
    )
