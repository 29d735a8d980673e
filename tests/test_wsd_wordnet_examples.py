"""WordNet's example sentences as a sense-annotated corpus, and folding its contexts into a corpus pass."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.corpus import Corpus, Document, Instance, Sentence, read_dataset
from ctxemb.wsd.corpus_pass import add_example_contexts, embed_corpus
from ctxemb.wsd.wordnet_examples import find_lemma, merge_corpora, wordnet_example_corpus
from tests.fixtures.wsd.fake_embedder import FakeEmbedder

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


@pytest.fixture(scope="module", autouse=True)
def _needs_wordnet(wordnet):
    """Every test here needs WordNet (skipped cleanly without it)."""


@pytest.mark.parametrize("words, lemma, pos, span", [
    (["they", "sat", "on", "the", "banks"], "bank", "n", (4, 5)),
    (["the", "plane", "took", "off", "late"], "take_off", "v", (2, 4)),
    (["Dogs", "bark"], "dog", "n", (0, 1)),
    (["a", "banker", "came"], "bank", "n", None),          # derived forms are not inflections
    (["the", "plane", "took", "a", "turn"], "take_off", "v", None),
])
def test_find_lemma_matches_inflections_and_multiwords(words, lemma, pos, span):
    assert find_lemma(words, lemma, pos) == span


def test_adverb_examples_are_annotated_with_their_synsets_lemmas():
    corpus = wordnet_example_corpus(pos="r")
    wn = wnu.get_wordnet()
    n_examples = sum(len(s.examples()) for s in wn.all_synsets("r"))
    sentences = list(corpus.sentences())
    assert 0.9 * n_examples < len(sentences) <= n_examples  # a few examples use none of their lemmas
    assert [d.id for d in corpus.documents] == ["wn-r"]
    for s in sentences[::50]:
        synset = wn.synset(s.id[len("wn-"):s.id.rindex(".e")])
        assert s.instances
        for inst in s.instances:
            (key,) = inst.gold_keys
            assert key in {lem.key() for lem in synset.lemmas()}
            assert inst.pos == "ADV" and s.pos[inst.position] == "ADV"
            assert wnu.sense_info(key).lemma.lower() == inst.lemma
            # the annotated token spells the lemma (multiword parts joined with "_" like the Raganato files)
            assert find_lemma(s.words[inst.position].split("_"), inst.lemma, "r") is not None
    ids = [i.id for i in corpus.instances()]
    assert len(ids) == len(set(ids))


def _example_corpus() -> Corpus:
    """Two hand-made example sentences: one adds a context to a sense the tiny corpus has, one a new sense."""
    train = read_dataset(FIXTURES / "tiny_train")
    inst = next(train.instances())
    key = inst.gold_keys[0]
    other = next(k for k in wnu.candidate_keys(inst.lemma) if k != key) if len(
        wnu.candidate_keys(inst.lemma)) > 1 else key
    words = ("an", inst.lemma, "here")
    sentences = tuple(
        Sentence(id=f"ex.s{i}", words=words, lemmas=(None, inst.lemma, None), pos=(None, inst.pos, None),
                 instances=(Instance(id=f"ex.s{i}.t0", position=1, lemma=inst.lemma, pos=inst.pos,
                                     gold_keys=(k,)),))
        for i, k in enumerate((key, other)))
    return Corpus(name="examples", documents=(Document(id="ex", sentences=sentences),))


def test_example_contexts_equal_one_pass_over_both_corpora_and_keep_the_counts():
    embedder = FakeEmbedder(dim=32)
    train = read_dataset(FIXTURES / "tiny_train")
    examples = _example_corpus()
    base = embed_corpus(train, embedder, show_progress_bar=False)
    extra = embed_corpus(examples, embedder, show_progress_bar=False)
    both = embed_corpus(merge_corpora(train, examples), embedder, show_progress_bar=False)

    counted = add_example_contexts(base, extra, count=True)
    kept = add_example_contexts(base, extra)
    keys = list(both.store.keys)
    assert sorted(counted.store.keys) == sorted(keys) == sorted(kept.store.keys)
    np.testing.assert_allclose(counted.store.vectors(keys), both.store.vectors(keys), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kept.store.vectors(keys), both.store.vectors(keys), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(counted.store.counts(keys), both.store.counts(keys))
    # without count=True the prior still reads the corpus's frequencies: examples add nothing, new senses are 0
    want = np.array([base.store.count(k) if k in base.store else 0 for k in keys])
    np.testing.assert_array_equal(kept.store.counts(keys), want)
    assert kept.lemma_pos == base.lemma_pos
    assert kept.stats["example_contexts"]["instances"] == 2
    assert base.store.vectors(list(base.store.keys)).shape == (len(base.store), 32)  # base is not modified
    np.testing.assert_array_equal(base.store.counts(), embed_corpus(train, embedder,
                                                                      show_progress_bar=False).store.counts())


def test_example_contexts_need_the_same_embedder():
    train = read_dataset(FIXTURES / "tiny_train")
    base = embed_corpus(train, FakeEmbedder(dim=32), show_progress_bar=False)
    extra = embed_corpus(_example_corpus(), FakeEmbedder(dim=32), multiword="underscore", show_progress_bar=False)
    with pytest.raises(ValueError, match="same embedder and multiword mode"):
        add_example_contexts(base, extra)


def test_merge_corpora_refuses_a_document_id_twice():
    examples = _example_corpus()
    with pytest.raises(ValueError, match="document id 'ex' is in both"):
        merge_corpora(examples, replace(examples, name="again"))
    with pytest.raises(ValueError, match="at least one corpus"):
        merge_corpora()
    assert merge_corpora(examples).name == "examples"
