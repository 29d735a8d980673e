"""The shipped default recipes, run exactly as ``ctxemb finetune TASK --out-dir DIR`` runs them (no other flag: the
task's preset ``ctxemb/presets/finetune-TASK.toml``, the CLI's code path), on all-MiniLM-L6-v2.

Per task it records the recipe (the preset's settings as resolved), the dev score of the saved model (the best dev
epoch: every default recipe keeps it), our held-out split where we have one (XQuAD-en's 12 held-out articles, read
once after training; SST-2's ``alps_test.tsv`` = GLUE dev, which papers report), the issue's goal and the published
anchor, the resolved precision and the time on this CPU. Test splits that are held back (STS-B, CoNLL-2003
``eng.testb``, MRPC/RTE test) are never read here.

    python -m benchmarks.default_recipes --tasks stsb mrpc rte     # some tasks (each row lands as it ends)
    python -m benchmarks.default_recipes --tasks                   # rewrite the report from the saved rows
    python -m benchmarks.default_recipes --tasks --record sst2=runs/sst2   # a finished run of the same recipe

Besides the tasks' rows, a row per variant (:data:`VARIANTS`): a task's default recipe with one flag changed, as
``conll2003-ner-span`` (``ctxemb finetune conll2003-ner --head span``) for the issue's span-NER goal.

``--record TASK=DIR`` takes the row from a finished ``ctxemb finetune TASK --out-dir DIR`` run instead of training
again, after checking that the run's resolved settings (``DIR/model/run.json``: the task config and the loop's) equal
what ``ctxemb finetune TASK`` resolves today, but for where it wrote and whether it drew progress bars: a run made
with flags that the preset later adopted is the preset's run. The held-out split is read then, once.

Writes ``benchmarks/results/default_recipes.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from benchmarks import harness
from ctxemb.cli import build_parser
from ctxemb.cli._common import load_preset
from ctxemb.cli.finetune import finetune_config_from_args
from ctxemb.training.runner import run_task

TASKS = ["stsb", "mrpc", "rte", "sst2", "conll2003-ner", "conll2003-pos", "xquad"]
# Rows that run a task's default recipe with one form changed: row name -> (task, the flags added).
VARIANTS = {"conll2003-ner-span": ("conll2003-ner", ["--head", "span"])}
ROWS = TASKS[:5] + ["conll2003-ner-span"] + TASKS[5:]
# issue #25's dev goals (all-MiniLM-L6-v2, CLI defaults) and the published small-model anchors
GOALS = {"stsb": "Spearman >= 90", "mrpc": "F1 >= 88", "rte": "accuracy >= 62", "sst2": ">= 89.7 on GLUE dev",
         "conll2003-ner": "F1 >= 92", "conll2003-pos": "accuracy >= 93", "xquad": "held-out F1 >= 50",
         "conll2003-ner-span": "within 1 F1 of the best BIO head, every type above 70"}
ANCHORS = {"stsb": "BERT-Small 77.0 (test)", "mrpc": "MiniLM-L6-H384 88.9 (dev F1)",
           "rte": "MiniLM-L6-H384 68.8 (dev)", "sst2": "MiniLM-L6-H384 91.5 (GLUE dev)",
           "conll2003-ner": "BERT-base 95.1 dev / 92.4 test", "conll2003-pos": "-", "xquad": "-",
           "conll2003-ner-span": "BERT-base 95.1 dev / 92.4 test"}
WORK = Path("/tmp/ctxemb-default-recipes")
RESULTS = harness.RESULTS / "default_recipes.json"


def run(name: str, extra: list[str]) -> dict:
    task, flags = VARIANTS.get(name, (name, []))
    out = WORK / name
    shutil.rmtree(out, ignore_errors=True)
    args = build_parser("finetune").parse_args(["finetune", task, "--out-dir", str(out), "--no-progress", *flags,
                                                *extra])
    task_obj, config = finetune_config_from_args(args)
    sw = harness.Stopwatch()
    result = run_task(task_obj, config)
    seconds = sw.stop()
    record = json.loads((Path(result.model_dir) / "run.json").read_text())
    primary = record["metrics"]["primary_metric"]
    row = {"task": name, "recipe": _recipe(name), "dev " + primary: f"{result.final_metrics[primary]:.2f}",
           "dev per type": _per_type(result.final_metrics),
           "best step": record["metrics"].get("best_step"), "steps": result.train.step, "precision": record.get("precision", {}).get("resolved"),
           "padding": _percent(record.get("data", {}).get("padding_fraction")), "minutes": f"{seconds / 60:.1f}",
           "held-out": _held_out(task, Path(result.model_dir)), "goal": GOALS[name], "anchor": ANCHORS[name],
           "load": f"{os.getloadavg()[0]:.1f}"}
    if (Path(result.model_dir) / "modules.json").is_file():  # a sentence-level model: check it travels
        from benchmarks.finetune import _st_agreement
        row["least cosine to SentenceTransformer(dir)"] = _st_agreement(str(result.model_dir))
    return row


# Settings that say where and how a run reported, not what it trained.
_NOT_RECIPE = {"out_dir", "progress_bar", "resume", "report_to", "log_every", "keep_last_checkpoints", "device",
               "max_steps"}


def record(name: str, run_dir: Path, extra: list[str]) -> dict:
    """The row of a finished run in ``run_dir`` whose settings equal the row's recipe (module docstring)."""
    task, flags = VARIANTS.get(name, (name, []))
    model_dir = run_dir / "model"
    saved = json.loads((model_dir / "run.json").read_text())
    args = build_parser("finetune").parse_args(["finetune", task, "--out-dir", str(run_dir), "--no-progress", *flags,
                                                *extra])
    _, config = finetune_config_from_args(args)
    want = {k: v for k, v in json.loads(json.dumps(config.__dict__, default=lambda o: o.__dict__)).items()
            if k != "train"}
    want_train = {k: v for k, v in json.loads(json.dumps(config.train.__dict__)).items() if k not in _NOT_RECIPE}
    got = {k: v for k, v in saved["settings"].items() if k in want}
    got_train = {k: v for k, v in saved["train"].items() if k in want_train}
    if want_train.get("eval_every") == 0 and saved["train"].get("max_steps"):  # 0 = each epoch, saved resolved
        per_epoch = saved["train"]["max_steps"] / saved["settings"]["epochs"]
        if got_train.get("eval_every") == round(per_epoch):
            got_train["eval_every"] = 0
    diff = {k: (got.get(k), want[k]) for k in want if got.get(k) != want[k]}
    diff.update({f"train.{k}": (got_train.get(k), v) for k, v in want_train.items() if got_train.get(k) != v})
    if diff:
        raise SystemExit(f"{run_dir} is not a run of the {name} recipe: (its setting, the recipe's) {diff}")
    metrics = saved["metrics"]
    primary = metrics["primary_metric"]
    timing = saved.get("timing", {})
    seconds = timing["recorded_at"] - timing["started_at"] if {"recorded_at", "started_at"} <= set(timing) else None
    return {"task": name, "recipe": _recipe(name), "dev " + primary: f"{metrics['final'][primary]:.2f}",
            "dev per type": _per_type(metrics["final"]), "best step": metrics.get("best_step"),
            "precision": saved.get("precision", {}).get("resolved"),
            "padding": _percent(saved.get("data", {}).get("padding_fraction")),
            "minutes": "-" if seconds is None else f"{seconds / 60:.1f}",
            "held-out": _held_out(task, model_dir), "goal": GOALS[name], "anchor": ANCHORS[name],
            "load": "2 (queue, one run at a time)", "recorded from": str(run_dir)}


def _percent(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _recipe(name: str) -> str:
    """The preset's settings, a variant's flags in place of their values (``conll2003-ner-span``: head span)."""
    task, flags = VARIANTS.get(name, (name, []))
    preset = load_preset(task, "finetune")
    train = preset.pop("train", {})
    changed = {flag[2:].replace("-", "_"): value for flag, value in zip(flags[::2], flags[1::2])}
    settings = {**preset, **train, **changed}
    return ", ".join(f"{k} {v}" for k, v in settings.items())


def _per_type(metrics: dict) -> str:
    """Entity F1 per type (``f1_LOC`` ...), for the NER rows; empty for the others."""
    return ", ".join(f"{k[3:]} {v:.1f}" for k, v in sorted(metrics.items()) if k.startswith("f1_"))


def _held_out(task: str, model_dir: Path) -> str:
    """Our held-out split, read once after training: XQuAD-en's held-out articles; SST-2's GLUE dev."""
    if task == "xquad":
        from ctxemb.tasks.qa.squad import xquad_split
        from ctxemb.tasks.token.predict import QAPredictor
        from ctxemb.metrics.squad import squad_scores
        questions = xquad_split("heldout")
        answers = QAPredictor.from_pretrained(model_dir).answer([q.question for q in questions],
                                                                [q.context for q in questions])
        s = squad_scores({q.id: a.text for q, a in zip(questions, answers)},
                         {q.id: [t for t, _ in q.answers] for q in questions})
        return f"EM {s['exact_match']:.1f} / F1 {s['f1']:.1f} (12 articles, 351 questions)"
    if task == "sst2":
        from ctxemb.tasks.sequence.predict import SequencePredictor
        from ctxemb.tasks.sequence.data import load_task
        data = load_task("sst2", splits=["test"])
        test, names = data.splits["test"], data.label_names
        preds = SequencePredictor.from_pretrained(model_dir).predict([ex.text_a for ex in test])
        right = sum(p.label == names[ex.label] for p, ex in zip(preds, test))
        return f"GLUE dev accuracy {100 * right / len(test):.2f} ({right} / {len(test)})"
    return "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=ROWS, choices=ROWS, help="none: rewrite the report")
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed (default %(default)s)")
    parser.add_argument("--record", nargs="*", default=[], metavar="TASK=DIR",
                        help="take TASK's row from the finished run in DIR (its settings must equal the recipe's)")
    args = parser.parse_args()
    saved = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    rows = saved["rows"]
    for item in args.record:
        task, _, run_dir = item.partition("=")
        if task not in ROWS or not run_dir:
            parser.error(f"--record takes TASK=DIR with TASK among {ROWS}; got {item!r}")
        row = record(task, Path(run_dir), ["--seed", str(args.seed)])
        rows = [r for r in rows if r["task"] != task] + [row]
        report(rows)
    for task in args.tasks:
        row = run(task, ["--seed", str(args.seed)])
        rows = [r for r in rows if r["task"] != task] + [row]
        report(rows)  # after every task, so a cut-off run keeps what it measured
    if not args.tasks:
        report(rows)


def report(rows: list[dict]) -> None:
    order = {t: i for i, t in enumerate(ROWS)}
    rows = sorted(rows, key=lambda r: order[r["task"]])
    scores = sorted({k for r in rows for k in r if k.startswith("dev ") and k != "dev per type"})
    cols = ["task", "recipe"] + scores + ["dev per type"] + [
        "best step", "held-out", "goal", "anchor", "precision", "padding", "minutes", "load"]
    if any("least cosine to SentenceTransformer(dir)" in r for r in rows):
        cols.append("least cosine to SentenceTransformer(dir)")
    if any("recorded from" in r for r in rows):
        cols.append("recorded from")
    md = ["# Default recipes (`ctxemb finetune TASK`, no flags)", "",
          f"all-MiniLM-L6-v2 on {harness.machine_line()}; one seed each. Dev = the saved model (the best dev "
          "epoch). Held-out: XQuAD-en's 12 held-out articles; SST-2's GLUE dev (alps_test.tsv). Other test splits are "
          "held back. `minutes` is the wall time as the machine was; `load` is its 1-minute load average at the end (2 cores: "
          "above 2, other jobs shared them, so the time is not a speed figure).", "",
          harness.markdown_table([{c: r.get(c, "") for c in cols} for r in rows], cols)]
    harness.write_results("default_recipes", {"rows": rows}, "\n".join(md))


if __name__ == "__main__":
    main()
