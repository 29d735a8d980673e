"""Span classification (J&M 11.5.2): every span up to a length limit gets a vector
``[boundary_start; boundary_end; summary]`` (eq. 11.22, 11.25) and a label from ``softmax(FFN(spanRep))`` (eq. 11.27)
over the entity types and NULL (id 0). Boundaries are the span's first and last subword vectors (``"tokens"``) or
their images under separate start and end feed-forward nets (``"ffn"``, eq. 11.23-11.24); the summary is the mean
of the span's subword vectors (``"mean"``, eq. 11.21) or attention pooling over them (``"attention"``, eq. 11.26).

Shapes: B batch, T subword tokens, W words, S spans, H hidden size, C labels.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import check_choice
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.remote_code import remote_code_config, write_remote_code
from ctxemb.modeling.token_classification import (NULL_LABEL, SPAN_CONFIG_KEY, SPAN_REFUSAL, TokenTaskOutput,
                                                  _check_dropout, _check_id2label, _heads_with_prefix, _read_config,
                                                  _saved_id2label)
from ctxemb.models.head_options import BOUNDARY_KINDS, SUMMARY_KINDS, BoundaryKind, SummaryKind

logger = logging.getLogger(__name__)


class SpanClassifierHead(nn.Module):
    """spanRep_ij = [boundary_i; boundary_j; summary_ij] -> FFN -> C scores (eq. 11.21-11.27).

    Args:
        hidden_size: H.
        num_labels: C, NULL included.
        boundary: ``"tokens"`` (z_i, z_j) or ``"ffn"`` (FFN_start(z_i), FFN_end(z_j)).
        summary: ``"mean"`` (eq. 11.21) or ``"attention"`` (eq. 11.26, attention pooling within the span).
        dropout: dropout on spanRep and inside the FFN.
    """

    def __init__(self, hidden_size: int, num_labels: int, *, boundary: BoundaryKind, summary: SummaryKind,
                 dropout: float, activation: nn.Module):
        super().__init__()
        H = hidden_size
        self.boundary, self.summary = boundary, summary
        if boundary == "ffn":
            self.start_ffn = nn.Sequential(nn.Linear(H, H), activation)
            self.end_ffn = nn.Sequential(nn.Linear(H, H), activation)
        if summary == "attention":
            self.attention_score = nn.Linear(H, 1)
        self.dropout = nn.Dropout(dropout)
        self.ffn = nn.Sequential(nn.Linear(3 * H, H), activation, nn.Dropout(dropout), nn.Linear(H, num_labels))

    def forward(self, z: torch.Tensor, span_starts: torch.Tensor, span_ends: torch.Tensor) -> torch.Tensor:
        """(B, S, C) scores of spans ``[span_starts, span_ends]`` (inclusive subword positions, (B, S)) over the
        token vectors z (B, T, H)."""
        B, T, H = z.shape
        gather = lambda x, pos: x.gather(1, pos.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # noqa: E731
        zi, zj = gather(z, span_starts), gather(z, span_ends)  # (B, S, H)
        if self.boundary == "ffn":
            zi, zj = self.start_ffn(zi), self.end_ffn(zj)
        if self.summary == "mean":
            csum = F.pad(z.cumsum(1), (0, 0, 1, 0))  # (B, T+1, H)
            g = (gather(csum, span_ends + 1) - gather(csum, span_starts)) / (span_ends - span_starts + 1
                                                                            ).unsqueeze(-1).to(z.dtype)
        else:
            pos = torch.arange(T, device=z.device)
            inside = (pos >= span_starts.unsqueeze(-1)) & (pos <= span_ends.unsqueeze(-1))  # (B, S, T)
            scores = self.attention_score(z).squeeze(-1).unsqueeze(1)  # (B, 1, T)
            weights = scores.masked_fill(~inside, torch.finfo(scores.dtype).min).softmax(-1)  # (B, S, T)
            g = weights @ z  # (B, S, H)
        return self.ffn(self.dropout(torch.cat([zi, zj, g], dim=-1)))


class EncoderForSpanClassification(EncoderWithHeads):
    """An :class:`Encoder` that labels spans (entity types or NULL), for span-based NER (J&M 11.5.2).

    Args:
        encoder: a pretrained encoder; the model owns it from now on.
        id2label: ``{0: "NULL", 1: "PER", ...}``: label 0 must be NULL (not an entity).
        boundary, summary: the span representation (module docstring).
        max_span_length: L, the longest span (in words) the data side enumerates; recorded in the config.
        classifier_dropout: dropout in the head; the encoder's ``hidden_dropout_prob`` when None.
        null_weight: the weight of NULL spans in the training loss (entity types weigh 1). A sentence of W words
            has up to ``W * L`` spans and one or two entities, so NULL spans outnumber entity spans ~50:1 on
            CoNLL-2003; at weight 1 the loss is first minimised by predicting NULL everywhere, a plateau that a
            short run does not leave (whole types then score 0). A training setting only: not saved.
    """

    def __init__(self, encoder: Encoder, *, id2label: Mapping[int, str], boundary: BoundaryKind = "tokens",
                 summary: SummaryKind = "mean", max_span_length: int = 8, classifier_dropout: float | None = None,
                 null_weight: float = 1.0):
        id2label = _check_id2label(id2label)
        if id2label[0] != NULL_LABEL:
            raise ValueError(f"id2label[0] must be {NULL_LABEL!r} (no entity); got {id2label[0]!r}")
        check_choice(boundary, "boundary", BOUNDARY_KINDS)
        check_choice(summary, "summary", SUMMARY_KINDS)
        if isinstance(max_span_length, bool) or not isinstance(max_span_length, int) or max_span_length < 1:
            raise ValueError(f"max_span_length must be a positive integer, got {max_span_length!r}")
        _check_dropout(classifier_dropout)
        if isinstance(null_weight, bool) or not isinstance(null_weight, (int, float)) or not 0 < null_weight <= 1:
            raise ValueError(f"null_weight must be a number in (0, 1]; got {null_weight!r}")
        super().__init__(encoder)
        config = encoder.config
        self.id2label = id2label
        self.num_labels = len(id2label)
        self.null_weight = float(null_weight)
        self.boundary, self.summary, self.max_span_length = boundary, summary, max_span_length
        self.classifier_dropout = classifier_dropout
        p = config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout
        self.span_classifier = SpanClassifierHead(config.hidden_size, self.num_labels, boundary=boundary,
                                                  summary=summary, dropout=p, activation=nn.GELU())
        self.span_classifier.apply(encoder._init_weights)
        self.freeze_unused_pooler()
        self.train(encoder.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, span_starts: torch.Tensor,
                span_ends: torch.Tensor, span_mask: torch.Tensor, span_labels: torch.Tensor | None = None
                ) -> TokenTaskOutput:
        """Scores for every enumerated span; with labels, the mean cross-entropy over real spans.

        Args:
            input_ids, attention_mask, token_type_ids: (B, T).
            span_starts, span_ends: (B, S) first and last subword position of each span (inclusive).
            span_mask: (B, S) 1 for real spans, 0 for padding.
            span_labels: (B, S) label ids (0 = NULL).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        z = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=False,
                         compute_pooler=False).last_hidden_state
        logits = self.span_classifier(z, span_starts, span_ends)  # (B, S, C)
        if span_labels is None:
            return TokenTaskOutput(loss=None, logits=logits)
        keep = span_mask.bool()
        weight = torch.ones(self.num_labels, device=logits.device)
        weight[0] = self.null_weight  # NULL spans outnumber entities ~50:1 (see the class docstring)
        loss = F.cross_entropy(logits.float()[keep], span_labels[keep], weight=weight)
        pred = logits.detach().argmax(-1)[keep]
        gold = span_labels[keep]
        entity = gold != 0
        metrics = {"accuracy": float((pred == gold).float().mean())}
        if bool(entity.any()):
            metrics["entity_recall"] = float((pred[entity] == gold[entity]).float().mean())
        return TokenTaskOutput(loss=loss, logits=logits, metrics=metrics)

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return self.encoder_depth_modules() + [(self.encoder.num_layers + 1, "span_classifier", self.span_classifier)]

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write ``config.json`` (the head's settings under ``ctxemb_span_classifier``), ``model.safetensors`` and
        ``modeling_ctxemb.py``: transformers has no span model, so its ``AutoModelForTokenClassification`` refuses
        to load this one, naming ctxemb (:mod:`ctxemb.modeling.remote_code`); ``AutoModel`` with
        ``trust_remote_code=True`` gives the encoder."""
        heads = {"span_classifier." + k: v for k, v in self.span_classifier.state_dict().items()}
        extra = {"id2label": {str(k): v for k, v in self.id2label.items()},
                 "label2id": {v: k for k, v in self.id2label.items()},
                 SPAN_CONFIG_KEY: {"boundary": self.boundary, "summary": self.summary,
                                   "max_span_length": self.max_span_length}}
        if self.classifier_dropout is not None:
            extra["classifier_dropout"] = self.classifier_dropout
        write_remote_code(out_dir)
        extra.update(remote_code_config(self.config.model_type, "CtxembForSpanClassification", {
            "AutoModelForTokenClassification": "CtxembForSpanClassification"}, refusal=SPAN_REFUSAL))
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads, config_extra=extra)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, id2label: Mapping[int, str] | None = None,
                        strict: bool = True, new_head: bool = False,
                        **head_options) -> "EncoderForSpanClassification":
        """Load a saved span classifier, or an encoder with a new head (``id2label`` and the constructor's
        keyword options then apply).

        Raises:
            ValueError: ``id2label`` missing for a new head; options that contradict a saved head.
        """
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict, new_head=new_head)
        saved = _heads_with_prefix(heads, "span_classifier.")
        raw = _read_config(model_dir)
        if not saved:
            if id2label is None:
                raise ValueError(f"{model_dir} has no span classifier (it is a bare encoder): pass id2label")
            return cls(encoder, id2label=id2label, **head_options)
        options = dict(raw.get(SPAN_CONFIG_KEY) or {})
        for k, v in head_options.items():
            if k in options and options[k] != v:
                raise ValueError(f"{k}={v!r} contradicts the saved span classifier in {model_dir} ({options[k]!r})")
        labels = _saved_id2label(raw, model_dir)
        if id2label is not None and labels is not None and _check_id2label(id2label) != labels:
            raise ValueError(f"id2label contradicts the fine-tuned model in {model_dir} ({labels})")
        model = cls(encoder, id2label=labels or id2label, classifier_dropout=raw.get("classifier_dropout"),
                    **{**head_options, **options})
        load_weights_into(model.span_classifier, saved, strict=True, source=f"{model_dir} (span classifier)")
        return model


