"""Plots of an :class:`~ctxemb.geometry.results.AnalysisResult`: anisotropy, rogue dimensions, word projections.

matplotlib is optional (the ``plot`` extra) and imported only when a plot is drawn; :func:`require_matplotlib`
raises an ImportError that names the extra. Figures use matplotlib's object-oriented API with the Agg canvas, so
no global backend is changed, and each PNG is written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ctxemb.geometry.results import AnalysisResult
from ctxemb.core.atomic import atomic_write

PLOT_NAMES = {
    "anisotropy": "anisotropy_by_layer.png",
    "rogue_dimensions": "rogue_dimensions_by_layer.png",
    "word_projection": "word_projection.png",
}


def require_matplotlib():
    """matplotlib's ``Figure`` and Agg canvas (the object-oriented API: no pyplot, so no global backend changes).

    Raises:
        ImportError: naming the ``plot`` extra, when matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "plotting the analysis needs matplotlib; install the 'plot' extra (pip install 'ctxemb[plot]') "
            "or pass plot=False"
        ) from e
    return Figure, FigureCanvasAgg


def _save_png(fig, path: str | os.PathLike) -> None:
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)


def _model_name(result: AnalysisResult) -> str:
    cfg = result.embedder_config or {}
    for key in ("model_name", "model", "name_or_path", "name"):
        if isinstance(cfg.get(key), str):
            return cfg[key]
    return "encoder"


def plot_anisotropy(result: AnalysisResult, path: str | os.PathLike) -> None:
    """Anisotropy by layer, one line per post-processing (the raw vectors thicker), as a PNG at ``path``."""
    Figure, FigureCanvasAgg = require_matplotlib()
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = [g.layer for g in result.layers]
    for name in result.postprocessors:
        ys = [g.anisotropy.get(name, float("nan")) for g in result.layers]
        ax.plot(xs, ys, marker="o", label="raw" if name == "none" else name, linewidth=2.5 if name == "none" else 1.5)
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xlabel("hidden-state layer (0 = embedding output)")
    ax.set_ylabel("anisotropy (mean cosine of distinct word vectors)")
    ax.set_title("Anisotropy by layer: %s (%d word vectors)" % (_model_name(result), result.n_vectors))
    ax.set_xticks(xs)
    ax.legend(title="post-processing")
    ax.grid(alpha=0.3)
    _save_png(fig, path)


def plot_rogue_dimensions(result: AnalysisResult, path: str | os.PathLike) -> None:
    """Shares of the top-1/top-3 rogue dimensions and the informativity without them, by layer, as a PNG."""
    Figure, FigureCanvasAgg = require_matplotlib()
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    xs = [g.layer for g in result.layers]
    ax1.plot(xs, [g.share_top1 for g in result.layers], marker="o", label="top-1 dimension")
    ax1.plot(xs, [g.share_top3 for g in result.layers], marker="s", label="top-3 dimensions")
    for g in result.layers:  # which dimension is on top, layer by layer
        ax1.annotate("d%d" % g.top_dims[0], (g.layer, g.share_top1), textcoords="offset points", xytext=(0, 6),
                     ha="center", fontsize=7)
    ax1.set_xlabel("hidden-state layer")
    ax1.set_ylabel("share of the expected cosine")
    ax1.set_title("Rogue dimensions (Timkey & van Schijndel 2021)")
    ax1.set_xticks(xs)
    ax1.legend()
    ax1.grid(alpha=0.3)
    ax2.plot(xs, [g.informativity_top1 for g in result.layers], marker="o", label="without top-1")
    ax2.plot(xs, [g.informativity_top3 for g in result.layers], marker="s", label="without top-3")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_xlabel("hidden-state layer")
    ax2.set_ylabel("r² of cosines, full vs reduced")
    ax2.set_title("Informativity of the remaining dimensions")
    ax2.set_xticks(xs)
    ax2.legend()
    ax2.grid(alpha=0.3)
    fig.suptitle(_model_name(result))
    _save_png(fig, path)


def plot_word_projection(result: AnalysisResult, path: str | os.PathLike) -> None:
    """One panel per projected word: its instances on their first two principal components, labelled by context."""
    Figure, FigureCanvasAgg = require_matplotlib()
    shown = [w for w in result.words if w in result.explained_variance_ratio]
    fig = Figure(figsize=(6.5 * len(shown), 6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(shown)))
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    where = "the embedder's pooled layers" if result.projection_layer is None else "layer %d" % result.projection_layer
    for ax, word in zip(axes, shown):
        pts = [p for p in result.projection if p.word == word]
        # One colour per sentence (cycling after 20), in corpus order, so the colour and the label both say
        # which sentence a point came from.
        colours = [cmap(i % 20) for i in range(len(pts))]
        ax.scatter([p.x for p in pts], [p.y for p in pts], c=colours, s=40, edgecolors="k", linewidths=0.4)
        for p in pts:
            label = p.context if len(p.context) <= 48 else p.context[:45] + "..."
            ax.annotate(label, (p.x, p.y), textcoords="offset points", xytext=(4, 3), fontsize=6.5, alpha=0.85)
        r = result.explained_variance_ratio[word]
        ax.set_xlabel("PC1 (%.0f%% of variance)" % (100 * r[0]))
        ax.set_ylabel("PC2 (%.0f%% of variance)" % (100 * r[1]))
        ax.set_title("'%s': %d instances" % (word, len(pts)))
        ax.grid(alpha=0.3)
    fig.suptitle("Contextual embeddings of chosen words, 2-D PCA, %s (%s)" % (where, _model_name(result)))
    _save_png(fig, path)


def write_plots(result: AnalysisResult, out_dir: str | os.PathLike) -> dict[str, str]:
    """Write the plots of ``result`` into ``out_dir`` under :data:`PLOT_NAMES`.

    The word projection is drawn only when some word has a projection (2 or more instances).

    Returns:
        kind ("anisotropy", "rogue_dimensions", "word_projection") -> path written.

    Raises:
        ImportError: naming the ``plot`` extra, when matplotlib is not installed.
    """
    out_dir = Path(out_dir)
    drawers = {"anisotropy": plot_anisotropy, "rogue_dimensions": plot_rogue_dimensions}
    if result.explained_variance_ratio:
        drawers["word_projection"] = plot_word_projection
    files = {}
    for kind, draw in drawers.items():
        draw(result, out_dir / PLOT_NAMES[kind])
        files[kind] = str(out_dir / PLOT_NAMES[kind])
    return files
