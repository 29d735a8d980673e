"""The settings of the model heads that the training configurations read, in a module that imports no torch:
``ctxemb finetune --help``, ``ctxemb pretrain --help`` and ``ctxemb wsd train --help`` build their flags from those
configurations at once. (Any module of the package :mod:`ctxemb.modeling` loads torch: the package imports the
encoder.)

- The choices of the heads' settings: sequence classification's losses (:data:`REGRESSION_LOSSES`,
  :data:`PAIR_SIMILARITY_LOSSES`), the token and span heads' (:data:`BOUNDARY_KINDS`, :data:`SUMMARY_KINDS`,
  :data:`WORD_DECODINGS`), the NSP head's input (:data:`NSP_INPUTS`), the sense heads' (:data:`LAYER_POOLINGS`,
  :data:`SCORES`, :data:`NEGATIVES`, :data:`GLOSS_ENCODERS`).
- The contrastive loss's checks of its settings (:func:`check_scale`, :func:`check_matryoshka`).
- :class:`LateInteractionConfig`, how a late-interaction model turns texts into token vectors.

The modeling modules that use these names import them from here; other code imports them from here too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Sequence

from ctxemb.core.validation import check_choice, check_int

__all__ = ["BERT_MARKERS", "BOUNDARY_KINDS", "GLOSS_ENCODERS", "LAYER_POOLINGS", "NEGATIVES", "NSP_INPUTS",
           "PAIR_SIMILARITY_LOSSES", "REGRESSION_LOSSES", "SCORES", "SUMMARY_KINDS", "WORD_DECODINGS",
           "BoundaryKind", "GlossEncoder", "LateInteractionConfig", "LayerPooling", "LongDocuments", "Negatives",
           "NspInput", "Score", "SummaryKind", "WordDecoding", "check_matryoshka", "check_scale"]

# ---- sequence classification (ctxemb.modeling.sequence_classification)
#: A cross-encoder's losses for scored pairs: on the score, or a sigmoid cross-entropy against the scaled score.
REGRESSION_LOSSES: tuple[str, ...] = ("mse", "bce")
#: The bi-encoder's losses: the cosine regressed onto the scaled score, or the CoSENT ranking of the cosines.
PAIR_SIMILARITY_LOSSES: tuple[str, ...] = ("mse", "cosent")

# ---- token and span heads (ctxemb.modeling.token_classification)
BoundaryKind = Literal["tokens", "ffn"]
SummaryKind = Literal["mean", "attention"]
BOUNDARY_KINDS: tuple[str, ...] = ("tokens", "ffn")
SUMMARY_KINDS: tuple[str, ...] = ("mean", "attention")
WordDecoding = Literal["first", "mean"]
WORD_DECODINGS: tuple[str, ...] = ("first", "mean")

# ---- the next-sentence head (ctxemb.modeling.pretraining_heads)
NspInput = Literal["pooled", "cls"]
NSP_INPUTS: tuple[str, ...] = ("pooled", "cls")

# ---- the sense heads (ctxemb.modeling.sense_heads)
LayerPooling = Literal["mean", "sum", "concat"]
LAYER_POOLINGS: tuple[str, ...] = ("mean", "sum", "concat")
Score = Literal["dot", "cosine"]
SCORES: tuple[str, ...] = ("dot", "cosine")
Negatives = Literal["batch", "lemma"]
NEGATIVES: tuple[str, ...] = ("batch", "lemma")
GlossEncoder = Literal["shared", "separate"]
GLOSS_ENCODERS: tuple[str, ...] = ("shared", "separate")


# ---- the contrastive loss (ctxemb.modeling.contrastive_loss)
def check_scale(scale: float) -> float:
    """The loss's inverse temperature as a float.

    Raises:
        ValueError: not a positive finite number.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0 < scale < float("inf")):
        raise ValueError(f"scale must be a positive finite number (the inverse temperature, e.g. 20 for "
                         f"temperature 0.05); got {scale!r}")
    return float(scale)


def check_matryoshka(dims: Sequence[int] | None, weights: Sequence[float] | None, width: int | None = None
                     ) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
    """Checked Matryoshka dimensions (strictly decreasing, positive, at most ``width``) and weights (default 1 each);
    None when ``dims`` is None or empty.

    Raises:
        ValueError: a dimension that is not a positive int, not decreasing, or wider than ``width``; weights of
            another length, or negative, or all 0.
    """
    if not dims:
        if weights:
            raise ValueError(f"matryoshka_weights {list(weights)} given without matryoshka_dims")
        return None
    dims = tuple(dims)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"matryoshka_dims must be positive ints; got {list(dims)}")
    if any(b >= a for a, b in zip(dims, dims[1:])):
        raise ValueError(f"matryoshka_dims must be strictly decreasing (e.g. 384, 256, 128, 64, 32); got {list(dims)}")
    if width is not None and dims[0] > width:
        raise ValueError(f"matryoshka_dims {list(dims)} start above the embedding size {width}")
    w = tuple(float(x) for x in weights) if weights else (1.0,) * len(dims)
    if len(w) != len(dims) or any(x < 0 for x in w) or not any(w):
        raise ValueError(f"matryoshka_weights must be one non-negative weight per dimension ({len(dims)}), not all "
                         f"0; got {list(weights)}")
    return dims, w


# ---- late interaction (ctxemb.modeling.late_interaction)
BERT_MARKERS = ("[unused0]", "[unused1]")  # ColBERT's [Q] and [D] in BERT vocabularies

LongDocuments = Literal["truncate", "window"]


@dataclass(frozen=True)
class LateInteractionConfig:
    """How texts become token vectors (saved with an index and with a trained model).

    Attributes:
        query_length: queries are padded with ``[MASK]`` (or cut) to this many tokens, specials included.
        document_length: most tokens per document, specials included ("truncate"), or per window ("window").
        long_documents: ``"truncate"`` (ColBERT) or ``"window"`` (every token, encoded in overlapping windows).
        markers: the (query, document) marker tokens, e.g. ``("[unused0]", "[unused1]")``, or None for none.
        query_augmentation: pad queries with ``[MASK]`` to ``query_length`` (False: no padding).
        skip_punctuation: drop punctuation tokens from documents.
        layers: hidden states pooled into each token vector (0 = embedding output, -1 = the last layer).
    """

    query_length: int = 32
    document_length: int = 256
    long_documents: LongDocuments = "truncate"
    markers: tuple[str, str] | None = None
    query_augmentation: bool = True
    skip_punctuation: bool = True
    layers: tuple[int, ...] = (-1,)

    def __post_init__(self):
        check_int(self.query_length, "query_length", low=4)
        check_int(self.document_length, "document_length", low=4)
        check_choice(self.long_documents, "long_documents", ("truncate", "window"))
        if self.markers is not None:
            if len(self.markers) != 2 or not all(isinstance(m, str) and m for m in self.markers):
                raise ValueError("markers must be a pair of token strings (query, document) or None, got %r"
                                 % (self.markers,))
            object.__setattr__(self, "markers", tuple(self.markers))
        object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["markers"] = None if self.markers is None else list(self.markers)
        d["layers"] = list(self.layers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LateInteractionConfig":
        d = dict(d)
        if d.get("markers") is not None:
            d["markers"] = tuple(d["markers"])
        if "layers" in d:
            d["layers"] = tuple(d["layers"])
        return cls(**d)
