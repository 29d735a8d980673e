"""The synthetic collections: a two-level Gaussian mixture meant to look like sentence embeddings
(:class:`MixtureData`), and its calibration against real vectors (:func:`calibrate`: neighbour statistics and HNSW /
IVF-PQ recall on both)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np

from benchmarks.search.measure import recall_at_k
from ctxemb.search import HNSWParams, IVFPQParams, SemanticIndex

logger = logging.getLogger("benchmarks.search")


POINTS_PER_COMPONENT = 16


DATA_DESCRIPTION = (
    "Two-level Gaussian mixture in d=384: 1,000 topics and n/16 components (16 points per component at every "
    "size). A component's centre (norm ~1) is its topic's centre (60% of the variance) plus its own part; each "
    "component varies in its own random 64-dim subspace with power-law standard deviations "
    "(i^-0.3, total 1.4) plus isotropic noise (total 0.8); a shared offset gives random pairs cosine ~0.12; vectors "
    "L2-normalised. Queries: 1,000 fresh draws from the same mixture (not in the collection). At 16k vectors, HNSW "
    "and IVF-PQ recall on it is close to that on real all-MiniLM-L6-v2 sentence embeddings (HNSW somewhat easier at "
    "the smallest ef_search), though its neighbour cosines are lower (calibration table)."
)


class MixtureData:
    """Draws (N, H) L2-normalised float32 vectors from the benchmark's Gaussian mixture, reproducibly.

    Args:
        n_components: mixture components (the benchmark uses N / 16).
        dim: H.
        rank: dimension of each component's own subspace of variation.
        alpha: power-law exponent of the standard deviations inside that subspace.
        local: total standard deviation inside the subspace (the centres have norm ~1).
        isotropic: total standard deviation of the isotropic noise added to every vector.
        offset_cos: the expected cosine of two random vectors, set by a shared offset (anisotropy).
        n_topics: groups of components whose centres share a part (a second, coarser level of clustering).
        topic_share: the fraction of a centre's variance that comes from its topic.
        seed: seed of the mixture itself (draws take their own seeds).
    """

    def __init__(self, n_components: int, dim: int = 384, rank: int = 64, alpha: float = 0.3, local: float = 1.4,
                 isotropic: float = 0.8, offset_cos: float = 0.12, n_topics: int = 1000, topic_share: float = 0.6,
                 seed: int = 0):
        rng = np.random.default_rng(seed)
        self.seed, self.dim, self.rank, self.isotropic = seed, dim, rank, isotropic
        # Centres (norm ~1) = a topic part shared by the components of one topic + the component's own part, so
        # that beyond a point's own component its neighbours come from related components, as in real collections.
        topics = rng.standard_normal((n_topics, dim)) * math.sqrt(topic_share / dim)
        own = rng.standard_normal((n_components, dim)) * math.sqrt((1 - topic_share) / dim)
        self.centres = (topics[rng.integers(0, n_topics, n_components)] + own).astype(np.float32)  # (C, H)
        sd = np.arange(1, rank + 1, dtype=np.float64) ** -alpha
        self.sd = (sd / np.sqrt((sd**2).sum()) * local).astype(np.float32)  # (r,)
        # E|x|^2 = 1 + local^2 + isotropic^2 before the offset u; |u|^2 = c E|x|^2 / (1 - c) makes E[cos] ~ c.
        total = 1 + local**2 + isotropic**2
        u = rng.standard_normal(dim)
        self.offset = (u / np.linalg.norm(u) * math.sqrt(offset_cos * total / (1 - offset_cos))).astype(np.float32)

    @classmethod
    def for_size(cls, n: int, **kwargs) -> "MixtureData":
        return cls(max(1, n // POINTS_PER_COMPONENT), **kwargs)

    def basis(self, c: int) -> np.ndarray:
        """Component ``c``'s (r, H) subspace: Gaussian rows of norm ~1, nearly orthogonal in high dimension.

        Regenerated from (seed, c) on every draw instead of stored: at 1M vectors there are 62,500 components.
        """
        rng = np.random.default_rng([self.seed, c])
        return (rng.standard_normal((self.rank, self.dim), dtype=np.float32) / np.float32(math.sqrt(self.dim)))

    def draw(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        comp = rng.integers(0, len(self.centres), n)
        order = np.argsort(comp, kind="stable")
        counts = np.bincount(comp, minlength=len(self.centres))
        out = np.empty((n, self.dim), dtype=np.float32)
        start = 0
        for c in np.flatnonzero(counts):
            count = counts[c]
            rows = order[start : start + count]
            start += count
            z = rng.standard_normal((count, self.rank), dtype=np.float32) * self.sd  # (n_c, r)
            noise = rng.standard_normal((count, self.dim), dtype=np.float32) * (self.isotropic / math.sqrt(self.dim))
            out[rows] = self.centres[c] + z @ self.basis(c) + noise + self.offset
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def neighbour_stats(x: np.ndarray, q: np.ndarray, name: str) -> dict:
    """Neighbour statistics and approximate-search recall of one collection (used to calibrate the mixture)."""
    ids = [str(i) for i in range(len(x))]
    flat = SemanticIndex(x.shape[1]).add(ids, x, show_progress_bar=False)
    scores, truth = flat.search_array(q, 21)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(x), (2, 5000))
    # Levina-Bickel maximum-likelihood local intrinsic dimension from the 20 nearest neighbours (chord distances)
    dist = np.sqrt(np.maximum(2 - 2 * scores[:, :20].astype(np.float64), 1e-12))
    lid = float(np.mean(-1 / np.mean(np.log(dist[:, :-1] / dist[:, -1:]), axis=1)))
    out = {"collection": name, "n": len(x), "top1_cos": round(float(scores[:, 0].mean()), 3),
           "top10_cos": round(float(scores[:, 9].mean()), 3),
           "random_pair_cos": round(float(np.einsum("nh,nh->n", x[a], x[b]).mean()), 3), "lid_mle": round(lid, 1)}
    truth = truth[:, :10]
    hnsw = SemanticIndex(x.shape[1], params=HNSWParams(m=32, ef_construction=100)).add(ids, x, show_progress_bar=False)
    for ef in (16, 32, 64):
        out["hnsw_ef%d" % ef] = round(recall_at_k(hnsw.search_array(q, 10, ef_search=ef)[1], truth), 3)
    ivf = SemanticIndex(x.shape[1], params=IVFPQParams(nlist=256, pq_m=48)).add(ids, x, show_progress_bar=False)
    for nprobe in (4, 8, 16):
        out["ivfpq256_nprobe%d" % nprobe] = round(recall_at_k(ivf.search_array(q, 10, nprobe=nprobe)[1], truth), 3)
    logger.info("%s", json.dumps(out))
    return out


def calibrate(path: Path, dim: int) -> list[dict]:
    real = np.load(path).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    perm = np.random.default_rng(0).permutation(len(real))
    n_q = min(1000, len(real) // 10)
    rows = [neighbour_stats(real[perm[n_q:]], real[perm[:n_q]], "real: %s" % path.name)]
    data = MixtureData.for_size(len(real) - n_q, dim=dim)
    rows.append(neighbour_stats(data.draw(len(real) - n_q, seed=7), data.draw(n_q, seed=8), "synthetic mixture"))
    return rows
