"""Result rows of the similarity harnesses and their I/O: JSON (NaN as null), markdown tables, and choosing a layer
on one split to report it on another.

Every ``value`` is the metric x 100 (accuracy in %, correlations x 100).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ctxemb.core.validation import CorruptFileError, read_json_file
from ctxemb.core.atomic import atomic_write

logger = logging.getLogger(__name__)

NOT_FITTED = "-"  # ``fitted_on`` of rows without post-processing


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
    """Read a file written by :func:`save_results_json`: (rows, metadata).

    Raises:
        FileNotFoundError: no such file.
        CorruptFileError: (a ValueError) the file is not UTF-8 JSON holding an object with a ``results`` key.
    """
    payload = read_json_file(path, "similarity results file")
    if "results" not in payload:
        raise CorruptFileError("%s is not a similarity results file (no 'results' key)" % path, path)
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



@dataclass(frozen=True)
class ResultCell:
    """What the rows of one scored cell share: task, layer view, pooling, post-processing, fit corpus and model.

    ``cell.row(split, metric, value, n, **extra)`` makes one :class:`SimilarityResult`; ``value`` is the metric in
    its natural scale and is stored x 100. ``dataclasses.replace(cell, task=...)`` renames the task (word
    similarity scores several data sets in one cell).
    """

    task: str
    layer: str
    pooling: str
    postprocess: str
    fitted_on: str
    model: str

    def row(self, split: str, metric: str, value: float, n: int, **extra) -> SimilarityResult:
        return SimilarityResult(task=self.task, split=split, metric=metric, value=100.0 * float(value), n=int(n),
                                layer=self.layer, pooling=self.pooling, postprocess=self.postprocess,
                                fitted_on=self.fitted_on, model=self.model, extra=extra)
