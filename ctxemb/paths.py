"""Where ctxemb finds data that is not part of the repository, and atomic file writes.

The shared benchmark data (WordNet, SemCor, the WSD and similarity sets) lives outside the repository.
It is found through the ``CTXEMB_DATA`` environment variable, else in ``../shared/data`` next to the checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator

_REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir(required: bool = True) -> Path | None:
    """The folder of shared benchmark data.

    Args:
        required: raise if the folder cannot be found (else return None).

    Raises:
        FileNotFoundError: naming the places that were tried and the variable to set.
    """
    tried = []
    env = os.environ.get("CTXEMB_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(_REPO_ROOT.parent / "shared" / "data")
    for c in candidates:
        tried.append(str(c))
        if c.is_dir():
            return c
    if required:
        raise FileNotFoundError(
            "ctxemb's shared data folder was not found (tried: %s). Set CTXEMB_DATA to the folder that holds "
            "wsd/, similarity/, corpora/ and nltk_data/." % ", ".join(tried)
        )
    return None


def _umask_mode() -> int:
    """The mode a newly created file gets (0666 minus the umask); mkstemp would otherwise leave 0600."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _temp_beside(path: Path) -> str:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, _umask_mode())
    return tmp


def repo_data_dir() -> Path:
    """The repository's own small data folder (fixtures and the default analysis corpus)."""
    return _REPO_ROOT / "data"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary file beside ``path`` and move it into place only if the block succeeds.

    A crash or an exception leaves the previous file (if any) untouched.
    """
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that takes a filename (faiss, numpy, torch).

    The file is moved into place only if the block succeeds.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path`` to fill; it replaces ``path`` only if the block succeeds.

    An existing directory at ``path`` is renamed aside, the new one renamed in, and only then is the old one
    deleted, so a crash never leaves ``path`` missing or half written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp"))
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix="." + path.name + ".", suffix=".old"))
            os.rmdir(old)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_json_file(path: str | os.PathLike, *, expected: type = dict, what: str = "JSON file"):
    """Read a JSON file the library wrote (a manifest, a config, metadata), with errors that name the file.

    Args:
        path: the file.
        expected: the type the top-level value must have.
        what: what the file is, for messages (e.g. "index manifest").

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not UTF-8, not valid JSON (truncated or corrupt), or its top level is not ``expected``.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError("%s not found: %s" % (what, path)) from None
    except UnicodeDecodeError as e:
        raise ValueError("%s %s is not UTF-8 text (%s)" % (what, path, e.reason)) from None
    except json.JSONDecodeError as e:
        raise ValueError("%s %s is not valid JSON (corrupt or truncated?): %s" % (what, path, e)) from None
    if not isinstance(value, expected):
        raise ValueError("%s %s must hold a JSON %s; found a %s"
                         % (what, path, "object" if expected is dict else expected.__name__, type(value).__name__))
    return value

