"""Training a sense-aware encoder on a sense-annotated corpus (SemCor), for nearest-sense WSD with the ordinary
:class:`~ctxemb.embedding.Embedder` and :func:`~ctxemb.wsd.build.build_sense_store` (J&M 11.3.1, with an encoder
fine-tuned so that the sense points separate).

Two recipes (:data:`RECIPES`) on the shared loop (:func:`ctxemb.training.train`: progress, checkpoints, exact resume,
torchrun), both reading a target word's vector as the Embedder pools it at query time (``layers``,
``layer_pooling``, ``subword_pooling``: by default the mean of the last four hidden states and of the word's
subwords), see :mod:`ctxemb.modeling.wsd_heads`:

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
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Protocol, Sequence

import numpy as np
import torch

from ctxemb._validation import check_choice, check_int
from ctxemb.loading import load_encoder, load_tokenizer
from ctxemb.modeling.checkpoint import save_pretrained, stamp_training_run
from ctxemb.modeling.wsd_heads import (GLOSS_ENCODERS, LAYER_POOLINGS, NEGATIVES, SCORES, ContextGlossBiEncoder,
                                       SupConSenseEncoder)
from ctxemb.inference import cpu_info
from ctxemb.paths import atomic_directory, atomic_write, shared_data_dir
from ctxemb.registry import DEFAULT_MODEL, resolve_model_dir
from ctxemb.tokenization import Tokenizer, copy_tokenizer_files, plan_windows
from ctxemb.training.data import PlannedBatches, pack_batches
from ctxemb.training.distributed import distributed_session
from ctxemb.training.loop import (Callback, TrainConfig, TrainResult, check_fresh_out_dir, epochs_to_steps,
                                  seed_everything, train)
from ctxemb.wsd.corpus import Corpus, read_dataset, split_corpus_by_document
from ctxemb.wsd.corpus_pass import MULTIWORD_MODES, embedder_words
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.glosses import gloss_words

logger = logging.getLogger(__name__)

__all__ = [
    "RECIPES", "MODEL_DIR", "SETTINGS_FILE", "TRAINING_FILE", "SenseFeatures", "SenseInventory", "SenseTrainConfig",
    "SenseTrainResult", "TimeBudget", "WordNetInventory", "build_features", "check_held_out_documents",
    "make_batch_source", "run_sense_training", "trained_embedder_options",
]

Recipe = Literal["bem", "supcon"]
RECIPES: tuple[str, ...] = ("bem", "supcon")
MODEL_DIR = "model"
GLOSS_ENCODER_DIR = "gloss_encoder"
TRAINING_FILE = "wsd_training.json"
SETTINGS_FILE = "wsd_settings.json"  # in the run directory: the recipe settings a resumed run is compared with
_SUBWORD_POOLINGS = ("mean", "first", "last")
_BUCKET_BATCHES = 50  # batches' worth of examples sorted by length together (less padding, still shuffled)


# --------------------------------------------------------------------------------------------------- senses

class SenseInventory(Protocol):
    """Where candidate senses and glosses come from (WordNet by default; tests plant their own)."""

    def candidates(self, word: str, lemma: str | None, pos: str | None) -> tuple[str, ...]:
        """The candidate sense keys of a target, in the inventory's order."""
        ...

    def gloss_words(self, key: str) -> list[str]:
        """The words of a sense's gloss text, as they are embedded."""
        ...


class WordNetInventory:
    """WordNet 3.0 (through nltk): candidates exactly as the :class:`~ctxemb.wsd.disambiguate.Disambiguator` takes
    them for a corpus instance, glosses as :func:`~ctxemb.wsd.glosses.embed_glosses` embeds them."""

    def candidates(self, word: str, lemma: str | None, pos: str | None) -> tuple[str, ...]:
        return tuple(Disambiguator._target(0, word, lemma, pos)[3])

    def gloss_words(self, key: str) -> list[str]:
        return gloss_words(key)


# --------------------------------------------------------------------------------------------------- config

@dataclass
class SenseTrainConfig:
    """A sense-training run (see the module docstring).

    Attributes:
        recipe: ``"bem"`` or ``"supcon"``.
        model: the encoder to start from (name or HF-format directory).
        corpus: a Raganato-format training set (folder or XML); None = SemCor in the shared data folder.
        held_out_fraction: share of the corpus's documents held out (0 = train on all); ``split_seed`` seeds the
            split. The defaults are those of ``benchmarks/wsd.py``.
        max_train_sentences: use only the first N training sentences (None: all), for quick runs.
        eval_sentences: held-out sentences the loop evaluates the objective on (0: none).
        layers, layer_pooling, subword_pooling: how a target's vector is pooled, as the Embedder's fields of the
            same names (hidden-state indices: 0 = embedding output, -1 = last layer); use the same ones for the store.
        multiword: how ``_``-joined multiword tokens reach the tokenizer (as :class:`~ctxemb.wsd.build.BuildConfig`).
        max_length: tokens per context input, special tokens included; longer sentences are cut into overlapping
            windows, each target read from the window where it has most context. None: the tokenizer's maximum,
            as the Embedder uses.
        max_gloss_length: tokens per gloss, special tokens included (longer glosses lose their last words; counted
            and logged).
        epochs: passes over the training data (an epoch of ``supcon`` is the balanced sample described above).
        max_steps: optimizer steps, overriding ``epochs``.
        max_minutes: stop once this call's training loop has run this many minutes (reading the corpus and building
            features do not count; a checkpoint is written; None: no limit).
        max_tokens_per_batch: token budget of a batch (see the module docstring).
        max_items_per_batch: most sentences (``bem``) or occurrences (``supcon``; at least one lemma group,
            ``senses_per_group * occurrences_per_sense``) per batch.
        trainable_layers: train only the top k layers, 1..L (None: all; with any k the embeddings are frozen).
        max_targets_per_sentence: ``bem``: targets drawn per sentence and batch.
        max_candidates: ``bem``: candidates per target (gold senses + a random sample of the others).
        gloss_encoder: ``bem``: ``"shared"`` weights or a ``"separate"`` gloss encoder.
        score: ``bem``: ``"dot"`` (BEM's) or ``"cosine"`` (divided by ``temperature``; the store ranks by cosine).
        temperature: ``supcon``'s temperature, and ``bem``'s with ``score="cosine"``.
        negatives: ``supcon``: contrast with the whole ``"batch"`` or only the same ``"lemma"``.
        senses_per_group, occurrences_per_sense: ``supcon``: the shape of a lemma's group in a batch.
        train: the loop's settings (``out_dir`` required; ``max_steps`` is set from ``epochs``/``max_steps``).

    Raises:
        ValueError: an unknown option or an out-of-range number (naming the field); no ``train.out_dir``.
        TypeError: a count that is not an integer, or ``train`` that is not a TrainConfig (or a mapping of one).
    """

    recipe: Recipe
    model: str = DEFAULT_MODEL
    corpus: str | None = None
    held_out_fraction: float = 0.1
    split_seed: int = 0
    max_train_sentences: int | None = None
    eval_sentences: int = 500
    layers: tuple[int, ...] = (-4, -3, -2, -1)
    layer_pooling: str = "mean"
    subword_pooling: str = "mean"
    multiword: str = "space"
    max_length: int | None = None
    max_gloss_length: int = 64
    epochs: float = 1.0
    max_steps: int | None = None
    max_minutes: float | None = None
    max_tokens_per_batch: int = 4096
    max_items_per_batch: int = 32
    trainable_layers: int | None = None
    max_targets_per_sentence: int = 4
    max_candidates: int = 8
    gloss_encoder: str = "shared"
    score: str = "dot"
    temperature: float = 0.1
    negatives: str = "batch"
    senses_per_group: int = 4
    occurrences_per_sense: int = 4
    train: TrainConfig = field(default_factory=lambda: TrainConfig(learning_rate=2e-5, max_steps=1,
                                                                   warmup_ratio=0.1))

    def __post_init__(self) -> None:
        if isinstance(self.train, Mapping):
            self.train = TrainConfig.from_dict({"max_steps": 1, **self.train})
        if not isinstance(self.train, TrainConfig):
            raise TypeError(f"train must be a TrainConfig, got {type(self.train).__name__}")
        check_choice(self.recipe, "recipe", RECIPES)
        check_choice(self.layer_pooling, "layer_pooling", LAYER_POOLINGS)
        check_choice(self.subword_pooling, "subword_pooling", _SUBWORD_POOLINGS)
        check_choice(self.multiword, "multiword", MULTIWORD_MODES)
        check_choice(self.gloss_encoder, "gloss_encoder", GLOSS_ENCODERS)
        check_choice(self.score, "score", SCORES)
        check_choice(self.negatives, "negatives", NEGATIVES)
        if isinstance(self.layers, (str, int)) or not len(self.layers) or \
                not all(isinstance(i, int) and not isinstance(i, bool) for i in self.layers):
            raise ValueError(f"layers must be a non-empty sequence of hidden-state indices, got {self.layers!r}")
        self.layers = tuple(self.layers)
        if not (isinstance(self.held_out_fraction, (int, float)) and 0 <= self.held_out_fraction < 1):
            raise ValueError(f"held_out_fraction must be in [0, 1), got {self.held_out_fraction!r}")
        for name in ("split_seed", "eval_sentences"):
            check_int(getattr(self, name), name, low=0)
        for name in ("max_gloss_length", "max_tokens_per_batch", "max_items_per_batch", "max_targets_per_sentence",
                     "occurrences_per_sense"):
            check_int(getattr(self, name), name, low=1)
        check_int(self.max_candidates, "max_candidates", low=2)
        check_int(self.senses_per_group, "senses_per_group", low=2)
        for name in ("max_train_sentences", "max_length", "max_steps", "trainable_layers"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, low=1)
        if self.max_length is not None and self.max_length < 4:
            raise ValueError(f"max_length must be >= 4 tokens, got {self.max_length}")
        if self.max_gloss_length < 3:
            raise ValueError(f"max_gloss_length must be >= 3 tokens, got {self.max_gloss_length}")
        for name in ("epochs", "temperature"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if self.max_minutes is not None and not (isinstance(self.max_minutes, (int, float)) and self.max_minutes > 0):
            raise ValueError(f"max_minutes must be a positive number or None, got {self.max_minutes!r}")
        if self.recipe == "supcon" and self.senses_per_group * self.occurrences_per_sense > self.max_items_per_batch:
            raise ValueError(f"max_items_per_batch={self.max_items_per_batch} cannot hold one lemma group of "
                             f"senses_per_group x occurrences_per_sense = {self.senses_per_group} x "
                             f"{self.occurrences_per_sense} occurrences; raise it or shrink the group")
        if not self.train.out_dir:
            raise ValueError("train.out_dir is required: checkpoints, metrics and the model go there")

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "train"}
        d["layers"] = list(self.layers)
        d["train"] = self.train.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SenseTrainConfig":
        """The inverse of :meth:`to_dict`.

        Raises:
            ValueError: unknown fields (or invalid values).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown SenseTrainConfig field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)  # __post_init__ turns a ``train`` mapping into a TrainConfig

    def embedder_options(self) -> dict[str, Any]:
        """The :class:`~ctxemb.embedding.EmbedderConfig` fields that pool as this run trained."""
        return {"layers": list(self.layers), "layer_pooling": self.layer_pooling,
                "subword_pooling": self.subword_pooling}


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


def _machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "processor": cpu_info().name,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


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
_RESUME_FREE = {"epochs", "max_steps", "max_minutes", "eval_sentences", "train"}


def _record_or_compare_settings(config: SenseTrainConfig, out_dir: Path) -> None:
    """A fresh run writes its settings to ``out_dir/SETTINGS_FILE``; a resumed one warns about every setting that
    differs from them (the resumed run then does not match an uninterrupted one)."""
    path = out_dir / SETTINGS_FILE
    now = config.to_dict()
    if config.train.resume is not False and path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(k for k in set(saved) | set(now) if k not in _RESUME_FREE and saved.get(k) != now.get(k))
        if changed:
            logger.warning("resuming %s with changed recipe settings (the run will not match an uninterrupted one): "
                           "%s", out_dir, ", ".join(f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in changed))
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, encoding="utf-8") as f:
        f.write(json.dumps(now, indent=2, default=str) + "\n")


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
    with distributed_session(config.train.device) as ctx:
        if ctx.is_main:
            _record_or_compare_settings(config, out_dir)
        source = make_batch_source(features, tokenizer, config, seed=config.train.seed, rank=ctx.rank,
                                   world_size=ctx.world_size)
        steps = config.max_steps or epochs_to_steps(config.epochs, source.batches_per_epoch,
                                                    config.train.grad_accumulation_steps)
        train_config = dataclasses.replace(config.train, max_steps=steps)
        stats["batches_per_epoch"] = source.batches_per_epoch * ctx.world_size
        result = train(model, source, train_config, eval_data=eval_data, callbacks=cbs)
        if ctx.is_main:
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
                "machine": _machine(),
            }
            with atomic_directory(model_dir) as tmp:
                save_pretrained(model.encoder, tmp)
                copy_tokenizer_files(resolve_model_dir(config.model), tmp, tokenizer)
                if config.recipe == "bem" and model.gloss_encoder is not None:
                    save_pretrained(model.gloss_encoder, tmp / GLOSS_ENCODER_DIR)
                    copy_tokenizer_files(resolve_model_dir(config.model), tmp / GLOSS_ENCODER_DIR, tokenizer)
                    stamp_training_run(tmp / GLOSS_ENCODER_DIR, f"wsd-{config.recipe}-gloss")
                run_id = stamp_training_run(tmp, f"wsd-{config.recipe}")
                info["training_run"] = run_id
                (tmp / TRAINING_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
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
    info = json.loads(path.read_text(encoding="utf-8")).get("held_out")
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
    info = json.loads(path.read_text(encoding="utf-8"))
    return dict(info["embedder"])
