"""BEIR SciFact: BM25, one-vector dense, hybrid and late interaction (MaxSim over token vectors), side by side.

The dev split is 200 of the 809 queries with train qrels (``ctxemb.io.split_queries(..., 200, seed=0)``; its ids
are written to ``benchmarks/results/scifact_dev_query_ids.txt``); settings are chosen on it. The 300 test queries
(those without train qrels; their qrels are held back) get TREC run files ``benchmarks/results/scifact_test_*.trec``
for independent scoring.

Encodings are cached under ``cache/scifact/`` (token vectors as float16; rerun cheaply with other search settings).

    python benchmarks/beir_scifact.py                      # zero-shot rows
    python benchmarks/beir_scifact.py --precision fp32

Writes benchmarks/results/beir_scifact.{md,json}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from _common import RESULTS, machine, markdown_table, write_results
from ctxemb import Embedder
from ctxemb.io import load_beir, read_queries, split_queries, write_run
from ctxemb.metrics.trec import evaluate_run
from ctxemb.paths import shared_data_dir
from ctxemb.search.late import LateInteractionConfig, LateInteractionEncoder
from ctxemb.search.retrievers import (BM25Retriever, DenseRetriever, FusionRetriever, LateInteractionRetriever)

CACHE = Path(__file__).resolve().parent.parent / "cache" / "scifact"
MEASURES = ("ndcg@10", "recall@100", "mrr@10")


def scifact():
    folder = shared_data_dir() / "retrieval" / "scifact"
    data = load_beir(folder, "train")
    train_ids, dev_ids = split_queries(list(data.qrels), 200, seed=0)
    all_queries = read_queries(folder / "queries.jsonl")
    test = {q: t for q, t in all_queries.items() if q not in data.qrels}
    return data, train_ids, dev_ids, test


def cached_tokens(encoder: LateInteractionEncoder, ids, texts, tag: str) -> list[np.ndarray]:
    """Token vectors of the corpus, cached as float16 (computed once per encoder setting)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"tokens-{tag}.npz"
    if path.exists():
        z = np.load(path)
        offsets = z["offsets"]
        tokens = z["tokens"].astype(np.float32)
        return [tokens[offsets[i]:offsets[i + 1]] for i in range(len(ids))]
    start = time.perf_counter()
    docs = encoder.encode_documents(texts)
    seconds = time.perf_counter() - start
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    np.savez(path, tokens=np.concatenate(docs).astype(np.float16), offsets=offsets, seconds=seconds)
    print(f"encoded {len(docs)} documents ({offsets[-1]} tokens) in {seconds:.0f} s", file=sys.stderr)
    return docs


def cached_sentences(emb: Embedder, texts, tag: str) -> np.ndarray:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"sentences-{tag}.npy"
    if path.exists():
        return np.load(path)
    vectors = emb.embed_sentences(texts, normalize=True)
    np.save(path, vectors)
    return vectors


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--stage", choices=["encode", "all"], default="all")
    args = ap.parse_args(argv)

    data, train_ids, dev_ids, test_queries = scifact()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scifact_dev_query_ids.txt").write_text("\n".join(dev_ids) + "\n")
    dev = data.subset(dev_ids)
    ids = list(data.corpus)
    texts = [d.full_text for d in data.corpus.values()]
    emb = Embedder.from_pretrained(args.model, precision=args.precision)
    tag = hashlib.sha1(f"{args.model}-{emb.config.precision}".encode()).hexdigest()[:8]

    configs = {
        "truncate-256": LateInteractionConfig(document_length=256, query_augmentation=False),
        "window-256": LateInteractionConfig(document_length=256, long_documents="window", query_augmentation=False),
        "truncate-512": LateInteractionConfig(document_length=512, query_augmentation=False),
    }
    token_sets = {}
    for name, cfg in configs.items():
        enc = LateInteractionEncoder(emb, cfg)
        token_sets[name] = (enc, cached_tokens(enc, ids, texts, f"{tag}-{name}"))
    sentences = cached_sentences(emb, texts, tag)
    if args.stage == "encode":
        return

    rows, runs = [], {}

    def evaluate(name, retriever, queries, qrels=None, **extra):
        start = time.perf_counter()
        run = retriever.retrieve(queries, 100)
        seconds = time.perf_counter() - start
        runs[name] = (retriever, run)
        if qrels is not None:
            scores = evaluate_run(run, qrels, MEASURES)
            rows.append({"retriever": name, **{m: 100 * v for m, v in scores.mean.items()},
                         "ms/query": 1000 * seconds / len(queries), **extra})
            print(rows[-1], file=sys.stderr)
        return run

    bm25 = BM25Retriever(dict(zip(ids, texts)))
    dense = DenseRetriever(emb, dict(zip(ids, texts)), vectors=sentences)
    evaluate("BM25", bm25, dev.queries, dev.qrels)
    evaluate("dense (mean pooling)", dense, dev.queries, dev.qrels)
    evaluate("hybrid BM25 + dense (RRF 60)", FusionRetriever([bm25, dense]), dev.queries, dev.qrels)
    for name, (enc, docs) in token_sets.items():
        late = LateInteractionRetriever(enc, dict(zip(ids, texts)), document_vectors=docs, exhaustive=True)
        evaluate(f"MaxSim zero-shot, exhaustive, {name}", late, dev.queries, dev.qrels)
        evaluate(f"hybrid BM25 + MaxSim {name}", FusionRetriever([bm25, late]), dev.queries, dev.qrels)

    payload = {"machine": machine(), "precision": emb.config.precision, "dev_queries": len(dev_ids),
               "rows": rows}
    md = ["# BEIR SciFact: dev split (200 of the train queries)", "",
          f"{machine()['cpu']}; {args.model} at precision {emb.config.precision}; nDCG@10, R@100, MRR@10 x 100.", "",
          markdown_table(rows, ["retriever", *MEASURES, "ms/query"])]
    write_results("beir_scifact", payload, "\n".join(md))


if __name__ == "__main__":
    main()
