"""ctxemb.modeling.attention: the explicit formulation equals SDPA, and the measured choice between them."""

import torch
import torch.nn.functional as F

from ctxemb.modeling import attention
from ctxemb.modeling.attention import inference_attention, math_attention, math_attention_limit


def _inputs(T=7):
    gen = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, T, 16, generator=gen).unbind(0)
    mask = torch.zeros(2, 1, 1, T)
    mask[1, ..., 5:] = torch.finfo(torch.float32).min  # padding
    bias = torch.randn(1, 4, T, T, generator=gen)  # a position bias per head (MPNet's form)
    return q, k, v, mask, mask + bias


def test_math_attention_equals_sdpa_with_padding_and_a_position_bias():
    q, k, v, mask, biased = _inputs()
    for m in (mask, biased, None):
        torch.testing.assert_close(math_attention(q, k, v, m), F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                   rtol=1e-5, atol=1e-6)


def test_the_choice_follows_the_measured_limit(monkeypatch):
    q, k, v, mask, _ = _inputs(T=9)
    calls = []
    monkeypatch.setattr(attention, "math_attention", lambda *a: calls.append("math") or F.scaled_dot_product_attention(
        *a[:3], attn_mask=a[3]))
    for limit, want in [(16, "math"), (8, "sdpa"), (0, "sdpa")]:
        monkeypatch.setattr(attention, "math_attention_limit", lambda head_size, threads, limit=limit: limit)
        calls.clear()
        inference_attention(q, k, v, mask)
        assert calls == ([want] if want == "math" else [])


def test_the_limit_is_one_of_the_timed_lengths_and_measured_once():
    math_attention_limit.cache_clear()
    limit = math_attention_limit(8, torch.get_num_threads())
    assert limit in (0,) + attention._LENGTHS
    assert math_attention_limit.cache_info().hits == 0
    assert math_attention_limit(8, torch.get_num_threads()) == limit
    assert math_attention_limit.cache_info().hits == 1
