"""The directory a :class:`ctxemb.search.SemanticIndex` is saved in: manifest, generations, on-disk files.

A saved index is a directory holding

- ``manifest.json``: format and version, generation, kind, dimension, metric, parameters, the embedder
  configuration and recipe, counts, and the names of the files below;
- ``index.<gen>-<token>.faiss``: the FAISS structure (absent while an IVF-PQ index is untrained);
- ``items.<gen>-<token>.json``: ids and metadata (JSON strings) by label, None where an item was removed;
- for hybrid indexes, ``lexical.<gen>-<token>.npz``: the items' BM25 tokens by label (``ctxemb.search.lexical``);
- for on-disk IVF-PQ indexes, ``lists.<token>.ivfdata`` (the inverted lists) and ``vectors.f32`` (the raw vectors,
  one row per label, append-only);
- ``.ctxemb.lock``: the lock file of the directory (``ctxemb.core.locks``), empty, never deleted.

``<gen>`` counts saves; ``<token>`` is eight random characters, so two saves never write one file name, even two
writers that read the same generation. A save holds the directory's lock (a second writer gets
:class:`~ctxemb.core.locks.DirectoryLockedError`, or waits when given a timeout), writes its new files, commits by
replacing the manifest atomically, and then deletes every library-named generation file the new manifest does not
name: the previous generation's, and the leftovers of saves that a crash interrupted (logged). A crash at any point
leaves the previous save loadable. A reader takes no lock: it reads the manifest, then the files it names; if one
is gone (a save committed and deleted it meanwhile), it starts again from the new manifest, so every load sees
one complete save, the old one or the new one.

On-disk IVF-PQ indexes never change the files of a committed save: before the first change after a save (or a
load) the inverted lists are copied to a new ``lists.<token>.ivfdata`` (disk to disk, list by list, never all in
RAM), which the next save commits; new raw vectors are appended to ``vectors.f32`` beyond the rows any save
counts. The process changing them holds the directory's lock from the first change until ``save`` (or ``close``),
and refuses to start when another writer saved a newer generation since it loaded.
Directories written by earlier versions (``lists.ivfdata``, ``index.<gen>.faiss``, and the ``unsaved_changes.json``
those versions left when they changed their lists in place and never saved) load as before.

Every file read here that is corrupt, truncated, of the wrong encoding or inconsistent with the others raises
:class:`CorruptFileError` (a ``ValueError``) naming the file and what is wrong; a missing file raises
``FileNotFoundError`` naming it.

The manifest's ``"params"`` is one flat dict with the parameters of every kind (format version 1:
``hnsw_m, ef_construction, ef_search, nlist, pq_m, nbits, nprobe, k_factor, train_size, seed, on_disk``), so
directories saved before the per-kind parameter objects load unchanged and new saves are byte-identical to them.
A hybrid index's manifest has format version 2 and a ``"hybrid"`` object (its ``HybridParams``), so that an
earlier ctxemb refuses it instead of loading its vectors without their BM25 half.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import faiss

from ctxemb.core.validation import CorruptFileError, read_json_file
from ctxemb.core.atomic import atomic_path, atomic_write, recover_folder
from ctxemb.core.locks import DirectoryLock, lock_file_inside
from ctxemb.search.fusion import HybridParams
from ctxemb.search.params import HNSWParams, IndexKind, IndexParams, IVFPQParams, Metric, make_params

logger = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
# The inverted lists of on-disk IVF-PQ indexes saved by earlier versions (now lists.<token>.ivfdata).
LISTS_FILE = "lists.ivfdata"
VECTORS_FILE = "vectors.f32"
# Left by earlier versions when they changed an on-disk index in place and never saved (see the module docstring).
UNSAVED_CHANGES_FILE = "unsaved_changes.json"
# The library's own generation files (and nothing else) are deleted once no manifest names them.
_GENERATION_FILE = re.compile(
    r"\A(?:index\.\d{6}(?:-[a-z0-9]{8})?\.faiss|items\.\d{6}(?:-[a-z0-9]{8})?\.json|lists(?:\.[a-z0-9]{8})?\.ivfdata"
    r"|lexical\.\d{6}-[a-z0-9]{8}\.npz)\Z"
)
_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_token() -> str:
    """Eight random characters that make one save's file names its own."""
    return "".join(secrets.choice(_TOKEN_CHARS) for _ in range(8))


def new_lists_name() -> str:
    """A fresh name for the inverted lists of an on-disk index: ``lists.<token>.ivfdata``."""
    return "lists.%s.ivfdata" % new_token()


def directory_lock(directory: str | Path) -> DirectoryLock:
    """The write lock of an index directory (``<directory>/.ctxemb.lock``)."""
    return DirectoryLock(lock_file_inside(directory), what="the search index directory %s" % directory)


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
_HYBRID_FORMAT_VERSION = 2  # a hybrid index (see the module docstring)


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
        generation: on load, the generation of the save.
        lists_file: on load, the inverted lists of an on-disk index (a file name in the directory), else None.
        hybrid: the ``HybridParams`` of a hybrid index, else None.
        lexical_file: on load, a hybrid index's BM25 tokens file.
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
    generation: int = 0
    lists_file: str | None = None
    hybrid: HybridParams | None = None
    lexical_file: Path | None = None

    @property
    def n_labels(self) -> int:
        return len(self.ids)

    @property
    def n_items(self) -> int:
        return sum(i is not None for i in self.ids)


def prepare_on_disk_directory(directory: str | Path) -> Path:
    """Create the folder of a new on-disk IVF-PQ index, refusing one that already holds such an index's files.

    Raises:
        FileExistsError: ``directory`` already holds ``vectors.f32`` or inverted lists (``lists*.ivfdata``).
    """
    directory = Path(directory)
    names = sorted(os.listdir(directory)) if directory.is_dir() else []
    taken = [n for n in names if n == VECTORS_FILE or (n.startswith("lists") and n.endswith(".ivfdata"))]
    if taken:
        raise FileExistsError(
            "%s already exists; load that index with SemanticIndex.load(%r) or choose an empty directory"
            % (directory / taken[0], str(directory))
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
    directory: Path,
    state: SavedIndex,
    *,
    write_faiss: Callable[[Path], None] | None,
    live_dir: Path | None,
    lists_name: str | None,
    expected_generation: int | None = None,
    write_lexical: Callable[[Path], None] | None = None,
) -> tuple[int, dict]:
    """Save ``state`` as a new generation in ``directory`` (created if needed); the caller holds its lock.

    Args:
        directory: the target folder.
        state: what to record (``faiss_file`` is ignored).
        write_faiss: writes the FAISS structure to a path; None for an untrained index (no FAISS file).
        live_dir: the folder of an on-disk index's lists and vectors (None for in-memory kinds); they are copied
            when ``directory`` is another folder.
        lists_name: the file name of an on-disk index's inverted lists in ``live_dir``.
        expected_generation: if given, the generation ``directory`` must be at (an index saving a directory it
            was loaded from or saved to must not overwrite a newer save by another writer).
        write_lexical: writes a hybrid index's BM25 tokens to a path (``state.hybrid`` set), else None.

    Returns:
        The new generation and the manifest's ``"files"``.

    Raises:
        RuntimeError: the directory is at another generation than ``expected_generation``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    recover_folder(directory)  # deletes the temporary files of crashed atomic writes
    old = read_manifest(directory, required=False)
    current = _generation(old)
    if expected_generation is not None and current != expected_generation:
        raise RuntimeError(
            "%s was saved by another writer (generation %d) since this index was loaded from it or saved to it "
            "(generation %d); saving would undo that save. Load the directory again (and repeat this index's "
            "changes), or save to another directory." % (directory, current, expected_generation)
        )
    gen, token = current + 1, new_token()
    files = {"index": None, "items": "items.%06d-%s.json" % (gen, token)}
    if write_faiss is not None:
        files["index"] = "index.%06d-%s.faiss" % (gen, token)
    if live_dir is not None:
        files["lists"], files["vectors"] = lists_name, VECTORS_FILE
        if write_faiss is not None and directory.resolve() != live_dir.resolve():
            for name in (lists_name, VECTORS_FILE):  # the FAISS file records the lists' name: keep it
                with atomic_path(directory / name) as tmp:
                    shutil.copyfile(live_dir / name, tmp)
    if files["index"]:
        with atomic_path(directory / files["index"]) as tmp:
            write_faiss(tmp)
    if write_lexical is not None:
        files["lexical"] = "lexical.%06d-%s.npz" % (gen, token)
        with atomic_path(directory / files["lexical"]) as tmp:
            write_lexical(tmp)
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
    if state.hybrid is not None:
        manifest["format_version"] = _HYBRID_FORMAT_VERSION
        manifest["hybrid"] = state.hybrid.to_dict()
    with atomic_write(directory / MANIFEST_FILE) as f:
        json.dump(manifest, f, indent=2)
    # Committed: the marker of an earlier version's in-place changes no longer applies, and generation files no
    # manifest names (the previous generation's, an interrupted save's) can go.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / UNSAVED_CHANGES_FILE)
    remove_unreferenced_files(directory, files, keep=() if live_dir is None else (lists_name,))
    return gen, files


def remove_unreferenced_files(directory: Path, files: dict, keep=()) -> list[str]:
    """Delete the library-named generation files of ``directory`` that ``files`` (a manifest's) does not name.

    The caller holds the directory's lock. Only names of the library's own patterns (``index.<gen>[-<token>].faiss``,
    ``items.<gen>[-<token>].json``, ``lists[.<token>].ivfdata``) are considered; returns those removed (logged).
    """
    named = {v for v in files.values() if isinstance(v, str)} | {k for k in keep if k}
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in sorted(names):
        if name in named or not _GENERATION_FILE.match(name):
            continue
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            continue
        except OSError as e:
            logger.warning("could not delete the unused index file %s: %s", directory / name, e)
            continue
        removed.append(name)
    if removed:
        logger.info("removed %d index file(s) that no save of %s uses any more (earlier generations or "
                    "leftovers of interrupted saves): %s", len(removed), directory, ", ".join(removed))
    return removed


def clean_directory(directory: Path) -> None:
    """On open: delete leftovers of interrupted saves, if no writer holds the directory (else leave them)."""
    if not directory.is_dir():  # nothing to clean (and taking the lock would create the directory)
        return
    lock = directory_lock(directory)
    try:
        lock.acquire(timeout=0)
    except (TimeoutError, OSError):  # a writer is at work (its new files are not leftovers), or read-only
        return
    try:
        recover_folder(directory)
        m = read_manifest(directory, required=False)
        if m is not None and isinstance(m.get("files"), dict):
            remove_unreferenced_files(directory, m["files"])
    except (OSError, ValueError) as e:
        logger.debug("could not clean %s: %s", directory, e)
    finally:
        lock.release()


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
    lists_file = None
    if isinstance(params, IVFPQParams) and params.on_disk:
        check_no_unsaved_changes(directory, m)
        lists_file = _file_name(files, "lists", path, required=False) or LISTS_FILE
    hybrid, lexical_file = None, None
    if "hybrid" in m:
        if not isinstance(m["hybrid"], dict):
            raise CorruptFileError("index manifest %s: 'hybrid' must be an object; got %r" % (path, m["hybrid"]))
        try:
            hybrid = HybridParams.from_dict(m["hybrid"])
        except (TypeError, ValueError) as e:
            raise CorruptFileError("index manifest %s: hybrid: %s" % (path, e)) from None
        lexical_file = directory / _file_name(files, "lexical", path, required=True)
    if not items_path.is_file():
        raise FileNotFoundError("index items file not found: %s (named by %s)" % (items_path, path))
    items = read_json_file(items_path, "index items file")
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
        generation=_generation(m),
        lists_file=lists_file,
        hybrid=hybrid,
        lexical_file=lexical_file,
    )


def check_no_unsaved_changes(directory: Path, manifest: dict) -> None:
    """Raise if an earlier ctxemb changed the on-disk index in ``directory`` in place after the save ``manifest``
    records and never saved it (this version never changes saved files).

    Raises:
        CorruptFileError: ``unsaved_changes.json`` records the manifest's generation (or cannot be read).
    """
    marker = directory / UNSAVED_CHANGES_FILE
    if not marker.exists():
        return
    try:
        since = read_json_file(marker, "unsaved-changes marker").get("generation")
    except (OSError, ValueError):
        since = None  # a marker cut short while being written: the files were about to change
    if since is None or since == manifest.get("generation"):
        raise CorruptFileError(
            "%s: the on-disk index's %s and %s were changed by add/upsert/remove after its last save "
            "(generation %s) and never saved again (the process ended first), so they no longer match %s: "
            "loading it would return some ids twice and lose others. Rebuild the index from the original "
            "vectors, or restore a copy of the directory taken after a save. (%s records this.)"
            % (directory, LISTS_FILE, VECTORS_FILE, manifest.get("generation"), MANIFEST_FILE, UNSAVED_CHANGES_FILE)
        )


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
    m = read_json_file(path, "index manifest")
    if m.get("format") != _FORMAT:
        raise CorruptFileError("%s is not a SemanticIndex manifest (format %r)" % (path, m.get("format")))
    if m.get("format_version") not in (_FORMAT_VERSION, _HYBRID_FORMAT_VERSION):
        raise ValueError("%s has format_version %r; this ctxemb reads versions %d and %d (hybrid)"
                         % (path, m.get("format_version"), _FORMAT_VERSION, _HYBRID_FORMAT_VERSION))
    if (m.get("format_version") == _HYBRID_FORMAT_VERSION) != ("hybrid" in m):
        raise CorruptFileError("%s: format_version %r %s a 'hybrid' object" % (
            path, m["format_version"], "needs" if "hybrid" not in m else "cannot have"))
    return m
