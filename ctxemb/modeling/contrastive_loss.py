"""Contrastive losses for sentence embedders: in-batch negatives (MultipleNegativesRankingLoss / InfoNCE) with
explicit or mined hard negatives, a symmetric variant, and Matryoshka training over nested dimensions.

In-batch negatives (van den Oord et al. 2018; Henderson et al. 2017; sentence-transformers'
``MultipleNegativesRankingLoss``): anchor i is scored against every candidate of the batch by
``scale * cos(a_i, c_j)``, and the loss is the cross-entropy of picking its own positive ``c_i``. The candidates
are the B positives first, then K blocks of B hard negatives (block k, row i: the k-th hard negative of anchor i),
so every anchor sees B - 1 + B * K negatives. ``scale`` is the inverse temperature (20 = temperature 0.05).

The symmetric variant (``MultipleNegativesSymmetricRankingLoss``) adds the other direction, each positive picking its
anchor among the B anchors, and averages the two.

False negatives. In a batch drawn from a table, another row's positive can be this anchor's positive too (two
questions about one passage), and a mined negative of another row can be this row's positive. With keys (an int per
distinct text: ``anchor_keys`` for the anchors, ``candidate_keys`` for the candidates), a candidate is left out of
anchor i's softmax when it is the same text as anchor i's positive, or when it is the positive of another row with
the same anchor text; key -1 marks a padding candidate that no anchor sees. Without keys every other candidate is a
negative, exactly as sentence-transformers computes it.

Matryoshka (Kusupati et al. 2022; sentence-transformers' ``MatryoshkaLoss``): the same loss on the first d
coordinates of every vector (renormalised, which the cosine does), summed over the nested ``dims`` with weights, so
that a vector truncated to any of them stays a good embedding.

CoSENT (Su 2022; sentence-transformers' ``CoSENTLoss``), for scored pairs: every two pairs of the batch whose gold
scores differ are a ranking constraint, and the loss is ``log(1 + sum over (i, j) with y_i > y_j of
exp(scale * (cos_j - cos_i)))``: only the order of the cosines is trained, not their values, which is what a
Spearman evaluation scores (the cosine-MSE loss pulls each cosine to score / 5).

Shapes: B anchors, N = B * (1 + K) candidates, D embedding size.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

# the checks of the loss's settings live in ctxemb.models.head_options (the fine-tuning configuration runs them without
# torch)
from ctxemb.models.head_options import check_matryoshka
from ctxemb.models.head_options import check_scale as _check_scale

__all__ = ["contrastive_loss", "cosent_loss", "false_negative_mask", "in_batch_negatives_loss",
           "matryoshka_loss"]


def false_negative_mask(anchor_keys: torch.Tensor, candidate_keys: torch.Tensor) -> torch.Tensor:
    """(B, N) bool: True where candidate j must not count as a negative of anchor i (see the module docstring).

    Args:
        anchor_keys: (B,) ints, equal for equal anchor texts.
        candidate_keys: (N,) ints, equal for equal candidate texts (positives first); -1 for padding.

    Raises:
        ValueError: shapes that do not fit (N must be a multiple of B).
    """
    B, N = anchor_keys.shape[0], candidate_keys.shape[0]
    if anchor_keys.dim() != 1 or candidate_keys.dim() != 1 or N % B or N < B:
        raise ValueError(f"anchor_keys (B,) and candidate_keys (B * (1 + K),) expected; got "
                         f"{tuple(anchor_keys.shape)} and {tuple(candidate_keys.shape)}")
    positive = candidate_keys[:B]
    same_text = candidate_keys.unsqueeze(0) == positive.unsqueeze(1)  # (B, N): the text of anchor i's positive
    same_anchor = torch.zeros_like(same_text)
    same_anchor[:, :B] = anchor_keys.unsqueeze(0) == anchor_keys.unsqueeze(1)  # another positive of this anchor
    mask = same_text | same_anchor | (candidate_keys == -1).unsqueeze(0)
    mask[torch.arange(B), torch.arange(B)] = False  # the own positive is the target, never masked
    return mask


def in_batch_negatives_loss(anchors: torch.Tensor, candidates: torch.Tensor, *, scale: float = 20.0,
                            symmetric: bool = False, anchor_keys: torch.Tensor | None = None,
                            candidate_keys: torch.Tensor | None = None) -> torch.Tensor:
    """The in-batch negatives loss (module docstring), a scalar.

    Args:
        anchors: (B, D) anchor vectors (not necessarily normalised: the cosine normalises).
        candidates: (N, D), N = B * (1 + K): the B positives, then K blocks of B hard negatives.
        scale: the inverse temperature multiplying the cosines.
        symmetric: average with the positive -> anchor direction.
        anchor_keys, candidate_keys: (B,) and (N,) text keys to leave false negatives out (both or neither).

    Raises:
        ValueError: shapes that do not fit, or only one of the key tensors.
    """
    scale = _check_scale(scale)
    if anchors.dim() != 2 or candidates.dim() != 2 or anchors.shape[1] != candidates.shape[1]:
        raise ValueError(f"anchors (B, D) and candidates (N, D) expected; got {tuple(anchors.shape)} and "
                         f"{tuple(candidates.shape)}")
    B, N = anchors.shape[0], candidates.shape[0]
    if B == 0 or N % B or N < B:
        raise ValueError(f"candidates must hold the B={B} positives and K blocks of B hard negatives; got N={N}")
    if (anchor_keys is None) != (candidate_keys is None):
        raise ValueError("pass both anchor_keys and candidate_keys, or neither")
    a = F.normalize(anchors.float(), dim=-1)
    c = F.normalize(candidates.float(), dim=-1)
    scores = scale * (a @ c.T)  # (B, N)
    if anchor_keys is not None:
        scores = scores.masked_fill(false_negative_mask(anchor_keys, candidate_keys), float("-inf"))
    target = torch.arange(B, device=scores.device)
    loss = F.cross_entropy(scores, target)
    if symmetric:  # positive j picks its anchor among the B anchors (the mask of the B x B block is symmetric)
        loss = (loss + F.cross_entropy(scores[:, :B].T, target)) / 2
    return loss


def matryoshka_loss(anchors: torch.Tensor, candidates: torch.Tensor, dims: Sequence[int],
                    weights: Sequence[float] | None = None, **loss_args) -> torch.Tensor:
    """``sum_d w_d * in_batch_negatives_loss(anchors[:, :d], candidates[:, :d])`` over the nested ``dims``
    (each prefix renormalised by the cosine). ``loss_args`` are :func:`in_batch_negatives_loss`'s."""
    checked = check_matryoshka(dims, weights, anchors.shape[-1])
    if checked is None:
        raise ValueError("matryoshka_loss needs at least one dimension")
    total = anchors.new_zeros((), dtype=torch.float32)
    for d, w in zip(*checked):
        if w:
            total = total + w * in_batch_negatives_loss(anchors[:, :d], candidates[:, :d], **loss_args)
    return total


def contrastive_loss(anchors: torch.Tensor, candidates: torch.Tensor, *, matryoshka_dims: Sequence[int] | None = None,
                     matryoshka_weights: Sequence[float] | None = None, **loss_args) -> torch.Tensor:
    """:func:`matryoshka_loss` with ``matryoshka_dims``, else :func:`in_batch_negatives_loss`."""
    if matryoshka_dims:
        return matryoshka_loss(anchors, candidates, matryoshka_dims, matryoshka_weights, **loss_args)
    return in_batch_negatives_loss(anchors, candidates, **loss_args)


def cosent_loss(predicted: torch.Tensor, gold: torch.Tensor, *, scale: float = 20.0) -> torch.Tensor:
    """The CoSENT ranking loss (module docstring), a scalar; 0-dimensional ``log 1 = 0`` when no two gold scores
    differ.

    Args:
        predicted: (B,) predicted similarities (cosines).
        gold: (B,) gold scores; only their order matters.
        scale: multiplies the differences of the predictions (20 as sentence-transformers).
    """
    scale = _check_scale(scale)
    if predicted.dim() != 1 or predicted.shape != gold.shape:
        raise ValueError(f"predicted and gold must both have shape (batch,); got {tuple(predicted.shape)} and "
                         f"{tuple(gold.shape)}")
    diff = scale * (predicted.unsqueeze(0) - predicted.unsqueeze(1))  # (B, B): [i, j] = s * (cos_j - cos_i)
    ordered = gold.unsqueeze(1) > gold.unsqueeze(0)  # (B, B): [i, j] = y_i > y_j
    # bf16/fp16 cosines are summed in fp32; float64 stays float64
    terms = diff.to(torch.promote_types(diff.dtype, torch.float32)).masked_fill(~ordered, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)
