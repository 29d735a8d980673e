"""Argument checks shared by every public entry point: choices, integers, (N, H) matrices, unit rows, string batches;
and the library's one JSON/UTF-8 file reader, :func:`read_json_file`.

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

import json
import logging
import numbers
import os
import re
from pathlib import Path
from typing import Any, Literal, Sequence, TypeVar

import numpy as np

logger = logging.getLogger(__name__)

T = TypeVar("T")
ZeroRowPolicy = Literal["raise", "keep"]


class CorruptFileError(ValueError):
    """A file the library reads is corrupt, truncated, not in the expected encoding or format, or holds values
    that cannot be right; the message names the file (and the line, element or field when known) and what is wrong.

    A ``ValueError``, so code that catches ``ValueError`` keeps working. ``path`` is the offending file.
    (:class:`ctxemb.modeling.checkpoint.CheckpointError`, for model weights, is a subclass.)
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        super().__init__(message)
        self.path = None if path is None else Path(path)


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
    if X is None:
        raise TypeError("%s is None; expected an array of shape (N vectors, H dimensions)" % name)
    if hasattr(X, "toarray") and hasattr(X, "nnz"):  # scipy.sparse, without importing scipy
        raise TypeError("%s is a sparse matrix; sparse input is not supported: pass a dense array (X.toarray())" % name)
    if isinstance(X, (str, bytes, dict, set)):
        raise TypeError("%s must be a numeric array of shape (N, H); got a %s" % (name, type(X).__name__))
    try:
        arr = X if isinstance(X, np.ndarray) else np.asarray(X)
    except ValueError as e:  # ragged nested lists
        raise ValueError(
            "%s could not be read as an (N, H) array (rows of different lengths?): %s" % (name, e)
        ) from None
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


def is_int(value) -> bool:
    """Whether ``value`` is an integer: a Python or numpy integer, not a bool (``True`` is no count).

    The predicate behind :func:`check_int`, for code that validates many fields and words its own message (e.g. a
    JSON record's fields).
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


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
    if not is_int(value):
        raise TypeError("%s must be an int; got %r (%s)" % (name, value, type(value).__name__))
    value = int(value)
    if value < low:
        raise ValueError("%s must be >= %d; got %d" % (name, low, value))
    if high is not None and value > high:
        raise ValueError(
            "%s must be <= %d%s; got %d" % (name, high, " (%s)" % high_text if high_text else "", value)
        )
    return value


def check_probability(value, name: str, *, allow_none: bool = False, allow_one: bool = False) -> float | None:
    """Return ``value`` as a float after checking it is in [0, 1) (a dropout rate), or [0, 1] with ``allow_one``
    (a weight); None passes where ``allow_none``.

    Raises:
        ValueError: anything else (bools and strings included), naming ``name``.
    """
    if value is None and allow_none:
        return None
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not (0.0 <= value <= 1.0 if allow_one else 0.0 <= value < 1.0)):
        span = "in [0, 1]" if allow_one else "a probability in [0, 1)"
        raise ValueError(f"{name} must be {'None or ' if allow_none else ''}{span}; got {value!r}")
    return float(value)


def check_bool(value, name: str) -> bool:
    """Return ``value`` as a bool; only ``True``/``False`` (and numpy bools) are accepted, so that a string such as
    ``"no"`` is not silently taken as true.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError("%s must be True or False; got %r (%s)" % (name, value, type(value).__name__))


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
    # Scaled norms (as LAPACK's nrm2): divide each row by its largest magnitude first, so that squaring neither
    # overflows (|x| ~ 1e200) nor underflows; |x| = scale * |x / scale|, with |x / scale| in [1, sqrt(H)].
    scale = np.max(np.abs(u), axis=1) if u.shape[1] else np.zeros(len(u))  # (n,)
    u /= np.where(scale > 0, scale, 1.0)[:, None]
    scaled_norms = np.sqrt(np.einsum("ij,ij->i", u, u))  # (n,), >= 1 for a non-zero row
    is_zero = scale <= _TINY / np.maximum(scaled_norms, 1.0)  # the true norm scale * scaled_norms <= _TINY
    norms = scaled_norms
    if is_zero.any():
        if zero == "raise":
            raise ValueError(
                "%s has %d zero-length vectors (norm <= %g; first at row %d); the cosine of a zero vector is undefined"
                % (name, int(is_zero.sum()), _TINY, row_offset + int(np.argmax(is_zero)))
            )
        logger.warning("%s has %d zero-length rows; they stay zero and score 0 against everything",
                       name, int(is_zero.sum()))
    u /= np.where(is_zero, 1.0, norms)[:, None]
    u[is_zero] = 0.0  # rounding noise below _TINY is no direction
    return np.ascontiguousarray(u, dtype=dtype)


def check_string_batch(texts, name: str, *, allow_empty_batch: bool = False) -> list[str]:
    """Return ``texts`` as a list of str; a single str is refused (wrap it in a list), as is a non-str item.

    Raises:
        TypeError: for None, a single str, a non-iterable, or an item that is not a str.
        ValueError: for an empty batch unless ``allow_empty_batch``, or a str holding a lone surrogate.
    """
    if texts is None:
        raise TypeError("%s is None; expected a list of strings" % name)
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
        check_no_surrogates(t, "%s[%d]" % (name, i))
    if not items and not allow_empty_batch:
        raise ValueError("%s is empty; expected at least one string" % name)
    return items


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (see :func:`check_no_surrogates`)."""
    return _SURROGATE.search(text) is not None


def check_no_surrogates(text: str, name: str) -> str:
    """Return ``text`` if it holds no lone surrogate (U+D800..U+DFFF).

    Such code points are not characters: they cannot be written as UTF-8 and tokenizers refuse them. They come from
    decoding bytes with ``errors="surrogateescape"`` or from JSON ``"\\ud83d"`` escapes cut in half.

    Raises:
        ValueError: naming ``name`` and the position of the first one.
    """
    m = _SURROGATE.search(text)
    if m is not None:
        raise ValueError(
            "%s holds a lone surrogate %r at character %d; it is not a valid Unicode character (decode the "
            "text with errors='replace', or repair it, before embedding)" % (name, m.group(), m.start())
        )
    return text


def decode_utf8(data: bytes, path: str | os.PathLike, what: str = "file") -> str:
    """Decode ``data`` read from ``path`` as UTF-8 (a leading byte-order mark is allowed).

    Raises:
        CorruptFileError: naming the file, the line and the offending byte.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        start = e.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, start) + 1
        raise CorruptFileError(
            "%s %s is not valid UTF-8: byte 0x%02x on line %d (position %d) cannot be decoded; is it in another "
            "encoding (e.g. latin-1)? Save it as UTF-8" % (what, path, data[start], line, start), path
        ) from None


def read_json_file(path: str | os.PathLike, what: str = "JSON file", *, expected: type | None = dict) -> Any:
    """Read a UTF-8 JSON file: the library's one reader of JSON files (configs, manifests, metadata, results).

    Every way the file can be unreadable is one error that names it, what it is and what was expected.

    Args:
        path: the file.
        what: what the file is, for messages (e.g. "config file", "index manifest").
        expected: the type the top-level value must have (None: any JSON value).

    Returns:
        The parsed value (a dict when ``expected`` is dict).

    Raises:
        FileNotFoundError: "<what> not found: <path>".
        PermissionError, IsADirectoryError: as ``open`` raises them (they name the path).
        CorruptFileError: (a ValueError) the file is empty, not UTF-8 (names the line and byte), not JSON (truncated
            or garbage; names the line and column), or its top level is not of the ``expected`` type.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise FileNotFoundError("%s not found: %s" % (what, path)) from None
    text = decode_utf8(data, path, what)
    if not text.strip():
        raise CorruptFileError("%s %s is empty; expected a JSON %s" % (what, path, _json_kind(expected)), path)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CorruptFileError("%s %s is not valid JSON (truncated or corrupt?): %s at line %d, column %d"
                               % (what, path, e.msg, e.lineno, e.colno), path) from None
    except RecursionError:
        raise CorruptFileError("%s %s is nested too deeply to be read" % (what, path), path) from None
    if expected is not None and not isinstance(value, expected):
        raise CorruptFileError("%s %s must hold a JSON %s; it holds %s"
                               % (what, path, _json_kind(expected), _json_kind(type(value), article=True)), path)
    return value


def _json_kind(t: type | None, article: bool = False) -> str:
    kind = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(t, "value")
    return kind if not article or kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


# Rows shorter than this are treated as zero: normalising them would blow rounding noise up to a unit vector.
_TINY = 1e-12
