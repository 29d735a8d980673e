"""Post-processing estimators: parity with scikit-learn, fitting on one corpus and applying to another, persistence."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import PCA
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ctxemb.geometry import (
    POSTPROCESSORS,
    AllButTheTop,
    Identity,
    MeanCenterer,
    Standardizer,
    Whitening,
    anisotropy,
    load_postprocessor,
    make_postprocessor,
)

ALL = [Identity, MeanCenterer, Standardizer, AllButTheTop, Whitening]


@pytest.fixture
def corpus_a():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 20)) @ rng.normal(size=(20, 20))  # correlated dimensions
    X[:, 7] += 20.0  # a rogue dimension
    return X


@pytest.fixture
def corpus_b():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(57, 20)) * 2.0 + 1.0
    X[:, 7] += 20.0
    return X


# ---------------------------------------------------------------------------------------------------------------
# Standardizer


@pytest.mark.parity
def test_standardizer_matches_standard_scaler(corpus_a, corpus_b):
    ours = Standardizer().fit(corpus_a)
    ref = StandardScaler().fit(corpus_a)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(ours.var_, ref.var_, rtol=1e-10)
    np.testing.assert_allclose(ours.scale_, ref.scale_, rtol=1e-10)
    assert ours.n_samples_seen_ == ref.n_samples_seen_ == 300
    np.testing.assert_allclose(ours.transform(corpus_b), ref.transform(corpus_b), rtol=1e-10, atol=1e-12)
    z = ours.transform(corpus_b)
    np.testing.assert_allclose(ours.inverse_transform(z), corpus_b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.inverse_transform(z), ref.inverse_transform(z), rtol=1e-12, atol=1e-12)


@pytest.mark.parity
def test_standardizer_partial_fit_in_chunks_is_exact(corpus_a):
    full = Standardizer().fit(corpus_a)
    ours, ref = Standardizer(), StandardScaler()
    for chunk in np.array_split(corpus_a, [1, 50, 51, 170]):  # uneven chunks, one of a single row
        ours.partial_fit(chunk)
        ref.partial_fit(chunk)
    np.testing.assert_allclose(ours.mean_, full.mean_, rtol=1e-12)
    np.testing.assert_allclose(ours.var_, full.var_, rtol=1e-10)
    np.testing.assert_allclose(ours.var_, ref.var_, rtol=1e-10)
    assert ours.n_samples_seen_ == 300
    np.testing.assert_allclose(ours.transform(corpus_a), full.transform(corpus_a), rtol=1e-9, atol=1e-12)


def test_standardizer_formula_and_isotropy(corpus_a):
    z = Standardizer().fit_transform(corpus_a)
    # J&M eqs. 11.10-11.12: population standard deviation.
    np.testing.assert_allclose(z, (corpus_a - corpus_a.mean(0)) / corpus_a.std(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.std(0), 1.0, rtol=1e-10)
    assert anisotropy(corpus_a) > 0.5 and abs(anisotropy(z)) < 0.05


def test_standardizer_zero_variance_column_gets_scale_one(corpus_a):
    X = corpus_a.copy()
    X[:, 3] = 3.7
    X[:, 5] = 0.0
    ours = Standardizer().fit(X)
    ref = StandardScaler().fit(X)
    assert ours.scale_[3] == 1.0 and ours.scale_[5] == 1.0
    np.testing.assert_allclose(ours.scale_, ref.scale_, rtol=1e-10)
    z = ours.transform(X)
    assert np.isfinite(z).all()
    np.testing.assert_allclose(z[:, 3], 0.0, atol=1e-12)
    np.testing.assert_allclose(ours.inverse_transform(z), X, rtol=1e-12, atol=1e-12)


def test_standardizer_zero_variance_in_partial_fit():
    ours = Standardizer()
    for chunk in np.array_split(np.full((10, 2), 5.0), 3):
        ours.partial_fit(chunk)
    np.testing.assert_array_equal(ours.scale_, [1.0, 1.0])


def test_float32_stays_float32(corpus_a):
    x32 = corpus_a.astype(np.float32)
    for cls in ALL:
        est = cls().fit(x32)
        assert est.transform(x32).dtype == np.float32, cls.__name__
    assert Standardizer().fit(corpus_a).transform(corpus_a.astype(int)).dtype == np.float64


# ---------------------------------------------------------------------------------------------------------------
# MeanCenterer


def test_mean_centerer(corpus_a, corpus_b):
    est = MeanCenterer().fit(corpus_a)
    np.testing.assert_allclose(est.mean_, corpus_a.mean(0), rtol=1e-12)
    np.testing.assert_allclose(est.transform(corpus_b), corpus_b - corpus_a.mean(0), rtol=1e-12)
    np.testing.assert_allclose(est.inverse_transform(est.transform(corpus_b)), corpus_b, rtol=1e-12)
    chunks = MeanCenterer()
    for chunk in np.array_split(corpus_a, 7):
        chunks.partial_fit(chunk)
    np.testing.assert_allclose(chunks.mean_, est.mean_, rtol=1e-12)
    assert chunks.n_samples_seen_ == 300


# ---------------------------------------------------------------------------------------------------------------
# All-but-the-top and whitening


@pytest.mark.parity
@pytest.mark.parametrize("d", [1, 3])
def test_all_but_the_top_matches_pca(corpus_a, corpus_b, d):
    est = AllButTheTop(n_components=d).fit(corpus_a)
    pca = PCA(n_components=d, svd_solver="full").fit(corpus_a)
    centred = corpus_b - corpus_a.mean(0)
    expected = centred - (centred @ pca.components_.T) @ pca.components_
    np.testing.assert_allclose(est.transform(corpus_b), expected, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(est.explained_variance_, pca.explained_variance_, rtol=1e-8)
    # The removed directions are gone: the output has no variance along them.
    out = est.transform(corpus_a)
    np.testing.assert_allclose(out @ est.components_.T, 0.0, atol=1e-8)
    assert not hasattr(est, "inverse_transform")


def test_all_but_the_top_default_components():
    X = np.random.default_rng(0).normal(size=(400, 250))
    assert AllButTheTop().fit(X).n_components_ == 2  # H // 100
    assert AllButTheTop().fit(X[:, :50]).n_components_ == 1


def _align_signs(a, b):
    """Flip columns of a to match the signs of b (principal directions are defined up to sign)."""
    return a * np.sign((a * b).sum(0))


@pytest.mark.parity
@pytest.mark.parametrize("k", [None, 5])
def test_whitening_matches_pca_whiten(corpus_a, corpus_b, k):
    est = Whitening(n_components=k).fit(corpus_a)
    pca = PCA(n_components=k or 20, whiten=True, svd_solver="full").fit(corpus_a)
    ours, ref = est.transform(corpus_b), pca.transform(corpus_b)
    assert ours.shape == (57, k or 20)
    np.testing.assert_allclose(_align_signs(ours, ref), ref, rtol=1e-7, atol=1e-7)
    # Su et al.: W = U sqrt(S^-1) from the SVD of np.cov.
    u, s, _ = np.linalg.svd(np.cov(corpus_a.T))
    W = (u / np.sqrt(s))[:, : (k or 20)]
    np.testing.assert_allclose(_align_signs(ours, ref), _align_signs((corpus_b - corpus_a.mean(0)) @ W, ref), atol=1e-7)


def test_whitening_gives_identity_covariance_on_fitted_corpus(corpus_a):
    z = Whitening().fit_transform(corpus_a)
    np.testing.assert_allclose(np.cov(z.T), np.eye(20), atol=1e-8)
    assert abs(anisotropy(z)) < 0.02


def test_whitening_inverse(corpus_a, corpus_b):
    est = Whitening().fit(corpus_a)
    np.testing.assert_allclose(est.inverse_transform(est.transform(corpus_b)), corpus_b, rtol=1e-8, atol=1e-8)
    partial = Whitening(n_components=5).fit(corpus_a)
    with pytest.raises(ValueError, match="inverse_transform needs a full whitening.*n_components=5"):
        partial.inverse_transform(partial.transform(corpus_b))


def test_whitening_rank_deficient():
    X = np.random.default_rng(0).normal(size=(10, 30))  # N <= H: covariance rank 9
    with pytest.raises(ValueError, match=r"n_components=10 needs 10 .* has rank 9; pass n_components <= 9"):
        Whitening(n_components=10).fit(X)
    with pytest.warns(UserWarning, match=r"has rank 9, so only the 9 directions"):
        est = Whitening().fit(X)
    assert est.n_components_ == 9 and est.transform(X).shape == (10, 9)
    np.testing.assert_allclose(np.cov(est.transform(X).T), np.eye(9), atol=1e-8)
    with pytest.raises(ValueError, match="inverse_transform needs a full whitening"):
        est.inverse_transform(est.transform(X))
    with pytest.raises(ValueError, match="zero variance in every direction"):
        Whitening().fit(np.ones((5, 3)))


def test_whitening_layernorm_like_hyperplane_drops_only_the_null_direction():
    # Rows whose coordinates sum to 0 (as after LayerNorm without affine): rank H - 1 for any N.
    X = np.random.default_rng(2).normal(size=(500, 16))
    X -= X.mean(axis=1, keepdims=True)
    with pytest.warns(UserWarning, match="rank 15"):
        z = Whitening().fit_transform(X)
    assert z.shape == (500, 15)
    assert abs(anisotropy(z)) < 0.01


def test_n_components_out_of_range_is_refused(corpus_a):
    with pytest.raises(ValueError, match="n_components must be <= 20"):
        Whitening(n_components=21).fit(corpus_a)
    with pytest.raises(ValueError, match=r"n_components must be <= 4 \(min\(N - 1, H\)"):
        AllButTheTop(n_components=5).fit(corpus_a[:5])
    with pytest.raises(ValueError, match="n_components must be >= 1"):
        AllButTheTop(n_components=0).fit(corpus_a)
    with pytest.raises(TypeError, match="n_components must be an int"):
        Whitening(n_components=2.5).fit(corpus_a)


# ---------------------------------------------------------------------------------------------------------------
# The scikit-learn contract


@pytest.mark.parametrize("cls", ALL)
def test_transform_before_fit_raises_not_fitted(cls, corpus_a):
    with pytest.raises(NotFittedError):
        cls().transform(corpus_a)
    with pytest.raises(NotFittedError):
        cls().save("never-written.npz")


@pytest.mark.parametrize("cls", ALL)
def test_sklearn_api(cls, corpus_a, corpus_b):
    est = cls()
    assert est.fit(corpus_a) is est
    assert est.n_features_in_ == 20
    params = est.get_params()
    assert clone(est).get_params() == params
    assert not hasattr(clone(est), "n_features_in_")
    pipe = make_pipeline(clone(est), PCA(n_components=2)).fit(corpus_a)
    assert pipe.transform(corpus_b).shape == (57, 2)
    with pytest.raises(ValueError, match="X has 19 features, but .* is expecting 20 features"):
        est.transform(corpus_b[:, :19])
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        est.transform(corpus_b[0])
    bad = corpus_b.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        est.transform(bad)
    with pytest.raises(ValueError, match="X contains NaN"):
        cls().fit(bad)


def test_set_params_and_refit(corpus_a):
    est = Whitening(n_components=3).fit(corpus_a)
    est.set_params(n_components=4).fit(corpus_a)
    assert est.transform(corpus_a).shape == (300, 4)


def test_caller_array_is_not_modified(corpus_a):
    before = corpus_a.copy()
    for cls in ALL:
        est = cls().fit(corpus_a)
        est.transform(corpus_a)
    np.testing.assert_array_equal(corpus_a, before)


@pytest.mark.parametrize("cls", ALL)
def test_fit_on_a_apply_to_b(cls, corpus_a, corpus_b):
    est = cls().fit(corpus_a)
    out_b = est.transform(corpus_b)
    assert out_b.shape[0] == 57
    # Statistics come from A only: refitting on B changes the result (except for the identity).
    if cls is not Identity:
        assert not np.allclose(out_b, cls().fit(corpus_b).transform(corpus_b))


# ---------------------------------------------------------------------------------------------------------------
# Save / load and the factory


@pytest.mark.parametrize("cls", ALL)
def test_save_load_round_trip_is_identical(cls, corpus_a, corpus_b, tmp_path):
    est = cls(n_components=4) if cls in (AllButTheTop, Whitening) else cls()
    est.fit(corpus_a)
    path = tmp_path / "post.npz"
    est.save(path)
    loaded = cls.load(path)
    assert type(loaded) is cls
    assert loaded.get_params() == est.get_params()
    np.testing.assert_array_equal(loaded.transform(corpus_b), est.transform(corpus_b))
    again = load_postprocessor(path)
    np.testing.assert_array_equal(again.transform(corpus_b), est.transform(corpus_b))
    assert [p.name for p in tmp_path.iterdir()] == ["post.npz"]  # no temporary file left behind


def test_load_checks_class_and_file(corpus_a, tmp_path):
    path = tmp_path / "std.npz"
    Standardizer().fit(corpus_a).save(path)
    with pytest.raises(ValueError, match="holds a Standardizer, not a Whitening"):
        Whitening.load(path)
    with pytest.raises(FileNotFoundError, match="no post-processor file"):
        Standardizer.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a ctxemb post-processor"):
        load_postprocessor(tmp_path / "other.npz")


def test_make_postprocessor(corpus_a):
    assert list(POSTPROCESSORS) == ["none", "standardize", "center", "abtt", "whiten"]
    assert isinstance(make_postprocessor("none"), Identity)
    assert isinstance(make_postprocessor("standardize"), Standardizer)
    assert isinstance(make_postprocessor("center"), MeanCenterer)
    assert make_postprocessor("abtt", n_components=2).n_components == 2
    assert make_postprocessor(" Whiten ", n_components=5).fit(corpus_a).transform(corpus_a).shape == (300, 5)
    with pytest.raises(ValueError, match="unknown post-processor name 'zscore'; valid names: none, standardize, "
                                         "center, abtt, whiten"):
        make_postprocessor("zscore")
    with pytest.raises(ValueError, match=r"takes no argument\(s\) \['n_components'\]"):
        make_postprocessor("standardize", n_components=3)
    with pytest.raises(TypeError, match="name must be a str"):
        make_postprocessor(None)


@pytest.mark.parity
@pytest.mark.parametrize("cls", ALL)
def test_passes_sklearn_check_estimator(cls):
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SkipTestWarning for array-API checks
        check_estimator(cls())
