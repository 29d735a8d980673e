import io
import json
import random
from collections import defaultdict

import numpy as np
import pytest
import torch

from ctxemb.loading import load_tokenizer
from ctxemb.pretraining.data import (PretrainingBatches, MultilingualBatches, TokenShards, _token_dtype,
                                     build_token_shards, collate_instances)
from ctxemb.tokenization import Tokenizer, wordpiece_from_vocab

WORDS = ("the river bank sat on a money plant of cells and bats while she was singing quietly near old houses "
         "where people talked about weather markets boats riverbanks moneyplants unbelievable naïve").split()


def _write_corpus(path, n_docs, seed, sentences=(2, 12), words=(3, 10), blank="\n"):
    """Documents of random sentences, one per line, documents separated by blank lines."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        docs.append([" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) + rng.choice(".!?,")
                     for _ in range(rng.randint(*sentences))])
    path.write_text(blank + (blank + "   \n").join("\n".join(d) + "\n" for d in docs), encoding="utf-8")
    return docs


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tok):
    d = tmp_path_factory.mktemp("corpus")
    docs = _write_corpus(d / "a.txt", 40, 0) + _write_corpus(d / "b.txt", 30, 1, sentences=(6, 16))
    return docs, build_token_shards([d / "a.txt", d / "b.txt"], tok, d / "shards", max_tokens_per_shard=1500)


def _epoch(source, epoch=0):
    return [x for w in range(source.n_windows) for x in source.window_instances(epoch, w)]


def _take(it, k):
    return [next(it) for _ in range(k)]


# ---- shards ---------------------------------------------------------------------------------------------------
def test_shards_round_trip(corpus, tok):
    docs, sh = corpus
    assert len(sh.manifest["shards"]) > 1  # several shards, documents never split between them
    assert sh.n_documents == len(docs) and sh.n_sentences == sum(map(len, docs))
    assert sh._shards[0].tokens.dtype == np.uint16 and isinstance(sh._shards[0].tokens, np.memmap)
    all_ids = []
    for d, sentences in enumerate(docs):
        doc = sh.document(d)
        assert doc.n_sentences == len(sentences)
        for i, item in enumerate(tok.tokenize(sentences)):
            assert doc.sentence(i).tolist() == item.ids  # = tokenizing directly
            starts = np.zeros(len(item.ids), np.uint8)
            starts[[s for s, _ in item.word_spans]] = 1
            a, b = doc.sentence_offsets[i], doc.sentence_offsets[i + 1]
            np.testing.assert_array_equal(doc.word_starts[a:b], starts)  # word starts = the tokenizer's words
            all_ids += item.ids
    assert sh.n_tokens == len(all_ids)
    np.testing.assert_array_equal(sh.unigram_counts, np.bincount(all_ids, minlength=tok.vocab_size))
    assert sh.unigram_distribution()[tok.cls_token_id] == 0 and sh.unigram_distribution().sum() == pytest.approx(1)
    assert sh.document_lengths.sum() == sh.n_tokens
    m = json.loads((sh.directory / "manifest.json").read_text())
    assert m["tokenizer"]["vocab_size"] == tok.vocab_size and m["dtype"] == "uint16"
    assert [s["n_documents"] for s in m["sources"]] == [40, 30]
    # reopened: same data
    again = TokenShards.open(sh.directory, tokenizer=tok)
    assert again.document(len(docs) - 1).tokens.tolist() == sh.document(len(docs) - 1).tokens.tolist()


def test_line_mode_and_errors(tmp_path, tok):
    (tmp_path / "x.txt").write_text("one sentence here.\n\nanother one.\n   \nthird.\n", encoding="utf-8")
    (tmp_path / "y.txt").write_text("only line\n", encoding="utf-8")
    sh = build_token_shards([tmp_path / "x.txt", tmp_path / "y.txt"], tok, tmp_path / "s", mode="line")
    assert sh.n_documents == 2 and sh.n_sentences == 4
    sh = build_token_shards([tmp_path / "x.txt", tmp_path / "y.txt"], tok, tmp_path / "s", mode="blank_line")
    assert sh.n_documents == 4  # rebuilt in place
    with pytest.raises(ValueError, match="fewer than world_size=5"):
        sh.for_rank(0, 5)
    with pytest.raises(FileNotFoundError, match=r"paths\[1\]"):
        build_token_shards([tmp_path / "x.txt", tmp_path / "nope.txt"], tok, tmp_path / "t")
    with pytest.raises(ValueError, match="mode"):
        build_token_shards(tmp_path / "x.txt", tok, tmp_path / "t", mode="paragraph")
    (tmp_path / "v.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    other = Tokenizer(wordpiece_from_vocab(tmp_path / "v.txt"))
    with pytest.raises(ValueError, match="another vocabulary"):
        TokenShards.open(tmp_path / "s", tokenizer=other)
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        TokenShards.open(tmp_path)
    with open(tmp_path / "s" / "shard_00000" / "tokens.bin", "r+b") as f:
        f.truncate(4)
    with pytest.raises(ValueError, match="tokens.bin: expected"):
        TokenShards.open(tmp_path / "s")
    assert _token_dtype(65536) == np.uint16 and _token_dtype(65537) == np.uint32


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
    from ctxemb.pretraining.vocab import train_vocabulary

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


# ---- the batch source -----------------------------------------------------------------------------------------
class _TestMasker:
    """A small stand-in with the Masker protocol: masks 20% of the real tokens from the generator it is given."""

    def __init__(self, mask_id, with_generator=True):
        self.mask_id = mask_id
        if not with_generator:
            self.__call__ = None

    def __call__(self, input_ids, *, attention_mask=None, word_ids=None, generator=None):
        chosen = (torch.rand(input_ids.shape, generator=generator) < 0.2) & (word_ids >= 0)
        labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        return type("M", (), dict(input_ids=input_ids.masked_fill(chosen, self.mask_id), labels=labels,
                                  span_left=None))()


def _global_rng_masker(mask_id):
    def masker(input_ids, attention_mask=None, word_ids=None):  # no generator: uses torch's global RNG
        chosen = (torch.rand(input_ids.shape) < 0.2) & (word_ids >= 0)
        return type("M", (), dict(input_ids=input_ids.masked_fill(chosen, mask_id),
                                  labels=torch.where(chosen, input_ids, -100)))()
    return masker


@pytest.mark.parametrize("objective", ["nsp", "full_sentences", "doc_sentences"])
@pytest.mark.parametrize("generator", [True, False])
def test_exact_resume(corpus, objective, generator):
    _, sh = corpus
    masker = _TestMasker(sh.mask_token_id) if generator else _global_rng_masker(sh.mask_token_id)
    make = lambda: PretrainingBatches(sh, objective=objective, max_len=64, batch_size=16, seed=11,  # noqa: E731
                                      masker=masker, shuffle_window=9)
    a = make()
    reference = _take(iter(a), 14)
    assert a.epoch >= 1  # the run crosses window and epoch ends
    b = make()
    it = iter(b)
    _take(it, 6)
    buf = io.BytesIO()
    torch.save(b.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    torch.manual_seed(12345)  # the global RNG must not matter
    c = make()
    c.load_state_dict(state)
    resumed = _take(iter(c), 8)
    for ref, got in zip(reference[6:], resumed):
        assert ref.keys() == got.keys() and "labels" in got
        for k in ref:
            torch.testing.assert_close(ref[k], got[k], rtol=0, atol=0)
    assert (resumed[0]["input_ids"] == sh.mask_token_id).any()
    # another seed gives other batches
    other = PretrainingBatches(sh, objective=objective, max_len=64, batch_size=16, seed=12, shuffle_window=9)
    assert not torch.equal(next(iter(other))["input_ids"][:, :8], reference[0]["input_ids"][:, :8])


def test_state_from_other_settings_is_refused(corpus):
    _, sh = corpus
    a = PretrainingBatches(sh, objective="doc_sentences", max_len=64, batch_size=8)
    b = PretrainingBatches(sh, objective="doc_sentences", max_len=64, batch_size=4)
    with pytest.raises(ValueError, match=r"batch_size \(saved 8, now 4\)"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="objective"):
        PretrainingBatches(sh, objective="mlm", max_len=64, batch_size=8)


def test_epochs_reshuffle(corpus):
    _, sh = corpus
    src = PretrainingBatches(sh, objective="doc_sentences", max_len=48, batch_size=4, shuffle_window=8)
    order0 = [x.origin["pieces"][0] for x in _epoch(src, 0)]
    order1 = [x.origin["pieces"][0] for x in _epoch(src, 1)]
    assert order0 != order1 and sorted(order0) == sorted(order1)
    # one_epoch: every sequence of the epoch once, the last batch short, the position untouched
    batches = list(src.one_epoch(0))
    assert sum(len(b["input_ids"]) for b in batches) == len(order0) and len(batches[-1]["input_ids"]) <= 4
    assert (src.epoch, src.window, src.offset, src.batches) == (0, 0, 0, 0)


@pytest.mark.parametrize("objective", ["nsp", "full_sentences"])
def test_ranks_get_disjoint_documents(corpus, objective):
    _, sh = corpus
    seen = []
    for rank in range(3):
        src = PretrainingBatches(sh, objective=objective, max_len=48, batch_size=4, rank=rank, world_size=3)
        docs = set()
        for x in _epoch(src):
            if objective == "nsp":
                docs |= {x.origin["a"][0], x.origin["b"][0]}
            else:
                docs |= {d for d, _, _ in x.origin["pieces"]}
        assert docs <= set(src.view.documents.tolist())
        seen.append(docs)
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    assert set().union(*seen) == set(range(sh.n_documents))


def test_multilingual_batches_resume(corpus):
    _, sh = corpus
    make = lambda: MultilingualBatches(  # noqa: E731
        [PretrainingBatches(sh, objective="doc_sentences", max_len=32, batch_size=2, seed=s) for s in (1, 2)],
        sizes=[1000, 10], alpha=0.3, seed=4)
    ref = _take(iter(make()), 10)
    b = make()
    _take(iter(b), 4)
    c = make()
    c.load_state_dict(b.state_dict())
    for r, g in zip(ref[4:], _take(iter(c), 6)):
        assert torch.equal(r["input_ids"], g["input_ids"])


def test_collate_pad_to():
    from ctxemb.pretraining.data import Instance

    x = Instance(np.array([2, 7, 3]), np.zeros(3, np.int64), np.array([-1, 0, -1]))
    b = collate_instances([x], pad_token_id=0, pad_to=5)
    assert b["input_ids"].tolist() == [[2, 7, 3, 0, 0]] and b["attention_mask"].tolist() == [[1, 1, 1, 0, 0]]
    with pytest.raises(ValueError, match="pad_to"):
        collate_instances([x], pad_token_id=0, pad_to=2)


# ---- a real slice ---------------------------------------------------------------------------------------------
def test_real_corpus_slice(shared_data, tmp_path, tok):
    src = shared_data / "corpora"
    de = (src / "fortunes-multilingual" / "de.txt").read_text(encoding="utf-8").splitlines()[:400]
    wiki = (src / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()[:120]
    (tmp_path / "de.txt").write_text("\n".join(de) + "\n", encoding="utf-8")
    (tmp_path / "wiki.txt").write_text("\n".join(wiki) + "\n", encoding="utf-8")
    sh = build_token_shards([tmp_path / "de.txt", tmp_path / "wiki.txt"], tok, tmp_path / "s")
    lines = [x.strip() for x in de + wiki if x.strip()]
    assert sh.n_sentences == len(lines)
    flat = np.concatenate([sh.document(d).tokens for d in range(sh.n_documents)])
    assert flat.tolist() == [i for item in tok.tokenize(lines) for i in item.ids]
    try:
        from ctxemb.pretraining.masking import Masker, MaskingConfig

        masker = Masker(MaskingConfig(strategy="span"), vocab_size=sh.vocab_size, mask_token_id=sh.mask_token_id,
                        special_token_ids=sh.special_token_ids, replacement_weights=sh.unigram_counts)
    except ImportError:  # the masking module is not there: batches without labels
        masker = None
    for objective in ("nsp", "full_sentences", "doc_sentences"):
        b = next(iter(PretrainingBatches(sh, objective=objective, max_len=128, batch_size=8, masker=masker)))
        assert b["input_ids"].shape[0] == 8 and b["input_ids"].shape[1] <= 128
        if masker is not None:
            assert (b["labels"] != -100).any() and "span_left" in b
