"""Fine-tuning benchmark, all-MiniLM-L6-v2 on this CPU, each task within a stated budget.

Sequence level: SST-2, MRPC, RTE, SNLI and STS-B, transformers' Trainer beside us on SST-2, frozen vs full on RTE,
and the STS-B-fine-tuned encoder back in the Embedder (cosine similarity, no head). Token and span level:
CoNLL-2003 NER with a softmax per token, with a CRF and span-based (per type), transformers' Trainer +
AutoModelForTokenClassification beside the softmax run, CoNLL-2003 POS tagging, and XQuAD-en extractive QA on
held-out articles. Writes ``benchmarks/results/finetune.{md,json}``.

    python -m benchmarks.finetune                      # every part
    python -m benchmarks.finetune --parts sst2 mrpc    # some of them
    python -m benchmarks.finetune --parts              # rewrite the report from the saved rows

Protocol: tune on dev; SST-2's ``test`` split is GLUE's dev set (the split papers report), RTE is reported on dev
(GLUE withholds its test labels), SNLI is trained on its dev split and reported on test (only those are shared).

Each part runs through ``ctxemb finetune``'s code path with its own flags, so the task's default recipe (its shipped
preset: keep the best dev epoch, length-grouped batches) applies beneath them; ``--cli-flags "--preset none
--no-group-by-length"`` runs a part as it ran before the default recipes. The default recipes themselves, with no
flag, are measured by ``python -m benchmarks.default_recipes``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from benchmarks import harness
from ctxemb.tasks.sequence.data import load_task
from ctxemb.cli import build_parser
from ctxemb.cli.finetune import finetune_config_from_args
from ctxemb.training.runner import run_task as run_training_task
from ctxemb.tasks.sequence.features import model_inputs
from ctxemb.training.outputs import predict_outputs
from ctxemb.tasks.sequence.task import task_metrics
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.sequence_classification import (EncoderForPairSimilarity, EncoderForSequenceClassification)
from ctxemb.training.data import EvalBatches
from ctxemb.models.hub import resolve_model_dir

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


# --limit N / --max-steps N: smoke runs (every part, tiny budgets); empty = the full recipe
SMOKE: list[str] = []
# --cli-flags "...": more `ctxemb finetune` flags for every part, e.g. "--preset none --no-group-by-length" to rerun a
# part as it ran before the default recipes (no preset, plain random batches)
EXTRA: list[str] = []


def cli_run(task: str, out: Path, flags: list[str]):
    """Parse ``ctxemb finetune TASK --out-dir OUT FLAGS`` with the command line's parser and train it as the command
    does (:func:`ctxemb.training.runner.run_task`): the benchmark and the CLI share one code path. Returns the parsed
    config and the result."""
    argv = ["finetune", task, "--out-dir", str(out), "--no-progress", "--seed", "0", "--log-every", "50", *flags,
            *EXTRA, *SMOKE]
    args = build_parser("finetune").parse_args(argv)
    task_obj, config = finetune_config_from_args(args)
    return config, run_training_task(task_obj, config)


def _flags(task: str, *, regime="full", head="checkpoint", precision="fp32") -> list[str]:
    train_split, report, epochs, cap, lr = RECIPES[task]
    flags = ["--model", MODEL, "--head", head, "--regime", regime, "--epochs", str(epochs), "--batch-size", "32",
             "--max-length", "128", "--train-split", train_split, "--eval-split", report[0],
             "--learning-rate", str(lr if regime == "full" else 1e-3), "--warmup-ratio", "0.1",
             "--precision", precision]
    return flags + (["--max-train-examples", str(cap)] if cap else [])


def _evaluate(model_dir: Path, task: str, splits, head: str) -> dict[str, float]:
    data = load_task(task, splits=list(splits))
    tok = load_tokenizer(model_dir)
    model = (EncoderForPairSimilarity if head == "cosine" else EncoderForSequenceClassification).from_pretrained(
        model_dir)
    out = {}
    for split in splits:
        feats, collate = model_inputs(tok, data.splits[split], head=head, regression=data.label_names is None,
                                      max_length=128)
        batches = EvalBatches(feats, batch_size=128, collate=collate)
        labels = np.array([ex.label for ex in data.splits[split]])
        for name, value in task_metrics(data.metrics, labels, predict_outputs(model, batches)).items():
            out[f"{split} {name}"] = value
    return out


def run_task(task: str, rows: list, **kw) -> Path:
    out = WORK / f"{task}_{kw.get('regime', 'full')}{'_cosine' if kw.get('head') == 'cosine' else ''}"
    shutil.rmtree(out, ignore_errors=True)
    sw = harness.Stopwatch()
    config, result = cli_run(task, out, _flags(task, **kw))
    seconds = sw.stop()
    n = min(len(load_task(task, splits=[config.train_split]).splits[config.train_split]),
            config.max_train_examples or 10**9)
    regime = config.regime if config.head != "cosine" else f"{config.regime} (bi-encoder, cosine)"
    rows.append({"task": task, "regime": regime, "train": f"{config.train_split} ({n:,})",
                 "epochs": config.epochs, "steps": result.train.step, "seconds": seconds,
                 "examples/s": n * config.epochs / seconds,
                 "train examples/s": n * config.epochs / (seconds - result.eval_seconds),
                 **{k: round(v, 2) for k, v in _evaluate(result.model_dir, task, RECIPES[task][1],
                                                         config.head).items()},
                 "anchor": ANCHORS[task]})
    return result.model_dir


def _trainer_args(output_dir: Path, *, lr: float, epochs: float, seed: int, bf16: bool, group_by_length: bool,
                  torch_compile: bool = False):
    """The Trainer's arguments for our recipe (batch 32, 10% warm-up, weight decay 0.01, no checkpoints); ``bf16``
    (autocast on the CPU), length grouping (``train_sampling_strategy="group_by_length"`` in transformers 5, the
    ``group_by_length=True`` of 4.x) and ``torch_compile`` (the model compiled by ``torch.compile``, its default
    Inductor backend; compilation counts in ``train_runtime``) are the Trainer's own speed options."""
    import transformers

    return transformers.TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=32, learning_rate=lr, num_train_epochs=epochs,
        warmup_steps=0.1, weight_decay=0.01, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
        dataloader_num_workers=0, disable_tqdm=True, logging_steps=50, bf16=bf16, torch_compile=torch_compile,
        train_sampling_strategy="group_by_length" if group_by_length else "random")


def _trainer_regime(bf16: bool, group_by_length: bool, torch_compile: bool = False) -> str:
    options = [name for name, on in (("bf16", bf16), ("group_by_length", group_by_length),
                                     ("torch_compile", torch_compile)) if on]
    return "transformers Trainer" + (", " + " + ".join(options) if options else "")


def run_transformers_sst2(rows: list, *, seed: int = 0, bf16: bool = False, group_by_length: bool = False,
                          torch_compile: bool = False) -> dict:
    """transformers' Trainer + AutoModelForSequenceClassification on SST-2 with our recipe; appends and returns the
    row ('train examples/s' from the Trainer's own train_runtime)."""
    import transformers

    train_split, report, epochs, cap, lr = RECIPES["sst2"]
    data = load_task("sst2", splits=[train_split, *report])
    path = resolve_model_dir(MODEL)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=2)
    train = [dict(tok(ex.text_a, truncation=True, max_length=128), labels=ex.label) for ex in data.splits[train_split][:cap]]
    args = _trainer_args(WORK / "sst2_hf", lr=lr, epochs=epochs, seed=seed, bf16=bf16, group_by_length=group_by_length,
                         torch_compile=torch_compile)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                   data_collator=transformers.DataCollatorWithPadding(tok))
    sw = harness.Stopwatch()
    output = trainer.train()
    seconds = sw.stop()
    model.eval()
    row = {"task": "sst2", "regime": f"full ({_trainer_regime(bf16, group_by_length, torch_compile)})",
           "train": f"{train_split} ({len(train):,})", "epochs": epochs, "steps": trainer.state.global_step,
           "seconds": seconds, "examples/s": len(train) * epochs / seconds,
           "train examples/s": len(train) * epochs / output.metrics["train_runtime"],
           "train seconds": output.metrics["train_runtime"], "anchor": ANCHORS["sst2"]}
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
    return row


TOKEN_ANCHORS = {"conll2003-ner": "BERT-base test F1 92.4 (dev ~95)", "conll2003-pos": "-",
                 "xquad": "BERT-base SQuAD v1.1 EM 81.2 / F1 88.5 (87k training questions)"}
# part -> (task, head, epochs, learning rate, options)
TOKEN_RECIPES = {
    "ner-softmax": ("conll2003-ner", "softmax", 1.0, 5e-5, {}),
    "ner-crf": ("conll2003-ner", "crf", 1.0, 5e-5, {}),
    "ner-span": ("conll2003-ner", "span", 1.0, 5e-5, {"max_span_length": 8}),
    "pos": ("conll2003-pos", "softmax", 1.0, 5e-5, {}),
    "xquad": ("xquad", "qa", 3.0, 1e-4, {"max_length": 256, "doc_stride": 128, "batch_size": 16}),
}


def run_token_part(part: str, rows: list) -> None:
    task, head, epochs, lr, options = TOKEN_RECIPES[part]
    out = WORK / part
    shutil.rmtree(out, ignore_errors=True)
    options = {"batch_size": 32, "max_length": 128, **options}
    flags = ["--model", MODEL, "--head", head, "--epochs", str(epochs), "--learning-rate", str(lr),
             "--warmup-ratio", "0.1", "--precision", "fp32"]
    for k, v in options.items():
        flags += [f"--{k.replace('_', '-')}", str(v)]
    sw = harness.Stopwatch()
    config, result = cli_run(task, out, flags)
    seconds = sw.stop()
    n = result.train.step * config.batch_size  # features seen (QA: windows), the last batch of an epoch may be short
    row = {"task": task, "head": head, "epochs": epochs, "steps": result.train.step, "seconds": seconds,
           "train examples/s": n / (seconds - result.eval_seconds), "anchor": TOKEN_ANCHORS[task]}
    row.update({k: round(v, 2) for k, v in result.final_metrics.items()})
    rows.append(row)


def run_transformers_ner(rows: list, *, seed: int = 0, bf16: bool = False, group_by_length: bool = False,
                          torch_compile: bool = False) -> dict:
    """transformers' Trainer + AutoModelForTokenClassification, our softmax recipe: every subword takes its word's
    tag, 1 epoch, batch 32, lr 5e-5, 10% warm-up, weight decay 0.01; words decoded from their first subword and
    scored with our conlleval. Appends and returns the row."""
    import transformers

    from ctxemb.tasks.token.conll import NER_LABELS, load_conll2003
    from ctxemb.tasks.token.task import entity_metrics
    from ctxemb.models.hub import resolve_model_dir

    data = load_conll2003(splits=["train", "dev"])
    label2id = {name: i for i, name in enumerate(NER_LABELS)}
    path = resolve_model_dir(MODEL)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        str(path), num_labels=len(NER_LABELS), id2label=dict(enumerate(NER_LABELS)), label2id=label2id)

    def encode(sent):
        enc = tok(list(sent.words), is_split_into_words=True, truncation=True, max_length=128)
        enc["labels"] = [-100 if w is None else label2id[sent.ner[w]] for w in enc.word_ids()]
        return enc

    train = [encode(s) for s in data["train"]]
    args = _trainer_args(WORK / "ner_hf", lr=5e-5, epochs=1, seed=seed, bf16=bf16, group_by_length=group_by_length,
                         torch_compile=torch_compile)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                   data_collator=transformers.DataCollatorForTokenClassification(tok))
    sw = harness.Stopwatch()
    output = trainer.train()
    seconds = sw.stop()
    model.eval()
    gold, pred = [], []
    with torch.inference_mode():
        for i in range(0, len(data["dev"]), 64):
            sents = data["dev"][i:i + 64]
            enc = tok([list(s.words) for s in sents], is_split_into_words=True, truncation=True, max_length=128,
                      padding=True, return_tensors="pt")
            best = model(**enc).logits.argmax(-1)
            for b, s in enumerate(sents):
                firsts, seen = {}, set()
                for t_i, w in enumerate(enc.word_ids(b)):
                    if w is not None and w not in seen:
                        seen.add(w)
                        firsts[w] = int(best[b, t_i])
                gold.append(list(s.ner))
                pred.append([NER_LABELS[firsts[w]] if w in firsts else "O" for w in range(len(s.words))])
    row = {"task": "conll2003-ner", "head": f"softmax ({_trainer_regime(bf16, group_by_length, torch_compile)})",
           "epochs": 1.0,
           "steps": trainer.state.global_step, "seconds": seconds,
           "train examples/s": len(train) / output.metrics["train_runtime"],
           "train seconds": output.metrics["train_runtime"], "anchor": TOKEN_ANCHORS["conll2003-ner"]}
    row.update({k: round(v, 2) for k, v in entity_metrics(gold, pred).items()})
    rows.append(row)
    return row


def run_stsb_embedder(model_dir: Path, label: str, rows: list) -> None:
    """STS-B dev Spearman of the Embedder (cosine of mean-pooled vectors, no head) with the encoder of
    ``model_dir``; the original model's row first."""
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.evaluation.similarity import run_similarity_tasks

    todo = [] if any(r["encoder"].startswith("original") for r in rows) else [("original all-MiniLM-L6-v2", MODEL)]
    for name, path in todo + [(label, str(model_dir))]:
        emb = Embedder.from_pretrained(path, layers=[-1])
        res = run_similarity_tasks(emb, ["stsb"], sentence_poolings=["mean"], postprocess="none", layers="default",
                                   show_progress_bar=False)
        dev = [r for r in res if r.split == "dev" and r.metric == "spearman"]
        rows[:] = [r for r in rows if r["encoder"] != name]
        rows.append({"encoder": name, "STS-B dev Spearman (cosine, mean pooling, no head)": f"{dev[0].value:.2f}",
                     "least cosine to SentenceTransformer(dir)": _st_agreement(path)})


def _st_agreement(model_dir: str) -> str:
    """The least cosine between ctxemb's default sentence vectors of the saved directory and what
    sentence-transformers computes from it, over 500 STS-B dev sentences ("-" without sentence-transformers)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return "-"
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.evaluation.similarity.data.sentence_pairs import load_stsb

    pairs = load_stsb("dev")
    texts = [t for p in pairs[:250] for t in (p.sentence1, p.sentence2)]
    ours = Embedder.from_pretrained(resolve_model_dir(model_dir)).embed_sentences(texts, show_progress_bar=False)
    theirs = SentenceTransformer(str(resolve_model_dir(model_dir)), device="cpu").encode(texts, batch_size=64)
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    return f"{cos.min():.6f}"


SEQUENCE_PARTS = ["sst2", "sst2-transformers", "mrpc", "rte", "rte-frozen", "snli", "stsb", "stsb-cosine"]
TOKEN_PARTS = ["ner-softmax", "ner-transformers", "ner-crf", "ner-span", "pos", "xquad"]


def main() -> None:
    global WORK
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="*", default=SEQUENCE_PARTS + TOKEN_PARTS,
                        choices=SEQUENCE_PARTS + TOKEN_PARTS, help="none: rewrite the report from saved rows")
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke run: train on the first N examples (passed as --max-train-examples)")
    parser.add_argument("--max-steps", type=int, default=None, help="smoke run: stop after N optimizer steps")
    parser.add_argument("--work", default=None, help=f"working directory (default {WORK})")
    parser.add_argument("--cli-flags", default="", help="more `ctxemb finetune` flags for every part (one string)")
    args = parser.parse_args()
    EXTRA.extend(args.cli_flags.split())
    if args.work:
        WORK = Path(args.work)
    if args.limit:
        SMOKE.extend(["--max-train-examples", str(args.limit)])
    if args.max_steps:
        SMOKE.extend(["--max-steps", str(args.max_steps)])
    if SMOKE:  # a smoke run measures nothing worth keeping: print its rows, leave the committed results alone
        rows, embedder_rows, token_rows = [], [], []
        for part in args.parts:
            if part in TOKEN_RECIPES:
                run_token_part(part, token_rows)
            elif part in RECIPES:
                run_task(part, rows)
        print(json.dumps({"rows": rows, "token_rows": token_rows}, indent=1, default=str))
        return
    results_path = WORK / "rows.json"
    WORK.mkdir(parents=True, exist_ok=True)
    # parts run earlier: this machine's working rows, else the committed results (so one part run on a fresh machine
    # does not drop the other parts' rows from the report)
    committed = harness.RESULTS / "finetune.json"
    source = results_path if results_path.is_file() else committed if committed.is_file() else None
    saved = json.loads(source.read_text()) if source else {}
    rows, embedder_rows = saved.get("rows", []), saved.get("embedder_rows", [])
    token_rows = saved.get("token_rows", [])
    for part in args.parts:
        if part == "sst2-transformers":
            rows = [r for r in rows if not (r["task"] == "sst2" and "transformers" in r["regime"])]
            run_transformers_sst2(rows)
        elif part == "ner-transformers":
            token_rows = [r for r in token_rows if "transformers" not in r["head"]]
            run_transformers_ner(token_rows)
        elif part in TOKEN_RECIPES:
            task, head = TOKEN_RECIPES[part][:2]
            token_rows = [r for r in token_rows if not (r["task"] == task and r["head"] == head)]
            run_token_part(part, token_rows)
        elif part == "stsb-cosine":
            rows = [r for r in rows if not (r["task"] == "stsb" and "cosine" in r["regime"])]
            model_dir = run_task("stsb", rows, head="cosine")
            run_stsb_embedder(model_dir, "fine-tuned on STS-B train (bi-encoder, cosine)", embedder_rows)
        elif part.endswith("-frozen"):
            task = part.split("-")[0]
            rows = [r for r in rows if not (r["task"] == task and r["regime"] == "frozen")]
            run_task(task, rows, regime="frozen")
        else:
            rows = [r for r in rows if not (r["task"] == part and r["regime"] == "full")]
            model_dir = run_task(part, rows)
            if part == "stsb":
                run_stsb_embedder(model_dir, "fine-tuned on STS-B train (cross-encoder, regression head)",
                                  embedder_rows)
        results_path.write_text(json.dumps({"rows": rows, "embedder_rows": embedder_rows, "token_rows": token_rows}))
        report(rows, embedder_rows, token_rows)  # after every part, so a cut-off run keeps what it measured
    if not args.parts:
        report(rows, embedder_rows, token_rows)


def report(rows: list, embedder_rows: list, token_rows: list) -> None:
    cols = ["task", "regime", "train", "epochs", "steps", "seconds", "examples/s", "train examples/s"]
    metric_cols = sorted({k for r in rows for k in r if k.startswith(("dev ", "test "))})
    shown = [{k: (f"{v:.1f}" if k in metric_cols or k in ("seconds", "examples/s", "train examples/s") else v)
              for k, v in r.items()} for r in rows]
    for r, row in zip(rows, shown):  # timed while other jobs shared the cores: the metrics stand, the times do not
        if r.get("shared_cpu"):
            row["seconds"] = f"{row['seconds']} *"
    shared_note = ("\n\n\\* ran while other jobs shared the two cores: its times are not speed measurements "
                   "(its metrics are unaffected)." if any(r.get("shared_cpu") for r in rows) else "")
    md = (f"# Fine-tuning all-MiniLM-L6-v2\n\nCPU: {harness.machine_line()}, fp32.\n\n## Sequence level\n\n"
          f"Batch 32, max length 128, "
          f"AdamW (wd 0.01), 10% warm-up then linear decay, lr 5e-5 (frozen: 1e-3, head only), the checkpoint's "
          f"head (BERT pooler + classifier). Budgets: SST-2 1 epoch over the first 10,000 training sentences; MRPC, "
          f"RTE 3 epochs; SNLI 2 epochs on its dev split (only dev and test are shared), reported on test; STS-B 2 "
          f"epochs, MSE regression. SST-2 'test' = GLUE's dev set (what papers report); its 'dev' is the ALPS "
          f"split of GLUE train used for tuning. Metrics x 100. 'examples/s' is end to end (tokenizing, training, "
          f"evaluating each epoch, saving); 'train examples/s' leaves out the evaluations (the Trainer run has "
          f"none).\n\n"
          + harness.markdown_table(shown, cols + metric_cols + ["anchor"]) + shared_note
          + ("\n\n### The fine-tuned encoder in the Embedder\n\n"
             + harness.markdown_table(embedder_rows, list(embedder_rows[0])) if embedder_rows else ""))
    if token_rows:
        keys = ["f1", "precision", "recall", "f1_LOC", "f1_MISC", "f1_ORG", "f1_PER", "null_threshold",
                "calibrated_f1", "accuracy", "exact_match"]
        tcols = ["task", "head", "epochs", "steps", "seconds", "train examples/s"] + \
            [k for k in keys if any(k in r for r in token_rows)] + ["anchor"]
        shown = [{k: (f"{v:.1f}" if isinstance(v, float) and k not in ("epochs", "null_threshold") else v)
                  for k, v in r.items()} for r in token_rows]
        md += ("\n\n## Token and span level\n\nAdamW (wd 0.01), 10% warm-up then linear decay, batch 32, max "
               "length 128 (longer sentences split at word boundaries), lr 5e-5. CoNLL-2003: 1 epoch over the 14,041 "
               "training sentences, scored on dev (eng.testa; the test split is held back) with conlleval's "
               "entity-level P/R/F1; every subword takes its word's tag, words are decoded from their first "
               "subword; CRF transitions at 100x the learning rate; span head (at 10x the learning rate, since 2026-11-25): spans up to 8 words, [z_i; z_j; mean] "
               "representation, flat decoding, NULL threshold calibrated on dev for F1 ('f1' is at threshold 0.5, "
               "'calibrated_f1' at the calibrated one, which is tuned on the split it is scored on). POS: the same "
               "files' POS column, token accuracy. XQuAD-en: 3/4 of the 48 articles for training (839 questions), "
               "the held-out 12 articles (351 questions) for EM/F1 (official SQuAD v1.1 definitions), 3 epochs, "
               "lr 1e-4, batch 16, windows of 256 tokens with stride 128. 'train examples/s' counts model inputs "
               "(QA windows) and leaves out the evaluations.\n\n" + harness.markdown_table(shown, tcols))
    harness.write_results("finetune", {"rows": rows, "embedder_rows": embedder_rows, "token_rows": token_rows}, md)
    print(md)


if __name__ == "__main__":
    main()
