"""Sense training as tasks of the one task contract (:class:`~ctxemb.training.task.Task`): ``wsd-bem`` and
``wsd-supcon`` (family ``"sense"``, trained by ``ctxemb wsd train``), registered in
:mod:`ctxemb.training.registry` when this package is imported (the registry sits below WSD and cannot import it).

A :class:`SenseTask` reads a sense-annotated corpus and holds out documents (``read``), builds the recipe's model
around the encoder (``build_model``, after the skeleton seeds), tokenises the targets and glosses once and plans
the recipe's batches (``make_data``), evaluates the objective's loss and accuracy on held-out sentences (the
primary metric: held-out ``accuracy``; BEM: the gold gloss scores highest among the candidates, SupCon: the
nearest same-lemma occurrence has the same sense), stops at a time budget (``callbacks``) and saves the encoder
in HF layout with ``wsd_training.json`` (``save``). The recipes are described in :mod:`ctxemb.tasks.sense.training`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb.core.validation import check_choice
from ctxemb.training.task import Task, TaskData
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.modeling.checkpoint import save_pretrained, stamp_training_run
from ctxemb.modeling.sense_heads import ContextGlossBiEncoder, SupConSenseEncoder
from ctxemb.core.paths import shared_data_dir
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import copy_tokenizer_files
from ctxemb.training.callbacks import Callback
from ctxemb.training.config import TrainConfig
from ctxemb.training.recipe import RunData, RunResult, RunSpec, machine_info
from ctxemb.wsd.corpus import Corpus, read_dataset, split_corpus_by_document
from ctxemb.tasks.sense.batches import _eval_batches, build_features, make_batch_source
from ctxemb.tasks.sense.inventory import GLOSS_ENCODER_DIR, STORE_DEFAULTS, TRAINING_FILE, SenseInventory
from ctxemb.tasks.sense.config import RECIPES, SenseTrainConfig
from ctxemb.wsd.wordnet_examples import merge_corpora, wordnet_example_corpus

logger = logging.getLogger(__name__)

# Settings that may change when a run is resumed without changing what it computes (the loop checks ``train``).
RESUME_FREE = frozenset({"epochs", "max_steps", "max_minutes", "eval_sentences"})


class TimeBudget(Callback):
    """Stop training once ``minutes`` have passed since this call of ``train`` began (a resumed run gets a fresh
    budget); the loop then writes a final checkpoint."""

    def __init__(self, minutes: float):
        self.seconds = 60.0 * minutes
        self.t0 = time.perf_counter()
        self.stopped_at: int | None = None

    def on_train_begin(self, config, start_step):
        self.t0 = time.perf_counter()

    def on_step_end(self, step, loss):
        if time.perf_counter() - self.t0 >= self.seconds:
            self.stopped_at = step
            logger.warning("time budget of %.1f min reached at step %d: stopping (resume to continue)",
                           self.seconds / 60, step)
            return True
        return None


def default_corpus_path() -> Path:
    """SemCor in the shared data folder (``CTXEMB_DATA``).

    Raises:
        FileNotFoundError: no shared data folder.
    """
    return shared_data_dir() / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor"


def build_sense_model(config: SenseTrainConfig) -> ContextGlossBiEncoder | SupConSenseEncoder:
    """The recipe's model around ``config.model``, in training mode, with ``trainable_layers`` applied.

    Raises:
        ValueError: ``trainable_layers`` exceeds the encoder's layers.
    """
    encoder = load_encoder(config.model)
    if config.trainable_layers is not None and config.trainable_layers > encoder.num_layers:
        raise ValueError(f"trainable_layers={config.trainable_layers}, but {config.model} has {encoder.num_layers} "
                         "layers")
    if config.recipe == "bem":
        gloss_encoder = load_encoder(config.model) if config.gloss_encoder == "separate" else None
        model = ContextGlossBiEncoder(encoder, gloss_encoder=gloss_encoder, layers=config.layers,
                                      layer_pooling=config.layer_pooling, score=config.score,
                                      temperature=config.temperature)
    else:
        model = SupConSenseEncoder(encoder, layers=config.layers, layer_pooling=config.layer_pooling,
                                   temperature=config.temperature, negatives=config.negatives)
    model.train()
    if config.trainable_layers is not None:
        model.freeze_all_but_last(config.trainable_layers)
    return model


class SenseTask(Task):
    """One sense-training recipe as a task (module docstring).

    Args:
        recipe: ``"bem"`` or ``"supcon"`` (the task is ``wsd-<recipe>``).
        corpus: the corpus to split and train on (default: read ``config.corpus``, or SemCor).
        inventory: candidates and glosses (default WordNet).
    """

    family = "sense"
    primary_metric = "accuracy"
    greater_is_better = True
    config_class = SenseTrainConfig
    command = "wsd train"

    def __init__(self, recipe: str, *, corpus: Corpus | None = None, inventory: SenseInventory | None = None):
        check_choice(recipe, "recipe", RECIPES)
        self.recipe, self.corpus, self.inventory = recipe, corpus, inventory
        self.name = f"wsd-{recipe}"
        self.description = {"bem": "context-gloss bi-encoder (cross-entropy over the candidates' glosses)",
                            "supcon": "supervised contrastive on occurrences of a lemma's senses"}[recipe]

    def primary(self, config: SenseTrainConfig) -> tuple[str | None, bool]:
        # the objective's accuracy on held-out sentences, when some are held out and evaluated
        return ("accuracy" if config.held_out_fraction and config.eval_sentences else None), True

    def read(self, config: SenseTrainConfig) -> TaskData:
        """Nothing yet: the corpus is read in :meth:`make_data`, after the skeleton has checked the run directory and
        built the model, so that settings the model or the directory refuse fail before a corpus such as SemCor is
        read. ``train`` becomes the training corpus and ``eval`` the held-out documents (None without a held-out
        fraction)."""
        if config.recipe != self.recipe:
            raise ValueError(f"task {self.name!r} trains recipe {self.recipe!r}; the config says "
                             f"{config.recipe!r}: run task 'wsd-{config.recipe}'")
        return TaskData(train=[], eval=None, info={"t_start": time.perf_counter()})

    def read_corpus(self, config: SenseTrainConfig) -> tuple[Corpus, Corpus | None]:
        """The training corpus (its documents minus the held-out ones, cut to ``max_train_examples``, then WordNet's
        examples when asked for) and the held-out documents (None without a held-out fraction)."""
        corpus = self.corpus if self.corpus is not None else read_dataset(config.corpus or default_corpus_path())
        held = None
        if config.held_out_fraction:
            corpus, held = split_corpus_by_document(corpus, config.held_out_fraction, config.split_seed)
        if config.max_train_examples:
            corpus = corpus.head(config.max_train_examples)
        if config.wordnet_examples:
            corpus = merge_corpora(corpus, wordnet_example_corpus())
        return corpus, held

    def limit(self, config: SenseTrainConfig, data: TaskData) -> TaskData:
        return data  # read_corpus() cuts the corpus to max_train_examples

    def run_spec(self, config: SenseTrainConfig, data: TaskData) -> RunSpec:
        primary, greater = self.primary(config)
        settings = {k: v for k, v in config.to_dict().items() if k != "train"}
        asked = dataclasses.replace(config.train, max_steps=config.max_steps or config.train.max_steps)
        return RunSpec(recipe=f"wsd-{config.recipe}", label=f"wsd-{config.recipe}", settings=settings, train=asked,
                       epochs=config.epochs, evaluate_each_epoch=False, resume_free=RESUME_FREE,
                       primary_metric=primary, greater_is_better=greater)

    def build_model(self, config: SenseTrainConfig, data: TaskData):
        return build_sense_model(config)

    def make_data(self, config: SenseTrainConfig, tokenizer, data: TaskData, model, ctx) -> RunData:
        """Targets and glosses tokenised once, the recipe's planned batches for this rank, and the held-out
        batches (none, with a warning, when the held-out sentences are too few for the recipe)."""
        data.train, data.eval = self.read_corpus(config)
        features = build_features(data.train, tokenizer, config, self.inventory)
        stats: dict[str, Any] = {"train": features.stats}
        eval_data = None
        if data.eval is not None and config.eval_sentences:
            try:
                held_features = build_features(data.eval.head(config.eval_sentences), tokenizer, config,
                                               self.inventory)
                eval_data = _eval_batches(held_features, tokenizer, config)
            except ValueError as e:  # too few held-out sentences for this recipe: train without evaluating
                logger.warning("no held-out evaluation: %s", e)
            else:
                stats["eval"] = held_features.stats
        source = make_batch_source(features, tokenizer, config, seed=config.train.seed, rank=ctx.rank,
                                   world_size=ctx.world_size)
        stats["batches_per_epoch"] = source.batches_per_epoch * ctx.world_size
        data.info.update(stats=stats, world_size=ctx.world_size)
        return RunData(source=source, eval_data=eval_data, stats=stats)

    def callbacks(self, config: SenseTrainConfig, data: TaskData) -> list[Callback]:
        """The time budget (``max_minutes``), if any."""
        data.info["budget"] = TimeBudget(config.max_minutes) if config.max_minutes else None
        return [data.info["budget"]] if data.info["budget"] is not None else []

    def after_train(self, outcome: RunResult, config: SenseTrainConfig, data: TaskData) -> None:
        """Keep what ``wsd_training.json`` records about the run (written by :meth:`save`)."""
        result, budget, held = outcome.train, data.info.get("budget"), data.eval
        data.info["record"] = {
            "recipe": config.recipe,
            "config": {**config.to_dict(), "train": outcome.train_config.to_dict()},
            "embedder": config.embedder_options(),
            "store": STORE_DEFAULTS.get(config.recipe),
            "base_model": config.model,
            "data": data.info["stats"],
            "held_out": None if held is None else {
                "fraction": config.held_out_fraction, "seed": config.split_seed,
                "documents": [d.id for d in held.documents]},
            "training": {"steps": result.step, "max_steps": outcome.train_config.max_steps,
                         "stopped_early": result.stopped_early,
                         "time_budget_hit": bool(budget and budget.stopped_at),
                         "train_seconds": result.elapsed,
                         "total_seconds": time.perf_counter() - data.info["t_start"],
                         "final_loss": float(np.mean(result.losses[-50:])) if result.losses else None,
                         "eval": result.eval_metrics, "world_size": data.info["world_size"]},
            "machine": {**machine_info(), "world_size": data.info["world_size"]},
        }

    def load_tokenizer(self, config: SenseTrainConfig):
        return load_tokenizer(config.model)

    def save(self, model, directory: Path, config: SenseTrainConfig, data: TaskData, tokenizer, *,
             train_config: TrainConfig) -> None:
        """The encoder in HF layout with its tokenizer (``Embedder.from_pretrained(directory)`` uses it), BEM's
        separate gloss encoder in ``gloss_encoder/``, and ``wsd_training.json`` (what
        :func:`~ctxemb.tasks.sense.training.check_held_out_documents` and
        :func:`~ctxemb.tasks.sense.training.trained_embedder_options` read)."""
        info = dict(data.info["record"])
        save_pretrained(model.encoder, directory)
        copy_tokenizer_files(resolve_model_dir(config.model), directory, tokenizer)
        if config.recipe == "bem" and model.gloss_encoder is not None:
            save_pretrained(model.gloss_encoder, directory / GLOSS_ENCODER_DIR)
            copy_tokenizer_files(resolve_model_dir(config.model), directory / GLOSS_ENCODER_DIR, tokenizer)
            stamp_training_run(directory / GLOSS_ENCODER_DIR, f"wsd-{config.recipe}-gloss")
        # the file names the stamp, which follows the final weights (the skeleton writes the same one again)
        info["training_run"] = stamp_training_run(directory, f"wsd-{config.recipe}")
        (directory / TRAINING_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")

    def load(self, model_dir):
        """The trained encoder (:func:`ctxemb.modeling.loading.load_encoder`)."""
        return load_encoder(model_dir)


#: The sense-training tasks, by recipe (registered by :mod:`ctxemb.tasks.builtin`).
SENSE_TASKS: dict[str, SenseTask] = {recipe: SenseTask(recipe) for recipe in RECIPES}


def builtin_tasks() -> list[SenseTask]:
    """This family's tasks, for the registry."""
    return list(SENSE_TASKS.values())
