"""Anisotropy, cosine contributions, rogue dimensions and informativity against brute force over all pairs."""

import itertools

import numpy as np
import pytest

from ctxemb.geometry import (
    RogueDimensions,
    Standardizer,
    anisotropy,
    anisotropy_sampled,
    cosine_contributions,
    informativity,
    rogue_dimensions,
)


def _unit(X):
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def brute_anisotropy(X):
    U = _unit(X)
    n = len(U)
    return np.mean([U[i] @ U[j] for i in range(n) for j in range(n) if i != j])


def brute_contributions(X):
    U = _unit(X)
    n = len(U)
    return np.mean([U[i] * U[j] for i in range(n) for j in range(n) if i != j], axis=0)


def brute_informativity(X, k):
    cc = brute_contributions(X)
    removed = np.argsort(-cc, kind="stable")[:k]
    keep = [h for h in range(X.shape[1]) if h not in set(removed)]
    full, red = [], []
    for i, j in itertools.combinations(range(len(X)), 2):
        a, b = X[i], X[j]
        full.append(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        a, b = X[i, keep], X[j, keep]
        red.append(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return np.corrcoef(full, red)[0, 1] ** 2


@pytest.fixture
def odd_data():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(37, 13))
    X[:, 4] += 2.5  # some shared direction so anisotropy is clearly non-zero
    X[:, 9] *= 3.0
    return X


@pytest.mark.parity
def test_anisotropy_matches_brute_force(odd_data):
    assert anisotropy(odd_data) == pytest.approx(brute_anisotropy(odd_data), abs=1e-12)


@pytest.mark.parity
def test_contributions_match_brute_force_and_sum_to_anisotropy(odd_data):
    cc = cosine_contributions(odd_data)
    assert cc.shape == (13,)
    np.testing.assert_allclose(cc, brute_contributions(odd_data), rtol=1e-10, atol=1e-13)
    assert cc.sum() == pytest.approx(anisotropy(odd_data), abs=1e-12)


def test_float32_and_list_input_agree_with_float64(odd_data):
    a64 = anisotropy(odd_data)
    assert anisotropy(odd_data.astype(np.float32)) == pytest.approx(a64, abs=1e-6)
    assert anisotropy(odd_data.tolist()) == pytest.approx(a64, abs=1e-12)


def test_two_vectors_is_their_cosine():
    X = np.array([[1.0, 0.0], [1.0, 1.0]])
    assert anisotropy(X) == pytest.approx(np.sqrt(0.5))


def test_caller_array_is_not_modified(odd_data):
    before = odd_data.copy()
    anisotropy(odd_data)
    cosine_contributions(odd_data)
    rogue_dimensions(odd_data, 2)
    informativity(odd_data, 2)
    np.testing.assert_array_equal(odd_data, before)


def test_sampled_anisotropy_is_close_to_exact_and_seeded(odd_data):
    exact = anisotropy(odd_data)
    est = anisotropy_sampled(odd_data, n_pairs=200_000, seed=3)
    assert est == pytest.approx(exact, abs=0.01)
    assert anisotropy_sampled(odd_data, n_pairs=1000, seed=5) == anisotropy_sampled(odd_data, n_pairs=1000, seed=5)


def test_sampled_pairs_are_distinct():
    # Two orthogonal vectors: any pair of distinct rows has cosine 0, a row with itself has cosine 1.
    X = np.eye(2)
    assert anisotropy_sampled(X, n_pairs=500, seed=0) == 0.0


def test_isotropic_gaussian_has_anisotropy_near_zero():
    X = np.random.default_rng(0).normal(size=(2000, 64))
    assert abs(anisotropy(X)) < 0.01


@pytest.fixture
def planted():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 32))
    X[:, 7] += 20.0
    return X


def test_planted_rogue_dimension_is_found(planted):
    rogue = rogue_dimensions(planted, k=3)
    assert isinstance(rogue, RogueDimensions)
    assert rogue.indices[0] == 7
    assert rogue.shares[0] > 0.9
    assert rogue.means[0] == pytest.approx(20.0, abs=0.3)
    assert rogue.variances[0] == pytest.approx(1.0, abs=0.2)
    assert rogue.anisotropy == pytest.approx(anisotropy(planted))
    assert rogue.indices.shape == rogue.shares.shape == rogue.contributions.shape == (3,)
    assert list(rogue.contributions) == sorted(rogue.contributions, reverse=True)
    d = rogue.to_dict()
    assert d["indices"][0] == 7 and isinstance(d["shares"][0], float)


def test_standardizing_removes_the_rogue_dimension(planted):
    z = Standardizer().fit_transform(planted)
    assert anisotropy(planted) > 0.5
    assert abs(anisotropy(z)) < 0.01
    # Dimension 7 is no longer special: its contribution is in line with the others.
    cc = cosine_contributions(z)
    assert abs(cc[7]) < 5 * np.abs(np.delete(cc, 7)).max() + 1e-12
    assert abs(cc[7]) < 0.01 * cosine_contributions(planted)[7]


@pytest.mark.parity
@pytest.mark.parametrize("k", [1, 3])
def test_informativity_matches_brute_force(odd_data, k):
    assert informativity(odd_data, k) == pytest.approx(brute_informativity(odd_data, k), abs=1e-10)


def test_informativity_sampled_is_close_and_seeded(planted):
    X = planted[:120]  # 7,140 pairs
    exact = informativity(X, 1, n_pairs=10_000)
    sampled = informativity(X, 1, n_pairs=4000, seed=2)
    assert sampled == pytest.approx(exact, abs=0.05)
    assert sampled == informativity(X, 1, n_pairs=4000, seed=2)


def test_informativity_isotropic_data_survives_removing_one_dimension():
    X = np.random.default_rng(4).normal(size=(200, 64))
    assert 0.9 < informativity(X, 1) <= 1.0


# ---------------------------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("fn", [anisotropy, cosine_contributions, anisotropy_sampled, rogue_dimensions, informativity])
def test_one_dimensional_input_is_refused(fn):
    with pytest.raises(ValueError, match=r"X must be a 2-D array.*1-D"):
        fn(np.ones(5))


@pytest.mark.parametrize("fn", [anisotropy, cosine_contributions, anisotropy_sampled, rogue_dimensions, informativity])
def test_too_few_rows_are_refused(fn):
    with pytest.raises(ValueError, match=r"X needs at least \d vectors"):
        fn(np.ones((1, 4)))


def test_informativity_needs_three_rows():
    with pytest.raises(ValueError, match="X needs at least 3"):
        informativity(np.eye(2, 4), 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("fn", [anisotropy, cosine_contributions, rogue_dimensions, informativity])
def test_nan_and_inf_are_refused(fn, bad):
    X = np.ones((5, 4))
    X[2, 1] = bad
    with pytest.raises(ValueError, match=r"X contains NaN or infinity.*row 2, column 1"):
        fn(X)


def test_zero_vector_is_refused():
    X = np.ones((4, 3))
    X[2] = 0
    with pytest.raises(ValueError, match="X has 1 zero-length vectors.*row 2"):
        anisotropy(X)
    with pytest.raises(ValueError, match="zero-length"):
        anisotropy_sampled(X, 10)


def test_k_out_of_range_is_refused(odd_data):
    with pytest.raises(ValueError, match=r"k must be <= 13"):
        rogue_dimensions(odd_data, k=14)
    with pytest.raises(ValueError, match=r"k must be >= 1"):
        rogue_dimensions(odd_data, k=0)
    with pytest.raises(ValueError, match=r"k must be <= 12.*at least one dimension must remain"):
        informativity(odd_data, k=13)
    with pytest.raises(TypeError, match="k must be an int"):
        rogue_dimensions(odd_data, k=1.5)


def test_non_numeric_input_is_refused():
    with pytest.raises(TypeError, match="X must be a numeric"):
        anisotropy(np.array([["a", "b"], ["c", "d"]]))


def test_n_pairs_must_be_positive(odd_data):
    with pytest.raises(ValueError, match="n_pairs must be >= 1"):
        anisotropy_sampled(odd_data, n_pairs=0)


def test_informativity_zero_after_removal_is_refused():
    X = np.random.default_rng(0).normal(size=(6, 3))
    X[:, 0] += 50.0
    X[3, 1:] = 0.0  # only the rogue dimension is non-zero in this row
    with pytest.raises(ValueError, match="zero once the top k=1 dimensions"):
        informativity(X, 1)
