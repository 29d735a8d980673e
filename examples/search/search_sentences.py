"""Semantic search: an HNSW index over the sentences of WikiText-2, queried with free text; then an index of every
use of one word, queried with a use in context.

Sentences are embedded as sentence-transformers does (mean over the last layer's tokens, normalised); the index is
saved and loaded again, and records the embedder configuration so that a query made with another model is refused.
Needs the shared data folder (`CTXEMB_DATA`) for WikiText-2.

    python examples/search/search_sentences.py            # ~9,000 sentences: about 1 min 30 s on a 2-core CPU
    python examples/search/search_sentences.py --fast     # the first 300 sentences: about 10 s
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from ctxemb import Embedder
from ctxemb.core.paths import shared_data_dir
from ctxemb.search import HNSWParams, SemanticIndex, build_sentence_index, build_word_index, query_sentences, query_words


def wikitext_sentences(path: Path, limit: int | None) -> list[str]:
    """Sentences of 5-60 words from WikiText-2's paragraphs (headings and `<unk>`-heavy lines left out)."""
    sentences = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        for sentence in re.split(r"(?<= \.) (?=[A-Z])", line):
            words = sentence.split()
            if 5 <= len(words) <= 60 and words.count("<unk>") <= 1:
                sentences.append(sentence)
                if limit is not None and len(sentences) == limit:
                    return sentences
    return sentences


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="model name or HF-format directory")
    parser.add_argument("--fast", action="store_true", help="index the first 300 sentences only")
    parser.add_argument("--out", type=Path, default=None, help="where to save the index (default: a temporary folder)")
    args = parser.parse_args(argv)

    texts = wikitext_sentences(shared_data_dir() / "corpora" / "wikitext-2" / "valid.txt", 300 if args.fast else None)
    emb = Embedder.from_pretrained(args.model)
    index = build_sentence_index(emb, texts, kind="hnsw", params=HNSWParams(m=32, ef_search=64), layers=[-1],
                                 show_progress_bar=not args.fast)
    print(f"indexed {len(index)} WikiText-2 sentences")

    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "wikitext_index"
        index.save(out)
        index = SemanticIndex.load(out, expected_config=emb.config.to_dict())  # refuses another embedder's index
        for query in ("a storm damaged the ships", "the lobster lives on the sea floor"):
            print(f"\nquery: {query}")
            for hit in query_sentences(index, emb, query, k=3):
                print(f"  {hit.score:.3f}  {hit.metadata['text'][:100]}")

    # Every use of one word in context, and the uses closest to a new one.
    word, use = "state", "the state legislature passed the highway bill"
    uses = build_word_index(emb, [t.split() for t in texts], word, show_progress_bar=False)
    print(f"\n{len(uses)} uses of '{word}'; the closest to '{use}':")
    for hit in query_words(uses, emb, use.split(), k=3):
        print(f"  {hit.score:.3f}  {hit.metadata['text'][:100]}")


if __name__ == "__main__":
    main()
