"""Token- and span-level fine-tuning on the shared training loop: BIO tagging (softmax or CRF) and span-based NER on
CoNLL-2003, part-of-speech tagging on its POS column, and extractive QA on XQuAD-en (J&M 11.4.3, 11.5.2; d2l 15.6.3,
15.6.4); or CoNLL-format files of a user's own.

Like :mod:`ctxemb.finetuning.tasks`, one :class:`TokenFinetuneConfig` names the task, the encoder, the head, the
regime and the loop's settings; the run evaluates on the eval split once per epoch and leaves ``<out_dir>/model``
(encoder in HF layout with its head and label map, tokenizer, ``finetune_config.json``), which ``Embedder``, the
sense store and the search index take like any encoder directory.

Tasks, heads and metrics:

=================  ===================================  ===============================================  ==============
task               data                                 heads                                            metric
=================  ===================================  ===============================================  ==============
conll2003-ner      ``finetune/conll2003`` NER column    softmax, crf, span                               entity F1
conll2003-pos      the same files, POS column           softmax, crf                                     accuracy
xquad              ``finetune/xquad/xquad.en.json``     qa                                               EM, F1
conll-file         ``train_file``/``dev_file``, last    softmax, crf, span                               entity F1
                   column BIO (or IOB1) tags
squad-file         ``train_file``/``dev_file``, SQuAD   qa                                               EM, F1
                   v1.1 JSON
=================  ===================================  ===============================================  ==============

XQuAD has no training split: its articles are split (seeded) into ``1 - eval_fraction`` for training and the rest
for evaluation, whole articles on one side, so no passage is seen in training and in evaluation.

Span-based NER: after training, the NULL threshold is calibrated on the eval split (best F1, or the lowest threshold
reaching ``target_precision``) and saved with the model (``null_threshold`` in ``finetune_config.json``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import torch

from ctxemb.finetuning.conll import NER_LABELS, TaggedSentence, load_conll2003, pos_labels, read_conll
from ctxemb.finetuning.qa import QACollator, best_answers, encode_qa
from ctxemb.finetuning.squad import QAExample, load_xquad, read_squad, split_by_article
from ctxemb.finetuning.tagging import (LABEL_SUBWORDS, ScoredSpan, TaggedFeature, TaggingCollator,
                                       bio_to_entities, calibrate_threshold, decode_spans, encode_tagged,
                                       entities_to_bio, score_spans, stitch_words)
from ctxemb.finetuning.tasks import CONFIG_FILE, MODEL_DIR, FinetuneRunConfig
from ctxemb.loading import load_tokenizer
from ctxemb.metrics.conlleval import chunk_scores
from ctxemb.metrics.squad import squad_scores
from ctxemb.modeling.heads import EncoderWithHeads
from ctxemb.modeling.token_heads import (BOUNDARY_KINDS, NULL_LABEL, SUMMARY_KINDS, WORD_DECODINGS,
                                         EncoderForQuestionAnswering, EncoderForSpanClassification,
                                         EncoderForTokenClassification)
from ctxemb.paths import atomic_write
from ctxemb.registry import resolve_model_dir
from ctxemb.tokenization import copy_tokenizer_files
from ctxemb.training.data import DatasetBatches, EvalBatches, move_to_device
from ctxemb.training.distributed import distributed_session
from ctxemb.training.loop import TrainConfig, TrainResult, epochs_to_steps, seed_everything, train
from ctxemb.training.optim import layerwise_lr_groups

logger = logging.getLogger(__name__)

TOKEN_TASKS: tuple[str, ...] = ("conll2003-ner", "conll2003-pos", "xquad", "conll-file", "squad-file")
TOKEN_HEADS: tuple[str, ...] = ("softmax", "crf", "span", "qa")
TASK_HEADS = {"conll2003-ner": ("softmax", "crf", "span"), "conll2003-pos": ("softmax", "crf"), "xquad": ("qa",),
               "conll-file": ("softmax", "crf", "span"), "squad-file": ("qa",)}
# Window defaults when the user sets none: SQuAD recipes' for QA (BERT's run_squad.py, transformers' run_qa.py)
QA_MAX_LENGTH, QA_DOC_STRIDE, TAGGING_MAX_LENGTH = 384, 128, 128
_MIN_QA_SPECIALS, _MAX_QA_SPECIALS = 3, 4  # [CLS] q [SEP] c [SEP]; <s> q </s></s> c </s>
_DEFAULT_HEAD = {"conll2003-ner": "softmax", "conll2003-pos": "softmax", "xquad": "qa", "conll-file": "softmax",
                 "squad-file": "qa"}


@dataclass
class TokenFinetuneConfig(FinetuneRunConfig):
    """A token- or span-level fine-tuning run: the shared settings (:class:`~ctxemb.finetuning.tasks.FinetuneRunConfig`:
    model, regime, epochs, batch size, ``max_length``, splits, ``train_file``/``dev_file``, the loop's ``train``)
    and these.

    Attributes:
        task: one of :data:`TOKEN_TASKS` (``conll-file``: CoNLL files, ``squad-file``: SQuAD JSON, in
            ``train_file``/``dev_file``). ``max_length``: sentences longer are split at word boundaries, QA passages
            are windowed. ``train_split``/``eval_split``: CoNLL-2003 splits (``dev`` = ``eng.testa``).
        head: ``"softmax"`` (a softmax per token), ``"crf"`` (a CRF over words), ``"span"`` (span classification)
            or ``"qa"`` (start/end scores); None: the task's usual head.
        label_subwords: ``"all"`` (the book's default: every subword takes its word's tag) or ``"first"``.
        decoding: a word's tag from its ``"first"`` subword or the ``"mean"`` of its subwords' distributions.
        max_span_length: L, the longest span in words (span head).
        span_boundary, span_summary: the span representation (see :mod:`ctxemb.modeling.token_heads`).
        target_precision: calibrate the span head's NULL threshold for this precision (percent) instead of F1.
        crf_lr_scale: the CRF's learning rate is this multiple of the encoder's (its transition scores start at
            ~0 and would barely move at an encoder's 5e-5; BiLSTM-CRF taggers train them at ~1e-2).
        span_null_weight: the weight of NULL spans in the span head's loss (entity types weigh 1; see
            :class:`~ctxemb.modeling.token_heads.EncoderForSpanClassification`).
        span_lr_scale: the span head's learning rate is this multiple of the encoder's (a fresh two-layer
            feed-forward net; PURE trains it at 5e-4 beside an encoder at 1e-5). At 1, as before, the head sat on
            the "NULL everywhere" plateau through a CoNLL-2003 epoch (MISC F1 0.0, ORG 0.4).
        doc_stride, max_query_length, max_answer_length: QA windows (step between window starts, in tokens),
            question cut-off and the longest answer in tokens.
        max_length, doc_stride when None (the default): QA takes SQuAD recipes' 384 and 128 (BERT's
            ``run_squad.py``, transformers' ``run_qa.py``); the other tasks ``max_length`` 128. A ``max_length`` given
            without ``doc_stride`` keeps stride 128 when it fits the window, else half the window's context room.
            Given values are kept; a ``doc_stride`` larger than the context room ``max_length`` minus
            ``max_query_length`` minus the special tokens is refused here, naming both (QA only).
        eval_fraction, split_seed: XQuAD's held-out share of articles and the seed of the split.
    """

    head: str | None = None
    label_subwords: str = "all"
    decoding: str = "first"
    max_span_length: int = 8
    span_boundary: str = "tokens"
    span_summary: str = "mean"
    target_precision: float | None = None
    crf_lr_scale: float = 100.0
    span_null_weight: float = 1.0
    span_lr_scale: float = 10.0
    max_length: int | None = None  # None: QA_MAX_LENGTH for QA, TAGGING_MAX_LENGTH otherwise (Attributes)
    doc_stride: int | None = None  # None: QA_DOC_STRIDE, or less when it would not fit the window
    max_query_length: int = 64
    max_answer_length: int = 30
    eval_fraction: float = 0.25
    split_seed: int = 0
    train: TrainConfig = field(default_factory=lambda: TrainConfig(learning_rate=5e-5, max_steps=1))

    _POSITIVE_INTS: ClassVar[tuple[str, ...]] = ("max_span_length", "doc_stride", "max_query_length",
                                                 "max_answer_length")

    def __post_init__(self) -> None:
        qa = (self.head or _DEFAULT_HEAD.get(self.task)) == "qa"
        stride_given = self.doc_stride is not None
        if self.max_length is None:
            self.max_length = QA_MAX_LENGTH if qa else TAGGING_MAX_LENGTH
        if (qa and not stride_given and isinstance(self.max_length, int)
                and isinstance(self.max_query_length, int)):
            room = self.max_length - self.max_query_length - _MAX_QA_SPECIALS
            self.doc_stride = QA_DOC_STRIDE if QA_DOC_STRIDE <= room else max(1, room // 2)
        elif not stride_given:
            self.doc_stride = QA_DOC_STRIDE
        super().__post_init__()
        if qa and stride_given and self.doc_stride > self.max_length - self.max_query_length - _MIN_QA_SPECIALS:
            room = self.max_length - self.max_query_length - _MIN_QA_SPECIALS
            raise ValueError(
                f"doc_stride {self.doc_stride} does not fit the QA windows: with max_length {self.max_length} and "
                f"max_query_length {self.max_query_length}, a window holds at most {room} context tokens (after "
                f"BERT's {_MIN_QA_SPECIALS} special tokens), and doc_stride must be at most that; lower doc_stride "
                f"or raise max_length (QA defaults: max_length {QA_MAX_LENGTH}, doc_stride {QA_DOC_STRIDE})")
        if self.task not in TOKEN_TASKS:
            raise ValueError(f"task must be one of {TOKEN_TASKS}; got {self.task!r}")
        self.head = self.head or _DEFAULT_HEAD[self.task]
        if self.head not in TASK_HEADS[self.task]:
            raise ValueError(f"task {self.task!r} takes head {TASK_HEADS[self.task]}; got {self.head!r}")
        if self.task.endswith("-file") and not (self.train_file and self.dev_file):
            raise ValueError(f"task {self.task!r} needs train_file and dev_file "
                             f"({'CoNLL format, tags in the last column' if self.task == 'conll-file' else 'SQuAD JSON'})")
        for name, choices in (("label_subwords", LABEL_SUBWORDS), ("decoding", WORD_DECODINGS),
                              ("span_boundary", BOUNDARY_KINDS), ("span_summary", SUMMARY_KINDS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}; got {getattr(self, name)!r}")
        if self.head == "crf" and self.decoding != "first":
            raise ValueError("a CRF decodes words from their first subwords: decoding must be 'first'")
        for name in ("crf_lr_scale", "span_lr_scale"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ValueError(f"{name} must be a positive number; got {getattr(self, name)}")
        if not 0 < self.span_null_weight <= 1:
            raise ValueError(f"span_null_weight must be in (0, 1]; got {self.span_null_weight}")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1); got {self.eval_fraction}")
        if self.target_precision is not None and not 0 < self.target_precision <= 100:
            raise ValueError(f"target_precision is a percentage in (0, 100]; got {self.target_precision}")


@dataclass
class TokenFinetuneResult:
    """The loop's result, the eval metrics after each epoch, the final ones (for the span head with the NULL
    threshold calibrated on the eval split and the metrics at it, ``calibrated_f1``, ...), and where the model is."""

    train: TrainResult
    eval_history: list[dict[str, float]]
    final_metrics: dict[str, float]
    model_dir: Path
    null_threshold: float | None = None
    eval_seconds: float = 0.0  # of the run's wall time, spent evaluating (the rest is training and saving)


# ------------------------------------------------------------------------------------------------------ data


def load_tagging_data(config: TokenFinetuneConfig) -> tuple[list[TaggedSentence], list[TaggedSentence]]:
    """(train, eval) sentences of a CoNLL task."""
    if config.task == "conll-file":
        return read_conll(config.train_file), read_conll(config.dev_file)
    splits = load_conll2003(splits=[config.train_split, config.eval_split])
    return splits[config.train_split], splits[config.eval_split]


def load_qa_data(config: TokenFinetuneConfig) -> tuple[list[QAExample], list[QAExample]]:
    """(train, eval) questions: XQuAD-en split by article, or a user's SQuAD files."""
    if config.task == "squad-file":
        return read_squad(config.train_file), read_squad(config.dev_file)
    return split_by_article(load_xquad(), eval_fraction=config.eval_fraction, seed=config.split_seed)


def tag_column(config: TokenFinetuneConfig, sentence: TaggedSentence) -> tuple[str, ...]:
    return sentence.pos if config.task == "conll2003-pos" else sentence.ner


def label_set(config: TokenFinetuneConfig, sentences: Sequence[TaggedSentence]) -> list[str]:
    """The label names in id order: CoNLL-2003's fixed NER set, the POS tags of ``sentences``, or (own files) their
    BIO tags, ``O`` first; for the span head the entity types with NULL first. (Pass the training and the eval
    sentences: a tag only the eval split has still needs an id, which the model then never predicts.)"""
    if config.task == "conll2003-pos":
        names = list(pos_labels(sentences))
    elif config.task == "conll2003-ner":
        names = list(NER_LABELS)
    else:
        seen = sorted({t for s in sentences for t in s.ner} - {"O"})
        names = ["O"] + seen
    if config.head == "span":
        return [NULL_LABEL] + sorted({n[2:] for n in names if n != "O"})
    return names


# ----------------------------------------------------------------------------------------------------- model


def build_model(config: TokenFinetuneConfig, labels: Sequence[str] | None) -> EncoderWithHeads:
    path = resolve_model_dir(config.model)
    id2label = dict(enumerate(labels)) if labels is not None else None
    if config.head in ("softmax", "crf"):
        model: EncoderWithHeads = EncoderForTokenClassification.from_pretrained(path, id2label=id2label,
                                                                               crf=config.head == "crf")
    elif config.head == "span":
        model = EncoderForSpanClassification.from_pretrained(
            path, id2label=id2label, boundary=config.span_boundary, summary=config.span_summary,
            max_span_length=config.max_span_length, null_weight=config.span_null_weight)
    else:
        model = EncoderForQuestionAnswering.from_pretrained(path)
    return config.apply_regime(model)


@torch.inference_mode()
def model_logits(model: EncoderWithHeads, batches) -> list[np.ndarray]:
    """Per feature, its logits without padding: (T_i, C) tokens, (S_i, C) spans or (T_i, 2) QA scores."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[np.ndarray] = []
    for batch in batches:
        batch = move_to_device(batch, device)
        inputs = {k: v for k, v in batch.items()
                  if k not in ("labels", "word_labels", "span_labels", "start_positions", "end_positions")}
        logits = model(**inputs).logits.float().cpu()
        lengths = (batch["span_mask"] if "span_mask" in batch else batch["attention_mask"]).sum(1).tolist()
        out.extend(row[:n].numpy() for row, n in zip(logits, lengths))
    model.train(was_training)
    return out


# ------------------------------------------------------------------------------------------------ evaluation


def decode_tags(model: EncoderForTokenClassification, features: Sequence[TaggedFeature],
                logits: Sequence[np.ndarray], n_sentences: int, decoding: str = "first") -> list[list[str]]:
    """Per sentence, one predicted tag per word."""
    per_feature = []
    for feat, lg in zip(features, logits):
        t = torch.from_numpy(lg).unsqueeze(0)
        ids = model.decode_words(t, torch.tensor([feat.word_starts]), torch.tensor([feat.word_ends]),
                                 torch.ones((1, len(feat.word_starts)), dtype=torch.long), decoding=decoding)[0]
        per_feature.append([model.id2label[i] for i in ids])
    return stitch_words(features, per_feature, n_sentences)


def scored_spans(model: EncoderForSpanClassification, features: Sequence[TaggedFeature],
                 logits: Sequence[np.ndarray], n_sentences: int) -> list[list[ScoredSpan]]:
    """Per sentence, every enumerated span with its best type and entity score."""
    out: list[list[ScoredSpan]] = [[] for _ in range(n_sentences)]
    for feat, lg in zip(features, logits):
        probs = torch.from_numpy(lg).softmax(-1).numpy()
        out[feat.sentence].extend(score_spans(probs, feat.span_words, model.id2label, first_word=feat.first_word))
    return out


def entity_metrics(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """conlleval's overall precision, recall, F1 and per-type F1 (``f1_PER``, ...), in percent."""
    s = chunk_scores(gold_tags, pred_tags)
    out = {"f1": s.f1, "precision": s.precision, "recall": s.recall}
    out.update({f"f1_{t}": v.f1 for t, v in sorted(s.per_type.items())})
    return out


def tagging_metrics(config: TokenFinetuneConfig, gold: Sequence[Sequence[str]],
                    pred: Sequence[Sequence[str]]) -> dict[str, float]:
    if config.task == "conll2003-pos":
        flat_gold = [t for s in gold for t in s]
        flat_pred = [t for s in pred for t in s]
        return {"accuracy": 100.0 * float(np.mean([g == p for g, p in zip(flat_gold, flat_pred)]))}
    return entity_metrics(gold, pred)


# ------------------------------------------------------------------------------------------------------- run


def run_token_finetuning(config: TokenFinetuneConfig) -> TokenFinetuneResult:
    """Fine-tune, evaluating on the eval split each epoch; save the model directory (module docstring)."""
    seed_everything(config.train.seed)  # the new head's initialisation belongs to the run's seed
    tokenizer = load_tokenizer(config.model)
    history: list[dict[str, float]] = []
    null_threshold = None
    calibrated: dict[str, float] = {}
    if config.head == "qa":
        train_examples, eval_examples = load_qa_data(config)
        if config.max_train_examples:
            train_examples = train_examples[:config.max_train_examples]
        model = build_model(config, None)
        qa = dict(max_length=config.max_length, doc_stride=config.doc_stride, max_query_length=config.max_query_length)
        train_features = encode_qa(tokenizer, train_examples, **qa)
        eval_features = encode_qa(tokenizer, eval_examples, **qa)
        collate: Callable = QACollator(tokenizer.pad_token_id)
        gold_answers = {ex.id: [a for a, _ in ex.answers] for ex in eval_examples}

        def evaluate_fn(m) -> dict[str, float]:
            logits = model_logits(m, EvalBatches(eval_features, batch_size=64, collate=collate))
            answers = best_answers(eval_examples, eval_features, [lg[:, 0] for lg in logits],
                                   [lg[:, 1] for lg in logits], max_answer_length=config.max_answer_length)
            return squad_scores({k: a.text for k, a in answers.items()}, gold_answers)
        labels = None
    else:
        train_sents, eval_sents = load_tagging_data(config)
        if config.max_train_examples:
            train_sents = train_sents[:config.max_train_examples]
        labels = label_set(config, train_sents + eval_sents)  # a tag only dev has still needs an id
        model = build_model(config, labels)
        label2id = {name: i for i, name in enumerate(labels)}
        span = config.head == "span"
        collate = TaggingCollator(tokenizer.pad_token_id, spans=span)

        def features_of(sentences: Sequence[TaggedSentence]) -> list[TaggedFeature]:
            words = [s.words for s in sentences]
            if span:
                ents = [bio_to_entities(tag_column(config, s)) for s in sentences]
                return encode_tagged(tokenizer, words, label2id=label2id, entities=ents,
                                     max_span_length=config.max_span_length, max_length=config.max_length)
            return encode_tagged(tokenizer, words, tags=[tag_column(config, s) for s in sentences],
                                 label2id=label2id, label_subwords=config.label_subwords, max_length=config.max_length)

        train_features = features_of(train_sents)
        eval_features = features_of(eval_sents)
        gold_tags = [list(tag_column(config, s)) for s in eval_sents]
        last_spans: list[list[ScoredSpan]] = []

        def evaluate_fn(m) -> dict[str, float]:
            logits = model_logits(m, EvalBatches(eval_features, batch_size=64, collate=collate))
            if not span:
                pred = decode_tags(m, eval_features, logits, len(eval_sents), config.decoding)
                return tagging_metrics(config, gold_tags, pred)
            last_spans[:] = scored_spans(m, eval_features, logits, len(eval_sents))
            pred = [entities_to_bio(len(s.words), [(x.type, x.start, x.end) for x in decode_spans(sp)])
                    for s, sp in zip(eval_sents, last_spans)]
            return entity_metrics(gold_tags, pred)

    eval_seconds = [0.0]

    def eval_fn(m) -> dict[str, float]:
        t = time.perf_counter()
        metrics = evaluate_fn(m)
        eval_seconds[0] += time.perf_counter() - t
        history.append(metrics)
        return metrics

    with distributed_session(config.train.device) as ctx:
        source = DatasetBatches(train_features, batch_size=config.batch_size, collate=collate,
                                seed=config.train.seed, rank=ctx.rank, world_size=ctx.world_size)
        steps = epochs_to_steps(config.epochs, source.batches_per_epoch, config.train.grad_accumulation_steps)
        train_config = dataclasses.replace(
            config.train, max_steps=steps,
            eval_every=config.train.eval_every or max(1, steps // math.ceil(config.epochs)))
        groups = layerwise_lr_groups(model, config.layerwise_lr_decay, config.train.weight_decay)
        for g in groups:  # the CRF's few transition scores start from ~0 and need a far larger step than the encoder
            if g["param_names"][0].startswith("crf."):
                g["lr_scale"] *= config.crf_lr_scale
            elif g["param_names"][0].startswith("span_classifier."):  # likewise a fresh two-layer net
                g["lr_scale"] *= config.span_lr_scale
        result = train(model, source, train_config, eval_fn=eval_fn, param_groups=groups)
        if config.head == "span" and last_spans:
            gold_entities = [bio_to_entities(g) for g in gold_tags]
            null_threshold, at = calibrate_threshold(last_spans, gold_entities,
                                                     target_precision=config.target_precision)
            logger.info("NULL threshold calibrated on %s: %.2f (P %.1f R %.1f F1 %.1f)", config.eval_split,
                        null_threshold, at["precision"], at["recall"], at["f1"])
            calibrated = {**{f"calibrated_{k}": v for k, v in at.items()}, "null_threshold": null_threshold}
        model_dir = Path(config.train.out_dir) / MODEL_DIR
        if ctx.is_main:
            model.save_pretrained(model_dir)
            copy_tokenizer_files(resolve_model_dir(config.model), model_dir, tokenizer)
            with atomic_write(model_dir / CONFIG_FILE) as f:
                json.dump({**config.to_dict(), "train": train_config.to_dict(), "kind": "token",
                           "null_threshold": null_threshold}, f, indent=2)
    final = {**(history[-1] if history else {}), **calibrated}
    return TokenFinetuneResult(train=result, eval_history=history, final_metrics=final, model_dir=model_dir,
                               null_threshold=null_threshold, eval_seconds=eval_seconds[0])


def load_finetune_config(model_dir: Path) -> dict[str, Any] | None:
    """The ``finetune_config.json`` a run saved beside the model, or None (e.g. a transformers checkpoint)."""
    path = Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


