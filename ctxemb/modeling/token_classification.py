"""Sequence labelling with an optional CRF (J&M 11.4.3), and what the token-level task models share (labels,
outputs, config helpers); span classification is in :mod:`ctxemb.modeling.span_classification`, extractive
question answering in :mod:`ctxemb.modeling.question_answering`.

- :class:`EncoderForTokenClassification`: a softmax per subword token, ``y_i = softmax(W_K z_i)`` (eq. 11.14-11.15),
  under transformers' names (``classifier``), so a softmax model loads in ``AutoModelForTokenClassification`` with
  equal logits. With ``crf=True`` a linear-chain CRF (``crf.*``, :mod:`ctxemb.modeling.crf`) runs over the words,
  each word's emission being its first subword's logits; its BIO constraints forbid ``I-X`` after anything but
  ``B-X``/``I-X``. transformers has no CRF: such a model is saved with ``modeling_ctxemb.py``
  (:mod:`ctxemb.modeling.remote_code`), whose ``AutoModelForTokenClassification`` refuses to load it, naming ctxemb
  (the softmax over its emissions would tag otherwise than the Viterbi path).
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

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import check_choice, read_json_file
from ctxemb.modeling.architectures import architecture_name
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.crf import LinearChainCRF, bio_transition_mask
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.family_heads import modernbert_head_config
from ctxemb.modeling.remote_code import remote_code_config, write_remote_code
from ctxemb.models.head_options import WORD_DECODINGS, WordDecoding

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label of positions that take no loss (special tokens, padding, non-first subwords)
NULL_LABEL = "NULL"
# BoundaryKind, SummaryKind, WordDecoding and their choices live in ctxemb.models.head_options (read by the fine-tuning
# configuration without torch)

_BIO_TAG = re.compile(r"^(O|[BI]-.+)$")
# config.json keys of our own (transformers ignores unknown keys)
CRF_CONFIG_KEY = "ctxemb_crf"
SPAN_CONFIG_KEY = "ctxemb_span_classifier"
# Why transformers' AutoModelForTokenClassification refuses these heads (the error modeling_ctxemb.py raises).
CRF_REFUSAL = ("its tags come from a CRF decoded over the words of a sentence (Viterbi), which transformers has no "
               "class for; per-token logits alone would tag otherwise")
SPAN_REFUSAL = ("it labels spans of words with ctxemb's span classifier, which transformers has no class for; "
                "per-token logits cannot give its entities")


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
    return read_json_file(model_dir / "config.json", "config file")


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
        self._init_token_head()  # ModernBERT: norm(gelu(dense(z))) before the classifier, as transformers has it
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.classifier.apply(encoder._init_weights)
        self.crf: LinearChainCRF | None = None
        if crf:
            allowed, allowed_start = (bio_transition_mask(id2label) if is_bio_label_set(id2label.values())
                                      else (None, None))
            self.crf = LinearChainCRF(self.num_labels, allowed_transitions=allowed, allowed_start=allowed_start)
        self.freeze_unused_pooler()
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
        logits = self.classifier(self.dropout(self._token_head(z)))  # (B, T, C)
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
        check_choice(decoding, "decoding", WORD_DECODINGS)
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
        out += self._token_head_depth()
        out.append((L + 1, "classifier", self.classifier))
        if self.crf is not None:
            out.append((L + 1, "crf", self.crf))
        return out

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write ``config.json`` (``id2label``, ``label2id``, and ``ctxemb_crf``) and ``model.safetensors``.

        A softmax model names ``BertForTokenClassification`` (etc.), which transformers'
        ``AutoModelForTokenClassification`` loads with equal logits. A CRF model is saved with
        ``modeling_ctxemb.py``, whose ``AutoModelForTokenClassification`` refuses to load it (transformers has no
        CRF; ``AutoModel`` with ``trust_remote_code=True`` gives its encoder).
        """
        heads = {"classifier." + k: v for k, v in self.classifier.state_dict().items()}
        heads.update(self._token_head_tensors())
        if self.crf is not None:
            heads.update({"crf." + k: v.float() for k, v in self.crf.state_dict().items()})
        extra = {"id2label": {str(k): v for k, v in self.id2label.items()}, "label2id": self.label2id,
                 CRF_CONFIG_KEY: self.crf is not None}
        if self.classifier_dropout is not None:
            extra["classifier_dropout"] = self.classifier_dropout
        if self.head is not None:
            extra.update(modernbert_head_config(self.head))
        if self.crf is not None:
            write_remote_code(out_dir)
            extra.update(remote_code_config(self.config.model_type, "CtxembForTokenClassification", {
                "AutoModelForTokenClassification": "CtxembForTokenClassification"}, refusal=CRF_REFUSAL))
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads,
                               architectures=[architecture_name(self.config.model_type, "token_classification")], config_extra=extra)

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, id2label: Mapping[int, str] | None = None,
                        crf: bool | None = None, classifier_dropout: float | None = None,
                        strict: bool = True, new_head: bool = False) -> "EncoderForTokenClassification":
        """Load a fine-tuned tagger (ours or transformers'), or an encoder with a fresh head (``id2label``
        required then).

        Raises:
            FileNotFoundError, CheckpointError: as for :func:`ctxemb.modeling.checkpoint.load_encoder_dir`.
            ValueError: ``id2label`` missing for a new head, or ``id2label``/``crf`` contradicting the saved model.
        """
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict, new_head=new_head)
        saved = _heads_with_prefix(heads, "classifier.")
        raw = _read_config(model_dir)
        if not saved:
            if id2label is None:
                raise ValueError(f"{model_dir} has no token classifier (it is a bare encoder): pass id2label")
            logger.info("%s has no classifier weights: a new token head with %d labels", model_dir, len(id2label))
            model = cls(encoder, id2label=id2label, crf=bool(crf), classifier_dropout=classifier_dropout)
            model._load_token_head(heads, raw, str(model_dir))  # ModernBERT MLM checkpoints have the same head
            return model
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
        model._load_token_head(heads, raw, str(model_dir))
        if model.crf is not None:
            load_weights_into(model.crf, _heads_with_prefix(heads, "crf."), strict=True, source=f"{model_dir} (crf)")
        return model


def word_emissions(logits: torch.Tensor, word_starts: torch.Tensor) -> torch.Tensor:
    """(B, W, C) the logits (B, T, C) at each word's first subword ``word_starts`` (B, W)."""
    return logits.gather(1, word_starts.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
