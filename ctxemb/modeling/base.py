"""Pretraining heads over the encoder's last layer: masked LM (J&M 11.2.1), next-sentence prediction (11.2.2)
and SpanBERT's span-boundary objective (11.5.1, eq. 11.17-11.20).

Parameter names are the checkpoints': ``cls.predictions.transform.dense``, ``cls.predictions.transform.LayerNorm``,
``cls.predictions.decoder`` (tied to the word embeddings), ``cls.predictions.bias`` and ``cls.seq_relationship``
(RoBERTa/MPNet checkpoints say ``lm_head.*``; :mod:`ctxemb.modeling.checkpoint` maps the two).

Shapes: B batch, T tokens, M masked (predicted) rows, H hidden size, V vocabulary, P span positions.
"""

from __future__ import annotations

from torch import nn

from ctxemb.config import EncoderConfig
from ctxemb.modeling.encoder import Encoder


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
