"""Building, timing and scoring every index kind on one collection: flat (the ground truth and the baseline), HNSW,
IVF-PQ and on-disk IVF-PQ, with recall@10 (exact and tie-tolerant), queries per second, build time and memory.
Shared by the synthetic and the real-data modes."""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np

from benchmarks import harness
from ctxemb.search import FlatParams, HNSWParams, IndexParams, IVFPQParams, SemanticIndex

logger = logging.getLogger("benchmarks.search")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file()) / 2**20


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean |found_q & truth_q| / k over queries; found and truth are (Q, k) object arrays of ids (None ignored)."""
    k = truth.shape[1]
    return float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found.tolist(), truth.tolist())]))


# ann-benchmarks' tolerance: a result counts if it is as close as the true k-th neighbour up to 1e-3 in distance.
TIE_EPSILON = 1e-3


def tie_tolerant_recall(found_scores: np.ndarray, kth_true_score: np.ndarray) -> float:
    """Fraction of the (Q, k) returned scores >= the true k-th score - TIE_EPSILON (-inf padding never counts).

    The scores of every kind are exact cosines (flat/HNSW store raw vectors, IVF-PQ re-ranks exactly), so this
    credits a result that ties the true k-th neighbour without being it.
    """
    k = found_scores.shape[1]
    return float(np.mean((found_scores >= kth_true_score[:, None] - TIE_EPSILON).sum(axis=1) / k))


def timed_search(index: SemanticIndex, queries: np.ndarray, k: int, repeats: int, **options) -> harness.Timing:
    """One batch search timed by the harness (``repeats`` runs after its warm-up); ``.result`` holds its answer."""
    return harness.measure(lambda: index.search_array(queries, k, **options), repeats=repeats)


def build(x: np.ndarray, ids: list[str], workdir: Path, params: IndexParams):
    gc.collect()
    rss0 = rss_mb()
    sw = harness.Stopwatch()
    kind = params.kind
    directory = workdir / ("ondisk-%s" % kind) if getattr(params, "on_disk", False) else None
    index = SemanticIndex(x.shape[1], params=params, directory=directory)
    index.add(ids, x, show_progress_bar=False)
    build_s = sw.stop()
    gc.collect()
    rss_delta = rss_mb() - rss0
    save_dir = workdir / ("saved-%s" % kind) if directory is None else directory
    index.save(save_dir)
    size = dir_mb(save_dir)
    if directory is None:
        shutil.rmtree(save_dir)
    return index, build_s, rss_delta, size


def bench_collection(x: np.ndarray, queries: np.ndarray, args, workdir: Path,
                     stage_seconds: dict | None = None) -> list[dict]:
    """Flat (ground truth and baseline), HNSW, IVF-PQ and on-disk IVF-PQ on the (N, H) collection ``x``.

    Shared by the synthetic and the real-data modes. ``stage_seconds``, when given, receives each index kind's wall
    time (build, save and every search setting).
    """
    rows: list[dict] = []
    n = len(x)
    ids = [str(i) for i in range(n)]
    k = args.k
    stage_seconds = {} if stage_seconds is None else stage_seconds
    stage = harness.Stopwatch()

    def stage_done(kind):
        nonlocal stage
        seconds = stage.stop()
        stage = harness.Stopwatch()
        stage_seconds[kind] = round(seconds, 1)
        logger.info("n=%d: %s took %.1f s", n, kind, seconds)

    def row(kind, params, build_s, rss, size, timing):
        scores, found = timing.result
        qps = len(queries) / timing.median
        r = {"n": n, "kind": kind, "params": params, "build_s": round(build_s, 2), "rss_delta_mb": round(rss, 1),
             "index_mb": round(size, 1), "qps": round(qps, 1),
             "recall_at_10": round(recall_at_k(found, truth), 4),
             "recall_at_10_ties": round(tie_tolerant_recall(scores, truth_scores[:, k - 1]), 4),
             "speedup_vs_flat": round(qps / flat_qps, 2) if flat_qps else 1.0,
             "search_seconds": {k: round(v, 5) for k, v in timing.to_dict().items() if k in ("median", "min", "max")}}
        rows.append(r)
        logger.info("%s", json.dumps(r))
        return r

    # exact baseline and ground truth
    index, build_s, rss, size = build(x, ids, workdir, FlatParams())
    truth_scores, truth = index.search_array(queries, k + 1)
    gap = truth_scores[:, k - 1] - truth_scores[:, k]  # between the true k-th and (k+1)-th neighbours
    near_ties = float(np.mean(gap < TIE_EPSILON))
    truth_scores, truth = truth_scores[:, :k], truth[:, :k]
    logger.info("n=%d: %.1f%% of queries have their %d-th and %d-th true neighbours within %g", n, 100 * near_ties,
                k, k + 1, TIE_EPSILON)
    timing = timed_search(index, queries, k, args.repeats)
    flat_qps = len(queries) / timing.median
    row("flat", {}, build_s, rss, size, timing)
    rows[-1].update(near_tie_queries=round(near_ties, 3), top1_cos=round(float(truth_scores[:, 0].mean()), 3),
                    top10_cos=round(float(truth_scores[:, k - 1].mean()), 3))
    del index
    gc.collect()
    stage_done("flat")

    if "hnsw" in args.kinds:
        hp = {"hnsw_m": args.hnsw_m, "ef_construction": args.ef_construction}
        hnsw_params = HNSWParams(m=args.hnsw_m, ef_construction=args.ef_construction)
        index, build_s, rss, size = build(x, ids, workdir, hnsw_params)
        for ef in args.ef_search:
            timing = timed_search(index, queries, k, args.repeats, ef_search=ef)
            row("hnsw", dict(hp, ef_search=ef), build_s, rss, size, timing)
        del index
        gc.collect()
        stage_done("hnsw")

    nlist = args.nlist or max(1, min(2 ** round(math.log2(4 * math.sqrt(n))), n // 39))
    ip = {"nlist": nlist, "pq_m": args.pq_m, "nbits": 8}
    ivf_params = IVFPQParams(**ip)
    if "ivfpq" in args.kinds:
        index, build_s, rss, size = build(x, ids, workdir, ivf_params)
        for nprobe in args.nprobe:
            if nprobe > nlist:
                continue
            for kf in args.k_factor:
                timing = timed_search(index, queries, k, args.repeats, nprobe=nprobe, k_factor=kf)
                row("ivfpq", dict(ip, nprobe=nprobe, k_factor=kf), build_s, rss, size, timing)
        del index
        gc.collect()
        stage_done("ivfpq")

    if "ivfpq-ondisk" in args.kinds:
        index, build_s, rss, size = build(x, ids, workdir, dataclasses.replace(ivf_params, on_disk=True))
        kf = args.ondisk_k_factor
        for nprobe in args.nprobe:
            if nprobe > nlist:
                continue
            timing = timed_search(index, queries, k, args.repeats, nprobe=nprobe, k_factor=kf)
            row("ivfpq-ondisk", dict(ip, nprobe=nprobe, k_factor=kf), build_s, rss, size, timing)
        del index
        gc.collect()
        shutil.rmtree(workdir / "ondisk-ivfpq", ignore_errors=True)
        stage_done("ivfpq-ondisk")
    del x
    gc.collect()
    return rows
