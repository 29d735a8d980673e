"""Pretraining as tasks of the one task contract (:class:`~ctxemb.training.task.Task`): one task per objective,
registered in :mod:`ctxemb.training.registry` (family ``"pretraining"``, trained by ``ctxemb pretrain``).

========================  ======================================================  ==============================
task                      objective (heads)                                       a config that trains it
========================  ======================================================  ==============================
``mlm``                   masked LM (token, whole-word or span masking)           ``sequences`` packed, no ``sbo``
``mlm-nsp``               masked LM + next-sentence prediction (BERT)             ``sequences = "nsp"``
``mlm-sbo``               masked LM + span-boundary objective (SpanBERT)          ``[masking] strategy = "span"``
``mlm-nsp-sbo``           all three                                               both
========================  ======================================================  ==============================

A config's heads decide its task (:func:`task_for_config`); running a task on a config whose heads differ is an
error naming the setting to change. The task reads nothing into memory (its data are token shards, built by rank 0
under ``<out_dir>/shards``), builds the model after seeding (fresh from ``config.model`` or continued from
``init_from``), gives the skeleton masked batches and fixed held-out batches (primary metric: the held-out
``loss``), saves the encoder with its heads and tokenizer, and predicts by filling masks.

Under ``torchrun`` every rank runs the task: rank 0 builds the token shards once, every rank trains on its own
documents, rank 0 alone writes checkpoints and the final model.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any, Sequence

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.training.task import Task, TaskData
from ctxemb.embedding.fill_mask import MaskFiller
from ctxemb.modeling.pretraining_heads import EncoderForPretraining
from ctxemb.tasks.pretraining.batches import PretrainingBatches
from ctxemb.tasks.pretraining.config import OBJECTIVES, PretrainConfig
from ctxemb.tasks.pretraining.masking import Masker
from ctxemb.tasks.pretraining.shards import TokenShards, build_token_shards
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import Tokenizer, copy_tokenizer_files
from ctxemb.training.config import TrainConfig
from ctxemb.runtime.distributed import DistributedContext, barrier
from ctxemb.training.recipe import RunData, RunSpec

logger = logging.getLogger(__name__)

EVAL_SEED = 12345  # held-out batches and their masks are the same in every run and every evaluation


def tokenizer_dir(config: PretrainConfig) -> Path:
    """The tokenizer's folder: a vocabulary folder as given (it has no config.json), else the model's."""
    name = config.tokenizer or config.init_from
    return Path(name) if Path(name).is_dir() and not (Path(name) / "config.json").is_file() \
        else resolve_model_dir(name)


def load_model_tokenizer(config: PretrainConfig) -> tuple[EncoderForPretraining, Tokenizer]:
    """The model (fresh or continued) and its tokenizer, checked against each other (a fresh model's weights come
    from torch's generator: seed first, as the run skeleton does)."""
    tokenizer = Tokenizer.from_pretrained(tokenizer_dir(config))
    return build_model(config, tokenizer), tokenizer


def build_model(config: PretrainConfig, tokenizer: Tokenizer) -> EncoderForPretraining:
    """The model to pretrain: ``init_from`` with the heads it lacks, or a fresh one from ``config.model``.

    Raises:
        ValueError: the tokenizer does not fit the model, or ``max_length`` exceeds its positions.
    """
    heads = dict(nsp=config.sequences == "nsp", nsp_input=config.nsp_input, sbo=config.use_sbo,
                 sparse_prediction=config.sparse_prediction)
    if config.init_from:
        model = EncoderForPretraining.from_pretrained(resolve_model_dir(config.init_from), **heads)
    else:
        fields = dict(model_type=tokenizer.model_type, vocab_size=tokenizer.vocab_size,
                      pad_token_id=tokenizer.pad_token_id)
        fields.update(config.model)
        if "max_position_embeddings" not in config.model:
            offset = 0 if fields["model_type"] == "bert" else fields["pad_token_id"] + 1
            fields["max_position_embeddings"] = config.max_length + offset
        if fields["model_type"] != "bert":
            fields.setdefault("type_vocab_size", 1)
        model = EncoderForPretraining.from_config(EncoderConfig(**fields), **heads)
    cfg = model.config
    if cfg.vocab_size < tokenizer.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary only "
                         f"{cfg.vocab_size}: use the model's own tokenizer")
    if config.max_length > cfg.max_tokens:
        raise ValueError(f"max_length {config.max_length} exceeds the model's {cfg.max_tokens} positions")
    model.train()
    return model


def make_masker(config: PretrainConfig, tokenizer: Tokenizer, shards: TokenShards) -> Masker:
    weights = shards.unigram_counts if config.masking.replacement == "unigram" else None
    return Masker(config.masking, vocab_size=tokenizer.vocab_size, mask_token_id=tokenizer.mask_token_id,
                  special_token_ids=shards.special_token_ids, replacement_weights=weights)


def _shards(files: list[str], tokenizer: Tokenizer, directory: Path, mode: str,
            ctx: DistributedContext) -> TokenShards:
    if ctx.is_main and not (directory / "manifest.json").is_file():
        missing = [p for p in files if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"corpus files not found: {missing}")
        logger.info("tokenizing %d file(s) into %s", len(files), directory)
        build_token_shards(files, tokenizer, directory, mode=mode)
    barrier(ctx)  # the other ranks wait for rank 0's shards
    return TokenShards.open(directory, tokenizer=tokenizer)


def objectives(config: PretrainConfig) -> tuple[str, ...]:
    """The heads a config trains: ``("mlm",)`` plus ``"nsp"`` (``sequences = "nsp"``) and ``"sbo"`` (span masking,
    unless ``sbo = false``; or ``sbo = true``)."""
    return ("mlm",) + (("nsp",) if config.sequences == "nsp" else ()) + (("sbo",) if config.use_sbo else ())


class PretrainingTask(Task):
    """One pretraining objective as a task (module docstring).

    Args:
        heads: the objective's heads, ``("mlm",)`` plus any of ``"nsp"``, ``"sbo"``; the name joins them.
    """

    family = "pretraining"
    primary_metric = "loss"
    greater_is_better = False
    config_class = PretrainConfig
    command = "pretrain"

    def __init__(self, heads: Sequence[str]):
        self.heads = tuple(heads)
        self.name = "-".join(self.heads)
        self.description = {("mlm",): "masked LM", ("mlm", "nsp"): "masked LM + next-sentence prediction (BERT)",
                            ("mlm", "sbo"): "masked LM + span-boundary objective (SpanBERT)",
                            ("mlm", "nsp", "sbo"): "masked LM + NSP + SBO"}[self.heads]

    def primary(self, config: PretrainConfig) -> tuple[str | None, bool]:
        # the held-out MLM (+ heads) loss, when there are held-out batches
        return ("loss" if config.eval_corpus and config.eval_batches else None), False

    def check(self, config: PretrainConfig) -> None:
        """Refuse a config whose heads are not this task's (the message names the setting to change).

        Raises:
            ValueError: the config trains other heads.
        """
        got = objectives(config)
        if got != self.heads:
            how = {"nsp": 'sequences = "nsp"', "sbo": '[masking] strategy = "span" (or sbo = true)'}
            need = [f"{h} ({how[h]})" for h in self.heads if h not in got]
            drop = [h for h in got if h not in self.heads]
            raise ValueError(f"pretraining task {self.name!r} trains {' + '.join(self.heads)}, but the config trains "
                             f"{' + '.join(got)}" + (f"; it needs {', '.join(need)}" if need else "")
                             + (f"; it must not train {', '.join(drop)}" if drop else "")
                             + f"; or run task {'-'.join(got)!r}")

    def read(self, config: PretrainConfig) -> TaskData:
        """The corpus files (token shards are built in :meth:`make_data`, by rank 0)."""
        self.check(config)
        if not config.train_corpus:
            raise ValueError("train_corpus is empty: give the text files to pretrain on")
        if config.train.max_steps is None:
            raise ValueError("pretraining runs for train.max_steps optimizer steps; set it")
        return TaskData(train=list(config.train_corpus), eval=list(config.eval_corpus),
                        info={"tokenizer": Tokenizer.from_pretrained(tokenizer_dir(config))})

    def load_tokenizer(self, config: PretrainConfig) -> Tokenizer:
        return Tokenizer.from_pretrained(tokenizer_dir(config))

    def run_spec(self, config: PretrainConfig, data: TaskData) -> RunSpec:
        primary, greater = self.primary(config)
        settings = {k: v for k, v in config.to_dict().items() if k != "train"}
        return RunSpec(recipe="pretrain", label="pretrain-" + config.masking.strategy.replace("_", "-"),
                       settings=settings, train=config.train, epochs=None, evaluate_each_epoch=False,
                       primary_metric=primary, greater_is_better=greater)

    def build_model(self, config: PretrainConfig, data: TaskData) -> EncoderForPretraining:
        return build_model(config, data.info["tokenizer"])

    def make_data(self, config: PretrainConfig, tokenizer: Tokenizer, data: TaskData, model,
                  ctx: DistributedContext) -> RunData:
        shards_root = Path(config.shards_dir) if config.shards_dir else Path(config.train.out_dir) / "shards"
        train_shards = _shards(config.train_corpus, tokenizer, shards_root / "train", config.corpus_mode, ctx)
        source = PretrainingBatches(train_shards, objective=config.sequences, max_len=config.max_length,
                                    batch_size=config.batch_size, seed=config.train.seed, rank=ctx.rank,
                                    world_size=ctx.world_size, masker=make_masker(config, tokenizer, train_shards))
        eval_data = None
        if config.eval_corpus and config.eval_batches:
            eval_shards = _shards(config.eval_corpus, tokenizer, shards_root / "eval", config.corpus_mode, ctx)
            # every rank evaluates the same fixed batches (one seed, all documents): the means agree across ranks
            held_out = PretrainingBatches(eval_shards, objective=config.sequences, max_len=config.max_length,
                                          batch_size=config.batch_size, seed=EVAL_SEED,
                                          masker=make_masker(config, tokenizer, eval_shards))
            eval_data = list(itertools.islice(held_out.one_epoch(0), config.eval_batches))
        return RunData(source=source, eval_data=eval_data)

    def save(self, model, directory: Path, config: PretrainConfig, data: TaskData, tokenizer, *,
             train_config: TrainConfig) -> None:
        """The encoder with its heads (HF layout: transformers, the Embedder and fill-mask load it) and the
        tokenizer; the skeleton adds the stamp and the run record (which holds the settings)."""
        model.save_pretrained(directory)
        copy_tokenizer_files(tokenizer_dir(config), directory, tokenizer)

    def load(self, model_dir) -> EncoderForPretraining:
        return EncoderForPretraining.from_pretrained(resolve_model_dir(model_dir), missing_heads="raise")

    def predict(self, model, tokenizer, inputs: Sequence[str], saved: dict[str, Any]) -> list:
        """The top 5 fills of every mask of each text (:class:`~ctxemb.embedding.fill_mask.MaskFiller`)."""
        return MaskFiller(model.eval(), tokenizer)(list(inputs), top_k=5)


#: The pretraining tasks, by name (registered by :mod:`ctxemb.tasks.builtin`).
PRETRAINING_TASKS: dict[str, PretrainingTask] = {t.name: t for t in (PretrainingTask(h) for h in OBJECTIVES)}


def builtin_tasks() -> list[PretrainingTask]:
    """This family's tasks, for the registry."""
    return list(PRETRAINING_TASKS.values())


def task_for_config(config: PretrainConfig) -> PretrainingTask:
    """The pretraining task that trains ``config``'s heads."""
    return PRETRAINING_TASKS["-".join(objectives(config))]
