"""Does ``torch.compile`` of the fine-tuning step pay back its compile time, and after how many steps?

The step is the loop's (forward under bf16 autocast where the CPU has it, backward, clipping, AdamW) on
all-MiniLM-L6-v2 with a fresh two-class head, over real SST-2 batches of 32 rows at three lengths (length-grouped
batches come in a few lengths; ``dynamic=True`` is what lets them share a graph). Three steps side by side:

- ``eager, fused ops``: what ``ctxemb finetune`` runs by default (``fused_training="auto"`` on a CPU with AVX-512);
- ``eager, torch's ops``: the same with ``fused_training="off"``;
- ``torch.compile``: ``TrainConfig(compile=True)``: the model through ``torch.compile(dynamic=True)``, torch's ops
  (the fused ops cannot be traced).

Each is built fresh; its first step at every length is timed apart (for the compiled step this is the compiling);
then ``--repeats`` alternating rounds, each timing one step of every row at every length. The compile cost is the
compiled row's first steps less as many of its steady steps; the break-even is that cost over what a compiled step
saves against the default eager step (none where it saves nothing).

Inductor's caches go to a fresh temporary directory (``TORCHINDUCTOR_CACHE_DIR``), so the compile is a first
run's, not one served from an earlier run's cache; ``--warm-cache`` keeps the usual cache directory.

    python -m benchmarks.compile_step [--repeats 7] [--threads 2] [--warm-cache]

Writes ``results/compile_step.md`` and ``.json``. About five minutes on 2 cores, most of it compiling.
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile

if "--warm-cache" not in sys.argv:  # before torch reads its configuration
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ctxemb-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import torch  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.finetune_step_profile import make_step, sst2_batches  # noqa: E402
from ctxemb.core.allocator import keep_freed_memory  # noqa: E402
from ctxemb.core.precision import resolve_training_precision  # noqa: E402
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification  # noqa: E402
from ctxemb.models.hub import resolve_model_dir  # noqa: E402
from ctxemb.runtime.kernels import enable_fused_training  # noqa: E402
from ctxemb.training.optim import make_optimizer  # noqa: E402

NAME = "compile_step"
MODEL = "all-MiniLM-L6-v2"
LENGTHS = (24, 32, 48)
ROWS = ("eager, fused ops", "eager, torch's ops", "torch.compile")


def build_steps(row: str, batches: dict[int, dict], precision: str) -> dict[int, callable]:
    """T -> one step of ``row``'s model (seed 0, its own optimizer) on the batch of length T."""
    torch.manual_seed(0)
    model = EncoderForSequenceClassification.from_pretrained(resolve_model_dir(MODEL), num_labels=2,
                                                             head="checkpoint").train()
    if row == "eager, fused ops":
        ok, why = enable_fused_training(model)
        if not ok:
            raise SystemExit(f"the fused training ops do not run here: {why}")
    opt = make_optimizer(model, lr=2e-5, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)
    forward = torch.compile(model, dynamic=True) if row == "torch.compile" else model
    return {T: make_step(forward, opt, batches[T], precision) for T in LENGTHS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="alternating timed rounds")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--warm-cache", action="store_true", help="compile with Inductor's usual (maybe warm) cache")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the training loop does
    precision = resolve_training_precision("auto", torch.device("cpu"))
    batches = sst2_batches(MODEL, 32, list(LENGTHS))
    steps, first = {}, {}
    for row in ROWS:
        steps[row] = build_steps(row, batches, precision)
        sw = harness.Stopwatch()
        for T in LENGTHS:
            steps[row][T]()
        first[row] = sw.stop()
        print(f"{row}: first steps at {LENGTHS} took {first[row]:.1f} s", flush=True)
    runs = {f"{row} | {T}": steps[row][T] for row in ROWS for T in LENGTHS}
    timings = harness.measure_alternating(runs, repeats=args.repeats, warmup=1)
    median = {key: t.median for key, t in timings.items()}
    per_row = {row: statistics.mean(median[f"{row} | {T}"] for T in LENGTHS) for row in ROWS}
    default = per_row["eager, fused ops"]
    table = []
    for row in ROWS:
        setup = first[row] - len(LENGTHS) * per_row[row]
        saved = default - per_row[row]
        entry = {"step": row, **{f"T={T} step s": median[f"{row} | {T}"] for T in LENGTHS},
                 "mean step s": per_row[row], "vs the default step": f"{default / per_row[row]:.2f}x",
                 "first steps s (all lengths)": first[row], "one-off cost s": max(setup, 0.0)}
        if row != "eager, fused ops":
            entry["break-even steps"] = f"{setup / saved:,.0f}" if saved > 0 and setup > 0 else (
                "never" if saved <= 0 else "at once")
        table.append(entry)
    cpu = harness.machine_line()
    md = (f"# torch.compile of the fine-tuning step\n\n{MODEL}, a fresh 2-class head, SST-2 batches of 32 rows at "
          f"T = {', '.join(map(str, LENGTHS))} tokens, {precision} autocast; the loop's step (forward, backward, "
          f"clipping, AdamW). {cpu}. {harness.timing_note(args.repeats, 1, alternating=True)}. Inductor's cache: "
          f"{'the usual directory' if args.warm_cache else 'empty (a first compile)'}. The one-off cost is a "
          "row's first steps (one per length: the compiling, for torch.compile) less as many steady steps; the "
          "break-even is that cost over the seconds a step saves against the default eager step with the fused "
          "ops.\n\n" + harness.markdown_table(table, list(dict.fromkeys(k for r in table for k in r))) + "\n")
    harness.write_results(NAME, {"model": MODEL, "lengths": LENGTHS, "precision": precision, "rows": table,
                                 "inductor_cache": "warm" if args.warm_cache else "cold",
                                 "timings": {k: t.to_dict() for k, t in timings.items()}}, md)
    print(md)


if __name__ == "__main__":
    main()
