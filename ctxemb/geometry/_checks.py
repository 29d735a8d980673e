"""Input checks shared by the geometry functions and estimators.

Every public entry point of ``ctxemb.geometry`` validates its arrays here so that a bad argument fails with one
message style: the argument's name, what was expected and what arrived.

Shape legend: N vectors (rows), H dimensions (columns).
"""

from __future__ import annotations

import numbers

import numpy as np


def check_vectors(X, name: str = "X", *, min_rows: int = 2) -> np.ndarray:
    """Return ``X`` as a 2-D numeric numpy array of shape (N, H), without copying when it already is one.

    Args:
        X: array-like of shape (N, H).
        name: the argument's name, used in error messages.
        min_rows: the fewest rows accepted.

    Returns:
        np.ndarray of shape (N, H), the caller's array when no conversion was needed (never modify it).

    Raises:
        TypeError: if ``X`` is not numeric, or is a sparse matrix.
        ValueError: if ``X`` is complex, is not 2-D, has fewer than ``min_rows`` rows or no columns, or holds NaN
            or infinity.
    """
    if hasattr(X, "toarray") and hasattr(X, "nnz"):  # scipy.sparse, without importing scipy
        raise TypeError("%s is a sparse matrix; sparse input is not supported: pass a dense array (X.toarray())" % name)
    arr = X if isinstance(X, np.ndarray) else np.asarray(X)
    if arr.dtype.kind == "O":  # e.g. a ragged or mixed list: try for numbers, as numpy would
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(
                "%s must be a numeric array; its objects could not be read as numbers: %s" % (name, e)
            ) from e
    if arr.dtype.kind == "c":
        raise ValueError("%s must be real: Complex data not supported (got dtype %s)" % (name, arr.dtype))
    if arr.dtype.kind not in "biuf":
        raise TypeError("%s must be a numeric (real) array; got dtype %s" % (name, arr.dtype))
    if arr.ndim != 2:
        raise ValueError(
            "%s must be a 2-D array of shape (N vectors, H dimensions); got a %d-D array of shape %s%s"
            % (name, arr.ndim, arr.shape,
               ". Reshape your data with X.reshape(1, -1) for a single vector" if arr.ndim == 1 else "")
        )
    n, h = arr.shape
    if n < min_rows:
        raise ValueError("%s needs at least %d vectors (rows); got n_samples=%d" % (name, min_rows, n))
    if h < 1:
        raise ValueError(
            "%s has 0 feature(s) (shape=%s) while a minimum of 1 is required (one column per dimension)"
            % (name, arr.shape)
        )
    if arr.dtype.kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            bad = np.argwhere(~finite)
            r, c = bad[0]
            raise ValueError(
                "%s contains NaN or infinity (%d values; first at row %d, column %d)" % (name, len(bad), r, c)
            )
    return arr


def check_int(value, name: str, *, low: int, high: int | None = None, high_text: str = "") -> int:
    """Return ``value`` as an int after checking ``low <= value <= high``.

    Args:
        value: the caller's value.
        name: the argument's name, used in error messages.
        low: the smallest value accepted.
        high: the largest value accepted (None: no upper bound).
        high_text: what ``high`` stands for, e.g. "the number of dimensions H", for the error message.

    Raises:
        TypeError: if ``value`` is not an integer (bools are refused).
        ValueError: if it lies outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int; got %r (%s)" % (name, value, type(value).__name__))
    value = int(value)
    if value < low:
        raise ValueError("%s must be >= %d; got %d" % (name, low, value))
    if high is not None and value > high:
        raise ValueError(
            "%s must be <= %d%s; got %d" % (name, high, " (%s)" % high_text if high_text else "", value)
        )
    return value


def unit_rows(block: np.ndarray, name: str, row_offset: int = 0) -> np.ndarray:
    """L2-normalise the rows of ``block`` into a new float64 array (the caller's array is left alone).

    Args:
        block: (n, H) rows to normalise.
        name: the argument's name, used in error messages.
        row_offset: index of ``block[0]`` in the caller's array, so that errors point at the right row.

    Returns:
        (n, H) float64 array of unit rows.

    Raises:
        ValueError: if a row has zero length (its cosine with anything is undefined).
    """
    u = np.array(block, dtype=np.float64)  # a copy, always
    norms = np.linalg.norm(u, axis=1)
    zero = norms == 0
    if zero.any():
        raise ValueError(
            "%s has %d zero-length vectors (first at row %d); the cosine of a zero vector is undefined"
            % (name, int(zero.sum()), row_offset + int(np.argmax(zero)))
        )
    u /= norms[:, None]
    return u
