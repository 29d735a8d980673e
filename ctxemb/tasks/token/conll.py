"""Readers and a writer for token-level fine-tuning data in the CoNLL column format (CoNLL-2003 NER and POS).

Two layers, as in :mod:`ctxemb.tasks.sequence.data`:

- :func:`read_conll` reads one column file and knows nothing about where files live; :func:`write_conll` writes
  one (``ctxemb predict`` writes predicted tags with it);
- :func:`load_conll2003` maps split names to the files of the shared data folder
  (``shared_data_dir() / "finetune" / "conll2003"``).

Every sentence is one :class:`TaggedSentence`. NER tags come back in BIO (IOB2): ``B-X`` opens every entity of
type X, ``I-X`` continues it. Label ids are positions in :data:`NER_LABELS` (for the task head) and in
:func:`pos_labels` of the training sentences (POS has no fixed published order):

=====  ==================  ==========================================  ===========================================
split  file                sentences (shared copy)                     use
=====  ==================  ==========================================  ===========================================
train  ``eng.train``       14,041                                      training
dev    ``eng.testa``       3,250                                       tuning: model selection, early stopping
test   ``eng.testb``       held back (pass ``root`` to your own copy)  the split papers report; never tune on it
=====  ==================  ==========================================  ===========================================

Tagging schemes. The original CoNLL-2003 files use IOB1: an entity starts with ``I-X`` unless it directly follows
another entity of the same type, where ``B-X`` marks the boundary. :func:`iob1_to_bio` rewrites such a sentence to
BIO, and leaves a BIO sentence unchanged, so converting is correct whichever of the two a file uses: that is what
``scheme="auto"`` (the default) does. The shared copies are in fact already BIO (as the Hugging Face ``conll2003``
dataset is: ``EU/B-ORG`` opens the first sentence, no ``I-X`` follows ``O``), which "auto" reads unchanged.

File rules, for the shared files and :func:`read_conll` alike:

- UTF-8 (a byte-order mark is allowed), LF or CRLF line ends, no empty file.
- One word per line, its fields separated by spaces or tabs (CoNLL words hold neither); blank lines (or lines of
  only spaces) end a sentence; several blank lines in a row are one boundary.
- At least 2 columns, the same number on every word line of a file. The word is the first column and the NER tag
  the last; with 3 or more columns the second is the POS tag (CoNLL-2003: ``word POS chunk NER``; other middle
  columns are ignored). A 2-column file (``word NER``) has no POS column: its ``pos`` tags are all ``"-"``.
- A line whose first field is ``-DOCSTART-`` (``-DOCSTART- -X- -X- O``) starts a new document and is not a
  sentence; :attr:`TaggedSentence.doc` counts documents from 0 (all 0 in a file without such lines, as the shared
  copies are).
- A NER tag is ``O`` or ``B-<type>``/``I-<type>``; sentence ids are ``"<file name>:<line number of the first
  word>"``.

Every problem with a file raises one error that names the file and the line: ``FileNotFoundError`` for a missing
file, ``ValueError`` for the rest (a wrong column count, a malformed tag, ``I-X`` after something other than
``B-X``/``I-X`` in a file read as BIO, bytes that are not UTF-8, an empty file, a file with no sentence).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

from ctxemb.core.validation import check_choice, check_string_batch
from ctxemb.tasks.sequence.data import _read_lines
from ctxemb.core.atomic import atomic_write
from ctxemb.core.paths import shared_data_dir

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
Scheme = Literal["iob1", "bio", "auto"]

SCHEMES = ("iob1", "bio", "auto")

#: CoNLL-2003's NER tags in BIO, in the fixed order used as label ids.
NER_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")

#: Split name -> file name of the CoNLL-2003 English data.
CONLL2003_FILES = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}
#: The splits the shared data folder holds (the default of :func:`load_conll2003`, those present).
CONLL2003_SHARED = ("train", "dev")

DOCSTART = "-DOCSTART-"
NO_POS = "-"

_FIELD_SEP = re.compile(r"[ \t]+")
_TAG = re.compile(r"O|[BI]-\S+")


@dataclass(frozen=True, slots=True)
class TaggedSentence:
    """One sentence of a CoNLL file.

    Attributes:
        words: W words as written.
        pos: W Penn Treebank part-of-speech tags (column 2).
        ner: W named-entity tags in BIO (converted from the file's IOB1 when it uses IOB1).
        doc: index of the document the sentence belongs to (``-DOCSTART-`` lines start one; 0 if there are none).
        id: ``"<file name>:<line number of the first word>"``.
    """

    words: tuple[str, ...]
    pos: tuple[str, ...]
    ner: tuple[str, ...]
    doc: int
    id: str


# --------------------------------------------------------------------------------------------------- tags


def _bad_tag(tag) -> str | None:
    """Why ``tag`` is not a chunk tag (``O``, ``B-X`` or ``I-X``), or None when it is one."""
    if not isinstance(tag, str):
        return "a tag must be a str; got %s" % type(tag).__name__
    if _TAG.fullmatch(tag) is None:
        return ("tag %r is not 'O', 'B-<type>' or 'I-<type>' (IOB1 or BIO; other schemes such as IOBES are not "
                "read)" % tag)
    return None


def iob1_to_bio(tags: Sequence[str]) -> list[str]:
    """Rewrite one sentence's tags from IOB1 to BIO (IOB2); BIO tags come back unchanged.

    ``I-X`` becomes ``B-X`` where a chunk starts: at the start of the sentence, after ``O``, or after a tag of
    another type. Everything else is kept (``B-X`` already marks a start in both schemes). A BIO sentence never has
    ``I-X`` in those places, so the function is idempotent and safe to apply to a file whose scheme is unknown.

    Example: ``I-ORG I-ORG O I-PER`` -> ``B-ORG I-ORG O B-PER``; ``I-LOC B-LOC`` (two adjacent places) ->
    ``B-LOC B-LOC``.

    Args:
        tags: one sentence's tags, each ``O``, ``B-<type>`` or ``I-<type>``.

    Returns:
        A new list of the same length.

    Raises:
        TypeError: if ``tags`` is a single str or holds a non-str.
        ValueError: for a malformed tag (naming its position).
    """
    if isinstance(tags, (str, bytes)):
        raise TypeError("tags must be a sequence of tags for one sentence, got a single %s; wrap it in a list"
                        % type(tags).__name__)
    out: list[str] = []
    prev_type = None  # the entity type of the previous tag; None after O or at the start
    for i, tag in enumerate(tags):
        why = _bad_tag(tag)
        if why is not None:
            if not isinstance(tag, str):
                raise TypeError("tags[%d]: %s" % (i, why))
            raise ValueError("tags[%d]: %s" % (i, why))
        if tag == "O":
            out.append(tag)
            prev_type = None
            continue
        kind, etype = tag[0], tag[2:]
        out.append("B-" + etype if kind == "I" and etype != prev_type else tag)
        prev_type = etype
    return out


def _bio_error(tags: Sequence[str]) -> int | None:
    """The position of the first ``I-X`` that does not continue a ``B-X``/``I-X``, or None if ``tags`` is BIO."""
    prev_type = None
    for i, tag in enumerate(tags):
        if tag == "O":
            prev_type = None
            continue
        if tag[0] == "I" and tag[2:] != prev_type:
            return i
        prev_type = tag[2:]
    return None


# --------------------------------------------------------------------------------------------------- reading


def read_conll(path: PathLike, *, scheme: Scheme = "auto") -> list[TaggedSentence]:
    """Read a CoNLL column file (see the module docstring for the file rules) into sentences with BIO NER tags.

    Columns: the word first, the NER tag last, the POS tag second when there are 3 or more columns (a 2-column
    ``word NER`` file gets POS ``"-"`` for every word).

    Args:
        path: the file.
        scheme: the NER tagging scheme of the file.

            - ``"iob1"``: convert each sentence with :func:`iob1_to_bio`.
            - ``"bio"``: keep the tags, checking that each ``I-X`` continues a ``B-X`` or ``I-X`` (an error names
              the first line that does not, which is how an IOB1 file read as BIO shows up).
            - ``"auto"`` (default): the same as ``"iob1"``. Converting is correct for IOB1 and a no-op for BIO,
              so no guess is needed; the name says the file may be either.

    Returns:
        The sentences in file order.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: for an unknown scheme or a bad file, naming the file and line: fewer than 2 columns, a column
            count that differs from the file's first word line, a malformed NER tag, an ``I-X`` that does not
            continue an entity (``scheme="bio"``), bytes that are not UTF-8, an empty file, or no sentence.
    """
    check_choice(scheme, "scheme", SCHEMES)
    path = Path(path)
    lines = _read_lines(path, "CoNLL sentences (one word per line)")
    out: list[TaggedSentence] = []
    ncols = ncols_line = 0
    doc, doc_open = 0, False  # doc_open: the current document has a -DOCSTART- or a sentence
    words: list[str] = []
    pos: list[str] = []
    ner: list[str] = []
    ner_lines: list[int] = []
    first_line = 0
    good_tags: set[str] = set()

    def close():
        nonlocal doc_open
        if not words:
            return
        if scheme == "bio":
            bad = _bio_error(ner)
            if bad is not None:
                raise ValueError("%s line %d: %r does not continue an entity of its type (previous tag %r), so the "
                                 "file is not BIO; read it with scheme='iob1' or 'auto'"
                                 % (path, ner_lines[bad], ner[bad], ner[bad - 1] if bad else "none: sentence start"))
            tags = tuple(ner)
        else:
            tags = tuple(iob1_to_bio(ner))
        out.append(TaggedSentence(tuple(words), tuple(pos), tags, doc, "%s:%d" % (path.name, first_line)))
        doc_open = True
        for part in (words, pos, ner, ner_lines):
            part.clear()

    for line_no, line in enumerate(lines, 1):
        stripped = line.strip(" \t")
        if not stripped:
            close()
            continue
        fields = _FIELD_SEP.split(stripped)
        if fields[0] == DOCSTART:
            close()
            if doc_open:
                doc += 1
            doc_open = True
            continue
        if not ncols:
            if len(fields) < 2:
                raise ValueError("%s line %d: expected at least 2 space-separated columns (word ... NER tag); got "
                                 "%d: %r" % (path, line_no, len(fields), line[:200]))
            ncols, ncols_line = len(fields), line_no
        elif len(fields) != ncols:
            raise ValueError("%s line %d: expected %d space-separated columns (as on line %d, the file's first word "
                             "line); got %d: %r" % (path, line_no, ncols, ncols_line, len(fields), line[:200]))
        tag = fields[-1]
        if tag not in good_tags:
            why = _bad_tag(tag)
            if why is not None:
                raise ValueError("%s line %d: NER %s" % (path, line_no, why))
            good_tags.add(tag)
        if not words:
            first_line = line_no
        words.append(fields[0])
        pos.append(fields[1] if ncols >= 3 else NO_POS)
        ner.append(tag)
        ner_lines.append(line_no)
    close()
    if not out:
        raise ValueError("%s line %d: no sentences in the file (only -DOCSTART- lines and blank lines)"
                         % (path, len(lines)))
    return out


def pos_labels(sentences: Iterable[TaggedSentence]) -> tuple[str, ...]:
    """The POS tags seen in ``sentences``, sorted (a stable label-id order; take it from the training split).

    Raises:
        ValueError: if there are no sentences.
    """
    seen: set[str] = set()
    n = 0
    for s in sentences:
        seen.update(s.pos)
        n += 1
    if not n:
        raise ValueError("pos_labels needs at least one sentence; got none")
    return tuple(sorted(seen))


# --------------------------------------------------------------------------------------------------- CoNLL-2003


def conll2003_dir(root: PathLike | None = None) -> Path:
    """The folder of the CoNLL-2003 files: ``root`` if given, else ``shared_data_dir() / "finetune" / "conll2003"``.

    Raises:
        FileNotFoundError: if the folder does not exist (or the shared data folder cannot be found).
    """
    path = Path(root) if root is not None else shared_data_dir() / "finetune" / "conll2003"
    if not path.is_dir():
        raise FileNotFoundError("CoNLL-2003 data folder does not exist: %s" % path)
    return path


def load_conll2003(*, root: PathLike | None = None,
                   splits: Iterable[str] | None = None) -> dict[str, list[TaggedSentence]]:
    """Load CoNLL-2003 English splits (see the module docstring for the files and sizes), NER tags in BIO.

    Tune on ``dev`` (``eng.testa``); ``test`` (``eng.testb``) is held back for independent evaluation and is never
    part of the default.

    Args:
        root: the folder holding ``eng.train``/``eng.testa``/``eng.testb``; None reads the shared data folder.
        splits: split names among "train", "dev", "test"; None reads those of "train" and "dev" whose file exists.

    Returns:
        Split name -> sentences in file order, in the order asked for.

    Raises:
        FileNotFoundError: if the folder or a requested split's file is missing (for ``test``, saying that it is
            held back and how to pass ``root``), or, with ``splits=None``, if neither train nor dev is there.
        ValueError: for an unknown or repeated split, a bad file, or a NER tag outside :data:`NER_LABELS` (naming
            the file and line).
        TypeError: if ``splits`` is a single string.
    """
    base = conll2003_dir(root)
    if splits is None:
        wanted = tuple(s for s in CONLL2003_SHARED if (base / CONLL2003_FILES[s]).is_file())
        if not wanted:
            raise FileNotFoundError("%s holds neither %s" % (
                base, " nor ".join(CONLL2003_FILES[s] for s in CONLL2003_SHARED)))
    else:
        wanted = tuple(check_string_batch(splits, "splits"))
        for split in wanted:
            check_choice(split, "split of CoNLL-2003", tuple(CONLL2003_FILES))
        if len(set(wanted)) != len(wanted):
            raise ValueError("splits names a split twice: %r" % (wanted,))
    data = {}
    for split in wanted:
        path = base / CONLL2003_FILES[split]
        if not path.is_file():
            held = "" if split in CONLL2003_SHARED else (
                " (the shared data folder holds only train and dev: the test split, eng.testb, is held back for "
                "independent evaluation; pass root= a folder with your own copy of eng.testb)")
            raise FileNotFoundError("CoNLL-2003 %s file not found: %s%s" % (split, path, held))
        sentences = read_conll(path, scheme="auto")
        for s in sentences:
            for i, tag in enumerate(s.ner):
                if tag not in NER_LABELS:
                    first = int(s.id.rpartition(":")[2])
                    raise ValueError("%s line %d: NER tag %r is not a CoNLL-2003 tag (%s)"
                                     % (path, first + i, tag, ", ".join(NER_LABELS)))
        data[split] = sentences
        logger.debug("CoNLL-2003 %s: %d sentences from %s", split, len(sentences), path)
    return data


# --------------------------------------------------------------------------------------------------- writing


def _check_field(value, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError("%s must be a str; got %s" % (what, type(value).__name__))
    if not value or any(c.isspace() for c in value):
        raise ValueError("%s must be non-empty and hold no whitespace (it is one column of a CoNLL line); got %r"
                         % (what, value))
    return value


def write_conll(path: PathLike, sentences_words: Sequence[Sequence[str]],
                columns: Sequence[Sequence[Sequence[str]]]) -> None:
    """Write sentences as a CoNLL column file: one ``word tag1 tag2 ...`` line per word, a blank line after each
    sentence, UTF-8 with LF line ends. The file appears atomically (a failed write leaves any old file intact).

    ``ctxemb predict`` writes predicted tags with it, e.g. ``write_conll(out, words, [gold_ner, predicted_ner])``;
    :func:`read_conll` reads the file back (its last column as the NER tags).

    Args:
        path: the file to write (parent folders are created).
        sentences_words: ``sentences_words[s]`` is sentence s's words.
        columns: the tag columns after the word, ``columns[c][s][w]`` being column c's tag for word w of sentence s;
            at least one column.

    Raises:
        ValueError: if there are no sentences or columns, a sentence is empty, a column has the wrong number of
            sentences or a sentence of the wrong length, a word or tag is empty or holds whitespace, or a word is
            ``-DOCSTART-`` (it would read back as a document start); each names the sentence and column.
        TypeError: for a single string where a sequence is expected, or a non-str word or tag.
    """
    for name, value in (("sentences_words", sentences_words), ("columns", columns)):
        if isinstance(value, (str, bytes)):
            raise TypeError("%s must be a sequence, not a single %s" % (name, type(value).__name__))
    sentences = [check_string_batch(words, "sentences_words[%d]" % s, allow_empty_batch=True)
                 for s, words in enumerate(sentences_words)]
    columns = list(columns)
    if not sentences:
        raise ValueError("sentences_words is empty; expected at least one sentence")
    if not columns:
        raise ValueError("columns is empty; expected at least one tag column (a word-only file cannot be read back)")
    for c, column in enumerate(columns):
        if isinstance(column, (str, bytes)):
            raise TypeError("columns[%d] must be a sequence of sentences' tags, not a single %s"
                            % (c, type(column).__name__))
        if len(column) != len(sentences):
            raise ValueError("columns[%d] has %d sentences; sentences_words has %d" % (c, len(column), len(sentences)))
    lines: list[str] = []
    for s, words in enumerate(sentences):
        if not words:
            raise ValueError("sentences_words[%d] is empty; every sentence needs at least one word" % s)
        if DOCSTART in words:
            raise ValueError("sentences_words[%d][%d] is %r, which would read back as a document start"
                             % (s, words.index(DOCSTART), DOCSTART))
        tags = []
        for c, column in enumerate(columns):
            sent_tags = check_string_batch(column[s], "columns[%d][%d]" % (c, s), allow_empty_batch=True)
            if len(sent_tags) != len(words):
                raise ValueError("columns[%d][%d] has %d tags; sentence %d has %d words"
                                 % (c, s, len(sent_tags), s, len(words)))
            tags.append(sent_tags)
        for w, word in enumerate(words):
            fields = [_check_field(word, "sentences_words[%d][%d]" % (s, w))]
            fields += [_check_field(tags[c][w], "columns[%d][%d][%d]" % (c, s, w)) for c in range(len(columns))]
            lines.append(" ".join(fields) + "\n")
        lines.append("\n")
    with atomic_write(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
