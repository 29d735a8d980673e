"""Run under ``torchrun --nproc_per_node 2``: failures of one rank in ``embed_corpus_to_file``, which
tests/test_embed_corpus.py checks.

Usage: embed_failures.py MODEL_DIR WORK_DIR. Every rank writes ``WORK_DIR/rank<r>.json``: for each scenario, the
error it raised and what was left in the output's folder afterwards.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch

import ctxemb.embedding.corpus as corpus_embedding
from ctxemb.embedding.corpus import embed_corpus_to_file
from ctxemb.embedding.embedder import Embedder
from ctxemb.runtime.distributed import barrier, distributed_session

WORDS = "the bank river money sat on of he she a mouse die cell plant bat".split()


def scenario(ctx, emb, folder, texts, patch=None):
    """One call that fails; returns (error type, message, files left in its folder)."""
    folder.mkdir(exist_ok=True)
    undo = patch() if patch else None
    try:
        embed_corpus_to_file(emb, texts, folder / "v.npy", batch_size=2, show_progress_bar=False, context=ctx)
        error = (None, "")
    except Exception as e:  # noqa: BLE001 (recorded for the test)
        error = (type(e).__name__, str(e))
    finally:
        if undo:
            undo()
    barrier(ctx)
    return {"error": error, "left": sorted(os.listdir(folder))}


def main():
    model, work = Path(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    with distributed_session("cpu") as ctx:
        emb = Embedder.from_pretrained(model)
        texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + i % 9)) for i in range(40)]
        out = {}
        real = Embedder.embed_sentences
        calls = []

        def fail_on_rank_1_slow_on_rank_0():
            def embed(self, *args, **kwargs):
                calls.append(1)
                if ctx.rank == 1:
                    raise MemoryError("simulated on rank 1")
                time.sleep(0.3)  # rank 0 is still busy when rank 1 fails: it must stop early, not finish
                return real(self, *args, **kwargs)

            Embedder.embed_sentences = embed
            return lambda: setattr(Embedder, "embed_sentences", real)

        out["write_fails"] = scenario(ctx, emb, work / "a", texts, fail_on_rank_1_slow_on_rank_0)
        out["write_fails"]["calls"] = len(calls)

        def not_shared():
            real_offset = corpus_embedding._npy_data_offset

            def offset(path, shape):
                if ctx.rank == 1:  # as if rank 1's machine had another filesystem at that path
                    raise FileNotFoundError(path)
                return real_offset(path, shape)

            corpus_embedding._npy_data_offset = offset
            return lambda: setattr(corpus_embedding, "_npy_data_offset", real_offset)

        out["not_shared"] = scenario(ctx, emb, work / "b", texts, not_shared)
        other = texts if ctx.rank == 0 else texts[:-1] + ["another text"]
        out["other_texts"] = scenario(ctx, emb, work / "c", other)
        out["ok"] = scenario(ctx, emb, work / "d", texts)
        (work / f"rank{ctx.rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
