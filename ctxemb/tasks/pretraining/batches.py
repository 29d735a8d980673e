"""Resumable batch sources for pretraining (J&M 11.2).

:class:`PretrainingBatches` is an endless, seeded, exactly resumable source of this rank's micro-batches
(``BatchSource`` of :mod:`ctxemb.training.data`): each epoch shuffles the rank's documents of a
:class:`~ctxemb.tasks.pretraining.shards.TokenShards` set with ``(seed, epoch)``, cuts the order into windows of
``shuffle_window`` documents, builds the window's sequences with :mod:`ctxemb.tasks.pretraining.sequences` (each
document's from a generator seeded with ``(seed, epoch, document)``) and shuffles them. The position (epoch, window,
offset) plus the source's own ``torch.Generator`` (handed to the masker) is the whole state.
:class:`MultilingualBatches` draws each batch from one of several such sources (one per language) with
q_i ~ p_i^alpha (:mod:`ctxemb.tasks.pretraining.sampling`).

Shapes: B sequences in a batch, T tokens per sequence.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np
import torch

from ctxemb.core.validation import check_choice, check_int
from ctxemb.tasks.pretraining.sampling import MultilingualSampler
from ctxemb.tasks.pretraining.sequences import (OBJECTIVES, Instance, Objective, _layout_of, collate_instances,
                                          nsp_instances, pack_sentences)
from ctxemb.tasks.pretraining.shards import TokenShards

logger = logging.getLogger(__name__)

__all__ = ["PretrainingBatches", "MultilingualBatches"]

# Tags that keep the seed streams of different purposes apart.
_TAG_ORDER, _TAG_DOC, _TAG_WINDOW, _TAG_TORCH = 1, 2, 3, 4


def _seed_of(*parts: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(p) for p in parts])))


def _accepts_generator(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "generator" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class PretrainingBatches:
    """Endless, seeded, exactly resumable micro-batches of one rank for MLM(+NSP) pretraining.

    Batches have ``input_ids``, ``attention_mask``, ``token_type_ids``, ``word_ids`` (B, T) int64 (word_ids -1 at
    special and padding tokens, including [UNK]s in the text: :attr:`TokenShards.special_token_ids`), ``next_sentence_label`` (B,) for ``objective="nsp"``, and, with a ``masker``,
    ``labels`` (B, T) (plus ``span_left``/``span_right``/``span_position`` when the masker gives them); the masked
    ids replace ``input_ids``.

    Order: epoch e permutes this rank's documents with ``(seed, e)``; the permutation is cut into windows of
    ``shuffle_window`` documents; a window's sequences are built (document d's with a generator seeded by
    ``(seed, e, d)``) and shuffled, then consumed in order; batches run on across window and epoch ends (every
    batch is full). The masker is called with the source's own ``torch.Generator``, whose state is part of
    :meth:`state_dict`, so a resumed source yields exactly the batches an uninterrupted one would.

    Args:
        shards: the shard set.
        objective: ``"nsp"`` (BERT pairs), ``"full_sentences"`` or ``"doc_sentences"`` (RoBERTa packing).
        max_len: tokens per sequence, special tokens included.
        batch_size: sequences per micro-batch.
        seed: the base seed.
        rank, world_size: this process's share of the documents (:meth:`TokenShards.for_rank`).
        masker: e.g. :class:`ctxemb.tasks.pretraining.masking.Masker`; called as ``masker(input_ids,
            attention_mask=, word_ids=, generator=)`` (``generator`` only if it accepts one; otherwise it runs
            under a forked torch RNG seeded from the source's generator).
        short_seq_prob, random_next_prob: NSP's (BERT: 0.1 and 0.5).
        shuffle_window: documents per shuffle window (more: better mixing, more memory for one window's sequences).
        pad_to: ``"longest"`` pads a batch to its longest sequence, ``"max_len"`` always to ``max_len``.

    Attributes:
        epoch, window, offset: the position of the next sequence.
        batches: micro-batches yielded so far.
        split_sentences: sentences longer than one sequence's content that were split into pieces, counted over
            the windows built so far by this object (a diagnostic, not part of the state).
    """

    def __init__(self, shards: TokenShards, *, objective: Objective, max_len: int, batch_size: int, seed: int = 0,
                 rank: int = 0, world_size: int = 1, masker: Callable | None = None, short_seq_prob: float = 0.1,
                 random_next_prob: float = 0.5, shuffle_window: int = 1000,
                 pad_to: Literal["longest", "max_len"] = "longest"):
        if not isinstance(shards, TokenShards):
            raise TypeError(f"shards must be a TokenShards (TokenShards.open(dir)); got {type(shards).__name__}")
        self.objective = check_choice(objective, "objective", OBJECTIVES)
        self.max_len = check_int(max_len, "max_len", low=8)
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.seed = check_int(seed, "seed", low=0)
        self.shuffle_window = check_int(shuffle_window, "shuffle_window", low=1)
        self.pad_to = check_choice(pad_to, "pad_to", ("longest", "max_len"))
        for name, v in (("short_seq_prob", short_seq_prob), ("random_next_prob", random_next_prob)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1]; got {v!r}")
        self.short_seq_prob, self.random_next_prob = float(short_seq_prob), float(random_next_prob)
        if masker is not None and not callable(masker):
            raise TypeError(f"masker must be callable (input_ids, attention_mask=, word_ids=); "
                            f"got {type(masker).__name__}")
        self.masker = masker
        self.shards = shards
        self.view = shards.for_rank(rank, world_size)
        self.rank, self.world_size = rank, world_size
        if objective == "nsp" and self.view.n_documents < 2:
            raise ValueError(f"objective 'nsp' needs at least 2 documents per rank (a random next segment comes from "
                             f"another document); rank {rank} of {world_size} has {self.view.n_documents}")
        self.layout = _layout_of(shards)
        self.n_windows = math.ceil(self.view.n_documents / self.shuffle_window)
        self.generator = torch.Generator().manual_seed(int(np.random.SeedSequence(
            [self.seed, _TAG_TORCH, rank]).generate_state(1, np.uint64)[0] >> 1))
        self._pass_generator = masker is not None and _accepts_generator(masker)
        self.epoch = self.window = self.offset = self.batches = 0
        self.split_sentences = 0
        self._order: tuple[int, np.ndarray] | None = None
        self._cache: tuple[tuple[int, int], list[Instance]] | None = None
        self._warned_split = False

    # ---- the order of sequences ---------------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> np.ndarray:
        """Positions in this rank's view, in the order epoch ``epoch`` reads the documents."""
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, _seed_of(self.seed, _TAG_ORDER, epoch).permutation(self.view.n_documents))
        return self._order[1]

    def window_instances(self, epoch: int, window: int) -> list[Instance]:
        """The shuffled sequences of one window (cached: the last window asked for)."""
        key = (epoch, window)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        order = self.epoch_order(epoch)
        indices = order[window * self.shuffle_window:(window + 1) * self.shuffle_window]
        if self.objective == "nsp":
            instances = []
            for index in indices:
                rng = _seed_of(self.seed, _TAG_DOC, epoch, int(self.view.documents[index]))
                instances.extend(nsp_instances(self.view, int(index), rng, max_len=self.max_len,
                                               short_seq_prob=self.short_seq_prob,
                                               random_next_prob=self.random_next_prob, layout=self.layout))
            n_split = sum(int((np.diff(self.view.document(int(i)).sentence_offsets)
                               > self.max_len - self.layout.pair_specials).sum()) for i in indices)
        else:
            instances, n_split = pack_sentences(self.view, indices, max_len=self.max_len,
                                                cross_documents=self.objective == "full_sentences",
                                                layout=self.layout)
        if n_split:
            self.split_sentences += n_split
            log = logger.debug if self._warned_split else logger.info
            log("%d sentence(s) longer than one sequence (max_len %d) split into pieces (epoch %d, window %d)",
                n_split, self.max_len, epoch, window)
            self._warned_split = True
        perm = _seed_of(self.seed, _TAG_WINDOW, epoch, window).permutation(len(instances))
        instances = [instances[i] for i in perm]
        self._cache = (key, instances)
        return instances

    def _next_instances(self, n: int) -> list[Instance]:
        items: list[Instance] = []
        while len(items) < n:
            instances = self.window_instances(self.epoch, self.window)
            if self.offset >= len(instances):
                self.window += 1
                self.offset = 0
                if self.window >= self.n_windows:
                    self.epoch += 1
                    self.window = 0
                continue
            take = instances[self.offset:self.offset + n - len(items)]
            items.extend(take)
            self.offset += len(take)
        return items

    # ---- batches ------------------------------------------------------------------------------------------
    def _collate(self, items: list[Instance], generator: torch.Generator | None) -> dict[str, torch.Tensor]:
        batch = collate_instances(items, self.layout.pad, pad_to=self.max_len if self.pad_to == "max_len" else None,
                                  nsp=self.objective == "nsp")
        if self.masker is not None:
            batch.update(self._mask(batch, generator))
        return batch

    def _mask(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        kwargs = dict(attention_mask=batch["attention_mask"], word_ids=batch["word_ids"])
        if self._pass_generator:
            out = self.masker(batch["input_ids"], generator=generator, **kwargs)
        else:
            seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                out = self.masker(batch["input_ids"], **kwargs)
        result = {"input_ids": out.input_ids, "labels": out.labels}
        for name in ("span_left", "span_right", "span_position"):
            value = getattr(out, name, None)
            if value is not None:
                result[name] = value
        return result

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            items = self._next_instances(self.batch_size)
            batch = self._collate(items, self.generator)
            self.batches += 1  # the position now points past this batch: state_dict() taken now resumes after it
            yield batch

    def one_epoch(self, epoch: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        """All sequences of one epoch once, in batches (the last may be smaller), without touching the source's
        position; masking uses a generator seeded from ``(seed, epoch)`` (for held-out evaluation)."""
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence(
            [self.seed, _TAG_TORCH, self.rank, epoch + 1]).generate_state(1, np.uint64)[0] >> 1))
        items: list[Instance] = []
        for w in range(self.n_windows):
            for inst in self.window_instances(epoch, w):
                items.append(inst)
                if len(items) == self.batch_size:
                    yield self._collate(items, generator)
                    items = []
        if items:
            yield self._collate(items, generator)

    # ---- state --------------------------------------------------------------------------------------------
    def _config(self) -> dict:
        return {"objective": self.objective, "max_len": self.max_len, "batch_size": self.batch_size,
                "seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "shuffle_window": self.shuffle_window, "short_seq_prob": self.short_seq_prob,
                "random_next_prob": self.random_next_prob, "n_documents": self.shards.n_documents,
                "n_tokens": self.shards.n_tokens, "vocab_sha256": self.shards.manifest["tokenizer"]["vocab_sha256"]}

    def state_dict(self) -> dict:
        """The position after the last batch yielded: epoch, window, offset, batch count, the torch generator state
        (a uint8 tensor) and the settings that give the positions their meaning."""
        return {"epoch": self.epoch, "window": self.window, "offset": self.offset, "batches": self.batches,
                "generator": self.generator.get_state(),
                "config": self._config()}

    def load_state_dict(self, state: dict) -> None:
        """Continue after the batch a saved state points past.

        Raises:
            KeyError: the state lacks a key.
            ValueError: the state was saved with other settings or another corpus (its positions would name other
                sequences).
        """
        for key in ("epoch", "window", "offset", "batches", "generator", "config"):
            if key not in state:
                raise KeyError(f"PretrainingBatches state has no {key!r}; expected what state_dict() returns")
        mine = self._config()
        diff = {k: (state["config"].get(k), v) for k, v in mine.items() if state["config"].get(k) != v}
        if diff:
            raise ValueError("cannot resume PretrainingBatches: the saved state differs in "
                             + ", ".join(f"{k} (saved {a!r}, now {b!r})" for k, (a, b) in diff.items()))
        epoch, window, offset = int(state["epoch"]), int(state["window"]), int(state["offset"])
        if epoch < 0 or not 0 <= window < self.n_windows or offset < 0:
            raise ValueError(f"invalid PretrainingBatches state: epoch {epoch}, window {window} of {self.n_windows}, "
                             f"offset {offset}")
        self.epoch, self.window, self.offset = epoch, window, offset
        self.batches = int(state["batches"])
        g = state["generator"]
        self.generator.set_state(g if isinstance(g, torch.Tensor) else torch.tensor(g, dtype=torch.uint8))


class MultilingualBatches:
    """Batches from one of several sources (e.g. one :class:`PretrainingBatches` per language), the source of each
    batch drawn with q_i ~ p_i^alpha (J&M eq. 11.7) by a seeded
    :class:`~ctxemb.tasks.pretraining.sampling.MultilingualSampler`.

    Args:
        sources: K batch sources (each endless and resumable).
        sizes: K sizes for p_i (default: each source's ``shards.n_tokens``).
        alpha: the exponent (0.3 as XLM-R).
        seed: the sampler's seed.
        names: optional K names (e.g. languages), used in the state.
    """

    def __init__(self, sources: Sequence[Any], *, sizes: Sequence[float] | None = None, alpha: float = 0.3,
                 seed: int = 0, names: Sequence[str] | None = None):
        self.sources = list(sources)
        if not self.sources:
            raise ValueError("sources is empty: expected at least one batch source")
        if sizes is None:
            try:
                sizes = [s.shards.n_tokens for s in self.sources]
            except AttributeError:
                raise ValueError("sizes is required when a source has no .shards.n_tokens") from None
        if len(sizes) != len(self.sources):
            raise ValueError(f"sizes has {len(sizes)} entries for {len(self.sources)} sources")
        self.sampler = MultilingualSampler(sizes, alpha, seed=seed, names=names)
        self._iters: list[Iterator | None] = [None] * len(self.sources)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            i = self.sampler.draw()
            if self._iters[i] is None:
                self._iters[i] = iter(self.sources[i])
            yield next(self._iters[i])

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "sources": [s.state_dict() for s in self.sources]}

    def load_state_dict(self, state: dict) -> None:
        if len(state.get("sources", ())) != len(self.sources):
            raise ValueError(f"the saved state has {len(state.get('sources', ()))} sources; this has "
                             f"{len(self.sources)}")
        self.sampler.load_state_dict(state["sampler"])
        for s, st in zip(self.sources, state["sources"]):
            s.load_state_dict(st)
        self._iters = [None] * len(self.sources)
