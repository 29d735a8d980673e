"""Locks: one writer per saved directory across processes, and readers-writer exclusion between threads.

:class:`DirectoryLock` is an advisory, exclusive lock on a *lock file* (``flock`` on POSIX; the ``filelock``
package on Windows). It is what makes a second writer of a search index, a sense store or a training run
directory fail with :class:`DirectoryLockedError` (or wait, when given a timeout) instead of both writing. The lock
file is a library-named file that is never deleted (deleting it would let two processes lock two different files of
the same name); see :func:`lock_file_inside` and :func:`lock_file_beside` for where it lives. It is empty, unless
the lock is asked to record its holder: it then holds the holder's process id while the lock is held (see
:meth:`DirectoryLock.holder_pid`).

Guarantee and its limits: ``flock`` locks are held by an open file, so a lock is released when its holder closes
it or its process ends in any way (including SIGKILL): a crashed writer never leaves a directory locked. They are
reliable on local file systems. On network file systems (NFS, SMB, some FUSE mounts) ``flock`` may be emulated,
per-client only, or a silent no-op: there, do not write one directory from two machines at once.

:class:`ReadWriteLock` serialises mutations of an in-memory object against each other and against reads while
letting reads run concurrently (``SemanticIndex``, ``SenseStore``). Writers are preferred: a waiting writer
stops new readers from entering, so a stream of queries cannot starve an ``add``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import threading
import time
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

__all__ = ["DirectoryLock", "DirectoryLockedError", "ReadWriteLock", "lock_file_beside", "lock_file_inside", "reads",
           "writes"]

#: The name of the lock file inside a directory that is written in place (a search index, a training run).
LOCK_FILE = ".ctxemb.lock"
_POLL = 0.02


class DirectoryLockedError(TimeoutError):
    """Another writer holds the lock of a directory (after waiting ``timeout`` seconds, if asked to wait)."""


def lock_file_inside(directory: str | os.PathLike) -> Path:
    """The lock file of a directory written in place: ``<directory>/.ctxemb.lock``."""
    return Path(directory) / LOCK_FILE


def lock_file_beside(path: str | os.PathLike) -> Path:
    """The lock file of a directory replaced as a whole (``ctxemb.core.atomic.atomic_directory``):
    ``<parent>/.<name>.ctxemb.lock`` (inside, it would be replaced with the directory)."""
    path = Path(path)
    return path.parent / (".%s%s" % (path.name, LOCK_FILE))


class DirectoryLock:
    """An exclusive inter-process lock on a lock file, re-entrant within one object.

    Args:
        lock_file: the lock file (created, with its folder, if missing; never deleted).
        what: what is locked, for messages ("the search index directory /x").
        record_holder: write the holder's process id into the lock file while it holds the lock (with ``flock``
            only), so that a process waiting for it can say whom it waits for (:meth:`holder_pid`).

    Use ``with DirectoryLock(...).hold(timeout=0): ...`` or ``acquire``/``release``. Two ``DirectoryLock``
    objects on one file exclude each other even within one process (each holds its own open file).
    """

    def __init__(self, lock_file: str | os.PathLike, *, what: str, record_holder: bool = False):
        self.lock_file = Path(lock_file)
        self.what = what
        self.record_holder = record_holder
        self._fd: int | None = None
        self._depth = 0
        self._soft = None  # filelock.FileLock on platforms without fcntl
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._depth > 0

    def acquire(self, timeout: float | None = 0.0) -> "DirectoryLock":
        """Take the lock.

        Args:
            timeout: seconds to wait for another holder to release it; 0 (the default) fails at once, None waits
                as long as it takes.

        Returns:
            self.

        Raises:
            DirectoryLockedError: another process (or another object of this process) holds it, naming the
                directory and the lock file.
            TypeError / ValueError: a ``timeout`` that is not a number >= 0 or None.
        """
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
                raise ValueError("timeout must be a number of seconds >= 0 or None; got %r" % (timeout,))
        with self._mutex:
            if self._depth:
                self._depth += 1
                return self
            self.lock_file.parent.mkdir(parents=True, exist_ok=True)
            if fcntl is None:
                self._acquire_soft(timeout)
            else:
                self._acquire_flock(timeout)
            self._depth = 1
        return self

    def _locked_error(self, timeout) -> DirectoryLockedError:
        waited = "" if not timeout else " after waiting %.3g s" % timeout
        return DirectoryLockedError(
            "%s is locked by another writer%s (lock file %s): only one process or object may write it at a time. "
            "Wait for the other writer to finish, or pass a timeout to wait for it"
            % (self.what, waited, self.lock_file)
        )

    def _acquire_flock(self, timeout) -> None:
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                if deadline is not None and time.monotonic() >= deadline:
                    raise self._locked_error(timeout)
                time.sleep(_POLL)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if self.record_holder:
            with contextlib.suppress(OSError):  # (the pid is for messages only)
                data = b"%d\n" % os.getpid()
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))

    def _acquire_soft(self, timeout) -> None:
        try:
            import filelock
        except ImportError as e:  # pragma: no cover - POSIX has fcntl
            raise ImportError("directory locks on this platform need the filelock package: pip install filelock") from e
        lock = filelock.FileLock(str(self.lock_file), thread_local=False)
        try:
            lock.acquire(timeout=-1 if timeout is None else timeout)
        except filelock.Timeout:
            raise self._locked_error(timeout) from None
        self._soft = lock

    def release(self) -> None:
        """Release one level of the lock (the file is unlocked when the outermost level is released)."""
        with self._mutex:
            if self._depth == 0:
                return
            self._depth -= 1
            if self._depth:
                return
            if self._fd is not None:
                fd, self._fd = self._fd, None
                with contextlib.suppress(OSError):
                    if self.record_holder:
                        os.ftruncate(fd, 0)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            if self._soft is not None:
                self._soft.release()
                self._soft = None

    def holder_pid(self) -> int | None:
        """The process id the lock file records (a lock made with ``record_holder=True``): the current holder's,
        or, when nobody holds it, a holder's that was killed (a lock released normally records none). None when
        the file records none or cannot be read."""
        try:
            text = self.lock_file.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    @contextlib.contextmanager
    def hold(self, timeout: float | None = 0.0) -> Iterator["DirectoryLock"]:
        """Context manager: ``acquire(timeout)`` on entry, ``release()`` on exit."""
        self.acquire(timeout)
        try:
            yield self
        finally:
            self.release()

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __repr__(self) -> str:
        return "DirectoryLock(%r, held=%r)" % (str(self.lock_file), self.held)


class ReadWriteLock:
    """Many concurrent readers or one writer, writer-preferring; both may re-enter (a writer may also read).

    ``with lock.read(): ...`` around queries, ``with lock.write(): ...`` around mutations.
    """

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._reading: dict[int, int] = {}  # thread id -> depth of its read holds
        self._writer: int | None = None  # thread id of the writer
        self._writer_depth = 0
        self._waiting_writers = 0

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:  # a writer reading its own object
                self._writer_depth += 1
                reentrant = True
            else:
                reentrant = False
                if me not in self._reading:  # (a nested read must not wait for a waiting writer: deadlock)
                    while self._writer is not None or self._waiting_writers:
                        self._cond.wait()
                    self._readers += 1
                self._reading[me] = self._reading.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                if reentrant:
                    self._writer_depth -= 1
                else:
                    self._reading[me] -= 1
                    if not self._reading[me]:
                        del self._reading[me]
                        self._readers -= 1
                        if self._readers == 0:
                            self._cond.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._writer_depth += 1
            elif me in self._reading:
                raise RuntimeError("a thread holding a read lock cannot take the write lock (it would deadlock)")
            else:
                self._waiting_writers += 1
                try:
                    while self._writer is not None or self._readers:
                        self._cond.wait()
                finally:
                    self._waiting_writers -= 1
                self._writer, self._writer_depth = me, 1
        try:
            yield
        finally:
            with self._cond:
                self._writer_depth -= 1
                if self._writer_depth == 0:
                    self._writer = None
                    self._cond.notify_all()


def reads(method):
    """Decorator: run the method holding ``self._rw`` (a :class:`ReadWriteLock`) for reading."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._rw.read():
            return method(self, *args, **kwargs)
    return wrapper


def writes(method):
    """Decorator: run the method holding ``self._rw`` (a :class:`ReadWriteLock`) for writing (alone)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._rw.write():
            return method(self, *args, **kwargs)
    return wrapper
