"""The option names of the similarity harnesses (tasks, fitting corpora, word-similarity sets, sentence poolings,
layer modes, post-processings), in a module that imports nothing heavy: ``ctxemb similarity eval --help`` builds its
flags from them without loading NumPy, scikit-learn or torch."""

from __future__ import annotations

from typing import Literal, get_args

Task = Literal["wic", "cosimlex", "usim", "stsb", "sick", "wordsim", "scws"]
FitOn = Literal["task", "wikitext-2"]
WordSimTask = Literal["simlex999", "wordsim353", "men", "rg65", "simverb3500"]
SentencePooling = Literal["cls", "mean", "layers"]
LayerMode = Literal["sweep", "default"]
PostprocessName = Literal["none", "standardize", "center", "abtt", "whiten"]

TASKS: tuple[Task, ...] = get_args(Task)
DEFAULT_TASKS: tuple[Task, ...] = ("wic", "cosimlex", "usim", "stsb", "sick", "wordsim")  # SCWS is held out
FIT_ON: tuple[FitOn, ...] = get_args(FitOn)
WORD_SIM_TASKS: tuple[WordSimTask, ...] = get_args(WordSimTask)
SENTENCE_POOLINGS: tuple[SentencePooling, ...] = get_args(SentencePooling)
LAYER_MODES: tuple[LayerMode, ...] = get_args(LayerMode)
POSTPROCESS_NAMES: tuple[PostprocessName, ...] = get_args(PostprocessName)
