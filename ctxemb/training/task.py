"""The task contract: what one training task defines (registered by name in :mod:`ctxemb.training.registry`).

A task is one object that owns everything particular to it (flair's ``Model`` contract, without the class
hierarchy): reading its data, turning examples into features and batches, building its model, evaluating with a
declared primary metric, saving, loading and predicting. :func:`ctxemb.training.runner.run_task` trains any
task through the one run skeleton (:mod:`ctxemb.training.recipe`); ``ctxemb finetune NAME``, ``ctxemb predict``
and ``benchmarks/finetune.py`` look tasks up here. A user's task registers the same way as the built-in ones::

    from ctxemb.training.registry import register_task
    register_task(MyTask())          # then: run_task(get_task("my-task"), FinetuneRunConfig(...))

Methods (``config`` is the task's ``config_class``; ``data`` is what :meth:`Task.read` returned):

- ``read(config) -> TaskData``: the training and evaluation examples and the label names.
- ``build_model(config, data) -> nn.Module``: the model in training mode, regime applied
  (``config.apply_regime``); ``model(**batch)`` returns ``.loss`` for the loop.
- ``encode(config, tokenizer, examples, data) -> (features, collate)``: features and their collator
  (``collate(list_of_features, rng) -> batch``).
- ``evaluator(config, tokenizer, data, features, collate) -> (model -> {metric: number})``: the dev evaluation;
  its dict holds ``primary_metric``.
- ``param_groups(model, config) -> list | None``: AdamW groups (None: the loop's default).
- ``save(model, directory, config, data, tokenizer, train_config=...)``: the model's files (weights,
  ``config.json`` with its
  ``architectures``, tokenizer, ``finetune_config.json``); the skeleton adds the stamp and the run record.
- ``load(model_dir) -> model`` and ``predict(model, tokenizer, inputs, saved) -> list``: predictions on raw inputs
  (``saved`` is the run's ``finetune_config.json``).

Recipes whose data are not a list of examples to encode (pretraining's token shards and masked batches, sense
training's planned batches) keep the same contract and override the run-level hooks, all with fine-tuning's
defaults: ``make_data(config, tokenizer, data, model, ctx) -> RunData`` (the batch source, the evaluator or
held-out batches), ``load_tokenizer(config)``, ``run_spec(config, data)`` (recipe name, stamp label, settings,
epochs, the settings free to change on resume), ``callbacks(config, data)``, ``after_train(outcome, config, data)``
and ``extra_record(outcome, config, data)``. ``command`` names the CLI command that trains the task
(``ctxemb finetune NAME``, ``ctxemb pretrain``, ``ctxemb wsd train``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ctxemb.training.task_config import CONFIG_FILE, FinetuneRunConfig, load_finetune_config
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import copy_tokenizer_files
from ctxemb.training.config import TrainConfig
from ctxemb.training.data import DatasetBatches
from ctxemb.training.recipe import RunData, RunResult, RunSpec

logger = logging.getLogger(__name__)


@dataclass
class TaskData:
    """A task's examples: ``train`` and ``eval`` (any example type the task's ``encode`` reads), the label names in
    id order (None for regression and span extraction), and anything else the task wants to keep (``info``)."""

    train: list
    eval: list
    labels: list[str] | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Task:
    """The contract of a fine-tuning task (see the module docstring for the methods a task defines).

    Attributes:
        name: the registry name (``ctxemb finetune NAME``).
        family: what kind of model it trains (``"sequence"``, ``"token"``, ``"span"``, ``"qa"``, or a user's).
        primary_metric: the evaluation key that model selection and early stopping follow.
        greater_is_better: whether a higher ``primary_metric`` is better.
        config_class: the settings dataclass (:class:`FinetuneRunConfig` or a subclass).
        description: one line for ``--help``.
        command: the CLI command that trains it (``"finetune"``; ``"pretrain"``, ``"wsd train"``).
    """

    name: str = ""
    family: str = "custom"
    primary_metric: str | None = "accuracy"
    greater_is_better: bool = True
    config_class: type = FinetuneRunConfig
    description: str = ""
    command: str = "finetune"

    def primary(self, config) -> tuple[str | None, bool]:
        """The primary metric and whether greater is better for this run (a task may depend on its head; None:
        the run evaluates nothing that could select a checkpoint)."""
        return self.primary_metric, self.greater_is_better

    # ---- the run: what the skeleton needs (fine-tuning's defaults) ----------------------------------------------
    def load_tokenizer(self, config):
        """The tokenizer the run encodes with (default: ``config.model``'s)."""
        from ctxemb.modeling.loading import load_tokenizer

        return load_tokenizer(config.model)

    def run_spec(self, config, data: TaskData) -> RunSpec:
        """The run's description for the skeleton: recipe name, stamp label, settings (compared on resume),
        the loop's settings, epochs, primary metric."""
        primary, greater = self.primary(config)
        settings = {k: v for k, v in config.to_dict().items() if k != "train"}
        return RunSpec(recipe=f"finetune-{self.family}", label=f"finetune-{stamp_label(self.name)}",
                       settings=settings, train=config.train, epochs=config.epochs, primary_metric=primary,
                       greater_is_better=greater)

    def limit(self, config, data: TaskData) -> TaskData:
        """Keep the first ``config.max_train_examples`` training examples and the first ``config.max_eval_examples``
        evaluation examples (each when set); a cut eval split is logged, and its full size kept in
        ``data.info["eval_examples_available"]`` for the run record."""
        if getattr(config, "max_train_examples", None):
            data.train = data.train[:config.max_train_examples]
        cap = getattr(config, "max_eval_examples", None)
        if cap and len(data.eval) > cap:
            data.info["eval_examples_available"] = len(data.eval)
            logger.info("evaluating on the first %d of the %d %s examples (max_eval_examples)", cap, len(data.eval),
                        getattr(config, "eval_split", "eval"))
            data.eval = data.eval[:cap]
        return data

    def make_data(self, config, tokenizer, data: TaskData, model, ctx) -> RunData:
        """Features and batches (``encode``, shuffled :class:`~ctxemb.training.data.DatasetBatches` per rank)
        and the evaluator (``evaluator``), called by the skeleton right after ``build_model``."""
        train_features, collate = self.encode(config, tokenizer, data.train, data)
        eval_features, eval_collate = self.encode(config, tokenizer, data.eval, data)
        lengths = feature_lengths(train_features)  # None for features without input_ids (a user's task)
        grouped = getattr(config, "group_by_length", False) and lengths is not None
        source = DatasetBatches(train_features, batch_size=config.batch_size, collate=collate,
                                seed=config.train.seed, rank=ctx.rank, world_size=ctx.world_size,
                                lengths=lengths if grouped else None)
        stats = {"train_examples": len(data.train), "eval_examples": len(data.eval),
                 "train_features": len(train_features), "eval_features": len(eval_features),
                 "group_by_length": grouped}
        if "eval_examples_available" in data.info:  # max_eval_examples cut the eval split
            stats["eval_examples_available"] = data.info["eval_examples_available"]
        if lengths is not None:  # the share of padding in the first epoch's batches, as trained
            stats["padding_fraction"] = round(source.padding_fraction(0, lengths=lengths), 4)
            logger.info("training batches %s: padding is %.1f%% of the positions",
                        "grouped by length" if grouped else "drawn at random", 100 * stats["padding_fraction"])
        return RunData(source=source, evaluate=self.evaluator(config, tokenizer, data, eval_features, eval_collate),
                       param_groups=self.param_groups(model, config), stats=stats)

    def callbacks(self, config, data: TaskData) -> list:
        """Extra loop callbacks of this run (default none)."""
        return []

    def after_train(self, outcome: RunResult, config, data: TaskData) -> None:
        """Called after training, before saving (e.g. to calibrate on dev, or to keep what ``save`` writes in
        ``data.info``)."""

    def extra_record(self, outcome: RunResult, config, data: TaskData) -> Mapping[str, Any] | None:
        """Task-specific entries for the run record (default none)."""
        return None

    def read(self, config: FinetuneRunConfig) -> TaskData:
        raise NotImplementedError(f"task {self.name!r} does not define read(config)")

    def build_model(self, config: FinetuneRunConfig, data: TaskData):
        raise NotImplementedError(f"task {self.name!r} does not define build_model(config, data)")

    def encode(self, config: FinetuneRunConfig, tokenizer, examples: Sequence, data: TaskData):
        raise NotImplementedError(f"task {self.name!r} does not define encode(config, tokenizer, examples, data)")

    def evaluator(self, config: FinetuneRunConfig, tokenizer, data: TaskData, features: list, collate):
        raise NotImplementedError(f"task {self.name!r} does not define evaluator(...)")

    def param_groups(self, model, config: FinetuneRunConfig) -> list[dict] | None:
        from ctxemb.training.optim import layerwise_lr_groups

        if config.layerwise_lr_decay < 1:
            return layerwise_lr_groups(model, config.layerwise_lr_decay, config.train.weight_decay)
        return None

    def save(self, model, directory: Path, config: FinetuneRunConfig, data: TaskData, tokenizer, *,
             train_config: TrainConfig) -> None:
        """Default: :func:`save_model_files` (the model's ``save_pretrained``, the tokenizer, the settings)."""
        save_model_files(model, directory, config, tokenizer, train_config=train_config)

    def load(self, model_dir):
        raise NotImplementedError(f"task {self.name!r} does not define load(model_dir)")

    def predict(self, model, tokenizer, inputs: Sequence, saved: dict[str, Any]) -> list:
        raise NotImplementedError(f"task {self.name!r} does not define predict(...)")

    # ---- predictions: every saved model, built-in or not, is predicted through its task -------------------------
    def prediction_kind(self, saved: Mapping[str, Any]) -> str:
        """What ``ctxemb predict`` feeds the model and prints: ``"sequence"`` (texts, or pairs), ``"token"``
        (words of a text, or a CoNLL file), ``"qa"`` (a context and a question), or ``"inputs"`` (each input a JSON
        value, given to :meth:`predict`; the default). ``saved`` is the run's ``finetune_config.json``."""
        return "inputs"

    def predictor(self, model_dir, *, device="cpu"):
        """The object whose ``predict(inputs)`` gives this task's predictions from a saved model (default:
        :meth:`load` and :meth:`predict` with the model's tokenizer)."""
        return TaskPredictor(self, model_dir, device=device)


class TaskPredictor:
    """A saved model of a task with its tokenizer: ``predict(inputs)`` calls the task's ``predict``."""

    def __init__(self, task: Task, model_dir, *, device="cpu"):
        from ctxemb.models.tokenization import Tokenizer

        path = Path(resolve_model_dir(model_dir))
        self.task, self.saved = task, load_finetune_config(path) or {}
        self.model = task.load(path).to(device).eval()
        self.tokenizer = Tokenizer.from_pretrained(path)

    def predict(self, inputs: Sequence) -> list:
        return self.task.predict(self.model, self.tokenizer, inputs, self.saved)


def stamp_label(name: str) -> str:
    """``name`` with every character a training-run stamp cannot hold replaced by ``-``."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name)


def feature_lengths(features) -> list[int] | None:
    """Each training feature's length in tokens (both texts of a bi-encoder pair), or None when the features do not
    carry ``input_ids``."""
    out = []
    for f in features:
        ids = getattr(f, "input_ids", None)
        if ids is None:
            return None
        out.append(len(ids) + len(getattr(f, "input_ids_b", None) or ()))
    return out


def save_model_files(model, directory: Path, config: FinetuneRunConfig, tokenizer, *, train_config: TrainConfig,
                     **extra: Any) -> None:
    """Write a fine-tuned model's files into ``directory``: ``model.save_pretrained`` (weights and ``config.json``
    with the ``architectures`` and label map), the base model's tokenizer files, and ``finetune_config.json`` (the
    run's settings with the resolved loop settings, plus ``extra``), which the predictors read."""
    model.save_pretrained(directory)
    copy_tokenizer_files(resolve_model_dir(config.model), directory, tokenizer)
    with open(Path(directory) / CONFIG_FILE, "w", encoding="utf-8") as f:
        json.dump({**config.to_dict(), "train": train_config.to_dict(), **extra}, f, indent=2)
