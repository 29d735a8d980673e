"""Word sense disambiguation with contextual embeddings (J&M 11.3.1).

- :mod:`~ctxemb.wsd.wordnet`: WordNet 3.0 through nltk (candidates, sense keys, glosses, relations).
- :mod:`~ctxemb.wsd.corpus`: the Raganato et al. (2017) XML + key format (read, write, split by document).
- :mod:`~ctxemb.wsd.sense_store`: :class:`SenseStore`, sense embeddings with exact cosine search (FAISS).
- :mod:`~ctxemb.wsd.corpus_pass`: :func:`embed_corpus`, one embedder pass over SemCor (raw sense centroids).
- :mod:`~ctxemb.wsd.propagation`: vectors for unseen senses from WordNet's synsets, hypernyms, lexicographer files.
- :mod:`~ctxemb.wsd.glosses`: gloss embeddings combined with corpus vectors.
- :mod:`~ctxemb.wsd.build`: :class:`BuildConfig` and :func:`build_sense_store` / :func:`build_from_embeddings`.
- :mod:`~ctxemb.wsd.prior`: the sense-frequency prior's weight (one number or one per POS) and its score term.
- :mod:`~ctxemb.wsd.disambiguate`: :class:`Disambiguator` (nearest sense, first-sense back-off, raw-text tagging).
- :mod:`~ctxemb.wsd.tag_files`: :func:`~ctxemb.wsd.tag_files.tag_file`, a store's predictions for a file (Raganato XML
  or a table of texts) to JSONL, CSV or a key file.

Scoring lives in :mod:`ctxemb.metrics.wsd` (``Scorer.java``-exact); running a disambiguator over a data set in
:mod:`ctxemb.evaluation.wsd`.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "BuildConfig": "ctxemb.wsd.options",
    "build_from_embeddings": "ctxemb.wsd.build",
    "build_sense_store": "ctxemb.wsd.build",
    "Corpus": "ctxemb.wsd.corpus",
    "Document": "ctxemb.wsd.corpus",
    "Instance": "ctxemb.wsd.corpus",
    "Sentence": "ctxemb.wsd.corpus",
    "read_dataset": "ctxemb.wsd.corpus",
    "read_raganato": "ctxemb.wsd.corpus",
    "split_corpus_by_document": "ctxemb.wsd.corpus",
    "write_dataset": "ctxemb.wsd.corpus",
    "write_raganato": "ctxemb.wsd.corpus",
    "embed_corpus": "ctxemb.wsd.corpus_pass",
    "Disambiguator": "ctxemb.wsd.disambiguate",
    "SensePrediction": "ctxemb.wsd.disambiguate",
    "QueryTransform": "ctxemb.wsd.sense_store",
    "SenseStore": "ctxemb.wsd.sense_store",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
