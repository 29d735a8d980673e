"""Model inputs built from the documents of a shard set: BERT's NSP sentence pairs and RoBERTa-style packed
sequences (J&M 11.2).

- ``"nsp"`` (:func:`nsp_instances`): BERT's ``create_instances_from_document`` (target length ``max_len - 3``,
  with probability ``short_seq_prob`` a shorter random target; segment A = a random number of whole sentences of a
  chunk, B = the chunk's remaining sentences (label 0, IsNext) or, with probability ``random_next_prob`` (and
  always when the chunk has one sentence), sentences from a random point of ANOTHER document (label 1, the unused
  sentences of the chunk go back); the longer segment is trimmed one token at a time from a random end until the
  pair fits), giving ``[CLS] A [SEP] B [SEP]`` with token types 0/1 (RoBERTa layout: ``<s> A </s></s> B </s>``,
  types 0).
- ``"full_sentences"`` (RoBERTa; :func:`pack_sentences` with ``cross_documents=True``): whole sentences packed
  contiguously up to ``max_len``, crossing document boundaries with an extra [SEP] between documents.
- ``"doc_sentences"`` (``cross_documents=False``): the same without crossing a document (the last sequence of a
  document is shorter; the collator pads).

A sentence longer than the content of one sequence is split into pieces (:func:`pack_sentences` returns how many),
never dropped. Each sequence is an :class:`Instance`; :func:`collate_instances` pads a list of them into a batch.

Shapes: B sequences in a batch, T tokens per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np
import torch

from ctxemb.tasks.pretraining.shards import ShardView, TokenShards

__all__ = ["Objective", "Instance", "nsp_instances", "pack_sentences", "collate_instances"]

Objective = Literal["nsp", "full_sentences", "doc_sentences"]
OBJECTIVES = ("nsp", "full_sentences", "doc_sentences")


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
