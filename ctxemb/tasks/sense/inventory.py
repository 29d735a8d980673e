"""Sense training's settings (:class:`SenseTrainConfig`) and the sense inventory protocol it reads candidates and
glosses from (WordNet by default)."""

from __future__ import annotations

from typing import Any, Protocol

from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.glosses import gloss_words
# the settings live in ctxemb.tasks.sense.config (read by `ctxemb wsd train --help` without the WSD stack or torch);
# importable from here as before

MODEL_DIR = "model"
GLOSS_ENCODER_DIR = "gloss_encoder"
TRAINING_FILE = "wsd_training.json"
#: The sense-store settings that go with each recipe's trained encoder, chosen on the dev sets (SemEval-2007 and
#: held-out SemCor, ``docs/guide/wsd.md``): recorded in the model's ``wsd_training.json`` ("store"), where
#: ``ctxemb wsd build --model DIR`` takes them as its defaults. A recipe missing here keeps the library's defaults.
STORE_DEFAULTS: dict[str, dict[str, Any]] = {
    "supcon": {"prior_weight": {"NOUN": 0.015, "VERB": 0.02, "ADJ": 0.04, "ADV": 0.025}, "wordnet_examples": True},
}
_BUCKET_BATCHES = 50  # batches' worth of examples sorted by length together (less padding, still shuffled)


# --------------------------------------------------------------------------------------------------- senses

class SenseInventory(Protocol):
    """Where candidate senses and glosses come from (WordNet by default; tests plant their own)."""

    def candidates(self, word: str, lemma: str | None, pos: str | None) -> tuple[str, ...]:
        """The candidate sense keys of a target, in the inventory's order."""
        ...

    def gloss_words(self, key: str) -> list[str]:
        """The words of a sense's gloss text, as they are embedded."""
        ...


class WordNetInventory:
    """WordNet 3.0 (through nltk): candidates exactly as the :class:`~ctxemb.wsd.disambiguate.Disambiguator` takes
    them for a corpus instance, glosses as :func:`~ctxemb.wsd.glosses.embed_glosses` embeds them."""

    def candidates(self, word: str, lemma: str | None, pos: str | None) -> tuple[str, ...]:
        return tuple(Disambiguator._target(0, word, lemma, pos)[3])

    def gloss_words(self, key: str) -> list[str]:
        return gloss_words(key)
