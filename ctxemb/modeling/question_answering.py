"""Extractive question answering (d2l 15.6.4): start and end scores per token from one linear map (``qa_outputs``,
H -> 2), the loss the mean of the two cross-entropies: transformers' ``*ForQuestionAnswering`` exactly.

Shapes: B batch, T subword tokens, H hidden size.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import read_json_file
from ctxemb.modeling.architectures import architecture_name
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.family_heads import modernbert_head_config
from ctxemb.modeling.token_classification import IGNORE_INDEX, TokenTaskOutput, _heads_with_prefix

logger = logging.getLogger(__name__)


class EncoderForQuestionAnswering(EncoderWithHeads):
    """An :class:`Encoder` with start and end scores per token (``qa_outputs``: H -> 2), as transformers'
    ``*ForQuestionAnswering``; saved models load in ``AutoModelForQuestionAnswering`` with equal logits."""

    def __init__(self, encoder: Encoder):
        super().__init__(encoder)
        self._init_token_head()  # ModernBERT: norm(gelu(dense(z))) before qa_outputs, as transformers has it
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        self.qa_outputs.apply(encoder._init_weights)
        self.freeze_unused_pooler()
        self.train(encoder.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None) -> TokenTaskOutput:
        """(B, T, 2) start/end scores; with positions (B,), the mean of the start and end cross-entropies.

        Padding positions get a very low score, so no answer is ever placed there. Positions outside ``[0, T)``
        are ignored by the loss (transformers clamps them to T and ignores T, the same thing).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        z = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=False,
                         compute_pooler=False).last_hidden_state
        logits = self.qa_outputs(self._token_head(z))  # (B, T, 2)
        if start_positions is None or end_positions is None:
            return TokenTaskOutput(loss=None, logits=logits)
        T = input_ids.shape[1]
        start = torch.where((start_positions >= 0) & (start_positions < T), start_positions, IGNORE_INDEX)
        end = torch.where((end_positions >= 0) & (end_positions < T), end_positions, IGNORE_INDEX)
        lf = logits.float()
        loss = (F.cross_entropy(lf[..., 0], start, ignore_index=IGNORE_INDEX)
                + F.cross_entropy(lf[..., 1], end, ignore_index=IGNORE_INDEX)) / 2
        hit = (lf[..., 0].argmax(-1) == start) & (lf[..., 1].argmax(-1) == end)
        return TokenTaskOutput(loss=loss, logits=logits, metrics={"span_accuracy": float(hit.float().mean())})

    @property
    def checkpoint_name(self) -> str:
        """The name of ``qa_outputs`` in checkpoints: ``classifier`` in ModernBERT's (after its ``head``)."""
        return "classifier" if self.config.model_type == "modernbert" else "qa_outputs"

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return (self.encoder_depth_modules() + self._token_head_depth()
                + [(self.encoder.num_layers + 1, "qa_outputs", self.qa_outputs)])

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        heads = {f"{self.checkpoint_name}." + k: v for k, v in self.qa_outputs.state_dict().items()}
        heads.update(self._token_head_tensors())
        extra = modernbert_head_config(self.head) if self.head is not None else None
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads, config_extra=extra,
                               architectures=[architecture_name(self.config.model_type, "question_answering")])

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, strict: bool = True,
                        new_head: bool = False) -> "EncoderForQuestionAnswering":
        """Load a QA model (ours or transformers'), or an encoder with a fresh ``qa_outputs`` (logged)."""
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict, new_head=new_head)
        model = cls(encoder)
        model._load_token_head(heads, read_json_file(model_dir / "config.json", "config file"), str(model_dir))
        saved = _heads_with_prefix(heads, f"{model.checkpoint_name}.")
        if saved:
            load_weights_into(model.qa_outputs, saved, strict=True, source=f"{model_dir} (qa_outputs)")
        else:
            logger.info("%s has no qa_outputs weights: the QA head is initialised fresh", model_dir)
        return model
