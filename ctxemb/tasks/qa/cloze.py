"""Synthetic cloze questions for extractive QA from unlabelled passages (Lewis et al. 2019, "Unsupervised Question
Answering by Cloze Translation"; Dhingra et al. 2018, "Simple and Effective Semi-Supervised Question Answering").

A question is a sentence of the passage with an answer span taken out and a question word in its place: from
"William was crowned in 1066 at Westminster." the span "1066" (after "in") gives "William was crowned when at
Westminster?". The answer is the span where it stands in the passage, so the model learns what extractive QA
needs from a few hundred real questions: find the sentence the question is about, and the boundaries of the span
that fills it. Lewis et al. report that this identity mapping already trains span selection; the question words
follow the span's kind:

- a year (1000-2029), with a preposition before it (in, during, since, until, by, from, before, after) taken out
  with it: "when";
- another number (digits, maybe with a unit word after it): "how many" / "how much";
- a run of capitalised words (1 to 5, "of", "the", "and", "de" allowed inside) that does not start the sentence:
  "what".

Used as an intermediate stage (:mod:`ctxemb.training.intermediate`) before the XQuAD articles: the task ``xquad``
with ``train_split = "cloze"`` trains on cloze questions from WikiText-2 (valid and test) and from the passages of
the XQuAD *training* articles; the dev and held-out passages are never read.
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from ctxemb.core.validation import check_int
from ctxemb.tasks.passages import split_sentences
from ctxemb.tasks.qa.squad import QAExample

__all__ = ["cloze_questions"]

_PREPOSITIONS = r"(?:[Ii]n|[Dd]uring|[Ss]ince|[Uu]ntil|[Bb]y|[Ff]rom|[Bb]efore|[Aa]fter) "
_YEAR = re.compile(rf"(?P<prep>{_PREPOSITIONS})?\b(?P<span>1\d\d\d|20[0-2]\d)\b(?!\.\d|,\d)")
_NUMBER = re.compile(r"(?<![\w.,])(?P<span>\d[\d,]*(?:\.\d+)?)(?![\w.,]*\d)(?P<unit> (?:%|per cent|percent|[a-z]+))?")
_NAME = re.compile(r"\b(?P<span>[A-Z][\w'-]*(?: (?:(?:of|the|and|de) )?[A-Z][\w'-]*){0,4})")
_MAX_ANSWER_WORDS = 6


def _candidates(sentence: str) -> list[tuple[int, int, int, int, str]]:
    """(cut start, cut end, answer start, answer end, question word) of the sentence's answer spans: the cut is
    what the question word replaces (a year's preposition goes with it), the answer what the model must find."""
    out, taken = [], set()
    for m in _YEAR.finditer(sentence):
        cut = m.start("prep") if m.group("prep") else m.start("span")
        out.append((cut, m.end("span"), m.start("span"), m.end("span"), "when"))
        taken.update(range(m.start("span"), m.end("span")))
    for m in _NUMBER.finditer(sentence):
        if m.start("span") in taken:
            continue
        word = "how much" if m.group("unit") and m.group("unit").strip() in ("%", "per cent", "percent") \
            else "how many"
        out.append((m.start("span"), m.end("span"), m.start("span"), m.end("span"), word))
    for m in _NAME.finditer(sentence):
        span = m.group("span")
        if m.start() == 0 or len(span) < 2 or len(span.split()) > _MAX_ANSWER_WORDS:
            continue  # a capital at the sentence's start says nothing; initials are no answer; long runs are titles
        out.append((m.start("span"), m.end("span"), m.start("span"), m.end("span"), "what"))
    return out


def cloze_questions(passages: Sequence[str], *, per_passage: int = 2, seed: int = 0, min_words: int = 8,
                    title: str = "cloze") -> list[QAExample]:
    """Cloze questions (module docstring) from ``passages``: up to ``per_passage`` per distinct passage, each from a
    different sentence, drawn with ``seed``.

    Args:
        passages: the texts (repeats are read once).
        per_passage: questions per passage (fewer where fewer sentences have an answer span).
        seed: the draw's seed.
        min_words: sentences shorter than this give no question (too little to find them by).
        title: the questions' ``title``.

    Returns:
        :class:`~ctxemb.tasks.qa.squad.QAExample` rows whose one answer is ``(text, start)`` in the passage.
    """
    per_passage = check_int(per_passage, "per_passage", low=1)
    rng = random.Random(seed)
    out = []
    for p, passage in enumerate(dict.fromkeys(passages)):
        usable = []
        pos = 0
        for sentence in split_sentences(passage):
            begin = passage.index(sentence, pos)
            pos = begin + len(sentence)
            spans = _candidates(sentence) if len(sentence.split()) >= min_words else []
            if spans:
                usable.append((begin, sentence, spans))
        for k, (begin, sentence, spans) in enumerate(rng.sample(usable, min(per_passage, len(usable)))):
            cut0, cut1, a0, a1, word = rng.choice(spans)
            question = (sentence[:cut0] + word + sentence[cut1:]).rstrip(" .!;:") + "?"
            answer = sentence[a0:a1]
            assert passage[begin + a0:begin + a1] == answer
            out.append(QAExample(id=f"{title}-{p}-{k}", title=title, context=passage, question=question,
                                 answers=((answer, begin + a0),)))
    return out
