"""The base of every task model: the encoder under its checkpoint's base-model prefix, its modules by depth for
freezing and layer-wise learning rates (each family's own: BERT's ``encoder.layer``, ModernBERT's ``layers``,
ELECTRA's ``embeddings_project``), and ModernBERT's per-token prediction ``head`` that its token classification and
question-answering models share.

Shapes: B batch, T tokens, H hidden size, L layers.
"""

from __future__ import annotations

import logging
from typing import Mapping

import torch
from torch import nn

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.checkpoint import load_weights_into
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.family_heads import ModernBertPredictionHead, check_modernbert_head_config

logger = logging.getLogger(__name__)


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
        return encoder_depth_modules(self.encoder, self.base_model_prefix)

    def freeze_unused_pooler(self) -> None:
        """Set the pooler's parameters to ``requires_grad=False`` (saved unchanged) for heads that never read it, so
        optimizers and DDP skip it; nothing for families without a pooler (DistilBERT, ELECTRA, ModernBERT)."""
        if getattr(self.encoder, "pooler", None) is not None:
            self.encoder.pooler.requires_grad_(False)

    # ---- ModernBERT's per-token ``head`` (token classification, QA): transformers puts norm(gelu(dense(z)))
    # between the encoder and the linear map; the other families put nothing there.
    def _init_token_head(self) -> None:
        """Set ``self.head``: a :class:`ModernBertPredictionHead` for ModernBERT, else None."""
        self.head = ModernBertPredictionHead(self.config) if self.config.model_type == "modernbert" else None
        if self.head is not None:
            self.head.apply(self.encoder._init_weights)

    def _token_head(self, z: torch.Tensor) -> torch.Tensor:
        """(B, T, H) what the linear map reads: ``z`` itself, or ModernBERT's ``head(z)``."""
        return z if self.head is None else self.head(z)

    def _token_head_tensors(self) -> dict[str, torch.Tensor]:
        """The ``head.*`` tensors to save (none outside ModernBERT)."""
        return {} if self.head is None else {"head." + k: v for k, v in self.head.state_dict().items()}

    def _token_head_depth(self) -> list[tuple[int, str, nn.Module]]:
        return [] if self.head is None else [(self.encoder.num_layers + 1, "head", self.head)]

    def _load_token_head(self, heads: Mapping[str, torch.Tensor], raw: Mapping, source: str) -> None:
        """Load ModernBERT's ``head.*`` from a checkpoint's head tensors (rebuilt with a bias when it has one);
        a checkpoint without them keeps the fresh head (logged)."""
        if self.head is None:
            return
        saved = {k[len("head."):]: v for k, v in heads.items() if k.startswith("head.")}
        if not saved:
            logger.info("%s has no head.* weights: ModernBERT's prediction head is initialised fresh", source)
            return
        check_modernbert_head_config(raw, source)
        if ("dense.bias" in saved) != self.head.bias:
            self.head = ModernBertPredictionHead(self.config, bias="dense.bias" in saved).train(self.training)
        load_weights_into(self.head, saved, strict=True, source=f"{source} (head)")

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


def encoder_depth_modules(encoder: Encoder, prefix: str) -> list[tuple[int, str, nn.Module]]:
    """(depth, name, module) of an encoder of any native family, names under ``prefix``: depth 0 the embeddings
    (with ELECTRA's projection to the hidden size and MPNet's shared relative position bias), depth i + 1 block i
    (BERT's ``encoder.layer.i``, ModernBERT's ``layers.i``; ModernBERT's final LayerNorm goes with the last block).

    Raises:
        TypeError: an encoder that is not a native one (the transformers backend has no fine-tuning heads).
    """
    if not isinstance(encoder, Encoder):
        raise TypeError(f"fine-tuning needs a native ctxemb Encoder, got {type(encoder).__name__}")
    names = {id(m): n for n, m in encoder.named_modules()}
    out: list[tuple[int, str, nn.Module]] = [(0, f"{prefix}.embeddings", encoder.embeddings)]
    stack = getattr(encoder, "encoder", None)
    extras = [encoder.embeddings_project, getattr(stack, "relative_attention_bias", None)]
    out += [(0, f"{prefix}.{names[id(m)]}", m) for m in extras if m is not None]
    out += [(i + 1, f"{prefix}.{names[id(block)]}", block) for i, block in enumerate(encoder.blocks)]
    final = getattr(encoder, "final_norm", None)
    if final is not None:
        out.append((encoder.num_layers, f"{prefix}.final_norm", final))
    return out
