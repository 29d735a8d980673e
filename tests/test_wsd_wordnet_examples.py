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


def test_adjective_satellites_are_read_once():
    corpus = wordnet_example_corpus(pos="a")
    assert [d.id for d in corpus.documents] == ["wn-a", "wn-s"]
    ids = [s.id for s in corpus.sentences()]
    assert len(ids) == len(set(ids))
    wn = wnu.get_wordnet()
    assert len(ids) <= sum(len(s.examples()) for s in wn.all_synsets("a"))  # nltk's "a" holds the satellites


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

    counted = add_example_contexts(base, extra, count=True, senses="all")
    kept = add_example_contexts(base, extra, senses="all")
    keys = list(both.store.keys)
    assert sorted(counted.store.keys) == sorted(keys) == sorted(kept.store.keys)
    np.testing.assert_allclose(counted.store.vectors(keys), both.store.vectors(keys), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kept.store.vectors(keys), both.store.vectors(keys), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(counted.store.counts(keys), both.store.counts(keys))
    # without count=True the prior still reads the corpus's frequencies: examples add nothing, new senses are 0
    want = np.array([base.store.count(k) if k in base.store else 0 for k in keys])
    np.testing.assert_array_equal(kept.store.counts(keys), want)
    assert kept.lemma_pos == base.lemma_pos
    # senses="unseen": base's centroids untouched, only the senses it lacks get the examples' mean
    unseen = add_example_contexts(base, extra, senses="unseen")
    old = list(base.store.keys)
    np.testing.assert_allclose(unseen.store.vectors(old), base.store.vectors(old), rtol=1e-6, atol=1e-7)
    new = [k for k in extra.store.keys if k not in base.store]
    assert sorted(unseen.store.keys) == sorted(old + new)
    np.testing.assert_allclose(unseen.store.vectors(new), extra.store.vectors(new), rtol=1e-6)
    # senses="seen": no new senses; those base has are the means over both passes, as with "all"
    seen = add_example_contexts(base, extra)  # the default
    assert sorted(seen.store.keys) == sorted(old)
    np.testing.assert_allclose(seen.store.vectors(old), kept.store.vectors(old), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(seen.store.counts(old), base.store.counts(old))
    with pytest.raises(ValueError, match="senses"):
        add_example_contexts(base, extra, senses="some")
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


def test_sense_training_adds_the_examples_after_the_held_out_split():
    from ctxemb.training import TrainConfig
    from ctxemb.tasks.sense.task import SenseTask
    from ctxemb.tasks.sense.config import SenseTrainConfig

    semcor_like = read_dataset(FIXTURES / "tiny_train")
    settings = dict(recipe="supcon", held_out_fraction=0.5, train=TrainConfig(learning_rate=2e-5, out_dir="unused"))
    plain, held = SenseTask("supcon", corpus=semcor_like).read_corpus(SenseTrainConfig(**settings))
    train, held_too = SenseTask("supcon", corpus=semcor_like).read_corpus(
        SenseTrainConfig(wordnet_examples=True, **settings))
    examples = wordnet_example_corpus()
    assert held_too == held and not any(d.id.startswith("wn-") for d in held.documents)
    assert train.documents == plain.documents + examples.documents
    assert wordnet_example_corpus() is examples  # made once per process


def test_build_sense_store_and_the_cli_fold_the_examples_in(tmp_path, monkeypatch):
    import argparse

    from ctxemb.cli import wsd as wsd_cli
    from ctxemb.wsd.build import BuildConfig, build_from_embeddings, build_sense_store
    from ctxemb.wsd.sense_store import SenseStore

    embedder = FakeEmbedder(dim=32)
    train = read_dataset(FIXTURES / "tiny_train")
    examples = _example_corpus()
    config = BuildConfig.from_name("1nn+prior0.03")
    store = build_sense_store(train, embedder, config, examples=examples, show_progress_bar=False)
    want = build_from_embeddings(add_example_contexts(embed_corpus(train, embedder, show_progress_bar=False),
                                                      embed_corpus(examples, embedder, show_progress_bar=False),
                                                      senses="seen"), config, show_progress_bar=False)
    keys = list(want.keys)
    assert sorted(store.keys) == sorted(keys)
    np.testing.assert_allclose(store.vectors(keys), want.vectors(keys), rtol=1e-6)
    np.testing.assert_array_equal(store.counts(keys), want.counts(keys))

    # `ctxemb wsd build --wordnet-examples` (WordNet's corpus replaced by the small one: same code path)
    monkeypatch.setattr(wsd_cli, "load_embedder", lambda *a, **k: FakeEmbedder(dim=32))
    monkeypatch.setattr("ctxemb.wsd.wordnet_examples.wordnet_example_corpus", lambda: examples)
    parser = argparse.ArgumentParser(prog="ctxemb")
    wsd_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "s"),
                              "--prior-weight", "0.03", "--wordnet-examples", "--no-progress"])
    assert args.func(args) == 0
    saved = SenseStore.load(tmp_path / "s")
    np.testing.assert_allclose(saved.vectors(keys), want.vectors(keys), rtol=1e-5, atol=1e-6)
    assert saved.metadata["build"]["example_contexts"]["instances"] == 2
