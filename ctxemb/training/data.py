"""Batch sources for the training loop: the protocol it reads, a map-style source for fine-tuning, and a finite
evaluation iterator.

The loop draws micro-batches from an *endless* iterator; the source advances its own epochs (reshuffling with
``seed + epoch``, so nobody can forget ``DistributedSampler.set_epoch``) and can save and restore its position,
which is what makes a resumed run see exactly the batches an uninterrupted one would have seen.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np
import torch
from torch.utils.data import default_collate

from ctxemb.core.validation import is_int

Batch = dict[str, torch.Tensor]


@runtime_checkable
class BatchSource(Protocol):
    """What :func:`ctxemb.training.loop.train` reads.

    ``__iter__`` yields this rank's micro-batches (dicts of tensors) without end; ``state_dict`` describes the
    position after the last batch yielded (epoch, offset, the source's own generator state) and contains only
    Python numbers, strings, lists/tuples/dicts and torch tensors (checkpoints are loaded with
    ``weights_only=True``); ``load_state_dict`` is called before ``__iter__`` to continue from there.
    """

    def __iter__(self) -> Iterator[Batch]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def _check_dataset(data: Any, name: str = "data") -> int:
    if not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
        raise TypeError(f"{name} must be a map-style dataset (a sequence or a torch Dataset with __len__ and "
                        f"__getitem__), got {type(data).__name__}")
    n = len(data)
    if n == 0:
        raise ValueError(f"{name} is empty")
    return n


def _check_rank(rank: int, world_size: int) -> None:
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if not (isinstance(rank, int) and 0 <= rank < world_size):
        raise ValueError(f"rank must be an integer in [0, world_size ({world_size})), got {rank!r}")


class DatasetBatches:
    """Endless, resumable micro-batches from a map-style dataset, split between ranks.

    Each epoch is a permutation of all examples drawn from a generator seeded with ``seed + epoch`` (the order
    is the same on every rank); rank ``r`` of ``world_size`` takes positions ``r, r + world_size, ...``
    (as ``DistributedSampler``), so with equal per-rank batches a step's union over ranks is one contiguous
    slice of the permutation, exactly the batch a single process with ``world_size`` times the batch size draws.
    Unless ``drop_last``, the permutation is padded with its own first examples to a multiple of
    ``world_size`` so that every rank has the same number of batches (DDP needs it), and the last short batch
    of an epoch is kept; with ``drop_last`` the tail that does not fill a whole batch on every rank is dropped.

    Args:
        data: a sequence of examples or a map-style torch Dataset.
        batch_size: examples per micro-batch on this rank.
        collate: turns a list of examples into a dict of tensors (default: torch's ``default_collate``).
        shuffle: permute each epoch (else the dataset order, every epoch).
        seed: the base seed of the permutations.
        rank, world_size: this process's share (``DistributedContext.rank`` / ``.world_size``).
        drop_last: drop the incomplete tail of each epoch instead of padding/keeping it.
        lengths: each example's length (e.g. its token count): batches are then **grouped by length**. The
            epoch's permutation is cut into mega-batches of ``mega_batch`` global batches (``batch_size *
            world_size`` examples each), each sorted by length (longest first), cut into global batches again, and
            the global batches are shuffled (seeded), the one holding the longest example first (so a batch that
            does not fit memory fails at once). Batches then hold examples of similar length: less padding, same
            examples per epoch, still random across batches. None: plain random batches.
        mega_batch: global batches per mega-batch (50, as transformers' ``group_by_length``).

    Raises:
        ValueError: empty data, ``batch_size`` < 1, a bad rank, or no full batch per epoch with ``drop_last``;
            ``lengths`` not one non-negative integer per example; ``mega_batch`` < 1.
    """

    def __init__(self, data: Sequence | torch.utils.data.Dataset, *, batch_size: int,
                 collate: Callable[[list], Batch] | None = None, shuffle: bool = True, seed: int = 0,
                 rank: int = 0, world_size: int = 1, drop_last: bool = False,
                 lengths: Sequence[int] | None = None, mega_batch: int = 50):
        self.num_examples = _check_dataset(data)
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        _check_rank(rank, world_size)
        if lengths is not None:
            lengths = list(lengths)
            if len(lengths) != self.num_examples:
                raise ValueError(f"lengths must give one length per example: {self.num_examples} examples, "
                                 f"{len(lengths)} lengths")
            bad = next((i for i, x in enumerate(lengths) if not is_int(x) or x < 0), None)
            if bad is not None:
                raise ValueError(f"lengths[{bad}] must be a non-negative integer; got {lengths[bad]!r}")
        if not (is_int(mega_batch) and mega_batch >= 1):
            raise ValueError(f"mega_batch must be an integer >= 1, got {mega_batch!r}")
        self.lengths = lengths
        self.mega_batch = int(mega_batch)
        self.data = data
        self.batch_size = batch_size
        self.collate = default_collate if collate is None else collate
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.drop_last = bool(drop_last)
        if drop_last:
            self.examples_per_rank = self.num_examples // world_size
            self.batches_per_epoch = self.examples_per_rank // batch_size
            if self.batches_per_epoch == 0:
                raise ValueError(f"with drop_last, {self.num_examples} examples over {world_size} rank(s) do not fill "
                                 f"one batch of {batch_size} per rank")
        else:
            self.examples_per_rank = math.ceil(self.num_examples / world_size)
            self.batches_per_epoch = math.ceil(self.examples_per_rank / batch_size)
        self.epoch = 0
        self.position = 0  # batches of the current epoch already yielded

    def set_epoch(self, epoch: int) -> None:
        """Continue from the start of ``epoch`` (as ``DistributedSampler.set_epoch``; rarely needed here)."""
        if not (isinstance(epoch, int) and epoch >= 0):
            raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")
        self.epoch, self.position = epoch, 0

    def epoch_indices(self, epoch: int) -> list[int]:
        """This rank's example indices for ``epoch``, in the order they are batched."""
        n = self.num_examples
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        total = self.examples_per_rank * self.world_size
        if total > n:  # pad with the permutation's own start (it may have to wrap more than once)
            order = (order * math.ceil(total / n))[:total]
        else:
            order = order[:total]
        if self.lengths is not None:
            order = self._group_by_length(order, epoch)
        mine = order[self.rank::self.world_size]
        if self.drop_last:
            mine = mine[: self.batches_per_epoch * self.batch_size]
        return mine

    def _group_by_length(self, order: list[int], epoch: int) -> list[int]:
        """``order`` regrouped so that each global batch (``batch_size * world_size`` consecutive positions, which
        the ranks share out) holds examples of similar length; see ``lengths`` in the class docstring."""
        step = self.batch_size * self.world_size
        mega = step * self.mega_batch
        lengths = self.lengths
        grouped: list[int] = []
        for start in range(0, len(order), mega):
            grouped.extend(sorted(order[start:start + mega], key=lambda i: -lengths[i]))
        batches = [grouped[i:i + step] for i in range(0, len(grouped), step)]
        # a short global batch (the epoch's remainder) stays last: batch b of every rank must come from global
        # batch b, and with drop_last the remainder is what gets dropped
        tail = [b for b in batches if len(b) < step]
        batches = [b for b in batches if len(b) == step]
        if self.shuffle and len(batches) > 1:
            g = torch.Generator().manual_seed(self.seed + epoch + 1_000_003)
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
            longest = max(range(len(batches)), key=lambda b: max(lengths[i] for i in batches[b]))
            batches[0], batches[longest] = batches[longest], batches[0]
        return [i for b in batches + tail for i in b]

    def padding_fraction(self, epoch: int = 0, *, lengths: Sequence[int] | None = None) -> float | None:
        """The share of padding positions in this rank's batches of ``epoch`` (each batch padded to its longest
        example), by the examples' ``lengths`` (default: the ones batches are grouped by; None without any).
        Reported by the fine-tuning runs (``run.json``)."""
        lengths = self.lengths if lengths is None else list(lengths)
        if lengths is None:
            return None
        if len(lengths) != self.num_examples:
            raise ValueError(f"lengths must give one length per example: {self.num_examples} examples, "
                             f"{len(lengths)} lengths")
        indices = self.epoch_indices(epoch)
        padded = real = 0
        for b in range(self.batches_per_epoch):
            chunk = [lengths[i] for i in indices[b * self.batch_size:(b + 1) * self.batch_size]]
            if chunk:
                padded += max(chunk) * len(chunk)
                real += sum(chunk)
        return 1.0 - real / padded if padded else 0.0

    def __iter__(self) -> Iterator[Batch]:
        while True:
            indices = self.epoch_indices(self.epoch)
            while self.position < self.batches_per_epoch:
                start = self.position * self.batch_size
                chunk = indices[start:start + self.batch_size]
                # Advance before yielding: state_dict() taken after a batch was consumed points past it.
                self.position += 1
                yield self.collate([self.data[i] for i in chunk])
            self.epoch += 1
            self.position = 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "num_examples": self.num_examples, "batch_size": self.batch_size, "world_size": self.world_size,
                "drop_last": self.drop_last, "shuffle": self.shuffle,
                "group_by_length": self.lengths is not None, "mega_batch": self.mega_batch}

    def load_state_dict(self, state: dict) -> None:
        """Continue after the batch a saved state points past.

        Raises:
            ValueError: the state was saved with a different dataset size, batch size, world size, seed or
                shuffle/drop_last setting (its position would then name other examples).
        """
        mine = {**self.state_dict(), "epoch": None, "position": None}
        for key in ("num_examples", "batch_size", "world_size", "seed", "drop_last", "shuffle", "group_by_length",
                    "mega_batch"):
            if key in state and state[key] != mine[key]:
                raise ValueError(f"cannot resume DatasetBatches: the saved state has {key}={state[key]!r} but this "
                                 f"source has {key}={mine[key]!r}")
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= self.batches_per_epoch:
            raise ValueError(f"invalid DatasetBatches state: epoch {epoch}, position {position} "
                             f"(batches per epoch {self.batches_per_epoch})")
        self.epoch, self.position = epoch, position


class PlannedBatches:
    """Endless, resumable batches whose grouping is planned afresh each epoch: batches under a token budget,
    examples grouped on purpose (e.g. several occurrences of one word together), random choices made per batch.

    ``plan(epoch, rng)`` returns the epoch's batches as lists of example indices; ``rng`` is a numpy generator seeded
    with ``(seed, epoch)``, and the plan must depend on nothing else, so that a resumed run plans the same epoch.
    Rank ``r`` of ``world_size`` takes batches ``r, r + world_size, ...`` of it (the list is padded with its own
    first batches to a multiple of ``world_size``, so that every rank takes the same number of steps). Each batch is
    made by ``collate(examples, rng)`` with a generator seeded with ``(seed, epoch, batch index)``: choices made while
    collating (sampled candidates, negatives) are the same in a resumed run as in an uninterrupted one.

    Args:
        data: a sequence of examples or a map-style torch Dataset.
        plan: ``plan(epoch, rng) -> list[list[int]]``, at least one non-empty batch.
        collate: ``collate(list_of_examples, rng) -> dict of tensors``.
        seed: the base seed of the plans and the collate generators.
        rank, world_size: this process's share.

    Raises:
        ValueError: empty data, a bad rank, or (when iterating) a plan without batches or with an index out of range.
    """

    def __init__(self, data: Sequence | torch.utils.data.Dataset,
                 plan: Callable[[int, np.random.Generator], list[list[int]]],
                 collate: Callable[[list, np.random.Generator], Batch], *, seed: int = 0, rank: int = 0,
                 world_size: int = 1):
        self.num_examples = _check_dataset(data)
        _check_rank(rank, world_size)
        if not (isinstance(seed, int) and seed >= 0):
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.data = data
        self.plan = plan
        self.collate = collate
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.position = 0  # batches of the current epoch already yielded by this rank
        self._planned: tuple[int, list[list[int]]] | None = None

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch`` (lists of example indices), in order."""
        if self._planned is None or self._planned[0] != epoch:
            batches = [list(map(int, b)) for b in self.plan(epoch, np.random.default_rng([self.seed, epoch]))]
            batches = [b for b in batches if b]
            if not batches:
                raise ValueError(f"the plan of epoch {epoch} has no batches")
            bad = [i for b in batches for i in b if not 0 <= i < self.num_examples]
            if bad:
                raise ValueError(f"the plan of epoch {epoch} names example {bad[0]}, outside 0..{self.num_examples - 1}")
            total = math.ceil(len(batches) / self.world_size) * self.world_size
            batches = (batches * math.ceil(total / len(batches)))[:total]
            self._planned = (epoch, batches[self.rank::self.world_size])
        return self._planned[1]

    @property
    def batches_per_epoch(self) -> int:
        """This rank's batches in the current epoch (plans may differ in length from epoch to epoch)."""
        return len(self.epoch_batches(self.epoch))

    def __iter__(self) -> Iterator[Batch]:
        while True:
            batches = self.epoch_batches(self.epoch)
            while self.position < len(batches):
                index = self.position * self.world_size + self.rank  # the batch's index in the whole epoch's plan
                self.position += 1  # advance first: a state taken after this batch points past it
                rng = np.random.default_rng([self.seed, self.epoch, index])
                yield self.collate([self.data[i] for i in batches[self.position - 1]], rng)
            self.epoch += 1
            self.position = 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "num_examples": self.num_examples, "world_size": self.world_size}

    def load_state_dict(self, state: dict) -> None:
        """Continue after the batch a saved state points past.

        Raises:
            ValueError: the state was saved with another data size, seed or world size.
        """
        for key in ("num_examples", "world_size", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"cannot resume PlannedBatches: the saved state has {key}={state[key]!r} but this "
                                 f"source has {key}={getattr(self, key)!r}")
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self.epoch_batches(epoch)):
            raise ValueError(f"invalid PlannedBatches state: epoch {epoch}, position {position}")
        self.epoch, self.position = epoch, position


def pack_batches(order: Sequence[int], costs: Sequence[float], *, max_cost: float,
                 max_items: int | None = None, sizes: Sequence[int] | None = None) -> list[list[int]]:
    """Pack units into batches greedily, in the given order, under a cost budget (e.g. tokens).

    A new batch starts when the next unit would take the batch's cost above ``max_cost`` or its size (the sum of
    ``sizes``, default 1 per unit) above ``max_items``; a unit over budget on its own gets a batch alone.

    Args:
        order: unit indices in the order to pack them.
        costs: cost of every unit (indexed by unit).
        max_cost: budget per batch.
        max_items: most items per batch (None: no limit).
        sizes: items in every unit (indexed by unit; default 1 each).

    Returns:
        Batches as lists of unit indices.

    Raises:
        ValueError: a non-positive budget.
    """
    if not max_cost > 0:
        raise ValueError(f"max_cost must be > 0, got {max_cost!r}")
    if max_items is not None and not (isinstance(max_items, int) and max_items >= 1):
        raise ValueError(f"max_items must be an integer >= 1 or None, got {max_items!r}")
    batches: list[list[int]] = []
    current: list[int] = []
    cost = items = 0
    for u in order:
        c, n = costs[u], 1 if sizes is None else sizes[u]
        if current and (cost + c > max_cost or (max_items is not None and items + n > max_items)):
            batches.append(current)
            current, cost, items = [], 0, 0
        current.append(int(u))
        cost += c
        items += n
    if current:
        batches.append(current)
    return batches


class EvalBatches:
    """Finite batches over every example exactly once, in order, split between ranks in contiguous shards
    (no padding, so shards may differ by one example; the loop sums losses and counts across ranks).

    Re-iterable: each ``for batch in eval_batches`` starts again from the first example of this rank's shard.

    With ``lengths``, the shard is visited longest example first (a stable sort), so each batch pads to nearly its
    own length (SST-2's dev set: 3.3x fewer positions than in file order); :attr:`order` names the dataset index
    of each example as visited, and readers of the outputs (``ctxemb.training.outputs``) put them back in
    dataset order. Each example's outputs are those of file order up to float rounding (padding is masked).

    Args:
        data: a sequence of examples or a map-style torch Dataset.
        batch_size: examples per batch.
        collate: list of examples -> dict of tensors (default: torch's ``default_collate``).
        rank, world_size: this process's share.
        lengths: each example's length in tokens (one per example of ``data``), or None for dataset order.

    Raises:
        ValueError: a bad ``batch_size``, rank, or ``lengths`` not giving one length per example.
    """

    def __init__(self, data: Sequence | torch.utils.data.Dataset, *, batch_size: int,
                 collate: Callable[[list], Batch] | None = None, rank: int = 0, world_size: int = 1,
                 lengths: Sequence[int] | None = None):
        n = _check_dataset(data)
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        _check_rank(rank, world_size)
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"lengths must give one length per example: {n} examples, {len(lengths)} lengths")
        self.data = data
        self.batch_size = batch_size
        self.collate = default_collate if collate is None else collate
        self.rank, self.world_size = rank, world_size
        self.start = rank * n // world_size
        self.stop = (rank + 1) * n // world_size
        self.order: list[int] = list(self.indices)
        if lengths is not None:
            self.order.sort(key=lambda i: -lengths[i])

    @property
    def indices(self) -> range:
        """The dataset indices this rank evaluates, in dataset order."""
        return range(self.start, self.stop)

    def __len__(self) -> int:
        return math.ceil((self.stop - self.start) / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        for s in range(0, len(self.order), self.batch_size):
            yield self.collate([self.data[i] for i in self.order[s:s + self.batch_size]])


def restore_order(rows: Sequence, order: Sequence[int]) -> list:
    """``rows`` (one per example, in the visiting ``order`` of :class:`EvalBatches`) back in dataset order."""
    if len(rows) != len(order):
        raise ValueError(f"got {len(rows)} rows for {len(order)} examples")
    out = [None] * len(rows)
    first = min(order, default=0)
    for row, i in zip(rows, order):
        out[i - first] = row
    return out


def batch_size_of(batch: Batch) -> int:
    """Examples in a batch: the leading dimension of ``input_ids``, else of the first tensor (1 if none)."""
    t = batch.get("input_ids") if isinstance(batch.get("input_ids"), torch.Tensor) else None
    if t is None:
        t = next((v for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() > 0), None)
    return int(t.shape[0]) if t is not None else 1


def count_tokens(batch: Batch) -> int | None:
    """Non-padding tokens: ``attention_mask.sum()`` when present, else ``input_ids.numel()``; None if neither."""
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return int(mask.sum())
    ids = batch.get("input_ids")
    if isinstance(ids, torch.Tensor):
        return ids.numel()
    return None


def move_to_device(batch: Batch, device: torch.device) -> Batch:
    """The batch's tensors on ``device`` (other values unchanged)."""
    non_blocking = device.type == "cuda"
    return {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}
