"""Fine-tuning speed against transformers' Trainer, same recipe, same run, on this CPU.

Two workloads (issue #28): SST-2, the first 10,000 training sentences, 1 epoch, the checkpoint's head; CoNLL-2003
NER, the 14,041 training sentences, 1 epoch, a softmax per token (every subword takes its word's tag). Both: batch
32, max length 128, lr 5e-5, 10% warm-up then linear decay, AdamW with weight decay 0.01. Rows per workload:

- ``ctxemb finetune`` with ``--precision auto`` (what the CLI does by default; bf16 autocast where the CPU multiplies
  bf16 in hardware) and its default length-grouped batches, once per seed (the spread of two seeds is the noise the
  dev metrics are compared within);
- ``ctxemb finetune --precision fp32`` (the quality reference);
- the Trainer in fp32 (its defaults), and the Trainer with its own speed options, ``bf16=True`` and
  ``group_by_length=True``, without and with ``torch_compile=True`` (compilation counts in its ``train_runtime``, as
  it counts in a user's run). ctxemb is compared with the fastest of these rows;
- the Trainer's ``bf16`` + ``group_by_length`` row again with glibc's malloc keeping freed memory (``MALLOC_*``
  environment variables: the setting ctxemb's loop makes, :mod:`ctxemb.core.allocator`), so that the share of the
  margin that is the allocator's shows apart.

Every row runs in a process of its own (the allocator setting is process-wide and stays set).

'train examples/s' counts training examples over the time spent in optimizer steps (ours: the run record's
``first_step + steps``; the Trainer's own ``train_runtime``), so evaluation, start-up and saving are left out; they
are reported apart as the run's fixed cost (the whole call's wall time minus steps and evaluation).

    python -m benchmarks.finetune_speed                         # both workloads, every row
    python -m benchmarks.finetune_speed --tasks sst2 --seeds 0  # one workload, one seed
    python -m benchmarks.finetune_speed --row '{"workload": "sst2", "kind": "auto", "seed": 0}'  # one row, printed

Writes ``benchmarks/results/finetune_speed.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import finetune as bench
from benchmarks import harness
from ctxemb.core import allocator

WORKLOADS = {
    # name -> (ctxemb task, head, extra flags, dev metric)
    "sst2": ("sst2", "checkpoint", ["--max-train-examples", "10000", "--train-split", "train", "--eval-split", "dev"],
             "accuracy"),
    "conll2003-ner": ("conll2003-ner", "softmax", [], "f1"),
}
RESULTS = harness.RESULTS / "finetune_speed.json"
#: glibc's malloc told what ctxemb.core.allocator tells it, through the environment (for the Trainer's process).
KEEP_FREED_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(allocator.MMAP_THRESHOLD_BYTES),
                         "MALLOC_TRIM_THRESHOLD_": str(allocator.TRIM_THRESHOLD_BYTES)}
KEPT_MEMORY_LABEL = ", glibc keeping freed memory"


def run_ctxemb(workload: str, precision: str, seed: int) -> dict:
    task, head, extra, metric = WORKLOADS[workload]
    out = bench.WORK / f"speed_{workload}_{precision}_{seed}"
    shutil.rmtree(out, ignore_errors=True)
    flags = ["--model", bench.MODEL, "--head", head, "--epochs", "1", "--batch-size", "32", "--max-length", "128",
             "--learning-rate", "5e-5", "--warmup-ratio", "0.1", "--precision", precision, "--seed", str(seed), *extra]
    sw = harness.Stopwatch()
    config, result = bench.cli_run(task, out, flags)
    seconds = sw.stop()
    record = json.loads((Path(result.model_dir) / "run.json").read_text())
    timing, data = record["timing"], record["data"]
    step_seconds = timing["first_step"] + timing["steps"]
    shutil.rmtree(out, ignore_errors=True)
    return {"workload": workload, "implementation": f"ctxemb finetune --precision {precision}",
            "resolved precision": record["precision"]["resolved"], "seed": seed, "steps": result.train.step,
            "padding": f"{100 * data['padding_fraction']:.1f}%" if data.get("padding_fraction") is not None else "-",
            "train examples/s": data["train_features"] / step_seconds, "step seconds": step_seconds,
            "fixed seconds": seconds - step_seconds - result.eval_seconds, "eval seconds": result.eval_seconds,
            f"dev {metric}": round(result.final_metrics[metric], 2)}


def run_trainer(workload: str, *, bf16: bool, group_by_length: bool, torch_compile: bool = False,
                seed: int = 0, kept_memory: bool = False) -> dict:
    options = {"seed": seed, "bf16": bf16, "group_by_length": group_by_length, "torch_compile": torch_compile}
    sw = harness.Stopwatch()
    if workload == "sst2":
        row = bench.run_transformers_sst2([], **options)
        metric, value = "dev accuracy", row["dev accuracy"]
    else:
        row = bench.run_transformers_ner([], **options)
        metric, value = "dev f1", row["f1"]
    seconds = sw.stop()
    step_seconds = row["train seconds"]
    label = bench._trainer_regime(bf16, group_by_length, torch_compile) + (KEPT_MEMORY_LABEL if kept_memory else "")
    return {"workload": workload, "implementation": label,
            "resolved precision": "bf16" if bf16 else "fp32", "seed": seed, "steps": row["steps"], "padding": "-",
            "train examples/s": row["train examples/s"], "step seconds": step_seconds,
            "other seconds": seconds - step_seconds, metric: value}


def _summary(rows: list[dict]) -> list[dict]:
    out = []
    for workload in WORKLOADS:
        mine = [r for r in rows if r["workload"] == workload]
        base = [r for r in mine if r["implementation"] == "transformers Trainer"]
        auto = [r for r in mine if r["implementation"] == "ctxemb finetune --precision auto"]
        fp32 = [r for r in mine if r["implementation"] == "ctxemb finetune --precision fp32"]
        trainers = [r for r in mine if r["implementation"].startswith("transformers Trainer")
                    and not r["implementation"].endswith(KEPT_MEMORY_LABEL)]
        kept = [r for r in mine if r["implementation"].endswith(KEPT_MEMORY_LABEL)]
        if not (trainers and auto):
            continue
        metric = next(k for k in auto[0] if k.startswith("dev "))
        scores = [r[metric] for r in auto]
        speed = statistics.mean(r["train examples/s"] for r in auto)
        fastest = max(trainers, key=lambda r: r["train examples/s"])
        out.append({"workload": workload, "ctxemb auto train examples/s (mean over seeds)": f"{speed:.1f}",
                    "Trainer fp32": f"{base[0]['train examples/s']:.1f}" if base else "-",
                    "speed-up": f"{speed / base[0]['train examples/s']:.2f}x" if base else "-",
                    "Trainer's fastest": f"{fastest['implementation'].removeprefix('transformers Trainer, ')} "
                                         f"{fastest['train examples/s']:.1f}",
                    "vs Trainer's fastest": f"{speed / fastest['train examples/s']:.2f}x",
                    "vs that Trainer with ctxemb's allocator setting":
                        f"{speed / kept[0]['train examples/s']:.2f}x" if kept else "-",
                    f"auto {metric} per seed": ", ".join(f"{s:.2f}" for s in scores),
                    "seed spread": f"{max(scores) - min(scores):.2f}" if len(scores) > 1 else "-",
                    f"fp32 {metric}": f"{fp32[0][metric]:.2f}" if fp32 else "-",
                    "ctxemb fixed seconds (median)":
                        f"{harness.summarize(r['fixed seconds'] for r in auto).median:.1f}"})
    return out


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def report(rows: list[dict]) -> None:
    cpu = harness.machine_line()
    shown = [{k: (f"{v:.1f}" if isinstance(v, float) else "-" if v is None else v) for k, v in r.items()} for r in rows]
    summary = _summary(rows)
    md = ("# Fine-tuning speed: ctxemb against transformers' Trainer\n\n"
          f"all-MiniLM-L6-v2 on {cpu}. " + __doc__.split("\n\n")[1].replace("\n", " ") +
          " ctxemb runs `ctxemb finetune` with `--precision auto` (bf16 autocast where the CPU multiplies bf16 in "
          "hardware; once per seed) and `--precision fp32`, both with its default length-grouped batches; the Trainer "
          "runs in fp32 and with its own `bf16` and length grouping, without and with `torch_compile`, and with `bf16` "
          "and length grouping once more with glibc's malloc keeping freed memory (ctxemb's allocator setting, through "
          "`MALLOC_*` environment variables; not counted among the Trainer's configurations). Every row runs in a "
          "process of its own. 'train "
          "examples/s' counts training examples over "
          "the time in optimizer steps (ours: the run record's `first_step + steps`; the Trainer's `train_runtime`). "
          "'fixed seconds' is the rest of a ctxemb call but the dev evaluation ('eval seconds'); for the Trainer, "
          "'other seconds' is loading, tokenizing and our evaluation of its model after training. 'load' is the "
          "1-minute load average at the end of the run.\n\n"
          + (harness.markdown_table(summary, _columns(summary)) + "\n\n" if summary else "")
          + harness.markdown_table(shown, _columns(shown)) + "\n")
    harness.write_results(RESULTS.stem, {"rows": rows, "summary": summary}, md)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="seeds of the ctxemb auto rows")
    parser.add_argument("--no-trainer", action="store_true", help="leave out the Trainer rows")
    parser.add_argument("--no-fp32", action="store_true", help="leave out the ctxemb fp32 row")
    parser.add_argument("--no-trainer-fp32", action="store_true",
                        help="leave out the Trainer's fp32 row (the slowest; not the one ctxemb is held to)")
    parser.add_argument("--row", default=None, metavar="JSON", help="run one row in this process and print it")
    parser.add_argument("--append", action="store_true",
                        help="keep the rows of the last run that this run does not measure again")
    args = parser.parse_args(argv)
    rows = json.loads(RESULTS.read_text())["rows"] if args.append and RESULTS.exists() else []

    def land(row: dict) -> None:
        row["load"] = round(os.getloadavg()[0], 1)
        print(json.dumps(row), flush=True)  # first, so that no measurement is lost
        rows[:] = [r for r in rows if (r["workload"], r["implementation"], r["seed"]) !=
                   (row["workload"], row["implementation"], row["seed"])] + [row]
        report(rows)

    if args.row:
        print(json.dumps(run_row(json.loads(args.row))), flush=True)
        return
    for workload in args.tasks:
        specs = [{"workload": workload, "kind": "auto", "seed": seed} for seed in args.seeds]
        if not args.no_fp32:
            specs.append({"workload": workload, "kind": "fp32", "seed": args.seeds[0]})
        if not args.no_trainer:
            if not args.no_trainer_fp32:
                specs.append({"workload": workload, "kind": "trainer fp32"})
            specs += [{"workload": workload, "kind": "trainer bf16"},
                      {"workload": workload, "kind": "trainer bf16", "kept_memory": True},
                      {"workload": workload, "kind": "trainer bf16 compile"}]
        for spec in specs:
            land(row_in_own_process(spec))
    report(rows)


def run_row(spec: dict) -> dict:
    """One row in this process: ``spec`` is {"workload", "kind": "auto" | "fp32" | "trainer fp32" | "trainer bf16" |
    "trainer bf16 compile", "seed", "kept_memory"}."""
    workload, kind, seed = spec["workload"], spec["kind"], spec.get("seed", 0)
    if kind in ("auto", "fp32"):
        return run_ctxemb(workload, kind, seed)
    options = {"trainer fp32": (False, False, False), "trainer bf16": (True, True, False),
               "trainer bf16 compile": (True, True, True)}[kind]
    bf16, group, compile_ = options
    return run_trainer(workload, bf16=bf16, group_by_length=group, torch_compile=compile_, seed=seed,
                       kept_memory=bool(spec.get("kept_memory")))


def row_in_own_process(spec: dict) -> dict:
    """:func:`run_row` in a child process (with glibc's malloc keeping freed memory where ``spec`` says so)."""
    env = {**os.environ, **(KEEP_FREED_MEMORY_ENV if spec.get("kept_memory") else {})}
    done = subprocess.run([sys.executable, "-m", "benchmarks.finetune_speed", "--row", json.dumps(spec)], env=env,
                          stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the row {spec} failed (exit {done.returncode}); its output is above")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
