"""Token shards: a corpus tokenized once, memory-mapped, read back exactly; the format's checks."""

import json

import numpy as np
import pytest

from ctxemb.modeling.loading import load_tokenizer
from ctxemb.tasks.pretraining.shards import TokenShards, _token_dtype, build_token_shards
from ctxemb.models.tokenization import Tokenizer, wordpiece_from_vocab
from tests.helpers import write_token_corpus


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tok):
    return write_token_corpus(tmp_path_factory.mktemp("corpus"), tok)


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
