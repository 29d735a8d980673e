"""Pretraining heads over the encoder's last layer: masked LM (J&M 11.2.1), next-sentence prediction (11.2.2)
and SpanBERT's span-boundary objective (11.5.1, eq. 11.17-11.20).

Parameter names are the checkpoints': ``cls.predictions.transform.dense``, ``cls.predictions.transform.LayerNorm``,
``cls.predictions.decoder`` (tied to the word embeddings), ``cls.predictions.bias`` and ``cls.seq_relationship``
(RoBERTa/MPNet checkpoints say ``lm_head.*``; :mod:`ctxemb.modeling.checkpoint` maps the two).

Shapes: B batch, T tokens, M masked (predicted) rows, H hidden size, V vocabulary, P span positions.
"""

from __future__ import annotations

import torch
from torch import nn

from ctxemb.config import EncoderConfig
from ctxemb.modeling.encoder import ACTIVATIONS, Encoder


class EncoderWithHeads(nn.Module):
    """Base of the task models: the encoder under its checkpoint's base-model prefix (``bert.``, ``roberta.``,
    ``mpnet.``), so that ``state_dict()`` has the names of transformers' task models; heads are added beside it."""

    def __init__(self, encoder: Encoder):
        super().__init__()
        self.base_model_prefix = encoder.config.base_model_prefix
        self.add_module(self.base_model_prefix, encoder)

    @property
    def encoder(self) -> Encoder:
        return getattr(self, self.base_model_prefix)

    @property
    def config(self) -> EncoderConfig:
        return self.encoder.config

    # ---- fine-tuning regimes: subclasses list their heads in depth_modules()
    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        """(depth, name, module) from the input up, for freezing and layer-wise learning rates: depth 0 the
        embeddings (and MPNet's relative position bias, which every layer shares), depth i + 1 layer i (0-based),
        depth L + 1 the task head. Names are those of ``named_modules()``."""
        raise NotImplementedError(f"{type(self).__name__} does not list its modules by depth")

    def encoder_depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        """The encoder's part of :meth:`depth_modules`: embeddings at depth 0, layer i at depth i + 1."""
        enc, pre = self.encoder, self.base_model_prefix
        out: list[tuple[int, str, nn.Module]] = [(0, f"{pre}.embeddings", enc.embeddings)]
        if enc.encoder.relative_attention_bias is not None:
            out.append((0, f"{pre}.encoder.relative_attention_bias", enc.encoder.relative_attention_bias))
        out += [(i + 1, f"{pre}.encoder.layer.{i}", layer) for i, layer in enumerate(enc.encoder.layer)]
        return out

    def freeze_encoder(self):
        """Train the head only (feature extraction): embeddings and every layer get ``requires_grad=False``
        (``freeze_all_but_last(0)``). Dropout inside the encoder still follows ``train()``/``eval()``."""
        return self.freeze_all_but_last(0)

    def freeze_all_but_last(self, k: int):
        """Train the last ``k`` layers and the head; the embeddings and the first L - k layers are frozen
        (``requires_grad=False``), everything above them is made trainable.

        Raises:
            ValueError: ``k`` not in 0..L.
        """
        L = self.encoder.num_layers
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= L:
            raise ValueError(f"k must be an integer in 0..{L} (the number of layers), got {k!r}")
        for depth, _, module in self.depth_modules():
            module.requires_grad_(depth > L - k)
        return self


class PredictionHeadTransform(nn.Module):
    """h -> LayerNorm(act(W h + b)): the transform in front of the tied decoder."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(hidden)))


class MaskedLMHead(nn.Module):
    """A distribution over the vocabulary for each row: ``E^T LayerNorm(act(W h)) + b``, E the word embeddings.

    Runs on any leading shape: (B, T, H) for every token, or (M, H) for the masked rows only (sparse prediction:
    the vocabulary projection is the largest matmul of a small BERT, and only masked rows have a loss).
    """

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
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
