"""Data of the contrastive task family: (anchor, positive[, negatives]) rows, the shipped recipes' data (SNLI as
AllNLI, XQuAD question -> passage), features and the collator, and the dev evaluations (retrieval MRR@10 / Recall@1,
STS-B Spearman), each also at the Matryoshka dimensions.

Rows. A user's table is a TSV or JSONL file read by the fine-tuning readers (:mod:`ctxemb.tasks.sequence.data`, same
file rules and errors): an anchor column, a positive column, and any number of hard-negative columns.

Keys. Every text gets an int key (equal texts, equal keys; anchors and candidates apart), so that the loss can leave
false negatives out of an anchor's softmax (:mod:`ctxemb.modeling.contrastive_loss`): two questions about one passage
in a batch, or a mined negative that is another row's positive.

Shapes: B rows, K hard negatives per row, T tokens, N texts, H hidden size.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ctxemb.core.validation import check_int
from ctxemb.tasks.sequence.features import pad_ids
from ctxemb.tasks.passages import split_sentences
from ctxemb.tasks.sequence.data import SNLI_LABELS, TextExample, _example_id, _text, _UniqueIds
from ctxemb.io.tables import BadRow, check_keys, is_path, open_rows, row_error
from ctxemb.metrics.correlation import spearman

logger = logging.getLogger(__name__)

__all__ = ["ContrastiveCollator", "ContrastiveExample", "ContrastiveFeature", "allnli_examples", "embed_texts",
           "encode_contrastive", "inverse_cloze_examples", "read_contrastive_table", "retrieval_metrics",
           "stsb_metrics", "xquad_retrieval_examples"]


@dataclass(frozen=True, slots=True)
class ContrastiveExample:
    """One row: an anchor (query, premise), its positive (passage, entailed hypothesis), hard negatives (possibly
    none), an id, and for an STS-style evaluation pair the gold ``score``."""

    anchor: str
    positive: str
    negatives: tuple[str, ...] = ()
    id: str = ""
    score: float | None = None


def read_contrastive_table(path: Any, *, anchor: str = "anchor", positive: str = "positive",
                           negatives: Sequence[str] = (), id: str | None = None) -> list[ContrastiveExample]:
    """Read a table of (anchor, positive[, negative...]) rows with named columns: any source
    :func:`ctxemb.io.tables.open_rows` reads (TSV, CSV, JSONL, JSON, Parquet, a saved ``datasets``
    directory; from Python a ``Dataset``, a ``DataFrame`` or a list of dicts), with the readers' rules (no blank
    text, ids unique).

    Args:
        path: the file or table.
        anchor, positive: the columns of the anchor and its positive.
        negatives: the columns of hard negatives (each row gets one negative per column).
        id: a column of unique ids; None gives each row's place (``"<file> line N"`` / ``"<source> row I"``).

    Returns:
        The rows in order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown format, a column named twice, or a bad row (naming the source, line or row and
            column).
    """
    columns = [anchor, positive, *negatives] + ([id] if id else [])
    for c in columns:
        if not isinstance(c, str) or not c:
            raise TypeError(f"column names must be non-empty strings; got {c!r}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"a column is named twice in anchor={anchor!r}, positive={positive!r}, "
                         f"negatives={list(negatives)!r}, id={id!r}")
    table = open_rows(path, required=columns, what="contrastive rows")
    ids = _UniqueIds()
    out = []
    for where, row in table.rows:
        if isinstance(row, BadRow):
            raise row_error(where, row)
        if table.columns is None:
            check_keys(where, row, columns)
        example_id = _example_id(row[id], where, id) if id else _place(path, where)
        out.append(ContrastiveExample(
            anchor=_text(row[anchor], where, anchor), positive=_text(row[positive], where, positive),
            negatives=tuple(_text(row[c], where, c) for c in negatives), id=ids.check(example_id, where)))
    if not out:
        raise ValueError(f"{table.name}: no contrastive rows")
    return out


def _place(source: Any, where: str) -> str:
    """A row's default id: ``"<file name>:<line or row>"`` for a file, else its place as messages name it."""
    return f"{Path(source).name}:{where.rsplit(' ', 1)[-1]}" if is_path(source) else where


def allnli_examples(pairs: Sequence[TextExample]) -> list[ContrastiveExample]:
    """SNLI pairs as AllNLI is used for sentence embedders: each (premise, entailed hypothesis) is a row with a
    contradiction of the same premise as its hard negative (a premise's contradictions are used in turn). Premises
    without an entailment or a contradiction give no row (their count is logged).

    Args:
        pairs: SNLI examples (text_a premise, text_b hypothesis, label an index of ``SNLI_LABELS``).
    """
    entail, contra = SNLI_LABELS.index("entailment"), SNLI_LABELS.index("contradiction")
    by_premise: dict[str, tuple[list[TextExample], list[str]]] = {}
    for ex in pairs:
        ents, cons = by_premise.setdefault(ex.text_a, ([], []))
        if ex.label == entail:
            ents.append(ex)
        elif ex.label == contra:
            cons.append(ex.text_b)
    out, skipped = [], 0
    for premise, (ents, cons) in by_premise.items():
        if not ents or not cons:
            skipped += 1
            continue
        for i, ex in enumerate(ents):
            out.append(ContrastiveExample(premise, ex.text_b, (cons[i % len(cons)],), ex.id))
    logger.info("AllNLI rows: %d from %d premises (%d premises without both an entailment and a contradiction)",
                len(out), len(by_premise), skipped)
    return out


def xquad_retrieval_examples(questions: Sequence[Any]) -> list[ContrastiveExample]:
    """XQuAD questions as retrieval rows: (question, its passage). ``questions`` are
    :class:`~ctxemb.tasks.qa.squad.QAExample` (e.g. ``xquad_split("train")``)."""
    return [ContrastiveExample(q.question, q.context, (), q.id) for q in questions]


def inverse_cloze_examples(passages: Sequence[str], *, per_passage: int, min_words: int = 6,
                           seed: int = 0) -> list[ContrastiveExample]:
    """Inverse cloze rows (Lee et al. 2019): a sentence of a passage as the anchor, the passage as its positive, up
    to ``per_passage`` sentences per distinct passage, drawn with ``seed``. The sentence stays in the passage (Lee
    et al. remove it 90% of the time to stop the model matching words): here the queries to serve are questions
    written from a sentence of their passage, where shared words are the signal BM25 wins with.

    Args:
        passages: passage texts (repeats are read once: XQuAD gives one row per question).
        per_passage: sentences drawn from each passage (fewer where it has fewer).
        min_words: shorter sentences (headings, pieces split at abbreviations) are not drawn.
        seed: the draw's seed.
    """
    per_passage = check_int(per_passage, "per_passage", low=1)
    rng = random.Random(seed)
    out = []
    for p, passage in enumerate(dict.fromkeys(passages)):
        sentences = [s for s in split_sentences(passage) if len(s.split()) >= min_words]
        for k, sentence in enumerate(rng.sample(sentences, min(per_passage, len(sentences)))):
            out.append(ContrastiveExample(sentence, passage, (), f"ict-{p}-{k}"))
    return out


# ---------------------------------------------------------------------------------------------- features, batches


@dataclass(frozen=True)
class ContrastiveFeature:
    """One row as ids: the anchor, the positive and K negatives (``[CLS] text [SEP]`` each), and their text keys
    (-1: a padding negative that no anchor sees)."""

    anchor_ids: list[int]
    positive_ids: list[int]
    negative_ids: tuple[list[int], ...]
    anchor_key: int
    positive_key: int
    negative_keys: tuple[int, ...]


def _ids(tokenizer, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], int]:
    max_length = min(max_length, tokenizer.max_length)
    room = max_length - len(tokenizer.with_specials([])[0])
    if room < 1:
        raise ValueError(f"max_length {max_length} leaves no room for text after the special tokens")
    out, cut = [], 0
    for t in tokenizer.tokenize(list(texts)):
        cut += len(t.ids) > room
        out.append(tokenizer.with_specials(t.ids[:room])[0])
    return out, cut


def encode_contrastive(tokenizer, examples: Sequence[ContrastiveExample], *, max_length: int
                       ) -> list[ContrastiveFeature]:
    """Tokenize every text of every row on its own, cut at ``max_length`` tokens (the count is logged). Rows with
    fewer negatives than the most any row has get padding negatives (key -1).

    Raises:
        ValueError: no rows, or a ``max_length`` too small for any text.
    """
    if not examples:
        raise ValueError("no rows to encode")
    k = max(len(ex.negatives) for ex in examples)
    texts = sorted({t for ex in examples for t in (ex.anchor, ex.positive, *ex.negatives)})
    ids, cut = _ids(tokenizer, texts, max_length)
    by_text = dict(zip(texts, ids))
    anchor_keys: dict[str, int] = {}
    cand_keys: dict[str, int] = {}
    out = []
    for ex in examples:
        negs = list(ex.negatives)
        pad = k - len(negs)
        out.append(ContrastiveFeature(
            by_text[ex.anchor], by_text[ex.positive], tuple(by_text[t] for t in negs) + (by_text[ex.positive],) * pad,
            anchor_keys.setdefault(ex.anchor, len(anchor_keys)), cand_keys.setdefault(ex.positive, len(cand_keys)),
            tuple(cand_keys.setdefault(t, len(cand_keys)) for t in negs) + (-1,) * pad))
    if cut:
        logger.warning("%d of %d distinct texts were longer than %d tokens and were cut at their end", cut,
                       len(texts), max_length)
    return out


class ContrastiveCollator:
    """Pads a list of :class:`ContrastiveFeature`: ``anchor_input_ids``/``anchor_attention_mask`` (B, T_a),
    ``candidate_input_ids``/``candidate_attention_mask`` (B * (1 + K), T_c) with the B positives first and then K
    blocks of B negatives, and the keys ``anchor_keys`` (B,), ``candidate_keys`` (B * (1 + K),)."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, items: Sequence[ContrastiveFeature], rng=None) -> dict[str, torch.Tensor]:
        k = len(items[0].negative_ids)
        cands = [it.positive_ids for it in items] + [it.negative_ids[j] for j in range(k) for it in items]
        ckeys = [it.positive_key for it in items] + [it.negative_keys[j] for j in range(k) for it in items]
        a_ids, a_mask = pad_ids([it.anchor_ids for it in items], self.pad_token_id)
        c_ids, c_mask = pad_ids(cands, self.pad_token_id)
        return {"anchor_input_ids": a_ids, "anchor_attention_mask": a_mask, "candidate_input_ids": c_ids,
                "candidate_attention_mask": c_mask,
                "anchor_keys": torch.tensor([it.anchor_key for it in items], dtype=torch.long),
                "candidate_keys": torch.tensor(ckeys, dtype=torch.long)}


# ---------------------------------------------------------------------------------------------- evaluation


def embed_texts(model, tokenizer, texts: Sequence[str], *, max_length: int, batch_size: int = 64,
                progress: str | None = None) -> np.ndarray:
    """(N, H) float32 unit vectors of ``texts`` from a bi-encoder (``model.encode``), in eval mode, batched by length
    (the caller's order is kept). The model's training mode is restored. ``progress``: the label of a bar over the
    batches (:func:`ctxemb.training.outputs.eval_bar`; None: no bar)."""
    from ctxemb.training.outputs import eval_bar

    ids, _ = _ids(tokenizer, texts, max_length)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    device = next(model.parameters()).device
    out = np.zeros((len(ids), model.config.hidden_size), dtype=np.float32)
    was_training = model.training
    model.eval()
    bar = eval_bar(-(-len(order) // batch_size), show=progress is not None, examples=len(order), desc=progress or "")
    try:
        for s in range(0, len(order), batch_size):
            chunk = order[s:s + batch_size]
            x, m = pad_ids([ids[i] for i in chunk], tokenizer.pad_token_id)
            out[chunk] = model.encode(x.to(device), m.to(device)).cpu().numpy()
            bar.update(1)
    finally:
        bar.close()
        model.train(was_training)
    return out


def _prefix(vectors: np.ndarray, d: int | None) -> np.ndarray:
    if d is None:
        return vectors
    v = vectors[:, :d]
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def retrieval_metrics(queries: np.ndarray, passages: np.ndarray, relevant: Sequence[int], *,
                      dims: Sequence[int] = ()) -> dict[str, float]:
    """MRR@10, Recall@1 and Recall@10 (x 100) of unit ``queries`` (Q, H) against ``passages`` (P, H), where query q's
    one relevant passage is ``relevant[q]`` (ties count against it); the same with the vectors truncated to each of
    ``dims`` and renormalised (keys suffixed ``_<d>``)."""
    relevant = np.asarray(relevant)
    out = {}
    for d in (None, *dims):
        s = _prefix(queries, d) @ _prefix(passages, d).T  # (Q, P)
        own = s[np.arange(len(relevant)), relevant]
        rank = 1 + (s > own[:, None]).sum(1) + ((s == own[:, None]).sum(1) - 1)
        suffix = "" if d is None else f"_{d}"
        out[f"mrr@10{suffix}"] = 100 * float(np.where(rank <= 10, 1.0 / rank, 0.0).mean())
        out[f"recall@1{suffix}"] = 100 * float((rank == 1).mean())
        out[f"recall@10{suffix}"] = 100 * float((rank <= 10).mean())
    return out


def retrieval_corpus(examples: Sequence[ContrastiveExample], distractors: Sequence[str] = ()
                     ) -> tuple[list[str], list[str], list[int]]:
    """The queries (anchors), the corpus (distinct positives and negatives, in first-seen order, then the distinct
    ``distractors`` not among them) and each query's relevant passage index, for :func:`retrieval_metrics`."""
    corpus: dict[str, int] = {}
    for ex in examples:
        for t in (ex.positive, *ex.negatives):
            corpus.setdefault(t, len(corpus))
    for t in distractors:
        corpus.setdefault(t, len(corpus))
    return [ex.anchor for ex in examples], list(corpus), [corpus[ex.positive] for ex in examples]


def stsb_metrics(a: np.ndarray, b: np.ndarray, scores: Sequence[float], *, dims: Sequence[int] = ()
                 ) -> dict[str, float]:
    """Spearman (x 100) between the cosines of unit vectors ``a``, ``b`` (N, H) and gold ``scores``; the same at each
    of ``dims`` (keys ``spearman_<d>``)."""
    out = {}
    for d in (None, *dims):
        cos = (_prefix(a, d) * _prefix(b, d)).sum(1)
        out["spearman" if d is None else f"spearman_{d}"] = 100 * spearman(np.asarray(scores, dtype=np.float64), cos)
    return out
