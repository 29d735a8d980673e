"""The word embeddings updated by rows (``embedding_update``): "sparse" is torch's AdamW without the dense (V, E)
gradient, "lazy" updates only the batch's rows; the loop's clipping, checkpoints, exact resume and saved layout."""

import copy
import json
import logging
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.pretraining_heads import EncoderForPretraining
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from ctxemb.training import Callback, DatasetBatches, EvalBatches, TrainConfig, train
from ctxemb.training import embedding_rows
from ctxemb.training.embedding_rows import EmbeddingRowAdamW, RowLookupSwap, find_row_embeddings
from ctxemb.training.optim import linear_schedule, make_optimizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest

U = 2.0 ** -24  # float32's unit roundoff
V, E, PAD = 40, 8, 0


class Linearised(nn.Module):
    """Word embeddings and a Linear under a loss that is linear in both: the gradients do not depend on the
    weights, so two optimizers fed the same batches see bitwise the same gradients."""

    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(V, E, padding_idx=PAD)
        self.dense = nn.Linear(E, 3)

    def forward(self, input_ids, target, head_target):
        return (self.word_embeddings(input_ids) * target).sum() + (self.dense.weight * head_target).sum() \
            + self.dense.bias.sum()


def _batches(steps: int, accum: int = 2, seed: int = 0):
    """Per step, ``accum`` micro-batches of (4, 6) ids with padding: ids 1..9 from step 1, one more id range
    opening every few steps (rows first touched late), ids >= 30 never."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        micro = []
        for _ in range(accum):
            ids = torch.randint(1, 10 + 3 * (step // 3), (4, 6), generator=g)
            ids[:, 4:] = PAD
            if step == 4:
                ids[0, 0] = 29  # touched once, at step 5
            micro.append((ids, torch.randn(4, 6, E, generator=g), torch.randn(3, E, generator=g)))
        out.append(micro)
    return out


def _pair(mode: str, lr: float = 0.05, weight_decay: float = 0.1, steps: int = 12):
    torch.manual_seed(0)
    dense = Linearised()
    rows = copy.deepcopy(dense)
    opt_dense = make_optimizer(dense, lr=lr, weight_decay=weight_decay)
    opt_rows = make_optimizer(rows, lr=lr, weight_decay=weight_decay, embedding_update=mode,
                              word_embeddings=rows.word_embeddings)
    assert isinstance(opt_rows, EmbeddingRowAdamW) and type(opt_dense) is torch.optim.AdamW
    # a warm-up/decay schedule: every step decays by another factor (1 - lr_t wd)
    scheds = [linear_schedule(o, 3, steps) for o in (opt_dense, opt_rows)]
    return dense, rows, opt_dense, opt_rows, scheds, RowLookupSwap(rows, opt_rows)


def _run_pair(mode, steps, max_norm, monkeypatch, all_warm_fraction=1.0):
    monkeypatch.setattr(embedding_rows, "ALL_WARM_FRACTION", all_warm_fraction)
    dense, rows, opt_dense, opt_rows, scheds, swap = _pair(mode, steps=steps)
    norms, first_rows = [], None
    for step, micro in enumerate(_batches(steps)):
        for ids, target, head_target in micro:
            dense(ids, target, head_target).backward()
            rows(ids, target, head_target).backward()
            opt_rows.end_micro_batch()
        if step == 0:
            first_rows = torch.unique(torch.cat([m[0].reshape(-1) for m in micro]))
        if max_norm:
            norms.append((float(torch.nn.utils.clip_grad_norm_(list(dense.parameters()), max_norm)),
                          float(opt_rows.clip_grad_norm_(list(rows.parameters()), max_norm))))
        for o in (opt_dense, opt_rows):
            o.step()
            o.zero_grad()
        for s in scheds:
            s.step()
    return dense, rows, opt_dense, opt_rows, swap, norms, first_rows


@pytest.mark.parametrize("all_warm_fraction", [1.0, 0.3], ids=["warm-rows", "switch-to-all-rows"])
def test_sparse_is_torch_adamw(monkeypatch, all_warm_fraction):
    steps = 12
    dense, rows, opt_dense, opt_rows, swap, _, first_rows = _run_pair("sparse", steps, 0, monkeypatch,
                                                                      all_warm_fraction)
    assert opt_rows._all_warm == (all_warm_fraction < 1)
    want, got = opt_dense.state_dict()["state"], opt_rows.state_dict()["state"]
    assert sorted(want) == sorted(got)
    for i in want:  # the same gradients, so the same moments, bit for bit, and the same step count
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(want[i][key], got[i][key]), (i, key)
    assert torch.equal(dense.dense.weight, rows.dense.weight) and torch.equal(dense.dense.bias, rows.dense.bias)
    with swap.plain():
        w_dense, w_rows = dense.word_embeddings.weight.detach(), rows.word_embeddings.weight.detach()
        # rows warm from the first step never owed a decay: bitwise
        assert torch.equal(w_dense[first_rows], w_rows[first_rows])
        # the others: torch rounds each of the t decays (the factor to float32, then the product: <= 2 ulp), the
        # deferred float64 factor is rounded once, and a row's later updates add at most an ulp of rounding each
        # from its different start: |difference| <= (2t + 1) ulp of the largest weight (measured: a few ulp)
        bound = (2 * steps + 1) * U * float(w_dense.abs().max())
        assert float((w_dense - w_rows).abs().max()) <= bound
    # cold rows are put back after plain(): the run does not depend on when it saved or evaluated
    if all_warm_fraction == 1.0:
        cold = opt_rows._slot_of < 0
        assert cold[30:].all() and not cold[29]
        with swap.plain():
            decayed = rows.word_embeddings.weight.detach()[cold].clone()
        assert not torch.equal(decayed, rows.word_embeddings.weight.detach()[cold])


@pytest.mark.parametrize("all_warm_fraction", [1.0, 0.4], ids=["warm-rows", "switch-after-the-save"])
def test_saved_state_continues_bit_for_bit(monkeypatch, all_warm_fraction):
    """Save as the loop does (the model's weights inside plain(), the optimizer's state_dict), load both into a new
    model and optimizer, go on: the same weights and state as without the break, though the slots differ."""
    monkeypatch.setattr(embedding_rows, "ALL_WARM_FRACTION", all_warm_fraction)
    steps, cut = 12, 5
    batches = _batches(steps)

    def run(model, opt, sched, part):
        for micro in part:
            for ids, target, head_target in micro:
                model(ids, target, head_target).backward()
                opt.end_micro_batch()
            opt.clip_grad_norm_(list(model.parameters()), 5.0)
            opt.step()
            opt.zero_grad()
            sched.step()

    _, straight, _, opt_straight, (_, sched), swap_straight = _pair("sparse", steps=steps)
    run(straight, opt_straight, sched, batches)
    _, first, _, opt, (_, sched), swap = _pair("sparse", steps=steps)
    run(first, opt, sched, batches[:cut])
    assert not opt._all_warm  # the switch (if any) comes after the break
    with swap.plain():
        weights, state, schedule = copy.deepcopy(first.state_dict()), copy.deepcopy(opt.state_dict()), \
            sched.state_dict()
    assert not torch.equal(weights["word_embeddings.weight"], first.state_dict()["word_embeddings.weight"])
    _, second, _, opt, (_, sched), swap = _pair("sparse", steps=steps)
    swap.restore()
    second.load_state_dict(weights)  # as load_checkpoint: weights first, then the optimizer
    opt.load_state_dict(state)
    sched.load_state_dict(schedule)
    swap = RowLookupSwap(second, opt)
    run(second, opt, sched, batches[cut:])
    assert opt._all_warm == opt_straight._all_warm == (all_warm_fraction < 1)
    with swap_straight.plain(), swap.plain():
        for (name, a), b in zip(straight.state_dict().items(), second.state_dict().values()):
            assert torch.equal(a, b), name
        want, got = opt_straight.state_dict()["state"], opt.state_dict()["state"]
    for i in want:
        for key in want[i]:
            assert torch.equal(want[i][key], got[i][key]), (i, key)


def test_clipping_sees_the_dense_norm(monkeypatch):
    dense, rows, _, _, swap, norms, _ = _run_pair("sparse", 10, 0.5, monkeypatch)
    assert all(w > 0.5 for w, _ in norms)  # clipping acts every step
    for want, got in norms:  # the (U, E) block's norm sums in another order than the (V, E) one's
        assert got == pytest.approx(want, rel=1e-6)
    with swap.plain():
        for (name, a), b in zip(dense.named_parameters(), rows.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_the_gradient_rows_are_the_dense_gradient():
    torch.manual_seed(0)
    model = Linearised()
    opt = make_optimizer(model, lr=0.1, embedding_update="sparse", word_embeddings=model.word_embeddings)
    reference = copy.deepcopy(model)
    RowLookupSwap(model, opt)
    for ids, target, head_target in _batches(1, accum=3)[0]:
        reference(ids, target, head_target).backward()
        model(ids, target, head_target).backward()
        opt.end_micro_batch()
    assert model.word_embeddings.weight.grad is None  # no dense gradient
    ids, grad = opt.grad_rows()
    want = reference.word_embeddings.weight.grad
    assert PAD not in ids.tolist()  # the padding row gets no gradient, as with nn.Embedding
    assert torch.equal(grad, want[ids])  # summed in embedding_dense_backward's order, micro-batches added after
    others = torch.ones(V, dtype=torch.bool)
    others[ids] = False
    assert not want[others].any()


def test_lazy_updates_only_the_batch_rows(monkeypatch):
    steps, lr, wd, (b1, b2), eps = 6, 0.05, 0.1, (0.9, 0.999), 1e-8
    dense, rows, opt_dense, opt_rows, swap, _, _ = _run_pair("lazy", steps, 0, monkeypatch)
    torch.manual_seed(0)
    start = Linearised().word_embeddings.weight.detach().double()
    # LazyAdam in float64, by hand: a row with a gradient in the step gets AdamW's update (global step in the bias
    # correction); every other row keeps its weight and moments
    p, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
    sched = linear_schedule(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr), 3, steps)
    for t, micro in enumerate(_batches(steps), start=1):
        lr_t = sched.get_last_lr()[0]
        g = torch.zeros_like(p)
        for ids, target, _ in micro:
            g.index_add_(0, ids.reshape(-1), target.reshape(-1, E).double())
        g[PAD] = 0
        used = torch.unique(torch.cat([mb[0].reshape(-1) for mb in micro]))
        used = used[used != PAD]
        m[used] = b1 * m[used] + (1 - b1) * g[used]
        v[used] = b2 * v[used] + (1 - b2) * g[used] ** 2
        step = lr_t / (1 - b1 ** t)
        p[used] = p[used] * (1 - lr_t * wd) - step * m[used] / (v[used].sqrt() / (1 - b2 ** t) ** 0.5 + eps)
        sched.optimizer.step()
        sched.step()
    got = rows.word_embeddings.weight.detach().double()
    torch.testing.assert_close(got, p, rtol=1e-5, atol=1e-6)
    never = torch.arange(30, V)
    assert torch.equal(got[never], start[never]) and torch.equal(got[PAD], start[PAD])  # not even decayed
    assert not torch.allclose(dense.word_embeddings.weight[never].double(), start[never])  # AdamW decays them
    state = opt_rows.state_dict()["state"][0]
    assert not state["exp_avg"][never].any() and "warm" not in state
    # the rest of the model is AdamW's
    assert torch.equal(dense.dense.weight, rows.dense.weight)


# --------------------------------------------------------------------------------------------------- the loop

def _encoder_config(**kw):
    return EncoderConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=24, max_position_embeddings=16, hidden_dropout_prob=0.1,
                         attention_probs_dropout_prob=0.0, **kw)


def _classifier(seed=0):
    torch.manual_seed(seed)
    return EncoderForSequenceClassification(Encoder(_encoder_config()), num_labels=2, problem="classification")


def _examples(n=24, seed=0):
    """Short padded rows over ids 5..44 (ids 45..59 are never used); label = first token's parity."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(3, 9, (1,), generator=g))
        ids = torch.full((8,), PAD, dtype=torch.long)
        ids[:length] = torch.randint(5, 45, (length,), generator=g)
        mask = (ids != PAD).long()
        out.append({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor(int(ids[0]) % 2)})
    return out


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, loss):
        return step >= self.step


def _train(out_dir, mode, *, steps=8, stop_at=None, resume=False, model=None, **kw):
    examples = _examples()
    model = model if model is not None else _classifier()
    config = TrainConfig(learning_rate=0.01, max_steps=steps, grad_accumulation_steps=2, warmup_steps=2,
                         log_every=2, eval_every=3, max_grad_norm=0.5, precision="fp32", device="cpu",
                         progress_bar=False, seed=5, out_dir=str(out_dir) if out_dir else None, resume=resume,
                         embedding_update=mode, **kw)
    result = train(model, DatasetBatches(examples, batch_size=4, seed=9), config,
                   eval_data=EvalBatches(examples[:8], batch_size=4),
                   eval_fn=lambda m: {"noise": random.random() + float(np.random.rand()) + float(torch.rand(()))},
                   callbacks=[StopAt(stop_at)] if stop_at else None)
    return model, result


def test_the_loop_gives_adamw_and_the_plain_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(embedding_rows, "ALL_WARM_FRACTION", 1.0)  # vocabulary of 60: stay with warm rows
    dense_model, dense = _train(tmp_path / "dense", "dense")
    sparse_model, sparse = _train(tmp_path / "sparse", "sparse")
    lazy_model, lazy = _train(tmp_path / "lazy", "lazy")
    assert type(sparse_model.encoder.embeddings.word_embeddings) is nn.Embedding  # the model's own module back
    # the same run to rounding (the norm's summation order and the deferred decay; dropout draws the same masks)
    assert sparse.losses == pytest.approx(dense.losses, rel=1e-5)
    for (name, a), b in zip(dense_model.state_dict().items(), sparse_model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    never = torch.arange(45, 60)  # in no batch: lazy leaves them as they started, AdamW decays them
    start = _classifier().encoder.embeddings.word_embeddings.weight.detach()
    assert torch.equal(lazy_model.encoder.embeddings.word_embeddings.weight.detach()[never], start[never])
    assert not torch.equal(dense_model.encoder.embeddings.word_embeddings.weight.detach()[never], start[never])
    assert lazy.losses != dense.losses
    # checkpoints: the model file has the plain model's names, shapes and dtypes; the optimizer file torch's layout for the
    # moments plus the row bookkeeping
    layouts = {}
    for mode in ("dense", "sparse", "lazy"):
        with safe_open(str(tmp_path / mode / "checkpoint-8" / "model.safetensors"), "pt") as f:
            layouts[mode] = {k: (f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for k in f.keys()}
    assert layouts["sparse"] == layouts["lazy"] == layouts["dense"]
    saved = {m: torch.load(tmp_path / m / "checkpoint-8" / "optimizer.pt", weights_only=True)["state"][0]
             for m in ("dense", "sparse")}
    assert set(saved["sparse"]) == set(saved["dense"]) | {"warm", "deferred_decay", "cold_weights"}
    assert saved["sparse"]["exp_avg"].shape == saved["dense"]["exp_avg"].shape == (60, 16)
    cold = saved["sparse"]["warm"].logical_not().nonzero().squeeze(1).tolist()
    assert cold == [1, 2, 3, 4, *never.tolist()] and saved["sparse"]["cold_weights"].shape == (len(cold), 16)
    # the checkpoint's weights are AdamW's (decayed), the optimizer keeps the cold rows as they were
    weights = safe_open(str(tmp_path / "sparse" / "checkpoint-8" / "model.safetensors"), "pt").get_tensor(
        "bert.embeddings.word_embeddings.weight")
    assert torch.equal(weights, sparse_model.encoder.embeddings.word_embeddings.weight.detach())
    assert torch.equal(saved["sparse"]["cold_weights"], start[~saved["sparse"]["warm"]])
    assert json.loads((tmp_path / "sparse" / "checkpoint-8" / "trainer_state.json").read_text())["config"][
        "embedding_update"] == "sparse"


@pytest.mark.parametrize("mode, all_warm_fraction", [("sparse", 1.0), ("sparse", 0.45), ("lazy", 1.0)])
def test_resume_is_exact(tmp_path, monkeypatch, mode, all_warm_fraction):
    monkeypatch.setattr(embedding_rows, "ALL_WARM_FRACTION", all_warm_fraction)
    straight_model, straight = _train(tmp_path / "straight", mode)
    _, first = _train(tmp_path / "split", mode, stop_at=5)  # step 5: neither a save nor an evaluation of the other
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    resumed_model, second = _train(tmp_path / "split", mode, resume=True)
    assert second.start_step == 5
    assert first.losses + second.losses == straight.losses
    for (name, a), b in zip(straight_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_dense_checkpoint_resumes_with_every_row_warm(tmp_path, caplog):
    _train(tmp_path / "run", "dense", stop_at=4)
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.loop"):
        model, result = _train(tmp_path / "run", "sparse", resume=True)
    assert "embedding_update 'dense' -> 'sparse'" in caplog.text and result.step == 8
    _, straight = _train(tmp_path / "straight", "dense")
    assert result.losses == pytest.approx(straight.losses[4:], rel=1e-5)


# --------------------------------------------------------------------------------------------------- where it is off

def test_a_bad_value_names_the_flag_and_the_values():
    with pytest.raises(ValueError, match=r"--embedding-update.*'auto', 'dense', 'sparse', 'lazy'; got 'rows'"):
        TrainConfig(learning_rate=1e-3, embedding_update="rows")
    with pytest.raises(ValueError, match="embedding_update"):
        make_optimizer(_classifier(), lr=1e-3, embedding_update="rows")
    with pytest.raises(ValueError, match="needs word_embeddings"):
        make_optimizer(_classifier(), lr=1e-3, embedding_update="sparse")
    from ctxemb.cli._common import UsageError, train_overrides
    from ctxemb.cli.finetune import task_parser

    def finetune(*flags):  # the flags of `ctxemb finetune sst2` as the loop's settings
        return train_overrides(task_parser("sst2").parse_args(["--out-dir", "x", *flags]))

    assert finetune("--embedding-update", "lazy")["embedding_update"] == "lazy"
    assert "embedding_update" not in finetune()  # TrainConfig's default, "auto"
    with pytest.raises(UsageError, match=r"--embedding-update: invalid choice: 'rows' \(choose from 'auto', 'dense', "
                                         r"'sparse', 'lazy'\)"):
        finetune("--embedding-update", "rows")


def test_tied_weights_and_ddp_keep_the_dense_update(tmp_path, caplog):
    tied = EncoderForPretraining(Encoder(_encoder_config()))
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.embedding_rows"):
        assert find_row_embeddings(tied, "sparse") is None
        assert find_row_embeddings(_classifier(), "lazy", world_size=2) is None
        assert find_row_embeddings(nn.Linear(2, 2), "sparse") is None
    assert "tied to cls.predictions.decoder.weight" in caplog.text
    assert "2 processes" in caplog.text and "no word embeddings" in caplog.text
    assert find_row_embeddings(_classifier(), "dense") is None
    # a weight used outside the lookup (a tie find_row_embeddings cannot see) is refused, not updated twice
    model = _classifier()
    emb = model.encoder.embeddings.word_embeddings
    opt = make_optimizer(model, lr=1e-3, embedding_update="sparse", word_embeddings=emb)
    RowLookupSwap(model, opt)
    out = model(**{k: torch.stack([e[k] for e in _examples(4)]) for k in ("input_ids", "attention_mask", "labels")})
    (out.loss + F.linear(torch.ones(1, 16), emb.weight).sum()).backward()
    with pytest.raises(RuntimeError, match="dense gradient"):
        opt.step()


def test_the_tied_model_trains_densely(tmp_path, caplog):
    class MLM(EncoderForPretraining):
        def forward(self, input_ids, attention_mask, labels):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   labels=torch.where(attention_mask.bool(), input_ids, -100))

    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="ctxemb.training.embedding_rows"):
        _, result = _train(None, "sparse", steps=2, model=MLM(Encoder(_encoder_config())))
    assert result.step == 2 and "updated densely" in caplog.text
