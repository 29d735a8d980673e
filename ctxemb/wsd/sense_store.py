"""SenseStore: one embedding per word sense, with counts, metadata and exact cosine search (FAISS).

Shapes: S senses in the store, H the store's dimension, N query vectors, K candidate senses, k neighbours.

A sense's embedding is the running mean of the contextual embeddings of its occurrences (J&M eq. 11.8):
``add(keys, vectors)`` folds new occurrences into the means, so a store can be built in pieces. Senses can also
be given a vector directly (``set_vectors``) with a count of 0: that is how senses that a corpus never shows
are filled in (propagation from the synset, hypernym or lexicographer file; gloss-only vectors), and
``origin(key)`` says which way a vector came.

Cosine is the inner product of L2-normalised vectors (normalised copies: callers' arrays are never changed).
The store keeps the unit vectors (float32, C-contiguous) and each mean's norm (float64), which together give the
means back; the unit vectors also live in a FAISS ``IndexIDMap2(IndexFlatIP)`` whose int64 ids index the
sense-key table. Two searches:

- ``score(vector, candidate_keys)``: cosines with a word's candidate senses only (J&M eq. 11.9), computed
  exactly as dot products with the stored unit vectors of those ids;
- ``search(vectors, k)``: exact global k-nearest-neighbour search over all senses (FAISS flat index).

``query_transform`` is the post-processing that queries need so they live in the same space as the stored
vectors (standardisation fitted at build time, duplication when the store concatenates two views); it is saved
with the store.

On disk a store is a directory::

    meta.json      format version, dimension, sense count, embedder configuration, post-processing, build info
    keys.txt       sense keys, one per line; line i is FAISS id i
    index.faiss    IndexIDMap2(IndexFlatIP) of the unit vectors
    senses.npz     norms (S,) float64, counts (S,) int64, origins (S,) uint8, query-transform arrays

written atomically (a temporary directory renamed into place). A 33k x 384 store is about 52 MB and loads in a
fraction of a second (the unit vectors are used in place from the loaded FAISS index). A file that is corrupt,
truncated, not UTF-8, of another format or inconsistent with the others makes ``load`` raise
:class:`~ctxemb.search.CorruptFileError` (a ``ValueError``) naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ctxemb.core.validation import check_choice, check_finite_matrix, check_int, check_string_batch, unit_rows
from ctxemb.core.atomic import atomic_directory, resolve_saved_directory
from ctxemb.core.locks import DirectoryLock, ReadWriteLock, lock_file_beside, reads, writes
from ctxemb.search.storage import CorruptFileError
from ctxemb.wsd.query_transform import QueryTransform
from ctxemb.wsd.sense_store_files import (
    ORIGINS,
    read_arrays,
    read_faiss,
    read_keys,
    read_meta,
    read_snapshot,
)

logger = logging.getLogger(__name__)

__all__ = ["SenseStore", "QueryTransform", "CorruptFileError", "FORMAT_VERSION", "ORIGINS"]

FORMAT_VERSION = 1
# How a sense got its vector (ORIGINS, from sense_store_files); index = code stored in senses.npz.
_ORIGIN_CODE = {name: i for i, name in enumerate(ORIGINS)}
_STORE_DIM = "the store's dimension"
# How long load keeps starting again when saves by another process keep replacing the directory it reads.
_LOAD_RETRY_SECONDS = 30.0


def _import_faiss():
    try:
        import faiss
    except ImportError as e:  # faiss-cpu is a core dependency, but say what to install if it is missing
        raise ImportError("SenseStore needs FAISS: pip install faiss-cpu") from e
    return faiss


def _check_keys(keys, name: str = "keys") -> list[str]:
    keys = check_string_batch(keys, name, allow_empty_batch=True)
    for k in keys:
        if not k or any(c.isspace() for c in k):
            raise ValueError("%s must be non-empty strings without whitespace, got %r" % (name, k))
    return keys


def _unit(vectors, name: str) -> np.ndarray:
    """(N, H) -> unit rows (N, H) float32 C-contiguous; zero rows stay zero (they score 0, see ctxemb.core.validation)."""
    return unit_rows(vectors, name, zero="keep", dtype=np.float32)


def _unit_and_norms(means: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(N, H) means -> their unit rows (N, H) float32 and norms (N,) float64: together the store's form of a mean."""
    m = np.asarray(means, dtype=np.float64)
    return _unit(m, name), np.sqrt(np.einsum("ij,ij->i", m, m))


class SenseStore:
    """Sense embeddings with running means, counts, metadata and exact cosine search.

    Args:
        dim: H, the dimension of the stored vectors.
        metadata: JSON-able description of how the vectors were made. Conventional keys: ``"embedder"`` (the
            embedder's ``config.to_dict()``), ``"layers"``, ``"layer_pooling"``, ``"subword_pooling"``,
            ``"post_processing"``, ``"build"``. ``"format_version"``, ``"dim"`` and ``"n_senses"`` are written
            by :meth:`save`.
        query_transform: maps raw query embeddings into the store's space (None = identity); its output
            dimension must be ``dim``.

    Raises:
        ValueError: ``dim`` < 1 or the query transform's output dimension differs from ``dim``.
    """

    def __init__(
        self,
        dim: int,
        *,
        metadata: Mapping[str, Any] | None = None,
        query_transform: QueryTransform | None = None,
    ):
        dim = check_int(dim, "dim", low=1)
        if query_transform is not None and query_transform.output_dim != dim:
            raise ValueError(
                "query_transform outputs dimension %d, but the store's dimension is %d"
                % (query_transform.output_dim, dim)
            )
        self.dim = int(dim)
        try:  # a JSON round trip: what is kept in memory is exactly what save() and load() give
            self.metadata: dict[str, Any] = json.loads(json.dumps(dict(metadata or {})))
        except (TypeError, ValueError) as e:
            raise TypeError("metadata must be JSON-serialisable: %s" % e) from None
        self.query_transform = query_transform
        self._keys: list[str] = []
        self._ids: dict[str, int] = {}
        self._unit = np.zeros((0, self.dim), dtype=np.float32)  # capacity rows; the first len(self) are in use
        self._norms = np.zeros(0, dtype=np.float64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._origins = np.zeros(0, dtype=np.uint8)
        self._index = None  # FAISS index of the unit vectors, built lazily; None = stale
        self._owns_unit = True  # False right after load: self._unit is a view into self._index
        self._rw = ReadWriteLock()  # queries concurrent, updates alone

    # ---- inspection -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._ids

    def __repr__(self) -> str:
        return "SenseStore(senses=%d, dim=%d, embedder=%r)" % (
            len(self),
            self.dim,
            (self.metadata.get("embedder") or {}).get("model"),
        )

    @property
    @reads
    def keys(self) -> tuple[str, ...]:
        """Sense keys in id order (FAISS id i is ``keys[i]``)."""
        return tuple(self._keys)

    @reads
    def ids(self, keys: Sequence[str]) -> np.ndarray:
        """Sense keys -> int64 ids (K,). Raises KeyError naming the keys the store lacks."""
        keys = _check_keys(keys)
        missing = [k for k in keys if k not in self._ids]
        if missing:
            raise KeyError(
                "%d sense key(s) not in the store (of %d senses): %s" % (len(missing), len(self), missing[:10])
            )
        return np.fromiter((self._ids[k] for k in keys), dtype=np.int64, count=len(keys))

    @reads
    def count(self, key: str) -> int:
        """Number of corpus occurrences averaged into ``key`` (0 for a propagated or given vector)."""
        return int(self._counts[self.ids([key])[0]])

    @reads
    def counts(self, keys: Sequence[str] | None = None) -> np.ndarray:
        """Occurrence counts (K,) int64 of ``keys`` (default all, in id order)."""
        n = len(self)
        return self._counts[:n].copy() if keys is None else self._counts[self.ids(keys)]

    @reads
    def origin(self, key: str) -> str:
        """How the sense got its vector: one of :data:`ORIGINS`."""
        return ORIGINS[self._origins[self.ids([key])[0]]]

    @reads
    def origins(self) -> dict[str, int]:
        """Number of senses per origin."""
        codes = np.bincount(self._origins[: len(self)], minlength=len(ORIGINS))
        return {name: int(c) for name, c in zip(ORIGINS, codes) if c}

    @reads
    def vectors(self, keys: Sequence[str] | None = None) -> np.ndarray:
        """The mean vectors (K, H) float32 of ``keys`` (default all, in id order)."""
        ids = np.arange(len(self)) if keys is None else self.ids(keys)
        return (self._unit[ids].astype(np.float64) * self._norms[ids, None]).astype(np.float32)

    @reads
    def vector(self, key: str) -> np.ndarray:
        """The mean vector (H,) float32 of one sense."""
        return self.vectors([key])[0]

    @reads
    def unit_vectors(self, keys: Sequence[str] | None = None) -> np.ndarray:
        """The L2-normalised vectors (K, H) float32 (a copy)."""
        ids = np.arange(len(self)) if keys is None else self.ids(keys)
        return self._unit[ids].copy()

    @property
    def nbytes(self) -> int:
        """Bytes of vector and per-sense data in memory (excluding the FAISS copy and the key strings)."""
        n = len(self)
        return n * (self.dim * 4 + 8 + 8 + 1)

    # ---- updates ----------------------------------------------------------------------------------------
    def _make_writable(self, extra: int) -> None:
        """Own the arrays (not a view into a loaded index) with room for ``extra`` more senses."""
        n = len(self)
        need = n + extra
        if self._owns_unit and need <= self._unit.shape[0]:
            return
        cap = max(need, 2 * self._unit.shape[0], 64) if need > self._unit.shape[0] else self._unit.shape[0]
        unit = np.zeros((cap, self.dim), dtype=np.float32)
        unit[:n] = self._unit[:n]
        self._unit = unit
        for name, dtype in (("_norms", np.float64), ("_counts", np.int64), ("_origins", np.uint8)):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=dtype)
            new[:n] = old[:n]
            setattr(self, name, new)
        self._owns_unit = True

    def _ids_creating(self, keys: list[str]) -> np.ndarray:
        new = [k for k in dict.fromkeys(keys) if k not in self._ids]
        self._make_writable(len(new))
        for k in new:
            self._ids[k] = len(self._keys)
            self._keys.append(k)
        return np.fromiter((self._ids[k] for k in keys), dtype=np.int64, count=len(keys))

    def _checked_ids(self, keys, vectors, name: str) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Validate an update and return (keys, int64 ids with new keys created, (N, H) vectors)."""
        keys = _check_keys(keys)
        a = check_finite_matrix(vectors, name, dim=self.dim, dim_text=_STORE_DIM)
        if len(keys) != a.shape[0]:
            raise ValueError("got %d keys but %d vectors; they must match one to one" % (len(keys), a.shape[0]))
        if not keys:
            raise ValueError("nothing to add: keys and %s are empty" % name)
        return keys, self._ids_creating(keys), a

    @writes
    def add(self, keys: Sequence[str], vectors) -> None:
        """Fold occurrences into the senses' running means (new keys are created).

        ``mean <- (count * mean + sum of new vectors) / (count + number of new vectors)``. A sense whose vector
        was propagated or given (count 0) is replaced by the mean of its corpus occurrences.

        Args:
            keys: N sense keys, repeated keys allowed (one per occurrence).
            vectors: (N, H) occurrence embeddings, already in the store's space.

        Raises:
            ValueError: lengths differ, nothing given, wrong dimension, non-finite values, malformed keys.
        """
        n_before = len(self)
        keys, ids, a = self._checked_ids(keys, vectors, "vectors")
        try:
            uniq, inverse = np.unique(ids, return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            starts = np.searchsorted(inverse[order], np.arange(len(uniq)))
            sums = np.add.reduceat(np.asarray(a, dtype=np.float64)[order], starts, axis=0)  # (U, H)
            n_new = np.bincount(inverse, minlength=len(uniq)).astype(np.int64)
            old_counts = self._counts[uniq]
            old_means = self._unit[uniq].astype(np.float64) * self._norms[uniq, None]
            total = old_counts + n_new
            means = (old_means * old_counts[:, None] + sums) / total[:, None]
            self._write(uniq, means, total, _ORIGIN_CODE["corpus"])
        except BaseException:
            self._forget_new_keys(n_before)
            raise

    @writes
    def set_vectors(self, keys: Sequence[str], vectors, *, origin: str = "given", counts=None) -> None:
        """Give senses their vectors directly (replacing any mean), e.g. propagated or gloss vectors.

        Args:
            keys: K distinct sense keys.
            vectors: (K, H) vectors in the store's space.
            origin: recorded origin, one of :data:`ORIGINS`.
            counts: (K,) occurrence counts to record (default 0: the vectors are not corpus means, and a later
                :meth:`add` replaces them).

        Raises:
            ValueError: repeated keys, bad shapes or values, unknown origin.
        """
        check_choice(origin, "origin", ORIGINS)
        keys = _check_keys(keys)
        if len(set(keys)) != len(keys):
            raise ValueError("set_vectors needs distinct keys; got %d repeats" % (len(keys) - len(set(keys))))
        c = np.zeros(len(keys), dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        if c.shape != (len(keys),) or (c < 0).any():
            raise ValueError("counts must be %d non-negative ints, got shape %s" % (len(keys), c.shape))
        n_before = len(self)
        keys, ids, a = self._checked_ids(keys, vectors, "vectors")
        try:
            self._write(ids, a, c, _ORIGIN_CODE[origin])
        except BaseException:
            self._forget_new_keys(n_before)
            raise

    def _forget_new_keys(self, n_before: int) -> None:
        """Undo the keys an update created before it failed (the store is left as it was)."""
        for k in self._keys[n_before:]:
            del self._ids[k]
        del self._keys[n_before:]

    def _write(self, ids: np.ndarray, means: np.ndarray, counts: np.ndarray, origin: int) -> None:
        """Store means (checked: everything is computed before anything is assigned)."""
        unit, norms = _unit_and_norms(means, "vectors")
        if not np.isfinite(norms).all():
            raise ValueError("vectors are too large: the length of a (mean) vector overflows float64 (first at row %d)"
                             % int(np.argmin(np.isfinite(norms))))
        self._unit[ids] = unit
        self._norms[ids] = norms
        self._counts[ids] = counts
        self._origins[ids] = origin
        self._index = None

    @writes
    def transform_vectors(self, fn) -> None:
        """Replace every mean ``m`` by ``fn(M)`` applied to all means at once (M: (S, H) -> (S, H')).

        Used by the builder to standardise centroids (standardisation is affine, so the standardised mean of
        the occurrences equals the standardised mean). ``H'`` becomes the store's dimension; the caller updates
        ``query_transform`` to match.
        """
        n = len(self)
        means = self._unit[:n].astype(np.float64) * self._norms[:n, None]
        new = check_finite_matrix(fn(means), "fn(means)")
        if new.shape[0] != n:
            raise ValueError("fn must keep the number of rows (%d), got %d" % (n, new.shape[0]))
        unit, norms = _unit_and_norms(new, "fn(means)")
        self.dim = new.shape[1]
        self._unit, self._norms = unit, norms
        self._counts, self._origins = self._counts[:n].copy(), self._origins[:n].copy()
        self._owns_unit = True
        self._index = None

    # ---- search -----------------------------------------------------------------------------------------
    def prepare_queries(self, vectors) -> np.ndarray:
        """Apply ``query_transform`` to raw embeddings: (N, H_in) -> (N, H) float32 (identity if None)."""
        if self.query_transform is None:
            a = check_finite_matrix(np.atleast_2d(vectors), "vectors", dim=self.dim, dim_text=_STORE_DIM)
            return np.array(a, dtype=np.float32).reshape(np.shape(vectors))
        return self.query_transform(vectors)

    @reads
    def score(self, vector, candidate_keys: Sequence[str]) -> np.ndarray:
        """Cosines between one query and some senses (J&M eq. 11.9 before the argmax).

        Args:
            vector: (H,) query, already in the store's space (see :meth:`prepare_queries`).
            candidate_keys: K sense keys, all in the store.

        Returns:
            (K,) float32 cosines in the order of ``candidate_keys`` (empty for no candidates; 0 for a zero
            query or a zero sense vector).

        Raises:
            ValueError: wrong shape or dimension, non-finite values.
            KeyError: a candidate is not in the store.
        """
        v = np.asarray(vector)
        if v.ndim != 1:
            raise ValueError("vector must be 1-D (H,), got shape %s" % (v.shape,))
        q = _unit(check_finite_matrix(v[None, :], "vector", dim=self.dim, dim_text=_STORE_DIM), "vector")[0]
        ids = self.ids(candidate_keys)
        return self._unit[ids] @ q

    def _faiss_index(self):
        if self._index is None:
            faiss = _import_faiss()
            n = len(self)
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            index.add_with_ids(np.ascontiguousarray(self._unit[:n]), np.arange(n, dtype=np.int64))
            self._index = index
        return self._index

    @reads
    def search(self, vectors, k: int = 10) -> tuple[np.ndarray, list[list[str]]]:
        """Exact k-nearest senses by cosine over the whole store.

        Args:
            vectors: (N, H) or (H,) queries in the store's space.
            k: neighbours per query, 1 <= k <= number of senses.

        Returns:
            ``(scores, keys)``: scores (N, k) float32 cosines, best first, and the matching sense keys
            (N lists of k); for a 1-D query, (k,) and one list.

        Raises:
            ValueError: empty store, k out of range, wrong dimension, non-finite values.
        """
        if len(self) == 0:
            raise ValueError("cannot search an empty SenseStore (add senses first)")
        k = check_int(k, "k", low=1, high=len(self), high_text="the number of senses")
        a = np.asarray(vectors)
        single = a.ndim == 1
        q = check_finite_matrix(a[None, :] if single else a, "vectors", dim=self.dim, dim_text=_STORE_DIM)
        q = _unit(q, "vectors")  # (N, H)
        scores, ids = self._faiss_index().search(q, int(k))
        keys = [[self._keys[i] for i in row] for row in ids]
        return (scores[0], keys[0]) if single else (scores, keys)

    # ---- persistence ------------------------------------------------------------------------------------
    @reads
    def save(self, directory: str | os.PathLike, *, lock_timeout: float | None = 0.0) -> Path:
        """Write the store to a directory, atomically (see the module docstring for the layout).

        The new directory is written beside the target and renamed into place; an existing store there is
        replaced only once the new one is complete. The target's lock (``.<name>.ctxemb.lock`` beside it) is held
        meanwhile, so two saves of one directory never interleave: the second fails (or waits).

        Args:
            directory: the target directory.
            lock_timeout: seconds to wait for another writer of ``directory``; 0 (the default) fails at once,
                None waits as long as it takes.

        Returns:
            The directory.

        Raises:
            DirectoryLockedError: another process or object is saving ``directory`` (a ``TimeoutError``).
        """
        faiss = _import_faiss()
        directory = Path(directory)
        n = len(self)
        lock = DirectoryLock(lock_file_beside(directory), what="the SenseStore directory %s" % directory)
        with lock.hold(lock_timeout), atomic_directory(directory) as tmp:
            meta = dict(self.metadata)
            meta.update(format_version=FORMAT_VERSION, dim=self.dim, n_senses=n, origins=self.origins())
            if self.query_transform is not None:
                meta["query_transform"] = self.query_transform.describe()
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            (tmp / "keys.txt").write_text("".join(k + "\n" for k in self._keys[:n]), encoding="utf-8")
            arrays = dict(norms=self._norms[:n], counts=self._counts[:n], origins=self._origins[:n])
            if self.query_transform is not None:
                arrays.update(self.query_transform.to_arrays())
            np.savez(tmp / "senses.npz", **arrays)
            faiss.write_index(self._faiss_index(), str(tmp / "index.faiss"))
        logger.info("saved %r to %s", self, directory)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "SenseStore":
        """Read a store written by :meth:`save`.

        Raises:
            FileNotFoundError: the directory or one of its files is missing.
            CorruptFileError: a file is corrupt, truncated, not UTF-8, not of its format, or disagrees with the
                others (a ``ValueError``; the message names the file and what is wrong).
            ValueError: an unsupported format version.
        """
        directory = Path(directory)
        deadline = time.monotonic() + _LOAD_RETRY_SECONDS
        while True:
            resolve_saved_directory(directory)  # restores a save a crash interrupted
            version_id = _directory_id(directory)
            try:
                files, version_id = read_snapshot(directory)
                store = cls._from_files(directory, files)
                break
            except (FileNotFoundError, CorruptFileError):
                # A save that replaced the directory meanwhile (and deleted the version being read): read the new one.
                if _directory_id(directory) in (None, version_id) or time.monotonic() > deadline:
                    raise
                logger.debug("%s was replaced while loading it: loading the new version", directory)
        logger.info("loaded %r from %s", store, directory)
        return store

    @classmethod
    def _from_files(cls, directory: Path, files: dict[str, bytes]) -> "SenseStore":
        """A store from the bytes of its files (read by ``read_snapshot``), every file checked."""
        faiss = _import_faiss()
        meta_path = directory / "meta.json"
        meta = read_meta(meta_path, files["meta.json"])
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                "%s has SenseStore format version %r; this ctxemb reads version %d" % (directory, version, FORMAT_VERSION)
            )
        dim = meta.get("dim")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise CorruptFileError("%s: dim must be an integer >= 1; got %r" % (meta_path, dim))
        if meta.get("embedder") is not None and not isinstance(meta["embedder"], dict):
            raise CorruptFileError("%s: 'embedder' must be an object (the embedder's configuration); got %r"
                                   % (meta_path, meta["embedder"]))
        keys = read_keys(directory / "keys.txt", files["keys.txt"])
        n = len(keys)
        index_path = directory / "index.faiss"
        index = read_faiss(index_path, files["index.faiss"])
        if meta.get("n_senses", n) != n or index.ntotal != n:
            raise CorruptFileError(
                "SenseStore keys file %s has %d lines (one sense key each), but %s says n_senses=%r and %s holds %d "
                "vectors: the files disagree (keys.txt truncated, or files from different saves)"
                % (directory / "keys.txt", n, meta_path, meta.get("n_senses"), index_path, index.ntotal))
        arrays = read_arrays(directory / "senses.npz", n, files["senses.npz"])
        if not isinstance(index, faiss.IndexIDMap2) or not isinstance(faiss.downcast_index(index.index),
                                                                       faiss.IndexFlat):
            raise CorruptFileError("%s holds a %s, not the IndexIDMap2(IndexFlatIP) a SenseStore saves"
                                   % (index_path, type(index).__name__))
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise CorruptFileError("%s uses FAISS metric %d, not the inner product" % (index_path, index.metric_type))
        if index.d != dim or index.ntotal != n:
            raise CorruptFileError(
                "%s is inconsistent: %d keys in keys.txt, index.faiss holds %d vectors of dimension %d, meta.json "
                "says dimension %d" % (directory, n, index.ntotal, index.d, dim)
            )
        for name in ("format_version", "dim", "n_senses", "origins", "query_transform"):
            meta.pop(name, None)
        try:
            qt = QueryTransform.from_arrays(arrays)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptFileError("%s: the query transform's arrays are invalid: %s"
                                   % (directory / "senses.npz", e)) from None
        if qt is not None and qt.output_dim != dim:
            raise CorruptFileError("%s: the query transform outputs dimension %d, but meta.json says %d"
                                   % (directory / "senses.npz", qt.output_dim, dim))
        store = cls(dim, metadata=meta, query_transform=qt)
        flat = faiss.downcast_index(index.index)
        id_map = faiss.vector_to_array(index.id_map)
        if not np.array_equal(id_map, np.arange(n)):
            raise CorruptFileError("%s: the FAISS ids are not 0..%d in order" % (index_path, n - 1))
        # Use the loaded index's vectors in place (no copy); the first update copies them (see _make_writable).
        store._unit = faiss.rev_swig_ptr(flat.get_xb(), n * dim).reshape(n, dim) if n else np.zeros((0, dim), np.float32)
        if not np.isfinite(store._unit).all():
            raise CorruptFileError("%s holds NaN or infinite vectors" % index_path)
        store._owns_unit = False
        store._index = index
        store._keys = keys
        store._ids = {k: i for i, k in enumerate(keys)}
        store._norms = arrays["norms"].astype(np.float64)
        store._counts = arrays["counts"].astype(np.int64)
        store._origins = arrays["origins"].astype(np.uint8)
        return store


def _directory_id(directory: Path) -> tuple[int, int] | None:
    """(device, inode) of the directory now at ``directory``, or None if there is none."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_dev, st.st_ino
