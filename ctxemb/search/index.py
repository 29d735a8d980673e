"""``SemanticIndex``: nearest-neighbour search over embedding arrays with string ids and metadata, on FAISS.

Three kinds share one interface:

- ``"flat"``: exact search (``IndexFlatIP`` behind ``IndexIDMap2``). The reference the others are measured
  against; fine up to a few hundred thousand vectors.
- ``"hnsw"``: a graph index (``IndexHNSWFlat``, inner-product metric). Fast and accurate in memory; no training.
  ``HNSWParams(m, ef_construction, ef_search)``: graph degree (FAISS's M) and beam widths.
- ``"ivfpq"``: inverted file with product-quantised codes (``IndexIVFPQ``) whose ``k * k_factor`` best candidates
  are re-ranked exactly (``IndexRefineFlat``), for large collections. Needs training (done on the first ``add``
  or by ``train``). ``IVFPQParams(nlist, pq_m, nbits, nprobe, k_factor, train_size, seed, on_disk)``. With
  ``on_disk=True`` the inverted lists live in ``<directory>/lists.<token>.ivfdata`` (``faiss.OnDiskInvertedLists``,
  memory-mapped) and the raw vectors for re-ranking in ``<directory>/vectors.f32``, so the collection may be larger
  than RAM.

Each kind takes one frozen parameter object (``ctxemb.search.params``); ``params=None`` means the kind's defaults.

With ``metric="cosine"`` (the default) vectors and queries are L2-normalised on a copy (the caller's arrays are
never modified) and scores are cosine similarities; ``metric="inner_product"`` uses the vectors as given. An
all-zero vector stays zero under cosine (it scores 0 against everything; one warning is logged), as everywhere in
ctxemb (``ctxemb.core.validation.unit_rows``).

Items have unique string ids and optional JSON metadata. ``add`` refuses ids already present (``upsert``
replaces them); ``remove`` guarantees the id is never returned again: exact and on-disk indexes delete the vector,
HNSW and in-memory IVF-PQ (whose FAISS structures cannot delete) keep a tombstone that every search excludes via
an ``IDSelectorBitmap`` until ``compact()`` rebuilds them.

A saved index is a directory (``ctxemb.search.storage``): ``manifest.json``, ``index.<gen>-<token>.faiss`` and
``items.<gen>-<token>.json``, written as a new generation under the directory's lock and committed by replacing the
manifest atomically, so a crash leaves the previous save loadable, a second writer is told (``DirectoryLockedError``)
and a reader loads the old save or the new one. An on-disk index never changes the files of a committed save: it
copies its inverted lists before its first change after a save. Every corrupt, truncated or inconsistent file read
by ``load`` raises ``CorruptFileError`` (a ``ValueError``) naming the file.

Hybrid search (``hybrid=True``, ``add(..., texts=)``, ``search(..., texts=, mode=)``): BM25 over the items' texts
beside the vectors, ids shared, the rankings fused; see ``ctxemb.search.fusion`` and ``ctxemb.search.lexical``.

Threads: every method takes the index's readers-writer lock, so searches run concurrently with each other and
``add``/``upsert``/``remove``/``train``/``compact`` run alone (for every kind; FAISS's HNSW graph would otherwise
crash the process when searched while it grows).

Shape legend:
    N  vectors (items) added
    Q  queries
    K  results per query
    H  dimensions of a vector
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from ctxemb.core.validation import check_int, unit_rows
from ctxemb.core.locks import DirectoryLock, ReadWriteLock, reads, writes
from ctxemb.search.faiss_structures import Backend, live_selector, make_backend
from ctxemb.search.fusion import HybridParams, resolve_hybrid, search_labels
from ctxemb.search.inputs import (
    CHUNK,
    check_batch,
    check_embedder_config,
    check_id_list,
    check_matrix,
    check_spec,
    json_dict,
    ivfpq_train_sample,
    preview,
)
from ctxemb.search.lexical import BM25Index
from ctxemb.search.params import IndexKind, IndexParams, IVFPQParams, Metric
from ctxemb.search.persistence import begin_on_disk_change, load_index, manifest_generation, save_index
from ctxemb.search.results import Hit, hits, id_arrays
from ctxemb.search.storage import CorruptFileError, prepare_on_disk_directory

logger = logging.getLogger(__name__)

# Vectors are validated, normalised and handed to FAISS in chunks so a large add never needs a second full copy.
_ADD_CHUNK = CHUNK
# The smallest default IVF-PQ training sample (the PQ codebooks want ~39 points per centroid, 2**8 centroids).
_MIN_DEFAULT_TRAIN = 10_000
# The search-time overrides and the kind each applies to.
_SEARCH_OPTIONS: dict[str, IndexKind] = {"ef_search": "hnsw", "nprobe": "ivfpq", "k_factor": "ivfpq"}


class SemanticIndex:
    """A nearest-neighbour index of (N, H) vectors with string ids and JSON metadata. See the module docstring.

    Args:
        dim: H, the dimension of the vectors.
        kind: ``"flat"`` (exact), ``"hnsw"`` or ``"ivfpq"``; None takes the kind of ``params`` (flat without them).
        metric: ``"cosine"`` (normalise copies; scores are cosines) or ``"inner_product"``.
        params: the kind's parameters (``FlatParams``, ``HNSWParams`` or ``IVFPQParams``); None for its defaults.
        directory: the index directory; required with ``IVFPQParams(on_disk=True)`` (it must not already hold an
            on-disk index), and the default target of ``save()``.
        embedder_config: the configuration (dict, or an object with ``to_dict()``) of the embedder that made the
            vectors; stored with the index and compared by ``check_config``.
        recipe: JSON dict saying how items were embedded (set by ``build_sentence_index``/``build_word_index``
            so that query helpers embed queries the same way).
        hybrid: keep BM25 over the items' texts beside the vectors: ``True`` (the defaults) or a ``HybridParams``;
            ``add``/``upsert`` then take ``texts=``. Needs the ``bm25s`` package (``ctxemb[hybrid]``).

    Attributes:
        dim, kind, metric, params, directory, embedder_config, recipe: as given (``params`` filled in).
        hybrid: the ``HybridParams``, or None for an index of vectors only.

    Thread-safe: searches run concurrently, mutations alone (a readers-writer lock). One writer at a time per
    directory, across processes: ``save`` holds the directory's lock, and an on-disk index holds it from its first
    change until ``save`` or ``close`` (another writer gets ``DirectoryLockedError``).

    Raises:
        TypeError / ValueError: for an argument of the wrong type or out of range, or ``params`` of another kind
            than ``kind``, naming it.
        FileExistsError: an on-disk index whose ``directory`` already holds on-disk index files.
        ImportError: ``hybrid`` without the bm25s package.
    """

    def __init__(
        self,
        dim: int,
        *,
        kind: IndexKind | None = None,
        metric: Metric = "cosine",
        params: IndexParams | None = None,
        directory: str | Path | None = None,
        embedder_config: Mapping | Any | None = None,
        recipe: Mapping | None = None,
        hybrid: HybridParams | bool | None = None,
    ):
        dim, kind, params = check_spec(dim, kind, metric, params)
        hybrid = resolve_hybrid(hybrid)
        embedder_config = json_dict(embedder_config, "embedder_config")
        recipe = json_dict(recipe, "recipe")
        if isinstance(params, IVFPQParams) and params.on_disk:
            if directory is None:
                raise ValueError("on_disk=True needs directory=, the folder that will hold the inverted lists")
            directory = prepare_on_disk_directory(directory)
        self._init_state(dim, kind, metric, params, embedder_config, recipe,
                         None if directory is None else Path(directory), hybrid)
        if self.on_disk:  # the generation its first change will check the directory is still at
            try:
                self._generation = manifest_generation(self.directory)
            except (OSError, ValueError):
                self._generation = 0

    def _init_state(self, dim, kind, metric, params, embedder_config, recipe, directory, hybrid=None) -> None:
        self.dim: int = dim
        self.kind: IndexKind = kind
        self.metric: Metric = metric
        self.params: IndexParams = params
        self.embedder_config: dict | None = embedder_config
        self.recipe: dict | None = recipe
        self.directory: Path | None = directory
        self.hybrid: HybridParams | None = hybrid
        self._lexical: BM25Index | None = None if hybrid is None else BM25Index(hybrid)  # labels shared
        self._backend: Backend = make_backend(dim, params, directory)
        # label -> id (None once removed); label -> metadata as a JSON string (None when absent)
        self._ids: list[str | None] = []
        self._meta: list[str | None] = []
        self._label_of: dict[str, int] = {}
        # tombstoned labels of kinds whose FAISS index cannot delete (hnsw, in-memory ivfpq)
        self._dead: set[int] = set()
        self._selector_cache = None  # (bitmap array kept alive, faiss.IDSelectorBitmap)
        self._rw = ReadWriteLock()
        self._generation: int | None = None  # the generation of self.directory that this index was loaded/saved as
        self._dir_lock: DirectoryLock | None = None  # on-disk: held from the first change until save/close

    @property
    def on_disk(self) -> bool:
        """True for an IVF-PQ index whose lists and vectors live in files under ``directory``."""
        return isinstance(self.params, IVFPQParams) and self.params.on_disk

    # ----------------------------------------------------------------------------------------------------------
    # size and lookup

    def __len__(self) -> int:
        """Number of items (removed ones excluded)."""
        return len(self._label_of)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._label_of

    def __repr__(self) -> str:
        return "SemanticIndex(kind=%r, dim=%d, metric=%r, items=%d%s%s%s)" % (
            self.kind, self.dim, self.metric, len(self), ", hybrid" if self.hybrid else "",
            ", tombstones=%d" % len(self._dead) if self._dead else "",
            ", on_disk=%r" % str(self.directory) if self.on_disk else "",
        )

    @property
    @reads
    def ids(self) -> list[str]:
        """The ids of all items, in insertion order."""
        return [i for i in self._ids if i is not None]

    @property
    def is_trained(self) -> bool:
        """False only for an IVF-PQ index before ``train``/the first ``add``."""
        return self._backend.is_trained

    @property
    def n_tombstones(self) -> int:
        """Removed items whose vectors are still inside the FAISS index (excluded from results; see ``compact``)."""
        return len(self._dead)

    def _label(self, item_id: str, name: str = "id") -> int:
        if not isinstance(item_id, str):
            raise TypeError("%s must be a string; got %r (%s)" % (name, item_id, type(item_id).__name__))
        try:
            return self._label_of[item_id]
        except KeyError:
            raise KeyError("id %r is not in the index" % item_id) from None

    @reads
    def get_metadata(self, item_id: str) -> dict | None:
        """The metadata stored for ``item_id`` (a fresh copy), or None. Raises KeyError for an unknown id."""
        return self._decode_meta(self._label(item_id))

    def _decode_meta(self, label: int) -> dict | None:
        m = self._meta[label]
        if m is None:
            return None
        try:
            return json.loads(m)
        except ValueError:
            raise CorruptFileError("the metadata of item %r is not valid JSON; the items file of %s is corrupt"
                                   % (self._ids[label], self.directory)) from None

    @reads
    def get_vector(self, item_id: str | Sequence[str]) -> np.ndarray:
        """The stored (H,) float32 vector of ``item_id`` (L2-normalised for ``metric="cosine"``); (n, H) for a
        sequence of n ids.

        Raises:
            KeyError: for an unknown id.
        """
        labels = [self._label(item_id)] if isinstance(item_id, str) else [self._label(i) for i in item_id]
        vectors = self._backend.reconstruct(np.array(labels, dtype=np.int64).reshape(-1))
        return vectors[0] if isinstance(item_id, str) else vectors

    # ----------------------------------------------------------------------------------------------------------
    # input preparation

    def _prepare(self, arr: np.ndarray, name: str) -> np.ndarray:
        """A float32 C-contiguous copy of rows checked by ``_check_matrix``, L2-normalised for the cosine metric
        (zero rows stay zero)."""
        if self.metric == "cosine":
            return unit_rows(arr, name, zero="keep", dtype=np.float32)  # (N, H)
        return np.array(arr, dtype=np.float32, order="C", copy=True)  # (N, H)

    # ----------------------------------------------------------------------------------------------------------
    # training and adding

    def _train_sample(self, arr: np.ndarray) -> np.ndarray:
        return self._prepare(ivfpq_train_sample(arr, self.params, self.dim, _MIN_DEFAULT_TRAIN), "training vectors")

    @writes
    def train(self, vectors) -> "SemanticIndex":
        """Train the IVF-PQ quantisers on (N, H) ``vectors`` (a sample of the collection). No-op for flat/hnsw.

        Args:
            vectors: (N, H) array; N must be at least max(nlist, 2**nbits), and sizes the default nlist.

        Returns:
            self.

        Raises:
            ValueError: too few vectors, a wrong dimension, or the index already trained and holding items.
        """
        arr, _ = check_matrix(vectors, "vectors", self.dim, allow_1d=False)
        if self.kind != "ivfpq":
            return self
        if self._backend.is_trained and self._backend.ntotal:
            raise ValueError("this IVF-PQ index is already trained and holds %d vectors" % self._backend.ntotal)
        sample = self._train_sample(arr)
        self._begin_change()
        self._backend.train(sample, len(arr))
        return self

    @writes
    def add(self, ids: Sequence[str], vectors, metadata: Sequence[Mapping | None] | None = None, *,
            texts: Sequence[str] | None = None, show_progress_bar: bool = True) -> "SemanticIndex":
        """Add new items.

        An untrained IVF-PQ index is first trained on (a sample of) ``vectors``.

        Args:
            ids: N unique string ids, none already in the index.
            vectors: (N, H) array-like; never modified.
            metadata: N JSON-serialisable dicts (or None entries), or None.
            texts: N texts for BM25; required by a hybrid index, refused by others.
            show_progress_bar: show a tqdm bar when the batch spans several chunks of 65,536 vectors.

        Returns:
            self.

        Raises:
            TypeError: non-string ids, non-numeric vectors, metadata that is not JSON.
            ValueError: wrong shape or dimension, NaN/inf, values beyond float32's range, repeated ids, or ids
                already present (use ``upsert``). Everything is checked before anything is added.
        """
        ids, arr, meta, texts = check_batch(ids, vectors, metadata, texts, self.dim, self.hybrid is not None)
        present = [i for i in ids if i in self._label_of]
        if present:
            raise ValueError("ids already in the index: %s; use upsert() to replace them" % preview(present))
        self._add_rows(ids, arr, meta, texts, show_progress_bar)
        return self

    @writes
    def upsert(self, ids: Sequence[str], vectors, metadata: Sequence[Mapping | None] | None = None, *,
               texts: Sequence[str] | None = None, show_progress_bar: bool = True) -> "SemanticIndex":
        """Add items, replacing the vector, metadata (None clears it) and text of ids already present.

        Every argument is checked before anything changes: a bad vector or metadata leaves the old items in place.

        Args / Raises: as for ``add``, except that present ids are allowed.

        Returns:
            self.
        """
        ids, arr, meta, texts = check_batch(ids, vectors, metadata, texts, self.dim, self.hybrid is not None)
        self._remove_labels([self._label_of[i] for i in ids if i in self._label_of])
        self._add_rows(ids, arr, meta, texts, show_progress_bar)
        return self

    def _add_rows(self, ids: list[str], arr: np.ndarray, meta: list[str | None], texts: list[str] | None,
                  show_progress_bar: bool) -> None:
        n = len(ids)
        if n == 0:
            return
        self._begin_change()
        if not self._backend.is_trained:
            self._backend.train(self._train_sample(arr), n)
        if self._lexical is not None and texts is not None:  # None from compact(), which renumbers the BM25 half
            self._lexical.add(texts, len(self._ids))
        with tqdm(total=n, desc="indexing", unit="vec", disable=not show_progress_bar or n <= _ADD_CHUNK) as bar:
            for start in range(0, n, _ADD_CHUNK):
                stop = min(start + _ADD_CHUNK, n)
                x = self._prepare(arr[start:stop], "vectors")
                first = len(self._ids)
                labels = np.arange(first, first + len(x), dtype=np.int64)
                self._backend.add(x, labels)
                for offset, item_id in enumerate(ids[start:stop]):
                    self._label_of[item_id] = first + offset
                self._ids.extend(ids[start:stop])
                self._meta.extend(meta[start:stop])
                bar.update(len(x))
        self._selector_cache = None

    # ----------------------------------------------------------------------------------------------------------
    # removal

    @writes
    def remove(self, ids: Sequence[str]) -> "SemanticIndex":
        """Remove items; a removed id is never returned by a search again (until it is added anew).

        Args:
            ids: string ids, all present (repeats are ignored).

        Returns:
            self.

        Raises:
            KeyError: some ids are not in the index (nothing is removed then).
        """
        ids = list(dict.fromkeys(check_id_list(ids)))
        missing = [i for i in ids if i not in self._label_of]
        if missing:
            raise KeyError("ids not in the index: %s" % preview(missing))
        self._remove_labels([self._label_of[i] for i in ids])
        return self

    def _remove_labels(self, labels: list[int]) -> None:
        if not labels:
            return
        if self._backend.physical_remove:
            self._begin_change()
            self._backend.remove(np.array(sorted(labels), dtype=np.int64))
        else:
            self._dead.update(labels)
            self._selector_cache = None
        if self._lexical is not None:
            self._lexical.remove(labels)
        for label in labels:
            del self._label_of[self._ids[label]]
            self._ids[label] = None
            self._meta[label] = None

    def _begin_change(self) -> None:
        """Before an on-disk index changes its files (see ``ctxemb.search.persistence.begin_on_disk_change``)."""
        if self.on_disk:
            begin_on_disk_change(self)

    @writes
    def close(self) -> None:
        """Release the directory lock that an on-disk index holds since its first change after a save.

        Changes not saved are abandoned: the directory keeps its last save (the copied lists and rows appended to
        ``vectors.f32`` are unused; the next save or load deletes the copy). The index must not be used after.
        """
        if self._dir_lock is not None:
            while self._dir_lock.held:
                self._dir_lock.release()
            self._dir_lock = None

    @writes
    def compact(self, *, show_progress_bar: bool = True) -> "SemanticIndex":
        """Rebuild the FAISS index without tombstoned vectors (hnsw, in-memory ivfpq) and renumber labels.

        Results are unchanged for exact search; HNSW rebuilds its graph (as slow as building it), IVF-PQ re-encodes
        with its trained quantisers. Needs memory for a (N, H) float32 copy of the items.

        Returns:
            self.

        Raises:
            NotImplementedError: for on-disk indexes (their removal already deletes list entries).
        """
        if self.on_disk:
            self._backend.reset()  # raises NotImplementedError with the reason
        if len(self._ids) == len(self._label_of):
            return self
        live = np.array([label for label, i in enumerate(self._ids) if i is not None], dtype=np.int64)
        x = self._backend.reconstruct(live)  # (N, H), already normalised
        ids = [self._ids[label] for label in live]
        meta = [self._meta[label] for label in live]
        if self._lexical is not None:
            self._lexical.renumber(live.tolist())
        self._backend.reset()
        self._ids, self._meta, self._label_of, self._dead = [], [], {}, set()
        self._selector_cache = None
        # The stored vectors are already unit length; re-normalising them is harmless (idempotent up to rounding).
        self._add_rows(ids, x, meta, None, show_progress_bar)
        return self

    def _selector(self):
        """(bitmap, IDSelectorBitmap) of live labels, or None when nothing is tombstoned. The caller keeps the
        tuple while searching: the selector points into the bitmap."""
        if not self._dead:
            return None
        cache = self._selector_cache
        if cache is None:
            cache = self._selector_cache = live_selector(self._backend.ntotal, self._dead)
        return cache

    # ----------------------------------------------------------------------------------------------------------
    # search

    def _vector_labels(self, queries, k: int, overrides: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, bool]:
        k = check_int(k, "k", low=1)
        given = {name: value for name, value in overrides.items() if value is not None}
        for name in given:
            if _SEARCH_OPTIONS[name] != self.kind:
                raise ValueError(
                    "%s applies to kind=%r indexes; this index is kind=%r" % (name, _SEARCH_OPTIONS[name], self.kind)
                )
        params = dataclasses.replace(self.params, **given) if given else self.params  # checks the values
        arr, single = check_matrix(queries, "queries", self.dim, allow_1d=True)
        if len(self) == 0:
            raise ValueError("the index is empty: add items before searching")
        x = self._prepare(arr, "queries")
        k_eff = min(k, len(self))
        if len(x) == 0:
            return np.zeros((0, k_eff), np.float32), np.zeros((0, k_eff), np.int64), single
        selector = self._selector()  # (bitmap, selector): kept alive until the search returns
        scores, labels = self._backend.search(x, k_eff, None if selector is None else selector[1], params)
        return scores, labels, single

    @reads
    def search(self, queries, k: int = 10, *, texts: str | Sequence[str] | None = None, mode: str | None = None,
               ef_search: int | None = None, nprobe: int | None = None, k_factor: float | None = None,
               fusion: str | None = None, rrf_k: float | None = None, alpha: float | None = None,
               candidates: int | None = None) -> list[list[Hit]] | list[Hit]:
        """The ``k`` nearest items of each query, best first.

        Args:
            queries: (Q, H) array-like, or a single (H,) vector; None for ``mode="bm25"``.
            k: results per query; when the index holds fewer than ``k`` items, all of them. Approximate kinds may
                return fewer than ``k`` when their search explores too little (raise ``ef_search``/``nprobe``).
            texts: the Q query texts (one str for a single query) of a hybrid index's BM25 ranking.
            mode: ``"vector"``, ``"bm25"`` or ``"hybrid"`` (see ``ctxemb.search.fusion``); None: ``"hybrid"`` for
                a hybrid index, else ``"vector"``.
            ef_search: HNSW beam width for this call (kind "hnsw").
            nprobe: IVF lists to scan for this call (kind "ivfpq").
            k_factor: candidates re-ranked exactly = k * k_factor, for this call (kind "ivfpq").
            fusion, rrf_k, alpha, candidates: override the index's ``HybridParams`` for this call (mode "hybrid").

        Returns:
            Q lists of ``Hit(id, score, metadata)`` in decreasing score (fused in mode "hybrid", BM25 in mode
            "bm25"); a single list for a 1-D query.

        Raises:
            TypeError / ValueError: bad ``k``, wrong query shape or dimension, NaN/inf, an option that does not
                apply to this kind or mode, texts missing or not one per query, or an empty index.
        """
        scores, labels, single = search_labels(
            self, queries, k, texts, mode, dict(ef_search=ef_search, nprobe=nprobe, k_factor=k_factor),
            dict(fusion=fusion, rrf_k=rrf_k, alpha=alpha, candidates=candidates), self._vector_labels)
        results = hits(scores, labels, self._ids, self._decode_meta)
        return results[0] if single else results

    @reads
    def search_array(self, queries, k: int = 10, *, texts: str | Sequence[str] | None = None,
                     mode: str | None = None, ef_search: int | None = None, nprobe: int | None = None,
                     k_factor: float | None = None, fusion: str | None = None, rrf_k: float | None = None,
                     alpha: float | None = None, candidates: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Array form of ``search``: scores and string ids.

        Args: as for ``search``.

        Returns:
            scores: (Q, K') float32, decreasing along each row, K' = min(k, len(index)).
            ids: (Q, K') object array of str. Where a search (approximate, or BM25) found fewer than K' items the
                row ends with id None and score -inf (never FAISS's -1 labels). For a 1-D query both are 1-D (K',).
        """
        scores, labels, single = search_labels(
            self, queries, k, texts, mode, dict(ef_search=ef_search, nprobe=nprobe, k_factor=k_factor),
            dict(fusion=fusion, rrf_k=rrf_k, alpha=alpha, candidates=candidates), self._vector_labels)
        scores, ids = id_arrays(scores, labels, self._ids)
        return (scores[0], ids[0]) if single else (scores, ids)

    # ----------------------------------------------------------------------------------------------------------
    # embedder configuration

    def check_config(self, config: Mapping | Any) -> None:
        """Raise unless ``config`` equals the embedder configuration stored with the index.

        Every field is compared (``embedder_config_differences``), after applying the layer choice of the index's
        recipe to both sides (``apply_layer_overrides``): an index built with ``layers=[-1]`` by
        ``build_sentence_index`` accepts the configuration of the embedder it was built with, whose queries
        ``query_sentences`` embeds with ``layers=[-1]`` too.

        Args:
            config: the query embedder's configuration: a dict (``emb.config.to_dict()``) or an object with
                ``to_dict()``.

        Raises:
            ValueError: listing each differing field with the index's and the given value, or saying that the
                index stores no configuration to compare against.
        """
        check_embedder_config(self.embedder_config, self.recipe, config)

    # ----------------------------------------------------------------------------------------------------------
    # persistence

    @writes
    def save(self, directory: str | Path | None = None, *, lock_timeout: float | None = 0.0) -> Path:
        """Save to a directory atomically (a new generation of files, then the manifest replaced in one step).

        The directory's lock is held while saving: a save by another process or object at the same time fails
        with ``DirectoryLockedError`` (or waits for it up to ``lock_timeout`` seconds), never mixing the two.

        Args:
            directory: target folder (created if needed); defaults to the index's own ``directory``. An on-disk
                index saved elsewhere copies its data files there.
            lock_timeout: seconds to wait for another writer of the directory; 0 (the default) fails at once,
                None waits as long as it takes.

        Returns:
            The directory.

        Raises:
            ValueError: no directory given and the index has none.
            DirectoryLockedError: another writer holds the directory (a ``TimeoutError``).
            RuntimeError: a directory this index was loaded from or saved to, which another writer saved since
                (the other writer's items would be lost; a directory it never loaded or saved is replaced).
        """
        return save_index(self, directory, lock_timeout)

    @classmethod
    def load(cls, directory: str | Path, *, expected_config: Mapping | Any | None = None) -> "SemanticIndex":
        """Load an index saved by ``save``.

        Takes no lock: when another process saves the directory meanwhile, the load sees that save or the previous
        one, complete (if a file it is about to read is deleted by a save committing, it starts again from the new
        manifest). Leftovers of interrupted saves are deleted first when no writer is at work (logged).

        Args:
            directory: the index directory.
            expected_config: if given, the embedder configuration the caller will query with; a mismatch with
                the stored one raises (see ``check_config``).

        Returns:
            The index; its ``directory`` is ``directory``.

        Raises:
            FileNotFoundError: no manifest in ``directory``, or a file it names is missing.
            CorruptFileError: a file that is corrupt, truncated, not UTF-8 (JSON) or not a FAISS index, files that
                disagree with each other, or an on-disk index changed in place by an earlier ctxemb and never saved;
                the message names the file. A ``ValueError``.
            ValueError: another format version, or a configuration mismatch.
        """
        return load_index(cls, directory, expected_config)
