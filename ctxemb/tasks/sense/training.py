"""Training a sense-aware encoder on a sense-annotated corpus (SemCor), for nearest-sense WSD with the ordinary
:class:`~ctxemb.embedding.embedder.Embedder` and :func:`~ctxemb.wsd.build.build_sense_store` (J&M 11.3.1, with an encoder
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
encoder refuses queries from any other one. ``Embedder.from_pretrained(model_dir)`` uses it unchanged. The run itself is :func:`ctxemb.training.runner.run_task` of
the task ``wsd-<recipe>`` (:class:`~ctxemb.tasks.sense.task.SenseTask`; ``SenseTask(recipe, corpus=, inventory=)``
trains on another corpus or sense inventory); this module reads what a trained model records.

Shapes: B context inputs, T their tokens, M targets, G distinct glosses, T_g their tokens, K candidates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ctxemb.core.validation import read_json_file
from ctxemb.tasks.sense.inventory import TRAINING_FILE

__all__ = ["check_held_out_documents", "trained_embedder_options", "trained_store_defaults"]


def check_held_out_documents(model: str | os.PathLike, held_out: Sequence[str]) -> None:
    """Refuse to evaluate an encoder trained by sense training on documents it was trained on.

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
    """The sense-store settings recorded with a model trained by sense training (its recipe's
    :data:`~ctxemb.tasks.sense.inventory.STORE_DEFAULTS`: ``prior_weight``, ``wordnet_examples``); ``{}`` for any other
    model (a name, a directory without ``wsd_training.json``, or a record without store settings)."""
    record = _training_record(model)
    return dict((record or {}).get("store") or {})


def _training_record(model: str | os.PathLike | None) -> dict | None:
    """The ``wsd_training.json`` of a model directory; None for a model name or a directory without one."""
    path = Path(model) / TRAINING_FILE if model is not None else None
    return read_json_file(path, "sense-training record") if path is not None and path.is_file() else None
