"""The settings of a token- or span-level fine-tuning run (:class:`TokenFinetuneConfig`), its tasks and heads, in a
module that imports no torch: ``ctxemb finetune --help`` builds its flags from it at once. The task that runs them is
:class:`~ctxemb.tasks.token.task.TokenTask` (these names are importable from
:mod:`ctxemb.tasks.token.task` as before).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.tasks.qa.tables import QA_ROLES
from ctxemb.tasks.qa.squad import XQUAD_ARTICLE_SPLIT
from ctxemb.io.tables import resolve_columns
from ctxemb.models.head_options import BOUNDARY_KINDS, SUMMARY_KINDS, WORD_DECODINGS

__all__ = ["LABEL_SUBWORDS", "QA_DOC_STRIDE", "QA_MAX_LENGTH", "TAGGING_MAX_LENGTH", "TASK_HEADS", "TOKEN_HEADS",
           "TOKEN_TASKS", "LabelSubwords", "TokenFinetuneConfig", "tagging_columns"]

#: Which subwords of a word take its tag in training (:func:`~ctxemb.tasks.token.features.encode_tagged`).
LabelSubwords = Literal["all", "first"]
LABEL_SUBWORDS: tuple[str, ...] = ("all", "first")

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
    """A token- or span-level fine-tuning run: the shared settings (:class:`~ctxemb.tasks.sequence.task.FinetuneRunConfig`:
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
        'softmax or crf (BIO tagging), span (span NER), qa (extractive QA); default: qa for QA tasks, else softmax',
        choices=TOKEN_HEADS))
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
        'longest model input in tokens (default: 384 for QA, 128 otherwise)', type='positive_int'))
    # None: QA_DOC_STRIDE, or less when it would not fit the window
    doc_stride: int | None = field(default=None, metadata=_meta(
        'QA: step between window starts, in tokens (default 128, or less when it would not fit the '
        'window)', type='positive_int'))
    max_query_length: int = field(default=64, metadata=_meta(
        "QA: the question's cut-off in tokens", type='positive_int'))
    max_answer_length: int = field(default=30, metadata=_meta(
        'QA: the longest answer in tokens', type='positive_int'))
    TRAIN_DEFAULTS: ClassVar[Mapping[str, Any]] = {"learning_rate": 5e-5, "warmup_ratio": 0.1}

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


def tagging_columns(config: TokenFinetuneConfig) -> dict:
    """conll-file's table columns: ``tokens`` and ``tags`` unless ``config.columns`` maps them elsewhere."""
    return resolve_columns(config.columns, {"tokens": "tokens", "tags": "tags"})


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "finetune"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {name: TokenFinetuneConfig for name in TOKEN_TASKS}
