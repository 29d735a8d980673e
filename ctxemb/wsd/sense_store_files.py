"""The files of a saved :class:`ctxemb.wsd.sense_store.SenseStore` directory: checked readers, and a consistent
snapshot of the directory while another process may be replacing it.

Every reader raises :class:`~ctxemb.search.CorruptFileError` (a ``ValueError``) naming the file and what is wrong,
or ``FileNotFoundError`` naming the missing file.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from ctxemb.search.storage import CorruptFileError

ORIGINS = ("corpus", "synset", "hypernym", "lexname", "gloss", "given")
STORE_FILES = ("meta.json", "keys.txt", "senses.npz", "index.faiss")


def read_snapshot(directory: Path) -> tuple[dict[str, bytes], tuple[int, int]]:
    """The bytes of every file of a store directory, all from one version of it.

    The directory is opened once and every file read through that handle, so a save that renames a new version
    into place meanwhile cannot mix two versions: this reads the version that was at ``directory`` when opened
    (its files may then vanish, when the save deletes the old version: ``FileNotFoundError``; the caller starts
    again).

    Returns:
        ``{name: bytes}`` for :data:`STORE_FILES`, and the (device, inode) of the version read.

    Raises:
        FileNotFoundError: the directory or one of its files is missing, naming it.
    """
    try:
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        raise FileNotFoundError("SenseStore directory not found: %s" % directory) from None
    except NotADirectoryError:
        raise FileNotFoundError("%s is not a SenseStore directory (not a directory)" % directory) from None
    try:
        st = os.fstat(dir_fd)
        out = {}
        for name in STORE_FILES:
            try:
                fd = os.open(name, os.O_RDONLY | getattr(os, "O_BINARY", 0), dir_fd=dir_fd)
            except (FileNotFoundError, IsADirectoryError):
                raise FileNotFoundError("%s is not a SenseStore directory: %s is missing" % (directory, name)) from None
            with os.fdopen(fd, "rb") as f:
                out[name] = f.read()
        return out, (st.st_dev, st.st_ino)
    finally:
        os.close(dir_fd)


def read_keys(path: Path, data: bytes | None = None) -> list[str]:
    """The sense keys of ``keys.txt`` (its ``data``, if already read), checked: UTF-8, one non-empty key without
    whitespace per line, no repeats."""
    try:
        text = (path.read_bytes() if data is None else data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptFileError("SenseStore keys file %s is not UTF-8 text (%s at byte %d)" % (path, e.reason, e.start)) from None
    if text and not text.endswith("\n"):
        raise CorruptFileError("SenseStore keys file %s does not end with a newline: it is truncated" % path)
    keys = text.split("\n")[:-1] if text else []
    for i, k in enumerate(keys):
        if not k or any(c.isspace() for c in k):
            raise CorruptFileError("SenseStore keys file %s, line %d: %r is not a sense key (empty or with spaces)"
                                   % (path, i + 1, k))
    if len(set(keys)) != len(keys):
        seen, dup = set(), None
        for k in keys:
            if k in seen:
                dup = k
                break
            seen.add(k)
        raise CorruptFileError("SenseStore keys file %s repeats the key %r" % (path, dup))
    return keys


# The arrays of senses.npz: name -> (dtype kinds accepted, whether it has one entry per sense).
_NPZ_ARRAYS = {"norms": ("fiu", True), "counts": ("iu", True), "origins": ("iu", True)}


def read_arrays(path: Path, n: int, data: bytes | None = None) -> dict[str, np.ndarray]:
    """The arrays of ``senses.npz`` (its ``data``, if already read), checked against ``n`` senses; every read
    error names the file."""
    try:
        z = np.load(path if data is None else io.BytesIO(data), allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single array, not the .npz archive of a SenseStore")
        with z:
            arrays = {k: z[k] for k in z.files}
    except (FileNotFoundError, PermissionError):
        raise
    except Exception as e:  # BadZipFile, zlib.error, EOFError, OSError, ValueError (pickled data, bad headers), ...
        raise CorruptFileError("SenseStore arrays %s cannot be read (corrupt or truncated?): %s: %s"
                               % (path, type(e).__name__, e)) from None
    for name, (kinds, per_sense) in _NPZ_ARRAYS.items():
        a = arrays.get(name)
        if a is None:
            raise CorruptFileError("SenseStore arrays %s lack %r" % (path, name))
        if a.dtype.kind not in kinds or (per_sense and a.shape != (n,)):
            raise CorruptFileError("SenseStore arrays %s: %r must be %d numbers (dtype kind %s); got dtype %s, shape %s"
                                   % (path, name, n, "/".join(kinds), a.dtype, a.shape))
    norms, counts, origins = arrays["norms"], arrays["counts"], arrays["origins"]
    if not np.isfinite(norms).all() or (norms < 0).any():
        raise CorruptFileError("SenseStore arrays %s: norms must be finite and >= 0" % path)
    if (counts < 0).any():
        raise CorruptFileError("SenseStore arrays %s: counts must be >= 0" % path)
    if ((origins < 0) | (origins >= len(ORIGINS))).any():
        raise CorruptFileError("SenseStore arrays %s: origins must be codes 0..%d" % (path, len(ORIGINS) - 1))
    return arrays


def directory_size(directory: str | os.PathLike) -> int:
    """Total bytes of the files in a directory (e.g. a saved store)."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


def read_meta(path: Path, data: bytes) -> dict:
    """``meta.json`` from its bytes: a UTF-8 JSON object, else :class:`CorruptFileError` naming the file."""
    import json

    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CorruptFileError("SenseStore metadata %s is not UTF-8 text (%s)" % (path, e.reason)) from None
    except json.JSONDecodeError as e:
        raise CorruptFileError("SenseStore metadata %s is not valid JSON (corrupt or truncated?): %s" % (path, e)) from None
    if not isinstance(value, dict):
        raise CorruptFileError("SenseStore metadata %s must hold a JSON object; found a %s" % (path, type(value).__name__))
    return value


def read_faiss(path: Path, data: bytes):
    """The FAISS index serialised in ``data`` (the bytes of ``path``), else :class:`CorruptFileError` naming it."""
    import faiss

    from ctxemb.search.storage import faiss_error_text

    try:
        return faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
    except (RuntimeError, MemoryError, ValueError) as e:
        raise CorruptFileError("SenseStore FAISS index %s cannot be read by FAISS (corrupt, truncated or not a FAISS "
                               "index?): %s" % (path, faiss_error_text(e))) from None
