"""Swapping two paths in one atomic step: Linux's ``renameat2(RENAME_EXCHANGE)``, for :mod:`ctxemb.core.atomic`.

A directory cannot be ``os.replace``-d over a non-empty one, so replacing it takes two renames (the old version
aside, the new one in), with a moment between them when neither is at the target. ``RENAME_EXCHANGE`` swaps the two
names in one step, so the target always holds a complete directory. It needs Linux 3.15+ (a file system that
implements it: ext4, xfs, btrfs, tmpfs, overlayfs and others) and a C library with ``renameat2`` (glibc 2.28+);
elsewhere :func:`exchange` says it could not, and :func:`ctxemb.core.atomic.atomic_directory` does the two renames
instead, whose window its recovery covers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

_AT_FDCWD = -100
_RENAME_EXCHANGE = 1 << 1
# What renameat2 answers where the kernel, the file system or a sandbox (seccomp) does not offer the exchange.
# (A real EPERM of the rename itself is raised again by the two renames that replace it.)
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP), errno.EPERM}

_renameat2 = None
_looked_up = False


def _function():
    """libc's ``renameat2``, or None where there is none (not Linux, an older C library)."""
    global _renameat2, _looked_up
    if not _looked_up:
        _looked_up = True
        if sys.platform.startswith("linux"):
            try:
                f = ctypes.CDLL(None, use_errno=True).renameat2
            except (AttributeError, OSError):
                f = None
            if f is not None:
                f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                f.restype = ctypes.c_int
                _renameat2 = f
    return _renameat2


def exchange_available() -> bool:
    """Whether this system's C library offers ``renameat2`` (the file system may still refuse the exchange)."""
    return _function() is not None


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Swap the entries ``a`` and ``b`` (both must exist) in one atomic step.

    Returns:
        True once they are swapped; False, with nothing changed, where the system or the file system does not
        offer the exchange (the caller then does it another way).

    Raises:
        OSError: the exchange is offered but failed (e.g. ``ENOENT``: one of them is missing), with the paths.
    """
    f = _function()
    if f is None:
        return False
    if f(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, "could not swap %s with %s: %s" % (os.fspath(a), os.fspath(b), os.strerror(err)),
                  os.fspath(a), None, os.fspath(b))
