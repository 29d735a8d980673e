"""``ctxemb finetune TASK`` and ``ctxemb predict DIR``: fine-tuning (sequence, token and span level) and predictions.

    ctxemb finetune sst2 --model all-MiniLM-L6-v2 --out runs/sst2 --epochs 1
    ctxemb finetune custom --train-file my_train.tsv --dev-file my_dev.tsv --text-a review --label stars --out runs/mine
    ctxemb finetune conll2003-ner --head crf --out runs/ner
    ctxemb finetune xquad --out runs/qa
    ctxemb predict runs/sst2/model "A gripping, funny film." "Dull and far too long."
    ctxemb predict runs/rte/model "A man is sleeping." --pair "Nobody sleeps."
    ctxemb predict runs/ner/model "Jane Villanueva of United Airlines Holding discussed it."
    ctxemb predict runs/ner/model --conll eng.testa --out predicted.conll
    ctxemb predict runs/qa/model "The Panthers defense gave up just 308 points." --question "How many points?"
"""

from __future__ import annotations

import argparse
import json

from pathlib import Path

from ctxemb.cli._common import UsageError, command_help, fraction, non_negative_float, positive_int
from ctxemb.finetuning.readers import TASKS
from ctxemb.finetuning.tagging import LABEL_SUBWORDS
from ctxemb.finetuning.tasks import HEADS, REGIMES, FinetuneConfig, run_finetuning
from ctxemb.finetuning.token_tasks import (TASK_HEADS, TOKEN_HEADS, TOKEN_TASKS, TokenFinetuneConfig,
                                           load_finetune_config, run_token_finetuning)
from ctxemb.modeling.token_heads import BOUNDARY_KINDS, SUMMARY_KINDS, WORD_DECODINGS
from ctxemb.registry import DEFAULT_MODEL, resolve_model_dir
from ctxemb.training.loop import TrainConfig


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("finetune", help=command_help("finetune"),
                              description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=TASKS + ("custom",) + TOKEN_TASKS,
                   help="a shared task, 'custom' (TSV/JSONL), 'conll-file' or 'squad-file' with --train-file/--dev-file")
    p.add_argument("--model", default=DEFAULT_MODEL, help="the encoder to start from (default %(default)s)")
    p.add_argument("--out", required=True, help="run directory: checkpoints, metrics.jsonl, and model/")
    p.add_argument("--head", choices=HEADS + TOKEN_HEADS, default=None,
                   help="sentence tasks: checkpoint (pooler / dense+tanh, what transformers computes; the default), "
                        "cls (W_C on the raw [CLS]), mean (mean pooling), cosine (a bi-encoder for scored pairs, "
                        "whose encoder then serves the Embedder); CoNLL: softmax (default), crf, span; QA: qa")
    p.add_argument("--regime", choices=REGIMES, default="full", help="default %(default)s")
    p.add_argument("--last-k", type=positive_int, default=2, help="layers trained with --regime last_k")
    p.add_argument("--layerwise-lr-decay", type=fraction, default=None, help="e.g. 0.8 (default: off)")
    p.add_argument("--epochs", type=non_negative_float, default=3.0)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="tokens per model input (default: 384 for QA, as SQuAD recipes; 128 otherwise)")
    p.add_argument("--learning-rate", type=non_negative_float, default=None,
                   help="default 2e-5 for sentence tasks, 5e-5 for token and span tasks")
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
    t = p.add_argument_group("token and span tasks")
    t.add_argument("--label-subwords", choices=LABEL_SUBWORDS, default="all",
                   help="which subwords take a word's tag in training (default %(default)s, as J&M)")
    t.add_argument("--decoding", choices=WORD_DECODINGS, default="first",
                   help="a word's tag from its first subword or the mean of its subwords' distributions")
    t.add_argument("--max-span-length", type=positive_int, default=8, help="longest span in words (span head)")
    t.add_argument("--span-boundary", choices=BOUNDARY_KINDS, default="tokens")
    t.add_argument("--span-summary", choices=SUMMARY_KINDS, default="mean")
    t.add_argument("--target-precision", type=non_negative_float, default=None,
                   help="calibrate the span head's NULL threshold for this precision (percent) instead of best F1")
    t.add_argument("--doc-stride", type=positive_int, default=None,
                   help="QA: step between window starts, in tokens (default 128, less if --max-length leaves "
                        "fewer context tokens per window)")
    t.add_argument("--max-query-length", type=positive_int, default=64)
    t.add_argument("--max-answer-length", type=positive_int, default=30)
    p.set_defaults(func=run_finetune)

    q = subparsers.add_parser("predict", help=command_help("predict"))
    q.add_argument("model_dir", help="a model directory written by `ctxemb finetune` (<out>/model)")
    q.add_argument("text", nargs="*", help="texts (the first sentence of each pair; QA: the passages)")
    q.add_argument("--pair", nargs="+", default=None, help="second sentences, one per text")
    q.add_argument("--question", nargs="+", default=None, help="QA: one question per passage")
    q.add_argument("--conll", default=None,
                   help="taggers: a CoNLL file whose words to tag (`ctxemb predict DIR FILE` does the same)")
    q.add_argument("--out", default=None,
                   help="where the tagged CoNLL file goes (word, gold, predicted); default: stdout")
    q.add_argument("--json", action="store_true", help="one JSON object per text")
    q.add_argument("--device", default="cpu")
    q.set_defaults(func=run_predict)
    return p


def run_finetune(args: argparse.Namespace) -> int:
    token_task = args.task in TOKEN_TASKS
    lr = args.learning_rate or (5e-5 if token_task else 2e-5)
    train = TrainConfig(learning_rate=lr, max_steps=1, warmup_ratio=args.warmup_ratio,
                        precision=args.precision, seed=args.seed, out_dir=args.out, resume=args.resume,
                        save_every=args.save_every or 0, progress_bar=not args.no_progress)
    common = dict(task=args.task, model=args.model, regime=args.regime, last_k=args.last_k,
                  layerwise_lr_decay=args.layerwise_lr_decay or 1.0, epochs=args.epochs, batch_size=args.batch_size,
                  max_train_examples=args.max_train_examples,
                  train_file=args.train_file, dev_file=args.dev_file, train=train)
    if args.max_length is not None:  # else each config's default (QA's differs from the others')
        common["max_length"] = args.max_length
    if token_task:
        if args.head is not None and args.head not in TASK_HEADS[args.task]:
            raise UsageError(f"--head {args.head} does not fit {args.task}: it takes one of {TASK_HEADS[args.task]}")
        config = TokenFinetuneConfig(
            head=args.head, label_subwords=args.label_subwords, decoding=args.decoding,
            max_span_length=args.max_span_length, span_boundary=args.span_boundary, span_summary=args.span_summary,
            target_precision=args.target_precision, doc_stride=args.doc_stride,
            max_query_length=args.max_query_length, max_answer_length=args.max_answer_length, **common)
        result = run_token_finetuning(config)
    else:
        if args.head is not None and args.head not in HEADS:
            raise UsageError(f"--head {args.head} is for token and span tasks; {args.task} takes one of {HEADS}")
        config = FinetuneConfig(head=args.head or "checkpoint", text_a=args.text_a, text_b=args.text_b,
                                label=args.label, label_names=args.label_names, regression=args.regression, **common)
        result = run_finetuning(config)
    print(f"eval after {result.train.step} steps: "
          + ", ".join(f"{k} {v:.2f}" for k, v in result.final_metrics.items()))
    print(f"model: {result.model_dir}")
    return 0


def _model_kind(model_dir: str) -> str:
    """"sequence", "token" (taggers and span classifiers) or "qa", from the run's config or the architecture."""
    path = Path(resolve_model_dir(model_dir))
    saved = load_finetune_config(path) or {}
    if saved.get("head") == "qa":
        return "qa"
    if saved.get("kind") == "token":
        return "token"
    archs = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or [""]
    if archs[0].endswith("ForQuestionAnswering"):
        return "qa"
    return "token" if archs[0].endswith("ForTokenClassification") else "sequence"


def run_predict(args: argparse.Namespace) -> int:
    kind = _model_kind(args.model_dir)
    if kind == "token" and args.conll is None and len(args.text) == 1 and Path(args.text[0]).is_file():
        args.conll = args.text[0]  # `ctxemb predict DIR FILE`: a CoNLL file to tag
    if args.conll is not None and kind != "token":
        raise UsageError(f"--conll is for taggers; {args.model_dir} is a {kind} model")
    if args.out is not None and args.conll is None:
        raise UsageError("--out is where a tagged CoNLL file goes: give the file to tag (--conll FILE)")
    if args.conll is None and not args.text:
        raise UsageError("give texts to predict for (or --conll FILE --out FILE for a tagger)")
    if args.question is not None and kind != "qa":
        raise UsageError(f"--question is for QA models; {args.model_dir} is a {kind} model")
    if kind == "qa":
        return _predict_qa(args)
    if kind == "token":
        return _predict_tokens(args)
    return _predict_sequence(args)


def _predict_sequence(args: argparse.Namespace) -> int:
    from ctxemb.finetuning.predict import SequencePredictor

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


def _predict_tokens(args: argparse.Namespace) -> int:
    from ctxemb.finetuning.conll import read_conll, write_conll
    from ctxemb.finetuning.token_predict import TokenPredictor

    predictor = TokenPredictor.from_pretrained(args.model_dir, device=args.device)
    if args.conll is not None:
        sentences = read_conll(args.conll)
        tags = predictor.tag_words([s.words for s in sentences])
        columns = [[s.ner for s in sentences], tags]
        if args.out is None:  # to stdout: word, gold, predicted; a blank line after each sentence
            for s, predicted in zip(sentences, tags):
                print("\n".join(" ".join(row) for row in zip(s.words, s.ner, predicted)) + "\n")
            return 0
        write_conll(args.out, [s.words for s in sentences], columns)
        print(f"tagged {len(sentences)} sentences ({sum(len(s.words) for s in sentences)} words): {args.out}")
        return 0
    for text, entities in zip(args.text, predictor.entities(args.text)):
        if args.json:
            print(json.dumps({"text": text, "entities": [e.__dict__ for e in entities]}, ensure_ascii=False))
        else:
            found = "; ".join(f"{e.type} {e.text!r} [{e.start}:{e.end}]" for e in entities) or "(no entity)"
            print(f"{found}  <-  {text}")
    return 0


def _predict_qa(args: argparse.Namespace) -> int:
    from ctxemb.finetuning.token_predict import QAPredictor

    if args.question is None or len(args.question) != len(args.text):
        raise UsageError(f"a QA model needs one --question per passage: {len(args.text)} passages, "
                         f"{len(args.question or [])} questions")
    predictor = QAPredictor.from_pretrained(args.model_dir, device=args.device)
    for question, a in zip(args.question, predictor.answer(args.question, args.text)):
        if args.json:
            print(json.dumps({"question": question, "answer": a.text, "start": a.start_char, "end": a.end_char,
                              "score": a.score}, ensure_ascii=False))
        else:
            print(f"{a.text!r} [{a.start_char}:{a.end_char}] score {a.score:.2f}  <-  {question}")
    return 0
