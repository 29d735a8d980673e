"""Hard negatives mined before training: for each anchor, the corpus texts ranked highest that are not its positive.

The corpus is every distinct positive and given negative of the training rows. The ranking comes from the model
before training (``mine_with="model"``): its vectors go into an exact FAISS inner-product index over unit vectors
(cosine, as :class:`ctxemb.search.SemanticIndex`'s flat kind computes it; the search layer sits above fine-tuning,
so this module builds the same FAISS structure itself); or from BM25 (``mine_with="bm25"``, the ``bm25s`` package
with the search layer's defaults: Lucene's variant, k1 1.5, b 0.75, English stopwords), the negatives of DPR
(Karpukhin et al. 2020): passages that share the anchor's words without answering it, which teach a dense model
the lexical cues BM25 ranks by. Either way the filters below use the model's cosines. For each anchor the
``mine_range`` best candidates are read in order and kept unless

- it is the anchor's positive (the same text), the anchor itself, or a negative the row already has;
- it is a near-duplicate of the positive: ``cos(candidate, positive) >= duplicate_threshold``;
- with ``margin`` set, it scores too close to the positive to be a safe negative (a likely false negative):
  ``cos(anchor, candidate) > cos(anchor, positive) - margin`` (NV-Retriever's positive-aware filter, and
  sentence-transformers' ``absolute_margin``).

The first ``k`` kept are the row's mined negatives (fewer when the range runs out; the collator pads).

Shapes: A anchors, C corpus texts, H embedding size, R the range searched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ctxemb.core.validation import check_choice, unit_rows
from ctxemb.tasks.contrastive.data import ContrastiveExample
# the mining settings' choices and checks live with the contrastive settings (read without torch); importable from
# here as before
from ctxemb.tasks.contrastive.config import MINE_WITH, check_mining
from ctxemb.core.lexical_text import lexical_forms

logger = logging.getLogger(__name__)

__all__ = ["MINE_WITH", "MiningStats", "add_mined_negatives", "bm25_candidates", "check_mining",
           "mine_hard_negatives"]

@dataclass(frozen=True)
class MiningStats:
    """What the mining left out, for the run record."""

    anchors: int
    corpus: int
    mined: int
    short_rows: int  # rows that got fewer than k negatives
    excluded_positive: int
    excluded_duplicate: int
    excluded_margin: int

    def to_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.__dict__.items()}


def bm25_candidates(anchors: Sequence[str], corpus: Sequence[str], depth: int) -> np.ndarray:
    """(A, min(depth, C)) corpus indices ranked by BM25 for each anchor, best first (``bm25s``: Lucene's variant,
    k1 1.5, b 0.75, English stopwords, lower-cased after Unicode NFKC and case folding; the search layer's defaults
    and tokenisation, :mod:`ctxemb.core.lexical_text`); -1 where an anchor shares no word with enough texts to fill its
    row."""
    try:
        import bm25s
    except ImportError:
        raise ImportError("mining with BM25 (mine_with='bm25') needs the bm25s package: pip install 'ctxemb[hybrid]' "
                          "(or pip install bm25s)") from None
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import: its lines would leak
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(bm25s.tokenize(lexical_forms(corpus), lower=True, stopwords="en", show_progress=False),
                    show_progress=False)
    depth = min(depth, len(corpus))
    out = np.full((len(anchors), depth), -1, dtype=np.int64)
    queries = bm25s.tokenize(lexical_forms(anchors), lower=True, stopwords="en", return_ids=False, show_progress=False)
    for i, tokens in enumerate(queries):
        ids = retriever.get_tokens_ids(tokens)
        if not ids:
            continue
        scores = retriever.get_scores_from_ids(ids)  # (C,); > 0 exactly where a query term occurs (Lucene's idf > 0)
        matched = np.flatnonzero(scores > 0)
        order = matched[np.lexsort((matched, -scores[matched]))][:depth]  # ties: corpus order
        out[i, :len(order)] = order
    return out


def mine_hard_negatives(anchor_vectors: np.ndarray, corpus_vectors: np.ndarray, positive_index: Sequence[int], *,
                        k: int, mine_range: int = 50, duplicate_threshold: float = 0.95, margin: float | None = None,
                        exclude: Sequence[Sequence[int]] | None = None,
                        candidates: np.ndarray | None = None) -> tuple[list[list[int]], MiningStats]:
    """Pick up to ``k`` hard negatives per anchor among the corpus (see the module docstring).

    Args:
        anchor_vectors: (A, H) anchor vectors (normalised here, on a copy).
        corpus_vectors: (C, H) corpus vectors.
        positive_index: (A,) the corpus index of each anchor's positive.
        k: negatives per anchor.
        mine_range: candidates read per anchor (the top ``mine_range`` by cosine).
        duplicate_threshold: a candidate at least this similar to the positive is a near-duplicate, left out.
        margin: None, or leave out candidates scoring above ``cos(anchor, positive) - margin``.
        exclude: per anchor, further corpus indices never to pick (the anchor's own text, given negatives).
        candidates: (A, R) corpus indices already ranked per anchor, best first, -1 for none (e.g.
            :func:`bm25_candidates`); None ranks by the cosine. The filters use the cosines either way.

    Returns:
        (per anchor, the chosen corpus indices best first; the counts).

    Raises:
        ValueError: bad settings or shapes.
    """
    check_mining(k, mine_range, duplicate_threshold, margin)
    a = unit_rows(np.asarray(anchor_vectors), "anchor_vectors", dtype=np.float32)
    c = unit_rows(np.asarray(corpus_vectors), "corpus_vectors", dtype=np.float32)
    pos = np.asarray(positive_index, dtype=np.int64)
    if a.ndim != 2 or c.ndim != 2 or a.shape[1] != c.shape[1] or pos.shape != (a.shape[0],):
        raise ValueError(f"anchor_vectors (A, H), corpus_vectors (C, H) and positive_index (A,) expected; got "
                         f"{a.shape}, {c.shape}, {pos.shape}")
    if pos.size and (pos.min() < 0 or pos.max() >= c.shape[0]):
        raise ValueError(f"positive_index must index the {c.shape[0]} corpus rows; got values in "
                         f"[{pos.min()}, {pos.max()}]")
    if candidates is None:
        import faiss  # imported when mining, not when the task registry is

        index = faiss.IndexFlatIP(c.shape[1])
        index.add(c)
        r = min(mine_range + 1, c.shape[0])  # +1: the positive itself is usually the first hit
        found = index.search(a, r)[1]  # (A, R)
    else:
        found = np.asarray(candidates, dtype=np.int64)[:, :mine_range + 1]
        if found.ndim != 2 or found.shape[0] != a.shape[0] or found.max(initial=-1) >= c.shape[0]:
            raise ValueError(f"candidates must be (A={a.shape[0]}, R) corpus indices below {c.shape[0]}; got shape "
                             f"{found.shape}")
    pos_score = (a * c[pos]).sum(1)  # (A,) cos(anchor, positive)
    stats = dict(positive=0, duplicate=0, margin=0)
    chosen: list[list[int]] = []
    for i in range(a.shape[0]):
        skip = set(exclude[i]) if exclude is not None else set()
        row: list[int] = []
        for j in found[i]:
            if len(row) == k or j < 0:
                break
            if j == pos[i] or j in skip:
                stats["positive"] += int(j == pos[i])
                continue
            if float(c[j] @ c[pos[i]]) >= duplicate_threshold:
                stats["duplicate"] += 1
                continue
            if margin is not None and float(a[i] @ c[j]) > pos_score[i] - margin:
                stats["margin"] += 1
                continue
            row.append(int(j))
        chosen.append(row)
    out = MiningStats(anchors=a.shape[0], corpus=c.shape[0], mined=sum(map(len, chosen)),
                      short_rows=sum(len(x) < k for x in chosen), excluded_positive=stats["positive"],
                      excluded_duplicate=stats["duplicate"], excluded_margin=stats["margin"])
    return chosen, out


def add_mined_negatives(examples: Sequence[ContrastiveExample], embed, *, k: int, mine_range: int = 50,
                        duplicate_threshold: float = 0.95, margin: float | None = None, mine_with: str = "model"
                        ) -> tuple[list[ContrastiveExample], MiningStats]:
    """The rows with ``k`` mined negatives appended to their given ones (see :func:`mine_hard_negatives`).

    Args:
        examples: the training rows.
        embed: ``embed(texts) -> (N, H)`` vectors (the model before training).
        mine_with: ``"model"`` (rank by the cosine) or ``"bm25"`` (rank by BM25; filter by the cosine).
    """
    check_choice(mine_with, "mine_with", MINE_WITH)
    corpus: dict[str, int] = {}
    for ex in examples:
        for t in (ex.positive, *ex.negatives):
            corpus.setdefault(t, len(corpus))
    texts = list(corpus)
    anchors = list(dict.fromkeys(ex.anchor for ex in examples))
    corpus_vectors = embed(texts)
    anchor_vectors = embed(anchors)
    row_of = {t: i for i, t in enumerate(anchors)}
    exclude = [[corpus[t] for t in ex.negatives] + ([corpus[ex.anchor]] if ex.anchor in corpus else [])
               for ex in examples]
    rows = [row_of[ex.anchor] for ex in examples]
    candidates = None
    if mine_with == "bm25":
        candidates = bm25_candidates(anchors, texts, mine_range + 1)[rows]
    chosen, stats = mine_hard_negatives(anchor_vectors[rows], corpus_vectors,
                                        [corpus[ex.positive] for ex in examples], k=k, mine_range=mine_range,
                                        duplicate_threshold=duplicate_threshold, margin=margin, exclude=exclude,
                                        candidates=candidates)
    logger.info("mined %d hard negatives for %d rows from %d corpus texts (%d rows short of %d; left out: %d "
                "positives, %d near-duplicates, %d within the margin)", stats.mined, stats.anchors, stats.corpus,
                stats.short_rows, k, stats.excluded_positive, stats.excluded_duplicate, stats.excluded_margin)
    return [replace(ex, negatives=ex.negatives + tuple(texts[j] for j in row)) for ex, row in zip(examples, chosen)], stats
