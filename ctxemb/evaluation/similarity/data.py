"""Readers for the similarity benchmarks: WiC, STS-B, SICK, CoSimLex, CoInCo usage similarity, SCWS and the
word-similarity sets, plus the sentence corpus used for decontextualised word vectors.

Every data set comes in two layers:

- ``read_*(path, ...)`` parses one file in its published format and knows nothing about where files live;
- ``load_*(split, root=None)`` maps a split name to the file under the shared data folder
  (``shared_data_dir() / "similarity"`` unless ``root`` is given) and checks that it is there.

They return the records of :mod:`ctxemb.evaluation.similarity.records` (words in context are
:class:`WordInContext`).

Splits that the shared folder deliberately holds back (WiC test, STS-B test, SICK test, SCWS) raise a
``FileNotFoundError`` that says so; pass the path of your own copy to the ``read_*`` function instead.
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ctxemb._validation import check_choice
from ctxemb.evaluation.similarity.records import (
    CoSimLexExample,
    ScwsExample,
    SentencePair,
    UsimExample,
    WicExample,
    WordInContext,
    WordPair,
)
from ctxemb.paths import shared_data_dir

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


# --------------------------------------------------------------------------------------------------- helpers


def similarity_data_dir(root: PathLike | None = None) -> Path:
    """The folder that holds wic/, stsb/, sick/, cosimlex/, coinco-usim/ and word-sim/.

    Args:
        root: use this folder instead of ``shared_data_dir() / "similarity"``.

    Raises:
        FileNotFoundError: if the folder does not exist.
    """
    path = Path(root) if root is not None else shared_data_dir() / "similarity"
    if not path.is_dir():
        raise FileNotFoundError("similarity data folder %s does not exist" % path)
    return path


def _require_file(path: Path, what: str, held_out: bool = False) -> Path:
    if path.is_file():
        return path
    if held_out:
        raise FileNotFoundError(
            "%s is not in the shared data folder (expected at %s): this split is held out for independent "
            "evaluation. Pass the path of your own copy to the matching read_* function." % (what, path)
        )
    raise FileNotFoundError("%s not found at %s" % (what, path))


def _read_lines(path: PathLike) -> list[str]:
    """Lines of a UTF-8 text file without their line endings (CRLF files included); a trailing empty line is dropped."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError("%s is not UTF-8 text (%s at byte %d)" % (path, e.reason, e.start)) from None
    lines = re.split(r"\r\n|\n|\r", text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _float(value: str, path: PathLike, line_no: int, field: str) -> float:
    try:
        out = float(value)
    except ValueError:
        raise ValueError("%s line %d: %s must be a number; got %r" % (path, line_no, field, value)) from None
    if not math.isfinite(out):
        raise ValueError("%s line %d: %s must be finite; got %r" % (path, line_no, field, value))
    return out


def _int(value: str, path: PathLike, line_no: int, field: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError("%s line %d: %s must be an integer; got %r" % (path, line_no, field, value)) from None


def _fields(line: str, path: PathLike, line_no: int, expected: int | tuple[int, int],
            sep: str | None = "\t") -> list[str]:
    parts = line.split(sep)
    low, high = (expected, expected) if isinstance(expected, int) else expected
    if not (low <= len(parts) <= high):
        want = str(low) if low == high else "%d to %d" % (low, high)
        raise ValueError("%s line %d: expected %s %s-separated fields, got %d: %r"
                         % (path, line_no, want, "tab" if sep == "\t" else "whitespace", len(parts), line[:200]))
    return parts


# --------------------------------------------------------------------------------------------------- WiC


def read_wic(data_path: PathLike, gold_path: PathLike | None = None) -> list[WicExample]:
    """Read a WiC ``*.data.txt`` file and, if given, its ``*.gold.txt``.

    Data lines are ``target <tab> PoS <tab> index1-index2 <tab> example_1 <tab> example_2`` with tokenised
    examples (split on single spaces); gold lines are "T" or "F".

    Returns:
        The examples in file order (``label`` None when ``gold_path`` is None).

    Raises:
        ValueError: on a malformed line, an index outside its sentence, a gold label other than T/F, or gold and
            data files of different lengths.
    """
    lines = _read_lines(data_path)
    labels: list[bool | None] = [None] * len(lines)
    if gold_path is not None:
        gold = _read_lines(gold_path)
        if len(gold) != len(lines):
            raise ValueError("WiC gold file %s has %d lines but data file %s has %d"
                             % (gold_path, len(gold), data_path, len(lines)))
        for i, g in enumerate(gold, 1):
            g = g.strip()
            if g not in ("T", "F"):
                raise ValueError("%s line %d: gold label must be T or F; got %r" % (gold_path, i, g))
            labels[i - 1] = g == "T"
    out = []
    for i, line in enumerate(lines, 1):
        lemma, pos, idx, s1, s2 = _fields(line, data_path, i, 5)
        m = re.fullmatch(r"(\d+)-(\d+)", idx)
        if m is None:
            raise ValueError("%s line %d: index field must look like '3-7'; got %r" % (data_path, i, idx))
        i1, i2 = int(m.group(1)), int(m.group(2))
        t1, t2 = tuple(s1.split(" ")), tuple(s2.split(" "))
        for tokens, index, which in ((t1, i1, 1), (t2, i2, 2)):
            if index >= len(tokens):
                raise ValueError("%s line %d: index%d=%d is outside example_%d (%d words)"
                                 % (data_path, i, which, index, which, len(tokens)))
        out.append(WicExample(lemma, pos, WordInContext(t1, i1, i1 + 1), WordInContext(t2, i2, i2 + 1), labels[i - 1]))
    return out


def load_wic(split: str, root: PathLike | None = None) -> list[WicExample]:
    """WiC ``split`` ("train": 5,428 pairs, "dev": 638; "test" is held out) from ``root/wic/<split>/``."""
    check_choice(split, "split for WiC", ("train", "dev", "test"))
    base = similarity_data_dir(root) / "wic" / split
    data = _require_file(base / ("%s.data.txt" % split), "WiC %s data" % split, held_out=split == "test")
    gold = _require_file(base / ("%s.gold.txt" % split), "WiC %s gold" % split, held_out=split == "test")
    return read_wic(data, gold)


# --------------------------------------------------------------------------------------------------- STS-B, SICK


def read_stsb(path: PathLike) -> list[SentencePair]:
    """Read an STS Benchmark ``sts-*.csv`` file.

    Lines are tab-separated ``genre, filename, year, id, score, sentence1, sentence2`` with optional licence
    fields after sentence2 (fields 5-7, 1-based, are the ones used). The file is not CSV-quoted: quotes are text.

    Raises:
        ValueError: on a line with fewer than 7 fields or a score outside [0, 5].
    """
    out = []
    for i, line in enumerate(_read_lines(path), 1):
        parts = line.split("\t")
        if len(parts) < 7:
            raise ValueError("%s line %d: expected at least 7 tab-separated fields, got %d: %r"
                             % (path, i, len(parts), line[:200]))
        score = _float(parts[4], path, i, "score")
        if not 0.0 <= score <= 5.0:
            raise ValueError("%s line %d: STS score must be in [0, 5]; got %s" % (path, i, score))
        out.append(SentencePair(parts[5], parts[6], score, id="/".join(parts[:4])))
    return out


def load_stsb(split: str, root: PathLike | None = None) -> list[SentencePair]:
    """STS-B ``split`` ("train": 5,749 pairs, "dev": 1,500; "test" is held out) from ``root/stsb/sts-<split>.csv``."""
    check_choice(split, "split for STS-B", ("train", "dev", "test"))
    path = similarity_data_dir(root) / "stsb" / ("sts-%s.csv" % split)
    return read_stsb(_require_file(path, "STS-B %s" % split, held_out=split == "test"))


def read_sick(path: PathLike) -> list[SentencePair]:
    """Read a SICK file: a header, then ``pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment``.

    Raises:
        ValueError: on a missing header, a malformed line or a relatedness score outside [1, 5].
    """
    lines = _read_lines(path)
    if not lines or not lines[0].startswith("pair_ID"):
        raise ValueError("%s: expected a SICK header line starting with 'pair_ID'; got %r"
                         % (path, lines[0][:100] if lines else ""))
    header = lines[0].split("\t")
    try:
        cols = [header.index(c) for c in ("pair_ID", "sentence_A", "sentence_B", "relatedness_score")]
    except ValueError:
        raise ValueError("%s: the header must name pair_ID, sentence_A, sentence_B and relatedness_score; got %s"
                         % (path, header)) from None
    ent = header.index("entailment_judgment") if "entailment_judgment" in header else None
    out = []
    for i, line in enumerate(lines[1:], 2):
        parts = _fields(line, path, i, len(header))
        score = _float(parts[cols[3]], path, i, "relatedness_score")
        if not 1.0 <= score <= 5.0:
            raise ValueError("%s line %d: SICK relatedness must be in [1, 5]; got %s" % (path, i, score))
        out.append(SentencePair(parts[cols[1]], parts[cols[2]], score, id=parts[cols[0]],
                                label=parts[ent] if ent is not None else None))
    return out


_SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "dev": "SICK_trial.txt",
               "test": "SICK_test_annotated.txt"}


def load_sick(split: str, root: PathLike | None = None) -> list[SentencePair]:
    """SICK ``split`` ("train": 4,500 pairs; "trial" or its alias "dev": 500; "test" is held out) from
    ``root/sick/``."""
    check_choice(split, "split for SICK", tuple(_SICK_FILES))
    path = similarity_data_dir(root) / "sick" / _SICK_FILES[split]
    return read_sick(_require_file(path, "SICK %s" % split, held_out=split == "test"))


# --------------------------------------------------------------------------------------------------- CoSimLex

_MARK = re.compile(r"<strong>(.*?)</strong>", re.S)
# Words are runs of letters/digits (with inner apostrophes or hyphens); every other non-space character is its own
# token. Marked words are kept whole. The encoder's tokenizer splits further, so this only decides word boundaries.
_WORD = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]", re.U)


def _tokenize_marked(text: str, path: PathLike, line_no: int) -> tuple[tuple[str, ...], list[tuple[int, str]]]:
    """Split a context with ``<strong>...</strong>`` marks into words; return the words and (index, word) of each
    mark."""
    tokens: list[str] = []
    marks: list[tuple[int, str]] = []
    pos = 0
    for m in _MARK.finditer(text):
        tokens.extend(_WORD.findall(text[pos : m.start()]))
        marked = m.group(1).strip()
        if not marked or re.search(r"\s", marked):
            raise ValueError("%s line %d: a <strong> mark must hold one word; got %r" % (path, line_no, m.group(1)))
        marks.append((len(tokens), marked))
        tokens.append(marked)
        pos = m.end()
    tokens.extend(_WORD.findall(text[pos:]))
    return tuple(tokens), marks


def _assign_marks(marks: list[tuple[int, str]], form1: str, form2: str, path: PathLike, line_no: int,
                  ctx: int) -> tuple[int, int]:
    if len(marks) != 2:
        raise ValueError("%s line %d: context%d must mark exactly two words with <strong>; found %d"
                         % (path, line_no, ctx, len(marks)))
    (i, a), (j, b) = marks
    if a == form1 and b == form2:
        return i, j
    if a == form2 and b == form1:
        return j, i
    raise ValueError("%s line %d: the words marked in context%d (%r, %r) are not word1/word2 as given (%r, %r)"
                     % (path, line_no, ctx, a, b, form1, form2))


def read_cosimlex(path: PathLike, gold_path: PathLike | None = None) -> list[CoSimLexExample]:
    """Read a CoSimLex file: the full data set (``cosimlex_<lang>.csv``, gold included) or a task kit's
    ``data_<lang>.tsv`` (with the kit's ``gold_<lang>.tsv`` as ``gold_path``).

    Both are tab-separated with a header naming word1, word2, context1, context2 and word1_context1 ...
    word2_context2 (the inflected forms marked with ``<strong>`` in each context); the full set also has
    sim1 and sim2. Contexts are split into words (punctuation apart) with each marked form kept whole.

    Raises:
        ValueError: on a missing column, a context without exactly the two marked forms, or a gold file of a
            different length.
    """
    lines = _read_lines(path)
    if not lines:
        raise ValueError("%s is empty" % path)
    header = lines[0].split("\t")
    need = ["word1", "word2", "context1", "context2", "word1_context1", "word2_context1", "word1_context2",
            "word2_context2"]
    missing = [c for c in need if c not in header]
    if missing:
        raise ValueError("%s: header lacks column(s) %s; got %s" % (path, missing, header))
    col = {c: header.index(c) for c in header}
    gold: list[tuple[float, float]] | None = None
    if gold_path is not None:
        glines = _read_lines(gold_path)
        ghead = glines[0].split("\t") if glines else []
        if "sim_context1" not in ghead or "sim_context2" not in ghead:
            raise ValueError("%s: expected a header with sim_context1 and sim_context2; got %s" % (gold_path, ghead))
        a, b = ghead.index("sim_context1"), ghead.index("sim_context2")
        gold = []
        for i, line in enumerate(glines[1:], 2):
            parts = _fields(line, gold_path, i, len(ghead))
            gold.append((_float(parts[a], gold_path, i, "sim_context1"),
                         _float(parts[b], gold_path, i, "sim_context2")))
        if len(gold) != len(lines) - 1:
            raise ValueError("CoSimLex gold %s has %d rows but %s has %d"
                             % (gold_path, len(gold), path, len(lines) - 1))
    out = []
    for i, line in enumerate(lines[1:], 2):
        parts = _fields(line, path, i, len(header))
        spans = []
        for ctx in (1, 2):
            tokens, marks = _tokenize_marked(parts[col["context%d" % ctx]], path, i)
            i1, i2 = _assign_marks(marks, parts[col["word1_context%d" % ctx]], parts[col["word2_context%d" % ctx]],
                                   path, i, ctx)
            spans.append((WordInContext(tokens, i1, i1 + 1), WordInContext(tokens, i2, i2 + 1)))
        if gold is not None:
            sim1, sim2 = gold[i - 2]
        elif "sim1" in col and "sim2" in col:
            sim1, sim2 = _float(parts[col["sim1"]], path, i, "sim1"), _float(parts[col["sim2"]], path, i, "sim2")
        else:
            sim1 = sim2 = None
        out.append(CoSimLexExample(parts[col["word1"]], parts[col["word2"]], spans[0][0], spans[0][1], spans[1][0],
                                   spans[1][1], sim1, sim2))
    return out


def load_cosimlex(language: str = "en", root: PathLike | None = None) -> list[CoSimLexExample]:
    """CoSimLex for ``language`` ("en": 340 pairs; also "hr", "sl", "fi") from ``root/cosimlex/cosimlex_dataset/``.

    This is the SemEval-2020 Task 3 evaluation set with its gold ratings.
    """
    check_choice(language, "split for CoSimLex language", ("en", "hr", "sl", "fi"))
    path = similarity_data_dir(root) / "cosimlex" / "cosimlex_dataset" / ("cosimlex_%s.csv" % language)
    return read_cosimlex(_require_file(path, "CoSimLex (%s)" % language))


# --------------------------------------------------------------------------------------------------- CoInCo usim


def read_coinco_usim(path: PathLike, train_ids_path: PathLike | None = None) -> list[UsimExample]:
    """Read ``coinco_usim_data.csv``: tab-separated ``id, lemma_pos, score, word1, position1, sentence1, word2,
    position2, sentence2`` after a header; sentences are tokenised (split on single spaces), positions 0-based.

    Args:
        path: the data file.
        train_ids_path: ``cnc_train_ids`` (one id a line); marks ``in_train``. None marks nothing.

    Raises:
        ValueError: on a malformed line, a position outside its sentence, or a word that is not part of the token
            at its position (a token may carry attached punctuation, e.g. ``"tell`` for ``tell``).
    """
    train_ids = set(_read_lines(train_ids_path)) if train_ids_path is not None else set()
    lines = _read_lines(path)
    header = lines[0].split("\t") if lines else []
    need = ["id", "lemma_pos", "score", "word1", "position1", "sentence1", "word2", "position2", "sentence2"]
    if header != need:
        raise ValueError("%s: expected the header %s; got %s" % (path, need, header))
    out = []
    for i, line in enumerate(lines[1:], 2):
        parts = _fields(line, path, i, 9)
        spans = []
        for w, p, s, which in ((3, 4, 5, 1), (6, 7, 8, 2)):
            tokens = tuple(parts[s].split(" "))
            index = _int(parts[p], path, i, "position%d" % which)
            if not 0 <= index < len(tokens):
                raise ValueError("%s line %d: position%d=%d is outside sentence%d (%d words)"
                                 % (path, i, which, index, which, len(tokens)))
            if parts[w].lower() not in tokens[index].lower():
                raise ValueError("%s line %d: word%d %r is not at position%d (found %r)"
                                 % (path, i, which, parts[w], which, tokens[index]))
            spans.append(WordInContext(tokens, index, index + 1))
        out.append(UsimExample(parts[0], parts[1], spans[0], spans[1], _float(parts[2], path, i, "score"),
                               parts[0] in train_ids))
    if train_ids:
        found = sum(e.in_train for e in out)
        if found != len(train_ids):
            logger.warning("%d of the %d ids in %s are not in %s", len(train_ids) - found, len(train_ids),
                           train_ids_path, path)
    return out


def load_coinco_usim(split: str = "all", root: PathLike | None = None) -> list[UsimExample]:
    """CoInCo usage-similarity pairs: "all" (5,022), "train" (the 4,018 ids of ``cnc_train_ids``) or "test"
    (the rest)."""
    check_choice(split, "split for CoInCo usim", ("all", "train", "test"))
    base = similarity_data_dir(root) / "coinco-usim"
    data = read_coinco_usim(_require_file(base / "coinco_usim_data.csv", "CoInCo usim data"),
                            _require_file(base / "cnc_train_ids", "CoInCo usim train ids"))
    if split == "all":
        return data
    return [e for e in data if e.in_train == (split == "train")]


# --------------------------------------------------------------------------------------------------- SCWS


def _scws_context(text: str, path: PathLike, line_no: int, which: int) -> WordInContext:
    # The published file writes "<b> word </b>" with spaces; tolerate "<b>word</b>" too.
    tokens = re.sub(r"\s*(</?b>)\s*", r" \1 ", text).split()
    try:
        open_i = tokens.index("<b>")
        close_i = tokens.index("</b>", open_i)
    except ValueError:
        raise ValueError("%s line %d: context%d must mark the target as <b> word </b>"
                         % (path, line_no, which)) from None
    if tokens.count("<b>") != 1 or tokens.count("</b>") != 1 or close_i == open_i + 1:
        raise ValueError("%s line %d: context%d must mark exactly one non-empty <b> ... </b> span"
                         % (path, line_no, which))
    words = tokens[:open_i] + tokens[open_i + 1 : close_i] + tokens[close_i + 1 :]
    return WordInContext(tuple(words), open_i, close_i - 1)


def read_scws(path: PathLike) -> list[ScwsExample]:
    """Read SCWS ``ratings.txt`` (Huang et al. 2012).

    Each line has 18 tab-separated fields: id, word1, POS1, word2, POS2, context1, context2 (each marking its
    word as ``<b> word </b>``), the average rating and the ten individual ratings (0-10).

    Raises:
        ValueError: on a malformed line or a context without exactly one marked span.
    """
    out = []
    for i, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        parts = _fields(line, path, i, 18)
        ratings = tuple(_float(r, path, i, "rating %d" % k) for k, r in enumerate(parts[8:18], 1))
        out.append(ScwsExample(parts[0], parts[1], parts[2], parts[3], parts[4],
                               _scws_context(parts[5], path, i, 1), _scws_context(parts[6], path, i, 2),
                               _float(parts[7], path, i, "average rating"), ratings))
    return out


def load_scws(path: PathLike | None = None, root: PathLike | None = None) -> list[ScwsExample]:
    """SCWS from ``path``, else ``root/scws/ratings.txt`` (held out of the shared folder: pass your own copy)."""
    p = Path(path) if path is not None else similarity_data_dir(root) / "scws" / "ratings.txt"
    return read_scws(_require_file(p, "SCWS ratings.txt", held_out=path is None))


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
    lines = _read_lines(path)
    out = []
    for i, line in enumerate(lines[1:] if header else lines, 2 if header else 1):
        if not line.strip():
            continue
        parts = line.split(sep)
        if len(parts) < need:
            raise ValueError("%s line %d: expected at least %d fields, got %d: %r"
                             % (path, i, need, len(parts), line[:200]))
        out.append(WordPair(parts[word1_col].strip(), parts[word2_col].strip(),
                            _float(parts[score_col], path, i, "score"),
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
    path = _require_file(similarity_data_dir(root) / src.path, "word-similarity set %s" % name)
    pairs = read_word_pairs(path, word1_col=src.word1_col, word2_col=src.word2_col, score_col=src.score_col,
                            pos_col=src.pos_col, header=src.header, sep=src.sep)
    if src.expected is not None and len(pairs) != src.expected:
        logger.warning("%s has %d pairs; the published set has %d", path, len(pairs), src.expected)
    return pairs


# --------------------------------------------------------------------------------------------------- corpora


def read_sentences(path: PathLike, *, skip_headings: bool = True) -> list[tuple[str, ...]]:
    """Read a whitespace-tokenised text file (WikiText style) as sentences: each line is split at "." tokens
    (that is, on " . "), the "." kept at the end of its sentence; blank lines and, with ``skip_headings``,
    WikiText headings (`` = Title = ``) are dropped.

    Returns:
        Sentences as tuples of words, in file order.
    """
    out = []
    for line in _read_lines(path):
        tokens = line.split()
        if not tokens:
            continue
        if skip_headings and tokens[0] == "=" and tokens[-1] == "=":
            continue
        current: list[str] = []
        for tok in tokens:
            current.append(tok)
            if tok == ".":
                out.append(tuple(current))
                current = []
        if current:
            out.append(tuple(current))
    return out


_CORPORA = {"wikitext-2": ("corpora/wikitext-2", ("valid", "test"))}


def load_corpus_sentences(name: str = "wikitext-2", splits: Iterable[str] | None = None, *,
                          data_dir: PathLike | None = None, max_words: int | None = None,
                          max_sentences: int | None = None, seed: int | None = None) -> list[tuple[str, ...]]:
    """Sentences of a shared corpus, e.g. WikiText-2 valid + test (the default for word similarity).

    Args:
        name: "wikitext-2".
        splits: files to read, e.g. ("valid",); None reads the corpus default (valid and test).
        data_dir: the shared data folder (default ``shared_data_dir()``).
        max_words: drop sentences longer than this (counted and logged), so that no sentence is cut by the
            encoder's length limit; None keeps all.
        max_sentences: keep at most this many; with ``seed`` a seeded random sample (in corpus order), else the
            first ones.
        seed: see ``max_sentences``.

    Raises:
        ValueError: for an unknown corpus or split.
        FileNotFoundError: if a file is missing.
    """
    if name not in _CORPORA:
        raise ValueError("unknown corpus %r; valid names: %s" % (name, ", ".join(_CORPORA)))
    folder, default_splits = _CORPORA[name]
    splits = tuple(default_splits if splits is None else splits)
    base = Path(data_dir) if data_dir is not None else shared_data_dir()
    sentences: list[tuple[str, ...]] = []
    for split in splits:
        if split not in ("train", "valid", "test"):
            raise ValueError("corpus split must be train, valid or test; got %r" % (split,))
        sentences.extend(read_sentences(_require_file(base / folder / ("%s.txt" % split), "%s %s" % (name, split))))
    if max_words is not None:
        kept = [s for s in sentences if len(s) <= max_words]
        if len(kept) < len(sentences):
            logger.info("%s: dropped %d of %d sentences longer than %d words", name, len(sentences) - len(kept),
                        len(sentences), max_words)
        sentences = kept
    if max_sentences is not None and len(sentences) > max_sentences:
        if seed is None:
            sentences = sentences[:max_sentences]
        else:
            keep = sorted(random.Random(seed).sample(range(len(sentences)), max_sentences))
            sentences = [sentences[i] for i in keep]
    return sentences


def corpus_label(name: str = "wikitext-2", splits: Iterable[str] | None = None) -> str:
    """A short label for a corpus selection, e.g. "wikitext-2/valid+test", recorded in results."""
    splits = tuple(_CORPORA.get(name, ("", ()))[1] if splits is None else splits)
    return "%s/%s" % (name, "+".join(splits))
