"""The directory a :class:`ctxemb.search.SemanticIndex` is saved in: manifest, generations, on-disk files.

A saved index is a directory holding

- ``manifest.json``: format and version, kind, dimension, metric, parameters, the embedder configuration and
  recipe, counts, and the names of the files below;
- ``index.<gen>.faiss``: the FAISS structure (absent while an IVF-PQ index is untrained);
- ``items.<gen>.json``: ids and metadata (JSON strings) by label, None where an item was removed;
- for on-disk IVF-PQ indexes, ``lists.ivfdata`` (the inverted lists) and ``vectors.f32`` (the raw vectors): live
  storage that ``add``/``remove`` update in place, so they carry no generation.

Each save writes a new generation and then replaces the manifest atomically, so a crash leaves the previous save
loadable; files only the previous generation used are deleted once the new manifest is in place.

The manifest's ``"params"`` is one flat dict with the parameters of every kind (format version 1:
``hnsw_m, ef_construction, ef_search, nlist, pq_m, nbits, nprobe, k_factor, train_size, seed, on_disk``), so
directories saved before the per-kind parameter objects load unchanged and new saves are byte-identical to them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import faiss

from ctxemb.paths import atomic_path, atomic_write, read_json_file
from ctxemb.search.params import HNSWParams, IndexKind, IndexParams, IVFPQParams, Metric, make_params

MANIFEST_FILE = "manifest.json"
# File names inside an index directory that an on-disk IVF-PQ index uses as live storage.
LISTS_FILE = "lists.ivfdata"
VECTORS_FILE = "vectors.f32"

_FORMAT = "ctxemb.search.SemanticIndex"
_FORMAT_VERSION = 1


@dataclass
class SavedIndex:
    """An index's state as its directory records it (everything but the FAISS structure itself).

    Attributes:
        kind, dim, metric, params: as given to ``SemanticIndex``.
        embedder_config, recipe: JSON dicts or None.
        ids: the id of each label, None where the item was removed.
        metadata: the metadata of each label as a JSON string, or None.
        ntotal: vectors the FAISS structure holds (tombstoned ones included).
        faiss_file: on load, the FAISS file to read; None while an IVF-PQ index is untrained.
    """

    kind: IndexKind
    dim: int
    metric: Metric
    params: IndexParams
    embedder_config: dict | None
    recipe: dict | None
    ids: list[str | None]
    metadata: list[str | None]
    ntotal: int
    faiss_file: Path | None = None

    @property
    def n_labels(self) -> int:
        return len(self.ids)

    @property
    def n_items(self) -> int:
        return sum(i is not None for i in self.ids)


def prepare_on_disk_directory(directory: str | Path) -> Path:
    """Create the folder of a new on-disk IVF-PQ index, refusing one that already holds such an index's files.

    Raises:
        FileExistsError: ``directory`` already holds ``lists.ivfdata`` or ``vectors.f32``.
    """
    directory = Path(directory)
    for name in (LISTS_FILE, VECTORS_FILE):
        if (directory / name).exists():
            raise FileExistsError(
                "%s already exists; load that index with SemanticIndex.load(%r) or choose an empty directory"
                % (directory / name, str(directory))
            )
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def params_to_manifest(params: IndexParams) -> dict[str, Any]:
    """The manifest's flat ``"params"`` dict (format version 1); other kinds' fields at their defaults."""
    hnsw = params if isinstance(params, HNSWParams) else HNSWParams()
    ivf = params if isinstance(params, IVFPQParams) else IVFPQParams()
    return {
        "hnsw_m": hnsw.m,
        "ef_construction": hnsw.ef_construction,
        "ef_search": hnsw.ef_search,
        "nlist": ivf.nlist,
        "pq_m": ivf.pq_m,
        "nbits": ivf.nbits,
        "nprobe": ivf.nprobe,
        "k_factor": ivf.k_factor,
        "train_size": ivf.train_size,
        "seed": ivf.seed,
        "on_disk": ivf.on_disk,
    }


def params_from_manifest(kind: IndexKind, stored: dict[str, Any]) -> IndexParams:
    """The parameter object of ``kind`` from a manifest's ``"params"`` dict (checked like a caller's)."""
    if kind == "hnsw":
        return HNSWParams(m=stored["hnsw_m"], ef_construction=stored["ef_construction"], ef_search=stored["ef_search"])
    if kind == "ivfpq":
        names = ("nlist", "pq_m", "nbits", "nprobe", "k_factor", "train_size", "seed", "on_disk")
        return IVFPQParams(**{name: stored[name] for name in names})
    return make_params(kind)


def write_index_directory(
    directory: Path, state: SavedIndex, *, write_faiss: Callable[[Path], None] | None, live_dir: Path | None
) -> int:
    """Save ``state`` as a new generation in ``directory`` (created if needed); returns the generation.

    Args:
        directory: the target folder.
        state: what to record (``faiss_file`` is ignored).
        write_faiss: writes the FAISS structure to a path; None for an untrained index (no FAISS file).
        live_dir: the folder of an on-disk index's live files (None for in-memory kinds); they are copied when
            ``directory`` is another folder.
    """
    directory.mkdir(parents=True, exist_ok=True)
    old = read_manifest(directory, required=False)
    gen = int(old.get("generation", 0)) + 1 if old else 1
    files = {"index": None, "items": "items.%06d.json" % gen}
    if write_faiss is not None:
        files["index"] = "index.%06d.faiss" % gen
    if live_dir is not None:
        files["lists"], files["vectors"] = LISTS_FILE, VECTORS_FILE
        if write_faiss is not None and directory.resolve() != live_dir.resolve():
            for name in (LISTS_FILE, VECTORS_FILE):
                with atomic_path(directory / name) as tmp:
                    shutil.copyfile(live_dir / name, tmp)
    if files["index"]:
        with atomic_path(directory / files["index"]) as tmp:
            write_faiss(tmp)
    with atomic_write(directory / files["items"]) as f:
        json.dump({"ids": state.ids, "metadata": state.metadata}, f)
    manifest = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "generation": gen,
        "kind": state.kind,
        "dim": state.dim,
        "metric": state.metric,
        "params": params_to_manifest(state.params),
        "embedder_config": state.embedder_config,
        "recipe": state.recipe,
        "n_labels": state.n_labels,
        "n_items": state.n_items,
        "ntotal": state.ntotal,
        "files": files,
        "faiss_version": faiss.__version__,
    }
    with atomic_write(directory / MANIFEST_FILE) as f:
        json.dump(manifest, f, indent=2)
    # The new manifest is committed: files only the previous generation used can go.
    if old:
        keep = {v for v in files.values() if v}
        for name in (old.get("files") or {}).values():
            if name and name not in keep and "/" not in name:
                with contextlib.suppress(FileNotFoundError):
                    (directory / name).unlink()
    return gen


def read_index_directory(directory: Path) -> SavedIndex:
    """Read the manifest and items of a saved index (the caller loads ``faiss_file``).

    Raises:
        FileNotFoundError: no manifest in ``directory``.
        ValueError: an unknown format or version, bad parameters, or an items file that disagrees with the
            manifest or repeats ids.
    """
    m = read_manifest(directory, required=True)
    files = m["files"]
    items_path = directory / files["items"]
    items = read_json_file(items_path, what="index items file")
    if not isinstance(items.get("ids"), list) or not isinstance(items.get("metadata"), list):
        raise ValueError("index items file %s must hold the lists 'ids' and 'metadata'" % items_path)
    ids, meta = items["ids"], items["metadata"]
    n_labels = int(m["n_labels"])
    if len(ids) != n_labels or len(meta) != n_labels:
        raise ValueError(
            "%s holds %d ids and %d metadata entries; the manifest says %d"
            % (items_path, len(ids), len(meta), n_labels)
        )
    live = [i for i in ids if i is not None]
    if len(set(live)) != len(live):
        raise ValueError("%s repeats ids" % items_path)
    return SavedIndex(
        kind=m["kind"],
        dim=m["dim"],
        metric=m["metric"],
        params=params_from_manifest(m["kind"], m["params"]),
        embedder_config=m.get("embedder_config"),
        recipe=m.get("recipe"),
        ids=ids,
        metadata=meta,
        ntotal=int(m.get("ntotal", 0)),
        faiss_file=directory / files["index"] if files.get("index") else None,
    )


def read_manifest(directory: Path, *, required: bool) -> dict | None:
    """The manifest of ``directory`` as a dict, or None when there is none and it is not ``required``.

    Raises:
        FileNotFoundError: no manifest and ``required``.
        ValueError: not a SemanticIndex manifest, or another format version.
    """
    path = directory / MANIFEST_FILE
    if not path.exists():
        if required:
            raise FileNotFoundError("%s not found: %s is not a saved SemanticIndex directory" % (path, directory))
        return None
    m = read_json_file(path, what="index manifest")
    if m.get("format") != _FORMAT:
        raise ValueError("%s is not a SemanticIndex manifest (format %r)" % (path, m.get("format")))
    if m.get("format_version") != _FORMAT_VERSION:
        raise ValueError(
            "%s has format_version %r; this ctxemb reads version %d" % (path, m.get("format_version"), _FORMAT_VERSION)
        )
    return m
