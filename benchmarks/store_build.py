"""End to end: build the SemCor sense store with the default model (read the corpus, encode, average, save), with
the code before issue 13's fast paths and with today's, each precision asked for, and check the stores agree.

Each build is ``python -m ctxemb wsd build <SemCor> <out> --precision P --no-progress`` run from a checkout of the
code (a git worktree made here for ``--before``, this checkout for today), timed by wall clock from process start to
exit, so model loading, the corpus read, the auto probe (if any) and the save all count. Builds run one after
another, never side by side. Every store is compared with the first build's (the exact fp32 path of the old code):
the same sense keys, and the cosine of each key's vector to the reference vector (min and mean).

    python -m benchmarks.store_build                               # before (fp32) vs today (fp32, auto)
    python -m benchmarks.store_build --before 97f089d --precisions fp32 auto

Writes ``benchmarks/results/store_build_<model>.{md,json}`` (``--tag`` appends ``_<tag>``: a smoke run with
``--train`` a small corpus does not overwrite the real table).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness
from ctxemb.core.paths import shared_data_dir
from ctxemb.wsd.sense_store import SenseStore

ROOT = Path(__file__).resolve().parent.parent

# main just before the fast-encoding work (issue 13) was merged
DEFAULT_BEFORE = "97f089dbb36f9658c4402882317451c5da72b73d"


def build(checkout: Path, train: Path, out: Path, model: str, precision: str) -> float:
    """Run one ``ctxemb wsd build`` from ``checkout``; returns its wall-clock seconds."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "ctxemb", "wsd", "build", str(train), str(out), "--model", model,
           "--precision", precision, "--no-progress"]
    sw = harness.Stopwatch()
    proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    seconds = sw.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} (in {checkout}) failed with status {proc.returncode}:\n"
                           f"{proc.stderr[-3000:]}")
    return seconds


def compare(reference: SenseStore, store: SenseStore) -> dict:
    """Whether two stores hold the same keys, and the cosine of each key's vector to the reference's."""
    if set(reference.keys) != set(store.keys):
        return {"same_keys": False, "keys": len(store.keys), "reference_keys": len(reference.keys)}
    keys = list(reference.keys)
    a, b = reference.vectors(keys), store.vectors(keys)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
    return {"same_keys": True, "keys": len(keys), "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
            "max_abs_diff": float(np.abs(a - b).max())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--before", default=DEFAULT_BEFORE, help="the git commit of the 'before' code")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "auto"], help="today's paths to build with")
    ap.add_argument("--train", default=None, help="default: SemCor in the shared data")
    ap.add_argument("--tag", default=None)
    args = ap.parse_args(argv)
    train = Path(args.train) if args.train else (
        shared_data_dir() / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor")
    if not train.exists():
        raise SystemExit(f"--train {train} does not exist")

    rows, stores = [], {}
    with tempfile.TemporaryDirectory(prefix="store_build_") as tmp:
        tmp = Path(tmp)
        old = tmp / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.before],
                       check=True, capture_output=True)
        try:
            runs = [("before", old, "fp32")] + [("today", ROOT, p) for p in args.precisions]
            for label, checkout, precision in runs:
                name = f"{label}-{precision}"
                print(f"building {name} ...", flush=True)
                seconds = build(checkout, train, tmp / name, args.model, precision)
                store = SenseStore.load(tmp / name)
                stores[name] = store
                chose = (store.metadata.get("embedder") or {}).get("precision")
                rows.append({"code": label, "precision asked": precision, "path run": chose or precision,
                             "seconds": seconds, "senses": len(store)})
                print(f"  {seconds:.1f} s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
        reference = stores[f"before-{runs[0][2]}"]
        for row, name in zip(rows, stores):
            row.update(compare(reference, stores[name]))
    base = rows[0]["seconds"]
    for row in rows:
        row["speed-up"] = base / row["seconds"]

    m = harness.machine()
    md = "\n".join([
        f"# Building the SemCor sense store: {args.model}", "",
        f"{m['cpu']}, {m['cpu_count']} cores, torch {m['torch']}. `ctxemb wsd build {train.name}` with the library's "
        f"default store configuration, timed end to end (process start to exit: model load, corpus read, encoding, "
        f"averaging, save), one build at a time. 'before' = commit {args.before[:7]} (before issue 13's fast paths), "
        f"'today' = this checkout. Cosine: of each sense vector to the 'before' fp32 store's.", "",
        harness.markdown_table(rows, ["code", "precision asked", "path run", "seconds", "speed-up", "senses",
                                      "same_keys", "cosine_min", "cosine_mean"]), ""])
    harness.write_results(f"store_build_{args.model}" + (f"_{args.tag}" if args.tag else ""),
                          {"meta": {"before": args.before, "train": str(train)}, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
