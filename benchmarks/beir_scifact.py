"""BEIR SciFact: BM25, one-vector dense, hybrid and late interaction (MaxSim over token vectors), side by side.

The dev split is 200 of the 809 queries with train qrels (``ctxemb.io.split_queries(..., 200, seed=0)``; ids in
``benchmarks/results/scifact_dev_query_ids.txt``, the other 609 in ``scifact_train_query_ids.txt``); every setting
is chosen on it. The 300 test queries (those without train qrels; their qrels are held back) get TREC run files
``benchmarks/results/scifact_test_<retriever>.trec`` for independent scoring, for the retrievers named with
``--test``.

Rows (all on dev): BM25 (bm25s, title + text); all-MiniLM-L6-v2 zero-shot, one vector (its sentence-transformers
modules: 256 tokens), naive and late chunking into 128- and 256-token pieces (late: windows of 256 and
512 tokens); hybrid BM25 + dense (RRF, k 60); zero-shot
MaxSim over MiniLM's last-layer token vectors (documents cut at 256 tokens, or whole in windows of 256), exhaustive;
trained models given with ``--late-model`` (late interaction: exhaustive, compressed index at 2 and 4 bits, token
pooling by 2, hybrid) and ``--dense-model`` (one vector, trained in-domain on the same rows); PyLate's dev run (``--peer-run``).

Encodings are cached under ``cache/scifact/`` (token vectors as float16), so settings can be rerun cheaply; the
file names carry a hash of the encoding code (:func:`benchmarks.harness.code_fingerprint`), so a change to it
encodes afresh.

    python -m benchmarks.beir_scifact                                        # zero-shot rows
    python -m benchmarks.beir_scifact --late-model runs/li/model --dense-model runs/ct/model \\
        --peer-run pylate=cache/pylate/dev.trec --test bm25,late-hybrid

Writes benchmarks/results/beir_scifact.{md,json}.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness
from ctxemb import Embedder
from ctxemb.io import load_beir, read_queries, read_run, split_queries, write_run
from ctxemb.metrics.trec import evaluate_run
from ctxemb.core.paths import shared_data_dir
from ctxemb.search.late import LateInteractionConfig, LateInteractionEncoder, LateInteractionIndex
from ctxemb.search.late.pooling import pool_documents
from ctxemb.search.retrievers import BM25Retriever, DenseRetriever, FusionRetriever, LateInteractionRetriever

CACHE = Path(__file__).resolve().parent.parent / "cache" / "scifact"
# the code that turns text into the cached vectors: a change to it makes new cache files
ENCODING_CODE = ("core", "models", "modeling", "runtime", "embedding", "search/late")


@functools.cache
def encoding_fingerprint() -> str:
    """:func:`benchmarks.harness.code_fingerprint` of :data:`ENCODING_CODE`, read once per process."""
    return harness.code_fingerprint(*ENCODING_CODE)


MEASURES = ("ndcg@10", "recall@100", "mrr@10")


def scifact():
    folder = shared_data_dir() / "retrieval" / "scifact"
    data = load_beir(folder, "train")
    train_ids, dev_ids = split_queries(list(data.qrels), 200, seed=0)
    test = {q: t for q, t in read_queries(folder / "queries.jsonl").items() if q not in data.qrels}
    return data, train_ids, dev_ids, test


def cached_tokens(encoder: LateInteractionEncoder, texts, tag: str) -> tuple[list[np.ndarray], float]:
    """Token vectors of the corpus and the seconds their encoding took, cached as float16."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"tokens-{tag}-{encoding_fingerprint()}.npz"
    if path.exists():
        z = np.load(path)
        offsets, tokens = z["offsets"], z["tokens"].astype(np.float32)
        return [tokens[offsets[i]:offsets[i + 1]] for i in range(len(texts))], float(z["seconds"])
    sw = harness.Stopwatch()
    docs = encoder.encode_documents(texts)
    seconds = sw.stop()
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    np.savez(path, tokens=np.concatenate(docs).astype(np.float16), offsets=offsets, seconds=seconds)
    print(f"encoded {len(docs)} documents ({offsets[-1]} tokens) in {seconds:.0f} s", file=sys.stderr)
    return docs, seconds


def cached_sentences(emb: Embedder, texts, tag: str) -> np.ndarray:
    path = CACHE / f"sentences-{tag}-{encoding_fingerprint()}.npy"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        np.save(path, emb.embed_sentences(texts, normalize=True))
    return np.load(path)


def latency(retriever, queries: dict[str, str], n: int = 100) -> dict[str, float]:
    """Median and p99 milliseconds of one query at a time (encode + search + re-score), after 5 warm-up queries."""
    items = list(queries.items())[:n]
    for qid, text in items[:5]:
        retriever.retrieve({qid: text}, 10)
    times = []
    for qid, text in items:
        sw = harness.Stopwatch()
        retriever.retrieve({qid: text}, 10)
        times.append(1000 * sw.stop())
    return {"latency_ms_p50": harness.summarize(times, warmup=5).median,
            "latency_ms_p99": float(np.percentile(times, 99))}


def build_index(enc: LateInteractionEncoder, ids, docs, nbits: int, directory: Path) -> dict[str, float]:
    """Build and save a compressed index, timing where an indexing minute goes: the codec's fit (k-means and
    residual buckets), compression (nearest centroid, residual codes), the inverted lists and the write."""
    from ctxemb.search.late.codec import ResidualCodec

    tokens = np.concatenate(docs)
    sw = harness.Stopwatch()
    codec = ResidualCodec.fit(tokens, nbits=nbits)
    fit_s = sw.stop()
    index = LateInteractionIndex(enc.dim, nbits=nbits, encoder_config=enc.config.to_dict())
    index.codec = codec
    sw = harness.Stopwatch()
    index.add(ids, docs)
    compress_s = sw.stop()
    sw = harness.Stopwatch()
    index.save(directory)
    write_s = sw.stop()
    return {"codec_fit_s": fit_s, "compress_s": compress_s, "write_s": write_s}


def query_profile(enc: LateInteractionEncoder, index: LateInteractionIndex, queries: dict[str, str],
                  n: int = 100) -> dict[str, float]:
    """Where a query goes (ms, medians): encoding, candidate generation, gathering and decompressing the candidates'
    tokens, MaxSim."""
    from ctxemb.search.late.scoring import maxsim_concatenated

    parts: dict[str, list[float]] = {"encode": [], "candidates": [], "decompress": [], "maxsim": []}
    for text in list(queries.values())[:n]:
        t0 = harness.clock()  # one clock read between stages: four stopwatches would overlap
        q = enc.encode_queries(text)
        t1 = harness.clock()
        labels = index._candidates(q, 4, 256, index._live)
        t2 = harness.clock()
        codes, packed, offsets = index._tokens(labels)
        vectors = index.codec.decompress(codes, packed)
        t3 = harness.clock()
        maxsim_concatenated(q, vectors, offsets)
        t4 = harness.clock()
        for key, a, b in (("encode", t0, t1), ("candidates", t1, t2), ("decompress", t2, t3), ("maxsim", t3, t4)):
            parts[key].append(1000 * (b - a))
    return {f"query_{k}_ms": harness.summarize(v).median for k, v in parts.items()}


#: Compressed-index rows only for models this narrow (the size target: <= 40 bytes per stored token).
MAX_INDEX_DIM = 128
CHUNK_TOKENS = (128, 256)
CHUNK_WINDOWS = (256, 512)


def chunking_rows(evaluate, args, corpus: dict[str, str]) -> None:
    """One vector per chunk, a document scoring as its best chunk: naive chunking (each piece embedded alone) and
    late chunking (the whole document encoded in overlapping windows of 256 or 512 tokens, then each piece's token
    vectors mean-pooled). The window is the tokenizer's ``max_length`` (the model's own is 512)."""
    for size in CHUNK_TOKENS:
        emb = Embedder.from_pretrained(args.model, precision=args.precision)
        evaluate(f"dense-naive-{size}", f"MiniLM one vector per {size}-token chunk, naive chunking",
                 DenseRetriever(emb, corpus, chunking="naive", chunk_tokens=size))
        for window in CHUNK_WINDOWS:
            emb.tokenizer.max_length = window
            evaluate(f"dense-late-{size}-w{window}",
                     f"MiniLM one vector per {size}-token chunk, late chunking, {window}-token windows",
                     DenseRetriever(emb, corpus, chunking="late", chunk_tokens=size))


def score_row(rows: list, key: str, label: str, retriever, dev, test_queries: dict | None, **extra) -> dict:
    """Answer the dev queries, append the row (scores x 100, batch ms/query, ``extra``) to ``rows`` and print it;
    with ``test_queries``, also write their run to ``scifact_test_<key>.trec``. Returns the dev run."""
    sw = harness.Stopwatch()
    run = retriever.retrieve(dev.queries, 100)
    seconds = sw.stop()
    scores = evaluate_run(run, dev.qrels, MEASURES)
    rows.append({"key": key, "retriever": label, **{m: 100 * v for m, v in scores.mean.items()},
                 "ms/query (batch)": 1000 * seconds / len(dev.queries), **extra})
    print(rows[-1], file=sys.stderr, flush=True)
    if test_queries is not None:
        write_run(harness.RESULTS / f"scifact_test_{key}.trec", retriever.retrieve(test_queries, 100), tag=key)
    return run


COLUMNS = ["retriever", *MEASURES, "ms/query (batch)", "latency_ms_p50", "latency_ms_p99", "bytes_per_token",
           "index_s"]


def render(payload: dict, title: str, protocol: str) -> str:
    """The Markdown of a results payload: scores with two decimals, times with one."""
    def cell(key, value):
        if isinstance(value, float):
            return f"{value:.2f}" if key in MEASURES else f"{value:.1f}"
        return value

    rows = [{k: cell(k, v) for k, v in row.items()} for row in payload["rows"]]
    md = [f"# {title}", "", protocol, "", harness.markdown_table(rows, COLUMNS)]
    for key, prof in payload.get("profiles", {}).items():
        md += ["", f"Profile of {key} (seconds to index, ms per query): " + ", ".join(
            f"{k} {v:.1f}" for k, v in prof.items())]
    return "\n".join(md)


TITLE = "BEIR SciFact, dev split (200 of the 809 train queries)"


def protocol(payload: dict) -> str:
    m = payload["machine"]
    return (f"{m['cpu']} ({m['cpu_count']} cores, torch {m['torch']}); {payload['model']} at precision "
            f"{payload['precision']}; nDCG@10, R@100, MRR@10 x 100 (trec_eval's definitions). Latency: one query at a "
            "time, encode + search (+ re-score), median and p99 over 100 dev queries, measured while other jobs shared "
            "the 2 cores. index_s: encoding the corpus + pooling + codec fit + compression + write. Compressed-index rows "
            f"for models of at most {MAX_INDEX_DIM} dimensions.")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--stage", choices=["encode", "all"], default="all")
    ap.add_argument("--late-model", action="append", default=[], help="a trained late-interaction model (repeat)")
    ap.add_argument("--dense-model", action="append", default=[], help="a trained one-vector model (repeat)")
    ap.add_argument("--peer-run", action="append", default=[], metavar="NAME=FILE",
                    help="a peer's dev run file, scored beside ours")
    ap.add_argument("--test", default="", help="comma-separated row keys whose test runs are written")
    ap.add_argument("--skip-zero-shot", action="store_true", help="only the trained models' rows")
    ap.add_argument("--render", action="store_true", help="only rewrite the Markdown from the committed JSON")
    ap.add_argument("--skip-chunking", action="store_true", help="no naive / late chunking rows (six corpus encodes)")
    ap.add_argument("--chunking-only", action="store_true",
                    help="only BM25, one vector and the chunking rows (beir_scifact_chunking.md)")
    args = ap.parse_args(argv)
    if args.render:
        import json

        payload = json.loads((harness.RESULTS / "beir_scifact.json").read_text())
        return harness.write_results("beir_scifact", payload, render(payload, TITLE, protocol(payload)))

    data, train_ids, dev_ids, test_queries = scifact()
    dev = data.subset(dev_ids)
    ids = list(data.corpus)
    texts = [d.full_text for d in data.corpus.values()]
    corpus = dict(zip(ids, texts))
    emb = Embedder.from_pretrained(args.model, precision=args.precision)
    tag = hashlib.sha1(f"{args.model}-{emb.config.precision}".encode()).hexdigest()[:8]
    wanted_tests = set(filter(None, args.test.split(",")))
    rows: list[dict] = []
    profiles: dict[str, dict] = {}

    def evaluate(key, label, retriever, **extra):
        return score_row(rows, key, label, retriever, dev, test_queries if key in wanted_tests else None, **extra)

    bm25 = BM25Retriever(corpus)
    evaluate("bm25", "BM25 (bm25s, title + text)", bm25)
    zero_shot_configs = {
        "truncate-256": LateInteractionConfig(document_length=256, query_augmentation=False),
        "window-256": LateInteractionConfig(document_length=256, long_documents="window", query_augmentation=False),
    }
    if not args.skip_zero_shot:
        dense = DenseRetriever(emb, corpus, vectors=cached_sentences(emb, texts, tag))
        if args.stage == "encode":
            for name, cfg in zero_shot_configs.items():
                cached_tokens(LateInteractionEncoder(emb, cfg), texts, f"{tag}-{name}")
            return
        evaluate("dense", "MiniLM zero-shot, one vector (256 tokens)", dense)
        evaluate("hybrid", "hybrid: BM25 + MiniLM one vector (RRF 60)", FusionRetriever([bm25, dense]))
        if not args.skip_chunking:
            chunking_rows(evaluate, args, corpus)
        if args.chunking_only:
            payload = {"machine": harness.machine(), "model": args.model, "precision": emb.config.precision,
                       "dev_queries": len(dev_ids), "rows": rows, "profiles": {}}
            return harness.write_results("beir_scifact_chunking", payload,
                                         render(payload, TITLE + ": naive and late chunking", protocol(payload)))
        for name, cfg in zero_shot_configs.items():
            enc = LateInteractionEncoder(emb, cfg)
            docs, seconds = cached_tokens(enc, texts, f"{tag}-{name}")
            late = LateInteractionRetriever(enc, corpus, document_vectors=docs, exhaustive=True)
            evaluate(f"maxsim-zero-shot-{name}", f"MaxSim zero-shot (384 d, exhaustive), documents {name}", late,
                     tokens=sum(len(d) for d in docs), encode_s=seconds)
            evaluate(f"hybrid-maxsim-zero-shot-{name}", f"hybrid: BM25 + MaxSim zero-shot, {name}",
                     FusionRetriever([bm25, late]))

    for n, model in enumerate(args.late_model):
        enc = LateInteractionEncoder.from_pretrained(model, precision=args.precision)
        label = Path(model).parent.name if Path(model).name == "model" else Path(model).name
        mtag = hashlib.sha1(f"{Path(model).resolve()}-{os.path.getmtime(Path(model) / 'model.safetensors')}-"
                            f"{enc.embedder.config.precision}".encode()).hexdigest()[:8]
        docs, encode_s = cached_tokens(enc, texts, f"late-{mtag}")
        exact = LateInteractionRetriever(enc, corpus, document_vectors=docs, exhaustive=True)
        evaluate(f"late-exhaustive-{n}", f"{label}: MaxSim exhaustive ({enc.dim} d, float32)", exact,
                 **latency(exact, dev.queries))
        evaluate(f"late-hybrid-{n}", f"{label}: hybrid BM25 + MaxSim", FusionRetriever([bm25, exact]))
        for nbits in () if enc.dim > MAX_INDEX_DIM else (2, 4):
            for pool in (1, 2):
                sw = harness.Stopwatch()
                pooled = pool_documents(docs, pool) if pool > 1 else docs
                pool_s = sw.stop()
                with tempfile.TemporaryDirectory() as tmp:
                    steps = build_index(enc, ids, pooled, nbits, Path(tmp) / "index")
                    loaded = LateInteractionIndex.load(Path(tmp) / "index")
                    if nbits == 2 and pool == 1:
                        profiles[f"late-{n}"] = {"encode_s": encode_s, **steps,
                                                 **query_profile(enc, loaded, dev.queries)}
                    for nprobe, candidates in ((2, 128), (4, 256), (8, 512)):
                        r = LateInteractionRetriever(enc, index=loaded, nprobe=nprobe, candidates=candidates)
                        evaluate(f"late-index-{n}-{nbits}b-pool{pool}-p{nprobe}",
                                 f"{label}: index {nbits}-bit, pool {pool}, nprobe {nprobe}, {candidates} candidates",
                                 r, bytes_per_token=loaded.bytes_per_token, tokens=loaded.n_tokens,
                                 index_s=encode_s + pool_s + sum(steps.values()), **latency(r, dev.queries))
    for model in args.dense_model:
        demb = Embedder.from_pretrained(model, precision=args.precision)
        label = Path(model).parent.name if Path(model).name == "model" else Path(model).name
        d = DenseRetriever(demb, corpus)
        evaluate(f"dense-trained-{label}", f"{label}: one vector, trained in-domain", d)
        evaluate(f"hybrid-dense-trained-{label}", f"{label}: hybrid BM25 + one vector", FusionRetriever([bm25, d]))
    for spec in args.peer_run:
        name, path = spec.split("=", 1)
        scores = evaluate_run(read_run(path), dev.qrels, MEASURES)
        rows.append({"key": name, "retriever": f"{name} (its own run file)",
                     **{m: 100 * v for m, v in scores.mean.items()}})

    payload = {"machine": harness.machine(), "model": args.model, "precision": emb.config.precision,
               "dev_queries": len(dev_ids), "rows": rows, "profiles": profiles}
    name = "beir_scifact" if not args.skip_zero_shot else "beir_scifact_trained"
    harness.write_results(name, payload, render(payload, TITLE, protocol(payload)))


if __name__ == "__main__":
    main()
