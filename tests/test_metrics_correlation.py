"""ctxemb.metrics.correlation: parity with scipy.stats, with the hand-written versions it replaced (on ties), and
the edge cases callers rely on (constant input gives NaN and a logged warning, bad input raises)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from scipy import stats

from ctxemb.metrics.correlation import harmonic_mean, pearson, rankdata, spearman, uncentered_pearson


# ---- the implementations ctxemb used before scipy.stats (kept here as a reference) ------------------------------


def _old_rankdata(x):
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    new_group = np.r_[True, xs[1:] != xs[:-1]]
    starts = np.flatnonzero(new_group)
    counts = np.diff(np.r_[starts, len(x)])
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(starts + (counts + 1) / 2.0, counts)
    return ranks


def _old_pearson(x, y):
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float(xc @ xc) * float(yc @ yc))
    return float("nan") if den == 0.0 else float(np.clip((xc @ yc) / den, -1.0, 1.0))


def _old_spearman(x, y):
    return _old_pearson(_old_rankdata(x), _old_rankdata(y))


def _tied(seed: int, n: int = 200):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, n).astype(float)  # six values: heavy ties
    y = np.round(x + rng.normal(0, 2, n), 1)  # rounded: ties too
    y[::7] = y[0]
    return x, y


@pytest.mark.parametrize("seed", range(5))
def test_same_as_the_old_hand_written_versions_on_ties(seed):
    x, y = _tied(seed)
    np.testing.assert_array_equal(rankdata(y), _old_rankdata(y))  # average ranks are exact (halves)
    assert pearson(x, y) == pytest.approx(_old_pearson(x, y), abs=1e-14)
    assert spearman(x, y) == pytest.approx(_old_spearman(x, y), abs=1e-14)


@pytest.mark.parametrize("seed", range(3))
def test_match_scipy(seed):
    x, y = _tied(seed, 60)
    assert pearson(x, y) == stats.pearsonr(x, y).statistic
    assert spearman(x, y) == stats.spearmanr(x, y).statistic
    np.testing.assert_array_equal(rankdata(y), stats.rankdata(y, method="average"))
    assert rankdata(y).dtype == np.float64
    assert uncentered_pearson(x - 2, y) == pytest.approx(float((x - 2) @ y / np.linalg.norm(x - 2) / np.linalg.norm(y)),
                                                         abs=1e-12)
    assert harmonic_mean(0.4, 0.7) == pytest.approx(stats.hmean([0.4, 0.7]))


def test_results_are_python_floats_in_range():
    x = np.arange(10.0)
    for value in (pearson(x, x), spearman(x, -x), uncentered_pearson(x, x)):
        assert type(value) is float and -1.0 <= value <= 1.0
    assert pearson(x, x) == pytest.approx(1.0) and spearman(x, -x) == pytest.approx(-1.0)
    assert pearson([1, 2], [3, 5]) == pytest.approx(1.0)  # N = 2 is enough


def test_constant_input_gives_nan_and_one_logged_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="ctxemb.metrics.correlation"):
        assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
        assert math.isnan(spearman([1, 2, 3], [5, 5, 5]))
        assert math.isnan(uncentered_pearson([0, 0], [1, 2]))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and all("returning NaN" in m for m in messages)
    # as before, the old versions agreed on NaN there
    assert math.isnan(_old_pearson([1, 1, 1], [1, 2, 3])) and math.isnan(_old_spearman([1, 2, 3], [5, 5, 5]))


def test_constant_input_emits_no_scipy_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(pearson([2.0] * 5, np.arange(5.0)))
        assert math.isnan(spearman(np.arange(5.0), [3.0] * 5))


def test_uncentered_and_harmonic_mean():
    assert uncentered_pearson([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert uncentered_pearson([1, 2], [-1, -2]) == pytest.approx(-1.0)
    assert uncentered_pearson([5], [2]) == pytest.approx(1.0)  # one value suffices
    assert math.isnan(harmonic_mean(0.5, float("nan"))) and math.isnan(harmonic_mean(0.3, -0.3))
    assert harmonic_mean(0.5, 0.5) == 0.5


@pytest.mark.parametrize("fn", [pearson, spearman, uncentered_pearson])
def test_bad_input(fn):
    with pytest.raises(ValueError, match="same length; got 3 and 2"):
        fn([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="x contains NaN or infinity"):
        fn([1, float("nan")], [1, 2])
    with pytest.raises(ValueError, match="y contains NaN or infinity"):
        fn([1, 2], [1, float("inf")])
    with pytest.raises(ValueError, match="must be 1-D"):
        fn([[1, 2]], [[1, 2]])


def test_too_short():
    with pytest.raises(ValueError, match="at least 2 values"):
        pearson([1], [1])
    with pytest.raises(ValueError, match="at least 2 values"):
        spearman([1], [1])
    with pytest.raises(ValueError, match="at least 1 values"):
        uncentered_pearson([], [])
    with pytest.raises(ValueError, match="at least 1 values"):
        rankdata([])
