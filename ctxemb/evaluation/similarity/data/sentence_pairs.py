"""Readers for the sentence-pair benchmarks: STS-B and SICK-R (see :mod:`ctxemb.evaluation.similarity.data` for
the ``read_*`` / ``load_*`` convention)."""

from __future__ import annotations

from ctxemb.core.validation import check_choice
from ctxemb.evaluation.similarity.data._files import (
    PathLike,
    parse_float,
    read_lines,
    require_file,
    similarity_data_dir,
    split_fields,
)
from ctxemb.evaluation.similarity.records import SentencePair


# --------------------------------------------------------------------------------------------------- STS-B, SICK


def read_stsb(path: PathLike) -> list[SentencePair]:
    """Read an STS Benchmark ``sts-*.csv`` file.

    Lines are tab-separated ``genre, filename, year, id, score, sentence1, sentence2`` with optional licence
    fields after sentence2 (fields 5-7, 1-based, are the ones used). The file is not CSV-quoted: quotes are text.

    Raises:
        ValueError: on a line with fewer than 7 fields or a score outside [0, 5].
    """
    out = []
    for i, line in enumerate(read_lines(path), 1):
        parts = line.split("\t")
        if len(parts) < 7:
            raise ValueError("%s line %d: expected at least 7 tab-separated fields, got %d: %r"
                             % (path, i, len(parts), line[:200]))
        score = parse_float(parts[4], path, i, "score")
        if not 0.0 <= score <= 5.0:
            raise ValueError("%s line %d: STS score must be in [0, 5]; got %s" % (path, i, score))
        out.append(SentencePair(parts[5], parts[6], score, id="/".join(parts[:4])))
    return out


def load_stsb(split: str, root: PathLike | None = None) -> list[SentencePair]:
    """STS-B ``split`` ("train": 5,749 pairs, "dev": 1,500; "test" is held out) from ``root/stsb/sts-<split>.csv``."""
    check_choice(split, "split for STS-B", ("train", "dev", "test"))
    path = similarity_data_dir(root) / "stsb" / ("sts-%s.csv" % split)
    return read_stsb(require_file(path, "STS-B %s" % split, held_out=split == "test"))


def read_sick(path: PathLike) -> list[SentencePair]:
    """Read a SICK file: a header, then ``pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment``.

    Raises:
        ValueError: on a missing header, a malformed line or a relatedness score outside [1, 5].
    """
    lines = read_lines(path)
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
        parts = split_fields(line, path, i, len(header))
        score = parse_float(parts[cols[3]], path, i, "relatedness_score")
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
    return read_sick(require_file(path, "SICK %s" % split, held_out=split == "test"))
