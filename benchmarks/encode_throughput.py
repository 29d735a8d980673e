"""Encoder throughput: ctxemb vs transformers on the same checkpoint, sentences, batches and precision.

Both encoders see identical padded batches (sorted by length, the same batch size) of real WikiText-2 sentences and
return all hidden states; tokens per second counts real (non-padding) tokens. fp32 and bf16 (autocast, AMX where the
CPU has it). Runs alternate between the two implementations and the best of ``--repeats`` is kept, so that a busy
machine penalises both alike. A third row times ctxemb's full Embedder pipeline (tokenizing, batching, pooling).

    python benchmarks/encode_throughput.py [--model all-MiniLM-L6-v2] [--sentences 2000] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import time

import torch

from _common import machine, markdown_table, wikitext_sentences, write_results
from ctxemb.embedding import Embedder
from ctxemb.inference import precision_context
from ctxemb.loading import load_encoder, load_tokenizer
from ctxemb.registry import resolve_model_dir


def make_batches(tokenizer, texts, batch_size):
    items = tokenizer.tokenize(texts)
    seqs = sorted((tokenizer.with_specials(it.ids)[0] for it in items), key=len, reverse=True)
    batches = []
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i:i + batch_size]
        T = len(chunk[0])
        ids = torch.full((len(chunk), T), tokenizer.pad_token_id)
        mask = torch.zeros(len(chunk), T, dtype=torch.long)
        for r, s in enumerate(chunk):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
        batches.append((ids, mask))
    return batches, sum(len(s) for s in seqs)


def time_model(run, batches, precision):
    start = time.perf_counter()
    with torch.inference_mode(), precision_context(precision, torch.device("cpu")):
        for ids, mask in batches:
            run(ids, mask)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    import transformers

    texts = wikitext_sentences(args.sentences)
    tok = load_tokenizer(args.model)
    batches, n_tokens = make_batches(tok, texts, args.batch_size)
    ours = load_encoder(args.model)
    theirs = transformers.AutoModel.from_pretrained(str(resolve_model_dir(args.model))).eval()
    runners = {
        "ctxemb": lambda ids, mask: ours(ids, mask),
        "transformers": lambda ids, mask: theirs(input_ids=ids, attention_mask=mask, output_hidden_states=True),
    }
    rows = []
    for precision in ("fp32", "bf16"):
        for run in runners.values():  # warm-up
            time_model(run, batches[-2:], precision)
        best = {name: float("inf") for name in runners}
        for _ in range(args.repeats):
            for name, run in runners.items():
                best[name] = min(best[name], time_model(run, batches, precision))
        emb = Embedder.from_pretrained(args.model, precision=precision, batch_size=args.batch_size,
                                       max_tokens_per_batch=None)
        t0 = time.perf_counter()
        emb.embed_tokens(texts, show_progress_bar=False)
        pipeline = time.perf_counter() - t0
        for name, seconds in best.items():
            rows.append({"precision": precision, "implementation": name, "seconds": seconds,
                         "tokens_per_s": n_tokens / seconds, "ratio_vs_transformers": best["transformers"] / seconds})
        rows.append({"precision": precision, "implementation": "ctxemb Embedder (tokenize+encode+pool)",
                     "seconds": pipeline, "tokens_per_s": n_tokens / pipeline,
                     "ratio_vs_transformers": best["transformers"] / pipeline})
        print(markdown_table(rows[-3:], ["precision", "implementation", "seconds", "tokens_per_s",
                                         "ratio_vs_transformers"]), flush=True)
    meta = {"model": args.model, "sentences": len(texts), "tokens": n_tokens, "batch_size": args.batch_size,
            "repeats": args.repeats, "machine": machine(), "transformers": transformers.__version__}
    md = (f"# Encoder throughput: {args.model}\n\n{len(texts)} WikiText-2 sentences, {n_tokens:,} tokens "
          f"(special tokens included, padding excluded), batch size {args.batch_size}, all hidden states, "
          f"best of {args.repeats} alternating runs, {meta['machine']['threads']} threads.\n\n"
          + markdown_table(rows, ["precision", "implementation", "seconds", "tokens_per_s", "ratio_vs_transformers"]))
    name = "encode_throughput_" + args.model.replace("/", "_")
    write_results(name, {"meta": meta, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
