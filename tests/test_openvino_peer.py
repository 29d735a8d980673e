"""The OpenVINO peer of benchmarks/encode_throughput (benchmarks.peers.openvino_encoder) on a tiny random BERT:
the converted model gives transformers' hidden states (f32, dynamic batch and length, padded rows), the NNCF int8
model runs and stays close, and a missing package is named."""

from importlib import metadata

import pytest
import torch

# imported before openvino and nncf: it keeps their usage telemetry from loading (see its docstring)
from benchmarks.peers import openvino_encoder

pytest.importorskip("openvino")
pytest.importorskip("nncf")
transformers = pytest.importorskip("transformers")

from benchmarks.encode_throughput import LAST_FOUR, HiddenStates

TINY = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 37,
        "max_position_embeddings": 64, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _batch(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 99, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[-1, length // 2:] = 0  # the last row padded
    ids[mask == 0] = 0
    return ids, mask


@pytest.fixture(scope="module")
def converted():
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**TINY)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model, openvino_encoder.convert_hidden_states(HiddenStates(model), _batch(2, 8, 0))


def _reference(model, ids, mask) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return torch.stack([out.hidden_states[i] for i in LAST_FOUR], dim=2)  # (B, T, 4, H)


@pytest.mark.parity
def test_converted_model_gives_transformers_hidden_states(converted):
    model, ov_model = converted
    assert len(ov_model.outputs) == TINY["num_hidden_layers"] + 1  # every hidden state, the embedding output first
    enc = openvino_encoder.compile_encoder(ov_model, 1, LAST_FOUR, {"INFERENCE_PRECISION_HINT": "f32"})
    assert enc.precision == "f32" and enc.properties["INFERENCE_NUM_THREADS"] == "1"
    for shape, seed in (((3, 11), 1), ((5, 23), 2)):  # neither is the shape it was traced with
        ids, mask = _batch(*shape, seed)
        ours, theirs = enc(ids, mask), _reference(model, ids, mask)
        real = mask.bool()
        torch.testing.assert_close(ours[real], theirs[real], rtol=1e-4, atol=1e-4)


def test_default_compile_records_its_precision(converted):
    _, ov_model = converted
    enc = openvino_encoder.compile_encoder(ov_model, 1, LAST_FOUR)
    assert enc.precision in {"f32", "bf16", "f16"}
    ids, mask = _batch(2, 9, 3)
    assert enc(ids, mask).shape == (2, 9, 4, TINY["hidden_size"])


def test_nncf_int8_runs_and_stays_close(converted):
    model, ov_model = converted
    calibration = [_batch(4, 12 + i, 10 + i) for i in range(4)]
    quantized, settings = openvino_encoder.quantize_int8(ov_model, calibration)
    assert settings["model_type"] == "TRANSFORMER" and settings["calibration_batches"] == 4
    assert settings["calibration_sentences"] == 16
    enc = openvino_encoder.compile_encoder(quantized, 1, LAST_FOUR)
    ids, mask = _batch(3, 15, 20)
    ours, theirs = enc(ids, mask), _reference(model, ids, mask)
    real = mask.bool()
    cos = torch.nn.functional.cosine_similarity(ours[real].flatten(1), theirs[real].flatten(1), dim=-1)
    assert cos.mean() > 0.98, cos


def test_quantize_needs_calibration(converted):
    with pytest.raises(ValueError, match="calibration"):
        openvino_encoder.quantize_int8(converted[1], [])


def test_missing_names_the_absent_package(monkeypatch):
    assert openvino_encoder.missing() is None
    real = metadata.version

    def version(name):
        if name == "nncf":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(openvino_encoder.metadata, "version", version)
    assert openvino_encoder.missing().startswith("nncf not installed")
    assert openvino_encoder.versions()["nncf"] is None
