"""The cloze query that opens J&M ch. 11 ("Please turn ___ homework in"): the top-k tokens for each mask.

Works for any checkpoint with a masked-LM head: ours (``ctxemb pretrain``) or transformers' (``BertForMaskedLM``,
``BertForPreTraining``, ``RobertaForMaskedLM``, ...). A bare encoder (e.g. all-MiniLM-L6-v2, which ships without its
head) is refused instead of answering from a random head.

Shapes: T tokens of one input, K masks in it, V vocabulary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch

from ctxemb.core.validation import check_int, check_string_batch
from ctxemb.modeling.pretraining_heads import EncoderForPretraining
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import Tokenizer


@dataclass(frozen=True)
class MaskFill:
    """One candidate for one mask: the token, its id and its probability under the MLM head."""

    token: str
    token_id: int
    probability: float


class MaskFiller:
    """A model with an MLM head and its tokenizer, ready for cloze queries.

    Args:
        model: an :class:`EncoderForPretraining` (in eval mode for the query).
        tokenizer: the model's :class:`Tokenizer`.
    """

    def __init__(self, model: EncoderForPretraining, tokenizer: Tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *, device: str | torch.device = "cpu") -> "MaskFiller":
        """Load a checkpoint with an MLM head (see :func:`ctxemb.modeling.loading.load_encoder` for names).

        Raises:
            ValueError: the checkpoint has no MLM head.
        """
        model_dir = resolve_model_dir(name_or_path)
        model = EncoderForPretraining.from_pretrained(model_dir, missing_heads="raise")
        return cls(model.to(device).eval(), Tokenizer.from_pretrained(model_dir))

    @property
    def mask_token(self) -> str:
        return self.tokenizer.special_tokens["mask_token"]

    def _encode(self, text: str) -> list[int]:
        """[CLS] ... [SEP] ids, with the mask token recognised even where the tokenizer would split it."""
        pieces = text.split(self.mask_token)
        if len(pieces) == 1:
            raise ValueError(f"text has no mask token {self.mask_token!r}: {text!r}")
        ids: list[int] = []
        for k, piece in enumerate(pieces):
            if piece.strip():
                ids.extend(self.tokenizer.tokenize([piece])[0].ids)
            if k < len(pieces) - 1:
                ids.append(self.tokenizer.mask_token_id)
        return self.tokenizer.with_specials(ids)[0]

    @torch.inference_mode()
    def __call__(self, texts: str | Sequence[str], *, top_k: int = 5) -> list[list[MaskFill]] | list[list[list[MaskFill]]]:
        """The ``top_k`` fills of every mask.

        Args:
            texts: one text or a list; each holds the tokenizer's mask token (``[MASK]``, ``<mask>``) at least once.
            top_k: candidates per mask, most probable first.

        Returns:
            For one text: one list of ``top_k`` :class:`MaskFill` per mask, left to right. For a list: one such
            result per text.
        """
        single = isinstance(texts, str)
        batch = check_string_batch([texts] if single else texts, "texts")
        top_k = check_int(top_k, "top_k", low=1, high=self.tokenizer.vocab_size, high_text="the vocabulary size")
        device = next(self.model.parameters()).device
        results = []
        for text in batch:
            ids = self._encode(text)
            if len(ids) > self.tokenizer.max_length:
                raise ValueError(f"text has {len(ids)} tokens, more than the model's maximum of "
                                 f"{self.tokenizer.max_length}: {text[:60]!r}...")
            input_ids = torch.tensor([ids], device=device)
            logits = self.model(input_ids).mlm_logits[0]  # (T, V)
            where = (input_ids[0] == self.tokenizer.mask_token_id).nonzero(as_tuple=True)[0]  # (K,)
            probs = logits[where].float().softmax(-1)  # (K, V)
            p, idx = probs.topk(top_k, dim=-1)
            results.append([[MaskFill(self.tokenizer.backend.id_to_token(int(i)), int(i), float(q))
                             for q, i in zip(p_row, i_row)] for p_row, i_row in zip(p, idx)])
        return results[0] if single else results


def fill_mask(texts: str | Sequence[str], model: str | os.PathLike, *, top_k: int = 5,
              device: str | torch.device = "cpu"):
    """One-shot cloze query: load ``model`` (a checkpoint with an MLM head) and fill every mask in ``texts``.

    Examples:
        >>> fill_mask("Please turn [MASK] homework in.", "runs/my-bert")[0][:2]  # doctest: +SKIP
        [MaskFill(token='your', token_id=2115, probability=0.83), MaskFill(token='the', ...)]

    See :meth:`MaskFiller.__call__` for the result; keep a :class:`MaskFiller` to ask several times.
    """
    return MaskFiller.from_pretrained(model, device=device)(texts, top_k=top_k)
