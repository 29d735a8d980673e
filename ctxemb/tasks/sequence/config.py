"""The settings of a sentence- or pair-level fine-tuning run (:class:`FinetuneConfig`) and their choices, in a
module that imports no torch: ``ctxemb finetune --help`` builds its flags from it at once. The task that runs them is
:class:`~ctxemb.tasks.sequence.task.SequenceTask` (these names are importable from :mod:`ctxemb.tasks.sequence.task` as
before).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.tasks.sequence.data import TASKS
from ctxemb.io.tables import resolve_columns
from ctxemb.models.head_options import PAIR_SIMILARITY_LOSSES, REGRESSION_LOSSES

__all__ = ["HEADS", "SCORED_PAIR_LOSSES", "FinetuneConfig", "sequence_columns"]

HEADS: tuple[str, ...] = ("checkpoint", "cls", "mean", "cosine")
# Pair tasks whose label does not depend on the order of the two texts (rte and snli's do: premise, hypothesis).
_SYMMETRIC_PAIR_TASKS = ("stsb", "mrpc")
# --regression-loss: the cross-encoder's losses and the bi-encoder's, each checked against the head.
SCORED_PAIR_LOSSES: tuple[str, ...] = tuple(dict.fromkeys(REGRESSION_LOSSES + PAIR_SIMILARITY_LOSSES))


@dataclass
class FinetuneConfig(FinetuneRunConfig):
    """A sentence- or pair-level fine-tuning run: the shared settings (:class:`FinetuneRunConfig`) and these.

    Attributes:
        task: one of :data:`~ctxemb.tasks.sequence.data.TASKS`, or ``"custom"`` with ``train_file``/``dev_file``.
        head: ``"checkpoint"`` (the checkpoint's form: BERT's pooler, RoBERTa/MPNet's dense+tanh), ``"cls"`` (the
            book's W_C on the raw [CLS] vector) or ``"mean"`` (mean pooling, for sentence-trained encoders): a
            cross-encoder reading both texts at once; or ``"cosine"``: a bi-encoder for scored pairs (each text
            alone, mean pooling, cosine regressed onto the score; no head, so the encoder serves ``Embedder``).
        regression_loss: the loss for scored pairs: ``"mse"`` (a cross-encoder: on the 0-5 score; the bi-encoder: the
            cosine against score / 5), ``"bce"`` (a cross-encoder only: a sigmoid cross-entropy against the score
            divided by the largest training score, sentence-transformers' cross-encoder recipe for STS-B) or
            ``"cosent"`` (the bi-encoder only: the CoSENT ranking of the cosines); predictions are in the labels'
            units either way.
        both_orders: a cross-encoder on a symmetric pair task trains on every pair in both orders (as
            sentence-transformers' STS-B cross-encoder example does); evaluation reads the pairs as given.
        full_last_layer: while training, compute every position of the last layer even where the head reads [CLS]
            alone (:attr:`EncoderForSequenceClassification.full_last_layer`): the random path and rounding of
            earlier versions, for about a seventh more work per step.
        text_a, text_b, label, label_names, regression: a custom task's columns (see
            :func:`~ctxemb.tasks.sequence.data.read_table`). Pairs longer than ``max_length`` are cut longest-first,
            with a logged count.
    """

    head: str = field(default="checkpoint", metadata=_meta(
        'checkpoint (pooler / dense+tanh, what transformers computes), cls (W_C on the raw [CLS]), mean (mean '
        'pooling), or cosine (a bi-encoder for scored pairs, whose encoder then serves the Embedder)', choices=HEADS))
    regression_loss: str = field(default="mse", metadata=_meta(
        "the loss for scored pairs: mse (on the score; the bi-encoder: its cosine against score / max), bce (a "
        "cross-encoder: sigmoid(logit) against the score scaled to [0, 1]) or cosent (the bi-encoder: CoSENT's "
        "ranking of the cosines)", choices=SCORED_PAIR_LOSSES))
    text_a: str = field(default="sentence", metadata=_meta(
        "a custom task: the first text's column"))
    text_b: str | None = field(default=None, metadata=_meta(
        "a custom task: the second text's column, for pair tasks (default: none)"))
    label: str = field(default="label", metadata=_meta(
        "a custom task: the label's column"))
    label_names: list[str] | None = field(default=None, metadata=_meta(
        'a custom task: class names in label order, each label a name or its index (default: the sorted distinct '
        'labels of the training and dev files, of any type: strings, ints, floats, bools)'))
    regression: bool = field(default=False, metadata=_meta(
        'a custom task: the label is a real-valued score (regression), not a class'))
    both_orders: bool = field(default=False, metadata=_meta(
        "a cross-encoder on a symmetric pair task (stsb, mrpc, a custom pair task): train on every pair as (a, b) "
        "and as (b, a), twice the examples per epoch; evaluation reads the pairs as given"))
    full_last_layer: bool = field(default=False, metadata=_meta(
        "while training, compute every position of the last layer even where the head reads [CLS] alone (the random "
        "path of earlier versions; slower)"))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.task, "task", TASKS + ("custom",))
        if self.task == "custom" and (self.train_file is None or self.dev_file is None):
            raise ValueError("task 'custom' needs train_file and dev_file (a CSV, TSV, JSONL, JSON or Parquet file, "
                             "a datasets directory, or from Python a Dataset, DataFrame or list)")
        if self.columns is not None and self.task != "custom":
            raise ValueError(f"columns maps the columns of a custom task's table; task {self.task!r} reads its own")
        sequence_columns(self)  # unknown roles fail here, before a run starts
        check_choice(self.head, "head", HEADS)
        check_choice(self.regression_loss, "regression_loss", SCORED_PAIR_LOSSES)
        if self.regression_loss != "mse" and not (self.regression or self.task == "stsb"):
            raise ValueError(f"regression_loss {self.regression_loss!r} is for regression tasks (stsb, or custom with "
                             f"regression=True); task {self.task!r} is a classification task")
        if self.head == "cosine" and self.regression_loss not in PAIR_SIMILARITY_LOSSES:
            raise ValueError(f"regression_loss {self.regression_loss!r} is a cross-encoder's; the bi-encoder (head "
                             f"'cosine') trains with one of {', '.join(PAIR_SIMILARITY_LOSSES)}")
        if self.head != "cosine" and self.regression_loss not in REGRESSION_LOSSES:
            raise ValueError(f"regression_loss {self.regression_loss!r} is the bi-encoder's (head 'cosine'); a "
                             f"cross-encoder (head {self.head!r}) trains with one of {', '.join(REGRESSION_LOSSES)}")
        custom_pairs = self.task == "custom" and (self.text_b is not None or "text_b" in (self.columns or {}))
        if self.both_orders and (self.head == "cosine" or not (self.task in _SYMMETRIC_PAIR_TASKS or custom_pairs)):
            raise ValueError(f"both_orders is for a cross-encoder on a symmetric pair task "
                             f"({', '.join(_SYMMETRIC_PAIR_TASKS)}, or a custom task with text_b); got task "
                             f"{self.task!r} with head {self.head!r}")
        if self.head == "cosine" and not (self.regression or self.task == "stsb"):
            raise ValueError("head 'cosine' (a bi-encoder) is for scored pairs: task stsb, or custom with "
                             "regression=True")


def sequence_columns(config: FinetuneConfig) -> dict:
    """The custom task's column of each role: ``text_a``/``text_b``/``label`` (the fields) and no id column,
    updated by ``config.columns`` (roles ``text``/``text_a``, ``text_b``, ``label``, ``id``)."""
    return resolve_columns(config.columns, {"text_a": config.text_a, "text_b": config.text_b, "label": config.label,
                                            "id": None}, aliases={"text": "text_a"})


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "finetune"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {name: FinetuneConfig for name in TASKS + ("custom",)}
