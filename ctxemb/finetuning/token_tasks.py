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

XQuAD has no training split: its 48 articles are split once, by title, into train (30), dev (6) and held-out (12)
(:data:`~ctxemb.finetuning.squad.XQUAD_ARTICLE_SPLIT`), so no passage is on two sides. ``train_split`` and
``eval_split`` name the parts (default train and dev: select on dev; evaluate ``heldout`` once at the end);
``train_split = "cloze"`` trains on synthetic cloze questions (:mod:`ctxemb.finetuning.cloze_qa`) from WikiText-2
and the training articles' passages, the stage the ``xquad`` recipe trains first.

Span-based NER: after training, the NULL threshold is calibrated on the eval split (best F1, or the lowest threshold
reaching ``target_precision``) and saved with the model (``null_threshold`` in ``finetune_config.json``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np

from ctxemb._validation import check_choice
from ctxemb.config import field_help as _meta
from ctxemb.finetuning.cloze_qa import cloze_questions
from ctxemb.finetuning.conll import NER_LABELS, TaggedSentence, load_conll2003, pos_labels, read_conll
from ctxemb.finetuning.config import CONFIG_FILE, MODEL_DIR, FinetuneRunConfig, load_finetune_config
from ctxemb.finetuning.outputs import decode_tags, model_logits, scored_spans
from ctxemb.finetuning.passages import wikitext_paragraphs
from ctxemb.finetuning.qa import QACollator, best_answers, encode_qa
from ctxemb.finetuning.squad import XQUAD_ARTICLE_SPLIT, QAExample, load_xquad, read_squad, xquad_split
from ctxemb.finetuning.qa_tables import QA_ROLES, is_qa_table, read_qa_table
from ctxemb.finetuning.tables import resolve_columns
from ctxemb.finetuning.tagged_tables import is_tagged_table, read_tagged_table
from ctxemb.finetuning.tagging import (LABEL_SUBWORDS, TaggingCollator, bio_to_entities, calibrate_threshold,
                                       decode_spans, encode_tagged, entities_to_bio)
from ctxemb.finetuning.task import Task, TaskData, save_model_files
from ctxemb.metrics.conlleval import chunk_scores
from ctxemb.metrics.squad import squad_scores
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.token_classification import (BOUNDARY_KINDS, NULL_LABEL, SUMMARY_KINDS, WORD_DECODINGS,
                                                  EncoderForTokenClassification)
from ctxemb.modeling.question_answering import EncoderForQuestionAnswering
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.registry import resolve_model_dir
from ctxemb.training.callbacks import TrainResult
from ctxemb.training.config import TrainConfig
from ctxemb.training.data import EvalBatches
from ctxemb.training.optim import layerwise_lr_groups

__all__ = ["CONFIG_FILE", "MODEL_DIR", "TASK_HEADS", "TOKEN_HEADS", "TOKEN_TASKS", "TokenFinetuneConfig",
           "TokenFinetuneResult", "TokenTask", "decode_tags", "load_finetune_config", "model_logits",
           "run_token_finetuning", "scored_spans"]

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
        span_boundary, span_summary: the span representation (see :mod:`ctxemb.modeling.token_classification`).
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
    """

    head: str | None = field(default=None, metadata=_meta(
        'softmax, crf, span or qa (the --head flag covers every family)', cli=False))
    label_subwords: str = field(default="all", metadata=_meta(
        "which subwords take a word's tag in training (all, as J&M, or the first)", choices=LABEL_SUBWORDS))
    decoding: str = field(default="first", metadata=_meta(
        "a word's tag from its first subword or the mean of its subwords' distributions", choices=WORD_DECODINGS))
    max_span_length: int = field(default=8, metadata=_meta(
        'span head: the longest span in words', type='positive_int'))
    span_boundary: str = field(default="tokens", metadata=_meta(
        'span head: boundary vectors as the tokens themselves or through an FFN', choices=BOUNDARY_KINDS))
    span_summary: str = field(default="mean", metadata=_meta(
        "span head: the span's summary vector, a mean or attention pooling", choices=SUMMARY_KINDS))
    target_precision: float | None = field(default=None, metadata=_meta(
        "calibrate the span head's NULL threshold for this precision (percent) instead of best F1"))
    crf_lr_scale: float = field(default=100.0, metadata=_meta(
        "CRF head: its learning rate as a multiple of the encoder's", type='positive_float'))
    span_null_weight: float = field(default=1.0, metadata=_meta(
        'span head: the weight of NULL spans in the loss (entity types weigh 1)', type='positive_float'))
    span_lr_scale: float = field(default=10.0, metadata=_meta(
        "span head: its learning rate as a multiple of the encoder's", type='positive_float'))
    # None: QA_MAX_LENGTH for QA, TAGGING_MAX_LENGTH otherwise (Attributes)
    max_length: int | None = field(default=None, metadata=_meta(
        'longest model input in tokens (QA: 384 unless set)', cli=False))
    # None: QA_DOC_STRIDE, or less when it would not fit the window
    doc_stride: int | None = field(default=None, metadata=_meta(
        'QA: step between window starts, in tokens (default 128, or less when it would not fit the '
        'window)', type='positive_int'))
    max_query_length: int = field(default=64, metadata=_meta(
        "QA: the question's cut-off in tokens", type='positive_int'))
    max_answer_length: int = field(default=30, metadata=_meta(
        'QA: the longest answer in tokens', type='positive_int'))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(learning_rate=5e-5),
                               metadata=_meta("the loop's settings", cli=False))

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
        check_choice(self.task, "task", TOKEN_TASKS)
        self.head = self.head or _DEFAULT_HEAD[self.task]
        if self.head not in TASK_HEADS[self.task]:
            raise ValueError(f"task {self.task!r} takes head {TASK_HEADS[self.task]}; got {self.head!r}")
        if self.task.endswith("-file") and (self.train_file is None or self.dev_file is None):
            raise ValueError(f"task {self.task!r} needs train_file and dev_file "
                             f"({'CoNLL format, tags in the last column' if self.task == 'conll-file' else 'SQuAD JSON'})")
        if self.columns is not None:  # unknown roles fail here, before a run starts
            if self.task not in ("conll-file", "squad-file"):
                raise ValueError(f"columns maps the columns of a table for task 'conll-file' (tokens, tags) or "
                                 f"'squad-file' (id, title, context, question, answers); {self.task!r} reads its "
                                 "own files")
            resolve_columns(self.columns, QA_ROLES) if self.task == "squad-file" else tagging_columns(self)
        for name, choices in (("label_subwords", LABEL_SUBWORDS), ("decoding", WORD_DECODINGS),
                              ("span_boundary", BOUNDARY_KINDS), ("span_summary", SUMMARY_KINDS)):
            check_choice(getattr(self, name), name, choices)
        if self.head == "crf" and self.decoding != "first":
            raise ValueError("a CRF decodes words from their first subwords: decoding must be 'first'")
        for name in ("crf_lr_scale", "span_lr_scale"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ValueError(f"{name} must be a positive number; got {getattr(self, name)}")
        if not 0 < self.span_null_weight <= 1:
            raise ValueError(f"span_null_weight must be in (0, 1]; got {self.span_null_weight}")
        if self.task == "xquad":
            check_choice(self.train_split, "train_split", tuple(XQUAD_ARTICLE_SPLIT) + ("cloze",))
            check_choice(self.eval_split, "eval_split", tuple(XQUAD_ARTICLE_SPLIT))
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
    training_run: str | None = None  # the stamp in the saved model's config.json


# ------------------------------------------------------------------------------------------------------ data


def tagging_columns(config: TokenFinetuneConfig) -> dict:
    """conll-file's table columns: ``tokens`` and ``tags`` unless ``config.columns`` maps them elsewhere."""
    return resolve_columns(config.columns, {"tokens": "tokens", "tags": "tags"})


def _read_tagged(source, config: TokenFinetuneConfig, split: str) -> list[TaggedSentence]:
    if is_tagged_table(source):  # JSONL/JSON/Parquet, a datasets table or directory, a DataFrame, a list
        return read_tagged_table(source, **tagging_columns(config), split=split)
    if config.columns is not None:
        raise ValueError(f"columns maps the columns of a table; {source} is read as a CoNLL file (word ... tag)")
    return read_conll(source)


def load_tagging_data(config: TokenFinetuneConfig) -> tuple[list[TaggedSentence], list[TaggedSentence]]:
    """(train, eval) sentences of a CoNLL task (conll-file: CoNLL files, or tables with tokens/tags columns)."""
    if config.task == "conll-file":
        return (_read_tagged(config.train_file, config, config.train_split),
                _read_tagged(config.dev_file, config, config.eval_split))
    splits = load_conll2003(splits=[config.train_split, config.eval_split])
    return splits[config.train_split], splits[config.eval_split]


def _read_questions(source, config: TokenFinetuneConfig, split: str) -> list[QAExample]:
    if is_qa_table(source):  # JSONL/CSV/Parquet, a datasets table or directory, a DataFrame, a list
        return read_qa_table(source, columns=config.columns, split=split)
    if config.columns is not None:
        raise ValueError(f"columns maps the columns of a table; {source} is read as SQuAD JSON (data/paragraphs/qas)")
    return read_squad(source)


def load_qa_data(config: TokenFinetuneConfig) -> tuple[list[QAExample], list[QAExample]]:
    """(train, eval) questions: XQuAD-en split by article, or a user's SQuAD files."""
    if config.task == "squad-file":
        return (_read_questions(config.train_file, config, config.train_split),
                _read_questions(config.dev_file, config, config.eval_split))
    examples = load_xquad()
    if config.train_split == "cloze":  # synthetic questions: WikiText-2 and the training articles' passages only
        passages = wikitext_paragraphs() + [ex.context for ex in xquad_split("train", examples)]
        train = cloze_questions(passages, seed=config.train.seed)
        logger.info("cloze questions: %d from %d passages", len(train), len(set(passages)))
        return train, xquad_split(config.eval_split, examples)
    return xquad_split(config.train_split, examples), xquad_split(config.eval_split, examples)


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
        model: EncoderWithHeads = EncoderForTokenClassification.from_pretrained(
            path, id2label=id2label, crf=config.head == "crf", new_head=config.new_head)
    elif config.head == "span":
        model = EncoderForSpanClassification.from_pretrained(
            path, id2label=id2label, boundary=config.span_boundary, summary=config.span_summary,
            max_span_length=config.max_span_length, null_weight=config.span_null_weight, new_head=config.new_head)
    else:
        model = EncoderForQuestionAnswering.from_pretrained(path, new_head=config.new_head)
    return config.apply_regime(model)


# ------------------------------------------------------------------------------------------------ evaluation


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


class TokenTask(Task):
    """A token-level task of :data:`TOKEN_TASKS`: BIO tagging with a softmax or CRF head (conlleval F1; POS:
    accuracy), span NER (``head="span"``: span classification, conlleval F1 after a NULL threshold calibrated on
    the eval split at the end), or SQuAD-format extractive QA (``head="qa"``: SQuAD F1). Config:
    :class:`TokenFinetuneConfig`."""

    config_class = TokenFinetuneConfig
    default_learning_rate = 5e-5

    def __init__(self, name: str):
        self.name = name
        self.family = "qa" if name in ("xquad", "squad-file") else "token"
        self.primary_metric = "accuracy" if name == "conll2003-pos" else "f1"
        self.description = f"token-level task {name}"

    def read(self, config: TokenFinetuneConfig) -> TaskData:
        if config.head == "qa":
            train, evaluation = load_qa_data(config)
            return TaskData(train=list(train), eval=list(evaluation), labels=None)
        train, evaluation = load_tagging_data(config)
        if config.max_train_examples:  # the label set is read from the sentences the run trains on
            train = train[:config.max_train_examples]
        return TaskData(train=list(train), eval=list(evaluation),
                        labels=label_set(config, train + evaluation))  # a tag only dev has still needs an id

    def build_model(self, config: TokenFinetuneConfig, data: TaskData):
        return build_model(config, data.labels)

    def encode(self, config: TokenFinetuneConfig, tokenizer, examples, data: TaskData):
        if config.head == "qa":
            return (encode_qa(tokenizer, examples, max_length=config.max_length, doc_stride=config.doc_stride,
                              max_query_length=config.max_query_length), QACollator(tokenizer.pad_token_id))
        label2id = {name: i for i, name in enumerate(data.labels)}
        span = config.head == "span"
        words = [s.words for s in examples]
        if span:
            ents = [bio_to_entities(tag_column(config, s)) for s in examples]
            features = encode_tagged(tokenizer, words, label2id=label2id, entities=ents,
                                     max_span_length=config.max_span_length, max_length=config.max_length)
        else:
            features = encode_tagged(tokenizer, words, tags=[tag_column(config, s) for s in examples],
                                     label2id=label2id, label_subwords=config.label_subwords,
                                     max_length=config.max_length)
        return features, TaggingCollator(tokenizer.pad_token_id, spans=span)

    def evaluator(self, config: TokenFinetuneConfig, tokenizer, data: TaskData, features, collate):
        if config.head == "qa":
            gold_answers = {ex.id: [a for a, _ in ex.answers] for ex in data.eval}

            def evaluate_qa(m) -> dict[str, float]:
                logits = model_logits(m, EvalBatches(features, batch_size=64, collate=collate),
                                      progress=config.train.progress_bar)
                answers = best_answers(data.eval, features, [lg[:, 0] for lg in logits], [lg[:, 1] for lg in logits],
                                       max_answer_length=config.max_answer_length)
                return squad_scores({k: a.text for k, a in answers.items()}, gold_answers)
            return evaluate_qa
        gold_tags = [list(tag_column(config, s)) for s in data.eval]
        data.info["gold_tags"] = gold_tags
        data.info["last_spans"] = []

        def evaluate_tags(m) -> dict[str, float]:
            logits = model_logits(m, EvalBatches(features, batch_size=64, collate=collate),
                                  progress=config.train.progress_bar)
            if config.head != "span":
                pred = decode_tags(m, features, logits, len(data.eval), config.decoding,
                                   progress=config.train.progress_bar)
                return tagging_metrics(config, gold_tags, pred)
            data.info["last_spans"][:] = scored_spans(m, features, logits, len(data.eval),
                                                      progress=config.train.progress_bar)
            pred = [entities_to_bio(len(s.words), [(x.type, x.start, x.end) for x in decode_spans(sp)])
                    for s, sp in zip(data.eval, data.info["last_spans"])]
            return entity_metrics(gold_tags, pred)
        return evaluate_tags

    def param_groups(self, model, config: TokenFinetuneConfig) -> list[dict]:
        groups = layerwise_lr_groups(model, config.layerwise_lr_decay, config.train.weight_decay)
        for g in groups:  # the CRF's few transition scores start from ~0 and need a far larger step than the encoder
            if g["param_names"][0].startswith("crf."):
                g["lr_scale"] *= config.crf_lr_scale
            elif g["param_names"][0].startswith("span_classifier."):  # likewise a fresh two-layer net
                g["lr_scale"] *= config.span_lr_scale
        return groups

    def calibrate(self, config: TokenFinetuneConfig, data: TaskData) -> dict[str, float]:
        """The span head's NULL threshold, calibrated on the last evaluation's spans (empty for other heads)."""
        if config.head != "span" or not data.info.get("last_spans"):
            return {}
        gold_entities = [bio_to_entities(g) for g in data.info["gold_tags"]]
        threshold, at = calibrate_threshold(data.info["last_spans"], gold_entities,
                                            target_precision=config.target_precision)
        logger.info("NULL threshold calibrated on %s: %.2f (P %.1f R %.1f F1 %.1f)", config.eval_split,
                    threshold, at["precision"], at["recall"], at["f1"])
        return {**{f"calibrated_{k}": v for k, v in at.items()}, "null_threshold": threshold}

    def save(self, model, directory, config: TokenFinetuneConfig, data: TaskData, tokenizer, *,
             train_config: TrainConfig) -> None:
        save_model_files(model, directory, config, tokenizer, train_config=train_config, kind="token",
                         null_threshold=data.info.get("calibrated", {}).get("null_threshold"))

    def load(self, model_dir):
        path = resolve_model_dir(model_dir)
        saved = load_finetune_config(path) or {}
        if saved.get("head") == "qa":
            return EncoderForQuestionAnswering.from_pretrained(path)
        if saved.get("head") == "span":
            return EncoderForSpanClassification.from_pretrained(path)
        return EncoderForTokenClassification.from_pretrained(path)


def run_token_finetuning(config: TokenFinetuneConfig) -> TokenFinetuneResult:
    """Fine-tune, evaluating on the eval split each epoch; save the model directory (module docstring).

    The run goes through :func:`ctxemb.finetuning.runner.run_task` (the one run skeleton); the span head's NULL
    threshold is calibrated on the eval split before the model is saved."""
    from ctxemb.finetuning.runner import run_task

    task = TokenTask(config.task)

    def calibrate(outcome, data: TaskData) -> None:
        data.info["calibrated"] = task.calibrate(config, data)
        outcome.final_metrics = {**outcome.final_metrics, **data.info["calibrated"]}

    done = run_task(task, config, after_train=calibrate)
    run = done.run
    calibrated = done.data.info.get("calibrated", {})
    return TokenFinetuneResult(train=run.train, eval_history=run.eval_history, final_metrics=run.final_metrics,
                               model_dir=run.model_dir, null_threshold=calibrated.get("null_threshold"),
                               eval_seconds=run.eval_seconds, training_run=run.training_run)
