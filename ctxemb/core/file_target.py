"""What a file save keeps of the file it replaces: its symbolic link, its permission bits and its owner.

:func:`ctxemb.core.atomic.atomic_write` and :func:`~ctxemb.core.atomic.atomic_path` put a new file in place by renaming it
over the target. A rename replaces the directory entry: by itself it would turn a symbolic link into a plain file,
and give the content the mode of a new file (0666 minus the umask) and the saving user as owner, so a private
output (0600) would become readable by everyone. A save instead:

- writes through a symbolic link: the file the link names (followed through every link of a chain, a relative link
  from its own folder) is the one replaced, atomically, with its temporary beside it; the link stays. A link to a
  missing file creates that file, as ``open(path, "w")`` would, in a folder that must exist; a loop of links is
  an ``OSError`` naming the link;
- gives the new file the permission bits of the file it replaces (setuid, setgid and sticky bits included) and,
  where the system allows it, its owner and group: only root may give a file to another user; other users keep the
  file's group when they belong to it, and become the file's owner. The temporary is created with mode 0600 when
  a file is replaced, so the new content is never readable by more users than the old before the rename.

A target that does not exist yet is created with mode 0666 minus the umask, owned by the saving user, as before.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger(__name__)


def write_target(path: Path) -> Path:
    """The file a save of ``path`` replaces: ``path`` itself, or the file its symbolic link(s) lead to.

    Raises:
        OSError: the links form a loop (``ELOOP``), naming ``path``.
        FileNotFoundError: a link names a file in a folder that does not exist.
    """
    if not os.path.islink(path):
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        target = Path(os.path.realpath(path))  # a dangling link: the file it names is created
    except OSError as e:
        raise OSError(e.errno, "cannot save through the symbolic link (%s)" % e.strerror, str(path)) from None
    if os.path.islink(target):  # realpath stops at a loop without raising when the chain is dangling too
        raise OSError(errno.ELOOP, "cannot save through the symbolic link (a loop of links)", str(path))
    if not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "the symbolic link %s names a file in a folder that does not exist"
                                % path, str(target))
    return target


def previous_file(path: Path) -> os.stat_result | None:
    """The status of the regular file a save of ``path`` (a :func:`write_target`) replaces, or None."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def keep_metadata(tmp: Path, previous: os.stat_result | None) -> None:
    """Give ``tmp`` the owner and group (where allowed) and the permission bits of ``previous`` (None: leave it)."""
    if previous is None:
        return
    if hasattr(os, "chown"):
        st = os.stat(tmp)
        if (st.st_uid, st.st_gid) != (previous.st_uid, previous.st_gid):
            try:
                os.chown(tmp, previous.st_uid, previous.st_gid)
            except OSError:  # not root: keep the group at least, where the user belongs to it
                try:
                    os.chown(tmp, -1, previous.st_gid)
                except OSError as e:
                    logger.debug("%s: the group of the replaced file is not kept: %s", tmp, e)
    os.chmod(tmp, stat.S_IMODE(previous.st_mode))  # after chown, which clears setuid and setgid
