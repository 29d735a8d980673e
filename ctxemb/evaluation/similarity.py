"""Similarity benchmarks for contextual embeddings: words in context, sentences, and words out of context.

Every harness takes an embedder (anything with ``embed_words``, ``embed_sentences``, ``num_layers`` and a
``config``; see :mod:`ctxemb.embedding`), one or more post-processing choices, and returns rows of
:class:`SimilarityResult`. Scores are cosine similarities; every ``value`` is multiplied by 100 (accuracy in %,
correlations x 100).

- :func:`evaluate_wic`: WiC (binary). Cosine of the target's two vectors, thresholded at the value that maximises
  train accuracy; accuracy on dev. Also a logistic regression on the cosines of all layers (plus "same surface form").
- :func:`evaluate_cosimlex`: CoSimLex / SemEval-2020 Task 3. Subtask 1, change of similarity between the two
  contexts: uncentered Pearson (the official metric) and Pearson. Subtask 2, similarity in each context (both
  contexts pooled, 2N values): Spearman, Pearson and their harmonic mean (the official metric).
- :func:`evaluate_graded_pairs`: one word in two contexts with a graded score (CoInCo usage similarity, SCWS): Spearman.
- :func:`evaluate_sentence_similarity`: STS-B and SICK-R: Spearman and Pearson of the cosine, for [CLS] and mean
  pooling of the last layer (:meth:`embed_sentences`) and for word-mean pooling of every layer.
- :func:`evaluate_word_similarity`: SimLex-999, WordSim-353, MEN, RG-65, SimVerb-3500 with decontextualised word
  vectors (Bommasani et al. 2020): a word's contextual vectors averaged over up to N corpus sentences that contain
  it; a word the corpus never shows gets the vector of the word alone (counted as ``n_isolated`` in ``extra``).
- :func:`run_similarity_tasks`: loads the shared data and runs the harnesses by task name.

Layers. ``layers="sweep"`` embeds once with every hidden state stacked (``layer_pooling="stack"``) and scores each
hidden state ("0" = embedding output ... "L" = last layer), the average of the last four ("last4", the default
configuration of :class:`ctxemb.embedding.EmbedderConfig`) and, for sentences, "first-last" (average of hidden states
1 and L, Su et al. 2021). ``layers="default"`` uses the embedder's own configuration (one row, labelled by it).

Post-processing ("none", "standardize", "center", "abtt", "whiten", or any unfitted sklearn-style transformer) is
fitted per layer view on a stated corpus: word-level tasks fit on the contextual vectors of up to ``max_fit_tokens``
words of it, sentence-level tasks on up to ``max_fit_sentences`` sentence vectors. ``fitted_on`` records which.

Shape legend:
    N   pairs (examples)
    P   word occurrences (spans) embedded
    T   rows a post-processor is fitted on
    W   words of a sentence
    S   stacked hidden states (L + 1 with ``layers="sweep"``, else 1)
    H   hidden size
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from ctxemb.evaluation.similarity_data import (
    CoSimLexExample,
    SentencePair,
    WicExample,
    WordInContext,
    WordPair,
    corpus_label,
    load_coinco_usim,
    load_corpus_sentences,
    load_cosimlex,
    load_scws,
    load_sick,
    load_stsb,
    load_wic,
    load_word_similarity,
)
from ctxemb.paths import atomic_write

logger = logging.getLogger(__name__)

POSTPROCESS_NAMES = ("none", "standardize", "center", "abtt", "whiten")
LAYER_MODES = ("sweep", "default")
SENTENCE_POOLINGS = ("cls", "mean", "layers")
TASKS = ("wic", "cosimlex", "usim", "stsb", "sick", "wordsim", "scws")
DEFAULT_TASKS = ("wic", "cosimlex", "usim", "stsb", "sick", "wordsim")
FIT_ON = ("task", "wikitext-2")
WORD_SIM_TASKS = ("simlex999", "wordsim353", "men", "rg65", "simverb3500")
NOT_FITTED = "-"

_CHUNK_SENTENCES = 512  # unique sentences per embed_words call: bounds the memory of stacked outputs


# =================================================================================================== metrics


def _as_vector(x, name: str, min_len: int = 1) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("%s must be 1-D; got shape %s" % (name, arr.shape))
    if len(arr) < min_len:
        raise ValueError("%s needs at least %d values; got %d" % (name, min_len, len(arr)))
    if not np.isfinite(arr).all():
        raise ValueError("%s contains NaN or infinity (%d values)" % (name, int((~np.isfinite(arr)).sum())))
    return arr


def _as_pair(x, y, min_len: int = 2) -> tuple[np.ndarray, np.ndarray]:
    x, y = _as_vector(x, "x", min_len), _as_vector(y, "y", min_len)
    if len(x) != len(y):
        raise ValueError("x and y must have the same length; got %d and %d" % (len(x), len(y)))
    return x, y


def rankdata(x) -> np.ndarray:
    """Ranks 1..n of the values of ``x`` (N,), ties given the average of the ranks they span (as
    ``scipy.stats.rankdata(method="average")``)."""
    x = _as_vector(x, "x")
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    new_group = np.r_[True, xs[1:] != xs[:-1]]
    starts = np.flatnonzero(new_group)
    counts = np.diff(np.r_[starts, len(x)])
    average = starts + (counts + 1) / 2.0  # mean of ranks starts+1 .. starts+counts
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(average, counts)
    return ranks


def pearson(x, y) -> float:
    """Pearson correlation of two (N,) sequences, N >= 2; NaN (with a warning) if either is constant.

    Raises:
        ValueError: if the lengths differ, N < 2, or a value is NaN or infinite.
    """
    x, y = _as_pair(x, y)
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float(xc @ xc) * float(yc @ yc))
    if den == 0.0:
        logger.warning("Pearson correlation is undefined for constant input; returning NaN")
        return float("nan")
    return float(np.clip((xc @ yc) / den, -1.0, 1.0))


def spearman(x, y) -> float:
    """Spearman rank correlation (Pearson of average ranks) of two (N,) sequences; NaN if either is constant."""
    x, y = _as_pair(x, y)
    return pearson(rankdata(x), rankdata(y))


def uncentered_pearson(x, y) -> float:
    """Uncentered Pearson correlation ``sum(x y) / sqrt(sum(x^2) sum(y^2))`` (the cosine of x and y): the official
    metric of CoSimLex subtask 1, where the sign of a change matters, so the values are not centred.

    NaN (with a warning) if either sequence is all zeros.
    """
    x, y = _as_pair(x, y, min_len=1)
    den = math.sqrt(float(x @ x) * float(y @ y))
    if den == 0.0:
        logger.warning("uncentered Pearson correlation is undefined for an all-zero input; returning NaN")
        return float("nan")
    return float(np.clip((x @ y) / den, -1.0, 1.0))


def harmonic_mean(a: float, b: float) -> float:
    """Harmonic mean ``2ab / (a + b)`` of two correlations (CoSimLex subtask 2 combines Spearman and Pearson so).

    Meaningful when both are positive; NaN if either is NaN or ``a + b == 0``.
    """
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b) or a + b == 0.0:
        return float("nan")
    return 2.0 * a * b / (a + b)


def accuracy(y_true, y_pred) -> float:
    """Fraction of equal entries of two (N,) label sequences, N >= 1."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.ndim != 1 or p.ndim != 1 or len(t) != len(p):
        raise ValueError("y_true and y_pred must be 1-D of the same length; got shapes %s and %s" % (t.shape, p.shape))
    if len(t) == 0:
        raise ValueError("accuracy needs at least one example")
    return float(np.mean(t == p))


def best_threshold(scores, labels) -> tuple[float, float]:
    """The threshold t that maximises the accuracy of ``scores >= t`` against boolean ``labels``.

    Every distinct cut is tried (all positive, all negative, and between each pair of neighbouring distinct
    scores), in O(N log N). Among equally good cuts the lowest is chosen; the threshold returned is the midpoint
    between the two scores around the cut (-inf / +inf for all positive / all negative), so that it generalises.

    Args:
        scores: (N,) real scores, higher meaning "more likely True".
        labels: (N,) booleans (or 0/1).

    Returns:
        (threshold, accuracy on these scores).

    Raises:
        ValueError: on empty or mismatched input, NaN scores, or labels other than 0/1/True/False.
    """
    s = _as_vector(scores, "scores")
    y = np.asarray(labels)
    if y.shape != s.shape:
        raise ValueError("labels must have the same shape as scores; got %s and %s" % (y.shape, s.shape))
    if y.dtype != bool:
        if not np.isin(y, (0, 1)).all():
            raise ValueError("labels must be booleans or 0/1; got values %s" % np.unique(y)[:5])
        y = y.astype(bool)
    distinct = np.unique(s)
    cuts = np.r_[distinct, np.inf]  # predict True for s >= cuts[k]
    pos, neg = np.sort(s[y]), np.sort(s[~y])
    true_pos = len(pos) - np.searchsorted(pos, cuts, side="left")
    true_neg = np.searchsorted(neg, cuts, side="left")
    acc = (true_pos + true_neg) / len(s)
    k = int(np.argmax(acc))
    if k == 0:
        threshold = -np.inf
    elif k == len(distinct):
        threshold = np.inf
    else:
        threshold = float((distinct[k - 1] + distinct[k]) / 2.0)
    return float(threshold), float(acc[k])


def paired_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows: a, b (N, H) -> (N,) float64. A zero row has cosine 0 with anything."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError("a and b must be (N, H) arrays of the same shape; got %s and %s" % (a.shape, b.shape))
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    den = na * nb
    out = np.zeros(len(a))
    ok = den > 0
    out[ok] = np.einsum("ij,ij->i", a[ok], b[ok]) / den[ok]
    return np.clip(out, -1.0, 1.0)


# =================================================================================================== results


@dataclass(frozen=True)
class SimilarityResult:
    """One number of a similarity benchmark.

    Attributes:
        task: e.g. "wic", "cosimlex", "usim", "stsb", "sick", "simlex999".
        split: the split scored ("dev", "train", "test", "all", ...).
        metric: e.g. "accuracy", "spearman", "subtask2_harmonic_mean".
        value: the metric x 100.
        n: the number of items the metric is computed over.
        layer: hidden state ("0" = embedding output ... "L" = last), "last4", "first-last", "all" (a classifier over
            every layer), "last" (sentence poolings of the last layer) or the embedder's configuration ("default").
        pooling: how vectors are made: "target" (the target word), "cls"/"mean" (sentence), "word-mean" (mean of a
            sentence's word vectors), "decontext" (decontextualised word vectors).
        postprocess: post-processing name ("none", "whiten", "abtt(k=3)", ...).
        fitted_on: the corpus the post-processor was fitted on ("-" for "none").
        model: the embedder's model name.
        extra: further details (threshold, counts, ...), JSON-able.
    """

    task: str
    split: str
    metric: str
    value: float
    n: int
    layer: str
    pooling: str
    postprocess: str
    fitted_on: str
    model: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["value"] = _json_float(self.value)
        d["extra"] = _json_safe(dict(self.extra))
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SimilarityResult":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError("unknown SimilarityResult fields %s; expected some of %s" % (unknown, sorted(known)))
        d = dict(d)
        d["value"] = float("nan") if d.get("value") is None else float(d["value"])
        return cls(**d)


def _json_float(x: float) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _json_float(float(obj))
    return obj


RESULT_COLUMNS = ("model", "task", "split", "metric", "value", "n", "layer", "pooling", "postprocess", "fitted_on")


def results_to_markdown(rows: Iterable[SimilarityResult], *, columns: Sequence[str] = RESULT_COLUMNS,
                        digits: int = 1) -> str:
    """A GitHub-markdown table of result rows, one line per row, values with ``digits`` decimals.

    Raises:
        ValueError: for a column that is not a field of :class:`SimilarityResult`.
    """
    known = {f.name for f in dataclasses.fields(SimilarityResult)}
    bad = [c for c in columns if c not in known]
    if bad:
        raise ValueError("unknown column(s) %s; valid: %s" % (bad, sorted(known)))
    rule = "|".join("---:" if c in ("value", "n") else "---" for c in columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + rule + "|"]
    for r in rows:
        cells = []
        for c in columns:
            v = getattr(r, c)
            if c == "value":
                v = "nan" if v is None or not math.isfinite(v) else "%.*f" % (digits, v)
            cells.append(str(v).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def save_results_json(rows: Iterable[SimilarityResult], path: str | os.PathLike, *,
                      metadata: Mapping[str, Any] | None = None) -> None:
    """Write ``{"metadata": ..., "results": [row dicts]}`` to ``path`` atomically (NaN and infinity become null)."""
    payload = {"metadata": _json_safe(dict(metadata or {})), "results": [r.to_dict() for r in rows]}
    with atomic_write(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, allow_nan=False)
        f.write("\n")
    logger.info("wrote %d similarity results to %s", len(payload["results"]), path)


def load_results_json(path: str | os.PathLike) -> tuple[list[SimilarityResult], dict[str, Any]]:
    """Read a file written by :func:`save_results_json`: (rows, metadata)."""
    with open(path, encoding="utf-8") as f:
        payload = json.load(f)
    if not isinstance(payload, dict) or "results" not in payload:
        raise ValueError("%s is not a similarity results file (no 'results' key)" % path)
    return [SimilarityResult.from_dict(d) for d in payload["results"]], dict(payload.get("metadata") or {})


def select_best_layer(rows: Sequence[SimilarityResult], *, task: str, metric: str, report_split: str, select_split: str,
                      select_task: str | None = None, select_metric: str | None = None, pooling: str | None = None,
                      postprocess: str | None = None, model: str | None = None) -> dict[str, Any] | None:
    """Choose a layer view on one split (or task) and report it on another, never looking at the report split.

    Only rows with a per-layer view (digits, "last4", "first-last") compete. Among equal selection scores the
    lowest layer index wins ("last4"/"first-last" rank after the single layers).

    Args:
        rows: results holding both the selection and the reported rows.
        task, metric, report_split: the number reported.
        select_split: the split that chooses the layer, e.g. "train" or "dev".
        select_task, select_metric: choose on another task / metric (default: the same).
        pooling, postprocess, model: filters applied to both selection and reported rows (None: any).

    Returns:
        ``{"layer", "value", "selected_on", "selection_value"}`` or None when no layer has both rows.
    """
    select_task = select_task or task
    select_metric = select_metric or metric

    def keep(r: SimilarityResult, t: str, m: str, s: str) -> bool:
        return (r.task == t and r.metric == m and r.split == s and _is_layer_view(r.layer)
                and (pooling is None or r.pooling == pooling) and (postprocess is None or r.postprocess == postprocess)
                and (model is None or r.model == model) and math.isfinite(r.value))

    chosen = {r.layer: r.value for r in rows if keep(r, select_task, select_metric, select_split)}
    reported = {r.layer: r.value for r in rows if keep(r, task, metric, report_split)}
    candidates = [l for l in chosen if l in reported]
    if not candidates:
        return None
    best = max(candidates, key=lambda l: (chosen[l], -_layer_order(l)))
    return {"layer": best, "value": reported[best], "selected_on": "%s/%s" % (select_task, select_split),
            "selection_value": chosen[best]}


def _is_layer_view(layer: str) -> bool:
    return layer.isdigit() or layer in ("last4", "first-last")


def _layer_order(layer: str) -> int:
    return int(layer) if layer.isdigit() else {"last4": 1000, "first-last": 1001}.get(layer, 2000)


# =================================================================================================== embedding


class EmbedderLike(Protocol):
    """What the harnesses need from an embedder (see :class:`ctxemb.embedding.Embedder`)."""

    num_layers: int

    def embed_words(self, sentences, **kwargs) -> list: ...

    def embed_sentences(self, texts, **kwargs) -> np.ndarray: ...


@dataclass(frozen=True)
class _View:
    """A layer view: its label and the positions on the stacked axis that are averaged."""

    name: str
    indices: tuple[int, ...]


def _check_choice(name: str, value, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError("%s must be one of %s; got %r" % (name, ", ".join(map(str, choices)), value))


def _config_dict(embedder) -> dict[str, Any]:
    cfg = getattr(embedder, "config", None)
    if cfg is None:
        return {}
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict())
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return {}


def _model_label(embedder) -> str:
    d = _config_dict(embedder)
    for key in ("model", "model_name", "name_or_path", "name"):
        if d.get(key):
            return str(d[key])
    return type(embedder).__name__


def _default_layer_label(embedder) -> str:
    d = _config_dict(embedder)
    if d.get("layers") is None:
        return "default"
    return "default(%s %s)" % (",".join(str(x) for x in d["layers"]), d.get("layer_pooling", ""))


def _layer_setup(embedder, layers: str, *, first_last: bool = False) -> tuple[tuple[int, ...] | None, list[_View]]:
    """The hidden states to stack (None: use the embedder's configuration) and the views scored on them."""
    _check_choice("layers", layers, LAYER_MODES)
    if layers == "default":
        return None, [_View(_default_layer_label(embedder), (0,))]
    n = int(embedder.num_layers)
    if n < 1:
        raise ValueError("embedder.num_layers must be >= 1; got %d" % n)
    views = [_View(str(k), (k,)) for k in range(n + 1)]
    views.append(_View("last4", tuple(range(max(0, n - 3), n + 1))))
    if first_last:
        views.append(_View("first-last", (1, n)))
    return tuple(range(n + 1)), views


def _view(stacked: np.ndarray, view: _View) -> np.ndarray:
    """(P, S, H) -> (P, H) float32: the mean over the view's stacked positions."""
    if len(view.indices) == 1:
        return np.ascontiguousarray(stacked[:, view.indices[0]], dtype=np.float32)
    return stacked[:, list(view.indices)].mean(axis=1, dtype=np.float64).astype(np.float32)


def _embed_spans(embedder, spans: Sequence[WordInContext], *, stack_layers: tuple[int, ...] | None, batch_size: int,
                 show_progress_bar: bool, desc: str = "embedding", groups: np.ndarray | None = None,
                 n_groups: int | None = None) -> np.ndarray:
    """Contextual vectors of word spans, each sentence run through the encoder once.

    A span's vector is the mean of its word vectors. With ``groups`` (P,) the span vectors are summed per group
    instead of returned one by one, so that many occurrences of a word cost no memory.

    Returns:
        (P, S, H) float32, or (n_groups, S, H) float32 sums with ``groups``.
    """
    from tqdm.auto import tqdm

    index: dict[tuple[str, ...], int] = {}
    by_sentence: list[list[int]] = []
    for p, span in enumerate(spans):
        i = index.setdefault(span.tokens, len(index))
        if i == len(by_sentence):
            by_sentence.append([])
        by_sentence[i].append(p)
    sentences = list(index)
    # Longest first: an out-of-memory or length error shows at once; similar lengths batch together.
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    n_stack = 1 if stack_layers is None else len(stack_layers)
    kwargs = {} if stack_layers is None else {"layers": stack_layers, "layer_pooling": "stack"}
    out: np.ndarray | None = None
    bar = tqdm(total=len(order), desc=desc, unit="sent", disable=not show_progress_bar)
    for lo in range(0, len(order), _CHUNK_SENTENCES):
        chunk = order[lo : lo + _CHUNK_SENTENCES]
        embs = embedder.embed_words([list(sentences[i]) for i in chunk], batch_size=batch_size,
                                    show_progress_bar=False, **kwargs)
        if len(embs) != len(chunk):
            raise RuntimeError("embed_words returned %d arrays for %d sentences" % (len(embs), len(chunk)))
        for i, e in zip(chunk, embs):
            e = np.asarray(e)
            if stack_layers is None and e.ndim == 2:
                e = e[:, None, :]
            if e.ndim != 3 or e.shape[0] != len(sentences[i]) or e.shape[1] != n_stack:
                raise RuntimeError(
                    "embed_words returned shape %s for a sentence of %d words; expected (%d, %d, H)%s"
                    % (e.shape, len(sentences[i]), len(sentences[i]), n_stack,
                       "" if stack_layers is None else " with layer_pooling='stack'")
                )
            if out is None:
                shape = ((len(spans) if groups is None else n_groups), n_stack, e.shape[2])
                out = np.zeros(shape, dtype=np.float32)  # float32 sums: a group adds at most a few hundred vectors
            for p in by_sentence[i]:
                span = spans[p]
                v = e[span.start] if span.end - span.start == 1 else e[span.start : span.end].mean(axis=0)
                if groups is None:
                    out[p] = v
                else:
                    out[groups[p]] += v
        bar.update(len(chunk))
    bar.close()
    if out is None:
        raise ValueError("no spans to embed")
    return out


def _sample_fit_spans(sentences: Sequence[Sequence[str]], max_tokens: int, seed: int) -> list[WordInContext]:
    """Every word of a seeded random sample of sentences, up to ``max_tokens`` words in all."""
    if max_tokens < 1:
        raise ValueError("max_fit_tokens must be >= 1; got %d" % max_tokens)
    rng = np.random.default_rng(seed)
    spans: list[WordInContext] = []
    for i in rng.permutation(len(sentences)):
        tokens = tuple(sentences[i])
        for k in range(len(tokens)):
            spans.append(WordInContext(tokens, k, k + 1))
            if len(spans) >= max_tokens:
                return spans
    return spans


# ---- post-processing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Option:
    label: str
    template: Any  # an unfitted estimator, or None for "none"


def _postprocess_options(postprocess, n_components: int | None) -> list[_Option]:
    """Normalise ``postprocess`` (a name, an estimator, or a sequence of them) into labelled unfitted templates."""
    items = [postprocess] if isinstance(postprocess, str) or hasattr(postprocess, "fit") else list(postprocess)
    if not items:
        raise ValueError("postprocess must name at least one choice; got an empty sequence")
    options = []
    for item in items:
        if isinstance(item, str):
            name = item.strip().lower()
            _check_choice("postprocess", name, POSTPROCESS_NAMES)
            if name == "none":
                options.append(_Option("none", None))
                continue
            kwargs = {"n_components": n_components} if name in ("abtt", "whiten") and n_components is not None else {}
            try:
                from ctxemb.geometry.postprocessing import make_postprocessor
            except ImportError as exc:  # pragma: no cover - the module ships with ctxemb
                raise ImportError("post-processing %r needs ctxemb.geometry.postprocessing: %s" % (name, exc)) from exc
            label = name if not kwargs else "%s(k=%d)" % (name, n_components)
            options.append(_Option(label, make_postprocessor(name, **kwargs)))
        elif hasattr(item, "fit") and hasattr(item, "transform"):
            options.append(_Option(type(item).__name__, item))
        else:
            raise TypeError("postprocess entries must be names (%s) or estimators with fit/transform; got %r"
                            % (", ".join(POSTPROCESS_NAMES), item))
    labels = [o.label for o in options]
    if len(set(labels)) != len(labels):
        raise ValueError("postprocess lists a choice twice: %s" % labels)
    return options


def _needs_fit(options: Sequence[_Option]) -> bool:
    return any(o.template is not None for o in options)


def _fit_view(option: _Option, X: np.ndarray, where: str = ""):
    """A fresh copy of the option's estimator fitted on X (T, H); None for "none".

    Raises:
        ValueError: if the fit fails (e.g. whitening on fewer vectors than dimensions), naming the task and layer.
    """
    if option.template is None:
        return None
    try:
        return copy.deepcopy(option.template).fit(X)
    except ValueError as exc:
        raise ValueError("fitting post-processing %r on %d vectors of dimension %d (%s) failed: %s"
                         % (option.label, X.shape[0], X.shape[1], where, exc)) from exc


def _apply(estimator, X: np.ndarray) -> np.ndarray:
    return X if estimator is None else np.asarray(estimator.transform(X), dtype=np.float32)


def _fit_label(option: _Option, name: str | None, n_rows: int, unit: str) -> str:
    return NOT_FITTED if option.template is None else "%s (%d %s)" % (name, n_rows, unit)


def _row(task, split, metric, value, n, layer, pooling, option: _Option, fitted_on, model, **extra) -> SimilarityResult:
    return SimilarityResult(task=task, split=split, metric=metric, value=100.0 * float(value), n=int(n), layer=layer,
                            pooling=pooling, postprocess=option.label, fitted_on=fitted_on, model=model, extra=extra)


def _unique_sentences(spans: Iterable[WordInContext]) -> list[tuple[str, ...]]:
    return list(dict.fromkeys(s.tokens for s in spans))


def _resolve_fit_corpus(options, fit_corpus, fit_corpus_name, default, default_name, task: str):
    if not _needs_fit(options):
        return None, None
    if fit_corpus is not None:
        if fit_corpus_name is None:
            raise ValueError("fit_corpus_name must name the fit corpus (it is recorded in the results)")
        return [tuple(s) for s in fit_corpus], fit_corpus_name
    if default is None:
        raise ValueError("%s has no train split to fit post-processing on: pass fit_corpus (sentences as word lists) "
                         "and fit_corpus_name" % task)
    return default, default_name


# =================================================================================================== WiC


def evaluate_wic(embedder: EmbedderLike, train: Sequence[WicExample], dev: Sequence[WicExample], *,
                 postprocess="none", n_components: int | None = None, fit_corpus: Sequence[Sequence[str]] | None = None,
                 fit_corpus_name: str | None = None, layers: str = "sweep", logreg: bool = True,
                 max_fit_tokens: int = 8192, batch_size: int = 32, show_progress_bar: bool = True,
                 seed: int = 0) -> list[SimilarityResult]:
    """WiC: cosine of the target's two contextual vectors, thresholded at the value best on train.

    Rows per (post-processing, layer view): "accuracy" on dev (threshold from train; ``extra["threshold"]``) and on
    train (the threshold's own accuracy, for choosing a layer without touching dev). With ``logreg`` also
    "accuracy_logreg" on dev (layer "all"): a logistic regression on the cosine of every layer view plus a
    "same surface form" feature, trained on train.

    Args:
        embedder: see :class:`EmbedderLike`.
        train, dev: labelled WiC examples (:func:`ctxemb.evaluation.similarity_data.load_wic`).
        postprocess: a name in ``POSTPROCESS_NAMES``, an unfitted estimator, or a sequence of them.
        n_components: for "abtt" (directions removed) and "whiten" (dimensions kept); None: their defaults.
        fit_corpus, fit_corpus_name: sentences (word lists) to fit post-processing on, and their label;
            default the train sentences ("wic/train").
        layers: "sweep" (every hidden state and "last4") or "default" (the embedder's configuration).
        logreg: add the logistic-regression variant.
        max_fit_tokens: word vectors sampled from the fit corpus to fit each post-processor.
        batch_size, show_progress_bar: passed on to the embedder / progress bars.
        seed: for the fit sample.

    Raises:
        ValueError: on empty or unlabelled data, or bad option values.
    """
    for name, data in (("train", train), ("dev", dev)):
        if not data:
            raise ValueError("WiC %s is empty" % name)
        if any(e.label is None for e in data):
            raise ValueError("WiC %s has unlabelled examples; load it with its gold file" % name)
    options = _postprocess_options(postprocess, n_components)
    stack, views = _layer_setup(embedder, layers)
    spans = [s for e in list(train) + list(dev) for s in (e.first, e.second)]
    fit_sents, fit_name = _resolve_fit_corpus(options, fit_corpus, fit_corpus_name,
                                              _unique_sentences(spans[: 2 * len(train)]), "wic/train", "WiC")
    fit_spans = _sample_fit_spans(fit_sents, max_fit_tokens, seed) if fit_sents is not None else []
    stacked = _embed_spans(embedder, spans + fit_spans, stack_layers=stack, batch_size=batch_size,
                           show_progress_bar=show_progress_bar, desc="WiC")
    targets, fit_rows = stacked[: len(spans)], stacked[len(spans) :]
    n_tr = len(train)
    y_tr = np.array([e.label for e in train], dtype=bool)
    y_dev = np.array([e.label for e in dev], dtype=bool)
    same_form = np.array([e.first.word.lower() == e.second.word.lower() for e in list(train) + list(dev)],
                         dtype=np.float64)
    model = _model_label(embedder)
    rows: list[SimilarityResult] = []
    for option in options:
        fitted_on = _fit_label(option, fit_name, len(fit_spans), "words")
        cosines = []
        for view in views:
            X = _view(targets, view)
            est = _fit_view(option, _view(fit_rows, view), "wic, layer %s" % view.name)
            X = _apply(est, X)
            cos = paired_cosine(X[0::2], X[1::2])  # (N_train + N_dev,)
            cosines.append(cos)
            threshold, train_acc = best_threshold(cos[:n_tr], y_tr)
            dev_acc = accuracy(y_dev, cos[n_tr:] >= threshold)
            rows.append(_row("wic", "train", "accuracy", train_acc, n_tr, view.name, "target", option, fitted_on,
                             model, threshold=threshold))
            rows.append(_row("wic", "dev", "accuracy", dev_acc, len(dev), view.name, "target", option, fitted_on, model,
                             threshold=threshold, threshold_from="wic/train"))
        if logreg:
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            feats = np.column_stack(cosines + [same_form])  # (N_train + N_dev, n_views + 1)
            clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            clf.fit(feats[:n_tr], y_tr)
            rows.append(_row("wic", "dev", "accuracy_logreg", accuracy(y_dev, clf.predict(feats[n_tr:])), len(dev),
                             "all", "target",
                             option, fitted_on, model, features=[v.name for v in views] + ["same_form"],
                             train_accuracy=100.0 * accuracy(y_tr, clf.predict(feats[:n_tr]))))
    return rows


# =================================================================================================== CoSimLex


def evaluate_cosimlex(embedder: EmbedderLike, examples: Sequence[CoSimLexExample], *, postprocess="none",
                      n_components: int | None = None, fit_corpus: Sequence[Sequence[str]] | None = None,
                      fit_corpus_name: str | None = None, layers: str = "sweep", split: str = "test",
                      max_fit_tokens: int = 8192, batch_size: int = 32, show_progress_bar: bool = True,
                      seed: int = 0) -> list[SimilarityResult]:
    """CoSimLex (SemEval-2020 Task 3): similarity of two words inside each of two contexts.

    Predicted similarity in a context is the cosine of the two marked words' vectors in it.

    - Subtask 1 (change, predicted ``sim2 - sim1`` against gold ``sim2 - sim1``, N values):
      "subtask1_uncentered_pearson" (official) and "subtask1_pearson".
    - Subtask 2 (both contexts' similarities pooled, 2N values): "subtask2_spearman", "subtask2_pearson" and
      "subtask2_harmonic_mean" of the two (official).

    CoSimLex has no train split: post-processing needs ``fit_corpus`` (e.g. WikiText-2 sentences).
    Other arguments are as in :func:`evaluate_wic`.

    Raises:
        ValueError: on empty data, examples without gold, or post-processing without ``fit_corpus``.
    """
    if not examples:
        raise ValueError("CoSimLex examples are empty")
    if any(e.sim1 is None or e.sim2 is None for e in examples):
        raise ValueError("CoSimLex examples need gold sim1/sim2; load the full data set or pass the gold file")
    options = _postprocess_options(postprocess, n_components)
    stack, views = _layer_setup(embedder, layers)
    fit_sents, fit_name = _resolve_fit_corpus(options, fit_corpus, fit_corpus_name, None, None, "CoSimLex")
    spans = [s for e in examples for s in (e.context1_word1, e.context1_word2, e.context2_word1, e.context2_word2)]
    fit_spans = _sample_fit_spans(fit_sents, max_fit_tokens, seed) if fit_sents is not None else []
    stacked = _embed_spans(embedder, spans + fit_spans, stack_layers=stack, batch_size=batch_size,
                           show_progress_bar=show_progress_bar, desc="CoSimLex")
    targets, fit_rows = stacked[: len(spans)], stacked[len(spans) :]
    gold1 = np.array([e.sim1 for e in examples])
    gold2 = np.array([e.sim2 for e in examples])
    n = len(examples)
    model = _model_label(embedder)
    rows = []
    for option in options:
        fitted_on = _fit_label(option, fit_name, len(fit_spans), "words")
        for view in views:
            est = _fit_view(option, _view(fit_rows, view), "cosimlex, layer %s" % view.name)
            X = _apply(est, _view(targets, view))  # (4N, H): w1@c1, w2@c1, w1@c2, w2@c2
            pred1, pred2 = paired_cosine(X[0::4], X[1::4]), paired_cosine(X[2::4], X[3::4])
            sp = spearman(np.r_[pred1, pred2], np.r_[gold1, gold2])
            pe = pearson(np.r_[pred1, pred2], np.r_[gold1, gold2])
            for metric, value, count in (
                ("subtask1_uncentered_pearson", uncentered_pearson(pred2 - pred1, gold2 - gold1), n),
                ("subtask1_pearson", pearson(pred2 - pred1, gold2 - gold1), n),
                ("subtask2_spearman", sp, 2 * n),
                ("subtask2_pearson", pe, 2 * n),
                ("subtask2_harmonic_mean", harmonic_mean(sp, pe), 2 * n),
            ):
                rows.append(_row("cosimlex", split, metric, value, count, view.name, "target", option, fitted_on,
                                 model))
    return rows


# =================================================================================================== graded pairs


class GradedPair(Protocol):
    """One word in two contexts with a graded gold score (:class:`UsimExample`, :class:`ScwsExample`)."""

    first: WordInContext
    second: WordInContext
    score: float


def evaluate_graded_pairs(embedder: EmbedderLike, splits: Mapping[str, Sequence[GradedPair]], *, task: str,
                          postprocess="none", n_components: int | None = None,
                          fit_corpus: Sequence[Sequence[str]] | None = None, fit_corpus_name: str | None = None,
                          layers: str = "sweep", max_fit_tokens: int = 8192, batch_size: int = 32,
                          show_progress_bar: bool = True, seed: int = 0) -> list[SimilarityResult]:
    """Graded similarity of a word in two contexts (CoInCo usage similarity, SCWS): Spearman of the cosine of the
    two target vectors against the gold score, per split ("spearman").

    Args:
        splits: split name -> pairs, e.g. ``{"train": ..., "test": ...}``. Post-processing fits on the "train"
            split's sentences when there is one and no ``fit_corpus`` is given.
        task: the task name recorded in the rows, e.g. "usim" or "scws".
        Others: as in :func:`evaluate_wic`.

    Raises:
        ValueError: on an empty split or post-processing with neither a "train" split nor ``fit_corpus``.
    """
    if not splits:
        raise ValueError("splits is empty; pass e.g. {'test': pairs}")
    for name, data in splits.items():
        if not data:
            raise ValueError("%s split %r is empty" % (task, name))
    options = _postprocess_options(postprocess, n_components)
    stack, views = _layer_setup(embedder, layers)
    names = list(splits)
    spans = [s for name in names for e in splits[name] for s in (e.first, e.second)]
    default = _unique_sentences(s for e in splits["train"] for s in (e.first, e.second)) if "train" in splits else None
    fit_sents, fit_name = _resolve_fit_corpus(options, fit_corpus, fit_corpus_name, default, "%s/train" % task, task)
    fit_spans = _sample_fit_spans(fit_sents, max_fit_tokens, seed) if fit_sents is not None else []
    stacked = _embed_spans(embedder, spans + fit_spans, stack_layers=stack, batch_size=batch_size,
                           show_progress_bar=show_progress_bar, desc=task)
    targets, fit_rows = stacked[: len(spans)], stacked[len(spans) :]
    bounds = np.cumsum([0] + [len(splits[n]) for n in names])
    gold = np.array([e.score for n in names for e in splits[n]], dtype=np.float64)
    model = _model_label(embedder)
    rows = []
    for option in options:
        fitted_on = _fit_label(option, fit_name, len(fit_spans), "words")
        for view in views:
            est = _fit_view(option, _view(fit_rows, view), "%s, layer %s" % (task, view.name))
            X = _apply(est, _view(targets, view))
            cos = paired_cosine(X[0::2], X[1::2])
            for k, name in enumerate(names):
                lo, hi = bounds[k], bounds[k + 1]
                rows.append(_row(task, name, "spearman", spearman(cos[lo:hi], gold[lo:hi]), hi - lo, view.name,
                                 "target", option, fitted_on, model))
    return rows


# =================================================================================================== sentences


def evaluate_sentence_similarity(embedder: EmbedderLike, splits: Mapping[str, Sequence[SentencePair]], *, task: str,
                                 poolings: Sequence[str] = SENTENCE_POOLINGS, postprocess="none",
                                 n_components: int | None = None, fit_texts: Sequence[str] | None = None,
                                 fit_name: str | None = None, layers: str = "sweep", max_fit_sentences: int = 20000,
                                 batch_size: int = 32, show_progress_bar: bool = True,
                                 seed: int = 0) -> list[SimilarityResult]:
    """Sentence similarity (STS-B, SICK-R): Spearman and Pearson (x 100) of the cosine of two sentence vectors.

    Poolings:
        "cls": the [CLS] vector of the last layer (``embed_sentences(pooling="cls", layers=[-1])``), layer "last".
        "mean": the mean of the last layer's token vectors, special tokens included, as sentence-transformers
            (``embed_sentences(pooling="mean", layers=[-1])``), layer "last".
        "layers": the mean of the sentence's word vectors (whitespace-split words) for each layer view, pooling
            "word-mean"; with ``layers="sweep"`` every hidden state, "last4" and "first-last".

    Post-processing is fitted on sentence vectors made the same way: of ``fit_texts`` if given, else of the
    "train" split's sentences; at most ``max_fit_sentences`` of them (a seeded sample).

    Args:
        splits: split name -> pairs, e.g. ``{"train": ..., "dev": ...}``; every split is scored.
        task: recorded in the rows ("stsb", "sick").
        Others: as in :func:`evaluate_wic`.

    Raises:
        ValueError: on an empty split, an unknown pooling, or post-processing with neither "train" nor ``fit_texts``.
    """
    if not splits:
        raise ValueError("splits is empty; pass e.g. {'dev': pairs}")
    for name, data in splits.items():
        if not data:
            raise ValueError("%s split %r is empty" % (task, name))
    poolings = list(poolings)
    if not poolings:
        raise ValueError("poolings is empty; choose from %s" % (SENTENCE_POOLINGS,))
    for p in poolings:
        _check_choice("pooling", p, SENTENCE_POOLINGS)
    options = _postprocess_options(postprocess, n_components)
    names = list(splits)
    pairs = [p for n in names for p in splits[n]]
    fit_list: list[str] = []
    if _needs_fit(options):
        if fit_texts is not None:
            if fit_name is None:
                raise ValueError("fit_name must name fit_texts (it is recorded in the results)")
            candidates = list(dict.fromkeys(fit_texts))
        elif "train" in splits:
            candidates = list(dict.fromkeys(t for p in splits["train"] for t in (p.sentence1, p.sentence2)))
            fit_name = "%s/train" % task
        else:
            raise ValueError("%s has no 'train' split to fit post-processing on: pass fit_texts and fit_name" % task)
        if len(candidates) > max_fit_sentences:
            keep = np.sort(np.random.default_rng(seed).choice(len(candidates), max_fit_sentences, replace=False))
            candidates = [candidates[i] for i in keep]
        fit_list = candidates
    texts = list(dict.fromkeys([t for p in pairs for t in (p.sentence1, p.sentence2)] + fit_list))
    position = {t: i for i, t in enumerate(texts)}
    idx1 = np.array([position[p.sentence1] for p in pairs])
    idx2 = np.array([position[p.sentence2] for p in pairs])
    fit_idx = np.array([position[t] for t in fit_list], dtype=np.int64)
    gold = np.array([p.score for p in pairs], dtype=np.float64)
    bounds = np.cumsum([0] + [len(splits[n]) for n in names])
    model = _model_label(embedder)
    rows: list[SimilarityResult] = []

    def score(vectors: np.ndarray, layer: str, pooling: str) -> None:  # vectors: (len(texts), H)
        for option in options:
            fitted_on = _fit_label(option, fit_name, len(fit_idx), "sentences")
            est = _fit_view(option, vectors[fit_idx], "%s, %s pooling, layer %s" % (task, pooling, layer))
            X = _apply(est, vectors)
            cos = paired_cosine(X[idx1], X[idx2])
            for k, name in enumerate(names):
                lo, hi = bounds[k], bounds[k + 1]
                for metric, fn in (("spearman", spearman), ("pearson", pearson)):
                    rows.append(_row(task, name, metric, fn(cos[lo:hi], gold[lo:hi]), hi - lo, layer, pooling, option,
                                     fitted_on, model))

    for pooling in poolings:
        if pooling in ("cls", "mean"):
            vectors = embedder.embed_sentences(texts, pooling=pooling, batch_size=batch_size,
                                               show_progress_bar=show_progress_bar, layers=(-1,), layer_pooling="mean")
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.shape[0] != len(texts) or vectors.ndim != 2:
                raise RuntimeError("embed_sentences returned shape %s for %d texts" % (vectors.shape, len(texts)))
            score(vectors, "last", pooling)
        else:
            stack, views = _layer_setup(embedder, layers, first_last=True)
            spans = []
            for t in texts:
                words = tuple(t.split())
                if not words:
                    raise ValueError("%s has an empty sentence; cannot pool its words" % task)
                spans.append(WordInContext(words, 0, len(words)))
            stacked = _embed_spans(embedder, spans, stack_layers=stack, batch_size=batch_size,
                                   show_progress_bar=show_progress_bar, desc="%s words" % task)
            for view in views:
                score(_view(stacked, view), view.name, "word-mean")
    return rows


# =================================================================================================== word similarity


@dataclass
class DecontextualizedVectors:
    """Static word vectors made from contextual ones (Bommasani et al. 2020).

    Attributes:
        words: the words (as looked up: lower-cased when built with ``lowercase=True``).
        vectors: (n_words, S, H) float32, one vector per word and stacked hidden state.
        counts: (n_words,) the number of corpus sentences averaged; 0 means the word was embedded alone.
        stack_layers: the stacked hidden-state indices, or None for the embedder's configuration.
    """

    words: list[str]
    vectors: np.ndarray
    counts: np.ndarray
    stack_layers: tuple[int, ...] | None

    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}


def decontextualized_word_vectors(embedder: EmbedderLike, words: Iterable[str], corpus: Sequence[Sequence[str]], *,
                                  max_occurrences: int = 100, layers: str = "sweep", lowercase: bool = True,
                                  extra_spans: Sequence[WordInContext] = (), batch_size: int = 32,
                                  show_progress_bar: bool = True,
                                  seed: int = 0) -> tuple[DecontextualizedVectors, np.ndarray]:
    """Average each word's contextual vectors over up to ``max_occurrences`` corpus sentences that contain it.

    A sentence counts once per word (its first occurrence of the word). Sentences are visited in a seeded random
    order, so a frequent word gets a random sample of its sentences. A word the corpus never shows as a whole
    token (including any word with a space in it) gets the vector of the word embedded alone, as a one-sentence
    text; its count is 0.

    Args:
        embedder: see :class:`EmbedderLike`.
        words: the vocabulary.
        corpus: sentences as word lists.
        max_occurrences: N, the most sentences averaged per word.
        layers: "sweep" (stack every hidden state) or "default".
        lowercase: match words to corpus tokens case-insensitively (the words are lower-cased).
        extra_spans: further spans embedded in the same pass (e.g. a post-processing fit sample); their
            vectors are returned separately.
        batch_size, show_progress_bar, seed: as elsewhere.

    Returns:
        (vectors, extra) with ``extra`` (len(extra_spans), S, H) float32.

    Raises:
        ValueError: if ``max_occurrences`` < 1 or ``words`` is empty.
    """
    if max_occurrences < 1:
        raise ValueError("max_occurrences must be >= 1; got %d" % max_occurrences)
    norm = (lambda w: w.lower()) if lowercase else (lambda w: w)
    vocab = list(dict.fromkeys(norm(w) for w in words))
    if not vocab:
        raise ValueError("words is empty")
    windex = {w: i for i, w in enumerate(vocab)}
    counts = np.zeros(len(vocab), dtype=np.int64)
    spans: list[WordInContext] = []
    groups: list[int] = []
    rng = np.random.default_rng(seed)
    for i in rng.permutation(len(corpus)):
        tokens = tuple(corpus[i])
        seen = set()
        for k, tok in enumerate(tokens):
            w = norm(tok)
            j = windex.get(w)
            if j is None or w in seen or counts[j] >= max_occurrences:
                continue
            seen.add(w)
            counts[j] += 1
            spans.append(WordInContext(tokens, k, k + 1))
            groups.append(j)
    isolated = [j for j in range(len(vocab)) if counts[j] == 0]
    for j in isolated:
        alone = tuple(vocab[j].split()) or (vocab[j],)
        spans.append(WordInContext(alone, 0, len(alone)))
        groups.append(j)
    n_extra = len(extra_spans)
    groups.extend(range(len(vocab), len(vocab) + n_extra))
    stack, _ = _layer_setup(embedder, layers)
    sums = _embed_spans(embedder, spans + list(extra_spans), stack_layers=stack, batch_size=batch_size,
                        show_progress_bar=show_progress_bar, desc="word vectors",
                        groups=np.asarray(groups), n_groups=len(vocab) + n_extra)
    denom = np.maximum(counts, 1).astype(np.float64)[:, None, None]
    vectors = (sums[: len(vocab)] / denom).astype(np.float32)
    mean_seen = counts[counts > 0].mean() if (counts > 0).any() else 0.0
    logger.info("word vectors: %d words, %d from the corpus (mean %.1f sentences), %d embedded alone",
                len(vocab), len(vocab) - len(isolated), mean_seen, len(isolated))
    return DecontextualizedVectors(vocab, vectors, counts, stack), sums[len(vocab) :].astype(np.float32)


def evaluate_word_similarity(embedder: EmbedderLike, datasets: Mapping[str, Mapping[str, Sequence[WordPair]]],
                             corpus: Sequence[Sequence[str]], *, corpus_name: str, max_occurrences: int = 100,
                             postprocess="none", n_components: int | None = None,
                             fit_corpus: Sequence[Sequence[str]] | None = None, fit_corpus_name: str | None = None,
                             layers: str = "sweep", lowercase: bool = True, max_fit_tokens: int = 8192,
                             batch_size: int = 32, show_progress_bar: bool = True,
                             seed: int = 0) -> list[SimilarityResult]:
    """Word similarity out of context with decontextualised vectors (:func:`decontextualized_word_vectors`):
    Spearman (x 100) of the cosine of the two words' vectors against the gold scores.

    Post-processing is fitted on contextual word vectors of ``fit_corpus`` (default: ``corpus`` itself) and
    applied to the averaged word vectors. For the affine post-processors here (centring, standardising, ABTT,
    whitening) that equals averaging post-processed occurrences.

    Args:
        datasets: task -> split -> pairs, e.g.
            ``{"simlex999": {"all": pairs}, "simverb3500": {"all": ..., "dev": ...}}``.
        corpus, corpus_name: the sentences the vectors come from and their label (``extra["corpus"]``).
        max_occurrences: N.
        Others: as in :func:`evaluate_wic` / :func:`decontextualized_word_vectors`.

    Rows carry ``extra``: ``n_words`` (distinct words of that split), ``n_isolated`` (of them, never seen in the
    corpus), ``mean_occurrences`` (over the seen ones), ``corpus``, ``max_occurrences``.

    Raises:
        ValueError: on an empty data set or corpus.
    """
    if not datasets:
        raise ValueError("datasets is empty")
    for task, splits in datasets.items():
        if not splits or any(not pairs for pairs in splits.values()):
            raise ValueError("word-similarity task %r has an empty split" % task)
    if not corpus:
        raise ValueError("corpus is empty")
    options = _postprocess_options(postprocess, n_components)
    _, views = _layer_setup(embedder, layers)
    norm = (lambda w: w.lower()) if lowercase else (lambda w: w)
    words = [norm(w) for splits in datasets.values() for pairs in splits.values() for p in pairs
             for w in (p.word1, p.word2)]
    fit_sents, fit_name = _resolve_fit_corpus(options, fit_corpus, fit_corpus_name, [tuple(s) for s in corpus],
                                              corpus_name, "word similarity")
    fit_spans = _sample_fit_spans(fit_sents, max_fit_tokens, seed) if fit_sents is not None else []
    dv, fit_rows = decontextualized_word_vectors(embedder, words, corpus, max_occurrences=max_occurrences,
                                                 layers=layers,
                                                 lowercase=lowercase, extra_spans=fit_spans, batch_size=batch_size,
                                                 show_progress_bar=show_progress_bar, seed=seed)
    index = dv.index()
    model = _model_label(embedder)
    rows = []
    for option in options:
        fitted_on = _fit_label(option, fit_name, len(fit_spans), "words")
        for view in views:
            est = _fit_view(option, _view(fit_rows, view), "word similarity, layer %s" % view.name)
            vectors = _apply(est, _view(dv.vectors, view))  # (n_words, H)
            for task, splits in datasets.items():
                for split, pairs in splits.items():
                    i1 = np.array([index[norm(p.word1)] for p in pairs])
                    i2 = np.array([index[norm(p.word2)] for p in pairs])
                    cos = paired_cosine(vectors[i1], vectors[i2])
                    used = np.unique(np.r_[i1, i2])
                    seen = dv.counts[used] > 0
                    value = spearman(cos, [p.score for p in pairs])
                    rows.append(_row(task, split, "spearman", value, len(pairs), view.name, "decontext", option,
                                     fitted_on, model, corpus=corpus_name, max_occurrences=max_occurrences,
                                     n_words=len(used), n_isolated=int((~seen).sum()),
                                     mean_occurrences=float(dv.counts[used][seen].mean()) if seen.any() else 0.0))
    return rows


# =================================================================================================== runner


def _head(data: Sequence, limit: int | None) -> list:
    return list(data) if limit is None else list(data)[:limit]


def run_similarity_tasks(embedder: EmbedderLike, tasks: Sequence[str] = DEFAULT_TASKS, *,
                         root: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
                         postprocess="none", n_components: int | None = None, fit_on: str = "task",
                         layers: str = "sweep", include_train: bool = False, limit: int | None = None,
                         word_sim_tasks: Sequence[str] = WORD_SIM_TASKS,
                         corpus_splits: Sequence[str] = ("valid", "test"), max_occurrences: int = 100,
                         max_corpus_sentences: int | None = None, max_sentence_words: int = 100,
                         sentence_poolings: Sequence[str] = SENTENCE_POOLINGS,
                         scws_path: str | os.PathLike | None = None, max_fit_tokens: int = 8192,
                         max_fit_sentences: int = 20000, batch_size: int = 32, show_progress_bar: bool = True,
                         seed: int = 0, on_task_done: Callable[[str, list[SimilarityResult]], None] | None = None,
                         ) -> list[SimilarityResult]:
    """Load the shared data and run the similarity harnesses by name.

    Tasks and what is scored:
        "wic": WiC train (threshold) -> dev; "cosimlex": the English set ("test");
        "usim": CoInCo usim, "train" (the paper's training ids) and "test" (the rest);
        "stsb": STS-B dev (+ train with ``include_train``); "sick": SICK trial as "dev" (+ train);
        "wordsim": ``word_sim_tasks`` split "all", plus SimVerb's 500 dev pairs as split "dev" of "simverb3500";
        "scws": SCWS from ``scws_path`` (held out of the shared folder).

    Args:
        embedder: see :class:`EmbedderLike`.
        tasks: names from ``TASKS``.
        root: the similarity data folder (default ``shared_data_dir()/similarity``).
        data_dir: the shared data folder, for the WikiText-2 corpus (default ``shared_data_dir()``).
        postprocess, n_components: as in :func:`evaluate_wic`.
        fit_on: "task": each task's train split (WiC, STS-B, SICK, usim) and WikiText-2 valid where there is none
            (CoSimLex, SCWS) or for word similarity (its own corpus); "wikitext-2": WikiText-2 valid for all.
        layers: "sweep" or "default".
        include_train: also score STS-B and SICK train (for choosing a layer without touching dev).
        limit: use only the first ``limit`` examples of every split (a smoke test); also caps the corpora.
        word_sim_tasks: word-similarity sets to score.
        corpus_splits: WikiText-2 files the word vectors come from.
        max_occurrences: N for decontextualised vectors.
        max_corpus_sentences: cap on corpus sentences (a seeded sample); default none, or ``50 * limit`` with ``limit``.
        max_sentence_words: corpus sentences longer than this are dropped (not cut).
        sentence_poolings: for STS-B and SICK.
        scws_path: SCWS ratings.txt.
        max_fit_tokens, max_fit_sentences: fit sample sizes.
        batch_size, show_progress_bar, seed: as elsewhere.
        on_task_done: called with (task, its rows) after each task, e.g. to save partial results.

    Returns:
        All rows, task by task.

    Raises:
        ValueError: for an unknown task or option, before anything is embedded.
    """
    tasks = list(tasks)
    for t in tasks:
        _check_choice("task", t, TASKS)
    _check_choice("fit_on", fit_on, FIT_ON)
    _check_choice("layers", layers, LAYER_MODES)
    for t in word_sim_tasks:
        _check_choice("word_sim_tasks entry", t, WORD_SIM_TASKS)
    options = _postprocess_options(postprocess, n_components)  # fail early on a bad name
    if "scws" in tasks and scws_path is None:
        raise ValueError("task 'scws' needs scws_path: SCWS is held out of the shared data folder")
    if limit is not None and limit < 1:
        raise ValueError("limit must be >= 1; got %d" % limit)
    if max_corpus_sentences is None and limit is not None:
        max_corpus_sentences = 50 * limit
    common = dict(postprocess=postprocess, n_components=n_components, layers=layers, batch_size=batch_size,
                  show_progress_bar=show_progress_bar, seed=seed)
    needs_fit = _needs_fit(options)
    cache: dict[str, Any] = {}

    def wikitext_valid() -> tuple[list[tuple[str, ...]], str]:
        if "fit" not in cache:
            cache["fit"] = load_corpus_sentences("wikitext-2", ("valid",), data_dir=data_dir,
                                                 max_words=max_sentence_words,
                                                 max_sentences=max_corpus_sentences, seed=seed)
        return cache["fit"], corpus_label("wikitext-2", ("valid",))

    def word_fit() -> dict[str, Any]:
        if not needs_fit:
            return {}
        sents, name = wikitext_valid()
        return {"fit_corpus": sents, "fit_corpus_name": name}

    rows: list[SimilarityResult] = []
    for task in tasks:
        logger.info("similarity task %s", task)
        if task == "wic":
            fit = word_fit() if fit_on == "wikitext-2" else {}
            out = evaluate_wic(embedder, _head(load_wic("train", root), limit), _head(load_wic("dev", root), limit),
                               max_fit_tokens=max_fit_tokens, **fit, **common)
        elif task == "cosimlex":
            out = evaluate_cosimlex(embedder, _head(load_cosimlex("en", root), limit), max_fit_tokens=max_fit_tokens,
                                    **word_fit(), **common)
        elif task == "usim":
            fit = word_fit() if fit_on == "wikitext-2" else {}
            out = evaluate_graded_pairs(embedder, {"train": _head(load_coinco_usim("train", root), limit),
                                                   "test": _head(load_coinco_usim("test", root), limit)},
                                        task="usim", max_fit_tokens=max_fit_tokens, **fit, **common)
        elif task == "scws":
            out = evaluate_graded_pairs(embedder, {"all": _head(load_scws(scws_path), limit)}, task="scws",
                                        max_fit_tokens=max_fit_tokens, **word_fit(), **common)
        elif task in ("stsb", "sick"):
            loader = load_stsb if task == "stsb" else load_sick
            splits = {"dev": _head(loader("dev", root), limit)}
            fit: dict[str, Any] = {}
            if include_train or (needs_fit and fit_on == "task"):
                train = _head(loader("train", root), limit)
                if include_train:
                    splits = {"train": train, **splits}
                elif needs_fit:
                    fit = {"fit_texts": list(dict.fromkeys(t for p in train for t in (p.sentence1, p.sentence2))),
                           "fit_name": "%s/train" % task}
            if needs_fit and fit_on == "wikitext-2":
                sents, name = wikitext_valid()
                fit = {"fit_texts": [" ".join(s) for s in sents], "fit_name": name}
            out = evaluate_sentence_similarity(embedder, splits, task=task, poolings=sentence_poolings,
                                               max_fit_sentences=max_fit_sentences, **fit, **common)
        else:  # wordsim
            datasets: dict[str, dict[str, list[WordPair]]] = {
                t: {"all": _head(load_word_similarity(t, root), limit)} for t in word_sim_tasks}
            if "simverb3500" in datasets:
                datasets["simverb3500"]["dev"] = _head(load_word_similarity("simverb500-dev", root), limit)
            corpus = load_corpus_sentences("wikitext-2", corpus_splits, data_dir=data_dir, max_words=max_sentence_words,
                                           max_sentences=max_corpus_sentences, seed=seed)
            name = corpus_label("wikitext-2", corpus_splits)
            fit = word_fit() if fit_on == "wikitext-2" else {}
            out = evaluate_word_similarity(embedder, datasets, corpus, corpus_name=name,
                                           max_occurrences=max_occurrences,
                                           max_fit_tokens=max_fit_tokens, **fit, **common)
        rows.extend(out)
        if on_task_done is not None:
            on_task_done(task, out)
    return rows
