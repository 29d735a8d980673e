"""Training a sense-aware encoder on a sense-annotated corpus (SemCor), for nearest-sense WSD with the ordinary
:class:`~ctxemb.embedding.Embedder` and :func:`~ctxemb.wsd.build.build_sense_store` (J&M 11.3.1, with an encoder
fine-tuned so that the sense points separate).

Two recipes (:data:`RECIPES`) on the shared loop (:func:`ctxemb.training.train`: progress, checkpoints, exact resume,
torchrun), both reading a target word's vector as the Embedder pools it at query time (``layers``,
``layer_pooling``, ``subword_pooling``: by default the mean of the last four hidden states and of the word's
subwords), see :mod:`ctxemb.modeling.sense_heads`:

- ``"bem"``, a context-gloss bi-encoder (Blevins & Zettlemoyer 2020): the target's contextual vector is scored
  against the gloss vectors of its candidate senses (WordNet's, as the disambiguator takes them; each gloss is
  ``"<lemma> - <definition>"`` embedded as the mean of its word vectors, as :mod:`ctxemb.wsd.glosses` does),
  cross-entropy over the candidates. At most ``max_candidates`` candidates per target (the gold senses and a random
  sample of the others) and ``max_targets_per_sentence`` targets per sentence are drawn afresh for every batch; the
  glosses of a batch are encoded once each. The gloss encoder shares the context encoder's weights, or is a second
  encoder (``gloss_encoder="separate"``, saved beside the model in ``gloss_encoder/``).
- ``"supcon"``, supervised contrastive training on occurrences (Khosla et al. 2020): occurrences of one sense are
  positives, occurrences of the lemma's other senses hard negatives. Each batch holds groups of one lemma's
  occurrences, ``senses_per_group`` of its senses with up to ``occurrences_per_sense`` each, drawn so that an
  epoch sees the lemma's senses in balance (a lemma is used while at least two of its senses have unused
  occurrences). Lemmas with a single annotated sense are left out. The store is then the plain recipe: centroids
  and the nearest sense.

Only training documents are used: ``held_out_fraction`` of the corpus's documents are held out exactly as
``benchmarks/wsd.py`` does (:func:`~ctxemb.wsd.corpus.split_corpus_by_document` with ``split_seed``), so that the
held-out SemCor score stays a dev score; with ``eval_sentences`` > 0 the loop also reports the objective's loss and
accuracy on that split every ``train.eval_every`` steps.

Cost on a CPU: every sentence and gloss is tokenised once, before training (:func:`build_features`); batches are
planned per epoch under a token budget (``max_tokens_per_batch`` counting each sentence's tokens plus, for BEM, its
expected gloss tokens; lengths sorted within buckets, so padding stays small) by
:class:`~ctxemb.training.data.PlannedBatches`, whose per-batch generators make resumed runs draw the same samples;
``trainable_layers`` freezes the lower layers (a cheaper backward pass); ``max_minutes`` stops a run at a time
budget (a checkpoint is written; ``resume`` continues it).

The saved model is ``<out_dir>/model``: the encoder in HF layout (``config.json``, ``model.safetensors``), its
tokenizer, and ``wsd_training.json`` (the configuration, the Embedder settings to use with it, data counts, the
held-out documents, time and hardware); ``config.json`` carries the run's identity
(:func:`~ctxemb.modeling.checkpoint.stamp_training_run`), which the Embedder reads, so a sense store built with this
encoder refuses queries from any other one. ``Embedder.from_pretrained(result.model_dir)`` uses it unchanged.

Shapes: B context inputs, T their tokens, M targets, G distinct glosses, T_g their tokens, K candidates.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ctxemb._validation import read_json_file
from ctxemb.loading import load_encoder, load_tokenizer
from ctxemb.modeling.checkpoint import save_pretrained, stamp_training_run
from ctxemb.modeling.sense_heads import ContextGlossBiEncoder, SupConSenseEncoder
from ctxemb.paths import shared_data_dir
from ctxemb.registry import resolve_model_dir
from ctxemb.tokenization import copy_tokenizer_files
from ctxemb.training.distributed import distributed_session
from ctxemb.training.loop import Callback, TrainResult, check_fresh_out_dir, seed_everything, train
from ctxemb.training.recipe import (SETTINGS_FILE, RunSpec, check_run_settings, resolve_steps, run_record,
                                    save_run)
from ctxemb.wsd.corpus import Corpus, read_dataset, split_corpus_by_document
# the settings and the data live in wsd.sense_config and wsd.sense_batches; importable from here as before
from ctxemb.wsd.sense_batches import (ContextInput, SenseFeatures, Target, _eval_batches,  # noqa: F401
                                      build_features, make_batch_source)
from ctxemb.wsd.sense_config import (GLOSS_ENCODER_DIR, MODEL_DIR, RECIPES, TRAINING_FILE, Recipe,  # noqa: F401
                                     SenseInventory, SenseTrainConfig, WordNetInventory)

logger = logging.getLogger(__name__)

__all__ = [
    "RECIPES", "MODEL_DIR", "SETTINGS_FILE", "TRAINING_FILE", "SenseFeatures", "SenseInventory", "SenseTrainConfig",
    "SenseTrainResult", "TimeBudget", "WordNetInventory", "build_features", "check_held_out_documents",
    "make_batch_source", "run_sense_training", "trained_embedder_options",
]

# --------------------------------------------------------------------------------------------------- the run

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


@dataclass
class SenseTrainResult:
    """What :func:`run_sense_training` did.

    Attributes:
        train: the loop's result (steps, losses, history, checkpoint, elapsed seconds).
        model_dir: the saved encoder (HF layout; ``Embedder.from_pretrained(model_dir, **embedder_options)``).
        training_run: the identity stamped into its ``config.json``.
        embedder_options: the Embedder fields that pool as the run trained.
        stats: feature counts of the training (and held-out) data.
    """

    train: TrainResult
    model_dir: Path
    training_run: str | None
    embedder_options: dict[str, Any]
    stats: dict[str, Any]


def default_corpus_path() -> Path:
    """SemCor in the shared data folder (``CTXEMB_DATA``).

    Raises:
        FileNotFoundError: no shared data folder.
    """
    return shared_data_dir() / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor"


def _build_model(config: SenseTrainConfig) -> ContextGlossBiEncoder | SupConSenseEncoder:
    """The recipe's model around ``config.model``, in training mode, with ``trainable_layers`` applied."""
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


# Settings that may change when a run is resumed without changing what it computes (the loop checks ``train``).
_RESUME_FREE = frozenset({"epochs", "max_steps", "max_minutes", "eval_sentences"})


def run_sense_training(config: SenseTrainConfig, *, corpus: Corpus | None = None,
                       inventory: SenseInventory | None = None,
                       callbacks: Iterable[Callback] | None = None) -> SenseTrainResult:
    """Train an encoder with one recipe and save it (see the module docstring).

    Args:
        config: the run.
        corpus: the corpus to split and train on (default: read ``config.corpus``, or SemCor).
        inventory: candidates and glosses (default WordNet).
        callbacks: extra loop callbacks (e.g. to stop early; a later ``resume=True`` run continues exactly).

    Returns:
        A :class:`SenseTrainResult`.

    Raises:
        FileNotFoundError: the corpus or the model cannot be found.
        ValueError: no usable target, bad settings; see :func:`ctxemb.training.train` for the loop's errors.
    """
    if not isinstance(config, SenseTrainConfig):
        raise TypeError(f"config must be a SenseTrainConfig, got {type(config).__name__}")
    t_start = time.perf_counter()
    # Settings that can only be checked against the run directory or the model are checked before the corpus is read.
    out_dir = Path(config.train.out_dir)
    check_fresh_out_dir(config.train)
    seed_everything(config.train.seed)
    model = _build_model(config)
    if corpus is None:
        corpus = read_dataset(config.corpus or default_corpus_path())
    held = None
    if config.held_out_fraction:
        corpus, held = split_corpus_by_document(corpus, config.held_out_fraction, config.split_seed)
    if config.max_train_sentences:
        corpus = corpus.head(config.max_train_sentences)
    tokenizer = load_tokenizer(config.model)
    features = build_features(corpus, tokenizer, config, inventory)
    stats: dict[str, Any] = {"train": features.stats}
    eval_data = None
    if held is not None and config.eval_sentences:
        try:
            held_features = build_features(held.head(config.eval_sentences), tokenizer, config, inventory)
            eval_data = _eval_batches(held_features, tokenizer, config)
        except ValueError as e:  # too few held-out sentences for this recipe: train without evaluating
            logger.warning("no held-out evaluation: %s", e)
        else:
            stats["eval"] = held_features.stats

    cbs = list(callbacks or [])
    budget = TimeBudget(config.max_minutes) if config.max_minutes else None
    if budget is not None:
        cbs.append(budget)

    model_dir = out_dir / MODEL_DIR
    run_id = None
    settings = {k: v for k, v in config.to_dict().items() if k != "train"}
    with distributed_session(config.train.device) as ctx:
        if ctx.is_main:
            check_run_settings(out_dir, settings, resume=config.train.resume, resume_free=_RESUME_FREE)
        source = make_batch_source(features, tokenizer, config, seed=config.train.seed, rank=ctx.rank,
                                   world_size=ctx.world_size)
        asked = dataclasses.replace(config.train, max_steps=config.max_steps or config.train.max_steps)
        train_config = resolve_steps(asked,
                                     epochs=config.epochs, batches_per_epoch=source.batches_per_epoch,
                                     evaluate_each_epoch=False)
        steps = train_config.max_steps
        stats["batches_per_epoch"] = source.batches_per_epoch * ctx.world_size
        result = train(model, source, train_config, eval_data=eval_data, callbacks=cbs)
        if ctx.is_main:
            spec = RunSpec(recipe=f"wsd-{config.recipe}", label=f"wsd-{config.recipe}", settings=settings,
                           train=config.train, epochs=config.epochs)
            record = run_record(spec, train_config, result, device=ctx.device, eval_history=[],
                                final_metrics=result.eval_metrics or {}, best_step=None, stats=stats,
                                total_seconds=time.perf_counter() - t_start, world_size=ctx.world_size)
            info = {
                "recipe": config.recipe,
                "config": {**config.to_dict(), "train": train_config.to_dict()},
                "embedder": config.embedder_options(),
                "base_model": config.model,
                "data": stats,
                "held_out": None if held is None else {
                    "fraction": config.held_out_fraction, "seed": config.split_seed,
                    "documents": [d.id for d in held.documents]},
                "training": {"steps": result.step, "max_steps": steps, "stopped_early": result.stopped_early,
                             "time_budget_hit": bool(budget and budget.stopped_at),
                             "train_seconds": result.elapsed, "total_seconds": time.perf_counter() - t_start,
                             "final_loss": float(np.mean(result.losses[-50:])) if result.losses else None,
                             "eval": result.eval_metrics, "world_size": ctx.world_size},
                "machine": record["machine"],
            }

            def write_files(tmp: Path) -> None:
                save_pretrained(model.encoder, tmp)
                copy_tokenizer_files(resolve_model_dir(config.model), tmp, tokenizer)
                if config.recipe == "bem" and model.gloss_encoder is not None:
                    save_pretrained(model.gloss_encoder, tmp / GLOSS_ENCODER_DIR)
                    copy_tokenizer_files(resolve_model_dir(config.model), tmp / GLOSS_ENCODER_DIR, tokenizer)
                    stamp_training_run(tmp / GLOSS_ENCODER_DIR, f"wsd-{config.recipe}-gloss")
                # the sense recipe's own file (what check_held_out_documents and trained_embedder_options read)
                # names the stamp, which follows the final weights (save_run writes the same one again)
                info["training_run"] = stamp_training_run(tmp, f"wsd-{config.recipe}")
                (tmp / TRAINING_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")

            run_id = save_run(model_dir, write_files, label=f"wsd-{config.recipe}", record=record)
            logger.info("saved the %s encoder (%s) to %s", config.recipe, run_id, model_dir)
    return SenseTrainResult(train=result, model_dir=model_dir, training_run=run_id,
                            embedder_options=config.embedder_options(), stats=stats)


def check_held_out_documents(model: str | os.PathLike, held_out: Sequence[str]) -> None:
    """Refuse to evaluate an encoder trained by :func:`run_sense_training` on documents it was trained on.

    Args:
        model: a model name or directory (only directories with a ``wsd_training.json`` are checked).
        held_out: the ids of the documents an evaluation holds out.

    Raises:
        ValueError: the encoder's training data include some of ``held_out`` (it was trained with another split,
            or on every document); the message gives the split it was trained with.
    """
    path = Path(model) / TRAINING_FILE
    if not path.is_file():
        return
    info = read_json_file(path, "sense-training record").get("held_out")
    seen = set(held_out) - set(info["documents"] if info else [])
    if seen:
        how = (f"held-out fraction {info['fraction']} and seed {info['seed']}" if info else
               "no held-out documents")
        raise ValueError(f"the encoder {model} was trained with {how}, so {len(seen)} of the {len(held_out)} "
                         f"documents held out here (e.g. {sorted(seen)[0]}) are in its training data; hold out the "
                         f"same documents (the same fraction and seed) or evaluate another encoder")


def trained_embedder_options(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The Embedder fields a trained model was trained to be pooled with (from its ``wsd_training.json``):
    ``Embedder.from_pretrained(model_dir, **trained_embedder_options(model_dir))``.

    Raises:
        FileNotFoundError: the directory has no ``wsd_training.json``.
    """
    path = Path(model_dir) / TRAINING_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no {TRAINING_FILE}: not a model made by ctxemb wsd train")
    info = read_json_file(path, "sense-training record")
    return dict(info["embedder"])
