"""A token-level model's outputs decoded into word tags and scored spans (the evaluation and the predictors of
the token family).

Shapes: T_i tokens of feature i, S_i spans of feature i.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.modeling.token_classification import EncoderForTokenClassification
from ctxemb.tasks.token.features import ScoredSpan, TaggedFeature, score_spans, stitch_words
from ctxemb.training.outputs import eval_bar

__all__ = ["decode_tags", "scored_spans"]


def decode_tags(model: EncoderForTokenClassification, features: Sequence[TaggedFeature],
                logits: Sequence[np.ndarray], n_sentences: int, decoding: str = "first", *,
                progress: bool = False) -> list[list[str]]:
    """Per sentence, one predicted tag per word (``progress``: a bar over the features, :func:`eval_bar`; the CRF's
    Viterbi decoding of a dev set takes as long as its forward passes)."""
    per_feature = []
    bar = eval_bar(len(features), show=progress, examples=len(features), desc="dev decoding", unit="sentence")
    for feat, lg in zip(features, logits):
        t = torch.from_numpy(lg).unsqueeze(0)
        ids = model.decode_words(t, torch.tensor([feat.word_starts]), torch.tensor([feat.word_ends]),
                                 torch.ones((1, len(feat.word_starts)), dtype=torch.long), decoding=decoding)[0]
        per_feature.append([model.id2label[i] for i in ids])
        bar.update(1)
    bar.close()
    return stitch_words(features, per_feature, n_sentences)


def scored_spans(model: EncoderForSpanClassification, features: Sequence[TaggedFeature],
                 logits: Sequence[np.ndarray], n_sentences: int, *, progress: bool = False) -> list[list[ScoredSpan]]:
    """Per sentence, every enumerated span with its best type and entity score (``progress``: as
    :func:`decode_tags`)."""
    out: list[list[ScoredSpan]] = [[] for _ in range(n_sentences)]
    bar = eval_bar(len(features), show=progress, examples=len(features), desc="dev spans", unit="sentence")
    for feat, lg in zip(features, logits):
        probs = torch.from_numpy(lg).softmax(-1).numpy()
        out[feat.sentence].extend(score_spans(probs, feat.span_words, model.id2label, first_word=feat.first_word))
        bar.update(1)
    bar.close()
    return out
