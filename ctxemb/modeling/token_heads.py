"""Token- and span-level heads on top of the encoder: sequence labelling with an optional CRF (J&M 11.4.3), span
classification (11.5.2) and extractive question answering (d2l 15.6.4).

- :class:`EncoderForTokenClassification`: a softmax per subword token, ``y_i = softmax(W_K z_i)`` (eq. 11.14-11.15),
  under transformers' names (``classifier``), so a softmax model loads in ``AutoModelForTokenClassification`` with
  equal logits. With ``crf=True`` a linear-chain CRF (``crf.*``, :mod:`ctxemb.modeling.crf`) runs over the words,
  each word's emission being its first subword's logits; its BIO constraints forbid ``I-X`` after anything but
  ``B-X``/``I-X``. Transformers loads such a model's softmax part only (it would ignore ``crf.*``).
- :class:`EncoderForSpanClassification`: every span up to a length limit gets a vector
  ``[boundary_start; boundary_end; summary]`` (eq. 11.22, 11.25) and a label from ``softmax(FFN(spanRep))``
  (eq. 11.27) over the entity types and NULL (id 0). Boundaries are the span's first and last subword vectors
  (``"tokens"``) or their images under separate start and end feed-forward nets (``"ffn"``, eq. 11.23-11.24); the
  summary is the mean of the span's subword vectors (``"mean"``, eq. 11.21) or attention pooling over them
  (``"attention"``, eq. 11.26: one learned score per token, softmax within the span, as Lee et al. 2017 do).
- :class:`EncoderForQuestionAnswering`: start and end scores per token from one linear map (``qa_outputs``, H -> 2),
  the loss the mean of the two cross-entropies: transformers' ``*ForQuestionAnswering`` exactly.

Shapes: B batch, T subword tokens, W words, S spans, H hidden size, C labels.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.crf import LinearChainCRF, bio_transition_mask
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.heads import EncoderWithHeads

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label of positions that take no loss (special tokens, padding, non-first subwords)
NULL_LABEL = "NULL"
BoundaryKind = Literal["tokens", "ffn"]
SummaryKind = Literal["mean", "attention"]
BOUNDARY_KINDS: tuple[str, ...] = ("tokens", "ffn")
SUMMARY_KINDS: tuple[str, ...] = ("mean", "attention")
WordDecoding = Literal["first", "mean"]
WORD_DECODINGS: tuple[str, ...] = ("first", "mean")

_TOKEN_ARCHS = {"bert": "BertForTokenClassification", "roberta": "RobertaForTokenClassification",
                "xlm-roberta": "XLMRobertaForTokenClassification", "mpnet": "MPNetForTokenClassification"}
_QA_ARCHS = {"bert": "BertForQuestionAnswering", "roberta": "RobertaForQuestionAnswering",
             "xlm-roberta": "XLMRobertaForQuestionAnswering", "mpnet": "MPNetForQuestionAnswering"}
_BARE_ARCHS = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
               "mpnet": "MPNetModel"}
_BIO_TAG = re.compile(r"^(O|[BI]-.+)$")
# config.json keys of our own (transformers ignores unknown keys)
CRF_CONFIG_KEY = "ctxemb_crf"
SPAN_CONFIG_KEY = "ctxemb_span_classifier"


@dataclass
class TokenTaskOutput:
    """What the token- and span-level models return.

    Attributes:
        loss: the training loss (scalar), or None without labels.
        logits: (B, T, C) per-token label scores (token classification), (B, S, C) per-span scores (span
            classification), or (B, T, 2) start and end scores (QA; also as ``start_logits``/``end_logits``).
        metrics: floats for logging (e.g. ``accuracy`` over labelled positions).
    """

    loss: torch.Tensor | None
    logits: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def start_logits(self) -> torch.Tensor:
        return self.logits[..., 0]

    @property
    def end_logits(self) -> torch.Tensor:
        return self.logits[..., 1]


def _check_id2label(id2label: Mapping[int, str] | None, what: str = "id2label") -> dict[int, str]:
    if not id2label:
        raise ValueError(f"{what} must map 0..C-1 to label names; got {id2label!r}")
    out = {int(k): str(v) for k, v in id2label.items()}
    if sorted(out) != list(range(len(out))):
        raise ValueError(f"{what} must have the keys 0..{len(out) - 1}; got {sorted(out)}")
    if len(set(out.values())) != len(out):
        raise ValueError(f"{what} repeats a label name: {sorted(out.values())}")
    return out


def _check_dropout(p: float | None) -> None:
    if p is not None and not 0.0 <= p < 1.0:
        raise ValueError(f"classifier_dropout must be in [0, 1), got {p}")


def is_bio_label_set(labels) -> bool:
    """Whether every label is ``O``, ``B-X`` or ``I-X`` (so BIO transition constraints apply)."""
    return all(_BIO_TAG.match(label) for label in labels)


def _read_config(model_dir: Path) -> dict:
    return json.loads((model_dir / "config.json").read_text(encoding="utf-8"))


def _saved_id2label(raw: dict, model_dir: Path) -> dict[int, str] | None:
    if isinstance(raw.get("id2label"), dict) and raw["id2label"]:
        return _check_id2label(raw["id2label"], f"{model_dir}/config.json id2label")
    return None


def _heads_with_prefix(heads: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in heads.items() if k.startswith(prefix)}


# ------------------------------------------------------------------------------------------ token classification


class EncoderForTokenClassification(EncoderWithHeads):
    """An :class:`Encoder` with a per-token classifier and, optionally, a CRF over words.

    Args:
        encoder: a pretrained encoder; the model owns it from now on.
        id2label: label names, ``{0: "O", 1: "B-PER", ...}`` (BIO for NER, or any tag set such as POS tags).
        crf: add a linear-chain CRF over words; its BIO constraints are on when every label is BIO-shaped.
        classifier_dropout: dropout before the classifier; the encoder's ``hidden_dropout_prob`` when None.

    The pooler is not used: its parameters get ``requires_grad=False`` (saved unchanged).

    Raises:
        ValueError: ``id2label`` not keyed 0..C-1 or with repeated names, ``classifier_dropout`` outside [0, 1).
    """

    def __init__(self, encoder: Encoder, *, id2label: Mapping[int, str], crf: bool = False,
                 classifier_dropout: float | None = None):
        id2label = _check_id2label(id2label)
        _check_dropout(classifier_dropout)
        super().__init__(encoder)
        config = encoder.config
        self.id2label = id2label
        self.num_labels = len(id2label)
        self.classifier_dropout = classifier_dropout
        self.dropout = nn.Dropout(config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.classifier.apply(encoder._init_weights)
        self.crf: LinearChainCRF | None = None
        if crf:
            allowed, allowed_start = (bio_transition_mask(id2label) if is_bio_label_set(id2label.values())
                                      else (None, None))
            self.crf = LinearChainCRF(self.num_labels, allowed_transitions=allowed, allowed_start=allowed_start)
        encoder.pooler.requires_grad_(False)
        self.train(encoder.training)

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in self.id2label.items()}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                word_starts: torch.Tensor | None = None, word_mask: torch.Tensor | None = None,
                word_labels: torch.Tensor | None = None) -> TokenTaskOutput:
        """Per-token logits; with labels, the loss.

        Args:
            input_ids, attention_mask, token_type_ids: (B, T).
            labels: (B, T) label ids per subword, ``IGNORE_INDEX`` where no loss is taken (softmax head).
            word_starts: (B, W) position of each word's first subword (CRF head; 0 where ``word_mask`` is 0).
            word_mask: (B, W) 1 for real words, left-aligned.
            word_labels: (B, W) the words' label ids (CRF head).

        Returns:
            TokenTaskOutput with (B, T, C) logits; the loss is the mean cross-entropy over labelled subwords
            (softmax) or the mean negative log-likelihood of the words' tag sequences (CRF).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        z = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=False,
                         compute_pooler=False).last_hidden_state  # (B, T, H)
        logits = self.classifier(self.dropout(z))  # (B, T, C)
        if self.crf is not None:
            if word_labels is None:
                return TokenTaskOutput(loss=None, logits=logits)
            if word_starts is None or word_mask is None:
                raise ValueError("the CRF head needs word_starts and word_mask with word_labels")
            emissions = word_emissions(logits, word_starts)  # (B, W, C)
            loss = self.crf(emissions.float(), word_labels, word_mask)
            return TokenTaskOutput(loss=loss, logits=logits)
        if labels is None:
            return TokenTaskOutput(loss=None, logits=logits)
        if labels.shape != input_ids.shape:
            raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}; "
                             f"got {tuple(labels.shape)}")
        flat = labels.reshape(-1)
        loss = F.cross_entropy(logits.float().reshape(-1, self.num_labels), flat, ignore_index=IGNORE_INDEX)
        keep = flat != IGNORE_INDEX
        accuracy = float((logits.detach().reshape(-1, self.num_labels).argmax(-1)[keep] == flat[keep]).float()
                         .mean()) if bool(keep.any()) else 0.0
        return TokenTaskOutput(loss=loss, logits=logits, metrics={"accuracy": accuracy})

    @torch.no_grad()
    def decode_words(self, logits: torch.Tensor, word_starts: torch.Tensor, word_ends: torch.Tensor,
                     word_mask: torch.Tensor, *, decoding: WordDecoding = "first") -> list[list[int]]:
        """One label id per word.

        Args:
            logits: (B, T, C) from :meth:`forward`.
            word_starts, word_ends: (B, W) each word's subword range ``[start, end)``.
            word_mask: (B, W) 1 for real words, left-aligned.
            decoding: ``"first"``: the word's first subword's distribution; ``"mean"``: the mean of its subwords'
                softmax distributions. With a CRF: Viterbi over the first subwords' emissions (what it was trained
                on), and ``"mean"`` is refused.

        Returns:
            B lists, each with one label id per real word.
        """
        if decoding not in WORD_DECODINGS:
            raise ValueError(f"decoding must be one of {WORD_DECODINGS}; got {decoding!r}")
        lengths = word_mask.sum(1).tolist()
        if self.crf is not None:
            if decoding != "first":
                raise ValueError("a CRF decodes from the first subwords' emissions it was trained on; "
                                 "decoding='mean' is for the softmax head")
            return self.crf.decode(word_emissions(logits, word_starts).float(), word_mask)
        if decoding == "first":
            best = word_emissions(logits, word_starts).argmax(-1)  # (B, W)
        else:
            probs = logits.float().softmax(-1)  # (B, T, C)
            csum = F.pad(probs.cumsum(1), (0, 0, 1, 0))  # (B, T+1, C): csum[:, t] = sum of probs[:, :t]
            idx = lambda pos: pos.unsqueeze(-1).expand(-1, -1, probs.shape[-1])  # noqa: E731
            span_sum = csum.gather(1, idx(word_ends)) - csum.gather(1, idx(word_starts))  # (B, W, C)
            best = span_sum.argmax(-1)
        return [row[:n] for row, n in zip(best.tolist(), lengths)]

    # ---- fine-tuning regimes (same contract as the sequence-level model)
    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        """(depth, name, module) from the input up: embeddings 0, layer i at i + 1, the head (classifier, CRF) at
        L + 1; for freezing and layer-wise learning rates."""
        out = self.encoder_depth_modules()
        L = self.encoder.num_layers
        out.append((L + 1, "classifier", self.classifier))
        if self.crf is not None:
            out.append((L + 1, "crf", self.crf))
        return out

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write ``config.json`` (``id2label``, ``label2id``, and ``ctxemb_crf``) and ``model.safetensors``.

        A softmax model names ``BertForTokenClassification`` (etc.), which transformers'
        ``AutoModelForTokenClassification`` loads with equal logits.
        """
        heads = {"classifier." + k: v for k, v in self.classifier.state_dict().items()}
        if self.crf is not None:
            heads.update({"crf." + k: v.float() for k, v in self.crf.state_dict().items()})
        extra = {"id2label": {str(k): v for k, v in self.id2label.items()}, "label2id": self.label2id,
                 CRF_CONFIG_KEY: self.crf is not None}
        if self.classifier_dropout is not None:
            extra["classifier_dropout"] = self.classifier_dropout
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads,
                               architectures=[_TOKEN_ARCHS[self.config.model_type]], config_extra=extra)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, id2label: Mapping[int, str] | None = None,
                        crf: bool | None = None, classifier_dropout: float | None = None,
                        strict: bool = True) -> "EncoderForTokenClassification":
        """Load a fine-tuned tagger (ours or transformers'), or an encoder with a fresh head (``id2label``
        required then).

        Raises:
            FileNotFoundError, CheckpointError: as for :func:`ctxemb.modeling.checkpoint.load_encoder_dir`.
            ValueError: ``id2label`` missing for a new head, or ``id2label``/``crf`` contradicting the saved model.
        """
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict)
        saved = _heads_with_prefix(heads, "classifier.")
        raw = _read_config(model_dir)
        if not saved:
            if id2label is None:
                raise ValueError(f"{model_dir} has no token classifier (it is a bare encoder): pass id2label")
            logger.info("%s has no classifier weights: a new token head with %d labels", model_dir, len(id2label))
            return cls(encoder, id2label=id2label, crf=bool(crf), classifier_dropout=classifier_dropout)
        saved_labels = _saved_id2label(raw, model_dir)
        saved_crf = bool(raw.get(CRF_CONFIG_KEY, False))
        if id2label is not None and saved_labels is not None and _check_id2label(id2label) != saved_labels:
            raise ValueError(f"id2label contradicts the fine-tuned model in {model_dir} ({saved_labels})")
        if crf is not None and crf != saved_crf:
            raise ValueError(f"crf={crf} contradicts the fine-tuned model in {model_dir} (crf={saved_crf})")
        labels = saved_labels or id2label
        if labels is None:
            raise ValueError(f"{model_dir}: config.json has no id2label; pass id2label")
        model = cls(encoder, id2label=labels, crf=saved_crf,
                    classifier_dropout=raw.get("classifier_dropout", classifier_dropout))
        load_weights_into(model.classifier, saved, strict=True, source=f"{model_dir} (classifier)")
        if model.crf is not None:
            load_weights_into(model.crf, _heads_with_prefix(heads, "crf."), strict=True, source=f"{model_dir} (crf)")
        return model


def word_emissions(logits: torch.Tensor, word_starts: torch.Tensor) -> torch.Tensor:
    """(B, W, C) the logits (B, T, C) at each word's first subword ``word_starts`` (B, W)."""
    return logits.gather(1, word_starts.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


# ------------------------------------------------------------------------------------------ span classification


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
        if boundary not in BOUNDARY_KINDS:
            raise ValueError(f"boundary must be one of {BOUNDARY_KINDS}; got {boundary!r}")
        if summary not in SUMMARY_KINDS:
            raise ValueError(f"summary must be one of {SUMMARY_KINDS}; got {summary!r}")
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
        encoder.pooler.requires_grad_(False)
        self.train(encoder.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, span_starts: torch.Tensor,
                span_ends: torch.Tensor, span_mask: torch.Tensor, span_labels: torch.Tensor | None = None
                ) -> TokenTaskOutput:
        """Scores for every enumerated span; with labels, the cross-entropy over real spans, NULL spans weighted
        by ``null_weight`` (the weighted mean, as ``F.cross_entropy(weight=...)``).

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
        weight[0] = self.null_weight
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
        """Write ``config.json`` (the bare encoder class for transformers, which has no span model; the head's
        settings under ``ctxemb_span_classifier``) and ``model.safetensors``."""
        heads = {"span_classifier." + k: v for k, v in self.span_classifier.state_dict().items()}
        extra = {"id2label": {str(k): v for k, v in self.id2label.items()},
                 "label2id": {v: k for k, v in self.id2label.items()},
                 SPAN_CONFIG_KEY: {"boundary": self.boundary, "summary": self.summary,
                                   "max_span_length": self.max_span_length}}
        if self.classifier_dropout is not None:
            extra["classifier_dropout"] = self.classifier_dropout
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads,
                               architectures=[_BARE_ARCHS[self.config.model_type]], config_extra=extra)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, id2label: Mapping[int, str] | None = None,
                        strict: bool = True, **head_options) -> "EncoderForSpanClassification":
        """Load a saved span classifier, or an encoder with a new head (``id2label`` and the constructor's
        keyword options then apply).

        Raises:
            ValueError: ``id2label`` missing for a new head; options that contradict a saved head.
        """
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict)
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


# ------------------------------------------------------------------------------------------ question answering


class EncoderForQuestionAnswering(EncoderWithHeads):
    """An :class:`Encoder` with start and end scores per token (``qa_outputs``: H -> 2), as transformers'
    ``*ForQuestionAnswering``; saved models load in ``AutoModelForQuestionAnswering`` with equal logits."""

    def __init__(self, encoder: Encoder):
        super().__init__(encoder)
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        self.qa_outputs.apply(encoder._init_weights)
        encoder.pooler.requires_grad_(False)
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
        logits = self.qa_outputs(z)  # (B, T, 2)
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

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return self.encoder_depth_modules() + [(self.encoder.num_layers + 1, "qa_outputs", self.qa_outputs)]

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        heads = {"qa_outputs." + k: v for k, v in self.qa_outputs.state_dict().items()}
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads,
                               architectures=[_QA_ARCHS[self.config.model_type]])

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, strict: bool = True) -> "EncoderForQuestionAnswering":
        """Load a QA model (ours or transformers'), or an encoder with a fresh ``qa_outputs`` (logged)."""
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict)
        model = cls(encoder)
        saved = _heads_with_prefix(heads, "qa_outputs.")
        if saved:
            load_weights_into(model.qa_outputs, saved, strict=True, source=f"{model_dir} (qa_outputs)")
        else:
            logger.info("%s has no qa_outputs weights: the QA head is initialised fresh", model_dir)
        return model
