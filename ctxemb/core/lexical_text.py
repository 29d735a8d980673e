"""The form of a text that BM25 tokenises, shared by hybrid search (:mod:`ctxemb.search.lexical`) and BM25 hard-negative
mining (:func:`ctxemb.tasks.contrastive.mining.bm25_candidates`).

``bm25s.tokenize`` lower-cases and splits on word characters, with no Unicode normalisation: "ﬁle" (one ligature
character) and "file", "Ｆｕｌｌ" (full-width letters) and "full", or "é" composed (one code point) and decomposed
("e" and a combining accent) would be different terms, and a query would miss the documents that spell its words
the other way. Texts and queries are therefore brought to one form first: Unicode NFKC (compatibility characters
replaced by their plain equivalents, accents composed) and case folding (``str.casefold``: "Straße" and "STRASSE"
both give "strasse"), then NFKC again, since case folding can leave a text that is not in NFKC. bm25s's own
lower-casing stays on; on case-folded text it changes nothing.
"""

from __future__ import annotations

import unicodedata
from typing import Iterable

__all__ = ["lexical_form", "lexical_forms"]


def lexical_form(text: str) -> str:
    """``text`` as BM25 tokenises it: NFKC, case-folded, NFKC (see the module docstring)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def lexical_forms(texts: Iterable[str]) -> list[str]:
    """:func:`lexical_form` of each text."""
    return [lexical_form(t) for t in texts]
