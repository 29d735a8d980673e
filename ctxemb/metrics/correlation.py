"""Correlations between predicted and gold scores: Pearson, Spearman (scipy.stats), uncentered Pearson and the
harmonic mean that CoSimLex uses to combine two correlations.

Every function takes plain sequences of finite numbers and returns a Python float. A correlation with a constant
input is undefined: it is NaN, and one warning is logged (scipy would emit a ConstantInputWarning instead).

Shape legend: N values per sequence.
"""

from __future__ import annotations

import logging
import math

import numpy as np

logger = logging.getLogger(__name__)


def _finite_vector(x, name: str, min_len: int = 1) -> np.ndarray:
    """``x`` as a 1-D float64 array of at least ``min_len`` finite values.

    Raises:
        ValueError: if ``x`` is not 1-D, is too short, or holds NaN or infinity.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("%s must be 1-D; got shape %s" % (name, arr.shape))
    if len(arr) < min_len:
        raise ValueError("%s needs at least %d values; got %d" % (name, min_len, len(arr)))
    if not np.isfinite(arr).all():
        raise ValueError("%s contains NaN or infinity (%d values)" % (name, int((~np.isfinite(arr)).sum())))
    return arr


def _finite_pair(x, y, min_len: int = 2) -> tuple[np.ndarray, np.ndarray]:
    x, y = _finite_vector(x, "x", min_len), _finite_vector(y, "y", min_len)
    if len(x) != len(y):
        raise ValueError("x and y must have the same length; got %d and %d" % (len(x), len(y)))
    return x, y


def _is_constant(a: np.ndarray) -> bool:
    return bool((a == a[0]).all())


def rankdata(x) -> np.ndarray:
    """Ranks 1..N of the values of ``x`` (N,), ties given the average of the ranks they span
    (``scipy.stats.rankdata(method="average")``), as float64.

    Raises:
        ValueError: if ``x`` is not 1-D, is empty, or holds NaN or infinity.
    """
    from scipy import stats  # imported when used: scipy.stats costs ~1 s at start-up

    return np.asarray(stats.rankdata(_finite_vector(x, "x"), method="average"), dtype=np.float64)


def pearson(x, y) -> float:
    """Pearson correlation of two (N,) sequences, N >= 2 (``scipy.stats.pearsonr``).

    Returns:
        The correlation in [-1, 1]; NaN (with a logged warning) if either sequence is constant.

    Raises:
        ValueError: if the lengths differ, N < 2, or a value is NaN or infinite.
    """
    from scipy import stats

    return _correlation(x, y, "Pearson", stats.pearsonr)


def spearman(x, y) -> float:
    """Spearman rank correlation of two (N,) sequences, N >= 2: the Pearson correlation of their average ranks
    (``scipy.stats.spearmanr``).

    Returns:
        The correlation in [-1, 1]; NaN (with a logged warning) if either sequence is constant.

    Raises:
        ValueError: if the lengths differ, N < 2, or a value is NaN or infinite.
    """
    from scipy import stats

    return _correlation(x, y, "Spearman", stats.spearmanr)


def _correlation(x, y, name: str, scipy_fn) -> float:
    x, y = _finite_pair(x, y)
    if _is_constant(x) or _is_constant(y):
        logger.warning("%s correlation is undefined for constant input; returning NaN", name)
        return float("nan")
    return float(scipy_fn(x, y).statistic)


def uncentered_pearson(x, y) -> float:
    """Uncentered Pearson correlation ``sum(x y) / sqrt(sum(x^2) sum(y^2))`` (the cosine of x and y): the official
    metric of CoSimLex subtask 1, where the sign of a change matters, so the values are not centred.

    Returns:
        The correlation in [-1, 1]; NaN (with a logged warning) if either sequence is all zeros.

    Raises:
        ValueError: if the lengths differ, a sequence is empty, or a value is NaN or infinite.
    """
    x, y = _finite_pair(x, y, min_len=1)
    den = math.sqrt(float(x @ x) * float(y @ y))
    if den == 0.0:
        logger.warning("uncentered Pearson correlation is undefined for an all-zero input; returning NaN")
        return float("nan")
    return float(np.clip((x @ y) / den, -1.0, 1.0))


def harmonic_mean(a: float, b: float) -> float:
    """Harmonic mean ``2ab / (a + b)`` of two correlations (CoSimLex subtask 2 combines Spearman and Pearson so).

    Meaningful when both are positive (``scipy.stats.hmean`` refuses negative values, so it is written out);
    NaN if either is NaN or ``a + b == 0``.
    """
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b) or a + b == 0.0:
        return float("nan")
    return 2.0 * a * b / (a + b)
