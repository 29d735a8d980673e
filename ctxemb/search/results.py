"""What a search of :class:`ctxemb.search.SemanticIndex` returns: ``Hit`` lists, or score and id arrays.

Shape legend: Q queries, K results per query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result.

    Attributes:
        id: the item's string id.
        score: cosine similarity (``metric="cosine"``) or inner product; higher is closer.
        metadata: the item's metadata as stored (a fresh JSON-decoded copy), or None.
    """

    id: str
    score: float
    metadata: dict | None


def hits(scores: np.ndarray, labels: np.ndarray, ids: list[str | None], metadata: Callable[[int], dict | None]
         ) -> list[list[Hit]]:
    """Q lists of ``Hit`` from (Q, K) scores and labels; FAISS's -1 fill (fewer than K found) is dropped."""
    results = []
    for r in range(labels.shape[0]):
        row = []
        for s, label in zip(scores[r].tolist(), labels[r].tolist()):
            item_id = ids[label] if 0 <= label < len(ids) else None
            if item_id is None:
                continue
            row.append(Hit(item_id, s, metadata(label)))
        results.append(row)
    return results


def id_arrays(scores: np.ndarray, labels: np.ndarray, ids: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """(Q, K) float32 scores and object ids: valid results moved to the left of each row, the rest id None and
    score -inf."""
    out_ids = np.empty(labels.shape, dtype=object)
    out = np.full(scores.shape, -np.inf, dtype=np.float32)
    for r in range(labels.shape[0]):
        j = 0
        for s, label in zip(scores[r], labels[r]):
            item_id = ids[label] if 0 <= label < len(ids) else None
            if item_id is None:  # FAISS's -1 fill (fewer than K found); never a tombstone (selector)
                continue
            out_ids[r, j] = item_id
            out[r, j] = s
            j += 1
    return out, out_ids
