"""Readers for the words-in-context benchmarks: WiC, CoSimLex, CoInCo usage similarity (usim) and SCWS.

Each holds a target word in one or two sentences (:class:`WordInContext`); see :mod:`ctxemb.evaluation.similarity.data`
for the ``read_*`` / ``load_*`` convention.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from ctxemb.core.validation import check_choice
from ctxemb.evaluation.similarity.data._files import (
    PathLike,
    parse_float,
    parse_int,
    read_lines,
    require_file,
    similarity_data_dir,
    split_fields,
)
from ctxemb.evaluation.similarity.records import CoSimLexExample, ScwsExample, UsimExample, WicExample, WordInContext

logger = logging.getLogger(__name__)


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
    lines = read_lines(data_path)
    labels: list[bool | None] = [None] * len(lines)
    if gold_path is not None:
        gold = read_lines(gold_path)
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
        lemma, pos, idx, s1, s2 = split_fields(line, data_path, i, 5)
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
    data = require_file(base / ("%s.data.txt" % split), "WiC %s data" % split, held_out=split == "test")
    gold = require_file(base / ("%s.gold.txt" % split), "WiC %s gold" % split, held_out=split == "test")
    return read_wic(data, gold)


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
    lines = read_lines(path)
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
        glines = read_lines(gold_path)
        ghead = glines[0].split("\t") if glines else []
        if "sim_context1" not in ghead or "sim_context2" not in ghead:
            raise ValueError("%s: expected a header with sim_context1 and sim_context2; got %s" % (gold_path, ghead))
        a, b = ghead.index("sim_context1"), ghead.index("sim_context2")
        gold = []
        for i, line in enumerate(glines[1:], 2):
            parts = split_fields(line, gold_path, i, len(ghead))
            gold.append((parse_float(parts[a], gold_path, i, "sim_context1"),
                         parse_float(parts[b], gold_path, i, "sim_context2")))
        if len(gold) != len(lines) - 1:
            raise ValueError("CoSimLex gold %s has %d rows but %s has %d"
                             % (gold_path, len(gold), path, len(lines) - 1))
    out = []
    for i, line in enumerate(lines[1:], 2):
        parts = split_fields(line, path, i, len(header))
        spans = []
        for ctx in (1, 2):
            tokens, marks = _tokenize_marked(parts[col["context%d" % ctx]], path, i)
            i1, i2 = _assign_marks(marks, parts[col["word1_context%d" % ctx]], parts[col["word2_context%d" % ctx]],
                                   path, i, ctx)
            spans.append((WordInContext(tokens, i1, i1 + 1), WordInContext(tokens, i2, i2 + 1)))
        if gold is not None:
            sim1, sim2 = gold[i - 2]
        elif "sim1" in col and "sim2" in col:
            sim1 = parse_float(parts[col["sim1"]], path, i, "sim1")
            sim2 = parse_float(parts[col["sim2"]], path, i, "sim2")
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
    return read_cosimlex(require_file(path, "CoSimLex (%s)" % language))


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
    train_ids = set(read_lines(train_ids_path)) if train_ids_path is not None else set()
    lines = read_lines(path)
    header = lines[0].split("\t") if lines else []
    need = ["id", "lemma_pos", "score", "word1", "position1", "sentence1", "word2", "position2", "sentence2"]
    if header != need:
        raise ValueError("%s: expected the header %s; got %s" % (path, need, header))
    out = []
    for i, line in enumerate(lines[1:], 2):
        parts = split_fields(line, path, i, 9)
        spans = []
        for w, p, s, which in ((3, 4, 5, 1), (6, 7, 8, 2)):
            tokens = tuple(parts[s].split(" "))
            index = parse_int(parts[p], path, i, "position%d" % which)
            if not 0 <= index < len(tokens):
                raise ValueError("%s line %d: position%d=%d is outside sentence%d (%d words)"
                                 % (path, i, which, index, which, len(tokens)))
            if parts[w].lower() not in tokens[index].lower():
                raise ValueError("%s line %d: word%d %r is not at position%d (found %r)"
                                 % (path, i, which, parts[w], which, tokens[index]))
            spans.append(WordInContext(tokens, index, index + 1))
        out.append(UsimExample(parts[0], parts[1], spans[0], spans[1], parse_float(parts[2], path, i, "score"),
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
    data = read_coinco_usim(require_file(base / "coinco_usim_data.csv", "CoInCo usim data"),
                            require_file(base / "cnc_train_ids", "CoInCo usim train ids"))
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
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        parts = split_fields(line, path, i, 18)
        ratings = tuple(parse_float(r, path, i, "rating %d" % k) for k, r in enumerate(parts[8:18], 1))
        out.append(ScwsExample(parts[0], parts[1], parts[2], parts[3], parts[4],
                               _scws_context(parts[5], path, i, 1), _scws_context(parts[6], path, i, 2),
                               parse_float(parts[7], path, i, "average rating"), ratings))
    return out


def load_scws(path: PathLike | None = None, root: PathLike | None = None) -> list[ScwsExample]:
    """SCWS from ``path``, else ``root/scws/ratings.txt`` (held out of the shared folder: pass your own copy)."""
    p = Path(path) if path is not None else similarity_data_dir(root) / "scws" / "ratings.txt"
    return read_scws(require_file(p, "SCWS ratings.txt", held_out=path is None))
