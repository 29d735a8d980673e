"""Raganato-format reader and writer, document split, regex tokenizer."""

from pathlib import Path

import pytest

from ctxemb.wsd.corpus import (
    Instance,
    Sentence,
    read_dataset,
    read_gold_keys,
    read_raganato,
    regex_tokenize,
    split_corpus_by_document,
    write_dataset,
    write_raganato,
)

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


def test_read_fixture_records():
    c = read_dataset(FIXTURES / "tiny_train")
    assert c.name == "tiny_train"
    assert c.attributes == {"lang": "en", "source": "ctxemb-test"}
    assert [d.id for d in c.documents] == ["d000", "d001"]
    assert c.documents[0].attributes == {"source": "fixture/river-and-money"}
    assert c.n_sentences == 5 and c.n_instances == 16
    s = c.documents[0].sentences[0]
    assert s.id == "d000.s000"
    assert s.words == ("He", "sat", "on", "the", "bank", "of", "the", "river", ".")
    assert s.lemmas[1] == "sit" and s.pos[1] == "VERB" and s.pos[3] == "DET"
    assert s.positions == (1, 4, 7)
    assert s.instances[1] == Instance("d000.s000.t001", 4, "bank", "NOUN", ("bank%1:17:01::",))
    city = c.documents[1].sentences[0]
    assert city.words[0] == "New_York"  # multiword token
    assert city.words[5:7] == ("&", '"')  # entities unescaped
    big = city.instances[1]
    assert big.gold_keys == ("big%3:00:01::", "big%5:00:00:important:00")  # several gold keys


def test_read_without_keys_warns(tmp_path, caplog):
    xml = tmp_path / "x.data.xml"
    xml.write_bytes((FIXTURES / "tiny_eval" / "tiny_eval.data.xml").read_bytes())
    c = read_raganato(xml)
    assert c.name == "x"
    assert c.n_instances == 10 and not c.gold()
    assert "no gold key file" in caplog.text


def test_round_trip(tmp_path):
    c = read_dataset(FIXTURES / "tiny_train")
    out = write_dataset(c, tmp_path / "copy", "tiny_copy")
    back = read_dataset(out)
    assert back.documents == c.documents
    assert back.attributes == c.attributes
    assert back.gold() == c.gold()
    # writing what was read gives the same bytes again
    write_raganato(back, tmp_path / "again.data.xml")
    assert (tmp_path / "again.data.xml").read_text() == (out / "tiny_copy.data.xml").read_text()


def test_gold_keys_file(tmp_path):
    p = tmp_path / "k.txt"
    p.write_text("a k1\nb k2 k3\n\na k4 k1\n")
    assert read_gold_keys(p) == {"a": ("k1", "k4"), "b": ("k2", "k3")}
    p.write_text("a\n")
    with pytest.raises(ValueError, match="line 1"):
        read_gold_keys(p)


def test_dataset_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="exactly one"):
        read_dataset(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_dataset(tmp_path / "nothing.data.xml")


def test_sentence_validation():
    with pytest.raises(ValueError, match="same length"):
        Sentence("s", ("a", "b"), ("a",), (None, None))
    with pytest.raises(ValueError, match="outside"):
        Sentence("s", ("a",), ("a",), ("NOUN",), (Instance("i", 3, "a", "NOUN"),))


def test_head_and_split():
    c = read_dataset(FIXTURES / "tiny_train")
    assert c.head(3).n_sentences == 3 and len(c.head(3).documents) == 1
    assert c.head(5).documents == c.documents
    train, held = split_corpus_by_document(c, 0.5, seed=1)
    assert {d.id for d in train.documents} | {d.id for d in held.documents} == {"d000", "d001"}
    assert not {d.id for d in train.documents} & {d.id for d in held.documents}
    assert train.name == "tiny_train_train" and held.name == "tiny_train_heldout"
    again = split_corpus_by_document(c, 0.5, seed=1)
    assert again[1].documents == held.documents
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_corpus_by_document(c, 1.0)


def test_regex_tokenize():
    assert regex_tokenize("He sat on the bank of the river.") == ["He", "sat", "on", "the", "bank", "of", "the", "river", "."]
    assert regex_tokenize("I don't like the river's state-of-the-art U.S. banks") == [
        "I", "do", "n't", "like", "the", "river", "'s", "state-of-the-art", "U.S.", "banks"
    ]


def test_real_semeval2007(shared_data):
    d = shared_data / "wsd" / "WSD_Evaluation_Framework" / "Evaluation_Datasets" / "semeval2007"
    c = read_dataset(d)
    assert c.n_instances == 455 and c.n_sentences == 135 and len(c.documents) == 3
    gold = c.gold()
    assert len(gold) == 455
    assert sum(len(k) > 1 for k in gold.values()) == 4
    pos = {i.pos for i in c.instances()}
    assert pos == {"NOUN", "VERB"}
    first = next(c.instances())
    assert first.id == "d000.s000.t000" and first.lemma == "refer" and gold[first.id] == ("refer%2:32:01::",)


@pytest.mark.slow
def test_real_semcor(shared_data):
    d = shared_data / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor"
    c = read_dataset(d)
    assert c.n_sentences == 37176 and c.n_instances == 224716 and len(c.documents) == 352
