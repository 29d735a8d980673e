"""Passages as text for synthetic training rows (inverse cloze rows, cloze questions): sentence splitting (from
:mod:`ctxemb.core.sentences`), and the paragraphs of WikiText-2 turned back into plain text.

WikiText-2 (Merity et al. 2016) is stored tokenized: words and punctuation apart (``word , word .``), numbers split
as ``1 @,@ 000`` and ``2 @.@ 5``, hyphens as ``@-@``, rare words as ``<unk>``, headings as ``= = Title = =``. The
paragraphs read here are joined back (``word, word.``, ``1,000``, ``2.5``), headings are left out, and sentences with
an ``<unk>`` are dropped from their paragraph (XQuAD's passages, the text the rows are for, have none).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from ctxemb.core.paths import shared_data_dir
from ctxemb.core.sentences import split_sentences

__all__ = ["detokenize_wikitext", "split_sentences", "wikitext_paragraphs"]

_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" 's ", "'s "), (" n't ", "n't "))
_SPACE_BEFORE = re.compile(r" ([,.;:!?)\]%])")
_SPACE_AFTER = re.compile(r"([(\[$]) ")


def detokenize_wikitext(line: str) -> str:
    """One WikiText-2 line as plain text (module docstring); quotes keep their spaces."""
    text = f" {line.strip()} "
    for tokenized, plain in _JOINS:
        text = text.replace(tokenized, plain)
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text)).strip()


def wikitext_paragraphs(splits: Iterable[str] = ("valid", "test"), *, root: str | Path | None = None,
                        min_words: int = 40) -> list[str]:
    """The paragraphs of WikiText-2 ``splits`` as plain text, headings and sentences with ``<unk>`` left out.

    Args:
        splits: of ``valid``, ``test`` (the shared data folder holds no train split).
        root: the folder with ``{split}.txt``; None reads ``shared_data_dir() / "corpora" / "wikitext-2"``.
        min_words: paragraphs shorter than this (after their ``<unk>`` sentences are dropped) are left out.

    Raises:
        FileNotFoundError: a split's file is missing (its path named).
    """
    base = Path(root) if root is not None else shared_data_dir() / "corpora" / "wikitext-2"
    out = []
    for split in splits:
        path = base / f"{split}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"WikiText-2 split {split!r}: {path} not found")
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if not line or line.startswith("="):
                continue
            kept = " ".join(s for s in split_sentences(detokenize_wikitext(line)) if "<unk>" not in s)
            if len(kept.split()) >= min_words:
                out.append(kept)
    return out
