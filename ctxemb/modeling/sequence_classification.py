"""Sequence classification and regression on top of the encoder (J&M 11.4.2), with fine-tuning regimes.

Three heads map the encoder output to C logits:

- ``"checkpoint"``: what transformers' ``*ForSequenceClassification`` computes, with its tensor names, so saved
  models load in ``AutoModelForSequenceClassification`` and fine-tuned checkpoints from the hub load here.
  BERT: ``classifier(dropout(pooler(h)))`` with the tanh pooler ``bert.pooler.dense``; RoBERTa, XLM-R and MPNet:
  ``classifier.out_proj(dropout(tanh(classifier.dense(dropout(h_CLS)))))`` (their checkpoints have no pooler);
  ELECTRA the same with GELU; DistilBERT ``classifier(dropout(relu(pre_classifier(h_CLS))))``; ModernBERT
  ``classifier(drop(head(pooled)))`` (:mod:`ctxemb.modeling.family_heads`).
- ``"cls"``: the book's y = softmax(W_C z_CLS) (eq. 11.13): ``classifier(dropout(h_CLS))`` on the raw [CLS] output.
- ``"mean"``: ``classifier(dropout(mean of h over the non-padding tokens))``, for encoders trained as sentence
  embedders with mean pooling (all-MiniLM-L6-v2, all-mpnet-base-v2), whose [CLS] vector was never trained alone.

``"checkpoint"`` models load in transformers' ``AutoModelForSequenceClassification`` as its own class. transformers
has no class for the other two (it would put their ``classifier`` behind BERT's pooler, silently giving other
logits), so they are saved with ``"model_type": "ctxemb"`` and ``modeling_ctxemb.py``
(:mod:`ctxemb.modeling.remote_code`): ``AutoModelForSequenceClassification.from_pretrained(dir,
trust_remote_code=True)`` computes ctxemb's logits, and without ``trust_remote_code`` transformers refuses to load
them. The head is recorded as ``ctxemb_classifier_head``.

Losses: cross-entropy for ``problem="classification"``, mean squared error for ``problem="regression"`` with one
output (STS-B), as transformers' ``single_label_classification`` and ``regression``. A regression model may instead
train with ``regression_loss="bce"``: the gold score divided by ``score_scale`` (5 for STS-B) is the target of a
sigmoid cross-entropy, as sentence-transformers' cross-encoders train on STS-B; its predicted score is then
``score_scale * sigmoid(logit)`` (:meth:`EncoderForSequenceClassification.regression_scores`). The logit alone is
what transformers computes from the saved model; ``config.json`` records the loss and the scale, and the sigmoid for
sentence-transformers' ``CrossEncoder``.

Fine-tuning regimes: :meth:`EncoderForSequenceClassification.freeze_encoder` (feature extraction),
:meth:`~EncoderForSequenceClassification.freeze_all_but_last`, and layer-wise learning-rate decay with
``make_optimizer(layerwise_lr_groups(model, decay, weight_decay), lr=...)`` from :mod:`ctxemb.training.optim`
(which reads :meth:`~EncoderForSequenceClassification.depth_modules`; modeling does not import training).

Shapes: B batch, T tokens, H hidden size, C outputs (classes, or 1 for regression), L layers.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ctxemb.core.validation import check_choice, read_json_file
from ctxemb.modeling.architectures import architecture_name
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.contrastive_loss import cosent_loss
from ctxemb.modeling.checkpoint import load_encoder_dir, load_weights_into, save_pretrained
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.remote_code import remote_code_config, write_remote_code
from ctxemb.modeling.family_heads import (check_modernbert_head_config, checkpoint_sequence_head, from_checkpoint_names,
                                          modernbert_head_config, sequence_head_names, to_checkpoint_names)
from ctxemb.models.head_options import PAIR_SIMILARITY_LOSSES, REGRESSION_LOSSES

logger = logging.getLogger(__name__)

Problem = Literal["classification", "regression"]
Head = Literal["checkpoint", "cls", "mean"]
PROBLEMS: tuple[str, ...] = ("classification", "regression")
HEADS: tuple[str, ...] = ("checkpoint", "cls", "mean")

# transformers' ``problem_type`` values in config.json for our two problems.
_PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression"}
# config.json key recording which head a saved model has (absent in transformers' checkpoints: "checkpoint").
HEAD_CONFIG_KEY = "ctxemb_classifier_head"
# config.json keys of a regression model trained with regression_loss="bce": the loss and the score scale.
REGRESSION_LOSS_KEY = "ctxemb_regression_loss"
SCORE_SCALE_KEY = "ctxemb_score_scale"
# REGRESSION_LOSSES (the cross-encoder's) and PAIR_SIMILARITY_LOSSES (the bi-encoder's) live in
# ctxemb.models.head_options (read by the fine-tuning configuration without torch)


@dataclass
class SequenceClassifierOutput:
    """What :class:`EncoderForSequenceClassification` returns.

    Attributes:
        loss: cross-entropy or MSE averaged over the batch (scalar), or None without labels.
        logits: (B, C) class logits, or (B, 1) predicted scores for regression.
        metrics: floats for logging: ``accuracy`` for classification with labels.
    """

    loss: torch.Tensor | None
    logits: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class EncoderForSequenceClassification(EncoderWithHeads):
    """An :class:`Encoder` with a sequence classification (or regression) head.

    ``state_dict()`` has the names of transformers' checkpoints: the encoder under ``bert.``/``roberta.``/``mpnet.``,
    the head under ``classifier.``.

    Args:
        encoder: a pretrained encoder (or a fresh one); the model owns it from now on.
        num_labels: C, the number of classes; 1 for regression.
        problem: ``"classification"`` (cross-entropy, labels are class ids) or ``"regression"`` (MSE, float labels).
        head: ``"checkpoint"``, ``"cls"`` or ``"mean"`` (see the module docstring); only ``"checkpoint"`` loads in
            transformers' ``AutoModelForSequenceClassification`` without ``trust_remote_code``.
        classifier_dropout: dropout before the classifier (and inside RoBERTa/MPNet's head); the encoder's
            ``hidden_dropout_prob`` when None, as in transformers.
        id2label: class names, ``{0: "negative", ...}``; ``LABEL_i`` when None.
        regression_loss: ``"mse"`` on the raw output, or ``"bce"`` on ``sigmoid(logit)`` against
            ``label / score_scale`` (labels must then lie in [0, score_scale]); regression only.
        score_scale: the largest gold score (5 for STS-B); used by ``"bce"`` only.

    The pooler is used only by BERT's ``"checkpoint"`` head; elsewhere its parameters are set to
    ``requires_grad=False`` so that optimizers and DDP skip it (it is still saved, unchanged).

    Raises:
        ValueError: an unknown ``problem``/``head``, ``num_labels`` < 1 (or != 1 for regression, < 2 for
            classification), ``classifier_dropout`` outside [0, 1), ``id2label`` whose keys are not 0..C-1,
            ``regression_loss`` unknown (or not ``"mse"`` for classification), or ``score_scale`` not a positive
            finite number.
    """

    def __init__(self, encoder: Encoder, *, num_labels: int, problem: Problem, head: Head = "checkpoint",
                 classifier_dropout: float | None = None, id2label: Mapping[int, str] | None = None,
                 regression_loss: str = "mse", score_scale: float = 1.0):
        check_choice(problem, "problem", PROBLEMS)
        check_choice(head, "head", HEADS)
        check_choice(regression_loss, "regression_loss", REGRESSION_LOSSES)
        if regression_loss != "mse" and problem != "regression":
            raise ValueError(f"regression_loss={regression_loss!r} is for problem='regression'; got problem={problem!r}")
        if (isinstance(score_scale, bool) or not isinstance(score_scale, (int, float)) or not math.isfinite(score_scale)
                or score_scale <= 0):
            raise ValueError(f"score_scale must be a positive finite number; got {score_scale!r}")
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer, got {num_labels!r}")
        if problem == "regression" and num_labels != 1:
            raise ValueError(f"regression predicts one score: num_labels must be 1, got {num_labels}")
        if problem == "classification" and num_labels < 2:
            raise ValueError(f"classification needs num_labels >= 2, got {num_labels} (use problem='regression' "
                             "for a single score)")
        if classifier_dropout is not None and not 0.0 <= classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout must be in [0, 1), got {classifier_dropout}")
        if id2label is None:
            id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
        id2label = {int(k): str(v) for k, v in id2label.items()}
        if sorted(id2label) != list(range(num_labels)):
            raise ValueError(f"id2label must have the keys 0..{num_labels - 1} (num_labels={num_labels}); "
                             f"got {sorted(id2label)}")

        super().__init__(encoder)
        config = encoder.config
        self.num_labels = num_labels
        self.problem = problem
        self.head = head
        self.classifier_dropout = classifier_dropout
        self.id2label = id2label
        self.regression_loss = regression_loss
        self.score_scale = float(score_scale)
        p = config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout
        self.dropout = nn.Dropout(p)
        if head == "checkpoint" and config.model_type != "bert":
            self.classifier: nn.Module = checkpoint_sequence_head(config, num_labels, p)
        else:
            self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.classifier.apply(encoder._init_weights)
        if not self.uses_pooler:
            self.freeze_unused_pooler()
        self.train(encoder.training)  # one mode for the whole model: that of the encoder it was given

    @property
    def uses_pooler(self) -> bool:
        """Whether the head reads BERT's tanh pooler (the ``"checkpoint"`` head of a BERT model)."""
        return self.head == "checkpoint" and self.config.model_type == "bert"

    #: While training, compute every position of the last layer even where the head reads [CLS] alone: the random
    #: path and the rounding of earlier versions (not saved; the fine-tuning flag ``--full-last-layer``).
    full_last_layer: bool = False

    @property
    def reads_first_token_only(self) -> bool:
        """Whether the head reads the [CLS] position alone (every head but ``"mean"`` and ModernBERT's mean
        pooling): while training (unless :attr:`full_last_layer`), the encoder's last layer then computes that
        position alone (``first_token_only``). Evaluation computes every position, so predictions keep their
        numbers to the last bit."""
        if self.head == "mean":
            return False
        return getattr(self.classifier, "pooling", "cls") == "cls"

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in self.id2label.items()}

    def regression_scores(self, logits: torch.Tensor) -> torch.Tensor:
        """A regression model's predicted scores (B,) in the labels' units from its logits (B, 1): the logit for
        ``"mse"``, ``score_scale * sigmoid(logit)`` for ``"bce"``."""
        scores = logits[:, 0]
        return self.score_scale * torch.sigmoid(scores) if self.regression_loss == "bce" else scores

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None
                ) -> SequenceClassifierOutput:
        """Logits for each sequence; with labels, the loss.

        Args:
            input_ids, attention_mask, token_type_ids: (B, T), as for :class:`Encoder`.
            labels: (B,) class ids (classification) or float scores (regression).

        Returns:
            SequenceClassifierOutput with (B, C) logits.

        Raises:
            ValueError: ``labels`` is not of shape (B,).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        out = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=False,
                           compute_pooler=self.uses_pooler,
                           first_token_only=self.training and not self.full_last_layer and self.reads_first_token_only)
        z = out.last_hidden_state  # (B, T, H), or (B, 1, H) for a head that reads [CLS] alone
        if self.uses_pooler:
            logits = self.classifier(self.dropout(out.pooler_output))
        elif self.head == "checkpoint":
            logits = self.classifier(z, attention_mask)  # the family's head applies its own dropouts
        elif self.head == "cls":
            logits = self.classifier(self.dropout(z[:, 0]))
        else:
            logits = self.classifier(self.dropout(mean_pool(z, attention_mask)))
        if labels is None:
            return SequenceClassifierOutput(loss=None, logits=logits)
        if labels.shape != (input_ids.shape[0],):
            raise ValueError(f"labels must have shape (batch,) = ({input_ids.shape[0]},); got {tuple(labels.shape)}")
        if self.problem == "regression":
            if self.regression_loss == "bce":
                loss = F.binary_cross_entropy_with_logits(logits.float().squeeze(-1), labels.float() / self.score_scale)
            else:
                loss = F.mse_loss(logits.float().squeeze(-1), labels.float())
            return SequenceClassifierOutput(loss=loss, logits=logits)
        loss = F.cross_entropy(logits.float(), labels)
        accuracy = float((logits.detach().argmax(-1) == labels).float().mean())
        return SequenceClassifierOutput(loss=loss, logits=logits, metrics={"accuracy": accuracy})

    # ---- fine-tuning regimes (freeze_encoder, freeze_all_but_last: EncoderWithHeads) ---------------------------
    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        """(depth, name, module) from the input up (see :meth:`EncoderWithHeads.depth_modules`); the head at
        depth L + 1 is the classifier and, for BERT's ``"checkpoint"`` head, the pooler it reads (a pooler no head
        reads is left out)."""
        L = self.encoder.num_layers
        out = self.encoder_depth_modules()
        if self.uses_pooler:
            out.append((L + 1, f"{self.base_model_prefix}.pooler", self.encoder.pooler))
        out.append((L + 1, "classifier", self.classifier))
        return out

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def _config_extra(self) -> dict:
        extra = {"id2label": {str(k): v for k, v in self.id2label.items()}, "label2id": self.label2id,
                 "problem_type": _PROBLEM_TYPES[self.problem], HEAD_CONFIG_KEY: self.head}
        if self.classifier_dropout is not None:
            extra["classifier_dropout"] = self.classifier_dropout
        if self.head == "checkpoint" and self.config.model_type == "modernbert":
            extra.update(modernbert_head_config(self.classifier.head, self.classifier.pooling))
        if self.regression_loss != "mse":
            extra.update({REGRESSION_LOSS_KEY: self.regression_loss, SCORE_SCALE_KEY: self.score_scale,
                          # sentence-transformers' CrossEncoder applies this to the logit: scores in [0, 1]
                          "sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}})
        return extra

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write ``config.json`` (with ``id2label``, ``label2id``, ``problem_type``) and ``model.safetensors``.

        A ``"checkpoint"`` head is saved as the family's ``*ForSequenceClassification`` (``Bert``, ``Roberta``,
        ``XLMRoberta``, ``MPNet``, ``DistilBert``, ``Electra``, ``ModernBert``), which transformers'
        ``AutoModelForSequenceClassification`` loads with equal logits; ``"cls"`` and ``"mean"`` heads are saved
        with ``modeling_ctxemb.py``, which it loads with equal logits under ``trust_remote_code=True`` (and refuses
        to load otherwise). :meth:`from_pretrained` and :func:`ctxemb.modeling.loading.load_encoder` load either.
        """
        mt = self.config.model_type
        heads = to_checkpoint_names({"classifier." + k: v for k, v in self.classifier.state_dict().items()},
                                    sequence_head_names(mt, self.head))
        extra = self._config_extra()
        if self.head != "checkpoint":
            write_remote_code(out_dir)
            extra.update(remote_code_config(mt, "CtxembForSequenceClassification", {
                "AutoModelForSequenceClassification": "CtxembForSequenceClassification"}))
        return save_pretrained(self.encoder, out_dir, extra_tensors=heads, config_extra=extra,
                               architectures=[architecture_name(mt, "sequence_classification")])

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, num_labels: int | None = None,
                        problem: Problem | None = None, head: Head | None = None,
                        classifier_dropout: float | None = None, id2label: Mapping[int, str] | None = None,
                        regression_loss: str | None = None, score_scale: float | None = None,
                        strict: bool = True, new_head: bool = False) -> "EncoderForSequenceClassification":
        """Load a fine-tuned classifier, or an encoder checkpoint with a fresh head (logged).

        A directory whose weights have ``classifier.*`` tensors is a fine-tuned model (ours or transformers'):
        ``num_labels``, ``id2label``, ``problem`` (from ``problem_type``; transformers leaves it null until
        trained, and then one output means regression) and the head come from its ``config.json``, and any of them
        passed here must agree. Otherwise the head is new: ``num_labels`` is required.

        Args:
            model_dir: an HF-format directory (resolve registry names first: ``ctxemb.models.hub.resolve_model_dir``).
            num_labels: C for a new head (default: the size of ``id2label``); checked against a saved one.
            problem: ``"classification"`` or ``"regression"``; for a new head, regression when ``num_labels`` is 1.
            head: ``"checkpoint"``, ``"cls"`` or ``"mean"``; None: the saved model's, or ``"checkpoint"``.
            classifier_dropout, id2label, regression_loss, score_scale: as for the constructor (default: the saved
                config's).
            strict: refuse checkpoints whose tensors do not match the configuration.
            new_head: ignore a saved head: the encoder of a fine-tuned model with a new head (intermediate-task
                transfer, e.g. an SNLI classifier's encoder trained on RTE).

        Raises:
            FileNotFoundError, CheckpointError: as for :func:`ctxemb.modeling.checkpoint.load_encoder_dir`.
            ValueError: ``num_labels`` missing for a new head, or an argument that contradicts the saved model
                (to put a new head on a fine-tuned encoder, load it with :func:`ctxemb.modeling.loading.load_encoder` and
                pass it to the constructor).
        """
        model_dir = Path(model_dir)
        encoder, heads = load_encoder_dir(model_dir, strict=strict, new_head=new_head)
        raw = read_json_file(model_dir / "config.json", "config file")
        saved_head = raw.get(HEAD_CONFIG_KEY, "checkpoint")
        saved, others = {}, sorted(heads)
        if any(k.startswith("classifier.") for k in heads):
            saved, others = from_checkpoint_names(heads, sequence_head_names(encoder.config.model_type, saved_head))
        if others:
            logger.info("%s: %d pretraining-head tensors ignored", model_dir, len(others))

        if not saved:
            if num_labels is None and id2label is not None:
                num_labels = len(id2label)
            if num_labels is None:
                raise ValueError(f"{model_dir} has no classifier (it is a bare encoder): pass num_labels")
            if problem is None:
                problem = "regression" if num_labels == 1 else "classification"
            model = cls(encoder, num_labels=num_labels, problem=problem, head=head or "checkpoint",
                        classifier_dropout=classifier_dropout, id2label=id2label,
                        regression_loss=regression_loss or "mse", score_scale=score_scale or 1.0)
            logger.info("%s has no classifier weights: a new %r head with %d outputs is initialised fresh",
                        model_dir, model.head, num_labels)
            return model

        saved_labels = _saved_num_labels(raw)
        problem_type = raw.get("problem_type")
        saved_problem = {v: k for k, v in _PROBLEM_TYPES.items()}.get(problem_type)
        if problem_type is not None and saved_problem is None:
            raise ValueError(f"{model_dir}: problem_type {problem_type!r} is not supported; expected one of "
                             f"{sorted(_PROBLEM_TYPES.values())}")
        if saved_problem is None and saved_labels is not None:
            saved_problem = "regression" if saved_labels == 1 else "classification"
        saved_loss, saved_scale = raw.get(REGRESSION_LOSS_KEY, "mse"), raw.get(SCORE_SCALE_KEY, 1.0)
        for name, given, stored in (("num_labels", num_labels, saved_labels), ("problem", problem, saved_problem),
                                    ("head", head, saved_head), ("regression_loss", regression_loss, saved_loss),
                                    ("score_scale", score_scale, saved_scale)):
            if given is not None and stored is not None and given != stored:
                raise ValueError(
                    f"{name}={given!r} contradicts the fine-tuned model in {model_dir} ({name}={stored!r}); to put "
                    "a new head on its encoder, load it with ctxemb.modeling.loading.load_encoder and pass it to "
                    "EncoderForSequenceClassification"
                )
        num_labels = num_labels or saved_labels
        if num_labels is None:
            raise ValueError(f"{model_dir}: config.json has neither id2label nor num_labels; pass num_labels")
        if id2label is None and "id2label" in raw:
            id2label = {int(k): v for k, v in raw["id2label"].items()}
        if classifier_dropout is None:
            classifier_dropout = raw.get("classifier_dropout")
        model = cls(encoder, num_labels=num_labels, problem=problem or saved_problem, head=head or saved_head,
                    classifier_dropout=classifier_dropout, id2label=id2label,
                    regression_loss=saved_loss, score_scale=saved_scale)
        if model.head == "checkpoint" and encoder.config.model_type == "modernbert":
            check_modernbert_head_config(raw, str(model_dir))
            model.classifier = checkpoint_sequence_head(
                encoder.config, num_labels, model.dropout.p, pooling=raw.get("classifier_pooling", "cls"),
                bias="head.dense.bias" in saved)
            model.classifier.train(model.training)
        load_weights_into(model.classifier, saved, strict=True, source=f"{model_dir} (classifier)")
        return model


PAIR_HEAD_CONFIG_KEY = "ctxemb_pair_similarity"


class EncoderForPairSimilarity(EncoderWithHeads):
    """A bi-encoder for scored pairs (STS-B): each text is encoded alone, mean-pooled over its tokens, and the
    pair's score is predicted as ``score_scale * cos(u, v)``, trained with the mean squared error between
    ``cos(u, v)`` and ``score / score_scale`` (``loss="mse"``: sentence-transformers' CosineSimilarityLoss), or with
    the CoSENT ranking loss over the batch's pairs (``loss="cosent"``, see
    :func:`~ctxemb.modeling.contrastive_loss.cosent_loss`), which trains the order of the cosines only.

    It has no head: what it trains is the geometry of the mean-pooled sentence vectors, so the fine-tuned encoder
    serves ``Embedder`` (mean pooling, cosine) directly, where a cross-encoder's regression head on [CLS] would not.
    Saved as a bare encoder (``BertModel``, ...) with the scale under ``ctxemb_pair_similarity`` in config.json.

    Args:
        encoder: a pretrained encoder; the model owns it from now on.
        score_scale: the largest gold score (5 for STS-B), so that cosine 1 means the highest score.
        loss: ``"mse"`` or ``"cosent"`` (training only: predictions are ``score_scale * cos`` either way).
        cosent_scale: CoSENT's multiplier of the cosine differences.
    """

    problem = "regression"
    num_labels = 1

    def __init__(self, encoder: Encoder, *, score_scale: float = 5.0, loss: str = "mse", cosent_scale: float = 20.0):
        check_choice(loss, "loss", PAIR_SIMILARITY_LOSSES)
        if not (isinstance(score_scale, (int, float)) and score_scale > 0 and score_scale != float("inf")):
            raise ValueError(f"score_scale must be a positive finite number, got {score_scale!r}")
        super().__init__(encoder)
        self.score_scale = float(score_scale)
        self.loss, self.cosent_scale = loss, cosent_scale
        self.freeze_unused_pooler()
        self.train(encoder.training)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
              token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, H) mean-pooled last-layer vectors of the texts (B, T)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        z = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=False,
                         compute_pooler=False).last_hidden_state
        return mean_pool(z, attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, input_ids_b: torch.Tensor,
                attention_mask_b: torch.Tensor | None = None, token_type_ids_b: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> SequenceClassifierOutput:
        """Predicted scores (B, 1) = score_scale * cos(u, v) for the pairs (first texts ``input_ids``, second
        ``input_ids_b``); with gold scores (B,), the loss: the MSE between cos(u, v) and ``labels / score_scale``,
        or CoSENT."""
        u = self.embed(input_ids, attention_mask, token_type_ids)
        v = self.embed(input_ids_b, attention_mask_b, token_type_ids_b)
        cos = F.cosine_similarity(u.float(), v.float(), dim=-1)  # (B,)
        scores = (self.score_scale * cos).unsqueeze(-1)
        if labels is None:
            return SequenceClassifierOutput(loss=None, logits=scores)
        if labels.shape != cos.shape:
            raise ValueError(f"labels must have shape (batch,) = ({cos.shape[0]},); got {tuple(labels.shape)}")
        if self.loss == "cosent":
            loss = cosent_loss(cos, labels.float(), scale=self.cosent_scale)
        else:
            loss = F.mse_loss(cos, labels.float() / self.score_scale)
        return SequenceClassifierOutput(loss=loss, logits=scores)

    def depth_modules(self) -> list[tuple[int, str, nn.Module]]:
        return self.encoder_depth_modules()

    def regression_scores(self, logits: torch.Tensor) -> torch.Tensor:
        """The predicted scores (B,) from the outputs (B, 1): already ``score_scale * cos(u, v)``."""
        return logits[:, 0]

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """A bare encoder (``AutoModel``, ``Embedder`` and transformers load it) with the score scale in config.json."""
        return save_pretrained(self.encoder, out_dir, config_extra={PAIR_HEAD_CONFIG_KEY: {
            "score_scale": self.score_scale}})

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, score_scale: float | None = None,
                        strict: bool = True, loss: str = "mse") -> "EncoderForPairSimilarity":
        """Load an encoder directory as a bi-encoder (the scale from its config.json when it was saved as one), to
        be trained with ``loss``."""
        model_dir = Path(model_dir)
        encoder, _ = load_encoder_dir(model_dir, strict=strict)
        saved = read_json_file(model_dir / "config.json", "config file").get(PAIR_HEAD_CONFIG_KEY) or {}
        return cls(encoder, score_scale=score_scale or saved.get("score_scale", 5.0), loss=loss)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, H) mean of ``hidden`` (B, T, H) over the tokens where ``attention_mask`` (B, T) is 1."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def _saved_num_labels(raw: dict) -> int | None:
    """C as transformers reads it from config.json: the size of ``id2label``, else ``num_labels``."""
    if isinstance(raw.get("id2label"), dict) and raw["id2label"]:
        return len(raw["id2label"])
    for key in ("num_labels", "_num_labels"):
        if isinstance(raw.get(key), int):
            return raw[key]
    return None
