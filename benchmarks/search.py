"""SemanticIndex benchmark: build time, memory, queries per second and recall@10 for flat / HNSW / IVF-PQ.

Data: a Gaussian mixture in d=384 meant to look like sentence embeddings rather than uniform noise (uniform random
data is the worst case for approximate search); see ``MixtureData`` and ``DATA_DESCRIPTION``. With
``--calibrate-npy real.npy`` (an (N, 384) array of real sentence embeddings) the script first compares neighbour
statistics and HNSW / IVF recall on the real vectors and on the same number of synthetic ones.

For every size, the exact flat index gives the ground truth and the baseline QPS; HNSW is built once and searched
at several ``ef_search``; IVF-PQ is trained and filled once and searched at several ``nprobe`` x ``k_factor``;
the on-disk IVF-PQ variant (lists and raw vectors in files, exact re-ranking by numpy on a memory map) once more.
Queries are one batch of 1,000 with k=10, best of ``--repeats`` timings. FAISS runs on 2 OpenMP threads with
``OMP_WAIT_POLICY=PASSIVE`` (set here unless already set): on a shared machine, spinning OpenMP threads made small
FAISS jobs 6x slower.

Memory is reported two ways: the RSS growth while building (approximate: allocators keep freed memory) and the
size of the saved index directory (for on-disk indexes: the lists and vector files plus the index file).

Real-data mode (``--real N``): the same measurements (``bench_collection``, shared by both modes) on N real English
sentences instead of the mixture. The pool is every distinct sentence of 5-60 words (``--min-words``,
``--max-words``; exact duplicates removed after collapsing whitespace) of WikiText-2, SemCor, the Brown files SemCor
does not cover, SNLI, the English fortunes, MSRP, STS-B, SICK, CoNLL-2003 and WiC from the shared data (162k
sentences; ``_common.REAL_SOURCES``); a permutation seeded with ``--seed`` gives ``--queries`` held-out queries (its
first 1,000: none is in the collection) and the N indexed sentences. Both are embedded with ``--model``
(all-MiniLM-L6-v2) on ``precision="auto"``, the fast path, as sentence-transformers makes sentence vectors (mean of
the last layer, L2-normalised); the vectors are cached under ``--embed-cache`` (default
``$CTXEMB_CACHE/benchmarks/search_real``) keyed by model, N, the chosen precision and a digest of the texts, so a
rerun does not embed again. The results (``search_real.{md,json}`` at N=100,000, else ``search_real_<N>``, plus
``_quick`` with ``--quick``; ``--name`` and ``--out`` override) give the sources and their counts, the embedding cost
(auto's choice, seconds, tokens/s, the CPU), the recall@10 / QPS / speed-up table, and a side-by-side with the
committed synthetic run (``--synthetic-results``, read, not re-run) at its size nearest N.

    python benchmarks/search.py                              # 10k, 100k, 1M (15-60 min on 2 shared cores)
    python benchmarks/search.py --sizes 10000 --quick        # smoke run
    python benchmarks/search.py --real 100000                # real sentences (~10 min on 2 shared cores)
    OMP_NUM_THREADS=1 python benchmarks/search.py --real 3000 --quick --threads 1 --out /tmp/search-smoke  # smoke

The calibration file used for the committed results holds all-MiniLM-L6-v2 sentence embeddings (mean pooling of the
last layer, as sentence-transformers) of the 16,662 WikiText-2 valid+test sentences of 5-60 words:

    cd benchmarks && python -c "from _common import wikitext_sentences; from ctxemb.embedding.embedder.embedder import Embedder; \
        import numpy as np; np.save('/tmp/real.npy', Embedder.from_pretrained('all-MiniLM-L6-v2').embed_sentences(\
        wikitext_sentences(30000), layers=[-1]))"
"""

from __future__ import annotations

import os

# Must be set before FAISS loads its OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import dataclasses
import gc
import json
import logging
import math
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import faiss  # noqa: E402 - after OMP_WAIT_POLICY
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's ctxemb
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common (real-data mode)

from ctxemb.core.paths import atomic_write  # noqa: E402
from ctxemb.search import FlatParams, HNSWParams, IndexParams, IVFPQParams, SemanticIndex  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
logger = logging.getLogger("benchmarks.search")

POINTS_PER_COMPONENT = 16
DATA_DESCRIPTION = (
    "Two-level Gaussian mixture in d=384: 1,000 topics and n/16 components (16 points per component at every "
    "size). A component's centre (norm ~1) is its topic's centre (60% of the variance) plus its own part; each "
    "component varies in its own random 64-dim subspace with power-law standard deviations "
    "(i^-0.3, total 1.4) plus isotropic noise (total 0.8); a shared offset gives random pairs cosine ~0.12; vectors "
    "L2-normalised. Queries: 1,000 fresh draws from the same mixture (not in the collection). At 16k vectors, HNSW "
    "and IVF-PQ recall on it is close to that on real all-MiniLM-L6-v2 sentence embeddings (HNSW somewhat easier at "
    "the smallest ef_search), though its neighbour cosines are lower (calibration table)."
)


class MixtureData:
    """Draws (N, H) L2-normalised float32 vectors from the benchmark's Gaussian mixture, reproducibly.

    Args:
        n_components: mixture components (the benchmark uses N / 16).
        dim: H.
        rank: dimension of each component's own subspace of variation.
        alpha: power-law exponent of the standard deviations inside that subspace.
        local: total standard deviation inside the subspace (the centres have norm ~1).
        isotropic: total standard deviation of the isotropic noise added to every vector.
        offset_cos: the expected cosine of two random vectors, set by a shared offset (anisotropy).
        n_topics: groups of components whose centres share a part (a second, coarser level of clustering).
        topic_share: the fraction of a centre's variance that comes from its topic.
        seed: seed of the mixture itself (draws take their own seeds).
    """

    def __init__(self, n_components: int, dim: int = 384, rank: int = 64, alpha: float = 0.3, local: float = 1.4,
                 isotropic: float = 0.8, offset_cos: float = 0.12, n_topics: int = 1000, topic_share: float = 0.6,
                 seed: int = 0):
        rng = np.random.default_rng(seed)
        self.seed, self.dim, self.rank, self.isotropic = seed, dim, rank, isotropic
        # Centres (norm ~1) = a topic part shared by the components of one topic + the component's own part, so
        # that beyond a point's own component its neighbours come from related components, as in real collections.
        topics = rng.standard_normal((n_topics, dim)) * math.sqrt(topic_share / dim)
        own = rng.standard_normal((n_components, dim)) * math.sqrt((1 - topic_share) / dim)
        self.centres = (topics[rng.integers(0, n_topics, n_components)] + own).astype(np.float32)  # (C, H)
        sd = np.arange(1, rank + 1, dtype=np.float64) ** -alpha
        self.sd = (sd / np.sqrt((sd**2).sum()) * local).astype(np.float32)  # (r,)
        # E|x|^2 = 1 + local^2 + isotropic^2 before the offset u; |u|^2 = c E|x|^2 / (1 - c) makes E[cos] ~ c.
        total = 1 + local**2 + isotropic**2
        u = rng.standard_normal(dim)
        self.offset = (u / np.linalg.norm(u) * math.sqrt(offset_cos * total / (1 - offset_cos))).astype(np.float32)

    @classmethod
    def for_size(cls, n: int, **kwargs) -> "MixtureData":
        return cls(max(1, n // POINTS_PER_COMPONENT), **kwargs)

    def basis(self, c: int) -> np.ndarray:
        """Component ``c``'s (r, H) subspace: Gaussian rows of norm ~1, nearly orthogonal in high dimension.

        Regenerated from (seed, c) on every draw instead of stored: at 1M vectors there are 62,500 components.
        """
        rng = np.random.default_rng([self.seed, c])
        return (rng.standard_normal((self.rank, self.dim), dtype=np.float32) / np.float32(math.sqrt(self.dim)))

    def draw(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        comp = rng.integers(0, len(self.centres), n)
        order = np.argsort(comp, kind="stable")
        counts = np.bincount(comp, minlength=len(self.centres))
        out = np.empty((n, self.dim), dtype=np.float32)
        start = 0
        for c in np.flatnonzero(counts):
            count = counts[c]
            rows = order[start : start + count]
            start += count
            z = rng.standard_normal((count, self.rank), dtype=np.float32) * self.sd  # (n_c, r)
            noise = rng.standard_normal((count, self.dim), dtype=np.float32) * (self.isotropic / math.sqrt(self.dim))
            out[rows] = self.centres[c] + z @ self.basis(c) + noise + self.offset
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


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


def timed_search(index: SemanticIndex, queries: np.ndarray, k: int, repeats: int, **options):
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = index.search_array(queries, k, **options)
        best = min(best, time.perf_counter() - t0)
    return best, result


def build(x: np.ndarray, ids: list[str], workdir: Path, params: IndexParams):
    gc.collect()
    rss0 = rss_mb()
    t0 = time.perf_counter()
    kind = params.kind
    directory = workdir / ("ondisk-%s" % kind) if getattr(params, "on_disk", False) else None
    index = SemanticIndex(x.shape[1], params=params, directory=directory)
    index.add(ids, x, show_progress_bar=False)
    build_s = time.perf_counter() - t0
    gc.collect()
    rss_delta = rss_mb() - rss0
    save_dir = workdir / ("saved-%s" % kind) if directory is None else directory
    index.save(save_dir)
    size = dir_mb(save_dir)
    if directory is None:
        shutil.rmtree(save_dir)
    return index, build_s, rss_delta, size


def bench_size(n: int, args, workdir: Path) -> list[dict]:
    """Every measurement on ``n`` vectors of the synthetic mixture and 1,000 fresh queries from it."""
    logger.info("n=%d: drawing data", n)
    data = MixtureData.for_size(n, dim=args.dim)
    x = data.draw(n, seed=1000 + n)
    queries = data.draw(args.queries, seed=1)
    return bench_collection(x, queries, args, workdir)


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
    stage_t0 = time.perf_counter()

    def stage_done(kind):
        nonlocal stage_t0
        now = time.perf_counter()
        stage_seconds[kind] = round(now - stage_t0, 1)
        logger.info("n=%d: %s took %.1f s", n, kind, now - stage_t0)
        stage_t0 = now

    def row(kind, params, build_s, rss, size, seconds, result):
        scores, found = result
        qps = len(queries) / seconds
        r = {"n": n, "kind": kind, "params": params, "build_s": round(build_s, 2), "rss_delta_mb": round(rss, 1),
             "index_mb": round(size, 1), "qps": round(qps, 1),
             "recall_at_10": round(recall_at_k(found, truth), 4),
             "recall_at_10_ties": round(tie_tolerant_recall(scores, truth_scores[:, k - 1]), 4),
             "speedup_vs_flat": round(qps / flat_qps, 2) if flat_qps else 1.0}
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
    seconds, result = timed_search(index, queries, k, args.repeats)
    flat_qps = len(queries) / seconds
    row("flat", {}, build_s, rss, size, seconds, result)
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
            seconds, result = timed_search(index, queries, k, args.repeats, ef_search=ef)
            row("hnsw", dict(hp, ef_search=ef), build_s, rss, size, seconds, result)
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
                seconds, result = timed_search(index, queries, k, args.repeats, nprobe=nprobe, k_factor=kf)
                row("ivfpq", dict(ip, nprobe=nprobe, k_factor=kf), build_s, rss, size, seconds, result)
        del index
        gc.collect()
        stage_done("ivfpq")

    if "ivfpq-ondisk" in args.kinds:
        index, build_s, rss, size = build(x, ids, workdir, dataclasses.replace(ivf_params, on_disk=True))
        kf = args.ondisk_k_factor
        for nprobe in args.nprobe:
            if nprobe > nlist:
                continue
            seconds, result = timed_search(index, queries, k, args.repeats, nprobe=nprobe, k_factor=kf)
            row("ivfpq-ondisk", dict(ip, nprobe=nprobe, k_factor=kf), build_s, rss, size, seconds, result)
        del index
        gc.collect()
        shutil.rmtree(workdir / "ondisk-ivfpq", ignore_errors=True)
        stage_done("ivfpq-ondisk")
    del x
    gc.collect()
    return rows


def neighbour_stats(x: np.ndarray, q: np.ndarray, name: str) -> dict:
    """Neighbour statistics and approximate-search recall of one collection (used to calibrate the mixture)."""
    ids = [str(i) for i in range(len(x))]
    flat = SemanticIndex(x.shape[1]).add(ids, x, show_progress_bar=False)
    scores, truth = flat.search_array(q, 21)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(x), (2, 5000))
    # Levina-Bickel maximum-likelihood local intrinsic dimension from the 20 nearest neighbours (chord distances)
    dist = np.sqrt(np.maximum(2 - 2 * scores[:, :20].astype(np.float64), 1e-12))
    lid = float(np.mean(-1 / np.mean(np.log(dist[:, :-1] / dist[:, -1:]), axis=1)))
    out = {"collection": name, "n": len(x), "top1_cos": round(float(scores[:, 0].mean()), 3),
           "top10_cos": round(float(scores[:, 9].mean()), 3),
           "random_pair_cos": round(float(np.einsum("nh,nh->n", x[a], x[b]).mean()), 3), "lid_mle": round(lid, 1)}
    truth = truth[:, :10]
    hnsw = SemanticIndex(x.shape[1], params=HNSWParams(m=32, ef_construction=100)).add(ids, x, show_progress_bar=False)
    for ef in (16, 32, 64):
        out["hnsw_ef%d" % ef] = round(recall_at_k(hnsw.search_array(q, 10, ef_search=ef)[1], truth), 3)
    ivf = SemanticIndex(x.shape[1], params=IVFPQParams(nlist=256, pq_m=48)).add(ids, x, show_progress_bar=False)
    for nprobe in (4, 8, 16):
        out["ivfpq256_nprobe%d" % nprobe] = round(recall_at_k(ivf.search_array(q, 10, nprobe=nprobe)[1], truth), 3)
    logger.info("%s", json.dumps(out))
    return out


def calibrate(path: Path, dim: int) -> list[dict]:
    real = np.load(path).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    perm = np.random.default_rng(0).permutation(len(real))
    n_q = min(1000, len(real) // 10)
    rows = [neighbour_stats(real[perm[n_q:]], real[perm[:n_q]], "real: %s" % path.name)]
    data = MixtureData.for_size(len(real) - n_q, dim=dim)
    rows.append(neighbour_stats(data.draw(len(real) - n_q, seed=7), data.draw(n_q, seed=8), "synthetic mixture"))
    return rows


def best_rows(rows: list[dict], target: float) -> list[dict]:
    """Per (n, kind): the fastest configuration with recall >= target (or the most accurate one if none)."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        for kind in dict.fromkeys(r["kind"] for r in rows if r["n"] == n):
            cand = [r for r in rows if r["n"] == n and r["kind"] == kind]
            ok = [r for r in cand if r["recall_at_10"] >= target]
            best = max(ok, key=lambda r: r["qps"]) if ok else max(cand, key=lambda r: r["recall_at_10"])
            out.append(dict(best, meets_target=bool(ok)))
    return out


def fmt_params(p: dict) -> str:
    return ", ".join("%s=%s" % (k, v) for k, v in p.items()) or "-"


ROW_COLUMNS = ["n", "kind", "params", "build_s", "rss_delta_mb", "index_mb", "qps", "speedup_vs_flat", "recall_at_10",
               "recall_at_10_ties"]


def table(rows: list[dict], columns=ROW_COLUMNS, extra=()) -> str:
    c = list(columns) + list(extra)
    lines = ["| " + " | ".join(c) + " |", "|" + "---|" * len(c)]
    for r in rows:
        vals = []
        for name in c:
            v = r.get(name, "")
            if name == "params" or isinstance(v, dict):
                v = fmt_params(v)
            elif name == "n":
                v = "{:,}".format(v)
            elif isinstance(v, float):
                v = "{:,.3f}".format(v) if "recall" in name else "{:,.1f}".format(v)
            vals.append(str(v))
        lines.append("| " + " | ".join(vals) + " |")
    return "\n".join(lines)


def machine_paragraphs(payload: dict) -> list[str]:
    """The machine, the query protocol and the near-tie shares: the same words for both modes."""
    env = payload["environment"]
    return [
        "Machine: %s, %d FAISS threads (faiss %s, numpy %s, OMP_WAIT_POLICY=%s); load average at start %s, at end "
        "%s (the machine is shared, so absolute timings are noisy). Queries: %d per batch, k=%d, best of %d runs. "
        "Recall@10 is against the exact flat index (ids); `recall_at_10_ties` also credits a result whose cosine is "
        "within 1e-3 of the true 10th neighbour's (ann-benchmarks' convention), which matters where neighbours "
        "nearly tie. `rss_delta_mb` is the RSS growth while building (approximate), `index_mb` the saved directory."
        % (env["cpu"], env["faiss_threads"], env["faiss"], env["numpy"], payload.get("omp_wait_policy"),
           env["load_start"], env["load_end"],
           payload["n_queries"], payload["k"], payload["repeats"]),
        "",
        "Near ties: the share of queries whose true 10th and 11th neighbours differ by less than 1e-3 in cosine is "
        + ", ".join("%s at n=%s" % ("{:.0%}".format(r["near_tie_queries"]), "{:,}".format(r["n"]))
                    for r in payload["rows"] if r["kind"] == "flat" and "near_tie_queries" in r) + ".",
        "",
    ]


def result_sections(payload: dict, grouping: str, target_scope: str) -> list[str]:
    """The best-setting table, the target line and the table of all settings (synthetic and real reports)."""
    return [
        "## Fastest setting with recall@10 >= %.2f (%s)" % (payload["target_recall"], grouping),
        "",
        table(payload["best"], extra=["meets_target"]),
        "",
        "**Target** (HNSW or IVF-PQ at recall@10 >= %.2f and >= %gx the exact QPS%s): %s"
        % (payload["target_recall"], payload["target_speedup"], target_scope, payload["target_summary"]),
        "",
        "## All settings",
        "",
        table(payload["rows"]),
        "",
    ]


def markdown(payload: dict) -> str:
    out = [
        "# SemanticIndex benchmark",
        "",
        "Generated by `benchmarks/search.py` on %s%s. %s" % (
            payload["date"], "" if payload.get("complete", True) else " (partial: sizes %s so far)" % payload["sizes"],
            payload["data"]),
        "",
    ] + machine_paragraphs(payload) + result_sections(payload, "per size and kind", " at the largest size")
    if payload.get("calibration"):
        cal = payload["calibration"]
        c = list(cal[0])
        out += [
            "## Calibration: real sentence embeddings vs the synthetic mixture (same n)",
            "",
            "Neighbour cosines, random-pair cosine, maximum-likelihood local intrinsic dimension (20 neighbours), "
            "and recall@10 of HNSW (M=32, efConstruction=100) and IVF-PQ (nlist=256, pq_m=48, k_factor=10) at a "
            "few search widths.",
            "",
            "| " + " | ".join(c) + " |",
            "|" + "---|" * len(c),
        ] + ["| " + " | ".join(str(r[k]) for k in c) + " |" for r in cal] + [""]
    return "\n".join(out)


def target_summary(rows: list[dict], n_max: int, target_recall: float, target_speedup: float) -> str:
    hits = [r for r in rows if r["n"] == n_max and r["kind"] != "flat" and r["recall_at_10"] >= target_recall
            and r["speedup_vs_flat"] >= target_speedup]
    if not hits:
        return "**not met** at n=%s" % "{:,}".format(n_max)
    best = max(hits, key=lambda r: r["qps"])
    return "met at n=%s: %s (%s) reaches recall@10 %.3f at %.0f QPS, %.1fx the exact search" % (
        "{:,}".format(n_max), best["kind"], fmt_params(best["params"]), best["recall_at_10"], best["qps"],
        best["speedup_vs_flat"])


# ---- real-data mode ------------------------------------------------------------------------------------------
SENTENCE_VECTORS = ("mean of the last layer over all tokens ([CLS] and [SEP] included), L2-normalised: what "
                    "sentence-transformers computes for all-MiniLM-L6-v2 (Pooling + Normalize)")


def sample_real(n: int, n_queries: int, seed: int, min_words: int, max_words: int) -> dict:
    """``n_queries`` + ``n`` distinct real sentences, drawn without replacement from the pool of every source.

    The pool is every distinct sentence of :data:`_common.REAL_SOURCES` with ``min_words``..``max_words`` words;
    a seeded permutation of it gives the queries (its first ``n_queries``) and the collection (the next ``n``), so
    no query is in the collection and both follow the pool's mix of sources.
    """
    from _common import REAL_SOURCES, real_sentence_pool

    texts, names = real_sentence_pool(min_words, max_words)
    if len(texts) < n + n_queries:
        raise SystemExit("only %d distinct sentences of %d-%d words in the sources; --real %d needs %d with the "
                         "queries" % (len(texts), min_words, max_words, n, n + n_queries))
    order = np.random.default_rng(seed).permutation(len(texts))[: n + n_queries]
    query_idx, coll_idx = order[:n_queries], order[n_queries:]
    sources = []
    for name in REAL_SOURCES:
        in_pool = [i for i, m in enumerate(names) if m == name]
        chosen = [int(i) for i in coll_idx if names[i] == name]
        sources.append({"source": name, "pool": len(in_pool),
                        "collection": len(chosen),
                        "queries": int(sum(names[i] == name for i in query_idx)),
                        "example": texts[chosen[0]] if chosen else ""})
    return {"queries": [texts[i] for i in query_idx], "collection": [texts[i] for i in coll_idx],
            "pool": len(texts), "sources": sources, "seed": seed, "min_words": min_words, "max_words": max_words}


def embed_real(texts: list[str], args) -> tuple[np.ndarray, dict]:
    """(len(texts), H) sentence vectors by ``args.model`` on ``precision="auto"``, and what making them cost.

    Cached as ``<model>-n<N>-q<Q>-<precision>-<digest>.npy`` (plus a .json of the cost) in ``args.embed_cache``;
    the digest is of the texts, so another seed, filter or source list embeds anew. The model is loaded either way:
    the precision auto chooses (its probe is cached by ctxemb) is part of the key.
    """
    import hashlib

    import torch
    from _common import machine

    from ctxemb.embedding.embedder.embedder import Embedder
    from ctxemb.models.hub import cache_dir

    if args.embed_threads:
        torch.set_num_threads(args.embed_threads)
    t0 = time.perf_counter()
    embedder = Embedder.from_pretrained(args.model, precision="auto", layers=(-1,))
    load_s = time.perf_counter() - t0
    choice = embedder.precision_choice
    precision = embedder.config.precision
    logger.info("model loaded in %.1f s; %s", load_s, choice.summary() if choice else precision)
    digest = hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest()[:12]
    folder = args.embed_cache or cache_dir() / "benchmarks" / "search_real"
    stem = "%s-n%d-q%d-%s-%s" % (Path(args.model).name, len(texts) - args.queries, args.queries, precision, digest)
    npy, meta = folder / (stem + ".npy"), folder / (stem + ".json")
    if npy.exists() and meta.exists():
        logger.info("sentence vectors from the cache: %s", npy)
        info = json.loads(meta.read_text())
        info.update(vectors_from_cache=True, load_model_s=round(load_s, 1))
        return np.load(npy), info
    folder.mkdir(parents=True, exist_ok=True)
    logger.info("embedding %d sentences with %s (%s)", len(texts), args.model, precision)
    t0 = time.perf_counter()
    embedder.embed_sentences(texts, layers=[-1], pooling="mean", normalize=True, out_path=npy,
                             show_progress_bar=sys.stderr.isatty())
    embed_s = time.perf_counter() - t0
    n_tokens = sum(len(t) + 2 for t in embedder.tokenizer.tokenize(texts))  # + [CLS] and [SEP]
    info = {"model": args.model, "precision_requested": "auto", "precision": precision,
            "precision_choice": choice.summary() if choice else None,
            "precision_choice_from_cache": bool(choice and choice.from_cache),
            "sentence_vectors": SENTENCE_VECTORS, "texts": len(texts), "tokens": n_tokens,
            "load_model_s": round(load_s, 1), "embed_s": round(embed_s, 1),
            "tokens_per_s": round(n_tokens / embed_s, 1), "sentences_per_s": round(len(texts) / embed_s, 1),
            "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "cache_file": str(npy)}
    with atomic_write(meta) as f:
        json.dump(info, f, indent=2)
    logger.info("embedded in %.1f s: %d tokens, %.0f tokens/s", embed_s, n_tokens, n_tokens / embed_s)
    del embedder
    gc.collect()
    return np.load(npy), dict(info, vectors_from_cache=False)


def synthetic_comparison(rows: list[dict], path: Path, target: float) -> dict | None:
    """The real rows beside the committed synthetic run's rows at the size nearest ``n`` (read, not re-run)."""
    if not path.exists():
        logger.warning("no synthetic results at %s: no comparison", path)
        return None
    syn = json.loads(path.read_text())
    n = rows[0]["n"]
    n_syn = min({r["n"] for r in syn["rows"]}, key=lambda s: abs(math.log(s / n)))
    syn_rows = [r for r in syn["rows"] if r["n"] == n_syn]
    real_best = {r["kind"]: r for r in best_rows(rows, target)}
    syn_best = {r["kind"]: r for r in best_rows(syn_rows, target)}
    best = []
    for kind, r in real_best.items():
        s = syn_best.get(kind)
        best.append({"kind": kind, "real_params": r["params"], "real_recall_at_10": r["recall_at_10"],
                     "real_qps": r["qps"], "real_speedup": r["speedup_vs_flat"], "real_meets": r["meets_target"],
                     "synthetic_params": s["params"] if s else {},
                     "synthetic_recall_at_10": s["recall_at_10"] if s else "",
                     "synthetic_qps": s["qps"] if s else "", "synthetic_speedup": s["speedup_vs_flat"] if s else "",
                     "synthetic_meets": s["meets_target"] if s else ""})
    by_setting = {(r["kind"], json.dumps(r["params"], sort_keys=True)): r for r in syn_rows}
    same = []
    for r in rows:
        if r["kind"] == "flat" or (r["kind"] != "hnsw" and r["params"].get("k_factor") != 10):
            continue
        s = by_setting.get((r["kind"], json.dumps(r["params"], sort_keys=True)))
        if s is not None:
            same.append({"kind": r["kind"], "params": r["params"], "real_recall_at_10": r["recall_at_10"],
                         "synthetic_recall_at_10": s["recall_at_10"], "real_speedup": r["speedup_vs_flat"],
                         "synthetic_speedup": s["speedup_vs_flat"]})
    flat = next((r for r in syn_rows if r["kind"] == "flat"), {})
    return {"file": str(path.relative_to(RESULTS.parent.parent)) if path.is_relative_to(RESULTS.parent.parent)
            else str(path), "date": syn.get("date"), "n": n_syn, "best": best, "same_settings": same,
            "synthetic_flat": {k: flat.get(k) for k in ("qps", "near_tie_queries", "top1_cos", "top10_cos")}}


def markdown_real(payload: dict) -> str:
    samp, emb, cmp_ = payload["sentences"], payload["embedding"], payload.get("synthetic_comparison")
    n, flat = payload["n"], next(r for r in payload["rows"] if r["kind"] == "flat")

    def cell(text: str, width: int = 80) -> str:
        text = text if len(text) <= width else text[: width - 1] + "\u2026"
        return text.replace("|", "\\|")

    src = ["| source | distinct sentences | in the collection | queries | example (from the collection) |",
           "|---|---|---|---|---|"]
    src += ["| %s | {:,} | {:,} | {:,} | %s |".format(s["pool"], s["collection"], s["queries"])
            % (s["source"], cell(s["example"])) for s in samp["sources"]]
    src.append("| **all** | {:,} | {:,} | {:,} | |".format(samp["pool"], n, payload["n_queries"]))
    choice = emb.get("precision_choice") or "precision %r" % emb["precision"]
    cost = ("%s: %s. Sentence vectors: %s. %s texts (collection and queries), %s tokens (special tokens included, "
            "padding excluded) embedded in %.1f s (tokenize + encode + pool, `Embedder.embed_sentences`): %s tokens/s, "
            "%s sentences/s on %s with %d torch threads (%s). Loading the model and auto's choice took %.1f s%s." % (
                emb["model"], choice, emb["sentence_vectors"], "{:,}".format(emb["texts"]),
                "{:,}".format(emb["tokens"]), emb["embed_s"], "{:,.0f}".format(emb["tokens_per_s"]),
                "{:,.0f}".format(emb["sentences_per_s"]), emb["machine"]["cpu"], emb["machine"]["threads"],
                emb["date"], emb["load_model_s"],
                " in this run; its vectors came from the cache, embedded on the date above"
                if payload["embedding_from_cache"] else ""))
    out = [
        "# SemanticIndex benchmark on real sentence embeddings",
        "",
        "Generated by `benchmarks/search.py --real %s` on %s: the synthetic benchmark's measurements "
        "(`benchmarks/results/search.md`) on %s real English sentences instead of the Gaussian mixture." % (
            n, payload["date"], "{:,}".format(n)),
        "",
        "## Sentences",
        "",
        "The pool is every distinct sentence (exact duplicates removed after collapsing whitespace; a sentence in "
        "several sources counts for the first) of %d-%d whitespace-separated words from the sources below; a "
        "permutation seeded with %d gives the %s queries (the first) and the %s indexed sentences (the next), so "
        "every query is new text, absent from the collection. %s" % (
            samp["min_words"], samp["max_words"], samp["seed"], "{:,}".format(payload["n_queries"]),
            "{:,}".format(n), samp["note"]),
        "",
        "\n".join(src),
        "",
        "## Embedding cost",
        "",
        cost,
        "",
        "## Search",
        "",
    ] + machine_paragraphs(payload) + [
        "Neighbours: the mean cosine of a query's nearest indexed sentence is %.3f, of its 10th %.3f%s." % (
            flat["top1_cos"], flat["top10_cos"],
            " (synthetic mixture at n=%s: %s and %s)" % ("{:,}".format(cmp_["n"]), cmp_["synthetic_flat"]["top1_cos"],
                                                        cmp_["synthetic_flat"]["top10_cos"])
            if cmp_ and cmp_["synthetic_flat"].get("top1_cos") is not None else ""),
        "",
    ]
    if cmp_:
        out += [
            "## Real vs synthetic",
            "",
            "Beside the synthetic mixture's rows at n=%s from `%s` (%s; read, not re-run, so the two ran at different "
            "times on a shared machine: compare speed-ups, each against its own exact search (real %s q/s, "
            "synthetic %s q/s), rather than q/s). Fastest setting of each kind with recall@10 >= %.2f (the most "
            "accurate one where none reaches it):" % (
                "{:,}".format(cmp_["n"]), cmp_["file"], cmp_["date"], "{:,.0f}".format(flat["qps"]),
                "{:,.0f}".format(cmp_["synthetic_flat"]["qps"] or float("nan")), payload["target_recall"]),
            "",
            table([r for r in cmp_["best"] if r["kind"] != "flat"],
                  columns=["kind", "real_params", "real_recall_at_10", "real_speedup", "real_meets",
                           "synthetic_params", "synthetic_recall_at_10", "synthetic_speedup", "synthetic_meets"]),
            "",
        ]
        if cmp_["same_settings"]:
            out += ["Recall@10 at the same settings (HNSW; IVF-PQ with k_factor 10):", "",
                    table(cmp_["same_settings"], columns=["kind", "params", "real_recall_at_10",
                                                          "synthetic_recall_at_10", "real_speedup",
                                                          "synthetic_speedup"]), ""]
    out += result_sections(payload, "per kind", "") + [
        "## Stage times (wall seconds, this run)",
        "",
        "| stage | seconds |",
        "|---|---|",
    ] + ["| %s | %s |" % (k, v) for k, v in payload["stage_seconds"].items()] + [""]
    return "\n".join(out)


def environment(args, load_start: str) -> dict:
    env = {
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "faiss_threads": args.threads,
        "faiss": faiss.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "load_start": load_start,
    }
    try:
        with open("/proc/cpuinfo") as f:
            env["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return env


def write_outputs(args, payload: dict, text: str) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out / ("%s.json" % args.name)) as f:
        json.dump(payload, f, indent=2)
    with atomic_write(args.out / ("%s.md" % args.name)) as f:
        f.write(text)


def run_real(args, load_start: str) -> str:
    stage: dict[str, float] = {}
    t0 = time.perf_counter()
    sample = sample_real(args.real, args.queries, args.seed, args.min_words, args.max_words)
    stage["collect sentences"] = round(time.perf_counter() - t0, 1)
    logger.info("%d sentences in the pool; collection %s", sample["pool"],
                {s["source"]: s["collection"] for s in sample["sources"]})
    t0 = time.perf_counter()
    vectors, emb = embed_real(sample["queries"] + sample["collection"], args)
    stage["load model + auto choice"] = emb["load_model_s"]
    stage["embed (this run)"] = 0.0 if emb["vectors_from_cache"] else emb["embed_s"]
    stage["embedding step in all"] = round(time.perf_counter() - t0, 1)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    queries, x = vectors[: args.queries], vectors[args.queries:]
    env = environment(args, load_start)
    env["cpu"] = emb["machine"]["cpu"]
    faiss.omp_set_num_threads(args.threads)  # again: torch (set to --embed-threads) may share the OpenMP runtime
    with tempfile.TemporaryDirectory(prefix="ctxemb-search-bench-", dir=args.workdir) as tmp:
        rows = bench_collection(x, queries, args, Path(tmp), stage_seconds=stage)
    env["load_end"] = "%.1f" % os.getloadavg()[0]
    comparison = synthetic_comparison(rows, args.synthetic_results, args.target_recall)
    sample_info = {k: v for k, v in sample.items() if k not in ("queries", "collection")}
    from _common import REAL_SOURCES_NOTE

    sample_info["note"] = REAL_SOURCES_NOTE
    emb_from_cache = emb.pop("vectors_from_cache")
    payload = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "n": args.real,
        "n_queries": args.queries,
        "k": args.k,
        "repeats": args.repeats,
        "sentences": sample_info,
        "embedding": emb,
        "embedding_from_cache": emb_from_cache,
        "environment": env,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "target_recall": args.target_recall,
        "target_speedup": args.target_speedup,
        "rows": rows,
        "best": best_rows(rows, args.target_recall),
        "target_summary": target_summary(rows, args.real, args.target_recall, args.target_speedup),
        "synthetic_comparison": comparison,
        "stage_seconds": stage,
    }
    text = markdown_real(payload)
    write_outputs(args, payload, text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    ap.add_argument("--synthetic-results", type=Path, default=RESULTS / "search.json",
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
    ap.add_argument("--out", type=Path, default=RESULTS)
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
    load_start = "%.1f" % os.getloadavg()[0]
    if args.real is not None:
        print(run_real(args, load_start))
        return
    calibration = calibrate(args.calibrate_npy, args.dim) if args.calibrate_npy else None
    rows: list[dict] = []
    env = environment(args, load_start)

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
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "target_recall": args.target_recall,
            "target_speedup": args.target_speedup,
            "rows": rows,
            "best": best_rows(rows, args.target_recall),
            "target_summary": target_summary(rows, max(sizes_done), args.target_recall, args.target_speedup),
            "calibration": calibration,
        }
        text = markdown(payload)
        write_outputs(args, payload, text)
        return text

    done: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ctxemb-search-bench-", dir=args.workdir) as tmp:
        for n in args.sizes:
            rows += bench_size(n, args, Path(tmp))
            done.append(n)
            text = write(done)  # partial results survive a crash at a larger size
    print(text)


if __name__ == "__main__":
    main()
