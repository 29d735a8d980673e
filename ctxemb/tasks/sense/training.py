"""Training a sense-aware encoder on a sense-annotated corpus (SemCor), for nearest-sense WSD with the ordinary
:class:`~ctxemb.embedding.embedder.embedder.Embedder` and :func:`~ctxemb.wsd.build.build_sense_store` (J&M 11.3.1, with an encoder
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
tokenizer, and ``wsd_training.json`` (the configuration, the Embedder settings to use with it, the sense-store
settings chosen for the recipe on the dev sets (:func:`trained_store_defaults`), data counts, the held-out documents,
time and hardware); ``config.json`` carries the run's identity
(:func:`~ctxemb.modeling.checkpoint.stamp_training_run`), which the Embedder reads, so a sense store built with this
encoder refuses queries from any other one. ``Embedder.from_pretrained(result.model_dir)`` uses it unchanged.

Shapes: B context inputs, T their tokens, M targets, G distinct glosses, T_g their tokens, K candidates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ctxemb.core.validation import read_json_file
from ctxemb.training.runner import run_task
from ctxemb.training.loop import Callback, TrainResult
from ctxemb.training.recipe import SETTINGS_FILE
from ctxemb.wsd.corpus import Corpus
# the settings, the data and the task live in wsd.sense_config, wsd.sense_batches and wsd.sense_task; importable from
# here as before
from ctxemb.tasks.sense.batches import (ContextInput, SenseFeatures, Target, _eval_batches,  # noqa: F401
                                      build_features, make_batch_source)
from ctxemb.tasks.sense.inventory import (GLOSS_ENCODER_DIR, MODEL_DIR, RECIPES, TRAINING_FILE, Recipe,  # noqa: F401
                                     SenseInventory, SenseTrainConfig, WordNetInventory)
from ctxemb.tasks.sense.task import (RESUME_FREE, SENSE_TASKS, SenseTask, TimeBudget,  # noqa: F401
                                   build_sense_model, default_corpus_path)

__all__ = [
    "RECIPES", "MODEL_DIR", "SETTINGS_FILE", "TRAINING_FILE", "SenseFeatures", "SenseInventory", "SenseTask",
    "SenseTrainConfig", "SenseTrainResult", "TimeBudget", "WordNetInventory", "build_features",
    "check_held_out_documents", "make_batch_source", "run_sense_training", "trained_embedder_options",
    "trained_store_defaults",
]


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


def run_sense_training(config: SenseTrainConfig, *, corpus: Corpus | None = None,
                       inventory: SenseInventory | None = None,
                       callbacks: Iterable[Callback] | None = None) -> SenseTrainResult:
    """Train an encoder with one recipe and save it (see the module docstring): the task ``wsd-<recipe>``
    (:class:`~ctxemb.tasks.sense.task.SenseTask`) through :func:`ctxemb.training.runner.run_task`, the path every
    recipe takes.

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
    task = SENSE_TASKS[config.recipe] if corpus is None and inventory is None else \
        SenseTask(config.recipe, corpus=corpus, inventory=inventory)
    done = run_task(task, config, callbacks=list(callbacks or []))
    return SenseTrainResult(train=done.run.train, model_dir=done.model_dir, training_run=done.run.training_run,
                            embedder_options=config.embedder_options(), stats=done.data.info["stats"])


def check_held_out_documents(model: str | os.PathLike, held_out: Sequence[str]) -> None:
    """Refuse to evaluate an encoder trained by :func:`run_sense_training` on documents it was trained on.

    Args:
        model: a model name or directory (only directories with a ``wsd_training.json`` are checked).
        held_out: the ids of the documents an evaluation holds out.

    Raises:
        ValueError: the encoder's training data include some of ``held_out`` (it was trained with another split,
            or on every document); the message gives the split it was trained with.
    """
    record = _training_record(model)
    if record is None:
        return
    info = record.get("held_out")
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
    record = _training_record(model_dir)
    if record is None:
        raise FileNotFoundError(f"{model_dir} has no {TRAINING_FILE}: not a model made by ctxemb wsd train")
    return dict(record["embedder"])


def trained_store_defaults(model: str | os.PathLike | None) -> dict[str, Any]:
    """The sense-store settings recorded with a model trained by :func:`run_sense_training` (its recipe's
    :data:`~ctxemb.tasks.sense.inventory.STORE_DEFAULTS`: ``prior_weight``, ``wordnet_examples``); ``{}`` for any other
    model (a name, a directory without ``wsd_training.json``, or a record without store settings)."""
    record = _training_record(model)
    return dict((record or {}).get("store") or {})


def _training_record(model: str | os.PathLike | None) -> dict | None:
    """The ``wsd_training.json`` of a model directory; None for a model name or a directory without one."""
    path = Path(model) / TRAINING_FILE if model is not None else None
    return read_json_file(path, "sense-training record") if path is not None and path.is_file() else None
