"""Tests of ctxemb.tasks.pretraining.masking: rates, the 80/10/10 split, replacement distribution, whole words, spans.

Statistical checks use a fixed seed and bounds of 5 standard errors (or chi-square p-values above 1e-4), so they
are deterministic and would only fail on a real change of behaviour; each has a companion check that a wrong
distribution is rejected by the same statistic.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from ctxemb.tasks.pretraining.masking import (IGNORE_INDEX, MaskedBatch, Masker, MaskingConfig,
                                              clipped_geometric_pmf, masking_budget)
from ctxemb.tasks.pretraining.mask_distributions import clipped_geometric_mean, unigram_weights

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIALS = (PAD, CLS, SEP, MASK)
V = 1000
# Input tokens come from [FIRST, SPLIT); replacements (in tests that need to tell them apart) from [SPLIT, V).
FIRST, SPLIT = 4, 500


def make_batch(B: int, T: int, *, seed: int = 0, max_subwords: int = 3, pad: bool = True,
               pair: bool = True, low: int = FIRST, high: int = SPLIT) -> dict[str, torch.Tensor]:
    """[CLS] A [SEP] B [SEP] [PAD]...: word ids restart at 0 in B (as transformers' pair encodings do)."""
    rng = np.random.default_rng(seed)
    ids = np.full((B, T), PAD, dtype=np.int64)
    attention = np.zeros((B, T), dtype=np.int64)
    words = np.full((B, T), -1, dtype=np.int64)
    for b in range(B):
        n = int(rng.integers(T // 2, T + 1)) if pad else T
        ids[b, :n] = rng.integers(low, high, size=n)
        attention[b, :n] = 1
        seps = [n - 1]
        if pair and n > 8:
            seps.insert(0, int(rng.integers(3, n - 3)))
        ids[b, 0] = CLS
        start = 1
        for sep in seps:
            ids[b, sep] = SEP
            t, w = start, 0
            while t < sep:
                k = int(rng.integers(1, max_subwords + 1))
                words[b, t:min(t + k, sep)] = w
                w += 1
                t += k
            start = sep + 1
    return {
        "input_ids": torch.from_numpy(ids),
        "attention_mask": torch.from_numpy(attention),
        "word_ids": torch.from_numpy(words),
    }


def make_masker(strategy: str = "token", **kw) -> Masker:
    weights = kw.pop("replacement_weights", None)
    return Masker(MaskingConfig(strategy=strategy, **kw), vocab_size=V, mask_token_id=MASK,
                  special_token_ids=SPECIALS, replacement_weights=weights)


def split_weights() -> torch.Tensor:
    """Replacements only from [SPLIT, V): a random replacement never equals an input token."""
    w = torch.zeros(V)
    w[SPLIT:] = 1.0
    return w


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def candidates(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    ids = batch["input_ids"]
    special = torch.zeros_like(ids, dtype=torch.bool)
    for s in SPECIALS:
        special |= ids == s
    return ~special & batch["attention_mask"].bool()


def runs(row: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs [s, e) of True in a 1-D bool array."""
    padded = np.concatenate([[False], row, [False]]).astype(np.int8)
    d = np.diff(padded)
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def word_runs(word_row: np.ndarray) -> list[tuple[int, int]]:
    """Words of a row: maximal runs of adjacent positions with one word id >= 0."""
    out = []
    t, T = 0, len(word_row)
    while t < T:
        if word_row[t] < 0:
            t += 1
            continue
        s = t
        while t < T and word_row[t] == word_row[s]:
            t += 1
        out.append((s, t))
    return out


def word_starts(word_row: np.ndarray) -> np.ndarray:
    prev = np.concatenate([[-1], word_row[:-1]])
    return (word_row >= 0) & (word_row != prev)


def fates(batch: dict[str, torch.Tensor], out: MaskedBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, T) bool arrays: chosen positions turned into [MASK], into a random token, or left unchanged.

    Exact only with split_weights(): random replacements then differ from every input token.
    """
    chosen = out.masked.numpy()
    new = out.input_ids.numpy()
    old = batch["input_ids"].numpy()
    masked = chosen & (new == MASK)
    random = chosen & (new >= SPLIT)
    kept = chosen & (new == old)
    assert (masked | random | kept)[chosen].all()
    return masked, random, kept


def within(observed: float, expected: float, n: int, sigmas: float = 5.0) -> bool:
    se = math.sqrt(expected * (1.0 - expected) / n)
    return abs(observed - expected) <= sigmas * se


# --------------------------------------------------------------------------------------------------------------
# Distributions and configuration


def test_clipped_geometric_pmf_and_mean():
    pmf = clipped_geometric_pmf(0.2, 10)
    assert pmf.shape == (10,)
    assert pmf.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(pmf[1:] / pmf[:-1], 0.8)  # geometric ratio 1 - p
    mean = clipped_geometric_mean(0.2, 10)
    assert mean == pytest.approx(3.797, abs=1e-3)
    assert round(mean, 1) == 3.8  # SpanBERT's reported mean span length
    # Renormalised, not clamped: putting the tail mass at 10 would give (1 - 0.8**10) / 0.2 = 4.46.
    assert abs(mean - (1 - 0.8**10) / 0.2) > 0.5
    np.testing.assert_allclose(clipped_geometric_pmf(1.0, 4), [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(clipped_geometric_pmf(0.5, 1), [1.0])


@pytest.mark.parametrize("p, max_len, exc, name", [
    (0.0, 10, ValueError, "p"), (1.5, 10, ValueError, "p"), (0.2, 0, ValueError, "max_len"),
    (0.2, 2.5, TypeError, "max_len"), ("0.2", 10, TypeError, "p"),
])
def test_clipped_geometric_rejects_bad_arguments(p, max_len, exc, name):
    with pytest.raises(exc, match=name):
        clipped_geometric_pmf(p, max_len)


def test_masking_budget_rounds_half_up_and_is_at_least_one():
    assert masking_budget(0, 0.15) == 0
    assert masking_budget(1, 0.15) == 1
    assert masking_budget(10, 0.15) == 2  # 1.5 rounds up
    assert masking_budget(126, 0.15) == 19  # 18.9
    assert masking_budget(510, 0.15) == 77  # 76.5 rounds up


@pytest.mark.parametrize("field, value, exc", [
    ("strategy", "spans", ValueError), ("selection", "topk", ValueError),
    ("mlm_probability", 0.0, ValueError), ("mlm_probability", 1.2, ValueError),
    ("mlm_probability", float("nan"), ValueError), ("mlm_probability", True, TypeError),
    ("mask_fraction", -0.1, ValueError), ("random_fraction", 1.1, ValueError),
    ("random_fraction", 0.3, ValueError),  # 0.8 + 0.3 > 1
    ("span_geometric_p", 0.0, ValueError), ("max_span_length", 0, ValueError),
    ("max_span_length", 2.0, TypeError),
])
def test_config_rejects_bad_values(field, value, exc):
    with pytest.raises(exc, match=field if field != "random_fraction" or value != 0.3 else "mask_fraction"):
        MaskingConfig(**{field: value})


def test_config_defaults():
    cfg = MaskingConfig()
    assert (cfg.strategy, cfg.mlm_probability, cfg.mask_fraction, cfg.random_fraction) == ("token", 0.15, 0.8, 0.1)
    assert cfg.keep_fraction == pytest.approx(0.1)
    assert (cfg.span_geometric_p, cfg.max_span_length, cfg.selection) == (0.2, 10, "bernoulli")


def test_unigram_weights_zero_specials_and_normalise():
    counts = torch.arange(10, dtype=torch.float64)  # id i seen i times
    w = unigram_weights(counts, special_token_ids=[1, 2, 9])
    assert w.dtype == torch.float32 and w.shape == (10,)
    assert float(w.sum()) == pytest.approx(1.0)
    assert w[[1, 2, 9]].tolist() == [0.0, 0.0, 0.0]
    kept = [0, 3, 4, 5, 6, 7, 8]
    np.testing.assert_allclose(w[kept].numpy(), (counts[kept] / counts[kept].sum()).numpy(), rtol=1e-6)
    np.testing.assert_allclose(unigram_weights(np.arange(10), [1, 2, 9]).numpy(), w.numpy())


@pytest.mark.parametrize("counts, specials, exc, name", [
    (torch.ones(3, 3), [0], ValueError, "token_counts"),
    (torch.tensor([1.0, -1.0, 2.0]), [0], ValueError, "token_counts"),
    (torch.tensor([1.0, float("inf"), 2.0]), [0], ValueError, "token_counts"),
    (torch.tensor([1.0, 0.0, 0.0]), [0], ValueError, "token_counts"),
    (torch.ones(3), [3], ValueError, "special_token_ids"),
    ("abc", [0], TypeError, "token_counts"),
])
def test_unigram_weights_rejects_bad_input(counts, specials, exc, name):
    with pytest.raises(exc, match=name):
        unigram_weights(counts, specials)


# --------------------------------------------------------------------------------------------------------------
# Token strategy


@pytest.mark.parametrize("p", [0.15, 0.4])
def test_bernoulli_rate_is_p_of_candidates(p):
    batch = make_batch(256, 128)
    out = make_masker(mlm_probability=p)(**{k: batch[k] for k in ("input_ids", "attention_mask")}, generator=gen())
    cand = candidates(batch)
    n = int(cand.sum())
    rate = int(out.masked.sum()) / n
    assert within(rate, p, n), (rate, p)
    assert not within(rate, p + 0.01, n)  # the bound is tight enough to see a one-point error
    # Per-sequence counts vary: Bernoulli, not exact.
    assert out.masked.sum(1).unique().numel() > 5


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span"])
def test_special_and_padding_never_chosen_labels_are_originals(strategy):
    batch = make_batch(64, 96)
    # A padding id that is NOT a special token: only the attention mask excludes it.
    ids = batch["input_ids"].clone()
    ids[batch["attention_mask"] == 0] = 7
    batch["input_ids"] = ids
    flagged = torch.zeros_like(ids, dtype=torch.bool)
    flagged[:, 5] = True  # an extra position excluded through special_tokens_mask
    word_ids = batch["word_ids"].masked_fill(flagged, -1)
    out = make_masker(strategy)(ids, attention_mask=batch["attention_mask"], word_ids=word_ids,
                                special_tokens_mask=flagged, generator=gen(3))
    chosen = out.masked
    assert chosen.any()
    assert not chosen[~candidates(batch)].any()
    assert not chosen[flagged].any()
    assert (out.labels[chosen] == ids[chosen]).all()
    assert (out.labels[~chosen] == IGNORE_INDEX).all()
    assert out.labels.dtype == torch.int64
    assert out.input_ids.dtype == ids.dtype
    assert (out.input_ids[~chosen] == ids[~chosen]).all()  # unchosen positions untouched
    for t in (out.input_ids[chosen],):
        assert not any(int(x) in (PAD, CLS, SEP) for x in t.unique())  # never a special other than [MASK]


@pytest.mark.parametrize("strategy", ["token", "whole_word"])
def test_80_10_10_split_per_token(strategy):
    batch = make_batch(256, 128)
    out = make_masker(strategy, replacement_weights=split_weights())(**batch, generator=gen(1))
    masked, random, kept = fates(batch, out)
    n = int(out.masked.sum())
    assert n > 3000
    for share, expected in ((masked.sum() / n, 0.8), (random.sum() / n, 0.1), (kept.sum() / n, 0.1)):
        assert within(float(share), expected, n), (share, expected)
    assert not within(float(masked.sum() / n), 0.75, n)


def test_fractions_are_configurable():
    batch = make_batch(128, 128)
    out = make_masker(mask_fraction=0.5, random_fraction=0.5, replacement_weights=split_weights())(
        **batch, generator=gen(2))
    masked, random, kept = fates(batch, out)
    n = int(out.masked.sum())
    assert within(float(masked.sum() / n), 0.5, n)
    assert within(float(random.sum() / n), 0.5, n)
    assert kept.sum() == 0


def test_exact_selection_gives_the_budget_per_sequence():
    batch = make_batch(64, 64, seed=5)
    am = batch["attention_mask"].clone()
    am[0] = 0  # no candidates at all
    am[1, 3:] = 0  # [CLS] + 2 tokens: 2 candidates -> round(0.3) = 0 -> at least 1
    am[2, 12:] = 0
    batch["attention_mask"] = am
    out = make_masker(selection="exact")(batch["input_ids"], attention_mask=am, generator=gen(4))
    n = candidates(batch).sum(1)
    counts = out.masked.sum(1)
    expected = torch.tensor([masking_budget(int(k), 0.15) for k in n])
    assert counts.tolist() == expected.tolist()
    assert counts[0] == 0 and counts[1] == 1
    # The budget formula itself: round half up, at least 1.
    assert all(e == (max(1, math.floor(0.15 * k + 0.5)) if k else 0) for e, k in zip(expected.tolist(), n.tolist()))
    assert not out.masked[~candidates(batch)].any()


def test_random_replacements_follow_the_unigram_distribution():
    stats = pytest.importorskip("scipy.stats")
    v = 40
    rng = np.random.default_rng(0)
    counts = 1000.0 / np.arange(1, v + 1) ** 1.1  # Zipf-like corpus counts
    counts[:4] = 5000.0  # specials are frequent in a tokenised corpus; unigram_weights drops them
    weights = unigram_weights(counts, SPECIALS)
    masker = Masker(MaskingConfig(mlm_probability=0.5, mask_fraction=0.0, random_fraction=1.0), vocab_size=v,
                    mask_token_id=MASK, special_token_ids=SPECIALS, replacement_weights=weights)
    ids = torch.from_numpy(rng.integers(4, v, size=(128, 128)))
    out = masker(ids, generator=gen(6))
    draws = out.input_ids[out.masked]
    assert draws.numel() > 7000
    assert not torch.isin(draws, torch.tensor(SPECIALS)).any()
    observed = torch.bincount(draws, minlength=v)[4:].numpy()
    q = weights[4:].double().numpy()
    assert stats.chisquare(observed, q / q.sum() * observed.sum()).pvalue > 1e-4
    # The same test tells the unigram distribution from a uniform one.
    assert stats.chisquare(observed, np.full(v - 4, observed.sum() / (v - 4))).pvalue < 1e-10


def test_default_replacements_are_uniform_over_non_special_tokens():
    stats = pytest.importorskip("scipy.stats")
    v = 24
    specials = (PAD, CLS, SEP, MASK, 17)  # a special id in the middle of the vocabulary
    masker = Masker(MaskingConfig(mlm_probability=0.5, mask_fraction=0.0, random_fraction=1.0), vocab_size=v,
                    mask_token_id=MASK, special_token_ids=specials)
    ids = torch.from_numpy(np.random.default_rng(1).integers(4, 17, size=(64, 128)))
    out = masker(ids, generator=gen(7))
    draws = out.input_ids[out.masked]
    assert not torch.isin(draws, torch.tensor(specials)).any()
    allowed = [i for i in range(v) if i not in specials]
    observed = torch.bincount(draws, minlength=v)[allowed].numpy()
    assert stats.chisquare(observed).pvalue > 1e-4
    assert masker.replacement_probs[list(specials)].sum() == 0


def test_replacement_weights_on_specials_are_zeroed_with_a_warning(caplog):
    w = torch.ones(V)
    with caplog.at_level(logging.WARNING, logger="ctxemb.tasks.pretraining.masking"):
        masker = make_masker(replacement_weights=w)
    assert "special" in caplog.text
    assert masker.replacement_probs[list(SPECIALS)].sum() == 0
    assert float(masker.replacement_probs.sum()) == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------------------------
# Whole-word masking


def test_whole_word_masks_whole_words_within_the_budget():
    batch = make_batch(128, 128, max_subwords=4)
    out = make_masker("whole_word", replacement_weights=split_weights())(**batch, generator=gen(8))
    chosen = out.masked.numpy()
    words = batch["word_ids"].numpy()
    masked, random, kept = fates(batch, out)
    mixed = 0
    for b in range(chosen.shape[0]):
        chosen_lengths = []
        for s, e in word_runs(words[b]):
            k = int(chosen[b, s:e].sum())
            assert k in (0, e - s), f"partial word at row {b} tokens {s}:{e}"
            if k:
                chosen_lengths.append(e - s)
                fate_kinds = sum(int(f[b, s:e].any()) for f in (masked, random, kept))
                mixed += fate_kinds > 1
        budget = masking_budget(int((words[b] >= 0).sum()), 0.15)
        total = sum(chosen_lengths)
        # The documented rule: at least the budget, over it by less than the last word taken.
        assert total >= budget
        assert total - max(chosen_lengths) < budget
    assert mixed > 50  # the 80/10/10 decision is per token, so multi-token words get mixed fates


def test_whole_word_words_do_not_merge_across_separators():
    # Word ids restart at 0 after [SEP]; the word before [SEP] has the same id as the first word after it.
    ids = torch.tensor([[CLS, 10, 11, SEP, 12, 13, SEP]])
    words = torch.tensor([[-1, 0, 0, -1, 0, 0, -1]])
    seen = set()
    for seed in range(40):
        out = make_masker("whole_word", mlm_probability=0.25)(ids, word_ids=words, generator=gen(seed))
        seen.add(tuple(out.masked[0].tolist()))
    # budget = round(0.25 * 4) = 1 token -> one of the two 2-token words, never both.
    assert seen == {(False, True, True, False, False, False, False), (False, False, False, False, True, True, False)}


# --------------------------------------------------------------------------------------------------------------
# Span masking


@pytest.fixture(scope="module", params=[(300, 512), (2000, 64)], ids=["512", "64"])
def span_run(request):
    """Long sequences (SpanBERT's 512) and short ones, where the last span of a sequence is a large share."""
    B, T = request.param
    batch = make_batch(B, T, max_subwords=2, pad=False, pair=False, seed=11)
    out = make_masker("span", replacement_weights=split_weights())(**batch, generator=gen(9))
    return batch, out


def spans_of(out: MaskedBatch) -> list[list[tuple[int, int]]]:
    return [runs(row) for row in out.masked.numpy()]


def test_span_lengths_follow_the_clipped_geometric(span_run):
    stats = pytest.importorskip("scipy.stats")
    batch, out = span_run
    words = batch["word_ids"].numpy()
    lengths = []
    for b, row in enumerate(spans_of(out)):
        starts = word_starts(words[b])
        lengths += [int(starts[s:e].sum()) for s, e in row]  # span length in words
    lengths = np.array(lengths)
    n = len(lengths)
    assert n > 3500
    assert lengths.min() >= 1 and lengths.max() <= 10
    observed = np.bincount(lengths, minlength=11)[1:]
    pmf = clipped_geometric_pmf(0.2, 10)
    assert stats.chisquare(observed, pmf * n).pvalue > 1e-4
    sd = math.sqrt(float(np.dot(np.arange(1, 11) ** 2, pmf)) - clipped_geometric_mean(0.2, 10) ** 2)
    assert abs(lengths.mean() - 3.797) < 5 * sd / math.sqrt(n)
    # The same statistic rejects the clamped geometric (tail mass piled on length 10).
    clamped = 0.2 * 0.8 ** np.arange(10)
    clamped[-1] = 0.8**9
    assert stats.chisquare(observed, clamped / clamped.sum() * n).pvalue < 1e-6


def test_spans_are_whole_words_with_one_decision_each(span_run):
    batch, out = span_run
    words = batch["word_ids"].numpy()
    masked, random, kept = fates(batch, out)
    kinds = {"mask": 0, "random": 0, "kept": 0}
    n_spans = 0
    for b, row in enumerate(spans_of(out)):
        starts = word_starts(words[b])
        for s, e in row:
            n_spans += 1
            assert starts[s], f"span {s}:{e} of row {b} starts inside a word"
            assert e == len(starts) or not (words[b, e] >= 0 and words[b, e] == words[b, e - 1]), \
                f"span {s}:{e} of row {b} ends inside a word"
            if masked[b, s:e].all():
                kinds["mask"] += 1
            elif random[b, s:e].all():
                kinds["random"] += 1
            elif kept[b, s:e].all():
                kinds["kept"] += 1
            else:
                raise AssertionError(f"span {s}:{e} of row {b} has mixed fates")
    for kind, expected in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        assert within(kinds[kind] / n_spans, expected, n_spans), (kind, kinds)


def test_span_budget_rule(span_run):
    batch, out = span_run
    words = batch["word_ids"].numpy()
    over_by_more_than_a_word = 0
    for b, row in enumerate(spans_of(out)):
        budget = masking_budget(int((words[b] >= 0).sum()), 0.15)
        sizes = [e - s for s, e in row]
        # At least the budget; the span that reached it is kept whole, so removing it falls below the budget.
        assert sum(sizes) >= budget
        assert sum(sizes) - max(sizes) < budget
        starts = word_starts(words[b])
        last_word = [e - (s + int(np.flatnonzero(starts[s:e])[-1])) for s, e in row]
        over_by_more_than_a_word += sum(sizes) - max(last_word) >= budget
    # Kept whole, not cut at the budget (SpanBERT's rule): often more than one word over the budget.
    assert over_by_more_than_a_word > len(words) // 10


def test_span_boundaries_and_positions(span_run):
    batch, out = span_run
    check_span_targets(out)


def check_span_targets(out: MaskedBatch) -> None:
    chosen = out.masked.numpy()
    left, right, pos = out.span_left.numpy(), out.span_right.numpy(), out.span_position.numpy()
    assert (left[~chosen] == -1).all() and (right[~chosen] == -1).all() and (pos[~chosen] == -1).all()
    T = chosen.shape[1]
    for b, row in enumerate(runs(r) for r in chosen):
        for s, e in row:
            # Maximal runs are whole spans: one left/right per run means spans never touch or overlap.
            assert (left[b, s:e] == s - 1).all()
            assert (right[b, s:e] == e).all()
            assert pos[b, s:e].tolist() == list(range(e - s))
            assert 0 <= s - 1 and e <= T - 1
            assert not chosen[b, s - 1] and not chosen[b, e]


def test_spans_with_pairs_and_padding():
    batch = make_batch(64, 128, seed=12)
    out = make_masker("span")(**batch, generator=gen(10))
    check_span_targets(out)
    ids = batch["input_ids"].numpy()
    chosen = out.masked.numpy()
    # Boundaries may be [CLS]/[SEP]; spans never contain them (nor padding).
    boundary_tokens = set(ids[np.arange(64)[:, None], np.maximum(out.span_left.numpy(), 0)][chosen].tolist())
    assert not chosen[~candidates(batch).numpy()].any()
    assert {CLS, SEP} & boundary_tokens


def test_spans_never_touch_the_sequence_edges():
    # No [CLS]/[SEP]: every token is a candidate, but a span at position 0 or T-1 would have no boundary.
    B, T = 64, 32
    ids = torch.randint(FIRST, SPLIT, (B, T), generator=gen(0))
    words = torch.arange(T).expand(B, T).clone()
    out = make_masker("span", mlm_probability=0.3)(ids, word_ids=words, generator=gen(11))
    chosen = out.masked
    assert chosen.any()
    assert not chosen[:, 0].any() and not chosen[:, -1].any()
    check_span_targets(out)


def test_span_masking_of_short_and_empty_rows():
    batch = make_batch(8, 12, seed=13)
    batch["attention_mask"][0] = 0
    batch["word_ids"][0] = -1
    out = make_masker("span", mlm_probability=0.5)(**batch, generator=gen(12))
    assert not out.masked[0].any()
    check_span_targets(out)


# --------------------------------------------------------------------------------------------------------------
# Determinism, purity, errors


@pytest.mark.parametrize("strategy, selection", [("token", "bernoulli"), ("token", "exact"),
                                                 ("whole_word", "bernoulli"), ("span", "bernoulli")])
def test_deterministic_given_a_generator(strategy, selection):
    batch = make_batch(16, 64, seed=14)
    masker = make_masker(strategy, selection=selection)
    a, b, c = (masker(**batch, generator=gen(s)) for s in (5, 5, 6))
    for field in ("input_ids", "labels", "span_left", "span_right", "span_position"):
        x, y = getattr(a, field), getattr(b, field)
        if field.startswith("span"):
            assert (x is None) == (strategy != "span") and (y is None) == (x is None)
        if x is not None:
            assert torch.equal(x, y), field
    assert not torch.equal(a.labels, c.labels)
    torch.manual_seed(3)
    d = masker(**batch)
    torch.manual_seed(3)
    e = masker(**batch)
    assert torch.equal(d.input_ids, e.input_ids) and torch.equal(d.labels, e.labels)


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span"])
def test_caller_tensors_are_not_modified(strategy):
    batch = make_batch(16, 64, seed=15)
    flags = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    before = {k: v.clone() for k, v in batch.items()}
    flags_before = flags.clone()
    out = make_masker(strategy)(**batch, special_tokens_mask=flags, generator=gen())
    assert out.masked.any()
    for k in batch:
        assert torch.equal(batch[k], before[k]), k
    assert torch.equal(flags, flags_before)
    assert out.input_ids.data_ptr() != batch["input_ids"].data_ptr()


def test_int32_input_keeps_its_dtype():
    batch = make_batch(4, 32)
    out = make_masker()(batch["input_ids"].int(), attention_mask=batch["attention_mask"].bool(), generator=gen())
    assert out.input_ids.dtype == torch.int32 and out.labels.dtype == torch.int64


@pytest.mark.parametrize("strategy", ["whole_word", "span"])
def test_word_strategies_require_word_ids(strategy):
    batch = make_batch(2, 16)
    with pytest.raises(ValueError, match="word_ids"):
        make_masker(strategy)(batch["input_ids"], attention_mask=batch["attention_mask"])


def _bad_calls():
    ids = make_batch(2, 16)["input_ids"]
    words = make_batch(2, 16)["word_ids"]
    with_word_on_cls = words.clone()
    with_word_on_cls[0, 0] = 0
    return [
        ({"input_ids": ids.tolist()}, TypeError, "input_ids"),
        ({"input_ids": ids.float()}, TypeError, "input_ids"),
        ({"input_ids": ids[0]}, ValueError, "input_ids"),
        ({"input_ids": ids + V}, ValueError, "input_ids"),
        ({"input_ids": ids, "attention_mask": torch.ones(2, 15)}, ValueError, "attention_mask"),
        ({"input_ids": ids, "attention_mask": torch.ones(2, 16)}, TypeError, "attention_mask"),
        ({"input_ids": ids, "special_tokens_mask": torch.zeros(3, 16, dtype=torch.bool)}, ValueError,
         "special_tokens_mask"),
        ({"input_ids": ids, "word_ids": words.float()}, TypeError, "word_ids"),
        ({"input_ids": ids, "word_ids": with_word_on_cls}, ValueError, "word_ids"),
        ({"input_ids": ids, "word_ids": words - 5}, ValueError, "word_ids"),
        ({"input_ids": ids, "generator": 0}, TypeError, "generator"),
    ]


@pytest.mark.parametrize("kwargs, exc, name", _bad_calls())
def test_call_rejects_bad_input(kwargs, exc, name):
    ids = kwargs.pop("input_ids")
    with pytest.raises(exc, match=name):
        make_masker("whole_word")(ids, **kwargs)


@pytest.mark.parametrize("kwargs, exc, name", [
    ({"config": "token"}, TypeError, "config"),
    ({"vocab_size": 0}, ValueError, "vocab_size"),
    ({"vocab_size": 10.0}, TypeError, "vocab_size"),
    ({"mask_token_id": V}, ValueError, "mask_token_id"),
    ({"special_token_ids": [0, V + 3]}, ValueError, "special_token_ids"),
    ({"special_token_ids": 3}, TypeError, "special_token_ids"),
    ({"replacement_weights": torch.ones(V - 1)}, ValueError, "replacement_weights"),
    ({"replacement_weights": -torch.ones(V)}, ValueError, "replacement_weights"),
    ({"replacement_weights": torch.ones(V, 2)}, ValueError, "replacement_weights"),
    ({"replacement_weights": torch.zeros(V).index_fill(0, torch.tensor([PAD]), 1.0)}, ValueError,
     "replacement_weights"),
])
def test_constructor_rejects_bad_arguments(kwargs, exc, name):
    args = {"config": MaskingConfig(), "vocab_size": V, "mask_token_id": MASK, "special_token_ids": SPECIALS}
    args.update(kwargs)
    config = args.pop("config")
    with pytest.raises(exc, match=name):
        Masker(config, **args)


def test_works_as_a_collate_function():
    batch = make_batch(8, 32, seed=16)
    masker = make_masker("span")
    examples = [{k: v[i] for k, v in batch.items()} for i in range(8)]

    def collate(items):
        stacked = {k: torch.stack([it[k] for it in items]) for k in items[0]}
        return masker(**stacked, generator=gen(0))

    loader = torch.utils.data.DataLoader(examples, batch_size=4, collate_fn=collate)
    outs = list(loader)
    assert len(outs) == 2 and all(o.span_left is not None and o.input_ids.shape == (4, 32) for o in outs)
