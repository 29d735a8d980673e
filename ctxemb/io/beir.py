"""BEIR folders and TREC run files, read strictly.

A BEIR folder holds ``corpus.jsonl`` (``{"_id", "title", "text"}`` per line), ``queries.jsonl`` (``{"_id", "text"}``)
and ``qrels/<split>.tsv`` (``query-id<TAB>corpus-id<TAB>score`` under a header line). Ids are strings and stay
strings (SciFact's document ids look like integers; casting them would be wrong for other sets).

A run (what a retriever returns) is ``{query_id: {doc_id: score}}``; qrels are ``{query_id: {doc_id: grade}}``.
A TREC run file has one line per retrieved document, ``qid Q0 docid rank score tag``, ranked as trec_eval ranks
them (score descending; equal scores by document id descending, which is trec_eval's order).

Bad input is an error naming the file and line: a line that is not a JSON object, a missing or non-string id, an
id given twice, a qrels row with a wrong column count, a non-integer grade, a qrels row naming a query or document
that the folder does not hold, a missing file. Nothing is half-read: a reader returns everything or raises.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from ctxemb.core.validation import CorruptFileError, check_int, decode_utf8
from ctxemb.core.atomic import atomic_write
from ctxemb.metrics.trec import trec_order

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Document:
    """One corpus entry: its title (may be empty) and text."""

    title: str
    text: str

    @property
    def full_text(self) -> str:
        """Title and text joined by a space, as BEIR's retrievers index them (the text alone when untitled)."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass
class BeirData:
    """A BEIR data set in memory.

    Attributes:
        corpus: document id -> :class:`Document`, in file order.
        queries: query id -> text, the queries of ``qrels`` only, in file order.
        qrels: query id -> {document id: grade} (grades > 0 are relevant).
        folder: where it was read from.
    """

    corpus: dict[str, Document]
    queries: dict[str, str]
    qrels: Qrels
    folder: Path | None = None

    def texts(self) -> dict[str, str]:
        """{document id: title and text}, what retrievers index (see :attr:`Document.full_text`)."""
        return {i: d.full_text for i, d in self.corpus.items()}

    def subset(self, query_ids: Iterable[str]) -> "BeirData":
        """The same corpus with only ``query_ids`` (each must be a query of this set)."""
        ids = list(query_ids)
        unknown = [q for q in ids if q not in self.qrels]
        if unknown:
            raise ValueError("query_ids: %d ids are not queries of this set (first: %r)" % (len(unknown), unknown[0]))
        keep = set(ids)
        return BeirData(self.corpus, {q: t for q, t in self.queries.items() if q in keep},
                        {q: r for q, r in self.qrels.items() if q in keep}, self.folder)


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError("%s: no such file" % path) from None
    text = decode_utf8(data, path)
    if "\x00" in text:
        raise CorruptFileError("%s: holds a NUL byte (line %d); expected UTF-8 text"
                               % (path, text[:text.index("\x00")].count("\n") + 1), path)
    return text


def _jsonl_records(path: Path, fields: tuple[str, ...]) -> dict[str, dict]:
    """id -> record, strictly: every line a JSON object with a string ``_id`` and string ``fields``."""
    records: dict[str, dict] = {}
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorruptFileError("%s, line %d: not valid JSON (%s)" % (path, number, e.msg), path) from None
        if not isinstance(record, dict):
            raise CorruptFileError("%s, line %d: expected a JSON object, got %s"
                                   % (path, number, type(record).__name__), path)
        doc_id = record.get("_id")
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise CorruptFileError("%s, line %d: expected a non-empty string \"_id\", got %r"
                                   % (path, number, doc_id), path)
        if any(c.isspace() for c in doc_id):
            raise CorruptFileError("%s, line %d: the id %r holds white space, which TREC run files cannot hold"
                                   % (path, number, doc_id), path)
        if doc_id in records:
            raise CorruptFileError("%s, line %d: the id %r was already given" % (path, number, doc_id), path)
        for field in fields:
            value = record.get(field, "")
            if not isinstance(value, str):
                raise CorruptFileError("%s, line %d: expected \"%s\" to be a string, got %s"
                                       % (path, number, field, type(value).__name__), path)
        records[doc_id] = record
    return records


def read_qrels(path: str | os.PathLike) -> Qrels:
    """Relevance judgements from a BEIR qrels TSV (``query-id corpus-id score`` under a header) or a TREC qrels
    file (``qid iteration docid grade``, no header).

    Returns:
        query id -> {document id: grade}, in file order. Grades may be 0 or negative (judged not relevant).

    Raises:
        CorruptFileError: a row with a wrong column count, a non-integer grade, a pair judged twice, no row at all.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    qrels: Qrels = {}
    lines = _read_text(path).splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cols = line.split()
        if number == 1 and cols and cols[0].lower() in ("query-id", "query_id", "qid", "query"):
            continue  # BEIR's header
        if len(cols) == 4:  # TREC: qid iteration docid grade
            cols = [cols[0], cols[2], cols[3]]
        if len(cols) != 3:
            raise CorruptFileError("%s, line %d: expected 3 columns (query-id, corpus-id, score) or 4 (TREC), got %d"
                                   % (path, number, len(cols)), path)
        qid, did, grade = cols
        try:
            value = int(grade)
        except ValueError:
            raise CorruptFileError("%s, line %d: the grade %r is not an integer" % (path, number, grade), path) from None
        judged = qrels.setdefault(qid, {})
        if did in judged:
            raise CorruptFileError("%s, line %d: query %r and document %r were already judged"
                                   % (path, number, qid, did), path)
        judged[did] = value
    if not qrels:
        raise CorruptFileError("%s: holds no judgement" % path, path)
    return qrels


def read_corpus(path: str | os.PathLike) -> dict[str, Document]:
    """A BEIR ``corpus.jsonl``: document id -> :class:`Document`, in file order (strict; see the module docstring)."""
    path = Path(path)
    records = _jsonl_records(path, ("title", "text"))
    if not records:
        raise CorruptFileError("%s: holds no document" % path, path)
    return {i: Document(r.get("title", "") or "", r.get("text", "") or "") for i, r in records.items()}


def read_queries(path: str | os.PathLike) -> dict[str, str]:
    """A BEIR ``queries.jsonl``: query id -> text, in file order (strict)."""
    return {i: r.get("text", "") or "" for i, r in _jsonl_records(Path(path), ("text",)).items()}


def load_beir(folder: str | os.PathLike, split: str = "test", *, qrels: str | os.PathLike | None = None) -> BeirData:
    """Read a BEIR folder: the corpus, the queries judged in ``split`` and their judgements.

    Args:
        folder: holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
        split: the qrels file's name without ``.tsv`` ("train", "dev", "test").
        qrels: a qrels file to use instead of ``qrels/<split>.tsv`` (e.g. held-back judgements kept elsewhere).

    Raises:
        FileNotFoundError: the folder or one of its files is missing (the message lists what is there).
        CorruptFileError: a malformed line (file and line named), an empty corpus, or a qrels row naming a query or
            document that the folder does not hold.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError("%s: no such folder (expected a BEIR folder with corpus.jsonl, queries.jsonl and "
                                "qrels/)" % folder)
    qrels_path = Path(qrels) if qrels is not None else folder / "qrels" / f"{split}.tsv"
    for path in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path):
        if not path.is_file():
            there = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
            raise FileNotFoundError("%s: no such file; the folder %s holds %s"
                                    % (path, folder, ", ".join(there) or "nothing"))
    corpus = read_corpus(folder / "corpus.jsonl")
    query_records = read_queries(folder / "queries.jsonl")
    judged = read_qrels(qrels_path)
    for qid, docs in judged.items():
        if qid not in query_records:
            raise CorruptFileError("%s: the query %r is not in %s" % (qrels_path, qid, folder / "queries.jsonl"),
                                   qrels_path)
        missing = [d for d in docs if d not in corpus]
        if missing:
            raise CorruptFileError("%s: query %r judges the document %r, which is not in %s"
                                   % (qrels_path, qid, missing[0], folder / "corpus.jsonl"), qrels_path)
    queries = {q: t for q, t in query_records.items() if q in judged}
    return BeirData(corpus, queries, judged, folder)


def split_queries(query_ids: Iterable[str], dev_size: int, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """A reproducible split of ``query_ids`` into (train, dev): ``dev_size`` ids drawn with ``seed``.

    Both lists keep the input order. The draw depends only on the sorted ids and the seed.
    """
    ids = list(query_ids)
    dev_size = check_int(dev_size, "dev_size", low=1, high=max(1, len(ids) - 1),
                         high_text=" (one fewer than the %d queries)" % len(ids))
    chosen = set(random.Random(seed).sample(sorted(ids), dev_size))
    return [q for q in ids if q not in chosen], [q for q in ids if q in chosen]


def write_run(path: str | os.PathLike, run: Mapping[str, Mapping[str, float]], *, tag: str = "ctxemb",
              depth: int | None = None) -> Path:
    """Write ``run`` as a TREC run file, atomically (a reader sees the old file or the whole new one).

    Args:
        path: the file to write.
        run: query id -> {doc id: score}; scores must be finite.
        tag: the run's name (the last column); no white space.
        depth: keep each query's ``depth`` best documents (None: all).

    Raises:
        ValueError: an id or the tag holds white space, or a score is not finite.
    """
    import math

    if not isinstance(tag, str) or not tag or any(c.isspace() for c in tag):
        raise ValueError("tag must be a non-empty string without white space, got %r" % (tag,))
    if depth is not None:
        depth = check_int(depth, "depth", low=1)
    lines = []
    for qid, scores in run.items():
        if not isinstance(qid, str) or not qid or any(c.isspace() for c in qid):
            raise ValueError("run: the query id %r is not a non-empty string without white space" % (qid,))
        for rank, did in enumerate(trec_order(scores)[:depth], start=1):
            score = scores[did]
            if not isinstance(did, str) or not did or any(c.isspace() for c in did):
                raise ValueError("run: query %r names the document id %r, which is not a non-empty string without "
                                 "white space" % (qid, did))
            if not math.isfinite(score):
                raise ValueError("run: query %r gives document %r the score %r; scores must be finite"
                                 % (qid, did, score))
            lines.append("%s Q0 %s %d %.9g %s\n" % (qid, did, rank, score, tag))
    path = Path(path)
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def read_run(path: str | os.PathLike) -> Run:
    """A TREC run file (``qid Q0 docid rank score tag`` per line) as ``{query id: {doc id: score}}``.

    Raises:
        CorruptFileError: a line without 6 columns, a score that is not a number, a document listed twice for a
            query.
    """
    path = Path(path)
    run: Run = {}
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        cols = line.split()
        if len(cols) != 6:
            raise CorruptFileError("%s, line %d: expected 6 columns (qid Q0 docid rank score tag), got %d"
                                   % (path, number, len(cols)), path)
        try:
            score = float(cols[4])
        except ValueError:
            raise CorruptFileError("%s, line %d: the score %r is not a number" % (path, number, cols[4]), path) from None
        scores = run.setdefault(cols[0], {})
        if cols[2] in scores:
            raise CorruptFileError("%s, line %d: query %r lists document %r twice" % (path, number, cols[0], cols[2]),
                                   path)
        scores[cols[2]] = score
    return run
