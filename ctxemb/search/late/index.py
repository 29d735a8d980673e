"""A late-interaction (multi-vector) index: every document kept as its compressed token vectors, searched by
candidate generation over centroids and MaxSim re-scoring of the candidates (PLAID's idea, on FAISS and numpy).

Search, for a (Tq, D) query:

1. score the query tokens against the K centroids, (Tq, K), and take each token's ``nprobe`` best centroids;
2. candidates: the documents that own a token in a probed centroid (an inverted list per centroid). Each gets the
   approximate score ``sum_i max`` over its probed centroids of the centroid score (PLAID's centroid interaction,
   restricted to the probed cells);
3. the ``candidates`` best are decompressed and re-scored by MaxSim on their token vectors; the best ``k`` are
   returned.

Documents are added in shards (one per ``add``); a loaded index memory-maps its shards, so an index larger than RAM
is searched reading only the candidates' tokens. ``remove`` marks documents deleted (a search never returns them);
``save`` writes the whole state into a new directory that replaces the old one atomically (shards already on disk
are hard-linked, not copied), under a lock beside it: a second writer is refused, and a save over a directory that
another process saved since this index was loaded is refused (its generation moved).

Shape legend: N documents, M tokens, K centroids, D dimensions, Tq query tokens, C candidates.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ctxemb.core.validation import CorruptFileError, check_int, read_json_file
from ctxemb.core.atomic import atomic_directory, atomic_write, resolve_saved_directory
from ctxemb.core.locks import DirectoryLock, lock_file_beside
from ctxemb.search.late.codec import ResidualCodec
from ctxemb.search.late.scoring import maxsim_concatenated

logger = logging.getLogger(__name__)

FORMAT = "ctxemb-late-interaction-index"
VERSION = 1


@dataclass
class _Shard:
    """Documents ``first_label ...`` with their tokens: (M_s,) centroid ids, (M_s, P) packed residuals and
    (N_s + 1,) token offsets; ``name`` once it is on disk."""

    first_label: int
    codes: np.ndarray
    packed: np.ndarray
    offsets: np.ndarray
    name: str | None = None
    source: Path | None = None

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1


class LateInteractionIndex:
    """Compressed token vectors of documents, searched by MaxSim (see the module docstring).

    Args:
        dim: D, the width of the token vectors.
        nbits: residual bits per dimension (1, 2, 4 or 8).
        n_centroids: K (default: ColBERTv2's rule from the first ``add``'s token count).
        encoder_config: what made the vectors (recorded and checked on load; e.g. the encoder's config dict).
        seed: the codec's k-means seed.

    Example (``encoder`` a :class:`~ctxemb.search.late.LateInteractionEncoder`)::

        index = LateInteractionIndex(dim=128)
        index.add(ids, encoder.encode_documents(texts))
        index.search(encoder.encode_queries("a query"), k=10)   # [(id, score), ...]
    """

    def __init__(self, dim: int, *, nbits: int = 2, n_centroids: int | None = None,
                 encoder_config: Mapping | None = None, seed: int = 0):
        self.dim = check_int(dim, "dim", low=1)
        self.nbits = nbits
        self.n_centroids = n_centroids
        self.encoder_config = dict(encoder_config) if encoder_config else None
        self.seed = seed
        self.codec: ResidualCodec | None = None
        self._shards: list[_Shard] = []
        self._ids: list[str | None] = []  # by label; None for a removed document whose id was added again
        self._label: dict[str, int] = {}
        self._live = np.zeros(0, dtype=bool)
        self._ivf: tuple[np.ndarray, np.ndarray] | None = None
        self._generation = 0
        self.directory: Path | None = None

    # ------------------------------------------------------------------------------------------------ state
    def __len__(self) -> int:
        """Documents that a search can return (removed ones excluded)."""
        return int(self._live.sum())

    def __contains__(self, doc_id: object) -> bool:
        label = self._label.get(doc_id)  # type: ignore[arg-type]
        return label is not None and bool(self._live[label])

    def __repr__(self) -> str:
        return "LateInteractionIndex(documents=%d, tokens=%d, dim=%d, nbits=%d, centroids=%s)" % (
            len(self), self.n_tokens, self.dim, self.nbits, None if self.codec is None else self.codec.n_centroids)

    @property
    def ids(self) -> list[str]:
        """The ids a search can return, in insertion order."""
        return [i for i, live in zip(self._ids, self._live) if live]

    @property
    def n_tokens(self) -> int:
        return sum(len(s.codes) for s in self._shards)

    @property
    def bytes_per_token(self) -> float:
        """Stored bytes per token vector (residual codes and centroid id; offsets and ids not counted)."""
        return float("nan") if self.codec is None else float(self.codec.bytes_per_vector)

    # ------------------------------------------------------------------------------------------------ changes
    def add(self, ids: Sequence[str], documents: Sequence[np.ndarray]) -> "LateInteractionIndex":
        """Add documents, each a (T_i, D) array of unit token vectors, as one new shard.

        The first call fits the codec on these vectors, so it should hold a representative sample (thousands of
        tokens or more).

        Raises:
            ValueError: a length mismatch, an id given twice or already in the index, an empty document, a wrong
                width or a non-finite value: checked before anything changes.
        """
        ids = [self._check_id(i, n) for n, i in enumerate(ids)]
        if len(ids) != len(documents):
            raise ValueError("ids has %d entries but documents has %d" % (len(ids), len(documents)))
        seen: set[str] = set()
        for n, i in enumerate(ids):
            if i in seen or i in self:
                raise ValueError("ids[%d] = %r is %s" % (n, i, "given twice" if i in seen else
                                                         "already in the index (remove it first to replace it)"))
            seen.add(i)
        arrays = []
        for n, d in enumerate(documents):
            a = np.asarray(d, dtype=np.float32)
            if a.ndim != 2 or a.shape[1] != self.dim:
                raise ValueError("documents[%d] must be (T, %d), got shape %s" % (n, self.dim, a.shape))
            if len(a) == 0:
                raise ValueError("documents[%d] (id %r) has no token vector" % (n, ids[n]))
            if not np.isfinite(a).all():
                raise ValueError("documents[%d] (id %r) holds a non-finite value" % (n, ids[n]))
            arrays.append(a)
        if not arrays:
            return self
        tokens = np.concatenate(arrays)
        tokens /= np.maximum(np.linalg.norm(tokens, axis=1, keepdims=True), 1e-12)
        if self.codec is None:
            if len(tokens) < 2:
                raise ValueError("the first add needs at least 2 token vectors to fit the codec")
            self.codec = ResidualCodec.fit(tokens, n_centroids=self.n_centroids, nbits=self.nbits, seed=self.seed)
        codes, packed = self.codec.compress(tokens)
        offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
        first = len(self._ids)
        self._shards.append(_Shard(first, codes, packed, offsets))
        for n, i in enumerate(ids):
            old = self._label.get(i)
            if old is not None:  # a removed document added again: its old label stays dead and nameless
                self._ids[old] = None
            self._label[i] = first + n
        self._ids.extend(ids)
        self._live = np.concatenate([self._live, np.ones(len(ids), dtype=bool)])
        self._ivf = None
        return self

    def remove(self, ids: Iterable[str]) -> "LateInteractionIndex":
        """Mark documents removed. Raises KeyError naming an id that is not in the index (nothing removed)."""
        labels = []
        for i in ids:
            label = self._label.get(i)
            if label is None or not self._live[label]:
                raise KeyError("remove: the id %r is not in the index" % (i,))
            labels.append(label)
        self._live[labels] = False
        return self

    @staticmethod
    def _check_id(doc_id, n: int) -> str:
        if not isinstance(doc_id, str) or not doc_id:
            raise TypeError("ids[%d] must be a non-empty str, got %r" % (n, doc_id))
        return doc_id

    # ------------------------------------------------------------------------------------------------ reading
    def _shard_of(self, labels: np.ndarray) -> np.ndarray:
        firsts = np.array([s.first_label for s in self._shards], dtype=np.int64)
        return np.searchsorted(firsts, labels, side="right") - 1

    def _tokens(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Centroid ids, packed residuals and (C + 1,) offsets of the tokens of documents ``labels``, in order."""
        which = self._shard_of(labels)
        starts = np.empty(len(labels), dtype=np.int64)
        stops = np.empty(len(labels), dtype=np.int64)
        groups = [(s, np.flatnonzero(which == s)) for s in np.unique(which)]
        for s, rows in groups:
            shard = self._shards[s]
            local = labels[rows] - shard.first_label
            starts[rows], stops[rows] = shard.offsets[local], shard.offsets[local + 1]
        offsets = np.concatenate([[0], np.cumsum(stops - starts)])
        codes = np.empty(offsets[-1], dtype=self.codec.code_dtype)
        packed = np.empty((offsets[-1], self.dim * self.nbits // 8), dtype=np.uint8)
        for s, rows in groups:
            _gather_rows(self._shards[s].codes, starts[rows], stops[rows], codes, offsets[rows])
            _gather_rows(self._shards[s].packed, starts[rows], stops[rows], packed, offsets[rows])
        return codes, packed, offsets

    def _token_counts(self, labels: np.ndarray) -> np.ndarray:
        """The number of tokens of each document of ``labels``."""
        which = self._shard_of(labels)
        counts = np.empty(len(labels), dtype=np.int64)
        for s in np.unique(which):
            rows = np.flatnonzero(which == s)
            shard = self._shards[s]
            local = labels[rows] - shard.first_label
            counts[rows] = shard.offsets[local + 1] - shard.offsets[local]
        return counts

    def document_vectors(self, doc_id: str) -> np.ndarray:
        """The decompressed (T, D) token vectors of one document."""
        label = self._label.get(doc_id)
        if label is None or not self._live[label]:
            raise KeyError("the id %r is not in the index" % (doc_id,))
        codes, packed, _ = self._tokens(np.array([label]))
        return self.codec.decompress(codes, packed)

    def _inverted_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """(K + 1,) offsets and the document labels of each centroid's list (every document once per list)."""
        if self._ivf is None:
            K = self.codec.n_centroids
            pairs = []
            for shard in self._shards:
                labels = np.repeat(np.arange(shard.first_label, shard.first_label + shard.n_docs, dtype=np.int64),
                                   np.diff(shard.offsets))
                pairs.append(np.unique(np.asarray(shard.codes, dtype=np.int64) * len(self._ids) + labels))
            keys = np.unique(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64)
            cells, labels = np.divmod(keys, max(1, len(self._ids)))
            offsets = np.concatenate([[0], np.cumsum(np.bincount(cells, minlength=K))])
            label_type = np.int32 if len(self._ids) < 2 ** 31 else np.int64
            self._ivf = (offsets.astype(np.int64), labels.astype(label_type))
        return self._ivf

    # ------------------------------------------------------------------------------------------------ search
    def search(self, query: np.ndarray, k: int = 10, *, nprobe: int = 4, candidates: int = 256,
               ids: Iterable[str] | None = None) -> list[tuple[str, float]]:
        """The ``k`` documents of highest MaxSim with ``query``, best first, as (id, score).

        Args:
            query: (Tq, D) query token vectors (unit rows).
            k: how many to return.
            nprobe: centroids probed per query token.
            candidates: documents re-scored by MaxSim on their decompressed tokens.
            ids: restrict the search to these documents (each must be in the index); a restriction smaller than
                ``candidates`` is scored exhaustively.

        Raises:
            ValueError: a query of the wrong shape or with a non-finite value, a bad ``k``/``nprobe``/
                ``candidates``; KeyError: an id of ``ids`` not in the index.
        """
        k = check_int(k, "k", low=1)
        nprobe = check_int(nprobe, "nprobe", low=1)
        candidates = check_int(candidates, "candidates", low=1)
        q = np.asarray(query, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim or len(q) == 0:
            raise ValueError("query must be (Tq, %d) with Tq >= 1, got shape %s" % (self.dim, q.shape))
        if not np.isfinite(q).all():
            raise ValueError("query holds a non-finite value")
        allowed = None
        if ids is not None:
            allowed = np.zeros(len(self._ids), dtype=bool)
            for i in ids:
                label = self._label.get(i)
                if label is None or not self._live[label]:
                    raise KeyError("ids: %r is not in the index" % (i,))
                allowed[label] = True
        if self.codec is None or not self._live.any():
            return []
        live = self._live if allowed is None else allowed
        if int(live.sum()) <= candidates:
            labels = np.flatnonzero(live)
        else:
            labels = self._candidates(q, nprobe, candidates, live)
        if not len(labels):
            return []
        scores = np.empty(len(labels), dtype=np.float32)
        for lo, hi in _token_batches(self._token_counts(labels), _SCORE_TOKENS):
            codes, packed, offsets = self._tokens(labels[lo:hi])  # a bounded slice of the candidates at a time
            scores[lo:hi] = maxsim_concatenated(q, self.codec.decompress(codes, packed), offsets)
        order = np.lexsort((labels, -scores))[:k]
        return [(self._ids[labels[i]], float(scores[i])) for i in order]

    def _candidates(self, q: np.ndarray, nprobe: int, n: int, live: np.ndarray) -> np.ndarray:
        """The ``n`` best documents by centroid interaction over the probed cells (labels, best first)."""
        ivf_offsets, ivf_labels = self._inverted_lists()
        sims = q @ self.codec.centroids.T  # (Tq, K)
        nprobe = min(nprobe, sims.shape[1])
        probed = np.argpartition(-sims, nprobe - 1, axis=1)[:, :nprobe]  # (Tq, nprobe)
        token = np.repeat(np.arange(len(q)), nprobe)
        cells = probed.ravel()
        sizes = ivf_offsets[cells + 1] - ivf_offsets[cells]
        gathered = np.empty(int(sizes.sum()), dtype=ivf_labels.dtype)
        _gather_rows(ivf_labels, ivf_offsets[cells], ivf_offsets[cells + 1], gathered,
                     np.concatenate([[0], np.cumsum(sizes)[:-1]]))
        labels = gathered.astype(np.int64)
        values = np.repeat(sims[token, cells], sizes)
        tokens = np.repeat(token, sizes)
        keep = live[labels]
        labels, values, tokens = labels[keep], values[keep], tokens[keep]
        # max over probed cells per (document, query token), then the sum over query tokens per document
        key = labels * len(q) + tokens
        order = np.lexsort((-values, key))
        key, values, labels = key[order], values[order], labels[order]
        first = np.concatenate([[True], key[1:] != key[:-1]]) if len(key) else np.zeros(0, bool)
        docs, inverse = np.unique(labels[first], return_inverse=True)
        approx = np.bincount(inverse, weights=values[first], minlength=len(docs))
        best = np.lexsort((docs, -approx))[:n]
        return docs[best]

    # ------------------------------------------------------------------------------------------------ saving
    def _manifest(self, shards: list[dict], generation: int) -> dict:
        return {"format": FORMAT, "version": VERSION, "generation": generation, "dim": self.dim,
                "nbits": self.nbits, "n_centroids": self.n_centroids, "seed": self.seed,
                "encoder_config": self.encoder_config, "n_documents": len(self._ids), "shards": shards}

    def save(self, directory: str | os.PathLike | None = None, *, lock_timeout: float | None = 0.0) -> Path:
        """Write the index to ``directory`` (default: where it was loaded from), replacing it atomically.

        Raises:
            DirectoryLockedError: another process is saving there (after ``lock_timeout`` seconds).
            RuntimeError: the directory was saved by someone else since this index was loaded from it.
        """
        if directory is None:
            if self.directory is None:
                raise ValueError("save() needs a directory (this index was not loaded from one)")
            directory = self.directory
        directory = Path(directory)
        with DirectoryLock(lock_file_beside(directory), what="the late-interaction index %s" % directory
                           ).hold(lock_timeout):
            on_disk = _generation(directory)
            own = self.directory is not None and directory.resolve() == self.directory.resolve()
            expected = self._generation if own else None
            if on_disk is not None and own and on_disk != expected:
                raise RuntimeError("%s was saved by another writer (generation %d) since this index was loaded "
                                   "(generation %d): load it again and redo the changes" % (directory, on_disk,
                                                                                              expected))
            generation = (on_disk or 0) + 1
            with atomic_directory(directory) as tmp:
                shards = []
                for shard in self._shards:
                    name = shard.name or "shard-%s" % uuid.uuid4().hex[:12]
                    (tmp / name).mkdir()
                    for field in ("codes", "packed", "offsets"):
                        target = tmp / name / (field + ".npy")
                        src = None if shard.source is None else shard.source / name / (field + ".npy")
                        try:
                            if src is None:
                                raise OSError
                            os.link(src, target)
                        except OSError:
                            np.save(target, np.asarray(getattr(shard, field)))
                    shards.append({"name": name, "first_label": shard.first_label, "n_documents": shard.n_docs,
                                   "n_tokens": int(len(shard.codes))})
                if self.codec is not None:
                    np.savez(tmp / "codec.npz", **self.codec.arrays())
                    ivf_offsets, ivf_labels = self._inverted_lists()
                    np.save(tmp / "ivf_offsets.npy", ivf_offsets)
                    np.save(tmp / "ivf_labels.npy", ivf_labels)
                np.save(tmp / "live.npy", self._live)
                with atomic_write(tmp / "ids.json", "w", encoding="utf-8") as f:
                    json.dump(self._ids, f)
                with atomic_write(tmp / "manifest.json", "w", encoding="utf-8") as f:
                    json.dump(self._manifest(shards, generation), f, indent=1)
        for shard, record in zip(self._shards, shards):
            shard.name, shard.source = record["name"], directory
        self.directory, self._generation = directory, generation
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike, *, mmap: bool = True,
             expected_encoder_config: Mapping | None = None) -> "LateInteractionIndex":
        """Load a saved index; with ``mmap`` the token arrays stay on disk and are read as searches need them.

        Raises:
            FileNotFoundError: no index there. CorruptFileError: a file is missing, malformed or inconsistent
            (named). ValueError: ``expected_encoder_config`` differs from the recorded one.
        """
        directory = resolve_saved_directory(directory)
        manifest = read_json_file(directory / "manifest.json", "late-interaction index manifest")
        if manifest.get("format") != FORMAT:
            raise CorruptFileError("%s: not a late-interaction index manifest (format %r)"
                                   % (directory / "manifest.json", manifest.get("format")), directory)
        if manifest.get("version") != VERSION:
            raise CorruptFileError("%s: index format version %r; this ctxemb reads version %d"
                                   % (directory / "manifest.json", manifest.get("version"), VERSION), directory)
        if expected_encoder_config is not None and dict(expected_encoder_config) != manifest["encoder_config"]:
            raise ValueError("the index %s was built with the encoder configuration %r, not %r"
                             % (directory, manifest["encoder_config"], dict(expected_encoder_config)))
        index = cls(manifest["dim"], nbits=manifest["nbits"], n_centroids=manifest["n_centroids"],
                    encoder_config=manifest["encoder_config"], seed=manifest["seed"])
        try:
            ids = read_json_file(directory / "ids.json", "index ids", expected=list)
            live = np.load(directory / "live.npy")
            mode = "r" if mmap else None
            if (directory / "codec.npz").exists():
                with np.load(directory / "codec.npz") as z:
                    index.codec = ResidualCodec.from_arrays(z)
                index._ivf = (np.load(directory / "ivf_offsets.npy"),
                              np.load(directory / "ivf_labels.npy", mmap_mode=mode))
                if len(index._ivf[0]) != index.codec.n_centroids + 1 or index._ivf[0][-1] != len(index._ivf[1]):
                    raise CorruptFileError("%s: the inverted lists do not fit the codec" % directory, directory)
            for record in manifest["shards"]:
                path = directory / record["name"]
                shard = _Shard(record["first_label"], np.load(path / "codes.npy", mmap_mode=mode),
                               np.load(path / "packed.npy", mmap_mode=mode), np.load(path / "offsets.npy"),
                               record["name"], directory)
                if shard.n_docs != record["n_documents"] or int(shard.offsets[-1]) != len(shard.codes) != \
                        record["n_tokens"] or len(shard.packed) != len(shard.codes):
                    raise CorruptFileError("%s: its arrays do not agree with the manifest" % path, path)
                index._shards.append(shard)
        except (OSError, ValueError, KeyError) as e:
            if isinstance(e, CorruptFileError):
                raise
            raise CorruptFileError("%s: cannot read the index (%s)" % (directory, e), directory) from e
        named = [i for i in ids if i is not None]
        if len(ids) != manifest["n_documents"] or len(live) != len(ids) or len(set(named)) != len(named):
            raise CorruptFileError("%s: ids.json, live.npy and the manifest disagree on the documents" % directory,
                                   directory)
        index._ids = list(ids)
        index._label = {i: n for n, i in enumerate(ids) if i is not None}
        index._live = np.array(live, dtype=bool)
        index.directory, index._generation = directory, manifest["generation"]
        return index


# Candidates are decompressed and scored this many tokens at a time: the float32 vectors and the codec's
# intermediates of one slice (about 80 bytes a token at D = 128) bound a search's working memory.
_SCORE_TOKENS = 8192


def _token_batches(counts: np.ndarray, limit: int):
    """(lo, hi) slices of consecutive documents holding about ``limit`` tokens each (a longer document alone)."""
    lo, total = 0, 0
    for i, n in enumerate(counts):
        if total and total + n > limit:
            yield lo, i
            lo, total = i, 0
        total += int(n)
    if lo < len(counts):
        yield lo, len(counts)


def _gather_rows(source: np.ndarray, starts: np.ndarray, stops: np.ndarray, out: np.ndarray,
                 out_starts: np.ndarray) -> None:
    """Copy rows ``starts[i]:stops[i]`` of ``source`` to ``out[out_starts[i]:...]``.

    A memory-mapped ``source`` is read with ``pread`` instead of through the mapping: touching a mapped page maps
    its neighbours too (the kernel's fault-around), so scattered reads through the mapping would leave most of a
    shard resident in the process; a read keeps the file in the page cache, shared and reclaimable, and the
    process holds only the rows it asked for.
    """
    filename, offset = getattr(source, "filename", None), getattr(source, "offset", None)
    # a whole saved array mapped by np.load (its base is the mapping itself; a view of one has other offsets)
    if filename is None or offset is None or not source.flags.c_contiguous or not isinstance(source.base, mmap.mmap):
        out[_ranges(out_starts, np.asarray(out_starts) + (np.asarray(stops) - np.asarray(starts)))] = \
            source[_ranges(starts, stops)]
        return
    row_bytes = source.dtype.itemsize * int(np.prod(source.shape[1:], dtype=np.int64))
    fd = os.open(filename, os.O_RDONLY)
    try:
        for start, stop, at in zip(np.asarray(starts).tolist(), np.asarray(stops).tolist(),
                                   np.asarray(out_starts).tolist()):
            if stop <= start:
                continue
            data = os.pread(fd, (stop - start) * row_bytes, offset + start * row_bytes)
            out[at:at + stop - start] = np.frombuffer(data, dtype=source.dtype).reshape(-1, *source.shape[1:])
    finally:
        os.close(fd)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(starts[i], stops[i])`` over i, without a Python loop."""
    lengths = np.asarray(stops, dtype=np.int64) - np.asarray(starts, dtype=np.int64)
    if not len(lengths) or not lengths.sum():
        return np.zeros(0, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(np.asarray(starts, dtype=np.int64) - before, lengths) + np.arange(lengths.sum())


def _generation(directory: Path) -> int | None:
    path = directory / "manifest.json"
    if not path.is_file():
        return None
    manifest = read_json_file(path, "late-interaction index manifest")
    if not isinstance(manifest.get("generation"), int):
        raise CorruptFileError("%s: no integer \"generation\"" % path, path)
    return manifest["generation"]
