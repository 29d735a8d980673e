"""A corpus's sentence vectors as a directory of row-range shards, each written whole or not at all.

    shards/
      shards.json                the job (a digest of the texts, the model, the options) and the layout: N, H, rows
      shard-00000/vectors.npy    (n, H) float32: rows [0, n) of the corpus, in the caller's order
      shard-00000/ids.npy        (n,) int64: the corpus rows they are (0, 1, ..., n - 1)
      shard-00001/...            rows [shard_rows, 2 shard_rows), and so on

Shard k holds rows ``[k * shard_rows, min(N, (k + 1) * shard_rows))``. Its directory is filled under a temporary name
and renamed into place (:func:`ctxemb.core.atomic.atomic_directory`), so it is there complete or not at all: a writer
killed midway leaves no shard (the next write of that shard deletes its temporary), and a second write of a shard (a
retried task) replaces it with the same rows. A shard in place whose files hold the rows of its range is complete;
:func:`missing_shards` lists the others, which is what a rerun embeds: the job resumes at shard granularity.

The manifest is written before any shard (:func:`prepare_shard_directory`). A directory whose manifest records
another job (other texts, another model or other weights, other options, another layout) is refused, naming what
differs, unless the caller asks to overwrite it; a non-empty directory without a manifest is always refused (it is
not ours to empty).

Shape legend: N rows (texts), H the vector size, n the rows of one shard.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ctxemb.core.atomic import atomic_directory, atomic_write, recover_directory
from ctxemb.core.locks import LOCK_FILE
from ctxemb.core.validation import CorruptFileError, check_int, read_json_file

logger = logging.getLogger(__name__)

MANIFEST_FILE = "shards.json"
VECTORS_FILE = "vectors.npy"
IDS_FILE = "ids.npy"
FORMAT_VERSION = 1
_PREFIX = "shard-"


def shard_name(k: int) -> str:
    """The directory name of shard ``k``: ``shard-00000``, ``shard-00001``, ..."""
    return "%s%05d" % (_PREFIX, k)


@dataclass(frozen=True)
class ShardLayout:
    """How N rows of H dimensions are cut into shards of ``shard_rows`` consecutive rows (the last may be shorter).

    Attributes:
        num_rows: N (>= 1).
        dim: H (>= 1).
        shard_rows: rows per shard (>= 1).
    """

    num_rows: int
    dim: int
    shard_rows: int

    def __post_init__(self):
        check_int(self.num_rows, "num_rows", low=1)
        check_int(self.dim, "dim", low=1)
        check_int(self.shard_rows, "shard_rows", low=1)

    @property
    def num_shards(self) -> int:
        return -(-self.num_rows // self.shard_rows)

    def bounds(self, k: int) -> tuple[int, int]:
        """Shard ``k``'s rows ``[first, end)``."""
        if not 0 <= k < self.num_shards:
            raise IndexError(f"shard {k} is out of range: there are {self.num_shards} shards")
        return k * self.shard_rows, min(self.num_rows, (k + 1) * self.shard_rows)

    def to_dict(self) -> dict:
        return {"num_rows": self.num_rows, "dim": self.dim, "shard_rows": self.shard_rows}


@dataclass(frozen=True)
class VectorShards:
    """A shard directory: its layout and the job it records (see the module docstring).

    Attributes:
        directory: the directory.
        layout: the :class:`ShardLayout`.
        job: what made the vectors, as the writer recorded it (for a Ray build: ``texts``, ``options``,
            ``embedder configuration``, ``model weights (fingerprint)``, ...).
    """

    directory: Path
    layout: ShardLayout
    job: dict

    @property
    def num_shards(self) -> int:
        return self.layout.num_shards

    def shard_dir(self, k: int) -> Path:
        self.layout.bounds(k)  # range check
        return self.directory / shard_name(k)

    @property
    def vector_files(self) -> list[Path]:
        """Every shard's ``vectors.npy``, in row order."""
        return [self.shard_dir(k) / VECTORS_FILE for k in range(self.num_shards)]

    def missing(self) -> list[int]:
        """The shards that are not in place complete (see :func:`missing_shards`)."""
        return missing_shards(self)

    def check_complete(self) -> None:
        """Raise unless every shard is in place complete.

        Raises:
            FileNotFoundError: shards are missing or incomplete; the message names them.
        """
        missing = self.missing()
        if missing:
            names = ", ".join(shard_name(k) for k in missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise FileNotFoundError(f"{self.directory} lacks {len(missing)} of its {self.num_shards} shards "
                                    f"({names}): the job that writes them did not finish; run it again to write "
                                    "the missing ones")

    def load(self) -> np.ndarray:
        """Every row: a new (N, H) float32 array, row i the vector of text i."""
        out = np.empty((self.layout.num_rows, self.layout.dim), dtype=np.float32)
        for k, path in enumerate(self.vector_files):
            first, end = self.layout.bounds(k)
            out[first:end] = np.load(path, mmap_mode="r")
        return out

    def read_ids(self) -> np.ndarray:
        """(N,) int64: every shard's ``ids.npy`` in shard order (0..N-1 for a complete directory)."""
        return np.concatenate([np.load(self.shard_dir(k) / IDS_FILE) for k in range(self.num_shards)])


def _manifest(layout: ShardLayout, job: dict) -> dict:
    return json.loads(json.dumps({"format": FORMAT_VERSION, **layout.to_dict(), "job": job}))  # tuples as lists


def _differences(stored: dict, given: dict) -> list[str]:
    """One line per field that differs (the job's fields one by one)."""
    lines = []
    flat_stored = {**{k: v for k, v in stored.items() if k != "job"}, **stored.get("job", {})}
    flat_given = {**{k: v for k, v in given.items() if k != "job"}, **given.get("job", {})}
    for key in sorted(set(flat_stored) | set(flat_given)):
        a, b = flat_stored.get(key, "(absent)"), flat_given.get(key, "(absent)")
        if a != b:
            lines.append(f"  {key}: the directory has {a!r}, this call {b!r}")
    return lines


def read_vector_shards(directory: str | os.PathLike) -> VectorShards:
    """Open a shard directory by its manifest (the shards themselves are not checked: see
    :meth:`VectorShards.check_complete`).

    Raises:
        FileNotFoundError: no such directory, or no ``shards.json`` in it.
        CorruptFileError: the manifest is unreadable or not of this format.
    """
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    if not directory.is_dir():
        raise FileNotFoundError(f"shard directory not found: {directory}")
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no {MANIFEST_FILE}: it is not a directory of vector shards")
    data = read_json_file(path, "vector shards manifest")
    if data.get("format") != FORMAT_VERSION or not isinstance(data.get("job"), dict):
        raise CorruptFileError(f"{path}: expected a vector shards manifest of format {FORMAT_VERSION} with a 'job' "
                               f"object; got format {data.get('format')!r}", path)
    try:
        layout = ShardLayout(data["num_rows"], data["dim"], data["shard_rows"])
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptFileError(f"{path}: a bad layout ({e})", path) from None
    return VectorShards(directory, layout, data["job"])


def prepare_shard_directory(directory: str | os.PathLike, layout: ShardLayout, job: dict, *,
                            overwrite: bool = False) -> VectorShards:
    """The shard directory of this job: created with its manifest, or the one a run of the same job left.

    Args:
        directory: the directory (created if missing, with its parents).
        layout: the rows, dimension and shard size.
        job: what makes the vectors (JSON-serialisable); equal jobs write equal shards.
        overwrite: a directory whose manifest records another job is emptied of its shards and manifest and
            taken over; without it, such a directory is refused.

    Returns:
        The :class:`VectorShards` (some or all of its shards may be missing).

    Raises:
        NotADirectoryError: ``directory`` is a file.
        FileExistsError: ``directory`` is not empty and holds no manifest.
        ValueError: its manifest records another job and ``overwrite`` is False; the message names the manifest
            and every field that differs.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"out_dir {directory} is a file; expected a directory for the vector shards")
    directory.mkdir(parents=True, exist_ok=True)
    wanted = _manifest(layout, job)
    path = directory / MANIFEST_FILE
    if path.exists():
        stored = read_json_file(path, "vector shards manifest")
        if stored == wanted:
            return VectorShards(directory, layout, wanted["job"])
        if not overwrite:
            diffs = _differences(stored, wanted)
            raise ValueError(f"{path} records the shards of another job ({len(diffs)} difference(s)):\n"
                             + "\n".join(diffs) + "\nChoose another directory, or pass overwrite=True to replace "
                             "its shards")
        _remove_shards(directory)
    else:
        foreign = sorted(name for name in os.listdir(directory) if name != LOCK_FILE)
        if foreign:
            raise FileExistsError(f"out_dir {directory} is not empty ({', '.join(foreign[:5])}"
                                  f"{' ...' if len(foreign) > 5 else ''}) and holds no {MANIFEST_FILE}: give an "
                                  "empty or new directory for the vector shards")
    with atomic_write(path) as f:
        json.dump(wanted, f, indent=2)
    return VectorShards(directory, layout, wanted["job"])


def _remove_shards(directory: Path) -> None:
    """Delete a shard directory's manifest and shards (and their temporaries), nothing else."""
    (directory / MANIFEST_FILE).unlink(missing_ok=True)
    for name in os.listdir(directory):
        if name.startswith((_PREFIX, "." + _PREFIX)):
            shutil.rmtree(directory / name, ignore_errors=True)
    logger.info("removed the shards of another job from %s", directory)


def write_shard(shards: VectorShards, k: int, vectors: np.ndarray, *,
                before_commit: Callable[[], None] | None = None) -> Path:
    """Write shard ``k`` (its rows' vectors and ids) atomically, replacing a shard already there.

    Args:
        shards: the directory (:func:`prepare_shard_directory`).
        k: the shard.
        vectors: (n, H) the vectors of the shard's rows, in row order.
        before_commit: called once the files are written, before the rename that commits them (fault injection).

    Returns:
        The shard's directory.

    Raises:
        ValueError: ``vectors`` has another shape than the shard's (n, H) or holds a NaN or infinite value.
    """
    first, end = shards.layout.bounds(k)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.shape != (end - first, shards.layout.dim):
        raise ValueError(f"shard {k} holds rows [{first}, {end}): expected ({end - first}, {shards.layout.dim}) "
                         f"vectors, got {vectors.shape}")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise ValueError(f"the vector of row {first + int(bad[0])} holds a NaN or infinite value")
    target = shards.directory / shard_name(k)
    with atomic_directory(target) as tmp:
        np.save(tmp / VECTORS_FILE, vectors)
        np.save(tmp / IDS_FILE, np.arange(first, end, dtype=np.int64))
        if before_commit is not None:
            before_commit()
    return target


def shard_is_complete(shards: VectorShards, k: int) -> bool:
    """Whether shard ``k`` is in place and holds its rows: ``ids.npy`` equal to its range and ``vectors.npy`` of
    shape (n, H), float32 (a crashed replacement of it is first put back, :func:`~ctxemb.core.atomic.recover_directory`)."""
    first, end = shards.layout.bounds(k)
    directory = shards.directory / shard_name(k)
    recover_directory(directory)
    try:
        ids = np.load(directory / IDS_FILE, mmap_mode="r")
        vectors = np.load(directory / VECTORS_FILE, mmap_mode="r")
    except (OSError, ValueError, EOFError):
        return False
    return (vectors.dtype == np.float32 and vectors.shape == (end - first, shards.layout.dim)
            and ids.dtype == np.int64 and ids.shape == (end - first,)
            and bool(np.array_equal(ids, np.arange(first, end, dtype=np.int64))))


def missing_shards(shards: VectorShards) -> list[int]:
    """The shards of the directory that are not in place complete, in order."""
    return [k for k in range(shards.num_shards) if not shard_is_complete(shards, k)]
