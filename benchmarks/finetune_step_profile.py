"""One fine-tuning step in fp32 and under bf16 autocast: time per step, and which ops run in which dtype.

The step is the loop's (``ctxemb.training.loop``): forward under ``autocast(precision)``, backward, gradient
clipping, AdamW, on all-MiniLM-L6-v2 with a fresh two-class head and a batch of real SST-2 training sentences
(32 rows padded to T tokens; T = 32 is what length-grouped SST-2 batches look like, 128 the recipe's maximum).

1. Wall time per step of each precision, alternating, median of ``--repeats`` timed steps after warm-up.
2. One step of each under a ``TorchDispatchMode`` that times every aten op after autocast has rewritten it and
   notes its floating-point input dtypes: the share of the step in bf16 ops, in fp32 ops, and in dtype
   conversions (``_to_copy``/``copy_`` between dtypes), with the heaviest ops of each kind. The mode adds a
   small cost per op; its totals are for shares, the wall times of (1) for speed.

Like the training loop, the process has glibc's malloc keep freed memory (:mod:`ctxemb.core.allocator`).

Writes ``results/finetune_step_profile.md`` and ``.json``; with ``--fused`` the bf16 step runs the fused training
ops (:func:`ctxemb.runtime.kernels.enable_fused_training`) and the results go to
``results/finetune_step_profile_fused.md`` and ``.json``. ``benchmarks.fused_training_ops`` builds its whole-step
comparison from :func:`sst2_batches` and :func:`build_step`.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.finetune_step_profile --repeats 5 [--fused]
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks import harness
from ctxemb.tasks.sequence.features import Collator, encode_examples
from ctxemb.tasks.sequence.data import load_task
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from ctxemb.models.hub import resolve_model_dir
from ctxemb.runtime.kernels import enable_fused_training
from ctxemb.training.optim import make_optimizer
from ctxemb.core.allocator import keep_freed_memory
from ctxemb.core.precision import bf16_autocast as autocast  # what the loop runs under

CONVERSIONS = {"_to_copy", "copy_", "to"}


class OpTimer(TorchDispatchMode):
    """Times each aten op (after autocast) and keys it by name and floating-point input dtypes."""

    def __init__(self):
        super().__init__()
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t = harness.clock()  # a Stopwatch per op would add to the cost the mode already adds
        out = func(*args, **kwargs)
        dt = harness.clock() - t
        ins = sorted({str(a.dtype).replace("torch.", "") for a in tree_leaves((args, kwargs))
                      if isinstance(a, torch.Tensor) and a.is_floating_point()})
        outs = sorted({str(a.dtype).replace("torch.", "") for a in tree_leaves(out)
                       if isinstance(a, torch.Tensor) and a.is_floating_point()})
        name = func.overloadpacket.__name__
        if name in CONVERSIONS and ins != outs and ins and outs:
            kind = f"{'+'.join(ins)}->{'+'.join(outs)}"
        else:
            kind = "+".join(ins) or "-"
        self.seconds[(name, kind)] += dt
        self.calls[(name, kind)] += 1
        return out


def make_step(model, optimizer, batch, precision):
    def step():
        with autocast(precision, torch.device("cpu")):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def sst2_batches(model_name: str, batch_size: int, lengths: list[int]) -> dict[int, dict[str, torch.Tensor]]:
    """T -> a batch of the ``batch_size`` longest SST-2 training rows of at most T tokens (shorter T where no row is
    that long: 63 tokens is SST-2's longest)."""
    tok = load_tokenizer(model_name)
    sents = load_task("sst2", splits=["train"]).splits["train"]
    feats = encode_examples(tok, sents[:5000], max_length=max(lengths))
    collate = Collator(tok.pad_token_id, regression=False)
    batches = {}
    for T in lengths:  # the longest rows up to T tokens, cut at T: every batch is 32 x T
        pool = sorted((f for f in feats if len(f.input_ids) <= T), key=lambda f: -len(f.input_ids))
        batches[T] = collate(pool[:batch_size])
        assert batches[T]["input_ids"].shape[1] <= T
    return batches


def build_step(model_name: str, batch, precision: str, *, fused: bool = False):
    """One loop step (forward under ``autocast(precision)``, backward, clipping, AdamW) of ``model_name`` with a
    fresh 2-class head (seed 0), with the fused training ops switched on where ``fused`` (exits where they do not
    run here)."""
    torch.manual_seed(0)
    model = EncoderForSequenceClassification.from_pretrained(resolve_model_dir(model_name), num_labels=2,
                                                             head="checkpoint").train()
    if fused:
        ok, why = enable_fused_training(model)
        if not ok:
            raise SystemExit(f"the fused training ops do not run here: {why}")
    opt = make_optimizer(model, lr=2e-5, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)
    return make_step(model, opt, batch, precision)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fused", action="store_true", help="the bf16 step with the fused training ops switched on")
    args = ap.parse_args()
    keep_freed_memory()  # as the training loop does before its first step

    results, md = {}, []
    for T, batch in sst2_batches(args.model, args.batch_size, args.lengths).items():
        timings, profiles = {}, {}
        steps = {precision: build_step(args.model, batch, precision, fused=args.fused and precision == "bf16")
                 for precision in ("fp32", "bf16")}
        step_timings = harness.measure_alternating(steps, repeats=args.repeats, warmup=2, progress=False)
        for p, fn in steps.items():
            timer = OpTimer()
            with timer:
                fn()
            total = sum(timer.seconds.values())
            shares = defaultdict(float)
            for (name, kind), s in timer.seconds.items():
                group = "conversion" if "->" in kind else ("bf16" if "bfloat16" in kind else "fp32/other")
                shares[group] += s
            top = sorted(timer.seconds.items(), key=lambda kv: -kv[1])[:12]
            profiles[p] = {"op_seconds_total": total, "shares": {k: v / total for k, v in shares.items()},
                           "conversions": {"calls": sum(c for (n, k), c in timer.calls.items() if "->" in k),
                                           "seconds": shares["conversion"]},
                           "top_ops": [{"op": n, "dtypes": k, "seconds": s, "calls": timer.calls[(n, k)]}
                                       for (n, k), s in top]}
            timings[p] = step_timings[p].median
        results[T] = {"batch_shape": list(batch["input_ids"].shape), "step_seconds": timings, "profiles": profiles,
                      "bf16_speedup": timings["fp32"] / timings["bf16"],
                      "step_timing": {p: t.to_dict() for p, t in step_timings.items()}}
        md.append(f"## Batch {tuple(batch['input_ids'].shape)}\n")
        md.append(f"Step (forward, backward, clip, AdamW): fp32 {timings['fp32']:.3f} s, bf16 autocast "
                  f"{timings['bf16']:.3f} s: **{timings['fp32'] / timings['bf16']:.2f}x**.\n")
        for p in steps:
            pr = profiles[p]
            md.append(f"{p}: op time by dtype: " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(pr["shares"].items()))
                      + f"; {pr['conversions']['calls']} conversions taking {pr['conversions']['seconds']:.3f} s.\n")
            md.append(harness.markdown_table(pr["top_ops"], ["op", "dtypes", "seconds", "calls"]) + "\n")
    m = harness.machine()
    fused = " (bf16 with the fused training ops)" if args.fused else ""
    head = (f"# One fine-tuning step: fp32 against bf16 autocast{fused}\n\n{args.model}, a fresh 2-class head, "
            f"{args.batch_size} SST-2 training sentences per batch. {m['cpu']}, torch {m['torch']}, "
            f"{m['torch_threads']} threads; {harness.timing_note(args.repeats, 2, alternating=True)}.\n")
    name = "finetune_step_profile_fused" if args.fused else "finetune_step_profile"
    harness.write_results(name, {"results": results, "fused": args.fused}, head + "\n" + "\n".join(md))
    print(head + "\n" + "\n".join(md))


if __name__ == "__main__":
    main()
