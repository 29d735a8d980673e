"""A fine-tuned model's outputs over batches, in order, without padding, and their decoding into tags and scored
spans: what evaluation and the predictors read.

Shapes: N examples, C classes, T_i tokens of feature i, S_i spans of feature i.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ctxemb.finetuning.tagging import ScoredSpan, TaggedFeature, score_spans, stitch_words
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.modeling.token_classification import EncoderForTokenClassification
from ctxemb.training.data import move_to_device, restore_order

__all__ = ["decode_tags", "model_logits", "predict_outputs", "scored_spans"]


@torch.inference_mode()
def predict_outputs(model: EncoderWithHeads, batches) -> np.ndarray:
    """Logits (N, C), or scores (N,) in the labels' units for regression, over ``batches`` in dataset order (an
    :class:`~ctxemb.training.data.EvalBatches` visiting its examples by length has them put back)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outs = []
    for batch in batches:
        batch = {k: v for k, v in move_to_device(batch, device).items() if k != "labels"}
        logits = model(**batch).logits.float().cpu()
        outs.append(model.regression_scores(logits) if model.problem == "regression" else logits)
    model.train(was_training)
    out = torch.cat(outs).numpy()
    order = getattr(batches, "order", None)
    return out if order is None else out[np.argsort(np.asarray(order), kind="stable")]


@torch.inference_mode()
def model_logits(model: EncoderWithHeads, batches) -> list[np.ndarray]:
    """Per feature, its logits without padding: (T_i, C) tokens, (S_i, C) spans or (T_i, 2) QA scores, in
    dataset order (see :func:`predict_outputs`)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[np.ndarray] = []
    for batch in batches:
        batch = move_to_device(batch, device)
        inputs = {k: v for k, v in batch.items()
                  if k not in ("labels", "word_labels", "span_labels", "start_positions", "end_positions")}
        logits = model(**inputs).logits.float().cpu()
        lengths = (batch["span_mask"] if "span_mask" in batch else batch["attention_mask"]).sum(1).tolist()
        out.extend(row[:n].numpy() for row, n in zip(logits, lengths))
    model.train(was_training)
    order = getattr(batches, "order", None)
    return out if order is None else restore_order(out, order)


def decode_tags(model: EncoderForTokenClassification, features: Sequence[TaggedFeature],
                logits: Sequence[np.ndarray], n_sentences: int, decoding: str = "first") -> list[list[str]]:
    """Per sentence, one predicted tag per word."""
    per_feature = []
    for feat, lg in zip(features, logits):
        t = torch.from_numpy(lg).unsqueeze(0)
        ids = model.decode_words(t, torch.tensor([feat.word_starts]), torch.tensor([feat.word_ends]),
                                 torch.ones((1, len(feat.word_starts)), dtype=torch.long), decoding=decoding)[0]
        per_feature.append([model.id2label[i] for i in ids])
    return stitch_words(features, per_feature, n_sentences)


def scored_spans(model: EncoderForSpanClassification, features: Sequence[TaggedFeature],
                 logits: Sequence[np.ndarray], n_sentences: int) -> list[list[ScoredSpan]]:
    """Per sentence, every enumerated span with its best type and entity score."""
    out: list[list[ScoredSpan]] = [[] for _ in range(n_sentences)]
    for feat, lg in zip(features, logits):
        probs = torch.from_numpy(lg).softmax(-1).numpy()
        out[feat.sentence].extend(score_spans(probs, feat.span_words, model.id2label, first_word=feat.first_word))
    return out
