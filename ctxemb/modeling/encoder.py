"""A BERT-family bidirectional transformer encoder in plain PyTorch (Jurafsky & Martin 11.1, eq. 11.1-11.6).

Parameter names follow the BERT layout of Hugging Face checkpoints (``embeddings.word_embeddings``,
``encoder.layer.{i}.attention.self.query``, ...), so BERT, RoBERTa and ELECTRA checkpoints load unchanged; MPNet and
DistilBERT names are mapped in :mod:`ctxemb.modeling.checkpoint`. ModernBERT, whose block differs, is
:class:`ctxemb.modeling.modernbert.ModernBertEncoder`; ``Encoder(config)`` builds it for a ``modernbert`` config.

Shapes: B batch, T subword tokens, H hidden size, E embedding width (H, or ELECTRA's embedding_size), N attention heads,
D head size (H = N * D), L layers.
``hidden_states`` has L + 1 entries: index 0 is the embedding output, index -1 the last layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.modeling import fused_training
from ctxemb.models.encoder_config import EncoderConfig

def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU with the exact erf."""
    return F.gelu(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation (``gelu_new``, ``gelu_pytorch_tanh``)."""
    return F.gelu(x, approximate="tanh")


# module-level functions, not lambdas: a model holding one pickles (torch.save of the whole model, multiprocessing)
ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "relu": F.relu}


@dataclass
class EncoderOutput:
    """What the encoder returns.

    Attributes:
        last_hidden_state: (B, T, H) output of the last layer; (B, 1, H) when the encoder ran ``first_token_only``.
        pooler_output: (B, H) tanh(dense([CLS])), or None when not computed.
        hidden_states: the requested hidden states, each (B, T, H). With all of them (the default) there are L + 1:
            index 0 is the embedding output, -1 the last layer. ``hidden_state_indices`` says which they are.
        hidden_state_indices: the non-negative layer index of each entry of ``hidden_states``.
    """

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None
    hidden_states: tuple[torch.Tensor, ...]
    hidden_state_indices: tuple[int, ...]


class Embeddings(nn.Module):
    """Token + absolute position (+ segment) embeddings, then LayerNorm and dropout (eq. 11.1).

    Their width E is the hidden size, or ELECTRA's ``embedding_size`` (the encoder then projects them to H).
    """

    #: the ops of the fused LayerNorm + dropout when training, or None: the composed ops
    #: (:func:`ctxemb.modeling.fused_training.set_fused_training`)
    fused_training_ops = None

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        width = config.embedding_size or config.hidden_size  # E
        padding_idx = config.pad_token_id if config.position_offset else None
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width, padding_idx=padding_idx)
        if config.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        else:
            self.token_type_embeddings = None
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) position ids. BERT, DistilBERT and ELECTRA count from 0; RoBERTa/MPNet count real tokens from
        pad_token_id + 1 and give padding the padding index (whose embedding is never trained)."""
        if self.config.position_offset == 0:
            return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        is_token = (input_ids != self.config.pad_token_id).long()
        return torch.cumsum(is_token, dim=1) * is_token + self.config.pad_token_id

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids(input_ids))
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type_embeddings(token_type_ids)
        if (ops := fused_training.use_fused(self, self.dropout.p, x)) is not None:
            return fused_training.layer_norm_dropout(x, self.LayerNorm, self.dropout.p, ops=ops)  # (B, T, E)
        return self.dropout(self.LayerNorm(x))  # (B, T, E)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention with no causal mask (eq. 11.2-11.4)."""

    #: the ops of the fused attention when training, or None: SDPA
    #: (:func:`ctxemb.modeling.fused_training.set_fused_training`)
    fused_training_ops = None

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor, queries: int | None = None) -> torch.Tensor:
        """(B, T, H) -> (B, Q, H): every position attends to all T keys; with ``queries`` only the first Q
        positions ask (Q = T when None)."""
        B, T, H = x.shape
        Q = T if queries is None else queries
        # (B, T, H) -> (B, N, T, D); the queries (B, N, Q, D)
        q = self.query(x if Q == T else x[:, :Q]).view(B, Q, self.num_heads, self.head_size).transpose(1, 2)
        k, v = (proj(x).view(B, T, self.num_heads, self.head_size).transpose(1, 2) for proj in (self.key, self.value))
        if Q != T and attn_mask.shape[-2] != 1:  # a per-query mask (MPNet's position bias): the asking rows
            attn_mask = attn_mask[..., :Q, :]
        if Q == T and (ops := fused_training.use_fused(self, self.dropout_p, q, attn_mask)) is not None:
            y = fused_training.attention(q, k, v, attn_mask, self.dropout_p, ops=ops)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                               dropout_p=self.dropout_p if self.training else 0.0)
        return y.transpose(1, 2).reshape(B, Q, H)


class AttentionOutput(nn.Module):
    """Output projection, dropout, residual and LayerNorm after attention (post-LN, eq. 11.5)."""

    #: the ops of the fused dropout + residual add + LayerNorm when training, or None: the composed ops
    #: (:func:`ctxemb.modeling.fused_training.set_fused_training`)
    fused_training_ops = None

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if (ops := fused_training.use_fused(self, self.dropout.p, y, residual)) is not None:
            return fused_training.dropout_add_layer_norm(self.dense(y), residual, self.LayerNorm, self.dropout.p,
                                                         ops=ops)
        return self.LayerNorm(residual + self.dropout(self.dense(y)))


class Attention(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.self = SelfAttention(config)
        self.output = AttentionOutput(config)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor, queries: int | None = None) -> torch.Tensor:
        if queries is None:
            return self.output(self.self(x, attn_mask), x)
        return self.output(self.self(x, attn_mask, queries), x[:, :queries])


class Intermediate(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class Output(nn.Module):
    """Feed-forward down-projection, dropout, residual and LayerNorm (eq. 11.6)."""

    #: the ops of the fused dropout + residual add + LayerNorm when training, or None: the composed ops
    #: (:func:`ctxemb.modeling.fused_training.set_fused_training`)
    fused_training_ops = None

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if (ops := fused_training.use_fused(self, self.dropout.p, h, residual)) is not None:
            return fused_training.dropout_add_layer_norm(self.dense(h), residual, self.LayerNorm, self.dropout.p,
                                                         ops=ops)
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class Layer(nn.Module):
    """One post-LN transformer block: x = LN(x + attn(x)); x = LN(x + ffn(x)).

    ``layer(x, mask, queries=Q)`` computes only the first Q positions' outputs (B, Q, H), all T positions still
    serving as keys and values: ``layer(x, mask)[:, :Q]`` up to rounding, for a fraction of the work.
    """

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = Output(config)

    @property
    def takes_queries(self) -> bool:
        """Whether the block can compute a leading slice of positions alone (``queries``): not once its attention
        has been replaced (the int8 runtime's); :meth:`Encoder.forward` then cuts the full block's output."""
        return type(self.attention.self) is SelfAttention

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor, queries: int | None = None) -> torch.Tensor:
        x = self.attention(x, attn_mask, queries)
        return self.output(self.intermediate(x), x)


def relative_position_buckets(relative_position: torch.Tensor, num_buckets: int = 32,
                              max_distance: int = 128) -> torch.Tensor:
    """T5-style buckets of (key - query) distances, as MPNet uses them.

    Half of the buckets are for keys before the query, half for keys after it; within each half, small distances
    get a bucket each and larger ones share logarithmically wider buckets up to ``max_distance``.
    """
    half = num_buckets // 2
    n = -relative_position
    buckets = (n < 0).long() * half
    n = n.abs()
    max_exact = half // 2
    # Clamp to 1 before the log: those entries take the exact branch anyway, and log(0) would warn.
    log_ratio = torch.log(n.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (half - max_exact)).long()).clamp(max=half - 1)
    return buckets + torch.where(n < max_exact, n, large)


class TransformerStack(nn.Module):
    """The L layers, plus MPNet's relative position bias that all layers share."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        if config.model_type == "mpnet":
            self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets,
                                                        config.num_attention_heads)
        else:
            self.relative_attention_bias = None

    def position_bias(self, T: int, device: torch.device) -> torch.Tensor:
        """(1, N, T, T) additive attention bias from bucketed relative positions (MPNet), computed once per batch."""
        pos = torch.arange(T, device=device)
        buckets = relative_position_buckets(pos[None, :] - pos[:, None],
                                            num_buckets=self.config.relative_attention_num_buckets)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector BERT's next-sentence head was trained on."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, last_hidden_state: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(last_hidden_state[:, 0]))


def resolve_hidden_state_indices(layers: Sequence[int], num_layers: int) -> list[int]:
    """Map hidden-state indices (0 = embedding output, -1 = last layer) of an encoder with ``num_layers`` layers to
    0..L, with a clear error."""
    L = num_layers
    out = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, int) or not -(L + 1) <= i <= L:
            raise ValueError(
                f"layer index {i!r} is out of range: this encoder has {L + 1} hidden states, so valid indices "
                f"are {-(L + 1)}..{L} (0 = embedding output, -1 = last layer)"
            )
        out.append(i % (L + 1))
    return out


class Encoder(nn.Module):
    """BERT / RoBERTa / MPNet / DistilBERT / ELECTRA encoder giving every layer's hidden states.

    ``Encoder(config)`` with a ``modernbert`` config builds a :class:`~ctxemb.modeling.modernbert.ModernBertEncoder`
    (a subclass with the same interface). Subclasses change the family's body through :meth:`_embed`,
    :meth:`_layer_context`, :attr:`blocks` and :meth:`_final`; :meth:`forward` is shared.

    Example:
        >>> enc = Encoder(EncoderConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        ...                             intermediate_size=64, vocab_size=100))
        >>> out = enc(torch.tensor([[2, 5, 7, 3]]))
        >>> len(out.hidden_states), out.last_hidden_state.shape
        (3, torch.Size([1, 4, 32]))
    """

    #: The subclasses that build other families' bodies, by ``model_type``. ModernBERT's module registers itself;
    #: the package ``ctxemb.modeling`` imports it, so it is registered before any encoder is built.
    family_classes: dict[str, type["Encoder"]] = {}

    def __new__(cls, config: EncoderConfig | None = None, *args, **kwargs):
        if cls is Encoder and isinstance(config, EncoderConfig):
            cls = Encoder.family_classes.get(config.model_type, Encoder)
        return super().__new__(cls)

    def __init__(self, config: EncoderConfig):
        super().__init__()
        if config.model_type == "modernbert":
            raise ValueError("a modernbert config needs ctxemb.modeling.modernbert.ModernBertEncoder (which "
                             "Encoder(config) builds once that module is imported)")
        self.config = config
        self.embeddings = Embeddings(config)
        if config.embedding_size is not None and config.embedding_size != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)  # ELECTRA: E -> H
        else:
            self.embeddings_project = None
        self.encoder = TransformerStack(config)
        self.pooler = Pooler(config) if config.has_pooler else None
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    def resolve_layers(self, layers: Sequence[int]) -> list[int]:
        """Map hidden-state indices (0 = embedding output, -1 = last layer) to 0..L, with a clear error."""
        return resolve_hidden_state_indices(layers, self.num_layers)

    # ---- the family's body (overridden by ModernBertEncoder) ----------------------------------------------
    def _embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """Hidden state 0 (B, T, H): the embeddings (ELECTRA: projected to H)."""
        x = self.embeddings(input_ids, token_type_ids)
        return x if self.embeddings_project is None else self.embeddings_project(x)

    def _layer_context(self, attention_mask: torch.Tensor, x: torch.Tensor):
        """What every block takes besides its input: here the additive attention mask."""
        return self.attention_mask(attention_mask, x.dtype)

    @property
    def blocks(self) -> nn.ModuleList:
        """The L transformer blocks, each called as ``block(x, context)``."""
        return self.encoder.layer

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        """Applied to the last block's output (ModernBERT's final LayerNorm); nothing here."""
        return x

    def attention_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask for SDPA: (B, 1, 1, T) for BERT/RoBERTa, (B, N, T, T) with MPNet's position bias."""
        B, T = attention_mask.shape
        neg = torch.finfo(dtype).min
        mask = torch.zeros(B, 1, 1, T, dtype=dtype, device=attention_mask.device)
        mask = mask.masked_fill(attention_mask[:, None, None, :] == 0, neg)
        if self.encoder.relative_attention_bias is not None:
            mask = mask + self.encoder.position_bias(T, attention_mask.device).to(dtype)
        return mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, output_hidden_states: bool = True,
                hidden_state_indices: Sequence[int] | None = None, compute_pooler: bool = True,
                first_token_only: bool = False) -> EncoderOutput:
        """Run the encoder.

        Args:
            input_ids: (B, T) token ids.
            attention_mask: (B, T), 1 for real tokens, 0 for padding; all ones when None.
            token_type_ids: (B, T) segment ids (BERT); zeros when None.
            output_hidden_states: return hidden states (all L + 1 unless ``hidden_state_indices`` is given).
            hidden_state_indices: keep only these hidden states (0 = embedding output, -1 = last layer); the
                others are dropped as soon as the next layer has used them, which saves memory.
            compute_pooler: compute ``pooler_output`` (None for families without a pooler: DistilBERT, ELECTRA,
                ModernBERT).
            first_token_only: the last layer computes the first position alone (what a [CLS] head reads), all
                positions still serving as its keys and values: ``last_hidden_state`` (and hidden state L) is
                then (B, 1, H), the full pass's ``[:, :1]`` up to rounding. In MiniLM's six layers this skips about a
                seventh of the work of a training step.

        Returns:
            EncoderOutput.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be 2-D (batch, tokens), got shape {tuple(input_ids.shape)}")
        B, T = input_ids.shape
        if B == 0 or T == 0:
            raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}): expected at least one token")
        if T > self.config.max_tokens:
            raise ValueError(
                f"sequence length {T} exceeds the model's maximum of {self.config.max_tokens} tokens; split long "
                "inputs into windows (the tokenizer and Embedder do this)"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        keep = set(self.resolve_layers(hidden_state_indices)) if hidden_state_indices is not None else None
        if not output_hidden_states:
            keep = set()

        x = self._embed(input_ids, token_type_ids)
        context = self._layer_context(attention_mask, x)
        kept: list[torch.Tensor] = []
        kept_idx: list[int] = []
        if keep is None or 0 in keep:
            kept.append(x)
            kept_idx.append(0)
        L = self.num_layers
        for i, layer in enumerate(self.blocks, start=1):
            if i == L and first_token_only:  # blocks that cannot compute a slice alone are cut after
                x = layer(x, context, queries=1) if getattr(layer, "takes_queries", False) else layer(x, context)[:, :1]
            else:
                x = layer(x, context)
            if i == L:
                x = self._final(x)
            if keep is None or i in keep:
                kept.append(x)
                kept_idx.append(i)
        pooled = self.pooler(x) if compute_pooler and self.pooler is not None else None
        return EncoderOutput(last_hidden_state=x, pooler_output=pooled, hidden_states=tuple(kept),
                             hidden_state_indices=tuple(kept_idx))
