"""``ctxemb index train-quantizer | add-shard | merge``: one on-disk IVF-PQ index from shards embedded apart.

    ctxemb embed --input texts.txt --output vectors.npy                     # (under torchrun, or on each machine)
    ctxemb index train-quantizer --vectors vectors.npy --out-dir quantizer --nlist 4096
    torchrun --nproc_per_node 4 -m ctxemb index add-shard --quantizer quantizer --vectors vectors.npy \\
        --texts texts.txt --out-dir parts                                   # each rank: parts/shard-<rank>
    ctxemb index merge --quantizer quantizer --out-dir index parts
    ctxemb index query index "a sentence to look for"

``add-shard`` adds rows [N*i/S, N*(i+1)/S) of ``--vectors`` as shard i of S: under torchrun i is the rank and S the
world size; on separate machines sharing one file give ``--shard-index`` and ``--num-shards`` (or ``--rows``); a
machine with a ``.npy`` of its own texts gives ``--shard-index`` alone (all its rows) and ``--first-line``. Ids are
the texts' 0-based positions in the corpus (``"0"`` for its first line, as ``ctxemb index build`` numbers them)
unless ``--ids`` gives a file of ids. The embedder configuration is read from the ``.npy.json`` that ``ctxemb embed``
writes beside its output. See :mod:`ctxemb.search.sharded`.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from ctxemb.cli._common import UsageError, add_option, non_negative_float, positive_int

logger = logging.getLogger(__name__)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer >= 0; got %r" % text) from None
    if value < 0:
        raise argparse.ArgumentTypeError("expected an integer >= 0; got %d" % value)
    return value


def _sidecar(vectors: Path) -> dict | None:
    """The ``<vectors>.json`` that ``ctxemb embed`` writes, or None."""
    from ctxemb.core.validation import read_json_file

    path = vectors.with_name(vectors.name + ".json")
    return read_json_file(path, "embedding description") if path.is_file() else None


def _config_and_recipe(vectors: list[Path]) -> tuple[dict | None, dict | None]:
    """The embedder configuration and sentence recipe recorded beside the ``.npy`` files (they must agree)."""
    from ctxemb.search.text import SENTENCE_DEFAULTS_VERSION

    found = None
    for path in vectors:
        meta = _sidecar(path)
        if meta is None or not isinstance(meta.get("embedder"), dict):
            continue
        config = meta["embedder"]
        recipe = {"mode": "sentences", "pooling": meta.get("pooling", "mean"), "layers": config.get("layers"),
                  "layer_pooling": config.get("layer_pooling"), "sentence_defaults": SENTENCE_DEFAULTS_VERSION}
        if found is not None and found != (config, recipe):
            raise ValueError("%s.json describes another embedder or pooling than the .npy files before it: the "
                             "vectors of one index must be embedded alike" % path)
        found = (config, recipe)
    return found if found is not None else (None, None)


def run_train(args: argparse.Namespace) -> int:
    from ctxemb.search import IVFPQParams
    from ctxemb.search.sharded import train_ivfpq

    fields = {name: getattr(args, name) for name in ("nlist", "pq_m", "nbits", "nprobe", "k_factor", "train_size",
                                                     "seed") if getattr(args, name) is not None}
    vectors = [Path(v) for v in args.vectors]
    config, recipe = _config_and_recipe(vectors)
    q = train_ivfpq(vectors, args.out, params=IVFPQParams(on_disk=True, **fields), metric=args.metric,
                    n_total=args.n_total, embedder_config=config, recipe=recipe, overwrite=args.overwrite)
    print("trained IVF-PQ quantizer (nlist=%d, pq_m=%d, nbits=%d) on %d vectors into %s; fingerprint %s"
          % (q.params.nlist, q.params.pq_m, q.params.nbits, q.n_trained, q.directory, q.fingerprint))
    return 0


def _shard_range(args: argparse.Namespace, n: int) -> tuple[int, int, int]:
    """(shard index, first row, end row) of this process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.rows is not None:
        lo, _, hi = args.rows.partition(":")
        try:
            lo, hi = int(lo or 0), int(hi) if hi else n
        except ValueError:
            raise UsageError("--rows must be FIRST:END (0-based, END excluded); got %r" % args.rows) from None
        if not 0 <= lo < hi <= n:
            raise UsageError("--rows %s is outside the %d rows of %s" % (args.rows, n, args.vectors))
        if args.shard_index is None:
            raise UsageError("--rows needs --shard-index (the shard's place in the merged index)")
        return args.shard_index, lo, hi
    if args.num_shards is not None and args.shard_index is None:
        raise UsageError("--num-shards needs --shard-index (which of the shards this process adds)")
    if args.shard_index is not None and args.num_shards is None:  # a machine's own file: all its rows
        return args.shard_index, 0, n
    if args.shard_index is not None:
        index, shards = args.shard_index, args.num_shards
        if index >= shards:
            raise UsageError("--shard-index %d must be below --num-shards %d" % (index, shards))
    elif world > 1:  # torchrun: the rank's slice
        index, shards = int(os.environ["RANK"]), world
    else:
        index, shards = 0, 1
    return index, n * index // shards, n * (index + 1) // shards


def _lines(path: Path, lo: int, hi: int) -> list[str]:
    """Lines lo..hi-1 (0-based) of a UTF-8 text file, read as a stream."""
    out = []
    with open(path, encoding="utf-8", newline="\n") as f:
        for number, line in enumerate(f):
            if number >= hi:
                break
            if number >= lo:
                out.append(line.rstrip("\n").removesuffix("\r"))
    if len(out) != hi - lo:
        raise ValueError("%s has %d lines; rows %d..%d of the vectors need %d" % (path, lo + len(out), lo, hi, hi))
    return out


def run_add(args: argparse.Namespace) -> int:
    import numpy as np

    from ctxemb.search.sharded import add_shard

    vectors = Path(args.vectors)
    if not vectors.is_file():
        raise FileNotFoundError("--vectors: %s not found" % vectors)
    arr = np.load(vectors, mmap_mode="r")
    index, lo, hi = _shard_range(args, len(arr))
    first = args.first_line
    ids = _lines(Path(args.ids), lo, hi) if args.ids else [str(first - 1 + r) for r in range(lo, hi)]
    metadata = None
    if args.texts:
        metadata = [{"text": t, "line": first + lo + k} for k, t in enumerate(_lines(Path(args.texts), lo, hi))]
    config, recipe = _config_and_recipe([vectors])
    out = Path(args.out) / ("shard-%05d" % index)
    part = add_shard(args.quantizer, out, ids, arr[lo:hi], metadata, shard_index=index, embedder_config=config,
                     recipe=recipe, overwrite=args.overwrite, show_progress_bar=not args.no_progress)
    print("shard %d: added rows %d..%d of %s (%d items) into %s" % (index, lo, hi - 1, vectors, part.n_items, out))
    return 0


def run_merge(args: argparse.Namespace) -> int:
    from ctxemb.search.sharded import merge_shards

    result = merge_shards(args.quantizer, [Path(p) for p in args.partials], args.out, overwrite=args.overwrite)
    print("merged %d shards (%d items) into %s in %.1f s" % (len(result.shards), result.n_items, result.directory,
                                                             result.seconds))
    return 0


def add_parsers(sub) -> None:
    """Add ``train-quantizer``, ``add-shard`` and ``merge`` to the ``index`` command's subparsers."""
    train = sub.add_parser("train-quantizer", help="train the IVF-PQ quantizer of a sharded index once, on a sample",
                           description="Train an IVF-PQ quantizer on a sample of one or more .npy files and save it, "
                                       "empty, for add-shard.")
    train.add_argument("--vectors", nargs="+", required=True,
                       help=".npy file(s) of (N, H) float32 vectors (e.g. ctxemb embed outputs) to sample from")
    add_option(train, "--out-dir", deprecated=["--out"], dest="out", required=True,
               help="directory to save the trained quantizer in")
    train.add_argument("--metric", choices=("cosine", "inner_product"), default="cosine",
                       help="cosine normalises the vectors (default %(default)s)")
    train.add_argument("--n-total", type=positive_int, default=None,
                       help="size of the whole collection, which sizes the default --nlist (default: the rows given)")
    train.add_argument("--nlist", type=positive_int, default=None,
                       help="inverted lists (default: the power of two nearest 4 x sqrt(n-total))")
    train.add_argument("--pq-m", type=positive_int, default=None,
                       help="PQ sub-quantizers, a divisor of the dimension (default: the one nearest dim / 8)")
    train.add_argument("--nbits", type=positive_int, default=None, help="bits per sub-quantizer code (default 8)")
    train.add_argument("--nprobe", type=positive_int, default=None, help="lists scanned per query (default 16)")
    train.add_argument("--k-factor", type=non_negative_float, default=None,
                       help="candidates re-ranked per result (default 10)")
    train.add_argument("--train-size", type=positive_int, default=None,
                       help="training sample size (default max(64 x nlist, 10000))")
    train.add_argument("--seed", type=non_negative_int, default=None, help="seed of the training sample (default 0)")
    train.add_argument("--overwrite", action="store_true", help="replace a quantizer already in --out-dir")
    train.set_defaults(func=run_train)

    add = sub.add_parser("add-shard", help="add this process's shard of vectors to a copy of a trained quantizer",
                         description="Add rows of a .npy file to a copy of the trained quantizer and write a partial "
                                     "index into OUT_DIR/shard-<index>; under torchrun each rank adds its slice.")
    add.add_argument("--quantizer", required=True, help="directory of the trained quantizer (train-quantizer --out-dir)")
    add.add_argument("--vectors", required=True, help=".npy file of (N, H) float32 vectors (memory-mapped)")
    add_option(add, "--out-dir", deprecated=["--out"], dest="out", required=True,
               help="folder of the partials; this shard writes OUT_DIR/shard-<index>")
    add.add_argument("--shard-index", type=non_negative_int, default=None,
                     help="this shard's index (its place in the merge; default: the torchrun rank, or 0); alone, the "
                          "shard is every row of --vectors")
    add.add_argument("--num-shards", type=positive_int, default=None,
                     help="number of shards the rows are split into (default: the torchrun world size, or 1)")
    add.add_argument("--rows", default=None, help="FIRST:END, the 0-based rows to add (END excluded) instead of a "
                                                  "split; needs --shard-index")
    add.add_argument("--ids", default=None,
                     help="text file of ids, one per line, line i for row i (default: the text's 0-based position "
                          "in the corpus, as index build numbers them)")
    add.add_argument("--texts", default=None,
                     help="the texts file the vectors were embedded from: stores {'text', 'line'} as metadata")
    add.add_argument("--first-line", type=positive_int, default=1,
                     help="line number (1-based) of row 0 in the corpus, for the ids (its position, line - 1) and "
                          "the metadata (default %(default)s; for a .npy holding a later part of a corpus)")
    add.add_argument("--overwrite", action="store_true", help="replace a partial already in OUT_DIR/shard-<index>")
    add.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add.set_defaults(func=run_add)

    merge = sub.add_parser("merge", help="merge partial indexes into one on-disk IVF-PQ index",
                           description="Merge the partials of one trained quantizer into one on-disk IVF-PQ index "
                                       "that ctxemb index query and SemanticIndex.load open.")
    merge.add_argument("partials", nargs="+",
                       help="partial directories, or folders of them (add-shard --out-dir); merged by shard index")
    merge.add_argument("--quantizer", required=True, help="directory of the trained quantizer the partials used")
    add_option(merge, "--out-dir", deprecated=["--out"], dest="out", required=True,
               help="directory of the merged index (must not exist)")
    merge.add_argument("--overwrite", action="store_true", help="replace --out-dir once the merged index is complete")
    merge.set_defaults(func=run_merge)
