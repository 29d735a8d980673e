"""The search benchmark's command line (``python -m benchmarks.search``): the synthetic sizes, or ``--real N``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import benchmarks.search
import faiss

from benchmarks import harness
from benchmarks.search.measure import bench_collection
from benchmarks.search.mixture import DATA_DESCRIPTION, MixtureData, calibrate
from benchmarks.search.real import run_real
from benchmarks.search.report import best_rows, markdown, target_summary

logger = logging.getLogger("benchmarks.search")


def bench_size(n: int, args, workdir: Path) -> list[dict]:
    """Every measurement on ``n`` vectors of the synthetic mixture and 1,000 fresh queries from it."""
    logger.info("n=%d: drawing data", n)
    data = MixtureData.for_size(n, dim=args.dim)
    x = data.draw(n, seed=1000 + n)
    queries = data.draw(args.queries, seed=1)
    return bench_collection(x, queries, args, workdir)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.search",
                                 description=benchmarks.search.__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="synthetic collection sizes (default: 10000 100000 1000000)")
    ap.add_argument("--real", type=int, default=None, metavar="N",
                    help="real-data mode: N real sentences embedded with --model instead of the synthetic mixture")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="real-data mode: the sentence encoder")
    ap.add_argument("--seed", type=int, default=0, help="real-data mode: seed of the sentence sample")
    ap.add_argument("--min-words", type=int, default=5, help="real-data mode: shortest sentence kept (words)")
    ap.add_argument("--max-words", type=int, default=60, help="real-data mode: longest sentence kept (words)")
    ap.add_argument("--embed-cache", type=Path, default=None,
                    help="real-data mode: folder of cached sentence vectors (default: $CTXEMB_CACHE/benchmarks/"
                         "search_real, i.e. ~/.cache/ctxemb/...)")
    ap.add_argument("--embed-threads", type=int, default=None,
                    help="real-data mode: torch threads for embedding (default: torch's own, OMP_NUM_THREADS)")
    ap.add_argument("--synthetic-results", type=Path, default=harness.RESULTS / "search.json",
                    help="real-data mode: the synthetic run to compare against (read, not re-run)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--kinds", nargs="+", default=["hnsw", "ivfpq", "ivfpq-ondisk"],
                    choices=["hnsw", "ivfpq", "ivfpq-ondisk"])
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--ef-search", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument("--nlist", type=int, default=None, help="default: power of two nearest 4 sqrt(n)")
    ap.add_argument("--pq-m", type=int, default=48)
    ap.add_argument("--nprobe", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256, 512])
    ap.add_argument("--k-factor", type=float, nargs="+", default=[10, 30, 100])
    ap.add_argument("--ondisk-k-factor", type=float, default=10)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--target-speedup", type=float, default=10.0)
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder for saved indexes (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=harness.RESULTS)
    ap.add_argument("--name", default=None,
                    help="results file stem (default: search; real-data mode: search_real at N=100000, else "
                         "search_real_<N>, plus _quick with --quick)")
    ap.add_argument("--quick", action="store_true", help="fewer settings, for a smoke run")
    ap.add_argument("--calibrate-npy", type=Path, default=None,
                    help="(N, H) .npy of real embeddings to compare the synthetic mixture against")
    args = ap.parse_args(argv)
    if args.real is not None:
        if args.sizes is not None or args.calibrate_npy is not None:
            ap.error("--real replaces the synthetic data: leave out --sizes and --calibrate-npy")
        if args.real < 1 or args.queries < 1:
            ap.error("--real and --queries must be >= 1")
        if args.name is None:
            args.name = "search_real" + ("" if args.real == 100_000 else "_%d" % args.real) + (
                "_quick" if args.quick else "")
    else:
        args.sizes = args.sizes or [10_000, 100_000, 1_000_000]
        args.name = args.name or "search"
    if args.quick:
        args.ef_search, args.nprobe, args.k_factor, args.repeats = [32, 128], [8, 32], [10], 1

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    faiss.omp_set_num_threads(args.threads)
    env = {"faiss_threads": args.threads, "faiss": faiss.__version__, "load_start": "%.1f" % os.getloadavg()[0]}
    if args.real is not None:
        print(run_real(args, env))
        return
    calibration = calibrate(args.calibrate_npy, args.dim) if args.calibrate_npy else None
    rows: list[dict] = []

    def write(sizes_done: list[int]) -> str:
        env["load_end"] = "%.1f" % os.getloadavg()[0]
        payload = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "data": DATA_DESCRIPTION,
            "sizes": sizes_done,
            "complete": sizes_done == list(args.sizes),
            "n_queries": args.queries,
            "k": args.k,
            "repeats": args.repeats,
            "environment": env,
            "machine": harness.machine(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "target_recall": args.target_recall,
            "target_speedup": args.target_speedup,
            "rows": rows,
            "best": best_rows(rows, args.target_recall),
            "target_summary": target_summary(rows, max(sizes_done), args.target_recall, args.target_speedup),
            "calibration": calibration,
        }
        text = markdown(payload)
        harness.write_results(args.name, payload, text, out_dir=args.out)
        return text

    done: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ctxemb-search-bench-", dir=args.workdir) as tmp:
        for n in args.sizes:
            rows += bench_size(n, args, Path(tmp))
            done.append(n)
            text = write(done)  # partial results survive a crash at a larger size
    print(text)
