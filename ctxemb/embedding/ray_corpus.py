"""Sentence vectors of a corpus on a Ray cluster: texts, cut into shards of rows, embedded by a pool of actors that
each hold an Embedder, written as vector shards (:mod:`ctxemb.embedding.vector_shards`) on a shared filesystem.

    result = embed_corpus_ray(embedder, Path("texts.txt"), "shards", num_actors=8)   # a driver on the cluster
    result.load()                                     # (N, H): row i the vector of text i
    build_index_ray("shards", "index")                # ctxemb.search.ray_build: an index from the shards

The pipeline is a Ray Data dataset with one item per shard not yet written (its rows and the texts its batches need),
mapped by a pool of ``num_actors`` actors (``ray.data.ActorPoolStrategy``). An actor embeds its shard's rows and
writes the shard itself: vectors never pass through the driver, which gets back one small record per shard.

The one-process vectors. Row i is, bit for bit, row i of :func:`~ctxemb.embedding.corpus.embed_corpus_to_file` (and
of :meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences` over all the texts) with the same options and the
same number of threads per process, because an actor runs the batches the one-process plan runs. That plan cuts the
texts into chunks of 4,096 consecutive texts and batches each chunk apart, sorted by length
(:meth:`~ctxemb.embedding.embedder.Embedder.plan_sentence_batches`). An actor plans the chunks its shard overlaps
and runs every batch that holds one of its rows (with the batches that share a long text's windows: the units of
the torchrun build), each through ``embed_sentences`` on its texts alone, which makes that very batch again; rows
of those batches outside the shard are dropped. With ``shard_rows`` a multiple of 4,096 (the default is 4,096) a
shard is whole chunks and no text is embedded twice; smaller shards run up to 4,096 / ``shard_rows`` times the
forward passes.

Faults. Ray Data replaces an actor that dies (its process killed, its machine lost) and runs its item again
(``max_restarts`` and ``max_task_retries`` -1, Ray Data's defaults for an actor pool). The shard is then written
again whole, under a temporary name renamed into place, so no row is lost or written twice. A job that stopped (the
driver killed, the cluster lost) resumes at shard granularity: call again with the same arguments and ``out_dir``,
and only the shards not in place are embedded.

What the nodes need: ctxemb, and the model where the embedder was loaded from (``embedder.config.model``: a name
each node resolves, or a directory on a shared filesystem or at the same path on every node); an actor loads it
and refuses weights whose fingerprint differs from the driver's embedder's. ``out_dir`` must be on a filesystem
the driver and every node share. The driver reads and checks the texts (a bad line is named before any work
starts) and holds them, not their vectors; each shard's texts reach its actor through Ray's object store.

Shapes: N texts, H the vector size, n the rows of one shard.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ctxemb.core.locks import DirectoryLock, lock_file_inside
from ctxemb.core.validation import check_bool, check_choice, check_int
from ctxemb.embedding.config import EmbedderConfig
from ctxemb.embedding.corpus import text_list, batch_units, read_text_lines
from ctxemb.embedding.embedder import TEXTS_PER_PLAN, Embedder
from ctxemb.embedding.st_format import SENTENCE_POOLINGS, encoder_dir
from ctxemb.embedding.vector_shards import (
    ShardLayout,
    VectorShards,
    prepare_shard_directory,
    read_vector_shards,
    shard_is_complete,
    shard_name,
    write_shard,
)
from ctxemb.modeling.loading import load_model
from ctxemb.modeling.transformers_backend import TransformersEncoder
from ctxemb.runtime.ray_session import connect, import_ray, node_id

logger = logging.getLogger(__name__)

#: Rows per shard by default: one chunk of the one-process plan, so no text is embedded twice.
DEFAULT_SHARD_ROWS = TEXTS_PER_PLAN
#: Tests only: a folder where a file named ``shard-0000k`` makes the actor that writes shard k kill itself
#: (SIGKILL) once, after the shard's files are written and before they are renamed into place.
KILL_ENV = "CTXEMB_TEST_RAY_KILL_DIR"


@dataclass(frozen=True)
class RayCorpusEmbedding:
    """What :func:`embed_corpus_ray` wrote.

    Attributes:
        directory: the shard directory.
        num_texts: N.
        dim: H.
        num_shards: the shards of the directory.
        embedded: the shards this call embedded (a rerun: only those that were missing).
        writers: shard -> (Ray node id, process id) of the actor that wrote it, for the shards of ``embedded``.
        seconds: wall time of the call.
    """

    directory: Path
    num_texts: int
    dim: int
    num_shards: int
    embedded: tuple[int, ...]
    writers: dict[int, tuple[str, int]] = field(repr=False)
    seconds: float

    def shards(self) -> VectorShards:
        """The :class:`~ctxemb.embedding.vector_shards.VectorShards` of the directory."""
        return read_vector_shards(self.directory)

    def load(self) -> np.ndarray:
        """The (N, H) vectors, concatenated from the shards into a new array."""
        return self.shards().load()


def _read_texts(texts) -> list[str]:
    """The texts: a list of str, a Path to a file of one text per line, or a list of such Paths (concatenated)."""
    if isinstance(texts, os.PathLike):
        return read_text_lines(texts)
    if isinstance(texts, (list, tuple)) and texts and all(isinstance(t, os.PathLike) for t in texts):
        out: list[str] = []
        for path in texts:
            out.extend(read_text_lines(path))
        return out
    if isinstance(texts, (list, tuple)) and any(isinstance(t, os.PathLike) for t in texts):
        raise TypeError("texts mixes paths and strings: give a list of texts, or a list of Paths to files of one "
                        "text per line")
    return text_list(texts)[0]


def _job(embedder: Embedder, texts: Sequence[str], options: dict) -> dict:
    """What makes the vectors: equal jobs write equal shards (recorded in the shard directory's manifest)."""
    digest = hashlib.blake2b(digest_size=16)
    for t in texts:
        data = t.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return {"texts": f"{len(texts)} texts, hash {digest.hexdigest()}", "options": options,
            "embedder configuration": embedder.config.to_dict(),
            "model weights (fingerprint)": embedder.fingerprint,
            "max_tokens_per_batch": embedder.max_tokens_per_batch,
            "tokenizer max_length": embedder.tokenizer.max_length}


def _model_location(model: str) -> str:
    """The model as the nodes should find it: an existing local directory as an absolute path, a name as it is."""
    return os.path.abspath(model) if os.path.isdir(model) else model


def embed_corpus_ray(embedder: Embedder | str | os.PathLike, texts, out_dir: str | os.PathLike, *,
                     pooling: str = "mean", normalize: bool = False, layers: Sequence[int] | str | None = None,
                     layer_pooling: str | None = None, layer_weights: Sequence[float] | None = None,
                     batch_size: int | None = None, shard_rows: int = DEFAULT_SHARD_ROWS,
                     num_actors: int | None = None, cpus_per_actor: int = 1, gpus_per_actor: float = 0,
                     device: str = "cpu", overwrite: bool = False, address: str | None = None,
                     show_progress_bar: bool = True) -> RayCorpusEmbedding:
    """Sentence vectors of N texts into a directory of vector shards, embedded by a pool of Ray actors (see the
    module docstring); row i is, bit for bit, row i of :func:`~ctxemb.embedding.corpus.embed_corpus_to_file`.

    Args:
        embedder: the :class:`~ctxemb.embedding.embedder.Embedder` (every actor loads the same model, with its
            configuration, batch size and token budget), or a model name or path (loaded with
            ``Embedder.from_pretrained``'s defaults).
        texts: N strings, a ``pathlib.Path`` to a UTF-8 file of one text per line, or a list of such Paths (their
            lines in order); a single ``str`` is refused.
        out_dir: the shard directory (created if missing), on a filesystem the driver and every node share. One that
            holds this job's shards is resumed: only the missing shards are embedded.
        pooling, normalize, layers, layer_pooling, layer_weights, batch_size: as in
            :meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences` (hidden-state indices: 0 = embedding output,
            -1 = last layer).
        shard_rows: rows per shard (the unit of work, of retry and of resumption).
        num_actors: embedding actors (each holds a model); None: as many as the cluster's CPUs hold at
            ``cpus_per_actor`` each. Fewer when fewer shards are missing.
        cpus_per_actor: CPUs each actor reserves on its node, and its torch threads.
        gpus_per_actor: GPUs each actor reserves (with ``device="cuda"``).
        device: where each actor runs its model (bit-for-bit equality with one process is for the CPU).
        overwrite: replace the shards of another job found in ``out_dir``.
        address: the Ray cluster to join when this process is not connected yet (see
            :func:`ctxemb.runtime.ray_session.connect`).
        show_progress_bar: Ray Data's progress bars.

    Returns:
        A :class:`RayCorpusEmbedding` (``.load()`` gives the (N, H) vectors).

    Raises:
        TypeError, ValueError: a bad argument or text (the message names it: ``texts[i]``, or the file's line).
        FileNotFoundError: a texts file does not exist.
        FileExistsError: ``out_dir`` is not empty and holds no shard manifest.
        ValueError: ``out_dir`` holds the shards of another job (other texts, model, options or ``shard_rows``) and
            ``overwrite`` is False; the message names its manifest and what differs.
        ImportError: Ray is not installed (``pip install "ctxemb[ray]"``).
        DirectoryLockedError: another job is writing ``out_dir``.
        RuntimeError: shards are still missing after the pipeline ran.
    """
    started = time.perf_counter()
    if isinstance(embedder, (str, os.PathLike)):
        embedder = Embedder.from_pretrained(embedder)
    if not isinstance(embedder, Embedder):
        raise TypeError(f"embedder must be a ctxemb Embedder (see Embedder.from_pretrained), got "
                        f"{type(embedder).__name__}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a path, got {type(out_dir).__name__}")
    check_choice(pooling, "pooling", SENTENCE_POOLINGS)
    for name, value in (("normalize", normalize), ("overwrite", overwrite), ("show_progress_bar", show_progress_bar)):
        check_bool(value, name)
    batch_size = embedder.batch_size if batch_size is None else check_int(batch_size, "batch_size", low=1)
    shard_rows = check_int(shard_rows, "shard_rows", low=1)
    num_actors = None if num_actors is None else check_int(num_actors, "num_actors", low=1)
    cpus_per_actor = check_int(cpus_per_actor, "cpus_per_actor", low=1)
    if isinstance(gpus_per_actor, bool) or not isinstance(gpus_per_actor, (int, float)) or not gpus_per_actor >= 0:
        raise ValueError(f"gpus_per_actor must be a number >= 0, got {gpus_per_actor!r}")
    if not isinstance(device, str):
        raise TypeError(f"device must be a str (a torch device: 'cpu', 'cuda'), got {type(device).__name__}")
    dim = embedder.sentence_dim(layers=layers, layer_pooling=layer_pooling, layer_weights=layer_weights,
                                pooling=pooling)
    text_list = _read_texts(texts)
    options = dict(pooling=pooling, normalize=normalize, layers=layers if isinstance(layers, str) or layers is None
                   else list(layers), layer_pooling=layer_pooling,
                   layer_weights=None if layer_weights is None else list(layer_weights), batch_size=batch_size)
    layout = ShardLayout(len(text_list), dim, shard_rows)
    job = dict(_job(embedder, text_list, options), device=device)
    ray = import_ray()  # before anything is written: without the extra, nothing changes on disk
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"out_dir {out} is a file; expected a directory for the vector shards")
    out.mkdir(parents=True, exist_ok=True)
    with DirectoryLock(lock_file_inside(out), what=f"the vector shard directory {out}").hold(0.0):
        shards = prepare_shard_directory(out, layout, job, overwrite=overwrite)
        todo = shards.missing()
        logger.info("%d texts in %d shards of %d rows: %d to embed in %s", len(text_list), layout.num_shards,
                    shard_rows, len(todo), out)
        writers: dict[int, tuple[str, int]] = {}
        if todo:
            connect(address)
            if num_actors is None:
                num_actors = max(1, int(ray.cluster_resources().get("CPU", 1) // cpus_per_actor))
            spec = {"device": device, "model": _model_location(embedder.config.model),
                    "backend": "transformers" if isinstance(embedder.encoder, TransformersEncoder) else "native",
                    "config": embedder.config.to_dict(), "batch_size": embedder.batch_size,
                    "max_tokens_per_batch": embedder.max_tokens_per_batch,
                    "sentence_modules": embedder.sentence_modules, "threads": cpus_per_actor,
                    "options": options, "directory": str(out.resolve()), "layout": layout.to_dict(), "job": job}
            writers = _run_pipeline(ray, spec, text_list, layout, todo, min(num_actors, len(todo)),
                                    dict(num_cpus=cpus_per_actor, num_gpus=gpus_per_actor), show_progress_bar)
        missing = shards.missing()
        if missing:
            raise RuntimeError(f"{len(missing)} shard(s) of {out} are missing after the pipeline ran "
                               f"({', '.join(shard_name(k) for k in missing[:10])}); run the call again")
    return RayCorpusEmbedding(directory=out, num_texts=len(text_list), dim=dim, num_shards=layout.num_shards,
                              embedded=tuple(todo), writers=writers, seconds=time.perf_counter() - started)


def _run_pipeline(ray, spec: dict, texts: list[str], layout: ShardLayout, todo: list[int], num_actors: int,
                  resources: dict, show_progress_bar: bool) -> dict[int, tuple[str, int]]:
    """The Ray Data job: one item per shard of ``todo`` (with the texts of the chunks it overlaps), mapped by a
    pool of actors that write the shards; returns shard -> (node id, pid) of its writer."""
    items = []
    for k in todo:
        first, end = layout.bounds(k)
        chunk_first = first // TEXTS_PER_PLAN * TEXTS_PER_PLAN
        chunk_end = min(layout.num_rows, -(-end // TEXTS_PER_PLAN) * TEXTS_PER_PLAN)
        items.append({"shard": k, "chunk_first": chunk_first, "texts": texts[chunk_first:chunk_end]})
    context = ray.data.DataContext.get_current()
    bars = context.enable_progress_bars
    context.enable_progress_bars = show_progress_bar
    try:
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _ShardActor, batch_size=1, batch_format="numpy", fn_constructor_kwargs={"spec": spec},
            compute=ray.data.ActorPoolStrategy(size=num_actors), **resources)
        records = dataset.take_all()
    finally:
        context.enable_progress_bars = bars
    writers = {}
    for r in records:
        if bool(r["written"]):
            writers[int(r["shard"])] = (str(r["node"]), int(r["pid"]))
    logger.info("%d shard(s) written by %d actor(s) on %d node(s)", len(writers),
                len({w[1] for w in writers.values()}), len({w[0] for w in writers.values()}))
    return writers


def _load_embedder(spec: dict) -> Embedder:
    """The driver's embedder, rebuilt in an actor: the same model, configuration (precision already resolved),
    sentence modules, batch size and token budget; refused if the weights differ."""
    model_dir, _ = encoder_dir(spec["model"])
    loaded = load_model(model_dir, device=spec["device"], backend=spec["backend"])
    embedder = Embedder(loaded.encoder, loaded.tokenizer, EmbedderConfig.from_dict(spec["config"]),
                        batch_size=spec["batch_size"], max_tokens_per_batch=spec["max_tokens_per_batch"])
    embedder.sentence_modules = spec["sentence_modules"]
    expected = spec["job"]["model weights (fingerprint)"]
    if embedder.fingerprint != expected:
        raise ValueError(f"the model at {spec['model']} on Ray node {node_id()} holds other weights (fingerprint "
                         f"{embedder.fingerprint}) than the driver's embedder ({expected}): every node must see the "
                         "same model files")
    if embedder.tokenizer.max_length != spec["job"]["tokenizer max_length"]:
        raise ValueError(f"the tokenizer of {spec['model']} on Ray node {node_id()} cuts inputs at "
                         f"{embedder.tokenizer.max_length} tokens, the driver's at "
                         f"{spec['job']['tokenizer max_length']}")
    return embedder


def embed_shard_rows(embedder: Embedder, texts: Sequence[str], chunk_first: int, first: int, end: int,
                     options: dict) -> np.ndarray:
    """The vectors of rows ``[first, end)`` exactly as the one-process plan computes them (see the module docstring).

    Args:
        embedder: the embedder.
        texts: the texts of the plan's chunks that the rows overlap: rows ``[chunk_first, chunk_first + len(texts))``,
            ``chunk_first`` a multiple of the plan's chunk size (4,096).
        chunk_first: the row of ``texts[0]``.
        first, end: the rows wanted, within those of ``texts``.
        options: the keyword arguments of ``embed_sentences`` (``batch_size`` included).

    Returns:
        (end - first, H) float32.
    """
    if chunk_first % TEXTS_PER_PLAN or not chunk_first <= first < end <= chunk_first + len(texts):
        raise ValueError(f"rows [{first}, {end}) are not within the chunk-aligned texts [{chunk_first}, "
                         f"{chunk_first + len(texts)})")
    counts = [len(item) for item in embedder.tokenizer.tokenize(list(texts), first_index=chunk_first)]
    units = batch_units(embedder.plan_sentence_batches(counts, batch_size=options["batch_size"]))
    out: np.ndarray | None = None
    done = np.zeros(end - first, dtype=bool)
    for unit in sorted(units, key=lambda u: u.order):
        rows = np.asarray(unit.texts, dtype=np.int64) + chunk_first
        mine = (rows >= first) & (rows < end)
        if not mine.any():
            continue
        vectors = embedder.embed_sentences([texts[i] for i in unit.texts], show_progress_bar=False, **options)
        if out is None:
            out = np.empty((end - first, vectors.shape[1]), dtype=np.float32)
        out[rows[mine] - first] = vectors[mine]
        done[rows[mine] - first] = True
    if out is None or not done.all():
        raise RuntimeError(f"the plan of rows [{chunk_first}, {chunk_first + len(texts)}) left rows of "
                           f"[{first}, {end}) without a batch")
    return out


def _kill_point(k: int):
    """Tests only (:data:`KILL_ENV`): a callback that SIGKILLs this process once if shard ``k`` is armed."""
    folder = os.environ.get(KILL_ENV)
    if not folder:
        return None

    def maybe_die() -> None:
        try:
            (Path(folder) / shard_name(k)).unlink()  # one process wins the file: the kill happens once
        except FileNotFoundError:
            return
        (Path(folder) / f"killed-{shard_name(k)}").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)

    return maybe_die


class _ShardActor:
    """A Ray Data actor: holds an Embedder; for each item, embeds the shard's rows and writes the shard."""

    def __init__(self, spec: dict):
        import torch

        torch.set_num_threads(spec["threads"])
        self.embedder = _load_embedder(spec)
        self.shards = VectorShards(Path(spec["directory"]), ShardLayout(**spec["layout"]), spec["job"])
        self.options = spec["options"]
        self.node = node_id()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, list] = {"shard": [], "written": [], "node": [], "pid": [], "seconds": []}
        for k, chunk_first, texts in zip(batch["shard"], batch["chunk_first"], batch["texts"]):
            k, started = int(k), time.perf_counter()
            written = not shard_is_complete(self.shards, k)  # a retried item whose first run wrote it: done
            if written:
                first, end = self.shards.layout.bounds(k)
                vectors = embed_shard_rows(self.embedder, [str(t) for t in texts], int(chunk_first), first, end,
                                           self.options)
                write_shard(self.shards, k, vectors, before_commit=_kill_point(k))
            out["shard"].append(k)
            out["written"].append(written)
            out["node"].append(self.node)
            out["pid"].append(os.getpid())
            out["seconds"].append(time.perf_counter() - started)
        return {name: np.asarray(values) for name, values in out.items()}
