"""WSD benchmark: F1 (overall and per POS) of sense-store configurations on Raganato-format data sets.

Builds sense stores from SemCor (or a held-out split of it) with one embedder, in several configurations that
share one pass of the embedder over the training corpus, and scores each on every data set, next to the WordNet
first-sense baseline. Reports build speed (training sentences per second), evaluation time, store size on disk and
load time. Writes ``<out>/wsd_<model>[_<tag>].md`` and ``.json``.

Configurations are named like :attr:`ctxemb.wsd.build.BuildConfig.name`: ``1nn`` is the plain recipe (the
embedder's layers, by default the last four averaged, subwords mean-pooled; SemCor centroids; first-sense
back-off); add ``+std`` (standardise), ``+prop`` / ``+prop-all`` (propagation), ``+gloss-concat`` /
``+gloss-average`` (gloss embeddings), ``+prior<w>`` (sense-frequency prior of weight w; per part of speech
``+prior-n<w>-v<w>-a<w>-r<w>``), ``+no-backoff``.
The library's default, ``BuildConfig()``, is ``1nn+prior0.03``.

Examples::

    # the full protocol (slow on CPU: all of SemCor through the model once)
    python -m benchmarks.wsd --model all-MiniLM-L6-v2 --configs 1nn 1nn+std 1nn+prop 1nn+std+prop+gloss-concat

    # a quick end-to-end check on a slice
    python -m benchmarks.wsd --model all-MiniLM-L6-v2 --max-train-sentences 300 --max-eval-sentences 100 \\
        --configs 1nn 1nn+std+prop+gloss-concat --tag smoke

Reference SemEval-2007 F1 (J&M / LMMS-style protocol): WordNet first sense 55.2; plain 1-NN with all-MiniLM-L6-v2
about 54.1, with all-mpnet-base-v2 about 64.4.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import harness
from ctxemb.evaluation.wsd import evaluate_first_sense, evaluate_wsd
from ctxemb.core.precision import INFERENCE_PRECISION_CHOICES as PRECISION_CHOICES
from ctxemb.core.atomic import atomic_write
from ctxemb.core.paths import shared_data_dir
from ctxemb.wsd.build import BuildConfig, build_from_embeddings
from ctxemb.wsd.corpus import Corpus, read_dataset, split_corpus_by_document, write_dataset
from ctxemb.wsd.corpus_pass import (
    EXAMPLE_SENSES,
    CorpusEmbeddings,
    add_example_contexts,
    embed_corpus,
    embedder_words,
    extend_corpus_embeddings,
)
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.glosses import embed_glosses
from ctxemb.wsd.propagation import propagation_targets
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.wsd.sense_store_files import directory_size
from ctxemb.tasks.sense.training import check_held_out_documents
from ctxemb.wsd.wordnet_examples import wordnet_example_corpus

logger = logging.getLogger("benchmarks.wsd")

# The plain recipe, each switch, and the library's default (BuildConfig()).
DEFAULT_CONFIGS = ["1nn", "1nn+std", "1nn+prop", "1nn+std+prop", "1nn+std+prop+gloss-concat",
                   "1nn+std+prop+gloss-average", BuildConfig().name]


def _framework_dir() -> Path | None:
    d = shared_data_dir(required=False)
    return None if d is None else d / "wsd" / "WSD_Evaluation_Framework"


def parse_args(argv=None) -> argparse.Namespace:
    fw = _framework_dir()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="model name or HF-format directory")
    p.add_argument("--layers", type=int, nargs="+", default=[-4, -3, -2, -1],
                   help="hidden-state indices (0 = embedding output, -1 = last layer)")
    p.add_argument("--layer-pooling", default="mean", choices=["mean", "sum", "concat"])
    p.add_argument("--subword-pooling", default="mean", choices=["mean", "first", "last"])
    p.add_argument("--precision", default="fp32", choices=PRECISION_CHOICES,
                   help="the encoder's path (ctxemb.runtime.engine); auto: the fastest within its bound on this machine, "
                        "the choice is recorded in the results and keys the cache")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, help="configuration names (see module doc)")
    p.add_argument("--train", default=str(fw / "Training_Corpora" / "SemCor") if fw else None,
                   help="training corpus folder or XML (default: SemCor in the shared data)")
    p.add_argument("--datasets", nargs="*",
                   default=[str(fw / "Evaluation_Datasets" / "semeval2007")] if fw else [],
                   help="Raganato-format data set folders to evaluate on (default: SemEval-2007)")
    p.add_argument("--held-out-fraction", type=float, default=0.1,
                   help="hold out this share of the training documents and evaluate on them (0 = off)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    p.add_argument("--held-out-dir", default=None, help="also write the held-out split here (Raganato format)")
    p.add_argument("--max-train-sentences", type=int, default=None, help="use only the first N training sentences")
    p.add_argument("--wordnet-examples", nargs="?", const="seen", default=None,
                   choices=EXAMPLE_SENSES,
                   help="fold WordNet's example sentences into every store's sense vectors (not into the counts the "
                        "prior reads): ctxemb.wsd.wordnet_examples; only into the senses the corpus has "
                        "(seen, the default), or also new ones (all), or only new ones (unseen)")
    p.add_argument("--max-eval-sentences", type=int, default=None,
                   help="use only the first N sentences of each evaluation set (for quick checks)")
    p.add_argument("--out", default=str(harness.RESULTS), help="output folder")
    p.add_argument("--tag", default=None, help="suffix of the output file names")
    p.add_argument("--cache", default=None,
                   help="keep the corpus pass, evaluation-set and gloss embeddings in this folder and reuse them "
                        "(a rerun with new configurations then skips the encoder)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.train is None:
        p.error("--train is required when the shared data folder is not found")
    return args


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", Path(name).name if Path(name).exists() else name).strip("-")


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else "%.1f" % x


def _eval_sets(args, held: Corpus | None) -> list[Corpus]:
    sets = [read_dataset(d) for d in args.datasets]
    if held is not None:
        sets.append(held)
    if args.max_eval_sentences:
        sets = [c.head(args.max_eval_sentences) for c in sets]
    return sets


class _Cache:
    """Embeddings kept between runs, under a folder named after everything that determines them."""

    def __init__(self, args: argparse.Namespace):
        self.dir = None
        if args.cache:
            name = "_".join([_slug(args.model), "L" + ".".join(map(str, args.layers)), args.layer_pooling,
                             args.subword_pooling, args.precision, "ho%g-s%d" % (args.held_out_fraction, args.seed),
                             "max%s" % args.max_train_sentences, _slug(args.train)])
            self.dir = Path(args.cache) / name
            self.dir.mkdir(parents=True, exist_ok=True)

    def corpus(self, name: str, make):
        if self.dir is None:
            return make()
        path = self.dir / f"corpus_{name}"
        if (path / "corpus.json").is_file():
            logger.info("corpus pass from the cache: %s", path)
            return CorpusEmbeddings.load(path)
        base = make()
        base.save(path)
        return base

    def arrays(self, name: str, make) -> tuple[list[np.ndarray], float]:
        """A list of 2-D arrays with the same number of columns (stored as one matrix and the row counts), and the
        seconds it took to make them (measured when they were made, not when read back)."""
        path = None if self.dir is None else self.dir / f"{name}.npz"
        if path is not None and path.is_file():
            with np.load(path) as z:
                return np.split(z["rows"], np.cumsum(z["lengths"])[:-1]), float(z["seconds"])
        sw = harness.Stopwatch()
        out = make()
        seconds = sw.stop()
        if path is not None:
            with atomic_write(path, "wb") as f:
                np.savez(f, rows=np.concatenate(out), lengths=np.array([len(a) for a in out]), seconds=seconds)
        return out, seconds

    def glosses(self, keys: list[str], make) -> tuple[dict[str, np.ndarray], float]:
        """Gloss vectors of ``keys`` and the seconds spent embedding all the cached glosses."""
        path = None if self.dir is None else self.dir / "glosses.npz"
        have: dict[str, np.ndarray] = {}
        seconds = 0.0
        if path is not None and path.is_file():
            with np.load(path) as z:
                have, seconds = dict(zip(z["keys"].tolist(), z["vectors"])), float(z["seconds"])
        todo = [k for k in keys if k not in have]
        if todo:
            sw = harness.Stopwatch()
            have.update(zip(todo, make(todo)))
            seconds += sw.stop()
            if path is not None:
                with atomic_write(path, "wb") as f:
                    np.savez(f, keys=np.array(list(have)), vectors=np.stack(list(have.values())), seconds=seconds)
        return {k: have[k] for k in keys}, seconds


def run(args: argparse.Namespace) -> dict:
    from ctxemb.embedding.embedder import Embedder

    configs = [BuildConfig.from_name(n, batch_size=args.batch_size, max_sentences=args.max_train_sentences)
               for n in args.configs]
    show = not args.no_progress
    sw = harness.Stopwatch()
    train = read_dataset(args.train)
    read_seconds = sw.stop()
    held = None
    if args.held_out_fraction:
        train, held = split_corpus_by_document(train, args.held_out_fraction, args.seed)
        check_held_out_documents(args.model, [d.id for d in held.documents])  # a fine-tuned encoder saw none of them
        if args.held_out_dir:
            write_dataset(held, args.held_out_dir)
    eval_sets = _eval_sets(args, held)
    held_eval = eval_sets[-1] if held is not None else None  # the held-out split as evaluated (maybe cut short)

    results: dict = {
        "model": args.model,
        "embedder": {"layers": args.layers, "layer_pooling": args.layer_pooling,
                     "subword_pooling": args.subword_pooling, "precision": args.precision},
        "train": {"corpus": train.name, "documents": len(train.documents), "sentences": train.n_sentences,
                  "instances": train.n_instances, "max_sentences": args.max_train_sentences,
                  "read_seconds": read_seconds},
        "held_out": None if held is None else {"fraction": args.held_out_fraction, "seed": args.seed,
                                               "documents": len(held.documents), "sentences": held.n_sentences,
                                               "instances": held.n_instances},
        "datasets": {c.name: {"sentences": c.n_sentences, "instances": c.n_instances} for c in eval_sets},
        "machine": harness.machine(),
        "first_sense": {},
        "configs": {},
    }
    for c in eval_sets:
        results["first_sense"][c.name] = evaluate_first_sense(c).to_dict()

    sw = harness.Stopwatch()
    embedder = Embedder.from_pretrained(args.model, device=args.device, layers=tuple(args.layers),
                                        layer_pooling=args.layer_pooling, subword_pooling=args.subword_pooling,
                                        precision=args.precision)
    results["load_model_seconds"] = sw.stop()
    if embedder.precision_choice is not None:  # auto: what it chose keys the cache and is reported
        logger.info("%s", embedder.precision_choice.summary())
        results["embedder"]["precision"] = embedder.config.precision
        results["embedder"]["precision_choice"] = embedder.precision_choice.summary()
        args.precision = embedder.config.precision
    # One corpus pass per multiword setting serves every configuration.
    cache = _Cache(args)
    bases = {}
    for mw in dict.fromkeys(c.multiword for c in configs):
        bases[mw] = cache.corpus(mw, lambda: embed_corpus(
            train, embedder, multiword=mw, standardize=True, max_sentences=args.max_train_sentences,
            batch_size=args.batch_size, show_progress_bar=show))
    results["train"].update({k: v for k, v in next(iter(bases.values())).stats.items() if k != "corpus"})

    # Evaluation sets are embedded once per multiword setting.
    eval_embeddings, eval_embed_seconds = {}, {}
    for mw in bases:
        for c in eval_sets:
            eval_embeddings[mw, c.name], eval_embed_seconds[mw, c.name] = cache.arrays(
                f"eval_{mw}_{c.name}_{c.n_sentences}", lambda: embedder.embed_words(
                    [embedder_words(s.words, mw) for s in c.sentences()], batch_size=args.batch_size,
                    show_progress_bar=show))

    # SemCor minus the held-out split serves the held-out evaluation; adding the held-out split's vectors (already
    # embedded for evaluation) gives the full-SemCor stores that the standard protocol scores SemEval-2007 with.
    full_bases = dict(bases)
    if held is not None:
        full_bases = {mw: extend_corpus_embeddings(b, list(held_eval.sentences()), eval_embeddings[mw, held_eval.name])
                      for mw, b in bases.items()}
    if args.wordnet_examples:  # one more pass, over WordNet's examples, folded into both kinds of store
        examples = wordnet_example_corpus()
        for mw in bases:
            extra = cache.corpus(f"wnex{examples.n_sentences}_{mw}", lambda: embed_corpus(
                examples, embedder, multiword=mw, standardize=False, batch_size=args.batch_size,
                show_progress_bar=show))
            bases[mw], full_bases[mw] = (add_example_contexts(bases[mw], extra, senses=args.wordnet_examples),
                                         add_example_contexts(full_bases[mw], extra, senses=args.wordnet_examples))
        results["train"]["wordnet_examples"] = next(iter(bases.values())).stats["example_contexts"]

    # Gloss embeddings, once for the union of senses any gloss configuration needs.
    gloss_vectors: dict = {}
    gloss_seconds = 0.0
    for scope in dict.fromkeys(c.propagation_scope for c in configs if c.gloss != "none"):
        base = next(iter(full_bases.values()))  # the full corpus: its senses include the training split's
        keys = [k for k in dict.fromkeys(list(base.store.keys) + propagation_targets(base.lemma_pos, scope))
                if k not in gloss_vectors]
        vectors, gloss_seconds = cache.glosses(keys, lambda todo: embed_glosses(
            todo, embedder, batch_size=args.batch_size, show_progress_bar=show))
        gloss_vectors.update(vectors)
    results["gloss_embedding"] = {"senses": len(gloss_vectors), "seconds": gloss_seconds}
    results["train"]["protocol"] = ("held-out split scored with stores built from SemCor minus the split; other "
                                    "data sets with stores built from all of it" if held is not None else
                                    "all data sets scored with stores built from the whole training corpus")

    with tempfile.TemporaryDirectory() as tmp:
        for cfg in configs:
            stores = {}
            for which, bb in (("full", full_bases), ("train", bases)) if held is not None else (("full", bases),):
                sw = harness.Stopwatch()
                store = build_from_embeddings(bb[cfg.multiword], cfg, embedder=embedder, gloss_vectors=gloss_vectors,
                                              show_progress_bar=show)
                post_seconds = sw.stop()
                path = store.save(Path(tmp) / f"{_slug(cfg.name)}-{which}")
                sw = harness.Stopwatch()
                stores[which] = (SenseStore.load(path), path, sw.stop(), post_seconds)
            base = full_bases[cfg.multiword]
            store, path, load_seconds, post_seconds = stores["full"]
            entry = {
                "config": cfg.to_dict(),
                "senses": len(store),
                "dim": store.dim,
                "origins": store.origins(),
                "store_bytes": directory_size(path),
                "store_load_seconds": load_seconds,
                "build_seconds": base.stats["seconds_embedding"] + post_seconds,
                "post_processing_seconds": post_seconds,
                "train_sentences_per_second": base.stats["sentences_per_second"],
                "datasets": {},
            }
            for c in eval_sets:
                which = "train" if c is held_eval else "full"
                dis = Disambiguator(stores[which][0], embedder, batch_size=args.batch_size)
                r = evaluate_wsd(dis, c, embeddings=eval_embeddings[cfg.multiword, c.name], show_progress_bar=False)
                d = r.to_dict()
                d["store"] = which
                d["embed_seconds"] = eval_embed_seconds[cfg.multiword, c.name]
                d["eval_seconds"] = d.pop("seconds") + d["embed_seconds"]
                entry["datasets"][c.name] = d
            results["configs"][cfg.name] = entry
            logger.info("%s: %s", cfg.name, {k: round(v["F1"], 1) for k, v in entry["datasets"].items()})
    return results


def best_config(r: dict) -> tuple[str, float, bool | None] | None:
    """(name, mean F1 over the data sets, beats the plain ``1nn`` on every data set (None without a ``1nn`` row))."""
    if not r["configs"]:
        return None
    means = {name: float(np.mean([d["F1"] for d in c["datasets"].values()])) for name, c in r["configs"].items()}
    name = max(means, key=means.get)
    plain = r["configs"].get("1nn")
    beats = None if plain is None else all(
        d["F1"] > plain["datasets"][n]["F1"] for n, d in r["configs"][name]["datasets"].items())
    return name, means[name], beats


def to_markdown(r: dict) -> str:
    names = list(r["datasets"])
    lines = [f"# WSD benchmark: {r['model']}", ""]
    e = r["embedder"]
    lines.append(f"Embedder: layers {e['layers']} ({e['layer_pooling']}), subwords {e['subword_pooling']}, "
                 f"{e['precision']}. Training: {r['train']['corpus']}, {r['train'].get('n_sentences', r['train']['sentences'])} "
                 f"sentences with instances ({r['train'].get('n_instances', r['train']['instances'])} instances)"
                 + (f", first {r['train']['max_sentences']} only" if r['train']['max_sentences'] else "") + ".")
    if e.get("precision_choice"):
        lines.append(f"Precision: {e['precision_choice']}.")
    if r["held_out"]:
        h = r["held_out"]
        lines.append(f"Held-out split: {h['documents']} documents ({h['fraction']:.0%}, seed {h['seed']}), "
                     f"{h['instances']} instances.")
    if r["train"].get("protocol"):
        lines.append(f"Protocol: {r['train']['protocol']}.")
    lines += ["", "## F1 (%)", "", "| configuration | " + " | ".join(names) + " |",
              "|---|" + "---:|" * len(names)]
    lines.append("| WordNet first sense | " + " | ".join(_pct(r["first_sense"][n]["F1"]) for n in names) + " |")
    for cname, c in r["configs"].items():
        lines.append(f"| {cname} | " + " | ".join(_pct(c["datasets"][n]["F1"]) for n in names) + " |")
    best = best_config(r)
    if best is not None:
        lines += ["", f"Best by mean F1 over these (dev) data sets: **{best[0]}** (mean {best[1]:.1f})"
                  + ("; it beats the plain 1nn on every data set." if best[2] is True else
                     "; it does not beat the plain 1nn on every data set." if best[2] is False else ".")]
    lines += ["", "## Per POS (F1 %)", ""]
    for n in names:
        tags = sorted(r["first_sense"][n]["per_pos"])
        lines += [f"**{n}** (" + ", ".join(f"{t}: {r['first_sense'][n]['per_pos'][t]['n']}" for t in tags) + ")", "",
                  "| configuration | " + " | ".join(tags) + " | P | R | backed off |",
                  "|---|" + "---:|" * (len(tags) + 3)]
        fs = r["first_sense"][n]
        lines.append("| WordNet first sense | " + " | ".join(_pct(fs["per_pos"][t]["F1"]) for t in tags)
                     + f" | {_pct(fs['P'])} | {_pct(fs['R'])} | {fs['n_backed_off']} |")
        for cname, c in r["configs"].items():
            d = c["datasets"][n]
            lines.append(f"| {cname} | " + " | ".join(_pct(d["per_pos"].get(t, {}).get("F1")) for t in tags)
                         + f" | {_pct(d['P'])} | {_pct(d['R'])} | {d['n_backed_off']} |")
        lines.append("")
    lines += ["## Cost", "", "| configuration | senses | dim | store MB | load s | build s | train sent/s | "
              + " | ".join(f"eval s {n}" for n in names) + " |", "|---|" + "---:|" * (6 + len(names))]
    for cname, c in r["configs"].items():
        lines.append(f"| {cname} | {c['senses']} | {c['dim']} | {c['store_bytes'] / 1e6:.1f} | "
                     f"{c['store_load_seconds']:.2f} | {c['build_seconds']:.1f} | {c['train_sentences_per_second']:.1f} | "
                     + " | ".join("%.1f" % c["datasets"][n]["eval_seconds"] for n in names) + " |")
    g = r["gloss_embedding"]
    lines += ["", f"Model load {r['load_model_seconds']:.1f} s; gloss embeddings: {g['senses']} senses in "
              f"{g['seconds']:.1f} s. Build time = corpus embedding (shared by all configurations) + post-processing; "
              "eval time includes embedding the data set. Machine: " + harness.machine_line(r["machine"]) + ".", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    results = run(args)
    stem = "wsd_" + _slug(args.model) + (f"_{args.tag}" if args.tag else "")
    out = Path(args.out)
    md = to_markdown(results)
    harness.write_results(stem, results, md, out_dir=out)
    print(md)
    print(f"wrote {out / stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
