"""Sequence-level fine-tuning on the shared training loop: classification, pair classification and regression
(J&M 11.4.1-11.4.2): SST-2, MRPC, RTE, SNLI, STS-B, or a user's own TSV/JSONL file.

One :class:`FinetuneConfig` names the task, the encoder to start from, the head and the regime (full, frozen
encoder, only the last k layers; optional layer-wise learning-rate decay) and the loop's settings. The run
evaluates on the dev split once per epoch and leaves one directory, ``<out_dir>/model``: the encoder in HF layout
with its head and label map (transformers' ``AutoModelForSequenceClassification`` loads it; so does our
``Embedder``), the tokenizer, and ``finetune_config.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Sequence

import numpy as np
import torch

from ctxemb.finetuning.features import Collator, PairCollator, encode_examples, encode_pairs_separately
from ctxemb.finetuning.readers import TASKS, TaskData, TextExample, load_task, read_table
from ctxemb.loading import load_tokenizer
from ctxemb.metrics.classification import accuracy, binary_f1
from ctxemb.metrics.correlation import pearson, spearman
from ctxemb.modeling.task_heads import EncoderForPairSimilarity, EncoderForSequenceClassification
from ctxemb.paths import atomic_write
from ctxemb.registry import DEFAULT_MODEL, resolve_model_dir
from ctxemb.tokenization import copy_tokenizer_files
from ctxemb.training.data import DatasetBatches, EvalBatches, move_to_device
from ctxemb.training.distributed import distributed_session
from ctxemb.training.loop import TrainConfig, TrainResult, epochs_to_steps, seed_everything, train
from ctxemb.training.optim import layerwise_lr_groups

logger = logging.getLogger(__name__)

Regime = Literal["full", "frozen", "last_k"]
REGIMES: tuple[str, ...] = ("full", "frozen", "last_k")
HEADS: tuple[str, ...] = ("checkpoint", "cls", "mean", "cosine")
MODEL_DIR = "model"
CONFIG_FILE = "finetune_config.json"


@dataclass
class FinetuneRunConfig:
    """The settings every fine-tuning run shares (sequence level here, token level in
    :mod:`ctxemb.finetuning.token_tasks`), validated in one place.

    Attributes:
        task: the task's name.
        model: the encoder to fine-tune (name or HF-format directory).
        regime: ``"full"``, ``"frozen"`` (head only) or ``"last_k"`` (the last ``last_k`` layers and the head).
        last_k: layers trained with ``regime="last_k"``.
        layerwise_lr_decay: each layer below the top gets this factor more of the learning rate (1 = off).
        epochs: passes over the training split (sets the loop's max_steps).
        batch_size: examples per micro-batch (per process).
        max_length: longest model input in tokens.
        train_split, eval_split: the splits to train on and to evaluate on each epoch (tune on dev).
        max_train_examples: use only the first N training examples (None: all).
        train_file, dev_file: a task of the user's own files.
        train: the loop's settings (``out_dir`` required; ``max_steps`` is set from ``epochs``).
    """

    task: str
    model: str = DEFAULT_MODEL
    regime: Regime = "full"
    last_k: int = 2
    layerwise_lr_decay: float = 1.0
    epochs: float = 3.0
    batch_size: int = 32
    max_length: int = 128
    train_split: str = "train"
    eval_split: str = "dev"
    max_train_examples: int | None = None
    train_file: str | None = None
    dev_file: str | None = None
    train: TrainConfig = field(default_factory=lambda: TrainConfig(learning_rate=2e-5, max_steps=1))

    # positive-int fields beyond the shared ones, checked by __post_init__ (subclasses extend it)
    _POSITIVE_INTS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if isinstance(self.train, Mapping):
            self.train = TrainConfig.from_dict({"max_steps": 1, **self.train})
        if self.regime not in REGIMES:
            raise ValueError(f"regime must be one of {REGIMES}; got {self.regime!r}")
        if not (0 < self.layerwise_lr_decay <= 1):
            raise ValueError(f"layerwise_lr_decay must be in (0, 1]; got {self.layerwise_lr_decay}")
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"epochs must be a positive number; got {self.epochs}")
        for name in ("batch_size", "max_length", "last_k") + self._POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        if self.max_train_examples is not None and (not isinstance(self.max_train_examples, int)
                                                    or self.max_train_examples < 1):
            raise ValueError(f"max_train_examples must be a positive int or None; got {self.max_train_examples!r}")
        if not self.train.out_dir:
            raise ValueError("train.out_dir is required: checkpoints, metrics and the model go there")

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "train"}
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


@dataclass
class FinetuneConfig(FinetuneRunConfig):
    """A sentence- or pair-level fine-tuning run: the shared settings (:class:`FinetuneRunConfig`) and these.

    Attributes:
        task: one of :data:`~ctxemb.finetuning.readers.TASKS`, or ``"custom"`` with ``train_file``/``dev_file``.
        head: ``"checkpoint"`` (the checkpoint's form: BERT's pooler, RoBERTa/MPNet's dense+tanh), ``"cls"`` (the
            book's W_C on the raw [CLS] vector) or ``"mean"`` (mean pooling, for sentence-trained encoders): a
            cross-encoder reading both texts at once; or ``"cosine"``: a bi-encoder for scored pairs (each text
            alone, mean pooling, cosine regressed onto the score; no head, so the encoder serves ``Embedder``).
        text_a, text_b, label, label_names, regression: a custom task's columns (see
            :func:`~ctxemb.finetuning.readers.read_table`). Pairs longer than ``max_length`` are cut longest-first,
            with a logged count.
    """

    head: str = "checkpoint"
    text_a: str = "sentence"
    text_b: str | None = None
    label: str = "label"
    label_names: list[str] | None = None
    regression: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task not in TASKS + ("custom",):
            raise ValueError(f"task must be one of {TASKS + ('custom',)}; got {self.task!r}")
        if self.task == "custom" and not (self.train_file and self.dev_file):
            raise ValueError("task 'custom' needs train_file and dev_file (TSV or JSONL with named columns)")
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}; got {self.head!r}")
        if self.head == "cosine" and not (self.regression or self.task == "stsb"):
            raise ValueError("head 'cosine' (a bi-encoder) is for scored pairs: task stsb or a custom regression task")


@dataclass
class FinetuneResult:
    """The loop's result, the dev metrics after each epoch and at the end, and where the model is."""

    train: TrainResult
    eval_history: list[dict[str, float]]
    final_metrics: dict[str, float]
    model_dir: Path
    eval_seconds: float = 0.0  # of the run's wall time, spent evaluating (the rest is training and saving)


def load_task_data(config: FinetuneConfig) -> TaskData:
    if config.task != "custom":
        return load_task(config.task, splits=[config.train_split, config.eval_split])
    names = tuple(config.label_names) if config.label_names else None
    read = dict(text_a=config.text_a, text_b=config.text_b, label=config.label, label_names=names,
                regression=config.regression)
    splits = {"train": read_table(config.train_file, **read), "dev": read_table(config.dev_file, **read)}
    if not config.regression and names is None:
        labels = sorted({ex.label for ex in splits["train"]})
        names = tuple(str(x) for x in range(max(labels) + 1))
    return TaskData(name=Path(config.train_file).stem, splits=splits, label_names=None if config.regression else names,
                    metrics=("pearson", "spearman") if config.regression else ("accuracy",))


def task_metrics(names: Sequence[str], labels: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """The task's metrics from gold labels (N,) and model outputs: logits (N, C), or scores (N,) for regression.
    Correlations and accuracies are x 100, as GLUE reports them."""
    out = {}
    pred = outputs if outputs.ndim == 1 else outputs.argmax(-1)
    for name in names:
        if name == "accuracy":
            out[name] = 100 * accuracy(labels, pred)
        elif name == "f1":
            out[name] = 100 * binary_f1(labels, pred)
        elif name == "pearson":
            out[name] = 100 * pearson(labels, pred)
        elif name == "spearman":
            out[name] = 100 * spearman(labels, pred)
        else:
            raise ValueError(f"unknown metric {name!r}")
    return out


@torch.inference_mode()
def predict_outputs(model: EncoderForSequenceClassification, batches) -> np.ndarray:
    """Logits (N, C), or scores (N,) for regression, over ``batches`` in order."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outs = []
    for batch in batches:
        batch = {k: v for k, v in move_to_device(batch, device).items() if k != "labels"}
        logits = model(**batch).logits.float().cpu()
        outs.append(logits[:, 0] if model.problem == "regression" else logits)
    model.train(was_training)
    return torch.cat(outs).numpy()


def build_model(config: FinetuneConfig, task: TaskData) -> EncoderForSequenceClassification | EncoderForPairSimilarity:
    regression = task.label_names is None
    if config.head == "cosine":
        scale = max(abs(ex.label) for ex in task.splits[_train_split(config)])
        model: EncoderForSequenceClassification | EncoderForPairSimilarity = EncoderForPairSimilarity.from_pretrained(
            resolve_model_dir(config.model), score_scale=scale)
        if config.regime == "frozen":
            raise ValueError("a bi-encoder has no head: regime 'frozen' would train nothing")
        return config.apply_regime(model)
    model = EncoderForSequenceClassification.from_pretrained(
        resolve_model_dir(config.model), num_labels=1 if regression else len(task.label_names),
        problem="regression" if regression else "classification", head=config.head,
        id2label=None if regression else dict(enumerate(task.label_names)))
    return config.apply_regime(model)


def model_inputs(tokenizer, examples: Sequence[TextExample], *, head: str, regression: bool, max_length: int,
                 with_labels: bool = True) -> tuple[list, Collator | PairCollator]:
    """The encoded examples and their collator: both texts in one input for a cross-encoder head, each text alone
    for the bi-encoder (``head="cosine"``)."""
    if head == "cosine":
        return (encode_pairs_separately(tokenizer, examples, max_length=max_length, with_labels=with_labels),
                PairCollator(tokenizer.pad_token_id))
    return (encode_examples(tokenizer, examples, max_length=max_length, with_labels=with_labels),
            Collator(tokenizer.pad_token_id, regression=regression))


def _train_split(config: FinetuneConfig) -> str:
    return config.train_split if config.task != "custom" else "train"


def run_finetuning(config: FinetuneConfig) -> FinetuneResult:
    """Fine-tune, evaluating on the eval split each epoch; save the model directory (see the module docstring)."""
    task = load_task_data(config)
    train_examples: list[TextExample] = task.splits[_train_split(config)]
    eval_examples = task.splits[config.eval_split if config.task != "custom" else "dev"]
    if config.max_train_examples:
        train_examples = train_examples[:config.max_train_examples]
    seed_everything(config.train.seed)  # the new head's initialisation belongs to the run's seed
    tokenizer = load_tokenizer(config.model)
    model = build_model(config, task)
    train_features, collate = model_inputs(tokenizer, train_examples, head=config.head,
                                           regression=task.label_names is None, max_length=config.max_length)
    eval_features, _ = model_inputs(tokenizer, eval_examples, head=config.head, regression=task.label_names is None,
                                    max_length=config.max_length)
    eval_labels = np.array([ex.label for ex in eval_examples])
    history: list[dict[str, float]] = []
    with distributed_session(config.train.device) as ctx:
        source = DatasetBatches(train_features, batch_size=config.batch_size, collate=collate, seed=config.train.seed,
                                rank=ctx.rank, world_size=ctx.world_size)
        per_epoch = source.batches_per_epoch
        steps = epochs_to_steps(config.epochs, per_epoch, config.train.grad_accumulation_steps)
        train_config = dataclasses.replace(config.train, max_steps=steps,
                                           eval_every=config.train.eval_every or max(1, steps // math.ceil(config.epochs)))
        eval_batches = EvalBatches(eval_features, batch_size=max(config.batch_size, 64), collate=collate)

        eval_seconds = [0.0]

        def eval_fn(m) -> dict[str, float]:
            t = time.perf_counter()
            metrics = task_metrics(task.metrics, eval_labels, predict_outputs(m, eval_batches))
            eval_seconds[0] += time.perf_counter() - t
            history.append(metrics)
            return metrics

        groups = layerwise_lr_groups(model, config.layerwise_lr_decay, config.train.weight_decay) \
            if config.layerwise_lr_decay < 1 else None
        result = train(model, source, train_config, eval_fn=eval_fn, param_groups=groups)
        model_dir = Path(config.train.out_dir) / MODEL_DIR
        if ctx.is_main:
            model.save_pretrained(model_dir)
            copy_tokenizer_files(resolve_model_dir(config.model), model_dir, tokenizer)
            with atomic_write(model_dir / CONFIG_FILE) as f:
                json.dump({**config.to_dict(), "train": train_config.to_dict(), "task_name": task.name,
                           "metrics": list(task.metrics)}, f, indent=2)
    return FinetuneResult(train=result, eval_history=history, final_metrics=history[-1] if history else {},
                          model_dir=model_dir, eval_seconds=eval_seconds[0])
