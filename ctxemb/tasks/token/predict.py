"""Predictions of fine-tuned token- and span-level models on raw text: tags per word, entity spans with types and
character offsets (BIO taggers and span classifiers alike), and extractive answers with offsets and scores.

Shapes: N texts, W words.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ctxemb.core.validation import check_int, check_string_batch
from ctxemb.tasks.qa.features import Answer, QACollator, best_answers, encode_qa
from ctxemb.tasks.qa.squad import QAExample
from ctxemb.tasks.token.features import (TaggedFeature, TaggingCollator, bio_to_entities, decode_spans,
                                       encode_tokenized, entities_to_bio)
from ctxemb.training.task_config import load_finetune_config
from ctxemb.tasks.token.outputs import decode_tags, scored_spans
from ctxemb.training.outputs import model_logits
from ctxemb.modeling.question_answering import EncoderForQuestionAnswering
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.modeling.token_classification import EncoderForTokenClassification
from ctxemb.models.hub import resolve_model_dir
from ctxemb.models.tokenization import Tokenizer
from ctxemb.training.data import EvalBatches


@dataclass(frozen=True)
class EntitySpan:
    """One entity found in a text: its type, the text it covers and its character offsets ``[start, end)``, and its
    words ``[first_word, last_word + 1)`` in the pre-tokenizer's split (or the caller's word list)."""

    type: str
    text: str
    start: int
    end: int
    first_word: int
    end_word: int
    score: float | None = None


class TokenPredictor:
    """A fine-tuned tagger (softmax or CRF) or span classifier and its tokenizer.

    Examples:
        >>> p = TokenPredictor.from_pretrained("runs/ner/model")  # doctest: +SKIP
        >>> p.entities(["Jane Villanueva of United Airlines Holding discussed it."])[0][0].type  # doctest: +SKIP
        'PER'
    """

    def __init__(self, model: EncoderForTokenClassification | EncoderForSpanClassification, tokenizer: Tokenizer, *,
                 max_length: int = 512, decoding: str = "first", null_threshold: float = 0.5):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.decoding = decoding
        self.null_threshold = null_threshold

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, device: str | torch.device = "cpu",
                        max_length: int = 512) -> "TokenPredictor":
        """Load a directory written by ``ctxemb finetune conll2003-ner`` (etc.), or a transformers
        ``*ForTokenClassification``; the span head's calibrated NULL threshold and the decoding come from its
        ``finetune_config.json``."""
        path = Path(resolve_model_dir(model_dir))
        saved = load_finetune_config(path) or {}
        if saved.get("head") == "span":
            model = EncoderForSpanClassification.from_pretrained(path)
        else:
            model = EncoderForTokenClassification.from_pretrained(path)
        threshold = saved.get("null_threshold")
        return cls(model.to(device), Tokenizer.from_pretrained(path), max_length=max_length,
                   decoding=saved.get("decoding", "first"), null_threshold=0.5 if threshold is None else threshold)

    @property
    def is_span_model(self) -> bool:
        return isinstance(self.model, EncoderForSpanClassification)

    def _features(self, tokenized) -> list[TaggedFeature]:
        span = self.model.max_span_length if self.is_span_model else None
        return encode_tokenized(self.tokenizer, tokenized, max_span_length=span, max_length=self.max_length)

    def _tags(self, features: Sequence[TaggedFeature], n: int, word_counts: Sequence[int],
              batch_size: int) -> tuple[list[list[str]], list[list]]:
        collate = TaggingCollator(self.tokenizer.pad_token_id, spans=self.is_span_model)
        logits = model_logits(self.model, EvalBatches(list(features), batch_size=batch_size, collate=collate))
        if not self.is_span_model:
            return decode_tags(self.model, features, logits, n, self.decoding), [[] for _ in range(n)]
        spans = [decode_spans(s, threshold=self.null_threshold)
                 for s in scored_spans(self.model, features, logits, n)]
        return [entities_to_bio(w, [(s.type, s.start, s.end) for s in sp]) for w, sp in zip(word_counts, spans)], spans

    def tag_words(self, sentences: Sequence[Sequence[str]], *, batch_size: int = 32) -> list[list[str]]:
        """One tag per word of each pre-tokenized sentence (BIO for NER; a span model's entities as BIO)."""
        batch_size = check_int(batch_size, "batch_size", low=1)
        tokenized = self.tokenizer.tokenize_words(sentences)
        tags, _ = self._tags(self._features(tokenized), len(tokenized), [len(s) for s in sentences], batch_size)
        return tags

    def entities(self, texts: Sequence[str], *, batch_size: int = 32) -> list[list[EntitySpan]]:
        """The entities of N raw texts, with character offsets into each text.

        Raises:
            TypeError / ValueError: a single string instead of a list, or an empty text.
        """
        texts = check_string_batch(texts, "texts")
        batch_size = check_int(batch_size, "batch_size", low=1)
        tokenized = self.tokenizer.tokenize(texts)
        counts = [len(t.word_spans) for t in tokenized]
        tags, spans = self._tags(self._features(tokenized), len(texts), counts, batch_size)
        out = []
        for i, tok in enumerate(tokenized):
            chars = [(tok.offsets[a][0], tok.offsets[b - 1][1]) for a, b in tok.word_spans]
            scores = {(s.type, s.start, s.end): s.score for s in spans[i]}
            out.append([EntitySpan(etype, texts[i][chars[a][0]:chars[b - 1][1]], chars[a][0], chars[b - 1][1], a, b,
                                   scores.get((etype, a, b)))
                        for etype, a, b in bio_to_entities(tags[i])])
        return out


class QAPredictor:
    """A fine-tuned extractive QA model and its tokenizer."""

    def __init__(self, model: EncoderForQuestionAnswering, tokenizer: Tokenizer, *, max_length: int = 384,
                 doc_stride: int = 128, max_query_length: int = 64, max_answer_length: int = 30):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.options = dict(max_length=max_length, doc_stride=doc_stride, max_query_length=max_query_length)
        self.max_answer_length = max_answer_length

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, device: str | torch.device = "cpu") -> "QAPredictor":
        """Load a directory written by ``ctxemb finetune xquad`` (or a transformers ``*ForQuestionAnswering``);
        window settings come from its ``finetune_config.json`` when there is one."""
        path = Path(resolve_model_dir(model_dir))
        saved = load_finetune_config(path) or {}
        keys = ("max_length", "doc_stride", "max_query_length", "max_answer_length")
        return cls(EncoderForQuestionAnswering.from_pretrained(path).to(device), Tokenizer.from_pretrained(path),
                   **{k: saved[k] for k in keys if k in saved})

    def answer(self, questions: Sequence[str], contexts: Sequence[str], *, batch_size: int = 16) -> list[Answer]:
        """The best answer span for each (question, context) pair, with character offsets into the context.

        Raises:
            TypeError / ValueError: a single string instead of a list, empty texts, or lists of different lengths.
        """
        questions = check_string_batch(questions, "questions")
        contexts = check_string_batch(contexts, "contexts")
        if len(questions) != len(contexts):
            raise ValueError(f"questions and contexts must have the same length; got {len(questions)} and "
                             f"{len(contexts)}")
        batch_size = check_int(batch_size, "batch_size", low=1)
        examples = [QAExample(str(i), "", c, q, ()) for i, (q, c) in enumerate(zip(questions, contexts))]
        features = encode_qa(self.tokenizer, examples, with_labels=False, **self.options)
        logits = model_logits(self.model, EvalBatches(features, batch_size=batch_size,
                                                      collate=QACollator(self.tokenizer.pad_token_id)))
        answers = best_answers(examples, features, [lg[:, 0] for lg in logits], [lg[:, 1] for lg in logits],
                               max_answer_length=self.max_answer_length)
        return [answers[ex.id] for ex in examples]


