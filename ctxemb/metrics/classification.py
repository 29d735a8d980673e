"""Classification metrics: accuracy and binary F1 (``sklearn.metrics``), and the threshold on a score that maximises
accuracy (WiC's cosine threshold).

Shape legend: N examples.
"""

from __future__ import annotations

import numpy as np

from ctxemb.metrics.correlation import _finite_vector


def accuracy(y_true, y_pred) -> float:
    """Fraction of equal entries of two (N,) label sequences, N >= 1.

    Raises:
        ValueError: if either is not 1-D, the lengths differ, or they are empty.
    """
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.ndim != 1 or p.ndim != 1 or len(t) != len(p):
        raise ValueError("y_true and y_pred must be 1-D of the same length; got shapes %s and %s" % (t.shape, p.shape))
    if len(t) == 0:
        raise ValueError("accuracy needs at least one example")
    from sklearn.metrics import accuracy_score  # imported when used: sklearn costs ~2 s at start-up

    return float(accuracy_score(t, p))


def binary_f1(y_true, y_pred, positive: int = 1) -> float:
    """F1 of the ``positive`` class (MRPC's "equivalent" = 1, as GLUE reports it): 2PR / (P + R); 0 when the
    class is never predicted or never present.

    Raises:
        ValueError: if either is not 1-D, the lengths differ, or they are empty.
    """
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.ndim != 1 or p.ndim != 1 or len(t) != len(p) or len(t) == 0:
        raise ValueError("y_true and y_pred must be non-empty 1-D of the same length; got shapes %s and %s"
                         % (t.shape, p.shape))
    from sklearn.metrics import f1_score

    return float(f1_score(t == positive, p == positive, zero_division=0.0))


def best_threshold(scores, labels) -> tuple[float, float]:
    """The threshold t that maximises the accuracy of ``scores >= t`` against boolean ``labels``.

    Every distinct cut is tried (all positive, all negative, and between each pair of neighbouring distinct
    scores), in O(N log N). Among equally good cuts the lowest is chosen; the threshold returned is the midpoint
    between the two scores around the cut (-inf / +inf for all positive / all negative), so that it generalises.

    Args:
        scores: (N,) real scores, higher meaning "more likely True".
        labels: (N,) booleans (or 0/1).

    Returns:
        (threshold, accuracy on these scores).

    Raises:
        ValueError: on empty or mismatched input, NaN scores, or labels other than 0/1/True/False.
    """
    s = _finite_vector(scores, "scores")
    y = np.asarray(labels)
    if y.shape != s.shape:
        raise ValueError("labels must have the same shape as scores; got %s and %s" % (y.shape, s.shape))
    if y.dtype != bool:
        if not np.isin(y, (0, 1)).all():
            raise ValueError("labels must be booleans or 0/1; got values %s" % np.unique(y)[:5])
        y = y.astype(bool)
    distinct = np.unique(s)
    cuts = np.r_[distinct, np.inf]  # predict True for s >= cuts[k]
    pos, neg = np.sort(s[y]), np.sort(s[~y])
    true_pos = len(pos) - np.searchsorted(pos, cuts, side="left")
    true_neg = np.searchsorted(neg, cuts, side="left")
    acc = (true_pos + true_neg) / len(s)
    k = int(np.argmax(acc))
    if k == 0:
        threshold = -np.inf
    elif k == len(distinct):
        threshold = np.inf
    else:
        threshold = float((distinct[k - 1] + distinct[k]) / 2.0)
    return float(threshold), float(acc[k])
