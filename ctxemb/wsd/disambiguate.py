"""Word sense disambiguation by nearest sense embedding (J&M eq. 11.9).

Shapes: W words in a sentence, H the store's dimension, K candidate senses of a word.

For a target word, the candidates are its WordNet senses (from the lemma and POS when known, else from the
word form via morphy, over every POS when the POS is unknown). The answer is the candidate whose stored vector
has the highest cosine with the word's contextual embedding; candidates the store lacks are ignored. With a
``prior_weight`` w > 0 (one number, or one per part of speech) each scored candidate k also gains
w * log((c_k + 1) / (sum_j c_j + K)), c_k its count in the training corpus (:mod:`~ctxemb.wsd.prior`). When no
candidate has a vector, the disambiguator backs off to WordNet's first sense (unless back-off is off), and the result
says so.

:meth:`Disambiguator.tag` does all-words tagging of raw text: tokenisation (nltk's ``word_tokenize`` when its
punkt data is installed, else a regular expression), multiword lookup in WordNet (``New York``),
POS tagging when nltk's perceptron tagger data is installed (else all POS are candidates), lemmatisation with
morphy, and disambiguation of every open-class word WordNet knows.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ctxemb.core.validation import check_choice
from ctxemb.core.protocols import EmbedderLike, batch_size_kwargs, embedder_config_dict
from ctxemb.search.inputs import embedder_config_differences
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.corpus import Corpus, Sentence, regex_tokenize
from ctxemb.wsd.corpus_pass import check_word_vectors, embedder_words
from ctxemb.wsd.prior import PriorWeight, check_prior_weight, prior_terms
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.wsd.options import BACK_OFFS, MULTIWORD_MODES, BackOff, MultiwordMode

logger = logging.getLogger(__name__)

__all__ = ["BACK_OFFS", "BackOff", "SensePrediction", "Disambiguator", "tokenize", "pos_tag"]


# Closed-class words that WordNet nevertheless lists (he = helium, a = ampere, in = inch, ...): not tagged in
# raw text. Targets in Raganato data sets are chosen by the data set and are never filtered.
_FUNCTION_WORDS = frozenset(
    """a an the this that these those he she it i me you we they him her us them my your his its our their
    mine yours hers ours theirs who whom whose which what there here be am is are was were been being have has
    had do does did will would shall should can could may might must of in on at by for with about against
    between into through during before after above below to from up down out off over under again further then
    once and but or nor so yet if because as until while than too very s t just not no n't 's 'm 're 've 'd
    'll""".split()
)


@dataclass(frozen=True)
class SensePrediction:
    """The disambiguator's answer for one target word.

    Attributes:
        position: word index in the sentence.
        word: the word as given.
        lemma: the lemma given, else the lemma of the chosen sense (morphy found it from the word form).
        pos: the POS used (given or tagged), None if candidates of every POS were considered.
        sense_key: the chosen sense key; None when the word has no candidates (or none with a vector and
            back-off is off).
        synset: the chosen sense's synset name (``bank.n.01``), or None.
        gloss: its definition, or None.
        score: score of the chosen sense (its cosine, plus the weighted log prior when ``prior_weight`` > 0);
            None when backed off.
        runner_up_key: the second-best candidate with a vector, or None.
        runner_up_score: its score, or None.
        backed_off: the answer is WordNet's first sense because no candidate had a vector.
        n_candidates: number of candidate senses in WordNet.
        n_scored: number of candidates that had a vector in the store.
        instance_id: the data set's instance id, when disambiguating a corpus.
    """

    position: int
    word: str
    lemma: str | None
    pos: str | None
    sense_key: str | None
    synset: str | None
    gloss: str | None
    score: float | None
    runner_up_key: str | None
    runner_up_score: float | None
    backed_off: bool
    n_candidates: int
    n_scored: int
    instance_id: str | None = None


@functools.lru_cache(maxsize=1)
def _punkt_available() -> bool:
    import nltk

    for resource in ("tokenizers/punkt_tab/english/", "tokenizers/punkt"):
        try:
            nltk.data.find(resource)
            return True
        except LookupError:
            continue
    logger.warning("nltk's punkt data is not installed; tokenising with a regular expression instead")
    return False


def tokenize(text: str) -> list[str]:
    """Tokenise raw text: nltk's ``word_tokenize`` when punkt is installed, else :func:`~ctxemb.wsd.corpus.regex_tokenize`."""
    if not isinstance(text, str):
        raise TypeError("text must be a str, got %s" % type(text).__name__)
    if _punkt_available():
        import nltk

        try:
            return nltk.word_tokenize(text)
        except LookupError:  # e.g. punkt present but punkt_tab missing in a newer nltk
            pass
    return regex_tokenize(text)


@functools.lru_cache(maxsize=1)
def _tagger_available() -> bool:
    import nltk

    for resource in ("taggers/averaged_perceptron_tagger_eng/", "taggers/averaged_perceptron_tagger/"):
        try:
            nltk.data.find(resource)
            return True
        except LookupError:
            continue
    logger.warning("nltk's POS tagger data is not installed; considering senses of every POS")
    return False


def pos_tag(words: Sequence[str]) -> list[str | None]:
    """Penn Treebank tags from nltk's perceptron tagger, or all None when its data is not installed."""
    if _tagger_available():
        import nltk

        try:
            return [t for _, t in nltk.pos_tag(list(words))]
        except LookupError:
            pass
    return [None] * len(words)


def _aligned(name: str, values, n_words: int) -> list:
    if values is None:
        return [None] * n_words
    if isinstance(values, str) or len(values) != n_words:
        raise ValueError("%s must be a sequence with one entry per word (%d), got %r" % (name, n_words, values))
    return list(values)


class Disambiguator:
    """Nearest-sense WSD over a :class:`~ctxemb.wsd.sense_store.SenseStore`.

    Args:
        store: sense vectors; its ``query_transform`` is applied to every query embedding.
        embedder: the embedder the store was built with (same model, layers and pooling): an
            :class:`~ctxemb.core.protocols.EmbedderLike` (``embed_words(sentences, batch_size=..., show_progress_bar=...)``).
            Its whole configuration (``config.to_dict()``) must equal the one the store records in
            ``metadata["embedder"]`` (compared as search indexes do, field by field); this is checked here and
            whenever ``embedder`` or ``store`` is replaced. A store that records none is used with a warning.
        back_off: one of :data:`BACK_OFFS`; default what the store was built with (else ``"first_sense"``).
        multiword: one of :data:`~ctxemb.wsd.corpus_pass.MULTIWORD_MODES`, how ``_``-joined tokens reach the
            embedder; default the store's setting (else ``"space"``).
        prior_weight: weight of the log sense-frequency prior (see the module docstring): a number, or a mapping
            ``{NOUN, VERB, ADJ, ADV -> weight}`` (:func:`~ctxemb.wsd.prior.check_prior_weight`); default the store's
            setting (else 0, the plain nearest sense).
        batch_size: texts per forward pass; None (default): the embedder's own batching.

    Raises:
        ValueError: unknown ``back_off`` or ``multiword``, negative or non-finite ``prior_weight``; an embedder whose
            dimension or configuration differs from the store's (listing each differing field).
        TypeError: an embedder without a ``config``.
    """

    def __init__(
        self,
        store: SenseStore,
        embedder: EmbedderLike,
        *,
        back_off: BackOff | None = None,
        multiword: MultiwordMode | None = None,
        prior_weight: PriorWeight | None = None,
        batch_size: int | None = None,
    ):
        self._store = store
        self._embedder = None
        self.embedder = embedder  # checked against the store
        self.back_off = check_choice(back_off or store.metadata.get("back_off") or "first_sense", "back_off", BACK_OFFS)
        self.multiword = check_choice(multiword or store.metadata.get("multiword") or "space", "multiword",
                                      MULTIWORD_MODES)
        self.prior_weight = check_prior_weight(
            store.metadata.get("prior_weight", 0.0) if prior_weight is None else prior_weight
        )
        batch_size_kwargs(batch_size)  # checked now, not at the first query
        self.batch_size = batch_size

    @property
    def store(self) -> SenseStore:
        """The sense store; assigning another one checks it against ``embedder``."""
        return self._store

    @store.setter
    def store(self, store: SenseStore) -> None:
        _check_embedder(store, self._embedder)
        self._store = store

    @property
    def embedder(self) -> EmbedderLike:
        """The query embedder; assigning another one checks it against the store."""
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: EmbedderLike) -> None:
        _check_embedder(self._store, embedder)
        self._embedder = embedder

    # ---- core ---------------------------------------------------------------------------------------------
    def _embed(self, sentences: Sequence[Sequence[str]], show_progress_bar: bool) -> list[np.ndarray]:
        words = [embedder_words(s, self.multiword) for s in sentences]
        out = self.embedder.embed_words(words, show_progress_bar=show_progress_bar,
                                       **batch_size_kwargs(self.batch_size))
        check_word_vectors(out, words)
        return out

    def _choose(self, query: np.ndarray, position: int, word: str, lemma, pos, candidates, instance_id=None):
        """Pick among candidate keys given a query in the store's space, (H,)."""
        scored = [k for k in candidates if k in self.store]
        key = score = ru_key = ru_score = None
        backed_off = False
        if scored:
            scores = self.store.score(query, scored).astype(np.float64)
            if self.prior_weight:
                scores += prior_terms(scored, self.store.counts(scored), self.prior_weight)
            order = np.argsort(-scores, kind="stable")  # ties go to the earlier (more frequent) WordNet sense
            key, score = scored[order[0]], float(scores[order[0]])
            if len(order) > 1:
                ru_key, ru_score = scored[order[1]], float(scores[order[1]])
        elif candidates and self.back_off == "first_sense":
            key, backed_off = candidates[0], True
        info = wnu.sense_info(key) if key is not None else None
        if lemma is None:
            lemma = key.split("%", 1)[0] if key is not None else wnu.lemmatize(word)
        return SensePrediction(
            position=position,
            word=word,
            lemma=lemma,
            pos=pos,
            sense_key=key,
            synset=info.synset if info else None,
            gloss=info.gloss if info else None,
            score=score,
            runner_up_key=ru_key,
            runner_up_score=ru_score,
            backed_off=backed_off,
            n_candidates=len(candidates),
            n_scored=len(scored),
            instance_id=instance_id,
        )

    def _targets_to_predictions(self, vectors, words, targets) -> list[SensePrediction]:
        """targets: list of (position, lemma, pos, candidates, instance_id); vectors: (W, H_raw)."""
        if not targets:
            return []
        positions = [t[0] for t in targets]
        queries = self.store.prepare_queries(np.asarray(vectors)[positions])  # (T, H)
        return [
            self._choose(q, p, words[p], lemma, pos, cands, iid)
            for q, (p, lemma, pos, cands, iid) in zip(queries, targets)
        ]

    # ---- public API ---------------------------------------------------------------------------------------
    def disambiguate(
        self,
        words: Sequence[str],
        positions: Sequence[int] | None = None,
        *,
        lemmas: Sequence[str | None] | None = None,
        pos: Sequence[str | None] | None = None,
    ) -> list[SensePrediction]:
        """Disambiguate target words of one tokenised sentence.

        Args:
            words: the sentence's W words (multiword tokens joined with ``_`` or a space).
            positions: indices of the target words; default every word that has WordNet candidates and is not
                a function word.
            lemmas: one lemma per *word* (W,), None where unknown (then morphy finds it from the word).
            pos: one POS tag per *word* (W,) (universal, WordNet or Penn), None where unknown (every POS).

        Returns:
            One :class:`SensePrediction` per target, in the order of ``positions``.

        Raises:
            TypeError: ``words`` is a single string.
            ValueError: no words, a position out of range, or ``lemmas``/``pos`` without one entry per word.
        """
        if isinstance(words, str):
            raise TypeError("words must be a sequence of words, got a single str (tokenise it, or use tag())")
        words = list(words)
        if not words or not all(isinstance(w, str) for w in words):
            raise ValueError("words must be a non-empty sequence of str, got %r" % (words,))
        lemmas = _aligned("lemmas", lemmas, len(words))
        tags = _aligned("pos", pos, len(words))
        only_known = positions is None
        if only_known:
            positions = [i for i, w in enumerate(words) if w.lower() not in _FUNCTION_WORDS and any(c.isalpha() for c in w)]
        targets = []
        for p in positions:
            if not isinstance(p, (int, np.integer)) or not 0 <= p < len(words):
                raise ValueError("position %r is outside the sentence of %d words" % (p, len(words)))
            t = self._target(int(p), words[p], lemmas[p], tags[p])
            if t[3] or not only_known:
                targets.append(t)
        vectors = self._embed([words], show_progress_bar=False)[0]
        return self._targets_to_predictions(vectors, words, targets)

    @staticmethod
    def _target(p: int, word: str, lemma: str | None, tag: str | None, instance_id: str | None = None):
        """(position, lemma, tag, candidate keys, instance id) for one target word."""
        wn_pos = None
        if tag:
            try:
                wn_pos = wnu.wordnet_pos(tag)
            except ValueError:
                logger.debug("unrecognised POS tag %r of %r: considering every POS", tag, word)
            else:
                if wn_pos is None:  # a closed-class tag (DET, IN, ...): WordNet has no senses for it
                    return (p, lemma, tag, (), instance_id)
        if lemma:
            cands = wnu.candidate_keys(lemma, wn_pos)
        else:
            cands = wnu.candidate_keys(word, wn_pos, inflected=True)
            # lemma stays None: _choose reports the lemma of the chosen sense (sat -> sit, not Sat(urday))
        return (p, lemma, tag, cands, instance_id)

    def disambiguate_sentences(
        self,
        sentences: Sequence[Sentence],
        *,
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress_bar: bool = True,
    ) -> list[list[SensePrediction]]:
        """Disambiguate the instances of corpus sentences (their lemma and POS are used).

        Args:
            sentences: :class:`~ctxemb.wsd.corpus.Sentence` records.
            embeddings: optional precomputed raw embeddings, one (W_i, H_raw) array per sentence.
            show_progress_bar: tqdm bar while embedding.

        Returns:
            Per sentence, one prediction per instance.
        """
        sentences = list(sentences)
        if embeddings is None:
            embeddings = self._embed([s.words for s in sentences], show_progress_bar)
        elif len(embeddings) != len(sentences):
            raise ValueError("got %d embeddings for %d sentences" % (len(embeddings), len(sentences)))
        out = []
        for s, vecs in zip(sentences, embeddings):
            if np.shape(vecs)[0] != len(s.words):
                raise ValueError(
                    "sentence %r has %d words but its embedding has %d rows" % (s.id, len(s.words), np.shape(vecs)[0])
                )
            targets = [self._target(i.position, s.words[i.position], i.lemma, i.pos, i.id) for i in s.instances]
            out.append(self._targets_to_predictions(vecs, s.words, targets))
        return out

    def predict_corpus(
        self,
        corpus: Corpus,
        *,
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress_bar: bool = True,
    ) -> dict[str, SensePrediction]:
        """Disambiguate every instance of a Raganato-format corpus.

        Args:
            corpus: the data set.
            embeddings: optional precomputed raw embeddings, one (W_i, H_raw) array per sentence of the corpus
                (all sentences, in order, including those without instances).
            show_progress_bar: tqdm bar while embedding.

        Returns:
            Instance id -> prediction (its ``sense_key`` is None when there was nothing to answer).
        """
        sentences = list(corpus.sentences())
        if embeddings is not None:
            if len(embeddings) != len(sentences):
                raise ValueError("got %d embeddings for the %d sentences of %r" % (len(embeddings), len(sentences), corpus.name))
            pairs = [(s, e) for s, e in zip(sentences, embeddings) if s.instances]
            sentences, embeddings = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            sentences = [s for s in sentences if s.instances]
        results = self.disambiguate_sentences(sentences, embeddings=embeddings, show_progress_bar=show_progress_bar)
        return {p.instance_id: p for preds in results for p in preds}

    def tag(self, text: str) -> list[SensePrediction]:
        """All-words WSD of raw text.

        Tokenises, joins adjacent tokens that form a WordNet multiword lemma (longest first, up to 4 tokens),
        POS-tags when nltk's tagger data is available, and disambiguates every word that is not a function
        word and has WordNet candidates.

        Args:
            text: raw text, e.g. ``"He sat on the bank of the river."``.

        Returns:
            Predictions in text order; ``word`` is the (possibly multiword) token.
        """
        return self.tag_texts([text], show_progress_bar=False)[0]

    def tag_texts(self, texts: Sequence[str], *, show_progress_bar: bool = False) -> list[list[SensePrediction]]:
        """:meth:`tag` for several texts, embedded together (one embedder call, batched by ``batch_size``).

        Args:
            texts: raw texts.
            show_progress_bar: tqdm bar while embedding.

        Returns:
            Per text, its predictions in text order (an empty list for a text without a content word WordNet knows).

        Raises:
            TypeError: ``texts`` is a single str, or one of its items is not a str.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, got a single str (use tag(), or wrap it in a list)")
        prepared = [self._tag_targets(t) for t in texts]
        todo = [i for i, (_, targets) in enumerate(prepared) if targets]
        out: list[list[SensePrediction]] = [[] for _ in prepared]
        if not todo:
            return out
        vectors = self._embed([prepared[i][0] for i in todo], show_progress_bar)
        for i, vecs in zip(todo, vectors):
            words, targets = prepared[i]
            out[i] = self._targets_to_predictions(vecs, words, targets)
        return out

    def _tag_targets(self, text: str) -> tuple[list[str], list]:
        """The words of raw text and its targets (see :meth:`tag`)."""
        tokens = tokenize(text)
        if not tokens:
            return [], []
        words = _join_multiwords(tokens)
        tags = pos_tag(words)
        targets = []
        for p, (w, tag) in enumerate(zip(words, tags)):
            if w.lower() in _FUNCTION_WORDS or not any(c.isalpha() for c in w):
                continue
            t = self._target(p, w, None, tag)
            if t[3]:
                targets.append(t)
        return words, targets


def _join_multiwords(tokens: list[str], max_len: int = 4) -> list[str]:
    """Greedily join runs of tokens that WordNet lists as one lemma (``New York``, ``ice cream``)."""
    out, i = [], 0
    while i < len(tokens):
        for n in range(min(max_len, len(tokens) - i), 1, -1):
            span = tokens[i : i + n]
            if all(any(c.isalpha() for c in t) for t in span) and wnu.candidate_keys("_".join(span), None):
                out.append(" ".join(span))
                i += n
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def _check_embedder(store: SenseStore, embedder: EmbedderLike) -> None:
    """Raise unless ``embedder`` makes queries in the space of ``store``: same dimension, same configuration."""
    _check_dims(store, embedder)
    recorded = store.metadata.get("embedder")
    given = embedder_config_dict(embedder)
    if not recorded:
        logger.warning(
            "the sense store records no embedder configuration (metadata['embedder']), so the query embedder "
            "(%s) cannot be checked against it", given.get("model", type(embedder).__name__)
        )
        return
    diffs = embedder_config_differences(recorded, given, stored_name="store")
    if diffs:
        raise ValueError(
            "the embedder's configuration differs from the one the sense store was built with in %d field(s):\n%s\n"
            "Its query vectors would be compared with sense vectors of another space and the answers would be "
            "meaningless: use an embedder made with the configuration in store.metadata['embedder'], or rebuild the "
            "store with this embedder." % (len(diffs), "\n".join(diffs))
        )


def _check_dims(store: SenseStore, embedder: EmbedderLike) -> None:
    qt = store.query_transform
    expected = qt.input_dim if qt is not None else store.dim
    dim = getattr(embedder, "dim", None)
    if dim is not None and int(dim) != expected:
        raise ValueError(
            "the embedder's dimension (%d) differs from the dimension the store expects for queries (%d); "
            "use the embedder the store was built with (%s)" % (dim, expected, store.metadata.get("embedder"))
        )
