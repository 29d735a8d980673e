"""Question-to-paragraph retrieval on XQuAD-en: BM25, embedders zero-shot or trained, and hybrid search.

The collection is all 240 paragraphs of XQuAD-en; a question's one relevant item is its own paragraph. Questions:
the held-out articles of the fixed article split (``ctxemb.tasks.qa.squad.xquad_split("heldout")``, 351
questions, 12 articles that no shipped recipe trains on) are the report; the dev articles (126 questions) choose
the fusion settings (RRF k, weighted alpha) for each embedder; all 1,190 questions are reported for reference
(issue #30 quotes BM25 R@1 91.8 / MRR@10 94.8 and all-MiniLM-L6-v2 zero-shot 88.7 / 93.0 over them).

Retrievers (all through ``SemanticIndex``; exact flat search):
- BM25: ``bm25s`` (Lucene variant, k1 1.5, b 0.75, English stopwords: bm25s's defaults), ``mode="bm25"``;
  cross-checked against bm25s used directly;
- each embedder (all-MiniLM-L6-v2 zero-shot, plus every ``--model DIR``): the Embedder's sentence vectors,
  following the model's sentence-transformers modules (for MiniLM: last layer, mean pooling, normalised), cosine,
  ``mode="vector"``, with inputs up to ``--max-seq-length`` 512 tokens (whole paragraphs, as the issue measured);
  a vector-only row at the model's own maximum length (256 for MiniLM, as ``SentenceTransformer.encode``) too;
- hybrid with each embedder: RRF and weighted fusion, each at its dev-chosen setting and at the defaults
  (RRF k 60, alpha 0.5), ``candidates=100`` per ranking;
- each embedder through a ``DocumentIndex`` (``build_document_index``: a paragraph scored by its whole text and its
  best sentence, w * whole + (1 - w) * best), at the weight w chosen on dev and at the default, alone and fused
  with BM25 (RRF and weighted, chosen on dev, and RRF k 60).

    python -m benchmarks.retrieval                             # MiniLM zero-shot, BM25, hybrid
    python -m benchmarks.retrieval --model runs/contrastive-a --model runs/contrastive-b

Writes benchmarks/results/retrieval.md and retrieval.json (``--name`` changes the file stem, ``--out`` the folder).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

from benchmarks import harness
from ctxemb.tasks.qa.squad import load_xquad, xquad_split
from ctxemb.metrics.retrieval import mrr_at_k, ndcg_at_k, recall_at_k
from ctxemb.models.hub import DEFAULT_MODEL
from ctxemb.search import HybridParams, SemanticIndex, build_document_index
from ctxemb.search.documents import DEFAULT_PASSAGE_WEIGHT
from ctxemb.embedding.st_format import resolve_sentence_options

logger = logging.getLogger("benchmarks.retrieval")

RRF_GRID = (1, 2, 5, 10, 20, 30, 60, 100)
ALPHA_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PASSAGE_WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
SPLITS = ("heldout", "dev", "all")
K = 10


def load_data():
    """(paragraph texts, paragraph ids, {split: (question texts, gold paragraph id per question)})."""
    examples = load_xquad()
    paragraphs = list(dict.fromkeys(ex.context for ex in examples))
    pid = {p: "p%03d" % i for i, p in enumerate(paragraphs)}
    splits = {}
    for split in SPLITS:
        qs = examples if split == "all" else xquad_split(split, examples)
        splits[split] = ([ex.question for ex in qs], [pid[ex.context] for ex in qs])
    return paragraphs, [pid[p] for p in paragraphs], splits


def scores(ranked_ids: np.ndarray, gold: list[str]) -> dict[str, float]:
    """Recall@1, MRR@10, nDCG@10 (x 100) of (Q, K) ranked ids (None where fewer were found)."""
    ranked = [[i for i in row if i is not None] for row in ranked_ids.tolist()]
    relevant = [[g] for g in gold]
    return {"recall@1": 100 * recall_at_k(ranked, relevant, 1), "mrr@10": 100 * mrr_at_k(ranked, relevant, K),
            "ndcg@10": 100 * ndcg_at_k(ranked, relevant, K)}


def bm25s_direct(paragraphs, ids, questions, gold) -> dict[str, float]:
    """BM25 with bm25s alone (its defaults), the reference the index's BM25 must reproduce."""
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(paragraphs, show_progress=False), show_progress=False)
    docs, _ = retriever.retrieve(bm25s.tokenize(questions, show_progress=False), k=K, show_progress=False)
    return scores(np.array([[ids[d] for d in row] for row in docs], dtype=object), gold)


def evaluate_embedder(name: str, model: str, paragraphs, ids, splits, batch_size: int, max_seq_length: int | None
                      ) -> dict:
    """Every mode of one hybrid index of ``model``'s paragraph vectors: its rows, the dev grid and timings."""
    from ctxemb.embedding.embedder import Embedder

    sw = harness.Stopwatch()
    emb = Embedder.from_pretrained(model)
    load_s = sw.stop()

    def embed(texts, **kwargs):
        return emb.embed_sentences(texts, batch_size=batch_size, show_progress_bar=False, **kwargs)

    sw = harness.Stopwatch()
    para = embed(paragraphs, max_seq_length=max_seq_length)  # (240, H): the model's sentence modules otherwise
    index = SemanticIndex(para.shape[1], hybrid=HybridParams(), embedder_config=emb.config.to_dict())
    index.add(ids, para, texts=paragraphs, show_progress_bar=False)
    build_s = sw.stop()
    vectors, embed_s = {}, {}
    for split, (questions, _) in splits.items():
        sw = harness.Stopwatch()
        vectors[split] = embed(questions, max_seq_length=max_seq_length)
        embed_s[split] = sw.stop()
    # The same vectors at the model's own maximum length (sentence-transformers' encode(); 256 tokens for MiniLM).
    own = SemanticIndex(para.shape[1]).add(ids, embed(paragraphs), show_progress_bar=False)
    own_vectors = {split: embed(questions) for split, (questions, _) in splits.items()}

    def run(split, **options):
        questions, gold = splits[split]
        sw = harness.Stopwatch()
        texts = None if options.get("mode") == "vector" else questions
        _, ranked = index.search_array(vectors[split], K, texts=texts, **options)
        return scores(ranked, gold), sw.stop()

    grid = {"rrf": {}, "weighted": {}}
    for rrf_k in RRF_GRID:
        grid["rrf"][rrf_k] = run("dev", mode="hybrid", fusion="rrf", rrf_k=rrf_k)[0]
    for alpha in ALPHA_GRID:
        grid["weighted"][alpha] = run("dev", mode="hybrid", fusion="weighted", alpha=alpha)[0]
    # Chosen on dev by MRR@10, then nDCG@10, then the smaller value (grid order).
    best_k = max(RRF_GRID, key=lambda v: (grid["rrf"][v]["mrr@10"], grid["rrf"][v]["ndcg@10"], -v))
    best_alpha = max(ALPHA_GRID, key=lambda v: (grid["weighted"][v]["mrr@10"], grid["weighted"][v]["ndcg@10"], -v))
    settings = [
        ("%s" % name, dict(mode="vector"), "cosine, max_seq_length %s" % max_seq_length),
        ("hybrid RRF (%s)" % name, dict(mode="hybrid", fusion="rrf", rrf_k=best_k), "k=%g (dev)" % best_k),
        ("hybrid weighted (%s)" % name, dict(mode="hybrid", fusion="weighted", alpha=best_alpha),
         "alpha=%g (dev)" % best_alpha),
        ("hybrid RRF (%s)" % name, dict(mode="hybrid", fusion="rrf", rrf_k=60), "k=60 (default)"),
        ("hybrid weighted (%s)" % name, dict(mode="hybrid", fusion="weighted", alpha=0.5), "alpha=0.5 (default)"),
    ]
    own_len = resolve_sentence_options(emb.sentence_modules, emb.tokenizer).max_seq_length
    own_row = {"retriever": name, "setting": "cosine, the model's own max_seq_length %s" % own_len, "model": model}
    for split, (_, gold) in splits.items():
        sw = harness.Stopwatch()
        own_row[split] = scores(own.search_array(own_vectors[split], K)[1], gold)
        own_row["search_s_" + split] = sw.stop()
    rows = [own_row]
    for label, options, setting in settings:
        row = {"retriever": label, "setting": setting, "model": model}
        for split in SPLITS:
            metrics, seconds = run(split, **options)
            row[split] = metrics
            row["search_s_" + split] = seconds
        rows.append(row)
    bm25_row = {"retriever": "BM25 (bm25s, through the index)", "setting": "lucene k1=1.5 b=0.75, en stopwords",
                "model": None}
    for split in SPLITS:
        questions, gold = splits[split]
        sw = harness.Stopwatch()
        _, ranked = index.search_array(None, K, texts=questions, mode="bm25")
        bm25_row[split] = scores(ranked, gold)
        bm25_row["search_s_" + split] = sw.stop()
    sw = harness.Stopwatch()
    documents = build_document_index(emb, paragraphs, ids, hybrid=True, batch_size=batch_size,
                                     show_progress_bar=False)
    build_documents_s = sw.stop()
    doc_rows, doc_grid, doc_chosen = evaluate_documents(name, model, documents, emb, splits)
    return {"name": name, "model": model, "rows": rows + doc_rows, "bm25": bm25_row, "dev_grid": grid,
            "documents_dev_grid": doc_grid, "chosen": {"rrf_k": best_k, "alpha": best_alpha, **doc_chosen},
            "seconds": {"load": load_s, "build_index (embed 240 paragraphs + BM25)": build_s,
                        "build_document_index (%d paragraphs, %d sentences + BM25)" % (
                            len(documents), len(documents.passages)): build_documents_s,
                        **{"embed questions %s (%d)" % (s, len(splits[s][0])): v for s, v in embed_s.items()}}}


def evaluate_documents(name: str, model: str, documents, emb, splits) -> tuple[list[dict], dict, dict]:
    """The DocumentIndex rows of one embedder: the passage weight chosen on dev (vector mode), then the fusion
    settings with it, each scored on every split."""
    def run(split, **options):
        questions, gold = splits[split]
        sw = harness.Stopwatch()
        hits = documents.search(emb, questions, K, **options)
        ranked = np.array([[h.id for h in row] + [None] * (K - len(row)) for row in hits], dtype=object)
        return scores(ranked, gold), sw.stop()

    def best(values, results):  # by MRR@10, then nDCG@10, then the first in grid order
        return max(values, key=lambda v: (results[v]["mrr@10"], results[v]["ndcg@10"], -values.index(v)))

    grid = {"passage_weight": {w: run("dev", mode="vector", passage_weight=w)[0] for w in PASSAGE_WEIGHT_GRID}}
    w = best(PASSAGE_WEIGHT_GRID, grid["passage_weight"])
    grid["rrf"] = {k: run("dev", mode="hybrid", passage_weight=w, fusion="rrf", rrf_k=k)[0] for k in RRF_GRID}
    grid["weighted"] = {a: run("dev", mode="hybrid", passage_weight=w, fusion="weighted", alpha=a)[0]
                        for a in ALPHA_GRID}
    best_k, best_alpha = best(RRF_GRID, grid["rrf"]), best(ALPHA_GRID, grid["weighted"])
    label = "%s, whole text + best sentence (DocumentIndex)" % name
    hybrid = "hybrid %%s (%s, whole text + best sentence)" % name
    settings = [
        (label, dict(mode="vector", passage_weight=w), "w=%g (dev)" % w),
        (label, dict(mode="vector", passage_weight=DEFAULT_PASSAGE_WEIGHT), "w=%g (default)" % DEFAULT_PASSAGE_WEIGHT),
        (label, dict(mode="vector", passage_weight=0.0), "w=0: best sentence alone"),
        (hybrid % "RRF", dict(mode="hybrid", passage_weight=w, fusion="rrf", rrf_k=best_k),
         "w=%g, k=%g (dev)" % (w, best_k)),
        (hybrid % "weighted", dict(mode="hybrid", passage_weight=w, fusion="weighted", alpha=best_alpha),
         "w=%g, alpha=%g (dev)" % (w, best_alpha)),
        (hybrid % "RRF", dict(mode="hybrid", fusion="rrf", rrf_k=60),
         "w=%g, k=60 (defaults)" % DEFAULT_PASSAGE_WEIGHT),
    ]
    rows = []
    for retriever, options, setting in settings:
        row = {"retriever": retriever, "setting": setting, "model": model}
        for split in SPLITS:
            row[split], row["search_s_" + split] = run(split, **options)
        rows.append(row)
    return rows, grid, {"passage_weight": w, "documents_rrf_k": best_k, "documents_alpha": best_alpha}


def render(payload: dict) -> str:
    lines = ["# Retrieval: XQuAD-en questions against its 240 paragraphs", ""]
    m = payload["machine"]
    lines.append("CPU: %s, torch %s, bm25s %s. Exact (flat) vector search; metrics x 100; one relevant paragraph "
                 "per question." % (harness.machine_line(m), m.get("torch"), payload["bm25s_version"]))
    lines.append("")
    lines.append("Fusion settings were chosen on the dev articles (%d questions) by MRR@10, per embedder, over RRF k "
                 "in %s and alpha (the vector weight) in %s; the held-out articles (%d questions) were scored once "
                 "with them. Rows marked (default) use RRF k 60 / alpha 0.5 untuned. Each ranking contributes its "
                 "100 best candidates to the fusion. DocumentIndex rows: a paragraph's score is w * cos(question, "
                 "paragraph) + (1 - w) * the largest cos(question, sentence) over its sentences (both vectors at the "
                 "model's own maximum length), w chosen on dev over %s, then the fusion settings with that w."
                 % (payload["n_questions"]["dev"], list(RRF_GRID), list(ALPHA_GRID),
                    payload["n_questions"]["heldout"], list(PASSAGE_WEIGHT_GRID)))
    lines.append("")
    for split, title in (("heldout", "Held-out articles (the report)"), ("all", "All 1,190 questions (reference)"),
                         ("dev", "Dev articles (used to choose the fusion settings)")):
        lines.append("## %s: %d questions" % (title, payload["n_questions"][split]))
        lines.append("")
        table = []
        for row in payload["rows"]:
            r = row[split]
            table.append({"retriever": row["retriever"], "setting": row["setting"], "R@1": "%.1f" % r["recall@1"],
                          "MRR@10": "%.1f" % r["mrr@10"], "nDCG@10": "%.1f" % r["ndcg@10"]})
        lines.append(harness.markdown_table(table, ["retriever", "setting", "R@1", "MRR@10", "nDCG@10"]))
        lines.append("")
    direct = payload["bm25s_direct_all"]
    lines.append("Check: bm25s used directly (its defaults) over all questions gives R@1 %.1f / MRR@10 %.1f / nDCG@10 "
                 "%.1f (issue #30: 91.8 / 94.8); the index's BM25 orders tied scores by insertion order, bm25s's top-k "
                 "selection arbitrarily, hence any difference in the last digit." % (
                     direct["recall@1"], direct["mrr@10"], direct["ndcg@10"]))
    lines.append("")
    lines.append("## Dev grid (MRR@10)")
    lines.append("")
    for emb in payload["embedders"]:
        g = emb["dev_grid"]
        lines.append("- %s: RRF %s; weighted %s" % (
            emb["name"], ", ".join("k=%g %.1f" % (k, v["mrr@10"]) for k, v in g["rrf"].items()),
            ", ".join("a=%g %.1f" % (a, v["mrr@10"]) for a, v in g["weighted"].items())))
        g = emb["documents_dev_grid"]
        lines.append("- %s, DocumentIndex: passage weight %s; then RRF %s; weighted %s" % (
            emb["name"], ", ".join("w=%g %.1f" % (w, v["mrr@10"]) for w, v in g["passage_weight"].items()),
            ", ".join("k=%g %.1f" % (k, v["mrr@10"]) for k, v in g["rrf"].items()),
            ", ".join("a=%g %.1f" % (a, v["mrr@10"]) for a, v in g["weighted"].items())))
    lines.append("")
    lines.append("## Times (seconds)")
    lines.append("")
    lines.append("Wall-clock on a shared machine (other jobs were running): indicative only; embedding dominates.")
    lines.append("")
    for emb in payload["embedders"]:
        lines.append("- %s: %s" % (emb["name"], "; ".join("%s %.1f" % kv for kv in emb["seconds"].items())))
    lines.append("- total run: %.0f" % payload["seconds_total"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], metavar="DIR",
                        help="a further embedder (model directory or name) to evaluate, repeatable")
    parser.add_argument("--no-baseline", action="store_true", help="skip the %s zero-shot rows" % DEFAULT_MODEL)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=512,
                        help="tokens per input for the embedders (default %(default)s: whole XQuAD paragraphs, as "
                             "issue #30 measured; a vector-only row at each model's own length is reported too)")
    parser.add_argument("--name", default="retrieval", help="results file stem (default %(default)s)")
    parser.add_argument("--out", type=Path, default=harness.RESULTS, help="results folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import bm25s

    run_sw = harness.Stopwatch()
    paragraphs, ids, splits = load_data()
    models = ([] if args.no_baseline else [("%s zero-shot" % DEFAULT_MODEL, DEFAULT_MODEL)])
    models += [(Path(m).name, m) for m in args.model]
    if not models:
        parser.error("nothing to evaluate: --no-baseline without --model")
    embedders = []
    for name, model in models:
        logger.info("evaluating %s (%s)", name, model)
        embedders.append(evaluate_embedder(name, model, paragraphs, ids, splits, args.batch_size,
                                           args.max_seq_length))
    rows = [embedders[0]["bm25"]]
    for emb in embedders:
        rows += emb["rows"]
    payload = {
        "benchmark": "retrieval",
        "collection": "XQuAD-en, all %d paragraphs" % len(paragraphs),
        "n_questions": {split: len(q) for split, (q, _) in splits.items()},
        "rows": rows,
        "embedders": [{k: v for k, v in e.items() if k not in ("rows", "bm25")} for e in embedders],
        "bm25s_direct_all": bm25s_direct(paragraphs, ids, *splits["all"]),
        "bm25s_version": bm25s.__version__,
        "candidates": HybridParams().candidates,
        "max_seq_length": args.max_seq_length,
        "machine": harness.machine(),
        "command": " ".join(["python -m benchmarks.retrieval"] + (argv if argv is not None else sys.argv[1:])),
    }
    payload["seconds_total"] = run_sw.stop()
    markdown = render(payload)
    print(markdown)
    harness.write_results(args.name, payload, markdown, out_dir=args.out)
    return payload


if __name__ == "__main__":
    main()
