"""Pretraining data: token shards on disk, NSP sentence pairs and RoBERTa-style packed sequences, and a resumable
batch source for the training loop (J&M 11.2).

1. **Shards.** :func:`build_token_shards` streams plain-text files (never the whole corpus in memory), tokenizes
   them once in batched calls to the ``tokenizers`` backend and writes a shard set::

       out_dir/
         manifest.json            format/version, tokenizer identity, counts, source files, the shard list
         unigram_counts.npy       int64 (V,): how often each id occurs in the corpus (the masker's 10% random
                                  replacements are drawn from it)
         shard_00000/
           tokens.bin             flat token ids, uint16 if V <= 65536 else uint32 (no special tokens)
           word_starts.bin        uint8, one per token: 1 where a pre-tokenizer word begins
           sentences.npy          int64 (S_k + 1,): token offsets of the shard's sentences
           documents.npy          int64 (D_k + 1,): sentence offsets of the shard's documents
         shard_00001/ ...

   A *sentence* is one non-blank line. ``mode="blank_line"``: documents are separated by blank (or whitespace-only)
   lines; ``mode="line"``: one sentence per line and each file is one document. A document is never split between
   shards. :class:`TokenShards` opens a set with ``np.memmap`` / ``np.load(mmap_mode="r")``, so a set larger than
   RAM works; :meth:`TokenShards.for_rank` gives rank ``r`` of ``W`` the documents ``r, r + W, r + 2W, ...``.

2. **Sequences.** ``objective="nsp"``: BERT's ``create_instances_from_document`` (target length ``max_len - 3``,
   with probability ``short_seq_prob`` a shorter random target; segment A = a random number of whole sentences of
   a chunk, B = the chunk's remaining sentences (label 0, IsNext) or, with probability ``random_next_prob`` (and
   always when the chunk has one sentence), sentences from a random point of ANOTHER document (label 1, the unused
   sentences of the chunk go back); the longer segment is trimmed one token at a time from a random end until the
   pair fits), giving ``[CLS] A [SEP] B [SEP]`` with token types 0/1. ``"full_sentences"`` (RoBERTa): whole
   sentences packed contiguously up to ``max_len``, crossing document boundaries with an extra [SEP] between
   documents; ``"doc_sentences"``: the same without crossing a document (the last sequence of a document is
   shorter; the collator pads). A sentence longer than the content of one sequence is split into pieces (and
   counted in :attr:`PretrainingBatches.split_sentences`, logged once), never dropped.

3. **Batches.** :class:`PretrainingBatches` is an endless, seeded, exactly resumable source of this rank's
   micro-batches (``BatchSource`` of :mod:`ctxemb.training.data`): each epoch shuffles the rank's documents with
   ``(seed, epoch)``, cuts the order into windows of ``shuffle_window`` documents, builds the window's sequences
   (each document's from a generator seeded with ``(seed, epoch, document)``) and shuffles them. The position
   (epoch, window, offset) plus the source's own ``torch.Generator`` (handed to the masker) is the whole state.
   :class:`MultilingualBatches` draws each batch from one of several such sources (one per language) with
   q_i ~ p_i^alpha (:mod:`ctxemb.pretraining.sampling`).

Shapes: B sequences in a batch, T tokens per sequence, V vocabulary size, S sentences, D documents.
"""

from __future__ import annotations

import array
import hashlib
import inspect
import json
import logging
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np
import torch

from ctxemb._validation import check_choice, check_int
from ctxemb.paths import atomic_directory, atomic_write
from ctxemb.pretraining.sampling import MultilingualSampler
from ctxemb.tokenization import Tokenizer

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT", "FORMAT_VERSION", "ReadMode", "Objective", "build_token_shards", "vocab_fingerprint", "TokenShards",
    "ShardView",
    "DocumentTokens", "Instance", "nsp_instances", "pack_sentences", "collate_instances", "PretrainingBatches",
    "MultilingualBatches",
]

FORMAT = "ctxemb-token-shards"
FORMAT_VERSION = 1
ReadMode = Literal["blank_line", "line"]
Objective = Literal["nsp", "full_sentences", "doc_sentences"]
READ_MODES = ("blank_line", "line")
OBJECTIVES = ("nsp", "full_sentences", "doc_sentences")

_SPECIAL_NAMES = ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token")
# Tags that keep the seed streams of different purposes apart.
_TAG_ORDER, _TAG_DOC, _TAG_WINDOW, _TAG_TORCH = 1, 2, 3, 4


# ================================================================================================================
# Shards
# ================================================================================================================
def vocab_fingerprint(tokenizer: Tokenizer) -> str:
    """sha256 of the tokenizer's vocabulary (token -> id, added tokens included): the identity a shard set records."""
    vocab = sorted(tokenizer.backend.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def _read_sentences(paths: Sequence[Path], mode: str) -> Iterator[tuple[bool, str, int]]:
    """(starts a new document, line text, file index) for every non-blank line, streamed."""
    for fi, path in enumerate(paths):
        new_doc = True
        with open(path, encoding="utf-8") as fh:
            lineno = 0
            try:
                for lineno, line in enumerate(fh, 1):
                    text = line.strip()
                    if not text:
                        if mode == "blank_line":
                            new_doc = True
                        continue
                    yield new_doc, text, fi
                    new_doc = False
            except UnicodeDecodeError as e:
                raise ValueError(f"paths[{fi}] {str(path)!r} is not UTF-8 text (after line {lineno}): {e}") from None


class _ShardWriter:
    """Appends sentences to numbered shard folders, starting a new shard at a document boundary once the current
    one holds ``max_tokens`` tokens."""

    def __init__(self, root: Path, dtype: np.dtype, vocab_size: int, max_tokens: int, n_sources: int):
        self.root, self.dtype, self.max_tokens = root, dtype, max_tokens
        self.unigram = np.zeros(vocab_size, dtype=np.int64)
        self.shards: list[dict] = []
        self.sources = [dict(n_documents=0, n_sentences=0, n_tokens=0) for _ in range(n_sources)]
        self._open_shard()

    def _open_shard(self) -> None:
        self.dir_name = f"shard_{len(self.shards):05d}"
        d = self.root / self.dir_name
        d.mkdir()
        self._tokens = open(d / "tokens.bin", "wb")
        self._starts = open(d / "word_starts.bin", "wb")
        self.n_tokens = 0
        self.sentence_offsets = array.array("q", [0])  # 8 bytes per sentence, not a Python int object
        self.document_offsets = array.array("q", [0])

    def _close_document(self) -> None:
        if len(self.sentence_offsets) - 1 > self.document_offsets[-1]:
            self.document_offsets.append(len(self.sentence_offsets) - 1)

    def _close_shard(self) -> None:
        self._close_document()
        self._tokens.close()
        self._starts.close()
        d = self.root / self.dir_name
        np.save(d / "sentences.npy", np.frombuffer(self.sentence_offsets, dtype=np.int64))
        np.save(d / "documents.npy", np.frombuffer(self.document_offsets, dtype=np.int64))
        self.shards.append(dict(dir=self.dir_name, n_tokens=self.n_tokens, n_sentences=len(self.sentence_offsets) - 1,
                                n_documents=len(self.document_offsets) - 1))

    def add(self, new_doc: bool, ids: np.ndarray, starts: np.ndarray, source: int) -> None:
        if new_doc:
            self._close_document()
            if self.n_tokens >= self.max_tokens:
                self._close_shard()
                self._open_shard()
            self.sources[source]["n_documents"] += 1
        self._tokens.write(ids.astype(self.dtype, copy=False).tobytes())
        self._starts.write(starts.astype(np.uint8, copy=False).tobytes())
        self.n_tokens += len(ids)
        self.sentence_offsets.append(self.n_tokens)
        self.sources[source]["n_sentences"] += 1
        self.sources[source]["n_tokens"] += len(ids)

    def count(self, ids: np.ndarray) -> None:
        self.unigram += np.bincount(ids, minlength=len(self.unigram))

    def finish(self) -> None:
        self._close_shard()


def build_token_shards(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike,
    *,
    mode: ReadMode = "blank_line",
    max_tokens_per_shard: int = 1 << 27,
    batch_lines: int = 4096,
) -> "TokenShards":
    """Tokenize plain-text files once into a memory-mapped shard set (see the module docstring for the layout).

    The files are streamed line by line and tokenized in batches of ``batch_lines`` lines (no special tokens);
    every token also gets a word-start flag from the backend's ``word_ids`` (the pre-tokenizer's words, the same
    words as :meth:`ctxemb.tokenization.Tokenizer.tokenize` gives), which whole-word and span masking use. The set is
    built in a temporary folder that replaces ``out_dir`` only when complete.

    Args:
        paths: one text file or several (UTF-8); their order is the corpus order.
        tokenizer: the ctxemb tokenizer of the model to pretrain.
        out_dir: the shard-set folder (replaced if it exists).
        mode: ``"blank_line"``: blank lines separate documents; ``"line"``: each file is one document.
        max_tokens_per_shard: a new shard starts at the first document boundary after this many tokens (a single
            longer document stays whole).
        batch_lines: lines per call to the tokenizer backend.

    Returns:
        The shard set, opened.

    Raises:
        FileNotFoundError: a path is not a file.
        ValueError: a bad ``mode`` or size, a file that is not UTF-8, or no text at all.
    """
    check_choice(mode, "mode", READ_MODES)
    check_int(max_tokens_per_shard, "max_tokens_per_shard", low=1)
    check_int(batch_lines, "batch_lines", low=1)
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a ctxemb.tokenization.Tokenizer; got {type(tokenizer).__name__}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("paths is empty: expected at least one text file")
    for i, p in enumerate(paths):
        if not p.is_file():
            raise FileNotFoundError(f"paths[{i}] {str(p)!r} is not a file")
    backend = tokenizer.backend
    vocab_size = tokenizer.vocab_size
    dtype = _token_dtype(vocab_size)
    out_dir = Path(out_dir)
    skipped = 0

    with atomic_directory(out_dir) as tmp:
        writer = _ShardWriter(tmp, dtype, vocab_size, max_tokens_per_shard, len(paths))
        pending_new_doc = False

        def flush(batch: list[tuple[bool, str, int]]) -> None:
            nonlocal pending_new_doc, skipped
            encodings = backend.encode_batch([t for _, t, _ in batch], add_special_tokens=False)
            all_ids = []
            for (new_doc, _, source), enc in zip(batch, encodings):
                new_doc = new_doc or pending_new_doc
                if not enc.ids:  # e.g. only control characters: no token, so no sentence
                    skipped += 1
                    pending_new_doc = new_doc
                    continue
                pending_new_doc = False
                ids = np.asarray(enc.ids, dtype=np.int64)
                words = np.asarray([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
                starts = np.empty(len(ids), dtype=bool)
                starts[0] = True
                starts[1:] = (words[1:] != words[:-1]) | (words[1:] < 0)
                writer.add(new_doc, ids, starts, source)
                all_ids.append(ids)
            if all_ids:
                writer.count(np.concatenate(all_ids))

        batch: list[tuple[bool, str, int]] = []
        for item in _read_sentences(paths, mode):
            batch.append(item)
            if len(batch) >= batch_lines:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
        writer.finish()
        n_tokens = sum(s["n_tokens"] for s in writer.shards)
        if n_tokens == 0:
            raise ValueError(f"no text in {[str(p) for p in paths]}: every line is blank or has no token")
        np.save(tmp / "unigram_counts.npy", writer.unigram)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "mode": mode,
            "tokenizer": {
                "model_type": tokenizer.model_type,
                "vocab_size": vocab_size,
                "vocab_sha256": vocab_fingerprint(tokenizer),
                "special_tokens": {k: tokenizer.special_tokens[k] for k in _SPECIAL_NAMES},
                "special_token_ids": {f"{k}_id": getattr(tokenizer, f"{k}_id") for k in _SPECIAL_NAMES},
            },
            "dtype": dtype.name,
            "n_tokens": n_tokens,
            "n_sentences": sum(s["n_sentences"] for s in writer.shards),
            "n_documents": sum(s["n_documents"] for s in writer.shards),
            "skipped_lines_without_tokens": skipped,
            "shards": writer.shards,
            "sources": [dict(path=str(p.resolve()), bytes=p.stat().st_size, **s)
                        for p, s in zip(paths, writer.sources)],
        }
        with atomic_write(tmp / "manifest.json") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
    if skipped:
        logger.warning("%d non-blank line(s) gave no token and were left out of %s", skipped, out_dir)
    logger.info("token shards %s: %d documents, %d sentences, %d tokens in %d shard(s)", out_dir,
                manifest["n_documents"], manifest["n_sentences"], n_tokens, len(manifest["shards"]))
    return TokenShards.open(out_dir)


@dataclass
class DocumentTokens:
    """One document of a shard set (views of the memory maps; do not write to them).

    Attributes:
        doc_id: the global document index.
        tokens: (N,) token ids of the whole document (uint16/uint32).
        word_starts: (N,) uint8, 1 where a word begins.
        sentence_offsets: (S + 1,) int64 offsets of the S sentences into ``tokens`` (starting at 0).
    """

    doc_id: int
    tokens: np.ndarray
    word_starts: np.ndarray
    sentence_offsets: np.ndarray

    @property
    def n_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    def sentence(self, i: int) -> np.ndarray:
        """The token ids of sentence i."""
        return self.tokens[self.sentence_offsets[i]:self.sentence_offsets[i + 1]]

    def sentences(self) -> list[np.ndarray]:
        return [self.sentence(i) for i in range(self.n_sentences)]


class _Shard:
    def __init__(self, d: Path, dtype: np.dtype, info: dict):
        self.dir = d
        n = int(info["n_tokens"])
        for name, itemsize in (("tokens.bin", dtype.itemsize), ("word_starts.bin", 1)):
            size = (d / name).stat().st_size if (d / name).is_file() else -1
            if size != n * itemsize:
                raise ValueError(f"{d / name}: expected {n * itemsize} bytes ({n} tokens of {itemsize} byte(s)) as "
                                 f"the manifest says, found {'no file' if size < 0 else f'{size} bytes'}")
        self.tokens = np.memmap(d / "tokens.bin", dtype=dtype, mode="r", shape=(n,))
        self.word_starts = np.memmap(d / "word_starts.bin", dtype=np.uint8, mode="r", shape=(n,))
        self.sentences = np.load(d / "sentences.npy", mmap_mode="r")
        self.documents = np.load(d / "documents.npy", mmap_mode="r")
        if len(self.sentences) != info["n_sentences"] + 1 or len(self.documents) != info["n_documents"] + 1:
            raise ValueError(f"{d}: sentences.npy/documents.npy do not match the manifest's counts "
                             f"({info['n_sentences']} sentences, {info['n_documents']} documents)")


class TokenShards:
    """A shard set written by :func:`build_token_shards`, memory-mapped. Open it with :meth:`open`.

    Attributes:
        directory: the shard-set folder.
        manifest: the parsed ``manifest.json``.
        vocab_size, model_type: the tokenizer's.
        cls_token_id, sep_token_id, pad_token_id, mask_token_id, unk_token_id: its special ids.
        n_documents, n_sentences, n_tokens: corpus counts.
    """

    def __init__(self, directory: Path, manifest: dict, shards: list[_Shard]):
        self.directory = directory
        self.manifest = manifest
        self._shards = shards
        tok = manifest["tokenizer"]
        self.vocab_size = int(tok["vocab_size"])
        self.model_type = tok["model_type"]
        for name, value in tok["special_token_ids"].items():
            setattr(self, name, int(value))
        self.n_documents = int(manifest["n_documents"])
        self.n_sentences = int(manifest["n_sentences"])
        self.n_tokens = int(manifest["n_tokens"])
        self._doc_base = np.cumsum([0] + [s["n_documents"] for s in manifest["shards"]])
        self._unigram: np.ndarray | None = None
        self._doc_lengths: np.ndarray | None = None

    @classmethod
    def open(cls, directory: str | os.PathLike, *, tokenizer: Tokenizer | None = None) -> "TokenShards":
        """Open a shard set.

        Args:
            directory: the folder :func:`build_token_shards` wrote.
            tokenizer: if given, it must have the vocabulary the shards were built with.

        Raises:
            FileNotFoundError: no ``manifest.json`` in ``directory``.
            ValueError: another format or version, files that do not match the manifest, or a tokenizer with
                another vocabulary.
        """
        directory = Path(directory)
        path = directory / "manifest.json"
        if not path.is_file():
            raise FileNotFoundError(f"no token shards in {directory}: expected manifest.json (build_token_shards "
                                    f"writes it)")
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: expected format {FORMAT!r} version {FORMAT_VERSION}, found "
                             f"{manifest.get('format')!r} version {manifest.get('format_version')}")
        if tokenizer is not None:
            want = manifest["tokenizer"]["vocab_sha256"]
            got = vocab_fingerprint(tokenizer)
            if want != got:
                raise ValueError(f"tokenizer has another vocabulary (size {tokenizer.vocab_size}, sha256 {got[:12]}) "
                                 f"than the one the shards in {directory} were built with (size "
                                 f"{manifest['tokenizer']['vocab_size']}, sha256 {want[:12]})")
        dtype = np.dtype(manifest["dtype"])
        shards = [_Shard(directory / s["dir"], dtype, s) for s in manifest["shards"]]
        return cls(directory, manifest, shards)

    def __repr__(self) -> str:
        return (f"TokenShards({str(self.directory)!r}, documents={self.n_documents}, sentences={self.n_sentences}, "
                f"tokens={self.n_tokens}, shards={len(self._shards)})")

    @property
    def special_token_ids(self) -> list[int]:
        """The ids of [CLS], [SEP], [PAD], [MASK], [UNK] (their equivalents for other layouts)."""
        return [self.cls_token_id, self.sep_token_id, self.pad_token_id, self.mask_token_id, self.unk_token_id]

    @property
    def unigram_counts(self) -> np.ndarray:
        """int64 (V,): occurrences of every id in the corpus (special tokens: 0, as the shards hold none)."""
        if self._unigram is None:
            self._unigram = np.load(self.directory / "unigram_counts.npy")
        return self._unigram

    def unigram_distribution(self, exclude_special: bool = True) -> np.ndarray:
        """float64 (V,): the corpus unigram distribution (for the masker's random replacements)."""
        c = self.unigram_counts.astype(np.float64)
        if exclude_special:
            c[self.special_token_ids] = 0.0
        return c / c.sum()

    @property
    def document_lengths(self) -> np.ndarray:
        """int64 (D,): tokens per document."""
        if self._doc_lengths is None:
            parts = []
            for sh in self._shards:
                offs = np.asarray(sh.sentences)[np.asarray(sh.documents)]
                parts.append(np.diff(offs))
            self._doc_lengths = np.concatenate(parts).astype(np.int64)
        return self._doc_lengths

    def document(self, doc_id: int) -> DocumentTokens:
        """Document ``doc_id`` (0 <= doc_id < n_documents)."""
        if not 0 <= doc_id < self.n_documents:
            raise IndexError(f"doc_id must lie in [0, {self.n_documents}); got {doc_id}")
        k = int(np.searchsorted(self._doc_base, doc_id, side="right")) - 1
        sh = self._shards[k]
        local = doc_id - int(self._doc_base[k])
        s0, s1 = int(sh.documents[local]), int(sh.documents[local + 1])
        offs = np.asarray(sh.sentences[s0:s1 + 1], dtype=np.int64)
        t0, t1 = int(offs[0]), int(offs[-1])
        return DocumentTokens(doc_id, sh.tokens[t0:t1], sh.word_starts[t0:t1], offs - t0)

    def iter_documents(self) -> Iterator[DocumentTokens]:
        for d in range(self.n_documents):
            yield self.document(d)

    def for_rank(self, rank: int = 0, world_size: int = 1) -> "ShardView":
        """The documents of rank ``rank`` of ``world_size``: ``rank, rank + world_size, ...`` (disjoint; together
        all documents; strided so that every rank sees every part of the corpus, e.g. every language).

        Raises:
            ValueError: a bad rank, or fewer documents than ranks.
        """
        check_int(world_size, "world_size", low=1)
        check_int(rank, "rank", low=0, high=world_size - 1, high_text="world_size - 1")
        if self.n_documents < world_size:
            raise ValueError(f"the shards in {self.directory} have {self.n_documents} document(s), fewer than "
                             f"world_size={world_size}: every rank needs at least one (with mode='line' each file "
                             f"is one document: split the corpus into more files, or use mode='blank_line')")
        return ShardView(self, rank, world_size, np.arange(rank, self.n_documents, world_size, dtype=np.int64))


@dataclass(frozen=True)
class ShardView:
    """One rank's documents of a shard set (global ids in ``documents``)."""

    shards: TokenShards
    rank: int
    world_size: int
    documents: np.ndarray

    @property
    def n_documents(self) -> int:
        return len(self.documents)

    @property
    def n_tokens(self) -> int:
        return int(self.shards.document_lengths[self.documents].sum())

    def document(self, i: int) -> DocumentTokens:
        """The i-th document of this rank (0 <= i < n_documents)."""
        return self.shards.document(int(self.documents[i]))


# ================================================================================================================
# Sequences
# ================================================================================================================
@dataclass
class Instance:
    """One model input before batching.

    Attributes:
        input_ids: (T,) int64, special tokens included.
        token_type_ids: (T,) int64.
        word_ids: (T,) int64, words numbered 0.. across the sequence, -1 at special tokens (also at a special id
            inside the text: an [UNK], or a literal "[MASK]" the tokenizer matched).
        next_sentence_label: 0 IsNext, 1 random next (NSP); -1 for packed sequences.
        origin: where the tokens came from (for tests and debugging). NSP: ``a``/``b`` = (doc_id, first sentence,
            end sentence) of the (split) sentences before truncation, ``a_tokens``/``b_tokens`` = (doc_id, start,
            stop) token range of the document after truncation, ``trim`` = tokens cut from (A's front, A's back, B's
            front, B's back), ``chunk_sentences`` = sentences in the chunk (1 forces a random next).
            Packing: ``pieces`` = [(doc_id, start, stop), ...] token ranges in order.
    """

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    word_ids: np.ndarray
    next_sentence_label: int = -1
    origin: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class _Layout:
    cls: int
    sep: int
    pad: int
    bert: bool  # [CLS] A [SEP] B [SEP] with types 0/1; else <s> A </s></s> B </s> with types 0
    specials: np.ndarray  # every special id: a content token with one of them (an [UNK], a literal "[MASK]" in
    # the text) gets word id -1 too, so that maskers that never choose special tokens accept the word ids

    @property
    def pair_specials(self) -> int:
        return 3 if self.bert else 4


def _split_sentences(offsets: np.ndarray, limit: int) -> np.ndarray:
    """Sentence offsets with every sentence longer than ``limit`` tokens cut into pieces of at most ``limit``."""
    lengths = np.diff(offsets)
    if lengths.size == 0 or lengths.max() <= limit:
        return offsets
    out = [int(offsets[0])]
    for start, n in zip(offsets[:-1].tolist(), lengths.tolist()):
        for cut in range(limit, n, limit):
            out.append(start + cut)
        out.append(start + n)
    return np.asarray(out, dtype=np.int64)


def _word_ids(starts: np.ndarray, first: int) -> tuple[np.ndarray, int]:
    """Word ids first.. for a run of tokens with word-start flags (its first token always starts a word)."""
    s = starts.astype(bool, copy=True)
    if len(s):
        s[0] = True
    ids = np.cumsum(s, dtype=np.int64) - 1 + first
    return ids, (int(ids[-1]) + 1 if len(ids) else first)


def _trim_pair(la: int, lb: int, budget: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """BERT's truncate_seq_pair in closed form: (front_a, back_a, front_b, back_b) tokens to remove.

    BERT removes one token at a time from the longer segment (B on a tie), from its front or back with equal
    probability, until ``la + lb <= budget``; the counts per segment follow from that rule, the front/back split is
    Binomial(n, 1/2), as one coin per token would give.
    """
    excess = la + lb - budget
    if excess <= 0:
        return 0, 0, 0, 0
    da = db = 0
    if la > lb:
        da = min(excess, la - lb)
    else:
        db = min(excess, lb - la)
    rest = excess - da - db
    db += (rest + 1) // 2  # equal lengths: B first (``len(a) > len(b)`` is false), then alternating
    da += rest // 2
    fa = int(rng.binomial(da, 0.5)) if da else 0
    fb = int(rng.binomial(db, 0.5)) if db else 0
    return fa, da - fa, fb, db - fb


def nsp_instances(view: ShardView, index: int, rng: np.random.Generator, *, max_len: int,
                  short_seq_prob: float = 0.1, random_next_prob: float = 0.5,
                  layout: _Layout | None = None) -> list[Instance]:
    """BERT's ``create_instances_from_document`` for document ``index`` of a rank's view.

    Args:
        view: this rank's documents; random next segments come from another of them.
        index: the document's position in ``view.documents``.
        rng: the random source (every draw comes from it).
        max_len: tokens per sequence, special tokens included.
        short_seq_prob: probability of a random target length in ``[2, max_len - 3]`` for this document.
        random_next_prob: probability of a random next segment (label 1) for a chunk of >= 2 sentences.

    Returns:
        The document's instances, in document order.

    Raises:
        ValueError: the view has a single document (there is no other document for a random next segment).
    """
    if view.n_documents < 2:
        raise ValueError(f"NSP needs at least 2 documents on rank {view.rank} (a random next segment comes from "
                         f"another document); this rank has {view.n_documents}")
    layout = layout or _layout_of(view.shards)
    max_num_tokens = max_len - layout.pair_specials
    doc = view.document(index)
    offs = _split_sentences(doc.sentence_offsets, max_num_tokens)
    n_sent = len(offs) - 1
    lengths = np.diff(offs)
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_num_tokens + 1))
    out = []
    chunk_start, cur_len, i = 0, 0, 0
    while i < n_sent:
        cur_len += int(lengths[i])
        if i == n_sent - 1 or cur_len >= target:
            k = i + 1 - chunk_start
            a_end = chunk_start + (1 if k < 2 else int(rng.integers(1, k)))
            a = (doc, int(offs[chunk_start]), int(offs[a_end]))
            a_origin = (doc.doc_id, chunk_start, a_end)
            if k == 1 or rng.random() < random_next_prob:
                label = 1
                target_b = target - (a[2] - a[1])
                j = int(rng.integers(view.n_documents - 1))
                j += j >= index
                other = view.document(j)
                o_offs = _split_sentences(other.sentence_offsets, max_num_tokens)
                o_n = len(o_offs) - 1
                start = int(rng.integers(o_n))
                stop = start + 1
                while stop < o_n and o_offs[stop] - o_offs[start] < target_b:
                    stop += 1
                b = (other, int(o_offs[start]), int(o_offs[stop]))
                b_origin = (other.doc_id, start, stop)
                i = a_end - 1  # the chunk's unused sentences go back
            else:
                label = 0
                b = (doc, int(offs[a_end]), int(offs[i + 1]))
                b_origin = (doc.doc_id, a_end, i + 1)
            fa, ba, fb, bb = _trim_pair(a[2] - a[1], b[2] - b[1], max_num_tokens, rng)
            a = (a[0], a[1] + fa, a[2] - ba)
            b = (b[0], b[1] + fb, b[2] - bb)
            out.append(_pair_instance(a, b, label, layout, dict(
                a=a_origin, b=b_origin, chunk_sentences=k, a_tokens=(a[0].doc_id, a[1], a[2]),
                b_tokens=(b[0].doc_id, b[1], b[2]), trim=(fa, ba, fb, bb))))
            chunk_start, cur_len = i + 1, 0
        i += 1
    return out


def _pair_instance(a, b, label: int, layout: _Layout, origin: dict) -> Instance:
    (da, a0, a1), (db, b0, b1) = a, b
    ta = np.asarray(da.tokens[a0:a1], dtype=np.int64)
    tb = np.asarray(db.tokens[b0:b1], dtype=np.int64)
    wa, nxt = _word_ids(np.asarray(da.word_starts[a0:a1]), 0)
    wb, _ = _word_ids(np.asarray(db.word_starts[b0:b1]), nxt)
    c, s = [layout.cls], [layout.sep]
    neg = np.array([-1], dtype=np.int64)
    if layout.bert:
        ids = np.concatenate([c, ta, s, tb, s]).astype(np.int64)
        types = np.concatenate([np.zeros(len(ta) + 2, np.int64), np.ones(len(tb) + 1, np.int64)])
        words = np.concatenate([neg, wa, neg, wb, neg])
    else:
        ids = np.concatenate([c, ta, s, s, tb, s]).astype(np.int64)
        types = np.zeros(len(ids), np.int64)
        words = np.concatenate([neg, wa, neg, neg, wb, neg])
    words[np.isin(ids, layout.specials)] = -1
    return Instance(ids, types, words, label, origin)


def pack_sentences(view: ShardView, indices: Sequence[int], *, max_len: int, cross_documents: bool,
                   layout: _Layout | None = None) -> tuple[list[Instance], int]:
    """RoBERTa's FULL-SENTENCES (``cross_documents=True``) or DOC-SENTENCES packing of documents in order.

    Whole sentences are added to a sequence while ``[CLS] content [SEP]`` fits in ``max_len``. With
    ``cross_documents`` a sequence continues into the next document after an extra [SEP]; without, every document
    ends its last sequence. A sentence longer than ``max_len - 2`` tokens is split into pieces.

    Args:
        view: this rank's documents.
        indices: positions in ``view.documents``, in packing order.
        max_len: tokens per sequence, special tokens included.
        cross_documents: FULL-SENTENCES (True) or DOC-SENTENCES (False).

    Returns:
        (the instances, how many sentences had to be split).
    """
    layout = layout or _layout_of(view.shards)
    limit = max_len - 2
    out: list[Instance] = []
    pieces: list[tuple] = []  # (document, start, stop) or None for a document separator
    origin: list[tuple[int, int, int]] = []
    used = 0
    n_split = 0

    def emit():
        nonlocal pieces, origin, used
        if pieces:
            out.append(_packed_instance(pieces, layout, origin))
        pieces, origin, used = [], [], 0

    for index in indices:
        doc = view.document(int(index))
        offs = _split_sentences(doc.sentence_offsets, limit)
        n_split += int((np.diff(doc.sentence_offsets) > limit).sum())
        if not cross_documents:
            emit()
        first = True
        for s in range(len(offs) - 1):
            n = int(offs[s + 1] - offs[s])
            sep = 1 if (first and pieces) else 0
            if used + sep + n > limit:
                emit()
                sep = 0
            if sep:
                pieces.append(None)
                used += 1
            pieces.append((doc, int(offs[s]), int(offs[s + 1])))
            origin.append((doc.doc_id, int(offs[s]), int(offs[s + 1])))
            used += n
            first = False
    emit()
    return out, n_split


def _packed_instance(pieces, layout: _Layout, origin) -> Instance:
    ids = [np.array([layout.cls], np.int64)]
    words = [np.array([-1], np.int64)]
    nxt = 0
    for p in pieces:
        if p is None:
            ids.append(np.array([layout.sep], np.int64))
            words.append(np.array([-1], np.int64))
            continue
        doc, a, b = p
        ids.append(np.asarray(doc.tokens[a:b], dtype=np.int64))
        w, nxt = _word_ids(np.asarray(doc.word_starts[a:b]), nxt)
        words.append(w)
    ids.append(np.array([layout.sep], np.int64))
    words.append(np.array([-1], np.int64))
    input_ids = np.concatenate(ids)
    word_ids = np.concatenate(words)
    word_ids[np.isin(input_ids, layout.specials)] = -1
    return Instance(input_ids, np.zeros(len(input_ids), np.int64), word_ids, -1, dict(pieces=list(origin)))


def _layout_of(shards: TokenShards) -> _Layout:
    return _Layout(shards.cls_token_id, shards.sep_token_id, shards.pad_token_id, shards.model_type == "bert",
                   np.asarray(shards.special_token_ids, dtype=np.int64))


def collate_instances(instances: Sequence[Instance], pad_token_id: int, *, pad_to: int | None = None,
                      nsp: bool = False) -> dict[str, torch.Tensor]:
    """Pad instances into a batch: input_ids, attention_mask, token_type_ids, word_ids (all (B, T) int64; word_ids
    -1 at special and padding tokens) and, with ``nsp``, next_sentence_label (B,).

    Args:
        pad_to: pad to this length (>= the longest); None pads to the longest instance.
    """
    if not instances:
        raise ValueError("instances is empty: expected at least one")
    T = max(len(x) for x in instances)
    if pad_to is not None:
        if pad_to < T:
            raise ValueError(f"pad_to ({pad_to}) is shorter than the longest instance ({T})")
        T = pad_to
    B = len(instances)
    input_ids = np.full((B, T), pad_token_id, dtype=np.int64)
    attention = np.zeros((B, T), dtype=np.int64)
    types = np.zeros((B, T), dtype=np.int64)
    words = np.full((B, T), -1, dtype=np.int64)
    for i, x in enumerate(instances):
        n = len(x)
        input_ids[i, :n] = x.input_ids
        attention[i, :n] = 1
        types[i, :n] = x.token_type_ids
        words[i, :n] = x.word_ids
    batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention),
             "token_type_ids": torch.from_numpy(types), "word_ids": torch.from_numpy(words)}
    if nsp:
        batch["next_sentence_label"] = torch.tensor([x.next_sentence_label for x in instances], dtype=torch.long)
    return batch


# ================================================================================================================
# Batch source
# ================================================================================================================
def _seed_of(*parts: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(p) for p in parts])))


def _accepts_generator(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "generator" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class PretrainingBatches:
    """Endless, seeded, exactly resumable micro-batches of one rank for MLM(+NSP) pretraining.

    Batches have ``input_ids``, ``attention_mask``, ``token_type_ids``, ``word_ids`` (B, T) int64 (word_ids -1 at
    special and padding tokens, including [UNK]s in the text: :attr:`TokenShards.special_token_ids`), ``next_sentence_label`` (B,) for ``objective="nsp"``, and, with a ``masker``,
    ``labels`` (B, T) (plus ``span_left``/``span_right``/``span_position`` when the masker gives them); the masked
    ids replace ``input_ids``.

    Order: epoch e permutes this rank's documents with ``(seed, e)``; the permutation is cut into windows of
    ``shuffle_window`` documents; a window's sequences are built (document d's with a generator seeded by
    ``(seed, e, d)``) and shuffled, then consumed in order; batches run on across window and epoch ends (every
    batch is full). The masker is called with the source's own ``torch.Generator``, whose state is part of
    :meth:`state_dict`, so a resumed source yields exactly the batches an uninterrupted one would.

    Args:
        shards: the shard set.
        objective: ``"nsp"`` (BERT pairs), ``"full_sentences"`` or ``"doc_sentences"`` (RoBERTa packing).
        max_len: tokens per sequence, special tokens included.
        batch_size: sequences per micro-batch.
        seed: the base seed.
        rank, world_size: this process's share of the documents (:meth:`TokenShards.for_rank`).
        masker: e.g. :class:`ctxemb.pretraining.masking.Masker`; called as ``masker(input_ids,
            attention_mask=, word_ids=, generator=)`` (``generator`` only if it accepts one; otherwise it runs
            under a forked torch RNG seeded from the source's generator).
        short_seq_prob, random_next_prob: NSP's (BERT: 0.1 and 0.5).
        shuffle_window: documents per shuffle window (more: better mixing, more memory for one window's sequences).
        pad_to: ``"longest"`` pads a batch to its longest sequence, ``"max_len"`` always to ``max_len``.

    Attributes:
        epoch, window, offset: the position of the next sequence.
        batches: micro-batches yielded so far.
        split_sentences: sentences longer than one sequence's content that were split into pieces, counted over
            the windows built so far by this object (a diagnostic, not part of the state).
    """

    def __init__(self, shards: TokenShards, *, objective: Objective, max_len: int, batch_size: int, seed: int = 0,
                 rank: int = 0, world_size: int = 1, masker: Callable | None = None, short_seq_prob: float = 0.1,
                 random_next_prob: float = 0.5, shuffle_window: int = 1000,
                 pad_to: Literal["longest", "max_len"] = "longest"):
        if not isinstance(shards, TokenShards):
            raise TypeError(f"shards must be a TokenShards (TokenShards.open(dir)); got {type(shards).__name__}")
        self.objective = check_choice(objective, "objective", OBJECTIVES)
        self.max_len = check_int(max_len, "max_len", low=8)
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.seed = check_int(seed, "seed", low=0)
        self.shuffle_window = check_int(shuffle_window, "shuffle_window", low=1)
        self.pad_to = check_choice(pad_to, "pad_to", ("longest", "max_len"))
        for name, v in (("short_seq_prob", short_seq_prob), ("random_next_prob", random_next_prob)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1]; got {v!r}")
        self.short_seq_prob, self.random_next_prob = float(short_seq_prob), float(random_next_prob)
        if masker is not None and not callable(masker):
            raise TypeError(f"masker must be callable (input_ids, attention_mask=, word_ids=); "
                            f"got {type(masker).__name__}")
        self.masker = masker
        self.shards = shards
        self.view = shards.for_rank(rank, world_size)
        self.rank, self.world_size = rank, world_size
        if objective == "nsp" and self.view.n_documents < 2:
            raise ValueError(f"objective 'nsp' needs at least 2 documents per rank (a random next segment comes from "
                             f"another document); rank {rank} of {world_size} has {self.view.n_documents}")
        self.layout = _layout_of(shards)
        self.n_windows = math.ceil(self.view.n_documents / self.shuffle_window)
        self.generator = torch.Generator().manual_seed(int(np.random.SeedSequence(
            [self.seed, _TAG_TORCH, rank]).generate_state(1, np.uint64)[0] >> 1))
        self._pass_generator = masker is not None and _accepts_generator(masker)
        self.epoch = self.window = self.offset = self.batches = 0
        self.split_sentences = 0
        self._order: tuple[int, np.ndarray] | None = None
        self._cache: tuple[tuple[int, int], list[Instance]] | None = None
        self._warned_split = False

    # ---- the order of sequences ---------------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> np.ndarray:
        """Positions in this rank's view, in the order epoch ``epoch`` reads the documents."""
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, _seed_of(self.seed, _TAG_ORDER, epoch).permutation(self.view.n_documents))
        return self._order[1]

    def window_instances(self, epoch: int, window: int) -> list[Instance]:
        """The shuffled sequences of one window (cached: the last window asked for)."""
        key = (epoch, window)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        order = self.epoch_order(epoch)
        indices = order[window * self.shuffle_window:(window + 1) * self.shuffle_window]
        if self.objective == "nsp":
            instances = []
            for index in indices:
                rng = _seed_of(self.seed, _TAG_DOC, epoch, int(self.view.documents[index]))
                instances.extend(nsp_instances(self.view, int(index), rng, max_len=self.max_len,
                                               short_seq_prob=self.short_seq_prob,
                                               random_next_prob=self.random_next_prob, layout=self.layout))
            n_split = sum(int((np.diff(self.view.document(int(i)).sentence_offsets)
                               > self.max_len - self.layout.pair_specials).sum()) for i in indices)
        else:
            instances, n_split = pack_sentences(self.view, indices, max_len=self.max_len,
                                                cross_documents=self.objective == "full_sentences",
                                                layout=self.layout)
        if n_split:
            self.split_sentences += n_split
            log = logger.debug if self._warned_split else logger.info
            log("%d sentence(s) longer than one sequence (max_len %d) split into pieces (epoch %d, window %d)",
                n_split, self.max_len, epoch, window)
            self._warned_split = True
        perm = _seed_of(self.seed, _TAG_WINDOW, epoch, window).permutation(len(instances))
        instances = [instances[i] for i in perm]
        self._cache = (key, instances)
        return instances

    def _next_instances(self, n: int) -> list[Instance]:
        items: list[Instance] = []
        while len(items) < n:
            instances = self.window_instances(self.epoch, self.window)
            if self.offset >= len(instances):
                self.window += 1
                self.offset = 0
                if self.window >= self.n_windows:
                    self.epoch += 1
                    self.window = 0
                continue
            take = instances[self.offset:self.offset + n - len(items)]
            items.extend(take)
            self.offset += len(take)
        return items

    # ---- batches ------------------------------------------------------------------------------------------
    def _collate(self, items: list[Instance], generator: torch.Generator | None) -> dict[str, torch.Tensor]:
        batch = collate_instances(items, self.layout.pad, pad_to=self.max_len if self.pad_to == "max_len" else None,
                                  nsp=self.objective == "nsp")
        if self.masker is not None:
            batch.update(self._mask(batch, generator))
        return batch

    def _mask(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        kwargs = dict(attention_mask=batch["attention_mask"], word_ids=batch["word_ids"])
        if self._pass_generator:
            out = self.masker(batch["input_ids"], generator=generator, **kwargs)
        else:
            seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                out = self.masker(batch["input_ids"], **kwargs)
        result = {"input_ids": out.input_ids, "labels": out.labels}
        for name in ("span_left", "span_right", "span_position"):
            value = getattr(out, name, None)
            if value is not None:
                result[name] = value
        return result

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            items = self._next_instances(self.batch_size)
            batch = self._collate(items, self.generator)
            self.batches += 1  # the position now points past this batch: state_dict() taken now resumes after it
            yield batch

    def one_epoch(self, epoch: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        """All sequences of one epoch once, in batches (the last may be smaller), without touching the source's
        position; masking uses a generator seeded from ``(seed, epoch)`` (for held-out evaluation)."""
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence(
            [self.seed, _TAG_TORCH, self.rank, epoch + 1]).generate_state(1, np.uint64)[0] >> 1))
        items: list[Instance] = []
        for w in range(self.n_windows):
            for inst in self.window_instances(epoch, w):
                items.append(inst)
                if len(items) == self.batch_size:
                    yield self._collate(items, generator)
                    items = []
        if items:
            yield self._collate(items, generator)

    # ---- state --------------------------------------------------------------------------------------------
    def _config(self) -> dict:
        return {"objective": self.objective, "max_len": self.max_len, "batch_size": self.batch_size,
                "seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "shuffle_window": self.shuffle_window, "short_seq_prob": self.short_seq_prob,
                "random_next_prob": self.random_next_prob, "n_documents": self.shards.n_documents,
                "n_tokens": self.shards.n_tokens, "vocab_sha256": self.shards.manifest["tokenizer"]["vocab_sha256"]}

    def state_dict(self) -> dict:
        """The position after the last batch yielded: epoch, window, offset, batch count, the torch generator state
        (a uint8 tensor) and the settings that give the positions their meaning."""
        return {"epoch": self.epoch, "window": self.window, "offset": self.offset, "batches": self.batches,
                "generator": self.generator.get_state(),
                "config": self._config()}

    def load_state_dict(self, state: dict) -> None:
        """Continue after the batch a saved state points past.

        Raises:
            KeyError: the state lacks a key.
            ValueError: the state was saved with other settings or another corpus (its positions would name other
                sequences).
        """
        for key in ("epoch", "window", "offset", "batches", "generator", "config"):
            if key not in state:
                raise KeyError(f"PretrainingBatches state has no {key!r}; expected what state_dict() returns")
        mine = self._config()
        diff = {k: (state["config"].get(k), v) for k, v in mine.items() if state["config"].get(k) != v}
        if diff:
            raise ValueError("cannot resume PretrainingBatches: the saved state differs in "
                             + ", ".join(f"{k} (saved {a!r}, now {b!r})" for k, (a, b) in diff.items()))
        epoch, window, offset = int(state["epoch"]), int(state["window"]), int(state["offset"])
        if epoch < 0 or not 0 <= window < self.n_windows or offset < 0:
            raise ValueError(f"invalid PretrainingBatches state: epoch {epoch}, window {window} of {self.n_windows}, "
                             f"offset {offset}")
        self.epoch, self.window, self.offset = epoch, window, offset
        self.batches = int(state["batches"])
        g = state["generator"]
        self.generator.set_state(g if isinstance(g, torch.Tensor) else torch.tensor(g, dtype=torch.uint8))


class MultilingualBatches:
    """Batches from one of several sources (e.g. one :class:`PretrainingBatches` per language), the source of each
    batch drawn with q_i ~ p_i^alpha (J&M eq. 11.7) by a seeded
    :class:`~ctxemb.pretraining.sampling.MultilingualSampler`.

    Args:
        sources: K batch sources (each endless and resumable).
        sizes: K sizes for p_i (default: each source's ``shards.n_tokens``).
        alpha: the exponent (0.3 as XLM-R).
        seed: the sampler's seed.
        names: optional K names (e.g. languages), used in the state.
    """

    def __init__(self, sources: Sequence[Any], *, sizes: Sequence[float] | None = None, alpha: float = 0.3,
                 seed: int = 0, names: Sequence[str] | None = None):
        self.sources = list(sources)
        if not self.sources:
            raise ValueError("sources is empty: expected at least one batch source")
        if sizes is None:
            try:
                sizes = [s.shards.n_tokens for s in self.sources]
            except AttributeError:
                raise ValueError("sizes is required when a source has no .shards.n_tokens") from None
        if len(sizes) != len(self.sources):
            raise ValueError(f"sizes has {len(sizes)} entries for {len(self.sources)} sources")
        self.sampler = MultilingualSampler(sizes, alpha, seed=seed, names=names)
        self._iters: list[Iterator | None] = [None] * len(self.sources)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            i = self.sampler.draw()
            if self._iters[i] is None:
                self._iters[i] = iter(self.sources[i])
            yield next(self._iters[i])

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "sources": [s.state_dict() for s in self.sources]}

    def load_state_dict(self, state: dict) -> None:
        if len(state.get("sources", ())) != len(self.sources):
            raise ValueError(f"the saved state has {len(state.get('sources', ()))} sources; this has "
                             f"{len(self.sources)}")
        self.sampler.load_state_dict(state["sampler"])
        for s, st in zip(self.sources, state["sources"]):
            s.load_state_dict(st)
        self._iters = [None] * len(self.sources)
