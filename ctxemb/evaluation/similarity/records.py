"""The records the similarity readers produce and the harnesses consume.

Words in context are :class:`WordInContext`: a tokenised sentence and a ``[start, end)`` word span. That is the
one currency the harnesses consume, whatever the data set. The other records are one labelled example each.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WordInContext:
    """A word (or a short span of words) inside a tokenised sentence.

    Attributes:
        tokens: the sentence as words.
        start: index of the first word of the span.
        end: one past the last word of the span (``end - start`` is 1 for a single word).
    """

    tokens: tuple[str, ...]
    start: int
    end: int

    def __post_init__(self):
        if not isinstance(self.tokens, tuple):
            object.__setattr__(self, "tokens", tuple(self.tokens))
        if not (0 <= self.start < self.end <= len(self.tokens)):
            raise ValueError(
                "span [%d, %d) is not a non-empty span inside a sentence of %d words: %r"
                % (self.start, self.end, len(self.tokens), " ".join(self.tokens)[:200])
            )

    @property
    def word(self) -> str:
        """The words of the span, joined by spaces."""
        return " ".join(self.tokens[self.start : self.end])


@dataclass(frozen=True)
class WicExample:
    """One Word-in-Context pair (Pilehvar & Camacho-Collados 2019).

    Attributes:
        lemma: the target lemma.
        pos: "N" or "V".
        first, second: the target in each sentence.
        label: True if the two uses have the same sense; None when the gold file was not given.
    """

    lemma: str
    pos: str
    first: WordInContext
    second: WordInContext
    label: bool | None


@dataclass(frozen=True)
class SentencePair:
    """A pair of sentences with a gold similarity (STS-B, 0-5) or relatedness (SICK, 1-5) score.

    Attributes:
        sentence1, sentence2: raw text.
        score: the gold score.
        id: the pair's id in its file (STS-B: "genre/file/year/id"; SICK: pair_ID).
        label: SICK's entailment judgement; None for STS-B.
    """

    sentence1: str
    sentence2: str
    score: float
    id: str = ""
    label: str | None = None


@dataclass(frozen=True)
class CoSimLexExample:
    """One CoSimLex pair (Armendariz et al. 2020): two words rated for similarity inside two contexts.

    Attributes:
        word1, word2: the pair, uninflected (as in SimLex-999).
        context1_word1, context1_word2: the two marked words in context 1 (same ``tokens``).
        context2_word1, context2_word2: the two marked words in context 2.
        sim1, sim2: mean human similarity (0-10) in context 1 and 2; None if the file has no gold.
    """

    word1: str
    word2: str
    context1_word1: WordInContext
    context1_word2: WordInContext
    context2_word1: WordInContext
    context2_word2: WordInContext
    sim1: float | None
    sim2: float | None

    @property
    def change(self) -> float | None:
        """Gold change of similarity from context 1 to context 2 (``sim2 - sim1``), the target of subtask 1."""
        return None if self.sim1 is None or self.sim2 is None else self.sim2 - self.sim1


@dataclass(frozen=True)
class UsimExample:
    """One CoInCo usage-similarity pair (Garí Soler et al. 2019): the same lemma in two sentences.

    Attributes:
        id: "<sentence id 1>-<sentence id 2>-cnc".
        lemma_pos: e.g. "get.VB".
        first, second: the target in each sentence.
        score: 1 (no shared substitutes, "DIFF") or 5 (at least 75 % shared, "SAME").
        in_train: whether the id is in the paper's training list (``cnc_train_ids``).
    """

    id: str
    lemma_pos: str
    first: WordInContext
    second: WordInContext
    score: float
    in_train: bool


@dataclass(frozen=True)
class ScwsExample:
    """One Stanford Contextual Word Similarity pair (Huang et al. 2012).

    Attributes:
        id: the pair id.
        word1, pos1, word2, pos2: the two words and their part of speech ("n", "v", "j", ...).
        first, second: each word marked in its own context.
        score: the average of the ten ratings (0-10).
        ratings: the ten individual ratings.
    """

    id: str
    word1: str
    pos1: str
    word2: str
    pos2: str
    first: WordInContext
    second: WordInContext
    score: float
    ratings: tuple[float, ...]


@dataclass(frozen=True)
class WordPair:
    """A pair of words out of context with a gold similarity or relatedness score.

    Attributes:
        word1, word2: the words as written in the data set.
        score: the gold score (each data set has its own scale; only ranks matter for Spearman).
        pos: the part of speech where the data set gives one (SimLex-999, SimVerb-3500), else None.
    """

    word1: str
    word2: str
    score: float
    pos: str | None = None

