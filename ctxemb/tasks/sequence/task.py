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
import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from ctxemb.core.validation import read_json_file
from ctxemb.tasks.sequence.features import model_inputs
from ctxemb.tasks.sequence.predict import SequencePredictor
from ctxemb.tasks.sequence.label_classes import encode_labels
from ctxemb.training.outputs import predict_outputs
from ctxemb.tasks.sequence.data import TASKS, TaskData as TableData, load_task, read_table
from ctxemb.tasks.sequence.config import FinetuneConfig, sequence_columns
from ctxemb.io.tables import class_names, is_path, open_rows
from ctxemb.training.task import Task, TaskData, feature_lengths, save_model_files
from ctxemb.metrics.classification import accuracy, binary_f1
from ctxemb.metrics.correlation import pearson, spearman
from ctxemb.modeling.sequence_classification import (PAIR_HEAD_CONFIG_KEY, EncoderForPairSimilarity,
                                                     EncoderForSequenceClassification)
from ctxemb.models.hub import resolve_model_dir
from ctxemb.embedding.st_writer import write_sentence_transformers_modules
from ctxemb.training.data import EvalBatches

logger = logging.getLogger(__name__)

# CONFIG_FILE, MODEL_DIR, REGIMES, FinetuneRunConfig and load_finetune_config live in finetuning.config;
# FinetuneConfig, HEADS and sequence_columns in finetuning.sequence_config (read without torch); model_inputs in
# finetuning.features; predict_outputs in finetuning.outputs. Importable from here as before.
__all__ = ["FinetuneConfig", "SequenceTask", "build_model", "load_task_data", "model_inputs", "predict_outputs", "task_metrics"]


def load_task_data(config: FinetuneConfig) -> TableData:
    if config.task != "custom":
        return load_task(config.task, splits=[config.train_split, config.eval_split])
    names = tuple(config.label_names) if config.label_names else None
    columns = sequence_columns(config)
    if not config.regression and names is None:  # a datasets ClassLabel column names its classes
        names = class_names(config.train_file, columns["label"], split=config.train_split)
    # without names, the labels are kept as read and their sorted distinct values become the classes
    raw = not config.regression and names is None
    read = dict(**columns, label_names=names, regression=config.regression, raw_labels=raw)
    splits = {"train": read_table(config.train_file, **read, split=config.train_split),
              "dev": read_table(config.dev_file, **read, split=config.eval_split)}
    values = None
    if raw:
        values, splits = encode_labels(splits, {"train": config.train_file, "dev": config.dev_file},
                                       column=columns["label"])
        names = tuple(str(v) for v in values)
    name = Path(config.train_file).stem if is_path(config.train_file) else "custom"
    return TableData(name=name, splits=splits, label_names=None if config.regression else names,
                     metrics=("pearson", "spearman") if config.regression else ("accuracy",), label_values=values)


# ``ctxemb finetune custom`` without --preset: the small-data recipe below this many training rows, else the other.
SMALL_DATA_ROWS = 1000


def custom_recipe(train_file, *, split: str | None = None, max_train_examples: int | None = None) -> tuple[str, int]:
    """The shipped recipe a custom task defaults to, by the size of its training split: ``"custom-small"``
    (``ctxemb/presets/finetune-custom-small.toml``: small batches, more epochs, a larger learning rate, the best dev
    epoch kept) below :data:`SMALL_DATA_ROWS` rows, else ``"custom"`` (``finetune-custom.toml``); and the rows
    counted (at most ``max_train_examples``; counting stops at :data:`SMALL_DATA_ROWS`)."""
    rows = 0
    for _ in open_rows(train_file, split=split, what="the training examples").rows:
        rows += 1
        if rows >= SMALL_DATA_ROWS:
            break
    if max_train_examples:
        rows = min(rows, max_train_examples)
    return ("custom-small" if rows < SMALL_DATA_ROWS else "custom"), rows


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


def build_model(config: FinetuneConfig, task: TableData) -> EncoderForSequenceClassification | EncoderForPairSimilarity:
    regression = task.label_names is None
    if config.head == "cosine":
        scale = max(abs(ex.label) for ex in task.splits[_train_split(config)])
        model: EncoderForSequenceClassification | EncoderForPairSimilarity = EncoderForPairSimilarity.from_pretrained(
            resolve_model_dir(config.model), score_scale=scale, loss=config.regression_loss)
        if config.regime == "frozen":
            raise ValueError("a bi-encoder has no head: regime 'frozen' would train nothing")
        return config.apply_regime(model)
    if regression and config.regression_loss == "bce":
        scores = [ex.label for ex in task.splits[_train_split(config)]]
        if min(scores) < 0:
            raise ValueError(f"regression_loss 'bce' needs scores >= 0 (targets score / max score in [0, 1]); the "
                             f"training split has {min(scores)}")
        extra = {"regression_loss": "bce", "score_scale": float(max(scores))}
    else:
        extra = {}
    model = EncoderForSequenceClassification.from_pretrained(
        resolve_model_dir(config.model), num_labels=1 if regression else len(task.label_names),
        problem="regression" if regression else "classification", head=config.head,
        id2label=None if regression else dict(enumerate(task.label_names)), new_head=config.new_head, **extra)
    model.full_last_layer = config.full_last_layer
    return config.apply_regime(model)


def _train_split(config: FinetuneConfig) -> str:
    return config.train_split if config.task != "custom" else "train"


class SequenceTask(Task):
    """A sentence- or pair-level task of :data:`~ctxemb.tasks.sequence.data.TASKS` or ``"custom"`` (a user's
    TSV/JSONL table): classification (accuracy; F1 for MRPC), or regression (Spearman) for STS-B and custom
    regression tasks. Config: :class:`FinetuneConfig`."""

    family = "sequence"
    config_class = FinetuneConfig

    def __init__(self, name: str):
        self.name = name
        self.description = f"sequence-level task {name}"

    def primary(self, config: FinetuneConfig) -> tuple[str, bool]:
        if config.task == "custom":
            return ("spearman" if config.regression else "accuracy"), True
        return _PRIMARY[config.task], True

    def read(self, config: FinetuneConfig) -> TaskData:
        table = load_task_data(config)
        train = list(table.splits[_train_split(config)])
        if config.both_orders:
            train += [dataclasses.replace(ex, text_a=ex.text_b, text_b=ex.text_a, id=f"{ex.id}:b-a") for ex in train]
        evaluation = table.splits[config.eval_split if config.task != "custom" else "dev"]
        return TaskData(train=train, eval=list(evaluation), labels=table.label_names,
                        info={"table": table, "metrics": tuple(table.metrics), "name": table.name})

    def build_model(self, config: FinetuneConfig, data: TaskData):
        return build_model(config, data.info["table"])  # the cosine head's score scale: the whole training split

    def encode(self, config: FinetuneConfig, tokenizer, examples, data: TaskData):
        return model_inputs(tokenizer, examples, head=config.head, regression=data.labels is None,
                            max_length=config.max_length)

    def evaluator(self, config: FinetuneConfig, tokenizer, data: TaskData, features, collate):
        # visited longest first (fewer padded positions), outputs back in dev order
        batches = EvalBatches(features, batch_size=max(config.batch_size, 64), collate=collate,
                              lengths=feature_lengths(features))
        labels = np.array([ex.label for ex in data.eval])
        names = data.info["metrics"]
        return lambda m: task_metrics(names, labels, predict_outputs(m, batches, progress=config.train.progress_bar))

    def save(self, model, directory, config: FinetuneConfig, data: TaskData, tokenizer, *, train_config) -> None:
        # the classes in id order as the data gave them (a custom task's ints stay ints): what the predictors return
        values = data.info["table"].label_values or data.labels
        save_model_files(model, directory, config, tokenizer, train_config=train_config,
                         task_name=data.info["name"], metrics=list(data.info["metrics"]),
                         **({} if values is None else {"label_values": list(values)}))
        if config.head == "cosine":
            # a sentence-level model: saved with the pooling it was trained with (last-layer mean, compared by
            # cosine), so that SentenceTransformer(dir) and Embedder.embed_sentences give the trained vectors
            write_sentence_transformers_modules(directory, pooling="mean", layers=[-1], normalize=False,
                                                max_seq_length=config.max_length, similarity_fn_name="cosine")

    def prediction_kind(self, saved) -> str:
        return "sequence"

    def predictor(self, model_dir, *, device="cpu") -> SequencePredictor:
        """Labels and scores of texts or pairs (:class:`~ctxemb.tasks.sequence.predict.SequencePredictor`)."""
        return SequencePredictor.from_pretrained(model_dir, device=device)

    def load(self, model_dir):
        path = resolve_model_dir(model_dir)
        if PAIR_HEAD_CONFIG_KEY in read_json_file(Path(path) / "config.json", "config file"):
            return EncoderForPairSimilarity.from_pretrained(path)
        return EncoderForSequenceClassification.from_pretrained(path)


# The metric each built-in task selects by (the first of its GLUE metrics; MRPC: F1 as GLUE ranks it).
_PRIMARY = {"sst2": "accuracy", "mrpc": "f1", "rte": "accuracy", "snli": "accuracy", "stsb": "spearman"}


def builtin_tasks() -> list:
    """This family's tasks, for the registry (:mod:`ctxemb.tasks.builtin`)."""
    return [SequenceTask(name) for name in TASKS + ("custom",)]
