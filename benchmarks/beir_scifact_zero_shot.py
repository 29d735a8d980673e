"""BEIR SciFact, late interaction with all-MiniLM-L6-v2 as it ships: MaxSim over its last-layer token vectors, at
full width and through a PCA projection to 128 dimensions (no training), exhaustive and in the compressed index.

Same dev split, caches and conventions as ``beir_scifact.py`` (documents cut at 256 tokens, no markers, no query
augmentation: the encoder never saw them). The projection is the top 128 right singular vectors of 200,000 corpus
token vectors (uncentred, so dot products are kept as far as 128 dimensions allow), the same rule as the training
task's ``--projection-init pca``. Test run files for every row: ``benchmarks/results/scifact_test_<key>.trec``.

    python -m benchmarks.beir_scifact_zero_shot            # or --render: rewrite the Markdown from the JSON

Writes benchmarks/results/beir_scifact_zero_shot.{md,json}.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.beir_scifact import build_index, cached_tokens, latency, query_profile, render, scifact, score_row
from ctxemb import Embedder
from ctxemb.search.late import LateInteractionConfig, LateInteractionEncoder, LateInteractionIndex
from ctxemb.search.retrievers import BM25Retriever, FusionRetriever, LateInteractionRetriever


def main() -> None:
    data, _, dev_ids, test_queries = scifact()
    dev = data.subset(dev_ids)
    ids, texts = list(data.corpus), [d.full_text for d in data.corpus.values()]
    corpus = dict(zip(ids, texts))
    emb = Embedder.from_pretrained("all-MiniLM-L6-v2", precision="auto")
    tag = hashlib.sha1(f"all-MiniLM-L6-v2-{emb.config.precision}".encode()).hexdigest()[:8]
    config = LateInteractionConfig(document_length=256, query_augmentation=False)
    full = LateInteractionEncoder(emb, config)
    docs, encode_s = cached_tokens(full, texts, f"{tag}-truncate-256")

    tokens = np.concatenate(docs)
    sample = tokens[np.random.default_rng(0).choice(len(tokens), 200_000, replace=False)]
    _, _, vt = np.linalg.svd(sample, full_matrices=False)
    projection = vt[:128].astype(np.float32)  # (128, 384)
    pca = LateInteractionEncoder(emb, config, projection=projection)
    projected = [d @ projection.T for d in docs]
    projected = [p / np.linalg.norm(p, axis=1, keepdims=True) for p in projected]

    rows, profiles = [], {}
    bm25 = BM25Retriever(corpus)

    def evaluate(key, label, retriever, **extra):
        score_row(rows, key, label, retriever, dev, test_queries, **extra)

    exact = LateInteractionRetriever(full, corpus, document_vectors=docs, exhaustive=True)
    evaluate("maxsim-384-exhaustive", "MaxSim zero-shot, 384 d, exhaustive (float32)", exact,
             **latency(exact, dev.queries))
    exact128 = LateInteractionRetriever(pca, corpus, document_vectors=projected, exhaustive=True)
    evaluate("maxsim-pca128-exhaustive", "MaxSim zero-shot, PCA to 128 d, exhaustive (float32)", exact128,
             **latency(exact128, dev.queries))
    evaluate("hybrid-bm25-maxsim-pca128", "hybrid: BM25 + MaxSim PCA 128 d (RRF 60)", FusionRetriever([bm25, exact128]))
    for nbits in (2, 4):
        with tempfile.TemporaryDirectory() as tmp:
            steps = build_index(pca, ids, projected, nbits, Path(tmp) / "index")
            index = LateInteractionIndex.load(Path(tmp) / "index")
            if nbits == 2:
                profiles["maxsim-pca128-2b"] = {"encode_s": encode_s, **steps,
                                                **query_profile(pca, index, dev.queries)}
            for nprobe, candidates in ((4, 256), (8, 512)):
                r = LateInteractionRetriever(pca, index=index, nprobe=nprobe, candidates=candidates)
                evaluate(f"maxsim-pca128-{nbits}b-p{nprobe}",
                         f"MaxSim zero-shot, PCA 128 d, index {nbits}-bit, nprobe {nprobe}, {candidates} candidates",
                         r, bytes_per_token=index.bytes_per_token, index_s=encode_s + sum(steps.values()),
                         **latency(r, dev.queries))

    payload = {"machine": harness.machine(), "precision": emb.config.precision, "dev_queries": len(dev_ids),
               "tokens": int(len(tokens)), "rows": rows, "profiles": profiles}
    harness.write_results(NAME, payload, render(payload, TITLE, protocol(payload)))


TITLE = "BEIR SciFact, dev split: all-MiniLM-L6-v2's token vectors as they ship (MaxSim)"
NAME = "beir_scifact_zero_shot"


def protocol(payload: dict) -> str:
    m = payload["machine"]
    return (f"{m['cpu']} ({m['cpu_count']} cores, torch {m['torch']}); precision {payload['precision']}; documents "
            f"cut at 256 tokens ({payload['tokens']:,} tokens after punctuation); nDCG@10, R@100, MRR@10 x 100. "
            "Latency: one query at a time (encode + search + re-score), median and p99 over 100 dev queries, measured "
            "while other jobs shared the 2 cores; index_s: encoding (timed when it was cached) + codec fit + "
            "compression + write.")


def rerender() -> None:
    import json

    payload = json.loads((harness.RESULTS / f"{NAME}.json").read_text())
    harness.write_results(NAME, payload, render(payload, TITLE, protocol(payload)))


def cli(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--render", action="store_true", help="only rewrite the Markdown from the committed JSON")
    if ap.parse_args(argv).render:
        rerender()
    else:
        main()


if __name__ == "__main__":
    cli()
