"""pool_subwords: its NumPy path (CPU float tensors) against the plain definition and against its torch path."""

import numpy as np
import pytest
import torch

from ctxemb.runtime.engine import _LOOPED_WORDS, pool_subwords


def _reference(states: torch.Tensor, spans, pooling: str) -> torch.Tensor:
    pick = {"mean": lambda s, e: states[s:e].double().mean(0).to(states.dtype),
            "first": lambda s, e: states[s], "last": lambda s, e: states[e - 1]}[pooling]
    return torch.stack([pick(s, e) for s, e in spans])


def _spans(counts) -> list[tuple[int, int]]:
    ends = np.cumsum(counts)
    return [(int(e - c), int(e)) for c, e in zip(counts, ends)]


@pytest.mark.parametrize("pooling", ["mean", "first", "last"])
@pytest.mark.parametrize("shape", [(), (384,), (4, 16)])
@pytest.mark.parametrize("multi", [3, _LOOPED_WORDS + 5])  # the per-word sums, and the cumulative sum
def test_numpy_path_equals_the_definition(pooling, shape, multi):
    gen = torch.Generator().manual_seed(multi)
    counts = [1] * 20 + [2, 3, 5] * (multi // 3) + [2] * (multi % 3)
    counts = [counts[i] for i in torch.randperm(len(counts), generator=gen)]
    spans = _spans(counts)
    states = torch.randn(sum(counts), *shape, generator=gen) * 50
    got = pool_subwords(states, spans, pooling)
    want = _reference(states, spans, pooling)
    assert got.dtype == states.dtype and got.shape == (len(spans), *shape)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 if pooling == "mean" and multi > _LOOPED_WORDS else 0)


def test_spans_that_skip_or_revisit_tokens():
    states = torch.randn(9, 5)
    spans = [(4, 7), (0, 2), (1, 3), (8, 9)]
    torch.testing.assert_close(pool_subwords(states, spans), _reference(states, spans, "mean"), rtol=0, atol=0)


def test_torch_path_agrees_and_keeps_gradients():
    states = torch.randn(12, 8, dtype=torch.float64, requires_grad=True)
    spans = _spans([1, 3, 2, 1, 5])
    got = pool_subwords(states, spans)  # requires_grad: the torch path
    torch.testing.assert_close(got, pool_subwords(states.detach(), spans))
    got.sum().backward()
    assert torch.allclose(states.grad.sum(1), torch.full((12,), 8.0, dtype=torch.float64) /
                          torch.tensor([1, 3, 3, 3, 2, 2, 1, 5, 5, 5, 5, 5], dtype=torch.float64))
    half = states.detach().bfloat16()
    assert pool_subwords(half, spans).dtype == torch.bfloat16


def test_inference_tensors_and_row_slices():
    with torch.inference_mode():
        batch = torch.randn(3, 10, 6)
        got = pool_subwords(batch[1, 1:8], _spans([2, 1, 4]))
    torch.testing.assert_close(got, _reference(batch[1, 1:8], _spans([2, 1, 4]), "mean"), rtol=0, atol=0)
    assert got.untyped_storage().data_ptr() != batch.untyped_storage().data_ptr()  # a copy, never a view


def test_no_words_gives_an_empty_result():
    assert pool_subwords(torch.randn(3, 4), []).shape == (0, 4)


@pytest.mark.parametrize("spans", [[(0, 0)], [(1, 5)], [(-1, 1)], [(0, 1), (2, 1)]])
def test_bad_spans_are_named(spans):
    with pytest.raises(ValueError, match=r"word_spans\[\d\] = .* not a non-empty span of the 3 token states"):
        pool_subwords(torch.randn(3, 4), spans)


def test_an_unknown_pooling_is_refused():
    with pytest.raises(ValueError, match="pooling must be 'mean', 'first' or 'last', got 'max'"):
        pool_subwords(torch.randn(3, 4), [(0, 1)], "max")
