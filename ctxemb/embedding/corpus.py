"""Sentence vectors of a corpus into one ``.npy`` memory map, by one process or by several under torchrun.

    embed_corpus_to_file(embedder, Path("texts.txt"), "vectors.npy")          # a plain script: one process
    torchrun --nproc_per_node 2 -m ctxemb embed --input texts.txt --output vectors.npy   # (N, H) either way

Row i of the output is the vector of text i (the caller's order), bit for bit the row
:meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences` gives for it, whatever the number of processes.

Shards. Every rank computes the same plan: the batches ``embed_sentences`` makes for the whole corpus
(:meth:`~ctxemb.embedding.embedder.Embedder.plan_sentence_batches`: texts sorted by length within chunks of consecutive
texts, batches under a token budget), dealt whole to the ranks, largest first, each to the rank with the fewest
padded tokens so far (LPT scheduling). Whole batches, because a vector's last bits depend on the batch it is computed
in (its padded length and size choose the kernels): a rank that runs the same batches gives the same bits. Padded
tokens, because they are what a forward pass costs (the count of texts or of characters is not): with many batches
of similar size the ranks end within about one batch of an even split. The batches of a text longer than the
model's maximum, cut into windows, stay together on one rank. To plan, each rank tokenizes 1/W of the texts and the
token counts are all-gathered (N ints); each rank then tokenizes the texts of its batches again to embed them.

Writing. Rank 0 creates the output's temporary beside ``out_path`` (named as :mod:`ctxemb.core.atomic` names them)
with its ``.npy`` header and full size. Every rank checks that it sees that very file, so across machines
``out_path`` must be on a filesystem all ranks share; each then writes its rows in place with positioned writes
(``os.pwrite``, not through an mmap, whose page-sized write-backs could overwrite a neighbour's rows on a network
filesystem), fsyncs, and reports a checksum of its rows. Rank 0 reads the file back, checks every rank's checksum,
and renames the temporary to ``out_path``. Every step's outcome is shared by all ranks
(:func:`~ctxemb.runtime.distributed.call_on_every_rank`): a failure on any rank raises on all of them, nothing
appears at ``out_path`` (a file already there is left as it was) and the temporary is deleted. A rank that fails
while the others are encoding leaves a marker beside the temporary that stops them after their current batch.

Threads. :func:`~ctxemb.runtime.distributed.init_distributed` gives each of P processes on a machine cores / P torch
threads. The bitwise guarantee holds for the same number of threads per process as the one process had (``--threads``
on the command line): a BLAS library may pick another summation order for another thread count.

Shapes: N texts, H the vector size (``embedder.sentence_dim(...)``), W processes (the world size).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ctxemb.core.validation import check_bool, check_choice, check_int, check_string_batch, decode_utf8
from ctxemb.embedding.embedder import Embedder, PlannedBatch
from ctxemb.embedding.st_format import SENTENCE_POOLINGS
from ctxemb.core.atomic import atomic_path
from ctxemb.models.tokenization import check_no_surrogates, check_texts
from ctxemb.runtime.distributed import DistributedContext, call_on_every_rank, distributed_session

logger = logging.getLogger(__name__)

_TOKENIZE_BLOCK = 4096  # texts tokenized at once to count tokens (only the counts are kept)
_READBACK_BYTES = 1 << 26  # rows rank 0 checks at once when it reads the output back


@dataclass(frozen=True)
class CorpusEmbedding:
    """What :func:`embed_corpus_to_file` wrote.

    Attributes:
        path: the ``.npy`` file: (N, H) float32, row i the vector of text i.
        num_texts: N.
        dim: H.
        world_size: W, the number of processes that wrote it.
        texts_per_rank: how many texts each rank embedded (a text split across batches counts once per rank).
        padded_tokens_per_rank: the padded tokens of each rank's batches (what the shards were balanced on).
        seconds: wall time of the call on this rank.
    """

    path: Path
    num_texts: int
    dim: int
    world_size: int
    texts_per_rank: tuple[int, ...]
    padded_tokens_per_rank: tuple[int, ...]
    seconds: float

    def load(self, mmap_mode: str | None = "r") -> np.ndarray:
        """The (N, H) vectors, memory-mapped read-only by default."""
        return np.load(self.path, mmap_mode=mmap_mode)


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """The texts of a UTF-8 file, one per line.

    Only ``\\n`` ends a line (a ``\\r`` before it is dropped, as is a byte-order mark at the start), so the texts are
    the file's lines as ``wc -l`` counts them; a line is otherwise kept as it is. A last line without ``\\n`` counts.

    Raises:
        FileNotFoundError: no such file. IsADirectoryError: ``path`` is a directory.
        ValueError: the file is not UTF-8 (:class:`~ctxemb.core.validation.CorruptFileError`, naming the line), has no
            line, or a line is empty or only whitespace, or holds a lone surrogate (the message names the line,
            1-based).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"the texts file {path} is a directory; expected a file with one text per line")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"texts file not found: {path}") from None
    lines = decode_utf8(data, path, "texts file").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's last line ends with "\n"
    if not lines:
        raise ValueError(f"the texts file {path} is empty; expected one text per line")
    texts = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            raise ValueError(f"line {number} of {path} is empty{' (only whitespace)' if line else ''}; expected one "
                             "text per line, none empty (remove the line: row i of the output is the text of line i+1)")
        check_no_surrogates(line, f"line {number} of {path}")
        texts.append(line)
    return texts


def embed_corpus_to_file(embedder: Embedder, texts: Sequence[str] | os.PathLike, out_path: str | os.PathLike, *,
                         pooling: str = "mean", normalize: bool = False, layers: Sequence[int] | str | None = None,
                         layer_pooling: str | None = None, layer_weights: Sequence[float] | None = None,
                         batch_size: int | None = None, overwrite: bool = False, show_progress_bar: bool = True,
                         context: DistributedContext | None = None) -> CorpusEmbedding:
    """Sentence vectors of N texts into one (N, H) float32 ``.npy`` file, in the caller's order; under torchrun each
    rank embeds a shard (see the module docstring), in a plain script the one process embeds all of them.

    Row i equals, bit for bit, ``embedder.embed_sentences(texts, ...)[i]`` with the same options, for any number of
    processes running with the same number of threads each. Every rank must call this with the same arguments (the
    same texts, the same model and options, the same ``out_path``): that is checked, and so is that every rank sees
    the output file the others write.

    Args:
        embedder: the :class:`~ctxemb.embedding.embedder.Embedder` (on each rank its own copy of the same model).
        texts: N strings, or a ``pathlib.Path`` to a UTF-8 file of one text per line (:func:`read_text_lines`); a
            single ``str`` is refused (wrap a text in a list; pass a file's name as a Path).
        out_path: the ``.npy`` file to write; its folder must exist (across machines: on a shared filesystem).
        pooling, normalize, layers, layer_pooling, layer_weights, batch_size: as in
            :meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences` (hidden-state indices: 0 = embedding output, -1 = last
            layer).
        overwrite: replace a file already at ``out_path`` (only once the new one is complete).
        show_progress_bar: a progress bar over rank 0's texts (the other ranks show none).
        context: the process's :class:`~ctxemb.runtime.distributed.DistributedContext` if the caller set up the
            process group; None reads torchrun's environment, joins (and afterwards leaves) the process group of a
            torchrun run, and is a single process without one.

    Returns:
        A :class:`CorpusEmbedding` (``.load()`` maps the file).

    Raises:
        TypeError, ValueError: a bad argument or text (the message names it: ``texts[i]``, or the file's line), the
            texts, model or options differ between ranks.
        FileNotFoundError: the folder of ``out_path`` or the texts file does not exist, or a rank does not see the
            file rank 0 created (the output is not on a shared filesystem).
        FileExistsError: ``out_path`` exists and ``overwrite`` is False. IsADirectoryError: it is a directory.
        RuntimeError: (on the ranks where nothing failed) another rank failed; the message names it and its error.
    """
    started = time.perf_counter()
    if not isinstance(embedder, Embedder):
        raise TypeError(f"embedder must be a ctxemb Embedder (see Embedder.from_pretrained), got "
                        f"{type(embedder).__name__}")
    if context is not None and not isinstance(context, DistributedContext):
        raise TypeError(f"context must be a DistributedContext or None, got {type(context).__name__}")
    with contextlib.ExitStack() as session:
        ctx = context if context is not None else session.enter_context(
            distributed_session(next(embedder.encoder.parameters()).device))
        here: dict[str, _Job] = {}  # this rank's job; the ranks share only what identifies it

        def prepare() -> dict:
            here["job"] = _Job.prepare(embedder, texts, out_path, pooling=pooling, normalize=normalize,
                                       layers=layers, layer_pooling=layer_pooling, layer_weights=layer_weights,
                                       batch_size=batch_size, overwrite=overwrite,
                                       show_progress_bar=show_progress_bar)
            return here["job"].identity()

        _check_same_everywhere(call_on_every_rank(prepare, ctx))
        job = here["job"]
        counts = np.concatenate(call_on_every_rank(lambda: job.count_tokens(ctx), ctx)).tolist()
        plan = _deal(batch_units(embedder.plan_sentence_batches(counts, batch_size=job.batch_size)), ctx.world_size)
        if ctx.is_main:
            logger.info("%d texts, %d batches, %d process(es): padded tokens per process %s", len(job.texts),
                        sum(len(units) for units in plan), ctx.world_size, [sum(u.tokens for u in units)
                                                                             for units in plan])
        with contextlib.ExitStack() as output:  # on rank 0: the temporary, deleted if anything below raises
            temp = call_on_every_rank(lambda: job.create(output) if ctx.is_main else None, ctx)[0]
            call_on_every_rank(lambda: job.check_visible(temp, ctx), ctx)
            sums = call_on_every_rank(lambda: job.write(temp, plan[ctx.rank], ctx), ctx)
            call_on_every_rank(lambda: job.read_back(temp, plan, sums) if ctx.is_main else None, ctx)
            call_on_every_rank(output.close if ctx.is_main else lambda: None, ctx)  # the rename to out_path
    return CorpusEmbedding(
        path=job.out_path, num_texts=len(job.texts), dim=job.dim, world_size=ctx.world_size,
        texts_per_rank=tuple(sum(len(u.texts) for u in units) for units in plan),
        padded_tokens_per_rank=tuple(sum(u.tokens for u in units) for units in plan),
        seconds=time.perf_counter() - started)


@dataclass(frozen=True)
class _Unit:
    """Batches of the plan that one rank runs together: one batch, or the batches that share a text cut into windows.

    Attributes:
        texts: the texts' indices, ascending (the order :meth:`Embedder.embed_sentences` is given them in).
        tokens: padded tokens of its batches.
        order: the plan's index of its first batch (ranks run their units in the plan's order: longest first).
    """

    texts: tuple[int, ...]
    tokens: int
    order: int


def batch_units(batches: Sequence[PlannedBatch]) -> list[_Unit]:
    """Group the batches that share a text (a long text's windows) so that one rank runs all of them."""
    parent = list(range(len(batches)))

    def root(b: int) -> int:
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        return b

    if batches:  # only a text cut into windows is in several batches: find those few without a dict of all N
        text_ids = np.concatenate([np.asarray(b.texts, dtype=np.int64) for b in batches])
        batch_ids = np.repeat(np.arange(len(batches)), [len(b.texts) for b in batches])
        order = np.argsort(text_ids, kind="stable")
        text_ids, batch_ids = text_ids[order], batch_ids[order]
        for k in np.flatnonzero(text_ids[1:] == text_ids[:-1]):
            a, b = root(int(batch_ids[k])), root(int(batch_ids[k + 1]))
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for b in range(len(batches)):
        groups.setdefault(root(b), []).append(b)
    return [_Unit(tuple(sorted({t for b in members for t in batches[b].texts})),
                  sum(batches[b].padded_tokens for b in members), members[0])
            for members in groups.values()]


def _deal(units: Sequence[_Unit], world_size: int) -> list[list[_Unit]]:
    """Each rank's units: largest first, each to the rank with the fewest padded tokens so far (ties: the lower
    rank), then in the plan's order. The same on every rank (it depends on the plan only)."""
    loads = [0] * world_size
    shards: list[list[_Unit]] = [[] for _ in range(world_size)]
    for unit in sorted(units, key=lambda u: (-u.tokens, u.order)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        loads[rank] += unit.tokens
        shards[rank].append(unit)
    return [sorted(shard, key=lambda u: u.order) for shard in shards]


def _check_same_everywhere(identities: Sequence[dict]) -> None:
    """Raise (on every rank alike: they all hold the same list) if a rank was called with other texts, model,
    options or output than rank 0."""
    first = identities[0]
    for rank, other in enumerate(identities[1:], start=1):
        for key, value in first.items():
            if key != "host" and other[key] != value:
                raise ValueError(f"rank {rank} (on {other['host']}) was called with other {key} than rank 0 (on "
                                 f"{first['host']}): {other[key]!r} vs {value!r}; every rank must embed the same texts "
                                 "with the same model and options into the same out_path")


def _check_out_path(out_path, overwrite: bool) -> Path:
    if not isinstance(out_path, (str, os.PathLike)):
        raise TypeError(f"out_path must be a path, got {type(out_path).__name__}")
    out = Path(out_path)
    if out.suffix != ".npy":
        raise ValueError(f"out_path must end in .npy (the file is a NumPy array), got {out}")
    if out.is_dir():
        raise IsADirectoryError(f"out_path {out} is a directory; expected a .npy file to write")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"out_path {out}: the folder {out.parent} does not exist")
    if os.path.lexists(out) and not overwrite:
        raise FileExistsError(f"out_path {out} exists; pass overwrite=True (ctxemb embed --overwrite) to replace it")
    return out


def text_list(texts) -> tuple[list[str], Path | None]:
    """The texts, checked, and the file they came from (None for a list)."""
    if isinstance(texts, os.PathLike):
        return read_text_lines(texts), Path(texts)
    if isinstance(texts, (dict, set, frozenset)):  # unordered: row i would not be text i
        raise TypeError(f"texts must be a list of str or a pathlib.Path, got {type(texts).__name__}")
    texts = check_string_batch(texts, "texts")
    check_texts(texts, "texts")  # also refuses empty and whitespace-only texts
    return texts, None


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 (wrapping): the same numbers on every machine and NumPy version."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _checksum(rows: np.ndarray, index: np.ndarray) -> int:
    """Sum mod 2**64 over rows of (the row's bit patterns weighted by fixed 64-bit numbers) x (an odd number made from
    its index): a lost, stale or misplaced row changes it (but for a 2**-64 chance); the order of rows does not."""
    bits = np.ascontiguousarray(rows, dtype=np.float32).view(np.uint32).astype(np.uint64)  # (n, H)
    weights = _mix64(np.arange(rows.shape[1], dtype=np.uint64))
    per_row = (bits @ weights) * (_mix64(index.astype(np.uint64) + np.uint64(1 << 40)) | np.uint64(1))
    return int(per_row.sum(dtype=np.uint64))


def _abort_marker(temp: str | Path) -> Path:
    return Path(str(temp) + ".abort")


def _npy_data_offset(path: str | Path, shape: tuple[int, int]) -> int:
    """Where the rows start in the ``.npy`` file at ``path``, after checking its header: float32, C order, ``shape``."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        got_shape, fortran, dtype = read_header(f)
        offset = f.tell()
    if tuple(got_shape) != shape or fortran or dtype != np.dtype(np.float32):
        raise ValueError(f"{path} holds a {got_shape} {dtype} array, not the {shape} float32 one rank 0 created")
    return offset


def _pwrite_rows(fd: int, rows: np.ndarray, index: np.ndarray, offset: int) -> None:
    """Write ``rows[k]`` at row ``index[k]`` of the file, one positioned write per run of consecutive indices."""
    row_bytes = rows.shape[1] * 4
    order = np.argsort(index, kind="stable")
    rows, index = np.ascontiguousarray(rows[order], dtype=np.float32), index[order]
    breaks = np.flatnonzero(np.diff(index) != 1) + 1
    for lo, hi in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(index)]])):
        data = memoryview(rows[lo:hi]).cast("B")
        position = offset + int(index[lo]) * row_bytes
        while data:  # a regular file takes it all at once; loop for the filesystems that may not
            written = os.pwrite(fd, data, position)
            data, position = data[written:], position + written


@dataclass
class _Job:
    """One rank's part of :func:`embed_corpus_to_file`, every argument checked."""

    embedder: Embedder
    texts: list[str]
    source: Path | None
    out_path: Path
    dim: int
    options: dict
    batch_size: int
    show_progress_bar: bool
    offset: int = 0

    @classmethod
    def prepare(cls, embedder: Embedder, texts, out_path, *, pooling, normalize, layers, layer_pooling,
                layer_weights, batch_size, overwrite, show_progress_bar) -> "_Job":
        check_choice(pooling, "pooling", SENTENCE_POOLINGS)
        check_bool(normalize, "normalize")
        check_bool(overwrite, "overwrite")
        check_bool(show_progress_bar, "show_progress_bar")
        batch_size = embedder.batch_size if batch_size is None else check_int(batch_size, "batch_size", low=1)
        dim = embedder.sentence_dim(layers=layers, layer_pooling=layer_pooling, layer_weights=layer_weights,
                                    pooling=pooling)
        out = _check_out_path(out_path, overwrite)
        texts, source = text_list(texts)
        options = dict(pooling=pooling, normalize=normalize, layers=layers, layer_pooling=layer_pooling,
                       layer_weights=layer_weights, batch_size=batch_size)
        return cls(embedder, texts, source, out, dim, options, batch_size, show_progress_bar)

    def identity(self) -> dict:
        """What must be the same on every rank (and the host, for messages)."""
        digest = hashlib.blake2b(digest_size=16)
        for t in self.texts:
            data = t.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        options = {k: (list(v) if isinstance(v, (tuple, list)) else v) for k, v in self.options.items()}
        return {"host": socket.gethostname(), "texts": f"{len(self.texts)} texts, hash {digest.hexdigest()}",
                "options": options, "out_path": os.path.abspath(self.out_path),
                "embedder configuration": self.embedder.config.to_dict(),
                "model weights (fingerprint)": self.embedder.fingerprint,
                "max_tokens_per_batch": self.embedder.max_tokens_per_batch,
                "tokenizer max_length": self.embedder.tokenizer.max_length}

    def count_tokens(self, ctx: DistributedContext) -> np.ndarray:
        """The content-token counts of this rank's 1/W of the texts (a contiguous block)."""
        n = len(self.texts)
        lo, hi = n * ctx.rank // ctx.world_size, n * (ctx.rank + 1) // ctx.world_size
        counts = []
        try:
            for a in range(lo, hi, _TOKENIZE_BLOCK):
                b = min(hi, a + _TOKENIZE_BLOCK)
                counts.extend(len(item) for item in self.embedder.tokenizer.tokenize(self.texts[a:b], first_index=a))
        except ValueError as e:
            if self.source is None:
                raise
            raise ValueError(f"{self.source}: {e} (texts[i] is line i + 1)") from None
        return np.asarray(counts, dtype=np.int64)

    def create(self, output: contextlib.ExitStack) -> str:
        """Rank 0: the temporary beside ``out_path`` with the header and full size; ``output`` deletes it on an
        error and renames it ``out_path`` when closed."""
        temp = output.enter_context(atomic_path(self.out_path))
        output.callback(_abort_marker(temp).unlink, missing_ok=True)
        header = np.lib.format.open_memmap(temp, mode="w+", dtype=np.float32, shape=(len(self.texts), self.dim))
        header.flush()
        del header
        return str(temp)

    def check_visible(self, temp: str, ctx: DistributedContext) -> None:
        try:
            self.offset = _npy_data_offset(temp, (len(self.texts), self.dim))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"rank {ctx.rank} (on {socket.gethostname()}) does not see {temp}, which rank 0 created beside "
                f"{self.out_path}: the output must be on a filesystem all ranks share, at the same path on every "
                "machine (NFS, Lustre, GPFS...)") from None

    def write(self, temp: str, units: Sequence[_Unit], ctx: DistributedContext) -> int | None:
        """Embed this rank's units and write their rows in place; returns their checksum (None: stopped because
        another rank failed)."""
        from tqdm.auto import tqdm

        marker = _abort_marker(temp)
        total = 0
        bar = tqdm(total=sum(len(u.texts) for u in units), desc="embedding", unit="text",
                   disable=not (self.show_progress_bar and ctx.is_main))
        fd = os.open(temp, os.O_RDWR | getattr(os, "O_BINARY", 0))
        try:
            for unit in units:
                if ctx.is_distributed and marker.exists():
                    return None
                vectors = self.embedder.embed_sentences([self.texts[i] for i in unit.texts],
                                                        show_progress_bar=False, **self.options)
                index = np.asarray(unit.texts, dtype=np.int64)
                _pwrite_rows(fd, vectors, index, self.offset)
                total = (total + _checksum(vectors, index)) % (1 << 64)
                bar.update(len(unit.texts))
            os.fsync(fd)
        except Exception:
            if ctx.is_distributed:
                with contextlib.suppress(OSError):
                    marker.touch()
            raise
        finally:
            os.close(fd)
            bar.close()
        return total

    def read_back(self, temp: str, plan: Sequence[Sequence[_Unit]], sums: Sequence[int | None]) -> None:
        """Rank 0: check that the file holds every rank's rows, as their checksums say."""
        if any(s is None for s in sums):
            raise RuntimeError(f"rank(s) {[r for r, s in enumerate(sums) if s is None]} stopped early although no "
                               "rank reported a failure")
        owner = np.empty(len(self.texts), dtype=np.int32)
        for rank, units in enumerate(plan):
            for unit in units:
                owner[list(unit.texts)] = rank
        rows = np.load(temp, mmap_mode="r")
        got = [0] * len(plan)
        step = max(1, _READBACK_BYTES // (4 * self.dim))
        for a in range(0, len(self.texts), step):
            block = np.asarray(rows[a:a + step])
            index = np.arange(a, a + len(block), dtype=np.int64)
            for rank in range(len(plan)):
                mine = owner[a:a + len(block)] == rank
                got[rank] = (got[rank] + _checksum(block[mine], index[mine])) % (1 << 64)
        del rows
        bad = [rank for rank, (g, s) in enumerate(zip(got, sums)) if g != s]
        if bad:
            raise RuntimeError(f"the rows written by rank(s) {bad} are not (all) in {temp} as rank 0 reads it back: "
                               "the output must be on a filesystem all ranks share, where what one machine writes "
                               "and fsyncs is what the others read")
