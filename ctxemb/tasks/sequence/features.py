"""Model inputs for sequence-level fine-tuning: one text or a pair, with the model's own separators and segments.

BERT: ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for A and 1 for B (J&M 11.4.2); RoBERTa/XLM-R/MPNet:
``<s> A </s></s> B </s>``, one segment (their checkpoints have no segment embeddings to speak of). A pair longer
than the model's maximum is cut longest-first, one token at a time, as BERT's code does; every cut is counted and
logged, never silent.

Shapes: B examples, T tokens (special tokens included).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from ctxemb.tasks.sequence.data import TextExample
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EncodedExample:
    """One example as ids: ``input_ids`` and ``token_type_ids`` of equal length, its label, and how many tokens
    were cut to fit (0 almost always)."""

    input_ids: list[int]
    token_type_ids: list[int]
    label: int | float | None
    truncated: int = 0


def encode_examples(tokenizer: Tokenizer, examples: Sequence[TextExample], *, max_length: int | None = None,
                    with_labels: bool = True) -> list[EncodedExample]:
    """Tokenize texts (or pairs) into model inputs of at most ``max_length`` tokens (default: the model's).

    Raises:
        ValueError: ``max_length`` leaves no room for text after the special tokens.
    """
    max_length = min(max_length or tokenizer.max_length, tokenizer.max_length)
    singles = [ex for ex in examples if ex.text_b is None]
    is_pair = len(singles) != len(examples)
    if is_pair and singles:
        raise ValueError("examples mix single texts and pairs; a task is one or the other")
    n_special = len(tokenizer.with_specials([], [] if is_pair else None)[0])
    room = max_length - n_special
    if room < 2:
        raise ValueError(f"max_length {max_length} leaves no room for text after {n_special} special tokens")
    a_ids = [t.ids for t in tokenizer.tokenize([ex.text_a for ex in examples])]
    b_ids = [t.ids for t in tokenizer.tokenize([ex.text_b for ex in examples])] if is_pair else [None] * len(a_ids)
    out, n_cut = [], 0
    for ex, a, b in zip(examples, a_ids, b_ids):
        a, b, cut = _truncate(a, b, room)
        n_cut += cut > 0
        ids, types = tokenizer.with_specials(a, b)
        out.append(EncodedExample(ids, types, ex.label if with_labels else None, cut))
    if n_cut:
        logger.warning("%d of %d examples were longer than %d tokens and were cut (longest segment first)",
                       n_cut, len(examples), max_length)
    return out


def _truncate(a: list[int], b: list[int] | None, room: int) -> tuple[list[int], list[int] | None, int]:
    """Cut the longer segment one token at a time from its end until both fit in ``room`` tokens."""
    la, lb = len(a), len(b) if b is not None else 0
    cut = max(0, la + lb - room)
    for _ in range(cut):
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    return a[:la], (b[:lb] if b is not None else None), cut


@dataclass(frozen=True)
class EncodedPair:
    """A pair for a bi-encoder: each text encoded alone (``[CLS] A [SEP]`` and ``[CLS] B [SEP]``)."""

    input_ids: list[int]
    input_ids_b: list[int]
    label: int | float | None
    truncated: int = 0


def encode_pairs_separately(tokenizer: Tokenizer, examples: Sequence[TextExample], *, max_length: int | None = None,
                            with_labels: bool = True) -> list[EncodedPair]:
    """Tokenize each text of each pair on its own (for a bi-encoder), each into at most ``max_length`` tokens (a
    longer text is cut at its end; the count is logged).

    Raises:
        ValueError: an example without a second text, or a ``max_length`` too small for any text.
    """
    missing = [i for i, ex in enumerate(examples) if ex.text_b is None]
    if missing:
        raise ValueError(f"a bi-encoder needs pairs; examples {missing[:5]} have no second text")
    max_length = min(max_length or tokenizer.max_length, tokenizer.max_length)
    room = max_length - len(tokenizer.with_specials([])[0])
    if room < 1:
        raise ValueError(f"max_length {max_length} leaves no room for text after the special tokens")
    a_ids = [t.ids for t in tokenizer.tokenize([ex.text_a for ex in examples])]
    b_ids = [t.ids for t in tokenizer.tokenize([ex.text_b for ex in examples])]
    out, n_cut = [], 0
    for ex, a, b in zip(examples, a_ids, b_ids):
        cut = max(0, len(a) - room) + max(0, len(b) - room)
        n_cut += cut > 0
        out.append(EncodedPair(tokenizer.with_specials(a[:room])[0], tokenizer.with_specials(b[:room])[0],
                               ex.label if with_labels else None, cut))
    if n_cut:
        logger.warning("%d of %d pairs had a text longer than %d tokens, cut at its end", n_cut, len(examples),
                       max_length)
    return out


def pad_ids(rows: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), both (B, T) with T the longest row, right-padded with ``pad_token_id``."""
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, :len(r)] = 1
    return ids, mask


def pad_inputs(items: Sequence, pad_token_id: int) -> dict[str, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and ``token_type_ids`` (B, T) of items that have ``input_ids`` and
    ``token_type_ids`` lists: what every collator of the fine-tuning package starts from."""
    ids, mask = pad_ids([it.input_ids for it in items], pad_token_id)
    types, _ = pad_ids([it.token_type_ids for it in items], 0)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class PairCollator:
    """Pads :class:`EncodedPair` items: ``input_ids``/``attention_mask`` (B, T_a) for the first texts,
    ``input_ids_b``/``attention_mask_b`` (B, T_b) for the second, and float ``labels`` (B,) when labelled."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, items: Sequence[EncodedPair]) -> dict[str, torch.Tensor]:
        ids, mask = pad_ids([it.input_ids for it in items], self.pad_token_id)
        ids_b, mask_b = pad_ids([it.input_ids_b for it in items], self.pad_token_id)
        batch = {"input_ids": ids, "attention_mask": mask, "input_ids_b": ids_b, "attention_mask_b": mask_b}
        if items[0].label is not None:
            batch["labels"] = torch.tensor([float(it.label) for it in items], dtype=torch.float32)
        return batch


class Collator:
    """Pads a list of :class:`EncodedExample` into a batch: input_ids, attention_mask, token_type_ids (B, T) and
    labels (B,) (long for classes, float for regression scores)."""

    def __init__(self, pad_token_id: int, *, regression: bool):
        self.pad_token_id = pad_token_id
        self.regression = regression

    def __call__(self, items: Sequence[EncodedExample]) -> dict[str, torch.Tensor]:
        batch = pad_inputs(items, self.pad_token_id)
        if items[0].label is not None:
            batch["labels"] = torch.tensor([it.label for it in items],
                                           dtype=torch.float32 if self.regression else torch.long)
        return batch


def model_inputs(tokenizer, examples: Sequence[TextExample], *, head: str, regression: bool, max_length: int,
                 with_labels: bool = True) -> tuple[list, Collator | PairCollator]:
    """The encoded examples and their collator: both texts in one input for a cross-encoder head, each text alone
    for the bi-encoder (``head="cosine"``)."""
    if head == "cosine":
        return (encode_pairs_separately(tokenizer, examples, max_length=max_length, with_labels=with_labels),
                PairCollator(tokenizer.pad_token_id))
    return (encode_examples(tokenizer, examples, max_length=max_length, with_labels=with_labels),
            Collator(tokenizer.pad_token_id, regression=regression))
