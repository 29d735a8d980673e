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

The live files of an on-disk index cannot follow that scheme: ``add``/``remove`` change them in place. Before the
first change after a save, ``unsaved_changes.json`` is written beside them with the generation they last matched;
``save`` deletes it once the new manifest is committed. A directory that still holds it for its current generation
was changed and never saved (a crash, or a process that ended without ``save``): its lists no longer match the
manifest (an id could come back twice and another never), so loading it raises :class:`CorruptFileError` instead.

Every file read here that is corrupt, truncated, of the wrong encoding or inconsistent with the others raises
:class:`CorruptFileError` (a ``ValueError``) naming the file and what is wrong; a missing file raises
``FileNotFoundError`` naming it.

The manifest's ``"params"`` is one flat dict with the parameters of every kind (format version 1:
``hnsw_m, ef_construction, ef_search, nlist, pq_m, nbits, nprobe, k_factor, train_size, seed, on_disk``), so
directories saved before the per-kind parameter objects load unchanged and new saves are byte-identical to them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import faiss

from ctxemb._validation import CorruptFileError
from ctxemb.paths import atomic_path, atomic_write, read_json_file, recover_folder
from ctxemb.search.params import HNSWParams, IndexKind, IndexParams, IVFPQParams, Metric, make_params

MANIFEST_FILE = "manifest.json"
# File names inside an index directory that an on-disk IVF-PQ index uses as live storage.
LISTS_FILE = "lists.ivfdata"
VECTORS_FILE = "vectors.f32"
# Written before the live files change after a save; deleted by the next save (see the module docstring).
UNSAVED_CHANGES_FILE = "unsaved_changes.json"


def read_json(path: Path, what: str, expected: type = dict):
    """``ctxemb.paths.read_json_file`` with its corrupt-file errors raised as :class:`CorruptFileError`."""
    try:
        return read_json_file(path, expected=expected, what=what)
    except FileNotFoundError:
        raise
    except ValueError as e:
        raise CorruptFileError(str(e)) from None


_FAISS_PREFIX = re.compile(r"^Error in .*? at \S+:\d+: ")


def faiss_error_text(error: BaseException) -> str:
    """FAISS's exception message without its C++ function signature and source location."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return _FAISS_PREFIX.sub("", lines[-1]).strip()


def read_faiss_file(path: Path, what: str, flags: int = 0):
    """``faiss.read_index`` with errors that name the file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CorruptFileError: FAISS cannot read it (truncated, corrupt, not a FAISS file, a missing companion file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError("%s not found: %s" % (what, path))
    try:
        return faiss.read_index(str(path), flags)
    except (RuntimeError, MemoryError, ValueError) as e:  # FAISS raises RuntimeError; absurd sizes, MemoryError
        raise CorruptFileError(
            "%s %s cannot be read by FAISS (corrupt, truncated or not a FAISS index?): %s"
            % (what, path, faiss_error_text(e))
        ) from None

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


def _generation(manifest: dict | None) -> int:
    """The generation a manifest records (0 for none)."""
    gen = (manifest or {}).get("generation", 0)
    return gen if isinstance(gen, int) and not isinstance(gen, bool) and gen >= 0 else 0


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
    recover_folder(directory)  # deletes the temporary files of crashed saves
    old = read_manifest(directory, required=False)
    gen = _generation(old) + 1
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
    # The live (or just copied) files in ``directory`` match the committed manifest again.
    clear_unsaved_changes(directory)
    # The new manifest is committed: files only the previous generation used can go.
    if old:
        keep = {v for v in files.values() if v}
        old_files = old.get("files") if isinstance(old.get("files"), dict) else {}
        for name in old_files.values():
            if isinstance(name, str) and name and name not in keep and "/" not in name and "\\" not in name:
                with contextlib.suppress(FileNotFoundError):
                    (directory / name).unlink()
    return gen


def _file_name(files: dict, key: str, path: Path, required: bool) -> str | None:
    """A file name from the manifest's ``"files"``: a plain name inside the directory."""
    name = files.get(key)
    if name is None and not required:
        return None
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise CorruptFileError("index manifest %s: files.%s must be a file name in the directory; got %r"
                               % (path, key, name))
    return name


def _manifest_int(m: dict, key: str, path: Path) -> int:
    value = m.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptFileError("index manifest %s: %s must be an integer >= 0; got %r" % (path, key, value))
    return value


def read_index_directory(directory: Path) -> SavedIndex:
    """Read the manifest and items of a saved index (the caller loads ``faiss_file``).

    Raises:
        FileNotFoundError: no manifest in ``directory``, or a file it names is missing.
        CorruptFileError: a corrupt, truncated or non-UTF-8 manifest or items file, missing or malformed fields,
            an items file that disagrees with the manifest or repeats ids, or an on-disk index whose live files
            were changed after its last save (see the module docstring).
        ValueError: an unknown format or version.
    """
    m = read_manifest(directory, required=True)
    path = directory / MANIFEST_FILE
    files = m.get("files")
    if not isinstance(files, dict):
        raise CorruptFileError("index manifest %s: 'files' must be an object; got %r" % (path, files))
    items_path = directory / _file_name(files, "items", path, required=True)
    index_name = _file_name(files, "index", path, required=False)
    n_labels = _manifest_int(m, "n_labels", path)
    ntotal = _manifest_int(m, "ntotal", path) if "ntotal" in m else 0
    for key in ("embedder_config", "recipe"):
        if m.get(key) is not None and not isinstance(m[key], dict):
            raise CorruptFileError("index manifest %s: %s must be an object or null; got %r" % (path, key, m[key]))
    if not isinstance(m.get("params"), dict):
        raise CorruptFileError("index manifest %s: 'params' must be an object; got %r" % (path, m.get("params")))
    try:
        params = params_from_manifest(m.get("kind"), m["params"])
    except KeyError as e:
        raise CorruptFileError("index manifest %s: params lacks the field %s" % (path, e)) from None
    except (TypeError, ValueError) as e:
        raise CorruptFileError("index manifest %s: %s" % (path, e)) from None
    if isinstance(params, IVFPQParams) and params.on_disk:
        check_no_unsaved_changes(directory, m)
    if not items_path.is_file():
        raise FileNotFoundError("index items file not found: %s (named by %s)" % (items_path, path))
    items = read_json(items_path, "index items file")
    ids, meta = items.get("ids"), items.get("metadata")
    if not isinstance(ids, list) or not isinstance(meta, list):
        raise CorruptFileError("index items file %s must hold the lists 'ids' and 'metadata'" % items_path)
    if len(ids) != n_labels or len(meta) != n_labels:
        raise CorruptFileError(
            "%s holds %d ids and %d metadata entries; the manifest says %d"
            % (items_path, len(ids), len(meta), n_labels)
        )
    for name, values in (("ids", ids), ("metadata", meta)):
        bad = next((i for i, v in enumerate(values) if v is not None and not isinstance(v, str)), None)
        if bad is not None:
            raise CorruptFileError("index items file %s: %s[%d] must be a string or null; got %r"
                                   % (items_path, name, bad, values[bad]))
    live = [i for i in ids if i is not None]
    if len(set(live)) != len(live):
        raise CorruptFileError("%s repeats ids" % items_path)
    return SavedIndex(
        kind=m.get("kind"),
        dim=m.get("dim"),
        metric=m.get("metric"),
        params=params,
        embedder_config=m.get("embedder_config"),
        recipe=m.get("recipe"),
        ids=ids,
        metadata=meta,
        ntotal=ntotal,
        faiss_file=directory / index_name if index_name else None,
    )


def check_no_unsaved_changes(directory: Path, manifest: dict) -> None:
    """Raise if the live files of the on-disk index in ``directory`` were changed after the save ``manifest`` records.

    Raises:
        CorruptFileError: ``unsaved_changes.json`` records the manifest's generation (or cannot be read).
    """
    marker = directory / UNSAVED_CHANGES_FILE
    if not marker.exists():
        return
    try:
        since = json.loads(marker.read_text(encoding="utf-8")).get("generation")
    except (OSError, ValueError, AttributeError):
        since = None  # a marker cut short while being written: the files were about to change
    if since is None or since == manifest.get("generation"):
        raise CorruptFileError(
            "%s: the on-disk index's %s and %s were changed by add/upsert/remove after its last save "
            "(generation %s) and never saved again (the process ended first), so they no longer match %s: "
            "loading it would return some ids twice and lose others. Rebuild the index from the original "
            "vectors, or restore a copy of the directory taken after a save. (%s records this.)"
            % (directory, LISTS_FILE, VECTORS_FILE, manifest.get("generation"), MANIFEST_FILE, UNSAVED_CHANGES_FILE)
        )


def mark_unsaved_changes(directory: Path) -> None:
    """Record, durably and before they change, that the live files in ``directory`` differ from its last save."""
    gen = _generation(read_manifest(directory, required=False))
    with atomic_write(directory / UNSAVED_CHANGES_FILE, encoding="utf-8") as f:
        json.dump({"generation": gen, "note": "the live files were changed after this generation was saved"}, f)


def clear_unsaved_changes(directory: Path) -> None:
    """Delete the marker once a manifest matching the live files is committed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / UNSAVED_CHANGES_FILE)


def read_manifest(directory: Path, *, required: bool) -> dict | None:
    """The manifest of ``directory`` as a dict, or None when there is none and it is not ``required``.

    Raises:
        FileNotFoundError: no manifest and ``required``.
        CorruptFileError: not valid UTF-8 JSON (corrupt or truncated), not a JSON object, or not a SemanticIndex
            manifest.
        ValueError: another format version.
    """
    path = directory / MANIFEST_FILE
    if not path.exists():
        if required:
            raise FileNotFoundError("%s not found: %s is not a saved SemanticIndex directory" % (path, directory))
        return None
    m = read_json(path, "index manifest")
    if m.get("format") != _FORMAT:
        raise CorruptFileError("%s is not a SemanticIndex manifest (format %r)" % (path, m.get("format")))
    if m.get("format_version") != _FORMAT_VERSION:
        raise ValueError(
            "%s has format_version %r; this ctxemb reads version %d" % (path, m.get("format_version"), _FORMAT_VERSION)
        )
    return m
