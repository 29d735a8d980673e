"""Geometry of embedding spaces (J&M 11.3.2): anisotropy, rogue dimensions and post-processing.

Everything here takes arrays, never models; :func:`analyze` is the one function that drives an embedder, and it
only calls its ``embed_words``. Plots (:mod:`ctxemb.geometry.plots`) need matplotlib, the ``plot`` extra.

Shape legend: N vectors (rows), H dimensions (columns), K dimensions asked for.
"""

from ctxemb.geometry.analysis import analyze, default_corpus_path, format_analysis_table, read_corpus
from ctxemb.geometry.isotropy import anisotropy, anisotropy_sampled, cosine_contributions
from ctxemb.geometry.plots import (
    PLOT_NAMES,
    plot_anisotropy,
    plot_rogue_dimensions,
    plot_word_projection,
    write_plots,
)
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
from ctxemb.geometry.results import AnalysisResult, LayerGeometry, WordInstance
from ctxemb.geometry.rogue import RogueDimensions, informativity, rogue_dimensions

__all__ = [
    "AllButTheTop",
    "AnalysisResult",
    "Identity",
    "LayerGeometry",
    "MeanCenterer",
    "PLOT_NAMES",
    "POSTPROCESSORS",
    "RogueDimensions",
    "Standardizer",
    "Whitening",
    "WordInstance",
    "analyze",
    "anisotropy",
    "anisotropy_sampled",
    "cosine_contributions",
    "default_corpus_path",
    "format_analysis_table",
    "informativity",
    "load_postprocessor",
    "make_postprocessor",
    "plot_anisotropy",
    "plot_rogue_dimensions",
    "plot_word_projection",
    "read_corpus",
    "rogue_dimensions",
    "write_plots",
]
