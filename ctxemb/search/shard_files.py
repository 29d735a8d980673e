"""The directories of a sharded IVF-PQ build (:mod:`ctxemb.search.sharded`): a trained quantizer and a partial.

A **trained quantizer** directory (``train_ivfpq``) holds

- ``quantizer.json``: format and version, dimension, metric, the IVF-PQ parameters (``nlist`` and ``pq_m`` resolved),
  the quantizer's *fingerprint*, the embedder configuration and recipe (or null), the training sample's size, and
  the name of the FAISS file;
- ``trained.<token>.faiss``: the trained ``IndexIVFPQ`` with empty (in-memory) inverted lists.

It is written as a whole (``ctxemb.core.atomic.atomic_directory``): a crash leaves the previous version or none.

A **partial** directory (``add_shard``: one process's or machine's shard) holds

- ``partial.json``: format and version, the quantizer's fingerprint, the shard's index (its place in the merge),
  its item count, the embedder configuration and recipe, and the names of the files below;
- ``codes.<token>.faiss``: a copy of the trained index holding the shard's PQ codes under local labels 0..n-1;
- ``items.<token>.json``: the shard's ids and metadata (JSON strings) by local label;
- ``vectors.<token>.f32``: the shard's vectors as the index stores them (unit rows for the cosine metric), row =
  local label;
- ``.ctxemb.lock``: the directory's write lock.

Each file is written atomically and ``partial.json`` last, which commits the partial; files that no
``partial.json`` names (an interrupted write's, a replaced partial's) are deleted by the next write of the directory.

The fingerprint is a BLAKE2b digest of the quantizer's shape (dimension, nlist, PQ sub-quantizers and bits, metric)
and of its coarse centroids and PQ codebooks: two indexes whose codes may be merged have the same one, and it is
recomputed from each partial's FAISS file at merge time, so a partial built from another quantizer is refused
whatever its ``partial.json`` says.

Every file that is corrupt, truncated or inconsistent raises :class:`CorruptFileError` (a ``ValueError``) naming it;
a missing one raises ``FileNotFoundError`` naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ctxemb.core.validation import CorruptFileError, read_json_file
from ctxemb.search.params import IVFPQParams, Metric
from ctxemb.search.storage import params_from_manifest, params_to_manifest, read_faiss_file

logger = logging.getLogger(__name__)

QUANTIZER_FILE = "quantizer.json"
PARTIAL_FILE = "partial.json"
QUANTIZER_FORMAT = "ctxemb.search.sharded.quantizer"
PARTIAL_FORMAT = "ctxemb.search.sharded.partial"
FORMAT_VERSION = 1
# The data files of a partial; those that no partial.json names are deleted by the next write of the directory.
PARTIAL_DATA_FILE = re.compile(r"\A(?:codes\.[a-z0-9]{8}\.faiss|items\.[a-z0-9]{8}\.json|vectors\.[a-z0-9]{8}\.f32)\Z")


def quantizer_fingerprint(ivf: faiss.IndexIVFPQ) -> str:
    """A 32-hex-digit digest of an IVF-PQ index's trained state (shape, coarse centroids, PQ codebooks).

    Indexes with the same fingerprint assign and encode every vector alike, so their inverted lists can be merged.
    """
    digest = hashlib.blake2b(digest_size=16)
    shape = {"d": int(ivf.d), "nlist": int(ivf.nlist), "pq_m": int(ivf.pq.M), "nbits": int(ivf.pq.nbits),
             "metric": int(ivf.metric_type), "by_residual": bool(ivf.by_residual)}
    digest.update(json.dumps(shape, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(ivf.quantizer.reconstruct_n(0, ivf.nlist), dtype=np.float32).tobytes())
    digest.update(faiss.vector_to_array(ivf.pq.centroids).astype(np.float32).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class TrainedQuantizer:
    """A trained, empty IVF-PQ index saved by :func:`ctxemb.search.sharded.train_ivfpq`.

    Attributes:
        directory: where it is saved.
        dim: H, the dimension of the vectors.
        metric: ``"cosine"`` (vectors are L2-normalised before they are added) or ``"inner_product"``.
        params: the IVF-PQ parameters, ``nlist`` and ``pq_m`` filled in, ``on_disk=True`` (what the merged index
            records).
        fingerprint: :func:`quantizer_fingerprint` of the trained index.
        embedder_config, recipe: what made the vectors (JSON dicts), or None.
        n_trained: the size of the training sample.
        faiss_file: the trained index's FAISS file.
    """

    directory: Path
    dim: int
    metric: Metric
    params: IVFPQParams
    fingerprint: str
    embedder_config: dict | None
    recipe: dict | None
    n_trained: int
    faiss_file: Path

    def load_ivf(self) -> faiss.IndexIVFPQ:
        """A fresh copy of the trained, empty ``IndexIVFPQ`` (in-memory inverted lists).

        Raises:
            CorruptFileError: the FAISS file is unreadable, or its fingerprint is not the one recorded.
        """
        ivf = read_faiss_file(self.faiss_file, "trained quantizer file")  # (already of its class)
        check_ivf(ivf, self.faiss_file, self.dim, self.fingerprint, 0, "quantizer.json")
        return ivf


def check_ivf(ivf, path: Path, dim: int, fingerprint: str, ntotal: int, recorded_in: str) -> None:
    """Raise :class:`CorruptFileError` unless ``ivf`` is an inner-product ``IndexIVFPQ`` of ``dim`` dimensions with
    ``ntotal`` vectors and the ``fingerprint`` that ``recorded_in`` records."""
    if not isinstance(ivf, faiss.IndexIVFPQ):
        raise CorruptFileError("%s holds a %s, not an IndexIVFPQ" % (path, type(ivf).__name__))
    if ivf.d != dim or ivf.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise CorruptFileError("%s holds %d-dimensional vectors with FAISS metric %d; %s says %d dimensions and the "
                               "inner product" % (path, ivf.d, ivf.metric_type, recorded_in, dim))
    got = quantizer_fingerprint(ivf)
    if got != fingerprint:
        raise CorruptFileError("%s holds a quantizer with fingerprint %s, but %s records %s: the file was replaced "
                               "or is corrupt" % (path, got, recorded_in, fingerprint))
    if ivf.ntotal != ntotal:
        raise CorruptFileError("%s holds %d vectors; %s says %d" % (path, ivf.ntotal, recorded_in, ntotal))


def quantizer_manifest(dim: int, metric: str, params: IVFPQParams, fingerprint: str, embedder_config: dict | None,
                       recipe: dict | None, n_trained: int, faiss_name: str) -> dict[str, Any]:
    """The ``quantizer.json`` of a trained quantizer."""
    return {"format": QUANTIZER_FORMAT, "format_version": FORMAT_VERSION, "dim": dim, "metric": metric,
            "params": params_to_manifest(params), "fingerprint": fingerprint, "embedder_config": embedder_config,
            "recipe": recipe, "n_trained": n_trained, "files": {"index": faiss_name},
            "faiss_version": faiss.__version__}


def _read_manifest(path: Path, fmt: str, what: str) -> dict:
    if not path.is_file():
        raise FileNotFoundError("%s not found: %s" % (what, path))
    m = read_json_file(path, what)
    if m.get("format") != fmt:
        raise CorruptFileError("%s is not a %s (format %r; expected %r)" % (path, what, m.get("format"), fmt))
    if m.get("format_version") != FORMAT_VERSION:
        raise ValueError("%s has format_version %r; this ctxemb reads version %d"
                         % (path, m.get("format_version"), FORMAT_VERSION))
    return m


def _field(m: dict, key: str, types, path: Path, *, optional: bool = False):
    value = m.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, types) or (types is int and isinstance(value, bool)):
        raise CorruptFileError("%s: %s must be %s; got %r" % (path, key, getattr(types, "__name__", types), value))
    return value


def _file_name(m: dict, key: str, path: Path) -> str:
    files = m.get("files")
    name = files.get(key) if isinstance(files, dict) else None
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise CorruptFileError("%s: files.%s must be a file name in the directory; got %r" % (path, key, name))
    return name


def read_quantizer(directory: str | os.PathLike) -> TrainedQuantizer:
    """The trained quantizer saved in ``directory`` (its FAISS file is read by ``load_ivf``).

    Raises:
        FileNotFoundError: no ``quantizer.json`` (not a trained quantizer directory), or no FAISS file.
        CorruptFileError: a malformed ``quantizer.json``.
        ValueError: another format version.
    """
    directory = Path(directory)
    path = directory / QUANTIZER_FILE
    if directory.is_dir() and not path.exists() and (directory / PARTIAL_FILE).exists():
        raise FileNotFoundError("%s is a partial (add_shard's output), not a trained quantizer: give the directory "
                                "train_ivfpq wrote" % directory)
    m = _read_manifest(path, QUANTIZER_FORMAT, "trained quantizer manifest")
    try:
        params = params_from_manifest("ivfpq", _field(m, "params", dict, path))
    except KeyError as e:
        raise CorruptFileError("%s: params lacks the field %s" % (path, e)) from None
    except (TypeError, ValueError) as e:
        raise CorruptFileError("%s: %s" % (path, e)) from None
    metric = m.get("metric")
    if metric not in ("cosine", "inner_product"):
        raise CorruptFileError("%s: metric must be 'cosine' or 'inner_product'; got %r" % (path, metric))
    faiss_file = directory / _file_name(m, "index", path)
    if not faiss_file.is_file():
        raise FileNotFoundError("trained quantizer file not found: %s (named by %s)" % (faiss_file, path))
    return TrainedQuantizer(
        directory=directory, dim=_field(m, "dim", int, path), metric=metric, params=params,
        fingerprint=_field(m, "fingerprint", str, path),
        embedder_config=_field(m, "embedder_config", dict, path, optional=True),
        recipe=_field(m, "recipe", dict, path, optional=True), n_trained=_field(m, "n_trained", int, path),
        faiss_file=faiss_file)


@dataclass(frozen=True)
class PartialShard:
    """One shard's partial index, written by :func:`ctxemb.search.sharded.add_shard`.

    Attributes:
        directory: where it is saved.
        shard_index: its place in the merged index (shards are merged in increasing ``shard_index``).
        n_items: the items it holds.
        dim: H.
        fingerprint: the fingerprint of the trained quantizer it was built from.
        embedder_config, recipe: what made its vectors, or None.
        codes_file, items_file, vectors_file: its files.
    """

    directory: Path
    shard_index: int
    n_items: int
    dim: int
    fingerprint: str
    embedder_config: dict | None
    recipe: dict | None
    codes_file: Path
    items_file: Path
    vectors_file: Path

    def read_items(self) -> tuple[list[str], list[str | None]]:
        """The shard's ids and metadata JSON strings, checked against ``partial.json``.

        Raises:
            CorruptFileError: the items file is malformed or holds another count of items.
        """
        items = read_json_file(self.items_file, "partial items file")
        ids, meta = items.get("ids"), items.get("metadata")
        if not isinstance(ids, list) or not isinstance(meta, list) or len(ids) != self.n_items \
                or len(meta) != self.n_items:
            raise CorruptFileError("%s must hold the lists 'ids' and 'metadata' of %d items each (as %s says)"
                                   % (self.items_file, self.n_items, self.directory / PARTIAL_FILE))
        bad = next((i for i, v in enumerate(ids) if not isinstance(v, str)), None)
        if bad is None:
            bad_meta = next((i for i, v in enumerate(meta) if v is not None and not isinstance(v, str)), None)
            if bad_meta is None:
                return ids, meta
            raise CorruptFileError("%s: metadata[%d] must be a JSON string or null" % (self.items_file, bad_meta))
        raise CorruptFileError("%s: ids[%d] must be a string; got %r" % (self.items_file, bad, ids[bad]))


def partial_manifest(shard_index: int, n_items: int, dim: int, fingerprint: str, embedder_config: dict | None,
                     recipe: dict | None, files: dict[str, str]) -> dict[str, Any]:
    """The ``partial.json`` of a partial."""
    return {"format": PARTIAL_FORMAT, "format_version": FORMAT_VERSION, "shard_index": shard_index,
            "n_items": n_items, "dim": dim, "fingerprint": fingerprint, "embedder_config": embedder_config,
            "recipe": recipe, "files": files, "faiss_version": faiss.__version__}


def read_partial(directory: str | os.PathLike) -> PartialShard:
    """The partial saved in ``directory``, its files checked to exist and ``vectors`` to have the right size.

    Raises:
        FileNotFoundError: no ``partial.json`` (not a partial, or its write never completed), or a file it names.
        CorruptFileError: a malformed ``partial.json`` or a truncated vectors file.
        ValueError: another format version.
    """
    directory = Path(directory)
    path = directory / PARTIAL_FILE
    if not path.exists():
        raise FileNotFoundError(
            "%s not found: %s is not a partial index (add_shard writes partial.json last, so a shard whose add_shard "
            "did not finish has none; run add_shard for it again)" % (path, directory))
    m = _read_manifest(path, PARTIAL_FORMAT, "partial manifest")
    shard_index, n, dim = (_field(m, key, int, path) for key in ("shard_index", "n_items", "dim"))
    if shard_index < 0 or n < 0 or dim < 1:
        raise CorruptFileError("%s: shard_index, n_items and dim must be >= 0, >= 0, >= 1; got %r, %r, %r"
                               % (path, shard_index, n, dim))
    files = {key: directory / _file_name(m, key, path) for key in ("codes", "items", "vectors")}
    for key, file in files.items():
        if not file.is_file():
            raise FileNotFoundError("partial %s file not found: %s (named by %s)" % (key, file, path))
    size = files["vectors"].stat().st_size
    if size != n * dim * 4:
        raise CorruptFileError("%s has %d bytes; %s says %d rows of %d float32 (%d bytes): it is truncated or corrupt"
                               % (files["vectors"], size, path, n, dim, n * dim * 4))
    return PartialShard(
        directory=directory, shard_index=shard_index, n_items=n, dim=dim,
        fingerprint=_field(m, "fingerprint", str, path),
        embedder_config=_field(m, "embedder_config", dict, path, optional=True),
        recipe=_field(m, "recipe", dict, path, optional=True),
        codes_file=files["codes"], items_file=files["items"], vectors_file=files["vectors"])


def remove_unnamed_partial_files(directory: Path, named: set[str]) -> list[str]:
    """Delete the partial data files of ``directory`` that ``named`` does not hold (the caller holds its lock)."""
    removed = []
    for name in sorted(os.listdir(directory)):
        if name in named or not PARTIAL_DATA_FILE.match(name):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / name)
            removed.append(name)
    if removed:
        logger.info("removed %d file(s) of %s that no partial.json names (an earlier or interrupted add_shard): %s",
                    len(removed), directory, ", ".join(removed))
    return removed
