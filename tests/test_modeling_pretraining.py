"""Pretraining heads: checkpoint names, sparse = dense prediction, NSP/SBO losses, transformers loads what we save."""

import logging

import pytest
import torch
import torch.nn.functional as F

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.pretraining_heads import IGNORE_INDEX, EncoderForPretraining

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _config(model_type="bert"):
    if model_type == "bert":
        return EncoderConfig(model_type="bert", type_vocab_size=2, **TINY)
    return EncoderConfig(model_type=model_type, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, **TINY)


def _perturbed(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _batch(seed=0, B=3, T=12, pad=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 8:] = 0
    ids[1, 8:] = pad
    labels = torch.full((B, T), IGNORE_INDEX)
    chosen = (torch.rand(B, T, generator=g) < 0.3) & mask.bool()
    chosen[:, 0] = False
    labels[chosen] = ids[chosen]
    ids = ids.masked_fill(chosen, 4)
    return ids, mask, labels


def test_state_dict_has_checkpoint_names():
    model = EncoderForPretraining.from_config(_config(), nsp=True)
    keys = set(model.state_dict())
    assert "bert.embeddings.word_embeddings.weight" in keys
    assert "bert.encoder.layer.0.attention.self.query.weight" in keys
    for k in ("cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.weight",
              "cls.predictions.bias", "cls.predictions.decoder.weight", "cls.seq_relationship.weight"):
        assert k in keys
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert "cls.seq_relationship.weight" not in EncoderForPretraining.from_config(_config()).state_dict()
    assert "roberta.embeddings.word_embeddings.weight" in EncoderForPretraining.from_config(_config("roberta")).state_dict()


def test_sparse_prediction_equals_dense_loss_and_gradients():
    torch.manual_seed(0)
    sparse = _perturbed(EncoderForPretraining.from_config(_config(), sparse_prediction=True))
    dense = EncoderForPretraining.from_config(_config(), sparse_prediction=False)
    dense.load_state_dict(sparse.state_dict())
    ids, mask, labels = _batch()
    a, b = sparse(ids, mask, labels=labels), dense(ids, mask, labels=labels)
    torch.testing.assert_close(a.loss, b.loss, rtol=1e-6, atol=1e-6)
    # and both equal the textbook definition: cross-entropy of the full (B, T, V) logits over the masked positions
    full = sparse(ids, mask).mlm_logits
    ref = F.cross_entropy(full.reshape(-1, full.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(a.loss, ref, rtol=1e-6, atol=1e-6)
    a.loss.backward()
    b.loss.backward()
    for (n, p), q in zip(sparse.named_parameters(), dense.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=n)
    assert a.mlm_logits.shape == ((labels != IGNORE_INDEX).sum().item(), 99)
    assert a.metrics["masked_tokens"] == (labels != IGNORE_INDEX).sum().item()


@pytest.mark.parametrize("nsp_input", ["pooled", "cls"])
def test_nsp_loss_is_added(nsp_input):
    torch.manual_seed(1)
    model = _perturbed(EncoderForPretraining.from_config(_config(), nsp=True, nsp_input=nsp_input))
    ids, mask, labels = _batch()
    nsl = torch.tensor([0, 1, 0])
    out = model(ids, mask, labels=labels, next_sentence_label=nsl)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.nsp_loss)
    enc = model.bert(ids, mask)
    feats = enc.pooler_output if nsp_input == "pooled" else enc.last_hidden_state[:, 0]
    torch.testing.assert_close(out.nsp_loss, F.cross_entropy(model.cls.seq_relationship(feats), nsl))
    with pytest.raises(ValueError, match="no NSP head"):
        EncoderForPretraining.from_config(_config())(ids, mask, labels=labels, next_sentence_label=nsl)


def test_span_boundary_objective_uses_boundaries_and_positions():
    torch.manual_seed(2)
    model = _perturbed(EncoderForPretraining.from_config(_config(), sbo=True, max_span_length=8))
    ids = torch.randint(5, 99, (1, 10))
    labels = torch.full((1, 10), IGNORE_INDEX)
    labels[0, 3:6] = ids[0, 3:6]  # one span s=3..e=5
    left = torch.full((1, 10), -1)
    right = torch.full((1, 10), -1)
    pos = torch.full((1, 10), -1)
    left[0, 3:6], right[0, 3:6], pos[0, 3:6] = 2, 6, torch.arange(3)
    out = model(ids.masked_fill(labels != IGNORE_INDEX, 4), labels=labels, span_left=left, span_right=right,
                span_position=pos)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.sbo_loss)
    z = model.bert(ids.masked_fill(labels != IGNORE_INDEX, 4)).last_hidden_state[0]
    h = model.cls.span_boundary.mlp(torch.cat([z[2].expand(3, -1), z[6].expand(3, -1),
                                               model.cls.span_boundary.position_embeddings.weight[:3]], -1))
    logits = h @ model.bert.embeddings.word_embeddings.weight.T + model.cls.predictions.bias
    torch.testing.assert_close(out.sbo_loss, F.cross_entropy(logits, ids[0, 3:6]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="span_left"):
        model(ids, labels=labels)


def test_no_masked_position_still_backpropagates():
    model = EncoderForPretraining.from_config(_config())
    ids, mask, _ = _batch()
    out = model(ids, mask, labels=torch.full_like(ids, IGNORE_INDEX))
    out.loss.backward()
    assert out.loss.item() == 0.0


transformers = pytest.importorskip("transformers")


@pytest.mark.parity
def test_saved_checkpoint_loads_in_transformers_with_equal_logits(tmp_path):
    torch.manual_seed(3)
    ours = _perturbed(EncoderForPretraining.from_config(_config(), nsp=True)).eval()
    ours.save_pretrained(tmp_path / "bert")
    ref = transformers.BertForPreTraining.from_pretrained(tmp_path / "bert").eval()
    ids, mask, _ = _batch()
    with torch.inference_mode():
        a, b = ours(ids, mask), ref(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(a.mlm_logits[mask.bool()], b.prediction_logits[mask.bool()], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.nsp_logits, b.seq_relationship_logits, rtol=1e-5, atol=1e-5)
    # and our loader reads it back identically
    back = EncoderForPretraining.from_pretrained(tmp_path / "bert").eval()
    with torch.inference_mode():
        torch.testing.assert_close(back(ids, mask).mlm_logits, a.mlm_logits, rtol=0, atol=0)


@pytest.mark.parity
def test_roberta_layout_saves_as_roberta_for_masked_lm(tmp_path):
    torch.manual_seed(4)
    ours = _perturbed(EncoderForPretraining.from_config(_config("roberta"))).eval()
    ours.save_pretrained(tmp_path / "rob")
    ref = transformers.RobertaForMaskedLM.from_pretrained(tmp_path / "rob").eval()
    ids, mask, _ = _batch(pad=1)
    with torch.inference_mode():
        a, b = ours(ids, mask), ref(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(a.mlm_logits[mask.bool()], b.logits[mask.bool()], rtol=1e-5, atol=1e-5)


def test_continued_pretraining_starts_a_fresh_head_on_a_bare_encoder(tmp_path, caplog):
    from ctxemb.modeling.checkpoint import save_pretrained

    enc = _perturbed(Encoder(_config()))
    save_pretrained(enc, tmp_path)
    with caplog.at_level(logging.INFO, logger="ctxemb.modeling.pretraining_heads"):
        model = EncoderForPretraining.from_pretrained(tmp_path)
    assert "initialised fresh" in caplog.text
    torch.testing.assert_close(model.bert.encoder.layer[0].output.dense.weight, enc.encoder.layer[0].output.dense.weight)
    assert not model.has_nsp


@pytest.mark.parity
def test_fill_mask_matches_transformers_pipeline_probabilities(tmp_path):
    from tests.helpers import VOCAB

    from ctxemb.embedding.fill_mask import fill_mask

    torch.manual_seed(6)
    cfg = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=37, max_position_embeddings=64)
    ref = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ref.save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    ours = fill_mask("he sat on the [MASK] of the river", tmp_path, top_k=3)
    tok = transformers.BertTokenizer(str(tmp_path / "vocab.txt"))
    enc = tok("he sat on the [MASK] of the river", return_tensors="pt")
    with torch.inference_mode():
        probs = ref(**enc).logits[0, 5].softmax(-1)
    p, i = probs.topk(3)
    assert len(ours) == 1 and [f.token_id for f in ours[0]] == i.tolist()
    assert [f.token for f in ours[0]] == tok.convert_ids_to_tokens(i.tolist())
    torch.testing.assert_close(torch.tensor([f.probability for f in ours[0]]), p, rtol=1e-5, atol=1e-6)


def test_fill_mask_refuses_a_bare_encoder(tmp_path):
    from tests.helpers import write_tiny_model

    from ctxemb.embedding.fill_mask import fill_mask

    write_tiny_model(tmp_path)
    with pytest.raises(ValueError, match="no masked-LM head"):
        fill_mask("the [MASK] of the river", tmp_path)


@pytest.mark.parity
def test_xlm_roberta_layout_checkpoints_load(tmp_path):
    from ctxemb.modeling.loading import load_encoder

    torch.manual_seed(7)
    cfg = transformers.XLMRobertaConfig(type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, **TINY)
    ref = _perturbed(transformers.XLMRobertaForMaskedLM(cfg)).eval()
    ref.save_pretrained(tmp_path)
    ours = load_encoder(tmp_path)
    assert ours.config.model_type == "xlm-roberta" and ours.config.base_model_prefix == "roberta"
    ids, mask, _ = _batch(pad=1)
    with torch.inference_mode():
        a = ours(ids, mask).last_hidden_state
        b = ref.roberta(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=1e-5, atol=1e-5)
        mlm = EncoderForPretraining.from_pretrained(tmp_path, missing_heads="raise").eval()
        torch.testing.assert_close(mlm(ids, mask).mlm_logits[mask.bool()], ref(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                                   rtol=1e-5, atol=1e-5)
