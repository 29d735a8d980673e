"""Saving and loading a :class:`ctxemb.search.SemanticIndex`, and the directory lock of on-disk changes.

The directory format and its guarantees are in :mod:`ctxemb.search.storage`; this module drives them from an
index's state: ``save_index`` (under the directory's lock), ``load_index`` (lock-free, starting again when a save
committed meanwhile), ``begin_on_disk_change`` (the lock an on-disk index holds from its first change until
``save``/``close``).

Two writers of one directory: an on-disk index holds the lock from its first change and checks the directory's
generation then and at ``save``. An in-memory index checks it at ``save`` (under the lock): it records, for every
directory it was loaded from or saved to, the generation it left there (``_saved_generations``, by resolved
path), and a save to such a directory that another writer saved since is refused (``RuntimeError`` naming the
directory), where it would silently undo that writer's items. A save to a directory the index has no record of
replaces what is there, as a new file replaces an old one: the index never held that directory's items; so does a
save to a directory that holds no save any more (emptied since).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ctxemb.core.atomic import resolve_saved_directory
from ctxemb.search.inputs import check_spec
from ctxemb.search.lexical import BM25Index
from ctxemb.search.storage import (
    CorruptFileError,
    SavedIndex,
    clean_directory,
    directory_lock,
    read_index_directory,
    read_manifest,
    write_index_directory,
)

logger = logging.getLogger(__name__)

# How long load keeps starting again when saves by another process keep deleting the files it is about to read.
LOAD_RETRY_SECONDS = 30.0


# Seconds an on-disk change waits for the directory lock before refusing (see begin_on_disk_change).
READER_CLEANUP_GRACE = 2.0


def begin_on_disk_change(index) -> None:
    """Before an on-disk index changes its files: hold its directory's lock (kept until ``save``/``close``),
    check that no other writer saved the directory since this index read it, and copy inverted lists that a
    committed save names (see ``ctxemb.search.storage``).

    Raises:
        DirectoryLockedError: another process (or object) is writing the directory.
        RuntimeError: the directory was saved by another writer since this index was loaded or saved.
    """
    if index._dir_lock is None or not index._dir_lock.held:
        lock = directory_lock(index._backend.directory)
        # A reader opening the directory holds the lock for the milliseconds of its leftover clean-up; a writer
        # holds it until it saves. Waiting a moment lets the first pass and still refuses the second.
        lock.acquire(timeout=READER_CLEANUP_GRACE)
        try:
            current = manifest_generation(index._backend.directory)
            if current != (index._generation or 0):
                raise RuntimeError(
                    "%s was saved by another writer (generation %d) since this on-disk index was loaded or saved "
                    "(generation %d): changing it would corrupt that save. Load the directory again."
                    % (index._backend.directory, current, index._generation or 0)
                )
        except BaseException:
            lock.release()
            raise
        index._dir_lock = lock
    index._backend.copy_lists_on_write()


def save_index(index, directory, lock_timeout) -> Path:
    """``SemanticIndex.save`` (see there)."""
    if directory is None:
        if index.directory is None:
            raise ValueError("save() needs a directory (this index was not created or loaded with one)")
        directory = index.directory
    directory = Path(directory)
    key = str(directory.resolve())
    own = index.on_disk and key == str(index._backend.directory.resolve())
    known = getattr(index, "_saved_generations", None) or {}  # directory -> the generation this index left there
    state = SavedIndex(
        kind=index.kind, dim=index.dim, metric=index.metric, params=index.params,
        embedder_config=index.embedder_config, recipe=index.recipe, ids=index._ids, metadata=index._meta,
        ntotal=index._backend.ntotal, hybrid=index.hybrid,
    )
    lock = index._dir_lock if own and index._dir_lock is not None else directory_lock(directory)
    with lock.hold(lock_timeout):
        expected = (index._generation or 0) if own else known.get(key)
        if not own and expected is not None and manifest_generation(directory, strict=False) == 0:
            expected = None  # no save there any more (the directory was emptied): no writer's items to lose
        gen, _ = write_index_directory(
            directory, state,
            write_faiss=index._backend.write if index._backend.is_trained else None,
            live_dir=index._backend.directory if index.on_disk else None,
            lists_name=index._backend.lists_name if index.on_disk else None,
            expected_generation=expected,
            write_lexical=None if index._lexical is None else index._lexical.write,
        )
    index._saved_generations = {**known, key: gen}
    if own:  # the lists are a committed save's now; the next change copies them and takes the lock again
        index._backend.lists_committed = True
        index._generation = gen
        while index._dir_lock is not None and index._dir_lock.held:
            index._dir_lock.release()
    logger.info("saved %r to %s (generation %d)", index, directory, gen)
    return directory


def load_index(cls, directory, expected_config):
    """``SemanticIndex.load`` (see there)."""
    directory = resolve_saved_directory(directory)  # restores a directory save a crash interrupted
    clean_directory(directory)
    deadline = time.monotonic() + LOAD_RETRY_SECONDS
    while True:
        before = manifest_generation(directory, strict=False)
        try:
            index = _load_once(cls, directory)
            break
        except (FileNotFoundError, CorruptFileError):
            after = manifest_generation(directory, strict=False)
            if after is None or after == before or time.monotonic() > deadline:
                raise
            logger.debug("%s was saved again while loading it (generation %s -> %s): loading the new save",
                         directory, before, after)
    if expected_config is not None:
        index.check_config(expected_config)
    return index


def _load_once(cls, directory: Path):
    saved = read_index_directory(directory)
    try:
        dim, kind, params = check_spec(saved.dim, saved.kind, saved.metric, saved.params)
    except (TypeError, ValueError) as e:
        raise CorruptFileError("index manifest %s: %s" % (directory / "manifest.json", e)) from None
    self = cls.__new__(cls)
    self._init_state(dim, kind, saved.metric, params, saved.embedder_config, saved.recipe, directory, saved.hybrid)
    self._generation = saved.generation
    self._saved_generations = {str(directory.resolve()): saved.generation}  # checked by the next save there
    if saved.faiss_file is not None:
        if self.on_disk:
            self._backend.n_rows = saved.n_labels
        self._backend.load(saved.faiss_file, directory, saved.lists_file)
    self._ids, self._meta = saved.ids, saved.metadata
    if saved.hybrid is not None:  # checked against the items: a mismatch is a CorruptFileError naming the file
        self._lexical = BM25Index.read(saved.hybrid, saved.lexical_file, saved.ids)
    self._label_of = {i: label for label, i in enumerate(saved.ids) if i is not None}
    expected_ntotal = len(self._label_of) if self._backend.physical_remove else saved.n_labels
    if self._backend.ntotal != expected_ntotal:
        raise CorruptFileError(
            "the FAISS index in %s holds %d vectors but the items file implies %d; the directory is inconsistent"
            % (directory, self._backend.ntotal, expected_ntotal)
        )
    if not self._backend.physical_remove:
        self._dead = {label for label, i in enumerate(saved.ids) if i is None}
    return self


def manifest_generation(directory: Path, *, strict: bool = True) -> int | None:
    """The generation of the save in ``directory`` (0 for none); with ``strict=False``, None if unreadable."""
    try:
        m = read_manifest(Path(directory), required=False)
    except (OSError, ValueError):
        if strict:
            raise
        return None
    gen = (m or {}).get("generation", 0)
    return gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
