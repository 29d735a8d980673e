"""WordNet access: candidates, morphy, sense keys, first sense, relations, and the missing-data error."""

import pytest

from ctxemb.wsd import wordnet as wnu


@pytest.fixture(scope="module", autouse=True)
def _needs_wordnet(wordnet):
    """Every test here needs WordNet (skipped cleanly without it)."""


def test_bank_noun_has_ten_senses_first_is_sloping_land():
    keys = wnu.candidate_keys("bank", "NOUN")
    assert len(keys) == 10
    assert keys[0] == "bank%1:17:01::"
    assert wnu.synset_of(keys[0]) == "bank.n.01"
    assert wnu.first_sense("bank", "n") == "bank%1:17:01::"
    assert wnu.candidate_keys("bank", "NN") == keys  # Penn tag


def test_pos_restriction_and_all_pos_order():
    nouns = wnu.candidate_keys("bank", "NOUN")
    verbs = wnu.candidate_keys("bank", "VERB")
    assert verbs and all("%2:" in k for k in verbs)
    assert wnu.candidate_keys("bank") == nouns + verbs  # nouns before verbs
    assert wnu.candidate_keys("the", "DET") == ()  # closed class
    with pytest.raises(ValueError, match="not a recognised tag"):
        wnu.candidate_keys("bank", "NOUNISH")


def test_adjective_includes_satellites():
    keys = wnu.candidate_keys("recent", "ADJ")
    assert "recent%5:00:00:past:00" in keys
    assert wnu.universal_pos_of_key("recent%5:00:00:past:00") == "ADJ"
    assert wnu.universal_pos_of_key("bank%1:17:01::") == "NOUN"


def test_morphy_for_inflected_forms():
    assert wnu.lemmatize("took", "VERB") == "take"
    assert wnu.lemmatize("banks", "NOUN") == "bank"  # inflectional base before the lemma 'Banks'
    inflected = wnu.candidate_keys("banks", "NOUN", inflected=True)
    assert inflected[0] == "bank%1:17:01::"
    assert any(k.startswith("banks%") for k in inflected)
    # An exact lemma wins without inflected=True, morphy only fills in when the form is not a lemma
    assert all(k.startswith("banks%") for k in wnu.candidate_keys("banks", "NOUN"))
    assert wnu.candidate_keys("took", "VERB") == wnu.candidate_keys("take", "VERB")
    assert wnu.lemmatize("zzyzxnotaword") == "zzyzxnotaword"


def test_multiword_lemmas_join_with_underscore():
    keys = wnu.candidate_keys("New York", "NOUN")
    assert keys == wnu.candidate_keys("new_york", "NOUN")
    assert keys[0] == "new_york%1:15:01::"
    assert wnu.candidate_keys("take_place", "VERB")


def test_sense_info_gloss_examples_lexname():
    info = wnu.sense_info("bank%1:17:01::")
    assert info.synset == "bank.n.01"
    assert info.lemma == "bank"
    assert info.gloss.startswith("sloping land")
    assert any("river" in e for e in info.examples)
    assert info.lexname == "noun.object"
    assert info.count > 0
    assert wnu.hypernyms("bank.n.01") == ("slope.n.01",)
    assert wnu.lexname("bank.n.01") == "noun.object"
    assert "bank%1:14:00::" in wnu.synset_sense_keys("depository_financial_institution.n.01")
    # instance hypernyms are included
    assert "city.n.01" in wnu.hypernyms("new_york.n.01")


def test_unknown_keys_raise_keyerror():
    assert wnu.is_sense_key("bank%1:17:01::")
    assert not wnu.is_sense_key("bank%1:99:99::")
    with pytest.raises(KeyError, match="not a WordNet 3.0 sense key"):
        wnu.sense_info("bank%1:99:99::")
    with pytest.raises(ValueError):
        wnu.universal_pos_of_key("nokey")
    with pytest.raises(KeyError):
        wnu.hypernyms("nosuch.n.01")


def test_missing_data_error_says_how_to_get_it(tmp_path):
    empty = tmp_path / "empty_nltk_data"
    empty.mkdir(mode=0o700)
    with pytest.raises(wnu.WordNetNotFoundError) as e:
        wnu._find_wordnet([empty])
    msg = str(e.value)
    assert "NLTK_DATA" in msg and "nltk.download('wordnet')" in msg and str(empty) in msg


def test_lookups_are_cached():
    wnu.candidate_keys("bank", "NOUN")
    before = wnu.candidate_keys.cache_info().hits
    wnu.candidate_keys("bank", "NOUN")
    assert wnu.candidate_keys.cache_info().hits == before + 1


def test_every_candidate_key_resolves_even_case_variants():
    # index.sense lacks "Sun" in sun.n.01 (sun%1:17:02::) though nltk's Lemma.key() yields it
    for key in wnu.candidate_keys("sun", "NOUN"):
        assert wnu.sense_info(key).key == key
    assert wnu.sense_info("sun%1:17:02::").lemma == "Sun"
