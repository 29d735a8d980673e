"""GradCache for the late-interaction loss on a tiny model: every parameter's gradient (the projection's included)
equals the plain loss's, with and without hard negatives, with dropout on; bad settings are named; torchrun is
refused."""

from __future__ import annotations

import json

import pytest
import torch

from ctxemb.modeling.grad_cache import mini_batches
from ctxemb.modeling.late_interaction import EncoderForLateInteraction, document_pieces, query_input_ids
from ctxemb.models.head_options import LateInteractionConfig
from ctxemb.models.tokenization import Tokenizer
from ctxemb.tasks.late_interaction.task import LateCollator, LateFeature
from ctxemb.training.config import TrainConfig
from ctxemb.training.registry import get_task
from tests.helpers import write_tiny_model

CONVENTIONS = LateInteractionConfig(query_length=8, document_length=16)
# (query, positive, negatives); rows 0 and 3 share their positive: a false negative the keys leave out
ROWS = [("the bank", "money bank , of the river", ["river bank", "a plant"]),
        ("he sat", "she sat on the bank", ["the mouse", "cell plant"]),
        ("a bat", "the bat die .", ["plant of", "bank sat"]),
        ("river money", "money bank , of the river", ["money", "he die"]),
        ("mouse cell", "a mouse cell !", ["bat bank", "sat on the"]),
        ("money of", "of money", ["river he", "bats"])]


def _batch(tok: Tokenizer, k: int) -> dict[str, torch.Tensor]:
    def doc(text):
        return document_pieces(tok, tok.tokenize([text])[0].ids, CONVENTIONS, None)[0][0]

    keys: dict[str, int] = {}
    features = [LateFeature(query_input_ids(tok, tok.tokenize([q])[0].ids, CONVENTIONS, None), doc(p),
                            tuple(doc(t) for t in negs[:k]), n, keys.setdefault(p, len(keys)),
                            tuple(keys.setdefault(t, len(keys)) for t in negs[:k]))
                for n, (q, p, negs) in enumerate(ROWS)]
    return LateCollator(tok, CONVENTIONS)(features)


def _tiny(tmp_path, dropout: float):
    path = write_tiny_model(tmp_path / "tiny")
    if dropout:
        cfg = json.loads((path / "config.json").read_text())
        cfg.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        (path / "config.json").write_text(json.dumps(cfg))
    return path


def _chunked_loss(model: EncoderForLateInteraction, batch, m: int) -> torch.Tensor:
    """The plain loss with the vectors computed in GradCache's mini-batches, in its order (so dropout draws the same
    masks)."""
    q = torch.cat([model.vectors(*mb) for mb in mini_batches(m, batch["query_input_ids"],
                                                             batch["query_attention_mask"])])
    d = torch.cat([model.vectors(*mb) for mb in mini_batches(m, batch["doc_input_ids"], batch["doc_attention_mask"])])
    return model.loss(q, d, batch["doc_mask"], batch["query_keys"], batch["doc_keys"])[0]


@pytest.mark.parametrize("k, dropout, m, scale", [(0, 0.0, 4, 1.0), (1, 0.1, 4, 1.0), (2, 0.1, 5, 5.0)])
def test_gradcache_gives_every_gradient_of_the_plain_loss(tmp_path, k, dropout, m, scale):
    path = _tiny(tmp_path, dropout)
    batch = _batch(Tokenizer.from_pretrained(path), k)
    assert batch["doc_input_ids"].shape[0] == 6 * (1 + k)
    runs = ["chunked", "cached"] if dropout else ["plain", "chunked", "cached"]
    grads, losses = {}, {}
    for run in runs:
        torch.manual_seed(0)  # the same projection in every run
        model = EncoderForLateInteraction.from_pretrained(path, dim=8, scale=scale,
                                                          cache_batch_size=m if run == "cached" else None).train()
        torch.manual_seed(7)  # the same dropout draws
        loss = _chunked_loss(model, batch, m) if run == "chunked" else model(**batch).loss
        (loss / 2).backward()  # the loop divides by the accumulation steps: the replay scales by it
        losses[run] = float(loss.detach())
        grads[run] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    cached = grads.pop("cached")
    assert "linear.weight" in cached and len(cached) > 10
    for run, other in grads.items():
        assert losses["cached"] == pytest.approx(losses[run], rel=1e-5), run
        assert cached.keys() == other.keys()
        for name in other:
            torch.testing.assert_close(cached[name], other[name], rtol=1e-4, atol=1e-6, msg=f"{run}: {name}")


def test_gradcache_is_training_only_and_reports_the_accuracy(tmp_path):
    path = _tiny(tmp_path, 0.0)
    batch = _batch(Tokenizer.from_pretrained(path), 1)
    torch.manual_seed(0)
    cached = EncoderForLateInteraction.from_pretrained(path, dim=8, cache_batch_size=3).train()
    torch.manual_seed(0)
    plain = EncoderForLateInteraction.from_pretrained(path, dim=8).train()
    a, b = cached(**batch), plain(**batch)
    assert a.metrics == b.metrics and float(a.loss.detach()) == pytest.approx(float(b.loss.detach()), rel=1e-5)
    with torch.no_grad():  # evaluation: the plain forward, no replay hook
        assert not cached.eval()(**batch).loss.requires_grad


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_a_bad_cache_batch_size_is_named(tmp_path, value):
    path = _tiny(tmp_path, 0.0)
    with pytest.raises(ValueError, match="cache_batch_size must be a positive int"):
        EncoderForLateInteraction.from_pretrained(path, dim=8, cache_batch_size=value)
    task = get_task("late-interaction")
    with pytest.raises(ValueError, match="cache_batch_size must be a positive int"):
        task.config_class(task="late-interaction", train_file="t.jsonl", dev_file="d.jsonl", cache_batch_size=value,
                          train=TrainConfig(out_dir=str(tmp_path), learning_rate=1e-4))


def test_gradcache_is_refused_under_torchrun(tmp_path, monkeypatch):
    path = _tiny(tmp_path, 0.0)
    task = get_task("late-interaction")
    config = task.config_class(task="late-interaction", model=str(path), train_file="t.jsonl", dev_file="d.jsonl",
                               cache_batch_size=4, train=TrainConfig(out_dir=str(tmp_path), learning_rate=1e-4))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="runs in a single process; under torchrun"):
        task.build_model(config, None)


def test_the_flag_is_generated_from_the_settings(capsys):
    from ctxemb.cli import main

    with pytest.raises(SystemExit):
        main(["finetune", "late-interaction", "--help"])
    assert "--cache-batch-size" in capsys.readouterr().out
    assert main(["finetune", "late-interaction", "--cache-batch-size", "0"]) == 2
    assert "--cache-batch-size: expected a positive integer; got 0" in capsys.readouterr().err
