"""A pretraining run from one settings object: corpus -> token shards -> masked batches -> the shared training loop
-> an HF-format checkpoint that transformers, our ``Embedder`` and fine-tuning load.

One :class:`~ctxemb.tasks.pretraining.config.PretrainConfig` names the data, the model (a fresh config or an encoder to
continue from), the sequences (BERT's NSP pairs or RoBERTa's packing, J&M 11.2.2-11.2.3), the masking (token,
whole-word or SpanBERT spans, 11.2.1 and 11.5.1; one nested :class:`~ctxemb.tasks.pretraining.config.PretrainMaskingConfig`)
and the loop's :class:`~ctxemb.training.config.TrainConfig`. It reads from TOML (``ctxemb pretrain --preset
run.toml``) with the loop's settings in a ``[train]`` table and the masking's in ``[masking]``.

:func:`run_pretraining` picks the pretraining task that trains the config's heads
(:func:`~ctxemb.tasks.pretraining.task.task_for_config`: ``mlm``, ``mlm-nsp``, ``mlm-sbo``, ``mlm-nsp-sbo``) and runs it
through :func:`ctxemb.training.runner.run_task`, the path every recipe takes. Under ``torchrun`` every rank runs
it: rank 0 builds the token shards once, every rank trains on its own documents, rank 0 alone writes checkpoints
and the final model.
"""

from __future__ import annotations

from ctxemb.training.runner import run_task
# the settings and the task's helpers, importable from here as before the split
from ctxemb.tasks.pretraining.config import (CORPUS_MODES, FLAT_MASKING_KEYS, MASKING_STRATEGIES, REPLACEMENTS,  # noqa: F401
                                       SEQUENCE_MODES, CorpusMode, PretrainConfig, PretrainMaskingConfig,
                                       Replacement, SequenceMode, nest_flat_masking_keys)
from ctxemb.tasks.pretraining.task import (EVAL_SEED, PRETRAINING_TASKS, PretrainingTask, build_model,  # noqa: F401
                                     load_model_tokenizer, make_masker, task_for_config, tokenizer_dir)
from ctxemb.training.callbacks import TrainResult
from ctxemb.training.recipe import MODEL_DIR, RunResult  # noqa: F401


def run_pretraining(config: PretrainConfig) -> TrainResult:
    """Run (or resume, with ``config.train.resume``) a pretraining run through the one run skeleton: seeded before
    the model is built, so a model pretrained from scratch is the same in every run with that seed. The final model
    lands in ``<out_dir>/model`` (encoder + heads + tokenizer, stamped, with the run record), loadable by
    transformers, ``Embedder`` and ``fill_mask``."""
    return run_pretraining_recipe(config).train


def run_pretraining_recipe(config: PretrainConfig) -> RunResult:
    """:func:`run_pretraining` returning the skeleton's :class:`~ctxemb.training.recipe.RunResult`."""
    return run_task(task_for_config(config), config).run
