"""Layer-by-layer geometry of an encoder's word vectors: anisotropy, rogue dimensions, sense clusters (J&M 11.3).

:func:`analyze` embeds a small corpus once with every hidden state (``layer_pooling="stack"``), then for each layer
0..L (0 = embedding output, L = last layer) reports the anisotropy of the word vectors raw and after each
post-processing (fitted on that layer's vectors), the top rogue dimensions and their share of the cosine, and the
informativity of the cosine without them. It writes ``analysis.json`` and three PNG plots (:mod:`.plots`), and
returns an :class:`~ctxemb.geometry.results.AnalysisResult`; :func:`format_analysis_table` turns it into a markdown
table.

The embedder (a :class:`ctxemb.core.protocols.EmbedderLike`) is used only through ``embed_words`` and ``num_layers``
(and ``config.to_dict()`` when present); this module never imports a model.

Shape legend:
    S  sentences in the corpus
    W  words in one sentence
    N  word instances in the corpus (sum of W)
    L  layers; hidden states run 0..L, so there are L + 1 of them
    H  hidden size
"""

from __future__ import annotations

import json
import logging
import math
import os
import string
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from sklearn.base import clone
from tqdm.auto import tqdm

from ctxemb.core.validation import check_bool, check_int, is_int
from ctxemb.geometry.isotropy import _check_seed, anisotropy
from ctxemb.geometry.options import DEFAULT_POSTPROCESSORS, DEFAULT_WORDS
from ctxemb.geometry.plots import require_matplotlib, write_plots
from ctxemb.geometry.postprocessing import POSTPROCESSORS, make_postprocessor
from ctxemb.geometry.results import AnalysisResult, LayerGeometry, WordInstance
from ctxemb.geometry.rogue import informativity, rogue_dimensions
from ctxemb.core.atomic import atomic_write
from ctxemb.core.protocols import EmbedderLike, batch_size_kwargs

logger = logging.getLogger(__name__)

JSON_NAME = "analysis.json"


def default_corpus_path() -> Path:
    """The corpus shipped inside the package, ``ctxemb/data/analysis_corpus.txt`` (84 sentences with several senses
    each of bank, die, mouse, bat, plant and cell); it is package data, so a checkout and an installed wheel both
    have it."""
    return Path(__file__).resolve().parent.parent / "data" / "analysis_corpus.txt"


def read_corpus(path: str | os.PathLike | None = None) -> list[list[str]]:
    """Read a corpus with one sentence per line into whitespace-separated words; blank lines are skipped.

    Args:
        path: the text file (UTF-8); None reads :func:`default_corpus_path`.

    Returns:
        One list of words per non-blank line.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if it holds no sentences.
    """
    path = Path(path) if path is not None else default_corpus_path()
    if not path.is_file():
        raise FileNotFoundError("corpus file not found: %s (expected one sentence per line)" % path)
    sentences = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not sentences:
        raise ValueError("corpus file %s holds no sentences" % path)
    return sentences


# ----------------------------------------------------------------------------------------------------------------
# Analysis


def _as_word_lists(corpus_sentences) -> list[list[str]]:
    if isinstance(corpus_sentences, (str, bytes)) or not isinstance(corpus_sentences, Sequence):
        raise TypeError(
            "corpus_sentences must be a sequence of sentences (strings or lists of words); got %s"
            % type(corpus_sentences).__name__
        )
    out = []
    for i, s in enumerate(corpus_sentences):
        words = s.split() if isinstance(s, str) else list(s)
        if not words:
            raise ValueError("corpus_sentences[%d] is empty; every sentence needs at least one word" % i)
        if not all(isinstance(w, str) for w in words):
            raise TypeError("corpus_sentences[%d] must be a string or a list of strings; got %r" % (i, s))
        out.append(words)
    if len(out) < 1:
        raise ValueError("corpus_sentences is empty")
    return out


def _resolve_postprocessors(postprocessors) -> dict[str, Any]:
    """Names, (name, estimator) pairs or a name -> estimator mapping, as an ordered dict without "none"."""
    if postprocessors is None:
        return {}
    items = postprocessors.items() if isinstance(postprocessors, Mapping) else postprocessors
    if isinstance(items, str):
        items = [items]
    out: dict[str, Any] = {}
    for item in items:
        if isinstance(item, str):
            name, est = item.strip().lower(), make_postprocessor(item)
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            name, est = item
        else:
            raise TypeError(
                "postprocessors must hold names (%s), (name, estimator) pairs or be a name -> estimator mapping; "
                "got %r" % (", ".join(POSTPROCESSORS), item)
            )
        if not (hasattr(est, "fit") and hasattr(est, "transform")):
            raise TypeError("postprocessors[%r] must have fit and transform; got %r" % (name, est))
        if name != "none":
            out[name] = est
    return out


def _normalise_word(token: str) -> str:
    return token.strip(string.punctuation).lower()


def _context(sentence: list[str], j: int, width: int = 4) -> str:
    left = sentence[max(0, j - width) : j]
    right = sentence[j + 1 : j + 1 + width]
    return " ".join(
        (["..."] if j - width > 0 else []) + left + [sentence[j].upper()] + right
        + (["..."] if j + 1 + width < len(sentence) else [])
    )


def _pca_2d(X: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Coordinates (M, 2) of X: (M, H) on its first two principal components, and their variance ratios."""
    xc = np.asarray(X, dtype=np.float64) - X.mean(axis=0)
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    # Fix signs (largest-magnitude loading positive) so the picture does not flip between runs.
    flip = np.sign(vt[np.arange(len(vt)), np.argmax(np.abs(vt), axis=1)])
    flip[flip == 0] = 1.0
    coords = (u * s) * flip  # (M, r)
    out = np.zeros((X.shape[0], 2))
    r = min(2, coords.shape[1])
    out[:, :r] = coords[:, :r]
    total = float((s**2).sum())
    ratios = [float(s[i] ** 2 / total) if i < len(s) and total > 0 else 0.0 for i in range(2)]
    return out, ratios


def _layer_geometry(
    layer: int, X: np.ndarray, postprocessors: dict[str, Any], n_pairs: int, seed: int
) -> LayerGeometry:
    """Anisotropy (raw and post-processed), rogue dimensions and informativity of one layer's X: (N, H)."""
    n, h = X.shape
    aniso = {"none": anisotropy(X)}
    errors: dict[str, str] = {}
    notes: dict[str, str] = {}
    for name, est in postprocessors.items():
        try:
            # Warnings go into the result rather than repeating once per layer on the console.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                aniso[name] = anisotropy(clone(est).fit_transform(X))
        except ValueError as e:  # e.g. more directions to remove than the layer has vectors
            logger.warning("layer %d: post-processing %r failed: %s", layer, name, e)
            aniso[name] = float("nan")
            errors[name] = str(e)
            continue
        if caught:
            notes[name] = " | ".join(str(w.message) for w in caught)
            logger.info("layer %d: post-processing %r: %s", layer, name, notes[name])
    rogue = rogue_dimensions(X, k=min(3, h))
    shares = [float(v) for v in rogue.shares]
    inf = {}
    for k in (1, 3):
        k_eff = min(k, h - 1)
        inf[k] = informativity(X, k_eff, n_pairs=n_pairs, seed=seed) if k_eff >= 1 and n >= 3 else float("nan")
    return LayerGeometry(
        layer=layer,
        n_vectors=n,
        anisotropy=aniso,
        top_dims=[int(i) for i in rogue.indices],
        top_dim_shares=shares,
        share_top1=shares[0],
        share_top3=float(sum(shares[:3])),
        informativity_top1=inf[1],
        informativity_top3=inf[3],
        errors=errors,
        notes=notes,
    )


def analyze(
    embedder: EmbedderLike,
    corpus_sentences: Sequence[str] | Sequence[Sequence[str]],
    *,
    words: Sequence[str] = DEFAULT_WORDS,
    out_dir: str | os.PathLike | None = None,
    postprocessors=DEFAULT_POSTPROCESSORS,
    projection_layer: int | None = -1,
    n_pairs: int = 20_000,
    seed: int = 0,
    batch_size: int | None = None,
    plot: bool = True,
    show_progress_bar: bool = True,
) -> AnalysisResult:
    """Measure the geometry of every hidden-state layer of ``embedder`` on a corpus, and write JSON and plots.

    Args:
        embedder: an object with ``num_layers`` (L) and ``embed_words(sentences, *, batch_size, show_progress_bar,
            layers, layer_pooling)`` returning one (W, L + 1, H) array per sentence for ``layer_pooling="stack"``
            (see ``ctxemb.embedding.embedder.Embedder``).
        corpus_sentences: sentences as strings (split on whitespace) or as lists of words; S >= 1, N >= 3.
        words: words whose instances are projected to 2-D (matched lower-cased, surrounding punctuation ignored).
        out_dir: folder for ``analysis.json`` and the PNGs (created if needed); None writes nothing.
        postprocessors: names from ``make_postprocessor`` ("standardize", "center", "abtt", "whiten"), (name,
            estimator) pairs or a name -> estimator mapping. Each is cloned and fitted on each layer's vectors.
            The raw vectors are always reported as "none".
        projection_layer: hidden-state index whose vectors are projected (0 = embedding output, -1 = last layer);
            None re-embeds the sentences that hold the words with the embedder's own layers and layer pooling.
        n_pairs: the most vector pairs used for informativity (all pairs when there are fewer).
        seed: seed for the pair sample.
        batch_size: texts per ``embed_words`` forward pass; None (default): the embedder's own batching.
        plot: write the PNGs (needs matplotlib, the ``plot`` extra) when ``out_dir`` is given.
        show_progress_bar: show progress bars for embedding and for the layers.

    Returns:
        An :class:`AnalysisResult`.

    Raises:
        TypeError: if ``corpus_sentences`` or ``postprocessors`` have the wrong type.
        ValueError: if the corpus is empty or too small, the embedder returns arrays of the wrong shape, or
            ``projection_layer`` is out of range.
        ImportError: if plotting was asked for and matplotlib is missing.
    """
    sentences = _as_word_lists(corpus_sentences)
    estimators = _resolve_postprocessors(postprocessors)
    if isinstance(words, str):
        words = [words]
    if words is None or not hasattr(words, "__iter__"):
        raise TypeError("words must be a list of strings; got %s" % type(words).__name__)
    words = list(words)
    if not all(isinstance(w, str) and w.strip() for w in words):
        raise TypeError("words must be non-empty strings; got %r" % (words,))
    words = [w.strip().lower() for w in words]
    check_int(n_pairs, "n_pairs", low=2)  # before the expensive embedding
    batch_kwargs = batch_size_kwargs(batch_size)  # checked before the expensive embedding
    _check_seed(seed)
    check_bool(plot, "plot")
    check_bool(show_progress_bar, "show_progress_bar")
    if out_dir is not None and not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError("out_dir must be a path or None; got %s" % type(out_dir).__name__)
    num_layers = int(embedder.num_layers)
    n_states = num_layers + 1
    if projection_layer is not None and not is_int(projection_layer):
        raise TypeError("projection_layer must be an int or None; got %r" % (projection_layer,))
    if projection_layer is not None and not -n_states <= projection_layer < n_states:
        raise ValueError(
            "projection_layer must index one of the %d hidden states (0..%d, or -1 for the last); got %r"
            % (n_states, num_layers, projection_layer)
        )
    if plot and out_dir is not None:
        require_matplotlib()  # fail before the expensive part

    outputs = embedder.embed_words(
        sentences,
        **batch_kwargs,
        show_progress_bar=show_progress_bar,
        layers=list(range(n_states)),
        layer_pooling="stack",
    )
    if len(outputs) != len(sentences):
        raise ValueError("embedder.embed_words returned %d arrays for %d sentences" % (len(outputs), len(sentences)))
    for i, (a, s) in enumerate(zip(outputs, sentences)):
        if a.ndim != 3 or a.shape[0] != len(s) or a.shape[1] != n_states:
            raise ValueError(
                "embedder.embed_words(layer_pooling='stack') must return (W, L + 1, H) arrays; sentence %d with "
                "W=%d words and L + 1=%d hidden states gave shape %s" % (i, len(s), n_states, a.shape)
            )
    vectors = np.concatenate(outputs, axis=0)  # (N, L + 1, H)
    n, _, h = vectors.shape
    if n < 3:
        raise ValueError("corpus_sentences must hold at least 3 words in all; got %d" % n)
    positions = [(i, j) for i, s in enumerate(sentences) for j in range(len(s))]  # row -> (sentence, word)
    logger.info(
        "analyzing %d word vectors from %d sentences over %d hidden states (H=%d)", n, len(sentences), n_states, h
    )

    layers = []
    for layer in tqdm(range(n_states), desc="layers", disable=not show_progress_bar):
        X = np.ascontiguousarray(vectors[:, layer, :])  # (N, H)
        layers.append(_layer_geometry(layer, X, estimators, n_pairs, seed))

    projection, ratios = _project_words(
        embedder, sentences, vectors, positions, words, projection_layer, batch_size, show_progress_bar
    )
    config = getattr(embedder, "config", None)
    result = AnalysisResult(
        layers=layers,
        postprocessors=["none", *estimators],
        n_sentences=len(sentences),
        n_vectors=n,
        hidden_size=h,
        words=list(words),
        projection_layer=None if projection_layer is None else projection_layer % n_states,
        projection=projection,
        explained_variance_ratio=ratios,
        embedder_config=config.to_dict() if hasattr(config, "to_dict") else None,
        settings={"n_pairs": n_pairs, "seed": seed, "postprocessor_params": {
            name: est.get_params() for name, est in estimators.items() if hasattr(est, "get_params")
        }},
    )
    if out_dir is not None:
        _write_outputs(result, Path(out_dir), plot)
    return result


def _project_words(embedder, sentences, vectors, positions, words, projection_layer, batch_size, show_progress_bar):
    """PCA-project the instances of each chosen word; returns (instances, word -> variance ratios)."""
    hits: dict[str, list[int]] = {w: [] for w in words}
    for row, (i, j) in enumerate(positions):
        token = _normalise_word(sentences[i][j])
        if token in hits:
            hits[token].append(row)
    if projection_layer is None:
        # The embedder's own layers and pooling: embed again, only the sentences that hold a chosen word.
        wanted = sorted({positions[r][0] for rows in hits.values() for r in rows})
        pooled = embedder.embed_words(
            [sentences[i] for i in wanted], **batch_size_kwargs(batch_size), show_progress_bar=show_progress_bar
        )
        by_sentence = dict(zip(wanted, pooled))
        pick = lambda rows: np.stack([by_sentence[positions[r][0]][positions[r][1]] for r in rows])  # noqa: E731
    else:
        pick = lambda rows: vectors[rows, projection_layer, :]  # noqa: E731
    instances: list[WordInstance] = []
    ratios: dict[str, list[float]] = {}
    for word, rows in hits.items():
        if len(rows) < 2:
            logger.warning("word %r occurs %d time(s) in the corpus; need 2 or more to project it", word, len(rows))
            continue
        coords, ratios[word] = _pca_2d(pick(rows))
        for row, (x, y) in zip(rows, coords):
            i, j = positions[row]
            instances.append(WordInstance(word, i, j, _context(sentences[i], j), float(x), float(y)))
    return instances, ratios


# ----------------------------------------------------------------------------------------------------------------
# Output: table and files


def format_analysis_table(result: AnalysisResult) -> str:
    """A markdown table with one row per layer: anisotropy per post-processing, rogue dimensions, informativity."""
    post = result.postprocessors
    head = (["layer"] + ["aniso. %s" % p for p in post]
            + ["top-1 dim", "top-1 share", "top-3 dims", "top-3 share", "inform. k=1", "inform. k=3"])

    def num(v: float) -> str:
        return "n/a" if v is None or not math.isfinite(v) else "%.3f" % v

    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---:"] * len(head)) + "|"]
    for g in result.layers:
        cells = [str(g.layer)] + [num(g.anisotropy.get(p, float("nan"))) for p in post] + [
            str(g.top_dims[0]), num(g.share_top1), ", ".join(map(str, g.top_dims)), num(g.share_top3),
            num(g.informativity_top1), num(g.informativity_top3),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _write_outputs(result: AnalysisResult, out_dir: Path, plot: bool) -> None:
    """Write the plots (when ``plot``) and ``analysis.json`` into ``out_dir``, recording them in ``result.files``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if plot:
        result.files.update(write_plots(result, out_dir))
        if not result.explained_variance_ratio:
            warnings.warn("none of the words %s occurs twice in the corpus; no projection plot" % result.words,
                          stacklevel=3)
    result.files["json"] = str(out_dir / JSON_NAME)
    with atomic_write(out_dir / JSON_NAME, "w", encoding="utf-8") as f:
        json.dump(result.to_dict(), f, indent=2, allow_nan=False, default=str)
    logger.info("wrote %s", ", ".join(result.files.values()))
