"""The training-run identity in a saved model's config.json: it follows the weights, the Embedder reads it into its
configuration (so stores and indexes compare it), and loading a directory that holds other weights than a recorded
configuration names is refused."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from ctxemb.embedding.embedder import Embedder, EmbedderConfig
from ctxemb.modeling.loading import load_encoder
from ctxemb.modeling.checkpoint import TRAINING_RUN_KEY, read_training_run, save_pretrained, stamp_training_run
from tests.helpers import write_tiny_model


def test_the_identity_follows_the_weights(tmp_path):
    base = write_tiny_model(tmp_path / "base")
    assert read_training_run(base) is None
    a = shutil.copytree(base, tmp_path / "a")
    run = stamp_training_run(a, "test")
    assert json.loads((a / "config.json").read_text())[TRAINING_RUN_KEY] == run == read_training_run(a)
    assert stamp_training_run(a, "test") == run  # same weights, same identity
    b = shutil.copytree(base, tmp_path / "b")
    enc = load_encoder(b)
    with torch.no_grad():
        enc.embeddings.word_embeddings.weight[7, 0] += 1e-3
    save_pretrained(enc, b)
    assert stamp_training_run(b, "test") != run
    with pytest.raises(ValueError, match="label"):
        stamp_training_run(a, "no spaces")


def test_the_embedder_records_the_identity_and_checks_a_requested_one(tmp_path):
    model = write_tiny_model(tmp_path / "m")
    plain = Embedder.from_pretrained(model, layers=[-1])
    assert plain.config.training_run is None and "training_run" not in plain.config.to_dict()  # as before
    run = stamp_training_run(model, "test")
    emb = Embedder.from_pretrained(model, layers=[-1])
    assert emb.config.training_run == run and emb.config.to_dict()["training_run"] == run
    assert EmbedderConfig.from_dict(emb.config.to_dict()) == emb.config
    assert Embedder.from_pretrained(model, layers=[-1], training_run=run).config == emb.config
    with pytest.raises(ValueError, match="training run"):
        Embedder.from_pretrained(model, layers=[-1], training_run="test-0000000000000000")
    with pytest.raises(TypeError, match="training_run"):
        EmbedderConfig(training_run=3)
