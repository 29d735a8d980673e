"""Vectors for senses a corpus never shows, from WordNet's structure (after Loureiro & Jorge 2019, LMMS).

Shapes: H the store's dimension.

A missing sense gets, in order: the mean of the covered senses of its own synset; else the mean of the covered
synsets that share a direct hypernym with it; else the mean of the covered synsets of its lexicographer file
(``noun.artifact`` ...). :func:`propagation_targets` says which senses to fill (the scope): every sense of the
lemmas a corpus annotates (``"corpus_lemmas"``) or every WordNet sense (``"all"``, ~207k vectors).
"""

from __future__ import annotations

import logging
from typing import Iterable

import numpy as np

from ctxemb.core.validation import check_choice
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.wsd.options import PROPAGATION_SCOPES, PropagationScope

logger = logging.getLogger(__name__)

__all__ = ["PROPAGATION_SCOPES", "PropagationScope", "propagation_targets", "propagate_senses"]



def propagation_targets(lemma_pos: Iterable[tuple[str, str]], scope: PropagationScope = "corpus_lemmas") -> list[str]:
    """Sense keys to fill: every sense of the given (lemma, POS) pairs, or every WordNet sense (``scope="all"``).

    Raises:
        ValueError: ``scope`` is not one of :data:`PROPAGATION_SCOPES`.
    """
    check_choice(scope, "scope", PROPAGATION_SCOPES)
    if scope == "all":
        return list(dict.fromkeys(wnu.all_sense_keys()))
    keys: dict[str, None] = {}
    for lemma, pos in sorted(lemma_pos, key=lambda lp: (lp[0] or "", lp[1] or "")):
        if not lemma:
            continue
        try:
            letters = wnu.wordnet_pos(pos) if pos else None
        except ValueError:
            letters = None
        if pos and letters is None:
            continue
        keys.update(dict.fromkeys(wnu.candidate_keys(lemma, pos or None)))
    return list(keys)


def _group_mean(groups: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    return {g: np.mean(vs, axis=0) for g, vs in groups.items()}


def propagate_senses(store: SenseStore, targets: Iterable[str], *, show_progress_bar: bool = True) -> dict[str, int]:
    """Give the target senses that lack a vector one from WordNet's structure (LMMS-style), in place.

    Only vectors that came from the corpus (origin ``corpus``) are propagated. For each missing sense, in order:

    1. ``synset``: the mean of the covered senses of its own synset;
    2. ``hypernym``: the mean, over its synset's direct (instance) hypernyms h, of the mean vector of the
       covered synsets whose hypernym is h (its covered "siblings");
    3. ``lexname``: the mean of the covered synsets of its lexicographer file.

    A covered synset's vector is the mean of its covered senses' vectors.

    Args:
        store: the store to fill (its vectors are used as they are, e.g. already standardised).
        targets: sense keys to fill; keys already in the store are left alone.
        show_progress_bar: tqdm bar over the targets.

    Returns:
        Number of senses filled per level, e.g. ``{"synset": 120, "hypernym": 3000, "lexname": 900}``.

    Raises:
        ValueError: the store has no corpus vectors.
    """
    from tqdm.auto import tqdm

    corpus_keys = [k for k in store.keys if store.origin(k) == "corpus"]
    if not corpus_keys:
        raise ValueError("the store has no corpus vectors to propagate from")
    means = store.vectors(corpus_keys).astype(np.float64)  # (S, H)
    by_synset: dict[str, list[np.ndarray]] = {}
    for k, v in zip(corpus_keys, means):
        by_synset.setdefault(wnu.synset_of(k), []).append(v)
    synset_vec = _group_mean(by_synset)
    by_hypernym: dict[str, list[np.ndarray]] = {}
    by_lexname: dict[str, list[np.ndarray]] = {}
    for s, v in synset_vec.items():
        for h in wnu.hypernyms(s):
            by_hypernym.setdefault(h, []).append(v)
        by_lexname.setdefault(wnu.lexname(s), []).append(v)
    hypernym_vec = _group_mean(by_hypernym)
    lexname_vec = _group_mean(by_lexname)

    filled: dict[str, tuple[list[str], list[np.ndarray]]] = {o: ([], []) for o in ("synset", "hypernym", "lexname")}
    missing = [k for k in dict.fromkeys(targets) if k not in store]
    for k in tqdm(missing, desc="propagating", unit="sense", disable=not show_progress_bar):
        s = wnu.synset_of(k)
        if s in synset_vec:
            level, v = "synset", synset_vec[s]
        else:
            hs = [hypernym_vec[h] for h in wnu.hypernyms(s) if h in hypernym_vec]
            if hs:
                level, v = "hypernym", np.mean(hs, axis=0)
            elif wnu.lexname(s) in lexname_vec:
                level, v = "lexname", lexname_vec[wnu.lexname(s)]
            else:
                continue
        filled[level][0].append(k)
        filled[level][1].append(v)
    for level, (keys, vecs) in filled.items():
        if keys:
            store.set_vectors(keys, np.stack(vecs), origin=level)
    counts = {level: len(keys) for level, (keys, _) in filled.items()}
    logger.info("propagated %s (of %d senses without corpus vectors)", counts, len(missing))
    return counts
