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
- :mod:`~ctxemb.wsd.training`, :mod:`~ctxemb.wsd.sense_task`: sense training (BEM, SupCon) as tasks of the one
  registry (``wsd-bem``, ``wsd-supcon``), run by the one run skeleton.
- :mod:`~ctxemb.wsd.tag_files`: :func:`~ctxemb.wsd.tag_files.tag_file`, a store's predictions for a file (Raganato XML
  or a table of texts) to JSONL, CSV or a key file.

Scoring lives in :mod:`ctxemb.metrics.wsd` (``Scorer.java``-exact); running a disambiguator over a data set in
:mod:`ctxemb.evaluation.wsd`.
"""

from ctxemb.wsd.build import BuildConfig, build_from_embeddings, build_sense_store
from ctxemb.wsd.corpus import (
    Corpus,
    Document,
    Instance,
    Sentence,
    read_dataset,
    read_raganato,
    split_corpus_by_document,
    write_dataset,
    write_raganato,
)
from ctxemb.wsd.corpus_pass import embed_corpus
from ctxemb.wsd.disambiguate import Disambiguator, SensePrediction
from ctxemb.wsd.sense_store import QueryTransform, SenseStore
# sense training's tasks (wsd-bem, wsd-supcon) join the one task registry when the package is imported: the
# registry sits below WSD and cannot import them itself
from ctxemb.wsd import sense_task as _sense_task  # noqa: E402,F401

__all__ = [
    "BuildConfig",
    "Corpus",
    "Disambiguator",
    "Document",
    "Instance",
    "QueryTransform",
    "SensePrediction",
    "SenseStore",
    "Sentence",
    "build_from_embeddings",
    "build_sense_store",
    "embed_corpus",
    "read_dataset",
    "read_raganato",
    "split_corpus_by_document",
    "write_dataset",
    "write_raganato",
]
