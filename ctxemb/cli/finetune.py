"""``ctxemb finetune TASK`` and ``ctxemb predict DIR``: sequence-level fine-tuning and its predictions.

    ctxemb finetune sst2 --model all-MiniLM-L6-v2 --out runs/sst2 --epochs 1
    ctxemb finetune custom --train-file my_train.tsv --dev-file my_dev.tsv --text-a review --label stars --out runs/mine
    ctxemb predict runs/sst2/model "A gripping, funny film." "Dull and far too long."
    ctxemb predict runs/rte/model "A man is sleeping." --pair "Nobody sleeps."
"""

from __future__ import annotations

import argparse
import json

from ctxemb.cli._common import UsageError, fraction, non_negative_float, positive_int
from ctxemb.finetuning.predict import SequencePredictor
from ctxemb.finetuning.readers import TASKS
from ctxemb.finetuning.tasks import HEADS, REGIMES, FinetuneConfig, run_finetuning
from ctxemb.registry import DEFAULT_MODEL
from ctxemb.training.loop import TrainConfig


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("finetune", help="fine-tune an encoder for sentence or pair classification/regression",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=TASKS + ("custom",), help="a shared task, or 'custom' with --train-file/--dev-file")
    p.add_argument("--model", default=DEFAULT_MODEL, help="the encoder to start from (default %(default)s)")
    p.add_argument("--out", required=True, help="run directory: checkpoints, metrics.jsonl, and model/")
    p.add_argument("--head", choices=HEADS, default="checkpoint",
                   help="checkpoint (pooler / dense+tanh, what transformers computes), cls (W_C on the raw [CLS]), "
                        "mean (mean pooling); default %(default)s")
    p.add_argument("--regime", choices=REGIMES, default="full", help="default %(default)s")
    p.add_argument("--last-k", type=positive_int, default=2, help="layers trained with --regime last_k")
    p.add_argument("--layerwise-lr-decay", type=fraction, default=None, help="e.g. 0.8 (default: off)")
    p.add_argument("--epochs", type=non_negative_float, default=3.0)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--max-length", type=positive_int, default=128)
    p.add_argument("--learning-rate", type=non_negative_float, default=2e-5)
    p.add_argument("--warmup-ratio", type=fraction, default=0.1)
    p.add_argument("--max-train-examples", type=positive_int, default=None)
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--save-every", type=positive_int, default=None, help="checkpoint every N steps")
    p.add_argument("--no-progress", action="store_true")
    c = p.add_argument_group("a custom task (TSV or JSONL with named columns)")
    c.add_argument("--train-file")
    c.add_argument("--dev-file")
    c.add_argument("--text-a", default="sentence")
    c.add_argument("--text-b", default=None)
    c.add_argument("--label", default="label")
    c.add_argument("--label-names", nargs="+", default=None)
    c.add_argument("--regression", action="store_true")
    p.set_defaults(func=run_finetune)

    q = subparsers.add_parser("predict", help="labels or scores of a fine-tuned model for texts or pairs")
    q.add_argument("model_dir", help="a model directory written by `ctxemb finetune` (<out>/model)")
    q.add_argument("text", nargs="+", help="texts (the first sentence of each pair)")
    q.add_argument("--pair", nargs="+", default=None, help="second sentences, one per text")
    q.add_argument("--json", action="store_true", help="one JSON object per text")
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_predict)
    return p


def run_finetune(args: argparse.Namespace) -> int:
    train = TrainConfig(learning_rate=args.learning_rate, max_steps=1, warmup_ratio=args.warmup_ratio,
                        precision=args.precision, seed=args.seed, out_dir=args.out, resume=args.resume,
                        save_every=args.save_every or 0, progress_bar=not args.no_progress)
    config = FinetuneConfig(
        task=args.task, model=args.model, head=args.head, regime=args.regime, last_k=args.last_k,
        layerwise_lr_decay=args.layerwise_lr_decay or 1.0, epochs=args.epochs, batch_size=args.batch_size,
        max_length=args.max_length, max_train_examples=args.max_train_examples, train_file=args.train_file,
        dev_file=args.dev_file, text_a=args.text_a, text_b=args.text_b, label=args.label,
        label_names=args.label_names, regression=args.regression, train=train)
    result = run_finetuning(config)
    print(f"dev after {result.train.step} steps: " + ", ".join(f"{k} {v:.2f}" for k, v in result.final_metrics.items()))
    print(f"model: {result.model_dir}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    if args.pair is not None and len(args.pair) != len(args.text):
        raise UsageError(f"--pair needs one second sentence per text: {len(args.text)} texts, {len(args.pair)} pairs")
    predictor = SequencePredictor.from_pretrained(args.model_dir, device=args.device)
    for text, p in zip(args.text, predictor.predict(args.text, args.pair)):
        if args.json:
            print(json.dumps({"text": text, "label": p.label, "score": p.score, "probabilities": p.probabilities},
                             ensure_ascii=False))
        else:
            print(f"{p.label if p.label is not None else '':>14}  {p.score:.4f}  {text}")
    return 0
