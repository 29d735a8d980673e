import pytest
import torch

from ctxemb.embedding.embedder import Embedder
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.models.tokenization import plan_windows
from tests.helpers import write_tiny_model


@pytest.mark.parametrize("n,w", [(5, 8), (9, 8), (17, 8), (100, 10), (1000, 510), (11, 2)])
def test_windows_tile_the_text(n, w):
    plan = plan_windows(n, w)
    assert plan[0][2] == 0 and plan[-1][3] == n
    for (s, e, ks, ke), nxt in zip(plan, plan[1:] + [None]):
        assert 0 <= s <= ks < ke <= e <= n and e - s <= w
        if nxt is not None:
            assert ke == nxt[2]


def test_word_spans_and_offsets(tmp_path):
    tok = load_tokenizer(write_tiny_model(tmp_path / "m"))
    [item] = tok.tokenize(["the banks, river"])
    assert item.words == ["the", "banks", ",", "river"]
    assert item.word_spans[1] == (1, 3)  # bank ##s
    assert item.char_span_to_tokens(4, 9) == (1, 3)
    [words] = tok.tokenize_words([["the", "banks", "sat on"]])
    assert words.word_spans == [(0, 1), (1, 3), (3, 5)]


def test_pair_layout(tmp_path):
    tok = load_tokenizer(write_tiny_model(tmp_path / "m"))
    ids, types = tok.with_specials([10, 11], [12])
    assert ids == [tok.cls_token_id, 10, 11, tok.sep_token_id, 12, tok.sep_token_id]
    assert types == [0, 0, 0, 0, 1, 1]
    rtok = load_tokenizer(write_tiny_model(tmp_path / "r", model_type="roberta"))
    ids, types = rtok.with_specials([10], [12])
    assert ids == [rtok.cls_token_id, 10, rtok.sep_token_id, rtok.sep_token_id, 12, rtok.sep_token_id]
    assert set(types) == {0}


@pytest.mark.parametrize("model_type", ["bert", "mpnet"])
def test_long_text_gets_every_token_from_its_window(tmp_path, model_type):
    d = write_tiny_model(tmp_path / "m", model_type=model_type, max_position_embeddings=20)
    emb = Embedder.from_pretrained(d, layers=[-1])
    max_tokens = emb.tokenizer.max_length
    words = ("the bank of the river sat on a money plant " * 8).split()
    [item] = emb.tokenizer.tokenize_words([words])
    assert len(item) > 3 * max_tokens
    [vecs] = emb.embed_words([words], show_progress_bar=False, output="torch")
    assert vecs.shape == (len(words), 32)  # every word has a vector
    # each kept token equals the same window run on its own
    enc = load_encoder(d)
    [w0, w1] = emb.tokenizer.windows([item])[:2]
    ids, _ = emb.tokenizer.with_specials(item.ids[w1.start:w1.stop])
    with torch.inference_mode():
        alone = enc(torch.tensor([ids])).last_hidden_state[0, 1:-1]
    [tokens] = emb.embed_tokens([" ".join(words)], show_progress_bar=False, output="torch")
    torch.testing.assert_close(tokens.vectors[w1.keep_start:w1.keep_stop],
                               alone[w1.keep_start - w1.start:w1.keep_stop - w1.start], rtol=1e-5, atol=1e-5)


def _spans_word_by_word(tok, sentence):
    """tokenize_words' spans by the definition: each word's own tokens, one after another (the unknown token for a
    word without any)."""
    ids, spans = [], []
    for word in sentence:
        toks = tok.backend.encode([word], is_pretokenized=True, add_special_tokens=False).ids or [tok.unk_token_id]
        spans.append((len(ids), len(ids) + len(toks)))
        ids += toks
    return ids, spans


@pytest.mark.parametrize("model", ["all-MiniLM-L6-v2", pytest.param("all-mpnet-base-v2", marks=pytest.mark.slow)])
def test_word_spans_equal_the_word_by_word_definition_on_real_text(model):
    from benchmarks._common import wikitext_sentences

    tok = load_tokenizer(model)
    sentences = [s.split() for s in wikitext_sentences(300)]
    sentences += [["naïve", "café", "\u200b", "日本語", "x"], ["a", "\x07", "b"], ["Ⅻ", "ﬁne", "ß"]]
    for sentence, item in zip(sentences, tok.tokenize_words(sentences)):
        assert (item.ids, item.word_spans) == _spans_word_by_word(tok, sentence), sentence
