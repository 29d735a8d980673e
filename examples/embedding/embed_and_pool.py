"""Word and sentence vectors, and what the layer and subword pooling change.

Embeds "bank" in river and money contexts with the default pooling (mean of the last four hidden states, subwords
averaged), then layer by layer, and prints how well each layer separates the two senses; finally sentence vectors
as sentence-transformers computes them, and a small similarity matrix.

    python examples/embedding/embed_and_pool.py            # about 10 s on a 2-core CPU
    python examples/embedding/embed_and_pool.py --fast     # the same on fewer sentences (about 5 s)
"""

from __future__ import annotations

import argparse

import numpy as np

from ctxemb import Embedder

RIVER = ["He sat on the bank of the river .", "The boat drifted to the muddy bank .",
         "Reeds grew along the bank of the stream .", "They fished from the steep bank all day ."]
MONEY = ["She deposited the cheque at the bank .", "The bank raised its interest rates .",
         "He robbed a bank in the city .", "The bank approved the loan on Monday ."]


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def sense_cosines(vectors: np.ndarray, senses: np.ndarray) -> tuple[float, float]:
    """Mean cosine between uses of the same sense (distinct uses) and between uses of different senses."""
    cos = unit(vectors) @ unit(vectors).T
    same = senses[:, None] == senses[None, :]
    distinct = ~np.eye(len(senses), dtype=bool)
    return float(cos[same & distinct].mean()), float(cos[~same].mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="model name or HF-format directory")
    parser.add_argument("--fast", action="store_true", help="two sentences per sense instead of four")
    args = parser.parse_args(argv)
    river, money = (RIVER[:2], MONEY[:2]) if args.fast else (RIVER, MONEY)
    sentences = [s.split() for s in river + money]
    where = [s.index("bank") for s in sentences]
    senses = np.array([0] * len(river) + [1] * len(money))

    emb = Embedder.from_pretrained(args.model)
    print(f"{args.model}: {emb.num_layers} layers")

    # Default pooling: one (W, H) array per sentence.
    words = emb.embed_words(sentences, show_progress_bar=False)
    same, other = sense_cosines(np.stack([w[i] for w, i in zip(words, where)]), senses)
    print(f"'bank', last four layers averaged: same sense cosine {same:.3f}, other sense {other:.3f}")

    # Every hidden state at once ("stack" keeps a layer axis: (W, L+1, H); index 0 = the embedding output).
    stacked = emb.embed_words(sentences, layers="all", layer_pooling="stack", show_progress_bar=False)
    print("layer  same-sense  other-sense  gap")
    for layer in range(stacked[0].shape[1]):
        same, other = sense_cosines(np.stack([w[i, layer] for w, i in zip(stacked, where)]), senses)
        print(f"{layer:5d}  {same:10.3f}  {other:11.3f}  {same - other:+.3f}")

    # Subword pooling matters for words the vocabulary splits.
    split = [["The", "ornithologist", "photographed", "it", "."]]
    pieces = emb.tokenizer.backend.encode("ornithologist", add_special_tokens=False).tokens
    mean = emb.embed_words(split, subword_pooling="mean", show_progress_bar=False)[0][1]
    for pooling in ("first", "last"):
        v = emb.embed_words(split, subword_pooling=pooling, show_progress_bar=False)[0][1]
        print(f"'ornithologist' = {pieces}: {pooling!r} subword vs the mean of all: cosine "
              f"{float(unit(v) @ unit(mean)):.3f}")

    # Sentence vectors as sentence-transformers computes them: mean over the last layer's tokens, normalised.
    texts = [" ".join(s) for s in sentences]
    vectors = emb.embed_sentences(texts, layers=[-1], normalize=True, show_progress_bar=False)  # (N, H)
    print("sentence cosine matrix (rows and columns in the order above):")
    print(np.array2string(vectors @ vectors.T, precision=2, suppress_small=True))


if __name__ == "__main__":
    main()
