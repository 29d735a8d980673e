"""Sense-annotated corpora in the Raganato et al. (2017) format: typed records, a fast reader, a writer.

The format is an XML file ``<name>.data.xml``::

    <corpus lang="en" source="semeval2007">
      <text id="d000">
        <sentence id="d000.s000">
          <wf lemma="the" pos="DET">The</wf>
          <instance id="d000.s000.t000" lemma="group" pos="NOUN">Fulton_County_Grand_Jury</instance>
          ...

plus a key file ``<name>.gold.key.txt`` with one line per instance: the instance id, then one or more sense keys,
separated by single spaces. Multiword tokens are single words whose parts are joined with ``_``.

The reader streams the XML with ``iterparse`` (SemCor, 37,176 sentences and 224,716 instances, reads in seconds).
"""

from __future__ import annotations

import logging
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Mapping
from xml.sax.saxutils import escape

import numpy as np

from ctxemb.core.validation import CorruptFileError, decode_utf8
from ctxemb.core.atomic import atomic_write

logger = logging.getLogger(__name__)

__all__ = [
    "Instance",
    "Sentence",
    "Document",
    "Corpus",
    "read_raganato",
    "read_dataset",
    "read_gold_keys",
    "write_raganato",
    "write_dataset",
    "split_corpus_by_document",
    "regex_tokenize",
]


@dataclass(frozen=True)
class Instance:
    """One sense-annotated (or to-be-annotated) token.

    Attributes:
        id: instance id, e.g. ``d000.s000.t000``.
        position: index of the token in its sentence's ``words``.
        lemma: the lemma given by the corpus (multiword parts joined with ``_``).
        pos: the universal POS tag given by the corpus (``NOUN``, ``VERB``, ``ADJ``, ``ADV``).
        gold_keys: the gold sense keys (several when annotators allowed more than one; empty if unknown).
    """

    id: str
    position: int
    lemma: str
    pos: str
    gold_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sentence:
    """A tokenised sentence with its instances.

    Attributes:
        id: sentence id, e.g. ``d000.s000``.
        words: surface tokens (W,), multiword tokens joined with ``_``.
        lemmas: lemma of each token (W,), None where the corpus gives none.
        pos: POS tag of each token (W,), None where the corpus gives none.
        instances: the annotated tokens, in sentence order.
    """

    id: str
    words: tuple[str, ...]
    lemmas: tuple[str | None, ...]
    pos: tuple[str | None, ...]
    instances: tuple[Instance, ...] = ()

    def __post_init__(self):
        n = len(self.words)
        if len(self.lemmas) != n or len(self.pos) != n:
            raise ValueError(
                "sentence %r: words, lemmas and pos must have the same length, got %d, %d and %d"
                % (self.id, n, len(self.lemmas), len(self.pos))
            )
        for inst in self.instances:
            if not 0 <= inst.position < n:
                raise ValueError(
                    "sentence %r: instance %r has position %d outside [0, %d)" % (self.id, inst.id, inst.position, n)
                )

    @property
    def positions(self) -> tuple[int, ...]:
        """Word positions of the instances."""
        return tuple(i.position for i in self.instances)


@dataclass(frozen=True)
class Document:
    """A ``<text>`` element: an id, its other XML attributes (e.g. ``source``) and its sentences."""

    id: str
    sentences: tuple[Sentence, ...]
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Corpus:
    """A whole Raganato-format data set.

    Attributes:
        name: data set name (the file stem, e.g. ``semeval2007``).
        documents: its documents, in file order.
        attributes: attributes of the ``<corpus>`` element (``lang``, ``source``).
    """

    name: str
    documents: tuple[Document, ...]
    attributes: Mapping[str, str] = field(default_factory=dict)

    def sentences(self) -> Iterator[Sentence]:
        """All sentences, in file order."""
        for d in self.documents:
            yield from d.sentences

    def instances(self) -> Iterator[Instance]:
        """All instances, in file order."""
        for s in self.sentences():
            yield from s.instances

    @property
    def n_sentences(self) -> int:
        return sum(len(d.sentences) for d in self.documents)

    @property
    def n_instances(self) -> int:
        return sum(len(s.instances) for s in self.sentences())

    def gold(self) -> dict[str, tuple[str, ...]]:
        """Instance id -> gold keys, for instances that have any."""
        return {i.id: i.gold_keys for i in self.instances() if i.gold_keys}

    def head(self, max_sentences: int) -> "Corpus":
        """The first ``max_sentences`` sentences (whole documents kept in order, the last one cut).

        Raises:
            ValueError: ``max_sentences`` is negative.
        """
        if max_sentences < 0:
            raise ValueError("max_sentences must be >= 0, got %d" % max_sentences)
        docs, left = [], max_sentences
        for d in self.documents:
            if left <= 0:
                break
            docs.append(d if len(d.sentences) <= left else replace(d, sentences=d.sentences[:left]))
            left -= len(docs[-1].sentences)
        return replace(self, documents=tuple(docs))

    def __repr__(self) -> str:
        return "Corpus(name=%r, documents=%d, sentences=%d, instances=%d)" % (
            self.name,
            len(self.documents),
            self.n_sentences,
            self.n_instances,
        )


def read_gold_keys(path: str | os.PathLike) -> dict[str, tuple[str, ...]]:
    """Read a key file: ``instance_id key1 [key2 ...]`` per line.

    Blank lines are skipped; a line with an id and no key raises, since it would silently drop an instance.

    Returns:
        Instance id -> keys in file order (duplicates removed).

    Raises:
        FileNotFoundError: no such file.
        CorruptFileError: (a ValueError) the file is not UTF-8 text, or a line has an id and no key; the message
            names the file and the line.
    """
    keys: dict[str, tuple[str, ...]] = {}
    with open(path, "rb") as f:
        data = f.read()
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise CorruptFileError("key file %s line %d: holds a NUL byte; it is binary or corrupt, not a key file"
                               % (path, line), path)
    text = decode_utf8(data, path, "key file")
    for lineno, line in enumerate(text.split("\n"), 1):  # "\n" only: line numbers as an editor shows them
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2:
            raise CorruptFileError("key file %s line %d: expected 'instance_id key [key ...]', got %r"
                                   % (path, lineno, line), path)
        iid, answers = parts[0], parts[1:]
        if iid in keys or len(answers) > 1:
            answers = list(dict.fromkeys(list(keys.get(iid, ())) + answers))
        keys[iid] = tuple(answers)
    return keys


def read_raganato(
    xml_path: str | os.PathLike,
    key_path: str | os.PathLike | None = None,
    *,
    name: str | None = None,
) -> Corpus:
    """Read a Raganato-format data set.

    Args:
        xml_path: the ``<name>.data.xml`` file.
        key_path: the gold key file; default ``<name>.gold.key.txt`` beside the XML if it exists (else no gold
            keys, with a warning). Pass ``""`` to read no keys and skip the warning.
        name: the data set's name; default the file name without ``.data.xml``.

    Returns:
        The corpus, with every instance's gold keys filled in from the key file.

    Raises:
        FileNotFoundError: ``xml_path`` (or an explicitly given ``key_path``) does not exist.
        CorruptFileError: (a ValueError) the XML is malformed or truncated, not UTF-8, or not in the expected layout
            (a token outside a sentence, a sentence without an id, an ``<instance>`` without an id, an empty word, an
            instance id used twice), or the key file is bad; the message names the file and the sentence id (the
            key file: the line).
    """
    xml_path = Path(xml_path)
    if not xml_path.is_file():
        raise FileNotFoundError("xml_path %s does not exist" % xml_path)
    stem = xml_path.name[: -len(".data.xml")] if xml_path.name.endswith(".data.xml") else xml_path.stem
    if key_path is None:
        default = xml_path.with_name(stem + ".gold.key.txt")
        if default.is_file():
            key_path = default
        else:
            logger.warning("no gold key file %s: instances will have no gold keys", default)
    gold = read_gold_keys(key_path) if key_path else {}

    documents: list[Document] = []
    corpus_attrs: dict[str, str] = {}
    doc_sentences: list[Sentence] = []
    words: list[str] = []
    lemmas: list[str | None] = []
    tags: list[str | None] = []
    instances: list[Instance] = []
    used_gold = 0
    problem: str | None = None  # the first bad token of the current sentence, raised when its id is known
    seen_instances: dict[str, str] = {}  # instance id -> its sentence id
    last_sentence: str | None = None
    root = None
    try:
        # "end" events only: attributes are complete there, and skipping "start" halves the parser's callbacks.
        for _, elem in ET.iterparse(str(xml_path), events=("end",)):
            tag = elem.tag
            root = tag
            if tag == "wf" or tag == "instance":
                word = elem.text or ""
                if problem is None and not word.strip():
                    problem = "word %d (<%s>%s) is empty" % (
                        len(words), tag, ' id="%s"' % elem.get("id") if elem.get("id") else "")
                if tag == "instance":
                    iid = elem.get("id")
                    if problem is None and not iid:
                        problem = "the <instance> at word %d (%r) has no id" % (len(words), word)
                    keys = gold.get(iid, ())
                    used_gold += bool(keys)
                    instances.append(Instance(iid, len(words), elem.get("lemma"), elem.get("pos"), keys))
                words.append(word)
                lemmas.append(elem.get("lemma"))
                tags.append(elem.get("pos"))
            elif tag == "sentence":
                sid = elem.get("id")
                where = "sentence %s" % sid if sid else (
                    "the <sentence> without an id after sentence %s" % last_sentence if last_sentence
                    else "the first <sentence>, which has no id")
                if problem is not None:
                    raise CorruptFileError("%s: %s: %s" % (xml_path, where, problem), xml_path)
                if not sid:
                    raise CorruptFileError("%s: %s: every <sentence> needs an id" % (xml_path, where), xml_path)
                for inst in instances:
                    if inst.id in seen_instances:
                        raise CorruptFileError("%s: sentence %s: instance id %s is already used in sentence %s; "
                                               "instance ids must be unique" % (xml_path, sid, inst.id,
                                                                                seen_instances[inst.id]), xml_path)
                    seen_instances[inst.id] = sid
                doc_sentences.append(Sentence(sid, tuple(words), tuple(lemmas), tuple(tags), tuple(instances)))
                last_sentence = sid
                words, lemmas, tags, instances = [], [], [], []
                elem.clear()
            elif tag == "text":
                attrs = {k: v for k, v in elem.attrib.items() if k != "id"}
                documents.append(Document(elem.get("id"), tuple(doc_sentences), attrs))
                doc_sentences = []
                elem.clear()
            elif tag == "corpus":
                corpus_attrs = dict(elem.attrib)
    except ET.ParseError as e:
        raise _xml_error(xml_path, e) from None
    if words or doc_sentences:
        raise CorruptFileError("%s: tokens or sentences outside a <sentence>/<text> element (after sentence %s)"
                               % (xml_path, last_sentence), xml_path)
    if root != "corpus":
        raise CorruptFileError("%s: the root element is <%s>, expected <corpus>: not a Raganato-format data file"
                               % (xml_path, root), xml_path)
    if gold and used_gold < len(gold):
        logger.warning("%s: %d gold keys name instances that are not in the XML", key_path, len(gold) - used_gold)
    corpus = Corpus(name or stem, tuple(documents), corpus_attrs)
    logger.info("read %r", corpus)
    return corpus


def _xml_error(xml_path: Path, error: ET.ParseError) -> CorruptFileError:
    """One error for a malformed XML file: the parser's reason, line and column, and the sentence being read."""
    line, column = error.position
    data = xml_path.read_bytes()
    before = b"\n".join(data.split(b"\n")[:line]).decode("utf-8", errors="replace")
    opened = list(re.finditer(r"<sentence\b[^>]*\bid=[\"']([^\"']*)", before))
    where = ""
    if opened:
        closed = "</sentence>" in before[opened[-1].end():]
        where = ", %s sentence %s" % ("after" if closed else "in", opened[-1].group(1))
    head = data[:200]
    declared = None
    if head.startswith(b"<?xml"):
        declared = re.search(rb'encoding=["\']([A-Za-z0-9._-]+)', head.split(b"?>", 1)[0])
    if declared is None or declared.group(1).lower().replace(b"_", b"-") in (b"utf-8", b"utf8"):
        try:
            decode_utf8(data, xml_path, "XML file")
        except CorruptFileError as bad:
            return CorruptFileError(str(bad) + (" (the byte is %s)" % where[2:] if where else ""), xml_path)
    reason = str(error).split(":")[0] or "not well-formed"
    if reason == "no element found":
        reason = "no element found (empty or truncated file)"
    return CorruptFileError("%s is not well-formed XML: %s at line %d, column %d%s"
                            % (xml_path, reason, line, column, where), xml_path)


def read_dataset(path: str | os.PathLike) -> Corpus:
    """Read a data set from its folder (holding one ``*.data.xml`` and its key file) or from the XML file.

    Raises:
        FileNotFoundError: nothing at ``path``, or a folder without exactly one ``*.data.xml``.
    """
    path = Path(path)
    if path.is_dir():
        xmls = sorted(path.glob("*.data.xml"))
        if len(xmls) != 1:
            raise FileNotFoundError(
                "dataset folder %s must hold exactly one *.data.xml file, found %d: %s"
                % (path, len(xmls), [x.name for x in xmls])
            )
        path = xmls[0]
    if not path.is_file():
        raise FileNotFoundError("dataset path %s is neither a folder nor a file" % path)
    return read_raganato(path)


def _attrs(pairs: Mapping[str, str | None]) -> str:
    return "".join(' %s="%s"' % (k, escape(v, {'"': "&quot;"})) for k, v in pairs.items() if v is not None)


def write_raganato(
    corpus: Corpus,
    xml_path: str | os.PathLike,
    key_path: str | os.PathLike | None = None,
) -> None:
    """Write a corpus as ``.data.xml`` + gold key file (atomically), readable by :func:`read_raganato` and the
    framework's tools.

    Args:
        corpus: what to write.
        xml_path: the XML file to write.
        key_path: the key file; default ``<stem>.gold.key.txt`` beside the XML. Instances without gold keys get
            no line.
    """
    xml_path = Path(xml_path)
    if key_path is None:
        stem = xml_path.name[: -len(".data.xml")] if xml_path.name.endswith(".data.xml") else xml_path.stem
        key_path = xml_path.with_name(stem + ".gold.key.txt")
    with atomic_write(xml_path, encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="UTF-8" ?>\n')
        f.write("<corpus%s>\n" % _attrs(corpus.attributes))
        for d in corpus.documents:
            f.write("<text%s>\n" % _attrs({"id": d.id, **d.attributes}))
            for s in d.sentences:
                f.write("<sentence%s>\n" % _attrs({"id": s.id}))
                by_pos = {i.position: i for i in s.instances}
                for j, (w, lem, tag) in enumerate(zip(s.words, s.lemmas, s.pos)):
                    inst = by_pos.get(j)
                    if inst is None:
                        f.write("<wf%s>%s</wf>\n" % (_attrs({"lemma": lem, "pos": tag}), escape(w)))
                    else:
                        a = _attrs({"id": inst.id, "lemma": inst.lemma, "pos": inst.pos})
                        f.write("<instance%s>%s</instance>\n" % (a, escape(w)))
                f.write("</sentence>\n")
            f.write("</text>\n")
        f.write("</corpus>\n")
    with atomic_write(key_path, encoding="utf-8") as f:
        for inst in corpus.instances():
            if inst.gold_keys:
                f.write("%s %s\n" % (inst.id, " ".join(inst.gold_keys)))


def write_dataset(corpus: Corpus, directory: str | os.PathLike, name: str | None = None) -> Path:
    """Write ``<directory>/<name>.data.xml`` and ``<name>.gold.key.txt``; returns the folder.

    ``name`` defaults to ``corpus.name``. The folder can be passed to :func:`read_dataset` or ``ctxemb wsd eval``.
    """
    directory = Path(directory)
    name = name or corpus.name
    write_raganato(corpus, directory / (name + ".data.xml"))
    return directory


def split_corpus_by_document(
    corpus: Corpus, held_out_fraction: float, seed: int = 0
) -> tuple[Corpus, Corpus]:
    """Split a corpus into training and held-out parts by whole documents.

    Splitting by document (not sentence) keeps one text's repeated senses from leaking into both parts.

    Args:
        corpus: the corpus to split (e.g. SemCor, 352 documents).
        held_out_fraction: share of documents to hold out, in (0, 1); at least one document goes to each side.
        seed: seed of the random document choice (the same seed gives the same split).

    Returns:
        ``(train, held_out)``, each keeping the original document order; named ``<name>_train`` and
        ``<name>_heldout``.

    Raises:
        ValueError: the fraction is outside (0, 1) or the corpus has fewer than two documents.
    """
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError("held_out_fraction must be in (0, 1), got %r" % (held_out_fraction,))
    n = len(corpus.documents)
    if n < 2:
        raise ValueError("corpus %r must have at least 2 documents to split, got %d" % (corpus.name, n))
    n_held = min(n - 1, max(1, int(round(held_out_fraction * n))))
    held = set(np.random.default_rng(seed).permutation(n)[:n_held].tolist())
    train_docs = tuple(d for i, d in enumerate(corpus.documents) if i not in held)
    held_docs = tuple(d for i, d in enumerate(corpus.documents) if i in held)
    return (
        replace(corpus, name=corpus.name + "_train", documents=train_docs),
        replace(corpus, name=corpus.name + "_heldout", documents=held_docs),
    )



_TOKEN_RE = re.compile(
    r"(?:[A-Za-z]\.){2,}"  # abbreviations with inner periods: U.S.
    r"|\d+(?:[.,:]\d+)*"  # numbers: 3.50, 1,000, 10:30
    r"|\w+(?:-\w+)*(?=n't\b)"  # the host of an n't clitic: do|n't
    r"|n't\b"
    r"|'(?:s|re|ve|ll|d|m)\b"  # clitics: river|'s, they|'re
    r"|\w+(?:-\w+|'(?!(?:s|re|ve|ll|d|m)\b)\w+)*"  # words with inner hyphens or apostrophes: o'clock
    r"|[^\w\s]",  # any other character is a token of its own
    re.IGNORECASE,
)


def regex_tokenize(text: str) -> list[str]:
    """Split text into word and punctuation tokens with a regular expression (no data files needed).

    Words keep inner hyphens and apostrophes (``state-of-the-art``, ``o'clock``); clitics split off as in the
    Penn Treebank (``don't`` -> ``do``, ``n't``; ``river's`` -> ``river``, ``'s``); other punctuation marks are
    tokens of their own.
    """
    return _TOKEN_RE.findall(text)
