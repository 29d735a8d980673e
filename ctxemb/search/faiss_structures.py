"""The FAISS structures behind :class:`ctxemb.search.SemanticIndex`, one small class per index kind.

The wrapper owns string ids, metadata, normalisation and persistence; a backend only stores float32 vectors under
int64 *labels* chosen by the wrapper and answers ``search`` with labels. Each backend says whether it can delete
vectors physically (``physical_remove``); when it cannot (HNSW graphs and the IVF-PQ + refine pair keep labels
equal to insertion positions), the wrapper keeps a tombstone set and passes a selector of live labels to every
search, so a removed item can never be returned.

A backend is built from the index's ``FlatParams``/``HNSWParams``/``IVFPQParams``; ``search`` gets a copy of them
with the caller's per-search overrides (``ef_search``, ``nprobe``, ``k_factor``) applied.

Shape legend:
    N  vectors added or reconstructed
    Q  queries
    K  results per query (K' = K * k_factor candidates before exact re-ranking)
    H  dimensions of a vector
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from pathlib import Path

import faiss
import numpy as np

from ctxemb.search.params import HNSWParams, IndexParams, IVFPQParams
from ctxemb.search.storage import LISTS_FILE, VECTORS_FILE, CorruptFileError, new_lists_name, read_faiss_file

logger = logging.getLogger(__name__)

# Queries are re-ranked in blocks so the gathered candidate vectors, (Q_block, K', H) float32, stay small.
_REFINE_BLOCK = 256


class Backend:
    """Interface shared by the kinds. ``params`` is the index's checked parameter object."""

    kind: str = ""
    physical_remove: bool = False

    def __init__(self, dim: int, params: IndexParams):
        self.dim = dim
        self.params = params

    @property
    def is_trained(self) -> bool:
        return True

    def train(self, sample: np.ndarray, n_total: int) -> None:  # pragma: no cover - only kinds that need it
        raise NotImplementedError

    @property
    def ntotal(self) -> int:
        """Vectors the FAISS index holds, including tombstoned ones for kinds without physical removal."""
        raise NotImplementedError

    def add(self, x: np.ndarray, labels: np.ndarray) -> None:
        """Add (N, H) float32 C-contiguous ``x`` under (N,) int64 ``labels``."""
        raise NotImplementedError

    def remove(self, labels: np.ndarray) -> None:
        """Physically delete ``labels`` (only called when ``physical_remove``)."""
        raise NotImplementedError

    def search(self, x: np.ndarray, k: int, selector, params: IndexParams) -> tuple[np.ndarray, np.ndarray]:
        """Return scores (Q, K) float32 and labels (Q, K) int64, -1 where fewer than K were found.

        ``params`` are the index's parameters with this search's overrides (``ef_search``, ``nprobe``, ...).
        """
        raise NotImplementedError

    def reconstruct(self, labels: np.ndarray) -> np.ndarray:
        """The stored (N, H) float32 vectors of ``labels``."""
        raise NotImplementedError

    def reset(self) -> None:
        """Drop every vector but keep training (used by ``compact``)."""
        raise NotImplementedError

    def write(self, path: Path) -> None:
        faiss.write_index(self.index, str(path))

    def load(self, path: Path, directory: Path, lists_name: str | None = None) -> None:
        """Read the FAISS file of a saved index (``directory`` holds it and any live files; ``lists_name`` names
        an on-disk index's inverted lists there).

        Raises:
            FileNotFoundError: the file (or a live file) is missing.
            CorruptFileError: FAISS cannot read it, or it holds another structure, metric or dimension.
        """
        index = read_faiss_file(path, "FAISS index file")
        _check_loaded(index, self._loaded_type, self.kind, path, self.dim)
        self._check_parts(index, path)
        self.index = index

    _loaded_type: type = faiss.Index

    def _check_parts(self, index, path: Path) -> None:
        """Further checks of a loaded structure (none by default)."""


def _check_loaded(index, expected: type, kind: str, path: Path, dim: int) -> None:
    if not isinstance(index, expected):
        raise CorruptFileError(
            "%s holds a %s, but the manifest says kind=%r (expected a %s); the directory is corrupt or was "
            "written by something else" % (path, type(index).__name__, kind, expected.__name__)
        )
    if index.d != dim:
        raise CorruptFileError("%s holds %d-dimensional vectors but the manifest says dim=%d" % (path, index.d, dim))
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise CorruptFileError("%s uses FAISS metric %d, not the inner product this index searches with"
                               % (path, index.metric_type))


class FlatBackend(Backend):
    """Exact inner-product search: ``IndexIDMap2(IndexFlatIP)``.

    The id map lets labels survive physical deletion (``remove_ids`` shifts the flat storage, so positions would
    not); an exact index must not search through tombstones because a selector disables FAISS's BLAS path.
    """

    kind = "flat"
    physical_remove = True

    def __init__(self, dim: int, params: IndexParams):
        super().__init__(dim, params)
        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def add(self, x, labels):
        self.index.add_with_ids(x, labels)

    def remove(self, labels):
        removed = self.index.remove_ids(faiss.IDSelectorBatch(labels))
        if removed != len(labels):
            raise RuntimeError("FAISS removed %d vectors, expected %d" % (removed, len(labels)))

    def search(self, x, k, selector, params):
        return self.index.search(x, k)

    def reconstruct(self, labels):
        return _reconstruct_batch(self.index, labels, self.dim)

    def reset(self):
        self.index.reset()

    _loaded_type = faiss.IndexIDMap2


class HNSWBackend(Backend):
    """Graph search: ``IndexHNSWFlat`` with the inner-product metric. Labels are insertion positions."""

    kind = "hnsw"

    def __init__(self, dim: int, params: HNSWParams):
        super().__init__(dim, params)
        self.index = faiss.IndexHNSWFlat(dim, params.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = params.ef_construction
        self.index.hnsw.efSearch = params.ef_search

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def add(self, x, labels):
        _check_sequential(labels, self.ntotal)
        self.index.add(x)

    def search(self, x, k, selector, params):
        # FAISS explores max(efSearch, k) candidates; asking for fewer than k would silently return fewer.
        sp = faiss.SearchParametersHNSW(efSearch=max(params.ef_search, k), sel=selector)
        return self.index.search(x, k, params=sp)

    def reconstruct(self, labels):
        return _reconstruct_batch(self.index, labels, self.dim)

    def reset(self):
        # The graph cannot drop nodes, so a compacted HNSW index is rebuilt from scratch.
        self.__init__(self.dim, self.params)

    _loaded_type = faiss.IndexHNSWFlat


def _check_sequential(labels: np.ndarray, ntotal: int) -> None:
    # Internal invariant of the wrapper (labels of position-addressed kinds are ntotal, ntotal+1, ...).
    if len(labels) and (labels[0] != ntotal or labels[-1] != ntotal + len(labels) - 1):
        raise RuntimeError("labels %d..%d do not continue the index (ntotal=%d)" % (labels[0], labels[-1], ntotal))


def _reconstruct_batch(index, labels: np.ndarray, dim: int) -> np.ndarray:
    if len(labels) == 0:
        return np.zeros((0, dim), np.float32)
    return index.reconstruct_batch(np.ascontiguousarray(labels, dtype=np.int64))


class IVFPQBackend(Backend):
    """Inverted file + product quantisation with exact re-ranking: ``IndexRefineFlat(IndexIVFPQ)``.

    The coarse quantiser and PQ codebooks are trained on a sample; a query scans ``nprobe`` lists with PQ
    distances, keeps ``k * k_factor`` candidates and re-scores them exactly against the raw vectors the refine
    index keeps, so recall is limited by the candidate list rather than by quantisation error. Labels are
    insertion positions (IndexRefine requires the base and refine indexes to agree on them).
    """

    kind = "ivfpq"

    def __init__(self, dim: int, params: IVFPQParams):
        super().__init__(dim, params)
        self.index = None  # built by train(), when nlist/pq_m can be resolved from the data

    @property
    def is_trained(self) -> bool:
        return self.index is not None

    def _make_ivfpq(self, n_total: int) -> faiss.IndexIVFPQ:
        nlist, pq_m = self.params.resolve_shape(self.dim, n_total)
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFPQ(quantizer, self.dim, nlist, pq_m, self.params.nbits, faiss.METRIC_INNER_PRODUCT)
        ivf.own_fields = True
        quantizer.this.disown()  # the IVF index frees its quantiser
        ivf.nprobe = self.params.nprobe
        return ivf

    def _train_ivf(self, sample: np.ndarray, n_total: int) -> faiss.IndexIVFPQ:
        ivf = self._make_ivfpq(n_total)
        logger.info(
            "training IVF-PQ (nlist=%d, pq_m=%d, nbits=%d) on %d of %d vectors",
            ivf.nlist, ivf.pq.M, self.params.nbits, len(sample), n_total,
        )
        ivf.train(sample)
        return ivf

    def train(self, sample: np.ndarray, n_total: int) -> None:
        """Train on (N_sample, H) unit vectors; ``n_total`` (the collection size) sizes the default nlist."""
        ivf = self._train_ivf(sample, n_total)
        self.index = faiss.IndexRefineFlat(ivf)
        self.index.own_fields = True
        ivf.this.disown()
        self.index.k_factor = self.params.k_factor

    @property
    def ntotal(self) -> int:
        return 0 if self.index is None else int(self.index.ntotal)

    @property
    def ivf(self) -> faiss.IndexIVFPQ:
        return faiss.downcast_index(self.index.base_index)

    def add(self, x, labels):
        _check_sequential(labels, self.ntotal)
        self.index.add(x)

    def _ivf_params(self, selector, params: IVFPQParams):
        return faiss.SearchParametersIVF(nprobe=min(params.nprobe, self.ivf.nlist), sel=selector)

    def search(self, x, k, selector, params):
        base = self._ivf_params(selector, params)
        sp = faiss.IndexRefineSearchParameters(k_factor=params.k_factor, base_index_params=base)
        return self.index.search(x, k, params=sp)

    def reconstruct(self, labels):
        # IndexRefineFlat reconstructs from the refine (raw float) index, so this is exact.
        return _reconstruct_batch(self.index, labels, self.dim)

    def reset(self):
        if self.index is not None:
            self.index.reset()  # keeps the trained quantiser and codebooks

    _loaded_type = faiss.IndexRefineFlat

    def _check_parts(self, index, path):
        base = faiss.downcast_index(index.base_index)
        if not isinstance(base, faiss.IndexIVFPQ):
            raise CorruptFileError("%s re-ranks a %s, not the IndexIVFPQ the manifest's kind='ivfpq' needs"
                                   % (path, type(base).__name__))


class OnDiskIVFPQBackend(IVFPQBackend):
    """IVF-PQ whose inverted lists live in ``<directory>/lists.<token>.ivfdata`` (``faiss.OnDiskInvertedLists``,
    memory-mapped).

    The raw vectors for exact re-ranking are appended to ``<directory>/vectors.f32`` (row = label) and read through
    a memory map, so neither the codes nor the raw vectors need to fit in RAM; the page cache holds what queries
    touch. Labels are explicit (``add_with_ids``) and removal deletes entries from the lists; rows of removed items
    stay in ``vectors.f32`` unreferenced.

    Lists that a committed save names (``lists_committed``) are never written: ``copy_lists_on_write`` moves the
    index to a fresh copy before its first change (see ``ctxemb.search.storage``).
    """

    physical_remove = True

    def __init__(self, dim: int, params: IVFPQParams, directory: Path):
        super().__init__(dim, params)
        self.directory = Path(directory)
        self.n_rows = 0  # rows of vectors.f32 that belong to the index (a crash may leave a longer file)
        self._memmap = None
        self.lists_name: str | None = None  # file name of the inverted lists in ``directory``
        self.lists_committed = False  # a committed save names them: copy before changing them

    @property
    def ivf(self) -> faiss.IndexIVFPQ:
        return self.index

    def train(self, sample, n_total):
        self.adopt_trained(self._train_ivf(sample, n_total))

    def adopt_trained(self, ivf: faiss.IndexIVFPQ) -> None:
        """Use a trained, empty ``IndexIVFPQ`` (e.g. a shared quantizer's copy), its lists moved to a new file."""
        self.lists_name, self.lists_committed = new_lists_name(), False
        lists = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, str(self.directory / self.lists_name))
        ivf.replace_invlists(lists, True)
        lists.this.disown()  # owned by the IVF index now
        self.index = ivf

    def copy_lists_on_write(self) -> None:
        """Before a change: if a committed save names the current lists, move the index to a copy of them.

        The file is copied as it is, streamed disk to disk (never whole in RAM), and the index re-read with the
        copy's name, so the lists' layout and free space carry over exactly. (FAISS's ``merge_from_multiple``
        into a new file would be more compact, but leaves that file's free-space table claiming the space of
        the merged lists: the next add overwrites them.)
        """
        if self.index is None or not self.lists_committed:
            return
        lists = faiss.downcast_InvertedLists(self.index.invlists)
        name = new_lists_name()
        shutil.copyfile(self.directory / self.lists_name, self.directory / name)
        recorded = lists.filename
        lists.filename = str(self.directory / name)
        try:
            blob = faiss.serialize_index(self.index)  # the quantisers and the lists' table (not their data)
        finally:
            lists.filename = recorded
        index = faiss.deserialize_index(blob)
        if index.ntotal != self.index.ntotal:
            raise RuntimeError("the copy %s of the inverted lists holds %d entries; the index holds %d"
                               % (name, index.ntotal, self.index.ntotal))
        self.index = index  # frees (unmaps) the old lists; their file stays, the committed save's
        logger.info("copied the saved inverted lists %s to %s before changing them", self.lists_name, name)
        self.lists_name, self.lists_committed = name, False

    def add(self, x, labels):
        if len(labels) and labels[0] != self.n_rows:
            raise RuntimeError("labels start at %d but vectors.f32 has %d rows" % (labels[0], self.n_rows))
        self._append_rows(x)
        self.index.add_with_ids(x, labels)

    def _append_rows(self, x: np.ndarray) -> None:
        path = self.directory / VECTORS_FILE
        mode = "r+b" if path.exists() else "w+b"
        with open(path, mode) as f:
            # Overwrite from the last committed row: rows beyond it are leftovers of an interrupted add.
            f.seek(self.n_rows * self.dim * 4)
            f.write(np.ascontiguousarray(x, dtype=np.float32).tobytes())
            f.truncate()
        self.n_rows += len(x)
        self._memmap = None

    @property
    def vectors(self) -> np.ndarray:
        """(rows, H) float32 read-only memory map of ``vectors.f32``."""
        if self._memmap is None:
            if self.n_rows == 0:
                return np.zeros((0, self.dim), np.float32)
            self._memmap = np.memmap(
                self.directory / VECTORS_FILE, dtype=np.float32, mode="r", shape=(self.n_rows, self.dim)
            )
        return self._memmap

    def remove(self, labels):
        # Without a direct map FAISS scans every list once; fine for batched removals.
        removed = self.index.remove_ids(faiss.IDSelectorBatch(labels))
        if removed != len(labels):
            raise RuntimeError("FAISS removed %d vectors, expected %d" % (removed, len(labels)))

    def search(self, x, k, selector, params):
        k_candidates = max(k, int(math.ceil(k * params.k_factor)))
        _, cand = self.index.search(x, k_candidates, params=self._ivf_params(selector, params))  # (Q, K')
        return self._rerank(x, cand, k)

    def _rerank(self, x: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner products of the candidates, best ``k`` per query; -1 labels stay at the end."""
        q = len(x)
        scores = np.full((q, k), -np.inf, dtype=np.float32)
        labels = np.full((q, k), -1, dtype=np.int64)
        vectors = self.vectors
        for start in range(0, q, _REFINE_BLOCK):
            c = cand[start : start + _REFINE_BLOCK]  # (Qb, K')
            valid = c >= 0
            rows = vectors[np.where(valid, c, 0).ravel()].reshape(c.shape + (self.dim,))  # (Qb, K', H)
            s = np.einsum("qkh,qh->qk", rows, x[start : start + _REFINE_BLOCK])
            s[~valid] = -np.inf
            kk = min(k, s.shape[1])
            top = np.argsort(-s, axis=1, kind="stable")[:, :kk]  # (Qb, k)
            scores[start : start + len(c), :kk] = np.take_along_axis(s, top, axis=1)
            labels[start : start + len(c), :kk] = np.where(
                np.isfinite(scores[start : start + len(c), :kk]), np.take_along_axis(c, top, axis=1), -1
            )
        return scores, labels

    def reconstruct(self, labels):
        return np.array(self.vectors[np.asarray(labels, dtype=np.int64)], dtype=np.float32)

    def reset(self):
        raise NotImplementedError(
            "compact() is not supported for on-disk indexes: removal already deletes list entries; to reclaim the "
            "space of removed rows in vectors.f32, build a new index"
        )

    def load(self, path, directory, lists_name=None):
        # ONDISK_SAME_DIR makes FAISS look for the lists beside the index file, so a moved directory still works.
        lists_name = lists_name or LISTS_FILE
        lists_path = Path(path).parent / lists_name
        if not lists_path.is_file():
            raise FileNotFoundError("the inverted lists of the on-disk index are missing: %s not found" % lists_path)
        index = read_faiss_file(path, "FAISS index file", faiss.IO_FLAG_ONDISK_SAME_DIR)
        _check_loaded(index, faiss.IndexIVFPQ, self.kind, path, self.dim)
        lists = faiss.downcast_InvertedLists(index.invlists)
        if not isinstance(lists, faiss.OnDiskInvertedLists):
            raise CorruptFileError("%s holds in-memory inverted lists, but the manifest says on_disk=True" % path)
        if os.path.basename(lists.filename) != lists_name:
            raise CorruptFileError("%s reads its inverted lists from %s, but the manifest names %s"
                                   % (path, os.path.basename(lists.filename), lists_name))
        # Reading lists beyond the end of a truncated file would crash the process (SIGBUS), not raise.
        size = lists_path.stat().st_size
        if size < lists.totsize:
            raise CorruptFileError(
                "%s has %d bytes but %s needs %d: the inverted lists are truncated" % (lists_path, size, path, lists.totsize)
            )
        self.index = index
        self.directory = Path(directory)
        self.lists_name, self.lists_committed = lists_name, True
        vectors_path = self.directory / VECTORS_FILE
        if self.n_rows and not vectors_path.is_file():
            raise FileNotFoundError("the raw vectors of the on-disk index are missing: %s not found" % vectors_path)
        size = vectors_path.stat().st_size if vectors_path.exists() else 0
        if size < self.n_rows * self.dim * 4:
            raise CorruptFileError(
                "%s has %d bytes but the manifest needs %d rows of %d float32 (%d bytes): it is truncated"
                % (vectors_path, size, self.n_rows, self.dim, self.n_rows * self.dim * 4)
            )
        self._memmap = None


def live_selector(ntotal: int, dead: set[int]):
    """(bitmap, ``faiss.IDSelectorBitmap``) selecting labels 0..ntotal-1 except ``dead``. The selector keeps a
    raw pointer into the bitmap: hold the tuple for as long as the selector is used."""
    live = np.ones(ntotal, dtype=bool)
    live[np.fromiter(dead, dtype=np.int64, count=len(dead))] = False
    bitmap = np.packbits(live, bitorder="little")  # bit (label % 8) of byte label // 8
    return bitmap, faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap))


def make_backend(dim: int, params: IndexParams, directory: os.PathLike | None = None) -> Backend:
    """The backend of ``params.kind``; an on-disk IVF-PQ one keeps its files in ``directory``."""
    if isinstance(params, HNSWParams):
        return HNSWBackend(dim, params)
    if isinstance(params, IVFPQParams):
        return OnDiskIVFPQBackend(dim, params, Path(directory)) if params.on_disk else IVFPQBackend(dim, params)
    return FlatBackend(dim, params)
