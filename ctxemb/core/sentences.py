"""Sentence splitting of plain prose, shared by the synthetic training rows of fine-tuning
(:mod:`ctxemb.tasks.passages`) and the passages of document search (:mod:`ctxemb.search.documents`).

A rule, not a model: a sentence ends at . ! or ? (maybe closed by a quote or bracket) followed by white space and a
capital, digit, opening quote or bracket. Good enough for Wikipedia prose; an abbreviation before a capital
("Dr. Smith") gives a short piece, which callers join or drop by a word minimum.
"""

from __future__ import annotations

import re

__all__ = ["split_sentences"]

_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see the module docstring), each exactly as it appears in ``text``; none for a
    blank text."""
    return [s for s in _SENTENCE_END.split(text.strip()) if s]
