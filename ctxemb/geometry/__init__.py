"""Geometry of embedding spaces (J&M 11.3.2): anisotropy, rogue dimensions and post-processing.

Everything here takes arrays, never models; :func:`analyze` is the one function that drives an embedder, and it
only calls its ``embed_words``. Plots (:mod:`ctxemb.geometry.plots`) need matplotlib, the ``plot`` extra.

Shape legend: N vectors (rows), H dimensions (columns), K dimensions asked for.

The names below are imported on first use: reading the option names of :mod:`~ctxemb.geometry.options` (what
``ctxemb analyze --help`` does) loads neither NumPy nor scikit-learn.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "AllButTheTop": "ctxemb.geometry.postprocessing",
    "AnalysisResult": "ctxemb.geometry.results",
    "Identity": "ctxemb.geometry.postprocessing",
    "LayerGeometry": "ctxemb.geometry.results",
    "MeanCenterer": "ctxemb.geometry.postprocessing",
    "PLOT_NAMES": "ctxemb.geometry.plots",
    "POSTPROCESSORS": "ctxemb.geometry.postprocessing",
    "RogueDimensions": "ctxemb.geometry.rogue",
    "Standardizer": "ctxemb.geometry.postprocessing",
    "Whitening": "ctxemb.geometry.postprocessing",
    "WordInstance": "ctxemb.geometry.results",
    "analyze": "ctxemb.geometry.analysis",
    "anisotropy": "ctxemb.geometry.isotropy",
    "anisotropy_sampled": "ctxemb.geometry.isotropy",
    "cosine_contributions": "ctxemb.geometry.isotropy",
    "default_corpus_path": "ctxemb.geometry.analysis",
    "format_analysis_table": "ctxemb.geometry.analysis",
    "informativity": "ctxemb.geometry.rogue",
    "load_postprocessor": "ctxemb.geometry.postprocessing",
    "make_postprocessor": "ctxemb.geometry.postprocessing",
    "plot_anisotropy": "ctxemb.geometry.plots",
    "plot_rogue_dimensions": "ctxemb.geometry.plots",
    "plot_word_projection": "ctxemb.geometry.plots",
    "read_corpus": "ctxemb.geometry.analysis",
    "rogue_dimensions": "ctxemb.geometry.rogue",
    "write_plots": "ctxemb.geometry.plots",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
