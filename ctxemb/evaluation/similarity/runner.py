"""Run the similarity harnesses by task name on the shared data: :func:`run_similarity_tasks` with
:class:`SimilarityOptions`.

Tasks and what is scored:
    "wic": WiC train (threshold) -> dev; "cosimlex": the English set ("test");
    "usim": CoInCo usim, "train" (the paper's training ids) and "test" (the rest);
    "stsb": STS-B dev (+ train with ``include_train``); "sick": SICK trial as "dev" (+ train);
    "wordsim": ``word_sim_tasks`` split "all", plus SimVerb's 500 dev pairs as split "dev" of "simverb3500";
    "scws": SCWS from ``scws_path`` (held out of the shared folder).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ctxemb.core.validation import check_choice
from ctxemb.evaluation.similarity.cosimlex import evaluate_cosimlex
from ctxemb.evaluation.similarity.data import (
    corpus_label,
    load_coinco_usim,
    load_corpus_sentences,
    load_cosimlex,
    load_scws,
    load_sick,
    load_stsb,
    load_wic,
    load_word_similarity,
)
from ctxemb.evaluation.similarity.graded_pairs import evaluate_graded_pairs
from ctxemb.evaluation.similarity.options import (DEFAULT_TASKS, FIT_ON, TASKS, WORD_SIM_TASKS, FitOn, Task,
                                                    WordSimTask)
from ctxemb.evaluation.similarity.records import WordPair
from ctxemb.evaluation.similarity.results import SimilarityResult
from ctxemb.evaluation.similarity.sentences import (
    SENTENCE_POOLINGS,
    SentencePooling,
    evaluate_sentence_similarity,
    unique_texts,
)
from ctxemb.evaluation.similarity.views import LAYER_MODES, LayerMode, needs_fit, postprocess_options
from ctxemb.evaluation.similarity.wic import evaluate_wic
from ctxemb.evaluation.similarity.words import evaluate_word_similarity
from ctxemb.core.protocols import EmbedderLike

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


@dataclass(frozen=True)
class SimilarityOptions:
    """How :func:`run_similarity_tasks` scores; every field has a default (``dataclasses.replace`` for overrides).

    What is scored:
        postprocess, n_components: as in :func:`ctxemb.evaluation.similarity.wic.evaluate_wic`.
        fit_on: "task": each task's train split (WiC, STS-B, SICK, usim) and WikiText-2 valid where there is none
            (CoSimLex, SCWS) or for word similarity (its own corpus); "wikitext-2": WikiText-2 valid for all.
        layers: "sweep" (every hidden state, 0 = embedding output ... L = last layer, plus "last4") or "default".
        include_train: also score STS-B and SICK train (for choosing a layer without touching dev).
        sentence_poolings: for STS-B and SICK, from ``SENTENCE_POOLINGS``.
        word_sim_tasks: word-similarity sets to score, from ``WORD_SIM_TASKS``.
        max_occurrences: N for decontextualised vectors.

    Data:
        root: the similarity data folder (default ``shared_data_dir()/similarity``).
        data_dir: the shared data folder, for the WikiText-2 corpus (default ``shared_data_dir()``).
        scws_path: SCWS ratings.txt (needed for the "scws" task).
        limit: use only the first ``limit`` examples of every split (a smoke test); also caps the corpora.
        corpus_splits: WikiText-2 files the word vectors come from.
        max_corpus_sentences: cap on corpus sentences (a seeded sample); default none, or ``50 * limit`` with
            ``limit``.
        max_sentence_words: corpus sentences longer than this are dropped (not cut).

    Fit samples and running:
        max_fit_tokens, max_fit_sentences: fit sample sizes (word vectors / sentence vectors).
        batch_size: texts per forward pass; None (default): the embedder's own batching.
        show_progress_bar, seed: as elsewhere.

    Raises:
        ValueError: for an unknown option value, before anything is embedded.
    """

    postprocess: Any = "none"  # a name, an unfitted estimator, or a sequence of them
    n_components: int | None = None
    fit_on: FitOn = "task"
    layers: LayerMode = "sweep"
    include_train: bool = False
    sentence_poolings: Sequence[SentencePooling] = SENTENCE_POOLINGS
    word_sim_tasks: Sequence[WordSimTask] = WORD_SIM_TASKS
    max_occurrences: int = 100

    root: PathLike | None = None
    data_dir: PathLike | None = None
    scws_path: PathLike | None = None
    limit: int | None = None
    corpus_splits: Sequence[str] = ("valid", "test")
    max_corpus_sentences: int | None = None
    max_sentence_words: int = 100

    max_fit_tokens: int = 8192
    max_fit_sentences: int = 20000
    batch_size: int | None = None
    show_progress_bar: bool = True
    seed: int = 0

    def __post_init__(self):
        check_choice(self.fit_on, "fit_on", FIT_ON)
        check_choice(self.layers, "layers", LAYER_MODES)
        for t in self.word_sim_tasks:
            check_choice(t, "word_sim_tasks entry", WORD_SIM_TASKS)
        for p in self.sentence_poolings:
            check_choice(p, "sentence_poolings entry", SENTENCE_POOLINGS)
        postprocess_options(self.postprocess, self.n_components)  # fail early on a bad name
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be >= 1; got %d" % self.limit)
        for name in ("sentence_poolings", "word_sim_tasks", "corpus_splits"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def run_similarity_tasks(embedder: EmbedderLike, tasks: Sequence[Task] = DEFAULT_TASKS,
                         options: SimilarityOptions | None = None, *,
                         on_task_done: Callable[[str, list[SimilarityResult]], None] | None = None,
                         **overrides) -> list[SimilarityResult]:
    """Load the shared data and run the similarity harnesses by name (see the module docstring for what is scored).

    Args:
        embedder: see :class:`ctxemb.core.protocols.EmbedderLike`.
        tasks: names from ``TASKS``.
        options: how to score (default ``SimilarityOptions()``).
        on_task_done: called with (task, its rows) after each task, e.g. to save partial results.
        **overrides: fields of :class:`SimilarityOptions` that replace those of ``options``, e.g.
            ``run_similarity_tasks(embedder, ["stsb"], postprocess="whiten", limit=10)``.

    Returns:
        All rows, task by task.

    Raises:
        ValueError: for an unknown task or option, before anything is embedded.
        TypeError: for an override that is not a field of :class:`SimilarityOptions`.
    """
    fields = {f.name for f in dataclasses.fields(SimilarityOptions)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError("run_similarity_tasks got unknown option(s) %s; SimilarityOptions has %s"
                        % (unknown, ", ".join(sorted(fields))))
    options = dataclasses.replace(options or SimilarityOptions(), **overrides)
    tasks = list(tasks)
    for t in tasks:
        check_choice(t, "task", TASKS)
    if "scws" in tasks and options.scws_path is None:
        raise ValueError("task 'scws' needs scws_path: SCWS is held out of the shared data folder")
    runner = _TaskRunner(embedder, options)
    rows: list[SimilarityResult] = []
    for task in tasks:
        logger.info("similarity task %s", task)
        out = runner.run(task)
        rows.extend(out)
        if on_task_done is not None:
            on_task_done(task, out)
    return rows


class _TaskRunner:
    """Loads each task's data (capped by ``limit``) and calls its harness with the shared options."""

    def __init__(self, embedder: EmbedderLike, options: SimilarityOptions):
        self.embedder, self.o = embedder, options
        self.max_corpus_sentences = options.max_corpus_sentences
        if self.max_corpus_sentences is None and options.limit is not None:
            self.max_corpus_sentences = 50 * options.limit
        self.needs_fit = needs_fit(postprocess_options(options.postprocess, options.n_components))
        self.common = dict(postprocess=options.postprocess, n_components=options.n_components, layers=options.layers,
                           batch_size=options.batch_size, show_progress_bar=options.show_progress_bar,
                           seed=options.seed)
        self._wikitext_valid: list[tuple[str, ...]] | None = None

    def run(self, task: Task) -> list[SimilarityResult]:
        harnesses = {"wic": self.wic, "cosimlex": self.cosimlex, "usim": self.usim, "scws": self.scws,
                     "stsb": lambda: self.sentences("stsb"), "sick": lambda: self.sentences("sick"),
                     "wordsim": self.wordsim}
        return harnesses[task]()

    def head(self, data: Sequence) -> list:
        return list(data) if self.o.limit is None else list(data)[: self.o.limit]

    def wikitext_valid(self) -> tuple[list[tuple[str, ...]], str]:
        """WikiText-2 valid sentences (read once) and their label: the fit corpus of tasks without a train split."""
        if self._wikitext_valid is None:
            self._wikitext_valid = load_corpus_sentences("wikitext-2", ("valid",), data_dir=self.o.data_dir,
                                                         max_words=self.o.max_sentence_words,
                                                         max_sentences=self.max_corpus_sentences, seed=self.o.seed)
        return self._wikitext_valid, corpus_label("wikitext-2", ("valid",))

    def word_fit(self, *, always: bool) -> dict[str, Any]:
        """``fit_corpus`` arguments for WikiText-2 valid: with ``always`` (the task has no train split) or when
        ``fit_on="wikitext-2"``; none when nothing is fitted."""
        if not self.needs_fit or not (always or self.o.fit_on == "wikitext-2"):
            return {}
        sents, name = self.wikitext_valid()
        return {"fit_corpus": sents, "fit_corpus_name": name}

    def wic(self) -> list[SimilarityResult]:
        root = self.o.root
        return evaluate_wic(self.embedder, self.head(load_wic("train", root)), self.head(load_wic("dev", root)),
                            max_fit_tokens=self.o.max_fit_tokens, **self.word_fit(always=False), **self.common)

    def cosimlex(self) -> list[SimilarityResult]:
        return evaluate_cosimlex(self.embedder, self.head(load_cosimlex("en", self.o.root)),
                                 max_fit_tokens=self.o.max_fit_tokens, **self.word_fit(always=True), **self.common)

    def usim(self) -> list[SimilarityResult]:
        splits = {s: self.head(load_coinco_usim(s, self.o.root)) for s in ("train", "test")}
        return evaluate_graded_pairs(self.embedder, splits, task="usim", max_fit_tokens=self.o.max_fit_tokens,
                                     **self.word_fit(always=False), **self.common)

    def scws(self) -> list[SimilarityResult]:
        return evaluate_graded_pairs(self.embedder, {"all": self.head(load_scws(self.o.scws_path))}, task="scws",
                                     max_fit_tokens=self.o.max_fit_tokens, **self.word_fit(always=True),
                                     **self.common)

    def sentences(self, task: str) -> list[SimilarityResult]:
        loader = load_stsb if task == "stsb" else load_sick
        splits = {"dev": self.head(loader("dev", self.o.root))}
        fit: dict[str, Any] = {}
        if self.o.include_train or (self.needs_fit and self.o.fit_on == "task"):
            train = self.head(loader("train", self.o.root))
            if self.o.include_train:
                splits = {"train": train, **splits}
            elif self.needs_fit:
                fit = {"fit_texts": unique_texts(train), "fit_name": "%s/train" % task}
        if self.needs_fit and self.o.fit_on == "wikitext-2":
            sents, name = self.wikitext_valid()
            fit = {"fit_texts": [" ".join(s) for s in sents], "fit_name": name}
        return evaluate_sentence_similarity(self.embedder, splits, task=task, poolings=self.o.sentence_poolings,
                                            max_fit_sentences=self.o.max_fit_sentences, **fit, **self.common)

    def wordsim(self) -> list[SimilarityResult]:
        root, o = self.o.root, self.o
        datasets: dict[str, dict[str, list[WordPair]]] = {
            t: {"all": self.head(load_word_similarity(t, root))} for t in o.word_sim_tasks}
        if "simverb3500" in datasets:
            datasets["simverb3500"]["dev"] = self.head(load_word_similarity("simverb500-dev", root))
        corpus = load_corpus_sentences("wikitext-2", o.corpus_splits, data_dir=o.data_dir,
                                       max_words=o.max_sentence_words, max_sentences=self.max_corpus_sentences,
                                       seed=o.seed)
        return evaluate_word_similarity(self.embedder, datasets, corpus,
                                        corpus_name=corpus_label("wikitext-2", o.corpus_splits),
                                        max_occurrences=o.max_occurrences, max_fit_tokens=o.max_fit_tokens,
                                        **self.word_fit(always=False), **self.common)
