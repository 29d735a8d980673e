"""Ray, the engine of the work that spreads over a corpus past one machine: its import (the ``ray`` extra) and the
connection to a cluster.

    ray start --head --num-cpus 8                    # on the first machine; it prints the address to join
    ray start --address HEAD:6379 --num-cpus 8       # on every other machine
    RAY_ADDRESS=HEAD:6379 python build.py            # the driver: embed_corpus_ray / build_index_ray connect there

Ray runs what is embarrassingly parallel over rows: embedding a corpus (:mod:`ctxemb.embedding.ray_corpus`) and
adding its shards to an index (:mod:`ctxemb.search.ray_build`). A worker that dies is replaced and its work item
run again, so every item is written idempotently. Training stays on torchrun (:mod:`ctxemb.runtime.distributed`):
its ranks step together, and a lost rank stops the step for all of them.

Ray is an optional dependency (``pip install "ctxemb[ray]"``, which installs ``ray[data]``); nothing imports it
until a Ray entry point runs.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

logger = logging.getLogger(__name__)

#: How to install what this module needs.
RAY_EXTRA = 'pip install "ctxemb[ray]"'


def import_ray() -> ModuleType:
    """The ``ray`` module, with Ray Data loaded.

    Raises:
        ImportError: Ray (or Ray Data's dependencies) is not installed; the message names the extra to install.
    """
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise ImportError(f"this needs Ray with Ray Data (ray[data] >= 2.10), which could not be imported ({e}); "
                          f"install it with: {RAY_EXTRA}") from None
    return ray


def connect(address: str | None = None) -> ModuleType:
    """The ``ray`` module, connected: the connection already open in this process, else ``ray.init(address)``.

    Args:
        address: the cluster to join (``"HEAD:6379"``, ``"auto"`` for the one ``ray start`` runs on this machine);
            None joins the cluster ``RAY_ADDRESS`` names, and without one starts a Ray instance on this machine
            alone (its processes end with this one).

    Raises:
        ImportError: Ray is not installed (see :func:`import_ray`).
        TypeError: ``address`` is not a str or None.
        ConnectionError: (from Ray) no cluster at ``address``.
    """
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a str (HOST:PORT or 'auto') or None, got {type(address).__name__}")
    ray = import_ray()
    if ray.is_initialized():
        return ray
    logger.info("connecting to Ray at %s", address or os.environ.get("RAY_ADDRESS") or "a new local instance")
    ray.init(address=address, logging_level=logging.WARNING)
    return ray


def node_id() -> str:
    """The id of the Ray node this code runs on (a worker's or the driver's)."""
    return import_ray().get_runtime_context().get_node_id()
