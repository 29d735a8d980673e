"""Late interaction on SciFact, ctxemb against PyLate, speed and size side by side in one run.

Both sides index the whole SciFact corpus (5,183 abstracts, title + text) from a model trained on the same rows
(``ctxemb finetune late-interaction --dim 128`` and ``benchmarks/peers/pylate_scifact.py``), cut documents at the
same maximum length, and answer the 200 dev queries one at a time (encode + search + re-score, top 100):

- ctxemb: the encoder at ``--precision`` (default ``auto``), token pooling, the compressed index (centroids plus
  residuals at ``--nbits``) written to disk and loaded back, candidates by centroid probes, exact MaxSim over the
  decompressed candidates; beside it exhaustive MaxSim over the same uncompressed float32 vectors (the reference
  the compressed index's quality is held to).
- PyLate: its ColBERT encoder (float32) and its CPU index, Voyager (HNSW over token vectors, then MaxSim of the
  candidates), run in PyLate's own virtual environment (``--pylate-python``) as a child process.

Indexing time is encode + pool + compress + write for ctxemb, encode + index for PyLate; the first row's profile says
where an indexing minute and a query go. Run it on a quiet machine: the two sides run one after the other.

    python -m benchmarks.late_vs_pylate --late-model runs/scifact-late-s0/model \\
        --pylate-model /work/peers/runs/pylate-s0/model

Writes benchmarks/results/late_vs_pylate.{md,json}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path


from benchmarks import harness
from benchmarks.beir_scifact import MEASURES, build_index, latency, query_profile, scifact
from ctxemb.metrics.trec import evaluate_run
from ctxemb.search.late import LateInteractionEncoder, LateInteractionIndex
from ctxemb.search.late.pooling import pool_documents
from ctxemb.search.retrievers import LateInteractionRetriever

ROOT = Path(__file__).resolve().parent.parent


def dev_scores(retriever, dev) -> dict[str, float]:
    run = retriever.retrieve(dev.queries, 100)
    return {m: 100 * v for m, v in evaluate_run(run, dev.qrels, MEASURES).mean.items()}


def ctxemb_rows(args, ids, texts, dev) -> tuple[list[dict], dict]:
    """The compressed index and exhaustive MaxSim rows of ctxemb, and the profile of the index row."""
    trained = LateInteractionEncoder.from_pretrained(args.late_model, precision=args.precision)
    enc = LateInteractionEncoder(trained.embedder, dataclasses.replace(trained.config,
                                                                      document_length=args.document_length),
                                 projection=trained.projection)
    corpus = dict(zip(ids, texts))
    sw = harness.Stopwatch()
    docs = enc.encode_documents(texts, show_progress_bar=False)
    encode_s = sw.stop()
    sw = harness.Stopwatch()
    pooled = pool_documents(docs, args.pool) if args.pool > 1 else docs
    pool_s = sw.stop()
    common = {"precision": enc.embedder.config.precision, "dim": enc.dim, "document_length": args.document_length}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        steps = build_index(enc, ids, pooled, args.nbits, Path(tmp) / "index")
        index_s = encode_s + pool_s + sum(steps.values())
        loaded = LateInteractionIndex.load(Path(tmp) / "index")
        stored = harness.dir_bytes(Path(tmp) / "index")
        r = LateInteractionRetriever(enc, index=loaded, nprobe=args.nprobe, candidates=args.candidates)
        rows.append({"system": f"ctxemb: index {args.nbits}-bit, pool {args.pool}, nprobe {args.nprobe}, "
                               f"{args.candidates} candidates", **common, **dev_scores(r, dev),
                     "index_s": index_s, "bytes_per_token": loaded.bytes_per_token, "index_mb": stored / 1e6,
                     "tokens": loaded.n_tokens, **latency(r, dev.queries, n=len(dev.queries))})
        profile = {"encode_s": encode_s, "pool_s": pool_s, **steps, **query_profile(enc, loaded, dev.queries)}
    exact = LateInteractionRetriever(enc, corpus, document_vectors=docs, exhaustive=True)
    rows.append({"system": "ctxemb: exhaustive MaxSim (uncompressed float32, no pooling)", **common,
                 **dev_scores(exact, dev), "index_s": encode_s, "bytes_per_token": 4 * enc.dim,
                 "tokens": int(sum(len(d) for d in docs)), **latency(exact, dev.queries, n=len(dev.queries))})
    return rows, profile


def pylate_row(args) -> dict:
    """Run PyLate's index-and-retrieve in its own environment; its summary as a row."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(args.pylate_python), "-m", "benchmarks.peers.pylate_scifact", "--model", str(args.pylate_model),
               "--document-length", str(args.document_length), "--skip-test", "--out", tmp]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        print(" ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
        s = json.loads((Path(tmp) / "summary.json").read_text())
    tokens = s["doc_token_vectors"]
    return {"system": "PyLate: Voyager index (HNSW over token vectors + MaxSim), k_token 100", "precision": "float32",
            "dim": 128, "document_length": args.document_length,
            "ndcg@10": 100 * s["dev"]["ndcg_cut_10"], "recall@100": 100 * s["dev"]["recall_100"],
            "index_s": s["encode_seconds"] + s["index_seconds"], "bytes_per_token": s["index_bytes"] / tokens,
            "index_mb": s["index_bytes"] / 1e6, "tokens": tokens,
            "latency_ms_p50": s["latency_ms_median"], "latency_ms_p99": s["latency_ms_p99"],
            "pylate_encode_s": s["encode_seconds"], "pylate_index_s": s["index_seconds"],
            "versions": s["versions"], "torch_threads": s["torch_threads"]}


COLUMNS = ["system", "precision", "dim", "document_length", "ndcg@10", "recall@100", "index_s", "bytes_per_token",
           "index_mb", "latency_ms_p50", "latency_ms_p99"]


def render(payload: dict) -> str:
    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else v

    rows = [{k: cell(v) for k, v in r.items()} for r in payload["rows"]]
    ours, peer = payload["rows"][0], payload["rows"][-1]
    lines = [
        "# Late interaction on SciFact: ctxemb and PyLate side by side", "",
        f"One run on {payload['machine']['cpu']} ({payload['machine']['cpu_count']} cores), the two sides one after "
        "the other. The whole corpus (5,183 documents, title + text) indexed from a model trained on the same "
        "SciFact rows; the 200 dev queries answered one at a time (encode + search + re-score, top 100); nDCG@10 "
        "and R@100 x 100 on them. index_s: encode + pool + codec fit + compress + write (ctxemb), encode + Voyager "
        "index (PyLate). bytes_per_token: the stored index over the document token vectors it holds.", "",
        harness.markdown_table(rows, COLUMNS), "",
        f"ctxemb's index against PyLate's: indexing {peer['index_s'] / ours['index_s']:.1f}x faster, median query "
        f"latency {peer['latency_ms_p50'] / ours['latency_ms_p50']:.1f}x lower, "
        f"{peer['bytes_per_token'] / ours['bytes_per_token']:.0f}x smaller per token.", "",
        "Where the index row's time goes (seconds to index, ms per query, medians): " + ", ".join(
            f"{k} {v:.1f}" for k, v in payload["profile"].items()),
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--late-model", required=True, help="a ctxemb late-interaction model of <= 128 dimensions")
    ap.add_argument("--pylate-model", type=Path, required=True, help="a model benchmarks/peers/pylate_scifact trained")
    ap.add_argument("--pylate-python", type=Path, default=Path("/work/peers/pylate-venv/bin/python"),
                    help="the python of PyLate's own virtual environment")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--document-length", type=int, default=256)
    ap.add_argument("--nbits", type=int, default=2)
    ap.add_argument("--pool", type=int, default=2)
    ap.add_argument("--nprobe", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=256)
    ap.add_argument("--threads", type=int, default=None, help="PyLate's torch threads (default: torch's own)")
    ap.add_argument("--render", action="store_true", help="only rewrite the Markdown from the committed JSON")
    args = ap.parse_args(argv)
    if args.render:
        payload = json.loads((harness.RESULTS / "late_vs_pylate.json").read_text())
        harness.write_results("late_vs_pylate", payload, render(payload))
        return
    if not args.pylate_python.exists():
        raise SystemExit(f"--pylate-python {args.pylate_python} does not exist: set up PyLate's venv as "
                         "benchmarks/peers/pylate_scifact.py describes")
    data, _, dev_ids, _ = scifact()
    dev = data.subset(dev_ids)
    ids = list(data.corpus)
    texts = [d.full_text for d in data.corpus.values()]
    rows, profile = ctxemb_rows(args, ids, texts, dev)
    for row in rows:
        print(row, file=sys.stderr, flush=True)
    rows.append(pylate_row(args))
    payload = {"machine": harness.machine(), "rows": rows, "profile": profile, "settings": {k: str(v) for k, v in vars(args).items()},
               "dev_queries": len(dev_ids), "docs": len(ids)}
    harness.write_results("late_vs_pylate", payload, render(payload))


if __name__ == "__main__":
    main()
