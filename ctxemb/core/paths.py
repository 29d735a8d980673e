"""Where ctxemb finds data that is not part of the repository.

The shared benchmark data (WordNet, SemCor, the WSD and similarity sets) lives outside the repository.
It is found through the ``CTXEMB_DATA`` environment variable, else in ``../shared/data`` next to the checkout.

Crash-safe saves are in :mod:`ctxemb.core.atomic`, locks in :mod:`ctxemb.core.locks`.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]  # ctxemb/core/paths.py -> the checkout


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


def repo_data_dir() -> Path:
    """The repository's own small data folder (fixtures and the default analysis corpus)."""
    return _REPO_ROOT / "data"

