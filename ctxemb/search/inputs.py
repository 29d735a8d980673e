"""Checks of the arguments of :class:`ctxemb.search.SemanticIndex`, and the embedder-configuration comparison
that every store of embeddings shares (indexes, the WSD sense store).

Shape legend: N rows (items or queries), H dimensions of a vector.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping, Sequence

import numpy as np

from ctxemb.core.validation import check_choice, check_int
from ctxemb.search.params import METRICS, IndexKind, IndexParams, resolve_params

logger = logging.getLogger(__name__)

# Vectors are validated in chunks so a large add never needs a second full copy.
CHUNK = 65_536
# The smallest magnitude that rounds to infinity in float32 (FLT_MAX plus half an ulp).
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103

# ---------------------------------------------------------------------------------------------------------------
# argument checks


def json_dict(value, name: str) -> dict | None:
    """A JSON-able dict, normalised through a JSON round trip (tuples become lists) so comparisons are stable."""
    if value is None:
        return None
    if not isinstance(value, Mapping) and hasattr(value, "to_dict"):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise TypeError("%s must be a dict (or have a to_dict() method); got %s" % (name, type(value).__name__))
    try:
        return json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError("%s must be JSON-serialisable: %s" % (name, e)) from None


def apply_layer_overrides(config: Mapping | None, recipe: Mapping | None) -> dict | None:
    """The embedder configuration that a recipe's per-call layer choice gives: ``layers``/``layer_pooling`` replaced.

    ``layer_weights`` only count for ``"weighted"`` pooling, so another pooling makes them None (as the embedder
    ignores them then). A copy; None stays None.
    """
    if config is None:
        return None
    out = dict(config)
    recipe = recipe or {}
    if recipe.get("layers") is not None:
        out["layers"] = list(recipe["layers"])
    if recipe.get("layer_pooling") is not None:
        out["layer_pooling"] = recipe["layer_pooling"]
        if out["layer_pooling"] != "weighted" and out.get("layer_weights") is not None:
            out["layer_weights"] = None
    return out


def embedder_config_differences(stored: Mapping | Any, given: Mapping | Any, *, stored_name: str = "index"
                                ) -> list[str]:
    """One line per field where two embedder configurations differ, ``"  field: index has X, given Y"``.

    The comparison every store of embeddings uses (``SemanticIndex.check_config``, the WSD ``Disambiguator``): all
    fields, after a JSON round trip (tuples and lists compare equal); a field present on one side only differs.
    ``precision`` alone is not a difference but a logged warning: every path stays within its documented bound of
    the exact vectors, and ``precision="auto"`` may choose another path on another machine.

    Args:
        stored: the configuration recorded with the vectors (dict, or an object with ``to_dict()``).
        given: the configuration of the embedder about to make queries.
        stored_name: what recorded ``stored``, for the lines ("index", "store").
    """
    a_all, b_all = json_dict(stored, "stored config"), json_dict(given, "config")
    missing = object()
    diffs = []
    for key in sorted(set(a_all) | set(b_all)):
        a, b = a_all.get(key, missing), b_all.get(key, missing)
        if a != b:
            shown = ["(absent)" if v is missing else json.dumps(v) for v in (a, b)]
            line = "  %s: %s has %s, given %s" % (key, stored_name, shown[0], shown[1])
            if key in _NEAR_EQUAL_FIELDS and missing not in (a, b):
                logger.warning("the embedder differs from the %s's in a way that changes vectors only within a "
                               "documented bound:%s", stored_name, line)
            else:
                diffs.append(line)
    return diffs


# Fields whose values give vectors equal up to a documented bound (ctxemb.core.precision.ACCURACY_BOUNDS).
_NEAR_EQUAL_FIELDS = frozenset({"precision"})


def check_id_list(ids, name: str = "ids") -> list[str]:
    """Return ``ids`` as a list of str; a single str (or bytes) and non-str items are refused.

    Raises:
        TypeError: naming ``name`` and the first offending item.
    """
    if isinstance(ids, (str, bytes)):
        raise TypeError(
            "%s must be a sequence of strings; got a single %s (wrap one id in a list)" % (name, type(ids).__name__)
        )
    try:
        ids = list(ids)
    except TypeError:
        raise TypeError("%s must be a sequence of strings; got %s" % (name, type(ids).__name__)) from None
    for i, x in enumerate(ids):
        if not isinstance(x, str):
            raise TypeError("%s must hold strings; %s[%d] is %r (%s)" % (name, name, i, x, type(x).__name__))
    return ids


def preview(items: Sequence, limit: int = 5) -> str:
    shown = ", ".join(repr(x) for x in list(items)[:limit])
    return "[%s%s]" % (shown, ", ... (%d in all)" % len(items) if len(items) > limit else "")


def check_spec(dim, kind, metric, params) -> tuple[int, IndexKind, IndexParams]:
    """Check an index's dimension, kind, metric and parameters together (a new index, or one being loaded)."""
    dim = check_int(dim, "dim", low=1)
    kind, params = resolve_params(kind, params)
    check_choice(metric, "metric", METRICS)
    params.check_dim(dim)
    return dim, kind, params


def _ragged_error(value, name: str) -> ValueError | None:
    """The error for a list of rows of unequal lengths (numpy's own message names neither the row nor the lengths)."""
    try:
        rows = list(value)
    except TypeError:
        return None
    lengths = []
    for row in rows:
        try:
            lengths.append(len(row))
        except TypeError:
            lengths.append(None)
    first = next((i for i, n in enumerate(lengths) if n != lengths[0]), None)
    if first is None:
        return None
    shown = lambda n: "a scalar" if n is None else "length %d" % n  # noqa: E731
    return ValueError("%s must be a rectangular (N, H) array; it is a ragged list: row 0 has %s but row %d has %s"
                      % (name, shown(lengths[0]), first, shown(lengths[first])))


def check_matrix(value, name: str, dim: int, *, allow_1d: bool) -> tuple[np.ndarray, bool]:
    """Validate a (N, H) numeric array-like without copying; returns it and whether it was a single 1-D row.

    Raises:
        TypeError: not a real numeric array.
        ValueError: a ragged list of rows (naming the first row of another length), another shape or dimension
            than (N, ``dim``), NaN or infinity, or float64 values beyond float32's range (naming row and column).
    """
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except ValueError:
            err = _ragged_error(value, name)
            if err is None:
                raise
            raise err from None
        if arr.dtype == object:
            err = _ragged_error(value, name)
            if err is not None:
                raise err
    if arr.dtype.kind not in "iuf":
        raise TypeError("%s must be a real numeric array; got dtype %s" % (name, arr.dtype))
    single = arr.ndim == 1 and allow_1d
    if single:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(
            "%s must be a 2-D array of shape (N, %d)%s; got shape %s"
            % (name, dim, " or a single (%d,) vector" % dim if allow_1d else "", arr.shape)
        )
    if arr.shape[1] != dim:
        raise ValueError(
            "%s have dimension %d, but this index holds %d-dimensional vectors (shape %s)"
            % (name, arr.shape[1], dim, arr.shape)
        )
    if arr.dtype.kind == "f":
        # Everything that could make a row unusable is checked here, before an add or upsert changes anything.
        for start in range(0, len(arr), CHUNK):
            block = arr[start : start + CHUNK]
            finite = np.isfinite(block)
            if not finite.all():
                r, c = np.argwhere(~finite)[0]
                raise ValueError("%s contains NaN or infinity (first at row %d, column %d)" % (name, start + r, c))
            if arr.dtype.itemsize > 4 and block.size and (
                block.max() >= _FLOAT32_OVERFLOW or block.min() <= -_FLOAT32_OVERFLOW  # two passes, no copy
            ):
                r, c = np.argwhere(np.abs(block) >= _FLOAT32_OVERFLOW)[0]
                raise ValueError("%s overflows float32 (values beyond +-3.4e38; first at row %d, column %d)"
                                 % (name, start + r, c))
    return arr, single

def check_batch(ids, vectors, metadata, texts, dim: int, needs_texts: bool
                ) -> tuple[list[str], np.ndarray, list[str | None], list[str] | None]:
    """The arguments of ``SemanticIndex.add``/``upsert`` checked together: ids (unique within the call), the
    (N, H) vectors, metadata as JSON strings, and the texts of a hybrid index (``needs_texts``; refused otherwise).

    Raises:
        TypeError / ValueError: naming the argument, what was expected and what arrived.
    """
    ids = check_id_list(ids)
    arr, _ = check_matrix(vectors, "vectors", dim, allow_1d=False)
    if len(arr) != len(ids):
        raise ValueError("vectors has %d rows but there are %d ids" % (len(arr), len(ids)))
    if len(set(ids)) != len(ids):
        seen, dup = set(), []
        for i in ids:
            if i in seen:
                dup.append(i)
            seen.add(i)
        raise ValueError("ids must be unique within a call; repeated: %s" % preview(dup))
    if needs_texts:
        if texts is None:
            raise ValueError("this index is hybrid (it keeps BM25 over the items' texts): pass texts=, one per id")
        texts = check_id_list(texts, "texts")
        if len(texts) != len(ids):
            raise ValueError("texts has %d entries but there are %d ids" % (len(texts), len(ids)))
    elif texts is not None:
        raise ValueError("texts= is for hybrid indexes (SemanticIndex(..., hybrid=True)); this index has vectors only")
    return ids, arr, check_metadata(metadata, len(ids)), texts


def check_metadata(metadata, n: int) -> list[str | None]:
    """``n`` metadata dicts (or None entries, or None for all) as compact JSON strings (None where absent)."""
    if metadata is None:
        return [None] * n
    if isinstance(metadata, Mapping):
        raise TypeError("metadata must be a sequence of dicts (one per id) or None; got a single dict")
    metadata = list(metadata)
    if len(metadata) != n:
        raise ValueError("metadata has %d entries but there are %d ids" % (len(metadata), n))
    out: list[str | None] = []
    for i, m in enumerate(metadata):
        if m is None:
            out.append(None)
            continue
        if not isinstance(m, Mapping):
            raise TypeError("metadata[%d] must be a dict or None; got %s" % (i, type(m).__name__))
        try:
            out.append(json.dumps(dict(m), allow_nan=False, separators=(",", ":")))
        except (TypeError, ValueError) as e:
            raise TypeError("metadata[%d] is not JSON-serialisable: %s" % (i, e)) from None
    return out


def ivfpq_train_sample(arr: np.ndarray, params, dim: int, min_default: int) -> np.ndarray:
    """The rows of (N, H) ``arr`` that IVF-PQ trains on: ``params.train_size`` of them (default
    ``max(64 * nlist, min_default)``), drawn with ``params.seed``; all of them when fewer.

    Raises:
        ValueError: fewer than max(nlist, 2**nbits) rows, naming both.
    """
    n = len(arr)
    nlist, _ = params.resolve_shape(dim, n)
    size = params.train_size or max(64 * nlist, min_default)
    if n > size:
        rng = np.random.default_rng(params.seed)
        arr = arr[np.sort(rng.choice(n, size=size, replace=False))]
    need = max(nlist, 2**params.nbits)
    if len(arr) < need:
        raise ValueError(
            "IVF-PQ training needs at least %d vectors (max(nlist=%d, 2**nbits=%d)); got %d. Train on a larger "
            "sample, add more vectors in the first call, or lower nlist/nbits"
            % (need, nlist, 2**params.nbits, len(arr))
        )
    return arr


def check_embedder_config(stored: dict | None, recipe: dict | None, config) -> None:
    """``SemanticIndex.check_config``: raise unless ``config`` equals ``stored`` once the recipe's layer choice is
    applied to both (see there)."""
    given = json_dict(config, "config")
    if stored is None:
        raise ValueError(
            "this index stores no embedder configuration, so queries cannot be checked against it; pass "
            "embedder_config= when building it (build_sentence_index/build_word_index do this)"
        )
    # The query helpers embed with the recipe's layer choice, so that is what the given embedder will produce.
    diffs = embedder_config_differences(apply_layer_overrides(stored, recipe), apply_layer_overrides(given, recipe))
    if diffs:
        raise ValueError(
            "the embedder configuration differs from the one this index was built with in %d field(s):\n%s\n"
            "Queries embedded differently would return meaningless neighbours: query with the same embedder "
            "settings or rebuild the index." % (len(diffs), "\n".join(diffs))
        )
