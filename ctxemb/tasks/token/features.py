"""Model inputs for word tagging (BIO NER, POS) and for span classification, and the decoding back to words.

Word tagging (J&M 11.4.3). A sentence is a list of words with one tag each; the tokenizer splits words into
subwords, so tags have to be aligned:

- training, ``label_subwords="all"`` (the book's choice, the default): every subword of a word gets the word's tag;
  ``"first"``: only the first subword does, the others take no loss;
- decoding (:meth:`ctxemb.modeling.token_classification.EncoderForTokenClassification.decode_words`): from each word's
  first subword, or from the mean of its subwords' distributions; a CRF decodes words directly.

Span classification (J&M 11.5.2). Every span of at most ``max_span_length`` words is enumerated (W(W+1)/2 of them
when the limit is at least W) and labelled with its entity type or NULL; a gold entity longer than the limit can
never be found, which is counted and logged. Spans are in words; the model sees each span's first and last subword.

A sentence longer than the model's input (``max_length`` with special tokens) is split at word boundaries into
pieces that fit, never cut: predictions are stitched back per sentence (the pieces lose context across the cut,
which is logged).

Shapes: T subword tokens (special tokens included), W words, S spans.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from ctxemb.core.validation import check_choice
from ctxemb.tasks.sequence.features import pad_ids, pad_inputs
# the choices of label_subwords live with the fine-tuning settings (read without torch); importable from here
from ctxemb.tasks.token.config import LABEL_SUBWORDS, LabelSubwords
from ctxemb.metrics.conlleval import chunks as bio_chunks
from ctxemb.modeling.token_classification import IGNORE_INDEX, NULL_LABEL
from ctxemb.models.tokenization import TokenizedText, Tokenizer

logger = logging.getLogger(__name__)

Entity = tuple[str, int, int]  # (type, first word, last word + 1)


@dataclass(frozen=True)
class TaggedFeature:
    """One model input: a sentence, or a piece of a long one.

    Attributes:
        input_ids, token_type_ids: T ids with the model's special tokens.
        word_starts, word_ends: per word, its subword range ``[start, end)`` in ``input_ids``.
        sentence: index of the sentence this input comes from; ``first_word``: index of its first word there.
        labels: T label ids per subword (``IGNORE_INDEX`` on special tokens and, with ``label_subwords="first"``,
            on non-first subwords); None without tags.
        word_labels: W label ids; None without tags.
        span_words: S spans ``(i, j)`` of word indices (inclusive, within this piece), for span classification.
        span_labels: S label ids (0 = NULL); None without entities.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    word_starts: list[int]
    word_ends: list[int]
    sentence: int
    first_word: int
    labels: list[int] | None = None
    word_labels: list[int] | None = None
    span_words: list[tuple[int, int]] | None = None
    span_labels: list[int] | None = None


def enumerate_spans(n_words: int, max_span_length: int) -> list[tuple[int, int]]:
    """Every span ``(i, j)``, ``0 <= i <= j < n_words``, of at most ``max_span_length`` words, ordered by start
    then end: ``n(n+1)/2`` spans when the limit is at least ``n``."""
    return [(i, j) for i in range(n_words) for j in range(i, min(n_words, i + max_span_length))]


def _split_words(spans: Sequence[tuple[int, int]], room: int) -> list[tuple[int, int]]:
    """Word ranges ``[a, b)`` whose subwords fit in ``room`` tokens, cut at word boundaries."""
    pieces, a = [], 0
    while a < len(spans):
        b = a
        while b < len(spans) and spans[b][1] - spans[a][0] <= room:
            b += 1
        if b == a:  # one word alone longer than the room: it cannot be cut, so it cannot be tagged
            raise ValueError(f"a word of {spans[a][1] - spans[a][0]} subwords does not fit in {room} tokens")
        pieces.append((a, b))
        a = b
    return pieces


def encode_tagged(tokenizer: Tokenizer, sentences: Sequence[Sequence[str]], *,
                  tags: Sequence[Sequence[str]] | None = None, label2id: Mapping[str, int] | None = None,
                  entities: Sequence[Sequence[Entity]] | None = None, max_span_length: int | None = None,
                  label_subwords: LabelSubwords = "all", max_length: int | None = None) -> list[TaggedFeature]:
    """Tokenize word lists into model inputs, with aligned labels when tags (or entities, for spans) are given.

    Args:
        tokenizer: the model's tokenizer.
        sentences: N sentences, each a list of words.
        tags: N tag lists (one tag per word) for word tagging; needs ``label2id``.
        label2id: tag (or, for spans, entity type with ``"NULL"``) -> label id.
        entities: N lists of gold entities ``(type, first word, last word + 1)`` for span classification.
        max_span_length: enumerate spans of at most this many words (span classification); None: no spans.
        label_subwords: ``"all"`` or ``"first"`` (module docstring).
        max_length: most tokens per input with special tokens (default and cap: the model's).

    Returns:
        The features, in sentence order (a long sentence gives several consecutive features).

    Raises:
        ValueError: lengths that disagree, an unknown tag or type, a bad option.
    """
    return encode_tokenized(tokenizer, tokenizer.tokenize_words(sentences), tags=tags, label2id=label2id,
                            entities=entities, max_span_length=max_span_length, label_subwords=label_subwords,
                            max_length=max_length)


def encode_tokenized(tokenizer: Tokenizer, tokenized: Sequence[TokenizedText], *,
                     tags: Sequence[Sequence[str]] | None = None, label2id: Mapping[str, int] | None = None,
                     entities: Sequence[Sequence[Entity]] | None = None, max_span_length: int | None = None,
                     label_subwords: LabelSubwords = "all", max_length: int | None = None) -> list[TaggedFeature]:
    """:func:`encode_tagged` for texts already tokenized (e.g. raw text by ``Tokenizer.tokenize``, whose words
    keep their character offsets)."""
    sentences = tokenized
    check_choice(label_subwords, "label_subwords", LABEL_SUBWORDS)
    if (tags is not None or entities is not None) and label2id is None:
        raise ValueError("label2id is needed with tags or entities")
    for name, given in (("tags", tags), ("entities", entities)):
        if given is not None and len(given) != len(sentences):
            raise ValueError(f"{name} has {len(given)} entries for {len(sentences)} sentences")
    if entities is not None and max_span_length is None:
        raise ValueError("entities need max_span_length (spans are enumerated up to it)")
    max_length = min(max_length or tokenizer.max_length, tokenizer.max_length)
    room = max_length - len(tokenizer.with_specials([])[0])
    features: list[TaggedFeature] = []
    n_split = n_too_long = n_cut = 0
    for s, tok in enumerate(tokenized):
        sentence_tags = None
        if tags is not None:
            if len(tags[s]) != len(tok.word_spans):
                raise ValueError(f"sentence {s} has {len(tok.word_spans)} words but {len(tags[s])} tags")
            unknown = sorted({t for t in tags[s] if t not in label2id})
            if unknown:
                raise ValueError(f"sentence {s} has tags not in label2id: {unknown}")
            sentence_tags = [label2id[t] for t in tags[s]]
        gold_spans: dict[tuple[int, int], int] = {}
        if entities is not None:
            for etype, a, b in entities[s]:
                if etype not in label2id:
                    raise ValueError(f"sentence {s}: entity type {etype!r} is not in label2id")
                if not 0 <= a < b <= len(tok.word_spans):
                    raise ValueError(f"sentence {s}: entity ({etype!r}, {a}, {b}) is outside its "
                                     f"{len(tok.word_spans)} words")
                if b - a > max_span_length:
                    n_too_long += 1
                gold_spans[(a, b - 1)] = label2id[etype]
        pieces = _split_words(tok.word_spans, room)
        n_split += len(pieces) > 1
        cuts = [a for a, _ in pieces[1:]]  # an entity across a cut is in no piece's spans: count it, as too long ones
        n_cut += sum(1 for i, j in gold_spans if any(i < c <= j for c in cuts))
        for a, b in pieces:
            offset = tok.word_spans[a][0]
            content = tok.ids[offset:tok.word_spans[b - 1][1]]
            ids, types = tokenizer.with_specials(content)
            shift = 1 - offset  # one special token in front
            starts = [tok.word_spans[w][0] + shift for w in range(a, b)]
            ends = [tok.word_spans[w][1] + shift for w in range(a, b)]
            labels = word_labels = None
            if sentence_tags is not None:
                word_labels = sentence_tags[a:b]
                labels = [IGNORE_INDEX] * len(ids)
                for w, (st, en) in enumerate(zip(starts, ends)):
                    for t in range(st, en if label_subwords == "all" else st + 1):
                        labels[t] = word_labels[w]
                first = tags[s][a]
                if a > 0 and first.startswith("I-") and "B-" + first[2:] in label2id:
                    # a piece cut inside an entity: the words' labels (a CRF's) start it with B-X, since a
                    # BIO-constrained CRF never starts with I-X (the gold path would score ~-1e4, a loss no step
                    # lowers); the subword labels (softmax) keep I-X, which stitches back into one entity
                    word_labels = [label2id["B-" + first[2:]]] + word_labels[1:]
            span_words = span_labels = None
            if max_span_length is not None:
                span_words = enumerate_spans(b - a, max_span_length)
                if entities is not None:
                    span_labels = [gold_spans.get((i + a, j + a), 0) for i, j in span_words]
            features.append(TaggedFeature(ids, types, starts, ends, s, a, labels, word_labels, span_words,
                                          span_labels))
    if n_split:
        logger.warning("%d of %d sentences were longer than %d tokens and were split at word boundaries",
                       n_split, len(sentences), max_length)
    if n_cut:
        logger.warning("%d gold entities cross a cut between pieces of a split sentence and can never be predicted "
                       "as one span (raise max_length)", n_cut)
    if n_too_long:
        logger.warning("%d gold entities are longer than max_span_length=%d words and can never be predicted",
                       n_too_long, max_span_length)
    return features


class TaggingCollator:
    """Pads features into a batch: ``input_ids``, ``attention_mask``, ``token_type_ids`` (B, T), ``word_starts``,
    ``word_mask`` (B, W) and, with tags, ``labels`` (B, T) and ``word_labels`` (B, W); for span
    classification (``spans=True``) ``span_starts``, ``span_ends`` (first and last subword, inclusive),
    ``span_mask`` (B, S) and ``span_labels``, and no word-tagging labels."""

    def __init__(self, pad_token_id: int, *, spans: bool = False):
        self.pad_token_id = pad_token_id
        self.spans = spans

    def __call__(self, items: Sequence[TaggedFeature]) -> dict[str, torch.Tensor]:
        batch = pad_inputs(items, self.pad_token_id)
        if self.spans:
            starts = [[it.word_starts[i] for i, _ in it.span_words] for it in items]  # the span's first subword
            ends = [[it.word_ends[j] - 1 for _, j in it.span_words] for it in items]  # and its last (inclusive)
            batch["span_starts"], batch["span_mask"] = pad_ids(starts, 0)
            batch["span_ends"], _ = pad_ids(ends, 0)
            if items[0].span_labels is not None:
                batch["span_labels"], _ = pad_ids([it.span_labels for it in items], 0)
            return batch
        batch["word_starts"], batch["word_mask"] = pad_ids([it.word_starts for it in items], 0)
        if items[0].labels is not None:
            batch["labels"], _ = pad_ids([it.labels for it in items], IGNORE_INDEX)
            batch["word_labels"], _ = pad_ids([it.word_labels for it in items], 0)
        return batch


def stitch_words(features: Sequence[TaggedFeature], per_feature: Sequence[Sequence], n_sentences: int) -> list[list]:
    """Per-word values of the features, put back together per sentence (pieces of a split sentence in order)."""
    out: list[list] = [[] for _ in range(n_sentences)]
    for feat, values in zip(features, per_feature):
        if len(out[feat.sentence]) != feat.first_word:
            raise ValueError(f"features of sentence {feat.sentence} are out of order")
        out[feat.sentence].extend(values)
    return out


# ---------------------------------------------------------------------------------------------------- spans


def bio_to_entities(tags: Sequence[str]) -> list[Entity]:
    """Entities ``(type, first word, last word + 1)`` of a BIO tag sequence, chunked as conlleval does."""
    return list(bio_chunks(tags))


def entities_to_bio(n_words: int, entities: Sequence[Entity]) -> list[str]:
    """BIO tags for non-overlapping entities (raises on overlap: flatten with :func:`decode_spans` first)."""
    tags = ["O"] * n_words
    for etype, a, b in sorted(entities, key=lambda e: e[1]):
        if any(t != "O" for t in tags[a:b]):
            raise ValueError(f"entity ({etype!r}, {a}, {b}) overlaps another; BIO tags cannot hold nested spans")
        tags[a:b] = [f"B-{etype}"] + [f"I-{etype}"] * (b - a - 1)
    return tags


@dataclass(frozen=True)
class ScoredSpan:
    """A predicted entity: its type, words ``[start, end)`` and score ``1 - p(NULL)``."""

    type: str
    start: int
    end: int
    score: float


def score_spans(probs: np.ndarray, span_words: Sequence[tuple[int, int]], id2label: Mapping[int, str],
                *, first_word: int = 0) -> list[ScoredSpan]:
    """Every span's best non-NULL type and its entity score ``1 - p(NULL)``.

    Args:
        probs: (S, C) softmax over labels, NULL at 0.
        span_words: S inclusive word spans ``(i, j)``; ``first_word`` is added to both.
    """
    if id2label[0] != NULL_LABEL:
        raise ValueError(f"label 0 must be {NULL_LABEL!r}; got {id2label[0]!r}")
    best = probs[:, 1:].argmax(1) + 1
    score = 1.0 - probs[:, 0]
    return [ScoredSpan(id2label[int(c)], i + first_word, j + first_word + 1, float(p))
            for (i, j), c, p in zip(span_words, best, score)]


def decode_spans(spans: Sequence[ScoredSpan], *, threshold: float = 0.5, flat: bool = True) -> list[ScoredSpan]:
    """The spans labelled as entities: score ``1 - p(NULL) >= threshold``; with ``flat``, the best-scoring spans
    that do not overlap a better one (greedy by score), else every such span (nested entities stay nested).

    Returns:
        The kept spans, by start then end.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    kept = [s for s in spans if s.score >= threshold]
    if flat:
        taken: list[ScoredSpan] = []
        for s in sorted(kept, key=lambda s: (-s.score, s.start, s.end)):
            if all(s.end <= t.start or t.end <= s.start for t in taken):
                taken.append(s)
        kept = taken
    return sorted(kept, key=lambda s: (s.start, s.end))


def calibrate_threshold(sentence_spans: Sequence[Sequence[ScoredSpan]], gold: Sequence[Sequence[Entity]], *,
                        target_precision: float | None = None, flat: bool = True) -> tuple[float, dict[str, float]]:
    """The NULL threshold chosen on dev, from 0.05, 0.10, ..., 0.95: the one with the best entity F1 (of equals, the
    one nearest 0.5), or, with ``target_precision`` (percent), the lowest threshold whose precision reaches it (the
    most recall at that precision).

    Returns:
        (threshold, {"precision", "recall", "f1"} at that threshold, in percent).

    Raises:
        ValueError: no threshold reaches ``target_precision``.
    """
    if len(sentence_spans) != len(gold):
        raise ValueError(f"{len(sentence_spans)} sentences of spans but {len(gold)} of gold entities")
    gold_sets = [set(g) for g in gold]
    n_gold = sum(len(g) for g in gold_sets)
    results = []
    for threshold in np.round(np.arange(0.05, 1.0, 0.05), 2):
        n_pred = n_ok = 0
        for spans, g in zip(sentence_spans, gold_sets):
            pred = {(s.type, s.start, s.end) for s in decode_spans(spans, threshold=float(threshold), flat=flat)}
            n_pred += len(pred)
            n_ok += len(pred & g)
        p = 100.0 * n_ok / n_pred if n_pred else 0.0
        r = 100.0 * n_ok / n_gold if n_gold else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        results.append((float(threshold), {"precision": p, "recall": r, "f1": f}))
    if target_precision is None:
        return max(results, key=lambda tr: (tr[1]["f1"], -abs(tr[0] - 0.5)))  # ties: nearest the argmax rule
    reaching = [tr for tr in results if tr[1]["precision"] >= target_precision]
    if not reaching:
        best = max(r[1]["precision"] for r in results)
        raise ValueError(f"no threshold reaches precision {target_precision}; the best is {best:.1f}")
    return min(reaching, key=lambda tr: tr[0])
