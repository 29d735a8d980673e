"""One on-disk IVF-PQ index from shards that several processes or machines embedded and added.

    q = train_ivfpq(sample_vectors, "quantizer", params=IVFPQParams(nlist=4096), n_total=100_000_000)  # once
    add_shard(q, "parts/shard-00003", ids, vectors, metadata, shard_index=3)     # on each process / machine
    merge_shards(q, ["parts/shard-00000", ...], "index")                         # once, in one process
    SemanticIndex.load("index").search(queries, k=10)

1. :func:`train_ivfpq` trains the IVF-PQ coarse quantizer and PQ codebooks once, on a sample drawn (with
   ``params.seed``) from one or several arrays or ``.npy`` files, and saves the trained, empty index and its
   *fingerprint* (``ctxemb.search.shard_files``). Trained on one array, it is the quantizer
   ``SemanticIndex(params=...).add(array)`` trains: the same sample, the same FAISS k-means.
2. :func:`add_shard` adds one shard's vectors to a copy of it and writes a *partial* (the shard's PQ codes in
   inverted lists under local labels, its ids and metadata, its vectors) to the shard's own directory, under that
   directory's lock; it never reads or writes another shard's. Memory: the shard's codes and ids
   ((pq_m + 8) bytes per vector) and one block of 65,536 vectors; the vectors go to disk as they are added.
3. :func:`merge_shards` checks that every partial was built from the same quantizer (fingerprints recomputed from the
   partials' FAISS files), with the same embedder configuration and recipe, that no id appears twice, and (as it
   copies them) that every vector is finite, since a partial's file may have been overwritten after ``add_shard``
   checked it; then writes
   one on-disk IVF-PQ index in the :class:`~ctxemb.search.SemanticIndex` format: the inverted lists are built list by
   list in a ``faiss.OnDiskInvertedLists`` file from the partials' lists, read through memory maps
   (``faiss.IO_FLAG_MMAP``), so no shard is ever loaded whole; the vectors are copied file to file. Shards are
   merged in increasing ``shard_index`` (whatever order they are given in): item labels are renumbered
   0..N-1 in that order, the ids stay the caller's, and every list holds its entries in the order a one-process build
   that added the shards' vectors in that order would hold them, so the merged index answers every search exactly
   as that build does (the same ids, the same scores).

The merged directory is written beside its target and renamed into place (``ctxemb.core.atomic.atomic_directory``) under
a lock beside it (``.<name>.ctxemb.lock``): a crash mid-merge leaves no index at the target (the temporary is
deleted by the next merge or load), a second merge into the same target gets ``DirectoryLockedError``.

(FAISS's own ``OnDiskInvertedLists.merge_from_multiple``, which ``faiss.contrib.ondisk.merge_ondisk`` uses, is not
used: in FAISS 1.15 its ``shift_ids`` does not shift a shard's ids by the sizes of the shards before it, and the
merged file's free-space table claims the space of the merged lists, so the next ``add`` to the merged index
overwrites them.)

Shape legend: N vectors (a shard's, or the sample's), H dimensions, S shards.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import faiss
import numpy as np
from tqdm.auto import tqdm

from ctxemb.core.validation import CorruptFileError, check_choice, check_int, unit_rows
from ctxemb.core.atomic import atomic_directory, atomic_path, atomic_write, recover_folder
from ctxemb.core.locks import DirectoryLock, lock_file_beside
from ctxemb.search.faiss_structures import IVFPQBackend
from ctxemb.search.index import SemanticIndex
from ctxemb.search.inputs import (
    CHUNK,
    check_id_list,
    check_matrix,
    check_metadata,
    embedder_config_differences,
    json_dict,
    preview,
)
from ctxemb.search.params import IVFPQParams, Metric
from ctxemb.search.shard_files import (
    PARTIAL_FILE,
    QUANTIZER_FILE,
    PartialShard,
    TrainedQuantizer,
    check_ivf,
    partial_manifest,
    quantizer_fingerprint,
    quantizer_manifest,
    read_partial,
    read_quantizer,
    remove_unnamed_partial_files,
)
from ctxemb.search.storage import (
    MANIFEST_FILE,
    SavedIndex,
    directory_lock,
    new_lists_name,
    new_token,
    read_faiss_file,
    write_index_directory,
)

logger = logging.getLogger(__name__)

__all__ = ["PartialShard", "TrainedQuantizer", "add_shard", "load_quantizer", "merge_shards", "open_trained_index",
           "read_partial", "sample_rows", "train_ivfpq"]

# The smallest default training sample (as SemanticIndex's: ~39 points per PQ centroid, 2**8 centroids).
_MIN_DEFAULT_TRAIN = 10_000
_COPY_BYTES = 1 << 24  # vectors are copied file to file in blocks of 16 MiB


def _as_array(source, name: str) -> np.ndarray:
    """An (N, H) array from an array-like or the path of a ``.npy`` file (memory-mapped, read-only)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError("%s: the .npy file %s not found" % (name, path))
        try:
            return np.load(path, mmap_mode="r")
        except ValueError as e:
            raise ValueError("%s: %s is not a .npy array (%s)" % (name, path, e)) from None
    return source if isinstance(source, np.ndarray) else np.asarray(source)


def _sources(vectors, name: str) -> list[np.ndarray]:
    """One array, or a list of arrays / ``.npy`` paths, as a list of (N_i, H) arrays."""
    if isinstance(vectors, (list, tuple)) and vectors and (
            isinstance(vectors[0], (str, os.PathLike, np.ndarray)) or np.ndim(vectors[0]) == 2):
        return [_as_array(v, "%s[%d]" % (name, i)) for i, v in enumerate(vectors)]
    return [_as_array(vectors, name)]


def sample_rows(sources: Sequence[np.ndarray], size: int, seed: int) -> np.ndarray:
    """``size`` rows drawn without replacement from the concatenation of ``sources`` (all rows when fewer),
    in order, with ``numpy.random.default_rng(seed)``: the rows ``SemanticIndex`` trains on for one array.

    Args:
        sources: (N_i, H) arrays (memory maps are read only where sampled).
        size: rows to draw.
        seed: the generator's seed.

    Returns:
        (min(size, N), H) array, N = sum of N_i.
    """
    counts = [len(s) for s in sources]
    n = sum(counts)
    if n <= size:
        return np.concatenate([np.asarray(s) for s in sources]) if len(sources) > 1 else np.asarray(sources[0])
    rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    starts = np.cumsum([0] + counts)
    parts = []
    for i, s in enumerate(sources):
        mine = rows[(rows >= starts[i]) & (rows < starts[i + 1])] - starts[i]
        parts.append(np.asarray(s[mine]))
    return np.concatenate(parts)


def _prepare(block: np.ndarray, metric: str, name: str, row_offset: int = 0) -> np.ndarray:
    """Float32 C-contiguous rows as the index stores them: unit rows for cosine (zero rows stay zero)."""
    if metric == "cosine":
        return unit_rows(block, name, zero="keep", row_offset=row_offset, dtype=np.float32)
    return np.array(block, dtype=np.float32, order="C", copy=True)


def train_ivfpq(vectors, directory: str | os.PathLike, *, params: IVFPQParams | None = None,
                metric: Metric = "cosine", n_total: int | None = None, embedder_config: Mapping | None = None,
                recipe: Mapping | None = None, overwrite: bool = False) -> TrainedQuantizer:
    """Train the IVF-PQ quantizer once and save it, empty, as the start of every shard (step 1).

    Args:
        vectors: (N, H) array-like or ``.npy`` path, or a list of them (e.g. every shard's file): the training sample
            is drawn from their concatenation (``sample_rows``).
        directory: where to save it (replaced as a whole, see ``overwrite``).
        params: ``IVFPQParams`` (``on_disk`` is set); None for the defaults. ``nlist`` and ``pq_m`` left None are
            resolved from ``n_total`` and H as ``SemanticIndex`` resolves them; ``train_size`` and ``seed`` choose
            the sample (default ``max(64 * nlist, 10,000)`` rows).
        metric: ``"cosine"`` (vectors are L2-normalised, here and in ``add_shard``) or ``"inner_product"``.
        n_total: the size of the whole collection, which sizes the default ``nlist``; default N.
        embedder_config, recipe: what made the vectors (recorded; ``add_shard`` inherits and checks them).
        overwrite: replace a quantizer already saved in ``directory``.

    Returns:
        The :class:`TrainedQuantizer`.

    Raises:
        TypeError, ValueError: a bad argument, fewer than ``max(nlist, 2**nbits)`` vectors, NaN/inf in the sample.
        FileExistsError: ``directory`` holds a quantizer and ``overwrite`` is False, or holds anything else.
    """
    params = IVFPQParams() if params is None else params
    if not isinstance(params, IVFPQParams):
        raise TypeError("params must be an IVFPQParams or None; got %s" % type(params).__name__)
    check_choice(metric, "metric", ("cosine", "inner_product"))
    sources = _sources(vectors, "vectors")
    dim = sources[0].shape[1] if sources[0].ndim == 2 else -1
    for i, s in enumerate(sources):
        check_matrix(s[:0], "vectors" if len(sources) == 1 else "vectors[%d]" % i, max(dim, 1), allow_1d=False)
    n = sum(len(s) for s in sources)
    n_total = n if n_total is None else check_int(n_total, "n_total", low=1)
    params.check_dim(dim)
    nlist, pq_m = params.resolve_shape(dim, n_total)
    params = IVFPQParams(nlist=nlist, pq_m=pq_m, nbits=params.nbits, nprobe=params.nprobe, k_factor=params.k_factor,
                         train_size=params.train_size, seed=params.seed, on_disk=True)
    size = params.train_size or max(64 * nlist, _MIN_DEFAULT_TRAIN)
    need = max(nlist, 2 ** params.nbits)
    if min(n, size) < need:
        raise ValueError("IVF-PQ training needs at least %d vectors (max(nlist=%d, 2**nbits=%d)); got %d"
                         % (need, nlist, 2 ** params.nbits, min(n, size)))
    sample = sample_rows(sources, size, params.seed)
    check_matrix(sample, "the training sample", dim, allow_1d=False)
    embedder_config, recipe = json_dict(embedder_config, "embedder_config"), json_dict(recipe, "recipe")
    directory = Path(directory)
    started = time.perf_counter()
    ivf = IVFPQBackend(dim, params)._train_ivf(_prepare(sample, metric, "the training sample"), n_total)
    fingerprint = quantizer_fingerprint(ivf)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with DirectoryLock(lock_file_beside(directory), what="the quantizer directory %s" % directory).hold(0):
        if directory.exists() and not overwrite:
            if (directory / QUANTIZER_FILE).exists():
                raise FileExistsError("%s already holds a trained quantizer; pass overwrite=True (--overwrite) to "
                                      "replace it" % directory)
            if not directory.is_dir() or os.listdir(directory):
                raise FileExistsError("%s exists and is not an empty directory; choose a new one" % directory)
        with atomic_directory(directory) as tmp:
            name = "trained.%s.faiss" % new_token()
            faiss.write_index(ivf, str(tmp / name))
            with open(tmp / QUANTIZER_FILE, "w", encoding="utf-8") as f:
                json.dump(quantizer_manifest(dim, metric, params, fingerprint, embedder_config, recipe, len(sample),
                                             name), f, indent=2)
    logger.info("trained IVF-PQ quantizer %s (nlist=%d, pq_m=%d, nbits=%d) on %d of %d vectors in %.1f s: %s",
                fingerprint, nlist, pq_m, params.nbits, len(sample), n_total, time.perf_counter() - started, directory)
    return read_quantizer(directory)


def load_quantizer(quantizer: TrainedQuantizer | str | os.PathLike) -> TrainedQuantizer:
    """A :class:`TrainedQuantizer` from itself or its directory (see ``shard_files.read_quantizer``)."""
    if isinstance(quantizer, TrainedQuantizer):
        return quantizer
    if not isinstance(quantizer, (str, os.PathLike)):
        raise TypeError("quantizer must be a TrainedQuantizer or its directory; got %s" % type(quantizer).__name__)
    return read_quantizer(quantizer)


def _inherit_config(q: TrainedQuantizer, embedder_config, recipe) -> tuple[dict | None, dict | None]:
    """The shard's embedder configuration and recipe: the given ones (checked against the quantizer's), else the
    quantizer's."""
    embedder_config, recipe = json_dict(embedder_config, "embedder_config"), json_dict(recipe, "recipe")
    if embedder_config is not None and q.embedder_config is not None:
        diffs = embedder_config_differences(q.embedder_config, embedder_config, stored_name="quantizer")
        if diffs:
            raise ValueError("embedder_config differs from the one the quantizer %s was trained with in %d field(s):"
                             "\n%s" % (q.directory, len(diffs), "\n".join(diffs)))
    return (q.embedder_config if embedder_config is None else embedder_config,
            q.recipe if recipe is None else recipe)


def open_trained_index(quantizer: TrainedQuantizer | str | os.PathLike, directory: str | os.PathLike
                       ) -> SemanticIndex:
    """A new, empty on-disk ``SemanticIndex`` in ``directory`` that uses the trained quantizer: the one-process build
    (``add`` everything, ``save``) that a merge of shards equals.

    Raises:
        FileExistsError: ``directory`` already holds an on-disk index.
    """
    q = load_quantizer(quantizer)
    index = SemanticIndex(q.dim, metric=q.metric, params=q.params, directory=directory,
                          embedder_config=q.embedder_config, recipe=q.recipe)
    index._begin_change()  # the directory's lock, held until save/close, as for an index that trains itself
    index._backend.adopt_trained(q.load_ivf())
    return index


def add_shard(quantizer: TrainedQuantizer | str | os.PathLike, directory: str | os.PathLike, ids: Sequence[str],
              vectors, metadata: Sequence[Mapping | None] | None = None, *, shard_index: int,
              embedder_config: Mapping | None = None, recipe: Mapping | None = None, overwrite: bool = False,
              lock_timeout: float | None = 0.0, show_progress_bar: bool = False) -> PartialShard:
    """Add one shard to a copy of the trained quantizer and write its partial index to ``directory`` (step 2).

    Args:
        quantizer: the :class:`TrainedQuantizer` or its directory.
        directory: the shard's own directory (created if needed).
        ids: N unique string ids (unique across all shards too: the merge checks).
        vectors: (N, H) array-like or ``.npy`` path (memory-mapped); never modified.
        metadata: N JSON-serialisable dicts (or None entries), or None.
        shard_index: the shard's place in the merged index (e.g. the torchrun rank): shards are merged in increasing
            ``shard_index``, and two partials with the same one are refused.
        embedder_config, recipe: what made the vectors; None takes the quantizer's. A configuration that differs
            from the quantizer's is refused.
        overwrite: replace a partial already in ``directory``.
        lock_timeout: seconds to wait for another writer of ``directory`` (0 fails at once, None waits).
        show_progress_bar: a tqdm bar over the vectors.

    Returns:
        The :class:`PartialShard` written.

    Raises:
        TypeError, ValueError: bad ids (repeated, not strings), vectors (shape, dimension, NaN/inf), metadata, or an
            embedder configuration that differs from the quantizer's; nothing is written then.
        FileExistsError: ``directory`` holds a partial and ``overwrite`` is False, or holds a saved index.
        DirectoryLockedError: another process is writing ``directory``.
    """
    q = load_quantizer(quantizer)
    shard_index = check_int(shard_index, "shard_index", low=0)
    ids = check_id_list(ids)
    arr, _ = check_matrix(_as_array(vectors, "vectors"), "vectors", q.dim, allow_1d=False)
    if len(arr) != len(ids):
        raise ValueError("vectors has %d rows but there are %d ids" % (len(arr), len(ids)))
    if len(set(ids)) != len(ids):
        seen, dup = set(), []
        for i in ids:
            (dup.append if i in seen else seen.add)(i)
        raise ValueError("ids must be unique; repeated: %s" % preview(dup))
    meta = check_metadata(metadata, len(ids))
    embedder_config, recipe = _inherit_config(q, embedder_config, recipe)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with directory_lock(directory).hold(lock_timeout):
        recover_folder(directory)
        if (directory / MANIFEST_FILE).exists() or (directory / QUANTIZER_FILE).exists():
            raise FileExistsError("%s holds a saved index or quantizer, not a partial: give each shard a directory "
                                  "of its own" % directory)
        if (directory / PARTIAL_FILE).exists() and not overwrite:
            raise FileExistsError("%s already holds a partial; pass overwrite=True (--overwrite) to replace it"
                                  % directory)
        ivf = q.load_ivf()
        token = new_token()
        files = {"codes": "codes.%s.faiss" % token, "items": "items.%s.json" % token,
                 "vectors": "vectors.%s.f32" % token}
        started = time.perf_counter()
        with atomic_path(directory / files["vectors"]) as tmp, open(tmp, "wb") as out, \
                tqdm(total=len(ids), desc="shard %d" % shard_index, unit="vec", disable=not show_progress_bar) as bar:
            for start in range(0, len(ids), CHUNK):
                x = _prepare(arr[start:start + CHUNK], q.metric, "vectors", start)  # (chunk, H)
                out.write(x.tobytes())
                ivf.add_with_ids(x, np.arange(start, start + len(x), dtype=np.int64))  # local labels
                bar.update(len(x))
        with atomic_path(directory / files["codes"]) as tmp:
            faiss.write_index(ivf, str(tmp))
        with atomic_write(directory / files["items"]) as f:
            json.dump({"ids": ids, "metadata": meta}, f)
        with atomic_write(directory / PARTIAL_FILE) as f:  # the commit
            json.dump(partial_manifest(shard_index, len(ids), q.dim, q.fingerprint, embedder_config, recipe, files),
                      f, indent=2)
        remove_unnamed_partial_files(directory, set(files.values()))
    logger.info("shard %d: %d vectors added in %.1f s into %s", shard_index, len(ids), time.perf_counter() - started,
                directory)
    return read_partial(directory)


def _partial_dirs(partials) -> list[Path]:
    """The partial directories: each given path, or every ``partial.json``-holding subdirectory of a folder that
    holds none itself (the ``--out-dir`` of ``ctxemb index add-shard``)."""
    if isinstance(partials, (str, os.PathLike)):
        partials = [partials]
    out = []
    for p in partials:
        if not isinstance(p, (str, os.PathLike, PartialShard)):
            raise TypeError("partials must hold directories (str or Path) or PartialShard objects; got %s"
                            % type(p).__name__)
        p = p.directory if isinstance(p, PartialShard) else Path(p)
        if p.is_dir() and not (p / PARTIAL_FILE).exists():
            subs = sorted(c for c in p.iterdir() if (c / PARTIAL_FILE).is_file())
            if subs:
                out.extend(subs)
                continue
        out.append(p)
    if not out:
        raise ValueError("partials is empty: give at least one partial directory")
    return out


def _check_partials(q: TrainedQuantizer, parts: list[PartialShard]) -> None:
    """Raise unless every partial comes from ``q`` with one embedder configuration and recipe and a distinct
    ``shard_index``."""
    by_index: dict[int, Path] = {}
    for p in parts:
        if p.fingerprint != q.fingerprint or p.dim != q.dim:
            raise ValueError(
                "the partial %s was built from another trained quantizer (fingerprint %s, dim %d) than %s (fingerprint "
                "%s, dim %d): partials can only be merged with the quantizer they were added to; rebuild it with "
                "add_shard from this quantizer" % (p.directory, p.fingerprint, p.dim, q.directory, q.fingerprint,
                                                    q.dim))
        if p.shard_index in by_index:
            raise ValueError("the partials %s and %s have the same shard_index %d: each shard needs its own (it orders "
                             "the merge)" % (by_index[p.shard_index], p.directory, p.shard_index))
        by_index[p.shard_index] = p.directory
    first = parts[0]
    for p in parts[1:]:
        for what, a, b in (("embedder configuration", first.embedder_config, p.embedder_config),
                           ("recipe", first.recipe, p.recipe)):
            if (a is None) != (b is None):
                raise ValueError("the partial %s records %s %s, but %s records %s: the shards were not embedded alike"
                                 % (first.directory, "no" if a is None else "an", what, p.directory,
                                    "none" if b is None else "one"))
            if a is None:
                continue
            diffs = embedder_config_differences(a, b, stored_name=first.directory.name)
            if diffs:
                raise ValueError("the partials %s and %s were embedded with different %ss (%d difference(s)):\n%s\n"
                                 "Shards of one index must be embedded alike; re-embed the odd one out."
                                 % (first.directory, p.directory, what, len(diffs), "\n".join(diffs)))


def _merge_lists(q: TrainedQuantizer, parts: list[PartialShard], lists_path: Path) -> faiss.IndexIVFPQ:
    """The trained index with on-disk lists at ``lists_path`` holding every partial's entries, labels shifted by
    the items of the partials before it; list j holds shard 0's entries of list j, then shard 1's, ..."""
    shards = []  # (index kept alive: it owns the lists, invlists, label offset)
    offset = 0
    for p in parts:
        index = read_faiss_file_mmap(p.codes_file)
        check_ivf(index, p.codes_file, q.dim, p.fingerprint, p.n_items, str(p.directory / PARTIAL_FILE))
        shards.append((index, index.invlists, offset))
        offset += p.n_items
    ivf = q.load_ivf()
    nlist, code_size = ivf.nlist, ivf.code_size
    lists = faiss.OnDiskInvertedLists(nlist, code_size, str(lists_path))
    for j in range(nlist):
        sizes = [invlists.list_size(j) for _, invlists, _ in shards]
        if not sum(sizes):
            continue
        lists.resize(j, sum(sizes))  # one slot of the whole list, as a one-process build ends with
        position = 0
        for (_, invlists, shift), size in zip(shards, sizes):
            if size:
                labels = faiss.rev_swig_ptr(invlists.get_ids(j), size).astype(np.int64) + shift  # (size,)
                lists.update_entries(j, position, size, faiss.swig_ptr(labels), invlists.get_codes(j))
                position += size
    ivf.replace_invlists(lists, True)
    lists.this.disown()  # owned by the IVF index now
    ivf.ntotal = offset
    return ivf


def _copy_finite_vectors(p: PartialShard, out) -> None:
    """Append a partial's vectors file to ``out`` block by block (``_COPY_BYTES``, whole float32 values), refusing
    a NaN or infinite value: a ``CorruptFileError`` naming the file and the first row that holds one."""
    done = 0  # float32 values copied
    with open(p.vectors_file, "rb") as f:
        while True:
            block = f.read(_COPY_BYTES)
            if not block:
                return
            values = np.frombuffer(block, dtype=np.float32)
            bad = np.flatnonzero(~np.isfinite(values))
            if len(bad):
                at = done + int(bad[0])
                raise CorruptFileError(
                    "%s: row %d (of the shard's %d vectors of dimension %d) holds %s: the file was changed after "
                    "add_shard checked the vectors; add the shard again (shard_index %d, %s)"
                    % (p.vectors_file, at // p.dim, p.n_items, p.dim, values[int(bad[0])], p.shard_index,
                       p.directory), p.vectors_file)
            out.write(block)
            done += len(values)


def read_faiss_file_mmap(path: Path):
    """A partial's FAISS file with its inverted lists memory-mapped (never read whole into RAM)."""
    return read_faiss_file(path, "partial codes file", faiss.IO_FLAG_MMAP)


@dataclass(frozen=True)
class MergedIndex:
    """What :func:`merge_shards` wrote.

    Attributes:
        directory: the index directory (``SemanticIndex.load`` opens it).
        n_items: N, the items of all shards.
        shards: the partial directories in merge order (increasing ``shard_index``).
        seconds: the merge's wall time.
    """

    directory: Path
    n_items: int
    shards: tuple[Path, ...]
    seconds: float


def merge_shards(quantizer: TrainedQuantizer | str | os.PathLike, partials, directory: str | os.PathLike, *,
                 overwrite: bool = False, lock_timeout: float | None = 0.0) -> MergedIndex:
    """Merge partial indexes into one on-disk IVF-PQ ``SemanticIndex`` directory (step 3; see the module docstring).

    Args:
        quantizer: the :class:`TrainedQuantizer` (or its directory) every partial was added to.
        partials: partial directories (or :class:`PartialShard` objects), in any order; a folder holding no
            ``partial.json`` stands for every subdirectory of it that holds one.
        directory: the merged index's directory; must not exist unless ``overwrite``.
        overwrite: replace an existing ``directory`` (only once the new index is complete).
        lock_timeout: seconds to wait for another merge into ``directory`` (0 fails at once, None waits).

    Returns:
        A :class:`MergedIndex`; ``SemanticIndex.load(directory)`` opens the index.

    Raises:
        FileNotFoundError: a partial without ``partial.json`` (its ``add_shard`` did not finish) or a missing file.
        CorruptFileError: a partial's file is corrupt or truncated, its FAISS file holds another quantizer than
            its ``partial.json`` records, or its vectors file holds a NaN or infinite value (naming the file and
            the row; nothing is written).
        ValueError: partials built from another trained quantizer, with different embedder configurations or
            recipes, with the same ``shard_index``, or sharing an id (the message names the id and both partials).
        FileExistsError: ``directory`` exists and ``overwrite`` is False.
        DirectoryLockedError: another merge into ``directory`` is running.
    """
    started = time.perf_counter()
    q = load_quantizer(quantizer)
    parts = sorted((read_partial(p) for p in _partial_dirs(partials)), key=lambda p: p.shard_index)
    _check_partials(q, parts)
    ids: list[str] = []
    meta: list[str | None] = []
    owner: dict[str, int] = {}
    for k, p in enumerate(parts):
        shard_ids, shard_meta = p.read_items()
        for i in shard_ids:
            if owner.setdefault(i, k) != k:
                raise ValueError("the id %r is in two shards, %s and %s: ids must be unique across shards"
                                 % (i, parts[owner[i]].directory, p.directory))
        ids.extend(shard_ids)
        meta.extend(shard_meta)
    del owner
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with DirectoryLock(lock_file_beside(directory), what="the merged index directory %s" % directory
                       ).hold(lock_timeout):
        if os.path.lexists(directory) and not overwrite and not (directory.is_dir() and not os.listdir(directory)):
            raise FileExistsError("%s exists; pass overwrite=True (--overwrite) to replace it with the merged index"
                                  % directory)
        with atomic_directory(directory) as tmp:
            with open(tmp / "vectors.f32", "wb") as out:
                for p in parts:
                    _copy_finite_vectors(p, out)
            lists_name = new_lists_name()
            ivf = _merge_lists(q, parts, tmp / lists_name)
            state = SavedIndex(kind="ivfpq", dim=q.dim, metric=q.metric, params=q.params,
                               embedder_config=parts[0].embedder_config, recipe=parts[0].recipe, ids=ids,
                               metadata=meta, ntotal=int(ivf.ntotal))
            write_index_directory(tmp, state, write_faiss=lambda path: faiss.write_index(ivf, str(path)),
                                  live_dir=tmp, lists_name=lists_name)
            ivf = None  # frees the index, unmapping its lists, before the directory is fsynced and renamed
    seconds = time.perf_counter() - started
    logger.info("merged %d shards (%d items) into %s in %.1f s", len(parts), len(ids), directory, seconds)
    return MergedIndex(directory=directory, n_items=len(ids), shards=tuple(p.directory for p in parts),
                       seconds=seconds)
