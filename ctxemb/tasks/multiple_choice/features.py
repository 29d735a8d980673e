"""Model inputs of multiple choice: each question becomes C (context, choice) pairs with the model's separators,
and the collator stacks them into (B, C, T) tensors (``EncoderForMultipleChoice`` flattens them to (B*C, T)).

Shapes: B questions, C choices, T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ctxemb.models.tokenization import Tokenizer
from ctxemb.tasks.multiple_choice.data import ChoiceQuestion
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.tasks.sequence.features import EncodedExample, encode_examples

__all__ = ["ChoiceCollator", "ChoiceFeature", "encode_questions"]


@dataclass(frozen=True)
class ChoiceFeature:
    """A question's C encoded (context, choice) pairs and the right choice's index (None when unknown)."""

    choices: tuple[EncodedExample, ...]
    label: int | None

    @property
    def input_ids(self) -> list[int]:  # the longest pair: what length grouping sorts by
        return max((c.input_ids for c in self.choices), key=len)


def encode_questions(tokenizer: Tokenizer, questions: Sequence[ChoiceQuestion], *,
                     max_length: int) -> list[ChoiceFeature]:
    """Each question's (context, choice) pairs as model inputs of at most ``max_length`` tokens."""
    pairs = [TextExample(q.context, choice, 0, f"{q.id}:{i}") for q in questions for i, choice in enumerate(q.choices)]
    encoded = encode_examples(tokenizer, pairs, max_length=max_length, with_labels=False)
    out, at = [], 0
    for q in questions:
        out.append(ChoiceFeature(tuple(encoded[at:at + len(q.choices)]), q.label))
        at += len(q.choices)
    return out


class ChoiceCollator:
    """Pads a list of :class:`ChoiceFeature` into ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, C, T)
    and, when every feature has one, ``labels`` (B,)."""

    def __init__(self, pad_token_id: int):
        self.pad = pad_token_id

    def __call__(self, items: Sequence[ChoiceFeature], rng=None) -> dict[str, torch.Tensor]:
        B, C = len(items), len(items[0].choices)
        T = max(len(e.input_ids) for it in items for e in it.choices)
        ids = torch.full((B, C, T), self.pad, dtype=torch.long)
        types = torch.zeros((B, C, T), dtype=torch.long)
        mask = torch.zeros((B, C, T), dtype=torch.long)
        for b, it in enumerate(items):
            for c, e in enumerate(it.choices):
                n = len(e.input_ids)
                ids[b, c, :n] = torch.tensor(e.input_ids)
                types[b, c, :n] = torch.tensor(e.token_type_ids)
                mask[b, c, :n] = 1
        batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
        if all(it.label is not None for it in items):
            batch["labels"] = torch.tensor([it.label for it in items])
        return batch
