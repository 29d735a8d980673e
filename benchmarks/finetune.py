"""Sequence-level fine-tuning benchmark: all-MiniLM-L6-v2 on SST-2, MRPC, RTE, SNLI and STS-B on this CPU, each
within a stated budget, beside transformers' Trainer on SST-2, frozen vs full on RTE, and the STS-B-fine-tuned
encoder back in the Embedder (cosine similarity, no head). Writes ``benchmarks/results/finetune.{md,json}``.

    python benchmarks/finetune.py                      # every part
    python benchmarks/finetune.py --parts sst2 mrpc    # some of them

Protocol: tune on dev; SST-2's ``test`` split is GLUE's dev set (the split papers report), RTE is reported on dev
(GLUE withholds its test labels), SNLI is trained on its dev split and reported on test (only those are shared).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import markdown_table, write_results  # noqa: E402
from benchmarks.pretrain import cpu_name  # noqa: E402
from ctxemb.finetuning.features import Collator, encode_examples  # noqa: E402
from ctxemb.finetuning.readers import load_task  # noqa: E402
from ctxemb.finetuning.tasks import FinetuneConfig, predict_outputs, run_finetuning, task_metrics  # noqa: E402
from ctxemb.loading import load_tokenizer  # noqa: E402
from ctxemb.modeling.task_heads import EncoderForSequenceClassification  # noqa: E402
from ctxemb.training.data import EvalBatches  # noqa: E402
from ctxemb.training.loop import TrainConfig  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
WORK = Path("/tmp/ctxemb-finetune-bench")
ANCHORS = {"sst2": "BERT-Small 89.7 (GLUE test); MiniLM-L6-H384 91.5 (GLUE dev)",
           "mrpc": "BERT-Small F1 83.4 (test); MiniLM-L6-H384 88.9 (dev)",
           "rte": "BERT-Small 61.8 (test); MiniLM-L6-H384 68.8 (dev)",
           "stsb": "BERT-Small Spearman 77.0 (test)", "snli": "-"}
# task -> (train split, report splits, epochs, max train examples, learning rate)
RECIPES = {
    "sst2": ("train", ("dev", "test"), 1.0, 10000, 5e-5),
    "mrpc": ("train", ("dev", "test"), 3.0, None, 5e-5),
    "rte": ("train", ("dev",), 3.0, None, 5e-5),
    "snli": ("dev", ("test",), 2.0, None, 5e-5),
    "stsb": ("train", ("dev",), 2.0, None, 5e-5),
}


def _config(task: str, out: Path, *, regime="full", head="checkpoint", precision="fp32") -> FinetuneConfig:
    train_split, report, epochs, cap, lr = RECIPES[task]
    return FinetuneConfig(task=task, model=MODEL, head=head, regime=regime, epochs=epochs, batch_size=32,
                          max_length=128, train_split=train_split, eval_split=report[0], max_train_examples=cap,
                          train=TrainConfig(learning_rate=lr if regime == "full" else 1e-3, max_steps=1,
                                            warmup_ratio=0.1, out_dir=str(out), progress_bar=False, seed=0,
                                            precision=precision, log_every=50))


def _evaluate(model_dir: Path, task: str, splits) -> dict[str, float]:
    data = load_task(task, splits=list(splits))
    tok = load_tokenizer(model_dir)
    model = EncoderForSequenceClassification.from_pretrained(model_dir)
    out = {}
    for split in splits:
        feats = encode_examples(tok, data.splits[split], max_length=128)
        batches = EvalBatches(feats, batch_size=128, collate=Collator(tok.pad_token_id, regression=data.label_names is None))
        labels = np.array([ex.label for ex in data.splits[split]])
        for name, value in task_metrics(data.metrics, labels, predict_outputs(model, batches)).items():
            out[f"{split} {name}"] = value
    return out


def run_task(task: str, rows: list, **kw) -> Path:
    out = WORK / f"{task}_{kw.get('regime', 'full')}"
    shutil.rmtree(out, ignore_errors=True)
    config = _config(task, out, **kw)
    t = time.perf_counter()
    result = run_finetuning(config)
    seconds = time.perf_counter() - t
    n = min(len(load_task(task, splits=[config.train_split]).splits[config.train_split]),
            config.max_train_examples or 10**9)
    rows.append({"task": task, "regime": config.regime, "train": f"{config.train_split} ({n:,})",
                 "epochs": config.epochs, "steps": result.train.step, "seconds": seconds,
                 "examples/s": n * config.epochs / seconds,
                 **{k: round(v, 2) for k, v in _evaluate(result.model_dir, task, RECIPES[task][1]).items()},
                 "anchor": ANCHORS[task]})
    return result.model_dir


def run_transformers_sst2(rows: list) -> None:
    import transformers

    from ctxemb.registry import resolve_model_dir

    train_split, report, epochs, cap, lr = RECIPES["sst2"]
    data = load_task("sst2", splits=[train_split, *report])
    path = resolve_model_dir(MODEL)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=2)
    train = [dict(tok(ex.text_a, truncation=True, max_length=128), labels=ex.label) for ex in data.splits[train_split][:cap]]
    args = transformers.TrainingArguments(
        output_dir=str(WORK / "sst2_hf"), per_device_train_batch_size=32, learning_rate=lr, num_train_epochs=epochs,
        warmup_steps=0.1, weight_decay=0.01, save_strategy="no", report_to=[], use_cpu=True, seed=0,
        dataloader_num_workers=0, disable_tqdm=True, logging_steps=50)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                   data_collator=transformers.DataCollatorWithPadding(tok))
    t = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t
    model.eval()
    row = {"task": "sst2", "regime": "full (transformers Trainer)", "train": f"{train_split} ({len(train):,})",
           "epochs": epochs, "steps": trainer.state.global_step, "seconds": seconds,
           "examples/s": len(train) * epochs / seconds, "anchor": ANCHORS["sst2"]}
    for split in report:
        preds = []
        with torch.inference_mode():
            for i in range(0, len(data.splits[split]), 128):
                enc = tok([ex.text_a for ex in data.splits[split][i:i + 128]], truncation=True, max_length=128,
                          padding=True, return_tensors="pt")
                preds.append(model(**enc).logits.argmax(-1))
        labels = np.array([ex.label for ex in data.splits[split]])
        row[f"{split} accuracy"] = round(100 * float((torch.cat(preds).numpy() == labels).mean()), 2)
    rows.append(row)


def run_stsb_embedder(model_dir: Path, rows: list) -> None:
    from ctxemb.embedding import Embedder
    from ctxemb.evaluation.similarity import run_similarity_tasks

    for label, name in (("original all-MiniLM-L6-v2", MODEL), ("fine-tuned on STS-B train", str(model_dir))):
        emb = Embedder.from_pretrained(name, layers=[-1])
        res = run_similarity_tasks(emb, ["stsb"], sentence_poolings=["mean"], postprocess="none", layers="default",
                                   show_progress_bar=False)
        dev = [r for r in res if r.split == "dev" and r.metric == "spearman"]
        rows.append({"encoder": label, "STS-B dev Spearman (cosine, mean pooling, no head)": f"{dev[0].value:.2f}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="*", default=["sst2", "sst2-transformers", "mrpc", "rte", "rte-frozen",
                                                       "snli", "stsb"], help="none: rewrite the report from saved rows")
    args = parser.parse_args()
    rows, embedder_rows = [], []
    results_path = WORK / "rows.json"
    WORK.mkdir(parents=True, exist_ok=True)
    if results_path.is_file():  # parts run earlier keep their rows
        saved = json.loads(results_path.read_text())
        rows, embedder_rows = saved["rows"], saved["embedder_rows"]
    for part in args.parts:
        if part == "sst2-transformers":
            rows = [r for r in rows if not (r["task"] == "sst2" and "transformers" in r["regime"])]
            run_transformers_sst2(rows)
        elif part.endswith("-frozen"):
            task = part.split("-")[0]
            rows = [r for r in rows if not (r["task"] == task and r["regime"] == "frozen")]
            run_task(task, rows, regime="frozen")
        else:
            rows = [r for r in rows if not (r["task"] == part and r["regime"] == "full")]
            model_dir = run_task(part, rows)
            if part == "stsb":
                embedder_rows = []
                run_stsb_embedder(model_dir, embedder_rows)
        results_path.write_text(json.dumps({"rows": rows, "embedder_rows": embedder_rows}))
        report(rows, embedder_rows)  # after every part, so a cut-off run keeps what it measured
    if not args.parts:
        report(rows, embedder_rows)


def report(rows: list, embedder_rows: list) -> None:
    cols = ["task", "regime", "train", "epochs", "steps", "seconds", "examples/s"]
    metric_cols = sorted({k for r in rows for k in r if k.startswith(("dev ", "test "))})
    shown = [{k: (f"{v:.1f}" if k in metric_cols or k == "seconds" else v) for k, v in r.items()} for r in rows]
    md = (f"# Fine-tuning all-MiniLM-L6-v2 (sequence level)\n\nCPU: {cpu_name()}, fp32. Batch 32, max length 128, "
          f"AdamW (wd 0.01), 10% warm-up then linear decay, lr 5e-5 (frozen: 1e-3, head only), the checkpoint's "
          f"head (BERT pooler + classifier). Budgets: SST-2 1 epoch over the first 10,000 training sentences; MRPC, "
          f"RTE 3 epochs; SNLI 2 epochs on its dev split (only dev and test are shared), reported on test; STS-B 2 "
          f"epochs, MSE regression. SST-2 'test' = GLUE's dev set (what papers report); its 'dev' is the ALPS "
          f"split of GLUE train used for tuning. Metrics x 100.\n\n"
          + markdown_table(shown, cols + metric_cols + ["anchor"])
          + ("\n\n## The fine-tuned encoder in the Embedder\n\n"
             + markdown_table(embedder_rows, list(embedder_rows[0])) if embedder_rows else ""))
    write_results("finetune", {"cpu": cpu_name(), "rows": rows, "embedder_rows": embedder_rows}, md)
    print(md)


if __name__ == "__main__":
    main()
