"""The encoder with its pretraining heads: masked LM, optional next-sentence prediction and span-boundary objective.

The model keeps its encoder under the checkpoint's base-model prefix (``bert``, ``roberta`` or ``mpnet``) and its
heads under ``cls``, so ``state_dict()`` has the names of transformers' ``BertForPreTraining``; saved directories
load in ``BertForPreTraining`` / ``BertForMaskedLM`` (RoBERTa/MPNet: ``*ForMaskedLM``), in our ``Embedder`` and in
fine-tuning. A BERT model whose NSP head reads the raw [CLS] vector (``nsp_input="cls"``) is the exception:
``BertForPreTraining`` would feed that head the pooler instead, so it is saved with ``modeling_ctxemb.py``
(:mod:`ctxemb.modeling.remote_code`), whose ``AutoModelForPreTraining`` refuses to load it, naming ctxemb, and whose
``AutoModelForMaskedLM`` is transformers' own ``BertForMaskedLM`` (the MLM head is BERT's); both need
``trust_remote_code=True``.

Losses (J&M 11.2.1, 11.2.2, 11.5.1): L = L_MLM (+ L_SBO) (+ L_NSP); L_MLM and L_SBO are cross-entropies averaged
over the masked positions, L_NSP over the sequences.

Shapes: B batch, T tokens, H hidden size, V vocabulary, M masked positions in the batch.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import check_choice, read_json_file
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.architectures import architecture_name
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.encoder import ACTIVATIONS, Encoder
from ctxemb.modeling.remote_code import remote_code_config, write_remote_code
from ctxemb.models.head_options import NSP_INPUTS, NspInput

logger = logging.getLogger(__name__)

# NspInput and NSP_INPUTS live in ctxemb.models.head_options (read by the pretraining configuration without torch)
# config.json key recording the NSP head's input when it is not transformers' ("pooled").
NSP_INPUT_KEY = "ctxemb_nsp_input"
NSP_REFUSAL = ("its next-sentence head reads the raw [CLS] vector, where transformers' BertForPreTraining reads the "
               "tanh pooler")
IGNORE_INDEX = -100  # label of positions that carry no loss



class PredictionHeadTransform(nn.Module):
    """h -> LayerNorm(act(W h + b)): the transform in front of the tied decoder. Its width is the hidden size, or
    ELECTRA's ``embedding_size`` (the generator's head maps H -> E, the embeddings' width); ELECTRA and ModernBERT use
    GELU whatever the encoder's activation, ModernBERT without the dense bias (``classifier_bias``) and with the
    LayerNorm bias only when ``norm_bias``."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        modern = config.model_type == "modernbert"
        self.dense = nn.Linear(config.hidden_size, width, bias=not modern)
        self.act = ACTIVATIONS["gelu" if config.model_type in ("electra", "modernbert") else config.hidden_act]
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps, bias=config.norm_bias if modern else True)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(hidden)))


# The MLM head's names in the checkpoints of the families whose transformers class does not say ``cls.predictions``
# (names relative to ``cls.``; RoBERTa/MPNet's ``lm_head`` is mapped in ctxemb.modeling.checkpoint).
_MLM_HEAD_NAMES: dict[str, list[tuple[str, str]]] = {
    "distilbert": [("predictions.transform.dense.", "vocab_transform."),
                   ("predictions.transform.LayerNorm.", "vocab_layer_norm."),
                   ("predictions.bias", "vocab_projector.bias"), ("predictions.decoder.weight", "vocab_projector.weight")],
    "electra": [("predictions.transform.dense.", "generator_predictions.dense."),
                ("predictions.transform.LayerNorm.", "generator_predictions.LayerNorm."),
                ("predictions.bias", "generator_lm_head.bias"), ("predictions.decoder.weight", "generator_lm_head.weight")],
    "modernbert": [("predictions.transform.dense.", "head.dense."), ("predictions.transform.LayerNorm.", "head.norm."),
                   ("predictions.bias", "decoder.bias"), ("predictions.decoder.weight", "decoder.weight")],
}


def _rename(key: str, table: list[tuple[str, str]], reverse: bool = False) -> str | None:
    """``key`` renamed by the first matching prefix of ``table`` (ours -> theirs, or back), None if none matches."""
    for ours, theirs in table:
        src, dst = (theirs, ours) if reverse else (ours, theirs)
        if key.startswith(src):
            return dst + key[len(src):]
    return None


class MaskedLMHead(nn.Module):
    """A distribution over the vocabulary for each row: ``E^T LayerNorm(act(W h)) + b``, E the word embeddings.

    Runs on any leading shape: (B, T, H) for every token, or (M, H) for the masked rows only (sparse prediction:
    the vocabulary projection is the largest matmul of a small BERT, and only masked rows have a loss).
    """

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        self.decoder = nn.Linear(config.embedding_size or config.hidden_size, config.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied: the output layer is E^T
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden)) + self.bias  # (..., V)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span-boundary objective (eq. 11.17-11.20).

    Token i of a masked span s..e is predicted from the encoder outputs just outside the span and a learned
    embedding of its position inside it: ``y_i = f([z_{s-1}; z_{e+1}; p_{i-s+1}])``, with f two layers of
    Linear, GELU and LayerNorm, then the MLM head's tied decoder (``decode``), so SBO and MLM share the output
    vocabulary projection as in SpanBERT.

    ``max_span_length`` counts tokens (spans are drawn in words, clipped at 10, and a word may have several
    subwords), hence the generous default of 64 positions.

    Names: ``position_embeddings`` (P, H) and ``mlp.{0,3}`` Linear / ``mlp.{2,5}`` LayerNorm (no HF checkpoint
    has this head; transformers ignores these tensors when it loads ours).
    """

    def __init__(self, config: EncoderConfig, max_span_length: int = 64):
        super().__init__()
        if max_span_length < 1:
            raise ValueError(f"max_span_length must be >= 1, got {max_span_length}")
        H = config.hidden_size
        self.max_span_length = max_span_length
        self.position_embeddings = nn.Embedding(max_span_length, H)
        self.mlp = nn.Sequential(
            nn.Linear(3 * H, H), nn.GELU(), nn.LayerNorm(H, eps=config.layer_norm_eps),
            nn.Linear(H, H), nn.GELU(), nn.LayerNorm(H, eps=config.layer_norm_eps),
        )

    def forward(self, sequence_output: torch.Tensor, rows: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                position: torch.Tensor) -> torch.Tensor:
        """Span-boundary representations of M masked tokens.

        Args:
            sequence_output: (B, T, H) the encoder's last layer.
            rows: (M,) batch index of each masked token.
            left, right: (M,) token positions s-1 and e+1 of its span's boundaries.
            position: (M,) its 0-based position inside the span (i - s).

        Returns:
            (M, H), to be decoded by the MLM head's tied decoder.
        """
        if position.numel() and int(position.max()) >= self.max_span_length:
            raise ValueError(
                f"span position {int(position.max())} is beyond this head's max_span_length "
                f"({self.max_span_length}); mask with spans of at most {self.max_span_length} tokens"
            )
        z = torch.cat([sequence_output[rows, left], sequence_output[rows, right],
                       self.position_embeddings(position)], dim=-1)  # (M, 3H)
        return self.mlp(z)


class PretrainingHeads(nn.Module):
    """``cls.predictions`` (MLM), ``cls.seq_relationship`` (NSP, optional), ``cls.span_boundary`` (SBO, optional)."""

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding, *, nsp: bool, sbo: bool,
                 max_span_length: int):
        super().__init__()
        self.predictions = MaskedLMHead(config, word_embeddings)
        self.seq_relationship = nn.Linear(config.hidden_size, 2) if nsp else None
        self.span_boundary = SpanBoundaryHead(config, max_span_length) if sbo else None


@dataclass
class PretrainingOutput:
    """What :class:`EncoderForPretraining` returns.

    Attributes:
        loss: the total loss (scalar), or None without labels.
        mlm_logits: (M, V) logits of the labelled positions in row-major order when labels are given (sparse
            prediction), else (B, T, V) for every token.
        nsp_logits: (B, 2) is-next / random logits, or None without an NSP head.
        sbo_logits: (M_span, V) span-boundary logits of the masked span tokens, or None.
        mlm_loss, nsp_loss, sbo_loss: the parts of ``loss`` (None where absent).
        metrics: floats for logging: ``mlm_accuracy``, ``masked_tokens``, ``nsp_accuracy``, ``sbo_accuracy``.
    """

    loss: torch.Tensor | None
    mlm_logits: torch.Tensor
    nsp_logits: torch.Tensor | None = None
    sbo_logits: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    sbo_loss: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class EncoderForPretraining(EncoderWithHeads):
    """An :class:`Encoder` with a masked-LM head (decoder tied to the word embeddings) and optional NSP / SBO heads.

    Args:
        encoder: the encoder (a fresh one from a config, or a pretrained one for continued pretraining).
        nsp: add the next-sentence head ``cls.seq_relationship``.
        nsp_input: ``"pooled"`` feeds it BERT's tanh pooler output (what checkpoints and transformers do);
            ``"cls"`` feeds it the raw [CLS] vector, the book's W_NSP on h_CLS (11.2.2).
        sbo: add SpanBERT's span-boundary head ``cls.span_boundary`` (use with span masking).
        max_span_length: positions the SBO head can embed (tokens).
        sparse_prediction: run the vocabulary projection only on the labelled rows when labels are given (same
            loss as the dense head, a fraction of its cost: the projection is the largest matmul of a small BERT).
    """

    def __init__(self, encoder: Encoder, *, nsp: bool = False, nsp_input: NspInput = "pooled", sbo: bool = False,
                 max_span_length: int = 64, sparse_prediction: bool = True):
        check_choice(nsp_input, "nsp_input", NSP_INPUTS)
        mt = encoder.config.model_type
        if nsp and nsp_input == "pooled" and getattr(encoder, "pooler", None) is None:
            raise ValueError(f"nsp_input='pooled' reads BERT's pooler, which a {mt!r} encoder has not; pass "
                             "nsp_input='cls'")
        if sbo and (encoder.config.embedding_size or encoder.config.hidden_size) != encoder.config.hidden_size:
            raise ValueError(f"sbo decodes hidden-size vectors with the MLM decoder, whose input is this {mt!r} "
                             f"encoder's embedding_size {encoder.config.embedding_size}: not available")
        super().__init__(encoder)
        self.cls = PretrainingHeads(encoder.config, encoder.embeddings.word_embeddings, nsp=nsp, sbo=sbo,
                                    max_span_length=max_span_length)
        self.nsp_input = nsp_input
        self.sparse_prediction = sparse_prediction
        # the decoder is the (already initialised) word embedding matrix: initialise only the heads' own layers
        for name, module in self.cls.named_modules():
            if name != "predictions.decoder":
                encoder._init_weights(module)

    @classmethod
    def from_config(cls, config: EncoderConfig, **kwargs) -> "EncoderForPretraining":
        """A freshly initialised model (pretraining from scratch); ``kwargs`` as for the constructor."""
        return cls(Encoder(config), **kwargs)

    @property
    def has_nsp(self) -> bool:
        return self.cls.seq_relationship is not None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                next_sentence_label: torch.Tensor | None = None, span_left: torch.Tensor | None = None,
                span_right: torch.Tensor | None = None, span_position: torch.Tensor | None = None,
                word_ids: torch.Tensor | None = None) -> PretrainingOutput:
        """Run encoder and heads; with labels, the losses.

        Args:
            input_ids, attention_mask, token_type_ids: (B, T), as for :class:`Encoder`.
            labels: (B, T) original ids at the masked positions, -100 elsewhere.
            next_sentence_label: (B,) 0 = B follows A, 1 = B is random (transformers' convention).
            span_left, span_right, span_position: (B, T) for span masking: each masked token's span boundaries
                (positions s-1 and e+1) and its 0-based position in the span; -1 outside spans. Needed by SBO.
            word_ids: (B, T), accepted so that a masking batch can be passed whole; unused here.

        Returns:
            PretrainingOutput.
        """
        enc = self.encoder
        want_pooler = self.has_nsp and self.nsp_input == "pooled"
        out = enc(input_ids, attention_mask, token_type_ids, output_hidden_states=False, compute_pooler=want_pooler)
        z = out.last_hidden_state  # (B, T, H)
        nsp_logits = None
        if self.has_nsp:
            nsp_logits = self.cls.seq_relationship(out.pooler_output if want_pooler else z[:, 0])  # (B, 2)
        if labels is None:
            return PretrainingOutput(loss=None, mlm_logits=self.cls.predictions(z), nsp_logits=nsp_logits)
        if labels.shape != input_ids.shape:
            raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}; "
                             f"got {tuple(labels.shape)}")

        masked = labels != IGNORE_INDEX  # (B, T)
        target = labels[masked]  # (M,)
        if self.sparse_prediction:
            mlm_logits = self.cls.predictions(z[masked])  # (M, V): only the rows that have a loss
        else:
            mlm_logits = self.cls.predictions(z)[masked]
        metrics: dict[str, float] = {"masked_tokens": float(target.numel())}
        mlm_loss = _mean_cross_entropy(mlm_logits, target)
        loss = mlm_loss
        metrics["mlm_accuracy"] = _accuracy(mlm_logits, target)

        nsp_loss = None
        if next_sentence_label is not None:
            if nsp_logits is None:
                raise ValueError("next_sentence_label was given but this model has no NSP head (nsp=False)")
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label)
            loss = loss + nsp_loss
            metrics["nsp_accuracy"] = _accuracy(nsp_logits, next_sentence_label)

        sbo_logits = sbo_loss = None
        if self.cls.span_boundary is not None:
            if span_left is None or span_right is None or span_position is None:
                raise ValueError("this model has a span-boundary head: pass span_left, span_right and span_position "
                                 "(span masking produces them)")
            in_span = masked & (span_position >= 0)  # (B, T)
            rows, cols = in_span.nonzero(as_tuple=True)
            h = self.cls.span_boundary(z, rows, span_left[rows, cols], span_right[rows, cols], span_position[rows, cols])
            sbo_logits = self.cls.predictions.decoder(h) + self.cls.predictions.bias  # (M_span, V)
            sbo_target = labels[rows, cols]
            sbo_loss = _mean_cross_entropy(sbo_logits, sbo_target)
            loss = loss + sbo_loss
            metrics["sbo_accuracy"] = _accuracy(sbo_logits, sbo_target)
        return PretrainingOutput(loss=loss, mlm_logits=mlm_logits, nsp_logits=nsp_logits, sbo_logits=sbo_logits,
                                 mlm_loss=mlm_loss, nsp_loss=nsp_loss, sbo_loss=sbo_loss, metrics=metrics)

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """Head tensors with canonical names (``cls.*``), the tied decoder weight left out."""
        return {"cls." + k: v for k, v in self.cls.state_dict().items() if k != "predictions.decoder.weight"}

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, nsp: bool | None = None, strict: bool = True,
                        missing_heads: Literal["init", "raise"] = "init", **kwargs) -> "EncoderForPretraining":
        """Load an encoder and whatever pretraining heads its checkpoint has; missing heads start fresh (logged).

        Args:
            model_dir: an HF-format directory (resolve registry names first: ``ctxemb.models.hub.resolve_model_dir``).
            nsp: add the NSP head; None adds it when the checkpoint has one.
            strict: refuse checkpoints whose encoder tensors do not match the configuration.
            missing_heads: ``"init"`` starts heads the checkpoint lacks fresh (continued pretraining of a bare
                encoder); ``"raise"`` refuses a checkpoint without an MLM head (for queries such as fill-mask).
            kwargs: ``nsp_input`` (default: the saved model's), ``sbo``, ``max_span_length``,
                ``sparse_prediction`` (see the class).
        """
        encoder, heads = load_encoder_dir(model_dir, strict=strict)
        saved_input = read_json_file(Path(model_dir) / "config.json", "config file").get(NSP_INPUT_KEY)
        if saved_input is not None:
            kwargs.setdefault("nsp_input", saved_input)
        table = _MLM_HEAD_NAMES.get(encoder.config.model_type)
        if table is not None:  # the family's names -> cls.*
            heads = {**{k: v for k, v in heads.items() if k.startswith("cls.")},
                     **{"cls." + new: v for k, v in heads.items() if (new := _rename(k, table, True)) is not None}}
        heads = {k[len("cls."):]: v for k, v in heads.items()
                 if k.startswith("cls.") and k != "cls.predictions.decoder.weight"}
        if nsp is None:
            nsp = "seq_relationship.weight" in heads
        model = cls(encoder, nsp=nsp, **kwargs)
        own = model.cls.state_dict()
        wanted = {k for k in own if k != "predictions.decoder.weight"}
        fresh = sorted(wanted - set(heads))
        if missing_heads == "raise" and any(k.startswith("predictions.") for k in fresh):
            raise ValueError(f"{model_dir} has no masked-LM head (cls.predictions / lm_head tensors): it is a bare "
                             "encoder; continue pretraining it (ctxemb pretrain --init-from) to get one")
        if fresh:
            logger.info("checkpoint %s has no weights for %s: initialised fresh", model_dir, fresh)
        present = {k: v for k, v in heads.items() if k in wanted}
        present.update({k: own[k] for k in fresh})
        present["predictions.decoder.weight"] = encoder.embeddings.word_embeddings.weight.detach()
        load_weights_into(model.cls, present, strict=strict, source=f"{model_dir} (pretraining heads)")
        model.train(encoder.training)
        return model

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Save encoder and heads: transformers' ``BertForPreTraining`` (with NSP) or ``*ForMaskedLM`` loads it,
        and so do :func:`ctxemb.modeling.loading.load_encoder` and the ``Embedder``; a BERT NSP head on the raw [CLS] vector
        is saved with ``modeling_ctxemb.py`` instead (see the module docstring)."""
        mt = self.config.model_type
        extra: dict | None = None
        if self.has_nsp and self.nsp_input != "pooled":
            extra = {NSP_INPUT_KEY: self.nsp_input}
            if mt == "bert":  # transformers' other families have no NSP head: their *ForPreTraining is the MLM
                write_remote_code(out_dir)
                extra.update(remote_code_config(mt, "CtxembForPreTraining", {
                    "AutoModelForPreTraining": "CtxembForPreTraining",
                    "AutoModelForMaskedLM": "CtxembForMaskedLM"}, refusal=NSP_REFUSAL))
        arch = architecture_name(mt, "pretraining" if self.has_nsp and mt == "bert" else "masked_lm")
        heads = self.head_state_dict()
        table = _MLM_HEAD_NAMES.get(mt)
        if table is not None:  # cls.predictions.* under the family's names (NSP/SBO heads, ctxemb's own, stay cls.*)
            heads = {("cls." + k[4:] if (new := _rename(k[4:], table)) is None else new): v for k, v in heads.items()}
            if mt == "modernbert":  # transformers' ModernBERT ties the decoder in its own name
                heads["decoder.weight"] = self.encoder.embeddings.word_embeddings.weight
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads, architectures=[arch], config_extra=extra)


def _mean_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over rows, in float32; 0 (with a graph) when there is no row, so a batch in which
    nothing was masked still backpropagates."""
    if target.numel() == 0:
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float(), target)


def _accuracy(logits: torch.Tensor, target: torch.Tensor) -> float:
    if target.numel() == 0:
        return float("nan")
    return float((logits.detach().argmax(-1) == target).float().mean())
