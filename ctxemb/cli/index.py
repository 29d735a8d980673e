"""``ctxemb index build | query | train-quantizer | add-shard | merge``: semantic search indexes from the command line.

    ctxemb index build corpus.txt --out-dir my_index [--kind hnsw] [--words bank] [--hybrid]
    ctxemb index query my_index "a sentence to look for" [-k 5] [--json] [--mode bm25]
    ctxemb index train-quantizer | add-shard | merge      (one on-disk IVF-PQ index from shards: ctxemb.cli.index_shards)

``build`` reads one sentence per line (blank lines skipped) and embeds each line with ``embed_sentences`` or, with
``--words WORD``, every occurrence of WORD (whitespace-split, case-insensitive) for word-in-context search. Ids are
those the Python builders give: a line's 0-based position among the indexed lines (``"0"``, ``"1"``, ...), and
``"S:W"`` for word W (0-based) of line S; the metadata records each line's number in the file (``"line"``, 1-based,
as editors count). ``query`` loads the embedder recorded
in the index (or ``--model``) and refuses to run if its configuration differs from the one the index was built with.
``build --hybrid`` also keeps BM25 over the lines (``bm25s``), and ``query`` then fuses both rankings (``--mode``,
``--fusion``, ``--rrf-k``, ``--alpha``). ``build --documents`` takes each line as a document (a paragraph) and builds
a :class:`~ctxemb.search.DocumentIndex` (whole text and sentences, ``--passage-weight``; ``--chunking late`` pools
each sentence from its document's encoding); ``query`` recognises it and prints each document's best sentence.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from ctxemb.cli import index_shards
from ctxemb.cli._common import add_option, command_help, load_embedder, non_negative_float, positive_float, positive_int
from ctxemb.models.hub import DEFAULT_MODEL
# the parsers read these names only (no FAISS); the commands import the index modules when they run
from ctxemb.search.fusion import FUSION_METHODS, SEARCH_MODES
from ctxemb.search.params import INDEX_KINDS

logger = logging.getLogger(__name__)


def _read_corpus(path: Path) -> tuple[list[str], list[int]]:
    """Non-blank lines (stripped) and their 1-based line numbers."""
    if not path.is_file():
        raise FileNotFoundError("corpus %s not found" % path)
    texts, lines = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                line = line.strip()
                if line:
                    texts.append(line)
                    lines.append(number)
    except UnicodeDecodeError as e:
        raise ValueError("corpus %s is not UTF-8 text (%s)" % (path, e.reason)) from None
    if not texts:
        raise ValueError("corpus %s has no non-blank lines" % path)
    return texts, lines


# The build flags that set each kind's parameters: parameter field -> argparse destination.
_PARAM_FLAGS = {
    "hnsw": {"m": "hnsw_m", "ef_construction": "ef_construction", "ef_search": "ef_search"},
    "ivfpq": {name: name for name in ("nlist", "pq_m", "nbits", "nprobe", "k_factor")},
}


def _index_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``kind``, ``params`` and ``directory`` for the index builders; flags of another kind are ignored."""
    from ctxemb.search import make_params

    params_kind = "ivfpq" if args.on_disk else args.kind  # --on-disk with another kind is refused by the index
    fields = {field: getattr(args, dest) for field, dest in _PARAM_FLAGS.get(params_kind, {}).items()
              if getattr(args, dest) is not None}
    if args.on_disk:
        fields["on_disk"] = True
    return {"kind": args.kind, "params": make_params(params_kind, **fields),
            "directory": args.out if args.on_disk else None}


def run_build(args: argparse.Namespace) -> int:
    from ctxemb.search import build_document_index, build_sentence_index, build_word_index
    from ctxemb.search.documents import CHUNKINGS, DEFAULT_PASSAGE_WEIGHT

    if args.hybrid and args.words:
        raise ValueError("--hybrid indexes whole lines (BM25 over their text); it cannot be combined with --words")
    if args.documents and (args.words or args.on_disk or args.no_text):
        raise ValueError("--documents cannot be combined with --words, --on-disk or --no-text")
    for flag, dest in (("--passage-weight", "passage_weight"), ("--chunking", "chunking")):
        if getattr(args, dest) is not None and not args.documents:
            raise ValueError("%s applies to document indexes: add --documents" % flag)
    hybrid = _hybrid_params(args)  # checked before anything is read or embedded
    texts, lines = _read_corpus(Path(args.corpus))
    emb = load_embedder(args.model, device=args.device)
    progress = not args.no_progress
    common = dict(batch_size=args.batch_size, show_progress_bar=progress, store_text=not args.no_text,
                  layer_pooling=args.layer_pooling, **_index_kwargs(args))
    if args.documents:
        index = build_document_index(
            emb, texts, metadata=[{"text": t, "line": n} for t, n in zip(texts, lines)],
            passage_weight=DEFAULT_PASSAGE_WEIGHT if args.passage_weight is None else args.passage_weight,
            chunking=args.chunking or CHUNKINGS[0],
            pooling=args.pooling, layers=args.layers if args.layers is not None else [-1],
            layer_pooling=args.layer_pooling, hybrid=hybrid, kind=args.kind, params=_index_kwargs(args)["params"],
            batch_size=args.batch_size, show_progress_bar=progress,
        )
    elif args.words:
        index = build_word_index(
            emb, [t.split() for t in texts], args.words, layers=args.layers, **common,
        )
    else:
        # Mean pooling of the last layer is the sentence-transformers recipe the default model was trained for.
        layers = args.layers if args.layers is not None else [-1]
        metadata = [{"line": n} if args.no_text else {"text": t, "line": n} for t, n in zip(texts, lines)]
        index = build_sentence_index(emb, texts, metadata=metadata, pooling=args.pooling, layers=layers,
                                     hybrid=hybrid, **common)
    index.save(args.out)
    what = "occurrences of %r" % args.words if args.words else "documents" if args.documents else "lines"
    print("indexed %d %s from %s into %s (%s)" % (len(index), what, args.corpus, args.out, index))
    return 0


def _hybrid_params(args: argparse.Namespace):
    """The :class:`~ctxemb.search.HybridParams` of ``build --hybrid`` (None without it)."""
    from ctxemb.search import HybridParams

    if not args.hybrid:
        given = [flag for flag, dest in (("--fusion", "fusion"), ("--rrf-k", "rrf_k"), ("--alpha", "alpha"),
                                         ("--no-stopwords", "no_stopwords")) if getattr(args, dest) not in (None, False)]
        if given:
            raise ValueError("%s set%s hybrid search settings: add --hybrid" % (
                ", ".join(given), "s" if len(given) == 1 else ""))
        return None
    fields = {name: getattr(args, name) for name in ("fusion", "rrf_k", "alpha") if getattr(args, name) is not None}
    if args.no_stopwords:
        fields["stopwords"] = None
    return HybridParams(**fields)


def _describe(hit, recipe: dict) -> str:
    m = hit.metadata or {}
    text = m.get("text", "")
    if recipe.get("mode") == "words" and text and "position" in m:
        words = text.split()
        if 0 <= m["position"] < len(words):
            words[m["position"]] = "[%s]" % words[m["position"]]
            text = " ".join(words)
    return text


def run_query(args: argparse.Namespace) -> int:
    from ctxemb.search import DocumentIndex, SemanticIndex, query_sentences, query_words

    if DocumentIndex.saved_in(args.index):
        return _query_documents(args)
    if args.passage_weight is not None:
        raise ValueError("--passage-weight applies to document indexes (build --documents); %s is not one" % args.index)
    index = SemanticIndex.load(args.index)
    if index.embedder_config is None:
        raise ValueError("%s stores no embedder configuration; it was not built from text" % args.index)
    if args.model is not None:
        # Fail before loading a model that cannot match (the full check runs again on the loaded embedder).
        index.check_config(dict(index.embedder_config, model=args.model))
    emb = load_embedder(args.model, device=args.device, config=index.embedder_config)
    options = {name: getattr(args, name) for name in ("ef_search", "nprobe", "k_factor", "fusion", "rrf_k", "alpha")
               if getattr(args, name) is not None}
    recipe = index.recipe or {}
    if recipe.get("mode") == "words":
        if args.mode is not None:
            raise ValueError("--mode applies to sentence indexes built with --hybrid; %s is a word index" % args.index)
        positions = None if args.position is None else [args.position] * len(args.text)
        results = query_words(index, emb, [t.split() for t in args.text], positions, args.k, **options)
    else:
        results = query_sentences(index, emb, list(args.text), args.k, mode=args.mode, **options)
    for text, hits in zip(args.text, results):
        if args.json:
            print(json.dumps([dict(hit.metadata or {}, id=hit.id, score=round(hit.score, 6)) for hit in hits],
                             ensure_ascii=False))
            continue
        print("query: %s" % text)
        for hit in hits:  # best first; the index's own ids, as SemanticIndex.search returns them
            print("  %-8s %.4f  %s" % (hit.id, hit.score, _describe(hit, recipe)))
    return 0


def _query_documents(args: argparse.Namespace) -> int:
    from ctxemb.search import DocumentIndex

    index = DocumentIndex.load(args.index)
    given = [flag for flag, dest in (("--ef-search", "ef_search"), ("--nprobe", "nprobe"), ("--k-factor", "k_factor"),
                                     ("--position", "position")) if getattr(args, dest) is not None]
    if given:
        raise ValueError("%s do not apply to a document index (%s)" % (", ".join(given), args.index))
    config = index.documents.embedder_config
    if args.model is not None:
        index.documents.check_config(dict(config, model=args.model))
    emb = load_embedder(args.model, device=args.device, config=config)
    fusion = {name: getattr(args, name) for name in ("fusion", "rrf_k", "alpha") if getattr(args, name) is not None}
    results = index.search(emb, list(args.text), args.k, mode=args.mode, passage_weight=args.passage_weight, **fusion)
    for text, hits in zip(args.text, results):
        if args.json:
            print(json.dumps([dict(hit.metadata or {}, id=hit.id, score=round(hit.score, 6), passage=hit.passage)
                              for hit in hits], ensure_ascii=False))
            continue
        print("query: %s" % text)
        for hit in hits:
            shown = hit.passage or (hit.metadata or {}).get("text")  # BM25 alone finds no best sentence
            print("  %-8s %.4f  %s" % (hit.id, hit.score, shown))
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``index`` with its ``build``, ``query``, ``train-quantizer``, ``add-shard`` and ``merge`` commands to a
    ``parser.add_subparsers()`` object; returns the ``index`` parser."""
    index = subparsers.add_parser("index", help=command_help("index"),
                                  description="Semantic search indexes. build: one index from a text file; query: search "
                                              "it; train-quantizer, add-shard, merge: one on-disk IVF-PQ index from "
                                              "shards embedded apart (by several processes or machines).")
    sub = index.add_subparsers(dest="index_command", required=True, metavar="COMMAND")

    build = sub.add_parser("build", help="embed a corpus (one sentence per line) and save an index")
    build.add_argument("corpus", help="text file, one sentence per line")
    add_option(build, "--out-dir", deprecated=["--out"], dest="out", required=True, help="index directory to write")
    build.add_argument("--model", default=None, help="model name or HF-format directory (default %s)" % DEFAULT_MODEL)
    build.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    build.add_argument("--words", metavar="WORD", default=None,
                       help="index every occurrence of WORD in context instead of whole lines")
    build.add_argument("--kind", choices=INDEX_KINDS, default="flat",
                       help="flat: exact; hnsw: fast in RAM; ivfpq: large collections (default %(default)s)")
    build.add_argument("--pooling", choices=("mean", "cls"), default="mean", help="sentence pooling")
    build.add_argument("--layers", type=int, nargs="+", default=None,
                       help="hidden-state indices to pool (0 = embeddings, -1 = last layer); default -1 for lines, "
                            "the embedder's default (last four) for --words")
    build.add_argument("--layer-pooling", choices=("mean", "sum", "concat"), default=None,
                       help="how the --layers are combined (default: the embedder's, mean)")
    build.add_argument("--batch-size", type=positive_int, default=32, help="texts per batch (default %(default)s)")
    build.add_argument("--no-text", action="store_true", help="do not store the text in the metadata")
    build.add_argument("--documents", action="store_true",
                       help="each line is a document (a paragraph): index its whole text and its sentences and score "
                            "a document by both (a DocumentIndex)")
    build.add_argument("--passage-weight", type=_unit_float, default=None,
                       help="--documents: the whole text's share of a document's score, the rest its best sentence's "
                            "(default 0.3)")
    build.add_argument("--chunking", choices=("naive", "late"), default=None,
                       help="--documents: embed each sentence alone (naive, the default) or pool it from its whole "
                            "document's encoding, so that it keeps the document's context (late)")
    build.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_index_options(build)
    build.add_argument("--hnsw-m", type=positive_int, default=None, help="hnsw: graph degree, FAISS's M (default 32)")
    build.add_argument("--ef-construction", type=positive_int, default=None,
                       help="hnsw: candidate list size while building (default 200)")
    build.add_argument("--nlist", type=positive_int, default=None,
                       help="ivfpq: inverted lists (default: the power of two nearest 4 x sqrt(N))")
    build.add_argument("--pq-m", type=positive_int, default=None,
                       help="ivfpq: sub-quantizers, a divisor of the dimension (default: the one nearest dim / 8)")
    build.add_argument("--nbits", type=positive_int, default=None, help="ivfpq: bits per sub-quantizer code (default 8)")
    build.add_argument("--on-disk", action="store_true", help="ivfpq: keep inverted lists and vectors in --out-dir")
    build.add_argument("--hybrid", action="store_true",
                       help="also keep BM25 over the lines (needs bm25s: pip install 'ctxemb[hybrid]'); queries then "
                            "fuse both rankings")
    build.add_argument("--no-stopwords", action="store_true",
                       help="--hybrid: keep English stopwords in BM25 (default: removed, as bm25s does)")
    _add_fusion_options(build, query=False)
    build.set_defaults(func=run_build)

    query = sub.add_parser("query", help="search an index with one or more texts")
    query.add_argument("index", help="index directory")
    query.add_argument("text", nargs="+", help="query text(s); for a word index, a sentence containing the word")
    query.add_argument("-k", "--top-k", dest="k", type=positive_int, default=10, help="results per query (default %(default)s)")
    query.add_argument("--model", default=None, help="override the model recorded in the index (checked)")
    query.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    query.add_argument("--position", type=int, default=None,
                       help="0-based position of the query word in each text (word indexes; default: the first "
                            "occurrence of the indexed word)")
    query.add_argument("--json", action="store_true", help="print one JSON list of hits per query")
    query.add_argument("--passage-weight", type=_unit_float, default=None,
                       help="a document index: this query's weight of the whole text (default: the index's)")
    query.add_argument("--mode", choices=SEARCH_MODES, default=None,
                       help="rank by the vectors, BM25 or both fused (default: hybrid for a --hybrid index, else "
                            "vector)")
    _add_fusion_options(query, query=True)
    _add_index_options(query)
    query.set_defaults(func=run_query)
    index_shards.add_parsers(sub)  # train-quantizer, add-shard, merge: one index from shards embedded apart
    return index


def _add_fusion_options(parser: argparse.ArgumentParser, query: bool) -> None:
    """--fusion, --rrf-k, --alpha: the index's settings (build --hybrid) or this query's overrides."""
    prefix = "hybrid mode, for this query: " if query else "--hybrid: "

    def default(value: str) -> str:
        return " (default: the index's)" if query else " (default %s)" % value

    parser.add_argument("--fusion", choices=FUSION_METHODS, default=None,
                        help=prefix + "rrf (reciprocal rank fusion) or weighted (alpha * vector + (1 - alpha) * BM25, "
                                      "min-max normalised scores)" + default("rrf"))
    parser.add_argument("--rrf-k", type=positive_float, default=None, help=prefix + "the RRF constant" + default("60"))
    parser.add_argument("--alpha", type=_unit_float, default=None,
                        help=prefix + "weight of the vector score in weighted fusion, 0..1" + default("0.5"))


def _unit_float(text: str) -> float:
    """argparse type: a number in [0, 1]."""
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1; got %s" % text)
    return value


def _add_index_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ef-search", type=positive_int, default=None, help="hnsw beam width")
    parser.add_argument("--nprobe", type=positive_int, default=None, help="ivfpq lists to scan")
    parser.add_argument("--k-factor", type=non_negative_float, default=None, help="ivfpq candidates re-ranked per result")
