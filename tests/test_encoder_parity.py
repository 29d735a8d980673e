"""Parity of our encoder with transformers: every hidden state, padded batches, fp32, atol 1e-5."""

import pytest
import torch

from ctxemb.modeling.checkpoint import load_encoder_dir, save_pretrained

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.parity

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _reference(model_type: str, seed: int):
    torch.manual_seed(seed)
    if model_type == "bert":
        cfg = transformers.BertConfig(type_vocab_size=2, **TINY)
        model = transformers.BertModel(cfg)
    elif model_type == "roberta":
        cfg = transformers.RobertaConfig(type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, **TINY)
        model = transformers.RobertaModel(cfg)
    else:
        cfg = transformers.MPNetConfig(pad_token_id=1, layer_norm_eps=1e-5, relative_attention_num_buckets=32, **TINY)
        model = transformers.MPNetModel(cfg)
    # Random init leaves LayerNorms at identity and biases at 0; perturb everything so no term can hide.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def _padded_batch(pad_id: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = [11, 3, 7, 1 + 40]
    T = max(lengths)
    ids = torch.full((len(lengths), T), pad_id)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(5, 99, (n,), generator=g)
        mask[i, :n] = 1
    types = torch.zeros_like(ids)
    types[0, 5:11] = 1
    return ids, mask, types


@pytest.mark.parametrize("model_type", ["bert", "roberta", "mpnet"])
@pytest.mark.parametrize("seed", [0, 1])
def test_hidden_states_match_transformers(tmp_path, model_type, seed):
    ref = _reference(model_type, seed)
    ref.save_pretrained(tmp_path)
    ours, _ = load_encoder_dir(tmp_path)
    pad = ref.config.pad_token_id
    ids, mask, types = _padded_batch(pad, seed)
    kwargs = dict(input_ids=ids, attention_mask=mask)
    if model_type == "bert":
        kwargs["token_type_ids"] = types
    with torch.inference_mode():
        theirs = ref(**kwargs, output_hidden_states=True)
        mine = ours(ids, mask, types if model_type == "bert" else None)
    assert len(mine.hidden_states) == len(theirs.hidden_states) == TINY["num_hidden_layers"] + 1
    real = mask.bool()
    for a, b in zip(mine.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mine.pooler_output, theirs.pooler_output, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_type", ["bert", "roberta", "mpnet"])
def test_saved_checkpoint_loads_in_transformers(tmp_path, model_type):
    ref = _reference(model_type, 3)
    ref.save_pretrained(tmp_path / "ref")
    ours, _ = load_encoder_dir(tmp_path / "ref")
    save_pretrained(ours, tmp_path / "ours")
    back = transformers.AutoModel.from_pretrained(tmp_path / "ours").eval()
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 3)
    with torch.inference_mode():
        a = back(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        b = ours(ids, mask)
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(x[mask.bool()], y[mask.bool()], rtol=1e-5, atol=1e-5)


def test_pretraining_heads_match_bert_for_pretraining(tmp_path):
    from ctxemb.modeling.pretraining_heads import EncoderForPretraining

    torch.manual_seed(5)
    cfg = transformers.BertConfig(type_vocab_size=2, **TINY)
    ref = transformers.BertForPreTraining(cfg)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ref.eval().save_pretrained(tmp_path / "ref")
    ours = EncoderForPretraining.from_pretrained(tmp_path / "ref").eval()
    ids, mask, types = _padded_batch(0, 5)
    with torch.inference_mode():
        a = ref(input_ids=ids, attention_mask=mask, token_type_ids=types)
        b = ours(ids, mask, types)
    torch.testing.assert_close(b.mlm_logits[mask.bool()], a.prediction_logits[mask.bool()], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.nsp_logits, a.seq_relationship_logits, rtol=1e-5, atol=1e-5)
    # and back: what we save, transformers loads with the same heads
    ours.save_pretrained(tmp_path / "ours")
    back = transformers.BertForPreTraining.from_pretrained(tmp_path / "ours").eval()
    with torch.inference_mode():
        c = back(input_ids=ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(c.prediction_logits, a.prediction_logits, rtol=1e-5, atol=1e-5)


def test_missing_heads_are_initialised_fresh_and_logged(tmp_path, caplog):
    import logging

    from ctxemb.modeling.pretraining_heads import EncoderForPretraining

    _reference("bert", 0).save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO, logger="ctxemb.modeling.pretraining_heads"):
        model = EncoderForPretraining.from_pretrained(tmp_path)
    assert "initialised fresh" in caplog.text
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
