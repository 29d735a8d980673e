"""The int8 path's unpadded batches (:func:`ctxemb.runtime.int8.packed_hidden_states`, the attention kernel's
offsets): the real tokens' states bitwise those of the padded batch, padding rows zero, and the cases it leaves to
the padded path."""

import pytest
import torch

from ctxemb.modeling.encoder import Encoder
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.runtime import int8 as quantization
from ctxemb.runtime.backends import Int8Backend
from ctxemb.runtime.engine import TorchBackend
from ctxemb.runtime.int8 import packed_hidden_states, quantize_int8
from ctxemb.runtime.kernels import attention_bf16_cpu, int8_vnni_cpu, int8_vnni_ops
from tests.helpers import perturbed_encoder

OPS = int8_vnni_ops()
pytestmark = pytest.mark.skipif(OPS is None, reason=f"no native kernel here: {int8_vnni_cpu()[1]} (or no build)")
BRANCHES = ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not attention_bf16_cpu()[0], reason=f"bf16 attention needs AVX512-BF16: {attention_bf16_cpu()[1]}"))]


def _int8(model_type="bert", layers=3, seed=0, **kw):
    enc = perturbed_encoder(model_type, layers=layers, seed=seed, **kw)
    outliers = {"encoder.layer.1.attention.self.query": [5], "encoder.layer.0.intermediate.dense": [7]}
    return quantize_int8(enc, outliers, fused=True)


def _batch(lengths, T=None, seed=0, pad=0):
    T = T or max(lengths)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (len(lengths), T), generator=gen)
    mask = (torch.arange(T) < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, pad), mask


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("lengths", [[9, 4, 7], [70, 3, 66, 17], [1, 2]])
def test_packed_states_are_the_padded_batchs_bits(branch, model_type, lengths, monkeypatch):
    monkeypatch.setattr(quantization, "attention_bf16_cpu", lambda: (branch == "bf16", "forced by the test"))
    q = _int8(model_type)
    ids, mask = _batch(lengths, pad=q.config.pad_token_id)
    layers = [0, 1, 3]
    with torch.inference_mode():
        packed = packed_hidden_states(q, ids, mask, layers)
    padded = TorchBackend(q, "int8").hidden_states(ids, mask, layers)
    real = mask.bool()
    assert packed.shape == padded.shape
    assert torch.equal(packed[real], padded[real])
    assert not packed[~real].any()


def test_the_int8_backend_packs_and_leaves_full_batches_to_the_encoder(monkeypatch):
    q = _int8()
    backend = Int8Backend(q)
    calls = []
    monkeypatch.setattr(quantization.Packed, "__new__",
                        lambda cls, offsets: calls.append(offsets.tolist()) or tuple.__new__(cls, (offsets,)))
    ids, mask = _batch([5, 3, 5])
    with_padding = backend.hidden_states(ids, mask, [3])
    assert calls == [[0, 5, 8, 13]]
    full = backend.hidden_states(ids[[0, 2]], mask[[0, 2]], [3])  # no padding: the encoder as usual
    assert len(calls) == 1
    assert torch.equal(with_padding[[0, 2]], full)


@pytest.mark.parametrize("case", ["left padding", "an empty row", "mpnet", "electra", "eager"])
def test_what_it_leaves_to_the_padded_batch(case):
    ids, mask = _batch([6, 4, 2])
    if case == "left padding":
        q, mask = _int8(), mask.flip(1)
    elif case == "an empty row":
        q = _int8()
        mask[2] = 0
    elif case == "mpnet":  # a relative position bias in every block's mask
        q = _int8("mpnet", relative_attention_num_buckets=32)
    elif case == "electra":  # embeddings projected to the hidden size
        q = _int8("electra", embedding_size=32)
    else:
        torch.manual_seed(0)
        q = quantize_int8(Encoder(EncoderConfig(vocab_size=60, hidden_size=64, num_hidden_layers=1,
                                                num_attention_heads=4, intermediate_size=96)).eval(), fused=False)
    with torch.inference_mode():
        assert packed_hidden_states(q, ids, mask, [1]) is None


@pytest.mark.parametrize("offsets, message", [
    ([0, 3, 3, 8], "offsets must increase"),
    ([0, 3, 5, 7], "offsets must run from 0 to the 8 rows"),
    ([0, 8], r"offsets must be \(4,\) int64"),
])
def test_attention_refuses_bad_offsets(offsets, message):
    qkv = torch.randn(8, 3 * 64)
    with pytest.raises(RuntimeError, match=message):
        OPS.attention(qkv, 3, 4, None, False, torch.tensor(offsets))
    with pytest.raises(RuntimeError, match="packed sequences .offsets. take no mask"):
        OPS.attention(qkv, 3, 4, torch.zeros(3, 1, 1, 3), False, torch.tensor([0, 3, 5, 8]))


def test_unpack_rows_places_each_layers_rows_and_zeroes_the_rest():
    layers = [torch.randn(3, 16) for _ in range(2)]
    out = OPS.unpack_rows(layers, torch.tensor([0, 2, 5]), 6)
    want = torch.zeros(6, 2, 16)
    want[[0, 2, 5]] = torch.stack(layers, dim=1)
    assert torch.equal(out, want)
    for rows, message in (([0, 2, 2], "rows must increase"), ([0, 2, 6], r"within \[0, 6\)")):
        with pytest.raises(RuntimeError, match=message):
            OPS.unpack_rows(layers, torch.tensor(rows), 6)
    with pytest.raises(RuntimeError, match="every layer must be a contiguous float32 tensor of 3 x 16 values"):
        OPS.unpack_rows([layers[0], layers[1][:2]], torch.tensor([0, 2, 5]), 6)
