"""SQuAD v1.1 exact match and token F1, computed exactly as the official ``evaluate-v1.1.py`` script.

Both compare normalised answers (:func:`normalize_answer`); a question scores the best over its gold answers, and
the totals are percentages over every gold question, an unanswered one scoring 0. Where the official script is
silent this module is stricter: predictions for unknown question ids, questions without gold answers and an empty
gold set are errors, and the unanswered questions are counted in one logged warning (the script prints one line
per question).

Note the script's quirk, kept: two answers that normalise to the empty string (e.g. "the", "!!!") match exactly
(EM 1) but share no token (F1 0).
"""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from typing import Mapping, Sequence

logger = logging.getLogger(__name__)

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """The official normalisation, in its order: lower case, drop ``string.punctuation`` characters, replace the
    whole words a / an / the by a space, then split on whitespace and join with single spaces.

    Raises:
        TypeError: if ``s`` is not a string.
    """
    if not isinstance(s, str):
        raise TypeError("answer must be a string; got %r (%s)" % (s, type(s).__name__))
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, ground_truth: str) -> bool:
    """Whether the two answers are equal after :func:`normalize_answer`.

    Raises:
        TypeError: if either is not a string.
    """
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def token_f1(prediction: str, ground_truth: str) -> float:
    """F1 of the normalised answers' whitespace tokens, counted as multisets: with ``same`` the size of their
    intersection, P = same / #prediction tokens, R = same / #gold tokens, F1 = 2PR / (P + R).

    Returns:
        F1 in [0, 1]; 0.0 when the answers share no token (including when either normalises to nothing).

    Raises:
        TypeError: if either is not a string.
    """
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(ground_truth).split()
    n_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if n_same == 0:
        return 0.0
    precision = n_same / len(pred_tokens)
    recall = n_same / len(gold_tokens)
    return 2.0 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """The official SQuAD v1.1 scores of ``predictions``.

    Each gold question scores the best exact match and the best F1 of its prediction over its gold answers; a
    question without a prediction scores 0 (and the number of such questions is logged as one warning).

    Args:
        predictions: question id -> predicted answer text.
        gold: question id -> its gold answer texts (at least one).

    Returns:
        ``{"exact_match": ..., "f1": ...}``, both in percent (0..100) of the gold questions.

    Raises:
        ValueError: if ``gold`` is empty, a gold question has no answers, or ``predictions`` has ids that are not
            in ``gold`` (naming a few).
        TypeError: if a gold entry is a single string rather than a sequence of answers, or an answer or
            prediction is not a string.
    """
    if len(gold) == 0:
        raise ValueError("gold must hold at least one question; got an empty mapping")
    unknown = [qid for qid in predictions if qid not in gold]
    if unknown:
        raise ValueError(
            "predictions has %d question id(s) not in gold, e.g. %s; predictions must be keyed by gold question ids"
            % (len(unknown), ", ".join(repr(q) for q in unknown[:5]))
        )
    for qid, answers in gold.items():
        if isinstance(answers, str):
            raise TypeError("gold[%r] must be a sequence of answer strings; got the string %r" % (qid, answers[:50]))
        if len(answers) == 0:
            raise ValueError("gold[%r] has no answers; every gold question needs at least one" % (qid,))
        for i, a in enumerate(answers):
            if not isinstance(a, str):
                raise TypeError("gold[%r][%d] must be a string; got %r (%s)" % (qid, i, a, type(a).__name__))
    em_total = f1_total = 0.0
    n_unanswered = 0
    for qid, answers in gold.items():
        if qid not in predictions:
            n_unanswered += 1
            continue
        prediction = predictions[qid]
        if not isinstance(prediction, str):
            raise TypeError("predictions[%r] must be a string; got %r (%s)"
                            % (qid, prediction, type(prediction).__name__))
        em_total += max(float(exact_match(prediction, a)) for a in answers)
        f1_total += max(token_f1(prediction, a) for a in answers)
    if n_unanswered:
        logger.warning("%d of %d gold questions have no prediction; they score 0", n_unanswered, len(gold))
    return {"exact_match": 100.0 * em_total / len(gold), "f1": 100.0 * f1_total / len(gold)}
