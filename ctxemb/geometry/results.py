"""What :func:`ctxemb.geometry.analyze` measures: per-layer geometry, projected word instances, the whole result.

Plain dataclasses with a JSON form (:meth:`AnalysisResult.to_dict`); :mod:`.analysis` fills them, and the table
(:func:`~ctxemb.geometry.analysis.format_analysis_table`) and :mod:`.plots` render them.

Shape legend: N word vectors per layer, L layers (hidden states 0..L), H hidden size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class LayerGeometry:
    """The geometry of the word vectors of one hidden-state layer.

    Attributes:
        layer: hidden-state index (0 = embedding output, L = last layer).
        n_vectors: number of word vectors N.
        anisotropy: mean cosine of distinct pairs, by post-processing name; "none" is the raw vectors. NaN where
            the post-processing could not be fitted (see ``errors``).
        top_dims: indices of the (up to) 3 dimensions with the largest contribution to the raw cosine.
        top_dim_shares: their shares of the raw anisotropy, same order.
        share_top1: share of the top dimension.
        share_top3: summed share of the top 3 dimensions.
        informativity_top1: r^2 between raw cosines and cosines without the top dimension.
        informativity_top3: the same without the top 3 dimensions.
        errors: post-processing name -> why it failed on this layer.
        notes: post-processing name -> warnings raised while fitting it (e.g. whitening a rank-deficient layer).
    """

    layer: int
    n_vectors: int
    anisotropy: dict[str, float]
    top_dims: list[int]
    top_dim_shares: list[float]
    share_top1: float
    share_top3: float
    informativity_top1: float
    informativity_top3: float
    errors: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


@dataclass
class WordInstance:
    """One occurrence of a chosen word, placed in the 2-D PCA projection of that word's instances.

    Attributes:
        word: the chosen word (lower-cased).
        sentence_index: index of its sentence in the corpus.
        word_index: its position in the sentence.
        context: a few words around it, the word itself upper-cased.
        x, y: coordinates on the first two principal components of the instances of this word.
    """

    word: str
    sentence_index: int
    word_index: int
    context: str
    x: float
    y: float


@dataclass
class AnalysisResult:
    """Everything :func:`analyze` measured.

    Attributes:
        layers: one :class:`LayerGeometry` per hidden state, 0..L.
        postprocessors: the post-processing names, "none" first.
        n_sentences: sentences in the corpus.
        n_vectors: word vectors per layer.
        hidden_size: H.
        words: the words projected.
        projection_layer: hidden-state index used for the projection, or None for the embedder's own pooling.
        projection: the projected instances.
        explained_variance_ratio: word -> variance ratio of its two principal components.
        embedder_config: the embedder's ``config.to_dict()`` when it has one.
        settings: pair count, seed and other knobs, for reproducing the run.
        files: kind ("json", "anisotropy", "rogue_dimensions", "word_projection") -> path written.
    """

    layers: list[LayerGeometry]
    postprocessors: list[str]
    n_sentences: int
    n_vectors: int
    hidden_size: int
    words: list[str]
    projection_layer: int | None
    projection: list[WordInstance]
    explained_variance_ratio: dict[str, list[float]]
    embedder_config: dict[str, Any] | None
    settings: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; NaN becomes None."""
        return _json_safe(asdict(self))


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj
