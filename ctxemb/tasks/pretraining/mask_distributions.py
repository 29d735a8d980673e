"""The distributions and budgets masking draws from: SpanBERT's clipped Geometric span lengths, the masked count of
a sequence, and the unigram distribution of random replacements (zero on special tokens); plus the checks of
token-id arguments they share with :class:`~ctxemb.tasks.pretraining.masking.Masker`.

Shapes: V vocabulary size.
"""

from __future__ import annotations

import logging
import math
import numbers
from typing import Collection, Sequence

import numpy as np
import torch

# the range check of a fraction lives in masking_config (MaskingConfig runs it without torch); importable from here
from ctxemb.tasks.pretraining.masking_config import _check_fraction

logger = logging.getLogger("ctxemb.tasks.pretraining.masking")  # its warnings belong to masking, as before the split

__all__ = ["clipped_geometric_mean", "clipped_geometric_pmf", "masking_budget", "unigram_weights"]


def clipped_geometric_pmf(p: float, max_len: int) -> np.ndarray:
    """Geometric(p) over lengths 1..max_len, truncated and renormalised (SpanBERT's span-length distribution).

    ``P(L = k) = p (1 - p)^(k - 1) / Z`` for ``k = 1..max_len``, ``Z`` the mass of 1..max_len.

    Args:
        p: success probability in (0, 1].
        max_len: longest length, at least 1.

    Returns:
        (max_len,) float64 array; entry ``k - 1`` is ``P(L = k)``.

    Raises:
        ValueError, TypeError: if ``p`` or ``max_len`` is out of range.
    """
    _check_fraction("p", p, low_open=True)
    if isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral):
        raise TypeError(f"max_len must be an int, got {type(max_len).__name__} ({max_len!r})")
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len!r}")
    k = np.arange(1, int(max_len) + 1, dtype=np.float64)
    w = float(p) * (1.0 - float(p)) ** (k - 1.0)
    return w / w.sum()


def clipped_geometric_mean(p: float, max_len: int) -> float:
    """Mean span length of :func:`clipped_geometric_pmf` (3.797 words for SpanBERT's p=0.2, max_len=10)."""
    pmf = clipped_geometric_pmf(p, max_len)
    return float(np.dot(np.arange(1, len(pmf) + 1), pmf))


def masking_budget(n_candidates: int, mlm_probability: float) -> int:
    """Number of tokens to choose from ``n_candidates``: ``floor(p * n + 0.5)``, at least 1 if ``n > 0``."""
    if n_candidates <= 0:
        return 0
    return max(1, int(math.floor(mlm_probability * n_candidates + 0.5)))


def _as_float_vector(name: str, values: object) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        t = values.detach().to("cpu", torch.float64)
    elif isinstance(values, np.ndarray) or isinstance(values, (list, tuple)):
        try:
            t = torch.as_tensor(np.asarray(values, dtype=np.float64))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name} must hold numbers, got {type(values).__name__}: {e}") from None
    else:
        raise TypeError(f"{name} must be a torch.Tensor, numpy array or sequence, got {type(values).__name__}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (V,), got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite, got {int((~torch.isfinite(t)).sum())} non-finite entries")
    if (t < 0).any():
        raise ValueError(f"{name} must be non-negative, got minimum {float(t.min())}")
    return t


def _check_token_ids(name: str, ids: Collection[int], vocab_size: int) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(i) for i in ids}))
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a collection of ints, got {ids!r}") from None
    bad = [i for i in out if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"{name} must lie in [0, {vocab_size}) (the vocabulary), got {bad}")
    return out


def unigram_weights(token_counts: torch.Tensor | np.ndarray | Sequence[float],
                    special_token_ids: Collection[int]) -> torch.Tensor:
    """The unigram replacement distribution: token counts normalised, with zero mass on special tokens.

    Args:
        token_counts: (V,) non-negative counts (or weights) of every vocabulary id over the corpus, e.g.
            ``torch.bincount(ids, minlength=V)``.
        special_token_ids: ids that must never be drawn ([CLS], [SEP], [PAD], [MASK], ...).

    Returns:
        (V,) float32 probabilities summing to 1, zero at ``special_token_ids``.

    Raises:
        ValueError: if the counts are not 1-D, negative or non-finite, a special id is outside the vocabulary,
            or no mass is left outside the special tokens.
        TypeError: if ``token_counts`` is not numeric.
    """
    counts = _as_float_vector("token_counts", token_counts)
    specials = _check_token_ids("special_token_ids", special_token_ids, counts.numel())
    counts = counts.clone()
    if specials:
        counts[list(specials)] = 0.0
    total = float(counts.sum())
    if total <= 0.0:
        raise ValueError("token_counts must have positive mass outside special_token_ids, got total 0")
    return (counts / total).to(torch.float32)
