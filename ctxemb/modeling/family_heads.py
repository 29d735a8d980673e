"""The task heads that differ by encoder family, in the layouts of transformers' ``*For<Task>`` classes.

- Sequence classification (the ``"checkpoint"`` head): BERT reads its tanh pooler (in
  :mod:`ctxemb.modeling.sequence_classification`); RoBERTa, XLM-R and MPNet put ``classifier.dense`` + tanh +
  ``classifier.out_proj`` on [CLS]; ELECTRA the same with GELU (``ElectraClassificationHead``); DistilBERT
  ``classifier(dropout(relu(pre_classifier(h_CLS))))``; ModernBERT ``classifier(drop(head(pooled)))`` where ``head``
  is ``norm(gelu(dense(x)))`` and ``pooled`` is [CLS] or the mean over tokens (``classifier_pooling``).
- Token classification and question answering: every family puts one linear map on the tokens, except ModernBERT,
  which first applies the same ``head`` (:class:`ModernBertPredictionHead`) to every token.

Inside our task models a family's whole sequence head lives under ``classifier``; :func:`sequence_head_names` gives
the renaming between those names and the checkpoint's (DistilBERT's ``pre_classifier.*``, ModernBERT's ``head.*``),
:func:`to_checkpoint_names` and :func:`from_checkpoint_names` apply it.

Shapes: B batch, T tokens, H hidden size, C outputs.
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import EncoderConfig

#: ModernBERT's ``classifier_pooling`` values: the [CLS] vector or the mean over the non-padding tokens.
MODERNBERT_POOLINGS: tuple[str, ...] = ("cls", "mean")


class ClassificationHead(nn.Module):
    """RoBERTa/XLM-R/MPNet's (tanh) and ELECTRA's (GELU) ``classifier``: dropout, ``dense`` (H, H), activation,
    dropout, ``out_proj`` (H, C) on [CLS]."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float, activation: str = "tanh"):
        super().__init__()
        check_choice(activation, "activation", ("tanh", "gelu"))
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden_size, num_labels)
        self.activation = activation

    def forward(self, z: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C) logits from the last layer (B, T, H): its [CLS] row."""
        x = self.dense(self.dropout(z[:, 0]))
        x = torch.tanh(x) if self.activation == "tanh" else F.gelu(x)
        return self.out_proj(self.dropout(x))


class DistilBertClassificationHead(nn.Module):
    """DistilBERT's ``pre_classifier`` (H, H), ReLU, dropout, ``classifier`` (H, C) on [CLS]."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.pre_classifier = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, z: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C) logits from the last layer (B, T, H): its [CLS] row."""
        return self.classifier(self.dropout(F.relu(self.pre_classifier(z[:, 0]))))


class ModernBertPredictionHead(nn.Module):
    """ModernBERT's ``head``: ``norm(gelu(dense(x)))`` on any (..., H) input; ``dense`` has a bias when the
    checkpoint's ``classifier_bias`` says so, ``norm`` when ``norm_bias`` does."""

    def __init__(self, config: EncoderConfig, *, bias: bool = False):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)

    @property
    def bias(self) -> bool:
        return self.dense.bias is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))


class ModernBertClassificationHead(nn.Module):
    """ModernBERT's sequence head: ``classifier(drop(head(pooled)))`` with ``pooled`` the [CLS] row or the mean over
    the non-padding tokens."""

    def __init__(self, config: EncoderConfig, num_labels: int, dropout: float, *, pooling: str = "cls",
                 bias: bool = False):
        super().__init__()
        check_choice(pooling, "classifier_pooling", MODERNBERT_POOLINGS)
        self.pooling = pooling
        self.head = ModernBertPredictionHead(config, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    def forward(self, z: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C) logits from the last layer (B, T, H) and the mask (B, T)."""
        if self.pooling == "cls":
            pooled = z[:, 0]
        else:
            if attention_mask is None:
                attention_mask = torch.ones(z.shape[:2], dtype=z.dtype, device=z.device)
            m = attention_mask.to(z.dtype).unsqueeze(-1)
            pooled = (z * m).sum(1) / m.sum(1)
        return self.classifier(self.drop(self.head(pooled)))


def checkpoint_sequence_head(config: EncoderConfig, num_labels: int, dropout: float, *, pooling: str = "cls",
                             bias: bool = False) -> nn.Module:
    """The ``"checkpoint"`` sequence head of a family without BERT's pooler-based head (see the module docstring);
    ``pooling`` and ``bias`` are ModernBERT's ``classifier_pooling`` and ``classifier_bias``."""
    mt = config.model_type
    if mt == "bert":
        raise ValueError("BERT's checkpoint head is pooler + classifier (built by EncoderForSequenceClassification)")
    if mt == "distilbert":
        return DistilBertClassificationHead(config.hidden_size, num_labels, dropout)
    if mt == "modernbert":
        return ModernBertClassificationHead(config, num_labels, dropout, pooling=pooling, bias=bias)
    return ClassificationHead(config.hidden_size, num_labels, dropout, "gelu" if mt == "electra" else "tanh")


def sequence_head_names(model_type: str, head: str) -> list[tuple[str, str]]:
    """(our name prefix, the checkpoint's name prefix) of a sequence head: ours are all under ``classifier.``."""
    if head == "checkpoint" and model_type == "distilbert":
        return [("classifier.pre_classifier.", "pre_classifier."), ("classifier.classifier.", "classifier.")]
    if head == "checkpoint" and model_type == "modernbert":
        return [("classifier.head.", "head."), ("classifier.classifier.", "classifier.")]
    return [("classifier.", "classifier.")]


def to_checkpoint_names(state: Mapping[str, torch.Tensor], names: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """Rename our head tensors (``classifier.*``) to the checkpoint's with a :func:`sequence_head_names` table."""
    out = {}
    for key, value in state.items():
        ours, theirs = next((o, t) for o, t in names if key.startswith(o))
        out[theirs + key[len(ours):]] = value
    return out


def from_checkpoint_names(heads: Mapping[str, torch.Tensor], names: list[tuple[str, str]]
                          ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The checkpoint's head tensors renamed to ours, relative to ``classifier.`` (what
    ``model.classifier.load_state_dict`` takes), and the names of the other head tensors (not this head's)."""
    taken, others = {}, []
    for key, value in heads.items():
        match = next(((o, t) for o, t in names if key.startswith(t)), None)
        if match is None:
            others.append(key)
            continue
        ours, theirs = match
        taken[(ours + key[len(theirs):])[len("classifier."):]] = value
    return taken, sorted(others)


def modernbert_head_config(head: ModernBertPredictionHead, pooling: str = "cls") -> dict:
    """The ``config.json`` keys transformers' ModernBERT task models read to rebuild ``head``."""
    return {"classifier_pooling": pooling, "classifier_bias": head.bias, "classifier_activation": "gelu"}


def check_modernbert_head_config(raw: Mapping, source: str) -> None:
    """Refuse a ModernBERT checkpoint whose head uses an activation other than GELU (the only one built here).

    Raises:
        ValueError: naming ``classifier_activation`` and ``source``.
    """
    act = raw.get("classifier_activation", "gelu")
    if act != "gelu":
        raise ValueError(f"{source}: classifier_activation {act!r} is not supported for ModernBERT heads; "
                         "expected 'gelu'")
