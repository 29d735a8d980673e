"""The real-data mode: real English sentences from the shared data (:func:`sample_real`), embedded once and cached
(:func:`embed_real`), measured as the synthetic collections are, and set beside the committed synthetic run
(:func:`synthetic_comparison`)."""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from benchmarks import harness
from benchmarks._common import REAL_SOURCES, REAL_SOURCES_NOTE, real_sentence_pool
from benchmarks.search.measure import bench_collection
from benchmarks.search.report import best_rows, markdown_real, target_summary

logger = logging.getLogger("benchmarks.search")


SENTENCE_VECTORS = ("mean of the last layer over all tokens ([CLS] and [SEP] included), L2-normalised: what "
                    "sentence-transformers computes for all-MiniLM-L6-v2 (Pooling + Normalize)")


def sample_real(n: int, n_queries: int, seed: int, min_words: int, max_words: int) -> dict:
    """``n_queries`` + ``n`` distinct real sentences, drawn without replacement from the pool of every source.

    The pool is every distinct sentence of :data:`benchmarks._common.REAL_SOURCES` with
    ``min_words``..``max_words`` words; a seeded permutation of it gives the queries (its first ``n_queries``) and the
    collection (the next ``n``), so no query is in the collection and both follow the pool's mix of sources.
    """
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

    from ctxemb.embedding.embedder import Embedder
    from ctxemb.models.hub import cache_dir

    if args.embed_threads:
        torch.set_num_threads(args.embed_threads)
    sw = harness.Stopwatch()
    embedder = Embedder.from_pretrained(args.model, precision="auto", layers=(-1,))
    load_s = sw.stop()
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
    sw = harness.Stopwatch()
    embedder.embed_sentences(texts, layers=[-1], pooling="mean", normalize=True, out_path=npy,
                             show_progress_bar=sys.stderr.isatty())
    embed_s = sw.stop()
    n_tokens = sum(len(t) + 2 for t in embedder.tokenizer.tokenize(texts))  # + [CLS] and [SEP]
    info = {"model": args.model, "precision_requested": "auto", "precision": precision,
            "precision_choice": choice.summary() if choice else None,
            "precision_choice_from_cache": bool(choice and choice.from_cache),
            "sentence_vectors": SENTENCE_VECTORS, "texts": len(texts), "tokens": n_tokens,
            "load_model_s": round(load_s, 1), "embed_s": round(embed_s, 1),
            "tokens_per_s": round(n_tokens / embed_s, 1), "sentences_per_s": round(len(texts) / embed_s, 1),
            "machine": harness.machine(), "date": time.strftime("%Y-%m-%d %H:%M"), "cache_file": str(npy)}
    harness.write_json(meta, info)
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
    root = harness.RESULTS.parent.parent
    return {"file": str(path.relative_to(root)) if path.is_relative_to(root)
            else str(path), "date": syn.get("date"), "n": n_syn, "best": best, "same_settings": same,
            "synthetic_flat": {k: flat.get(k) for k in ("qps", "near_tie_queries", "top1_cos", "top10_cos")}}


def run_real(args, environment: dict) -> str:
    """The real-data mode: sample, embed (or read the cache), measure, compare, write; returns the Markdown."""
    stage: dict[str, float] = {}
    sw = harness.Stopwatch()
    sample = sample_real(args.real, args.queries, args.seed, args.min_words, args.max_words)
    stage["collect sentences"] = round(sw.stop(), 1)
    logger.info("%d sentences in the pool; collection %s", sample["pool"],
                {s["source"]: s["collection"] for s in sample["sources"]})
    sw = harness.Stopwatch()
    vectors, emb = embed_real(sample["queries"] + sample["collection"], args)
    stage["load model + auto choice"] = emb["load_model_s"]
    stage["embed (this run)"] = 0.0 if emb["vectors_from_cache"] else emb["embed_s"]
    stage["embedding step in all"] = round(sw.stop(), 1)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    queries, x = vectors[: args.queries], vectors[args.queries:]
    env = environment
    faiss.omp_set_num_threads(args.threads)  # again: torch (set to --embed-threads) may share the OpenMP runtime
    with tempfile.TemporaryDirectory(prefix="ctxemb-search-bench-", dir=args.workdir) as tmp:
        rows = bench_collection(x, queries, args, Path(tmp), stage_seconds=stage)
    env["load_end"] = "%.1f" % os.getloadavg()[0]
    comparison = synthetic_comparison(rows, args.synthetic_results, args.target_recall)
    sample_info = {k: v for k, v in sample.items() if k not in ("queries", "collection")}
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
        "machine": harness.machine(),
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
    harness.write_results(args.name, payload, text, out_dir=args.out)
    return text
