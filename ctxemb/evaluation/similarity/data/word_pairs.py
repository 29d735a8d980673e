"""Readers for the word-similarity sets (rated word pairs without context; see
:mod:`ctxemb.evaluation.similarity.data` for the ``read_*`` / ``load_*`` convention)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ctxemb.evaluation.similarity.data._files import (
    PathLike,
    parse_float,
    read_lines,
    require_file,
    similarity_data_dir,
)
from ctxemb.evaluation.similarity.records import WordPair

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------- word similarity


@dataclass(frozen=True)
class _WordSimSource:
    path: str
    word1_col: int = 0
    word2_col: int = 1
    score_col: int = 2
    pos_col: int | None = None
    header: bool = False
    sep: str | None = "\t"  # None: any whitespace
    expected: int | None = None


# For each set, the cleanest copy in word-sim/: the originals where they are plain (SimLex-999 and SimVerb keep
# their POS column; MEN's natural form has no "-n" suffixes), Faruqui's copy for RG-65 (no original here).
WORD_SIMILARITY_SETS: dict[str, _WordSimSource] = {
    "simlex999": _WordSimSource("word-sim/originals/SimLex-999/SimLex-999.txt", score_col=3, pos_col=2, header=True,
                                expected=999),
    "wordsim353": _WordSimSource("word-sim/originals/wordsim353/combined.tab", header=True, expected=353),
    "men": _WordSimSource("word-sim/originals/MEN/MEN_dataset_natural_form_full", sep=None, expected=3000),
    "rg65": _WordSimSource("word-sim/faruqui/EN-RG-65.txt", expected=65),
    "simverb3500": _WordSimSource("word-sim/originals/simverb/data/SimVerb-3500.txt", score_col=3, pos_col=2,
                                  expected=3500),
    "simverb500-dev": _WordSimSource("word-sim/originals/simverb/data/SimVerb-500-dev.txt", score_col=3, pos_col=2,
                                     expected=500),
    "simverb3000-test": _WordSimSource("word-sim/originals/simverb/data/SimVerb-3000-test.txt", score_col=3, pos_col=2,
                                       expected=3000),
}


def read_word_pairs(path: PathLike, *, word1_col: int = 0, word2_col: int = 1, score_col: int = 2,
                    pos_col: int | None = None,
                    header: bool = False, sep: str | None = "\t") -> list[WordPair]:
    """Read a word-pair file: one pair a line, columns picked by index (0-based).

    Args:
        path: the file.
        word1_col, word2_col, score_col, pos_col: column indices (``pos_col`` None: no POS).
        header: skip the first line.
        sep: field separator; None splits on any whitespace.

    Raises:
        ValueError: on a line with too few fields or a non-numeric score.
    """
    need = max(c for c in (word1_col, word2_col, score_col, pos_col) if c is not None) + 1
    lines = read_lines(path)
    out = []
    for i, line in enumerate(lines[1:] if header else lines, 2 if header else 1):
        if not line.strip():
            continue
        parts = line.split(sep)
        if len(parts) < need:
            raise ValueError("%s line %d: expected at least %d fields, got %d: %r"
                             % (path, i, need, len(parts), line[:200]))
        out.append(WordPair(parts[word1_col].strip(), parts[word2_col].strip(),
                            parse_float(parts[score_col], path, i, "score"),
                            parts[pos_col].strip() if pos_col is not None else None))
    return out


def load_word_similarity(name: str, root: PathLike | None = None) -> list[WordPair]:
    """A word-similarity set by name: one of ``WORD_SIMILARITY_SETS`` ("simlex999", "wordsim353", "men", "rg65",
    "simverb3500", "simverb500-dev", "simverb3000-test").

    Raises:
        ValueError: for an unknown name.
        FileNotFoundError: if the file is missing.
    """
    if name not in WORD_SIMILARITY_SETS:
        raise ValueError("unknown word-similarity set %r; valid names: %s" % (name, ", ".join(WORD_SIMILARITY_SETS)))
    src = WORD_SIMILARITY_SETS[name]
    path = require_file(similarity_data_dir(root) / src.path, "word-similarity set %s" % name)
    pairs = read_word_pairs(path, word1_col=src.word1_col, word2_col=src.word2_col, score_col=src.score_col,
                            pos_col=src.pos_col, header=src.header, sep=src.sep)
    if src.expected is not None and len(pairs) != src.expected:
        logger.warning("%s has %d pairs; the published set has %d", path, len(pairs), src.expected)
    return pairs
