"""Hybrid search: the settings of a hybrid :class:`ctxemb.search.SemanticIndex`, and fusing two rankings into one.

A hybrid index keeps a BM25 index of the items' texts (``ctxemb.search.lexical``) beside the vectors, under the same
ids. ``search(..., mode=...)`` ranks by

- ``"vector"``: the vectors alone (as a plain index);
- ``"bm25"``: BM25 over the texts alone; an item that shares no term with the query is not a match (so fewer than
  K results may come back); scores are BM25 scores;
- ``"hybrid"`` (the default of a hybrid index): the ``candidates`` best of each ranking (at least K), fused:

  - ``fusion="rrf"``, reciprocal rank fusion (Cormack et al., 2009): ``score = sum over the rankings holding the
    item of 1 / (rrf_k + rank)``, ranks from 1; an item missing from a ranking gets nothing from it.
  - ``fusion="weighted"``: ``score = alpha * v + (1 - alpha) * l``, where ``v`` and ``l`` are the vector and BM25
    scores min-max normalised over that ranking's candidates for the query (best 1, worst 0; 1 for all when they
    are equal), and 0 for an item missing from that ranking. ``alpha`` is the weight of the vectors.

  Ties keep the order in which items were first met: the vector ranking's candidates in rank order, then the
  BM25-only ones in rank order. Scores are the fused scores.

Shape legend: Q queries, K results per query, C candidates per ranking.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np

from ctxemb.core.validation import check_choice, check_int
from ctxemb.search.params import check_float

SearchMode = Literal["vector", "bm25", "hybrid"]
FusionMethod = Literal["rrf", "weighted"]
SEARCH_MODES: tuple[SearchMode, ...] = ("vector", "bm25", "hybrid")
FUSION_METHODS: tuple[FusionMethod, ...] = ("rrf", "weighted")
BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
# The settings a search call may override (the BM25 settings define the index and are fixed).
FUSION_OPTIONS = ("fusion", "rrf_k", "alpha", "candidates")


@dataclass(frozen=True)
class HybridParams:
    """The BM25 half of a hybrid index and how its ranking is fused with the vectors'.

    Attributes:
        fusion: ``"rrf"`` (reciprocal rank fusion) or ``"weighted"`` (weighted sum of min-max normalised scores);
            overridable per search.
        rrf_k: the RRF constant (> 0; 60 as in Cormack et al.); overridable per search.
        alpha: weight of the vector score in weighted fusion, in [0, 1] (1 - alpha for BM25); overridable.
        candidates: how deep each ranking is read before fusing (at least K is always read); overridable.
        method: the BM25 variant of ``bm25s``: ``"lucene"`` (default), ``"robertson"``, ``"atire"``, ``"bm25l"``,
            ``"bm25+"``.
        k1, b: BM25's term-frequency saturation and length normalisation (bm25s's defaults 1.5 and 0.75).
        delta: the BM25L / BM25+ shift (ignored by the other variants).
        stopwords: a stopword list of ``bm25s.tokenize`` by language (``"en"``, the default, as bm25s's own
            default; ``"de"``, ``"fr"``, ...), or None to keep every word.

    Tokenisation is ``bm25s.tokenize``'s, of texts and queries brought to Unicode NFKC and case-folded first
    (:mod:`ctxemb.core.lexical_text`: "ﬁle" and "file", "Ｆｕｌｌ" and "full", a composed and a decomposed "é", "Straße" and
    "STRASSE" are one term): lower-cased, words of two or more word characters (the regular expression
    ``(?u)\\b\\w\\w+\\b``, as scikit-learn's ``CountVectorizer``), stopwords removed, no stemming.
    """

    fusion: FusionMethod = "rrf"
    rrf_k: float = 60.0
    alpha: float = 0.5
    candidates: int = 100
    method: str = "lucene"
    k1: float = 1.5
    b: float = 0.75
    delta: float = 0.5
    stopwords: str | None = "en"

    def __post_init__(self):
        check_choice(self.fusion, "HybridParams.fusion", FUSION_METHODS)
        rrf_k = check_float(self.rrf_k, "HybridParams.rrf_k", low=0.0)
        if rrf_k == 0:
            raise ValueError("HybridParams.rrf_k must be > 0; got 0")
        alpha = check_float(self.alpha, "HybridParams.alpha", low=0.0)
        if alpha > 1:
            raise ValueError("HybridParams.alpha must lie in [0, 1] (the weight of the vector score); got %r" % alpha)
        check_choice(self.method, "HybridParams.method", BM25_METHODS)
        object.__setattr__(self, "rrf_k", rrf_k)
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "candidates", check_int(self.candidates, "HybridParams.candidates", low=1))
        object.__setattr__(self, "k1", check_float(self.k1, "HybridParams.k1", low=0.0))
        object.__setattr__(self, "b", check_float(self.b, "HybridParams.b", low=0.0))
        if self.b > 1:
            raise ValueError("HybridParams.b must lie in [0, 1]; got %r" % self.b)
        object.__setattr__(self, "delta", check_float(self.delta, "HybridParams.delta", low=0.0))
        if self.stopwords is not None and not isinstance(self.stopwords, str):
            raise TypeError("HybridParams.stopwords must be a language code such as 'en', or None; got %r"
                            % (self.stopwords,))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "HybridParams":
        """Raises TypeError for an unknown field (and what ``__init__`` raises for a bad value)."""
        return cls(**d)


def resolve_hybrid(hybrid) -> HybridParams | None:
    """``SemanticIndex(hybrid=...)``: None/False (no BM25 part), True (the defaults) or a ``HybridParams``."""
    if hybrid is None or hybrid is False:
        return None
    if hybrid is True:
        return HybridParams()
    if not isinstance(hybrid, HybridParams):
        raise TypeError("hybrid must be a HybridParams, True (its defaults) or None; got %s" % type(hybrid).__name__)
    return hybrid


# ------------------------------------------------------------------------------------------------------- fusion


def rrf_fuse(rankings: list[np.ndarray], rrf_k: float) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal rank fusion of one query's rankings.

    Args:
        rankings: label arrays, best first (-1 entries are skipped).
        rrf_k: the RRF constant.

    Returns:
        (scores, labels), best first; ties keep the order in which labels were first met.
    """
    total: dict[int, float] = {}
    for ranking in rankings:
        rank = 0
        for label in ranking.tolist():
            if label < 0:
                continue
            rank += 1
            total[label] = total.get(label, 0.0) + 1.0 / (rrf_k + rank)
    return _sorted(total)


def minmax(scores: np.ndarray) -> np.ndarray:
    """Scores mapped to [0, 1] (best 1, worst 0); all ones when they are all equal."""
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) == 0:
        return scores
    lo, hi = scores.min(), scores.max()
    if not hi > lo:
        return np.ones_like(scores)
    return (scores - lo) / (hi - lo)


def weighted_fuse(rankings: list[tuple[np.ndarray, np.ndarray]], weights: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Weighted sum of min-max normalised scores for one query.

    Args:
        rankings: (scores, labels) pairs, best first (-1 labels are skipped).
        weights: one weight per ranking.

    Returns:
        (scores, labels), best first; ties keep the order in which labels were first met.
    """
    total: dict[int, float] = {}
    for (scores, labels), weight in zip(rankings, weights):
        keep = labels >= 0
        for label, s in zip(labels[keep].tolist(), minmax(scores[keep]).tolist()):
            total[label] = total.get(label, 0.0) + weight * s
    return _sorted(total)


def _sorted(total: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    labels = np.fromiter(total.keys(), dtype=np.int64, count=len(total))
    scores = np.fromiter(total.values(), dtype=np.float64, count=len(total))
    order = np.argsort(-scores, kind="stable")  # stable: ties keep the first-met order
    return scores[order], labels[order]


# ------------------------------------------------------------------------------------------------------- search


def check_mode(mode, hybrid: HybridParams | None) -> SearchMode:
    """The search mode (None: "hybrid" for a hybrid index, else "vector").

    Raises:
        ValueError: an unknown mode, or "bm25"/"hybrid" on an index without a BM25 part.
    """
    if mode is None:
        return "vector" if hybrid is None else "hybrid"
    check_choice(mode, "mode", SEARCH_MODES)
    if mode != "vector" and hybrid is None:
        raise ValueError("mode=%r needs a hybrid index (SemanticIndex(..., hybrid=True), whose add() takes texts=); "
                         "this index has vectors only" % mode)
    return mode


def check_query_texts(texts, mode: SearchMode, n_queries: int | None) -> tuple[list[str] | None, bool | None]:
    """The query texts as a list, and whether one text (a str) was given; checks them against the mode.

    Args:
        texts: a str, a sequence of str, or None.
        mode: the resolved mode.
        n_queries: the number of query vectors (None when none were given).

    Raises:
        TypeError / ValueError: texts missing for "bm25"/"hybrid", given for "vector", not strings, or another
            count than the query vectors.
    """
    if mode == "vector":
        if texts is not None:
            raise ValueError("texts are used by mode='bm25' or 'hybrid'; this search has mode='vector'")
        return None, None
    if texts is None:
        raise ValueError("mode=%r ranks by the query texts: pass texts= (one per query vector)%s"
                         % (mode, "" if mode == "bm25" else ", or mode='vector' to use the vectors alone"))
    single = isinstance(texts, str)
    if isinstance(texts, bytes) or not (single or hasattr(texts, "__iter__")):
        raise TypeError("texts must be a str or a sequence of str; got %s" % type(texts).__name__)
    texts = [texts] if single else list(texts)
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError("texts[%d] must be a str; got %s" % (bad, type(texts[bad]).__name__))
    if n_queries is not None and n_queries != len(texts):
        raise ValueError("there are %d query vectors but %d texts; give one text per query" % (n_queries, len(texts)))
    return texts, single


def fusion_settings(hybrid: HybridParams | None, mode: SearchMode, overrides: dict) -> HybridParams | None:
    """``hybrid`` with a search call's fusion overrides (checked by ``HybridParams``); None for a plain index.

    Raises:
        ValueError: an override given to a search that does not fuse (mode "vector" or "bm25").
    """
    given = {name: value for name, value in overrides.items() if value is not None}
    if given and mode != "hybrid":
        raise ValueError("%s only apply to mode='hybrid'; this search has mode=%r" % (", ".join(sorted(given)), mode))
    return dataclasses.replace(hybrid, **given) if given else hybrid


def fuse_batch(
    vector: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], k: int, settings: HybridParams
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse per-query vector and BM25 candidates.

    Args:
        vector: (Q, C) scores and labels of the vector search (-1 where fewer were found).
        lexical: (Q, C') scores and labels of BM25 (-1 where fewer matched).
        k: results per query.
        settings: ``fusion``, ``rrf_k``, ``alpha``.

    Returns:
        (Q, k) float32 fused scores (-inf where fewer) and int64 labels (-1 where fewer).
    """
    (vs, vl), (ls, ll) = vector, lexical
    q = vl.shape[0]
    out_s = np.full((q, k), -np.inf, dtype=np.float32)
    out_l = np.full((q, k), -1, dtype=np.int64)
    for r in range(q):
        if settings.fusion == "rrf":
            s, lab = rrf_fuse([vl[r], ll[r]], settings.rrf_k)
        else:
            s, lab = weighted_fuse([(vs[r], vl[r]), (ls[r], ll[r])], [settings.alpha, 1.0 - settings.alpha])
        n = min(k, len(lab))
        out_s[r, :n], out_l[r, :n] = s[:n], lab[:n]
    return out_s, out_l


def search_labels(
    index,
    queries,
    k: int,
    texts,
    mode,
    index_overrides: dict,
    fusion_overrides: dict,
    vector_search: Callable[[object, int, dict], tuple[np.ndarray, np.ndarray, bool]],
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``SemanticIndex.search``'s labels in any mode (see the module docstring).

    Args:
        index: the index (its ``hybrid`` settings and ``_lexical`` BM25 part).
        queries: (Q, H) / (H,) vectors, or None for mode "bm25".
        k: results per query.
        texts: the query texts (mode "bm25"/"hybrid").
        mode: "vector", "bm25", "hybrid" or None (see ``check_mode``).
        index_overrides: ef_search / nprobe / k_factor for the vector search.
        fusion_overrides: fusion / rrf_k / alpha / candidates.
        vector_search: ``(queries, depth, index_overrides) -> (scores, labels, single)``.

    Returns:
        (Q, K') scores and labels (-1 where fewer) and whether the query was a single one.
    """
    k = check_int(k, "k", low=1)
    mode = check_mode(mode, index.hybrid)
    settings = fusion_settings(index.hybrid, mode, fusion_overrides)
    if mode == "bm25":
        if queries is not None:
            raise ValueError("mode='bm25' ranks by the texts alone: pass queries=None (the vectors are not used)")
        given = [name for name, value in index_overrides.items() if value is not None]
        if given:
            raise ValueError("%s apply to the vector search; this search has mode='bm25'" % ", ".join(given))
        texts, single = check_query_texts(texts, mode, None)
        if len(index) == 0:
            raise ValueError("the index is empty: add items before searching")
        scores, labels = index._lexical.top(texts, min(k, len(index)))
        return scores, labels, single
    if queries is None:
        raise ValueError("queries (the query vectors) are needed for mode=%r" % mode)
    if mode == "vector":
        check_query_texts(texts, mode, None)
        return vector_search(queries, k, index_overrides)
    depth = max(k, settings.candidates)
    vs, vl, single = vector_search(queries, depth, index_overrides)
    texts, single_text = check_query_texts(texts, mode, vl.shape[0])
    if single != single_text:
        raise ValueError("a single query vector needs a single text (a str), and a batch a list of texts")
    ls, ll = index._lexical.top(texts, min(depth, len(index)))
    scores, labels = fuse_batch((vs, vl), (ls, ll), min(k, len(index)), settings)
    return scores, labels, single
