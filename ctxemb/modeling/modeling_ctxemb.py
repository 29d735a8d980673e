"""ctxemb's task heads for transformers' Auto classes, loaded with ``trust_remote_code=True``.

ctxemb writes this file, unchanged, beside every model whose head transformers has no class for
(:mod:`ctxemb.modeling.remote_code`); its ``config.json`` then says ``"model_type": "ctxemb"`` (a type transformers
does not know, so that it never builds its own class and silently drops the head), the encoder's family under
``ctxemb_model_type`` and the classes below under ``auto_map``. Self-contained: it imports torch and transformers
only, never ctxemb.

- ``AutoModel``: the encoder (transformers' own class for the family, e.g. ``BertModel``), as for any task model.
- ``AutoModelForSequenceClassification`` (and ``pipeline("text-classification")``): the ``"cls"`` head,
  ``classifier(dropout(h_CLS))`` on the raw [CLS] vector, or the ``"mean"`` head, ``classifier(dropout(mean of h
  over the non-padding tokens))``: the logits ctxemb computes.
- Heads that no Auto class can reproduce (a CRF decoded over words, a span classifier, NSP on the raw [CLS]
  vector) map their Auto class to a class that refuses to load, naming ctxemb and saying why
  (``ctxemb_transformers_refusal``). The MLM of such a pretrained BERT is BERT's own: its ``AutoModelForMaskedLM``
  is transformers' ``BertForMaskedLM``.

Shapes: B batch, T tokens, H hidden size, C outputs.
"""

import inspect

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

FAMILY_KEY = "ctxemb_model_type"
HEAD_KEY = "ctxemb_classifier_head"
REFUSAL_KEY = "ctxemb_transformers_refusal"
# config.json keys that describe this wrapper, not the family's encoder
_OWN_KEYS = ("model_type", "auto_map", "architectures", "transformers_version", "_name_or_path", FAMILY_KEY)


class CtxembConfig(PretrainedConfig):
    """The saved ``config.json``: the family's encoder keys, ``ctxemb_model_type`` and the head's keys."""

    model_type = "ctxemb"


def family_config(config: PretrainedConfig) -> PretrainedConfig:
    """transformers' configuration of the encoder's family (``BertConfig``, ...) from the saved keys."""
    keys = {k: v for k, v in config.to_dict().items() if k not in _OWN_KEYS}
    return AutoConfig.for_model(getattr(config, FAMILY_KEY), **keys)


class CtxembPreTrainedModel(PreTrainedModel):
    """The family's encoder under its own prefix (``bert``, ``roberta``, ``model``, ...), as the weights name it."""

    config_class = CtxembConfig
    base_model_prefix = ""

    def __init__(self, config: CtxembConfig):
        super().__init__(config)
        encoder = AutoModel.from_config(family_config(config))
        self.base_model_prefix = encoder.base_model_prefix
        self.add_module(self.base_model_prefix, encoder)
        self._takes_token_types = "token_type_ids" in inspect.signature(encoder.forward).parameters

    @property
    def encoder_model(self) -> PreTrainedModel:
        return getattr(self, self.base_model_prefix)

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        if self._takes_token_types and token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self.encoder_model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


class CtxembModel(CtxembPreTrainedModel):
    """``AutoModel``: the encoder's outputs."""

    def __init__(self, config: CtxembConfig):
        super().__init__(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        return self.encode(input_ids, attention_mask, token_type_ids, **kwargs)


class CtxembForSequenceClassification(CtxembPreTrainedModel):
    """``AutoModelForSequenceClassification``: ctxemb's ``"cls"`` or ``"mean"`` head over the encoder."""

    def __init__(self, config: CtxembConfig):
        super().__init__(config)
        self.head = getattr(config, HEAD_KEY, None)
        if self.head not in ("cls", "mean"):
            raise ValueError(f"ctxemb's {type(self).__name__} reads a 'cls' or 'mean' head; this config says "
                             f"{HEAD_KEY}={self.head!r}")
        self.num_labels = config.num_labels
        p = getattr(config, "classifier_dropout", None)
        if p is None:
            p = next((getattr(config, k) for k in ("hidden_dropout_prob", "dropout", "mlp_dropout")
                      if getattr(config, k, None) is not None), 0.1)
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(self.encoder_model.config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        out = self.encode(input_ids, attention_mask, token_type_ids, **kwargs)
        z = out[0]  # (B, T, H)
        if self.head == "cls":
            pooled = z[:, 0]
        else:
            m = attention_mask.to(z.dtype).unsqueeze(-1)  # (B, T, 1)
            pooled = (z * m).sum(1) / m.sum(1).clamp(min=1.0)
        logits = self.classifier(self.dropout(pooled))  # (B, C)
        loss = None
        if labels is not None:
            if self.config.problem_type == "regression" or self.num_labels == 1:
                loss = nn.functional.mse_loss(logits.float().squeeze(-1), labels.float())
            elif self.config.problem_type == "multi_label_classification":
                loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
            else:
                loss = nn.functional.cross_entropy(logits.float().view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=getattr(out, "hidden_states", None),
                                        attentions=getattr(out, "attentions", None))


class _Refused(PreTrainedModel):
    """An Auto class whose predictions would differ from ctxemb's: loading raises, saying why and what to use."""

    config_class = CtxembConfig
    what = "this Auto class"

    def __init__(self, config: CtxembConfig, *args, **kwargs):
        reason = getattr(config, REFUSAL_KEY, None) or "its head has no transformers equivalent"
        raise ValueError(
            f"this model was saved by ctxemb and cannot load as transformers' {self.what}: {reason}, so its "
            "predictions would differ from ctxemb's. Load it with ctxemb instead (the from_pretrained of its model "
            "class in ctxemb.modeling, or the ctxemb command that made it); AutoModel.from_pretrained(DIR, "
            "trust_remote_code=True) gives its encoder.")


class CtxembForTokenClassification(_Refused):
    what = "AutoModelForTokenClassification"


class CtxembForSpanClassification(_Refused):
    what = "AutoModelForTokenClassification"


class CtxembForPreTraining(_Refused):
    what = "AutoModelForPreTraining"


class CtxembForMaskedLM(PreTrainedModel):
    """``AutoModelForMaskedLM`` of a model whose MLM head is the family's own: transformers' class for it (e.g.
    ``BertForMaskedLM``), built from the family's configuration."""

    config_class = CtxembConfig

    def __new__(cls, config: CtxembConfig, *args, **kwargs):
        return AutoModelForMaskedLM.from_config(family_config(config))
