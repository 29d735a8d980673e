"""Loaders of the similarity benchmarks: tiny fixtures in the published formats, bad input, and the real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxemb.evaluation.similarity import data as sd
from ctxemb.evaluation.similarity import WordInContext

FIX = Path(__file__).parent / "fixtures" / "similarity"


# ---- fixtures ------------------------------------------------------------------------------------------------


def test_wic_fixture():
    train, dev = sd.load_wic("train", FIX), sd.load_wic("dev", FIX)
    assert (len(train), len(dev)) == (8, 4)
    assert [e.label for e in train] == [False, True] * 4
    e = train[0]
    assert (e.lemma, e.pos, e.first.word, e.second.word) == ("bank", "N", "bank", "bank")
    assert e.first.tokens[: e.first.start] == ("He", "sat", "on", "the")
    assert dev[2].first.word == "Run"  # the token as written, not the lemma


def test_stsb_fixture_extra_fields_and_quotes():
    train = sd.load_stsb("train", FIX)
    assert len(train) == 6
    assert train[2].sentence2 == "Bank increases interest rates" and train[2].score == 3.2  # 9-field line
    assert train[3].sentence1 == 'He said "no" to the plan.'  # quotes are text, not CSV quoting
    assert train[0].id == "main-captions/MSRvid/2012test/0001"


def test_sick_fixture_and_alias():
    trial = sd.load_sick("trial", FIX)
    assert sd.load_sick("dev", FIX) == trial
    assert len(sd.load_sick("train", FIX)) == 5 and len(trial) == 4
    assert (trial[0].id, trial[0].score, trial[0].label) == ("11", 4.6, "ENTAILMENT")


def test_cosimlex_fixture_marks_and_gold():
    data = sd.load_cosimlex("en", FIX)
    assert len(data) == 4
    e = data[0]
    assert (e.sim1, e.sim2) == (7.5, 2.0) and e.change == pytest.approx(-5.5)
    # context 2 marks "bank" before "river": still assigned to word2/word1
    assert e.context2_word1.word == "river" and e.context2_word2.word == "bank"
    assert e.context2_word1.tokens is e.context2_word2.tokens or e.context2_word1.tokens == e.context2_word2.tokens
    assert e.context1_word1.tokens[:6] == ("We", "walked", "along", "the", "river", ",")
    assert data[2].context1_word1.word == "keeps"  # inflected form as marked
    # the task kit's layout (data + separate gold) reads to the same examples
    kit = sd.read_cosimlex(FIX / "cosimlex/evaluation_kit_final/data/data_en.tsv", FIX / "cosimlex/gold/gold_en.tsv")
    assert kit == data
    no_gold = sd.read_cosimlex(FIX / "cosimlex/evaluation_kit_final/data/data_en.tsv")
    assert no_gold[0].sim1 is None and no_gold[0].change is None


def test_coinco_usim_fixture():
    allp = sd.load_coinco_usim("all", FIX)
    assert len(allp) == 6
    assert [e.in_train for e in allp] == [True, True, True, False, False, False]
    assert len(sd.load_coinco_usim("train", FIX)) == 3 and len(sd.load_coinco_usim("test", FIX)) == 3
    assert allp[2].second.word == '"tell'  # attached punctuation is accepted
    assert allp[0].score == 1.0 and allp[1].score == 5.0 and allp[0].lemma_pos == "bank.NN"


def test_scws_fixture():
    data = sd.load_scws(FIX / "scws" / "ratings.txt")
    assert len(data) == 4
    e = data[0]
    assert (e.id, e.word1, e.pos1, e.word2, e.pos2) == ("1", "bank", "n", "river", "n")
    assert e.first.tokens == ("he", "sat", "on", "the", "bank", "of", "the", "river", ".")
    assert (e.first.start, e.first.end, e.first.word) == (4, 5, "bank")
    assert e.score == 7.2 and len(e.ratings) == 10 and e.ratings[0] == 8.0
    assert data[1].second.word == "money"  # "<b>money</b>" without spaces


@pytest.mark.parametrize("name,count,first", [
    ("simlex999", 6, ("river", "stream", 8.5, "N")),
    ("wordsim353", 5, ("river", "water", 8.1, None)),
    ("men", 6, ("river", "water", 48.0, None)),
    ("rg65", 5, ("river", "stream", 3.9, None)),
    ("simverb3500", 6, ("run", "walk", 4.9, "V")),
    ("simverb500-dev", 3, ("run", "walk", 4.9, "V")),
])
def test_word_similarity_fixtures(name, count, first):
    pairs = sd.load_word_similarity(name, FIX)
    assert len(pairs) == count
    p = pairs[0]
    assert (p.word1, p.word2, p.score, p.pos) == first
    assert all("\r" not in q.word2 for q in pairs)  # CRLF files


def test_corpus_sentences_split_on_periods_and_drop_headings():
    sents = sd.load_corpus_sentences("wikitext-2", data_dir=FIX)
    assert sents[0] == ("The", "river", "ran", "past", "the", "old", "bank", ".")
    assert all(s[-1] == "." for s in sents) and not any("=" in s for s in sents)
    assert len(sents) == 13
    assert len(sd.load_corpus_sentences("wikitext-2", ("valid",), data_dir=FIX)) == 8
    assert all(len(s) <= 8 for s in sd.load_corpus_sentences(data_dir=FIX, max_words=8))
    sample = sd.load_corpus_sentences(data_dir=FIX, max_sentences=5, seed=1)
    assert len(sample) == 5 and sample == sd.load_corpus_sentences(data_dir=FIX, max_sentences=5, seed=1)
    assert sd.load_corpus_sentences(data_dir=FIX, max_sentences=3) == sents[:3]
    assert sd.corpus_label() == "wikitext-2/valid+test"


# ---- bad input -----------------------------------------------------------------------------------------------


def test_word_in_context_rejects_bad_spans():
    with pytest.raises(ValueError, match=r"span \[2, 2\)"):
        WordInContext(("a", "b"), 2, 2)
    with pytest.raises(ValueError, match="inside a sentence of 2 words"):
        WordInContext(("a", "b"), 1, 3)
    assert WordInContext(["a", "b"], 0, 2).tokens == ("a", "b")


def test_unknown_split_and_held_out_split(tmp_path):
    with pytest.raises(ValueError, match="split for WiC must be one of 'train', 'dev', 'test'; got 'valid'"):
        sd.load_wic("valid", FIX)
    with pytest.raises(FileNotFoundError, match="held out"):
        sd.load_wic("test", FIX)
    with pytest.raises(FileNotFoundError, match="held out"):
        sd.load_scws(root=FIX.parent)
    with pytest.raises(ValueError, match="unknown word-similarity set 'simlex'"):
        sd.load_word_similarity("simlex", FIX)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sd.load_stsb("dev", tmp_path / "nowhere")
    with pytest.raises(ValueError, match="unknown corpus"):
        sd.load_corpus_sentences("ptb", data_dir=FIX)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_wic_bad_input(tmp_path):
    data = _write(tmp_path, "d.txt", "bank\tN\t1-9\tthe bank .\ta bank .\n")
    with pytest.raises(ValueError, match="index2=9 is outside example_2"):
        sd.read_wic(data)
    data = _write(tmp_path, "d2.txt", "bank\tN\t1-1\tthe bank .\ta bank .\n")
    with pytest.raises(ValueError, match="has 2 lines but data file"):
        sd.read_wic(data, _write(tmp_path, "g.txt", "T\nF\n"))
    with pytest.raises(ValueError, match="gold label must be T or F; got 'yes'"):
        sd.read_wic(data, _write(tmp_path, "g2.txt", "yes\n"))
    with pytest.raises(ValueError, match="expected 5 tab-separated fields, got 3"):
        sd.read_wic(_write(tmp_path, "d3.txt", "bank\tN\t1-1\n"))
    with pytest.raises(ValueError, match="index field must look like"):
        sd.read_wic(_write(tmp_path, "d4.txt", "bank\tN\t1:1\tthe bank .\ta bank .\n"))


def test_sentence_pair_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"STS score must be in \[0, 5\]; got 7.0"):
        sd.read_stsb(_write(tmp_path, "s.csv", "g\tf\ty\t1\t7\ta\tb\n"))
    with pytest.raises(ValueError, match="score must be a number; got 'high'"):
        sd.read_stsb(_write(tmp_path, "s2.csv", "g\tf\ty\t1\thigh\ta\tb\n"))
    with pytest.raises(ValueError, match="at least 7 tab-separated fields"):
        sd.read_stsb(_write(tmp_path, "s3.csv", "g\tf\ty\t1\t3\n"))
    with pytest.raises(ValueError, match="SICK header"):
        sd.read_sick(_write(tmp_path, "k.txt", "1\ta\tb\t3\tNEUTRAL\n"))


def test_cosimlex_bad_marks(tmp_path):
    head = "word1\tword2\tcontext1\tcontext2\tword1_context1\tword2_context1\tword1_context2\tword2_context2\n"
    one_mark = head + "a\tb\t<strong>a</strong> b c\t<strong>a</strong> <strong>b</strong>\ta\tb\ta\tb\n"
    with pytest.raises(ValueError, match="context1 must mark exactly two words"):
        sd.read_cosimlex(_write(tmp_path, "c.tsv", one_mark))
    wrong = head + "a\tb\t<strong>a</strong> <strong>x</strong>\t<strong>a</strong> <strong>b</strong>\ta\tb\ta\tb\n"
    with pytest.raises(ValueError, match="are not word1/word2"):
        sd.read_cosimlex(_write(tmp_path, "c2.tsv", wrong))
    with pytest.raises(ValueError, match="header lacks column"):
        sd.read_cosimlex(_write(tmp_path, "c3.tsv", "word1\tword2\n"))


def test_usim_and_scws_bad_input(tmp_path):
    head = "id\tlemma_pos\tscore\tword1\tposition1\tsentence1\tword2\tposition2\tsentence2\n"
    with pytest.raises(ValueError, match="word1 'bank' is not at position1"):
        sd.read_coinco_usim(_write(tmp_path, "u.csv",
                                   head + "1-2-cnc\tbank.NN\t1\tbank\t0\tthe bank\tbank\t1\tthe bank\n"))
    with pytest.raises(ValueError, match="position2=5 is outside sentence2"):
        sd.read_coinco_usim(_write(tmp_path, "u2.csv",
                                   head + "1-2-cnc\tbank.NN\t1\tbank\t1\tthe bank\tbank\t5\tthe bank\n"))
    line = "\t".join(["1", "a", "n", "b", "n", "no marks here", "the <b> b </b> .", "5"] + ["5"] * 10)
    with pytest.raises(ValueError, match="context1 must mark the target"):
        sd.read_scws(_write(tmp_path, "r.txt", line + "\n"))
    with pytest.raises(ValueError, match="expected 18 tab-separated fields"):
        sd.read_scws(_write(tmp_path, "r2.txt", "1\ta\tn\n"))


# ---- the real files ------------------------------------------------------------------------------------------


def test_real_counts(shared_data):
    root = shared_data / "similarity"
    assert (len(sd.load_wic("train", root)), len(sd.load_wic("dev", root))) == (5428, 638)
    assert (len(sd.load_stsb("train", root)), len(sd.load_stsb("dev", root))) == (5749, 1500)
    assert (len(sd.load_sick("train", root)), len(sd.load_sick("trial", root))) == (4500, 500)
    assert len(sd.load_cosimlex("en", root)) == 340
    usim = sd.load_coinco_usim("all", root)
    assert len(usim) == 5022 and sum(e.in_train for e in usim) == 4018
    counts = {name: len(sd.load_word_similarity(name, root)) for name in sd.WORD_SIMILARITY_SETS}
    assert counts == {"simlex999": 999, "wordsim353": 353, "men": 3000, "rg65": 65, "simverb3500": 3500,
                      "simverb500-dev": 500, "simverb3000-test": 3000}


def test_real_contents(shared_data):
    root = shared_data / "similarity"
    wic = sd.load_wic("dev", root)
    assert sum(e.label for e in wic) == 319
    stsb = sd.load_stsb("dev", root)
    assert stsb[0].sentence1 == "A man with a hard hat is dancing." and stsb[0].score == 5.0
    cos = sd.load_cosimlex("en", root)
    kit = sd.read_cosimlex(root / "cosimlex/evaluation_kit_final/data/data_en.tsv", root / "cosimlex/gold/gold_en.tsv")
    assert [(e.sim1, e.sim2) for e in kit] == [(e.sim1, e.sim2) for e in cos]
    assert all(e.context1_word1.word.lower().startswith(e.word1.lower()[:3]) for e in cos[:20])
    simlex = sd.load_word_similarity("simlex999", root)
    assert (simlex[0].word1, simlex[0].word2, simlex[0].score, simlex[0].pos) == ("old", "new", 1.58, "A")
    sents = sd.load_corpus_sentences("wikitext-2", ("valid",), data_dir=shared_data)
    assert sents[0][:2] == ("Homarus", "gammarus") and len(sents) > 7000
