"""The transformers backend: a tiny random DeBERTa-v2 checkpoint (built and saved by transformers, no download) runs
behind the Embedder, and its word and sentence vectors equal a hand-written reference over transformers'
``output_hidden_states``; backend choice, forcing, refused precisions and the tokenizer errors."""

import sys

import numpy as np
import pytest
import torch

from ctxemb.embedding.embedder import Embedder
from ctxemb.modeling.loading import choose_backend, load_encoder, load_tokenizer
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.transformers_backend import TransformersEncoder, import_transformers
from tests.helpers import write_tiny_model

transformers = pytest.importorskip("transformers")

WORDS = "the bank river money sat on of he she a".split()
SENTENCES = [["the", "bank", "sat", "on", "xyz"], ["she", "sat"], ["money", "of", "a", "river", "bank", "!", "he"]]


def _deberta_dir(path, seed=0):
    """A 4-layer DeBERTa-v2 (relative attention, c2p and p2c) with a small Unigram vocabulary; all parameters
    perturbed so that no LayerNorm or bias is trivial."""
    vocab = [("[PAD]", 0.0), ("[UNK]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)]
    vocab += [("▁" + w, -2.0) for w in WORDS] + [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz.,!?"] + [("▁", -3.0)]
    tok = transformers.DebertaV2Tokenizer(vocab=vocab)
    torch.manual_seed(seed)
    cfg = transformers.DebertaV2Config(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=4,
                                       num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                       relative_attention=True, position_buckets=8, max_relative_positions=16,
                                       pos_att_type=["p2c", "c2p"], position_biased_input=False, type_vocab_size=0,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    model = transformers.DebertaV2Model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path, model.eval(), transformers.AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def deberta(tmp_path_factory):
    return _deberta_dir(tmp_path_factory.mktemp("deberta"))


def _reference_words(model, tok, words, layers):
    """Word vectors by hand: transformers' hidden states of the single sentence, the given layers averaged, each
    word's subword tokens averaged (word_ids from the fast tokenizer)."""
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        states = model(**enc, output_hidden_states=True).hidden_states
    h = torch.stack([states[i][0] for i in layers]).mean(0)  # (T, H)
    word_ids = enc.word_ids()
    return torch.stack([h[[t for t, w in enumerate(word_ids) if w == j]].mean(0) for j in range(len(words))])


def test_auto_backend_runs_deberta_on_transformers(deberta):
    path, _, _ = deberta
    assert choose_backend(path) == "transformers"
    emb = Embedder.from_pretrained(path)
    assert isinstance(emb.encoder, TransformersEncoder)
    assert (emb.num_layers, emb.hidden_size, emb.config.precision) == (4, 32, "fp32")


@pytest.mark.parametrize("layers", [(-4, -3, -2, -1), (0,), (2, 4)])
def test_word_vectors_equal_a_reference_over_output_hidden_states(deberta, layers):
    path, model, tok = deberta
    emb = Embedder.from_pretrained(path, layers=layers)
    got = emb.embed_words(SENTENCES, show_progress_bar=False, batch_size=3)  # one padded batch
    for words, vecs in zip(SENTENCES, got):
        want = _reference_words(model, tok, words, [i % 5 for i in layers]).numpy()
        assert vecs.shape == want.shape
        assert np.abs(vecs - want).max() <= 1e-5


def test_sentence_vectors_and_token_offsets_equal_the_reference(deberta):
    path, model, tok = deberta
    emb = Embedder.from_pretrained(path)
    texts = ["the bank sat on xyz.", "she sat"]
    got = emb.embed_sentences(texts, layers=[-1], show_progress_bar=False)
    for text, vec in zip(texts, got):
        enc = tok(text, return_tensors="pt")
        with torch.inference_mode():
            want = model(**enc, output_hidden_states=True).hidden_states[-1][0].mean(0)
        assert np.abs(vec - want.numpy()).max() <= 1e-5
    tokens = emb.embed_tokens(texts[:1], layers=[-1], show_progress_bar=False)[0]
    start, stop = tokens.tokenized.char_span_to_tokens(4, 8)  # "bank"
    assert tok.convert_ids_to_tokens(tokens.tokenized.ids[start:stop]) == ["▁bank"]


def test_backend_can_be_forced_both_ways(tmp_path, deberta):
    native_dir = write_tiny_model(tmp_path / "bert", num_hidden_layers=3)
    native = Embedder.from_pretrained(native_dir)
    forced = Embedder.from_pretrained(native_dir, backend="transformers")
    assert isinstance(native.encoder, Encoder) and isinstance(forced.encoder, TransformersEncoder)
    sentences = [["the", "river", "bank"], ["he", "sat", "on", "a", "plant"]]
    for a, b in zip(native.embed_words(sentences, show_progress_bar=False),
                    forced.embed_words(sentences, show_progress_bar=False)):
        assert np.abs(a - b).max() <= 1e-5
    with pytest.raises(ValueError, match=r"'deberta-v2' is not supported; supported model types: .*modernbert.*"
                                         r"backend='transformers'"):
        load_encoder(deberta[0], backend="native")
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'native', 'transformers'; got 'hf'"):
        Embedder.from_pretrained(native_dir, backend="hf")


def test_precisions_on_the_transformers_backend(deberta):
    path = deberta[0]
    with pytest.raises(ValueError, match="precision 'int8' is not available on the transformers backend"):
        Embedder.from_pretrained(path, precision="int8")
    with pytest.raises(ValueError, match="precision 'onnx-fp32' is not available on the transformers backend"):
        Embedder.from_pretrained(path, precision="onnx-fp32")
    assert Embedder.from_pretrained(path, precision="auto").config.precision == "fp32"
    exact = Embedder.from_pretrained(path).embed_words(SENTENCES[:1], show_progress_bar=False)[0]
    bf16 = Embedder.from_pretrained(path, precision="bf16").embed_words(SENTENCES[:1], show_progress_bar=False)[0]
    cos = (exact * bf16).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cos.min() > 0.99 and not np.array_equal(exact, bf16)


def test_a_tokenizer_without_offsets_is_refused_naming_what_word_pooling_needs(tmp_path, deberta):
    import shutil

    d = tmp_path / "slow"
    shutil.copytree(deberta[0], d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    transformers.ByT5Tokenizer().save_pretrained(d)  # a Python tokenizer: no offsets, no word ids
    with pytest.raises(ValueError, match=r"ByT5Tokenizer\) is a Python tokenizer without character offsets.*"
                                         r"word-level pooling needs a fast tokenizer"):
        load_tokenizer(d)


def test_weights_that_do_not_fit_the_config_are_refused(tmp_path, deberta):
    import shutil

    d = tmp_path / "broken"
    shutil.copytree(deberta[0], d)
    from safetensors.torch import load_file, save_file

    state = load_file(str(d / "model.safetensors"))
    save_file({k: v for k, v in state.items() if "layer.3." not in k}, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match=r"does not hold the weights .*\(20 missing weights: encoder\.layer\.3\."):
        load_encoder(d)


def test_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"ctxemb\[transformers\]"):
        import_transformers()
