"""A linear-chain conditional random field over per-position tag scores, for BIO sequence tagging (J&M 8.5, 11.4.3).

A tagger's head gives emission scores ``e[w, y]`` for tag y at position w; the CRF adds a learned score for each
pair of adjacent tags and for the first and last tag, so a whole tag sequence y_1..y_n has the score

    s(y) = start[y_1] + sum_w e[w, y_w] + sum_{w>1} transitions[y_{w-1}, y_w] + end[y_n]

and p(y | e) = exp(s(y)) / Z, Z summing exp(s(y')) over all C^n sequences. :meth:`LinearChainCRF.log_likelihood`
computes log Z with the forward algorithm in log space, :meth:`LinearChainCRF.decode` the best sequence with
Viterbi; both are vectorised over the batch and loop over positions only, O(W C^2) per sequence.

Hard constraints: :func:`bio_transition_mask` lists the legal moves of a BIO tag set (``I-X`` only after ``B-X``
or ``I-X``, never first). A constrained CRF scores an illegal move ``CONSTRAINT_PENALTY`` (-1e4, finite so
that gradients stay finite) in the likelihood, whatever its learned parameter says, and excludes it outright in
Viterbi, so it never decodes an illegal sequence.

Parameter names are pytorch-crf's: ``transitions`` (C, C), ``start_transitions`` (C,), ``end_transitions`` (C,);
the constraints are the buffers ``allowed_transitions`` (C, C) and ``allowed_start`` (C,), saved with them.

Shapes: B batch, W positions (words), C tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from torch import nn

from ctxemb.core.validation import check_choice

Reduction = Literal["mean", "sum", "none"]
REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")

# Score of a disallowed move in the likelihood: large enough that illegal sequences get probability ~e^-10000,
# finite so that logsumexp and its gradient never see -inf - -inf.
CONSTRAINT_PENALTY = -1e4


def bio_transition_mask(id2label: Mapping[int, str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The legal moves between BIO tags: ``I-X`` only after ``B-X`` or ``I-X`` and never first; ``O`` and ``B-*``
    anywhere.

    Args:
        id2label: tag names by id, ``{0: "O", 1: "B-PER", 2: "I-PER", ...}``, with the keys 0..C-1 (ints, or
            strings of ints as in a ``config.json``).

    Returns:
        ``(allowed_transitions, allowed_start)``: (C, C) bool, True at [i, j] if tag j may follow tag i, and (C,)
        bool, True if the tag may start a sequence.

    Raises:
        ValueError: the keys are not 0..C-1, or a tag is not ``O``, ``B-<type>`` or ``I-<type>``.
    """
    labels = {int(k): str(v) for k, v in id2label.items()}
    C = len(labels)
    if C == 0 or sorted(labels) != list(range(C)):
        raise ValueError(f"id2label must have the keys 0..C-1 for some C >= 1; got {sorted(labels)}")
    prefixes, types = [], []
    for i in range(C):
        tag = labels[i]
        if tag == "O":
            prefixes.append("O")
            types.append(None)
        elif len(tag) > 2 and tag[:2] in ("B-", "I-"):
            prefixes.append(tag[0])
            types.append(tag[2:])
        else:
            raise ValueError(f"id2label[{i}] = {tag!r} is not a BIO tag: expected 'O', 'B-<type>' or 'I-<type>'")
    allowed = torch.ones(C, C, dtype=torch.bool)
    for j in range(C):
        if prefixes[j] == "I":
            for i in range(C):
                allowed[i, j] = prefixes[i] in ("B", "I") and types[i] == types[j]
    allowed_start = torch.tensor([p != "I" for p in prefixes], dtype=torch.bool)
    return allowed, allowed_start


class LinearChainCRF(nn.Module):
    """A linear-chain CRF over C tags (see the module docstring), optionally with hard transition constraints.

    Args:
        num_tags: C.
        allowed_transitions: (C, C) bool, True at [i, j] if tag j may follow tag i; every move allowed when None.
        allowed_start: (C,) bool, True if the tag may start a sequence; every tag allowed when None.

    Raises:
        ValueError: ``num_tags`` is not a positive integer, a constraint is not a bool tensor of its shape, or the
            constraints leave no legal tag sequence of some length.
    """

    def __init__(self, num_tags: int, *, allowed_transitions: torch.Tensor | None = None,
                 allowed_start: torch.Tensor | None = None):
        if isinstance(num_tags, bool) or not isinstance(num_tags, int) or num_tags < 1:
            raise ValueError(f"num_tags must be a positive integer, got {num_tags!r}")
        super().__init__()
        C = num_tags
        self.num_tags = C
        allowed_transitions = _check_constraint("allowed_transitions", allowed_transitions, (C, C))
        allowed_start = _check_constraint("allowed_start", allowed_start, (C,))
        _check_satisfiable(allowed_transitions, allowed_start)
        self.register_buffer("allowed_transitions", allowed_transitions, persistent=True)
        self.register_buffer("allowed_start", allowed_start, persistent=True)
        # pytorch-crf's initialisation: small uniform scores, so training starts near "no preference".
        self.transitions = nn.Parameter(torch.empty(C, C).uniform_(-0.1, 0.1))
        self.start_transitions = nn.Parameter(torch.empty(C).uniform_(-0.1, 0.1))
        self.end_transitions = nn.Parameter(torch.empty(C).uniform_(-0.1, 0.1))

    def extra_repr(self) -> str:
        constrained = not (bool(self.allowed_transitions.all()) and bool(self.allowed_start.all()))
        return f"num_tags={self.num_tags}, constrained={constrained}"

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor,
                reduction: Reduction = "mean") -> torch.Tensor:
        """The negative log-likelihood of the gold tags, the training loss.

        Args:
            emissions: (B, W, C) tag scores (any float dtype; computed in float32).
            tags: (B, W) gold tag ids; ignored where ``mask`` is 0 (e.g. -100 there).
            mask: (B, W) bool or 0/1 integers, left-aligned: each row some 1s then only 0s, at least one 1.
            reduction: ``"mean"`` over sequences, ``"sum"``, or ``"none"`` for one value per sequence.

        Returns:
            a float32 scalar, or (B,) with ``reduction="none"``.

        Raises:
            ValueError: an unknown ``reduction``, or bad inputs (see :meth:`log_likelihood`).
        """
        check_choice(reduction, "reduction", REDUCTIONS)
        nll = -self.log_likelihood(emissions, tags, mask)
        if reduction == "none":
            return nll
        if reduction == "sum" or nll.numel() == 0:
            return nll.sum()
        return nll.mean()

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log p(tags | emissions) per sequence: the gold path's score minus log Z (forward algorithm).

        Args:
            emissions: (B, W, C) tag scores (any float dtype; computed in float32).
            tags: (B, W) integer gold tag ids in 0..C-1 where ``mask`` is 1; anything where it is 0.
            mask: (B, W) bool or 0/1 integers, left-aligned, at least one 1 per row.

        Returns:
            (B,) float32 log-probabilities (<= 0); an illegal gold sequence under constraints scores about -1e4
            per illegal move.

        Raises:
            ValueError: shapes that do not match (emissions not (B, W, C), tags or mask not (B, W)), a mask that is
                not left-aligned 0/1 or has an empty row, or a tag outside 0..C-1 at an unmasked position.
        """
        em, mask = self._check_inputs(emissions, mask)
        tags = self._check_tags(tags, mask)
        if em.shape[0] == 0:
            return em.new_zeros(0)
        transitions, start, end = self._scores(CONSTRAINT_PENALTY)
        return self._gold_score(em, tags, mask, transitions, start, end) - self._log_partition(
            em, mask, transitions, start, end)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The most probable tag sequence of each row (Viterbi); never an illegal one under constraints.

        Args:
            emissions: (B, W, C) tag scores (any float dtype; computed in float32).
            mask: (B, W) bool or 0/1 integers, left-aligned, at least one 1 per row.

        Returns:
            B lists of tag ids, row b of length ``mask[b].sum()``.

        Raises:
            ValueError: emissions not (B, W, C), mask not (B, W), or a mask that is not left-aligned 0/1 or has an
                empty row.
        """
        em, mask = self._check_inputs(emissions, mask)
        B, W, _ = em.shape
        if B == 0:
            return []
        # Illegal moves are excluded outright (-inf): no gradient here, and the constructor checked that a legal
        # sequence of every length exists, so each row's best score is finite.
        transitions, start, end = self._scores(float("-inf"))
        score = start + em[:, 0]  # (B, C): best score of a path ending in each tag
        backpointers = []
        for w in range(1, W):
            best, arg = (score.unsqueeze(2) + transitions).max(dim=1)  # over the previous tag: (B, C)
            score = torch.where(mask[:, w, None], best + em[:, w], score)
            backpointers.append(arg)
        lengths = mask.sum(dim=1)  # (B,)
        current = (score + end).argmax(dim=1)  # (B,) the last tag of each row
        path = torch.zeros(B, W, dtype=torch.long, device=em.device)
        for w in range(W - 1, -1, -1):
            inside = w < lengths
            path[:, w] = torch.where(inside, current, 0)
            if w > 0:
                previous = backpointers[w - 1].gather(1, current.unsqueeze(1)).squeeze(1)
                current = torch.where(inside, previous, current)
        return [row[:n] for row, n in zip(path.tolist(), lengths.tolist())]

    def _scores(self, penalty: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """float32 (C, C) transitions, (C,) start and (C,) end scores, disallowed moves set to ``penalty``."""
        transitions = self.transitions.float().masked_fill(~self.allowed_transitions, penalty)
        start = self.start_transitions.float().masked_fill(~self.allowed_start, penalty)
        return transitions, start, self.end_transitions.float()

    @staticmethod
    def _gold_score(em: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor,
                    start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """s(tags) per row, (B,): start + emissions + transitions between unmasked positions + end."""
        zero = em.new_zeros(())
        score = start[tags[:, 0]] + em.gather(2, tags.unsqueeze(2)).squeeze(2).where(mask, zero).sum(dim=1)
        if tags.shape[1] > 1:
            score = score + transitions[tags[:, :-1], tags[:, 1:]].where(mask[:, 1:], zero).sum(dim=1)
        last = tags.gather(1, (mask.sum(dim=1, keepdim=True) - 1)).squeeze(1)
        return score + end[last]

    @staticmethod
    def _log_partition(em: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor,
                       end: torch.Tensor) -> torch.Tensor:
        """log Z per row, (B,), by the forward algorithm in log space."""
        alpha = start + em[:, 0]  # (B, C): log of the summed exp-scores of all paths ending in each tag
        for w in range(1, em.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1) + em[:, w]
            alpha = torch.where(mask[:, w, None], step, alpha)
        return torch.logsumexp(alpha + end, dim=1)

    def _check_inputs(self, emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Validated float32 emissions (zero at masked positions) and a bool mask."""
        if not isinstance(emissions, torch.Tensor) or emissions.dim() != 3 or emissions.shape[2] != self.num_tags:
            got = tuple(emissions.shape) if isinstance(emissions, torch.Tensor) else type(emissions).__name__
            raise ValueError(f"emissions must have shape (B, W, C) with C = num_tags = {self.num_tags}; got {got}")
        if not emissions.is_floating_point():
            raise ValueError(f"emissions must be a float tensor; got dtype {emissions.dtype}")
        B, W, _ = emissions.shape
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (B, W):
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"mask must have the shape (B, W) = {(B, W)} of emissions; got {got}")
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"mask must be bool or integer (0/1); got dtype {mask.dtype}")
        if mask.dtype != torch.bool:
            if B and W and not bool(((mask == 0) | (mask == 1)).all()):
                raise ValueError("mask must hold only 0 and 1; got other values")
            mask = mask.bool()
        if B:
            empty = ~mask[:, 0] if W else torch.ones(B, dtype=torch.bool, device=mask.device)
            if bool(empty.any()):
                row = int(empty.nonzero()[0, 0])
                raise ValueError(f"mask row {row} is empty: every sequence needs at least one position "
                                 "(mask[b, 0] = 1)")
            gaps = mask[:, 1:] & ~mask[:, :-1]  # a 1 after a 0
            if bool(gaps.any()):
                row = int(gaps.nonzero()[0, 0])
                raise ValueError(f"mask row {row} is not left-aligned: expected 1...1 0...0, got "
                                 f"{mask[row].int().tolist()}")
        em = emissions.float().where(mask.unsqueeze(2), emissions.new_zeros((), dtype=torch.float32))
        return em, mask

    def _check_tags(self, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Validated long tags, 0 at masked positions (so they can index whatever they held)."""
        if not isinstance(tags, torch.Tensor) or tuple(tags.shape) != tuple(mask.shape):
            got = tuple(tags.shape) if isinstance(tags, torch.Tensor) else type(tags).__name__
            raise ValueError(f"tags must have the shape (B, W) = {tuple(mask.shape)} of emissions; got {got}")
        if tags.is_floating_point() or tags.is_complex() or tags.dtype == torch.bool:
            raise ValueError(f"tags must be an integer tensor; got dtype {tags.dtype}")
        tags = tags.long()
        bad = mask & ((tags < 0) | (tags >= self.num_tags))
        if bool(bad.any()):
            row, pos = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"tags[{row}, {pos}] = {int(tags[row, pos])} is outside 0..{self.num_tags - 1} "
                             "at an unmasked position")
        return tags.where(mask, 0)


def _check_constraint(name: str, value: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
    """A bool constraint tensor of ``shape``, all True when ``value`` is None."""
    if value is None:
        return torch.ones(shape, dtype=torch.bool)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool or tuple(value.shape) != shape:
        got = (f"{value.dtype} of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
               else type(value).__name__)
        raise ValueError(f"{name} must be a bool tensor of shape {shape} (num_tags = {shape[0]}); got {got}")
    return value.detach().clone()


def _check_satisfiable(allowed_transitions: torch.Tensor, allowed_start: torch.Tensor) -> None:
    """Raise ValueError unless a legal tag sequence of every length exists.

    The tags reachable at position n are a non-empty set for every n iff they are for n = 1..C+1: a legal path of
    C+1 tags repeats a tag, so it contains a cycle that extends it to any length.
    """
    reachable = allowed_start.clone()
    for n in range(1, allowed_start.numel() + 2):
        if not bool(reachable.any()):
            raise ValueError(f"allowed_transitions and allowed_start leave no legal tag sequence of length {n}")
        reachable = (reachable.unsqueeze(1) & allowed_transitions).any(dim=0)
