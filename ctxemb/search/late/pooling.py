"""Token pooling: fewer stored vectors per document by merging near-identical token vectors (Clavié et al. 2024).

Within each document, the token vectors are clustered hierarchically (Ward linkage on the unit vectors, scipy) into
``ceil(T / pool_factor)`` clusters; each cluster is stored as the normalised mean of its members. MaxSim then sees
fewer, smoother document vectors: the index shrinks by about ``pool_factor`` at a retrieval cost measured in
``benchmarks/results/beir_scifact.md``.

Shape legend: T tokens of one document, D dimensions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ctxemb.core.validation import check_int


def pool_tokens(vectors: np.ndarray, pool_factor: int) -> np.ndarray:
    """(ceil(T / pool_factor), D) unit vectors: the cluster means of one document's (T, D) token vectors.

    A factor of 1, or a document of at most 2 tokens, is returned unchanged (as float32 unit rows).
    """
    from scipy.cluster.hierarchy import fcluster, linkage

    pool_factor = check_int(pool_factor, "pool_factor", low=1)
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError("vectors must be (T, D) with T >= 1, got shape %s" % (x.shape,))
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    n_clusters = math.ceil(len(x) / pool_factor)
    if pool_factor == 1 or len(x) <= 2 or n_clusters >= len(x):
        return x
    labels = fcluster(linkage(x.astype(np.float64), method="ward"), t=n_clusters, criterion="maxclust")
    pooled = np.zeros((labels.max(), x.shape[1]), dtype=np.float64)
    np.add.at(pooled, labels - 1, x)
    pooled = pooled[np.bincount(labels - 1) > 0]
    return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def pool_documents(documents: Sequence[np.ndarray], pool_factor: int) -> list[np.ndarray]:
    """:func:`pool_tokens` of every document."""
    return [pool_tokens(d, pool_factor) for d in documents]
