"""The kinds of :class:`ctxemb.search.SemanticIndex` and one frozen parameter object per kind.

- :class:`FlatParams`: exact search; nothing to tune.
- :class:`HNSWParams`: graph degree ``m`` (FAISS's M) and the beam widths ``ef_construction`` / ``ef_search``.
- :class:`IVFPQParams`: inverted lists (``nlist``, ``nprobe``), product quantisation (``pq_m``, ``nbits``), exact
  re-ranking of ``k * k_factor`` candidates, the training sample (``train_size``, ``seed``) and ``on_disk``.

Each object checks its fields in ``__post_init__`` (a TypeError or ValueError naming the field) and is immutable;
``dataclasses.replace(params, ef_search=128)`` gives a checked copy, which is how search-time overrides work.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import ClassVar, Literal, Union

from ctxemb.core.validation import check_choice, check_int

IndexKind = Literal["flat", "hnsw", "ivfpq"]
Metric = Literal["cosine", "inner_product"]
INDEX_KINDS: tuple[IndexKind, ...] = ("flat", "hnsw", "ivfpq")
METRICS: tuple[Metric, ...] = ("cosine", "inner_product")


def check_float(value, name: str, *, low: float) -> float:
    """Return ``value`` as a finite float >= ``low``.

    Raises:
        TypeError: if it is not a real number (bools are refused).
        ValueError: if it is NaN, infinite or below ``low``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number; got %r (%s)" % (name, value, type(value).__name__))
    value = float(value)
    if not math.isfinite(value) or value < low:
        raise ValueError("%s must be a finite number >= %g; got %r" % (name, low, value))
    return value


class _Params:
    """What the parameter objects share: their ``kind`` and checks that need the vectors' dimension."""

    kind: ClassVar[IndexKind]

    def check_dim(self, dim: int) -> None:
        """Raise if these parameters cannot index ``dim``-dimensional vectors (nothing to check by default)."""

    def describe(self) -> str:
        """The class name and the fields that differ from their defaults, e.g. ``IVFPQParams with on_disk=True``."""
        changed = [
            "%s=%r" % (f.name, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return type(self).__name__ + (" with " + ", ".join(changed) if changed else "")


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # normalising a frozen dataclass's own field in __post_init__


@dataclass(frozen=True)
class FlatParams(_Params):
    """Exact inner-product search (``IndexFlatIP`` behind ``IndexIDMap2``): no parameters."""

    kind: ClassVar[IndexKind] = "flat"


@dataclass(frozen=True)
class HNSWParams(_Params):
    """A graph index (``IndexHNSWFlat``, inner-product metric).

    Attributes:
        m: graph degree (FAISS's M), >= 2.
        ef_construction: beam width while inserting.
        ef_search: beam width while searching (raised to K when K is larger); overridable per search.
    """

    kind: ClassVar[IndexKind] = "hnsw"
    m: int = 32
    ef_construction: int = 200
    ef_search: int = 64

    def __post_init__(self):
        _set(self, "m", check_int(self.m, "HNSWParams.m", low=2))
        _set(self, "ef_construction", check_int(self.ef_construction, "HNSWParams.ef_construction", low=1))
        _set(self, "ef_search", check_int(self.ef_search, "HNSWParams.ef_search", low=1))


@dataclass(frozen=True)
class IVFPQParams(_Params):
    """Inverted file + product quantisation with exact re-ranking (``IndexRefineFlat(IndexIVFPQ)``).

    Attributes:
        nlist: IVF lists; None picks the power of two nearest 4 sqrt(N) at training (at most N / 39).
        pq_m: PQ sub-quantisers (FAISS's m), must divide the dimension; None picks the divisor nearest dim / 8.
        nbits: bits per PQ code (2**nbits centroids per sub-quantiser), 1..16.
        nprobe: IVF lists scanned per query; overridable per search.
        k_factor: candidates re-ranked exactly = K * k_factor (>= 1); overridable per search.
        train_size: training sample; None uses max(64 * nlist, 10,000) vectors (all when fewer).
        seed: seed of the training sample.
        on_disk: keep the inverted lists and raw vectors in files under the index's ``directory`` (larger than RAM).
    """

    kind: ClassVar[IndexKind] = "ivfpq"
    nlist: int | None = None
    pq_m: int | None = None
    nbits: int = 8
    nprobe: int = 16
    k_factor: float = 10.0
    train_size: int | None = None
    seed: int = 0
    on_disk: bool = False

    def __post_init__(self):
        for name in ("nlist", "pq_m", "train_size"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, check_int(value, "IVFPQParams." + name, low=1))
        _set(self, "nbits", check_int(self.nbits, "IVFPQParams.nbits", low=1, high=16))
        _set(self, "nprobe", check_int(self.nprobe, "IVFPQParams.nprobe", low=1))
        _set(self, "k_factor", check_float(self.k_factor, "IVFPQParams.k_factor", low=1.0))
        _set(self, "seed", check_int(self.seed, "IVFPQParams.seed", low=0))
        _set(self, "on_disk", bool(self.on_disk))

    def check_dim(self, dim: int) -> None:
        if self.pq_m is not None and dim % self.pq_m:
            raise ValueError("pq_m (%d) must divide the dimension dim (%d)" % (self.pq_m, dim))

    def resolve_shape(self, dim: int, n_total: int) -> tuple[int, int]:
        """The (nlist, pq_m) to train with: the given values, or defaults from the collection size and ``dim``.

        nlist defaults to the power of two nearest 4 sqrt(N) (at least 1, at most N / 39 so every centroid sees the
        ~39 points k-means wants); pq_m to the divisor of H nearest H / 8, i.e. about 8 dimensions per sub-quantiser.
        """
        nlist = self.nlist
        if nlist is None:
            target = 4 * math.sqrt(max(n_total, 1))
            nlist = 2 ** max(0, round(math.log2(target)))
            nlist = max(1, min(nlist, n_total // 39))
        pq_m = self.pq_m
        if pq_m is None:
            divisors = [m for m in range(1, dim + 1) if dim % m == 0]
            pq_m = min(divisors, key=lambda m: (abs(m - dim / 8), -m))
        return nlist, pq_m


IndexParams = Union[FlatParams, HNSWParams, IVFPQParams]
PARAMS_BY_KIND: dict[str, type] = {"flat": FlatParams, "hnsw": HNSWParams, "ivfpq": IVFPQParams}


def make_params(kind: IndexKind, **fields) -> IndexParams:
    """The parameter object of ``kind`` with ``fields`` (the others at their defaults).

    Raises:
        ValueError: for an unknown kind or a bad field value; TypeError for a field the kind does not have.
    """
    check_choice(kind, "kind", INDEX_KINDS)
    return PARAMS_BY_KIND[kind](**fields)


def resolve_params(kind: IndexKind | None, params: IndexParams | None) -> tuple[IndexKind, IndexParams]:
    """The (kind, params) of an index from what the caller gave: either, both (they must agree) or neither (flat).

    Raises:
        TypeError: ``params`` is not one of the parameter classes.
        ValueError: an unknown kind, or ``params`` of another kind than ``kind``.
    """
    if params is None:
        return (kind, make_params(kind)) if kind is not None else ("flat", FlatParams())
    if not isinstance(params, (FlatParams, HNSWParams, IVFPQParams)):
        raise TypeError(
            "params must be a FlatParams, HNSWParams or IVFPQParams (or None for the kind's defaults); got %s"
            % type(params).__name__
        )
    if kind is None:
        return params.kind, params
    check_choice(kind, "kind", INDEX_KINDS)
    if params.kind != kind:
        raise ValueError("%s needs kind=%r; got kind=%r" % (params.describe(), params.kind, kind))
    return kind, params
