"""The sentence corpus (WikiText-2) that decontextualised word vectors and fitted post-processings are drawn from."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Iterable

from ctxemb.core.validation import check_choice
from ctxemb.evaluation.similarity.data._files import PathLike, read_lines, require_file
from ctxemb.core.paths import shared_data_dir

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------- corpora


def read_sentences(path: PathLike, *, skip_headings: bool = True) -> list[tuple[str, ...]]:
    """Read a whitespace-tokenised text file (WikiText style) as sentences: each line is split at "." tokens
    (that is, on " . "), the "." kept at the end of its sentence; blank lines and, with ``skip_headings``,
    WikiText headings (`` = Title = ``) are dropped.

    Returns:
        Sentences as tuples of words, in file order.
    """
    out = []
    for line in read_lines(path):
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
        check_choice(split, "corpus split", ("train", "valid", "test"))
        sentences.extend(read_sentences(require_file(base / folder / ("%s.txt" % split), "%s %s" % (name, split))))
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
