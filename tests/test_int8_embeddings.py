"""The int8 path's embeddings (``embed_norm_quantized`` of ctxemb.runtime.kernels, :class:`Int8Embeddings`): the
lookups, sum and LayerNorm against torch's, the quantized form against quantizing that output separately, the
families' variants (token types given, absent, no type table; positions counted from the padding index), and bad ids
refused before any row is read."""

import pickle

import pytest
import torch

from ctxemb.modeling.encoder import Embeddings
from ctxemb.runtime import int8 as quantization
from ctxemb.runtime.int8 import Int8Embeddings, Int8Linear, quantize_int8
from ctxemb.runtime.kernels import int8_vnni_cpu, int8_vnni_ops
from tests.helpers import perturbed_encoder

OPS = int8_vnni_ops()
pytestmark = pytest.mark.skipif(OPS is None, reason=f"no native kernel here: {int8_vnni_cpu()[1]} (or no build)")
FAMILIES = ["bert", "roberta", "distilbert"]  # type table; positions from pad + 1; no type table


def _encoder(model_type="bert", hidden=64, layers=2, seed=0, **kw):
    return perturbed_encoder(model_type, hidden=hidden, layers=layers, seed=seed, **kw)


def _inputs(B=3, T=11, seed=0, pad=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (B, T), generator=gen)
    ids[1, T - 3:] = pad
    return ids, torch.randint(0, 2, (B, T), generator=gen)


@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("with_types", [False, True])
@pytest.mark.parametrize("outliers", [(), (3, 17)])
def test_the_native_embeddings_are_torchs_and_quantize_as_the_consumer_would(model_type, with_types, outliers):
    enc = _encoder(model_type)
    consumer = Int8Linear(torch.randn(48, 64), torch.randn(48), outliers, mode="vnni")
    emb = Int8Embeddings(enc.embeddings)
    emb.feed(consumer)
    assert emb._consumer == (consumer,)
    ids, types = _inputs(pad=enc.config.pad_token_id)
    types = types if with_types else None
    with torch.inference_mode():
        want = enc.embeddings(ids, types)
        got = emb(ids, types)
        rows = got.__dict__[quantization._HANDED_OVER][1]
        torch.testing.assert_close(got, want, rtol=0, atol=2e-6)
        again = consumer.quantize_input(got.reshape(-1, 64))
    for a, b in zip(rows, again):
        assert (a is None and b is None) or torch.equal(a, b)
    assert (rows.outliers is None) == (not outliers)


def test_an_int8_encoder_takes_the_native_embeddings_with_its_state_dict_unchanged():
    enc = _encoder("bert", layers=3)
    q = quantize_int8(enc, {"encoder.layer.0.attention.self.query": [4]})
    assert type(q.embeddings) is Int8Embeddings and q.embeddings._consumer == (q.encoder.layer[0].attention.self.qkv,)
    assert [k for k in q.state_dict() if k.startswith("embeddings.")] == \
           [k for k in enc.state_dict() if k.startswith("embeddings.")]
    ids, types = _inputs(B=4, T=13, seed=1)
    mask = (ids != 0).long()
    with torch.inference_mode():
        fed = q(ids, mask, types).hidden_states
        q.embeddings._consumer = ()  # the float module's computation, quantized by the first Q/K/V itself
        plain = q(ids, mask, types).hidden_states
        exact = enc(ids, mask, types).hidden_states
    torch.testing.assert_close(fed[0], exact[0], rtol=0, atol=2e-6)
    for a, b in zip(fed[1:], plain[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-3)  # the same up to the rounding of one LayerNorm
    assert quantization._HANDED_OVER not in fed[0].__dict__  # taken by the first Q/K/V
    pickle.loads(pickle.dumps(q))


def test_the_float_path_serves_training_mode_and_unfed_embeddings():
    enc = _encoder("bert")
    ids, types = _inputs()
    emb = Int8Embeddings(enc.embeddings)  # no consumer
    with torch.inference_mode():
        assert torch.equal(emb(ids, types), enc.embeddings(ids, types))
    emb.feed(Int8Linear(torch.randn(48, 64), None, mode="vnni"))
    emb.train()
    assert torch.equal(emb(ids, types), enc.embeddings(ids, types))
    assert quantization._HANDED_OVER not in emb(ids, types).__dict__


def test_embeddings_of_another_width_or_with_a_projection_are_left_alone():
    electra = _encoder("electra", hidden=64, embedding_size=32)
    q = quantize_int8(electra)
    assert type(q.embeddings) is Embeddings  # projected to the hidden size: the projection reads them, not Q/K/V
    emb = Int8Embeddings(_encoder("bert", hidden=48).embeddings)
    emb.feed(Int8Linear(torch.randn(32, 64), None, mode="vnni"))  # reads 64 features, not 48
    assert emb._consumer == ()


@pytest.mark.parametrize("which, where, value, message", [
    ("ids", (1, 2), 60, "token id 60 at position 7 is outside the vocabulary of 60"),
    ("ids", (0, 0), -1, "token id -1 at position 0 is outside"),
    ("types", (1, 4), 2, "token type 2 is outside the 2 token types"),
])
def test_an_id_outside_its_table_is_refused_by_name(which, where, value, message):
    enc = _encoder("bert")
    emb = Int8Embeddings(enc.embeddings)
    emb.feed(Int8Linear(torch.randn(48, 64), None, mode="vnni"))
    inputs = dict(zip(("ids", "types"), _inputs(B=2, T=5, seed=2)))
    inputs[which][where] = value
    with torch.inference_mode(), pytest.raises(RuntimeError, match=message):
        emb(inputs["ids"], inputs["types"])


def test_ids_of_another_integer_type_give_the_same_states():
    q = quantize_int8(_encoder("roberta", layers=2))
    ids, types = _inputs(pad=q.config.pad_token_id)
    mask = (ids != q.config.pad_token_id).long()
    with torch.inference_mode():
        want = q(ids, mask).hidden_states
        got = q(ids.int(), mask.int()).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(want, got))
