"""Similarity benchmarks for contextual embeddings: words in context, sentences, and words out of context.

Every harness takes an embedder (:class:`ctxemb.protocols.EmbedderLike`), one or more post-processing choices, and
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
"""

from ctxemb.evaluation.similarity.cosimlex import evaluate_cosimlex
from ctxemb.evaluation.similarity.data import (
    WORD_SIMILARITY_SETS,
    corpus_label,
    load_coinco_usim,
    load_corpus_sentences,
    load_cosimlex,
    load_scws,
    load_sick,
    load_stsb,
    load_wic,
    load_word_similarity,
    read_coinco_usim,
    read_cosimlex,
    read_scws,
    read_sentences,
    read_sick,
    read_stsb,
    read_wic,
    read_word_pairs,
    similarity_data_dir,
)
from ctxemb.evaluation.similarity.graded_pairs import GradedPair, evaluate_graded_pairs
from ctxemb.evaluation.similarity.records import (
    CoSimLexExample,
    ScwsExample,
    SentencePair,
    UsimExample,
    WicExample,
    WordInContext,
    WordPair,
)
from ctxemb.evaluation.similarity.results import (
    NOT_FITTED,
    RESULT_COLUMNS,
    SimilarityResult,
    load_results_json,
    results_to_markdown,
    save_results_json,
    select_best_layer,
)
from ctxemb.evaluation.similarity.runner import (
    DEFAULT_TASKS,
    FIT_ON,
    TASKS,
    WORD_SIM_TASKS,
    FitOn,
    SimilarityOptions,
    Task,
    WordSimTask,
    run_similarity_tasks,
)
from ctxemb.evaluation.similarity.scoring import paired_cosine
from ctxemb.evaluation.similarity.sentences import SENTENCE_POOLINGS, SentencePooling, evaluate_sentence_similarity
from ctxemb.evaluation.similarity.views import LAYER_MODES, POSTPROCESS_NAMES, LayerMode, PostprocessName
from ctxemb.evaluation.similarity.wic import evaluate_wic
from ctxemb.evaluation.similarity.words import (
    DecontextualizedVectors,
    decontextualized_word_vectors,
    evaluate_word_similarity,
)
from ctxemb.metrics.classification import accuracy, best_threshold
from ctxemb.metrics.correlation import harmonic_mean, pearson, rankdata, spearman, uncentered_pearson

__all__ = [
    # harnesses and runner
    "evaluate_wic", "evaluate_cosimlex", "evaluate_graded_pairs", "GradedPair", "evaluate_sentence_similarity",
    "evaluate_word_similarity", "decontextualized_word_vectors", "DecontextualizedVectors",
    "run_similarity_tasks", "SimilarityOptions",
    # option names (for the CLI)
    "TASKS", "DEFAULT_TASKS", "FIT_ON", "WORD_SIM_TASKS", "SENTENCE_POOLINGS", "LAYER_MODES", "POSTPROCESS_NAMES",
    "Task", "FitOn", "WordSimTask", "SentencePooling", "LayerMode", "PostprocessName",
    # results
    "SimilarityResult", "RESULT_COLUMNS", "NOT_FITTED", "results_to_markdown", "save_results_json",
    "load_results_json", "select_best_layer",
    # data
    "WordInContext", "WicExample", "SentencePair", "CoSimLexExample", "UsimExample", "ScwsExample", "WordPair",
    "similarity_data_dir", "read_wic", "load_wic", "read_stsb", "load_stsb", "read_sick", "load_sick",
    "read_cosimlex", "load_cosimlex", "read_coinco_usim", "load_coinco_usim", "read_scws", "load_scws",
    "WORD_SIMILARITY_SETS", "read_word_pairs", "load_word_similarity", "read_sentences", "load_corpus_sentences",
    "corpus_label",
    # scores and metrics (the metrics live in ctxemb.metrics)
    "paired_cosine", "accuracy", "best_threshold", "pearson", "spearman", "rankdata", "uncentered_pearson",
    "harmonic_mean",
]
