"""ModernBERT (Warner et al. 2024) in plain PyTorch: the encoder with BERT's interface and ModernBERT's body.

What differs from BERT: no position or segment embeddings (rotary positions in every attention layer instead, with
base ``global_rope_theta`` in global layers and ``local_rope_theta`` in local ones); pre-LayerNorm blocks
(``x = x + attn(norm(x)); x = x + mlp(norm(x))``, no norm before the first block's attention) and a final LayerNorm;
a GeGLU feed-forward (``Wo(gelu(a) * g)`` with ``[a; g] = Wi(x)``); one fused ``Wqkv`` projection; attention that is
global in the layers ``layer_types`` marks "full_attention" and limited to tokens at most ``local_attention // 2``
away in the others; biases only where the configuration asks for them.

Parameter names are those of transformers' ``ModernBertModel`` (``embeddings.tok_embeddings``, ``embeddings.norm``,
``layers.{i}.attn_norm``, ``layers.{i}.attn.Wqkv``, ``layers.{i}.attn.Wo``, ``layers.{i}.mlp_norm``,
``layers.{i}.mlp.Wi``, ``layers.{i}.mlp.Wo``, ``final_norm``), so its checkpoints load unchanged. Every projection is
an ordinary ``nn.Linear``, so the int8 path (:func:`ctxemb.runtime.backends.quantize_int8`) applies as to BERT.

Shapes: B batch, T tokens, H hidden size, N heads, D head size (H = N * D), I intermediate size.
``hidden_states`` has L + 1 entries: index 0 is the embedding output, -1 the last layer after the final LayerNorm
(as transformers returns them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.encoder import ACTIVATIONS, Encoder


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm and dropout (positions enter in attention)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.drop = nn.Dropout(config.hidden_dropout_prob)

    @property
    def word_embeddings(self) -> nn.Embedding:
        """The token embeddings under BERT's name (what an MLM decoder ties to)."""
        return self.tok_embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))  # (B, T, H)


def rotary_tables(T: int, head_size: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, D) cosines and sines of positions 0..T-1 at frequencies ``theta ** (-2j / D)``, each frequency twice
    (the halves layout of GPT-NeoX and transformers), in float32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_size, 2, dtype=torch.float) / head_size))
    freqs = torch.arange(T, device=device).float()[:, None] * inv_freq.to(device)[None, :]  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, N, T, D) queries or keys by their positions, in float32 (as transformers does)."""
    return (x.float() * cos + _rotate_half(x.float()) * sin).to(x.dtype)


class ModernBertAttention(nn.Module):
    """Multi-head self-attention with rotary positions on queries and keys; the mask decides global or local."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout_p = config.attention_probs_dropout_prob
        self.out_drop = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, H = x.shape
        qkv = self.Wqkv(x).view(B, T, 3, self.num_heads, self.head_size)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=2))  # each (B, N, T, D)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.dropout_p if self.training else 0.0)
        return self.out_drop(self.Wo(y.transpose(1, 2).reshape(B, T, H)))


class ModernBertMLP(nn.Module):
    """GeGLU feed-forward: Wo(act(a) * g) with [a; g] = Wi(x), Wi: H -> 2I, Wo: I -> H."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACTIVATIONS[config.hidden_act]
        self.drop = nn.Dropout(config.hidden_dropout_prob)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, gate = self.Wi(x).chunk(2, dim=-1)  # (B, T, I) each
        return self.Wo(self.drop(self.act(a) * gate))


class ModernBertLayer(nn.Module):
    """One pre-LN block: x = x + attn(norm(x)); x = x + mlp(norm(x)). Block 0 has no norm before attention (the
    embeddings end in one)."""

    def __init__(self, config: EncoderConfig, index: int):
        super().__init__()
        self.attention_type = config.layer_types[index]
        if index == 0:
            self.attn_norm = nn.Identity()
        else:
            self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.attn = ModernBertAttention(config)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)

    def forward(self, x: torch.Tensor, context: dict[str, tuple[torch.Tensor, ...]]) -> torch.Tensor:
        mask, cos, sin = context[self.attention_type]
        x = x + self.attn(self.attn_norm(x), mask, cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertEncoder(Encoder):
    """ModernBERT with the :class:`~ctxemb.modeling.encoder.Encoder` interface (``forward``, ``resolve_layers``,
    ``num_layers``, :class:`~ctxemb.modeling.encoder.EncoderOutput`); no pooler. ``Encoder(config)`` builds it for a
    ``modernbert`` config.

    Example:
        >>> cfg = EncoderConfig(model_type="modernbert", vocab_size=100, hidden_size=32, num_hidden_layers=3,
        ...                     num_attention_heads=4, intermediate_size=48, local_attention=8)
        >>> out = Encoder(cfg)(torch.tensor([[2, 5, 7, 3]]))
        >>> type(out.hidden_states[0]).__name__, len(out.hidden_states)
        ('Tensor', 4)
    """

    def __init__(self, config: EncoderConfig):
        if config.model_type != "modernbert":
            raise ValueError(f"ModernBertEncoder needs a modernbert config, got model_type {config.model_type!r}")
        nn.Module.__init__(self)  # not Encoder.__init__: none of BERT's modules
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)
        self.pooler = None
        self.embeddings_project = None
        self.apply(self._init_weights)

    def _embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        return self.embeddings(input_ids)  # no segments: token_type_ids are ignored, as transformers does

    def _layer_context(self, attention_mask: torch.Tensor, x: torch.Tensor) -> dict[str, tuple[torch.Tensor, ...]]:
        """Per kind of layer: the additive mask ((B, 1, 1, T) global; (B, 1, T, T) local: padding and keys more than
        ``local_attention // 2`` away) and the rotary tables (T, D) with its base."""
        B, T = attention_mask.shape
        device, dtype = attention_mask.device, x.dtype
        neg = torch.finfo(dtype).min
        keys = attention_mask[:, None, None, :] != 0  # (B, 1, 1, T)
        pos = torch.arange(T, device=device)
        near = (pos[None, :] - pos[:, None]).abs() <= self.config.local_attention // 2  # (T, T)
        # One where() per mask: adding two large negatives would overflow to -inf and a fully masked (padding) row
        # would then give NaN, which attention weights of 0 do not cancel.
        zero = torch.zeros((), dtype=dtype, device=device)
        context = {}
        for kind, theta, allowed in (("full_attention", self.config.global_rope_theta, keys),
                                     ("sliding_attention", self.config.local_rope_theta, keys & near[None, None])):
            if kind in self.config.layer_types:
                cos, sin = rotary_tables(T, self.config.head_size, theta, device)
                context[kind] = (torch.where(allowed, zero, neg), cos, sin)
        return context

    @property
    def blocks(self) -> nn.ModuleList:
        return self.layers

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(x)

    def attention_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The global layers' additive mask (B, 1, 1, T); local layers add their window (see :meth:`_layer_context`)."""
        neg = torch.finfo(dtype).min
        return torch.zeros(attention_mask.shape[0], 1, 1, attention_mask.shape[1], dtype=dtype,
                           device=attention_mask.device).masked_fill(attention_mask[:, None, None, :] == 0, neg)


Encoder.family_classes["modernbert"] = ModernBertEncoder
