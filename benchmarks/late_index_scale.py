"""A late-interaction index past RAM's comfort: >= 20M synthetic token vectors (clustered), built shard by shard,
searched memory-mapped in a fresh process; its peak RSS against the index size, and the candidate stage's recall
against exhaustive MaxSim over the same (decompressed) vectors.

Synthetic documents: 50-200 tokens, each drawn around one of the document's 3 topics (of 4,096 topic centres in 128
dimensions), noise 0.35 per dimension relative to the centres' scale. Queries: 32 tokens drawn from one document's
topics with fresh noise, so that each query has a known source document.

    python -m benchmarks.late_index_scale --tokens 20000000        # ~10 minutes on 2 cores
    python -m benchmarks.late_index_scale --tokens 200000 --name late_index_scale_smoke

Writes benchmarks/results/late_index_scale.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness  # imports no torch: the search child's peak memory stays the index's cost

ROOT = Path(__file__).resolve().parent.parent
D = 128
TOPICS = 4096


def _documents(rng, centres, n_tokens: int):
    docs, total = [], 0
    while total < n_tokens:
        t = int(rng.integers(50, 201))
        topics = centres[rng.integers(0, len(centres), 3)]
        x = topics[rng.integers(0, 3, t)] + 0.35 * rng.normal(size=(t, D)).astype(np.float32) / np.sqrt(D)
        docs.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
        total += t
    return docs


def build(directory: Path, n_tokens: int, shard_tokens: int, nbits: int, seed: int) -> dict:
    from ctxemb.search.late.index import LateInteractionIndex

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(TOPICS, D)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    np.save(directory.parent / "centres.npy", centres)
    index = LateInteractionIndex(D, nbits=nbits)
    sw, added, n = harness.Stopwatch(), 0, 0
    while added < n_tokens:
        docs = _documents(rng, centres, min(shard_tokens, n_tokens - added))
        index.add(["doc-%d" % (n + i) for i in range(len(docs))], docs)
        n += len(docs)
        added += sum(len(d) for d in docs)
        print(f"{added:,} tokens in {sw.seconds:.0f} s", file=sys.stderr, flush=True)
    add_s = sw.seconds
    index.save(directory)
    size = harness.dir_bytes(directory)
    return {"tokens": index.n_tokens, "documents": len(index), "centroids": index.codec.n_centroids,
            "bytes_per_token": index.bytes_per_token, "index_bytes": size, "build_s": sw.stop(),
            "add_s": add_s}


def queries(directory: Path, n: int, seed: int) -> list[np.ndarray]:
    from ctxemb.search.late.index import LateInteractionIndex

    index = LateInteractionIndex.load(directory)
    rng = np.random.default_rng(seed + 1)
    out = []
    for label in rng.integers(0, len(index.ids), n):
        doc = index.document_vectors(index.ids[label])
        x = doc[rng.integers(0, len(doc), 32)] + 0.35 * rng.normal(size=(32, D)).astype(np.float32) / np.sqrt(D)
        out.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    return out


def search_child(directory: str, queries_path: str, out_path: str) -> None:
    """In a fresh process: load memory-mapped, search, record latency and peak RSS."""
    from ctxemb.search.late.index import LateInteractionIndex

    qs = np.load(queries_path)
    rss_before = _peak_rss()
    index = LateInteractionIndex.load(directory)
    times, hits = [], []
    for q in qs:
        with harness.Stopwatch() as sw:
            hits.append([h[0] for h in index.search(q, 10, nprobe=4, candidates=256)])
        times.append(1000 * sw.seconds)
    Path(out_path).write_text(json.dumps({
        "hits": hits, "latency_ms_p50": harness.summarize(times).median,
        "latency_ms_p99": float(np.percentile(times, 99)),
        "rss_before_load": rss_before, "peak_rss": _peak_rss()}))


def _peak_rss() -> int:
    """This process's peak resident memory in bytes: ``VmHWM`` of ``/proc/self/status``, which belongs to the process's
    own memory since its ``exec``. (``getrusage``'s ``ru_maxrss`` keeps the parent's peak across ``fork`` and
    ``exec`` on Linux, so a child started by a parent that built a large index would report the parent's memory.)"""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def exhaustive_top10(directory: Path, qs: np.ndarray) -> list[list[str]]:
    """Exact MaxSim over every document's decompressed vectors, shard by shard."""
    from ctxemb.search.late.index import LateInteractionIndex
    from ctxemb.search.late.scoring import maxsim_concatenated

    index = LateInteractionIndex.load(directory)
    best = [[] for _ in qs]
    for shard in index._shards:
        codes = np.asarray(shard.codes)
        vectors = np.concatenate([index.codec.decompress(codes[lo:lo + 1_000_000],
                                                         np.asarray(shard.packed[lo:lo + 1_000_000]))
                                  for lo in range(0, len(codes), 1_000_000)])
        labels = np.arange(shard.first_label, shard.first_label + shard.n_docs)
        for q, kept in zip(qs, best):
            scores = maxsim_concatenated(q, vectors, shard.offsets)
            top = np.argsort(-scores)[:10]
            kept.extend((float(scores[i]), index.ids[labels[i]]) for i in top)
            kept.sort(reverse=True)
            del kept[10:]
    return [[d for _, d in kept] for kept in best]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--shard-tokens", type=int, default=1_000_000)
    ap.add_argument("--nbits", type=int, default=2)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="late_index_scale")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:  # a fresh process that imports only the index (no torch): its peak RSS is the index's cost
        return search_child(*args.child)
    with tempfile.TemporaryDirectory(dir=ROOT / "cache") as tmp:
        directory = Path(tmp) / "index"
        stats = build(directory, args.tokens, args.shard_tokens, args.nbits, args.seed)
        qs = np.stack(queries(directory, args.queries, args.seed))
        np.save(Path(tmp) / "queries.npy", qs)
        subprocess.run([sys.executable, "-m", "benchmarks.late_index_scale", "--child", str(directory),
                        str(Path(tmp) / "queries.npy"), str(Path(tmp) / "search.json")], check=True, cwd=ROOT)
        searched = json.loads((Path(tmp) / "search.json").read_text())
        exact = exhaustive_top10(directory, qs)
    recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(searched.pop("hits"), exact)]))
    row = {**stats, **searched, "candidate_recall@10": recall,
           "peak_rss_over_index": searched["peak_rss"] / stats["index_bytes"]}
    md = ["# A late-interaction index searched memory-mapped", "",
          f"{harness.machine_line()}. {stats['tokens']:,} synthetic clustered token "
          f"vectors (128 d, {args.nbits}-bit residuals) in {stats['documents']:,} documents, built from shards of "
          f"{args.shard_tokens:,} tokens; searched in a fresh process (nprobe 4, 256 candidates, {args.queries} "
          "queries of 32 tokens). Recall: the candidate stage's top 10 against exhaustive MaxSim over the same "
          "decompressed vectors.", "",
          harness.markdown_table([{"tokens": f"{stats['tokens']:,}", "index MB": stats["index_bytes"] / 2 ** 20,
                                   "bytes/token": stats["bytes_per_token"], "build s": stats["build_s"],
                                   "peak RSS MB": searched["peak_rss"] / 2 ** 20,
                                   "RSS / index": row["peak_rss_over_index"], "p50 ms": searched["latency_ms_p50"],
                                   "p99 ms": searched["latency_ms_p99"], "recall@10": recall}],
                                 ["tokens", "index MB", "bytes/token", "build s", "peak RSS MB", "RSS / index",
                                  "p50 ms", "p99 ms", "recall@10"])]
    harness.write_results(args.name, {"args": vars(args), **row}, "\n".join(md))


if __name__ == "__main__":
    main()
