"""The settings every fine-tuning run shares (:class:`FinetuneRunConfig`) and the names of what a run saves.

A task that needs nothing beyond these (a user's own task, see ``docs/adding-a-task.md``) uses this class as its
configuration; the built-in families extend it (:class:`~ctxemb.tasks.sequence.task.FinetuneConfig`,
:class:`~ctxemb.tasks.token.task.TokenFinetuneConfig`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping

from ctxemb.core.validation import check_choice, check_int, check_probability, read_json_file
from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.models.hub import DEFAULT_MODEL
from ctxemb.training.config import TrainConfig

Regime = Literal["full", "frozen", "last_k"]
REGIMES: tuple[str, ...] = ("full", "frozen", "last_k")
CONFIG_FILE = "finetune_config.json"

__all__ = ["CONFIG_FILE", "REGIMES", "FinetuneRunConfig", "Regime", "load_finetune_config"]


def _positive_int(value: Any, name: str) -> None:
    try:
        check_int(value, name, low=1)
    except TypeError as e:  # a bad setting is a ValueError naming it, whatever its type
        raise ValueError(str(e)) from None


@dataclass
class FinetuneRunConfig:
    """The settings every fine-tuning run shares (sequence level in :mod:`ctxemb.tasks.sequence.task`, token level in
    :mod:`ctxemb.tasks.token.task`, a user's own task as it is), validated in one place.

    Attributes:
        task: the task's name.
        model: the encoder to fine-tune (name or HF-format directory).
        new_head: with a fine-tuned ``model``, ignore its head and start a new one on its encoder.
        intermediate: None, or the settings of a first run on another task (``task``, that task's fields,
            ``train``) whose encoder this run starts from (:mod:`ctxemb.training.intermediate`).
        regime: ``"full"``, ``"frozen"`` (head only) or ``"last_k"`` (the last ``last_k`` layers and the head).
        last_k: layers trained with ``regime="last_k"``.
        layerwise_lr_decay: each layer below the top gets this factor more of the learning rate (1 = off).
        epochs: passes over the training split (sets the loop's max_steps).
        batch_size: examples per micro-batch (per process).
        max_length: longest model input in tokens.
        train_split, eval_split: the splits to train on and to evaluate on each epoch (tune on dev).
        max_train_examples: use only the first N training examples (None: all).
        max_eval_examples: evaluate on only the first N examples of the eval split (None: all): a smoke run's
            cheap evaluation, whose metrics are those of the N examples.
        train_file, dev_file: a task of the user's own data: a file path, or (from Python) any table
            :func:`ctxemb.io.tables.open_rows` reads (a ``datasets.Dataset``/``DatasetDict``, a
            ``pandas.DataFrame``, a list of dicts or tuples). Saved settings describe an in-memory table by its
            type, size and a content hash.
        columns: the table's column for each role the task reads (e.g. ``{"text": "sentence", "label": "score"}``;
            token tasks: ``tokens``, ``tags``); None: the task's defaults.
        dropout: one dropout probability for the whole model while it trains (embeddings, attention, feed-forward,
            head: :func:`ctxemb.modeling.dropout.set_dropout`); None keeps the checkpoint's (0.1 for BERT and
            MiniLM).
        group_by_length: batch training examples of similar length together (sorted within mega-batches of 50
            batches, the batches shuffled; see :class:`~ctxemb.training.data.DatasetBatches`): less padding, so
            faster steps on variable-length data. The run record gives the padding fraction either way.
        recipe_preset: the preset the settings started from and why it was chosen (``ctxemb finetune`` records it,
            e.g. ``"finetune-custom-small.toml (12 training rows, fewer than 1,000)"``); None from Python.
        train: the loop's settings (``out_dir`` required; ``max_steps`` is set from ``epochs``).
    """

    task: str = field(metadata=_meta(
        "the task's name", cli=False))
    model: str = field(default=DEFAULT_MODEL, metadata=_meta(
        'the encoder to start from'))
    new_head: bool = field(default=False, metadata=_meta(
        "start from the encoder of a fine-tuned model with a new head, its saved head ignored (intermediate-task "
        "transfer: e.g. --model runs/snli/model --new-head for RTE); bi-encoders have no head"))
    intermediate: dict[str, Any] | None = field(default=None, metadata=_meta(
        "an intermediate stage trained first (a preset's [intermediate] table: task, its settings, [train]); the "
        "run then starts from its encoder with a new head (ctxemb.training.intermediate)", cli=False))
    regime: Regime = field(default="full", metadata=_meta(
        'full, frozen (the head only) or last_k (the top --last-k layers and the head); '
        '--trainable-layers says the same in one option'))
    last_k: int = field(default=2, metadata=_meta(
        'layers trained with --regime last_k', type='positive_int'))
    layerwise_lr_decay: float = field(default=1.0, metadata=_meta(
        'each layer below the top gets this factor of the learning rate of the one above (e.g. 0.8; 1 = '
        'off)', type='fraction'))
    epochs: float = field(default=3.0, metadata=_meta(
        'passes over the training split', type='positive_float'))
    batch_size: int = field(default=32, metadata=_meta(
        'examples per micro-batch (per process)', type='positive_int'))
    max_length: int = field(default=128, metadata=_meta(
        'longest model input in tokens (QA: 384 unless set)', type='positive_int'))
    train_split: str = field(default="train", metadata=_meta(
        'the split to train on'))
    eval_split: str = field(default="dev", metadata=_meta(
        'the split evaluated each epoch (tune on dev)'))
    max_train_examples: int | None = field(default=None, metadata=_meta(
        'use only the first N training examples', type='positive_int'))
    max_eval_examples: int | None = field(default=None, metadata=_meta(
        'evaluate on only the first N examples of the eval split (a smoke run: the dev metrics are those of the N)',
        type='positive_int'))
    train_file: Any = field(default=None, metadata=_meta(
        "custom/conll-file/squad-file: the training data: a CSV, TSV, JSONL, JSON or Parquet file, or a directory "
        "saved by datasets' save_to_disk (conll-file: a CoNLL file, or a JSONL/JSON/Parquet/datasets table with "
        "tokens and tags list columns; squad-file: SQuAD JSON, or a table of questions in HF squad's columns)"))
    dev_file: Any = field(default=None, metadata=_meta(
        "the dev data evaluated each epoch (any format --train-file takes; a saved DatasetDict gives its "
        "--eval-split, 'dev' falling back to 'validation')"))
    columns: dict[str, Any] | None = field(default=None, metadata=_meta(
        "the table's column for each role, ROLE=COLUMN,...: custom tasks text (or text_a), text_b, label, id (e.g. "
        "text=sentence,label=score); conll-file tables tokens, tags (e.g. tags=ner_tags); squad-file tables id, "
        "title, context, question, answers", type="columns"))
    dropout: float | None = field(default=None, metadata=_meta(
        "one dropout probability for the whole model while it trains (embeddings, attention, feed-forward, head; "
        "0 turns it off); default: the checkpoint's (0.1 for MiniLM)"))
    group_by_length: bool = field(default=True, metadata=_meta(
        "batch training examples of similar length together (sorted within mega-batches of 50 batches, the "
        "batches shuffled): less padding"))
    recipe_preset: str | None = field(default=None, metadata=_meta(
        "the preset the run's settings started from, and why (recorded by ctxemb finetune)", cli=False))
    train: TrainConfig | None = field(default=None, metadata=_meta("the loop's settings", cli=False))

    #: The loop's settings a run of this config starts from, under a preset's ``[train]`` and the flags
    #: (:func:`loop_settings`): the one place a family's default learning rate is declared.
    TRAIN_DEFAULTS: ClassVar[Mapping[str, Any]] = {"learning_rate": 2e-5, "warmup_ratio": 0.1}
    # positive-int fields beyond the shared ones, checked by __post_init__ (subclasses extend it)
    _POSITIVE_INTS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if isinstance(self.train, Mapping):
            self.train = TrainConfig.from_dict(dict(self.train))
        check_choice(self.regime, "regime", REGIMES)
        if self.intermediate is not None and not (isinstance(self.intermediate, Mapping)
                                                  and isinstance(self.intermediate.get("task"), str)):
            raise ValueError("intermediate must be None or a table of settings naming its task (e.g. {'task': "
                             f"'snli', 'epochs': 1}}); got {self.intermediate!r}")
        if self.intermediate is not None:
            self.intermediate = dict(self.intermediate)
        if not isinstance(self.new_head, bool):
            raise ValueError(f"new_head must be True or False; got {self.new_head!r}")
        if not (0 < self.layerwise_lr_decay <= 1):
            raise ValueError(f"layerwise_lr_decay must be in (0, 1]; got {self.layerwise_lr_decay}")
        check_probability(self.dropout, "dropout", allow_none=True)
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"epochs must be a positive number; got {self.epochs}")
        for name in ("batch_size", "max_length", "last_k") + self._POSITIVE_INTS:
            _positive_int(getattr(self, name), name)
        for name in ("max_train_examples", "max_eval_examples"):
            if getattr(self, name) is not None:
                _positive_int(getattr(self, name), name)
        if self.train is None or not self.train.out_dir:
            raise ValueError("train.out_dir is required: checkpoints, metrics and the model go there")

    def to_dict(self) -> dict[str, Any]:
        from ctxemb.io.tables import describe_source

        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "train"}
        d["train_file"], d["dev_file"] = describe_source(self.train_file), describe_source(self.dev_file)
        d["train"] = self.train.to_dict()
        return d

    def apply_regime(self, model):
        """Put a freshly built model in training mode and freeze what ``regime`` leaves untrained; returns it."""
        model.train()
        if self.regime == "frozen":
            model.freeze_encoder()
        elif self.regime == "last_k":
            model.freeze_all_but_last(self.last_k)
        return model


def loop_settings(config_class: type, *layers: Mapping[str, Any] | None) -> TrainConfig:
    """The loop's settings of a run of ``config_class``: its ``TRAIN_DEFAULTS``, then each of ``layers`` in order
    (a preset's ``[train]`` table, then the flags); None layers are skipped.

    Raises:
        ValueError: a setting :class:`TrainConfig` refuses (naming it).
    """
    merged: dict[str, Any] = dict(config_class.TRAIN_DEFAULTS)
    for layer in layers:
        merged.update(layer or {})
    return TrainConfig.from_dict(merged)


def load_finetune_config(model_dir: str | Path) -> dict[str, Any] | None:
    """The ``finetune_config.json`` a run saved beside the model, or None (e.g. a transformers checkpoint)."""
    path = Path(model_dir) / CONFIG_FILE
    return read_json_file(path, "fine-tuning config") if path.is_file() else None
