"""``ctxemb embed``: sentence vectors of a text file (one text per line) into one .npy file, by one process or more.

    ctxemb embed --model M --input texts.txt --output vectors.npy
    torchrun --nproc_per_node 2 -m ctxemb embed --model M --input texts.txt --output vectors.npy --threads 1

Row i of ``vectors.npy`` ((N, H) float32) is the vector of line i + 1, the same bits with any number of processes
(see :mod:`ctxemb.embedding.corpus`); ``vectors.npy.json`` beside it records the model, the embedder configuration,
the options, N, H, the number of processes and the time taken. Under torchrun only rank 0 logs, shows progress and
reports; across machines the output must be on a filesystem all of them share.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ctxemb.cli._common import add_embedder_args, command_help, description, positive_int, write_json

logger = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("embed", help=command_help("embed"), description=description(__doc__),
                              epilog="Run it under torchrun (--nproc_per_node P, or several machines) to split the "
                                     "texts between processes, balanced by tokens.")
    p.add_argument("--input", required=True, help="UTF-8 text file, one text per line (no empty lines)")
    p.add_argument("--output", required=True, help="the .npy file to write ((N, H) float32)")
    add_embedder_args(p, pooling=False)
    p.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                   help="mean over the text's tokens ([CLS] and [SEP] included) or the [CLS] vector (default mean)")
    p.add_argument("--normalize", action="store_true", help="L2-normalise every vector")
    p.add_argument("--layers", type=int, nargs="+", default=None,
                   help="hidden-state indices to pool; 0 = embedding output, -1 = last layer (default -1, the "
                        "sentence-transformers recipe)")
    p.add_argument("--layer-pooling", choices=("mean", "sum", "concat"), default=None,
                   help="how the --layers are combined (default mean)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="texts per forward pass (default 64)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads per process (default: the cores of the machine shared among its processes)")
    p.add_argument("--overwrite", action="store_true", help="replace the output (and its .json) if they exist")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run_embed)
    return p


def run_embed(args: argparse.Namespace) -> int:
    from ctxemb.runtime.distributed import DistributedContext

    main_rank = DistributedContext.from_env("cpu").is_main
    if not main_rank:  # rank 0 logs and reports, for all of them (it names any rank that failed)
        logging.getLogger().setLevel(logging.ERROR)
    try:
        return _embed(args)
    except Exception:
        if main_rank or args.debug:
            raise
        logger.debug("this rank failed; rank 0 reports why", exc_info=True)
        return 1


def _embed(args: argparse.Namespace) -> int:
    import torch

    from ctxemb.cli._common import load_embedder
    from ctxemb.embedding.corpus import embed_corpus_to_file
    from ctxemb.core.protocols import embedder_config_dict
    from ctxemb.runtime.distributed import call_on_every_rank, distributed_session

    output = Path(args.output)
    sidecar = output.with_name(output.name + ".json")
    overrides = {"layers": args.layers if args.layers is not None else [-1]}
    if args.layer_pooling is not None:
        overrides["layer_pooling"] = args.layer_pooling
    with distributed_session(args.device, num_threads=args.threads) as ctx:
        if args.threads is not None and not ctx.is_distributed:
            torch.set_num_threads(args.threads)

        def check_sidecar() -> None:  # (the library checks the output itself, and the rest of its arguments)
            for path in (output, sidecar):
                if path.is_file() and not args.overwrite:
                    raise FileExistsError(f"{path} exists; pass --overwrite to replace it")

        call_on_every_rank(check_sidecar, ctx)
        # Rank 0 loads first: with "auto" it measures the paths and every rank then runs the one it chose (the ranks
        # must agree for identical rows), and an ONNX export is made once, into the cache the others then read.
        loaded = []

        def load(precision: str | None) -> str:
            embedder = load_embedder(args.model, device=str(ctx.device), **overrides,
                                     **({"precision": precision} if precision else {}))
            embedder.backend  # noqa: B018 (built now: the int8 copy, the ONNX session)
            loaded.append(embedder)
            return embedder.config.precision

        chosen = call_on_every_rank(lambda: load(args.precision) if ctx.is_main else None, ctx)[0]
        call_on_every_rank(lambda: None if ctx.is_main else load(chosen), ctx)
        embedder = loaded[0]
        result = embed_corpus_to_file(embedder, Path(args.input), output, pooling=args.pooling,
                                      normalize=args.normalize, batch_size=args.batch_size, overwrite=args.overwrite,
                                      show_progress_bar=not args.no_progress, context=ctx)
        if ctx.is_main:
            write_json(sidecar, {
                "model": embedder.config.model, "embedder": embedder_config_dict(embedder),
                "pooling": args.pooling, "normalize": args.normalize, "input": str(args.input),
                "output": str(output), "num_texts": result.num_texts, "dim": result.dim, "dtype": "float32",
                "world_size": result.world_size, "texts_per_process": list(result.texts_per_rank),
                "padded_tokens_per_process": list(result.padded_tokens_per_rank),
                "threads_per_process": torch.get_num_threads(), "seconds": round(result.seconds, 3)})
            print("embedded %d texts (dim %d) from %s into %s with %d process%s in %.1f s; %s describes it" % (
                result.num_texts, result.dim, args.input, output, result.world_size,
                "es" if result.world_size > 1 else "", result.seconds, sidecar))
    return 0
