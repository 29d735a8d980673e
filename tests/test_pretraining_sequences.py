"""Model inputs from documents: BERT's NSP pairs, RoBERTa's packing, word ids, and the collator."""

import random
from collections import defaultdict

import numpy as np
import pytest
import torch

from ctxemb.modeling.loading import load_tokenizer
from ctxemb.tasks.pretraining.batches import PretrainingBatches
from ctxemb.tasks.pretraining.sequences import Instance, collate_instances
from ctxemb.tasks.pretraining.shards import build_token_shards
from tests.helpers import WORDS, write_token_corpus


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tok):
    return write_token_corpus(tmp_path_factory.mktemp("corpus"), tok)


def _epoch(source, epoch=0):
    return [x for w in range(source.n_windows) for x in source.window_instances(epoch, w)]



# ---- NSP ------------------------------------------------------------------------------------------------------
def test_nsp_pairs(corpus):
    docs, sh = corpus
    src = PretrainingBatches(sh, objective="nsp", max_len=40, batch_size=8, seed=3, shuffle_window=16)
    insts = _epoch(src) + _epoch(src, 1)
    cls, sep = sh.cls_token_id, sh.sep_token_id
    labels = defaultdict(list)
    for x in insts:
        ids = x.input_ids
        assert len(ids) <= 40
        seps = np.flatnonzero(ids == sep)
        assert ids[0] == cls and len(seps) == 2 and seps[-1] == len(ids) - 1
        la = seps[0] - 1
        np.testing.assert_array_equal(x.token_type_ids, (np.arange(len(ids)) > seps[0]).astype(int))
        np.testing.assert_array_equal(x.word_ids == -1, np.isin(np.arange(len(ids)), [0, seps[0], len(ids) - 1]))
        # the segments are the documents' tokens
        (da, a0, a1), (db, b0, b1) = x.origin["a_tokens"], x.origin["b_tokens"]
        assert ids[1:1 + la].tolist() == sh.document(da).tokens[a0:a1].tolist()
        assert ids[seps[0] + 1:-1].tolist() == sh.document(db).tokens[b0:b1].tolist()
        assert la >= 1 and len(ids) - seps[0] - 2 >= 1
        (doc_a, s0, s1), (doc_b, t0, t1) = x.origin["a"], x.origin["b"]
        # ... namely whole sentences s0..s1 of doc_a and t0..t1 of doc_b, trimmed only as far as needed to fit
        fa, ba, fb, bb = x.origin["trim"]
        offs_a, offs_b = sh.document(doc_a).sentence_offsets, sh.document(doc_b).sentence_offsets
        assert (da, a0, a1) == (doc_a, offs_a[s0] + fa, offs_a[s1] - ba)
        assert (db, b0, b1) == (doc_b, offs_b[t0] + fb, offs_b[t1] - bb)
        untrimmed = offs_a[s1] - offs_a[s0] + offs_b[t1] - offs_b[t0]
        assert fa + ba + fb + bb == max(0, untrimmed - 37)
        if x.next_sentence_label == 0:  # IsNext: B really follows A in the same document
            assert doc_a == doc_b and s1 == t0 and s0 < s1 < t1
        else:  # random next: from another document
            assert doc_b != doc_a
        labels[x.origin["chunk_sentences"] >= 2].append(x.next_sentence_label)
    assert set(labels[False]) <= {1}  # a one-sentence chunk always gets a random next
    lab = np.array(labels[True])
    n = len(lab)
    assert n > 300 and abs(lab.mean() - 0.5) < 4 * np.sqrt(0.25 / n), (n, lab.mean())
    # with random_next_prob=0 every chunk of >= 2 sentences gets its real next sentences
    src0 = PretrainingBatches(sh, objective="nsp", max_len=40, batch_size=8, random_next_prob=0.0)
    assert all(x.next_sentence_label == 0 for x in _epoch(src0) if x.origin["chunk_sentences"] >= 2)
    # short_seq_prob=0: targets are max_len - 3, most pairs fill the sequence
    full = PretrainingBatches(sh, objective="nsp", max_len=40, batch_size=8, short_seq_prob=0.0)
    assert np.mean([len(x) >= 30 for x in _epoch(full)]) > 0.5


def test_nsp_batch_layout(corpus):
    _, sh = corpus
    b = next(iter(PretrainingBatches(sh, objective="nsp", max_len=40, batch_size=6, seed=1)))
    assert set(b) == {"input_ids", "attention_mask", "token_type_ids", "word_ids", "next_sentence_label"}
    assert b["input_ids"].shape[0] == 6 and b["input_ids"].dtype == torch.long
    assert b["next_sentence_label"].shape == (6,)
    pad = b["attention_mask"] == 0
    assert (b["input_ids"][pad] == sh.pad_token_id).all() and (b["word_ids"][pad] == -1).all()
    assert (b["token_type_ids"][pad] == 0).all()


# ---- packing --------------------------------------------------------------------------------------------------
def _check_packed(sh, insts, max_len, cross):
    cls, sep = sh.cls_token_id, sh.sep_token_id
    covered = defaultdict(list)
    crossings = 0
    for x in insts:
        assert len(x) <= max_len and x.input_ids[0] == cls and x.input_ids[-1] == sep
        assert (x.token_type_ids == 0).all()
        expected = [cls]
        prev = None
        for doc, a, b in x.origin["pieces"]:
            if prev is not None and doc != prev:
                expected.append(sep)  # the extra separator between documents
                crossings += 1
            expected += sh.document(doc).tokens[a:b].tolist()
            covered[doc].append((a, b))
            prev = doc
        assert x.input_ids.tolist() == expected + [sep]
        assert ((x.word_ids == -1) == (x.input_ids == sep) | (x.input_ids == cls)).all()
        if not cross:
            assert len({d for d, _, _ in x.origin["pieces"]}) == 1
    # every token of every document exactly once per epoch: nothing dropped, nothing repeated
    assert sorted(covered) == list(range(sh.n_documents))
    for doc, ranges in covered.items():
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == len(sh.document(doc).tokens)
        assert all(r[1] == s[0] for r, s in zip(ranges, ranges[1:]))
    return crossings


def test_doc_sentences_never_cross_a_document(corpus):
    _, sh = corpus
    src = PretrainingBatches(sh, objective="doc_sentences", max_len=48, batch_size=4, shuffle_window=8)
    insts = _epoch(src)
    assert _check_packed(sh, insts, 48, cross=False) == 0
    assert np.mean([len(x) for x in insts]) < 46  # shorter sequences at document ends


def test_full_sentences_separate_documents(corpus):
    _, sh = corpus
    src = PretrainingBatches(sh, objective="full_sentences", max_len=48, batch_size=4, shuffle_window=8)
    insts = _epoch(src)
    assert _check_packed(sh, insts, 48, cross=True) > 20
    assert np.mean([len(x) >= 40 for x in insts]) > 0.8  # packed close to max_len


def test_long_sentences_are_split_not_dropped(tmp_path, tok):
    long = " ".join(["unbelievable riverbanks"] * 60) + "."
    (tmp_path / "c.txt").write_text(f"short one.\n{long}\nend.\n\nsecond doc here.\n", encoding="utf-8")
    sh = build_token_shards(tmp_path / "c.txt", tok, tmp_path / "s")
    for objective in ("doc_sentences", "full_sentences"):
        src = PretrainingBatches(sh, objective=objective, max_len=32, batch_size=2)
        _check_packed(sh, _epoch(src), 32, cross=objective == "full_sentences")
        assert src.split_sentences == 1
    src = PretrainingBatches(sh, objective="nsp", max_len=32, batch_size=2, short_seq_prob=0.0)
    assert all(len(x) <= 32 for x in _epoch(src))


def test_word_ids_follow_the_tokenizer(tmp_path, tok):
    sentences = ["The riverbanks were unbelievable, naïve moneyplants!", "She sat near old houses."]
    (tmp_path / "w.txt").write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    sh = build_token_shards(tmp_path / "w.txt", tok, tmp_path / "s")
    for x in _epoch(PretrainingBatches(sh, objective="doc_sentences", max_len=64, batch_size=1)):
        [(doc, _, _)] = x.origin["pieces"]
        item = tok.tokenize([sentences[doc]])[0]
        expected = [-1] + [w for w, (s, e) in enumerate(item.word_spans) for _ in range(s, e)] + [-1]
        assert x.word_ids.tolist() == expected
    # special ids inside the text ([UNK] for an unknown character, a literal [MASK]) are not words
    (tmp_path / "u.txt").write_text("a \u2603\u2603 snowman and a [MASK] here.\n", encoding="utf-8")
    sh2 = build_token_shards(tmp_path / "u.txt", tok, tmp_path / "s2")
    [x] = _epoch(PretrainingBatches(sh2, objective="doc_sentences", max_len=64, batch_size=1))
    inner = np.isin(x.input_ids, [tok.unk_token_id, tok.mask_token_id])
    assert inner.sum() == 2 and (x.word_ids[inner] == -1).all() and (x.word_ids[~inner][1:-1] >= 0).all()
    # NSP: B's words continue after A's, a new id exactly at each word start
    for x in _epoch(PretrainingBatches(sh, objective="nsp", max_len=64, batch_size=1)):
        content = x.word_ids[x.word_ids >= 0]
        assert content[0] == 0 and (np.diff(content) >= 0).all() and (np.diff(content) <= 1).all()


def test_roberta_layout_pairs(tmp_path):
    from ctxemb.tasks.pretraining.vocab import train_vocabulary

    (tmp_path / "c.txt").write_text("".join(f"{' '.join(random.Random(i).choices(WORDS, k=6))}.\n"
                                            + ("\n" if i % 4 == 3 else "") for i in range(40)), encoding="utf-8")
    rtok = train_vocabulary(tmp_path / "c.txt", tmp_path / "v", kind="bpe", vocab_size=400)
    assert rtok.model_type == "roberta"
    sh = build_token_shards(tmp_path / "c.txt", rtok, tmp_path / "s")
    for x in _epoch(PretrainingBatches(sh, objective="nsp", max_len=24, batch_size=1)):
        (da, a0, a1), (db, b0, b1) = x.origin["a_tokens"], x.origin["b_tokens"]
        ids, types = rtok.with_specials(sh.document(da).tokens[a0:a1].tolist(), sh.document(db).tokens[b0:b1].tolist())
        assert x.input_ids.tolist() == ids and x.token_type_ids.tolist() == types  # <s> A </s></s> B </s>, types 0
        assert len(ids) <= 24


def test_collate_pad_to():
    x = Instance(np.array([2, 7, 3]), np.zeros(3, np.int64), np.array([-1, 0, -1]))
    b = collate_instances([x], pad_token_id=0, pad_to=5)
    assert b["input_ids"].tolist() == [[2, 7, 3, 0, 0]] and b["attention_mask"].tolist() == [[1, 1, 1, 0, 0]]
    with pytest.raises(ValueError, match="pad_to"):
        collate_instances([x], pad_token_id=0, pad_to=2)
