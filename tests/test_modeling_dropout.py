"""One dropout probability for a whole model (``set_dropout``, ``ctxemb finetune --dropout``)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from ctxemb.modeling.dropout import set_dropout
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from tests.helpers import write_tiny_model


@pytest.mark.parametrize("model_type", ["bert", "modernbert"])
def test_zero_dropout_makes_training_mode_equal_eval_mode(tmp_path, model_type):
    model = EncoderForSequenceClassification.from_pretrained(
        write_tiny_model(tmp_path / "m", model_type=model_type), num_labels=2, head="mean")
    ids = torch.randint(5, 50, (3, 9))
    model.eval()
    want = model(ids).logits
    set_dropout(model, 0.3).train()  # the tiny config has none: turn it on first
    assert not torch.allclose(model(ids).logits, want)
    assert set_dropout(model, 0.0) is model
    torch.testing.assert_close(model(ids).logits, want)  # nothing random is left in training mode
    probabilities = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert probabilities and set(probabilities) == {0.0}
    assert model.encoder.config.hidden_dropout_prob == model.encoder.config.attention_probs_dropout_prob == 0.0


def test_bad_probabilities_are_named(tmp_path):
    model = nn.Sequential(nn.Dropout(0.1))
    for bad in (1.0, -0.1, True, "0.1"):
        with pytest.raises(ValueError, match="dropout must be a probability"):
            set_dropout(model, bad)
    assert model[0].p == 0.1  # nothing changed


def test_finetune_dropout_is_applied_and_saved(tmp_path):
    from ctxemb.tasks.sequence.config import FinetuneConfig
    from ctxemb.training.config import TrainConfig
    from ctxemb.training.registry import get_task
    from ctxemb.training.runner import run_task

    rows = ["sentence\tlabel"] + [f"{w} river bank\t{i % 2}" for i, w in enumerate(["the", "a", "he", "she"] * 4)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.tsv").write_text("\n".join(rows[:5]) + "\n")
    config = FinetuneConfig(task="custom", model=str(write_tiny_model(tmp_path / "m")), head="mean", epochs=1,
                            train_file=str(tmp_path / "train.tsv"), dev_file=str(tmp_path / "dev.tsv"), dropout=0.2,
                            train=TrainConfig(learning_rate=1e-3, out_dir=str(tmp_path / "run"), progress_bar=False,
                                              precision="fp32"))
    result = run_task(get_task(config.task), config)
    saved = json.loads((result.model_dir / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == saved["attention_probs_dropout_prob"] == 0.2  # the tiny model has 0
    with pytest.raises(ValueError, match="dropout must be None or a probability"):
        FinetuneConfig(task="custom", dropout=1.5, train=TrainConfig(learning_rate=1e-3, out_dir=str(tmp_path / "x")))
