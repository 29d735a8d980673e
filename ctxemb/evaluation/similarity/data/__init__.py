"""Readers for the similarity benchmarks: WiC, STS-B, SICK, CoSimLex, CoInCo usage similarity, SCWS and the
word-similarity sets, plus the sentence corpus used for decontextualised word vectors.

Every data set comes in two layers:

- ``read_*(path, ...)`` parses one file in its published format and knows nothing about where files live;
- ``load_*(split, root=None)`` maps a split name to the file under the shared data folder
  (``shared_data_dir() / "similarity"`` unless ``root`` is given) and checks that it is there.

They return the records of :mod:`ctxemb.evaluation.similarity.records` (words in context are
:class:`WordInContext`).

Splits that the shared folder deliberately holds back (WiC test, STS-B test, SICK test, SCWS) raise a
``FileNotFoundError`` that says so; pass the path of your own copy to the ``read_*`` function instead.

Modules: :mod:`~ctxemb.evaluation.similarity.data.contexts` (WiC, CoSimLex, usim, SCWS: words in context),
:mod:`~ctxemb.evaluation.similarity.data.sentence_pairs` (STS-B, SICK),
:mod:`~ctxemb.evaluation.similarity.data.word_pairs` (word-similarity sets),
:mod:`~ctxemb.evaluation.similarity.data.corpora` (the sentence corpus); every name is importable from this package.
"""

from ctxemb.evaluation.similarity.data._files import similarity_data_dir
from ctxemb.evaluation.similarity.data.contexts import (
    load_coinco_usim,
    load_cosimlex,
    load_scws,
    load_wic,
    read_coinco_usim,
    read_cosimlex,
    read_scws,
    read_wic,
)
from ctxemb.evaluation.similarity.data.corpora import corpus_label, load_corpus_sentences, read_sentences
from ctxemb.evaluation.similarity.data.sentence_pairs import load_sick, load_stsb, read_sick, read_stsb
from ctxemb.evaluation.similarity.data.word_pairs import WORD_SIMILARITY_SETS, load_word_similarity, read_word_pairs

__all__ = [
    "similarity_data_dir", "read_wic", "load_wic", "read_cosimlex", "load_cosimlex", "read_coinco_usim",
    "load_coinco_usim", "read_scws", "load_scws", "read_stsb", "load_stsb", "read_sick", "load_sick",
    "WORD_SIMILARITY_SETS", "read_word_pairs", "load_word_similarity", "read_sentences", "load_corpus_sentences",
    "corpus_label",
]
