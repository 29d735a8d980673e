"""Real English sentences from the shared data, for the benchmarks that embed or index them (timing, the machine
and the results files are :mod:`benchmarks.harness`'s)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ctxemb.core.paths import shared_data_dir


def wikitext_sentences(n: int, min_words: int = 5, max_words: int = 60) -> list[str]:
    """The first ``n`` sentences of WikiText-2 (valid, then test) with ``min_words``..``max_words`` words."""
    out = []
    for split in ("valid", "test"):
        for line in (shared_data_dir() / "corpora" / "wikitext-2" / f"{split}.txt").open(encoding="utf-8"):
            line = line.strip()
            if not line or line.startswith("="):
                continue
            for sent in re.split(r"(?<= \.) ", line):
                if min_words <= len(sent.split()) <= max_words:
                    out.append(sent)
                    if len(out) == n:
                        return out
    return out


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8-sig") as f:
        yield from (line.rstrip("\n") for line in f)


def _tsv_fields(path: Path, columns: Sequence[int], skip_header: bool) -> Iterator[str]:
    lines = _lines(path)
    if skip_header:
        next(lines, None)
    for line in lines:
        fields = line.split("\t")
        yield from (fields[c] for c in columns if c < len(fields))


def semcor_sentences() -> Iterator[str]:
    """SemCor 3.0 (Raganato XML), tokens joined by spaces, multiword tokens' ``_`` made spaces."""
    path = shared_data_dir() / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor" / "semcor.data.xml"
    for _, elem in ET.iterparse(path):
        if elem.tag == "sentence":
            yield " ".join((tok.text or "").replace("_", " ") for tok in elem)
            elem.clear()


def brown_sentences() -> Iterator[str]:
    """The Brown corpus (NLTK's zip) without the 352 files SemCor annotates (those are ``semcor_sentences``)."""
    xml = shared_data_dir() / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor" / "semcor.data.xml"
    in_semcor = set(re.findall(r'source="brown\w?/br-(\w\d\d)"', xml.read_text(encoding="utf-8")))
    with zipfile.ZipFile(shared_data_dir() / "nltk_data" / "corpora" / "brown.zip") as z:
        for name in sorted(z.namelist()):
            stem = name.rsplit("/", 1)[-1]
            if not re.fullmatch(r"c\w\d\d", stem) or stem[1:] in in_semcor:
                continue
            for line in z.read(name).decode("utf-8").splitlines():
                if line.strip():
                    yield " ".join(tok.rsplit("/", 1)[0] for tok in line.split())


def snli_sentences() -> Iterator[str]:
    """SNLI dev and test premises and hypotheses."""
    for split in ("dev", "test"):
        for part in ("s1", "s2"):
            yield from _lines(shared_data_dir() / "finetune" / "snli" / f"{part}.{split}")


def fortune_sentences() -> Iterator[str]:
    """English fortunes, each split into sentences at ``.``, ``!`` or ``?`` before a capital or a quote; attribution
    lines (starting with ``--``) dropped."""
    text = (shared_data_dir() / "corpora" / "fortunes-multilingual" / "en.txt").read_text(encoding="utf-8")
    for doc in re.split(r"\n\s*\n", text):
        body = " ".join(line for line in doc.splitlines() if not line.lstrip().startswith("--"))
        yield from re.split(r"(?<=[.!?])[\"')]*\s+(?=[\"'(]?[A-Z])", " ".join(body.split()))


def msrp_sentences() -> Iterator[str]:
    """MSRP (train, val, test): both sentences of every pair."""
    for split in ("train", "val", "test"):
        yield from _tsv_fields(shared_data_dir() / "finetune" / "msrp" / f"msr-para-{split}.tsv", (3, 4), True)


def stsb_sentences() -> Iterator[str]:
    """STS Benchmark train and dev: both sentences of every pair (fields 6 and 7)."""
    for split in ("train", "dev"):
        yield from _tsv_fields(shared_data_dir() / "similarity" / "stsb" / f"sts-{split}.csv", (5, 6), False)


def sick_sentences() -> Iterator[str]:
    """SICK train and trial: both sentences of every pair."""
    for split in ("train", "trial"):
        yield from _tsv_fields(shared_data_dir() / "similarity" / "sick" / f"SICK_{split}.txt", (1, 2), True)


def conll_sentences() -> Iterator[str]:
    """CoNLL-2003 English train and testa (Reuters news), tokens joined by spaces."""
    for split in ("train", "testa"):
        words: list[str] = []
        for line in _lines(shared_data_dir() / "finetune" / "conll2003" / f"eng.{split}"):
            if not line.strip() or line.startswith("-DOCSTART-"):
                if words:
                    yield " ".join(words)
                words = []
            else:
                words.append(line.split(" ", 1)[0])
        if words:
            yield " ".join(words)


def wic_sentences() -> Iterator[str]:
    """WiC train and dev: both contexts of every pair."""
    for split in ("train", "dev"):
        yield from _tsv_fields(shared_data_dir() / "similarity" / "wic" / split / f"{split}.data.txt", (3, 4), False)


#: English sentence sources in the shared data, in the order in which exact duplicates are credited.
REAL_SOURCES: dict[str, Callable[[], Iterator[str]]] = {
    "wikitext-2": lambda: iter(wikitext_sentences(10**9)),
    "semcor": semcor_sentences,
    "brown (not in semcor)": brown_sentences,
    "snli": snli_sentences,
    "fortunes (en)": fortune_sentences,
    "msrp": msrp_sentences,
    "stsb": stsb_sentences,
    "sick": sick_sentences,
    "conll-2003": conll_sentences,
    "wic": wic_sentences,
}
REAL_SOURCES_NOTE = (
    "Sources as the shared data ships them (WikiText-2, SemCor, Brown, SNLI and CoNLL are tokenized: words joined by "
    "spaces; WikiText-2 keeps its `<unk>` and `@-@`). Left out: SST-2 (its training set is mostly phrases cut from "
    "the same sentences), RTE and XQuAD (paragraphs), tiny-shakespeare (verse lines), the non-English fortunes."
)


def real_sentence_pool(min_words: int = 5, max_words: int = 60,
                       sources: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """The distinct sentences of ``sources`` (default: all of :data:`REAL_SOURCES`) with ``min_words``..``max_words``
    whitespace-separated words, whitespace collapsed; a sentence found in several sources is kept once, credited to
    the first. Returns (sentences, their source names), in reading order (deterministic)."""
    texts: list[str] = []
    names: list[str] = []
    seen: set[str] = set()
    for name in sources or list(REAL_SOURCES):
        for sent in REAL_SOURCES[name]():
            sent = " ".join(sent.split())
            if min_words <= len(sent.split()) <= max_words and sent not in seen:
                seen.add(sent)
                texts.append(sent)
                names.append(name)
    return texts, names

