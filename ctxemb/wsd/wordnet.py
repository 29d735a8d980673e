"""WordNet 3.0 as a sense inventory: candidate senses, sense keys, glosses and relations.

A thin, cached layer over ``nltk.corpus.wordnet``. Senses are named by their WordNet *sense key*
(``bank%1:17:01::``), the identifier used by the Raganato et al. (2017) evaluation framework; synsets by their
nltk name (``bank.n.01``).

Part-of-speech arguments accept the universal tags of the Raganato files (``NOUN``, ``VERB``, ``ADJ``, ``ADV``),
WordNet letters (``n``, ``v``, ``a``, ``s``, ``r``) and Penn Treebank tags (``NN``, ``VBD``, ``JJ``, ``RB`` ...).
``None`` means "any part of speech"; a closed-class tag such as ``DET`` has no WordNet senses.

WordNet is found on nltk's search path (``NLTK_DATA``). If it is not there, the ``nltk_data`` folder of ctxemb's
shared data (see :func:`ctxemb.core.paths.shared_data_dir`) is tried before giving up with an error that says how to
get the data.

Every lookup is memoised (``functools.lru_cache``): building from SemCor asks for the same few ten thousand
senses hundreds of thousands of times.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

logger = logging.getLogger(__name__)

__all__ = [
    "WordNetNotFoundError",
    "SenseInfo",
    "get_wordnet",
    "wordnet_pos",
    "universal_pos_of_key",
    "normalize_lemma",
    "candidate_keys",
    "lemmatize",
    "base_forms",
    "first_sense",
    "sense_info",
    "is_sense_key",
    "synset_of",
    "synset_sense_keys",
    "hypernyms",
    "lexname",
    "all_sense_keys",
]

# ss_type digit of a sense key -> WordNet POS letter; 5 = adjective satellite.
_SS_TYPE_TO_POS = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "s"}
_WN_TO_UNIVERSAL = {"n": "NOUN", "v": "VERB", "a": "ADJ", "s": "ADJ", "r": "ADV"}
_UNIVERSAL_TO_WN = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
# Penn Treebank prefixes of the open classes; every other Penn tag is closed-class.
_PENN_PREFIX_TO_WN = (("NN", "n"), ("VB", "v"), ("JJ", "a"), ("RB", "r"))
_CLOSED_CLASS_TAGS = frozenset(
    # universal (Petrov et al. 2012) and Penn tags without WordNet senses
    "ADP CONJ CCONJ SCONJ DET NUM PRON PRT PART PUNCT SYM X INTJ AUX PROPN . "
    "CC CD DT EX FW IN LS MD PDT POS PRP PRP$ RP TO UH WDT WP WP$ WRB $ `` '' , : -LRB- -RRB- #".split()
)
_ALL_POS = ("n", "v", "a", "r")

_DOWNLOAD_HINT = (
    "Set NLTK_DATA to a folder that holds corpora/wordnet.zip (for ctxemb's shared data: "
    "NLTK_DATA=$CTXEMB_DATA/nltk_data, e.g. /work/shared/data/nltk_data), or download it with "
    "python -c \"import nltk; nltk.download('wordnet')\"."
)


class WordNetNotFoundError(LookupError):
    """nltk cannot find the WordNet data; the message says where it looked and how to get it."""


@dataclass(frozen=True)
class SenseInfo:
    """What WordNet says about one sense.

    Attributes:
        key: the sense key, e.g. ``bank%1:17:01::``.
        lemma: the lemma as WordNet spells it (case kept, multiword parts joined with ``_``).
        pos: WordNet POS letter of the synset (``n``, ``v``, ``a``, ``s``, ``r``).
        synset: nltk synset name, e.g. ``bank.n.01``.
        gloss: the synset's definition.
        examples: the synset's example sentences.
        lexname: the lexicographer file, e.g. ``noun.object``.
        count: SemCor-derived tag count of the sense in WordNet (0 if never tagged).
    """

    key: str
    lemma: str
    pos: str
    synset: str
    gloss: str
    examples: tuple[str, ...]
    lexname: str
    count: int


def _find_wordnet(paths: Sequence[str | Path] | None = None) -> str:
    """Locate WordNet on ``paths`` (default: nltk's search path); raise WordNetNotFoundError with a hint."""
    import nltk

    # nltk.data.find(paths=...) does not look inside zipped packages in recent nltk; swap the search path instead.
    saved = list(nltk.data.path)
    if paths is not None:
        nltk.data.path[:] = [str(p) for p in paths]
    try:
        for resource in ("corpora/wordnet.zip/wordnet/", "corpora/wordnet/"):
            try:
                return str(nltk.data.find(resource))
            except LookupError:
                continue
        tried = list(nltk.data.path)
    finally:
        nltk.data.path[:] = saved
    raise WordNetNotFoundError(
        "WordNet data for nltk was not found (searched: %s). %s" % (", ".join(tried) or "<nothing>", _DOWNLOAD_HINT)
    )


@functools.lru_cache(maxsize=None)
def get_wordnet():
    """The loaded nltk WordNet reader.

    Returns:
        ``nltk.corpus.wordnet`` (a ``WordNetCorpusReader``), loaded.

    Raises:
        WordNetNotFoundError: the data is neither on nltk's search path nor in the shared data folder.
    """
    import nltk

    try:
        _find_wordnet()
    except WordNetNotFoundError:
        from ctxemb.core.paths import shared_data_dir

        shared = shared_data_dir(required=False)
        candidate = shared / "nltk_data" if shared is not None else None
        if candidate is None or not candidate.is_dir():
            raise
        _find_wordnet([candidate])  # raises with the same hint if this folder lacks it too
        logger.info("WordNet not on nltk's search path; using %s", candidate)
        nltk.data.path.append(str(candidate))
    from nltk.corpus import wordnet as wn

    try:
        wn.ensure_loaded()
    except LookupError as e:  # e.g. a corrupt zip
        raise WordNetNotFoundError("nltk could not load WordNet: %s. %s" % (e, _DOWNLOAD_HINT)) from e
    return wn


def wordnet_pos(pos: str | None) -> str | None:
    """Map a POS tag to a WordNet POS letter.

    Args:
        pos: a universal (``NOUN``), WordNet (``n``, ``s``) or Penn (``NNS``) tag.

    Returns:
        ``"n"``, ``"v"``, ``"a"`` or ``"r"`` (satellites map to ``"a"``); None for a closed-class tag.

    Raises:
        TypeError: ``pos`` is not a string.
        ValueError: the tag is not recognised.
    """
    if not isinstance(pos, str):
        raise TypeError("pos must be a str, got %s" % type(pos).__name__)
    if pos in _UNIVERSAL_TO_WN:
        return _UNIVERSAL_TO_WN[pos]
    if pos in _SS_TYPE_TO_POS.values():
        return "a" if pos == "s" else pos
    for prefix, letter in _PENN_PREFIX_TO_WN:
        if pos.startswith(prefix) and pos.isupper():
            return letter
    if pos in _CLOSED_CLASS_TAGS:
        return None
    raise ValueError(
        "pos %r is not a recognised tag (expected a universal tag such as NOUN/VERB/ADJ/ADV, a WordNet letter "
        "n/v/a/s/r, or a Penn Treebank tag)" % (pos,)
    )


def _pos_letters(pos: str | None) -> tuple[str, ...]:
    if pos is None:
        return _ALL_POS
    letter = wordnet_pos(pos)
    return () if letter is None else (letter,)


def universal_pos_of_key(key: str) -> str:
    """The universal POS tag (``NOUN``, ``VERB``, ``ADJ``, ``ADV``) that a sense key encodes.

    Raises:
        ValueError: ``key`` is not shaped like a sense key.
    """
    try:
        return _WN_TO_UNIVERSAL[_SS_TYPE_TO_POS[key.split("%", 1)[1][0]]]
    except (IndexError, KeyError):
        raise ValueError("%r is not a WordNet sense key (expected lemma%%ss_type:lex_filenum:lex_id:...)" % (key,))


def normalize_lemma(lemma: str) -> str:
    """Lower-case a lemma and join multiword parts with ``_`` as WordNet does (``New York`` -> ``new_york``)."""
    return "_".join(lemma.strip().lower().split())


def _morphy_forms(wn, form: str, pos: str) -> list[str]:
    # nltk's public morphy() returns only the first form; _morphy gives all of them ("better" -> better, good, well).
    morphy = getattr(wn, "_morphy", None)
    if morphy is not None:
        return list(morphy(form, pos))
    base = wn.morphy(form, pos)
    return [base] if base else []


@functools.lru_cache(maxsize=None)
def _keys_for_exact_lemma(lemma: str, pos: str) -> tuple[str, ...]:
    wn = get_wordnet()
    return tuple(
        l.key() for s in wn.synsets(lemma, pos) for l in s.lemmas() if l.name().lower() == lemma
    )


@functools.lru_cache(maxsize=None)
def base_forms(word: str, pos: str) -> tuple[str, ...]:
    """Morphy's base forms of ``word`` for the WordNet POS letter ``pos``; inflectional bases before the word itself
    (``banks`` -> bank, banks); empty when WordNet knows none."""
    forms = _morphy_forms(get_wordnet(), word, pos)
    others = [f for f in forms if f != word]
    return tuple(others + ([word] if word in forms else []))


@functools.lru_cache(maxsize=500_000)
def candidate_keys(lemma: str, pos: str | None = None, *, inflected: bool = False) -> tuple[str, ...]:
    """Sense keys a lemma (or an inflected word) can have, in WordNet order (first sense first).

    Args:
        lemma: a lemma such as ``bank`` or ``take_place`` (spaces are joined with ``_``, case is ignored);
            with ``inflected=True`` any word form (``banks``, ``took``), whose base forms morphy finds.
        pos: restrict to one part of speech (see the module docstring); None for all four.
        inflected: treat ``lemma`` as a word form. Its morphy base forms are tried, inflectional bases first.
            With ``inflected=False`` the lemma must match exactly, except that morphy is still tried when the
            exact lemma has no senses.

    Returns:
        Tuple of sense keys, nouns before verbs before adjectives before adverbs when ``pos`` is None;
        empty if WordNet has no such lemma.
    """
    if not isinstance(lemma, str):
        raise TypeError("lemma must be a str, got %s" % type(lemma).__name__)
    form = normalize_lemma(lemma)
    if not form:
        return ()
    keys: list[str] = []
    for letter in _pos_letters(pos):
        exact = () if inflected else _keys_for_exact_lemma(form, letter)
        if exact:
            keys.extend(exact)
            continue
        for base in base_forms(form, letter):
            keys.extend(k for k in _keys_for_exact_lemma(base, letter) if k not in keys)
    return tuple(keys)


@functools.lru_cache(maxsize=500_000)
def lemmatize(word: str, pos: str | None = None) -> str:
    """The WordNet lemma of a word form (morphy), or the lower-cased word if WordNet does not know it.

    Args:
        word: a word form, e.g. ``took`` or ``New York``.
        pos: the word's part of speech if known (see the module docstring).

    Returns:
        The first base form found, trying nouns, verbs, adjectives then adverbs when ``pos`` is None.
    """
    form = normalize_lemma(word)
    for letter in _pos_letters(pos):
        forms = base_forms(form, letter)
        if forms:
            return forms[0]
    return form


def first_sense(lemma: str, pos: str | None = None, *, inflected: bool = False) -> str | None:
    """WordNet's first (most frequent) sense key of a lemma, or None if it has no senses.

    See :func:`candidate_keys` for the arguments.
    """
    keys = candidate_keys(lemma, pos, inflected=inflected)
    return keys[0] if keys else None


@functools.lru_cache(maxsize=None)
def _lemma_from_key(key: str):
    from nltk.corpus.reader.wordnet import WordNetError

    wn = get_wordnet()
    try:
        return wn.lemma_from_key(key)
    except (WordNetError, ValueError, KeyError) as e:
        error = e
    # index.sense lacks the keys of 8 lemmas that differ from a synset-mate only by case (sun%1:17:02:: is "Sun"
    # in sun.n.01), yet nltk's Lemma.key() produces them: find such a key among the lemma's own senses.
    try:
        name, ss_type = key.split("%", 1)[0], _SS_TYPE_TO_POS[key.split("%", 1)[1][0]]
    except (IndexError, KeyError):
        name = ss_type = None
    if name:
        for lemma in wn.lemmas(name, "a" if ss_type == "s" else ss_type):
            if lemma.key() == key:
                return lemma
    raise KeyError("%r is not a WordNet 3.0 sense key (%s)" % (key, error)) from None


def is_sense_key(key: str) -> bool:
    """True if ``key`` names a WordNet sense."""
    try:
        _lemma_from_key(key)
    except KeyError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def sense_info(key: str) -> SenseInfo:
    """Everything :class:`SenseInfo` holds about a sense key.

    Raises:
        KeyError: ``key`` is not a WordNet sense key.
    """
    lemma = _lemma_from_key(key)
    s = lemma.synset()
    return SenseInfo(
        key=key,
        lemma=lemma.name(),
        pos=s.pos(),
        synset=s.name(),
        gloss=s.definition(),
        examples=tuple(s.examples()),
        lexname=s.lexname(),
        count=lemma.count(),
    )


def synset_of(key: str) -> str:
    """The synset name (``bank.n.01``) of a sense key. Raises KeyError for an unknown key."""
    return sense_info(key).synset


@functools.lru_cache(maxsize=None)
def _synset(name: str):
    from nltk.corpus.reader.wordnet import WordNetError

    try:
        return get_wordnet().synset(name)
    except (WordNetError, ValueError) as e:
        raise KeyError("%r is not a WordNet synset name (%s)" % (name, e)) from None


@functools.lru_cache(maxsize=None)
def synset_sense_keys(synset: str) -> tuple[str, ...]:
    """Sense keys of all lemmas of a synset (``bank.n.01`` -> ``('bank%1:17:01::',)``)."""
    return tuple(l.key() for l in _synset(synset).lemmas())


@functools.lru_cache(maxsize=None)
def hypernyms(synset: str) -> tuple[str, ...]:
    """Names of a synset's direct hypernyms, instance hypernyms included (``bank.n.01`` -> ``('slope.n.01',)``)."""
    s = _synset(synset)
    return tuple(h.name() for h in s.hypernyms() + s.instance_hypernyms())


@functools.lru_cache(maxsize=None)
def lexname(synset: str) -> str:
    """The lexicographer file of a synset (``bank.n.01`` -> ``noun.object``)."""
    return _synset(synset).lexname()


def all_sense_keys(pos: str | None = None) -> Iterator[str]:
    """Every sense key in WordNet (206,978 in WordNet 3.0), optionally of one POS; satellites go with ``a``."""
    wn = get_wordnet()
    for letter in _pos_letters(pos):
        for s in wn.all_synsets(letter):  # nltk's all_synsets("a") includes the satellites
            for l in s.lemmas():
                yield l.key()
