"""Contrastive training benchmark: all-MiniLM-L6-v2 trained as a sentence embedder on this CPU.

Parts (each one run of ``ctxemb finetune``'s task through the run skeleton):

- ``xquad-inbatch``: question -> passage on the XQuAD-en training articles, in-batch negatives only;
- ``xquad-mined``: the same with hard negatives mined by the model before training;
- ``allnli``: SNLI (dev + test: the shared folder holds no SNLI train) as AllNLI with Matryoshka dimensions
  (384, 256, 128, 64, 32), all 6,339 rows, STS-B dev evaluated every 20 steps and the best evaluation kept (the
  task selects on STS-B dev, so its STS-B dev score is a selected one: the table also gives the last evaluation);
- ``allnli-b256``, ``allnli-b256-matryoshka``: the same rows in batches of 256 through the cached-gradient loss
  (GradCache, 64 rows a forward), without and with Matryoshka dimensions, STS-B dev every 5 steps;
  ``allnli-b256-lr5e-6``: ``allnli-b256`` at a quarter of its learning rate;
- ``allnli-interpolate``: ``allnli``, then the kept weights interpolated towards the untrained model's,
  ``start + alpha (trained - start)`` for alpha in 0.25, 0.5, 0.75 (WiSE-FT; ``TrainConfig.interpolate``), the best
  on STS-B dev saved (alpha 1, the trained weights, is a candidate too).

Reported on dev only (XQuAD dev articles: MRR@10 and Recall@1 of the dev questions against the dev passages; STS-B
dev Spearman, at full width and truncated to 64 dimensions), before and after training. The trained model
directories are copied to ``--models-dir`` (default ``/work/notes/models``) for the retrieval benchmark on the
held-out articles. Writes ``benchmarks/results/contrastive.{md,json}``.

    OMP_NUM_THREADS=2 python -m benchmarks.contrastive --parts xquad-inbatch xquad-mined allnli
    python -m benchmarks.contrastive --parts          # rewrite the report from the saved rows
    python -m benchmarks.contrastive --parts allnli --name contrastive_allnli    # a part in a second process
    python -m benchmarks.contrastive --parts --merge benchmarks/results/contrastive_allnli.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import torch

from benchmarks import harness
from ctxemb.tasks.contrastive.task import ContrastiveConfig
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.bi_encoder import EncoderForContrastive
from ctxemb.models.hub import resolve_model_dir
from ctxemb.training.config import TrainConfig

MODEL = "all-MiniLM-L6-v2"
WORK = Path("/tmp/ctxemb-contrastive-bench")
MATRYOSHKA = [384, 256, 128, 64, 32]
# part -> (task, recipe settings, loop settings)
PARTS = {
    "xquad-inbatch": ("xquad-retrieval", dict(epochs=1.0, batch_size=24, max_length=256, max_train_examples=288),
                      dict(learning_rate=5e-5)),
    "xquad-mined": ("xquad-retrieval", dict(epochs=1.0, batch_size=24, max_length=256, max_train_examples=288,
                                            mine_hard_negatives=1, mine_range=20), dict(learning_rate=5e-5)),
    "allnli": ("allnli", dict(epochs=1.0, batch_size=64, max_length=64, train_split="dev+test",
                              matryoshka_dims=MATRYOSHKA), dict(learning_rate=2e-5, eval_every=20)),
    # 256 rows a batch (255 in-batch negatives and 256 hard ones per anchor) through the cached-gradient loss
    "allnli-b256": ("allnli", dict(epochs=1.0, batch_size=256, cache_batch_size=64, max_length=64,
                                   train_split="dev+test"), dict(learning_rate=2e-5, eval_every=5)),
    "allnli-b256-matryoshka": ("allnli", dict(epochs=1.0, batch_size=256, cache_batch_size=64, max_length=64,
                                              train_split="dev+test", matryoshka_dims=MATRYOSHKA),
                               dict(learning_rate=2e-5, eval_every=5)),
    # the b256 run at a quarter of the learning rate: does a gentler step keep STS-B dev at the untrained score?
    "allnli-b256-lr5e-6": ("allnli", dict(epochs=1.0, batch_size=256, cache_batch_size=64, max_length=64,
                                          train_split="dev+test"), dict(learning_rate=5e-6, eval_every=5)),
    # the allnli run, then its best weights interpolated towards all-MiniLM-L6-v2's (WiSE-FT), alpha chosen on dev
    "allnli-interpolate": ("allnli", dict(epochs=1.0, batch_size=64, max_length=64, train_split="dev+test",
                                          matryoshka_dims=MATRYOSHKA),
                           dict(learning_rate=2e-5, eval_every=20, interpolate=[0.25, 0.5, 0.75])),
}


def _evaluate_base(task, config: ContrastiveConfig) -> dict[str, float]:
    """The dev metrics of the model before training (the task's own evaluator)."""
    data = task.read(ContrastiveConfig(**{**config.__dict__, "mine_hard_negatives": 0}))
    tokenizer = load_tokenizer(config.model)
    features, collate = task.encode(config, tokenizer, data.eval, data)
    model = EncoderForContrastive.from_pretrained(resolve_model_dir(config.model)).eval()
    return dict(task.evaluator(config, tokenizer, data, features, collate)(model))


def run_part(name: str, models_dir: Path) -> dict:
    task_name, recipe, loop = PARTS[name]
    out = WORK / name
    shutil.rmtree(out, ignore_errors=True)
    config = ContrastiveConfig(task=task_name, model=MODEL, **recipe, train=TrainConfig(
        out_dir=str(out), warmup_ratio=0.1, seed=0, progress_bar=False, keep_best=True, precision="fp32",
        log_every=5, **loop))
    task = get_task(task_name)
    sw = harness.Stopwatch()
    before = _evaluate_base(task, config)
    t_before = sw.stop()
    sw = harness.Stopwatch()
    done = run_task(task, config)
    seconds = sw.stop()
    target = models_dir / f"contrastive-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(done.model_dir, target)
    record = json.loads((done.model_dir / "run.json").read_text())
    row = {"part": name, "task": task_name, "settings": {**recipe, **loop}, "before": before,
           "after": done.final_metrics, "history": done.eval_history, "best_step": done.best_step,
           "steps": done.train.step, "train_examples": record["data"]["train_examples"],
           "mining": record.get("mining") or json.loads((done.model_dir / "finetune_config.json").read_text()).get(
               "mining"),
           "run_seconds": round(seconds, 1), "eval_before_seconds": round(t_before, 1),
           "train_seconds": round(record["training"]["train_seconds"], 1), "model_dir": str(target),
           "training_run": done.training_run, "load_average": round(os.getloadavg()[0], 1),
           "interpolation": done.interpolation}
    print(json.dumps({k: row[k] for k in ("part", "before", "after", "run_seconds")}, indent=1), flush=True)
    return row


def _f(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}f}"


def report(rows: dict) -> str:
    lines = ["# Contrastive training (all-MiniLM-L6-v2)", "",
             f"Machine: {harness.machine_line()}, torch {torch.__version__}, fp32, OMP threads 2. Each part gives "
             "the machine's 1-minute load average at its end (above 2 on 2 cores: other jobs shared them, so its time "
             "is not a speed figure; parts without one ran at a load of about 10).",
             "Each run: the task through `ctxemb finetune`'s run skeleton, evaluated on dev at the end of each epoch "
             "(and every `eval_every` steps where the settings give one), the best dev evaluation kept (MRR@10 for retrieval, STS-B Spearman for allnli). Numbers x 100, dev "
             "only; before = all-MiniLM-L6-v2 as downloaded, through the same evaluator.", ""]
    retrieval = [r for r in rows.values() if r["task"] == "xquad-retrieval"]
    if retrieval:
        r0 = retrieval[0]
        lines += ["## XQuAD-en question -> passage (dev: 126 questions against the 30 passages of 6 articles)", "",
                  f"Trained on the first {r0['train_examples']} questions (file order) of the 30 training articles "
                  "(713 questions in all; a full epoch did not fit the 15-minute budget on the loaded machine); the "
                  "12 held-out articles are untouched.", ""]
        table = [{"run": "zero-shot", "MRR@10": _f(r0["before"]["mrr@10"]), "R@1": _f(r0["before"]["recall@1"]),
                  "R@10": _f(r0["before"]["recall@10"]), "steps": "-", "run s": "-", "settings": "-"}]
        for r in retrieval:
            table.append({"run": r["part"], "MRR@10": _f(r["after"]["mrr@10"]), "R@1": _f(r["after"]["recall@1"]),
                          "R@10": _f(r["after"]["recall@10"]), "steps": r["steps"], "run s": _f(r["run_seconds"]),
                          "settings": json.dumps(r["settings"])})
        lines += [harness.markdown_table(table, list(table[0])), ""]
        for r in retrieval:
            if r.get("mining"):
                lines.append(f"Mining ({r['part']}, with the model before training): {json.dumps(r['mining'])}")
        lines += ["", "Model directories (for the held-out retrieval benchmark): "
                  + ", ".join(f"`{r['model_dir']}`" for r in retrieval), ""]
    allnli = [r for r in rows.values() if r["task"] == "allnli"]
    if allnli:
        lines += ["## SNLI as AllNLI -> STS-B dev", "",
                  f"Trained on {allnli[0]['train_examples']} AllNLI rows from SNLI dev + test (the shared data folder "
                  "holds no SNLI train), a contradiction of the same premise as the hard negative. Runs with "
                  "Matryoshka dimensions (384, 256, 128, 64, 32) are also evaluated truncated; '-' where a run has "
                  "no truncated evaluation.", ""]

        def cells(m: dict) -> dict:
            out = {f"Spearman ({d})": _f(m["spearman" if d == 384 else f"spearman_{d}"], 2)
                   if d == 384 or f"spearman_{d}" in m else "-" for d in (384, 128, 64, 32)}
            out["64 / full"] = f"{m['spearman_64'] / m['spearman']:.3f}" if "spearman_64" in m else "-"
            return out

        table = [{"model": "all-MiniLM-L6-v2", **cells(allnli[0]["before"])}]
        notes = []
        for r in allnli:
            chosen = r.get("interpolation")
            if chosen:
                for c in chosen["candidates"]:
                    table.append({"model": f"{r['part']}, alpha {c['alpha']:g}" + (" (chosen)" if c["alpha"] ==
                                  chosen["alpha"] else ""), **cells(c)})
                continue
            table.append({"model": f"{r['part']}, best evaluation", **cells(r["after"])})
            if r["history"] and r["history"][-1] != r["after"]:  # the best evaluation was not the last one
                table.append({"model": f"{r['part']}, last evaluation", **cells(r["history"][-1])})
            curve = ", ".join(_f(h["spearman"], 2) for h in r["history"])
            notes.append(f"- `{r['part']}`: steps {r['steps']} (best: step {r['best_step']}; Spearman per "
                         f"evaluation: {curve}), run {_f(r['run_seconds'])} s at load "
                         f"{r.get('load_average', 'about 10')}, settings {json.dumps(r['settings'])}; model "
                         f"`{r['model_dir']}`.")
        lines += [harness.markdown_table(table, list(table[0])), "", *notes, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="*", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("--models-dir", type=Path, default=Path("/work/notes/models"))
    parser.add_argument("--name", default="contrastive", help="results file name (benchmarks/results/NAME.*)")
    parser.add_argument("--merge", nargs="*", default=[], type=Path,
                        help="result JSON files of other runs of this script whose rows to add (parts run in "
                             "parallel processes write to their own --name)")
    args = parser.parse_args()
    saved = harness.RESULTS / f"{args.name}.json"
    rows = json.loads(saved.read_text())["runs"] if saved.is_file() else {}
    for other in args.merge:
        rows.update(json.loads(other.read_text())["runs"])
    args.models_dir.mkdir(parents=True, exist_ok=True)
    payload = {"torch": torch.__version__, "model": MODEL, "runs": rows}
    for part in args.parts:
        rows[part] = run_part(part, args.models_dir)
        harness.write_results(args.name, payload, report(rows))
    if not args.parts:
        harness.write_results(args.name, payload, report(rows))


if __name__ == "__main__":
    main()
