"""Token shards: a corpus tokenized once into memory-mapped files, and the readers over them (J&M 11.2).

:func:`build_token_shards` streams plain-text files (never the whole corpus in memory), tokenizes them once in
batched calls to the ``tokenizers`` backend and writes a shard set::

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
shards. :class:`TokenShards` opens a set with ``np.memmap`` / ``np.load(mmap_mode="r")``, so a set larger than RAM
works; :meth:`TokenShards.for_rank` gives rank ``r`` of ``W`` the documents ``r, r + W, r + 2W, ...`` as a
:class:`ShardView`, and :meth:`TokenShards.document` returns one document's tokens as :class:`DocumentTokens`.

Shapes: V vocabulary size, N tokens of a document, S sentences, D documents (S_k, D_k: those of shard k).
"""

from __future__ import annotations

import array
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np

from ctxemb.core.validation import check_choice, check_int, read_json_file
from ctxemb.core.atomic import atomic_directory, atomic_write, resolve_saved_directory
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT", "FORMAT_VERSION", "ReadMode", "build_token_shards", "vocab_fingerprint", "TokenShards", "ShardView",
    "DocumentTokens",
]

FORMAT = "ctxemb-token-shards"
FORMAT_VERSION = 1
ReadMode = Literal["blank_line", "line"]
READ_MODES = ("blank_line", "line")

_SPECIAL_NAMES = ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token")


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
    words as :meth:`ctxemb.models.tokenization.Tokenizer.tokenize` gives), which whole-word and span masking use. The set is
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
        raise TypeError(f"tokenizer must be a ctxemb.models.tokenization.Tokenizer; got {type(tokenizer).__name__}")
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
        directory = resolve_saved_directory(directory)  # restores a save a crash interrupted
        path = directory / "manifest.json"
        if not path.is_file():
            raise FileNotFoundError(f"no token shards in {directory}: expected manifest.json (build_token_shards "
                                    f"writes it)")
        manifest = read_json_file(path, "token shards manifest")
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
