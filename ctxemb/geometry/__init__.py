"""Geometry of embedding spaces (J&M 11.3.2): anisotropy, rogue dimensions and post-processing.

Everything here takes arrays, never models; :func:`analyze` is the one function that drives an embedder, and it
only calls its ``embed_words``.

Shape legend: N vectors (rows), H dimensions (columns), K dimensions asked for.
"""

from ctxemb.geometry.analysis import (
    AnalysisResult,
    LayerGeometry,
    WordInstance,
    add_analyze_subparser,
    analyze,
    default_corpus_path,
    format_analysis_table,
    read_corpus,
    run_analyze,
)
from ctxemb.geometry.isotropy import anisotropy, anisotropy_sampled, cosine_contributions
from ctxemb.geometry.postprocessing import (
    POSTPROCESSORS,
    AllButTheTop,
    Identity,
    MeanCenterer,
    Standardizer,
    Whitening,
    load_postprocessor,
    make_postprocessor,
)
from ctxemb.geometry.rogue import RogueDimensions, informativity, rogue_dimensions

__all__ = [
    "AllButTheTop",
    "AnalysisResult",
    "Identity",
    "LayerGeometry",
    "MeanCenterer",
    "POSTPROCESSORS",
    "RogueDimensions",
    "Standardizer",
    "Whitening",
    "WordInstance",
    "add_analyze_subparser",
    "analyze",
    "anisotropy",
    "anisotropy_sampled",
    "cosine_contributions",
    "default_corpus_path",
    "format_analysis_table",
    "informativity",
    "load_postprocessor",
    "make_postprocessor",
    "read_corpus",
    "rogue_dimensions",
    "run_analyze",
]
