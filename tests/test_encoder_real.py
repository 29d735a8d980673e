"""The real all-MiniLM-L6-v2 (and, marked slow, all-mpnet-base-v2) against transformers, plus bf16 and padding."""

import pytest
import torch
import torch.nn.functional as F

from ctxemb.embedding.embedder import Embedder
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.models.hub import resolve_model_dir

transformers = pytest.importorskip("transformers")

SENTENCES = [
    "He sat on the bank of the river and watched the water.",
    "She went to the bank to deposit her paycheck.",
    "The mouse ran under the table.",
    "Click the left mouse button twice.",
    "Unbelievably, the committee's decision was postponed again.",
    "Go.",
]


def _batch(tokenizer, texts):
    items = tokenizer.tokenize(texts)
    seqs = [tokenizer.with_specials(it.ids)[0] for it in items]
    T = max(map(len, seqs))
    ids = torch.full((len(seqs), T), tokenizer.pad_token_id)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


def _check_parity(name, texts):
    path = resolve_model_dir(name)
    ours = load_encoder(name)
    tok = load_tokenizer(name)
    ref = transformers.AutoModel.from_pretrained(str(path)).eval()
    ids, mask = _batch(tok, texts)
    # transformers' own tokenizer gives the same ids
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(path))
    hf_ids = hf_tok(texts, padding=True, return_tensors="pt")["input_ids"]
    assert torch.equal(hf_ids[:, :ids.shape[1]], ids)
    with torch.inference_mode():
        theirs = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        mine = ours(ids, mask)
    assert len(mine.hidden_states) == len(theirs.hidden_states)
    real = mask.bool()
    for a, b in zip(mine.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a[real], b[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parity
def test_minilm_matches_transformers(shared_data):
    lines = [l.strip() for l in (shared_data / "corpora/wikitext-2/valid.txt").open() if len(l.split()) > 5][:24]
    _check_parity("all-MiniLM-L6-v2", SENTENCES + lines)


@pytest.mark.parity
@pytest.mark.slow
def test_mpnet_matches_transformers():
    _check_parity("all-mpnet-base-v2", SENTENCES)


def test_bf16_per_token_cosine():
    fp32 = Embedder.from_pretrained("all-MiniLM-L6-v2")
    bf16 = fp32.with_config(precision="bf16")
    a = fp32.embed_tokens(SENTENCES, layers="all", layer_pooling="stack", output="torch", show_progress_bar=False)
    b = bf16.embed_tokens(SENTENCES, layers="all", layer_pooling="stack", output="torch", show_progress_bar=False)
    cos = torch.cat([F.cosine_similarity(x.vectors, y.vectors, dim=-1).flatten() for x, y in zip(a, b)])
    assert cos.min() >= 0.999


def test_sentence_alone_equals_sentence_in_padded_batch():
    emb = Embedder.from_pretrained("all-MiniLM-L6-v2")
    alone = emb.embed_tokens([SENTENCES[-1]], layers="all", layer_pooling="stack", show_progress_bar=False)[0]
    batch = emb.embed_tokens(SENTENCES, layers="all", layer_pooling="stack", show_progress_bar=False, batch_size=6)
    torch.testing.assert_close(torch.from_numpy(alone.vectors), torch.from_numpy(batch[-1].vectors),
                               rtol=1e-5, atol=1e-5)


def test_sentence_embeddings_match_sentence_transformers():
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(resolve_model_dir("all-MiniLM-L6-v2")), device="cpu")
    theirs = model.encode(SENTENCES, convert_to_numpy=True)  # this model normalises its output
    ours = Embedder.from_pretrained("all-MiniLM-L6-v2").embed_sentences(
        SENTENCES, layers=[-1], pooling="mean", normalize=True, show_progress_bar=False)
    torch.testing.assert_close(torch.from_numpy(ours), torch.from_numpy(theirs), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_mpnet_int8_keeps_every_word_of_a_sentence_with_an_attention_sink():
    # With outlier features above 20 only, the second comma of this WikiText-2 sentence came out of the int8 path
    # at cosine 0.006 to exact: in float32 its hidden state turns into an attention sink (massive activations in a
    # few features from layer 5 on) and in int8 it did not. The calibrated features above 6 keep it.
    text = ("The juveniles are rarely seen in the wild , and are poorly known , although they are known to be capable "
            "of digging extensive burrows .").split()
    exact = Embedder.from_pretrained("all-mpnet-base-v2")
    int8 = exact.with_config(precision="int8")
    a, b = (torch.from_numpy(e.embed_words([text], show_progress_bar=False)[0]) for e in (exact, int8))
    assert F.cosine_similarity(a, b, dim=-1).min() >= 0.99
