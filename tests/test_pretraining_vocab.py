import json
import random

import pytest

from ctxemb.tasks.pretraining.vocab import SPECIAL_TOKENS, subword_fertility, train_vocabulary
from ctxemb.models.tokenization import Tokenizer

WORDS = ("the river bank sat on a money plant of cells and bats while she was singing quietly near "
         "old houses where people talked about weather markets boats children evening").split()
SAMPLES = [
    "The river bank sat quietly, near old houses!",
    "Strange wörds: naïve café, Ünïcode ﬁnance and 中文 text... 42 boats?",
    "  extra   spaces and an emoji 🙂 here  ",
]


def _lines(n, seed=0, words=WORDS):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
        out.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ","]))
    return out


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("vocab") / "corpus.txt"
    p.write_text("\n".join(_lines(400)) + "\n\n" + "\n".join(SAMPLES) + "\n", encoding="utf-8")
    return p


@pytest.fixture(scope="module", params=["wordpiece", "bpe", "unigram"])
def trained(request, corpus_file, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    # byte-level BPE starts from 256 bytes: it needs a larger vocabulary for the same merges
    size = 700 if request.param == "bpe" else 300
    tok = train_vocabulary([corpus_file], out, kind=request.param, vocab_size=size, min_frequency=1)
    return request.param, out, tok


def test_files_specials_and_our_loader(trained):
    kind, out, tok = trained
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert (out / "special_tokens_map.json").is_file()
    assert (out / "vocab.txt").is_file() == (kind == "wordpiece")
    assert isinstance(tok, Tokenizer) and tok.vocab_size <= 700
    # specials at ids 0..4 in the layout's order, found by our loader under ctxemb's names
    for i, (name, text) in enumerate(SPECIAL_TOKENS[kind].items()):
        assert getattr(tok, f"{name}_id") == i, (name, text)
        assert tok.special_tokens[name] == text
    if kind == "wordpiece":
        vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
        assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) == tok.vocab_size
        # the vocab.txt alone (our WordPiece fallback) gives the same ids as tokenizer.json
        from ctxemb.models.tokenization import wordpiece_from_vocab
        alone = Tokenizer(wordpiece_from_vocab(out / "vocab.txt", lowercase=True))
        assert [t.ids for t in alone.tokenize(SAMPLES)] == [t.ids for t in tok.tokenize(SAMPLES)]
    # a frequent word is one token (after a space: byte-level BPE's word-initial pieces start with one)
    [item] = tok.tokenize(["the river"])
    # (Metaspace offsets include the space before a word, so strip)
    assert [w.strip() for w in item.words] == ["the", "river"] and item.word_spans[1][1] - item.word_spans[1][0] == 1


def test_lowercase_defaults(trained):
    kind, _, tok = trained
    a, b = tok.tokenize(["River"])[0].ids, tok.tokenize(["river"])[0].ids
    assert (a == b) == (kind == "wordpiece")


@pytest.mark.parity
def test_transformers_autotokenizer_gives_the_same_ids(trained):
    transformers = pytest.importorskip("transformers")
    kind, out, tok = trained
    hf = transformers.AutoTokenizer.from_pretrained(str(out))
    for text in SAMPLES + _lines(5, seed=3):
        ours, _ = tok.with_specials(tok.tokenize([text])[0].ids)
        assert hf(text)["input_ids"] == ours, (kind, text)
    assert hf.mask_token_id == tok.mask_token_id and hf.pad_token_id == tok.pad_token_id
    assert hf.cls_token_id == tok.cls_token_id and hf.sep_token_id == tok.sep_token_id
    # pairs: [CLS] A [SEP] B [SEP] with types 0/1 (wordpiece), <s> A </s></s> B </s> (bpe, unigram)
    assert tok.model_type == ("bert" if kind == "wordpiece" else "roberta")
    a, b = SAMPLES[0], SAMPLES[1]
    ids, types = tok.with_specials(tok.tokenize([a])[0].ids, tok.tokenize([b])[0].ids)
    enc = hf(a, b)
    assert enc["input_ids"] == ids and enc.get("token_type_ids", types) == types


def test_byte_level_bpe_has_no_unknown(trained):
    kind, _, tok = trained
    ids = tok.tokenize(["🙂 ✓ ∂ ŋ"])[0].ids
    if kind == "bpe":
        assert tok.unk_token_id not in ids and tok.backend.decode(ids) == "🙂 ✓ ∂ ŋ"
    else:  # characters never seen in training
        assert tok.unk_token_id in ids


def test_multilingual_sampling_follows_q(tmp_path):
    big = tmp_path / "big.txt"
    small = tmp_path / "small.txt"
    big.write_text("\n".join(_lines(2000, seed=1)) + "\n", encoding="utf-8")
    small_words = "kaxo velim turan osk piraxa melu".split()
    small.write_text("\n".join(_lines(20, seed=2, words=small_words)) + "\n", encoding="utf-8")
    tok = train_vocabulary({"big": big, "small": small}, tmp_path / "v", kind="wordpiece", vocab_size=400,
                           alpha=0.3, seed=5)
    record = json.loads((tmp_path / "v" / "ctxemb_vocab.json").read_text())
    langs = record["sampling"]["languages"]
    budget = record["sampling"]["char_budget"]
    assert budget == langs["big"]["characters"] + langs["small"]["characters"]
    for lang in langs.values():
        # each language contributes about budget * q characters (whole lines, Bernoulli-thinned or repeated)
        assert lang["characters_drawn"] == pytest.approx(budget * lang["q"], rel=0.1)
    assert langs["small"]["q"] > 3 * langs["small"]["p"]
    assert langs["small"]["characters_drawn"] > 3 * langs["small"]["characters"]  # repeated
    assert langs["big"]["characters_drawn"] < langs["big"]["characters"]  # thinned
    # the upsampled small language's words made it into the vocabulary whole
    assert all(len(tok.tokenize([w])[0].ids) == 1 for w in small_words)


def test_iterator_input_and_errors(tmp_path):
    tok = train_vocabulary(iter(_lines(200)), tmp_path / "it", kind="bpe", vocab_size=300)
    assert tok.vocab_size > 5
    with pytest.raises(FileNotFoundError, match=r"files_or_iterators\[0\].*iter\(texts\)"):
        train_vocabulary(["not a file, a sentence"], tmp_path / "x", kind="bpe", vocab_size=300)
    with pytest.raises(ValueError, match="kind"):
        train_vocabulary(iter(["a b"]), tmp_path / "x", kind="sentencepiece", vocab_size=300)
    with pytest.raises(ValueError, match="vocab_size"):
        train_vocabulary(iter(["a b"]), tmp_path / "x", kind="wordpiece", vocab_size=5)
    with pytest.raises(ValueError, match="no text"):
        train_vocabulary(iter(["", "   "]), tmp_path / "x", kind="wordpiece", vocab_size=100)
    with pytest.raises(ValueError, match=r"corpus\['b'\] has no text"):
        train_vocabulary({"a": iter(["x y"]), "b": iter([" "])}, tmp_path / "x", kind="unigram", vocab_size=100)


def test_subword_fertility(trained):
    _, _, tok = trained
    # every word after the first is one token; the first may not be for byte-level BPE (no leading space)
    texts = ["the river river river", "a bank sat on money"]
    expected = sum(len(t.ids) for t in tok.tokenize(texts)) / 9
    assert subword_fertility(tok, texts) == pytest.approx(expected)
    assert expected <= 1.0 + 8 / 9
    assert subword_fertility(tok, ["riverbankmoneyplanthouses"]) > 1.5
    assert subword_fertility(tok.backend, texts) == pytest.approx(expected)
    with pytest.raises(TypeError, match="single str"):
        subword_fertility(tok, "river bank")
    with pytest.raises(ValueError, match="no whitespace-separated word"):
        subword_fertility(tok, ["", "  "])
