"""Sharded IVF-PQ build benchmark: S shards added by separate processes and merged on disk, against one process.

Data: ``--shards`` x ``--per-shard`` vectors (default 4 x 200,000) in d=384 from the Gaussian mixture of
``python -m benchmarks.search`` (``MixtureData``, calibrated there against real all-MiniLM-L6-v2 sentence embeddings),
each shard saved as its own ``.npy`` (as ``ctxemb embed`` on separate machines would leave them), plus 1,000 held-out
queries. Steps, each in its own process so that its peak resident memory (``ru_maxrss``) is its own:

1. ``train_ivfpq`` on a sample drawn from all shard files (``--train-size``, ``--nlist``, ``--pq-m``);
2. ``add_shard`` for every shard, ``--parallel`` processes at a time (2 on this 2-core machine), one FAISS thread each;
3. ``merge_shards`` of the partials into one on-disk index;
4. the reference: one process opens the same trained quantizer (``open_trained_index``), adds every shard's vectors in
   order and saves (two FAISS threads).

Then the merged and the reference index answer the queries (k=10, default ``nprobe``/``k_factor`` and a wider
setting): the ids and scores must be identical; recall@10 is measured against exact search (``IndexFlatIP``) over
all vectors. Writes ``benchmarks/results/sharded_index.{md,json}`` with the machine (the harness's description) and
its load average at the start and the end (the machine is shared). ``--quick`` runs a small configuration (for
tests). ``--real`` uses real sentences instead of the mixture: the search benchmark's sample of the shared corpora
(``sample_real``, seed 0, 5-60 words; the first ``--queries`` held out as queries) embedded by ``--model`` on
``precision="auto"`` (``embed_real``, cached), written to ``sharded_index_real.{md,json}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness  # noqa: E402  (imports no torch: each step's peak memory stays its own)

REPO = Path(__file__).resolve().parent.parent


def _peak_mb() -> float:
    """This process's peak resident memory in MB: VmHWM, the high-water mark of its own address space.

    (``ru_maxrss`` is not used: Linux carries it across ``exec``, so a child started by a large parent reports the
    parent's size.)"""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _dir_mb(path: Path) -> float:
    return harness.dir_bytes(path) / 2**20


# ---------------------------------------------------------------------------------------------------------------
# steps (each runs in a child process: ``python -m benchmarks.sharded_index --step NAME --work DIR ...``)


def step_train(work: Path, cfg: dict) -> dict:
    from ctxemb.search import IVFPQParams
    from ctxemb.search.sharded import train_ivfpq

    files = [work / ("shard%d.npy" % s) for s in range(cfg["shards"])]
    sw = harness.Stopwatch()
    q = train_ivfpq(files, work / "quantizer", params=IVFPQParams(
        nlist=cfg["nlist"], pq_m=cfg["pq_m"], train_size=cfg["train_size"], seed=0, on_disk=True))
    return {"seconds": sw.stop(), "fingerprint": q.fingerprint}


def step_add(work: Path, cfg: dict, shard: int) -> dict:
    from ctxemb.search.sharded import add_shard

    x = np.load(work / ("shard%d.npy" % shard), mmap_mode="r")
    base = shard * cfg["per_shard"]
    ids = ["doc-%08d" % (base + i) for i in range(len(x))]
    sw = harness.Stopwatch()
    part = add_shard(work / "quantizer", work / "parts" / ("shard-%05d" % shard), ids, x, shard_index=shard)
    return {"seconds": sw.stop(), "items": part.n_items, "partial_mb": _dir_mb(part.directory)}


def step_merge(work: Path, cfg: dict) -> dict:
    from ctxemb.search.sharded import merge_shards

    sw = harness.Stopwatch()
    merge_shards(work / "quantizer", work / "parts", work / "merged")
    return {"seconds": sw.stop(), "index_mb": _dir_mb(work / "merged")}


def step_reference(work: Path, cfg: dict) -> dict:
    from ctxemb.search.sharded import open_trained_index

    sw = harness.Stopwatch()
    index = open_trained_index(work / "quantizer", work / "reference")
    for s in range(cfg["shards"]):
        x = np.load(work / ("shard%d.npy" % s), mmap_mode="r")
        base = s * cfg["per_shard"]
        index.add(["doc-%08d" % (base + i) for i in range(len(x))], x, show_progress_bar=False)
    index.save()
    return {"seconds": sw.stop(), "index_mb": _dir_mb(work / "reference")}


STEPS = {"train": step_train, "add": step_add, "merge": step_merge, "reference": step_reference}


def _run_child(work: Path, cfg: dict, step: str, threads: int, shard: int | None = None) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "benchmarks.sharded_index", "--step", step, "--work", str(work),
           "--config", json.dumps(cfg)] + ([] if shard is None else ["--shard", str(shard)])
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, what: str) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s" % (what, proc.returncode, err[-4000:]))
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------------------
# the driver


def _search(index_dir: Path, queries: np.ndarray, **kw):
    from ctxemb.search import SemanticIndex

    index = SemanticIndex.load(index_dir)
    sw = harness.Stopwatch()
    scores, ids = index.search_array(queries, k=10, **kw)
    return scores, ids, sw.stop()


def run(args) -> dict:
    import faiss

    from benchmarks.search.mixture import MixtureData  # the calibrated mixture of the search benchmark

    cfg = {"shards": args.shards, "per_shard": args.per_shard, "nlist": args.nlist, "pq_m": args.pq_m,
           "train_size": args.train_size, "dim": 384}
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="sharded_index_", dir=args.tmp))
    try:
        n = args.shards * args.per_shard
        data_sw = harness.Stopwatch()
        real = None
        if args.real:  # real sentences embedded by all-MiniLM-L6-v2 (the search benchmark's sample and cache)
            from benchmarks.search.real import embed_real, sample_real

            sample = sample_real(n, args.queries, 0, 5, 60)
            vectors, real = embed_real(sample["queries"] + sample["collection"], argparse.Namespace(
                model=args.model, embed_threads=2, embed_cache=None, queries=args.queries))
            real["sources"] = {x["source"]: x["collection"] for x in sample["sources"]}
            queries = vectors[:args.queries]
            for s in range(args.shards):
                start = args.queries + s * args.per_shard
                np.save(work / ("shard%d.npy" % s), vectors[start:start + args.per_shard])
            del vectors
        else:
            mix = MixtureData.for_size(n)
            for s in range(args.shards):
                np.save(work / ("shard%d.npy" % s), mix.draw(args.per_shard, seed=100 + s))
            queries = mix.draw(args.queries, seed=7)
        data_seconds = data_sw.stop()
        train = _result(_run_child(work, cfg, "train", 2), "train")
        adds, adds_sw = [], harness.Stopwatch()
        pending = list(range(args.shards))
        while pending:
            batch, pending = pending[:args.parallel], pending[args.parallel:]
            procs = [(s, _run_child(work, cfg, "add", 1, s)) for s in batch]
            adds += [dict(_result(p, "add shard %d" % s), shard=s) for s, p in procs]
        adds_wall = adds_sw.stop()
        merge = _result(_run_child(work, cfg, "merge", 2), "merge")
        ref = _result(_run_child(work, cfg, "reference", 2), "reference")

        faiss.omp_set_num_threads(2)
        exact = faiss.IndexFlatIP(384)
        for s in range(args.shards):
            exact.add(np.load(work / ("shard%d.npy" % s)))
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        _, truth = exact.search(q.astype(np.float32), 10)
        del exact
        truth_ids = np.vectorize(lambda i: "doc-%08d" % i)(truth)
        searches = []
        for kw in ({}, {"nprobe": 64, "k_factor": 20}):
            sm, im, tm = _search(work / "merged", queries, **kw)
            sr, ir, tr = _search(work / "reference", queries, **kw)
            recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(im, truth_ids)]))
            searches.append({"nprobe": kw.get("nprobe", 16), "k_factor": kw.get("k_factor", 10.0),
                             "identical_ids": bool(np.array_equal(im, ir)),
                             "identical_scores": bool(np.array_equal(sm, sr)),
                             "recall_at_10": round(recall, 4), "qps_merged": round(len(queries) / tm, 1),
                             "qps_reference": round(len(queries) / tr, 1)})
        return {
            "config": cfg, "data": "real" if real else "mixture", "real_embedding": real, "queries": args.queries,
            "parallel_adds": args.parallel, "data_seconds": round(data_seconds, 1),
            "train": train, "adds": adds, "adds_wall_seconds": round(adds_wall, 1), "merge": merge,
            "reference": ref, "searches": searches,
            "machine": harness.machine(),
            "environment": {"load_average_start": [round(v, 2) for v in load_start],
                            "load_average_end": [round(v, 2) for v in os.getloadavg()],
                            "faiss": faiss.__version__},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(r: dict) -> str:
    cfg, env, m = r["config"], r["environment"], r["machine"]
    n = cfg["shards"] * cfg["per_shard"]
    lines = [
        "# Sharded IVF-PQ index build" + (" on real sentences" if r.get("data") == "real" else ""),
        "",
        "`python -m benchmarks.sharded_index%s`: %d shards x %s vectors (d=%d, %s), "
        "nlist=%d, pq_m=%d, training sample %s; CPU %s, FAISS %s. Load average at the start %s, at the "
        "end %s (a shared machine)." % (
            " --real" if r.get("data") == "real" else "", cfg["shards"], format(cfg["per_shard"], ","), cfg["dim"],
            "real English sentences (WikiText-2, SemCor, Brown, SNLI, ... as in `python -m benchmarks.search "
            "--real`) embedded by all-MiniLM-L6-v2" if r.get("data") == "real"
            else "the search benchmark's calibrated mixture", cfg["nlist"], cfg["pq_m"],
            format(cfg["train_size"], ","), harness.machine_line(m), env["faiss"], env["load_average_start"],
            env["load_average_end"]),
    ]
    if r.get("real_embedding"):
        e = r["real_embedding"]
        lines += ["", "The %s sentences (collection and queries) were embedded once before the build, on "
                  "`precision=\"auto\"` (here %s): %.0f s, %.0f tokens/s%s." % (
                      format(e["texts"], ","), e["precision"], e["embed_s"], e["tokens_per_s"],
                      " (read from the cache)" if e.get("vectors_from_cache") else "")]
    lines += [
        "",
        "| step | wall s | peak RSS MB | on disk MB |",
        "|---|---|---|---|",
        "| train the quantizer (1 process, 2 threads) | %.1f | %.0f | |" % (r["train"]["seconds"], r["train"]["peak_mb"]),
    ]
    for a in r["adds"]:
        lines.append("| add shard %d (%s vectors, 1 thread) | %.1f | %.0f | %.0f |" % (
            a["shard"], format(a["items"], ","), a["seconds"], a["peak_mb"], a["partial_mb"]))
    lines += [
        "| all %d adds, %d processes at a time | %.1f | | |" % (cfg["shards"], r["parallel_adds"],
                                                                r["adds_wall_seconds"]),
        "| merge (1 process) | %.1f | %.0f | %.0f |" % (r["merge"]["seconds"], r["merge"]["peak_mb"],
                                                       r["merge"]["index_mb"]),
        "| **sharded: adds + merge** | **%.1f** | | |" % (r["adds_wall_seconds"] + r["merge"]["seconds"]),
        "| one process adds all %s (2 threads) and saves | %.1f | %.0f | %.0f |" % (
            format(n, ","), r["reference"]["seconds"], r["reference"]["peak_mb"], r["reference"]["index_mb"]),
        "",
        "| nprobe | k_factor | merged = one process (ids / scores) | recall@10 vs exact | QPS merged | QPS one process |",
        "|---|---|---|---|---|---|",
    ]
    for s in r["searches"]:
        lines.append("| %d | %g | %s / %s | %.3f | %.0f | %.0f |" % (
            s["nprobe"], s["k_factor"], "yes" if s["identical_ids"] else "NO", "yes" if s["identical_scores"] else "NO",
            s["recall_at_10"], s["qps_merged"], s["qps_reference"]))
    lines += [
        "",
        "Peak RSS is the high-water mark (VmHWM) of each step's own process. It counts the pages of the memory-mapped "
        "`.npy` files the step read (clean page cache, which the kernel reclaims under memory pressure): an add shows "
        "about its shard's file plus one block of 65,536 vectors in flight, training the pages of every file its "
        "sample touched. The merge maps only the partials' PQ codes and copies the vectors file to file. Here the "
        "adds ran %d at a time on the same %s CPUs; on separate machines each shard's add runs alone, so the "
        "sharded wall time is the slowest add plus the merge." % (r["parallel_adds"], m.get("cpu_count")),
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, default=4, help="shards (default 4)")
    p.add_argument("--per-shard", type=int, default=200_000, help="vectors per shard (default 200,000)")
    p.add_argument("--nlist", type=int, default=1024, help="IVF lists (default 1024)")
    p.add_argument("--pq-m", type=int, default=48, help="PQ sub-quantizers (default 48: 8 dims each)")
    p.add_argument("--train-size", type=int, default=65_536, help="training sample (default 65,536)")
    p.add_argument("--queries", type=int, default=1000, help="held-out queries (default 1,000)")
    p.add_argument("--parallel", type=int, default=2, help="add-shard processes at a time (default 2)")
    p.add_argument("--tmp", default=None, help="folder for the work directory (default: the system's)")
    p.add_argument("--real", action="store_true",
                   help="real sentences embedded by --model (the search benchmark's sample, vectors cached) instead "
                        "of the mixture")
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="the embedder of --real (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="a small run (2 x 5,000, nlist 64) for tests")
    p.add_argument("--name", default="sharded_index", help="results file name (default %(default)s)")
    p.add_argument("--out", type=Path, default=harness.RESULTS, help="results folder (default benchmarks/results)")
    p.add_argument("--step", choices=sorted(STEPS), default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)
    p.add_argument("--shard", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.step:  # a child process
        cfg = json.loads(args.config)
        out = STEPS[args.step](args.work, cfg, *([] if args.shard is None else [args.shard]))
        print(json.dumps(dict(out, peak_mb=_peak_mb())))
        return 0
    if args.real and args.name == "sharded_index":
        args.name = "sharded_index_real"
    if args.quick:
        args.shards, args.per_shard, args.nlist, args.pq_m, args.train_size, args.queries = 2, 5000, 64, 48, 5000, 100
        if args.name == "sharded_index":
            args.name = "sharded_index_quick"
    result = run(args)
    text = markdown(result)
    print(text)
    harness.write_results(args.name, result, text, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
