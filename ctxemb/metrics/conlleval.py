"""Entity (chunk) level precision, recall and F1 counted exactly as the perl ``conlleval`` script of the CoNLL
shared tasks counts them (version 2004-01-26, default mode, not ``-r``), plus its token accuracy.

A tag is ``O`` or ``P-TYPE`` with the prefix P one of ``B``, ``I``, ``E``, ``S`` and a non-empty TYPE (split at the
first hyphen, as conlleval does, so ``B-A-B`` has type ``A-B``). Chunks are read with conlleval's own
``endOfChunk`` / ``startOfChunk`` rules, transcribed in :func:`_end_of_chunk` and :func:`_start_of_chunk`, which
accept IOB2 and IOB1 (and IOE1 / IOE2) alike:

  * ``B-X`` always starts a chunk, after anything but ``E-X`` / ``S-X`` of the same type (see below);
  * ``I-X`` continues a chunk of type X, and starts one after ``O``, after ``E-X`` or after a chunk of another type
    (an ill-formed IOB2 start is still a chunk);
  * a change of type ends a chunk and starts another; ``O`` ends one.

conlleval has rules for ``E`` but none for ``S``, so its quirks for IOBES input are kept: ``S-X S-X`` and
``E-X B-X`` are one chunk, not two (seqeval, which adds IOBES rules, differs there). Convert IOBES to IOB2 before
scoring it. The bracket representations (``[``, ``]``, ``.`` tags) are not accepted.

Each sentence starts and ends outside any chunk (conlleval's empty line between sentences), so no chunk crosses a
sentence. A predicted chunk is correct when its type, start and end all equal those of a gold chunk.

Shape legend: S sentences, T_s tags in sentence s (gold and prediction alike).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

_TAG = re.compile(r"([BIES])-(\S+)")
_OUTSIDE = ("O", "")  # conlleval's (tag, type) for O and for a sentence boundary


@dataclass(frozen=True)
class TypeScores:
    """conlleval's scores for one chunk type: precision, recall, f1 in percent (0..100, 0 when undefined) and the
    counts of gold, predicted and correctly predicted chunks."""

    precision: float
    recall: float
    f1: float
    n_gold: int
    n_pred: int
    n_correct: int


@dataclass(frozen=True)
class ChunkScores:
    """conlleval's overall scores, as :class:`TypeScores`, plus:

    Attributes:
        per_type: chunk type -> its :class:`TypeScores`, for every type in the gold or the prediction, sorted.
        token_accuracy: percent of tokens whose predicted tag equals the gold tag (conlleval's "accuracy"); 0 when
            there are no tokens.
        n_tokens: the number of tokens.
    """

    precision: float
    recall: float
    f1: float
    n_gold: int
    n_pred: int
    n_correct: int
    per_type: dict[str, TypeScores] = field(default_factory=dict)
    token_accuracy: float = 0.0
    n_tokens: int = 0


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's ``endOfChunk``: did a chunk end between the previous and the current token?"""
    return (
        (prev_tag, tag) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"), ("E", "O")}
        or (prev_tag != "O" and prev_type != type_)
    )


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """conlleval's ``startOfChunk``: did a chunk start between the previous and the current token?"""
    return (
        (prev_tag, tag) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"), ("O", "E")}
        or (tag != "O" and prev_type != type_)
    )


def _split_tags(tags, name: str) -> list[tuple[str, str]]:
    """(prefix, type) of every tag, ``("O", "")`` for ``O``.

    Raises:
        TypeError: if ``tags`` is a string, or a tag is not a string.
        ValueError: naming ``name[i]`` and the tag, if a tag is malformed.
    """
    if isinstance(tags, str):
        raise TypeError("%s must be a sequence of tags; got the string %r (a sentence is a list of tags)"
                        % (name, tags[:50]))
    out = []
    for i, tag in enumerate(tags):
        if not isinstance(tag, str):
            raise TypeError("%s[%d] must be a tag string; got %r (%s)" % (name, i, tag, type(tag).__name__))
        if tag == "O":
            out.append(_OUTSIDE)
            continue
        m = _TAG.fullmatch(tag)
        if m is None:
            raise ValueError("%s[%d] is %r: a tag must be 'O' or 'B-', 'I-', 'E-' or 'S-' followed by a type "
                             "without spaces, e.g. 'B-PER'" % (name, i, tag))
        out.append((m.group(1), m.group(2)))
    return out


def _chunks(split: list[tuple[str, str]]) -> list[tuple[str, int, int]]:
    chunks = []
    prev_tag, prev_type = _OUTSIDE
    start = 0
    for i, (tag, type_) in enumerate(split + [_OUTSIDE]):  # the sentence boundary ends any open chunk
        if _end_of_chunk(prev_tag, tag, prev_type, type_):  # never true after O
            chunks.append((prev_type, start, i))
        if _start_of_chunk(prev_tag, tag, prev_type, type_):
            start = i
        prev_tag, prev_type = tag, type_
    return chunks


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The chunks of one sentence's tags, as conlleval reads them.

    Args:
        tags: (T,) tags, each ``O`` or ``B-``/``I-``/``E-``/``S-`` and a type.

    Returns:
        (type, start, end_exclusive) of every chunk, in order: ``tags[start:end]`` is the chunk.

    Raises:
        TypeError: if ``tags`` is a string or holds a non-string.
        ValueError: if a tag is malformed (naming its position and the tag).
    """
    return _chunks(_split_tags(tags, "tags"))


def _percent(num: int, den: int) -> float:
    return 100.0 * num / den if den > 0 else 0.0


def _f1(p: float, r: float) -> float:
    return 2.0 * p * r / (p + r) if p + r > 0 else 0.0


def _type_scores(n_gold: int, n_pred: int, n_correct: int) -> TypeScores:
    p, r = _percent(n_correct, n_pred), _percent(n_correct, n_gold)
    return TypeScores(p, r, _f1(p, r), n_gold, n_pred, n_correct)


def chunk_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> ChunkScores:
    """conlleval's overall and per-type chunk precision, recall and F1, and its token accuracy, over sentences.

    P = correct / predicted chunks, R = correct / gold chunks, F1 = 2PR / (P + R), all in percent; each is 0 when
    its denominator is 0, as conlleval prints them.

    Args:
        gold: (S,) sentences, each a (T_s,) sequence of gold tags.
        pred: (S,) sentences, each a (T_s,) sequence of predicted tags.

    Returns:
        :class:`ChunkScores`.

    Raises:
        TypeError: if a sentence is a string rather than a sequence of tags, or a tag is not a string.
        ValueError: if the numbers of sentences differ, two sentences differ in length (naming the sentence and
            both lengths), or a tag is malformed (naming sentence, position and tag).
    """
    if isinstance(gold, str) or isinstance(pred, str):
        raise TypeError("gold and pred must be sequences of sentences, each a sequence of tags; got a string")
    if len(gold) != len(pred):
        raise ValueError("gold and pred must hold the same number of sentences; got %d and %d"
                         % (len(gold), len(pred)))
    n_gold: dict[str, int] = {}
    n_pred: dict[str, int] = {}
    n_correct: dict[str, int] = {}
    n_tokens = n_equal_tags = 0
    for s, (g_tags, p_tags) in enumerate(zip(gold, pred)):
        g = _split_tags(g_tags, "gold[%d]" % s)
        p = _split_tags(p_tags, "pred[%d]" % s)
        if len(g) != len(p):
            raise ValueError("sentence %d has %d gold tags but %d predicted tags; they must be equal"
                             % (s, len(g), len(p)))
        n_tokens += len(g)
        n_equal_tags += sum(a == b for a, b in zip(g, p))
        g_chunks, p_chunks = _chunks(g), _chunks(p)
        for t, _, _ in g_chunks:
            n_gold[t] = n_gold.get(t, 0) + 1
        for t, _, _ in p_chunks:
            n_pred[t] = n_pred.get(t, 0) + 1
        for t, _, _ in set(g_chunks) & set(p_chunks):
            n_correct[t] = n_correct.get(t, 0) + 1
    per_type = {
        t: _type_scores(n_gold.get(t, 0), n_pred.get(t, 0), n_correct.get(t, 0))
        for t in sorted(n_gold.keys() | n_pred.keys())
    }
    overall = _type_scores(sum(n_gold.values()), sum(n_pred.values()), sum(n_correct.values()))
    return ChunkScores(
        overall.precision, overall.recall, overall.f1, overall.n_gold, overall.n_pred, overall.n_correct,
        per_type=per_type, token_accuracy=_percent(n_equal_tags, n_tokens), n_tokens=n_tokens,
    )
