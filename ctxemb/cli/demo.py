"""``ctxemb demo``: what contextual embeddings do, on the default model: one word in different senses, the
geometry of every layer, and nearest-sense WSD (J&M 11.3)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxemb.cli._common import command_help, load_embedder
from ctxemb.models.hub import DEFAULT_MODEL

BANK_SENTENCES = [
    ("river", "He sat on the bank of the river and watched the boats .".split(), 4),
    ("river", "The river overflowed its bank after the storm .".split(), 4),
    ("money", "She deposited her salary at the bank on Monday .".split(), 6),
]

WSD_SENTENCES = [
    "He sat on the bank of the river and watched the boats.",
    "She deposited her salary at the bank on Monday.",
    "The mouse ran under the kitchen table.",
]


def add_parser(subparsers) -> argparse.ArgumentParser:
    demo = subparsers.add_parser("demo", help=command_help("demo"))
    demo.add_argument("--model", default=DEFAULT_MODEL, help="model name or HF-format directory")
    demo.add_argument("--out-dir", default="ctxemb-demo", help="where plots and JSON go (default: ctxemb-demo)")
    demo.add_argument("--store", default=None, help="a sense store made by `ctxemb wsd build` (optional)")
    demo.set_defaults(func=run_demo)
    return demo


def _unit(x):
    """Rows scaled to unit length."""
    import numpy as np

    return x / np.linalg.norm(x, axis=1, keepdims=True)


def run_demo(args: argparse.Namespace) -> int:
    """Show what contextual embeddings do on the default model: one word, different senses."""
    import numpy as np

    from ctxemb.geometry import Standardizer, analyze, format_analysis_table
    from ctxemb.geometry.analysis import read_corpus

    emb = load_embedder(args.model)
    print(f"model: {args.model} ({emb.num_layers} layers, hidden size {emb.hidden_size}); "
          f"word vectors = mean of hidden states {list(emb.config.layers)}, subwords mean-pooled\n")
    vecs = emb.embed_words([s for _, s, _ in BANK_SENTENCES], show_progress_bar=False)
    bank = _unit(np.stack([v[i] for v, (_, _, i) in zip(vecs, BANK_SENTENCES)]))
    cos = bank @ bank.T
    for k, (sense, words, i) in enumerate(BANK_SENTENCES):
        marked = " ".join(f"[{w}]" if j == i else w for j, w in enumerate(words))
        print(f"  ({k + 1}) {sense:5s}  {marked}")
    print("\ncosine of 'bank' between contexts:")
    print(f"  river (1) vs river (2): {cos[0, 1]:.3f}")
    print(f"  river (1) vs money (3): {cos[0, 2]:.3f}")
    print(f"  river (2) vs money (3): {cos[1, 2]:.3f}")
    verdict = "closer" if cos[0, 1] > max(cos[0, 2], cos[1, 2]) else "NOT closer"
    print(f"  -> the two river uses are {verdict} to each other than to the money use\n")

    # Geometry (J&M 11.3.2): raw cosines are inflated by a few rogue dimensions; z-scoring fixes that.
    corpus = read_corpus()
    corpus_vectors = np.concatenate(emb.embed_words(corpus, show_progress_bar=False))
    z = _unit(Standardizer().fit(corpus_vectors).transform(np.stack([v[i] for v, (_, _, i) in zip(vecs, BANK_SENTENCES)])))
    zc = z @ z.T
    print(f"after standardization (fitted on {len(corpus_vectors)} word vectors of the shipped analysis corpus):")
    print(f"  river-river {zc[0, 1]:.3f}   river-money {zc[0, 2]:.3f}, {zc[1, 2]:.3f}\n")

    out_dir = Path(args.out_dir) / "analysis"
    result = analyze(emb, corpus, out_dir=out_dir, show_progress_bar=False)
    print(f"geometry of every layer ({result.n_vectors} word vectors of the shipped analysis corpus):")
    print(format_analysis_table(result))
    print("\nplots and JSON:")
    for kind, path in result.files.items():
        print(f"  {kind:17s} {path}")
    print()
    _demo_wsd(emb, args)
    return 0


def _demo_wsd(emb, args: argparse.Namespace) -> None:
    """Nearest-sense WSD (J&M 11.3.1). A full SemCor store built with ``ctxemb wsd build`` is used if it exists at
    ``--store``; otherwise a small store is built from the SemCor sentences that hold the demo's lemmas."""
    from ctxemb.core.paths import shared_data_dir
    from ctxemb.wsd import BuildConfig, Disambiguator, SenseStore, build_sense_store, read_dataset
    from ctxemb.wsd import wordnet as wnu
    from ctxemb.wsd.disambiguate import tokenize

    store_dir = Path(args.store) if args.store else None
    if store_dir is not None and (store_dir / "meta.json").is_file():
        store = SenseStore.load(store_dir)
        print(f"word sense disambiguation with the sense store {store_dir} ({len(store)} senses):")
    else:
        semcor = read_dataset(shared_data_dir() / "wsd" / "WSD_Evaluation_Framework" / "Training_Corpora" / "SemCor")
        lemmas = {wnu.lemmatize(w, p) for text in WSD_SENTENCES for w in tokenize(text) for p in "nvar"}
        per_lemma: dict[str, int] = {}
        chosen = []
        for sentence in semcor.sentences():
            hits = [i.lemma for i in sentence.instances if i.lemma in lemmas and per_lemma.get(i.lemma, 0) < 40]
            if hits:
                chosen.append(sentence)
                for lemma in hits:
                    per_lemma[lemma] = per_lemma.get(lemma, 0) + 1
        store = build_sense_store(chosen, emb, BuildConfig(), show_progress_bar=False)
        print(f"word sense disambiguation (a demo store of {len(store)} senses from {len(chosen)} SemCor sentences "
              "that hold these lemmas; `ctxemb wsd build` makes the full one, pass it with --store):")
    dis = Disambiguator(store, emb)
    for text in WSD_SENTENCES:
        print(f"  {text}")
        for p in dis.tag(text):
            if p.sense_key is None:
                continue
            how = "first sense (back-off)" if p.backed_off else f"score {p.score:.3f}"
            print(f"    {p.word:13s} {p.synset:38s} {how:22s} {p.gloss[:60]}")
