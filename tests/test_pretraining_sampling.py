import json

import numpy as np
import pytest

from ctxemb.tasks.pretraining.sampling import MultilingualSampler, sampling_probabilities

# Characters per language of fortunes-multilingual (its README), so the test needs no data folder.
FORTUNES_CHARS = {"en": 2.40e6, "de": 2.82e6, "es": 0.95e6, "it": 1.54e6, "pl": 1.88e6, "ru": 1.92e6,
                  "zh": 0.94e6, "cs": 1.27e6, "pt": 0.24e6, "bg": 0.06e6, "ga": 0.0076e6}


def test_formula_matches_eq_11_7():
    n = np.array([1.0, 3.0, 6.0])
    p = n / n.sum()
    q = p ** 0.5 / (p ** 0.5).sum()
    np.testing.assert_allclose(sampling_probabilities(n, alpha=0.5), q, rtol=1e-12)
    np.testing.assert_allclose(sampling_probabilities([5, 5], alpha=0.3), [0.5, 0.5])


def test_alpha_edge_cases():
    n = [10, 30, 60, 0]
    np.testing.assert_allclose(sampling_probabilities(n, alpha=1.0), [0.1, 0.3, 0.6, 0.0])
    # alpha 0: uniform over the non-empty sub-corpora (an empty one is never drawn, though 0**0 == 1)
    np.testing.assert_allclose(sampling_probabilities(n, alpha=0.0), [1 / 3, 1 / 3, 1 / 3, 0.0])
    assert sampling_probabilities(n, alpha=0.3)[3] == 0.0
    # alpha > 1 sharpens towards the largest
    assert sampling_probabilities(n, alpha=2.0)[2] > 0.6


@pytest.mark.parametrize("sizes,alpha,exc,words", [
    ([1, -2], 0.3, ValueError, "sizes[1]"),
    ([0, 0], 0.3, ValueError, "all zero"),
    ([], 0.3, ValueError, "non-empty"),
    ([[1, 2]], 0.3, ValueError, "1-D"),
    ([1, float("nan")], 0.3, ValueError, "finite"),
    (["a", "b"], 0.3, TypeError, "numbers"),
    ([1, 2], -0.1, ValueError, "alpha"),
    ([1, 2], float("inf"), ValueError, "alpha"),
    ([1, 2], True, TypeError, "alpha"),
])
def test_bad_input_is_named(sizes, alpha, exc, words):
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
        sampling_probabilities(sizes, alpha)


def test_fortunes_languages_alpha_03_vs_1():
    names = list(FORTUNES_CHARS)
    n = np.array([FORTUNES_CHARS[k] for k in names])
    p = sampling_probabilities(n, alpha=1.0)
    q = sampling_probabilities(n, alpha=0.3)
    np.testing.assert_allclose(p, n / n.sum())
    assert q.sum() == pytest.approx(1.0)
    ga, de = names.index("ga"), names.index("de")
    # q_i / q_j = (p_i / p_j)^alpha: the ~370x gap between German and Irish shrinks to ~370^0.3 ~ 5.9x
    assert q[de] / q[ga] == pytest.approx((p[de] / p[ga]) ** 0.3, rel=1e-9)
    assert p[de] / p[ga] > 300 and q[de] / q[ga] < 6.5
    # small languages are drawn far more often than their share, large ones less often
    assert q[ga] > 20 * p[ga] and q[names.index("bg")] > 5 * p[names.index("bg")]
    assert q[de] < p[de] and q[names.index("en")] < p[names.index("en")]
    # the order of the languages by size is kept
    assert list(np.argsort(q)) == list(np.argsort(p))


def test_drawn_proportions_equal_q():
    sizes = list(FORTUNES_CHARS.values())
    sampler = MultilingualSampler(sizes, alpha=0.3, seed=123)
    n = 200_000
    counts = np.bincount(sampler.draw(n), minlength=len(sizes))
    q = sampler.probabilities
    sd = np.sqrt(n * q * (1 - q))
    assert np.all(np.abs(counts - n * q) < 5 * sd), (counts, n * q)
    # ... and clearly not p (alpha = 1): Irish would get ~63 draws, not ~4,000
    p = sampling_probabilities(sizes, 1.0)
    assert abs(counts[-1] - n * p[-1]) > 20 * np.sqrt(n * p[-1])
    assert sampler.num_draws == n


def test_empty_subcorpus_is_never_drawn():
    s = MultilingualSampler([0, 5, 0, 1], alpha=0.0, seed=1)
    draws = s.draw(5000)
    assert set(np.unique(draws)) == {1, 3}


def test_exact_resume_and_json_state():
    a = MultilingualSampler([100, 10, 1], alpha=0.3, seed=7, names=["x", "y", "z"])
    b = MultilingualSampler([100, 10, 1], alpha=0.3, seed=7, names=["x", "y", "z"])
    a.draw(37)
    b.draw(37)
    state = json.loads(json.dumps(b.state_dict()))  # JSON-serialisable
    c = MultilingualSampler([100, 10, 1], alpha=0.3, seed=999)
    c.load_state_dict(state)
    np.testing.assert_array_equal(a.draw(500), c.draw(500))
    assert a.draw() == c.draw() and c.num_draws == 538
    assert MultilingualSampler([100, 10, 1], seed=7, names="xyz").draw_names(3)[0] in "xyz"


def test_resume_with_other_sizes_is_refused():
    a = MultilingualSampler([100, 10, 1], alpha=0.3)
    with pytest.raises(ValueError, match="same sizes and alpha"):
        MultilingualSampler([100, 10, 1], alpha=1.0).load_state_dict(a.state_dict())
    with pytest.raises(KeyError, match="bit_generator"):
        a.load_state_dict({"probabilities": [1.0], "num_draws": 0})
