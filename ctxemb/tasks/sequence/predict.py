"""Predictions of a fine-tuned sequence classifier or regressor on raw texts or text pairs.

Shapes: N texts, C classes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ctxemb.core.validation import check_int, check_string_batch, read_json_file
from ctxemb.training.task_config import load_finetune_config
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.tasks.sequence.features import model_inputs
from ctxemb.training.outputs import predict_outputs
from ctxemb.modeling.sequence_classification import (PAIR_HEAD_CONFIG_KEY, EncoderForPairSimilarity,
                                                     EncoderForSequenceClassification)
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import Tokenizer
from ctxemb.training.data import EvalBatches


@dataclass(frozen=True)
class Prediction:
    """One prediction: the label (None for regression), the score (the class probability, or the regression
    output), and every class's probability by class name (empty for regression). A label is what the training data
    gave: a custom task's ``"good"`` or ``5`` (an int stays an int), a shared task's class name; the names, as in
    ``config.json``'s ``id2label`` and in JSON, are strings (``"5"``)."""

    label: Any
    score: float
    probabilities: dict[str, float]


class SequencePredictor:
    """A fine-tuned :class:`EncoderForSequenceClassification` and its tokenizer.

    Example:
        >>> p = SequencePredictor.from_pretrained("runs/sst2/model")  # doctest: +SKIP
        >>> p.predict(["A gripping, funny film."])[0].label  # doctest: +SKIP
        'positive'
    """

    def __init__(self, model: EncoderForSequenceClassification | EncoderForPairSimilarity, tokenizer: Tokenizer, *,
                 max_length: int = 512, labels: Sequence | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length
        # the labels by class id (the run's label_values, with their types); default: the model's id2label names
        self.labels = list(labels) if labels is not None else None

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, device: str | torch.device = "cpu",
                        max_length: int = 512) -> "SequencePredictor":
        """Load a directory written by ``ctxemb finetune`` (or a transformers ``*ForSequenceClassification``); a
        bi-encoder saved with ``head="cosine"`` predicts ``score_scale * cos(u, v)`` for pairs."""
        path = resolve_model_dir(model_dir)
        raw = read_json_file(Path(path) / "config.json", "config file")
        if PAIR_HEAD_CONFIG_KEY in raw:
            model: EncoderForSequenceClassification | EncoderForPairSimilarity = \
                EncoderForPairSimilarity.from_pretrained(path)
        else:
            model = EncoderForSequenceClassification.from_pretrained(path)
        values = (load_finetune_config(path) or {}).get("label_values")
        if not (isinstance(values, list) and model.problem != "regression" and len(values) == len(model.id2label)):
            values = None  # a transformers checkpoint, or a run saved before label_values: the id2label names
        return cls(model.to(device), Tokenizer.from_pretrained(path), max_length=max_length, labels=values)

    def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *,
                batch_size: int = 32) -> list[Prediction]:
        """Predict for N texts (or N pairs ``(texts[i], pairs[i])``).

        Raises:
            TypeError / ValueError: a single string instead of a list, empty texts, or lists of different lengths.
        """
        texts = check_string_batch(texts, "texts")
        if pairs is not None:
            pairs = check_string_batch(pairs, "pairs")
            if len(pairs) != len(texts):
                raise ValueError(f"texts and pairs must have the same length; got {len(texts)} and {len(pairs)}")
        batch_size = check_int(batch_size, "batch_size", low=1)
        examples = [TextExample(a, pairs[i] if pairs is not None else None, 0, str(i)) for i, a in enumerate(texts)]
        bi_encoder = isinstance(self.model, EncoderForPairSimilarity)
        if bi_encoder and pairs is None:
            raise ValueError("a bi-encoder scores pairs: pass pairs (one second text per text)")
        features, collate = model_inputs(self.tokenizer, examples, head="cosine" if bi_encoder else "checkpoint",
                                         regression=self.model.problem == "regression", max_length=self.max_length,
                                         with_labels=False)
        batches = EvalBatches(features, batch_size=batch_size, collate=collate)
        outputs = torch.from_numpy(predict_outputs(self.model, batches))
        if self.model.problem == "regression":
            return [Prediction(None, float(s), {}) for s in outputs]
        probs = outputs.softmax(-1)
        names = [self.model.id2label[i] for i in range(probs.shape[1])]
        labels = self.labels or names
        return [Prediction(labels[int(p.argmax())], float(p.max()), {n: float(q) for n, q in zip(names, p)})
                for p in probs]
