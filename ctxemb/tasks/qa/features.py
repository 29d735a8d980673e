"""Model inputs and answer decoding for extractive question answering (BERT's SQuAD recipe; d2l 15.6.4).

One model input ("feature") is a question and one window of its context, in the model's own layout: BERT
``[CLS] q [SEP] c [SEP]`` (segments 0 then 1), RoBERTa/MPNet ``<s> q </s></s> c </s>`` (one segment). A context too
long for one input is cut into overlapping windows, so one example gives one or more features. The model scores
every input position as the answer's start and as its end; :func:`best_answers` picks, over all windows of an
example, the context span with the highest start + end score and maps it back to characters of the context.

Window plan (as BERT's ``run_squad.py``): with ``n`` context tokens and room for ``m`` of them beside the question,
windows start at ``0, doc_stride, 2 * doc_stride, ...`` and hold up to ``m`` tokens each; the first window that
reaches the context's end is the last one (so it may be shorter). Consecutive windows share ``m - doc_stride``
tokens, so every answer of at most ``m - doc_stride + 1`` tokens lies whole inside at least one window.

Labels: a window holding the (first) gold answer whole points ``start_position``/``end_position`` at the input
positions of its first and last token; any other window points both at 0 (the ``[CLS]`` position, BERT's "not in
this window").

Shapes: B features, T input positions (special tokens included).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ctxemb.core.validation import check_int
from ctxemb.tasks.sequence.features import pad_inputs
from ctxemb.tasks.qa.squad import QAExample
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QAFeature:
    """One model input: a question and one window of its context.

    Attributes:
        input_ids: T token ids, special tokens included.
        token_type_ids: T segment ids.
        example_index: index of the example (in the list given to :func:`encode_qa`) this window comes from.
        context_offsets: T entries: ``(begin, end)`` character offsets into the example's context for a context
            token, None for question and special tokens.
        start_position: input position of the gold answer's first token if this window holds the (first) gold
            answer whole, else 0; None for unlabelled features.
        end_position: input position of the gold answer's last token (inclusive), else 0; None when unlabelled.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    example_index: int
    context_offsets: list[tuple[int, int] | None]
    start_position: int | None = None
    end_position: int | None = None


@dataclass(frozen=True)
class Answer:
    """A predicted answer: ``context[start_char:end_char] == text`` (end exclusive) and its start + end score."""

    text: str
    start_char: int
    end_char: int
    score: float


def encode_qa(tokenizer: Tokenizer, examples: Sequence[QAExample], *, max_length: int = 384, doc_stride: int = 128,
              max_query_length: int = 64, with_labels: bool = True) -> list[QAFeature]:
    """Turn questions and their contexts into model inputs, one per context window.

    Args:
        tokenizer: the model's tokenizer (its ``model_type`` fixes the special-token layout).
        examples: the questions.
        max_length: most tokens per input, special tokens included (at most the tokenizer's ``max_length``).
        doc_stride: the step, in context tokens, between the starts of consecutive windows of one context (BERT's
            ``doc_stride``; *not* the overlap, which is the window's content size minus ``doc_stride``).
        max_query_length: questions longer than this many tokens are cut to it (counted and logged).
        with_labels: label every window with the first gold answer's token positions (see the module docstring);
            False leaves ``start_position``/``end_position`` None.

    Returns:
        The features, grouped by example and in example order; windows of one example in context order.

    Raises:
        ValueError: ``max_length`` exceeds the tokenizer's, or leaves no room for context after a question of
            ``max_query_length`` tokens and the special tokens; ``doc_stride`` is larger than that room (context
            would be skipped); an example's question or context is empty; a gold answer's text does not match its
            context at its start or covers no token.
        TypeError: an integer argument is not an int.
    """
    examples = list(examples)
    if not examples:
        raise ValueError("examples is empty: expected at least one QAExample")
    max_length = check_int(max_length, "max_length", low=1, high=tokenizer.max_length,
                           high_text="the tokenizer's max_length")
    max_query_length = check_int(max_query_length, "max_query_length", low=1)
    n_special = len(tokenizer.with_specials([], [])[0])
    min_room = max_length - n_special - max_query_length
    if min_room < 1:
        raise ValueError(f"max_length {max_length} leaves no room for context: expected more than "
                         f"max_query_length {max_query_length} + {n_special} special tokens = "
                         f"{max_query_length + n_special}")
    doc_stride = check_int(doc_stride, "doc_stride", low=1, high=min_room,
                           high_text=f"the fewest context tokens per window: max_length {max_length} - "
                                     f"{n_special} special tokens - max_query_length {max_query_length}")
    for i, ex in enumerate(examples):
        if not isinstance(ex, QAExample):
            raise TypeError(f"examples[{i}] must be a QAExample, got {type(ex).__name__}")
        for field in ("question", "context"):
            if not getattr(ex, field).strip():
                raise ValueError(f"examples[{i}] (id {ex.id!r}) has an empty {field}")

    questions = [t.ids for t in tokenizer.tokenize([ex.question for ex in examples])]
    unique_contexts = list(dict.fromkeys(ex.context for ex in examples))  # SQuAD asks many questions per passage
    tokenized = dict(zip(unique_contexts, tokenizer.tokenize(unique_contexts)))

    features: list[QAFeature] = []
    n_cut = n_lost = 0
    for i, (ex, q_ids) in enumerate(zip(examples, questions)):
        if len(q_ids) > max_query_length:
            n_cut += 1
            q_ids = q_ids[:max_query_length]
        ctx = tokenized[ex.context]
        answer = _answer_tokens(ex, ctx, i) if with_labels else None
        room = max_length - n_special - len(q_ids)
        found = False
        for start, stop in _window_starts(len(ctx), room, doc_stride):
            ids, types = tokenizer.with_specials(q_ids, ctx.ids[start:stop])
            first = len(ids) - 1 - (stop - start)  # input position of context token `start`
            offsets: list[tuple[int, int] | None] = [None] * len(ids)
            offsets[first:first + stop - start] = ctx.offsets[start:stop]
            s_pos = e_pos = None
            if with_labels:
                s_pos = e_pos = 0
                if answer is not None and start <= answer[0] and answer[1] <= stop:
                    s_pos, e_pos = first + answer[0] - start, first + answer[1] - 1 - start
                    found = True
            features.append(QAFeature(ids, types, i, offsets, s_pos, e_pos))
        n_lost += answer is not None and not found
    if n_cut:
        logger.warning("%d of %d questions were longer than max_query_length=%d tokens and were cut to it",
                       n_cut, len(examples), max_query_length)
    if n_lost:
        logger.warning("%d of %d examples have their gold answer whole in no window, so all their windows are "
                       "labelled 'not here' (0, 0); only answers of at most a window's room - doc_stride (%d) + 1 "
                       "tokens are sure to fit: raise max_length or lower doc_stride", n_lost, len(examples), doc_stride)
    logger.debug("%d examples gave %d features", len(examples), len(features))
    return features


def _window_starts(n: int, room: int, doc_stride: int) -> list[tuple[int, int]]:
    """Windows ``[start, stop)`` over ``n`` tokens: starts ``doc_stride`` apart, up to ``room`` tokens each, the last
    the first one to reach ``n``."""
    out = []
    start = 0
    while True:
        stop = min(start + room, n)
        out.append((start, stop))
        if stop == n:
            return out
        start += doc_stride


def _answer_tokens(ex: QAExample, ctx, index: int) -> tuple[int, int] | None:
    """Token range ``[start, stop)`` of the example's first gold answer; None when it has none."""
    if not ex.answers:
        return None
    text, begin = ex.answers[0]
    if ex.context[begin:begin + len(text)] != text:
        raise ValueError(f"examples[{index}] (id {ex.id!r}): answer {text!r} does not match the context at "
                         f"character {begin}: expected context[{begin}:{begin + len(text)}] == the answer, got "
                         f"{ex.context[begin:begin + len(text)]!r}")
    try:
        return ctx.char_span_to_tokens(begin, begin + len(text))
    except ValueError as e:
        raise ValueError(f"examples[{index}] (id {ex.id!r}): {e}") from None


class QACollator:
    """Pads a list of :class:`QAFeature` into a batch: ``input_ids``, ``attention_mask``, ``token_type_ids``
    (B, T) long and, for labelled features, ``start_positions``, ``end_positions`` (B,) long — the arguments of
    ``transformers``' ``*ForQuestionAnswering.forward``."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = check_int(pad_token_id, "pad_token_id", low=0)

    def __call__(self, items: Sequence[QAFeature]) -> dict[str, torch.Tensor]:
        if len(items) == 0:
            raise ValueError("cannot collate an empty list of features")
        labelled = [it.start_position is not None for it in items]
        if any(labelled) and not all(labelled):
            raise ValueError(f"features mix labelled and unlabelled ones ({sum(labelled)} of {len(items)} labelled)")
        batch = pad_inputs(items, self.pad_token_id)
        if labelled[0]:
            batch["start_positions"] = torch.tensor([it.start_position for it in items], dtype=torch.long)
            batch["end_positions"] = torch.tensor([it.end_position for it in items], dtype=torch.long)
        return batch


def best_answers(examples: Sequence[QAExample], features: Sequence[QAFeature], start_logits, end_logits, *,
                 max_answer_length: int = 30) -> dict[str, Answer]:
    """The best-scoring answer span of every example, searched exactly over all its windows.

    The answer of an example is the span of context tokens ``i..j`` (inclusive), in any one of its windows, that
    maximises ``start_logits[i] + end_logits[j]`` subject to ``i <= j <= i + max_answer_length - 1`` (so
    ``max_answer_length`` counts tokens). Question and special tokens are never chosen, and no "no answer" is
    predicted (SQuAD 1.1 / XQuAD). The span is mapped back to characters through the window's ``context_offsets``
    and sliced from the original context, so accents, case and spacing are the context's own. Ties go to the
    earliest window, then the earliest start, then the earliest end.

    Args:
        examples: the examples given to :func:`encode_qa`.
        features: their features, from :func:`encode_qa`.
        start_logits: one 1-D array or tensor per feature, of at least that feature's length (positions beyond it,
            e.g. batch padding, are ignored).
        end_logits: the same for the answer's end.
        max_answer_length: the most tokens an answer may have.

    Returns:
        ``{example id: Answer}``.

    Raises:
        ValueError: the logits are not one per feature, not 1-D, shorter than their feature, or not finite at its
            context positions (-inf elsewhere, e.g. a mask over the question, is fine); a feature's
            ``example_index`` is out of range; an example has no feature with a context token.
    """
    max_answer_length = check_int(max_answer_length, "max_answer_length", low=1)
    examples, features = list(examples), list(features)
    start_logits, end_logits = list(start_logits), list(end_logits)
    for name, logits in (("start_logits", start_logits), ("end_logits", end_logits)):
        if len(logits) != len(features):
            raise ValueError(f"{name} must hold one array per feature: expected {len(features)}, got {len(logits)}")
    band = None
    best: list[tuple[float, int, int, int] | None] = [None] * len(examples)  # (score, feature, i, j)
    for f, feat in enumerate(features):
        if not 0 <= feat.example_index < len(examples):
            raise ValueError(f"features[{f}].example_index is {feat.example_index}: expected an index into the "
                             f"{len(examples)} examples")
        positions = np.array([p for p, o in enumerate(feat.context_offsets) if o is not None], dtype=np.int64)
        if positions.size == 0:
            continue
        s = _logits_row(start_logits[f], "start_logits", f, len(feat.input_ids), positions)
        e = _logits_row(end_logits[f], "end_logits", f, len(feat.input_ids), positions)
        n = positions.size
        if band is None or band.shape[0] < n:
            k = np.arange(n)
            band = (k[None, :] >= k[:, None]) & (k[None, :] - k[:, None] < max_answer_length)
        scores = np.where(band[:n, :n], s[:, None] + e[None, :], -np.inf)
        flat = int(np.argmax(scores))  # first maximum in row-major order: earliest start, then earliest end
        i, j = divmod(flat, n)
        score = float(scores[i, j])
        cur = best[feat.example_index]
        if cur is None or score > cur[0]:
            best[feat.example_index] = (score, f, int(positions[i]), int(positions[j]))
    out: dict[str, Answer] = {}
    for x, (ex, b) in enumerate(zip(examples, best)):
        if b is None:
            raise ValueError(f"examples[{x}] (id {ex.id!r}) has no feature with a context token: expected the "
                             "features encode_qa made for these examples")
        score, f, i, j = b
        begin, end = features[f].context_offsets[i][0], features[f].context_offsets[j][1]
        out[ex.id] = Answer(ex.context[begin:end], begin, end, score)
    return out


def _logits_row(values, name: str, index: int, length: int, positions: np.ndarray) -> np.ndarray:
    """One feature's logits (of at least ``length`` positions) at its context ``positions``, as float64."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}[{index}] must be 1-D, got shape {arr.shape}")
    if arr.shape[0] < length:
        raise ValueError(f"{name}[{index}] has {arr.shape[0]} positions: expected at least the feature's {length}")
    arr = arr[positions]
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}[{index}] holds NaN or infinity at a context position")
    return arr
