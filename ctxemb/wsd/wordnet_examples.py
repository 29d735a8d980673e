"""WordNet's own example sentences as a sense-annotated corpus: more contexts per sense for a sense store.

WordNet 3.0 gives 32,923 synsets 48,339 example sentences ("he sat on the bank of the river"). Each
shows one of the synset's lemmas in use, so once that lemma is found in the sentence the example is a context
annotated with a sense key, like a SemCor sentence. LMMS-SP (Loureiro et al. 2022) adds such contexts to SemCor's;
they reach the senses SemCor never tags, which otherwise get a vector only from their gloss or their neighbours.

:func:`wordnet_example_corpus` returns them as a :class:`~ctxemb.wsd.corpus.Corpus` (one document per part of
speech), so everything that takes SemCor takes them: ``build_sense_store(semcor, embedder, examples=...)`` folds
them into a store's sense vectors (:func:`~ctxemb.wsd.corpus_pass.add_example_contexts`), and sense training adds
them to its corpus with :func:`merge_corpora`. Finding the lemma: the example is split with
:func:`~ctxemb.wsd.corpus.regex_tokenize`; a single-word lemma matches a token whose lower-cased form or one of
whose morphy base forms (``banks`` -> bank, ``took`` -> take) is the lemma; a multiword lemma (``take_off``)
matches consecutive tokens whose first part is matched that way and the others literally, and becomes one
``took_off`` token, as multiword instances are in the Raganato format. The first match of each lemma is annotated;
an example in which no lemma of its synset is found is left out (counted in the log: derived forms such as "banker" for "bank" are not matched, on purpose).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace

from ctxemb.core.validation import check_choice
from ctxemb.wsd.corpus import Corpus, Document, Instance, Sentence, regex_tokenize
from ctxemb.wsd.wordnet import base_forms, get_wordnet

logger = logging.getLogger(__name__)

__all__ = ["WORDNET_EXAMPLES_NAME", "find_lemma", "merge_corpora", "wordnet_example_corpus"]

WORDNET_EXAMPLES_NAME = "wordnet_examples"
_UNIVERSAL = {"n": "NOUN", "v": "VERB", "a": "ADJ", "s": "ADJ", "r": "ADV"}
_QUOTES = "\"'`\u201c\u201d\u2018\u2019"


def _matches(token: str, part: str, pos: str) -> bool:
    low = token.lower()
    return low == part or part in base_forms(low, "a" if pos == "s" else pos)


def find_lemma(words: list[str], lemma: str, pos: str) -> tuple[int, int] | None:
    """The first span ``(start, end)`` of ``words`` that spells ``lemma`` (WordNet's name, parts joined by ``_``):
    its first part through morphy base forms for ``pos``, the other parts literally; None if it is not there."""
    parts = lemma.lower().split("_")
    n = len(parts)
    for start in range(len(words) - n + 1):
        if _matches(words[start], parts[0], pos) and all(
                words[start + i].lower() == parts[i] for i in range(1, n)):
            return start, start + n
    return None


def _example_sentence(sid: str, text: str, lemmas: list[tuple[str, str]], pos: str) -> Sentence | None:
    """One example as a sentence whose instances are the synset's lemmas found in it (None if none is)."""
    words = regex_tokenize(text.strip().strip(_QUOTES).strip())
    spans = {}
    for name, key in lemmas:
        span = find_lemma(words, name, pos)
        if span is not None and not any(s < span[1] and span[0] < e for s, e in spans):
            spans[span] = (name, key)
    if not spans:
        return None
    out_words, out_lemmas, out_pos, instances = [], [], [], []
    i = 0
    for start, end in sorted(spans):
        out_words += words[i:start]
        out_lemmas += [None] * (start - i)
        out_pos += [None] * (start - i)
        name, key = spans[(start, end)]
        instances.append(Instance(id="%s.t%03d" % (sid, len(instances)), position=len(out_words),
                                  lemma=name.lower(), pos=_UNIVERSAL[pos], gold_keys=(key,)))
        out_words.append("_".join(words[start:end]))
        out_lemmas.append(name.lower())
        out_pos.append(_UNIVERSAL[pos])
        i = end
    out_words += words[i:]
    out_lemmas += [None] * (len(words) - i)
    out_pos += [None] * (len(words) - i)
    return Sentence(id=sid, words=tuple(out_words), lemmas=tuple(out_lemmas), pos=tuple(out_pos),
                    instances=tuple(instances))


@functools.lru_cache(maxsize=None)
def wordnet_example_corpus(pos: str | None = None) -> Corpus:
    """WordNet 3.0's example sentences with the lemmas of their synset annotated (see the module docstring).
    Made once per process and POS (about 25 s for all of them); the corpus is immutable.

    Args:
        pos: only synsets of this WordNet POS letter (``n``, ``v``, ``a``, ``r``; ``a`` includes satellites);
            None for all.

    Returns:
        A corpus named ``wordnet_examples``: one document per POS letter (``wn-n`` ...), sentence ids
        ``wn-<synset>.e<k>`` (the k-th example of the synset), instance ids ``<sentence id>.t<j>``.
    """
    if pos is not None:
        check_choice(pos, "pos", ("n", "v", "a", "r"))
    wn = get_wordnet()
    letters = ("n", "v", "a", "s", "r") if pos is None else ((pos, "s") if pos == "a" else (pos,))
    documents, kept, dropped = [], 0, 0
    for letter in letters:
        sentences = []
        for synset in wn.all_synsets(letter):
            if synset.pos() != letter:  # nltk's "a" also yields the satellites ("s"), which have their own pass
                continue
            lemmas = [(lem.name(), lem.key()) for lem in synset.lemmas()]
            for k, text in enumerate(synset.examples()):
                sentence = _example_sentence("wn-%s.e%d" % (synset.name(), k), text, lemmas, letter)
                if sentence is None:
                    dropped += 1
                else:
                    sentences.append(sentence)
        kept += len(sentences)
        documents.append(Document(id="wn-" + letter, sentences=tuple(sentences)))
    logger.info("WordNet examples: %d sentences annotated, %d left out (no lemma of the synset found)",
                kept, dropped)
    return Corpus(name=WORDNET_EXAMPLES_NAME, documents=tuple(documents), attributes={"source": "wordnet-3.0"})


def merge_corpora(*corpora: Corpus, name: str | None = None) -> Corpus:
    """The documents of several corpora in one (named ``a+b`` unless ``name`` is given).

    Raises:
        ValueError: with no corpus, or when two corpora share a document id (their instance ids could collide).
    """
    if not corpora:
        raise ValueError("merge_corpora needs at least one corpus")
    seen: dict[str, str] = {}
    for corpus in corpora:
        for doc in corpus.documents:
            if doc.id in seen:
                raise ValueError("document id %r is in both %r and %r" % (doc.id, seen[doc.id], corpus.name))
            seen[doc.id] = corpus.name
    return replace(corpora[0], name=name or "+".join(c.name for c in corpora),
                   documents=tuple(d for c in corpora for d in c.documents))
