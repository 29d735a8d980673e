"""What the harnesses score: layer views of stacked hidden states, and post-processing options fitted per view.

Layers. ``layers="sweep"`` embeds once with every hidden state stacked (``layer_pooling="stack"``) and scores each
hidden state ("0" = embedding output ... "L" = last layer; ``hidden_states`` has L + 1 entries), the average of the
last four ("last4", the default configuration of :class:`ctxemb.embedding.embedder.EmbedderConfig`) and, for sentences,
"first-last" (average of hidden states 1 and L, Su et al. 2021). ``layers="default"`` uses the embedder's own
configuration (one view, labelled by it).

Post-processing is a name in ``POSTPROCESS_NAMES`` or any unfitted sklearn-style transformer; each option is
fitted afresh for every layer view.

Shape legend:
    P   rows (word occurrences or sentences)
    T   rows a post-processor is fitted on
    S   stacked hidden states (L + 1 with ``layers="sweep"``, else 1)
    H   hidden size
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ctxemb.core.validation import check_choice
from ctxemb.evaluation.similarity.options import LAYER_MODES, POSTPROCESS_NAMES, LayerMode
from ctxemb.evaluation.similarity.results import NOT_FITTED
from ctxemb.geometry.postprocessing import make_postprocessor
from ctxemb.core.protocols import EmbedderLike, embedder_config_dict



# --------------------------------------------------------------------------------------------------- layer views


@dataclass(frozen=True)
class LayerView:
    """A layer view: its label and the positions on the stacked axis that are averaged."""

    name: str
    indices: tuple[int, ...]


def default_layer_label(embedder: EmbedderLike) -> str:
    """The label of the embedder's own layer configuration, e.g. "default(-4,-3,-2,-1 mean)"."""
    d = embedder_config_dict(embedder)
    if d.get("layers") is None:
        return "default"
    return "default(%s %s)" % (",".join(str(x) for x in d["layers"]), d.get("layer_pooling", ""))


def layer_setup(embedder: EmbedderLike, layers: LayerMode, *,
                first_last: bool = False) -> tuple[tuple[int, ...] | None, list[LayerView]]:
    """The hidden states to stack (None: use the embedder's configuration) and the views scored on them.

    Args:
        embedder: its ``num_layers`` L sets the sweep: hidden states 0 (embedding output) .. L (last layer).
        layers: "sweep" (every hidden state and "last4") or "default" (the embedder's configuration, one view).
        first_last: also the "first-last" view (hidden states 1 and L) when sweeping.

    Raises:
        ValueError: for an unknown ``layers`` or an embedder with fewer than one layer.
    """
    check_choice(layers, "layers", LAYER_MODES)
    if layers == "default":
        return None, [LayerView(default_layer_label(embedder), (0,))]
    n = int(embedder.num_layers)
    if n < 1:
        raise ValueError("embedder.num_layers must be >= 1; got %d" % n)
    views = [LayerView(str(k), (k,)) for k in range(n + 1)]
    views.append(LayerView("last4", tuple(range(max(0, n - 3), n + 1))))
    if first_last:
        views.append(LayerView("first-last", (1, n)))
    return tuple(range(n + 1)), views


def take_view(stacked: np.ndarray, view: LayerView) -> np.ndarray:
    """(P, S, H) -> (P, H) float32: the mean over the view's stacked positions."""
    if len(view.indices) == 1:
        return np.ascontiguousarray(stacked[:, view.indices[0]], dtype=np.float32)
    return stacked[:, list(view.indices)].mean(axis=1, dtype=np.float64).astype(np.float32)


# --------------------------------------------------------------------------------------------------- post-processing


@dataclass(frozen=True)
class PostprocessOption:
    """One post-processing choice: its label in the result rows and an unfitted estimator (None for "none")."""

    label: str
    template: Any


def postprocess_options(postprocess, n_components: int | None) -> list[PostprocessOption]:
    """Normalise ``postprocess`` (a name, an estimator, or a sequence of them) into labelled unfitted templates.

    Args:
        postprocess: a name in ``POSTPROCESS_NAMES``, an unfitted estimator with fit/transform, or a sequence of them.
        n_components: for "abtt" (directions removed) and "whiten" (dimensions kept); None: their defaults.

    Raises:
        ValueError: for an unknown name, an empty sequence, or a choice listed twice.
        TypeError: for an entry that is neither a name nor an estimator.
    """
    items = [postprocess] if isinstance(postprocess, str) or hasattr(postprocess, "fit") else list(postprocess)
    if not items:
        raise ValueError("postprocess must name at least one choice; got an empty sequence")
    options = []
    for item in items:
        if isinstance(item, str):
            name = check_choice(item.strip().lower(), "postprocess", POSTPROCESS_NAMES)
            if name == "none":
                options.append(PostprocessOption("none", None))
                continue
            kwargs = {"n_components": n_components} if name in ("abtt", "whiten") and n_components is not None else {}
            label = name if not kwargs else "%s(k=%d)" % (name, n_components)
            options.append(PostprocessOption(label, make_postprocessor(name, **kwargs)))
        elif hasattr(item, "fit") and hasattr(item, "transform"):
            options.append(PostprocessOption(type(item).__name__, item))
        else:
            raise TypeError("postprocess entries must be names (%s) or estimators with fit/transform; got %r"
                            % (", ".join(POSTPROCESS_NAMES), item))
    labels = [o.label for o in options]
    if len(set(labels)) != len(labels):
        raise ValueError("postprocess lists a choice twice: %s" % labels)
    return options


def needs_fit(options: Sequence[PostprocessOption]) -> bool:
    """Whether any option has an estimator to fit (that is, needs a fit corpus)."""
    return any(o.template is not None for o in options)


def fit_option(option: PostprocessOption, X: np.ndarray, where: str = ""):
    """A fresh copy of the option's estimator fitted on X (T, H); None for "none".

    Raises:
        ValueError: if the fit fails (e.g. whitening on fewer vectors than dimensions), naming ``where`` (task and
            layer).
    """
    if option.template is None:
        return None
    try:
        return copy.deepcopy(option.template).fit(X)
    except ValueError as exc:
        raise ValueError("fitting post-processing %r on %d vectors of dimension %d (%s) failed: %s"
                         % (option.label, X.shape[0], X.shape[1], where, exc)) from exc


def apply_fitted(estimator, X: np.ndarray) -> np.ndarray:
    """(P, H) -> (P, H) float32: ``X`` through a fitted estimator, or ``X`` itself for None."""
    return X if estimator is None else np.asarray(estimator.transform(X), dtype=np.float32)


def fit_label(option: PostprocessOption, name: str | None, n_rows: int, unit: str) -> str:
    """``fitted_on`` of a result row, e.g. "wic/train (8192 words)"; ``NOT_FITTED`` for "none"."""
    return NOT_FITTED if option.template is None else "%s (%d %s)" % (name, n_rows, unit)
