"""Geometry of a model's contextual embeddings, layer by layer, on real text.

Corpus: the repository's analysis corpus (several senses of bank, die, mouse, bat, plant, cell) followed by
WikiText-2 sentences from the shared data, so that there are well over 2,000 word vectors. For every hidden state:
anisotropy raw and after each post-processing, the top-1/top-3 rogue dimensions and their share of the cosine,
informativity. Writes benchmarks/results/geometry_<model>/ (analysis.json and PNG plots) and a summary table.

    python -m benchmarks.geometry --model all-MiniLM-L6-v2 [--wikitext-sentences 300]
"""

from __future__ import annotations

import argparse

from benchmarks import harness
from benchmarks._common import wikitext_sentences
from ctxemb.embedding.embedder import Embedder
from ctxemb.geometry.analysis import analyze, format_analysis_table, read_corpus


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--wikitext-sentences", type=int, default=300)
    args = ap.parse_args()

    wiki = [s.split() for s in wikitext_sentences(4 * args.wikitext_sentences) if "<unk>" not in s]
    corpus = read_corpus() + wiki[:args.wikitext_sentences]
    emb = Embedder.from_pretrained(args.model)
    slug = args.model.replace("/", "_")
    out_dir = harness.RESULTS / f"geometry_{slug}"
    result = analyze(emb, corpus, out_dir=out_dir, show_progress_bar=True)
    table = format_analysis_table(result)
    md = (f"# Geometry of {args.model}\n\n{result.n_sentences} sentences ({len(read_corpus())} from "
          f"ctxemb/data/analysis_corpus.txt, the rest WikiText-2 valid), {result.n_vectors} word vectors per layer "
          "(subwords mean-pooled). Post-processings are fitted on the same vectors they are applied to.\n"
          f"Plots: geometry_{slug}/anisotropy_by_layer.png, rogue_dimensions_by_layer.png, word_projection.png.\n\n"
          + table)
    harness.write_results(f"geometry_{slug}", result.to_dict(), md)
    print(md)


if __name__ == "__main__":
    main()
