"""``ctxemb retrieval eval``: run retrievers over a BEIR folder, write TREC runs, report nDCG@10, R@100, MRR@10.

Example::

    ctxemb retrieval eval ../shared/data/retrieval/scifact --split train --queries dev_ids.txt \\
        --retriever bm25 --retriever late --run-dir runs/ --json scores.json

Retrievers: ``bm25``; ``dense`` (one vector per text); ``document`` (whole text + best passage); ``hybrid`` (BM25 + dense, RRF); ``late`` (MaxSim over token
vectors in a compressed index); ``late-exhaustive`` (exact MaxSim, no index); ``late-hybrid`` (BM25 + late, RRF);
``rerank`` (BM25's top ``--depth`` re-scored by exact MaxSim).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctxemb.cli._common import (UsageError, add_embedder_args, add_option, command_help, embedder_overrides,
                                load_embedder, positive_int, write_text)

RETRIEVERS = ("bm25", "dense", "document", "hybrid", "late", "late-exhaustive", "late-hybrid", "rerank")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``retrieval`` (with the subcommand ``eval``) to ``subparsers``."""
    parser = subparsers.add_parser("retrieval", help=command_help("retrieval"),
                                   description="Retrieval evaluation on BEIR-format data.")
    sub = parser.add_subparsers(dest="retrieval_command", metavar="COMMAND")
    sub.required = True
    ev = sub.add_parser("eval", help="run retrievers over a BEIR folder and score them",
                        description="Run retrievers over a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv), "
                                    "write a TREC run per retriever and score it as trec_eval does (values x 100).")
    ev.add_argument("data", type=Path, help="the BEIR folder")
    ev.add_argument("--split", default="test", help="the qrels file qrels/SPLIT.tsv (default %(default)s)")
    ev.add_argument("--qrels", type=Path, default=None, help="a qrels file to use instead of qrels/SPLIT.tsv")
    ev.add_argument("--queries", type=Path, default=None,
                    help="a file of query ids, one per line: evaluate only these (e.g. a dev split)")
    ev.add_argument("--retriever", action="append", choices=RETRIEVERS, default=None,
                    help="repeat for several (default: bm25)")
    add_option(ev, "-k", "--top-k", deprecated=["--k"], dest="k", type=positive_int, default=100,
               help="documents retrieved per query (default %(default)s)")
    ev.add_argument("--run-dir", type=Path, default=None, help="write RETRIEVER.trec run files here")
    ev.add_argument("--json", type=Path, default=None, help="write the scores (and per-query values) as JSON")
    late = ev.add_argument_group("late interaction")
    late.add_argument("--document-length", type=positive_int, default=256,
                      help="tokens per document (or per window), specials included (default %(default)s)")
    late.add_argument("--long-documents", choices=("truncate", "window"), default="truncate",
                      help="cut documents at --document-length, or encode them whole in windows (default truncate)")
    late.add_argument("--nbits", type=int, choices=(1, 2, 4, 8), default=2,
                      help="residual bits per dimension in the index (default %(default)s)")
    late.add_argument("--nprobe", type=positive_int, default=4, help="centroids probed per query token (default 4)")
    late.add_argument("--candidates", type=positive_int, default=256,
                      help="documents re-scored by MaxSim per query (default %(default)s)")
    late.add_argument("--depth", type=positive_int, default=100,
                      help="BM25 documents re-ranked by 'rerank'; rankings fused by the hybrids (default 100)")
    add_embedder_args(ev, pooling=False)
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    ev.set_defaults(func=run_eval)

    pairs = sub.add_parser("pairs", help="training rows (query, relevant document, BM25 negatives) as JSONL",
                           description="Write one JSONL row per judged (query, relevant document) pair of a BEIR "
                                       "folder, with hard negatives drawn from the query's best BM25 documents that "
                                       "are not relevant to it: the rows that `ctxemb finetune late-interaction` "
                                       "reads from --beir, as a table for `ctxemb finetune contrastive`.")
    pairs.add_argument("data", type=Path, help="the BEIR folder")
    pairs.add_argument("--split", default="train", help="the qrels file qrels/SPLIT.tsv (default %(default)s)")
    pairs.add_argument("--queries", type=Path, required=True, help="a file of query ids, one per line")
    pairs.add_argument("--hard-negatives", type=int, default=1, help="negatives per row (default %(default)s)")
    pairs.add_argument("--mine-range", type=positive_int, default=20,
                       help="BM25 ranks the negatives are drawn from (default %(default)s)")
    pairs.add_argument("--seed", type=int, default=0, help="the draw's seed (default %(default)s)")
    add_option(pairs, "--output", deprecated=["--out"], dest="out", type=Path, required=True,
               help="the JSONL file to write (atomically)")
    pairs.set_defaults(func=run_pairs)
    return parser


def run_pairs(args: argparse.Namespace) -> int:
    from ctxemb.tasks.late_interaction.task import beir_rows

    if args.hard_negatives < 0:
        raise UsageError("--hard-negatives must be >= 0, got %d" % args.hard_negatives)
    rows = beir_rows(args.data, args.split, _query_ids(args.queries), hard_negatives=args.hard_negatives,
                     mine_range=args.mine_range, seed=args.seed)
    lines = []
    for row in rows:
        record = {"id": row.id, "anchor": row.anchor, "positive": row.positive}
        record.update({"negative_%d" % (i + 1): t for i, t in enumerate(row.negatives)})
        lines.append(json.dumps(record, ensure_ascii=False))
    write_text(args.out, "\n".join(lines) + "\n")
    print("%d rows written to %s (columns: anchor, positive%s)" % (
        len(rows), args.out, "".join(", negative_%d" % (i + 1) for i in range(args.hard_negatives))), file=sys.stderr)
    return 0


def _query_ids(path: Path) -> list[str]:
    ids = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not ids:
        raise UsageError("--queries %s: the file lists no query id" % path)
    return ids


def run_eval(args: argparse.Namespace) -> int:
    from ctxemb.evaluation.retrieval import evaluate_retrieval, reports_markdown
    from ctxemb.io.beir import load_beir
    from ctxemb.search import retrievers as R

    names = args.retriever or ["bm25"]
    if len(set(names)) != len(names):
        raise UsageError("--retriever names %s twice" % next(n for n in names if names.count(n) > 1))
    data = load_beir(args.data, args.split, qrels=args.qrels)
    if args.queries is not None:
        data = data.subset(_query_ids(args.queries))
    corpus = data.texts()
    progress = not args.no_progress
    built: dict = {}

    def embedder():
        if "embedder" not in built:
            built["embedder"] = load_embedder(args.model, device=args.device, **embedder_overrides(args))
        return built["embedder"]

    def encoder():
        from ctxemb.search.late import LateInteractionConfig, LateInteractionEncoder

        if "encoder" not in built:
            config = LateInteractionConfig(document_length=args.document_length, long_documents=args.long_documents,
                                           query_augmentation=False)
            built["encoder"] = LateInteractionEncoder(embedder(), config)
        return built["encoder"]

    def get(name):
        if name in built:
            return built[name]
        if name == "bm25":
            r = R.BM25Retriever(corpus)
        elif name == "dense":
            r = R.DenseRetriever(embedder(), corpus, show_progress_bar=progress)
        elif name == "document":
            r = R.DocumentRetriever(embedder(), corpus, show_progress_bar=progress)
        elif name == "hybrid":
            r = R.FusionRetriever([get("bm25"), get("dense")], depth=args.depth)
        elif name == "late":
            r = R.LateInteractionRetriever(encoder(), corpus, nbits=args.nbits, nprobe=args.nprobe,
                                           candidates=args.candidates, show_progress_bar=progress)
        elif name == "late-exhaustive":
            r = R.LateInteractionRetriever(encoder(), corpus, exhaustive=True, show_progress_bar=progress)
        elif name == "late-hybrid":
            r = R.FusionRetriever([get("bm25"), get("late")], depth=args.depth)
        else:
            r = R.RerankRetriever(get("bm25"), R.MaxSimReranker(encoder()), corpus, depth=args.depth)
        built[name] = r
        return r

    reports = []
    for name in names:
        run_file = None if args.run_dir is None else args.run_dir / f"{name}.trec"
        report = evaluate_retrieval(get(name), data, k=args.k, run_file=run_file, tag=name)
        report.retriever = name
        reports.append(report)
    print(reports_markdown(reports))
    print("%d queries, %d documents" % (len(data.queries), len(data.corpus)), file=sys.stderr)
    if args.json is not None:
        write_text(args.json, json.dumps([r.to_dict(per_query=True) for r in reports], indent=1))
    return 0
