"""One dropout probability for a whole model: :func:`set_dropout`.

``ctxemb finetune --dropout P`` sets it everywhere at once: the embeddings', attention's and feed-forward's dropouts,
the attention probabilities' (a float, not a module) and the head's. The model's config is updated too, so a saved
model states the probability it was trained with. Dropout 0 is sometimes advised for regression fine-tuning; on
STS-B with all-MiniLM-L6-v2 the checkpoint's 0.1 did best for the bi-encoder (dev Spearman 89.62 against 89.23 at 0,
89.56 at 0.2; ``benchmarks/results/search_stsb_dropout.md``).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from ctxemb.core.validation import check_probability
from ctxemb.models.encoder_config import EncoderConfig

__all__ = ["set_dropout"]

_CONFIG_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# float attributes that hold a dropout probability outside an nn.Dropout: ours (SelfAttention, ModernBertAttention)
# and transformers' (e.g. BertSdpaSelfAttention.dropout_prob)
_PROBABILITY_ATTRIBUTES = ("dropout_p", "dropout_prob", "classifier_dropout")


def set_dropout(model: nn.Module, p: float) -> nn.Module:
    """Set every dropout probability in ``model`` to ``p``, in place; returns ``model``.

    Covers every ``nn.Dropout`` (and its 1d/2d/3d/alpha variants), the probability attributes attention passes to
    ``scaled_dot_product_attention``, explicit ``classifier_dropout`` settings of heads, and the encoder configs
    (ours, frozen dataclasses, are replaced by a copy; a transformers config is updated), so the saved
    ``config.json`` records ``p``. Evaluation is unaffected (dropout is off in ``eval()`` mode whatever ``p`` is).

    Raises:
        ValueError: ``p`` is not a number in [0, 1).
    """
    p = check_probability(p, "dropout")
    replaced: dict[int, EncoderConfig] = {}
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.p = p
        for name in _PROBABILITY_ATTRIBUTES:
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, p)
        config = vars(module).get("config")  # held by the module itself (a wrapper's config is a property)
        if isinstance(config, EncoderConfig):
            if id(config) not in replaced:
                replaced[id(config)] = dataclasses.replace(config, **dict.fromkeys(_CONFIG_FIELDS, p))
            module.config = replaced[id(config)]
        elif config is not None and all(hasattr(config, f) for f in _CONFIG_FIELDS):  # a transformers config
            for f in _CONFIG_FIELDS:
                setattr(config, f, p)
    return model
