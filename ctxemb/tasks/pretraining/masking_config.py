"""The masking settings (:class:`MaskingConfig`) and their choices, in a module that imports no torch: the
pretraining configuration reads them, and ``ctxemb pretrain --help`` builds its flags from it at once. The masker
that runs them is :mod:`ctxemb.tasks.pretraining.masking` (where these names are importable as before).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Literal, get_args

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import field_help as _meta

__all__ = ["SELECTIONS", "STRATEGIES", "MaskingConfig", "MaskingStrategy", "SelectionMode"]

MaskingStrategy = Literal["token", "whole_word", "span"]
SelectionMode = Literal["bernoulli", "exact"]
STRATEGIES: tuple[str, ...] = get_args(MaskingStrategy)
SELECTIONS: tuple[str, ...] = get_args(SelectionMode)


def _check_fraction(name: str, value: object, *, low_open: bool = False, high: float = 1.0) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} ({value!r})")
    v = float(value)
    low_ok = v > 0.0 if low_open else v >= 0.0
    if not (math.isfinite(v) and low_ok and v <= high):
        interval = f"{'(' if low_open else '['}0, {high:g}]"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


@dataclass(frozen=True)
class MaskingConfig:
    """How a :class:`~ctxemb.tasks.pretraining.masking.Masker` chooses and corrupts tokens.

    Attributes:
        strategy: "token" (BERT), "whole_word" (BERT wwm) or "span" (SpanBERT).
        mlm_probability: share p of the candidate tokens to choose, in (0, 1].
        mask_fraction: share of the chosen tokens (spans, for "span") replaced by the mask token.
        random_fraction: share replaced by random tokens; the rest, ``1 - mask_fraction - random_fraction``, stays
            unchanged (but is still predicted).
        selection: for the "token" strategy: "bernoulli" (each candidate with probability p, so the count varies)
            or "exact" (exactly ``masking_budget(n, p)`` tokens per sequence). "whole_word" and "span" always fill
            the token budget and ignore this field.
        span_geometric_p: parameter of the geometric span-length distribution (in words), in (0, 1].
        max_span_length: longest span in words; the geometric distribution is truncated to 1..max_span_length and
            renormalised (:func:`~ctxemb.tasks.pretraining.mask_distributions.clipped_geometric_pmf`), as SpanBERT did:
            mean 3.8 words for (0.2, 10).

    Raises:
        ValueError, TypeError: on a value out of range or of the wrong type; the message names the field.
    """

    strategy: MaskingStrategy = field(default="token", metadata=_meta(
        'which tokens are masked: single tokens, whole words, or spans (SpanBERT)', flag='--masking'))
    mlm_probability: float = field(default=0.15, metadata=_meta(
        'fraction of the tokens chosen for prediction (BERT: 0.15)', type='fraction'))
    mask_fraction: float = field(default=0.8, metadata=_meta(
        'share of the chosen tokens (spans) replaced by the mask token', type='fraction'))
    random_fraction: float = field(default=0.1, metadata=_meta(
        'share of the chosen tokens (spans) replaced by random tokens', type='fraction'))
    selection: SelectionMode = field(default="bernoulli", metadata=_meta(
        'token masking: each candidate with probability p (bernoulli) or exactly the budget per sequence '
        '(exact)'))
    span_geometric_p: float = field(default=0.2, metadata=_meta(
        'span masking: the geometric span-length parameter, in words', type='positive_float'))
    max_span_length: int = field(default=10, metadata=_meta(
        'span masking: longest span in words', type='positive_int'))

    def __post_init__(self) -> None:
        check_choice(self.strategy, "strategy", STRATEGIES)
        check_choice(self.selection, "selection", SELECTIONS)
        _check_fraction("mlm_probability", self.mlm_probability, low_open=True)
        _check_fraction("mask_fraction", self.mask_fraction)
        _check_fraction("random_fraction", self.random_fraction)
        if self.mask_fraction + self.random_fraction > 1.0 + 1e-12:
            raise ValueError(
                "mask_fraction + random_fraction must be at most 1, got "
                f"{self.mask_fraction!r} + {self.random_fraction!r} = {self.mask_fraction + self.random_fraction!r}"
            )
        _check_fraction("span_geometric_p", self.span_geometric_p, low_open=True)
        if isinstance(self.max_span_length, bool) or not isinstance(self.max_span_length, numbers.Integral):
            raise TypeError(
                f"max_span_length must be an int, got {type(self.max_span_length).__name__} "
                f"({self.max_span_length!r})"
            )
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be at least 1, got {self.max_span_length!r}")

    @property
    def keep_fraction(self) -> float:
        """Share of the chosen tokens (spans) left unchanged."""
        return max(0.0, 1.0 - self.mask_fraction - self.random_fraction)
