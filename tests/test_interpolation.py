"""WiSE-FT weight interpolation: the alphas' validation, the choice on a planted metric (brute force over the
candidates), and a fine-tuning run whose saved model is the chosen interpolation of its start and trained weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.modeling.loading import load_encoder
from ctxemb.training.config import TrainConfig
from ctxemb.training.interpolation import (check_alphas, choose_interpolation, interpolated_module,
                                           set_interpolation, snapshot)
from ctxemb.training.recipe import read_run_record
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.test_training_recipes import _train


def test_alphas_are_checked_sorted_and_deduplicated():
    assert check_alphas([0.5, 0.25, 0.5]) == [0.25, 0.5]
    assert check_alphas(None) == [] and check_alphas([]) == []
    for bad in ([0.0], [1.0], [1.5], [-0.1], [float("nan")], [True], ["0.5"]):
        with pytest.raises(ValueError, match=r"alpha in \(0, 1\)"):
            check_alphas(bad)
    with pytest.raises(ValueError, match="list of weights"):
        check_alphas("0.5")
    with pytest.raises(ValueError, match=r"alpha in \(0, 1\)"):
        TrainConfig(learning_rate=1e-3, interpolate=[1.0])
    assert TrainConfig(learning_rate=1e-3, interpolate=[0.5, 0.25]).interpolate == [0.25, 0.5]
    assert TrainConfig(learning_rate=1e-3, interpolate=[]).interpolate is None


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(3, 2)
        self.head = nn.Linear(2, 1)


def test_choice_is_the_best_candidate_and_only_the_encoder_moves():
    torch.manual_seed(0)
    model = _Model()
    start = snapshot(interpolated_module(model))
    start_head = snapshot(model.head)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    trained = snapshot(model.encoder)
    trained_head = snapshot(model.head)
    # the metric peaks at alpha = 0.3 of the way from start to trained
    target = {k: start[k] + 0.3 * (trained[k] - start[k]) for k in start}

    def evaluate(m):
        return {"score": -sum(float((v - target[k]).abs().sum()) for k, v in m.encoder.state_dict().items())}

    trained_metrics = evaluate(model)
    alphas = [0.1, 0.25, 0.5, 0.75]
    out = choose_interpolation(model, start, alphas, evaluate, "score", greater_is_better=True,
                               trained_metrics=trained_metrics)
    # brute force: each candidate's score computed on a copy
    scores = {}
    for a in alphas:
        probe = _Model()
        probe.load_state_dict(model.state_dict())
        set_interpolation(probe.encoder, start, trained, a)
        scores[a] = evaluate(probe)["score"]
    scores[1.0] = trained_metrics["score"]
    best = max(scores, key=scores.get)
    assert best == 0.25 and out["alpha"] == best and out["metrics"] == {"score": scores[best]}
    assert [c["alpha"] for c in out["candidates"]] == [1.0, *alphas]
    for k, v in model.encoder.state_dict().items():
        torch.testing.assert_close(v, torch.lerp(start[k], trained[k], best))
    for k, v in model.head.state_dict().items():  # the head is the trained one, not pulled back to its init
        assert torch.equal(v, trained_head[k]) and not torch.equal(v, start_head[k])


def test_the_trained_model_is_evaluated_when_the_run_never_was():
    model = _Model()
    start = snapshot(model.encoder)
    with torch.no_grad():
        model.encoder.weight.add_(1.0)
    out = choose_interpolation(model, start, [0.5], lambda m: {"s": float(m.encoder.weight.detach().sum())}, "s",
                               greater_is_better=True, trained_metrics={})
    assert out["alpha"] == 1.0 and out["candidates"][0]["s"] > out["candidates"][1]["s"]


def test_trained_weights_win_ties_and_stay_bitwise():
    model = _Model()
    start = snapshot(model.encoder)
    with torch.no_grad():
        model.encoder.weight.add_(1.0)
    trained = snapshot(model.encoder)
    out = choose_interpolation(model, start, [0.5], lambda m: {"loss": 1.0}, "loss", greater_is_better=False,
                               trained_metrics={"loss": 1.0})
    assert out["alpha"] == 1.0
    assert all(torch.equal(v, trained[k]) for k, v in model.encoder.state_dict().items())


def test_a_finetuning_run_saves_the_chosen_interpolation(data, tmp_path):
    config = FinetuneConfig(task="custom", model=str(data["model"]), head="cls", batch_size=8, max_length=24,
                            train_file=str(data["tsv"]), dev_file=str(data["tsv"]),
                            train=_train(tmp_path / "r", interpolate=[0.25, 0.5]))
    result = run_task(get_task(config.task), config)
    record = read_run_record(result.model_dir)
    chosen = record["metrics"]["interpolation"]
    assert [c["alpha"] for c in chosen["candidates"]] == [1.0, 0.25, 0.5]
    best = max(chosen["candidates"], key=lambda c: (c["accuracy"], c["alpha"]))
    assert chosen["alpha"] == best["alpha"]
    assert record["metrics"]["final"] == {k: v for k, v in best.items() if k != "alpha"}
    # the saved encoder is start + alpha (trained - start): rerun without interpolation for the trained weights
    plain = run_task(get_task(config.task), FinetuneConfig(**{**config.__dict__, "train": _train(tmp_path / "p")}))
    start, trained, saved = (load_encoder(str(d)).state_dict() for d in (data["model"], plain.model_dir,
                                                                          result.model_dir))
    assert any(not torch.equal(start[k], trained[k]) for k in start)
    for k in (k for k in start if start[k].is_floating_point()):
        torch.testing.assert_close(saved[k], torch.lerp(start[k], trained[k], chosen["alpha"]), rtol=0, atol=1e-6)


def test_interpolation_needs_an_evaluator(tmp_path, data):
    from ctxemb.tasks.pretraining.config import PretrainConfig
    from ctxemb.tasks.pretraining.task import task_for_config

    config = PretrainConfig(train_corpus=[str(data["corpus"])], eval_corpus=[str(data["corpus"])], eval_batches=2,
                            max_length=24, batch_size=8, init_from=str(data["model"]),
                            train=_train(tmp_path / "p", interpolate=[0.5]))
    with pytest.raises(ValueError, match="interpolate chooses its weight on the task's dev evaluator"):
        run_task(task_for_config(config), config)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from tests.helpers import write_corpus, write_tiny_model
    from tests.test_finetuning_tasks import _write_task

    d = tmp_path_factory.mktemp("interp")
    write_corpus(d / "corpus.txt", 12, seed=0)
    return {"model": write_tiny_model(d / "tiny", num_hidden_layers=2), "tsv": _write_task(d / "t.tsv", 48, 0),
            "corpus": d / "corpus.txt"}


def _scripted(out, *, stop=None, resume=False):
    """The run skeleton on the tiny scripted model, evaluated by a function of its weights, with interpolation."""
    from ctxemb.training import DatasetBatches
    from ctxemb.training.recipe import RunData, RunSpec, run_training
    from tests.test_run_outputs import StopAt
    from tests.training_scripts.tiny import make_examples, make_model

    def make_data(model, ctx):
        def evaluate(m):
            return {"score": -float(sum((p.detach() - 0.05).pow(2).sum() for p in m.parameters()))}
        return RunData(source=DatasetBatches(make_examples(16), batch_size=4, seed=1), evaluate=evaluate,
                       stats={"train_examples": 16})

    def save_files(model, directory):
        from safetensors.torch import save_model

        save_model(model, str(directory / "model.safetensors"))
        (directory / "config.json").write_text("{}")

    cfg = TrainConfig(learning_rate=0.05, max_steps=6, eval_every=2, save_every=1, keep_best=True,
                      interpolate=[0.25, 0.5, 0.75], precision="fp32", device="cpu", progress_bar=False, seed=0,
                      out_dir=str(out), resume=resume)
    spec = RunSpec(recipe="scripted", label="scripted", settings={}, train=cfg, primary_metric="score")
    return run_training(spec, build_model=lambda: make_model(seed=0), make_data=make_data, save_files=save_files,
                        callbacks=[StopAt(stop)] if stop else [])


def test_a_resumed_run_interpolates_to_the_same_model(tmp_path):
    straight = _scripted(tmp_path / "straight")
    _scripted(tmp_path / "split", stop=3)
    resumed = _scripted(tmp_path / "split", resume=True)
    assert straight.interpolation["candidates"] == resumed.interpolation["candidates"]
    assert (resumed.model_dir / "model.safetensors").read_bytes() == \
        (straight.model_dir / "model.safetensors").read_bytes()
    assert read_run_record(resumed.model_dir)["metrics"]["interpolation"]["alpha"] == straight.interpolation["alpha"]


def test_the_model_card_says_the_weights_were_interpolated(tmp_path):
    run = _scripted(tmp_path / "card")
    card = (run.model_dir / "README.md").read_text()
    chosen = run.interpolation["alpha"]
    assert f"alpha {chosen:g} kept by score" in card and "interpolated towards the starting model's" in card
    assert "which also chose the saved weights" in card
