"""Sense training's data: targets and their candidate senses from a sense-annotated corpus (:func:`build_features`),
and the batches of the two recipes (BEM: contexts with candidate glosses; SupCon: groups of a lemma's senses),
resumable and bucketed by length (:func:`make_batch_source`).

Shapes: B context inputs, T their tokens, M targets, G distinct glosses, T_g their tokens, K candidates.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ctxemb.models.tokenization import Tokenizer, plan_windows
from ctxemb.training.data import PlannedBatches, pack_batches
from ctxemb.wsd.corpus import Corpus
from ctxemb.wsd.corpus_pass import embedder_words

from ctxemb.tasks.sense.inventory import _BUCKET_BATCHES, SenseInventory, WordNetInventory
from ctxemb.tasks.sense.config import SenseTrainConfig

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------- features

@dataclass(slots=True)
class Target:
    """One annotated word inside a model input.

    Attributes:
        start, end: its subword tokens, ``ids[start:end]`` of the input (content positions, no specials).
        sense: index of its (first) gold key in :attr:`SenseFeatures.keys`.
        gold: indices of all its gold keys.
        lemma: index of its (lemma, POS) in :attr:`SenseFeatures.lemmas`.
        candidates: ``bem``: indices of its candidate keys (gold ones included); empty for ``supcon``.
    """

    start: int
    end: int
    sense: int
    gold: tuple[int, ...]
    lemma: int
    candidates: tuple[int, ...] = ()


@dataclass(slots=True)
class ContextInput:
    """One model input: a sentence (or a window of a long one) as content token ids, and its targets."""

    ids: list[int]
    targets: list[Target]
    sentence: str = ""


@dataclass
class SenseFeatures:
    """Everything the batches are made of, tokenised once.

    Attributes:
        inputs: the context inputs (sentences or windows) that hold at least one usable target.
        keys: sense keys; targets and glosses index them.
        lemmas: (lemma, POS) pairs; targets index them.
        gloss_ids: ``bem``: per key index, its gloss's content token ids; empty for ``supcon``.
        gloss_spans: ``bem``: per key index, the gloss's word spans over those ids; empty for ``supcon``.
        stats: counts (sentences, inputs, targets, skipped targets by reason, windows, cut glosses, seconds).
    """

    inputs: list[ContextInput]
    keys: list[str]
    lemmas: list[tuple[str, str | None]]
    gloss_ids: list[list[int]] = field(default_factory=list)
    gloss_spans: list[list[tuple[int, int]]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def n_targets(self) -> int:
        return sum(len(x.targets) for x in self.inputs)


def _tokenize_in_chunks(tokenizer: Tokenizer, sentences: list[list[str]], chunk: int = 2048):
    out = []
    for i in range(0, len(sentences), chunk):
        out.extend(tokenizer.tokenize_words(sentences[i:i + chunk], first_index=i))
    return out


def build_features(corpus: Corpus, tokenizer: Tokenizer, config: SenseTrainConfig,
                   inventory: SenseInventory | None = None, *, max_length: int | None = None) -> SenseFeatures:
    """Tokenise a corpus's annotated sentences (and, for ``bem``, the glosses of every candidate sense) once.

    A target is kept when it has gold keys and, for ``bem``, when at least one gold key is among its candidates and
    at least one candidate is not gold (otherwise the loss is zero); for ``supcon`` only lemmas with at least two
    distinct gold senses in the corpus are kept, and an occurrence with several gold keys counts as its first one
    (SemCor has none). The reasons for dropping targets are counted in ``stats``.

    Args:
        corpus: the training sentences.
        tokenizer: the model's tokenizer.
        config: the run's settings (recipe, multiword, lengths).
        inventory: candidates and glosses (default :class:`WordNetInventory`).
        max_length: tokens per context input with specials (default ``config.max_length`` or the tokenizer's).

    Returns:
        The features.

    Raises:
        ValueError: no usable target.
    """
    t0 = time.perf_counter()
    inventory = inventory or WordNetInventory()
    bem = config.recipe == "bem"
    max_length = max_length or config.max_length or tokenizer.max_length
    max_content = max_length - tokenizer.num_special_tokens
    keys: list[str] = []
    key_index: dict[str, int] = {}
    lemmas: list[tuple[str, str | None]] = []
    lemma_index: dict[tuple[str, str | None], int] = {}
    skipped = {"no_gold_key": 0, "gold_not_a_candidate": 0, "all_candidates_gold": 0, "one_sense_lemma": 0}
    n_cut_targets = 0

    def key_id(k: str) -> int:
        if k not in key_index:
            key_index[k] = len(keys)
            keys.append(k)
        return key_index[k]

    sentences = [s for s in corpus.sentences() if s.instances]
    tokenized = _tokenize_in_chunks(tokenizer, [embedder_words(s.words, config.multiword) for s in sentences])
    inputs: list[ContextInput] = []
    n_windows = 0
    for s, tok in zip(sentences, tokenized):
        targets: list[tuple[int, int, Target]] = []
        for inst in s.instances:
            if not inst.gold_keys:
                skipped["no_gold_key"] += 1
                continue
            cands: tuple[int, ...] = ()
            gold = tuple(inst.gold_keys)
            if bem:
                cand_keys = inventory.candidates(s.words[inst.position], inst.lemma, inst.pos)
                gold = tuple(k for k in gold if k in cand_keys)
                if not gold:
                    skipped["gold_not_a_candidate"] += 1
                    continue
                if len(set(cand_keys) - set(gold)) == 0:  # one candidate, or every candidate gold: no loss
                    skipped["all_candidates_gold"] += 1
                    continue
                cands = tuple(key_id(k) for k in cand_keys)
            lp = (inst.lemma, inst.pos)
            if lp not in lemma_index:
                lemma_index[lp] = len(lemmas)
                lemmas.append(lp)
            g = tuple(key_id(k) for k in gold)
            a, b = tok.word_spans[inst.position]
            targets.append((a, b, Target(a, b, g[0], g, lemma_index[lp], cands)))
        if not targets:
            continue
        plan = plan_windows(len(tok.ids), max_content)
        n_windows += len(plan) - 1
        for start, stop, keep_start, keep_stop in plan:
            mine = []
            for a, b, t in targets:
                if keep_start <= a < keep_stop:
                    if b > stop:
                        n_cut_targets += 1
                    mine.append(dataclasses.replace(t, start=a - start, end=min(b, stop) - start))
            if mine:
                inputs.append(ContextInput(list(tok.ids[start:stop]), mine, s.id))
    if not bem:  # a lemma needs two senses for a hard negative
        senses_by_lemma: dict[int, set[int]] = {}
        for x in inputs:
            for t in x.targets:
                senses_by_lemma.setdefault(t.lemma, set()).add(t.sense)
        kept = []
        for x in inputs:
            ts = [t for t in x.targets if len(senses_by_lemma[t.lemma]) >= 2]
            skipped["one_sense_lemma"] += len(x.targets) - len(ts)
            if ts:
                x.targets = ts
                kept.append(x)
        inputs = kept
    if not inputs:
        raise ValueError(f"corpus {corpus.name!r} has no target usable by recipe {config.recipe!r} "
                         f"(skipped: {skipped})")
    features = SenseFeatures(inputs=inputs, keys=keys, lemmas=lemmas)
    n_cut_glosses = 0
    if bem:
        words = [inventory.gloss_words(k) for k in keys]
        limit = config.max_gloss_length - tokenizer.num_special_tokens
        for tok in _tokenize_in_chunks(tokenizer, words):
            ids, spans = list(tok.ids), list(tok.word_spans)
            if len(ids) > limit:
                n_cut_glosses += 1
                spans = [(a, min(b, limit)) for a, b in spans if a < limit]
                ids = ids[:limit]
            features.gloss_ids.append(ids)
            features.gloss_spans.append(spans)
        if n_cut_glosses:
            logger.warning("%d of %d glosses are longer than max_gloss_length=%d tokens: their last words are left "
                           "out in training", n_cut_glosses, len(keys), config.max_gloss_length)
    if n_cut_targets:
        logger.warning("%d targets straddle the end of a %d-token window: only their tokens inside it are pooled",
                       n_cut_targets, max_length)
    features.stats = {
        "corpus": corpus.name, "sentences": len(sentences), "inputs": len(inputs), "extra_windows": n_windows,
        "targets": features.n_targets, "senses": len({t.sense for x in inputs for t in x.targets}),
        "lemmas": len({t.lemma for x in inputs for t in x.targets}), "keys": len(keys), "skipped": skipped,
        "cut_glosses": n_cut_glosses, "cut_targets": n_cut_targets, "max_length": max_length,
        "seconds": time.perf_counter() - t0,
    }
    logger.info("features of %s (%s): %s", corpus.name, config.recipe, features.stats)
    return features


# --------------------------------------------------------------------------------------------------- batches

def _word_weights(start: int, end: int, pooling: str) -> list[tuple[int, float]]:
    """(token position, weight) pairs that pool one word's subwords, as the Embedder does."""
    if pooling == "first":
        return [(start, 1.0)]
    if pooling == "last":
        return [(end - 1, 1.0)]
    return [(t, 1.0 / (end - start)) for t in range(start, end)]


def _pad_inputs(seqs: Sequence[Sequence[int]], tokenizer: Tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) input ids with special tokens, padded, and the attention mask."""
    full = [tokenizer.with_specials(s)[0] for s in seqs]
    width = max(len(f) for f in full)
    ids = torch.full((len(full), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(full), width), dtype=torch.long)
    for i, f in enumerate(full):
        ids[i, :len(f)] = torch.tensor(f, dtype=torch.long)
        mask[i, :len(f)] = 1
    return ids, mask


class _BemCollator:
    """Sentences -> a BEM batch: sampled targets and candidates, each distinct gloss encoded once."""

    def __init__(self, features: SenseFeatures, tokenizer: Tokenizer, config: SenseTrainConfig):
        self.f, self.tok, self.cfg = features, tokenizer, config

    def __call__(self, inputs: list[ContextInput], rng: np.random.Generator) -> dict[str, torch.Tensor]:
        cfg, f = self.cfg, self.f
        ids, mask = _pad_inputs([x.ids for x in inputs], self.tok)
        rows, weights, cands, golds = [], [], [], []
        gloss_row: dict[int, int] = {}
        for r, x in enumerate(inputs):
            chosen = range(len(x.targets))
            if len(x.targets) > cfg.max_targets_per_sentence:
                chosen = sorted(rng.choice(len(x.targets), cfg.max_targets_per_sentence, replace=False).tolist())
            for j in chosen:
                t = x.targets[j]
                gold = list(dict.fromkeys(t.gold))[:cfg.max_candidates - 1]  # room for a negative
                others = [c for c in t.candidates if c not in gold]
                room = cfg.max_candidates - len(gold)
                if len(others) > room:
                    others = [others[i] for i in sorted(rng.choice(len(others), room, replace=False).tolist())]
                picked = gold + others
                rows.append(r)
                weights.append([(p + 1, w) for p, w in _word_weights(t.start, t.end, cfg.subword_pooling)])
                cands.append([gloss_row.setdefault(k, len(gloss_row)) for k in picked])
                golds.append([True] * len(gold) + [False] * len(others))
        m, width = len(rows), ids.shape[1]
        target_weights = torch.zeros((m, width), dtype=torch.float32)
        for i, ws in enumerate(weights):
            for p, w in ws:
                target_weights[i, p] = w
        k = max(len(c) for c in cands)
        candidates = torch.full((m, k), -1, dtype=torch.long)
        gold = torch.zeros((m, k), dtype=torch.bool)
        for i, (c, g) in enumerate(zip(cands, golds)):
            candidates[i, :len(c)] = torch.tensor(c)
            gold[i, :len(g)] = torch.tensor(g)
        keys = list(gloss_row)  # key index of each gloss row, in row order
        g_ids, g_mask = _pad_inputs([f.gloss_ids[key] for key in keys], self.tok)
        gloss_weights = torch.zeros(g_ids.shape, dtype=torch.float32)
        for i, key in enumerate(keys):
            spans = f.gloss_spans[key]
            for a, b in spans:
                for p, w in _word_weights(a, b, cfg.subword_pooling):
                    gloss_weights[i, p + 1] += w / len(spans)
        return {"input_ids": ids, "attention_mask": mask, "target_rows": torch.tensor(rows, dtype=torch.long),
                "target_weights": target_weights, "gloss_input_ids": g_ids, "gloss_attention_mask": g_mask,
                "gloss_weights": gloss_weights, "candidates": candidates, "gold": gold}


class _SupConCollator:
    """Occurrences (input index, target index) -> a SupCon batch, each distinct input encoded once."""

    def __init__(self, features: SenseFeatures, tokenizer: Tokenizer, config: SenseTrainConfig):
        self.f, self.tok, self.cfg = features, tokenizer, config

    def __call__(self, items: list[tuple[int, int]], rng: np.random.Generator) -> dict[str, torch.Tensor]:
        row_of: dict[int, int] = {}
        for i, _ in items:
            row_of.setdefault(i, len(row_of))
        ids, mask = _pad_inputs([self.f.inputs[i].ids for i in row_of], self.tok)
        weights = torch.zeros((len(items), ids.shape[1]), dtype=torch.float32)
        rows, senses, lemmas = [], [], []
        for m, (i, j) in enumerate(items):
            t = self.f.inputs[i].targets[j]
            for p, w in _word_weights(t.start, t.end, self.cfg.subword_pooling):
                weights[m, p + 1] = w
            rows.append(row_of[i])
            senses.append(t.sense)
            lemmas.append(t.lemma)
        return {"input_ids": ids, "attention_mask": mask, "target_rows": torch.tensor(rows, dtype=torch.long),
                "target_weights": weights, "sense_ids": torch.tensor(senses, dtype=torch.long),
                "lemma_ids": torch.tensor(lemmas, dtype=torch.long)}


def _bucketed_order(rng: np.random.Generator, lengths: Sequence[int], bucket: int) -> list[int]:
    """A random order in which runs of ``bucket`` examples are sorted by length (less padding per batch)."""
    order = rng.permutation(len(lengths)).tolist()
    out = []
    for i in range(0, len(order), bucket):
        out.extend(sorted(order[i:i + bucket], key=lambda j: lengths[j]))
    return out


def _bem_plan(features: SenseFeatures, config: SenseTrainConfig) -> Callable[[int, np.random.Generator], list]:
    gloss_len = {}
    lengths, costs = [], []
    for x in features.inputs:
        per_target = []
        for t in x.targets:
            glens = [gloss_len.setdefault(c, len(features.gloss_ids[c]) + 2) for c in t.candidates]
            per_target.append(min(config.max_candidates, len(glens)) * float(np.mean(glens)))
        n = min(len(x.targets), config.max_targets_per_sentence)
        lengths.append(len(x.ids) + 2)
        costs.append(len(x.ids) + 2 + n * float(np.mean(per_target)))

    def plan(epoch: int, rng: np.random.Generator) -> list[list[int]]:
        order = _bucketed_order(rng, lengths, _BUCKET_BATCHES * config.max_items_per_batch)
        batches = pack_batches(order, costs, max_cost=config.max_tokens_per_batch,
                               max_items=config.max_items_per_batch)
        return [batches[i] for i in rng.permutation(len(batches))]

    return plan


def _supcon_items(features: SenseFeatures) -> tuple[list[tuple[int, int]], dict[int, dict[int, list[int]]]]:
    """Every occurrence as (input, target), and lemma -> sense -> occurrence indices."""
    items: list[tuple[int, int]] = []
    groups: dict[int, dict[int, list[int]]] = {}
    for i, x in enumerate(features.inputs):
        for j, t in enumerate(x.targets):
            groups.setdefault(t.lemma, {}).setdefault(t.sense, []).append(len(items))
            items.append((i, j))
    return items, groups


def _supcon_plan(features: SenseFeatures, items: list[tuple[int, int]], groups: dict[int, dict[int, list[int]]],
                 config: SenseTrainConfig) -> Callable[[int, np.random.Generator], list]:
    lengths = [len(features.inputs[i].ids) + 2 for i, _ in items]
    lemma_order = sorted(groups)

    def plan(epoch: int, rng: np.random.Generator) -> list[list[int]]:
        chunks: list[list[int]] = []
        for lemma in (lemma_order[i] for i in rng.permutation(len(lemma_order))):
            pools = {s: [occ[i] for i in rng.permutation(len(occ))] for s, occ in sorted(groups[lemma].items())}
            while True:
                live = [s for s, pool in pools.items() if pool]
                if len(live) < 2:
                    break
                picked = [live[i] for i in sorted(rng.choice(len(live), min(config.senses_per_group, len(live)),
                                                             replace=False).tolist())]
                chunk = []
                for s in picked:
                    chunk += pools[s][:config.occurrences_per_sense]
                    del pools[s][:config.occurrences_per_sense]
                chunks.append(chunk)
        if not chunks:
            raise ValueError("no lemma has two senses with occurrences to contrast")
        costs = [sum(lengths[i] for i in c) for c in chunks]
        sizes = [len(c) for c in chunks]
        # a chunk never exceeds max_items_per_batch (the config checks senses_per_group x occurrences_per_sense)
        batches = pack_batches(rng.permutation(len(chunks)).tolist(), costs, max_cost=config.max_tokens_per_batch,
                               max_items=config.max_items_per_batch, sizes=sizes)
        return [[i for c in b for i in chunks[c]] for b in batches]

    return plan


def make_batch_source(features: SenseFeatures, tokenizer: Tokenizer, config: SenseTrainConfig, *, seed: int = 0,
                      rank: int = 0, world_size: int = 1) -> PlannedBatches:
    """The endless, resumable batches of a recipe over ``features`` (see the module docstring)."""
    if config.recipe == "bem":
        return PlannedBatches(features.inputs, _bem_plan(features, config), _BemCollator(features, tokenizer, config),
                              seed=seed, rank=rank, world_size=world_size)
    items, groups = _supcon_items(features)
    return PlannedBatches(items, _supcon_plan(features, items, groups, config),
                          _SupConCollator(features, tokenizer, config), seed=seed, rank=rank, world_size=world_size)


def _eval_batches(features: SenseFeatures, tokenizer: Tokenizer, config: SenseTrainConfig) -> list[dict]:
    """Fixed batches over held-out features (the first epoch's plan, collated once with fixed generators)."""
    source = make_batch_source(features, tokenizer, config, seed=12345)
    return [batch for _, batch in zip(range(source.batches_per_epoch), source)]


