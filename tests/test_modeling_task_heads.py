"""Sequence classification heads: transformers parity both ways, losses, what each head computes, fine-tuning
regimes (freezing, layer-wise learning rates) and that every head learns a tiny task."""

import json
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.loading import load_encoder
from ctxemb.modeling.checkpoint import save_pretrained
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification, mean_pool
from ctxemb.training.optim import layerwise_lr_groups, make_optimizer

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MODEL_TYPES = ["bert", "roberta", "xlm-roberta", "mpnet"]


def _config(model_type="bert", **kw):
    if model_type == "bert":
        return EncoderConfig(model_type="bert", type_vocab_size=2, **TINY, **kw)
    return EncoderConfig(model_type=model_type, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, **TINY, **kw)


def _perturbed(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _model(model_type="bert", seed=0, **kw):
    torch.manual_seed(seed)
    kw.setdefault("num_labels", 3)
    kw.setdefault("problem", "classification")
    return _perturbed(EncoderForSequenceClassification(Encoder(_config(model_type)), **kw)).eval()


def _batch(model_type="bert", seed=0, B=3, T=10):
    g = torch.Generator().manual_seed(seed)
    pad = 0 if model_type == "bert" else 1
    ids = torch.randint(5, 99, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 6:] = 0
    ids[1, 6:] = pad
    return ids, mask


def test_state_dict_has_checkpoint_names():
    bert = set(_model("bert").state_dict())
    assert {"bert.pooler.dense.weight", "classifier.weight", "classifier.bias"} <= bert
    rob = _model("roberta").state_dict()
    assert rob["classifier.dense.weight"].shape == (32, 32) and rob["classifier.out_proj.weight"].shape == (3, 32)
    assert "roberta.embeddings.word_embeddings.weight" in rob
    assert "mpnet.encoder.relative_attention_bias.weight" in _model("mpnet").state_dict()
    for model_type in ("bert", "roberta"):
        assert _model(model_type, head="cls").state_dict()["classifier.weight"].shape == (3, 32)


def test_cls_head_is_a_linear_map_of_the_raw_cls_vector():
    model = _model("roberta", head="cls")
    ids, mask = _batch("roberta")
    h = model.encoder(ids, mask).last_hidden_state[:, 0]  # (B, H)
    W, b = model.classifier.weight, model.classifier.bias
    torch.testing.assert_close(model(ids, mask).logits, h @ W.T + b, rtol=1e-6, atol=1e-6)


def test_mean_head_averages_the_non_padding_tokens_only():
    model = _model("bert", head="mean")
    ids, mask = _batch("bert")
    h = model.encoder(ids, mask).last_hidden_state
    by_hand = torch.stack([h[i, mask[i].bool()].mean(0) for i in range(len(ids))])
    torch.testing.assert_close(mean_pool(h, mask), by_hand, rtol=1e-6, atol=1e-6)
    logits = model(ids, mask).logits
    torch.testing.assert_close(logits, by_hand @ model.classifier.weight.T + model.classifier.bias,
                               rtol=1e-6, atol=1e-6)
    # padding does not change the prediction: the padded row alone, unpadded, gives the same logits
    alone = model(ids[1:2, :6], mask[1:2, :6]).logits
    torch.testing.assert_close(alone, logits[1:2], rtol=1e-5, atol=1e-6)


def test_losses_are_cross_entropy_and_mse():
    model = _model("bert")
    ids, mask = _batch()
    labels = torch.tensor([0, 2, 1])
    out = model(ids, mask, labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    assert out.metrics["accuracy"] == pytest.approx((out.logits.argmax(-1) == labels).float().mean().item())
    reg = _model("bert", num_labels=1, problem="regression")
    scores = torch.tensor([0.5, 4.0, 2.25])
    out = reg(ids, mask, labels=scores)
    assert out.logits.shape == (3, 1)
    torch.testing.assert_close(out.loss, ((out.logits[:, 0] - scores) ** 2).mean())
    assert out.metrics == {}
    with pytest.raises(ValueError, match=r"labels must have shape \(batch,\) = \(3,\); got \(3, 1\)"):
        reg(ids, mask, labels=scores[:, None])


def test_bad_arguments_are_named():
    enc = Encoder(_config())
    with pytest.raises(ValueError, match="regression predicts one score: num_labels must be 1, got 3"):
        EncoderForSequenceClassification(enc, num_labels=3, problem="regression")
    with pytest.raises(ValueError, match="head must be one of"):
        EncoderForSequenceClassification(enc, num_labels=3, problem="classification", head="pooled")
    with pytest.raises(ValueError, match=r"id2label must have the keys 0..1"):
        EncoderForSequenceClassification(enc, num_labels=2, problem="classification", id2label={1: "a", 2: "b"})
    with pytest.raises(ValueError, match=r"k must be an integer in 0..2"):
        _model().freeze_all_but_last(3)


def test_saved_model_loads_back_with_equal_logits_and_labels(tmp_path):
    id2label = {0: "negative", 1: "neutral", 2: "positive"}
    for head in ("checkpoint", "mean"):
        model = _model("mpnet", head=head, id2label=id2label, classifier_dropout=0.2)
        model.save_pretrained(tmp_path / head)
        back = EncoderForSequenceClassification.from_pretrained(tmp_path / head).eval()
        assert (back.head, back.num_labels, back.problem, back.id2label) == (head, 3, "classification", id2label)
        assert back.classifier_dropout == 0.2
        ids, mask = _batch("mpnet")
        torch.testing.assert_close(back(ids, mask).logits, model(ids, mask).logits, rtol=0, atol=0)
    cfg = json.loads((tmp_path / "mean" / "config.json").read_text())
    assert cfg["architectures"] == ["CtxembForSequenceClassification"] and cfg["ctxemb_classifier_head"] == "mean"
    assert (cfg["model_type"], cfg["ctxemb_model_type"]) == ("ctxemb", "mpnet")  # transformers: remote code only
    with pytest.raises(ValueError, match=r"num_labels=5 contradicts the fine-tuned model .* \(num_labels=3\)"):
        EncoderForSequenceClassification.from_pretrained(tmp_path / "mean", num_labels=5)
    with pytest.raises(ValueError, match=r"head='cls' contradicts"):
        EncoderForSequenceClassification.from_pretrained(tmp_path / "mean", head="cls")


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_bare_encoder_loader_ignores_the_classifier(tmp_path, model_type):
    model = _model(model_type)
    model.save_pretrained(tmp_path / "m")
    enc = load_encoder(tmp_path / "m")  # strict: classifier.* must not count as unexpected encoder tensors
    ids, mask = _batch(model_type)
    torch.testing.assert_close(enc(ids, mask).last_hidden_state, model.encoder(ids, mask).last_hidden_state,
                               rtol=0, atol=0)


def test_a_bare_encoder_gets_a_fresh_head(tmp_path, caplog):
    save_pretrained(_perturbed(Encoder(_config())), tmp_path / "enc")
    with pytest.raises(ValueError, match="has no classifier .*: pass num_labels"):
        EncoderForSequenceClassification.from_pretrained(tmp_path / "enc")
    with caplog.at_level(logging.INFO, logger="ctxemb.modeling.sequence_classification"):
        model = EncoderForSequenceClassification.from_pretrained(tmp_path / "enc", num_labels=1, head="cls")
    assert "initialised fresh" in caplog.text
    assert (model.problem, model.head, model.num_labels) == ("regression", "cls", 1)
    assert not model.training and not model.classifier.training  # one mode: the loaded encoder's (eval)



def test_new_head_puts_a_fresh_head_on_a_fine_tuned_encoder(tmp_path):
    """Intermediate-task transfer: a 3-class model's encoder under a new 2-class head (its saved head ignored)."""
    model = _model("bert", head="checkpoint", id2label={0: "a", 1: "b", 2: "c"})
    model.save_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match="num_labels=2 contradicts"):
        EncoderForSequenceClassification.from_pretrained(tmp_path / "m", num_labels=2)
    new = EncoderForSequenceClassification.from_pretrained(tmp_path / "m", num_labels=2, head="mean", new_head=True)
    assert (new.num_labels, new.head) == (2, "mean")
    ids, mask = _batch("bert")
    torch.testing.assert_close(new.encoder(ids, mask).last_hidden_state, model.encoder(ids, mask).last_hidden_state,
                               rtol=0, atol=0)

# ---- fine-tuning regimes ------------------------------------------------------------------------------------

def test_freeze_encoder_leaves_the_encoder_bit_identical():
    model = _model("bert").train()
    model.freeze_encoder()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = make_optimizer(model, lr=1e-2, weight_decay=0.1)  # weight decay must not touch frozen weights either
    ids, mask = _batch()
    model(ids, mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    opt.step()
    after = model.state_dict()
    for k, v in before.items():
        changed = not torch.equal(v, after[k])
        trunk = k.startswith(("bert.embeddings.", "bert.encoder."))
        assert changed != trunk, k  # the trunk is unchanged; the head (pooler + classifier) moved


def test_freeze_all_but_last_sets_requires_grad():
    model = _model("mpnet", num_labels=2)
    model.freeze_all_but_last(1)
    for name, p in model.named_parameters():
        trainable = name.startswith(("mpnet.encoder.layer.1.", "classifier."))
        assert p.requires_grad == trainable, name  # the unused pooler is frozen too
    model.freeze_all_but_last(2)
    assert model.mpnet.encoder.layer[0].attention.self.query.weight.requires_grad
    assert not model.mpnet.embeddings.word_embeddings.weight.requires_grad
    assert not model.mpnet.encoder.relative_attention_bias.weight.requires_grad


def test_layerwise_lr_groups():
    model = _model("bert", num_labels=2)
    groups = layerwise_lr_groups(model, 0.5, 0.01)
    scale_of = {n: g["lr_scale"] for g in groups for n in g["param_names"]}
    decay_of = {n: g["weight_decay"] for g in groups for n in g["param_names"]}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert sorted(scale_of) == sorted(trainable)  # every trainable parameter exactly once
    assert sum(len(g["params"]) for g in groups) == len(trainable)
    # L = 2: layer i gets 0.5 ** (2 - i), the embeddings 0.5 ** 3, the head (pooler + classifier) 1
    assert scale_of["bert.embeddings.word_embeddings.weight"] == 0.125
    assert scale_of["bert.encoder.layer.0.attention.self.query.weight"] == 0.25
    assert scale_of["bert.encoder.layer.1.output.dense.weight"] == 0.5
    assert scale_of["bert.pooler.dense.weight"] == scale_of["classifier.weight"] == 1.0
    assert decay_of["bert.encoder.layer.1.output.LayerNorm.weight"] == 0.0
    assert decay_of["bert.embeddings.LayerNorm.weight"] == decay_of["classifier.bias"] == 0.0
    assert decay_of["bert.encoder.layer.1.output.dense.weight"] == 0.01
    opt = make_optimizer(groups, lr=1e-3)
    assert sorted({g["lr"] for g in opt.param_groups}) == pytest.approx([1.25e-4, 2.5e-4, 5e-4, 1e-3])
    # frozen parameters are left out
    names = {n for g in layerwise_lr_groups(model.freeze_all_but_last(1), 0.5, 0.0) for n in g["param_names"]}
    assert not any(n.startswith(("bert.embeddings.", "bert.encoder.layer.0.")) for n in names)
    with pytest.raises(ValueError, match=r"base_lr_scale_decay must be in \(0, 1\], got 1.5"):
        layerwise_lr_groups(model, 1.5, 0.0)


def _token_7_task(seed, B=64, T=8):
    """Label 1 when token 7 occurs after [CLS], 0 otherwise (other tokens are 8..39)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(8, 40, (B, T), generator=g)
    labels = torch.arange(B) % 2
    where = torch.randint(1, T, (B,), generator=g)
    ids[labels == 1, where[labels == 1]] = 7
    return ids, labels


@pytest.mark.parametrize("model_type,head", [("bert", "checkpoint"), ("roberta", "checkpoint"), ("bert", "cls"),
                                             ("mpnet", "mean")])
def test_each_head_learns_whether_a_token_occurs(model_type, head):
    torch.manual_seed(0)
    model = EncoderForSequenceClassification(Encoder(_config(model_type)), num_labels=2, problem="classification",
                                             head=head)
    opt = make_optimizer(model, lr=3e-3, weight_decay=0.0)
    model.train()
    for step in range(60):  # a fresh batch each step, so the rule is learned rather than 64 examples memorised
        ids, labels = _token_7_task(seed=step)
        loss = model(ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ids, labels = _token_7_task(seed=1000, B=256)
    with torch.no_grad():
        out = model(ids, labels=labels)
    assert out.metrics["accuracy"] >= 0.97, (out.metrics, float(out.loss))  # held-out; 1.0 when this was written


# ---- parity with transformers -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


@pytest.mark.parity
@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("problem", ["classification", "regression"])
def test_saved_model_loads_in_transformers_with_equal_logits_and_loss(tmp_path, transformers, model_type, problem):
    num_labels = 3 if problem == "classification" else 1
    model = _model(model_type, num_labels=num_labels, problem=problem, id2label={i: f"c{i}" for i in range(num_labels)})
    model.save_pretrained(tmp_path)
    ref = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(ref).__name__ == json.loads((tmp_path / "config.json").read_text())["architectures"][0]
    assert ref.config.problem_type == ("single_label_classification" if problem == "classification" else "regression")
    assert ref.config.id2label == model.id2label and ref.config.num_labels == num_labels
    ids, mask = _batch(model_type)
    labels = torch.tensor([0, 2, 1]) if problem == "classification" else torch.tensor([0.5, 4.0, 2.25])
    ours = model(ids, mask, labels=labels)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parity
@pytest.mark.parametrize("model_type", ["bert", "roberta", "mpnet"])
def test_transformers_fine_tuned_checkpoint_loads_with_equal_logits(tmp_path, transformers, model_type):
    torch.manual_seed(0)
    if model_type == "bert":
        cfg = transformers.BertConfig(type_vocab_size=2, num_labels=4, **TINY)
    elif model_type == "roberta":
        cfg = transformers.RobertaConfig(type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, num_labels=4, **TINY)
    else:
        cfg = transformers.MPNetConfig(pad_token_id=1, layer_norm_eps=1e-5, num_labels=4, **TINY)
    ref = _perturbed(transformers.AutoModelForSequenceClassification.from_config(cfg)).eval()
    ref.save_pretrained(tmp_path)
    model = EncoderForSequenceClassification.from_pretrained(tmp_path)
    assert (model.head, model.num_labels, model.problem) == ("checkpoint", 4, "classification")
    ids, mask = _batch(model_type)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(model(ids, mask).logits, theirs, rtol=1e-5, atol=1e-5)


def test_bce_regression_loss_scores_and_round_trip(tmp_path):
    reg = _model("bert", num_labels=1, problem="regression", regression_loss="bce", score_scale=5.0)
    ids, mask = _batch()
    scores = torch.tensor([0.5, 4.0, 5.0])
    out = reg(ids, mask, labels=scores)
    logit = out.logits[:, 0]
    ref = -(scores / 5 * torch.log(torch.sigmoid(logit)) + (1 - scores / 5) * torch.log(1 - torch.sigmoid(logit)))
    torch.testing.assert_close(out.loss, ref.mean())
    torch.testing.assert_close(reg.regression_scores(out.logits), 5 * torch.sigmoid(logit))
    reg.save_pretrained(tmp_path / "bce")
    cfg = json.loads((tmp_path / "bce" / "config.json").read_text())
    assert cfg["ctxemb_regression_loss"] == "bce" and cfg["ctxemb_score_scale"] == 5.0
    back = EncoderForSequenceClassification.from_pretrained(tmp_path / "bce").eval()
    assert (back.regression_loss, back.score_scale) == ("bce", 5.0)
    torch.testing.assert_close(back(ids, mask).logits, out.logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"regression_loss='mse' contradicts"):
        EncoderForSequenceClassification.from_pretrained(tmp_path / "bce", regression_loss="mse")
    # an MSE model keeps the raw output as its score
    mse = _model("bert", num_labels=1, problem="regression")
    torch.testing.assert_close(mse.regression_scores(out.logits), logit)
    enc = Encoder(_config())
    with pytest.raises(ValueError, match="regression_loss='bce' is for problem='regression'"):
        EncoderForSequenceClassification(enc, num_labels=2, problem="classification", regression_loss="bce")
    with pytest.raises(ValueError, match="regression_loss must be one of"):
        EncoderForSequenceClassification(enc, num_labels=1, problem="regression", regression_loss="huber")
    with pytest.raises(ValueError, match="score_scale must be a positive finite number"):
        EncoderForSequenceClassification(enc, num_labels=1, problem="regression", regression_loss="bce", score_scale=0)


def test_bce_cross_encoder_loads_in_sentence_transformers_with_the_sigmoid(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from tests.helpers import write_tiny_model
    base = write_tiny_model(tmp_path / "base")
    model = EncoderForSequenceClassification.from_pretrained(base, num_labels=1, problem="regression",
                                                             regression_loss="bce", score_scale=5.0)
    out = tmp_path / "ce"
    model.save_pretrained(out)
    for f in ("vocab.txt",):
        (out / f).write_text((base / f).read_text())
    pairs = [("the river bank", "a money plant"), ("old houses", "people talked")]
    from ctxemb.tasks.sequence.predict import SequencePredictor
    ours = [p.score for p in SequencePredictor.from_pretrained(out).predict([a for a, _ in pairs],
                                                                            [b for _, b in pairs])]
    theirs = st.CrossEncoder(str(out), device="cpu").predict(pairs)
    np.testing.assert_allclose(np.asarray(ours) / 5.0, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("head", ["checkpoint", "cls", "mean"])
def test_heads_that_read_cls_alone_skip_the_rest_of_the_last_layer_with_the_same_loss_and_gradients(
        monkeypatch, model_type, head):
    model = _model(model_type, seed=5, head=head).train()  # dropout 0 (TINY): train mode is deterministic
    assert model.reads_first_token_only == (head != "mean")
    ids, mask = _batch(model_type, seed=5)
    labels = torch.tensor([0, 2, 1])
    seen = []
    model.encoder.register_forward_hook(lambda m, a, out: seen.append(out.last_hidden_state.shape[1]))

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        out = model(ids, mask, labels=labels)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    short_logits, short_grads = loss_and_grads()
    monkeypatch.setattr(EncoderForSequenceClassification, "reads_first_token_only", property(lambda self: False))
    full_logits, full_grads = loss_and_grads()
    assert seen == [1 if head != "mean" else ids.shape[1], ids.shape[1]]
    torch.testing.assert_close(short_logits, full_logits, rtol=1e-5, atol=1e-6)
    assert short_grads.keys() == full_grads.keys()
    for name in full_grads:
        torch.testing.assert_close(short_grads[name], full_grads[name], rtol=1e-4, atol=1e-6, msg=name)
