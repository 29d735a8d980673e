"""The fixed cost of a small ``ctxemb finetune`` run, by phase: where the seconds go besides the training steps.

Runs ``python -m ctxemb finetune sst2 --max-train-examples 256 --epochs 1 --no-progress`` (the default model and
recipe) in a fresh process several times and splits each run's wall time with the run record's ``timing``
(``model/run.json``, see ``ctxemb.training.recipe.run_training``):

- start-up: process start, imports, argument parsing, the preset (spawn to the recipe's ``started_at``)
- load: the tokenizer and the model (weights read, head initialised)
- data: reading the task's files, tokenizing, features and batches
- first step: the loop's set-up (optimizer, schedule) and its first optimizer step
- training: the other steps
- evaluation: the dev evaluation (reported apart: it grows with the dev set, not with the run)
- save: the last checkpoint, the loss plot, best weights, the model directory, process exit

The fixed cost is start-up + load + data + first step + save (the issue's definition: start-up to the first step,
plus the final save; evaluation apart). With ``--baseline-pythonpath DIR`` the same command also runs from another
checkout (e.g. the commit before a change), alternating with this one, and both totals are reported. The machine
may be shared: its CPU, threads and load average (``os.getloadavg``) before and after each run are written beside
the numbers. Writes ``results/finetune_fixed_cost.md`` and ``.json``.

Usage::

    python -m benchmarks.finetune_fixed_cost --repeats 3 [--baseline-pythonpath /tmp/ctxemb-before]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import harness

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("startup", "load", "data", "first_step", "training", "evaluation", "save")
FIXED = ("startup", "load", "data", "first_step", "save")


def run_once(command: list[str], pythonpath: str, out_dir: Path, threads: int) -> dict:
    """One fresh-process run: its wall time, the load around it, and (with a run record's timing) its phases.

    The process runs in ``pythonpath`` (``python -m`` puts the working directory first on the path)."""
    env = dict(os.environ, PYTHONPATH=pythonpath, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(threads))
    shutil.rmtree(out_dir, ignore_errors=True)
    load_before = os.getloadavg()[0]
    sw = harness.Stopwatch()
    proc = subprocess.run([sys.executable, "-m", "ctxemb", *command, "--out-dir", str(out_dir)], env=env,
                          cwd=pythonpath, capture_output=True, text=True)
    sw.stop()
    t_spawn, t_exit = sw.started_at, sw.stopped_at  # Unix time, as the run record's timestamps
    if proc.returncode:
        raise RuntimeError(f"the run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    row = {"wall": sw.seconds, "load_before": load_before, "load_after": os.getloadavg()[0]}
    record = json.loads((out_dir / "model" / "run.json").read_text(encoding="utf-8"))
    timing = record.get("timing")
    row["accuracy"] = record["metrics"]["final"].get("accuracy")
    if not timing:  # a checkout that does not time its phases: the wall time only
        return row
    phases = {
        "startup": timing["started_at"] - t_spawn,
        "load": timing["tokenizer"] + timing["model"],
        "data": timing["read"] + timing["data"],
        "first_step": timing["setup"] + timing["first_step"],
        "training": timing["steps"],
        "evaluation": timing["eval"],
        "save": timing["checkpoints"] + timing["loss_plot"] + timing["after_train"] + (t_exit - timing["recorded_at"]),
    }
    phases["other"] = row["wall"] - sum(phases.values())
    row.update(phases)
    row["fixed"] = sum(phases[k] for k in FIXED)
    row["detail"] = {k: v for k, v in timing.items() if k not in ("started_at", "recorded_at")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--max-train-examples", type=int, default=256)
    ap.add_argument("--baseline-pythonpath", help="another checkout to run the same command from, alternating")
    ap.add_argument("--name", default="finetune_fixed_cost")
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS of the runs (default 1: on a shared, loaded machine two threads wait on "
                         "each other and the timings scatter)")
    args = ap.parse_args()

    command = ["finetune", args.task, "--max-train-examples", str(args.max_train_examples), "--epochs", "1",
               "--no-progress"]
    work = Path(tempfile.mkdtemp(prefix="fixed_cost_"))
    checkouts = {"this checkout": str(ROOT)}
    if args.baseline_pythonpath:
        checkouts = {"baseline": args.baseline_pythonpath, **checkouts}
    runs: dict[str, list[dict]] = {k: [] for k in checkouts}
    try:
        for i in range(args.repeats):
            for name, path in checkouts.items():
                row = run_once(command, path, work / "run", args.threads)
                runs[name].append(row)
                print(f"[{i + 1}/{args.repeats}] {name}: {row['wall']:.1f} s (fixed {row.get('fixed', float('nan')):.1f} s,"
                      f" eval {row.get('evaluation', float('nan')):.1f} s), load {row['load_before']:.1f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ours = runs["this checkout"]
    timing = {k: harness.summarize(r[k] for r in ours) for k in (*PHASES, "other", "fixed", "wall")}
    median = {k: t.median for k, t in timing.items()}
    loads = [r[k] for rs in runs.values() for r in rs for k in ("load_before", "load_after")]
    m = harness.machine()
    payload = {"command": "ctxemb " + " ".join(command), "threads": args.threads,
               "load_avg_1min": {"min": min(loads), "max": max(loads)}, "repeats": args.repeats,
               "median_seconds": median, "timing": {k: t.to_dict() for k, t in timing.items()}, "runs": runs}
    rows = [{"phase": k, "median_s": median[k], "share_of_wall": median[k] / median["wall"],
             "fixed": "yes" if k in FIXED else ""} for k in (*PHASES, "other")]
    rows += [{"phase": "fixed cost (start-up + load + data + first step + save)", "median_s": median["fixed"],
              "share_of_wall": median["fixed"] / median["wall"]},
             {"phase": "total wall", "median_s": median["wall"], "share_of_wall": 1.0}]
    detail = {k: harness.summarize(r["detail"][k] for r in ours).median for k in ours[0]["detail"]}
    md = ["# Fixed cost of a small fine-tuning run\n",
          f"`{payload['command']}` (all-MiniLM-L6-v2, the task's default recipe: `--precision auto`, one dev "
          f"evaluation after the epoch; SST-2's dev split holds 6,735 sentences), {args.repeats} fresh processes, "
          f"median.\n",
          f"{m['cpu']}, {m['cpu_count']} CPUs, torch {m['torch']} with {args.threads} threads. 1-minute load average "
          f"{min(loads):.1f}-{max(loads):.1f} during the runs (above the CPU count: other jobs shared the machine), "
          f"so compare rows of one file, not absolute seconds across files.\n",
          harness.markdown_table(rows, ["phase", "median_s", "share_of_wall", "fixed"]), "",
          "Inside the phases (median seconds, from `run.json` `timing`):\n",
          harness.markdown_table([{"timing key": k, "seconds": v} for k, v in detail.items()],
                                 ["timing key", "seconds"]), ""]
    if args.baseline_pythonpath:
        base = runs["baseline"]
        cmp_rows = [{"checkout": name, "runs_wall_s": ", ".join(f"{r['wall']:.1f}" for r in rs),
                     "median_wall_s": harness.summarize(r["wall"] for r in rs).median,
                     "loads": ", ".join(f"{r['load_before']:.1f}" for r in rs),
                     "dev_accuracy": rs[0].get("accuracy")} for name, rs in runs.items()]
        md += ["Before and after, alternating runs of the same command in the same conditions:\n",
               harness.markdown_table(cmp_rows, ["checkout", "runs_wall_s", "median_wall_s", "loads",
                                                 "dev_accuracy"]), "",
               f"Speed-up of the whole command: "
               f"{harness.summarize(r['wall'] for r in base).median / median['wall']:.2f}x.\n"]
    harness.write_results(args.name, payload, "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
