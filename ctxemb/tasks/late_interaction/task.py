"""Training a late-interaction retriever (ColBERT) as a task of the registry: ``ctxemb finetune late-interaction``.

Data: (query, positive[, negatives]) rows from a table (``--train-file``/``--dev-file`` with the contrastive
family's columns), or from a BEIR folder's qrels (``--beir DIR`` with ``--train-queries``/``--dev-queries`` files of
query ids): one row per judged (query, relevant document) pair, each with ``hard_negatives`` documents mined by BM25
among the query's ``mine_range`` best, its relevant documents excluded. Use :func:`beir_rows` to write the same rows
as a table for the one-vector contrastive task, so the two forms train on equal data.

The model (:class:`~ctxemb.modeling.late_interaction.EncoderForLateInteraction`) learns a bias-free projection to
``dim`` dimensions and MaxSim scores with in-batch and hard negatives (false negatives masked by text). Queries
carry ColBERT's marker and [MASK] expansion to ``query_length``; documents the document marker, cut at
``max_length`` tokens, punctuation not scored. Selection on dev: MRR@10 of the dev queries against every document
of the dev rows (positives and negatives), by exact MaxSim. The saved directory loads with
:meth:`ctxemb.search.late.LateInteractionEncoder.from_pretrained`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.tasks.contrastive.data import ContrastiveExample, read_contrastive_table, retrieval_corpus
from ctxemb.tasks.contrastive.mining import bm25_candidates
from ctxemb.tasks.sequence.features import pad_ids
# the settings (LateInteractionTaskConfig and the task names) live in finetuning.late_interaction_config, read without
# torch; importable from here as before
from ctxemb.tasks.late_interaction.config import LATE_INTERACTION_TASKS, LateInteractionTaskConfig  # noqa: F401
from ctxemb.training.task import Task, TaskData, save_model_files
from ctxemb.io.beir import load_beir
from ctxemb.models.head_options import BERT_MARKERS
from ctxemb.modeling.late_interaction import (EncoderForLateInteraction, LateInteractionConfig,
                                              document_pieces, load_projection, marker_ids, pad_queries,
                                              punctuation_ids, query_input_ids)
from ctxemb.modeling.pylate_format import write_pylate_config
from ctxemb.models.hub import resolve_model_dir

logger = logging.getLogger(__name__)

__all__ = ["LATE_INTERACTION_TASKS", "LateInteractionTask", "LateInteractionTaskConfig", "beir_rows"]


def _read_ids(path) -> list[str]:
    ids = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not ids:
        raise ValueError(f"{path}: lists no query id (one per line expected)")
    return ids


def beir_rows(folder, split: str, query_ids: Sequence[str], *, hard_negatives: int = 1, mine_range: int = 20,
              seed: int = 0) -> list[ContrastiveExample]:
    """(query, relevant document[, BM25 negatives]) rows of ``query_ids`` from a BEIR folder.

    Each judged pair (grade > 0) is a row; its ``hard_negatives`` negatives are drawn (with ``seed``) from the
    query's ``mine_range`` best BM25 documents that are not relevant to it. Document texts are title + text.

    Raises:
        ValueError: an id that is not a query of the split, or a query whose BM25 list holds too few non-relevant
            documents.
    """
    data = load_beir(folder, split).subset(query_ids)
    texts = data.texts()
    doc_ids = list(texts)
    ranked = bm25_candidates([data.queries[q] for q in query_ids], [texts[d] for d in doc_ids],
                             mine_range + 50) if hard_negatives else None
    rng = random.Random(seed)
    rows = []
    for n, q in enumerate(query_ids):
        relevant = {d for d, g in data.qrels[q].items() if g > 0}
        pool = []
        if hard_negatives:
            pool = [doc_ids[i] for i in ranked[n] if doc_ids[i] not in relevant][:mine_range]
            if len(pool) < hard_negatives:
                raise ValueError(f"query {q!r}: only {len(pool)} non-relevant BM25 documents among its "
                                 f"{mine_range + 50} best; lower hard_negatives")
        for d in sorted(relevant):
            negatives = tuple(texts[x] for x in rng.sample(pool, hard_negatives)) if hard_negatives else ()
            rows.append(ContrastiveExample(data.queries[q], texts[d], negatives, f"{q}:{d}"))
    return rows


@dataclass(frozen=True)
class LateFeature:
    """One row as ids: the query (unpadded), the positive and K negatives, and their text keys."""

    input_ids: list[int]  # the query (read by length grouping)
    positive_ids: list[int]
    negative_ids: tuple[list[int], ...]
    query_key: int
    positive_key: int
    negative_keys: tuple[int, ...]


class LateCollator:
    """Queries padded with [MASK] to ``query_length`` (attention 0 there), documents padded with [PAD]; ``doc_mask``
    True on the document tokens that are scored (not padding, not punctuation)."""

    def __init__(self, tokenizer, config: LateInteractionConfig):
        self.tokenizer, self.config = tokenizer, config
        self.skip = torch.tensor(sorted(punctuation_ids(tokenizer)), dtype=torch.long)

    def __call__(self, items: Sequence[LateFeature], rng=None) -> dict[str, torch.Tensor]:
        k = len(items[0].negative_ids)
        if any(len(it.negative_ids) != k for it in items):
            raise ValueError("every row of a batch needs the same number of hard negatives")
        q_ids, q_mask = pad_queries(self.tokenizer, [it.input_ids for it in items], self.config)
        docs = [it.positive_ids for it in items] + [it.negative_ids[j] for j in range(k) for it in items]
        d_ids, d_mask = pad_ids(docs, self.tokenizer.pad_token_id)
        keys = [it.positive_key for it in items] + [it.negative_keys[j] for j in range(k) for it in items]
        return {"query_input_ids": q_ids, "query_attention_mask": q_mask, "doc_input_ids": d_ids,
                "doc_attention_mask": d_mask, "doc_mask": d_mask.bool() & ~torch.isin(d_ids, self.skip),
                "query_keys": torch.tensor([it.query_key for it in items], dtype=torch.long),
                "doc_keys": torch.tensor(keys, dtype=torch.long)}


class LateInteractionTask(Task):
    """ColBERT-style training (module docstring). Config: :class:`LateInteractionTaskConfig`."""

    family = "late-interaction"
    config_class = LateInteractionTaskConfig
    primary_metric = "mrr@10"

    def __init__(self, name: str = "late-interaction"):
        self.name = name
        self.description = "a late-interaction (ColBERT) retriever from (query, positive[, negatives]) rows"

    def read(self, config: LateInteractionTaskConfig) -> TaskData:
        if config.beir is not None:
            overlap = set(_read_ids(config.train_queries)) & set(_read_ids(config.dev_queries))
            if overlap:
                raise ValueError(f"{len(overlap)} query ids are in both --train-queries and --dev-queries (first: "
                                 f"{sorted(overlap)[0]!r})")
            mine = dict(hard_negatives=config.hard_negatives, mine_range=config.mine_range, seed=config.train.seed)
            train = beir_rows(config.beir, config.beir_split, _read_ids(config.train_queries), **mine)
            evaluation = beir_rows(config.beir, config.beir_split, _read_ids(config.dev_queries), **mine)
        else:
            columns = dict(anchor=config.anchor, positive=config.positive, negatives=tuple(config.negatives or ()))
            train = read_contrastive_table(config.train_file, **columns)
            evaluation = read_contrastive_table(config.dev_file, **columns)
        return TaskData(train=train, eval=evaluation, labels=None)

    def build_model(self, config: LateInteractionTaskConfig, data: TaskData) -> EncoderForLateInteraction:
        if config.cache_batch_size is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("cache_batch_size (GradCache) runs in a single process; under torchrun "
                             f"(WORLD_SIZE={os.environ['WORLD_SIZE']}) use the plain loss (cache_batch_size=None)")
        directory = resolve_model_dir(config.model)
        model = EncoderForLateInteraction.from_pretrained(directory, dim=config.dim, scale=config.scale,
                                                          cache_batch_size=config.cache_batch_size)
        model.conventions = config.conventions().to_dict()
        if config.projection_init == "pca" and load_projection(directory) is None:
            from ctxemb.modeling.loading import load_tokenizer

            _pca_init(model, load_tokenizer(config.model), [ex.positive for ex in data.train[:256]], config)
        return config.apply_regime(model)

    def encode(self, config: LateInteractionTaskConfig, tokenizer, examples: Sequence[ContrastiveExample],
               data: TaskData):
        conventions = config.conventions()
        markers = marker_ids(tokenizer, conventions)
        texts = sorted({t for ex in examples for t in (ex.positive, *ex.negatives)})
        tokenized = dict(zip(texts, tokenizer.tokenize(texts)))
        doc_ids = {t: document_pieces(tokenizer, tokenized[t].ids, conventions, markers)[0][0] for t in texts}
        queries = sorted({ex.anchor for ex in examples})
        query_ids = {t: query_input_ids(tokenizer, item.ids, conventions, markers)
                     for t, item in zip(queries, tokenizer.tokenize(queries))}
        q_keys: dict[str, int] = {}
        d_keys: dict[str, int] = {}
        features = [LateFeature(query_ids[ex.anchor], doc_ids[ex.positive], tuple(doc_ids[t] for t in ex.negatives),
                                q_keys.setdefault(ex.anchor, len(q_keys)), d_keys.setdefault(ex.positive, len(d_keys)),
                                tuple(d_keys.setdefault(t, len(d_keys)) for t in ex.negatives)) for ex in examples]
        return features, LateCollator(tokenizer, conventions)

    def evaluator(self, config: LateInteractionTaskConfig, tokenizer, data: TaskData, features, collate):
        queries, corpus, relevant = retrieval_corpus(data.eval)
        conventions = config.conventions()

        def evaluate(model) -> dict[str, float]:
            show = config.train.progress_bar
            q = _vectors(model, tokenizer, queries, conventions, "query", config.eval_batch_size, progress=show)
            d = _vectors(model, tokenizer, corpus, conventions, "document", config.eval_batch_size, progress=show)
            return _mrr(q, d, relevant)

        return evaluate

    def save(self, model, directory, config: LateInteractionTaskConfig, data: TaskData, tokenizer, *,
             train_config) -> None:
        save_model_files(model, directory, config, tokenizer, train_config=train_config)
        # PyLate's punctuation skiplist from this tokenizer's vocabulary, as ctxemb skips (save_pretrained alone
        # writes every punctuation character)
        write_pylate_config(directory, config.conventions(), tokenizer)

    def load(self, model_dir) -> EncoderForLateInteraction:
        return EncoderForLateInteraction.from_pretrained(resolve_model_dir(model_dir))

    def predict(self, model, tokenizer, inputs: Sequence, saved: dict[str, Any]) -> list:
        """The (T, D) token vectors of each input text, as document vectors (lists of lists)."""
        conventions = LateInteractionConfig(query_length=int(saved.get("query_length", 32)),
                                            document_length=int(saved.get("max_length", 256)),
                                            markers=BERT_MARKERS if saved.get("markers", True) else None)
        return [v.tolist() for v in _vectors(model, tokenizer, list(inputs), conventions, "document", 32)]


def _pca_init(model: EncoderForLateInteraction, tokenizer, texts: Sequence[str],
              config: LateInteractionTaskConfig) -> None:
    """Set the projection to the top ``dim`` right singular vectors of the encoder's (uncentred) token vectors of
    ``texts``, so that projected dot products start as close to the encoder's as ``dim`` dimensions allow."""
    conventions = config.conventions()
    markers = marker_ids(tokenizer, conventions)
    rows = [document_pieces(tokenizer, it.ids, conventions, markers)[0][0] for it in tokenizer.tokenize(list(texts))]
    model.eval()
    states = []
    with torch.no_grad():
        for lo in range(0, len(rows), 32):
            ids, mask = pad_ids(rows[lo:lo + 32], tokenizer.pad_token_id)
            z = model.encoder(ids, mask, None, output_hidden_states=False, compute_pooler=False).last_hidden_state
            states.append(z[mask.bool()].float())
        x = torch.cat(states)
        x = torch.nn.functional.normalize(x, dim=-1)
        _, _, vt = torch.linalg.svd(x, full_matrices=False)
        if vt.shape[0] < model.linear.out_features:
            raise ValueError(f"dim {model.linear.out_features} exceeds the hidden size {vt.shape[0]}")
        model.linear.weight.copy_(vt[:model.linear.out_features])
    model.train()
    logger.info("projection initialised from the top %d principal directions of %d token vectors",
                model.linear.out_features, len(x))


def _vectors(model, tokenizer, texts: Sequence[str], conventions: LateInteractionConfig, side: str,
             batch_size: int, progress: bool = False) -> list[np.ndarray]:
    """Token vectors of ``texts`` (queries: all query_length positions; documents: scored tokens only); with
    ``progress``, a bar over the batches (:func:`ctxemb.training.outputs.eval_bar`)."""
    from ctxemb.training.outputs import eval_bar

    bar = eval_bar(-(-len(texts) // batch_size), show=progress, examples=len(texts), desc=f"dev {side}s")
    markers = marker_ids(tokenizer, conventions)
    skip = punctuation_ids(tokenizer)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[np.ndarray] = []
    try:
        items = tokenizer.tokenize(list(texts))
        for lo in range(0, len(items), batch_size):
            chunk = items[lo:lo + batch_size]
            if side == "query":
                ids, mask = pad_queries(tokenizer, [query_input_ids(tokenizer, it.ids, conventions, markers)
                                                    for it in chunk], conventions)
            else:
                rows = [document_pieces(tokenizer, it.ids, conventions, markers)[0][0] for it in chunk]
                ids, mask = pad_ids(rows, tokenizer.pad_token_id)
            with torch.no_grad():
                v = model.vectors(ids.to(device), mask.to(device)).float().cpu().numpy()
            for r in range(len(chunk)):
                if side == "query":
                    out.append(v[r])
                else:
                    keep = [t for t in range(int(mask[r].sum())) if int(ids[r, t]) not in skip]
                    out.append(v[r, keep])
            bar.update(1)
    finally:
        bar.close()
        model.train(was_training)
    return out


def _mrr(queries: list[np.ndarray], docs: list[np.ndarray], relevant: Sequence[int]) -> dict[str, float]:
    """MRR@10, R@1 and R@10 (x 100) by exact MaxSim; ties count against the relevant document."""
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    tokens = np.concatenate(docs)
    ranks = []
    for q, rel in zip(queries, relevant):
        scores = np.maximum.reduceat(q @ tokens.T, offsets[:-1], axis=1).sum(0)
        ranks.append(int((scores >= scores[rel]).sum()))  # ties count against the relevant document
    ranks = np.array(ranks)
    return {"mrr@10": 100 * float(np.where(ranks <= 10, 1.0 / ranks, 0).mean()),
            "recall@1": 100 * float((ranks == 1).mean()), "recall@10": 100 * float((ranks <= 10).mean())}


def config_fields() -> tuple[str, ...]:
    """The settings :class:`LateInteractionTaskConfig` adds to :class:`FinetuneRunConfig` (for the CLI's flags)."""
    shared = {f.name for f in dataclasses.fields(FinetuneRunConfig)} - {"max_length"}
    return tuple(f.name for f in dataclasses.fields(LateInteractionTaskConfig) if f.name not in shared)


def builtin_tasks() -> list:
    """This family's tasks, for the registry (:mod:`ctxemb.tasks.builtin`)."""
    return [LateInteractionTask(name) for name in LATE_INTERACTION_TASKS]
