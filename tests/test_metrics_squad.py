"""ctxemb.metrics.squad: the official SQuAD v1.1 normalisation, exact match and F1 on hand-computed examples."""

from __future__ import annotations

import logging

import pytest

from ctxemb.metrics.squad import exact_match, normalize_answer, squad_scores, token_f1


@pytest.mark.parametrize("raw, expected", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  A  cat,\tan apple;\nTHE end. ", "cat apple end"),
    ("Theatre and another", "theatre and another"),  # articles only as whole words
    ("the-end", "theend"),  # punctuation goes before the articles: "the" is no longer a word
    ("Wilson's", "wilsons"),
    ("an", ""),
    ("!!!", ""),
    ("", ""),
    ("Über   Café", "über café"),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match():
    assert exact_match("The Eiffel Tower!", "eiffel tower") is True
    assert exact_match("Eiffel Tower", "the tower") is False
    assert exact_match("1990s", "in the 1990s") is False
    # the official quirk: answers that normalise to nothing are equal
    assert exact_match("!!!", "?") is True
    assert exact_match("the", "") is True
    assert exact_match("!!!", "Paris") is False


def test_token_f1_by_hand():
    # pred tokens [in, 1990s], gold [1990s]: 1 common, P = 1/2, R = 1, F1 = 2 * (1/2 * 1) / (1/2 + 1) = 2/3
    assert token_f1("in the 1990s", "1990s") == pytest.approx(0.6666666666666666)
    # multiset overlap: cat min(2, 1) + dog min(1, 2) = 2 common of 3 and 3: P = R = F1 = 2/3
    assert token_f1("cat cat dog", "cat dog dog") == pytest.approx(0.6666666666666666)
    # pred [eiffel, tower, paris], gold [eiffel, tower]: P = 2/3, R = 1, F1 = 2 * (2/3) / (5/3) = 0.8
    assert token_f1("The Eiffel Tower, Paris", "Eiffel Tower") == pytest.approx(0.8)
    assert token_f1("The Eiffel Tower!", "eiffel tower") == 1.0
    assert token_f1("Paris", "London") == 0.0
    assert token_f1("!!!", "?") == 0.0  # EM 1 but F1 0: no tokens at all
    assert token_f1("a", "the") == 0.0
    assert type(token_f1("Paris", "London")) is float


def test_string_checks():
    with pytest.raises(TypeError, match="answer must be a string; got None"):
        normalize_answer(None)
    with pytest.raises(TypeError, match="answer must be a string"):
        token_f1("Paris", 3)


GOLD = {
    "q1": ["Eiffel Tower", "the Eiffel Tower"],
    "q2": ["1990s", "in the 1990s"],
    "q3": ["Paris"],
    "q4": ["London"],
}


def test_squad_scores_by_hand(caplog):
    predictions = {
        "q1": "eiffel tower!",  # EM 1, F1 1
        "q2": "the 1990s era",  # [1990s, era] vs [1990s]: F1 2/3; vs [in, 1990s]: 1/2; max 2/3, EM 0
        "q3": "Lyon",           # 0, 0
    }                           # q4 unanswered: 0, 0
    with caplog.at_level(logging.WARNING, logger="ctxemb.metrics.squad"):
        scores = squad_scores(predictions, GOLD)
    assert scores == {"exact_match": 25.0, "f1": pytest.approx(41.666666666666664)}  # 100 * (1 + 2/3) / 4
    assert [r.getMessage() for r in caplog.records] == ["1 of 4 gold questions have no prediction; they score 0"]


def test_squad_scores_take_the_max_over_gold_answers():
    gold = {"q": ["a cat", "the big dog", "dog"]}
    # vs [cat]: 0; vs [big, dog]: P 1/2, R 1/2 -> 1/2; vs [dog]: P 1/2, R 1 -> 2/3; EM 0 everywhere
    assert squad_scores({"q": "dog house"}, gold) == {"exact_match": 0.0, "f1": pytest.approx(200 / 3)}
    assert squad_scores({"q": "The dog."}, gold) == {"exact_match": 100.0, "f1": 100.0}


def test_all_answered_logs_nothing_and_nothing_answered_scores_zero(caplog):
    with caplog.at_level(logging.WARNING, logger="ctxemb.metrics.squad"):
        assert squad_scores({"q3": "paris", "q4": "London."}, {"q3": ["Paris"], "q4": ["London"]}) == {
            "exact_match": 100.0, "f1": 100.0}
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="ctxemb.metrics.squad"):
        assert squad_scores({}, GOLD) == {"exact_match": 0.0, "f1": 0.0}
    assert [r.getMessage() for r in caplog.records] == ["4 of 4 gold questions have no prediction; they score 0"]


def test_squad_scores_bad_input():
    with pytest.raises(ValueError, match=r"2 question id\(s\) not in gold, e\.g\. 'x1', 'x2'"):
        squad_scores({"q1": "Eiffel Tower", "x1": "a", "x2": "b"}, GOLD)
    with pytest.raises(ValueError, match=r"gold\['q2'\] has no answers"):
        squad_scores({"q1": "x"}, {"q1": ["x"], "q2": []})
    with pytest.raises(ValueError, match="at least one question"):
        squad_scores({}, {})
    with pytest.raises(TypeError, match=r"gold\['q1'\] must be a sequence of answer strings; got the string 'Paris'"):
        squad_scores({"q1": "Paris"}, {"q1": "Paris"})
    with pytest.raises(TypeError, match=r"gold\['q1'\]\[1\] must be a string; got None"):
        squad_scores({}, {"q1": ["Paris", None]})
    with pytest.raises(TypeError, match=r"predictions\['q1'\] must be a string; got \['Paris'\]"):
        squad_scores({"q1": ["Paris"]}, {"q1": ["Paris"]})
