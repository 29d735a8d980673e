"""Child-process workers for tests/test_reliability_concurrency.py (spawned: they import only what they need).

Every saved state is self-describing so a reader can tell a complete save from a mix: writer ``w``'s round ``r``
saves ids ``"<w>-<r>-<j>"`` whose vectors are :func:`vector_of` the id, so a loaded directory is consistent exactly
when all its ids share one ``<w>-<r>`` prefix and every id's stored vector is the one its name gives.
"""

from __future__ import annotations

import hashlib
import traceback

import numpy as np

DIM = 16


def vector_of(item_id: str) -> np.ndarray:
    """The (DIM,) unit vector that belongs to ``item_id`` (a hash of it)."""
    seed = int.from_bytes(hashlib.sha256(item_id.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def state_ids(writer: str, round_: int, n: int) -> list[str]:
    return ["%s-%d-%d" % (writer, round_, j) for j in range(n)]


def make_index(kind: str, writer: str, round_: int, n: int, directory=None):
    from ctxemb.search import HNSWParams, IVFPQParams, SemanticIndex

    ids = state_ids(writer, round_, n)
    x = np.stack([vector_of(i) for i in ids])
    if kind == "flat":
        index = SemanticIndex(DIM)
    elif kind == "hnsw":
        index = SemanticIndex(DIM, params=HNSWParams(m=8, ef_construction=40))
    else:
        index = SemanticIndex(DIM, params=IVFPQParams(nlist=4, pq_m=4, nbits=6, on_disk=kind == "ivfpq-ondisk"),
                              directory=directory)
    return index.add(ids, x, show_progress_bar=False)


def make_store(writer: str, round_: int, n: int):
    from ctxemb.wsd.sense_store import SenseStore

    keys = ["%s-%d-%d%%1:00:00::" % (writer, round_, j) for j in range(n)]
    store = SenseStore(DIM)
    store.add(keys, np.stack([vector_of(k) for k in keys]))
    return store


def check_index(index) -> str:
    """'' if ``index`` holds exactly one writer-round's state with the right vectors, else what is wrong."""
    ids = index.ids
    if not ids:
        return "no ids"
    prefixes = {i.rsplit("-", 1)[0] for i in ids}
    if len(prefixes) != 1:
        return "ids of several saves: %s" % sorted(prefixes)[:4]
    for i in ids:
        got = index.get_vector(i)
        if not np.allclose(got, vector_of(i), atol=1e-5):
            return "id %s holds another id's vector" % i
    return ""


def check_store(store, one_save: bool = True) -> str:
    keys = store.keys
    if not keys:
        return "no keys"
    prefixes = {k.rsplit("-", 1)[0] for k in keys}
    if one_save and len(prefixes) != 1:
        return "keys of several saves: %s" % sorted(prefixes)[:4]
    got = store.unit_vectors()
    want = np.stack([vector_of(k) for k in keys])
    if not np.allclose(got, want, atol=1e-5):
        return "a key holds another key's vector"
    return ""


def racing_writer(what: str, writer: str, directory: str, rounds: int, n: int, barrier, results) -> None:
    """Save a fresh state of ``what`` ("flat", "hnsw", "store") into ``directory`` once per round, all writers
    released together by ``barrier``; reports ("ok" | "locked" | "error: ...") per round on ``results``."""
    from ctxemb.core.locks import DirectoryLockedError

    for r in range(rounds):
        obj = make_store(writer, r, n) if what == "store" else make_index(what, writer, r, n)
        barrier.wait()
        try:
            obj.save(directory)
            results.put((writer, r, "ok"))
        except DirectoryLockedError as e:
            results.put((writer, r, "locked" if "locked by another writer" in str(e) else "error: %s" % e))
        except BaseException:
            results.put((writer, r, "error: %s" % traceback.format_exc()))
        barrier.wait()  # the parent checks the directory between rounds


def repeated_saver(what: str, directory: str, rounds: int, n: int, done) -> None:
    """Save ``rounds`` different states of ``what`` into ``directory`` one after another, then set ``done``."""
    try:
        for r in range(rounds):
            obj = make_store("s", r, n) if what == "store" else make_index(what, "s", r, n)
            obj.save(directory, lock_timeout=30)
    finally:
        done.set()
