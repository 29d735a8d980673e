"""Parameter groups (no decay for biases and norms, tied weights once) and the linear warm-up/decay schedule."""

import pytest
import torch
from torch import nn

from ctxemb.training.optim import linear_schedule, linear_schedule_factor, make_optimizer, param_groups


class HandNorm(nn.Module):
    """A hand-written LayerNorm (as in the original BERT code): recognised by its attribute name."""

    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.bias = nn.Parameter(torch.zeros(h))


class Embeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(10, 4)
        self.position_embeddings = nn.Embedding(6, 4)
        self.LayerNorm = nn.LayerNorm(4)


class MiniBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = Embeddings()
        self.dense = nn.Linear(4, 4)
        self.output_LayerNorm = HandNorm(4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.decoder = nn.Linear(4, 10)
        self.decoder.weight = self.embeddings.word_embeddings.weight  # tied


def _names(groups):
    return [set(g["param_names"]) for g in groups]


def test_no_decay_group_holds_biases_and_norm_weights():
    decay, no_decay = param_groups(MiniBert(), 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert set(decay["param_names"]) == {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                                         "dense.weight"}
    assert set(no_decay["param_names"]) == {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias", "dense.bias",
                                            "output_LayerNorm.weight", "output_LayerNorm.bias", "decoder.bias"}


def test_tied_parameters_counted_once():
    model = MiniBert()
    groups = param_groups(model, 0.1)
    all_params = [p for g in groups for p in g["params"]]
    assert len(all_params) == len({id(p) for p in all_params})
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for p in all_params} == trainable
    assert sum(p is model.embeddings.word_embeddings.weight for p in all_params) == 1
    assert not any("decoder.weight" in n for names in _names(groups) for n in names)
    opt = make_optimizer(model, lr=1e-3)  # AdamW refuses a parameter listed twice
    assert sum(len(g["params"]) for g in opt.param_groups) == len(all_params)


def test_param_groups_validation():
    with pytest.raises(ValueError, match="weight_decay"):
        param_groups(MiniBert(), -1.0)
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        param_groups(frozen, 0.0)


def test_make_optimizer_lr_scale_groups_and_errors():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    opt = make_optimizer([{"params": a.parameters(), "lr_scale": 0.5}, {"params": b.parameters(), "weight_decay": 0.0}],
                         lr=0.2, weight_decay=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.2]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    sched = linear_schedule(opt, warmup=2, total=10)
    for _ in range(2):
        opt.step()
        sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1, 0.2])  # peak, ratio kept
    with pytest.raises(ValueError, match="lr must be"):
        make_optimizer(a, lr=0.0)
    with pytest.raises(ValueError, match="lr_scale"):
        make_optimizer([{"params": a.parameters(), "lr_scale": 0}], lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        make_optimizer(a, lr=0.1, betas=(0.9, 1.0))


def test_make_optimizer_uses_the_fused_kernel_and_matches_the_per_tensor_loop():
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    fused = make_optimizer(models[0], lr=1e-2, weight_decay=0.1)
    assert fused.defaults["fused"]
    groups = param_groups(models[1], 0.1)
    reference = torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.1, foreach=False)
    x = torch.randn(16, 4)
    for _ in range(5):
        for model, opt in zip(models, (fused, reference)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_schedule_warmup_peak_and_end():
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    sched = linear_schedule(opt, warmup=10, total=110)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(110):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    # lrs[t] = the rate after t scheduler steps, i.e. the one step t + 1 runs at
    assert lrs[0] == 0.0
    assert lrs[5] == pytest.approx(0.5)
    assert lrs[10] == pytest.approx(1.0) and max(lrs) == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.5)
    assert lrs[109] == pytest.approx(0.01)
    assert lrs[110] == 0.0
    assert all(x <= y for x, y in zip(lrs[:11], lrs[1:11])) and all(x >= y for x, y in zip(lrs[10:], lrs[11:]))
    assert linear_schedule_factor(500, 10, 110) == 0.0


def test_schedule_without_warmup_and_errors():
    assert linear_schedule_factor(0, 0, 4) == 1.0
    assert linear_schedule_factor(2, 0, 4) == 0.5
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="warmup"):
        linear_schedule(opt, warmup=5, total=4)
    with pytest.raises(ValueError, match="total"):
        linear_schedule(opt, warmup=0, total=0)
