"""Rogue dimensions: the few dimensions that dominate the cosine (J&M 11.3.2; Timkey & van Schijndel 2021).

A dimension's share of the cosine is its expected contribution ``CC_h`` (see :mod:`ctxemb.geometry.isotropy`)
divided by the sum over all dimensions, which is the anisotropy. Informativity asks the converse question: if the
top-k dimensions are deleted, how well does the cosine in the remaining space still track the full cosine?

Shape legend:
    N  vectors (word instances)
    H  dimensions of a vector
    K  dimensions asked for (top-k)
    P  pairs of vectors
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

from ctxemb.core.validation import check_int, check_vectors
from ctxemb.geometry.isotropy import _check_seed, cosine_contributions, pair_cosines, row_norms, sample_distinct_pairs

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RogueDimensions:
    """The K dimensions with the largest expected contribution to the cosine, largest first.

    Attributes:
        indices: (K,) int64 dimension indices.
        shares: (K,) float64, ``contributions / anisotropy``: the fraction of the mean cosine each dimension
            accounts for. Only meaningful when the anisotropy is clearly positive (near-isotropic data has
            shares that are large, noisy and of either sign); NaN when the anisotropy is exactly 0.
        contributions: (K,) float64, the expected contribution ``CC_h`` of each dimension.
        means: (K,) float64, mean of each dimension over the raw (un-normalised) vectors.
        variances: (K,) float64, population variance of each dimension over the raw vectors.
        anisotropy: the sum of all H contributions, i.e. ``anisotropy(X)``.
    """

    indices: np.ndarray
    shares: np.ndarray
    contributions: np.ndarray
    means: np.ndarray
    variances: np.ndarray
    anisotropy: float

    @property
    def total_share(self) -> float:
        """Fraction of the mean cosine accounted for by all K dimensions together."""
        return float(self.shares.sum())

    def to_dict(self) -> dict:
        """A JSON-able dict (lists of Python numbers)."""
        return {
            "indices": [int(i) for i in self.indices],
            "shares": [float(v) for v in self.shares],
            "contributions": [float(v) for v in self.contributions],
            "means": [float(v) for v in self.means],
            "variances": [float(v) for v in self.variances],
            "anisotropy": float(self.anisotropy),
        }


def rogue_dimensions(X, k: int = 3) -> RogueDimensions:
    """Find the ``k`` dimensions with the largest share of the expected cosine.

    Args:
        X: array-like of shape (N, H), N >= 2; rows must be non-zero.
        k: how many dimensions to return, 1 <= k <= H.

    Returns:
        A :class:`RogueDimensions` with (K,) arrays ordered by decreasing contribution.

    Raises:
        ValueError: if ``X`` is not 2-D, has fewer than 2 rows, holds NaN/inf or a zero row, or ``k`` is out of range.
        TypeError: if ``X`` is not numeric or ``k`` not an int.
    """
    X = check_vectors(X, "X", min_rows=2)
    k = check_int(k, "k", low=1, high=X.shape[1], high_text="the number of dimensions H of X")
    cc = cosine_contributions(X)  # (H,)
    total = float(cc.sum())
    order = np.argsort(-cc, kind="stable")[:k]  # (K,)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = cc[order] / total if total != 0 else np.full(k, np.nan)
    cols = np.asarray(X[:, order], dtype=np.float64)  # (N, K)
    # Scaled, so that huge values do not overflow the squares: var(x) = s^2 var(x / s).
    scale = np.abs(cols).max(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    with np.errstate(over="ignore"):
        variances = (cols / scale).var(axis=0) * scale * scale  # inf only if the variance itself exceeds float64
    return RogueDimensions(
        indices=order.astype(np.int64),
        shares=shares,
        contributions=cc[order],
        means=cols.mean(axis=0),
        variances=variances,
        anisotropy=total,
    )


def informativity(X, k: int = 1, *, n_pairs: int = 100_000, seed: int | None = 0) -> float:
    """Squared Pearson correlation between full cosines and cosines with the top-k rogue dimensions removed.

    The dimensions removed are the ``k`` with the largest expected contribution to the cosine
    (:func:`rogue_dimensions`). A value near 1 means those dimensions carry little of the information that ranks
    pairs by similarity (they mostly add a constant); a low value means the cosine ranking rests on them.

    All N(N-1)/2 pairs are used when there are at most ``n_pairs`` of them, else ``n_pairs`` random pairs of
    distinct rows drawn with ``seed``.

    Args:
        X: array-like of shape (N, H), N >= 3; rows must be non-zero.
        k: how many dimensions to remove, 1 <= k <= H - 1.
        n_pairs: the most pairs to use, >= 2.
        seed: seed for the pair sample (``numpy.random.default_rng``); None for fresh entropy.

    Returns:
        r^2 in [0, 1]; NaN (with a warning) if the cosines are constant over the pairs.

    Raises:
        ValueError: if ``X`` is not 2-D, has fewer than 3 rows, holds NaN/inf or a zero row, ``k`` is out of range,
            or some vector is zero once the k dimensions are removed.
        TypeError: if ``X`` is not numeric, or ``k``/``n_pairs`` not ints.
    """
    X = check_vectors(X, "X", min_rows=3)
    n, h = X.shape
    k = check_int(k, "k", low=1, high=h - 1, high_text="H - 1: at least one dimension must remain; H = %d" % h)
    n_pairs = check_int(n_pairs, "n_pairs", low=2)
    seed = _check_seed(seed)

    removed = rogue_dimensions(X, k).indices
    keep = np.setdiff1d(np.arange(h), removed)
    X_reduced = X[:, keep]  # (N, H - K)

    norms = row_norms(X)  # non-zero: checked by rogue_dimensions
    norms_reduced = row_norms(X_reduced)
    if (norms_reduced == 0).any():
        raise ValueError(
            "X has %d vectors that are zero once the top k=%d dimensions %s are removed (first at row %d); "
            "their cosine is undefined"
            % (int((norms_reduced == 0).sum()), k, removed.tolist(), int(np.argmax(norms_reduced == 0)))
        )

    total_pairs = n * (n - 1) // 2
    if total_pairs <= n_pairs:
        i, j = np.triu_indices(n, k=1)
    else:
        i, j = sample_distinct_pairs(n, n_pairs, np.random.default_rng(seed))
    full = pair_cosines(X, norms, i, j)  # (P,)
    reduced = pair_cosines(X_reduced, norms_reduced, i, j)  # (P,)

    full_c, reduced_c = full - full.mean(), reduced - reduced.mean()
    denom = np.sqrt((full_c @ full_c) * (reduced_c @ reduced_c))
    if denom == 0:
        warnings.warn(
            "informativity: the cosines are constant over the %d pairs, so their correlation is undefined; "
            "returning NaN" % len(i),
            RuntimeWarning,
            stacklevel=2,
        )
        return float("nan")
    r = float(full_c @ reduced_c / denom)
    return min(r * r, 1.0)
