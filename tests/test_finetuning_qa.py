"""Extractive QA features (ctxemb.tasks.qa.features): context windows, answer labels, the collator and the exact
answer search, with the real all-MiniLM-L6-v2 tokenizer (no model) in BERT and RoBERTa layouts."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import torch

from ctxemb.tasks.qa.features import Answer, QACollator, QAFeature, best_answers, encode_qa
from ctxemb.tasks.qa.squad import QAExample
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.models.tokenization import Tokenizer

_WORDS_TEXT = ("the river bank sat on a money plant of cells and bats while she was singing quietly near old houses "
               "where people talked about weather markets boats riverbanks unbelievable naïve café résumé Zürich "
               "São Paulo's (München) co-operation 3.14 déjà-vu, «quoted» end. why? wow! 1,500 O'Brien")
WORDS = _WORDS_TEXT.split()
BERT_SPECIALS = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]",
                 "unk_token": "[UNK]"}


@pytest.fixture(scope="module")
def bert_tok():
    return load_tokenizer("all-MiniLM-L6-v2")


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tok(request, bert_tok):
    """The MiniLM tokenizer in its own layout and, with the same vocabulary, in RoBERTa's ``<s> q </s></s> c </s>``."""
    if request.param == "bert":
        return bert_tok
    return Tokenizer(bert_tok.backend, model_type="roberta", max_length=bert_tok.max_length,
                     special_tokens=BERT_SPECIALS)


def _random_examples(rng, n, n_words=300, answer_words=(1, 8)):
    out = []
    for k in range(n):
        words = [rng.choice(WORDS) for _ in range(n_words)]
        a = rng.randrange(n_words)
        b = min(n_words, a + rng.randint(*answer_words))
        context = " ".join(words)
        begin = len(" ".join(words[:a])) + (a > 0)
        text = " ".join(words[a:b])
        assert context[begin:begin + len(text)] == text
        q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + "?"
        out.append(QAExample(f"q{k}", "t", context, q, ((text, begin),)))
    return out


def _window_of(feature, ctx):
    """The context token range ``[start, stop)`` of a feature, found from its offsets (checked contiguous)."""
    offs = [o for o in feature.context_offsets if o is not None]
    start = ctx.offsets.index(offs[0])
    assert offs == ctx.offsets[start:start + len(offs)]
    return start, start + len(offs)


def _n_special(tok):
    return len(tok.with_specials([], [])[0])


# ---- (a) windows and labels ------------------------------------------------------------------------------------
def test_windows_tile_the_context_and_never_lose_an_answer(tok):
    rng = random.Random(0)
    examples = _random_examples(rng, 24)
    max_length, max_q = 64, 16
    contexts = tok.tokenize([ex.context for ex in examples])
    questions = [q.ids[:max_q] for q in tok.tokenize([ex.question for ex in examples])]
    n_guaranteed = n_crossing = 0
    for doc_stride in (16, 23, 32):
        features = encode_qa(tok, examples, max_length=max_length, doc_stride=doc_stride, max_query_length=max_q)
        by_example: dict[int, list[QAFeature]] = {}
        for f in features:
            by_example.setdefault(f.example_index, []).append(f)
        assert sorted(by_example) == list(range(len(examples)))
        for x, ex in enumerate(examples):
            ctx, q = contexts[x], questions[x]
            room = max_length - _n_special(tok) - len(q)
            windows = [_window_of(f, ctx) for f in by_example[x]]
            # Tiling: starts doc_stride apart from 0, at most `room` tokens each, the last ends at the context end.
            assert [s for s, _ in windows] == list(range(0, doc_stride * len(windows), doc_stride))
            assert all(0 < stop - start <= room for start, stop in windows)
            assert windows[-1][1] == len(ctx) and all(stop < len(ctx) for _, stop in windows[:-1])
            assert set().union(*(range(s, e) for s, e in windows)) == set(range(len(ctx)))
            # The model input is exactly the question and the window in the model's layout.
            for f, (s, e) in zip(by_example[x], windows):
                ids, types = tok.with_specials(q, ctx.ids[s:e])
                assert f.input_ids == ids and f.token_type_ids == types and len(f.context_offsets) == len(ids)
                assert len(ids) <= max_length
            # Labels: every window holding the answer whole points at exactly its tokens, the others at 0.
            text, begin = ex.answers[0]
            a, b = ctx.char_span_to_tokens(begin, begin + len(text))
            holders = 0
            for f, (s, e) in zip(by_example[x], windows):
                if s <= a and b <= e:
                    holders += 1
                    assert f.start_position > 0 and f.end_position >= f.start_position
                    span = ex.context[f.context_offsets[f.start_position][0]:f.context_offsets[f.end_position][1]]
                    assert span == text.strip()
                    assert f.end_position - f.start_position + 1 == b - a
                else:
                    assert (f.start_position, f.end_position) == (0, 0)
                    n_crossing += s < b and a < e  # this window holds only part of the answer
            if b - a <= room - doc_stride + 1:  # the documented guarantee
                assert holders >= 1
                n_guaranteed += 1
    assert n_guaranteed > 2 * len(examples)  # most answers are short enough for the guarantee
    assert n_crossing > 10  # and many straddle a window boundary


def test_short_context_is_one_window_and_unlabelled_features_have_no_positions(bert_tok):
    ex = QAExample("a", "t", "Short context here.", "What?", (("context", 6),))
    [f] = encode_qa(bert_tok, [ex], max_length=64, doc_stride=8, max_query_length=8)
    assert f.input_ids[-1] == bert_tok.sep_token_id and f.context_offsets[f.start_position] == (6, 13)
    [g] = encode_qa(bert_tok, [ex], max_length=64, doc_stride=8, max_query_length=8, with_labels=False)
    assert g.start_position is None and g.end_position is None and g.input_ids == f.input_ids


def test_no_answer_and_too_long_answer_give_cls_labels(bert_tok, caplog):
    words = ["river"] * 100
    context = " ".join(words)
    long_answer = " ".join(words[10:60])  # 50 tokens: longer than a window's room
    exs = [QAExample("none", "t", context, "Where?", ()),
           QAExample("long", "t", context, "Where?", ((long_answer, context.index(long_answer)),))]
    with caplog.at_level(logging.WARNING):
        feats = encode_qa(bert_tok, exs, max_length=40, doc_stride=10, max_query_length=8)
    assert all((f.start_position, f.end_position) == (0, 0) for f in feats)
    assert "1 of 2 examples have their gold answer whole in no window" in caplog.text


def test_long_questions_are_cut_and_logged(bert_tok, caplog):
    q = " ".join(["why"] * 30) + "?"
    ex = QAExample("a", "t", "the river bank", q, (("bank", 10),))
    with caplog.at_level(logging.WARNING):
        [f] = encode_qa(bert_tok, [ex], max_length=64, doc_stride=8, max_query_length=12)
    assert f.input_ids[1:13] == bert_tok.tokenize([q])[0].ids[:12] and f.input_ids[13] == bert_tok.sep_token_id
    assert "1 of 1 questions were longer than max_query_length=12" in caplog.text


# ---- (f) RoBERTa layout ---------------------------------------------------------------------------------------
def test_roberta_layout_positions(bert_tok):
    rob = Tokenizer(bert_tok.backend, model_type="roberta", special_tokens=BERT_SPECIALS)
    ex = QAExample("a", "t", "He sat on the bank of the river.", "Where did he sit?", (("the bank", 10),))
    [f] = encode_qa(rob, [ex], max_length=64, doc_stride=8, max_query_length=16)
    q, c = rob.tokenize([ex.question])[0], rob.tokenize([ex.context])[0]
    cls, sep = rob.cls_token_id, rob.sep_token_id
    assert f.input_ids == [cls, *q.ids, sep, sep, *c.ids, sep] and set(f.token_type_ids) == {0}
    first = len(q.ids) + 3
    assert f.context_offsets[:first] == [None] * first and f.context_offsets[-1] is None
    assert f.context_offsets[first:-1] == c.offsets
    assert (f.start_position, f.end_position) == (first + 3, first + 4)  # "the", "bank"
    [fb] = encode_qa(bert_tok, [ex], max_length=64, doc_stride=8, max_query_length=16)
    assert (fb.start_position, fb.end_position) == (first + 2, first + 3)  # one separator fewer in BERT's layout


# ---- collator --------------------------------------------------------------------------------------------------
def test_collator_pads_and_labels(bert_tok):
    rng = random.Random(1)
    feats = encode_qa(bert_tok, _random_examples(rng, 3, n_words=40), max_length=48, doc_stride=12,
                      max_query_length=8)
    batch = QACollator(bert_tok.pad_token_id)(feats)
    B, T = len(feats), max(len(f.input_ids) for f in feats)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions"}
    for k in ("input_ids", "attention_mask", "token_type_ids"):
        assert batch[k].shape == (B, T) and batch[k].dtype == torch.long
    for k in ("start_positions", "end_positions"):
        assert batch[k].shape == (B,) and batch[k].dtype == torch.long
    for i, f in enumerate(feats):
        n = len(f.input_ids)
        assert batch["input_ids"][i, :n].tolist() == f.input_ids
        assert (batch["input_ids"][i, n:] == bert_tok.pad_token_id).all()
        assert batch["attention_mask"][i].sum() == n and batch["start_positions"][i] == f.start_position
    unl = encode_qa(bert_tok, _random_examples(rng, 2, n_words=10), max_length=48, doc_stride=12,
                    max_query_length=8, with_labels=False)
    assert "start_positions" not in QACollator(0)(unl)
    with pytest.raises(ValueError, match="mix labelled and unlabelled"):
        QACollator(0)([feats[0], unl[0]])
    with pytest.raises(ValueError, match="empty"):
        QACollator(0)([])


# ---- (b) exact answer search -----------------------------------------------------------------------------------
def _brute_force(examples, features, start_logits, end_logits, max_answer_length):
    best = {}
    for f, feat in enumerate(features):
        pos = [p for p, o in enumerate(feat.context_offsets) if o is not None]
        for a, i in enumerate(pos):
            for j in pos[a:a + max_answer_length]:
                score = float(start_logits[f][i]) + float(end_logits[f][j])
                ex = examples[feat.example_index]
                if ex.id not in best or score > best[ex.id][0]:
                    b, e = feat.context_offsets[i][0], feat.context_offsets[j][1]
                    best[ex.id] = (score, ex.context[b:e], b, e)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_answers_equals_brute_force(bert_tok, seed):
    rng = random.Random(seed)
    gen = np.random.default_rng(seed)
    examples = _random_examples(rng, 4, n_words=rng.randint(20, 80))
    features = encode_qa(bert_tok, examples, max_length=40, doc_stride=rng.randint(5, 15), max_query_length=10)
    assert len(features) > len(examples)  # several windows per example
    starts, ends = [], []
    for f in features:
        pad = int(gen.integers(0, 5))  # batch padding beyond the feature: huge logits there must be ignored
        s = np.concatenate([gen.normal(size=len(f.input_ids)), np.full(pad, 1e6)])
        e = np.concatenate([gen.normal(size=len(f.input_ids)), np.full(pad, 1e6)])
        s[: f.context_offsets.index(next(o for o in f.context_offsets if o is not None))] = 50.0  # question/[CLS]
        starts.append(torch.tensor(s, dtype=torch.float32) if seed % 2 else s)
        ends.append(torch.tensor(e, dtype=torch.float32) if seed % 2 else e)
    for max_answer_length in (1, 3, 30):
        got = best_answers(examples, features, starts, ends, max_answer_length=max_answer_length)
        want = _brute_force(examples, features, starts, ends, max_answer_length)
        assert set(got) == set(want)
        for k, ans in got.items():
            score, text, b, e = want[k]
            assert (ans.text, ans.start_char, ans.end_char) == (text, b, e)
            assert ans.score == pytest.approx(score, abs=1e-5)
            assert ans.text == examples[int(k[1:])].context[ans.start_char:ans.end_char]


# ---- (c) an answer across a window boundary --------------------------------------------------------------------
def test_answer_across_a_window_boundary_is_recovered(bert_tok):
    words = [WORDS[k % 12] for k in range(60)]  # plain words: one token each
    context = " ".join(words)
    max_length, doc_stride, max_q = 32, 10, 8
    q = "where is it?"
    room = max_length - 3 - len(bert_tok.tokenize([q])[0].ids)
    a = room - 2  # tokens a..a+3: the first window holds only two of them, the second all four
    text = " ".join(words[a:a + 4])
    begin = len(" ".join(words[:a])) + 1
    ex = QAExample("x", "t", context, q, ((text, begin),))
    feats = encode_qa(bert_tok, [ex], max_length=max_length, doc_stride=doc_stride, max_query_length=max_q)
    assert (feats[0].start_position, feats[0].end_position) == (0, 0)
    holder = feats[1]
    assert ex.context[holder.context_offsets[holder.start_position][0]:
                      holder.context_offsets[holder.end_position][1]] == text
    gen = np.random.default_rng(0)
    starts = [gen.normal(scale=0.1, size=len(f.input_ids)) for f in feats]
    ends = [gen.normal(scale=0.1, size=len(f.input_ids)) for f in feats]
    # The cut-off part in window 0 is almost as attractive as the whole answer in window 1.
    p0 = next(p for p, o in enumerate(feats[0].context_offsets) if o is not None and o[0] == begin)
    starts[0][p0], ends[0][len(feats[0].input_ids) - 2] = 9.0, 9.0
    starts[1][holder.start_position], ends[1][holder.end_position] = 10.0, 10.0
    [ans] = best_answers([ex], feats, starts, ends).values()
    assert ans == Answer(text, begin, begin + len(text), pytest.approx(20.0, abs=0.5))


# ---- (d) character offsets with accents and punctuation --------------------------------------------------------
def test_offsets_map_back_to_exact_characters(bert_tok):
    context = ("À São Paulo, l'équipe «Ölfeld» a payé 3,50 € — naïvement! Then Zürich's café (déjà-vu) "
               "cost 1,500 CHF; O'Brien said: «Très bien…» and left.")
    cases = ["São Paulo", "«Ölfeld»", "3,50 €", "naïvement!", "Zürich's", "(déjà-vu)", "O'Brien", "«Très bien…»"]
    examples = [QAExample(f"d{k}", "t", context, "Quoi?", ((c, context.index(c)),)) for k, c in enumerate(cases)]
    feats = encode_qa(bert_tok, examples, max_length=24, doc_stride=4, max_query_length=4)
    covered = set()
    for f in feats:
        for o in f.context_offsets:
            if o is not None:
                assert 0 <= o[0] < o[1] <= len(context) and context[o[0]:o[1]].strip() == context[o[0]:o[1]]
                covered.update(range(*o))
    assert covered == {i for i, ch in enumerate(context) if not ch.isspace()}  # every visible character
    starts, ends = [], []
    for f in feats:
        s, e = np.zeros(len(f.input_ids)), np.zeros(len(f.input_ids))
        if f.start_position:  # peak at the gold labels in every window that holds the answer
            s[f.start_position], e[f.end_position] = 5.0, 5.0
        starts.append(s)
        ends.append(e)
    got = best_answers(examples, feats, starts, ends)
    for ex in examples:
        text, begin = ex.answers[0]
        assert got[ex.id] == Answer(text, begin, begin + len(text), 10.0)


# ---- (e) errors --------------------------------------------------------------------------------------------------
def test_argument_errors(bert_tok):
    ex = QAExample("a", "t", "the river bank", "where?", (("bank", 10),))
    kw = {"max_length": 32, "doc_stride": 8, "max_query_length": 8}
    with pytest.raises(ValueError, match="doc_stride must be >= 1; got 0"):
        encode_qa(bert_tok, [ex], **{**kw, "doc_stride": 0})
    with pytest.raises(ValueError, match=r"doc_stride must be <= 21 \(the fewest context tokens per window"):
        encode_qa(bert_tok, [ex], **{**kw, "doc_stride": 22})
    with pytest.raises(ValueError, match="max_length 11 leaves no room for context"):
        encode_qa(bert_tok, [ex], **{**kw, "max_length": 11})
    with pytest.raises(ValueError, match=r"max_length must be <= 512 \(the tokenizer's max_length\)"):
        encode_qa(bert_tok, [ex], **{**kw, "max_length": 513})
    with pytest.raises(TypeError, match="doc_stride must be an int"):
        encode_qa(bert_tok, [ex], **{**kw, "doc_stride": 8.0})
    with pytest.raises(ValueError, match="max_query_length must be >= 1"):
        encode_qa(bert_tok, [ex], **{**kw, "max_query_length": 0})
    with pytest.raises(ValueError, match="examples is empty"):
        encode_qa(bert_tok, [], **kw)
    with pytest.raises(ValueError, match=r"examples\[0\] \(id 'b'\) has an empty question"):
        encode_qa(bert_tok, [QAExample("b", "t", "the bank", "  ", ())], **kw)
    with pytest.raises(ValueError, match="does not match the context at character 9"):
        encode_qa(bert_tok, [QAExample("c", "t", "the river bank", "q?", (("bank", 9),))], **kw)
    # ... while unlabelled encoding does not look at answers.
    assert encode_qa(bert_tok, [QAExample("c", "t", "the river bank", "q?", (("bank", 9),))], with_labels=False,
                     **kw)[0].start_position is None

    feats = encode_qa(bert_tok, [ex], **kw)
    n = len(feats[0].input_ids)
    good = [np.zeros(n)]
    with pytest.raises(ValueError, match="start_logits must hold one array per feature: expected 1, got 2"):
        best_answers([ex], feats, good * 2, good)
    with pytest.raises(ValueError, match=f"end_logits\\[0\\] has {n - 1} positions: expected at least"):
        best_answers([ex], feats, good, [np.zeros(n - 1)])
    with pytest.raises(ValueError, match=r"must be 1-D, got shape"):
        best_answers([ex], feats, [np.zeros((1, n))], good)
    bad = np.zeros(n)
    bad[feats[0].start_position] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity at a context position"):
        best_answers([ex], feats, [bad], good)
    masked = np.zeros(n)
    masked[0] = -np.inf  # a mask over [CLS] is fine
    assert best_answers([ex], feats, [masked], good)["a"].text
    with pytest.raises(ValueError, match="max_answer_length must be >= 1"):
        best_answers([ex], feats, good, good, max_answer_length=0)
    with pytest.raises(ValueError, match=r"examples\[1\] \(id 'z'\) has no feature"):
        best_answers([ex, QAExample("z", "t", "x", "y", ())], feats, good, good)
    with pytest.raises(ValueError, match=r"features\[0\].example_index is 0: expected an index into the 0 examples"):
        best_answers([], feats, good, good)


def test_ties_go_to_the_earliest_window_start_and_end(bert_tok):
    ex = _random_examples(random.Random(5), 1, n_words=60)[0]
    feats = encode_qa(bert_tok, [ex], max_length=32, doc_stride=8, max_query_length=8)
    assert len(feats) > 2
    zeros = [np.zeros(len(f.input_ids)) for f in feats]
    [ans] = best_answers([ex], feats, zeros, zeros).values()
    first = next(o for o in feats[0].context_offsets if o is not None)
    assert ans == Answer(ex.context[first[0]:first[1]], first[0], first[1], 0.0)
