"""Similarity benchmarks for the shipped models: raw vectors and each post-processing, every layer.

For each model: WiC (dev), CoSimLex (English), CoInCo usim, STS-B (dev), SICK-R (trial as dev) and word similarity
(SimLex-999, WordSim-353, MEN, RG-65, SimVerb-3500 with decontextualised WikiText-2 vectors), for post-processing
none / standardize / center / abtt / whiten. Each cell shows the default layer view (the last-four average, or the
last layer for [CLS]/mean sentence pooling) and the best layer view, chosen on a split that is not the one
reported (the table says which); test splits are never used (they are not in the shared folder).
Beside ours: published reference points, and sentence-transformers' own STS-B dev Spearman for the same model,
computed in the same run (ours must match within 0.1).

    nice -n 10 python -m benchmarks.similarity --models all-MiniLM-L6-v2
    python -m benchmarks.similarity --fake --limit 30           # smoke test, no model, prints only
    python -m benchmarks.similarity --models all-mpnet-base-v2 --merge   # add a model to the existing results

Writes benchmarks/results/similarity.md and similarity.json (not with --limit unless --out is given).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import sys
from pathlib import Path

import numpy as np

from benchmarks import harness
from ctxemb.evaluation.similarity import (
    POSTPROCESS_NAMES,
    TASKS,
    SimilarityResult,
    load_results_json,
    paired_cosine,
    run_similarity_tasks,
    select_best_layer,
    spearman,
)
from ctxemb.evaluation.similarity import load_stsb

logger = logging.getLogger("benchmarks.similarity")

MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
BENCH_TASKS = ("wic", "cosimlex", "usim", "stsb", "sick", "wordsim")

# Where a task has no split of its own to choose a layer on, one of a related task is used.
_ON_USIM = ("usim", "train", "spearman")
_ON_SIMVERB_DEV = ("simverb3500", "dev", "spearman")

# (label, task, report split, metric, pooling, selection (task, split, metric) or None for a fixed layer, default layer)
HEADLINES = [
    ("WiC acc (cosine threshold)", "wic", "dev", "accuracy", "target", ("wic", "train", "accuracy"), "last4"),
    ("WiC acc (logreg on all layers)", "wic", "dev", "accuracy_logreg", "target", None, "all"),
    ("CoSimLex sub1 uncentered r", "cosimlex", "test", "subtask1_uncentered_pearson", "target", _ON_USIM, "last4"),
    ("CoSimLex sub2 harmonic mean", "cosimlex", "test", "subtask2_harmonic_mean", "target", _ON_USIM, "last4"),
    ("CoInCo usim Spearman (test)", "usim", "test", "spearman", "target", _ON_USIM, "last4"),
    ("STS-B Spearman [CLS]", "stsb", "dev", "spearman", "cls", None, "last"),
    ("STS-B Spearman mean", "stsb", "dev", "spearman", "mean", None, "last"),
    ("STS-B Spearman word-mean", "stsb", "dev", "spearman", "word-mean", ("stsb", "train", "spearman"), "last4"),
    ("SICK-R Spearman [CLS]", "sick", "dev", "spearman", "cls", None, "last"),
    ("SICK-R Spearman mean", "sick", "dev", "spearman", "mean", None, "last"),
    ("SICK-R Spearman word-mean", "sick", "dev", "spearman", "word-mean", ("sick", "train", "spearman"), "last4"),
    ("SimLex-999 Spearman", "simlex999", "all", "spearman", "decontext", _ON_SIMVERB_DEV, "last4"),
    ("WordSim-353 Spearman", "wordsim353", "all", "spearman", "decontext", _ON_SIMVERB_DEV, "last4"),
    ("MEN Spearman", "men", "all", "spearman", "decontext", _ON_SIMVERB_DEV, "last4"),
    ("RG-65 Spearman", "rg65", "all", "spearman", "decontext", _ON_SIMVERB_DEV, "last4"),
    ("SimVerb-3500 Spearman", "simverb3500", "all", "spearman", "decontext", _ON_SIMVERB_DEV, "last4"),
]

REFERENCES = [
    ("WiC accuracy", "BERT-large (Pilehvar & Camacho-Collados 2019)", 65.5, "test"),
    ("WiC accuracy", "LMMS (Loureiro & Jorge 2019)", 68.2, "dev"),
    ("STS-B Spearman", "BERT-base, first-last average (Su et al. 2021)", 59.0, "test"),
    ("STS-B Spearman", "BERT-base, first-last average + whitening (Su et al. 2021)", 71.4, "test"),
    ("STS-B Spearman", "all-MiniLM-L6-v2 (sbert.net)", 82.0, "test"),
]


class HashEmbedder:
    """A model-free stand-in for smoke runs: word vectors from hashes, mixed with the sentence mean per layer."""

    class _Config:
        def to_dict(self):
            return {"model": "fake-hash", "layers": [-4, -3, -2, -1], "layer_pooling": "mean"}

    def __init__(self, num_layers: int = 4, dim: int = 24):
        self.num_layers, self.dim, self.config = num_layers, dim, self._Config()

    def _base(self, word):
        seed = int.from_bytes(hashlib.sha256(word.lower().encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim) + 0.3

    def _stack(self, words):  # (W, L + 1, H)
        base = np.stack([self._base(w) for w in words])
        layers = [base + (k / self.num_layers) * base.mean(0) for k in range(self.num_layers + 1)]
        return np.stack(layers, 1).astype(np.float32)

    def embed_words(self, sentences, *, layers=None, layer_pooling=None, **_):
        out = [self._stack(list(s)) for s in sentences]
        return [o[:, list(layers)] for o in out] if layer_pooling == "stack" else [o[:, -4:].mean(1) for o in out]

    def embed_sentences(self, texts, *, pooling="mean", **_):
        last = [self._stack(t.split())[:, -1] for t in texts]
        return np.stack([s[0] if pooling == "cls" else s.mean(0) for s in last])


def sentence_transformers_stsb(model: str, limit: int | None, batch_size: int) -> float | None:
    """sentence-transformers' own STS-B dev Spearman x 100 for ``model`` (None if it cannot be loaded)."""
    try:
        from sentence_transformers import SentenceTransformer

        from ctxemb.models.hub import resolve_model_dir

        st = SentenceTransformer(str(resolve_model_dir(model)), device="cpu")
    except Exception as exc:  # a reference, not the measurement: report and go on
        logger.warning("sentence-transformers reference for %s unavailable: %s", model, exc)
        return None
    pairs = load_stsb("dev")[:limit] if limit else load_stsb("dev")
    a = st.encode([p.sentence1 for p in pairs], batch_size=batch_size, show_progress_bar=False)
    b = st.encode([p.sentence2 for p in pairs], batch_size=batch_size, show_progress_bar=False)
    return 100.0 * spearman(paired_cosine(a, b), [p.score for p in pairs])


def _find(rows, model, task, split, metric, pooling, layer, postprocess):
    for r in rows:
        key = (r.model, r.task, r.split, r.metric, r.pooling, r.layer, r.postprocess)
        if key == (model, task, split, metric, pooling, layer, postprocess):
            return r
    return None


def _fmt(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else "%.1f" % x


def summary_table(rows: list[SimilarityResult], models, postprocess) -> str:
    head = ["model", "benchmark", "split", "layer chosen on"] + list(postprocess)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 4 + "---:|" * len(postprocess)]
    for model in models:
        for label, task, split, metric, pooling, select, default_layer in HEADLINES:
            if not any(r.model == model and r.task == task for r in rows):
                continue
            cells = []
            for pp in postprocess:
                base = _find(rows, model, task, split, metric, pooling, default_layer, pp)
                cell = _fmt(base.value if base else None)
                if select is not None:
                    best = select_best_layer(rows, task=task, metric=metric, report_split=split, select_task=select[0],
                                             select_split=select[1], select_metric=select[2], pooling=pooling,
                                             postprocess=pp, model=model)
                    if best is not None:
                        cell += " / %s (%s)" % (_fmt(best["value"]), best["layer"])
                cells.append(cell)
            chosen = "fixed: %s" % default_layer if select is None else "%s/%s" % select[:2]
            lines.append("| " + " | ".join([model, label, split, chosen] + cells) + " |")
    return "\n".join(lines) + "\n"


def reference_table(rows: list[SimilarityResult], models, st_reference: dict) -> str:
    lines = ["| benchmark | system | value | split |", "|---|---|---:|---|"]
    for bench, system, value, split in REFERENCES:
        lines.append("| %s | %s | %.1f | %s |" % (bench, system, value, split))
    for model in models:
        wic = select_best_layer(rows, task="wic", metric="accuracy", report_split="dev", select_split="train",
                                pooling="target", postprocess="none", model=model)
        if wic:
            lines.append("| WiC accuracy | ours: %s, cosine threshold, layer %s (chosen on wic/train) | %.1f | dev |"
                         % (model, wic["layer"], wic["value"]))
        for pp in ("none", "whiten"):
            r = _find(rows, model, "stsb", "dev", "spearman", "word-mean", "first-last", pp)
            if r:
                suffix = " + whitening" if pp == "whiten" else ""
                lines.append("| STS-B Spearman | ours: %s, first-last word-mean%s | %.1f | dev |"
                             % (model, suffix, r.value))
        r = _find(rows, model, "stsb", "dev", "spearman", "mean", "last", "none")
        if r:
            lines.append("| STS-B Spearman | ours: %s, mean pooling (last layer) | %.2f | dev |" % (model, r.value))
        if st_reference.get(model) is not None:
            lines.append("| STS-B Spearman | sentence-transformers: %s, same data, same run | %.2f | dev |"
                         % (model, st_reference[model]))
    return "\n".join(lines) + "\n"


def layer_table(rows: list[SimilarityResult], models, postprocess: str = "none") -> str:
    """Per-layer values of the swept headlines (reported split) for one post-processing."""
    out = []
    for model in models:
        layers = sorted({r.layer for r in rows if r.model == model and r.layer.isdigit()}, key=int) + ["last4"]
        if len(layers) == 1:
            continue
        out.append("| %s (%s) | " % (model, postprocess) + " | ".join(layers) + " |")
        out.append("|---|" + "---:|" * len(layers))
        for label, task, split, metric, pooling, select, _ in HEADLINES:
            if select is None or not any(r.model == model and r.task == task for r in rows):
                continue
            vals = [_find(rows, model, task, split, metric, pooling, layer, postprocess) for layer in layers]
            out.append("| %s | " % label + " | ".join(_fmt(v.value if v else None) for v in vals) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def coverage_table(rows: list[SimilarityResult]) -> str:
    """How many words of each word-similarity set the corpus showed (the rest were embedded alone)."""
    lines = ["| model | set | split | pairs | words | never in the corpus | mean sentences per seen word |",
             "|---|---|---|---:|---:|---:|---:|"]
    seen = set()
    for r in rows:
        key = (r.model, r.task, r.split)
        if r.pooling != "decontext" or key in seen or "n_words" not in r.extra:
            continue
        seen.add(key)
        e = r.extra
        lines.append("| %s | %s | %s | %d | %d | %d | %.1f |" % (r.model, r.task, r.split, r.n, e["n_words"],
                                                                 e["n_isolated"], e["mean_occurrences"]))
    return "\n".join(lines) + "\n"


def report(rows: list[SimilarityResult], meta: dict) -> str:
    """The markdown report of all rows."""
    models = list(dict.fromkeys(r.model for r in rows))
    postprocess = meta.get("postprocess") or list(POSTPROCESS_NAMES)
    md = ["# Similarity benchmarks", "",
          "Values x 100 (accuracy %%, correlations). Each cell: default layer view (average of the last four hidden "
          "states; last layer for [CLS]/mean sentence pooling) / best layer view (its name) chosen on the split in "
          "'layer chosen on'. Layer names: hidden-state index (0 = embedding output), last4, first-last. Dev splits "
          "are reported because the test splits are held out. Post-processing is fitted per layer on each task's "
          "train split (WiC, usim, STS-B, SICK), on WikiText-2 valid (CoSimLex), or on the word-vector corpus "
          "(word similarity). Word vectors: up to %d WikiText-2 (valid+test) sentences per word; SimVerb-3500 "
          "includes its 500 dev pairs. CoSimLex has no dev split, so its layer is chosen on CoInCo usim train."
          % meta.get("max_occurrences", 100), "",
          summary_table(rows, models, postprocess), "## Reference points", "",
          "Published numbers are on the test split where stated; ours are on dev.", "",
          reference_table(rows, models, meta.get("st_reference_stsb_dev", {})),
          "## By layer (no post-processing)", "",
          "Reported split; layer = hidden-state index (0 = embedding output). Every row of every post-processing is "
          "in similarity.json.", "", layer_table(rows, models),
          "## Word-vector coverage", "",
          "Words that never occur in the corpus as a whole token get the vector of the word embedded alone.", "",
          coverage_table(rows), "## Run", ""]
    for model, info in meta.get("models", {}).items():
        md.append("- %s: %s s, config %s" % (model, info.get("seconds"), info.get("config")))
    machine = meta.get("machine") or {}
    md.append("- machine: %s; %s" % (harness.machine_line(machine), harness.versions_line(machine)))
    return "\n".join(md) + "\n"


def results_payload(rows: list[SimilarityResult], meta: dict) -> dict:
    """The results file as ``load_results_json`` reads it: the run's metadata and every row."""
    return {"metadata": meta, "results": [r.to_dict() for r in rows]}


def run_model(model: str, args, tasks, postprocess, rows: list[SimilarityResult], meta: dict, out: Path | None):
    """Run every task for one model; returns its rows and records its metadata (and the ST reference) in meta."""
    sw = harness.Stopwatch()
    if args.fake:
        embedder = HashEmbedder()
    else:
        from ctxemb.embedding.embedder import Embedder

        embedder = Embedder.from_pretrained(model)
    partial: list[SimilarityResult] = []

    def save_partial(task, task_rows):
        partial.extend(task_rows)
        logger.info("%s: %s done (%d rows, %.0f s)", model, task, len(task_rows), sw.seconds)
        if out is not None:
            harness.write_json(out.with_suffix(".partial.json"), results_payload(rows + partial, meta),
                               finite_only=True)

    model_rows = run_similarity_tasks(embedder, tasks, postprocess=postprocess, include_train=True, limit=args.limit,
                                      max_occurrences=args.max_occurrences, batch_size=args.batch_size,
                                      show_progress_bar=not args.no_progress, on_task_done=save_partial)
    info = {"config": embedder.config.to_dict(), "num_layers": embedder.num_layers,
            "seconds": round(sw.stop(), 1)}
    meta["models"][model] = info
    if not args.fake and not args.no_st_reference and "stsb" in tasks:
        ref = sentence_transformers_stsb(model, args.limit, args.batch_size)
        meta["st_reference_stsb_dev"][model] = ref
        ours = _find(model_rows, model, "stsb", "dev", "spearman", "mean", "last", "none")
        if ref is not None and ours is not None:
            diff = abs(ours.value - ref)
            info["stsb_dev_mean_minus_sentence_transformers"] = ours.value - ref
            (logger.info if diff <= 0.1 else logger.warning)(
                "%s STS-B dev Spearman, mean pooling: ours %.3f, sentence-transformers %.3f (|diff| %.3f)",
                model, ours.value, ref, diff)
    return model_rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated model names (default: both shipped)")
    ap.add_argument("--tasks", default=",".join(BENCH_TASKS), help="comma-separated, from %s" % ", ".join(TASKS))
    ap.add_argument("--postprocess", default=",".join(POSTPROCESS_NAMES))
    ap.add_argument("--limit", type=int, default=None, help="first N examples of every split (smoke run)")
    ap.add_argument("--fake", action="store_true", help="a hash-based stand-in instead of real models")
    ap.add_argument("--max-occurrences", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", type=Path, default=None,
                    help="output stem (default benchmarks/results/similarity; none with --limit)")
    ap.add_argument("--merge", action="store_true", help="keep the other models' rows of an existing results file")
    ap.add_argument("--report-only", action="store_true", help="rewrite the markdown from the existing JSON")
    ap.add_argument("--no-st-reference", action="store_true", help="skip the sentence-transformers STS-B reference")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    out = args.out if args.out is not None else (None if args.limit else harness.RESULTS / "similarity")
    if args.report_only:
        if out is None or not out.with_suffix(".json").is_file():
            ap.error("--report-only needs an existing results file (--out STEM with STEM.json)")
        rows, meta = load_results_json(out.with_suffix(".json"))
        text = report(rows, meta)
        sys.stdout.write(text)
        harness.write_markdown(out.with_suffix(".md"), text, meta.get("machine"))
        return 0

    models = ["fake-hash"] if args.fake else [m.strip() for m in args.models.split(",") if m.strip()]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    postprocess = [p.strip() for p in args.postprocess.split(",") if p.strip()]
    rows: list[SimilarityResult] = []
    meta: dict = {"machine": harness.machine(), "tasks": tasks, "postprocess": postprocess, "limit": args.limit,
                  "max_occurrences": args.max_occurrences, "models": {}, "st_reference_stsb_dev": {},
                  "protocol": "values x100; post-processing fitted on each task's train split (WiC, usim, STS-B, "
                              "SICK) or WikiText-2 valid (CoSimLex) / the word-vector corpus WikiText-2 valid+test "
                              "(word similarity); best layer chosen on the split named in the table, never on the "
                              "reported split"}
    if out is not None and args.merge and out.with_suffix(".json").is_file():
        old_rows, old_meta = load_results_json(out.with_suffix(".json"))
        rows = [r for r in old_rows if r.model not in models]
        meta["models"] = {k: v for k, v in old_meta.get("models", {}).items() if k not in models}
        old_refs = old_meta.get("st_reference_stsb_dev", {})
        meta["st_reference_stsb_dev"] = {k: v for k, v in old_refs.items() if k not in models}

    for model in models:
        rows.extend(run_model(model, args, tasks, postprocess, rows, meta, out))

    text = report(rows, meta)
    sys.stdout.write(text)
    if out is not None:
        json_path = out.with_suffix(".json")
        harness.write_results(json_path.stem, results_payload(rows, meta), text, out_dir=json_path.parent,
                              finite_only=True)
        partial_file = out.with_suffix(".partial.json")
        if partial_file.exists():
            partial_file.unlink()
        logger.info("wrote %s.{md,json}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
