"""Reader for extractive question answering in the SQuAD v1.1 JSON format (XQuAD-en), and the split by article.

Two layers, as in :mod:`ctxemb.tasks.sequence.data`:

- :func:`read_squad` reads one SQuAD-format file and knows nothing about where files live;
- :func:`load_xquad` reads the English XQuAD file of the shared data folder
  (``shared_data_dir() / "finetune" / "xquad" / "xquad.en.json"``).

Every question is one :class:`QAExample`; answers are character spans of the passage.

=====  =================  ================================  =========================================  ============
data   file               size                              splits                                     metrics
=====  =================  ================================  =========================================  ============
xquad  ``xquad.en.json``  48 articles, 240 passages, 1,190  none published; :data:`XQUAD_ARTICLE_SPLIT`  exact match,
                          questions (one answer each)       train 30 / dev 6 / held-out 12 articles    F1
=====  =================  ================================  =========================================  ============

Splits and the protocol. XQuAD-en is a 240-paragraph subset of the SQuAD v1.1 dev set and has no training split
(its authors train on SQuAD v1.1 train, which the shared folder does not hold). So ctxemb splits its articles once:
:data:`XQUAD_ARTICLE_SPLIT` lists the titles of train (30 articles, 713 questions), dev (6, 126) and held-out (12,
351), whole articles on one side, so no article and no passage is on two sides (:func:`xquad_split` reads a part).
Train on train, select on dev, and evaluate held-out once at the end; numbers are not comparable to published
XQuAD (zero-shot, trained on SQuAD) results. :func:`split_by_article` is the general seeded split by article for
other SQuAD-format files.

File rules, for the shared file and :func:`read_squad` alike:

- UTF-8 (a byte-order mark is allowed), one JSON object ``{"data": [...]}``; ``version`` and any other extra keys
  are ignored (so SQuAD v2's ``is_impossible`` is too: an unanswerable question simply has no answers).
- ``data[i]`` has ``title`` (a non-blank string) and ``paragraphs``; ``paragraphs[j]`` has ``context`` (a non-blank
  string) and ``qas``; ``qas[k]`` has ``id`` (a non-blank string, or an int, read as a string), ``question`` (a
  non-blank string) and ``answers``, a list (possibly empty) of ``{"text": <non-empty string>, "answer_start":
  <int>}``.
- Every answer lies in its passage: ``context[answer_start:answer_start + len(text)] == text``. Answers are kept
  as annotated, duplicates included (SQuAD dev has up to three per question; XQuAD has one).
- Question ids are unique within the file.
- Texts are kept exactly as in the file (42 XQuAD-en questions have leading or trailing spaces; tokenizers ignore
  them and stripping a context would shift its answer offsets).

Every problem with a file raises one error that names the file and, for structure, the JSON path of the bad item
(e.g. ``data[3].paragraphs[1].qas[0]``): ``FileNotFoundError`` for a missing file, ``ValueError`` for the rest
(not UTF-8 or not valid JSON, naming the line; a missing key or a value of the wrong type; an answer that is not
in its passage, naming the question id; a repeated id; an empty file; no question).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ctxemb.core.validation import check_choice, is_int
from ctxemb.core.paths import shared_data_dir

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

XQUAD_FILE = "xquad.en.json"


@dataclass(frozen=True, slots=True)
class QAExample:
    """One extractive question.

    Attributes:
        id: the question's id from the file.
        title: the article's title.
        context: the passage (exactly as in the file).
        question: the question text.
        answers: gold answers as ``(text, start)`` with ``context[start:start + len(text)] == text``; several
            when annotators differ; empty for unlabelled input.
    """

    id: str
    title: str
    context: str
    question: str
    answers: tuple[tuple[str, int], ...]


# --------------------------------------------------------------------------------------------------- reading


def _load_json(path: Path) -> Any:
    """The JSON value of a UTF-8 file (BOM allowed), with errors that name the file and the line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError("%s not found (it should hold SQuAD-format questions)" % path) from None
    except IsADirectoryError:
        raise FileNotFoundError("%s is a directory, not a file (it should hold SQuAD-format questions)"
                                % path) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError("%s line %d: not UTF-8 text (byte 0x%02x: %s); save the file as UTF-8"
                         % (path, line, data[e.start], e.reason)) from None
    if not text.strip():
        raise ValueError("%s line 1: the file is empty (it should hold SQuAD-format questions)" % path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError("%s line %d column %d: not valid JSON (%s)" % (path, e.lineno, e.colno, e.msg)) from None


class _Walker:
    """Type checks on the JSON tree, each error naming the file and the JSON path."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, message: str):
        raise ValueError("%s: %s: %s" % (self.path, where, message))

    def obj(self, value: Any, where: str, keys: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            self.fail(where, "expected a JSON object; got %s" % _kind(value))
        missing = [k for k in keys if k not in value]
        if missing:
            self.fail(where, "no key %s; its keys are %s" % (
                ", ".join(repr(k) for k in missing), ", ".join(repr(k) for k in value) or "none"))
        return value

    def array(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            self.fail(where, "expected a JSON array; got %s" % _kind(value))
        return value

    def text(self, value: Any, where: str, *, blank_ok: bool = False) -> str:
        if not isinstance(value, str):
            self.fail(where, "expected a string; got %s" % _kind(value))
        if not (value if blank_ok else value.strip()):
            self.fail(where, "is %s" % ("empty" if blank_ok else "blank"))
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "the %s %r" % (type(value).__name__, value) if isinstance(value, (int, float)) else
        type(value).__name__)


def read_squad(path: PathLike) -> list[QAExample]:
    """Read a SQuAD v1.1-format JSON file (see the module docstring for the rules) into one example per question.

    Texts (title, passage, question, answers) are kept exactly as in the file, and every answer is checked to be
    the passage's text at its offset.

    Returns:
        The questions in file order.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: naming the file: bytes that are not UTF-8 or invalid JSON (and the line), a missing key or a
            value of the wrong type or blank (and its JSON path, e.g. ``data[3].paragraphs[1].qas[0]``), an answer
            whose text is not found at its ``answer_start`` (and the question id), a repeated question id (and both
            paths), an empty file, or a file with no question.
    """
    path = Path(path)
    root = _load_json(path)
    walk = _Walker(path)
    articles = walk.array(walk.obj(root, "top level", ("data",))["data"], "data")
    out: list[QAExample] = []
    seen: dict[str, str] = {}
    for a, article in enumerate(articles):
        where_a = "data[%d]" % a
        article = walk.obj(article, where_a, ("title", "paragraphs"))
        title = walk.text(article["title"], where_a + ".title")
        for p, paragraph in enumerate(walk.array(article["paragraphs"], where_a + ".paragraphs")):
            where_p = "%s.paragraphs[%d]" % (where_a, p)
            paragraph = walk.obj(paragraph, where_p, ("context", "qas"))
            context = walk.text(paragraph["context"], where_p + ".context")
            for q, qa in enumerate(walk.array(paragraph["qas"], where_p + ".qas")):
                where_q = "%s.qas[%d]" % (where_p, q)
                qa = walk.obj(qa, where_q, ("id", "question", "answers"))
                qid = str(qa["id"]) if is_int(qa["id"]) else walk.text(qa["id"], where_q + ".id")
                first = seen.setdefault(qid, where_q)
                if first != where_q:
                    walk.fail(where_q, "question id %r repeats the id of %s" % (qid, first))
                question = walk.text(qa["question"], where_q + ".question")
                answers = []
                for n, answer in enumerate(walk.array(qa["answers"], where_q + ".answers")):
                    where_n = "%s.answers[%d]" % (where_q, n)
                    answer = walk.obj(answer, where_n, ("text", "answer_start"))
                    text = walk.text(answer["text"], where_n + ".text", blank_ok=True)
                    start = answer["answer_start"]
                    if not is_int(start) or start < 0:
                        walk.fail(where_n + ".answer_start", "expected an int >= 0; got %s" % _kind(start))
                    found = context[start:start + len(text)]
                    if found != text:
                        walk.fail(where_n, "question %r: answer %r is not in its passage at answer_start=%d "
                                  "(the passage there reads %r; the passage has %d characters)"
                                  % (qid, text, start, found, len(context)))
                    answers.append((text, start))
                out.append(QAExample(id=qid, title=title, context=context, question=question,
                                     answers=tuple(answers)))
    if not out:
        raise ValueError("%s: no questions in the file" % path)
    return out


def load_xquad(*, root: PathLike | None = None) -> list[QAExample]:
    """Read XQuAD-en (``xquad.en.json``): 1,190 questions on 240 passages of 48 articles (one answer each).

    Split it with :func:`split_by_article` (XQuAD has no training split).

    Args:
        root: the folder holding ``xquad.en.json``; None reads ``shared_data_dir() / "finetune" / "xquad"``.

    Raises:
        FileNotFoundError: if the folder or the file is missing (or the shared data folder cannot be found).
        ValueError: for a bad file (see :func:`read_squad`).
    """
    base = Path(root) if root is not None else shared_data_dir() / "finetune" / "xquad"
    if not base.is_dir():
        raise FileNotFoundError("XQuAD data folder does not exist: %s" % base)
    path = base / XQUAD_FILE
    if not path.is_file():
        raise FileNotFoundError("XQuAD-en file not found: %s" % path)
    examples = read_squad(path)
    logger.debug("XQuAD-en: %d questions from %s", len(examples), path)
    return examples


# --------------------------------------------------------------------------------------------------- splitting


def split_by_article(examples: Iterable[QAExample], *, eval_fraction: float = 0.25,
                     seed: int = 0) -> tuple[list[QAExample], list[QAExample]]:
    """Split questions into (train, eval) by whole articles, so no article or passage is on both sides.

    XQuAD has no train split, so ctxemb trains on 3/4 of its articles and evaluates on the held-out quarter (the
    default ``eval_fraction``): 36 and 12 of XQuAD-en's 48 articles. The titles, in order of first appearance, are
    shuffled with ``random.Random(seed)``; the first ``round(eval_fraction * n_articles)`` (halves rounded up) go to
    eval. The same examples and seed always give the same split.

    Args:
        examples: the questions (e.g. from :func:`load_xquad`); their ``title`` names the article.
        eval_fraction: the fraction of articles held out for evaluation, in (0, 1).
        seed: the shuffle's seed.

    Returns:
        ``(train, eval)``, each in the input order.

    Raises:
        ValueError: if either side would get no article (too few articles for ``eval_fraction``), if
            ``eval_fraction`` is not in (0, 1), or if one passage appears under two titles (it could then land on
            both sides).
        TypeError: if ``seed`` is not an int or ``eval_fraction`` not a number.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError("seed must be an int; got %r" % (seed,))
    if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, (int, float)):
        raise TypeError("eval_fraction must be a number; got %r" % (eval_fraction,))
    if not (0.0 < eval_fraction < 1.0):
        raise ValueError("eval_fraction must be in (0, 1); got %r" % (eval_fraction,))
    examples = list(examples)
    for i, ex in enumerate(examples):
        if not isinstance(ex, QAExample):
            raise TypeError("examples[%d] must be a QAExample; got %s" % (i, type(ex).__name__))
    titles = list(dict.fromkeys(ex.title for ex in examples))
    passage_title: dict[str, str] = {}
    for ex in examples:
        other = passage_title.setdefault(ex.context, ex.title)
        if other != ex.title:
            raise ValueError("question %r: its passage also appears under article %r, not only %r; a split by "
                             "article could put it on both sides" % (ex.id, other, ex.title))
    n_eval = math.floor(eval_fraction * len(titles) + 0.5)
    if not 1 <= n_eval <= len(titles) - 1:
        raise ValueError("cannot split %d article(s) with eval_fraction=%r: %d would be held out for evaluation "
                         "and %d kept for training; each side needs at least one article"
                         % (len(titles), eval_fraction, n_eval, len(titles) - n_eval))
    random.Random(seed).shuffle(titles)
    held = set(titles[:n_eval])
    train = [ex for ex in examples if ex.title not in held]
    evaluation = [ex for ex in examples if ex.title in held]
    return train, evaluation


# The fixed XQuAD-en article split (train 30 / dev 6 / held-out 12 articles; 713 / 126 / 351 questions on 150 / 30 /
# 60 passages). The held-out twelve are the eval quarter of ``split_by_article(load_xquad())`` (seed 0), so numbers
# reported on "the held-out quarter" before stay comparable; dev is six of the remaining 36 articles. Titles are
# listed, not drawn, so the split never depends on a random generator. Tune on dev only; read held-out once.
XQUAD_ARTICLE_SPLIT: dict[str, tuple[str, ...]] = {
    "train": ("Harvard_University", "American_Broadcasting_Company", "Islamism", "European_Union_law",
              "Amazon_rainforest", "Genghis_Khan", "Sky_(United_Kingdom)", "Nikola_Tesla", "1973_oil_crisis",
              "Scottish_Parliament", "French_and_Indian_War", "Chloroplast", "Construction", "Fresno,_California",
              "University_of_Chicago", "Normans", "Intergovernmental_Panel_on_Climate_Change", "Teacher",
              "Victoria_(Australia)", "Doctor_Who", "Ctenophora", "Immune_system", "Geology", "Packet_switching",
              "Jacksonville,_Florida", "Rhine", "Huguenot", "Newcastle_upon_Tyne", "Martin_Luther", "Steam_engine"),
    "dev": ("United_Methodist_Church", "Private_school", "Computational_complexity_theory", "Prime_number",
            "Pharmacy", "Kenya"),
    "heldout": ("Super_Bowl_50", "Warsaw", "Southern_California", "Oxygen", "Apollo_program", "Black_Death",
                "Victoria_and_Albert_Museum", "Civil_disobedience", "Economic_inequality", "Yuan_dynasty",
                "Imperialism", "Force"),
}


def xquad_split(part: str, examples: Iterable[QAExample] | None = None) -> list[QAExample]:
    """The questions of one part of the fixed XQuAD-en article split (:data:`XQUAD_ARTICLE_SPLIT`).

    Args:
        part: ``"train"``, ``"dev"`` or ``"heldout"``.
        examples: the questions to filter; None reads :func:`load_xquad`.

    Returns:
        The questions whose article is in ``part``, in file order.

    Raises:
        ValueError: for an unknown ``part``, or if ``examples`` hold an article that no part lists (a different
            file: the split is defined for XQuAD-en only).
    """
    check_choice(part, "part", tuple(XQUAD_ARTICLE_SPLIT))
    examples = load_xquad() if examples is None else list(examples)
    known = {t for titles in XQUAD_ARTICLE_SPLIT.values() for t in titles}
    unknown = sorted({ex.title for ex in examples} - known)
    if unknown:
        raise ValueError("the XQuAD article split does not list article(s) %s: it is defined for xquad.en.json "
                         "only" % ", ".join(map(repr, unknown[:5])))
    wanted = set(XQUAD_ARTICLE_SPLIT[part])
    return [ex for ex in examples if ex.title in wanted]
