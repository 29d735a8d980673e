"""One fine-tuning step with the word embeddings updated densely, by warm rows ("sparse", torch's AdamW result) and
by batch rows ("lazy"): ``TrainConfig.embedding_update`` (:mod:`ctxemb.training.embedding_rows`).

The step is the loop's: forward under bf16 autocast, backward, gradient clipping (``max_grad_norm`` 1), AdamW, on
all-MiniLM-L6-v2 (word embeddings 30,522 x 384, half its parameters) with a fresh two-class head and a batch of the
``--batch-size`` longest SST-2 training rows of at most T tokens. "sparse" costs more as more rows are warm (a row
stays warm once a batch has used it): it is timed with only the batch's rows warm and with the most frequent SST-2
ids warmed up to each ``--warm`` fraction of the vocabulary beforehand (above
``embedding_rows.ALL_WARM_FRACTION`` it updates every row). Rows alternate (``harness.measure_alternating``); each
row's step is also split into forward + backward and clip + optimizer step (medians of the timed steps).

Writes ``results/embedding_update_step.md`` and ``.json``.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.embedding_update_step --repeats 7
"""
from __future__ import annotations

import argparse
import statistics
from collections import Counter

import torch

from benchmarks import harness
from ctxemb.core.precision import bf16_autocast as autocast  # what the loop runs under
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from ctxemb.models.hub import resolve_model_dir
from ctxemb.tasks.sequence.data import load_task
from ctxemb.tasks.sequence.features import Collator, encode_examples
from ctxemb.training import embedding_rows
from ctxemb.training.embedding_rows import RowLookupSwap, find_row_embeddings
from ctxemb.training.optim import make_optimizer


def build_step(model_name: str, batch: dict, mode: str, warm_ids: torch.Tensor | None, phases: dict):
    """The loop's step for ``mode`` on a fresh model (seed 0); ``warm_ids`` are made warm first (sparse).
    ``phases`` gathers each call's seconds of forward + backward and of clip + step."""
    torch.manual_seed(0)
    model = EncoderForSequenceClassification.from_pretrained(resolve_model_dir(model_name), num_labels=2,
                                                             head="checkpoint").train()
    emb = find_row_embeddings(model, mode)
    opt = make_optimizer(model, lr=2e-5, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8, embedding_update=mode,
                         word_embeddings=emb)
    rows = None if mode == "dense" else opt
    if rows is not None:
        RowLookupSwap(model, rows)
        if warm_ids is not None:
            rows.before_lookup(warm_ids, recording=True)  # what the lookups of earlier batches would have done
    params = [p for p in model.parameters() if p.requires_grad]
    phases.update(backward=[], update=[])

    def step():
        t = harness.clock()
        with autocast("bf16", torch.device("cpu")):
            loss = model(**batch).loss
        loss.backward()
        if rows is not None:
            rows.end_micro_batch()
        t2 = harness.clock()
        if rows is None:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        else:
            rows.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        phases["backward"].append(t2 - t)
        phases["update"].append(harness.clock() - t2)
    return step, opt, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--length", type=int, default=32, help="T: the batch's rows have at most T tokens")
    ap.add_argument("--warm", type=float, nargs="*", default=[0.1, 0.3],
                    help="fractions of the vocabulary warm before the timed steps (sparse rows)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    tok = load_tokenizer(args.model)
    sents = load_task("sst2", splits=["train"]).splits["train"]
    feats = encode_examples(tok, sents, max_length=args.length)
    pool = sorted((f for f in feats if len(f.input_ids) <= args.length), key=lambda f: -len(f.input_ids))
    batch = Collator(tok.pad_token_id, regression=False)(pool[:args.batch_size])
    counts = Counter(i for f in feats for i in f.input_ids)  # the SST-2 training ids, most frequent first
    by_frequency = torch.tensor([i for i, _ in counts.most_common()], dtype=torch.long)

    phases: dict[str, dict] = {}
    steps, optimizers, V = {}, {}, None
    warm_wanted = {"dense": None, "sparse": 0.0, "lazy": None, **{f"sparse, {w:.0%} warm": w for w in args.warm}}
    for name, fraction in warm_wanted.items():
        mode = name.split(",")[0]
        ids = None if not fraction else by_frequency[: round(fraction * V)]
        phases[name] = {}
        steps[name], optimizers[name], model = build_step(args.model, batch, mode, ids, phases[name])
        V = model.encoder.embeddings.word_embeddings.num_embeddings
    timings = harness.measure_alternating(steps, repeats=args.repeats, warmup=2, progress=False)
    dense = timings["dense"].median
    rows = []
    for name, timing in timings.items():
        warm = f"{optimizers[name].warm_rows / V:.0%}" if name.startswith("sparse") else ""
        p = phases[name]  # the warm-up calls are in there too: drop them
        backward, update = statistics.median(p["backward"][2:]), statistics.median(p["update"][2:])
        rows.append({"embedding_update": name, "warm rows": warm, "step s": timing.median,
                     "vs dense": timing.median / dense, "forward+backward s": backward, "clip+AdamW s": update})
    m = harness.machine()
    shape = tuple(batch["input_ids"].shape)
    head = (f"# One fine-tuning step: the word embeddings updated densely, by rows (sparse) and by batch rows (lazy)"
            f"\n\n{args.model}, a fresh 2-class head, a batch {shape} of SST-2 training rows, bf16 autocast, "
            f"clipping at 1, AdamW; sparse updates every row once more than "
            f"{embedding_rows.ALL_WARM_FRACTION:.0%} are warm. {m['cpu']}, torch {m['torch']}, {m['torch_threads']} "
            f"threads; {harness.timing_note(args.repeats, 2, alternating=True)}.\n")
    table = harness.markdown_table(rows, ["embedding_update", "warm rows", "step s", "vs dense", "forward+backward s",
                                          "clip+AdamW s"])
    harness.write_results("embedding_update_step",
                          {"batch_shape": list(shape), "rows": rows,
                           "step_timing": {k: t.to_dict() for k, t in timings.items()}}, head + "\n" + table)
    print(head + "\n" + table)


if __name__ == "__main__":
    main()
