"""Ray build benchmark: corpus embedding and index building on a local two-node Ray cluster against one process.

Data: ``--n`` real English sentences (default 20,000) and ``--queries`` more held out as queries, the search
benchmark's sample of the shared corpora (``benchmarks.search.real.sample_real``, seed 0, 5-60 words), embedded by
``--model`` (default all-MiniLM-L6-v2, fp32, mean pooling as ``build_sentence_index`` does). Rows, each timed with
:func:`benchmarks.harness.measure` (``--repeats`` timed runs after ``--warmup`` untimed ones):

1. **one process, 1 thread**: ``embed_corpus_to_file`` then each index (``--kinds``: flat, IVF-PQ on disk) built from
   the array. The reference: the vectors and answers every build must equal.
2. **one process, 2 threads**: the same on every core of a 2-core machine (times only: another thread count may
   change a vector's last bits).
3. **Ray**: a local cluster of two nodes (``ray.cluster_utils.Cluster``: a head and a worker, each its own raylet
   and processes, one CPU each; started once, its start timed apart), ``embed_corpus_ray`` with ``--actors`` actors
   of one thread each into a fresh shard directory (``--shard-rows``), then ``build_index_ray`` for each kind. The
   time includes what every job pays: the actors' start and model loads.

Checks: the Ray vectors equal the reference's bit for bit, and each Ray index answers the queries (k=10) with the
reference index's ids and scores. Overhead: the Ray wall time over the one-process wall time on the same cores
(row 2), minus one, in percent; and over perfect scaling of row 1 (its time divided by the number of actors).

Writes ``benchmarks/results/ray_build.{md,json}`` (``--name``, ``--out``). ``--n 500`` is a smoke run.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import harness

logger = logging.getLogger(__name__)

KINDS = ("flat", "ivfpq")


def _index(kind: str, vectors, ids: list[str], directory: Path):
    """One index of ``vectors`` (IVF-PQ on disk in ``directory``), as the one-process build makes it."""
    from ctxemb.search import IVFPQParams, SemanticIndex

    if kind == "ivfpq":
        index = SemanticIndex(vectors.shape[1], params=IVFPQParams(on_disk=True), directory=directory)
    else:
        index = SemanticIndex(vectors.shape[1], kind=kind)
    index.add(ids, vectors, show_progress_bar=False)
    index.save(directory)
    return index


def _params(kind: str):
    from ctxemb.search import IVFPQParams, make_params

    return IVFPQParams(on_disk=True) if kind == "ivfpq" else make_params(kind)


def one_process(emb, texts: list[str], kinds, work: Path) -> dict:
    """Embed into one .npy and build every index from it; returns the vectors and the indexes."""
    from ctxemb.embedding.corpus import embed_corpus_to_file

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    vectors = embed_corpus_to_file(emb, texts, work / "vectors.npy", show_progress_bar=False).load()
    ids = [str(i) for i in range(len(texts))]
    return {"vectors": vectors, "indexes": {kind: _index(kind, vectors, ids, work / kind) for kind in kinds}}


def with_ray(emb, texts: list[str], kinds, work: Path, args) -> dict:
    """embed_corpus_ray into a fresh shard directory, then build_index_ray for every kind."""
    from ctxemb.embedding.ray_corpus import embed_corpus_ray
    from ctxemb.search.ray_build import build_index_ray

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    embed = harness.Stopwatch()
    result = embed_corpus_ray(emb, texts, work / "shards", shard_rows=args.shard_rows, num_actors=args.actors,
                              show_progress_bar=False)
    embed_s = embed.stop()
    indexes = {kind: build_index_ray(result, work / kind, params=_params(kind), show_progress_bar=False)
               for kind in kinds}
    return {"vectors": result.load(), "indexes": indexes, "embed_s": embed_s,
            "nodes": len({node for node, _ in result.writers.values()}), "shards": result.num_shards}


def _same_answers(a, b, queries) -> dict:
    import numpy as np

    sa, ia = a.search_array(queries, k=10)
    sb, ib = b.search_array(queries, k=10)
    return {"identical_ids": bool(np.array_equal(ia, ib)), "identical_scores": bool(np.array_equal(sa, sb))}


def run(args) -> dict:
    import numpy as np
    import torch

    from benchmarks.search.real import sample_real
    from ctxemb.embedding.embedder import Embedder

    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"--kinds: unknown {unknown}; choose among {list(KINDS)}")
    sample = sample_real(args.n, args.queries, 0, 5, 60)
    texts = sample["collection"]
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="ray_build_", dir=args.tmp))
    import ray
    from ray.cluster_utils import Cluster

    start = harness.Stopwatch()
    node = dict(num_cpus=1, object_store_memory=args.object_store_mb * 2**20)
    cluster = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
    try:
        for _ in range(args.actors - 1):
            cluster.add_node(**node)
        ray.init(address=cluster.address, logging_level="WARNING")
        cluster.wait_for_nodes()
        cluster_s = start.stop()
        torch.set_num_threads(1)
        emb = Embedder.from_pretrained(args.model, precision="fp32")
        queries = emb.embed_sentences(sample["queries"], show_progress_bar=False)
        rows, outputs = {}, {}
        for name, threads, fn in (("one process, 1 thread", 1, lambda: one_process(emb, texts, kinds, work / "p1")),
                                  ("one process, 2 threads", 2, lambda: one_process(emb, texts, kinds, work / "p2")),
                                  ("Ray", 1, lambda: with_ray(emb, texts, kinds, work / "ray", args))):
            torch.set_num_threads(threads)
            timing = harness.measure(fn, repeats=args.repeats, warmup=args.warmup)
            rows[name], outputs[name] = timing, timing.result
            print(f"{name}: {timing.median:.1f} s", flush=True)
        torch.set_num_threads(1)
        ref, fast, got = outputs["one process, 1 thread"], outputs["one process, 2 threads"], outputs["Ray"]
        checks = {"identical_vectors": bool(np.array_equal(got["vectors"], ref["vectors"])),
                  "max_abs_difference_2_threads": float(np.abs(fast["vectors"] - ref["vectors"]).max()),
                  "indexes": {kind: _same_answers(got["indexes"][kind], ref["indexes"][kind], queries)
                              for kind in kinds}}
        one, two, ray_s = (rows[k].median for k in ("one process, 1 thread", "one process, 2 threads", "Ray"))
        return {
            "config": {"n": args.n, "queries": args.queries, "model": args.model, "kinds": kinds,
                       "actors": args.actors, "shard_rows": args.shard_rows, "shards": got["shards"],
                       "nodes_used": got["nodes"], "object_store_mb": args.object_store_mb},
            "cluster_start_s": round(cluster_s, 1),
            "timings": {name: t.to_dict() for name, t in rows.items()},
            "ray_embed_s_last_run": round(got["embed_s"], 1),
            "overhead_vs_same_cores_pct": round(100 * (ray_s / two - 1), 1),
            "overhead_vs_perfect_scaling_pct": round(100 * (ray_s * args.actors / one - 1), 1),
            "checks": checks,
            "environment": {"load_average_start": [round(v, 2) for v in load_start],
                            "load_average_end": [round(v, 2) for v in os.getloadavg()], "ray": ray.__version__},
        }
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)


def markdown(r: dict) -> str:
    cfg, env, checks = r["config"], r["environment"], r["checks"]
    timing_note = harness.timing_note(r["timings"]["Ray"]["repeats"], r["timings"]["Ray"]["warmup"])
    lines = [
        "# Corpus embedding and index builds on Ray",
        "",
        "`python -m benchmarks.ray_build --n %d`: %s real sentences (the search benchmark's sample of the shared "
        "corpora, 5-60 words) embedded by %s (fp32, mean pooling), indexes %s; Ray %s, a local cluster of %d nodes "
        "(one CPU each, separate processes) running up to %d actors of one thread, %d shard(s) of %s rows, written by "
        "actors on %d node(s). Times: %s. Load average at the start %s, at the end %s (a shared machine)." % (
            cfg["n"], format(cfg["n"], ","), cfg["model"], ", ".join(cfg["kinds"]), env["ray"], cfg["actors"],
            cfg["actors"], cfg["shards"], format(cfg["shard_rows"], ","), cfg["nodes_used"], timing_note,
            env["load_average_start"], env["load_average_end"]),
        "",
        "| build | wall s (embed + indexes) |",
        "|---|---|",
    ]
    for name, t in r["timings"].items():
        lines.append("| %s | %.1f |" % (name, t["median"]))
    lines += [
        "",
        "The cluster's start (%.1f s) is not in the Ray row; each Ray job's actors start and load the model inside "
        "it (the embedding alone took %.1f s of the last run). Overhead of Ray over one process on the same cores: "
        "**%+.1f%%**; over perfect scaling of the one-thread process across %d actors: %+.1f%%." % (
            r["cluster_start_s"], r["ray_embed_s_last_run"], r["overhead_vs_same_cores_pct"], cfg["actors"],
            r["overhead_vs_perfect_scaling_pct"]),
        "",
        "| check (Ray against one process, 1 thread) | result |",
        "|---|---|",
        "| vectors bit for bit | %s |" % ("yes" if checks["identical_vectors"] else "NO"),
    ]
    for kind, c in checks["indexes"].items():
        lines.append("| %s index: ids / scores of the top 10 of %d queries | %s / %s |" % (
            kind, cfg["queries"], "identical" if c["identical_ids"] else "DIFFER",
            "identical" if c["identical_scores"] else "DIFFER"))
    diff = checks["max_abs_difference_2_threads"]
    lines += ["", "One process on 2 threads gives %s." % ("the one-thread vectors bit for bit" if diff == 0 else
                                                          "vectors within %.1e of the one-thread ones" % diff)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000, help="sentences to embed and index (default 20,000)")
    p.add_argument("--queries", type=int, default=200, help="held-out query sentences (default 200)")
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="the embedder (default %(default)s)")
    p.add_argument("--kinds", default=",".join(KINDS), help="indexes to build, comma-separated (default %(default)s)")
    p.add_argument("--actors", type=int, default=2, help="Ray nodes and actors, one CPU each (default 2)")
    p.add_argument("--shard-rows", type=int, default=4096, help="rows per vector shard (default 4,096)")
    p.add_argument("--object-store-mb", type=int, default=200, help="object store per node in MB (default 200)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each row (default 1)")
    p.add_argument("--warmup", type=int, default=0, help="untimed runs of each row first (default 0)")
    p.add_argument("--tmp", default=None, help="folder for the work directory (default: the system's)")
    p.add_argument("--name", default="ray_build", help="results file name (default %(default)s)")
    p.add_argument("--out", type=Path, default=harness.RESULTS, help="results folder (default benchmarks/results)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args)
    text = markdown(result)
    print(text)
    harness.write_results(args.name, result, text, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
