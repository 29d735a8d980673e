"""Masked-language-model corruption: token, whole-word and span masking (J&M 11.2.1, 11.5.1).

A :class:`Masker` turns a batch of token ids into an MLM training example. It chooses a share
(``mlm_probability``, 15% by default) of the *candidate* tokens -- tokens that are neither special tokens
nor padding -- and corrupts the chosen ones the BERT way: 80% become [MASK], 10% a random token, 10% stay
unchanged (``mask_fraction`` / ``random_fraction``). Labels hold the original id at every chosen position,
including the unchanged ones, and ``IGNORE_INDEX`` (-100) elsewhere.

Three strategies choose the positions:

- ``"token"`` (BERT): each candidate independently with probability p (``selection="bernoulli"``), or exactly
  ``budget(n)`` candidates per sequence (``selection="exact"``, as in Cramming and MosaicBERT: a static masked
  count per sequence, so a sparse MLM head sees fixed shapes).
- ``"whole_word"`` (BERT's whole-word masking): whole words, all their subword tokens together, visited in
  random order and taken while fewer tokens than the budget have been taken, so the total reaches the budget and
  exceeds it by less than the last word's token count (BERT's and transformers' code skip a word that would
  overshoot instead, which favours short words). The 80/10/10 decision is made per token, as BERT's wwm data and
  transformers' ``DataCollatorForWholeWordMask`` do: one word may end up part [MASK], part unchanged.
- ``"span"`` (SpanBERT as it ran): spans of whole words with lengths ~ Geometric(p) truncated to
  ``1..max_span_length`` words and renormalised (mean 3.8 words for p = 0.2, 10), starting at word beginnings, until the token budget is met, with ONE 80/10/10
  decision per span. Spans never overlap or touch (at least one unmasked word between two spans), and the
  span that reaches the budget is kept whole, so the realised rate is somewhat above p on short sequences
  (see ``Masker._choose_spans``). For the span-boundary objective (SBO) every masked position also gets its
  span's left boundary ``s - 1``, right boundary ``e + 1`` and its 0-based position ``i - s`` in the span.

The budget is counted in tokens: ``budget(n) = floor(p * n + 0.5)`` (round half up) of the ``n`` candidate
tokens of a sequence, and at least 1 when ``n > 0``.

Random replacements are drawn from a replacement distribution over the vocabulary: the corpus's unigram
distribution if one is given (:func:`unigram_weights`; SpanBERT did this), otherwise uniform over the
non-special tokens (transformers draws uniformly over the whole vocabulary, specials included). Special tokens
and the mask token always get zero mass, so a random replacement is never a special token. As in BERT, a random
replacement may happen to equal the original token.

Words are given by ``word_ids`` (B, T) from the tokenizer, -1 at special and padding tokens, so the same code
serves WordPiece, BPE and unigram vocabularies. A word is a maximal run of adjacent candidate tokens with the
same word id; a [SEP] between two segments therefore separates words even when the word ids restart at 0.

Everything runs on the device of ``input_ids`` (span placement runs in Python/numpy on the CPU, O(T) per
sequence); nothing writes to the caller's tensors; results are reproducible given a ``torch.Generator``.

Shapes: B sequences, T tokens per sequence, V vocabulary size, W words of a sequence.

References: Devlin et al. 2019 (BERT); Joshi et al. 2020 (SpanBERT, and its released masking code);
Geiping & Goldstein 2023 (Cramming); Portes et al. 2023 (MosaicBERT).
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from typing import Collection, Sequence

import numpy as np
import torch

# the distributions masking draws from live in mask_distributions, its settings (MaskingConfig, read without torch)
# in masking_config; importable from here as before
from ctxemb.tasks.pretraining.mask_distributions import (_as_float_vector, _check_token_ids, clipped_geometric_pmf,
                                                         masking_budget)
from ctxemb.tasks.pretraining.masking_config import MaskingConfig

logger = logging.getLogger(__name__)

__all__ = ["IGNORE_INDEX", "MaskingConfig", "MaskedBatch", "Masker", "clipped_geometric_pmf", "masking_budget"]

IGNORE_INDEX = -100
"""Label at positions that are not predicted (``torch.nn.CrossEntropyLoss``'s default ``ignore_index``)."""

# Fate of a chosen position.
_MASK, _RANDOM, _KEEP = 0, 1, 2
# Uniform proposals tried for a span's start before the exact (O(W)) enumeration of the free starts.
_SPAN_PROPOSALS = 16


@dataclass
class MaskedBatch:
    """A masked copy of a batch.

    Attributes:
        input_ids: (B, T) the corrupted ids, same dtype and device as the input.
        labels: (B, T) int64: the original id at every chosen position, ``IGNORE_INDEX`` (-100) elsewhere.
        span_left: (B, T) int64, "span" strategy only (else None): at a chosen position, the index of the token
            just left of its span (``s - 1``; may be [CLS] or [SEP]); -1 elsewhere.
        span_right: (B, T) int64 or None: the index of the token just right of the span (``e + 1``, where ``e``
            is the span's last token); -1 elsewhere.
        span_position: (B, T) int64 or None: the 0-based position ``i - s`` of the token inside its span; -1
            elsewhere.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    span_left: torch.Tensor | None = None
    span_right: torch.Tensor | None = None
    span_position: torch.Tensor | None = None

    @property
    def masked(self) -> torch.Tensor:
        """(B, T) bool: the chosen (predicted) positions, ``labels != IGNORE_INDEX``."""
        return self.labels != IGNORE_INDEX


# ----------------------------------------------------------------------------------------------------------------
# The masker


def _check_batch_tensor(name: str, t: object, shape: tuple[int, ...], *, kind: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have the shape of input_ids {shape}, got {tuple(t.shape)}")
    if kind == "int" and (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
        raise TypeError(f"{name} must be an integer tensor, got dtype {t.dtype}")
    if kind == "mask" and (t.dtype.is_floating_point or t.dtype.is_complex):
        raise TypeError(f"{name} must be a bool or integer 0/1 tensor, got dtype {t.dtype}")
    return t


class Masker:
    """Corrupts batches of token ids for masked-language-model training (see the module docstring).

    Usable as (part of) a DataLoader ``collate_fn``; reproducible given a ``torch.Generator``.

    Args:
        config: the :class:`MaskingConfig`.
        vocab_size: V, the size of the vocabulary.
        mask_token_id: the [MASK] id; it is treated as a special token (never chosen, never a replacement).
        special_token_ids: ids never chosen for masking and never drawn as replacements ([CLS], [SEP], [PAD], ...).
            Positions flagged by ``special_tokens_mask`` or with ``attention_mask == 0`` are excluded as well.
        replacement_weights: (V,) non-negative counts or probabilities to draw random replacements from, usually
            the corpus's unigram distribution (:func:`unigram_weights`). Mass on special tokens is set to zero
            (with a warning). None: uniform over the non-special tokens.

    Raises:
        TypeError: if ``config`` is not a :class:`MaskingConfig` or an argument has the wrong type.
        ValueError: if an id is outside ``[0, vocab_size)``, ``replacement_weights`` is not (V,) non-negative
            finite, or it has no mass outside the special tokens.
    """

    def __init__(
        self,
        config: MaskingConfig = MaskingConfig(),
        *,
        vocab_size: int,
        mask_token_id: int,
        special_token_ids: Collection[int],
        replacement_weights: torch.Tensor | np.ndarray | Sequence[float] | None = None,
    ) -> None:
        if not isinstance(config, MaskingConfig):
            raise TypeError(f"config must be a MaskingConfig, got {type(config).__name__}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral):
            raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__} ({vocab_size!r})")
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size!r}")
        if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, numbers.Integral):
            raise TypeError(f"mask_token_id must be an int, got {type(mask_token_id).__name__} ({mask_token_id!r})")
        if not 0 <= mask_token_id < vocab_size:
            raise ValueError(f"mask_token_id must lie in [0, {vocab_size}), got {mask_token_id!r}")
        if isinstance(special_token_ids, (str, bytes)) or not isinstance(special_token_ids, Collection):
            raise TypeError(f"special_token_ids must be a collection of ints, got {type(special_token_ids).__name__}")
        self.config = config
        self.vocab_size = int(vocab_size)
        self.mask_token_id = int(mask_token_id)
        self.special_token_ids = _check_token_ids(
            "special_token_ids", [*special_token_ids, mask_token_id], self.vocab_size
        )
        # (V,) True at ids never chosen: a lookup is cheaper than comparing against every special id.
        self._is_special = torch.zeros(self.vocab_size, dtype=torch.bool)
        self._is_special[list(self.special_token_ids)] = True

        if replacement_weights is None:
            weights = (~self._is_special).to(torch.float64)
        else:
            weights = _as_float_vector("replacement_weights", replacement_weights)
            if weights.numel() != self.vocab_size:
                raise ValueError(
                    f"replacement_weights must have one entry per vocabulary id ({self.vocab_size},), "
                    f"got ({weights.numel()},)"
                )
            on_specials = float(weights[self._is_special].sum())
            if on_specials > 0.0:
                logger.warning(
                    "replacement_weights put %.4g of %.4g mass on special tokens; set to zero",
                    on_specials, float(weights.sum()),
                )
                weights = weights.masked_fill(self._is_special, 0.0)
        total = float(weights.sum())
        if total <= 0.0:
            raise ValueError("replacement_weights must have positive mass outside the special tokens, got 0")
        self.replacement_probs = (weights / total).to(torch.float32)  # (V,)
        self._span_cdf = np.cumsum(clipped_geometric_pmf(config.span_geometric_p, config.max_span_length))
        self._span_cdf[-1] = 1.0

    def __repr__(self) -> str:
        return (
            f"Masker({self.config!r}, vocab_size={self.vocab_size}, mask_token_id={self.mask_token_id}, "
            f"special_token_ids={list(self.special_token_ids)})"
        )

    # ------------------------------------------------------------------------------------------------------------

    def __call__(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        special_tokens_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> MaskedBatch:
        """Mask a batch.

        Args:
            input_ids: (B, T) integer token ids; not modified.
            attention_mask: (B, T) 1/True at real tokens, 0/False at padding (never chosen). None: no padding
                beyond what ``special_token_ids`` (e.g. [PAD]) already excludes.
            word_ids: (B, T) integer word index of every token, -1 at special and padding tokens; required by the
                "whole_word" and "span" strategies, ignored (but checked) by "token". A word is a maximal run of
                adjacent tokens with the same id >= 0; the word strategies never choose a token with -1.
            special_tokens_mask: (B, T) 1/True at further positions never to choose.
            generator: the random source; None uses torch's global generator. The same generator state gives
                the same result.

        Returns:
            A :class:`MaskedBatch`; the span fields are set for the "span" strategy only.

        Raises:
            TypeError: if a tensor argument is not a tensor or has the wrong dtype.
            ValueError: if a shape differs from ``input_ids``'s, an id is outside ``[0, vocab_size)``, ``word_ids``
                is missing for "whole_word"/"span", or ``word_ids`` is >= 0 at a special or padding token.
        """
        cfg = self.config
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(f"input_ids must be a (B, T) integer torch.Tensor, got {type(input_ids).__name__}")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be 2-D (B, T), got shape {tuple(input_ids.shape)}")
        _check_batch_tensor("input_ids", input_ids, tuple(input_ids.shape), kind="int")
        shape = tuple(input_ids.shape)
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.vocab_size):
            raise ValueError(
                f"input_ids must lie in [0, {self.vocab_size}) (vocab_size), got values in "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]"
            )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        device = input_ids.device

        candidate = ~self._is_special.to(device)[input_ids]  # (B, T)
        if attention_mask is not None:
            candidate &= _check_batch_tensor("attention_mask", attention_mask, shape, kind="mask").to(device).bool()
        if special_tokens_mask is not None:
            flags = _check_batch_tensor("special_tokens_mask", special_tokens_mask, shape, kind="mask")
            candidate &= ~flags.to(device).bool()
        if word_ids is not None:
            word_ids = _check_batch_tensor("word_ids", word_ids, shape, kind="int").to(device, torch.int64)
            if bool(((word_ids >= 0) & ~candidate).any()):
                b, t = ((word_ids >= 0) & ~candidate).nonzero()[0].tolist()
                raise ValueError(
                    "word_ids must be -1 at special and padding tokens, got "
                    f"{int(word_ids[b, t])} at position ({b}, {t}) (token id {int(input_ids[b, t])})"
                )
            if bool((word_ids < -1).any()):
                raise ValueError(f"word_ids must be >= -1, got minimum {int(word_ids.min())}")
        elif cfg.strategy != "token":
            raise ValueError(
                f"word_ids (B, T) are required by the {cfg.strategy!r} strategy (-1 at special and padding "
                "tokens), got None"
            )

        if cfg.strategy == "token":
            chosen = self._choose_tokens(candidate, generator)
            fate = self._per_token_fate(shape, generator, device)
            spans = None
        elif cfg.strategy == "whole_word":
            chosen = self._choose_whole_words(candidate & (word_ids >= 0), word_ids, generator)
            fate = self._per_token_fate(shape, generator, device)
            spans = None
        else:
            chosen, fate, spans = self._choose_spans(candidate & (word_ids >= 0), word_ids, generator)

        ignore = torch.full(shape, IGNORE_INDEX, dtype=torch.int64, device=device)
        labels = torch.where(chosen, input_ids.to(torch.int64), ignore)
        out = input_ids.clone()
        out[chosen & (fate == _MASK)] = self.mask_token_id
        replace = chosen & (fate == _RANDOM)
        n_random = int(replace.sum())
        if n_random:
            probs = self.replacement_probs if generator is None else self.replacement_probs.to(generator.device)
            draws = torch.multinomial(probs, n_random, replacement=True, generator=generator)
            out[replace] = draws.to(device, out.dtype)
        if spans is None:
            return MaskedBatch(input_ids=out, labels=labels)
        left, right, position = spans
        return MaskedBatch(input_ids=out, labels=labels, span_left=left, span_right=right, span_position=position)

    # ------------------------------------------------------------------------------------------------------------

    def _rand(self, shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if generator is None:
            return torch.rand(shape, device=device, dtype=dtype)
        return torch.rand(shape, generator=generator, device=generator.device, dtype=dtype).to(device)

    def _per_token_fate(self, shape: tuple[int, ...], generator: torch.Generator | None,
                        device: torch.device) -> torch.Tensor:
        """(B, T) int8 fate of every position if chosen: _MASK, _RANDOM or _KEEP."""
        return self._fate_of(self._rand(shape, generator, device, torch.float64))

    def _fate_of(self, u: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        fate = torch.full(u.shape, _KEEP, dtype=torch.int8, device=u.device)
        fate[u < cfg.mask_fraction + cfg.random_fraction] = _RANDOM
        fate[u < cfg.mask_fraction] = _MASK
        return fate

    def _budgets(self, candidate: torch.Tensor) -> torch.Tensor:
        """(B,) int64 token budget per sequence: floor(p * n + 0.5), at least 1 when n > 0."""
        n = candidate.sum(dim=1)
        k = torch.floor(n.to(torch.float64) * self.config.mlm_probability + 0.5).to(torch.int64)
        return torch.where(n > 0, k.clamp(min=1), torch.zeros_like(k))

    def _choose_tokens(self, candidate: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(B, T) bool chosen tokens for the "token" strategy."""
        u = self._rand(tuple(candidate.shape), generator, candidate.device)
        if self.config.selection == "bernoulli":
            return candidate & (u < self.config.mlm_probability)
        # Exact: the k candidates with the smallest uniform scores; non-candidates sort last and k <= n.
        u = u.masked_fill(~candidate, 2.0)
        order = u.argsort(dim=1)  # (B, T)
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
        return rank < self._budgets(candidate).unsqueeze(1)

    def _choose_whole_words(self, candidate: torch.Tensor, word_ids: torch.Tensor,
                            generator: torch.Generator | None) -> torch.Tensor:
        """(B, T) bool chosen tokens for "whole_word": words in random order while the count is below budget.

        Each sequence's words are visited in a uniformly random order and a word is taken while the tokens taken
        before it number fewer than the budget; so the total is at least the budget and exceeds it by less than
        the last word's token count. Vectorised over the batch: one sort of all words.
        """
        B, T = candidate.shape
        device = candidate.device
        prev_cand = torch.nn.functional.pad(candidate[:, :-1], (1, 0), value=False)
        prev_word = torch.nn.functional.pad(word_ids[:, :-1], (1, 0), value=-1)
        starts = candidate & (~prev_cand | (word_ids != prev_word))  # (B, T) first token of every word
        n_words = int(starts.sum())
        if n_words == 0:
            return torch.zeros_like(candidate)
        flat_word = starts.reshape(-1).cumsum(0) - 1  # (B*T,) word index of every candidate token
        flat_cand = candidate.reshape(-1)
        word_len = torch.bincount(flat_word[flat_cand], minlength=n_words)  # (n_words,)
        word_seq = starts.nonzero()[:, 0]  # (n_words,) sequence of every word, in word order
        keys = word_seq.to(torch.float64) + self._rand((n_words,), generator, device, torch.float64)
        order = keys.argsort()  # grouped by sequence, random within
        sorted_len = word_len[order]
        n_cand = candidate.sum(dim=1)
        seq_offset = n_cand.cumsum(0) - n_cand  # (B,) candidate tokens in earlier sequences
        taken_before = sorted_len.cumsum(0) - sorted_len - seq_offset[word_seq[order]]
        chosen_word = torch.empty(n_words, dtype=torch.bool, device=device)
        chosen_word[order] = taken_before < self._budgets(candidate)[word_seq[order]]
        chosen = chosen_word[flat_word.clamp(min=0)] & flat_cand
        return chosen.reshape(B, T)

    def _choose_spans(
        self, candidate: torch.Tensor, word_ids: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Chosen positions, per-position fate (one per span) and SBO targets for the "span" strategy.

        Per sequence (Python, O(T) expected):

        1. Words are maximal runs of candidate tokens with one word id; a segment is a maximal run of adjacent
           words. A word touching either end of the sequence is not a candidate (its span would have no
           boundary token inside the sequence); [CLS]/[SEP] normally make this moot.
        2. Until the tokens in spans reach the budget: draw a length L (words) from the clipped geometric, then
           a start word uniformly among the starts where L words fit inside one segment without touching an
           earlier span (at least one unmasked word between spans, so spans never overlap or merge and every
           boundary token is unmasked). The start is found by rejection from uniform proposals, then by
           enumeration, so it is exactly uniform over the valid starts. If no start fits L words, L is
           shortened to the longest free stretch; if no free word is left, the sequence stops short of its
           budget. Both only happen in short or crowded sequences.
        3. The span that reaches the budget is kept whole: the total is at least the budget and exceeds it by
           less than the last span's token count. Keeping it whole keeps the span-length distribution exact
           (the number of spans is a stopping time; by Wald's identity the pooled lengths follow the pmf),
           at the cost of a realised masking rate above p: with p = 0.15, about 15.5% of 512-token sequences and
           17% of 128-token ones with one token per word, 16% and 19% with two tokens per word on average (lower
           ``mlm_probability`` to compensate). SpanBERT's released code instead cut the last span at the budget
           (even inside a word), which shortens the last span of most sequences, and merged spans that touched
           into one; both change the span-length distribution, which is why they are not copied here.
        """
        cfg = self.config
        B, T = candidate.shape
        device = candidate.device
        cand = candidate.cpu().numpy()
        wid = word_ids.cpu().numpy()
        prev_cand = np.zeros_like(cand)
        prev_cand[:, 1:] = cand[:, :-1]
        next_cand = np.zeros_like(cand)
        next_cand[:, :-1] = cand[:, 1:]
        same_prev = np.zeros_like(cand)
        same_prev[:, 1:] = wid[:, 1:] == wid[:, :-1]
        same_next = np.zeros_like(cand)
        same_next[:, :-1] = wid[:, :-1] == wid[:, 1:]
        starts = cand & ~(prev_cand & same_prev)  # (B, T)
        ends = cand & ~(next_cand & same_next)  # (B, T) last token of every word

        # One seed from the torch generator drives numpy for the per-sequence loop: reproducible and fast.
        if generator is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        else:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
        rng = np.random.default_rng(seed)

        chosen = np.zeros((B, T), dtype=bool)
        fate = np.full((B, T), _KEEP, dtype=np.int8)
        left = np.full((B, T), -1, dtype=np.int64)
        right = np.full((B, T), -1, dtype=np.int64)
        position = np.full((B, T), -1, dtype=np.int64)
        arange = np.arange(T, dtype=np.int64)
        mask_cut = cfg.mask_fraction
        random_cut = cfg.mask_fraction + cfg.random_fraction

        for b in range(B):
            s = np.flatnonzero(starts[b])
            if s.size == 0:
                continue
            e = np.flatnonzero(ends[b]) + 1  # exclusive token end of every word
            usable = (s > 0) & (e < T)
            n_tokens = int((e - s)[usable].sum())
            budget = masking_budget(n_tokens, cfg.mlm_probability)
            if budget == 0:
                continue
            for start, end, u in self._place_spans(s, e, usable, budget, rng):
                chosen[b, start:end] = True
                fate[b, start:end] = _MASK if u < mask_cut else (_RANDOM if u < random_cut else _KEEP)
                left[b, start:end] = start - 1
                right[b, start:end] = end
                position[b, start:end] = arange[: end - start]

        def back(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a).to(device)

        return back(chosen), back(fate), (back(left), back(right), back(position))

    def _place_spans(self, s: np.ndarray, e: np.ndarray, usable: np.ndarray, budget: int,
                     rng: np.random.Generator) -> list[tuple[int, int, float]]:
        """Spans (start token, exclusive end token, fate uniform) of one sequence; see :meth:`_choose_spans`."""
        W = len(s)
        seg = np.concatenate([[0], np.cumsum(e[:-1] != s[1:])]).tolist()  # (W,) segment of every word
        cum = np.concatenate([[0], np.cumsum(e - s)]).tolist()  # (W + 1,) tokens before every word
        s_list, e_list = s.tolist(), e.tolist()
        free = usable.tolist()  # may a span cover this word? (not in or next to a span, not at a sequence edge)
        # At most `budget` spans (each has >= 1 token): draw their lengths and fates at once.
        lengths = np.searchsorted(self._span_cdf, rng.random(budget), side="right") + 1
        lengths = np.minimum(lengths, self.config.max_span_length).tolist()  # guards against cdf rounding
        fates = rng.random(budget).tolist()
        proposals: list[int] = []
        spans = []
        taken = 0
        for L, u in zip(lengths, fates):
            if taken >= budget:
                break
            a = -1
            for _ in range(_SPAN_PROPOSALS):
                if not proposals:
                    proposals = rng.integers(0, W, size=4 * budget + 16).tolist()
                c = proposals.pop()
                z = c + L - 1
                if z < W and seg[z] == seg[c] and all(free[c:z + 1]):
                    a = c
                    break
            if a < 0:
                a, L = self._enumerate_start(free, seg, L, rng)
                if a < 0:
                    break  # no free word left: the budget cannot be met
            for w in range(max(a - 1, 0), min(a + L + 1, W)):
                free[w] = False
            taken += cum[a + L] - cum[a]
            spans.append((s_list[a], e_list[a + L - 1], u))
        return spans

    @staticmethod
    def _enumerate_start(free: list[bool], seg: list[int], L: int, rng: np.random.Generator) -> tuple[int, int]:
        """A uniform start among all words where L free words fit in one segment; L shortened if none fits."""
        runs = []  # (first word, length) of maximal stretches of free words inside one segment
        lo = -1
        for w, f in enumerate(free):
            if f and (lo < 0 or seg[w] != seg[lo]):
                if lo >= 0:
                    runs.append((lo, w - lo))
                lo = w
            elif not f and lo >= 0:
                runs.append((lo, w - lo))
                lo = -1
        if lo >= 0:
            runs.append((lo, len(free) - lo))
        if not runs:
            return -1, 0
        L = min(L, max(n for _, n in runs))
        counts = [max(0, n - L + 1) for _, n in runs]
        r = int(rng.integers(0, sum(counts)))
        for (first, _), c in zip(runs, counts):
            if r < c:
                return first + r, L
            r -= c
        raise AssertionError("unreachable")  # pragma: no cover
