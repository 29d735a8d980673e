"""ctxemb.metrics.classification: accuracy against scikit-learn, the best threshold against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score

from ctxemb.metrics.classification import accuracy, best_threshold


def test_accuracy_matches_sklearn_and_the_plain_mean():
    rng = np.random.default_rng(0)
    t, p = rng.integers(0, 2, 50).astype(bool), rng.integers(0, 2, 50).astype(bool)
    assert accuracy(t, p) == accuracy_score(t, p) == float(np.mean(t == p))
    assert type(accuracy(t, p)) is float
    assert accuracy([1, 0, 1], [1, 1, 1]) == pytest.approx(2 / 3)
    assert accuracy(["a", "b"], ["a", "b"]) == 1.0


def test_accuracy_bad_input():
    with pytest.raises(ValueError, match="same length"):
        accuracy([True], [True, False])
    with pytest.raises(ValueError, match="1-D"):
        accuracy([[True]], [[True]])
    with pytest.raises(ValueError, match="at least one example"):
        accuracy([], [])


def _brute_force(scores, labels):
    u = np.unique(scores)
    cands = np.r_[-np.inf, (u[1:] + u[:-1]) / 2, np.inf]
    return max(np.mean((scores >= t) == labels) for t in cands)


@pytest.mark.parametrize("seed", range(8))
def test_best_threshold_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    scores = np.round(rng.normal(size=n), 1)  # ties
    labels = rng.random(n) < 1 / (1 + np.exp(-2 * scores))
    t, acc = best_threshold(scores, labels)
    assert acc == pytest.approx(_brute_force(scores, labels))
    assert accuracy(labels, scores >= t) == pytest.approx(acc)  # the returned threshold achieves it


def test_best_threshold_extremes_and_ties_choose_the_lowest_cut():
    assert best_threshold([0.1, 0.5, 0.9], [True, True, True]) == (-np.inf, 1.0)
    assert best_threshold([0.1, 0.5, 0.9], [0, 0, 0]) == (np.inf, 1.0)
    assert best_threshold([0.1, 0.5, 0.9], [0, 1, 1]) == (pytest.approx(0.3), 1.0)
    assert best_threshold([0.1, 0.5, 0.9], [0, 0, 1]) == (pytest.approx(0.7), 1.0)
    # cutting below 0.4 and below 0.8 are equally good (3 of 4): the lowest wins
    t, acc = best_threshold([0.2, 0.4, 0.6, 0.8], [0, 1, 0, 1])
    assert (t, acc) == (pytest.approx(0.3), 0.75)


def test_best_threshold_bad_input():
    with pytest.raises(ValueError, match="labels must be booleans or 0/1"):
        best_threshold([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError, match="same shape as scores"):
        best_threshold([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="scores contains NaN"):
        best_threshold([0.1, float("nan")], [True, False])
    with pytest.raises(ValueError, match="at least 1 values"):
        best_threshold([], [])
