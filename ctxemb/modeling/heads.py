"""Pretraining heads on top of the encoder: masked-LM (eq. 11.7, decoder tied to the word embeddings) and
next-sentence prediction, with BERT's parameter names (``cls.predictions.*``, ``cls.seq_relationship.*``).

Shapes: B batch, T tokens, H hidden size, V vocabulary.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
from torch import nn

from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.encoder import _ACTIVATIONS, Encoder

logger = logging.getLogger(__name__)


class MaskedLMHead(nn.Module):
    """h -> LayerNorm(act(W h)) -> E^T (.) + b: a distribution over the vocabulary for every token."""

    def __init__(self, encoder: Encoder):
        super().__init__()
        cfg = encoder.config
        self.transform = nn.Module()
        self.transform.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.transform.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.act = _ACTIVATIONS[cfg.hidden_act]
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.decoder.weight = encoder.embeddings.word_embeddings.weight  # tied: the output layer is E^T
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.transform.LayerNorm(self.act(self.transform.dense(hidden)))
        return self.decoder(h) + self.bias  # (B, T, V)


class PretrainingHeads(nn.Module):
    def __init__(self, encoder: Encoder):
        super().__init__()
        self.predictions = MaskedLMHead(encoder)
        self.seq_relationship = nn.Linear(encoder.config.hidden_size, 2)


@dataclass
class PretrainingOutput:
    """mlm_logits: (B, T, V); nsp_logits: (B, 2) from the pooled [CLS]; hidden: the encoder's output."""

    mlm_logits: torch.Tensor
    nsp_logits: torch.Tensor
    encoder_output: object


class EncoderForPretraining(nn.Module):
    """The encoder with its masked-LM and next-sentence heads (as transformers' ``BertForPreTraining``)."""

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder_model = encoder
        self.cls = PretrainingHeads(encoder)
        # the decoder is the (already initialised) word embedding matrix; initialise only the heads' own layers
        for m in (self.cls.predictions.transform.dense, self.cls.predictions.transform.LayerNorm,
                  self.cls.seq_relationship):
            encoder._init_weights(m)

    @property
    def config(self):
        return self.encoder_model.config

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> PretrainingOutput:
        out = self.encoder_model(input_ids, attention_mask, token_type_ids, output_hidden_states=False)
        return PretrainingOutput(self.cls.predictions(out.last_hidden_state),
                                 self.cls.seq_relationship(out.pooler_output), out)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """Head tensors with canonical names, the tied decoder weight left out."""
        return {"cls." + k: v for k, v in self.cls.state_dict().items() if k != "predictions.decoder.weight"}

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, strict: bool = True) -> "EncoderForPretraining":
        """Load encoder and heads; heads the checkpoint lacks are initialised fresh (and logged)."""
        from ctxemb.registry import resolve_model_dir

        encoder, heads = load_encoder_dir(resolve_model_dir(model_dir), strict=strict)
        model = cls(encoder)
        heads = {k[len("cls."):]: v for k, v in heads.items() if k != "cls.predictions.decoder.weight"}
        own = {k for k in model.cls.state_dict() if k != "predictions.decoder.weight"}
        fresh = sorted(own - set(heads))
        if fresh:
            logger.info("checkpoint %s has no weights for %s: initialised fresh", model_dir, fresh)
        present = {k: v for k, v in heads.items() if k in own}
        present.update({k: v for k, v in model.cls.state_dict().items() if k in fresh})
        present["predictions.decoder.weight"] = encoder.embeddings.word_embeddings.weight.detach()
        load_weights_into(model.cls, present, strict=strict, source=f"{model_dir} (pretraining heads)")
        return model

    def save_pretrained(self, out_dir: str | os.PathLike):
        return save_pretrained(self.encoder_model, out_dir, extra_tensors=self.head_state_dict())
