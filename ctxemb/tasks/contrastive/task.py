"""Contrastive training of sentence embedders, a task family of the registry: ``ctxemb finetune contrastive`` (a
user's table), ``allnli`` (SNLI as AllNLI is used) and ``xquad-retrieval`` (question -> passage on the XQuAD-en
training articles).

The model is a bi-encoder (:class:`~ctxemb.modeling.bi_encoder.EncoderForContrastive`: last-layer mean pooling,
normalised, like all-MiniLM-L6-v2) trained with in-batch negatives (scale, symmetric option), hard negatives from
columns or mined with the model before training (:mod:`ctxemb.tasks.contrastive.mining`), an optional cached
gradient (GradCache) for large batches, and Matryoshka dimensions. The run goes through the one run skeleton
(:func:`ctxemb.training.runner.run_task`) and saves a sentence-transformers directory: ``SentenceTransformer(dir)``
and ``Embedder.from_pretrained(dir)`` give the trained vectors; ``config.json`` records the Matryoshka dimensions
under ``ctxemb_contrastive``.

Model selection on dev: retrieval tasks (``contrastive``, ``xquad-retrieval``) by MRR@10 of the dev anchors against
the distinct dev positives (and negatives); ``allnli`` by STS-B dev Spearman of the cosines.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Sequence

import numpy as np

from ctxemb.training.task_config import FinetuneRunConfig
# the settings (ContrastiveConfig and its tasks) live in finetuning.contrastive_config, read without torch;
# importable from here as before
from ctxemb.tasks.contrastive.config import CONTRASTIVE_TASKS, ContrastiveConfig
from ctxemb.tasks.contrastive.data import (ContrastiveCollator, ContrastiveExample, allnli_examples,
                                                embed_texts, encode_contrastive, inverse_cloze_examples,
                                                read_contrastive_table, retrieval_corpus, retrieval_metrics,
                                                stsb_metrics, xquad_retrieval_examples)
from ctxemb.tasks.contrastive.mining import add_mined_negatives
from ctxemb.tasks.sequence.data import load_task
from ctxemb.tasks.qa.squad import load_xquad, xquad_split
from ctxemb.training.task import Task, TaskData, save_model_files
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.bi_encoder import EncoderForContrastive
from ctxemb.models.hub import resolve_model_dir
from ctxemb.embedding.st_writer import write_sentence_transformers_modules

logger = logging.getLogger(__name__)

__all__ = ["CONTRASTIVE_TASKS", "ContrastiveConfig", "ContrastiveTask"]


class ContrastiveTask(Task):
    """A contrastive task (module docstring). Config: :class:`ContrastiveConfig`."""

    family = "contrastive"
    config_class = ContrastiveConfig

    def __init__(self, name: str):
        if name not in CONTRASTIVE_TASKS:
            raise ValueError(f"a contrastive task is one of {CONTRASTIVE_TASKS}; got {name!r}")
        self.name = name
        self.description = {"contrastive": "contrastive training on a table of (anchor, positive[, negatives])",
                            "allnli": "contrastive training on SNLI as AllNLI (selected on STS-B dev)",
                            "xquad-retrieval": "question -> passage retrieval on the XQuAD-en training articles"}[name]

    def primary(self, config: ContrastiveConfig) -> tuple[str, bool]:
        return ("spearman" if config.task == "allnli" else "mrr@10"), True

    # ---- data
    def read(self, config: ContrastiveConfig) -> TaskData:
        if config.task == "allnli":
            pairs = [ex for split in config.train_split.split("+")
                     for ex in load_task("snli", splits=[split]).splits[split]]
            train = allnli_examples(pairs)
            sts = load_task("stsb", splits=["dev"]).splits["dev"]
            evaluation = [ContrastiveExample(ex.text_a, ex.text_b, (), ex.id, float(ex.label)) for ex in sts]
            kind, distractors = "stsb", []
        elif config.task == "xquad-retrieval":
            questions = load_xquad()
            train = xquad_retrieval_examples(xquad_split(config.train_split, questions))
            evaluation = xquad_retrieval_examples(xquad_split(config.eval_split, questions))
            kind = "retrieval"
            # dev questions rank against the training articles' passages too (150 distractors, whatever
            # max_train_examples keeps): 180 candidates tell recipes apart where the 30 dev passages saturate
            distractors = [ex.positive for ex in xquad_retrieval_examples(xquad_split("train", questions))]
        else:
            columns = dict(anchor=config.anchor, positive=config.positive, negatives=tuple(config.negatives or ()))
            train = read_contrastive_table(config.train_file, **columns)
            evaluation = read_contrastive_table(config.dev_file, **columns)
            kind, distractors = "retrieval", []
        if config.max_train_examples:
            train = train[:config.max_train_examples]  # before mining: mine only the rows that are trained on
        info: dict[str, Any] = {"eval_kind": kind, "eval_distractors": distractors}
        if config.inverse_cloze:
            cloze = inverse_cloze_examples([ex.positive for ex in train], per_passage=config.inverse_cloze,
                                           seed=config.train.seed)
            info["inverse_cloze_rows"] = len(cloze)
            logger.info("inverse cloze: %d (sentence -> passage) rows added to %d training rows", len(cloze),
                        len(train))
            train = train + cloze
        if config.mine_hard_negatives:
            base = EncoderForContrastive.from_pretrained(resolve_model_dir(config.model)).eval()
            tokenizer = load_tokenizer(config.model)
            train, stats = add_mined_negatives(
                train, lambda texts: embed_texts(base, tokenizer, texts, max_length=config.max_length,
                                                 batch_size=config.eval_batch_size),
                k=config.mine_hard_negatives, mine_range=config.mine_range,
                duplicate_threshold=config.mine_duplicate_threshold, margin=config.mine_margin,
                mine_with=config.mine_with)
            info["mining"] = stats.to_dict()
            del base
        return TaskData(train=train, eval=evaluation, labels=None, info=info)

    def build_model(self, config: ContrastiveConfig, data: TaskData) -> EncoderForContrastive:
        if config.regime == "frozen":
            raise ValueError("a bi-encoder has no head: regime 'frozen' would train nothing")
        if config.cache_batch_size is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("cache_batch_size (GradCache) runs in a single process; under torchrun "
                             f"(WORLD_SIZE={os.environ['WORLD_SIZE']}) use the plain loss (cache_batch_size=None)")
        model = EncoderForContrastive.from_pretrained(
            resolve_model_dir(config.model), scale=config.scale, symmetric=config.symmetric,
            matryoshka_dims=config.matryoshka_dims, matryoshka_weights=config.matryoshka_weights,
            cache_batch_size=config.cache_batch_size)
        return config.apply_regime(model)

    def encode(self, config: ContrastiveConfig, tokenizer, examples: Sequence[ContrastiveExample], data: TaskData):
        return encode_contrastive(tokenizer, examples, max_length=config.max_length), \
            ContrastiveCollator(tokenizer.pad_token_id)

    def evaluator(self, config: ContrastiveConfig, tokenizer, data: TaskData, features, collate):
        embed = dict(max_length=config.max_length, batch_size=config.eval_batch_size)
        bar = (lambda label: label) if config.train.progress_bar else (lambda label: None)  # noqa: E731

        def dims(m) -> tuple[int, ...]:  # the truncated Matryoshka widths, each also evaluated ("spearman_64")
            return tuple(d for d in config.matryoshka_dims or () if d < m.config.hidden_size)

        if data.info["eval_kind"] == "stsb":
            a = [ex.anchor for ex in data.eval]
            b = [ex.positive for ex in data.eval]
            scores = [ex.score for ex in data.eval]
            return lambda m: stsb_metrics(embed_texts(m, tokenizer, a, **embed, progress=bar("dev a")),
                                          embed_texts(m, tokenizer, b, **embed, progress=bar("dev b")),
                                          scores, dims=dims(m))
        queries, corpus, relevant = retrieval_corpus(data.eval, data.info.get("eval_distractors", ()))
        return lambda m: retrieval_metrics(embed_texts(m, tokenizer, queries, **embed, progress=bar("dev queries")),
                                           embed_texts(m, tokenizer, corpus, **embed, progress=bar("dev passages")),
                                           relevant, dims=dims(m))

    # ---- saving, loading, predicting
    def save(self, model, directory, config: ContrastiveConfig, data: TaskData, tokenizer, *, train_config) -> None:
        save_model_files(model, directory, config, tokenizer, train_config=train_config,
                         contrastive=model.training_settings(), mining=data.info.get("mining"))
        # what SentenceTransformer(dir) and Embedder.embed_sentences compute: last-layer mean, normalised
        write_sentence_transformers_modules(directory, pooling="mean", layers=[-1], normalize=True,
                                            max_seq_length=config.max_length, similarity_fn_name="cosine")

    def load(self, model_dir) -> EncoderForContrastive:
        return EncoderForContrastive.from_pretrained(resolve_model_dir(model_dir))

    def predict(self, model, tokenizer, inputs: Sequence, saved: dict[str, Any]) -> list:
        """One unit vector (a list of floats) per input text."""
        texts = list(inputs)
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
        if bad:
            raise ValueError(f"inputs must be non-blank texts; input {bad[0]} is {texts[bad[0]]!r}")
        vectors = embed_texts(model, tokenizer, texts, max_length=int(saved.get("max_length", 128)))
        return [v.astype(np.float64).tolist() for v in vectors]


def config_fields() -> tuple[str, ...]:
    """The settings :class:`ContrastiveConfig` adds to :class:`FinetuneRunConfig` (for the CLI's flags)."""
    shared = {f.name for f in dataclasses.fields(FinetuneRunConfig)}
    return tuple(f.name for f in dataclasses.fields(ContrastiveConfig) if f.name not in shared)


def builtin_tasks() -> list:
    """This family's tasks, for the registry (:mod:`ctxemb.tasks.builtin`)."""
    return [ContrastiveTask(name) for name in CONTRASTIVE_TASKS]
