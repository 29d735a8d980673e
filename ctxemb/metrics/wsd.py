"""Scoring word sense disambiguation the way the Raganato et al. (2017) framework's ``Scorer.java`` does.

For every instance the system answers (and the gold standard knows), each of its ``k`` distinct answers counts
``1/k`` as correct if it is among the gold keys, else ``1/k`` as wrong. Then::

    P  = correct / (correct + wrong)          # NaN when the system answers nothing, as in Java
    R  = correct / number of gold instances
    F1 = 2 P R / (P + R)                      # 0 when P + R == 0

Key files are read with the Java scorer's rules: lines are split on single spaces, a line with fewer than two
fields is skipped, repeated ids merge their answers. Per-POS scores restrict both sides to the instances of one
POS (the way the framework's per-POS key files are scored).

Pure functions on instance ids and sense keys (no models, no WordNet): :mod:`ctxemb.evaluation.wsd` runs a
disambiguator over a data set and scores its answers with them.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Collection, Mapping, Sequence

from ctxemb.core.atomic import atomic_write

logger = logging.getLogger(__name__)

__all__ = [
    "WSDScore",
    "read_key_file",
    "write_key_file",
    "score",
    "score_files",
    "score_by_pos",
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
