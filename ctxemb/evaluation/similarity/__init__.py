"""Similarity benchmarks for contextual embeddings: words in context, sentences, and words out of context.

Every harness takes an embedder (:class:`ctxemb.core.protocols.EmbedderLike`), one or more post-processing choices, and
returns rows of :class:`SimilarityResult`. Scores are cosine similarities; every ``value`` is multiplied by 100
(accuracy in %, correlations x 100).

- :func:`evaluate_wic` (``wic``): WiC, a cosine threshold chosen on train, accuracy on dev; and a logistic
  regression on the cosines of all layers.
- :func:`evaluate_cosimlex` (``cosimlex``): CoSimLex / SemEval-2020 Task 3, subtasks 1 and 2.
- :func:`evaluate_graded_pairs` (``graded_pairs``): one word in two contexts with a graded score (CoInCo usage
  similarity, SCWS): Spearman.
- :func:`evaluate_sentence_similarity` (``sentences``): STS-B and SICK-R, [CLS], mean and word-mean pooling.
- :func:`evaluate_word_similarity` (``words``): SimLex-999, WordSim-353, MEN, RG-65, SimVerb-3500 with
  decontextualised word vectors.
- :func:`run_similarity_tasks` (``runner``): loads the shared data and runs the harnesses by task name, with
  :class:`SimilarityOptions`.

The harnesses share one scoring loop (``scoring``) over post-processing options and layer views (``views``); the
data readers are in ``data`` (records in ``records``), result rows and their I/O in ``results``. The correlation
and classification metrics live in :mod:`ctxemb.metrics`; they are re-exported here for existing callers.

The names below are imported on first use: reading the option names of :mod:`~ctxemb.evaluation.similarity.options`
(what ``ctxemb similarity eval --help`` does) loads no harness, NumPy or scikit-learn.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "evaluate_wic": "ctxemb.evaluation.similarity.wic",
    "evaluate_cosimlex": "ctxemb.evaluation.similarity.cosimlex",
    "evaluate_graded_pairs": "ctxemb.evaluation.similarity.graded_pairs",
    "GradedPair": "ctxemb.evaluation.similarity.graded_pairs",
    "evaluate_sentence_similarity": "ctxemb.evaluation.similarity.sentences",
    "evaluate_word_similarity": "ctxemb.evaluation.similarity.words",
    "decontextualized_word_vectors": "ctxemb.evaluation.similarity.words",
    "DecontextualizedVectors": "ctxemb.evaluation.similarity.words",
    "run_similarity_tasks": "ctxemb.evaluation.similarity.runner",
    "SimilarityOptions": "ctxemb.evaluation.similarity.runner",
    "TASKS": "ctxemb.evaluation.similarity.options",
    "DEFAULT_TASKS": "ctxemb.evaluation.similarity.options",
    "FIT_ON": "ctxemb.evaluation.similarity.options",
    "WORD_SIM_TASKS": "ctxemb.evaluation.similarity.options",
    "SENTENCE_POOLINGS": "ctxemb.evaluation.similarity.options",
    "LAYER_MODES": "ctxemb.evaluation.similarity.options",
    "POSTPROCESS_NAMES": "ctxemb.evaluation.similarity.options",
    "Task": "ctxemb.evaluation.similarity.options",
    "FitOn": "ctxemb.evaluation.similarity.options",
    "WordSimTask": "ctxemb.evaluation.similarity.options",
    "SentencePooling": "ctxemb.evaluation.similarity.options",
    "LayerMode": "ctxemb.evaluation.similarity.options",
    "PostprocessName": "ctxemb.evaluation.similarity.options",
    "SimilarityResult": "ctxemb.evaluation.similarity.results",
    "RESULT_COLUMNS": "ctxemb.evaluation.similarity.results",
    "NOT_FITTED": "ctxemb.evaluation.similarity.results",
    "results_to_markdown": "ctxemb.evaluation.similarity.results",
    "save_results_json": "ctxemb.evaluation.similarity.results",
    "load_results_json": "ctxemb.evaluation.similarity.results",
    "select_best_layer": "ctxemb.evaluation.similarity.results",
    "WordInContext": "ctxemb.evaluation.similarity.records",
    "WicExample": "ctxemb.evaluation.similarity.records",
    "SentencePair": "ctxemb.evaluation.similarity.records",
    "CoSimLexExample": "ctxemb.evaluation.similarity.records",
    "UsimExample": "ctxemb.evaluation.similarity.records",
    "ScwsExample": "ctxemb.evaluation.similarity.records",
    "WordPair": "ctxemb.evaluation.similarity.records",
    "similarity_data_dir": "ctxemb.evaluation.similarity.data",
    "read_wic": "ctxemb.evaluation.similarity.data",
    "load_wic": "ctxemb.evaluation.similarity.data",
    "read_stsb": "ctxemb.evaluation.similarity.data",
    "load_stsb": "ctxemb.evaluation.similarity.data",
    "read_sick": "ctxemb.evaluation.similarity.data",
    "load_sick": "ctxemb.evaluation.similarity.data",
    "read_cosimlex": "ctxemb.evaluation.similarity.data",
    "load_cosimlex": "ctxemb.evaluation.similarity.data",
    "read_coinco_usim": "ctxemb.evaluation.similarity.data",
    "load_coinco_usim": "ctxemb.evaluation.similarity.data",
    "read_scws": "ctxemb.evaluation.similarity.data",
    "load_scws": "ctxemb.evaluation.similarity.data",
    "WORD_SIMILARITY_SETS": "ctxemb.evaluation.similarity.data",
    "read_word_pairs": "ctxemb.evaluation.similarity.data",
    "load_word_similarity": "ctxemb.evaluation.similarity.data",
    "read_sentences": "ctxemb.evaluation.similarity.data",
    "load_corpus_sentences": "ctxemb.evaluation.similarity.data",
    "corpus_label": "ctxemb.evaluation.similarity.data",
    "paired_cosine": "ctxemb.evaluation.similarity.scoring",
    "accuracy": "ctxemb.metrics.classification",
    "best_threshold": "ctxemb.metrics.classification",
    "pearson": "ctxemb.metrics.correlation",
    "spearman": "ctxemb.metrics.correlation",
    "rankdata": "ctxemb.metrics.correlation",
    "uncentered_pearson": "ctxemb.metrics.correlation",
    "harmonic_mean": "ctxemb.metrics.correlation",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
