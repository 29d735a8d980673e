"""ctxemb.modeling.loading.load_model: one name resolution, one read of config.json here, the same encoder, tokenizer and
training run as the separate loaders."""

import builtins
import json

import pytest
import torch

import ctxemb.modeling.loading as loading
from ctxemb.core.validation import CorruptFileError
from ctxemb.modeling.loading import LoadedModel, load_encoder, load_model, load_tokenizer
from ctxemb.modeling.checkpoint import TRAINING_RUN_KEY, read_training_run, stamp_training_run
from tests.helpers import write_tiny_model


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_load_model_matches_the_separate_loaders(tmp_path, model_type):
    d = write_tiny_model(tmp_path / "m", model_type=model_type)
    stamp_training_run(d, "test-run")
    loaded = load_model(d)
    assert isinstance(loaded, LoadedModel)
    assert loaded.model_dir == d
    assert loaded.training_run == read_training_run(d) and loaded.training_run.startswith("test-run-")
    assert not loaded.encoder.training
    ref = load_encoder(d)
    ours, theirs = loaded.encoder.state_dict(), ref.state_dict()
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k
    tok = load_tokenizer(d)
    text = ["hello world, a test"]
    assert loaded.tokenizer.model_type == tok.model_type
    assert loaded.tokenizer.max_length == tok.max_length
    assert [t.ids for t in loaded.tokenizer.tokenize(text)] == [t.ids for t in tok.tokenize(text)]
    assert load_model(d, max_length=16).tokenizer.max_length == 16


def test_released_model_has_no_training_run(tmp_path):
    assert load_model(write_tiny_model(tmp_path / "m")).training_run is None


def test_name_resolved_once_and_config_read_once_here(tmp_path, monkeypatch):
    d = write_tiny_model(tmp_path / "m")
    resolved, opened = [], []
    real_resolve, real_open = loading.resolve_model_dir, builtins.open

    def counting_resolve(name, **options):  # (revision=, local_files_only= for Hub names)
        resolved.append(name)
        return real_resolve(name, **options)

    def counting_open(file, *args, **kwargs):
        if str(file).endswith("config.json"):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(loading, "resolve_model_dir", counting_resolve)
    monkeypatch.setattr(builtins, "open", counting_open)
    load_model(d)
    assert resolved == [d]
    # One read here (tokenizer + training run) and one inside checkpoint.load_encoder_dir, which takes a directory.
    assert opened == [str(d / "config.json")] * 2


def test_bad_training_run_names_the_file(tmp_path):
    d = write_tiny_model(tmp_path / "m")
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    config[TRAINING_RUN_KEY] = 7
    (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(CorruptFileError, match=r"config\.json: ctxemb_training_run must be a non-empty string"):
        load_model(d)
    with pytest.raises(CorruptFileError, match=r"config\.json: ctxemb_training_run must be a non-empty string"):
        read_training_run(d)  # the same check, the same words


def test_corrupt_config_names_the_file(tmp_path):
    d = write_tiny_model(tmp_path / "m")
    (d / "config.json").write_text('{"model_type": "bert",', encoding="utf-8")
    with pytest.raises(CorruptFileError, match=r"config file .*config\.json is not valid JSON"):
        load_model(d)


def test_missing_model_says_what_was_tried(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found.*Tried"):
        load_model(str(tmp_path / "nothing"))
