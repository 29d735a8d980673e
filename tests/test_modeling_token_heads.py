"""Token- and span-level heads: transformers parity (token classification, QA), save/load with identical outputs,
word decoding (first subword, mean of subwords, CRF), span representations against a direct computation, and that
every head learns a tiny synthetic task."""

import json

import pytest
import torch

from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.token_classification import IGNORE_INDEX, EncoderForTokenClassification
from ctxemb.modeling.question_answering import EncoderForQuestionAnswering
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.training.optim import make_optimizer
from tests.test_modeling_task_heads import MODEL_TYPES, _batch, _config, _perturbed

BIO = {0: "O", 1: "B-X", 2: "I-X", 3: "B-Y", 4: "I-Y"}
SPAN_LABELS = {0: "NULL", 1: "X", 2: "Y"}


def _tagger(model_type="bert", crf=False, seed=0):
    torch.manual_seed(seed)
    return _perturbed(EncoderForTokenClassification(Encoder(_config(model_type)), id2label=BIO, crf=crf)).eval()


def _span_model(boundary="tokens", summary="mean", seed=0):
    torch.manual_seed(seed)
    return _perturbed(EncoderForSpanClassification(Encoder(_config("bert")), id2label=SPAN_LABELS,
                                                   boundary=boundary, summary=summary)).eval()


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


# ---- transformers parity ----------------------------------------------------------------------------------------

@pytest.mark.parity
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_token_classifier_loads_in_transformers_with_equal_logits_and_loss(tmp_path, transformers, model_type):
    model = _tagger(model_type)
    model.save_pretrained(tmp_path)
    ref = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert type(ref).__name__ == json.loads((tmp_path / "config.json").read_text())["architectures"][0]
    assert ref.config.id2label == BIO
    ids, mask = _batch(model_type)
    labels = torch.randint(0, 5, ids.shape)
    labels[mask == 0] = IGNORE_INDEX
    ours = model(ids, mask, labels=labels)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parity
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_qa_model_loads_in_transformers_with_equal_logits_and_loss(tmp_path, transformers, model_type):
    torch.manual_seed(0)
    model = _perturbed(EncoderForQuestionAnswering(Encoder(_config(model_type)))).eval()
    model.save_pretrained(tmp_path)
    ref = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    ids, mask = _batch(model_type)
    start, end = torch.tensor([1, 2, 0]), torch.tensor([3, 4, 20])  # 20 is outside: ignored by both
    ours = model(ids, mask, start_positions=start, end_positions=end)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=end)
    torch.testing.assert_close(ours.start_logits, theirs.start_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.end_logits, theirs.end_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parity
def test_transformers_token_classifier_loads_here(tmp_path, transformers):
    from tests.test_modeling_task_heads import TINY
    torch.manual_seed(0)
    cfg = transformers.BertConfig(type_vocab_size=2, id2label=BIO, label2id={v: k for k, v in BIO.items()}, **TINY)
    ref = _perturbed(transformers.AutoModelForTokenClassification.from_config(cfg)).eval()
    ref.save_pretrained(tmp_path)
    model = EncoderForTokenClassification.from_pretrained(tmp_path)
    ids, mask = _batch("bert")
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask).logits, ref(input_ids=ids, attention_mask=mask).logits,
                                   rtol=1e-5, atol=1e-5)


# ---- save / load -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["softmax", "crf", "span-ffn-attention", "qa"])
def test_save_load_gives_identical_outputs_and_the_encoder_loads_alone(tmp_path, kind):
    from ctxemb.modeling.loading import load_encoder
    if kind in ("softmax", "crf"):
        model, cls = _tagger(crf=kind == "crf"), EncoderForTokenClassification
    elif kind == "qa":
        torch.manual_seed(0)
        model, cls = _perturbed(EncoderForQuestionAnswering(Encoder(_config()))).eval(), EncoderForQuestionAnswering
    else:
        model, cls = _span_model("ffn", "attention"), EncoderForSpanClassification
    model.save_pretrained(tmp_path)
    loaded = cls.from_pretrained(tmp_path).eval()
    ids, mask = _batch()
    kw = {}
    if kind.startswith("span"):
        kw = dict(span_starts=torch.tensor([[1, 2], [1, 3], [4, 4]]), span_ends=torch.tensor([[2, 5], [1, 5], [4, 6]]),
                  span_mask=torch.ones(3, 2, dtype=torch.long))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask, **kw).logits, model(ids, mask, **kw).logits, rtol=0, atol=0)
    if kind == "crf":
        ws, we, wm = torch.tensor([[1, 2, 4]] * 3), torch.tensor([[2, 4, 5]] * 3), torch.ones(3, 3, dtype=torch.long)
        logits = model(ids, mask).logits
        assert loaded.decode_words(logits, ws, we, wm) == model.decode_words(logits, ws, we, wm)
        assert loaded.crf.allowed_transitions.equal(model.crf.allowed_transitions)
    encoder = load_encoder(tmp_path)  # the Embedder's loader: the encoder alone, heads set aside
    torch.testing.assert_close(encoder(ids, mask).last_hidden_state, model.encoder(ids, mask).last_hidden_state,
                               rtol=0, atol=0)


def test_from_pretrained_refuses_contradicting_options(tmp_path):
    _tagger(crf=True).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="crf=False contradicts"):
        EncoderForTokenClassification.from_pretrained(tmp_path, crf=False)
    with pytest.raises(ValueError, match="id2label contradicts"):
        EncoderForTokenClassification.from_pretrained(tmp_path, id2label={0: "O", 1: "B-Z", 2: "I-Z"})



def test_new_head_ignores_the_saved_head(tmp_path):
    _tagger(crf=True).save_pretrained(tmp_path)
    labels = {0: "O", 1: "B-Z", 2: "I-Z"}
    tagger = EncoderForTokenClassification.from_pretrained(tmp_path, id2label=labels, crf=False, new_head=True)
    assert tagger.id2label == labels and tagger.crf is None
    span = EncoderForSpanClassification.from_pretrained(tmp_path, id2label={0: "NULL", 1: "Z"}, new_head=True)
    qa = EncoderForQuestionAnswering.from_pretrained(tmp_path, new_head=True)
    ids, mask = _batch()
    for model in (tagger, span, qa):
        torch.testing.assert_close(model.encoder(ids, mask).last_hidden_state,
                                   EncoderForTokenClassification.from_pretrained(tmp_path).encoder(
                                       ids, mask).last_hidden_state, rtol=0, atol=0)

def test_constructor_errors():
    enc = Encoder(_config())
    with pytest.raises(ValueError, match="keys 0..1"):
        EncoderForTokenClassification(enc, id2label={0: "O", 2: "B-X"})
    with pytest.raises(ValueError, match="must be 'NULL'"):
        EncoderForSpanClassification(Encoder(_config()), id2label={0: "X", 1: "NULL"})
    with pytest.raises(ValueError, match="summary must be"):
        EncoderForSpanClassification(Encoder(_config()), id2label=SPAN_LABELS, summary="max")


# ---- decoding and span vectors ---------------------------------------------------------------------------------

def test_decode_words_first_and_mean_of_subword_distributions():
    model = _tagger()
    logits = torch.zeros(1, 6, 5)
    # word 0 = tokens 1..2, word 1 = tokens 3..5
    logits[0, 1, 1] = 5.0            # first subword of word 0 says B-X
    logits[0, 2, 3] = 9.0            # second says B-Y strongly
    logits[0, 3, 0] = 1.0            # word 1: first subword mildly O ...
    logits[0, 4, 2] = logits[0, 5, 2] = 6.0  # ... the other two strongly I-X
    ws, we, wm = torch.tensor([[1, 3]]), torch.tensor([[3, 6]]), torch.ones(1, 2, dtype=torch.long)
    assert model.decode_words(logits, ws, we, wm, decoding="first") == [[1, 0]]
    probs = logits.softmax(-1)
    expect = [int(probs[0, 1:3].mean(0).argmax()), int(probs[0, 3:6].mean(0).argmax())]
    assert model.decode_words(logits, ws, we, wm, decoding="mean") == [expect] == [[3, 2]]
    with pytest.raises(ValueError, match="CRF decodes"):
        _tagger(crf=True).decode_words(logits, ws, we, wm, decoding="mean")


@pytest.mark.parametrize("boundary,summary", [("tokens", "mean"), ("ffn", "mean"), ("tokens", "attention")])
def test_span_vectors_match_a_direct_computation(boundary, summary):
    model = _span_model(boundary, summary)
    head = model.span_classifier
    z = torch.randn(2, 7, 32)
    starts, ends = torch.tensor([[0, 2, 5], [1, 1, 3]]), torch.tensor([[0, 4, 6], [1, 6, 3]])
    got = head(z, starts, ends)
    for b in range(2):
        for s in range(3):
            i, j = int(starts[b, s]), int(ends[b, s])
            zi, zj, inside = z[b, i], z[b, j], z[b, i:j + 1]
            if boundary == "ffn":
                zi, zj = head.start_ffn(zi), head.end_ffn(zj)
            if summary == "mean":
                g = inside.mean(0)
            else:
                g = head.attention_score(inside).squeeze(-1).softmax(0) @ inside
            torch.testing.assert_close(got[b, s], head.ffn(torch.cat([zi, zj, g])), rtol=1e-5, atol=1e-5)


# ---- each head learns a tiny task ------------------------------------------------------------------------------

def _tagging_task(seed, B=32, T=8):
    """Token 7 starts an X entity and token 8 continues it; everything else is O. Tokens: [CLS] w1..wT [SEP]."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(9, 40, (B, T), generator=g)
    words[torch.rand(B, T, generator=g) < 0.2] = 7
    follow = torch.rand(B, T, generator=g) < 0.7
    for t in range(1, T):
        words[:, t] = torch.where((words[:, t - 1] == 7) & follow[:, t], torch.full_like(words[:, t], 8), words[:, t])
    tags = torch.zeros(B, T, dtype=torch.long)
    tags[words == 7] = 1
    for t in range(1, T):
        tags[:, t] = torch.where((words[:, t] == 8) & (tags[:, t - 1] > 0), torch.full_like(tags[:, t], 2),
                                 tags[:, t])
    ids = torch.cat([torch.full((B, 1), 2), words, torch.full((B, 1), 3)], 1)
    labels = torch.cat([torch.full((B, 1), IGNORE_INDEX), tags, torch.full((B, 1), IGNORE_INDEX)], 1)
    ws = torch.arange(1, T + 1).expand(B, T)
    return ids, labels, tags, ws


@pytest.mark.parametrize("crf", [False, True])
def test_token_heads_learn_a_tiny_bio_task(crf):
    torch.manual_seed(0)
    model = EncoderForTokenClassification(Encoder(_config()), id2label=BIO, crf=crf)
    opt = make_optimizer(model, lr=3e-3, weight_decay=0.0)
    model.train()
    wm = torch.ones(32, 8, dtype=torch.long)
    for step in range(80):
        ids, labels, tags, ws = _tagging_task(step)
        loss = model(ids, labels=labels, word_starts=ws, word_mask=wm, word_labels=tags).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ids, _, tags, ws = _tagging_task(1000, B=128)
    with torch.no_grad():
        pred = model.decode_words(model(ids).logits, ws, ws + 1, torch.ones(128, 8, dtype=torch.long))
    accuracy = float((torch.tensor(pred) == tags).float().mean())
    assert accuracy >= 0.99, accuracy


@pytest.mark.parametrize("boundary,summary", [("tokens", "mean"), ("ffn", "attention")])
def test_span_head_learns_a_tiny_span_task(boundary, summary):
    """Spans 7 8{0,2} are X, a 9 is Y, everything else NULL."""
    torch.manual_seed(0)
    model = EncoderForSpanClassification(Encoder(_config()), id2label=SPAN_LABELS, boundary=boundary,
                                         summary=summary, max_span_length=3)
    opt = make_optimizer(model, lr=3e-3, weight_decay=0.0)

    def batch(seed, B=32, T=8):
        g = torch.Generator().manual_seed(seed)
        words = torch.randint(10, 40, (B, T), generator=g)
        u = torch.rand(B, T, generator=g)
        words[u < 0.25] = 7
        words[(u >= 0.25) & (u < 0.35)] = 9
        spans = [(i, j) for i in range(T) for j in range(i, min(T, i + 3))]
        labels = torch.zeros(B, len(spans), dtype=torch.long)
        for b in range(B):
            w = words[b].tolist()
            for i in range(T):  # an X entity: 7 and up to two 8s right after it
                if w[i] == 7:
                    n = int(torch.randint(0, 3, (1,), generator=g))
                    for k in range(i + 1, min(T, i + 1 + n)):
                        if w[k] != 7:
                            w[k] = 8
            for k, (i, j) in enumerate(spans):
                run = w[i:j + 1]
                if run[0] == 7 and all(x == 8 for x in run[1:]) and (j + 1 == T or w[j + 1] != 8):
                    labels[b, k] = 1
                elif i == j and w[i] == 9:
                    labels[b, k] = 2
            words[b] = torch.tensor(w)
        ids = torch.cat([torch.full((B, 1), 2), words, torch.full((B, 1), 3)], 1)
        starts = torch.tensor([i + 1 for i, _ in spans]).expand(B, -1)
        ends = torch.tensor([j + 1 for _, j in spans]).expand(B, -1)
        return ids, starts, ends, torch.ones_like(starts), labels

    model.train()
    for step in range(300):  # NULL dominates: entities are learned after ~250 steps
        ids, s, e, m, y = batch(step)
        loss = model(ids, span_starts=s, span_ends=e, span_mask=m, span_labels=y).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ids, s, e, m, y = batch(1000, B=128)
    with torch.no_grad():
        pred = model(ids, span_starts=s, span_ends=e, span_mask=m).logits.argmax(-1)
    assert float((pred == y).float().mean()) >= 0.99
    entity = y > 0
    assert float((pred[entity] == y[entity]).float().mean()) >= 0.95


def test_qa_head_learns_to_point_at_a_marked_span():
    """The answer starts at token 7 and ends at the next token 8."""
    torch.manual_seed(0)
    model = EncoderForQuestionAnswering(Encoder(_config()))
    opt = make_optimizer(model, lr=3e-3, weight_decay=0.0)

    def batch(seed, B=32, T=12):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(9, 40, (B, T), generator=g)
        start = torch.randint(1, T - 4, (B,), generator=g)
        length = torch.randint(0, 3, (B,), generator=g)
        end = start + length + 1
        ids[torch.arange(B), start] = 7
        ids[torch.arange(B), end] = 8
        return ids, start, end

    model.train()
    for step in range(80):
        ids, s, e = batch(step)
        loss = model(ids, start_positions=s, end_positions=e).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ids, s, e = batch(1000, B=128)
    with torch.no_grad():
        out = model(ids, start_positions=s, end_positions=e)
    assert out.metrics["span_accuracy"] >= 0.99
