"""An index from vector shards (what :func:`~ctxemb.embedding.ray_corpus.embed_corpus_ray` writes), built as the
one-process build of the same vectors is, with Ray for the part that spreads over shards.

    embed_corpus_ray(embedder, Path("texts.txt"), "shards", num_actors=8)     # the vectors, on the cluster
    index = build_index_ray("shards", "index", params=IVFPQParams(nlist=4096))
    query_sentences(index, embedder, ["a river flooded its banks"], k=10)

- Flat and HNSW: the driver reads the shards into one (N, H) array and adds it as
  :func:`~ctxemb.search.text.build_sentence_index` adds the vectors it embedded (the index holds every vector in
  the driver's memory anyway), then saves it to ``index_dir``.
- IVF-PQ: the sharded build of :mod:`ctxemb.search.sharded`. The driver trains the quantizer on a sample drawn from
  every shard's file (:func:`~ctxemb.search.sharded.train_ivfpq`: the sample one array of all the rows would give),
  each vector shard becomes a partial in a Ray task (:func:`~ctxemb.search.sharded.add_shard`, in a work directory
  beside ``index_dir``; a task whose worker dies is run again and rewrites its partial whole), and the driver merges
  the partials into an on-disk index at ``index_dir`` (:func:`~ctxemb.search.sharded.merge_shards`) and deletes the
  work directory. The merged index answers every search as the one-process build does: the same ids, the same
  scores.

Either way the index records what made the vectors, read from the shards' manifest: the embedder configuration
(with the per-call layer choice) and the recipe :func:`~ctxemb.search.text.build_sentence_index` records for the same
options, so :func:`~ctxemb.search.text.query_sentences` embeds queries alike and refuses another model. Vectors made
with options that recipe cannot express (``normalize=True``, ``layer_weights``, ``layers="all"``, a pooling other
than mean or CLS) get a recipe of mode ``"vectors"``, which ``query_sentences`` refuses; ``search`` on query vectors
made with the same options works.

Ids are the caller's, by default the rows' positions (``"0"``, ``"1"``, ...) as ``build_sentence_index`` and
``ctxemb index build`` give them. Resumption belongs to the shards (the embedding is the costly part); this step
runs whole each time.

Shape legend: N rows, H dimensions.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from ctxemb.core.validation import check_bool, check_int
from ctxemb.embedding.vector_shards import VectorShards, read_vector_shards
from ctxemb.runtime.ray_session import connect, import_ray
from ctxemb.search.index import SemanticIndex
from ctxemb.search.inputs import (
    apply_layer_overrides,
    check_id_list,
    check_metadata,
    check_spec,
    preview,
)
from ctxemb.search.params import IndexKind, IndexParams, IVFPQParams, Metric
from ctxemb.search.sharded import add_shard, merge_shards, train_ivfpq
from ctxemb.search.text import SENTENCE_DEFAULTS_VERSION

logger = logging.getLogger(__name__)

_ADD_RETRIES = 3  # runs of an add_shard task after its worker died


def shard_recipe(shards: VectorShards) -> dict:
    """The recipe an index of these shards records: ``build_sentence_index``'s for the same options where it can
    express them, else one of mode ``"vectors"`` holding the options (see the module docstring)."""
    options = shards.job.get("options", {})
    layers = options.get("layers")
    if (options.get("pooling") in ("mean", "cls") and options.get("normalize") is False
            and options.get("layer_weights") is None and (layers is None or isinstance(layers, list))):
        return {"mode": "sentences", "pooling": options["pooling"], "layers": layers,
                "layer_pooling": options.get("layer_pooling"), "sentence_defaults": SENTENCE_DEFAULTS_VERSION}
    return {"mode": "vectors", **{k: v for k, v in options.items() if k != "batch_size"}}


def _check_ids(ids, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    ids = check_id_list(ids)
    if len(ids) != n:
        raise ValueError("ids has %d entries but the shards hold %d rows" % (len(ids), n))
    if len(set(ids)) != n:
        seen, repeated = set(), []
        for i in ids:
            (repeated.append if i in seen else seen.add)(i)
        raise ValueError("ids must be unique; repeated: %s" % preview(repeated))
    return ids


def build_index_ray(shards, index_dir: str | os.PathLike, *,
                    ids: Sequence[str] | None = None, metadata: Sequence[Mapping | None] | None = None,
                    kind: IndexKind | None = None, metric: Metric = "cosine", params: IndexParams | None = None,
                    cpus_per_task: int = 1, overwrite: bool = False, address: str | None = None,
                    show_progress_bar: bool = True) -> SemanticIndex:
    """Build a :class:`~ctxemb.search.index.SemanticIndex` from a complete shard directory and save it to
    ``index_dir`` (see the module docstring).

    Args:
        shards: the shard directory, its :class:`~ctxemb.embedding.vector_shards.VectorShards`, or what
            :func:`~ctxemb.embedding.ray_corpus.embed_corpus_ray` returned.
        index_dir: where the index is saved (for IVF-PQ, on disk: its lists stay there); on a filesystem every Ray
            node shares when the kind is IVF-PQ (the work directory of the partials goes beside it).
        ids: N unique string ids, row i's at i; default ``"0"``, ``"1"``, ...
        metadata: N dicts (or None entries) stored with the items, or None.
        kind, metric, params: as for ``SemanticIndex`` (kind None: that of ``params``, flat without them). IVF-PQ
            parameters get ``on_disk=True``.
        cpus_per_task: CPUs each IVF-PQ add task reserves (and its FAISS threads).
        overwrite: replace an index already at ``index_dir`` (only once the new one is complete).
        address: the Ray cluster to join for IVF-PQ when this process is not connected yet
            (:func:`ctxemb.runtime.ray_session.connect`).
        show_progress_bar: progress bars of the adds in the driver.

    Returns:
        The index, as saved at ``index_dir``.

    Raises:
        FileNotFoundError: ``shards`` is not a shard directory, or shards are missing (named: the embedding did not
            finish; run it again).
        FileExistsError: ``index_dir`` exists and ``overwrite`` is False.
        TypeError, ValueError: bad ids (count, repeated, not strings), metadata, kind, metric or parameters; an
            IVF-PQ build with fewer rows than its training needs.
        ImportError: an IVF-PQ build without Ray (``pip install "ctxemb[ray]"``).
    """
    started = time.perf_counter()
    if not isinstance(shards, VectorShards):
        directory = getattr(shards, "directory", shards)  # a RayCorpusEmbedding names its directory
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"shards must be a shard directory, VectorShards or the RayCorpusEmbedding of "
                            f"embed_corpus_ray, got {type(shards).__name__}")
        shards = read_vector_shards(directory)
    if not isinstance(index_dir, (str, os.PathLike)):
        raise TypeError(f"index_dir must be a path, got {type(index_dir).__name__}")
    check_bool(overwrite, "overwrite")
    check_bool(show_progress_bar, "show_progress_bar")
    cpus_per_task = check_int(cpus_per_task, "cpus_per_task", low=1)
    n, dim = shards.layout.num_rows, shards.layout.dim
    _, kind, params = check_spec(dim, kind, metric, params)
    ids = _check_ids(ids, n)
    check_metadata(metadata, n)  # fail before any work
    metadata = None if metadata is None else list(metadata)
    index_dir = Path(index_dir)
    if os.path.lexists(index_dir) and not overwrite:
        raise FileExistsError(f"index_dir {index_dir} exists; pass overwrite=True to replace it")
    shards.check_complete()
    recipe = shard_recipe(shards)
    config = apply_layer_overrides(shards.job.get("embedder configuration"), recipe)
    if kind != "ivfpq":
        index = SemanticIndex(dim, kind=kind, metric=metric, params=params, embedder_config=config, recipe=recipe)
        index.add(ids, shards.load(), metadata, show_progress_bar=show_progress_bar)
        index.save(index_dir)
    else:
        _build_ivfpq(shards, index_dir, ids, metadata, metric, params, config, recipe, cpus_per_task, overwrite,
                     address)
        index = SemanticIndex.load(index_dir)
    logger.info("%s index of %d vectors from %s built in %.1f s at %s", kind, n, shards.directory,
                time.perf_counter() - started, index_dir)
    return index


def _build_ivfpq(shards: VectorShards, index_dir: Path, ids: list[str], metadata: list | None, metric: Metric,
                 params: IVFPQParams, config: dict | None, recipe: dict, cpus_per_task: int, overwrite: bool,
                 address: str | None) -> None:
    """Train in the driver, add every shard in a Ray task, merge in the driver (see the module docstring)."""
    import_ray()
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.ray-build-", dir=index_dir.parent))
    try:
        quantizer = train_ivfpq(shards.vector_files, work / "quantizer", params=params, metric=metric,
                                n_total=shards.layout.num_rows, embedder_config=config, recipe=recipe)
        ray = connect(address)
        add = ray.remote(num_cpus=cpus_per_task, max_retries=_ADD_RETRIES)(_add_partial)
        refs = []
        for k, vectors in enumerate(shards.vector_files):
            first, end = shards.layout.bounds(k)
            refs.append(add.remote(str(quantizer.directory), str(work / "partials" / vectors.parent.name),
                                   ids[first:end], str(vectors), None if metadata is None else metadata[first:end],
                                   k, cpus_per_task))
        ray.get(refs)
        merge_shards(quantizer, work / "partials", index_dir, overwrite=overwrite)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _add_partial(quantizer_dir: str, partial_dir: str, ids: list[str], vectors: str, metadata: list | None,
                 shard_index: int, threads: int) -> int:
    """A Ray task: one vector shard into its partial (rewritten whole when the task runs again)."""
    import faiss

    faiss.omp_set_num_threads(threads)
    add_shard(quantizer_dir, partial_dir, ids, vectors, metadata, shard_index=shard_index, overwrite=True,
              lock_timeout=60.0, show_progress_bar=False)
    return shard_index
