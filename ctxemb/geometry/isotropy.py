"""Anisotropy: the expected cosine between two random distinct vectors (J&M 11.3.2; Ethayarajh 2019).

Every norm is a scaled norm (a row is divided by its largest magnitude before squaring), so vectors with huge or
tiny entries give the same cosines as moderate ones instead of overflowing.

For unit vectors u_1..u_n the sum over ordered pairs i != j of u_i . u_j equals |sum_i u_i|^2 - n, so the mean
cosine over all n(n-1) pairs is exact in O(N H) time and O(H) memory:

    anisotropy = (|S|^2 - n) / (n (n - 1)),          S = sum_i u_i

Per dimension h the same identity gives the expected contribution of that dimension to the cosine
(Timkey & van Schijndel 2021):

    CC_h = E_{i != j}[u_ih u_jh] = (S_h^2 - sum_i u_ih^2) / (n (n - 1)),

and the contributions sum to the anisotropy.

Shape legend:
    N  vectors (word instances)
    H  dimensions of a vector
    P  sampled pairs
"""

from __future__ import annotations

import logging

import numpy as np

from ctxemb.core.validation import check_int, check_vectors, is_int, unit_rows

logger = logging.getLogger(__name__)

# Rows are normalised in blocks so that a (N, H) float32 input never needs a full float64 copy.
_BLOCK_ROWS = 4096


def _unit_sums(X: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Sums over rows of the unit vectors and of their squares.

    Args:
        X: (N, H) checked array.
        name: the argument's name, for errors.

    Returns:
        S: (H,) float64, sum_i u_i.
        Q: (H,) float64, sum_i u_i**2 (elementwise); Q sums to N up to rounding.
    """
    n, h = X.shape
    s = np.zeros(h, dtype=np.float64)
    q = np.zeros(h, dtype=np.float64)
    for start in range(0, n, _BLOCK_ROWS):
        u = unit_rows(X[start : start + _BLOCK_ROWS], name, row_offset=start)  # (n_block, H)
        s += u.sum(axis=0)
        q += np.einsum("nh,nh->h", u, u)
    return s, q


def anisotropy(X) -> float:
    """Exact mean cosine similarity over all pairs of distinct rows of ``X``.

    Near 0 for vectors pointing in all directions; near 1 when all vectors share one direction.

    Args:
        X: array-like of shape (N, H), N >= 2; rows must be non-zero.

    Returns:
        The mean of cos(x_i, x_j) over all i != j, a float in [-1/(N-1), 1].

    Raises:
        ValueError: if ``X`` is not 2-D, has fewer than 2 rows, holds NaN/inf or a zero row.
        TypeError: if ``X`` is not numeric.
    """
    X = check_vectors(X, "X", min_rows=2)
    n = X.shape[0]
    s, _ = _unit_sums(X, "X")
    return float((s @ s - n) / (n * (n - 1)))


def cosine_contributions(X) -> np.ndarray:
    """Expected contribution of each dimension to the cosine of two distinct rows (Timkey & van Schijndel 2021).

    ``CC[h] = mean over i != j of u_ih * u_jh`` with ``u = x / |x|``; ``CC.sum()`` equals ``anisotropy(X)``.

    Args:
        X: array-like of shape (N, H), N >= 2; rows must be non-zero.

    Returns:
        np.ndarray of shape (H,), float64.

    Raises:
        ValueError: if ``X`` is not 2-D, has fewer than 2 rows, holds NaN/inf or a zero row.
        TypeError: if ``X`` is not numeric.
    """
    X = check_vectors(X, "X", min_rows=2)
    n = X.shape[0]
    s, q = _unit_sums(X, "X")
    return (s * s - q) / (n * (n - 1))


def sample_distinct_pairs(n: int, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n_pairs`` ordered pairs (i, j), i != j, uniformly with replacement from range(n).

    Returns:
        i, j: (P,) int64 arrays.
    """
    i = rng.integers(0, n, size=n_pairs)
    # An offset in 1..n-1 makes j uniform over the n-1 indices other than i.
    j = (i + rng.integers(1, n, size=n_pairs)) % n
    return i, j


def row_norms(X: np.ndarray) -> np.ndarray:
    """L2 norms of the rows of a checked (N, H) array, in float64 blocks. Returns (N,).

    Scaled (each row divided by its largest magnitude before squaring), so that no square overflows or underflows;
    a norm above the float64 range (about 1.8e308) is inf.
    """
    out = np.empty(X.shape[0], dtype=np.float64)
    for start in range(0, X.shape[0], _BLOCK_ROWS):
        a = np.asarray(X[start : start + _BLOCK_ROWS], dtype=np.float64)
        scale = np.abs(a).max(axis=1)  # (n_block,)
        safe = np.where(scale > 0, scale, 1.0)
        with np.errstate(over="ignore"):
            out[start : start + _BLOCK_ROWS] = scale * np.sqrt(np.einsum("nh,nh->n", a / safe[:, None],
                                                                         a / safe[:, None]))
    return out


def _unit(a: np.ndarray) -> np.ndarray:
    """Rows of ``a`` (float64) divided by their scaled norm; zero rows stay zero."""
    scale = np.abs(a).max(axis=1)
    a = a / np.where(scale > 0, scale, 1.0)[:, None]
    n = np.sqrt(np.einsum("ph,ph->p", a, a))
    return a / np.where(n > 0, n, 1.0)[:, None]


def pair_cosines(X: np.ndarray, norms: np.ndarray | None, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """cos(X[i_p], X[j_p]) for each pair p, in blocks so memory stays O(block * H).

    Each row is normalised (with a scaled norm) before the products, so values near the float64 limits neither
    overflow nor underflow.

    Args:
        X: (N, H) checked array, rows non-zero.
        norms: unused (kept for compatibility; the norms are recomputed per block, scaled).
        i, j: (P,) row indices.

    Returns:
        (P,) float64 cosines.
    """
    out = np.empty(len(i), dtype=np.float64)
    for start in range(0, len(i), _BLOCK_ROWS):
        ib, jb = i[start : start + _BLOCK_ROWS], j[start : start + _BLOCK_ROWS]
        a = _unit(np.asarray(X[ib], dtype=np.float64))  # (P_block, H)
        b = _unit(np.asarray(X[jb], dtype=np.float64))
        out[start : start + _BLOCK_ROWS] = np.einsum("ph,ph->p", a, b)
    return out


def anisotropy_sampled(X, n_pairs: int = 100_000, *, seed: int | None = 0) -> float:
    """Monte-Carlo estimate of :func:`anisotropy` from ``n_pairs`` random pairs of distinct rows.

    :func:`anisotropy` is already O(N H); use this when ``X`` is a memory-mapped array too large to read whole,
    or to reproduce the sampling protocol of Ethayarajh (2019). The standard error is about
    ``std(cos) / sqrt(n_pairs)``.

    Args:
        X: array-like of shape (N, H), N >= 2; rows must be non-zero.
        n_pairs: number of pairs drawn (with replacement), >= 1.
        seed: seed for ``numpy.random.default_rng``; None for fresh entropy.

    Returns:
        The mean cosine over the sampled pairs.

    Raises:
        ValueError: bad ``X`` (as in :func:`anisotropy`) or ``n_pairs`` < 1.
    """
    X = check_vectors(X, "X", min_rows=2)
    n_pairs = check_int(n_pairs, "n_pairs", low=1)
    norms = row_norms(X)
    if (norms == 0).any():
        raise ValueError(
            "X has %d zero-length vectors (first at row %d); the cosine of a zero vector is undefined"
            % (int((norms == 0).sum()), int(np.argmax(norms == 0)))
        )
    seed = _check_seed(seed)
    i, j = sample_distinct_pairs(X.shape[0], n_pairs, np.random.default_rng(seed))
    return float(pair_cosines(X, norms, i, j).mean())


def _check_seed(seed):
    """A seed for ``numpy.random.default_rng``: None or a non-negative int."""
    if seed is None:
        return None
    if not is_int(seed):
        raise TypeError("seed must be an int or None; got %r (%s)" % (seed, type(seed).__name__))
    if seed < 0:
        raise ValueError("seed must be >= 0; got %d" % seed)
    return int(seed)
