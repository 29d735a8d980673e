"""Crash-safe saves of files and directories, and the recovery of saves a crash interrupted.

Everything ctxemb saves goes through :func:`atomic_write` / :func:`atomic_path` (one file) or
:func:`atomic_directory` (a directory: a model, a sense store, a corpus pass, a training checkpoint, token shards). A
save killed at any instant (SIGKILL, power cut) leaves the target's previous version or its new one, complete, never
a mix; :func:`recover_directory` (which every loader calls, through :func:`resolve_saved_directory`) puts the right
one back in the one case where a crash leaves no directory at the target.

Names. The temporaries of a save of ``<parent>/<name>`` are siblings of the target called
``.<name>.<pid>-<rand>.<kind>``: ``<pid>`` is the saving process's id, ``<rand>`` eight characters of
``[a-z0-9_]``, ``<kind>`` one of ``tmp`` (being written), ``new`` (complete), ``old`` (the previous version, moved
aside) or ``del`` (being deleted). Only names of exactly this form (and the ``.<name>.<rand>.tmp`` / ``.old``
of ctxemb versions before the ``<pid>``, and the ``.<name>.partial-<rand>`` / ``.<name>.old-<pid>`` of the
sentence-transformers writer of earlier versions, which did its own two renames) are ever touched; nothing else in
the parent folder is.

A directory save, and what is on disk after each step (``P`` the target, ``T`` the token ``<pid>-<rand>``):

1. ``.P.T.tmp`` is created with mode 0777 minus the umask, and the caller fills it. A crash here leaves an
   incomplete ``.tmp``: never restored, removed as stale.
2. Every file in it is fsynced (once), then its directories, bottom up.
3. ``.P.T.tmp`` is renamed ``.P.T.new``. This rename is the completion marker: a ``.new`` directory is complete and
   durable. (The marker is the name, not a file inside, so saved directories hold exactly what their writer put
   there.) A crash between 3 and 4 leaves ``P`` as it was, and a ``.new`` that is then stale (``P`` exists).
4. If ``P`` exists and the system can swap two directories in one step (Linux's ``renameat2(RENAME_EXCHANGE)``,
   :mod:`ctxemb.core.exchange`), ``P`` and ``.P.T.new`` are swapped: the save is committed with no moment without
   ``P``, and the previous version is now ``.P.T.new`` (a crash before step 6 leaves it as a stale ``.new`` beside a
   complete ``P``). Otherwise ``P`` is renamed ``.P.T.old``; a crash between this rename and step 5 leaves no ``P``,
   a complete ``.new`` and the complete previous version in ``.old``: recovery renames the ``.new`` to ``P`` (the
   save completed; the new version wins).
5. Unless swapped, ``.P.T.new`` is renamed ``P``: the save is committed. The parent folder is fsynced, which makes
   steps 3-5 durable.
6. The previous version (``.P.T.old``, or ``.P.T.new`` after a swap) is renamed ``.P.T.del`` and deleted. A crash
   here leaves a stale ``.old``, ``.new`` or ``.del`` beside a complete ``P``, removed by the next save or load.

If the block raises (or a step fails) nothing changes at ``P``: the temporary is deleted and, after step 4, the
previous version is moved back. Files (:func:`atomic_path`) follow steps 1, 2 and 5 only: a ``.tmp`` file is
fsynced and then ``os.replace``-d over the target, which has no window; the parent folder is fsynced after. A file
save keeps what the rename alone would lose (:mod:`ctxemb.core.file_target`): through a symbolic link it replaces the
file the link names, and the new file gets the replaced one's permission bits and, where allowed, owner.

Recovery (:func:`recover_directory`, run at the start of every directory save and by every loader):

- if ``P`` is missing and a ``.new`` directory exists, it becomes ``P``; else the newest ``.old`` does (a crash of
  a pre-``<pid>`` version of ctxemb, or of the earlier sentence-transformers writer's own two renames, between
  them leaves only that: that writer's ``.partial-<rand>`` is never restored, having no completion marker);
- then every stale sibling of ``P`` is deleted: ``.tmp``, ``.del``, and (once ``P`` exists) ``.new`` and ``.old``.
  A sibling is stale when its process is gone (``os.kill(pid, 0)`` fails) or is this process but not one of its
  saves in progress (names that record no process, ``.<rand>.tmp`` and ``.partial-<rand>``, always are);
  siblings of a save still running elsewhere are left alone, and recovery waits up to
  ``wait`` seconds for such a save to finish its renames before restoring anything itself. (Process ids are
  checked on this machine: do not save the same target from two machines sharing a file system at once.)

Durability: one fsync per file written (the :func:`atomic_write` file when it closes, every file in a saved
directory before the directory is renamed) plus one per directory, as databases do; an entry already fsynced by a
nested atomic save inside a directory being saved is not fsynced again.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import IO, Callable, Iterator, NamedTuple

from ctxemb.core import exchange as _exchange
from ctxemb.core.file_target import keep_metadata, previous_file, write_target

logger = logging.getLogger(__name__)

#: Seconds :func:`recover_directory` waits for a save running in another process to finish its renames.
RECOVERY_WAIT = 5.0


# ------------------------------------------------------------------------------------------------------------------
# temporaries: names, ownership

_RAND_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # the characters tempfile uses (so old names parse too)
_KINDS = ("tmp", "new", "old", "del")
_ANY_SIBLING = re.compile(r"\.(?P<name>.+)\.\d+-[a-z0-9_]{8}\.(?:tmp|new|old|del)\Z")
_ANY_LEGACY = re.compile(r"\.(?P<name>.+)\.(?:[a-z0-9_]{8}\.(?:tmp|old)|partial-[a-z0-9_]{8}|old-\d+)\Z")

_lock = threading.Lock()
# token -> (absolute path of the temporary, whether it is a directory), for this process's saves in progress
_active: dict[str, tuple[str, bool]] = {}
# token of an active temporary directory -> {(st_dev, st_ino): (st_size, st_mtime_ns)} of entries inside it that a
# nested atomic save has already fsynced (so the directory's own fsync pass skips them)
_synced: dict[str, dict[tuple[int, int], tuple[int, int]]] = {}


def _sibling(path: Path, token: str, kind: str) -> Path:
    return path.parent / (".%s.%s.%s" % (path.name, token, kind))


def _new_token() -> str:
    return "%d-%s" % (os.getpid(), "".join(secrets.choice(_RAND_CHARS) for _ in range(8)))


def _create_temp(path: Path, directory: bool, file_mode: int = 0o666) -> tuple[Path, str]:
    """Create ``.<name>.<pid>-<rand>.tmp`` beside ``path`` (mode 0777/``file_mode`` minus the umask), registered as
    ours before it exists, so no other thread's recovery can take it for a stale leftover."""
    for _ in range(100):
        token = _new_token()
        tmp = _sibling(path, token, "tmp")
        with _lock:
            _active[token] = (os.path.abspath(tmp), directory)
        try:
            if directory:
                os.mkdir(tmp, 0o777)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), file_mode))
        except FileExistsError:
            _release(token)
            continue
        except BaseException:
            _release(token)
            raise
        return tmp, token
    raise FileExistsError(errno.EEXIST, "could not create a temporary beside it", str(path))


def _release(token: str) -> None:
    with _lock:
        _active.pop(token, None)
        _synced.pop(token, None)


def _active_dir_containing(path: str | Path) -> str | None:
    """The token of this process's innermost temporary directory in progress that contains ``path``, or None."""
    ap = os.path.abspath(path)
    best, best_len = None, -1
    with _lock:
        for token, (root, is_dir) in _active.items():
            if is_dir and (ap == root or ap.startswith(root + os.sep)) and len(root) > best_len:
                best, best_len = token, len(root)
    return best


def _owner_alive(pid: int, token: str | None) -> bool:
    """Whether the save that owns ``token`` may still be running."""
    if pid == os.getpid():
        with _lock:
            return token in _active
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there; never guess a save is dead
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    except (OverflowError, ValueError):
        return False
    except OSError:
        return True
    return True


class _Sibling(NamedTuple):
    path: Path
    kind: str  # tmp, new, old, del
    token: str | None  # None for the names of earlier versions (no <pid>-<rand> token)
    pid: int | None  # None for names that record no process (legacy ones are then never in use)
    is_dir: bool  # a real directory (not a symbolic link to one)
    ctime_ns: int

    @property
    def in_use(self) -> bool:
        return self.pid is not None and _owner_alive(self.pid, self.token)


def _siblings(path: Path) -> list[_Sibling]:
    """Every temporary of a save of ``path`` in its parent folder (any process, any version of the naming)."""
    rx = re.compile(
        r"\.%s\.(?:(?P<token>(?P<pid>\d+)-[a-z0-9_]{8})\.(?P<kind>tmp|new|old|del)|[a-z0-9_]{8}\.(?P<legacy>tmp|old)"
        r"|(?P<st>partial-[a-z0-9_]{8}|old-(?P<oldpid>\d+)))\Z" % re.escape(path.name)
    )
    out = []
    try:
        with os.scandir(path.parent) as entries:
            for e in entries:
                m = rx.match(e.name)
                if m is None:
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if m.group("st") and not stat.S_ISDIR(st.st_mode):
                    continue  # (that writer made directories only: a file of such a name is someone else's)
                if m.group("token"):
                    kind, pid = m.group("kind"), int(m.group("pid"))
                elif m.group("oldpid"):  # the s-t writer's previous version moved aside: restorable, pid known
                    kind, pid = "old", int(m.group("oldpid"))
                else:  # names that record no process (never in use); a partial is never restored (no marker)
                    kind, pid = m.group("legacy") or "tmp", None
                out.append(_Sibling(Path(e.path), kind, m.group("token"), pid, stat.S_ISDIR(st.st_mode),
                                    st.st_ctime_ns))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return out


def _discard(p: Path, name: str, token: str | None) -> bool:
    """Delete a temporary (file or directory) without ever raising; returns whether it is gone.

    A complete directory (``.new``, ``.old``) is first renamed ``.del``, so a crash while deleting it never leaves a
    partial directory under a name that recovery would restore.
    """
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(p)
            return True
        if not p.name.endswith((".tmp", ".del")):
            doomed = p.parent / (".%s.%s.del" % (name, token or _new_token()))
            try:
                os.rename(p, doomed)
                p = doomed
            except FileNotFoundError:
                return True
            except OSError:
                pass  # delete it in place
        shutil.rmtree(p, ignore_errors=True)
    except FileNotFoundError:
        return True
    except OSError as e:
        logger.debug("could not delete the leftover %s: %s", p, e)
    gone = not os.path.lexists(p)
    if not gone:
        logger.debug("could not delete all of the leftover %s", p)
    return gone


def _remove_stale(path: Path) -> list[Path]:
    """Delete the stale temporaries of saves of ``path`` (see the module docstring); returns those removed.

    ``.new`` and ``.old`` directories are kept while ``path`` is missing: they are what recovery restores from.
    """
    exists = os.path.lexists(path)
    removed = []
    for s in _siblings(path):
        if s.in_use:
            continue
        if s.kind in ("new", "old") and not exists:
            continue
        if _discard(s.path, path.name, s.token):
            removed.append(s.path)
    if removed:
        logger.info("removed %d leftover(s) of interrupted saves of %s", len(removed), path)
    return removed


# ------------------------------------------------------------------------------------------------------------------
# fsync

_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP), errno.EBADF}


def _fsync_file(p: str | Path) -> None:
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except PermissionError:  # a file its writer made write-only
        fd = os.open(p, os.O_WRONLY | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(p: str | Path) -> None:
    """fsync a directory (its entries: creations, renames), where the platform and file system allow it."""
    if os.name == "nt":
        return
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except (PermissionError, FileNotFoundError):
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def _signature(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def _note_synced(p: Path) -> bool:
    """Record that ``p`` was just made durable, if it lies inside one of this process's directory saves in
    progress (whose fsync pass can then skip it); returns whether it does."""
    token = _active_dir_containing(p)
    if token is None:
        return False
    try:
        st = os.lstat(p)
    except OSError:
        return True
    with _lock:
        if token in _active:
            _synced.setdefault(token, {})[(st.st_dev, st.st_ino)] = _signature(st)
    return True


def _fsync_tree(root: Path, token: str) -> None:
    """fsync every regular file under ``root`` once, then every directory bottom up (symbolic links are not
    followed; what a nested atomic save already made durable, unchanged since, is skipped)."""
    with _lock:
        done = dict(_synced.get(token, {}))

    def already(st: os.stat_result) -> bool:
        return done.get((st.st_dev, st.st_ino)) == _signature(st)

    dirs = []
    for dirpath, dirnames, filenames in os.walk(root):
        keep = []
        for d in dirnames:
            st = os.lstat(os.path.join(dirpath, d))
            if stat.S_ISDIR(st.st_mode) and not already(st):
                keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            full = os.path.join(dirpath, f)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and not already(st):
                _fsync_file(full)
        dirs.append(dirpath)
    for d in reversed(dirs):
        _fsync_dir(d)


# ------------------------------------------------------------------------------------------------------------------
# recovery

def recover_directory(path: str | os.PathLike, *, wait: float = RECOVERY_WAIT) -> Path | None:
    """Put back a directory that a crashed save left missing, and delete the leftovers of interrupted saves.

    What it does (the protocol is in this module's docstring):

    - if ``path`` does not exist but a save of it was interrupted between its renames, the complete new version
      (``.<name>.<pid>-<rand>.new``) is renamed ``path``; failing that, the newest previous version moved aside
      (``.old``); the parent folder is then fsynced. If the save that left them is still running in another
      process, it first waits up to ``wait`` seconds for that save to finish by itself;
    - then it deletes the stale temporaries of saves of ``path`` (those of processes that are gone): incomplete
      ``.tmp`` ones, ``.del`` ones, and, now that ``path`` exists, ``.new`` and ``.old`` ones.

    It never touches other names, and never raises for a file it cannot rename or delete (a read-only store
    still loads): it logs instead. Loaders call it through :func:`resolve_saved_directory`; every
    :func:`atomic_directory` save calls it first.

    Args:
        path: the target of earlier saves (a directory, or a file written with :func:`atomic_path`).
        wait: seconds to wait for a save in progress elsewhere.

    Returns:
        The temporary that was renamed ``path``, or None if nothing needed restoring.
    """
    path = Path(path)
    restored = None
    deadline = time.monotonic() + wait
    for _ in range(10_000):
        if os.path.lexists(path):
            break
        candidates = [s for s in _siblings(path) if s.is_dir and s.kind in ("new", "old")]
        if not candidates:
            break
        if time.monotonic() < deadline and any(s.in_use for s in candidates):
            time.sleep(0.01)  # another process is between its renames: let it finish
            continue
        # the complete new version first, then the newest previous one (new names before pre-<pid> ones)
        best = min(candidates, key=lambda s: (s.kind != "new", s.token is None, -s.ctime_ns))
        try:
            os.rename(best.path, path)
        except FileNotFoundError:
            continue  # someone else restored or removed it meanwhile: look again
        except OSError as e:
            if os.path.lexists(path):
                break
            logger.warning("%s is missing after an interrupted save and could not be restored from %s: %s",
                           path, best.path, e)
            return None
        _fsync_dir(path.parent)
        restored = best.path
        logger.warning("%s was missing after an interrupted save: restored the %s version from %s", path,
                       "new" if best.kind == "new" else "previous", best.path.name)
        break
    _remove_stale(path)
    return restored


def resolve_saved_directory(path: str | os.PathLike) -> Path:
    """``Path(path)``, after :func:`recover_directory` restored it if a crashed save left it missing.

    Every loader of a directory saved with :func:`atomic_directory` calls this before reading.
    """
    path = Path(path)
    recover_directory(path)
    return path


def recover_folder(folder: str | os.PathLike) -> list[Path]:
    """:func:`recover_directory` for every target in ``folder`` that has temporaries of interrupted saves.

    For folders whose entries are saved under names nobody will save again (``checkpoint-<step>``, the
    generation files of a search index), so that their leftovers do not accumulate. Temporaries of the naming of
    ctxemb versions before the ``<pid>`` count only when their target exists.

    Returns:
        The targets that were restored.
    """
    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    present = set(names)
    targets = set()
    for n in names:
        m = _ANY_SIBLING.match(n)
        if m is None:
            m = _ANY_LEGACY.match(n)
            if m is None or m.group("name") not in present:
                continue
        targets.add(m.group("name"))
    return [folder / t for t in sorted(targets) if recover_directory(folder / t) is not None]


# ------------------------------------------------------------------------------------------------------------------
# atomic saves

@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary file beside ``path`` and move it into place only if the block succeeds.

    The file is flushed and fsynced when the block ends, then renamed over ``path`` (``os.replace``, atomic), and
    the parent folder fsynced. A crash or an exception leaves the previous file (if any) untouched; leftovers of
    crashed writes of the same file are deleted by the next one. A symbolic link at ``path`` stays: the file it
    names is replaced; a replaced file's permission bits (and, where allowed, owner) are kept
    (:mod:`ctxemb.core.file_target`).

    Args:
        path: the file to write.
        mode, kwargs: as for :func:`open` (``"w"``, ``"wb"``, ``encoding=``...).
    """
    with _atomic_file(path) as (tmp, keep):
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            keep()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that takes a filename (faiss, numpy, torch).

    The file (created empty, mode 0666 minus the umask; 0600 when it replaces a file, whose mode it gets once
    written) is fsynced and moved into place only if the block succeeds, and the parent folder is fsynced; see
    :func:`atomic_write`.
    """
    with _atomic_file(path) as (tmp, keep):
        yield tmp
        _fsync_file(tmp)  # (before keep: the mode it gets may let its owner neither read nor write it)
        keep()


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike) -> Iterator[tuple[Path, Callable[[], None]]]:
    """(the temporary, a call giving it the replaced file's owner and mode); the caller writes and fsyncs it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path = write_target(path)  # a symbolic link stays: the file it names is replaced
    # Inside a directory save in progress the folder is new (nothing stale) and gets fsynced as a whole.
    inside = _active_dir_containing(path.parent) is not None
    if not inside:
        _remove_stale(path)
    previous = previous_file(path)
    tmp, token = _create_temp(path, directory=False, file_mode=0o666 if previous is None else 0o600)
    try:
        yield tmp, lambda: keep_metadata(tmp, previous)
        os.replace(tmp, path)
        if inside:
            _note_synced(path)
        else:
            _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        _release(token)


def _refuse_non_directory(path: Path) -> None:
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(
            errno.EEXIST,
            "cannot save a directory there: a file that is not a directory is in the way (remove it or choose "
            "another path)",
            str(path),
        )


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path`` to fill; it replaces ``path`` only if the block succeeds.

    Protocol (what is on disk at each step is in this module's docstring): interrupted earlier saves of ``path``
    are recovered and their leftovers deleted (:func:`recover_directory`); the block fills
    ``.<name>.<pid>-<rand>.tmp`` (mode 0777 minus the umask); every file in it is fsynced, then its directories;
    it is renamed ``.new`` (complete); an existing ``path`` is swapped with it in one step where the system
    offers that (:func:`ctxemb.core.exchange.exchange`), else renamed ``.old`` before the ``.new`` is renamed
    ``path``; the parent folder is fsynced, and the previous version deleted. A crash at any point leaves the
    previous version or the new one at ``path``, or (between the two renames, where there is no swap) no ``path``
    and both complete versions beside it, which the next load or save restores (the new one). An exception leaves
    ``path`` as it was.

    Raises:
        FileExistsError: ``path`` exists and is not a directory (checked before the block runs and again before
            the swap); a directory at ``path`` is replaced, whatever it holds.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _refuse_non_directory(path)
    recover_directory(path)
    tmp, token = _create_temp(path, directory=True)
    new, old = _sibling(path, token, "new"), _sibling(path, token, "old")
    stage = "writing"  # -> "complete" (tmp renamed new) -> "aside" (path renamed old) -> "committed"
    previous = None  # where the previous version is once the new one is at path
    try:
        yield tmp
        _refuse_non_directory(path)
        _fsync_tree(tmp, token)
        os.rename(tmp, new)
        stage = "complete"
        if os.path.lexists(path) and _exchange.exchange(new, path):
            previous = new  # swapped in one step: path is the new version, new the previous one
        else:
            if os.path.lexists(path):
                os.rename(path, old)
                previous = old
                stage = "aside"
            os.rename(new, path)
        stage = "committed"
        if not _note_synced(path):  # (inside another save in progress, that save fsyncs the folder)
            _fsync_dir(path.parent)
        if previous is not None:
            _discard(previous, path.name, token)
    except BaseException:
        if stage != "committed":
            _abort_directory_save(path, tmp, new, old, stage)
        raise
    finally:
        _release(token)


def _abort_directory_save(path: Path, tmp: Path, new: Path, old: Path, stage: str) -> None:
    """Undo a directory save that raised before its commit: ``path`` as before, no temporary left."""
    if stage == "aside" and not os.path.lexists(path):
        try:
            os.rename(old, path)
        except OSError as e:
            # Keep both complete versions: recover_directory (the next load or save) restores the new one.
            logger.error("the save of %s failed between its renames and the previous version could not be moved "
                         "back (%s); the next load or save of %s restores the new version from %s", path, e, path,
                         new.name)
            return
    for p in (tmp, new):
        if os.path.lexists(p):
            shutil.rmtree(p, ignore_errors=True)

