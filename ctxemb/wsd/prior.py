"""The sense-frequency prior of nearest-sense WSD: its weight (one number, or one per part of speech) and its term.

Shapes: K candidate senses of a word.

With weight w a candidate k among the K scored ones gains

    w_pos(k) * log((c_k + 1) / (sum_j c_j + K))

with c_k the sense's occurrence count in the training corpus (add-one smoothing: senses the corpus never showed keep
a chance) and w_pos(k) the weight of the candidate's part of speech (read from its sense key), or the one weight for
all. Per-POS weights exist because the parts of speech want different amounts of prior: on the dev sets nouns are best
with a light prior and adjectives with a heavier one (``docs/guide/wsd.md``).

A weight is written ``0.03`` or, per POS, ``NOUN=0.015,VERB=0.02,ADJ=0.04,ADV=0.025`` (WordNet's letters ``n``,
``v``, ``a``, ``r`` are accepted as keys); in a store configuration's name (:attr:`~ctxemb.wsd.build.BuildConfig.name`)
the per-POS form is ``prior-n0.015-v0.02-a0.04-r0.025``.
"""

from __future__ import annotations

import math
import numbers
from typing import Mapping, Sequence, Union

import numpy as np

from ctxemb.wsd.wordnet import universal_pos_of_key

__all__ = ["PRIOR_POS", "PriorWeight", "check_prior_weight", "format_prior_weight", "parse_prior_weight",
           "prior_name_part", "prior_from_name_part", "prior_terms"]

#: The parts of speech a per-POS weight gives a value for (universal tags; adjective satellites count as ADJ).
PRIOR_POS = ("NOUN", "VERB", "ADJ", "ADV")
_LETTERS = {"n": "NOUN", "v": "VERB", "a": "ADJ", "r": "ADV"}
_LETTER_OF = {pos: letter for letter, pos in _LETTERS.items()}

#: One weight for every candidate, or a weight per universal POS tag.
PriorWeight = Union[float, Mapping[str, float]]


def _check_number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < math.inf:
        raise ValueError("%s must be a finite number >= 0, got %r" % (what, value))
    return float(value)


def check_prior_weight(value) -> float | dict[str, float]:
    """Return the prior weight normalised: a float, or a dict ``{NOUN, VERB, ADJ, ADV -> float}``.

    A mapping must give all four parts of speech (keys: universal tags or WordNet letters, any case); one whose
    four values are equal becomes that float, so equal settings have one form.

    Raises:
        ValueError: a number that is not real (bools are refused), negative, NaN or infinite; a mapping with an
            unknown, repeated or missing part of speech (the message names it).
    """
    if not isinstance(value, Mapping):
        return _check_number(value, "prior_weight")
    weights: dict[str, float] = {}
    for key, weight in value.items():
        pos = _LETTERS.get(key.lower(), key.upper()) if isinstance(key, str) else key
        if pos not in PRIOR_POS:
            raise ValueError("prior_weight: unknown part of speech %r (expected one of %s or n, v, a, r)"
                             % (key, ", ".join(PRIOR_POS)))
        if pos in weights:
            raise ValueError("prior_weight: part of speech %s given twice (%r)" % (pos, dict(value)))
        weights[pos] = _check_number(weight, "prior_weight[%s]" % pos)
    missing = [pos for pos in PRIOR_POS if pos not in weights]
    if missing:
        raise ValueError("prior_weight: a per-POS weight needs all of %s; missing %s"
                         % (", ".join(PRIOR_POS), ", ".join(missing)))
    if len(set(weights.values())) == 1:
        return weights["NOUN"]
    return {pos: weights[pos] for pos in PRIOR_POS}


def parse_prior_weight(text: str) -> float | dict[str, float]:
    """Parse ``0.03`` or ``NOUN=0.015,VERB=0.02,ADJ=0.04,ADV=0.025`` (the command-line form).

    Raises:
        ValueError: the text is neither form, or the weight fails :func:`check_prior_weight`.
    """
    text = text.strip()
    if "=" not in text:
        try:
            return check_prior_weight(float(text))
        except ValueError:
            raise ValueError("prior weight: expected a number >= 0 or POS=weight pairs such as "
                             "NOUN=0.015,VERB=0.02,ADJ=0.04,ADV=0.025; got %r" % text) from None
    pairs: dict[str, float] = {}
    for item in text.split(","):
        key, _, number = (part.strip() for part in item.partition("="))
        try:
            weight = float(number)  # "" (no "=") fails here too
        except ValueError:
            raise ValueError("prior weight: %r is not POS=number (in %r)" % (item, text)) from None
        if key in pairs:
            raise ValueError("prior weight: %s given twice in %r" % (key, text))
        pairs[key] = weight
    return check_prior_weight(pairs)


def format_prior_weight(weight: PriorWeight) -> str:
    """The command-line form that :func:`parse_prior_weight` reads back (``0.03``, ``NOUN=0.015,...``)."""
    weight = check_prior_weight(weight)
    if isinstance(weight, float):
        return "%g" % weight
    return ",".join("%s=%g" % (pos, weight[pos]) for pos in PRIOR_POS)


def prior_name_part(weight: PriorWeight) -> str | None:
    """The ``+``-part of a store configuration's name: ``prior0.03``, ``prior-n0.015-v0.02-a0.04-r0.025``; None for
    no prior."""
    weight = check_prior_weight(weight)
    if isinstance(weight, float):
        return "prior%g" % weight if weight else None
    return "prior-" + "-".join("%s%g" % (_LETTER_OF[pos], weight[pos]) for pos in PRIOR_POS)


def prior_from_name_part(part: str) -> float | dict[str, float] | None:
    """The inverse of :func:`prior_name_part`; None when ``part`` is not a prior part."""
    if not part.startswith("prior"):
        return None
    body = part[len("prior"):]
    try:
        if not body.startswith("-"):
            return check_prior_weight(float(body))
        items = body[1:].split("-")
        if len(items) != len(PRIOR_POS) or not all(items):
            return None
        return check_prior_weight({item[0]: float(item[1:]) for item in items})
    except (ValueError, IndexError):
        return None


def prior_terms(keys: Sequence[str], counts: np.ndarray, weight: PriorWeight) -> np.ndarray:
    """The prior term of each candidate, (K,) float64 (see the module docstring).

    Args:
        keys: the K scored candidates' sense keys (their POS picks the weight of a per-POS prior).
        counts: (K,) their occurrence counts in the training corpus.
        weight: a normalised weight (:func:`check_prior_weight`).
    """
    counts = np.asarray(counts, dtype=np.float64)
    log_prior = np.log((counts + 1.0) / (counts.sum() + len(keys)))
    if isinstance(weight, Mapping):
        return np.array([weight[universal_pos_of_key(k)] for k in keys], dtype=np.float64) * log_prior
    return weight * log_prior
