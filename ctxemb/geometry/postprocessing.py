"""Post-processing that makes embeddings more isotropic, as scikit-learn-compatible transformers.

Fit on the vectors of one corpus, apply to another: every estimator learns its statistics in ``fit`` (or
incrementally in ``partial_fit`` where that is exact) and ``transform`` applies them to any array with the same
number of dimensions.

- :class:`Standardizer`: z-scoring, J&M eqs. 11.10-11.12 (Timkey & van Schijndel 2021).
- :class:`MeanCenterer`: subtract the mean only.
- :class:`AllButTheTop`: subtract the mean and remove the top-D principal directions (Mu & Viswanath 2018).
- :class:`Whitening`: BERT-whitening, ``(x - mu) W`` with ``W = U sqrt(S^-1)`` from the covariance (Su et al. 2021).
- :class:`Identity`: no change, so that "none" can sit in the same list as the others.

:func:`make_postprocessor` builds one by name; ``save``/:func:`load_postprocessor` keep a fitted one in a ``.npz``.

Shape legend:
    N  vectors (rows)
    H  dimensions of a vector (``n_features_in_``)
    D  principal directions kept or removed (``n_components_``)
"""

from __future__ import annotations

import json
import logging
import os
import warnings
import zipfile
from pathlib import Path
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ctxemb.core.validation import CorruptFileError, check_int, check_vectors
from ctxemb.geometry.options import POSTPROCESSOR_NAMES
from ctxemb.core.atomic import atomic_write

logger = logging.getLogger(__name__)

_EPS = np.finfo(np.float64).eps
_BLOCK_ROWS = 4096
_FORMAT_VERSION = 1


def _out_dtype(X: np.ndarray) -> np.dtype:
    """float32 stays float32 (as in StandardScaler); everything else becomes float64."""
    return np.dtype(np.float32) if X.dtype == np.float32 else np.dtype(np.float64)


def _mean_and_covariance(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean (H,) and sample covariance (H, H) with denominator N - 1, as in ``np.cov``.

    The data are centred block by block before the products are summed, so a large mean (a rogue dimension)
    does not cancel away the variance, and no (N, H) float64 copy is made.
    """
    n, h = X.shape
    mean = np.zeros(h, dtype=np.float64)
    cov = np.zeros((h, h), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, _BLOCK_ROWS):
            mean += np.asarray(X[start : start + _BLOCK_ROWS], dtype=np.float64).sum(axis=0)
        mean /= n
        for start in range(0, n, _BLOCK_ROWS):
            xc = np.asarray(X[start : start + _BLOCK_ROWS], dtype=np.float64) - mean  # (n_block, H)
            cov += xc.T @ xc
        cov /= n - 1
    _check_finite_statistics(X, "covariance", cov)
    return mean, cov


def _check_finite_statistics(X: np.ndarray, what: str, *values: np.ndarray) -> None:
    """Refuse statistics that overflowed float64 (entries beyond about 1e154 square past its range): they would
    turn into inf or NaN and, silently, into wrong vectors."""
    if all(np.isfinite(v).all() for v in values):
        return
    biggest = float(np.max(np.abs(np.asarray(X, dtype=np.float64))))
    raise ValueError(
        "X's values are too large for a float64 %s (largest |x| = %.3g; squares overflow above about 1e154): "
        "rescale X first, e.g. X / np.abs(X).max() (the post-processed directions do not depend on the scale)"
        % (what, biggest)
    )


def _principal_axes(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (H,) in decreasing order and unit eigenvectors as rows (H, H) of a covariance matrix.

    Each eigenvector's sign is fixed so that its largest-magnitude entry is positive, which makes fits (and saved
    files) reproducible across runs and BLAS builds.
    """
    values, vectors = np.linalg.eigh(cov)  # ascending; vectors in columns
    values, vectors = values[::-1], vectors[:, ::-1].T  # (H,), (H, H) rows
    flip = np.sign(vectors[np.arange(len(vectors)), np.argmax(np.abs(vectors), axis=1)])
    flip[flip == 0] = 1.0
    return np.maximum(values, 0.0), vectors * flip[:, None]


class _Postprocessor(TransformerMixin, BaseEstimator):
    """Shared input checks and ``.npz`` persistence. Subclasses implement ``fit`` and ``transform``."""

    # Learned attributes that are Python scalars (saved in JSON rather than as arrays).
    _scalar_attributes: ClassVar[tuple[str, ...]] = ("n_features_in_",)

    def _check_fit_input(self, X, min_rows: int) -> np.ndarray:
        return check_vectors(X, "X", min_rows=min_rows)

    def _check_transform_input(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = check_vectors(X, "X", min_rows=1)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                "X has %d features, but %s is expecting %d features as input (the dimension it was fitted on)"
                % (X.shape[1], type(self).__name__, self.n_features_in_)
            )
        return X

    def _learned_attributes(self) -> dict:
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def save(self, path: str | os.PathLike) -> None:
        """Write the estimator's class, parameters and learned state to ``path`` (a ``.npz``), atomically.

        Args:
            path: destination file; written exactly as given (no suffix is added).

        Raises:
            sklearn.exceptions.NotFittedError: if the estimator has not been fitted.
        """
        check_is_fitted(self)
        learned = self._learned_attributes()
        scalars = {k: learned[k] for k in self._scalar_attributes if k in learned}
        arrays = {"attr:" + k: np.asarray(v) for k, v in learned.items() if k not in scalars}
        with atomic_write(path, "wb") as f:
            np.savez(
                f,
                __class__=np.array(type(self).__name__),
                __params__=np.array(json.dumps(self.get_params())),
                __scalars__=np.array(json.dumps({k: int(v) for k, v in scalars.items()})),
                __format__=np.array(_FORMAT_VERSION),
                **arrays,
            )
        logger.info("saved %s to %s", type(self).__name__, path)

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Read an estimator written by :meth:`save`.

        Called on a concrete class (``Standardizer.load(p)``) it checks that the file holds that class; called as
        :func:`load_postprocessor` it returns whichever post-processor the file holds.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            CorruptFileError: (a ValueError) if the file is truncated, corrupt or not a ctxemb post-processor.
            ValueError: if it holds a different class.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError("no post-processor file at %s" % path)
        try:
            loaded = np.load(path, allow_pickle=False)
            if not hasattr(loaded, "files"):
                raise CorruptFileError("%s is a single .npy array, not a ctxemb post-processor (.npz) file" % path,
                                       path)
            with loaded as data:
                if "__class__" not in data.files or "__params__" not in data.files:
                    raise CorruptFileError(
                        "%s is not a ctxemb post-processor file (no __class__/__params__ entries)" % path, path)
                name = str(data["__class__"])
                params = json.loads(str(data["__params__"]))
                scalars = json.loads(str(data["__scalars__"])) if "__scalars__" in data.files else {}
                arrays = {k[len("attr:") :]: data[k] for k in data.files if k.startswith("attr:")}
        except CorruptFileError:
            raise
        except (zipfile.BadZipFile, EOFError, ValueError, KeyError, OSError) as e:
            if isinstance(e, (PermissionError, IsADirectoryError)):
                raise
            raise CorruptFileError("post-processor file %s cannot be read (truncated, corrupt or not a .npz "
                                   "written by save()): %s" % (path, " ".join(str(e).split()) or type(e).__name__),
                                   path) from None
        if not isinstance(params, dict) or not isinstance(scalars, dict):
            raise CorruptFileError("post-processor file %s: its __params__/__scalars__ entries are not JSON objects"
                                   % path, path)
        target = _CLASSES.get(name)
        if target is None:
            raise CorruptFileError("%s holds an unknown post-processor class %r; known: %s"
                                   % (path, name, sorted(_CLASSES)), path)
        if cls is not _Postprocessor and target is not cls:
            raise ValueError(
                "%s holds a %s, not a %s; use load_postprocessor() to load any kind" % (path, name, cls.__name__)
            )
        try:
            obj = target(**params)
            for k, v in scalars.items():
                setattr(obj, k, int(v))
        except (TypeError, ValueError) as e:
            raise CorruptFileError("post-processor file %s holds bad parameters for %s: %s" % (path, name, e),
                                   path) from None
        for k, v in arrays.items():
            if v.dtype.kind == "f" and not np.isfinite(v).all():
                raise CorruptFileError("post-processor file %s: %s holds NaN or infinite values" % (path, k), path)
            setattr(obj, k, v)
        return obj


class Identity(_Postprocessor):
    """No post-processing: ``transform`` returns a float copy of its input. Stands for "none" among the others."""

    def fit(self, X, y=None) -> "Identity":
        """Record the number of dimensions. X: (N, H). Returns self."""
        X = self._check_fit_input(X, min_rows=1)
        self.n_features_in_ = X.shape[1]
        return self

    def transform(self, X) -> np.ndarray:
        """X: (N, H) -> (N, H) copy (float32 stays float32, else float64)."""
        X = self._check_transform_input(X)
        return np.array(X, dtype=_out_dtype(X))

    def inverse_transform(self, X) -> np.ndarray:
        """X: (N, H) -> (N, H) copy."""
        return self.transform(X)


class MeanCenterer(_Postprocessor):
    """Subtract the corpus mean vector mu (J&M eq. 11.10).

    Attributes (after fit):
        mean_: (H,) float64.
        n_samples_seen_: number of vectors the mean was computed over.
        n_features_in_: H.
    """

    _scalar_attributes = ("n_features_in_", "n_samples_seen_")

    def fit(self, X, y=None) -> "MeanCenterer":
        """Learn the mean of X: (N, H), N >= 1. Returns self."""
        for attr in ("mean_", "n_samples_seen_", "n_features_in_"):
            self.__dict__.pop(attr, None)
        return self.partial_fit(X)

    def partial_fit(self, X, y=None) -> "MeanCenterer":
        """Update the mean with another batch X: (N, H); exact, whatever the batch sizes. Returns self."""
        X = self._check_fit_input(X, min_rows=1)
        n_b = X.shape[0]
        mean_b = np.asarray(X, dtype=np.float64).mean(axis=0)
        if not hasattr(self, "mean_"):
            self.mean_, self.n_samples_seen_, self.n_features_in_ = mean_b, n_b, X.shape[1]
            return self
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                "X has %d features, but %s is expecting %d features as input (from earlier batches)"
                % (X.shape[1], type(self).__name__, self.n_features_in_)
            )
        n = self.n_samples_seen_ + n_b
        self.mean_ = self.mean_ + (mean_b - self.mean_) * (n_b / n)
        self.n_samples_seen_ = n
        return self

    def transform(self, X) -> np.ndarray:
        """X: (N, H) -> X - mean_, (N, H)."""
        X = self._check_transform_input(X)
        return (np.asarray(X, dtype=np.float64) - self.mean_).astype(_out_dtype(X), copy=False)

    def inverse_transform(self, X) -> np.ndarray:
        """X: (N, H) -> X + mean_, (N, H)."""
        X = self._check_transform_input(X)
        return (np.asarray(X, dtype=np.float64) + self.mean_).astype(_out_dtype(X), copy=False)


class Standardizer(_Postprocessor):
    """Z-scoring: ``z = (x - mu) / sigma`` per dimension (J&M eqs. 11.10-11.12; Timkey & van Schijndel 2021).

    sigma is the population standard deviation (denominator N), as in eq. 11.11 and scikit-learn's
    ``StandardScaler``. Dimensions with (numerically) zero variance get scale 1, so they are centred, not blown up.

    Attributes (after fit):
        mean_: (H,) float64, mu.
        var_: (H,) float64, sigma^2.
        scale_: (H,) float64, sigma, with 1 where the variance is zero.
        n_samples_seen_: number of vectors seen.
        n_features_in_: H.
    """

    _scalar_attributes = ("n_features_in_", "n_samples_seen_")

    def fit(self, X, y=None) -> "Standardizer":
        """Learn mu and sigma from X: (N, H), N >= 1. Returns self."""
        for attr in ("mean_", "var_", "scale_", "n_samples_seen_", "n_features_in_"):
            self.__dict__.pop(attr, None)
        return self.partial_fit(X)

    def partial_fit(self, X, y=None) -> "Standardizer":
        """Update mu and sigma with another batch X: (N, H).

        Exact for any split into batches: batch means and sums of squared deviations are merged with the
        pairwise update of Chan, Golub & LeVeque (1979), which stays accurate when the mean is large.

        Returns:
            self.
        """
        X = self._check_fit_input(X, min_rows=1)
        xb = np.asarray(X, dtype=np.float64)
        n_b = xb.shape[0]
        with np.errstate(over="ignore", invalid="ignore"):
            mean_b = xb.mean(axis=0)
            m2_b = ((xb - mean_b) ** 2).sum(axis=0)  # sum of squared deviations, (H,)
        _check_finite_statistics(xb, "variance", mean_b, m2_b)
        if not hasattr(self, "mean_"):
            mean, m2, n = mean_b, m2_b, n_b
            self.n_features_in_ = X.shape[1]
        else:
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    "X has %d features, but %s is expecting %d features as input (from earlier batches)"
                    % (X.shape[1], type(self).__name__, self.n_features_in_)
                )
            n_a = self.n_samples_seen_
            n = n_a + n_b
            delta = mean_b - self.mean_
            mean = self.mean_ + delta * (n_b / n)
            with np.errstate(over="ignore", invalid="ignore"):
                m2 = self.var_ * n_a + m2_b + delta**2 * (n_a * n_b / n)
            _check_finite_statistics(xb, "variance", mean, m2)
        self.mean_ = mean
        self.var_ = m2 / n
        self.n_samples_seen_ = n
        self.scale_ = np.sqrt(self.var_)
        # A constant column's computed variance is rounding noise of order (n eps |mean|)^2, not exactly 0.
        constant = self.var_ <= (n * _EPS * self.mean_) ** 2
        self.scale_[constant] = 1.0
        return self

    def transform(self, X) -> np.ndarray:
        """X: (N, H) -> (X - mean_) / scale_, (N, H)."""
        X = self._check_transform_input(X)
        return ((np.asarray(X, dtype=np.float64) - self.mean_) / self.scale_).astype(_out_dtype(X), copy=False)

    def inverse_transform(self, X) -> np.ndarray:
        """Z: (N, H) -> Z * scale_ + mean_, (N, H)."""
        X = self._check_transform_input(X)
        return (np.asarray(X, dtype=np.float64) * self.scale_ + self.mean_).astype(_out_dtype(X), copy=False)


class AllButTheTop(_Postprocessor):
    """All-but-the-top (Mu & Viswanath 2018): remove the mean and the top-D principal directions.

    ``x' = (x - mu) - sum_{d < D} (u_d . (x - mu)) u_d``, with u_d the leading eigenvectors of the covariance of
    the fitted vectors. The projection loses information, so there is no ``inverse_transform``.

    Args:
        n_components: D, the number of directions removed; None uses the paper's rule of thumb H // 100
            (at least 1). Must be <= min(N - 1, H) at fit time.

    Attributes (after fit):
        mean_: (H,) float64.
        components_: (D, H) float64 unit principal directions, strongest first.
        explained_variance_: (D,) variance along each direction (denominator N - 1).
        n_components_: D as resolved at fit time.
        n_features_in_: H.
    """

    _scalar_attributes = ("n_features_in_", "n_components_")

    def __init__(self, *, n_components: int | None = None):
        self.n_components = n_components

    def fit(self, X, y=None) -> "AllButTheTop":
        """Learn mu and the top-D principal directions from X: (N, H), N >= 2. Returns self."""
        X = self._check_fit_input(X, min_rows=2)
        n, h = X.shape
        d = max(1, h // 100) if self.n_components is None else self.n_components
        d = check_int(
            d, "n_components", low=1, high=min(n - 1, h), high_text="min(N - 1, H) = min(%d, %d)" % (n - 1, h)
        )
        mean, cov = _mean_and_covariance(X)
        values, vectors = _principal_axes(cov)
        self.mean_ = mean
        self.components_ = np.ascontiguousarray(vectors[:d])  # a copy: contiguous like the one load() gives
        self.explained_variance_ = values[:d].copy()
        self.n_components_ = d
        self.n_features_in_ = h
        return self

    def transform(self, X) -> np.ndarray:
        """X: (N, H) -> (N, H), centred and with the top-D directions projected out."""
        X = self._check_transform_input(X)
        xc = np.asarray(X, dtype=np.float64) - self.mean_  # (N, H)
        xc -= (xc @ self.components_.T) @ self.components_  # (N, D) @ (D, H)
        return xc.astype(_out_dtype(X), copy=False)


class Whitening(_Postprocessor):
    """BERT-whitening (Su et al. 2021): ``z = (x - mu) W[:, :k]`` with ``W = U sqrt(S^-1)``.

    U, S come from the SVD (here: the eigendecomposition, the same thing for a symmetric matrix) of the covariance
    of the fitted vectors (denominator N - 1, as ``np.cov``). Keeping the first k columns also reduces the
    dimension. The whitened vectors have identity covariance on the fitted corpus, so they are isotropic there.

    Args:
        n_components: k, the output dimension. None keeps every direction with non-zero variance: all H for
            full-rank data (then ``inverse_transform`` exists), else the rank r of the covariance, with a
            warning. Hidden states that come out of a LayerNorm lie in a hyperplane (their normalised coordinates
            sum to 0), so their covariance has rank H - 1 or less however many vectors there are; whitening the
            null directions would blow float rounding noise up to unit variance.

    Attributes (after fit):
        mean_: (H,) float64, mu.
        components_: (k, H) float64, the first k columns of U as rows.
        explained_variance_: (k,) the matching eigenvalues S; ``W[:, :k] = components_.T / sqrt(explained_variance_)``.
        n_components_: k as resolved at fit time.
        n_features_in_: H.

    Raises (in fit):
        ValueError: if an int ``n_components`` exceeds the rank of the covariance (for instance when N <= H), since
            whitening would divide by ~0, or if X has no variance at all.
    """

    _scalar_attributes = ("n_features_in_", "n_components_")

    def __init__(self, *, n_components: int | None = None):
        self.n_components = n_components

    def fit(self, X, y=None) -> "Whitening":
        """Learn mu and W from X: (N, H), N >= 2. Returns self."""
        X = self._check_fit_input(X, min_rows=2)
        n, h = X.shape
        if self.n_components is not None:
            check_int(self.n_components, "n_components", low=1, high=h, high_text="H")
        mean, cov = _mean_and_covariance(X)
        values, vectors = _principal_axes(cov)
        # Eigenvalues below this are rounding noise of eigh on a matrix whose largest eigenvalue is values[0].
        tol = values[0] * max(n, h) * _EPS
        rank = int((values > tol).sum())
        if rank == 0:
            raise ValueError("X (N=%d vectors) has zero variance in every direction; there is nothing to whiten" % n)
        if self.n_components is None:
            k = rank
            if rank < h:
                warnings.warn(
                    "Whitening(n_components=None): the covariance of X (N=%d vectors, H=%d dimensions) has rank %d, "
                    "so only the %d directions with non-zero variance are whitened (output dimension %d, no "
                    "inverse_transform); pass n_components=%d to silence this, or fit on more vectors if N <= H"
                    % (n, h, rank, rank, rank, rank),
                    UserWarning,
                    stacklevel=2,
                )
        else:
            k = self.n_components
            if rank < k:
                raise ValueError(
                    "Whitening with n_components=%d needs %d covariance eigenvalues above 0, but the covariance of X "
                    "(N=%d vectors, H=%d dimensions) has rank %d; pass n_components <= %d or fit on more vectors"
                    % (k, k, n, h, rank, rank)
                )
        self.mean_ = mean
        self.components_ = np.ascontiguousarray(vectors[:k])
        self.explained_variance_ = values[:k].copy()
        self.n_components_ = k
        self.n_features_in_ = h
        return self

    def transform(self, X) -> np.ndarray:
        """X: (N, H) -> (N, k) whitened vectors."""
        X = self._check_transform_input(X)
        xc = np.asarray(X, dtype=np.float64) - self.mean_  # (N, H)
        z = (xc @ self.components_.T) / np.sqrt(self.explained_variance_)  # (N, k)
        return z.astype(_out_dtype(X), copy=False)

    def inverse_transform(self, X) -> np.ndarray:
        """Z: (N, H) -> (N, H) original vectors; only when all H components were kept.

        Raises:
            ValueError: if the estimator keeps fewer than H components (the map is not invertible).
        """
        check_is_fitted(self)
        if self.n_components_ != self.n_features_in_:
            raise ValueError(
                "inverse_transform needs a full whitening (n_components=None or H=%d); this one keeps "
                "n_components=%d" % (self.n_features_in_, self.n_components_)
            )
        X = self._check_transform_input(X)
        x = (np.asarray(X, dtype=np.float64) * np.sqrt(self.explained_variance_)) @ self.components_ + self.mean_
        return x.astype(_out_dtype(X), copy=False)


_CLASSES: dict[str, type[_Postprocessor]] = {
    c.__name__: c for c in (Identity, MeanCenterer, Standardizer, AllButTheTop, Whitening)
}

#: Names accepted by :func:`make_postprocessor` (:data:`~ctxemb.geometry.options.POSTPROCESSOR_NAMES`: none,
#: standardize, center, abtt, whiten), in the order analyses report them.
POSTPROCESSORS: dict[str, type[_Postprocessor]] = dict(
    zip(POSTPROCESSOR_NAMES, (Identity, Standardizer, MeanCenterer, AllButTheTop, Whitening), strict=True))


def make_postprocessor(name: str, **kwargs) -> _Postprocessor:
    """Build an unfitted post-processor by name.

    Args:
        name: one of "none", "standardize", "center", "abtt", "whiten" (case-insensitive).
        **kwargs: keyword arguments of the class, e.g. ``n_components=3`` for "abtt" and "whiten".

    Returns:
        The estimator (call ``fit`` before ``transform``).

    Raises:
        ValueError: if ``name`` is unknown (the message lists the valid names) or a keyword does not belong to it.
        TypeError: if ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError("name must be a str, one of %s; got %r" % (list(POSTPROCESSORS), name))
    cls = POSTPROCESSORS.get(name.strip().lower())
    if cls is None:
        raise ValueError("unknown post-processor name %r; valid names: %s" % (name, ", ".join(POSTPROCESSORS)))
    valid = set(cls._get_param_names())
    unknown = sorted(set(kwargs) - valid)
    if unknown:
        raise ValueError(
            "post-processor %r (%s) takes no argument(s) %s; valid: %s"
            % (name, cls.__name__, unknown, sorted(valid) if valid else "none")
        )
    return cls(**kwargs)


def load_postprocessor(path: str | os.PathLike) -> _Postprocessor:
    """Load whichever post-processor :meth:`save` wrote to ``path``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if the file is not a ctxemb post-processor.
    """
    return _Postprocessor.load(path)
