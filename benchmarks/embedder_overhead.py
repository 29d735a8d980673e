"""What the whole ``Embedder`` costs over the bare encoder: the two fp32 rows of ``encode_throughput.py`` alone.

``encode_throughput.py`` times twelve rows in two alternating rounds; on a shared 2-core machine that leaves the
Embedder-vs-encoder gap (a few percent) inside the noise. This script times only those two, in more alternating
rounds: the bare fp32 encoder over ctxemb's length-sorted batches, its last four layers averaged and subwords
pooled (``encode_throughput.word_pass``), against ``Embedder.embed_words`` on the same sentences (tokenizing,
planning batches, encoding, pooling, converting to numpy). Writes ``embedder_overhead_<model>.md`` and ``.json``.

Usage::

    python -m benchmarks.embedder_overhead --model all-MiniLM-L6-v2 --repeats 4
"""
from __future__ import annotations

import argparse

from benchmarks import harness
from benchmarks._common import wikitext_sentences
from benchmarks.encode_throughput import LAST_FOUR, build_batches, word_pass
from ctxemb.runtime import backends
from ctxemb.embedding.embedder import Embedder
from ctxemb.modeling.loading import load_encoder, load_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=4, help="alternating timed rounds (their median is reported)")
    args = ap.parse_args()

    sentences = [t.split() for t in wikitext_sentences(args.sentences)]
    tok = load_tokenizer(args.model)
    items = tok.tokenize_words(sentences)
    batches = build_batches(tok, items, args.batch_size)
    n_tokens = sum(int(b.mask.sum()) for b in batches)
    enc = load_encoder(args.model).eval()
    backend = backends.load_backend(enc, "fp32", model_name=args.model)
    layers = enc.resolve_layers(LAST_FOUR)
    embedder = Embedder(enc, tok, batch_size=args.batch_size, max_tokens_per_batch=None)
    rows = {
        "bare encoder (batches prebuilt; last four layers averaged, subwords pooled)":
            lambda: word_pass(batches, items, lambda i, m: backend.hidden_states(i, m, layers)),
        "Embedder.embed_words (tokenize, batch, encode, pool, to numpy)":
            lambda: embedder.embed_words(sentences, show_progress_bar=False),
    }
    timings = harness.measure_alternating(rows, repeats=args.repeats)
    bare = next(iter(timings.values())).median
    table = [{"row": name, "seconds": t.median, "tokens_per_s": n_tokens / t.median, "x_bare_time": t.median / bare}
             for name, t in timings.items()]
    overhead = table[1]["seconds"] / bare - 1
    md = (f"# Embedder overhead over the bare encoder: {args.model}\n\n"
          f"{harness.machine_line()}, fp32. {len(sentences):,} WikiText-2 sentences, {n_tokens:,} tokens, "
          f"batches of {args.batch_size}; {harness.timing_note(args.repeats, alternating=True)}.\n\n"
          + harness.markdown_table(table, ["row", "seconds", "tokens_per_s", "x_bare_time"])
          + f"\n\nThe whole Embedder costs {overhead:+.1%} over the bare encoder.\n")
    harness.write_results(f"embedder_overhead_{args.model}",
                          {"meta": {"repeats": args.repeats, "tokens": n_tokens}, "rows": table, "overhead": overhead,
                           "timing": {name: t.to_dict() for name, t in timings.items()}}, md)
    print(md)


if __name__ == "__main__":
    main()
