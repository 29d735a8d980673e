"""Peak memory of embedding a large corpus straight into a ``.npy`` memory map.

Sentences: WikiText-2 (valid + test), Tiny Shakespeare lines and SemCor sentences from the shared data, cycled until
``--sentences`` are reached. Reports peak resident memory of the process (ru_maxrss), throughput and the file size.

    python -m benchmarks.memmap_memory --sentences 100000
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks._common import wikitext_sentences
from ctxemb.embedding.embedder import Embedder
from ctxemb.core.paths import shared_data_dir


def corpus(n: int) -> list[str]:
    pool = wikitext_sentences(30000)
    shakespeare = shared_data_dir() / "corpora" / "tiny-shakespeare" / "input.txt"
    pool += [l.strip() for l in shakespeare.open(encoding="utf-8") if len(l.split()) >= 4]
    return [pool[i % len(pool)] for i in range(n)]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--sentences", type=int, default=100_000)
    ap.add_argument("--precision", default="fp32")
    args = ap.parse_args()
    texts = corpus(args.sentences)
    emb = Embedder.from_pretrained(args.model, precision=args.precision)
    before = rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "embeddings.npy"
        with harness.Stopwatch() as sw:
            mm = emb.embed_sentences(texts, layers=[-1], out_path=out, show_progress_bar=True)
        seconds = sw.seconds
        size_mb = out.stat().st_size / 2**20
        ok = bool(np.isfinite(np.asarray(mm[:: max(1, len(texts) // 1000)])).all())
    row = {"model": args.model, "sentences": len(texts), "precision": args.precision, "seconds": seconds,
           "sentences_per_s": len(texts) / seconds, "peak_rss_mb": rss_mb(), "rss_after_load_mb": before,
           "output_mb": size_mb, "finite": ok}
    cols = list(row)
    md = (f"# Embedding {len(texts):,} sentences into a memory map\n\nPeak resident memory of the whole process "
          "(ru_maxrss, model and corpus strings included); one run.\n\n" + harness.markdown_table([row], cols))
    harness.write_results(f"memmap_memory_{args.model}", {"rows": [row]}, md)
    print(md)


if __name__ == "__main__":
    main()
