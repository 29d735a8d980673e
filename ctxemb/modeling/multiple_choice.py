"""Multiple choice (SWAG, COPA, RACE-style tasks): one score per (context, choice) input, a softmax over the choices.

Shapes: B questions, C choices, T tokens, H hidden size. As transformers' ``*ForMultipleChoice``: the (B, C, T)
inputs are flattened to (B*C, T), encoded, pooled (BERT's pooler; the [CLS] vector through RoBERTa/MPNet's pooler
alike, as transformers does), scored by ``classifier`` (H -> 1) and reshaped to (B, C) logits; the loss is the
cross-entropy over the C choices. Saved models load in transformers' ``AutoModelForMultipleChoice``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.modeling.architectures import architecture_name
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.encoder import Encoder

logger = logging.getLogger(__name__)


@dataclass
class MultipleChoiceOutput:
    """``loss`` (scalar, or None without labels), ``logits`` (B, C) and ``metrics`` (``accuracy`` with labels)."""

    loss: torch.Tensor | None
    logits: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class EncoderForMultipleChoice(EncoderWithHeads):
    """An :class:`Encoder` scoring each choice of a question (module docstring).

    Args:
        encoder: a pretrained (or fresh) encoder; the model owns it from now on.
        classifier_dropout: dropout on the pooled vector (the encoder's ``hidden_dropout_prob`` when None).

    Raises:
        ValueError: an encoder without BERT's pooler (DistilBERT, ELECTRA, ModernBERT), whose transformers
            multiple-choice heads differ (not built here).
    """

    def __init__(self, encoder: Encoder, *, classifier_dropout: float | None = None):
        if getattr(encoder, "pooler", None) is None:
            raise ValueError(f"multiple choice reads BERT's pooler, which a {encoder.config.model_type!r} encoder "
                             "has not; it is available for bert, roberta, xlm-roberta and mpnet")
        super().__init__(encoder)
        p = encoder.config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(encoder.config.hidden_size, 1)
        self.classifier.apply(encoder._init_weights)
        self.train(encoder.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> MultipleChoiceOutput:
        """(B, C) logits from (B, C, T) inputs; with ``labels`` (B,) the index of the right choice, the loss.

        Raises:
            ValueError: ``input_ids`` is not 3-D.
        """
        if input_ids.dim() != 3:
            raise ValueError(f"input_ids must be (B, C, T) for multiple choice, got shape {tuple(input_ids.shape)}")
        B, C, T = input_ids.shape
        flat = lambda x: None if x is None else x.reshape(B * C, T)  # noqa: E731
        out = self.encoder(flat(input_ids), flat(attention_mask), flat(token_type_ids), output_hidden_states=False)
        logits = self.classifier(self.dropout(out.pooler_output)).view(B, C)  # (B*C, 1) -> (B, C)
        if labels is None:
            return MultipleChoiceOutput(loss=None, logits=logits)
        loss = F.cross_entropy(logits.float(), labels)
        accuracy = float((logits.argmax(-1) == labels).float().mean())
        return MultipleChoiceOutput(loss=loss, logits=logits, metrics={"accuracy": accuracy})

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        top = self.encoder.num_layers + 1
        return self.encoder_depth_modules() + [(top, f"{self.base_model_prefix}.pooler", self.encoder.pooler),
                                               (top, "classifier", self.classifier)]

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write ``config.json`` (``*ForMultipleChoice``) and ``model.safetensors`` (encoder, pooler, classifier)."""
        heads = {"classifier." + k: v for k, v in self.classifier.state_dict().items()}
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads,
                               architectures=[architecture_name(self.config.model_type, "multiple_choice")])

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, strict: bool = True) -> "EncoderForMultipleChoice":
        """Load a multiple-choice model (ours or transformers'), or an encoder with a fresh classifier (logged)."""
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict)
        model = cls(encoder)
        saved = {k[len("classifier."):]: v for k, v in heads.items() if k.startswith("classifier.")}
        if saved:
            load_weights_into(model.classifier, saved, strict=True, source=f"{model_dir} (classifier)")
        else:
            logger.info("%s has no classifier weights: the multiple-choice head is initialised fresh", model_dir)
        return model
