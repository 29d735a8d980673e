"""Synthetic rows from passages: WikiText-2 detokenized, sentences split, cloze questions whose answers are spans of
their passage, and the ``xquad`` task's ``cloze`` training split (no dev or held-out passage read)."""

from __future__ import annotations

import pytest

from ctxemb.tasks.qa.cloze import cloze_questions
from ctxemb.tasks.passages import detokenize_wikitext, split_sentences, wikitext_paragraphs
from ctxemb.tasks.qa.features import encode_qa
from ctxemb.tasks.token.task import TokenFinetuneConfig, load_qa_data
from ctxemb.training.config import TrainConfig
from tests.helpers import write_tiny_model

PASSAGE = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy. Rollo was "
           "crowned in 1066 and took the name Robert. Harald paid 1,200 silver coins to the Count of Flanders "
           "for the ships. Dr. Who came. The duchy grew by 40 % under William the Conqueror.")


def test_detokenize_wikitext_joins_numbers_hyphens_and_punctuation():
    line = " The lobster weighs 0 @.@ 7 – 2 @,@ 200 kg ( 13 lb ) , and it 's a well @-@ known food . "
    assert detokenize_wikitext(line) == "The lobster weighs 0.7 – 2,200 kg (13 lb), and it's a well-known food."


def test_split_sentences_keeps_each_sentence_as_it_stands():
    sentences = split_sentences(PASSAGE)
    assert sentences[1] == "Rollo was crowned in 1066 and took the name Robert."
    assert all(s in PASSAGE for s in sentences)
    assert sentences[3:5] == ["Dr.", "Who came."]  # an abbreviation splits; callers drop short pieces
    assert split_sentences('He said "Go." Then he left.') == ['He said "Go."', "Then he left."]


def test_wikitext_paragraphs_are_plain_text_without_headings_or_unk(tmp_path):
    (tmp_path / "valid.txt").write_text(
        " \n = Title = \n Homarus gammarus is a lobster . It lives in the <unk> Sea . It may grow to 60 cm ( 24 in ) "
        ". \n short line . \n")
    assert wikitext_paragraphs(["valid"], root=tmp_path, min_words=5) == [
        "Homarus gammarus is a lobster. It may grow to 60 cm (24 in)."]
    with pytest.raises(FileNotFoundError, match="test.txt"):
        wikitext_paragraphs(["test"], root=tmp_path)


def test_cloze_questions_answer_with_a_span_of_their_passage():
    qs = cloze_questions([PASSAGE, PASSAGE], per_passage=10, seed=0)  # a repeat is read once
    assert len(qs) == 4  # one per sentence with an answer span; "Dr. Who came." is too short
    for q in qs:
        (text, start), = q.answers
        assert q.context == PASSAGE and PASSAGE[start:start + len(text)] == text
        assert q.question.endswith("?")
        sentence = next(s for s in split_sentences(PASSAGE) if s.find(text) >= 0 and PASSAGE.find(s) <= start)
        assert sentence.replace(text, "").strip() != sentence  # the answer was taken out of its sentence
    by_answer = {q.answers[0][0]: q.question for q in qs}
    if "1066" in by_answer:  # a year takes its preposition with it
        assert by_answer["1066"] == "Rollo was crowned when and took the name Robert?"
    assert cloze_questions([PASSAGE], per_passage=10, seed=0) == cloze_questions([PASSAGE], per_passage=10, seed=0)
    assert len(cloze_questions([PASSAGE], per_passage=2, seed=1)) == 2
    with pytest.raises(ValueError, match="per_passage"):
        cloze_questions([PASSAGE], per_passage=0)


@pytest.mark.parametrize("sentence, answer, question", [
    ("Rollo was crowned in 1066 and took the name Robert.", "1066",
     "Rollo was crowned when and took the name Robert?"),
    ("The duchy grew by 40 % under the rule of its dukes.", "40", "The duchy grew by how much % under the rule of "
                                                                   "its dukes?"),
    ("Harald paid twelve coins to the Count of Flanders for the ships.", "Count of Flanders",
     "Harald paid twelve coins to the what for the ships?"),
])
def test_each_kind_of_span_gets_its_question_word(sentence, answer, question):
    qs = cloze_questions([sentence], per_passage=1, seed=0)
    got = {q.answers[0][0]: q.question for seed in range(20) for q in cloze_questions([sentence], per_passage=1,
                                                                                       seed=seed)}
    assert qs and got[answer] == question


def test_the_xquad_cloze_split_reads_no_dev_or_heldout_passage(tmp_path, shared_data):
    from ctxemb.tasks.qa.squad import load_xquad, xquad_split

    try:
        examples = load_xquad()
    except FileNotFoundError:
        pytest.skip("XQuAD-en is not in the shared data")
    config = TokenFinetuneConfig(task="xquad", train_split="cloze",
                                 train=TrainConfig(learning_rate=1e-4, out_dir=str(tmp_path / "run")))
    train, dev = load_qa_data(config)
    assert dev == xquad_split("dev", examples) and len(train) > 1000
    unseen = {ex.context for part in ("dev", "heldout") for ex in xquad_split(part, examples)}
    assert not {q.context for q in train} & unseen
    assert {q.context for q in train} & {ex.context for ex in xquad_split("train", examples)}
    tokenizer = __import__("ctxemb.modeling.loading", fromlist=["load_tokenizer"]).load_tokenizer(
        str(write_tiny_model(tmp_path / "tiny")))
    # every answer maps onto tokens (encode_qa checks each against its context), and nearly all land in a window
    features = encode_qa(tokenizer, train[:200], max_length=64, doc_stride=16, max_query_length=24)
    assert len({f.example_index for f in features if f.start_position}) >= 190
    with pytest.raises(ValueError, match="eval_split"):
        TokenFinetuneConfig(task="xquad", eval_split="cloze", train=TrainConfig(learning_rate=1e-4,
                                                                                out_dir=str(tmp_path / "x")))
