"""ctxemb.metrics.conlleval: conlleval's chunk rules on hand-made edge cases, its scores written out by hand, and
agreement with seqeval (default mode, "compatible with conlleval.pl") on IOB1/IOB2 tags, fixed and random."""

from __future__ import annotations

import random
import re

import pytest
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities

from ctxemb.metrics.conlleval import ChunkScores, TypeScores, chunk_scores, chunks


@pytest.mark.parametrize("tags, expected", [
    ([], []),
    (["O", "O"], []),
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
    (["O", "I-PER", "I-PER", "O"], [("PER", 1, 3)]),                     # I- after O starts a chunk
    (["I-PER"], [("PER", 0, 1)]),                                        # I- at the sentence start, too
    (["B-LOC", "I-PER", "I-PER"], [("LOC", 0, 1), ("PER", 1, 3)]),       # I-PER after B-LOC: a new chunk
    (["B-LOC", "I-LOC", "I-PER"], [("LOC", 0, 2), ("PER", 2, 3)]),       # a type change ends a chunk
    (["B-X", "B-X"], [("X", 0, 1), ("X", 1, 2)]),
    (["B-X", "I-X", "B-X", "I-X"], [("X", 0, 2), ("X", 2, 4)]),
    (["O", "B-X", "I-X"], [("X", 1, 3)]),                                # a chunk at the sentence end
    (["I-X", "I-X", "B-X", "I-X", "O", "I-Y"], [("X", 0, 2), ("X", 2, 4), ("Y", 5, 6)]),  # IOB1
    (["B-A-B", "I-A-B", "B-C"], [("A-B", 0, 2), ("C", 2, 3)]),           # split at the first hyphen
    # IOE1 / IOE2: E- ends a chunk
    (["I-X", "E-X", "E-X", "O"], [("X", 0, 2), ("X", 2, 3)]),
    (["E-X", "I-X", "E-X"], [("X", 0, 1), ("X", 1, 3)]),
    (["O", "E-X"], [("X", 1, 2)]),
    # conlleval has no rule for S-, nor for B- after E-: only a type change or O ends such a chunk
    (["S-X", "S-X"], [("X", 0, 2)]),
    (["E-X", "B-X"], [("X", 0, 2)]),
    (["B-X", "S-X", "S-Y", "O", "S-X"], [("X", 0, 2), ("Y", 2, 3), ("X", 4, 5)]),
])
def test_chunks_follow_conllevals_rules(tags, expected):
    assert chunks(tags) == expected
    assert chunks(tuple(tags)) == expected


@pytest.mark.parametrize("bad", ["B_X", "X", "b-x", "B-", "O-X", "-X", "B-PER ", "B- X", "", "o"])
def test_malformed_tags_name_position_and_tag(bad):
    with pytest.raises(ValueError, match=r"tags\[1\] is " + re.escape(repr(bad))):
        chunks(["O", bad, "O"])
    with pytest.raises(ValueError, match=r"pred\[1\]\[2\] is "):
        chunk_scores([["O"], ["O", "O", "O"]], [["O"], ["O", "O", bad]])


def test_wrong_types_and_lengths():
    with pytest.raises(TypeError, match=r"tags\[0\] must be a tag string; got 1"):
        chunks([1])
    with pytest.raises(TypeError, match="got the string 'B-X'"):
        chunks("B-X")
    with pytest.raises(TypeError, match=r"gold\[0\] must be a sequence of tags"):
        chunk_scores(["B-X", "O"], [["B-X"], ["O"]])  # a single sentence instead of a list of sentences
    with pytest.raises(TypeError, match="sequences of sentences"):
        chunk_scores("B-X", "B-X")
    with pytest.raises(ValueError, match="sentence 1 has 3 gold tags but 2 predicted tags"):
        chunk_scores([["O"], ["O", "B-X", "I-X"]], [["O"], ["O", "B-X"]])
    with pytest.raises(ValueError, match="same number of sentences; got 2 and 1"):
        chunk_scores([["O"], ["O"]], [["O"]])


GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG"]]
PRED = [["B-PER", "I-PER", "O", "B-PER"], ["O", "B-ORG", "I-ORG", "O"]]


def test_scores_by_hand():
    # gold chunks PER(0,2) LOC(3,4) | ORG(1,4); predicted PER(0,2) PER(3,4) | ORG(1,3); only PER(0,2) is correct.
    s = chunk_scores(GOLD, PRED)
    assert isinstance(s, ChunkScores)
    assert (s.n_gold, s.n_pred, s.n_correct, s.n_tokens) == (3, 3, 1, 8)
    assert s.precision == pytest.approx(100 / 3) and s.recall == pytest.approx(100 / 3)
    assert s.f1 == pytest.approx(100 / 3)
    assert s.token_accuracy == 75.0  # 6 of 8 tags equal
    assert list(s.per_type) == ["LOC", "ORG", "PER"]
    assert s.per_type["PER"] == TypeScores(precision=50.0, recall=100.0, f1=pytest.approx(200 / 3),
                                           n_gold=1, n_pred=2, n_correct=1)
    assert s.per_type["LOC"] == TypeScores(0.0, 0.0, 0.0, n_gold=1, n_pred=0, n_correct=0)
    assert s.per_type["ORG"] == TypeScores(0.0, 0.0, 0.0, n_gold=1, n_pred=1, n_correct=0)


def test_a_type_only_predicted_is_reported():
    s = chunk_scores([["O", "O"]], [["B-MISC", "O"]])
    assert s.per_type == {"MISC": TypeScores(0.0, 0.0, 0.0, n_gold=0, n_pred=1, n_correct=0)}
    assert (s.precision, s.recall, s.f1, s.token_accuracy) == (0.0, 0.0, 0.0, 50.0)


def test_all_o_gives_zero_without_dividing_by_zero():
    s = chunk_scores([["O", "O"], ["O"]], [["O", "O"], ["O"]])
    assert (s.precision, s.recall, s.f1, s.n_gold, s.n_pred, s.n_correct) == (0.0, 0.0, 0.0, 0, 0, 0)
    assert s.per_type == {} and s.token_accuracy == 100.0
    s = chunk_scores([["B-X", "O"]], [["O", "O"]])  # nothing predicted: P undefined, R 0
    assert (s.precision, s.recall, s.f1, s.n_gold, s.n_pred) == (0.0, 0.0, 0.0, 1, 0)


def test_empty_sentences_and_no_sentences():
    s = chunk_scores([[], ["B-X"], []], [[], ["B-X"], []])
    assert (s.precision, s.recall, s.f1, s.n_gold, s.n_tokens, s.token_accuracy) == (100.0, 100.0, 100.0, 1, 1, 100.0)
    s = chunk_scores([], [])
    assert (s.precision, s.recall, s.f1, s.n_tokens, s.token_accuracy, s.per_type) == (0.0, 0.0, 0.0, 0, 0.0, {})


def test_chunks_never_cross_sentences():
    # Read as one sentence, gold would be one chunk X(1,3); per sentence it is X(1,2) and X(0,1), both found.
    s = chunk_scores([["O", "B-X"], ["I-X", "O"]], [["O", "B-X"], ["B-X", "O"]])
    assert (s.n_gold, s.n_pred, s.n_correct, s.f1) == (2, 2, 2, 100.0)


def test_a_chunk_is_correct_only_when_type_start_and_end_match():
    gold = [["B-X", "I-X", "O", "B-Y", "B-Z", "I-Z"]]
    pred = [["B-X", "O", "O", "B-Z", "B-Z", "I-Z"]]  # X ends early, Y mislabelled Z, Z right
    s = chunk_scores(gold, pred)
    assert (s.n_gold, s.n_pred, s.n_correct) == (3, 3, 1)
    assert (s.per_type["X"].n_correct, s.per_type["Y"].n_correct, s.per_type["Z"].n_correct) == (0, 0, 1)
    assert (s.per_type["Z"].n_pred, s.per_type["Z"].precision, s.per_type["Z"].recall) == (2, 50.0, 100.0)
    # a chunk predicted one token too long is wrong as well
    assert chunk_scores([["B-X", "O"]], [["B-X", "I-X"]]).n_correct == 0


def _assert_agrees_with_seqeval(gold, pred):
    s = chunk_scores(gold, pred)
    gold, pred = [list(x) for x in gold], [list(x) for x in pred]
    assert s.precision == pytest.approx(100 * precision_score(gold, pred, zero_division=0), abs=1e-9)
    assert s.recall == pytest.approx(100 * recall_score(gold, pred, zero_division=0), abs=1e-9)
    assert s.f1 == pytest.approx(100 * f1_score(gold, pred, zero_division=0), abs=1e-9)
    if s.n_gold + s.n_pred == 0:  # seqeval's report averages over no types: a RuntimeWarning
        assert s.per_type == {}
        return
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    types = {k for k in report if not k.endswith(" avg")}
    assert set(s.per_type) == types
    for t in types:
        mine, ref = s.per_type[t], report[t]
        assert mine.precision == pytest.approx(100 * ref["precision"], abs=1e-9)
        assert mine.recall == pytest.approx(100 * ref["recall"], abs=1e-9)
        assert mine.f1 == pytest.approx(100 * ref["f1-score"], abs=1e-9)
        assert mine.n_gold == ref["support"]


SEQEVAL_FIXTURES = [
    (GOLD, PRED),
    ([["O", "I-PER", "I-PER", "O"]], [["O", "B-PER", "I-PER", "O"]]),
    ([["B-LOC", "I-PER", "I-PER"]], [["B-LOC", "B-PER", "I-PER"]]),
    ([["B-X", "B-X", "O", "B-Y", "I-Y"]], [["B-X", "I-X", "O", "I-Y", "I-Y"]]),
    ([["I-X", "I-X", "B-X", "I-X", "O", "I-Y"]], [["B-X", "I-X", "B-X", "I-X", "O", "B-Y"]]),
    ([["O", "B-X"], ["I-X", "O"]], [["O", "B-X"], ["B-X", "O"]]),
    ([[], ["B-X"], []], [[], ["B-X"], []]),
    ([["O", "O"]], [["B-MISC", "O"]]),
    ([["B-X", "O"]], [["O", "O"]]),
    ([["O", "O"]], [["O", "O"]]),
]


@pytest.mark.parametrize("gold, pred", SEQEVAL_FIXTURES)
def test_agrees_with_seqeval_on_fixtures(gold, pred):
    _assert_agrees_with_seqeval(gold, pred)


def _random_sentences(rng: random.Random, n_sentences: int) -> list[list[str]]:
    def tag():
        prefix = rng.choice("OOBI")  # I- after O or another type: ill-formed IOB2 starts, on purpose
        return "O" if prefix == "O" else "%s-%s" % (prefix, rng.choice(("PER", "LOC", "ORG")))
    return [[tag() for _ in range(rng.randint(0, 12))] for _ in range(n_sentences)]


def _perturb(rng: random.Random, gold: list[list[str]]) -> list[list[str]]:
    """A prediction close to gold: each tag kept with probability 0.7, else replaced by a random tag."""
    noise = _random_sentences(rng, len(gold))
    return [[g if rng.random() < 0.7 or not noise[i] else rng.choice(noise[i]) for g in sent]
            for i, sent in enumerate(gold)]


def test_agrees_with_seqeval_on_random_tags():
    rng = random.Random(0)
    all_gold, all_pred = [], []
    for _ in range(200):
        gold = _random_sentences(rng, rng.randint(1, 4))
        pred = _perturb(rng, gold)
        _assert_agrees_with_seqeval(gold, pred)
        all_gold += gold
        all_pred += pred
    s = chunk_scores(all_gold, all_pred)
    assert s.n_gold > 500 and 0 < s.n_correct < s.n_pred  # the corpus is not degenerate
    _assert_agrees_with_seqeval(all_gold, all_pred)
    for g, p in zip(all_gold, all_pred):  # chunk sets against seqeval's get_entities (inclusive ends)
        assert chunks(g) == [(t, a, b + 1) for t, a, b in get_entities(g)]
        assert chunks(p) == [(t, a, b + 1) for t, a, b in get_entities(p)]
