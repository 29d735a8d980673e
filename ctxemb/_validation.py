"""Argument checks shared by every public entry point: choices, integers, (N, H) matrices, unit rows, string batches.

One message style everywhere: the argument's name, what was expected and what arrived. This module sits at the
bottom of the package (it imports only numpy), so every layer can use it.

The zero-row policy (one, for the whole library): a zero-length vector has no direction, so its cosine with
anything is undefined.
  * Statistics over a set of vectors (anisotropy, rogue dimensions, ...) refuse it: ``unit_rows(..., zero="raise")``
    raises a ValueError naming the first such row.
  * Lookups (sense stores, search indexes) keep it as a zero row that scores 0 against everything, and say so in
    one logged warning: ``unit_rows(..., zero="keep")``.

Shape legend: N vectors (rows), H dimensions (columns).
"""

from __future__ import annotations

import logging
import numbers
from typing import Literal, Sequence, TypeVar

import numpy as np

logger = logging.getLogger(__name__)

T = TypeVar("T")
ZeroRowPolicy = Literal["raise", "keep"]


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


def check_choice(value: T, name: str, choices: Sequence[T]) -> T:
    """Return ``value`` if it is one of ``choices``.

    Raises:
        ValueError: naming ``name``, the allowed values and what arrived.
    """
    try:
        ok = value in choices
    except TypeError:  # unhashable value against a set/dict of choices
        ok = False
    if not ok:
        raise ValueError("%s must be one of %s; got %r" % (name, ", ".join(repr(c) for c in choices), value))
    return value


def check_finite_matrix(value, name: str, *, dim: int | None = None, dim_text: str = "") -> np.ndarray:
    """Return ``value`` as a real 2-D numpy array of shape (N, H) with finite values, without copying.

    Lighter than :func:`check_vectors` (any number of rows, including 0); for stores and indexes that add rows.

    Args:
        value: array-like of shape (N, H).
        name: the argument's name, used in error messages.
        dim: the H required, or None for any.
        dim_text: what ``dim`` is, e.g. "the store's dimension", for the error message.

    Raises:
        TypeError: if the values are not real numbers.
        ValueError: if the array is not 2-D, has the wrong H, or holds NaN or infinity.
    """
    a = value if isinstance(value, np.ndarray) else np.asarray(value)
    if a.dtype.kind not in "biuf":
        raise TypeError("%s must hold real numbers; got dtype %s" % (name, a.dtype))
    if a.ndim != 2:
        raise ValueError("%s must be a 2-D array (N, H); got shape %s" % (name, a.shape))
    if dim is not None and a.shape[1] != dim:
        raise ValueError("%s has dimension %d, but %s is %d" % (name, a.shape[1], dim_text or "the expected dimension", dim))
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ValueError("%s contains NaN or infinite values" % name)
    return a


def unit_rows(block, name: str, *, zero: ZeroRowPolicy = "raise", row_offset: int = 0,
              dtype=np.float64) -> np.ndarray:
    """L2-normalise the rows of ``block`` into a new array (the caller's array is never modified).

    Args:
        block: (n, H) rows to normalise.
        name: the argument's name, used in error messages.
        zero: what a zero-length row gets (see the module docstring): ``"raise"`` refuses it, ``"keep"`` leaves it
            zero (it then scores 0 against everything) and logs one warning.
        row_offset: index of ``block[0]`` in the caller's array, so that errors point at the right row.
        dtype: the result's dtype; float32 results are C-contiguous, as FAISS wants them.

    Returns:
        (n, H) array of unit rows (zero rows stay zero with ``zero="keep"``).

    Raises:
        ValueError: with ``zero="raise"``, if a row has zero length.
    """
    u = np.array(block, dtype=np.float64)  # a copy, always: normalise in float64, then cast
    norms = np.sqrt(np.einsum("ij,ij->i", u, u))  # (n,)
    is_zero = norms <= _TINY
    if is_zero.any():
        if zero == "raise":
            raise ValueError(
                "%s has %d zero-length vectors (first at row %d); the cosine of a zero vector is undefined"
                % (name, int(is_zero.sum()), row_offset + int(np.argmax(is_zero)))
            )
        logger.warning("%s has %d zero-length rows; they stay zero and score 0 against everything",
                       name, int(is_zero.sum()))
    u /= np.where(is_zero, 1.0, norms)[:, None]
    u[is_zero] = 0.0  # rounding noise below _TINY is no direction
    return np.ascontiguousarray(u, dtype=dtype)


def check_string_batch(texts, name: str, *, allow_empty_batch: bool = False) -> list[str]:
    """Return ``texts`` as a list of str; a single str is refused (wrap it in a list), as is a non-str item.

    Raises:
        TypeError: for a single str, a non-iterable, or an item that is not a str.
        ValueError: for an empty batch unless ``allow_empty_batch``.
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError("%s must be a list of strings, got a single %s; wrap it in a list"
                        % (name, type(texts).__name__))
    try:
        items = list(texts)
    except TypeError:
        raise TypeError("%s must be a list of strings; got %s" % (name, type(texts).__name__)) from None
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError("%s[%d] must be a str; got %s" % (name, i, type(t).__name__))
    if not items and not allow_empty_batch:
        raise ValueError("%s is empty; expected at least one string" % name)
    return items


# Rows shorter than this are treated as zero: normalising them would blow rounding noise up to a unit vector.
_TINY = 1e-12
