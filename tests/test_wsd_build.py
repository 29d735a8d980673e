"""Building sense stores with a fake embedder, propagation, glosses, standardisation, disambiguation, evaluation."""

from pathlib import Path

import numpy as np
import pytest

from ctxemb.evaluation.wsd import evaluate_wsd
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.build import BuildConfig, build_from_embeddings, build_sense_store
from ctxemb.wsd.corpus_pass import embed_corpus, embedder_words
from ctxemb.wsd.glosses import gloss_text
from ctxemb.wsd.propagation import propagate_senses, propagation_targets
from ctxemb.wsd.corpus import read_dataset
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.sense_store import SenseStore
from tests.fixtures.wsd.fake_embedder import FakeEmbedder

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


@pytest.fixture(scope="module", autouse=True)
def _needs_wordnet(wordnet):
    """Every test here needs WordNet (skipped cleanly without it)."""


@pytest.fixture(scope="module")
def train():
    return read_dataset(FIXTURES / "tiny_train")


@pytest.fixture(scope="module")
def dev():
    return read_dataset(FIXTURES / "tiny_eval")


@pytest.fixture(scope="module")
def embedder():
    return FakeEmbedder(dim=64)


@pytest.fixture(scope="module")
def base(train, embedder):
    return embed_corpus(train, embedder, show_progress_bar=False, chunk_sentences=2)


def _fake_vectors(embedder, sentence):
    return embedder.embed_words([embedder_words(sentence.words)], show_progress_bar=False)[0]


def test_build_centroids_are_means_of_occurrences(train, embedder):
    store = build_sense_store(train, embedder, show_progress_bar=False)
    sents = list(train.sentences())
    # bank%1:17:01:: occurs in d000.s000 (word 4) and d000.s001 (word 5)
    expect = np.mean([_fake_vectors(embedder, sents[0])[4], _fake_vectors(embedder, sents[1])[5]], axis=0)
    np.testing.assert_allclose(store.vector("bank%1:17:01::"), expect, rtol=1e-5, atol=1e-6)
    assert store.count("bank%1:17:01::") == 2 and store.count("river%1:17:00::") == 2
    # an instance with two gold keys adds its vector to both
    big = _fake_vectors(embedder, sents[4])[3]
    np.testing.assert_allclose(store.vector("big%3:00:01::"), big, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.vector("big%5:00:00:important:00"), big, rtol=1e-5, atol=1e-6)
    assert len(store) == 13
    assert store.query_transform is None
    meta = store.metadata
    assert meta["embedder"]["model"] == "fake-hash" and meta["layers"] == [-4, -3, -2, -1]
    assert meta["post_processing"] == {"standardize": False, "propagate": False, "propagation_scope": "corpus_lemmas", "gloss": "none"}
    assert meta["back_off"] == "first_sense" and meta["build"]["n_instances"] == 16


def test_multiword_tokens_reach_the_embedder_with_spaces(train):
    seen = []

    class Recording(FakeEmbedder):
        def embed_words(self, sentences, **kw):
            seen.extend(sentences)
            return super().embed_words(sentences, **kw)

    build_sense_store(train, Recording(), show_progress_bar=False)
    assert ["New York", "is", "a", "big", "city", "&", '"', "watched", "."] in seen
    seen.clear()
    build_sense_store(train, Recording(), BuildConfig(multiword="underscore"), show_progress_bar=False)
    assert any(s[0] == "New_York" for s in seen)


def test_disambiguate_known_answers_and_back_off(train, dev, embedder):
    store = build_sense_store(train, embedder, show_progress_bar=False)
    dis = Disambiguator(store, embedder)
    preds = dis.predict_corpus(dev, show_progress_bar=False)
    assert preds["d000.s000.t000"].sense_key == "bank%1:17:01::"  # river context
    assert preds["d000.s001.t002"].sense_key == "bank%1:14:00::"  # money context
    assert preds["d000.s002.t000"].sense_key == "bank%1:14:00::"
    p = preds["d000.s000.t000"]
    assert p.synset == "bank.n.01" and p.gloss.startswith("sloping land") and not p.backed_off
    assert p.runner_up_key == "bank%1:14:00::" and p.score > p.runner_up_score
    assert p.n_candidates == 10 and p.n_scored == 2
    glade = preds["d000.s003.t000"]  # no glade sense in the store: WordNet's first sense
    assert glade.backed_off and glade.sense_key == "glade%1:15:00::" and glade.score is None
    nonword = preds["d000.s003.t001"]
    assert nonword.sense_key is None and nonword.n_candidates == 0
    no_backoff = Disambiguator(store, embedder, back_off="none").predict_corpus(dev, show_progress_bar=False)
    assert no_backoff["d000.s003.t000"].sense_key is None


def test_evaluate_scores_with_the_scorer(train, dev, embedder, tmp_path):
    store = build_sense_store(train, embedder, show_progress_bar=False)
    result = evaluate_wsd(Disambiguator(store, embedder), dev, predictions_path=tmp_path / "pred.key", show_progress_bar=False)
    assert result.overall.n_gold == 10 and result.overall.n_answered == 9
    assert result.overall.precision == 1.0 and result.overall.recall == 0.9
    assert result.n_backed_off == 1
    assert set(result.per_pos) == {"NOUN", "VERB"} and result.per_pos["VERB"].f1 == 1.0
    lines = (tmp_path / "pred.key").read_text().splitlines()
    assert len(lines) == 9 and "d000.s000.t000 bank%1:17:01::" in lines
    d = result.to_dict()
    assert d["F1"] == pytest.approx(100 * 2 * 0.9 / 1.9) and d["n"] == 10
    # precomputed embeddings give the same answers
    embs = embedder.embed_words([embedder_words(s.words) for s in dev.sentences()], show_progress_bar=False)
    again = evaluate_wsd(Disambiguator(store, embedder), dev, embeddings=embs, show_progress_bar=False)
    assert again.predictions == result.predictions


def test_disambiguate_and_tag_raw_text(train, embedder, caplog):
    store = build_sense_store(train, embedder, show_progress_bar=False)
    dis = Disambiguator(store, embedder)
    words = "They sat on the bank of the river .".split()
    preds = dis.disambiguate(words, [4], lemmas=[None] * len(words), pos=[None, None, None, None, "NOUN", None, None, None, None])
    assert len(preds) == 1 and preds[0].sense_key == "bank%1:17:01::" and preds[0].lemma == "bank"
    all_targets = dis.disambiguate(words)
    assert [p.word for p in all_targets] == ["sat", "bank", "river"]
    assert all_targets[0].lemma == "sit"
    tagged = dis.tag("He sat on the bank of the river in New York.")
    assert [p.word for p in tagged] == ["sat", "bank", "river", "New York"]
    assert tagged[1].sense_key == "bank%1:17:01::"
    assert tagged[3].sense_key == "new_york%1:15:01::"
    with pytest.raises(ValueError, match="outside"):
        dis.disambiguate(words, [42])
    with pytest.raises(TypeError, match="single str"):
        dis.disambiguate("They sat on the bank")
    with pytest.raises(ValueError, match="one entry per word"):
        dis.disambiguate(words, [4], lemmas=["bank"])


def test_disambiguator_checks_dimensions(train, embedder):
    store = build_sense_store(train, embedder, show_progress_bar=False)
    with pytest.raises(ValueError, match="dimension"):
        Disambiguator(store, FakeEmbedder(dim=32))


def test_propagation_fills_unseen_senses_from_synset_hypernym_lexname(base):
    store = SenseStore(base.store.dim)
    store.set_vectors(list(base.store.keys), base.store.vectors(), origin="corpus", counts=base.store.counts())
    targets = [
        "banking_concern%1:14:00::",  # same synset as bank%1:14:00::
        "brook%1:17:00::",  # hypernym stream.n.01, like river.n.01
        "glade%1:15:00::",  # noun.location, like city.n.01 / new_york
        "bank%1:17:01::",  # already there: untouched
    ]
    before = store.vector("bank%1:17:01::")
    filled = propagate_senses(store, targets, show_progress_bar=False)
    assert filled == {"synset": 1, "hypernym": 1, "lexname": 1}
    np.testing.assert_allclose(store.vector("banking_concern%1:14:00::"), store.vector("bank%1:14:00::"), rtol=1e-5, atol=1e-6)
    assert store.origin("banking_concern%1:14:00::") == "synset" and store.count("banking_concern%1:14:00::") == 0
    np.testing.assert_allclose(store.vector("brook%1:17:00::"), store.vector("river%1:17:00::"), rtol=1e-5, atol=1e-6)
    assert store.origin("brook%1:17:00::") == "hypernym"
    loc = np.mean([store.vector(k) for k in ("new_york%1:15:01::", "city%1:15:00::")], axis=0)
    assert wnu.lexname(wnu.synset_of("glade%1:15:00::")) == "noun.location"
    np.testing.assert_allclose(store.vector("glade%1:15:00::"), loc, rtol=1e-5, atol=1e-6)
    assert store.origin("glade%1:15:00::") == "lexname"
    np.testing.assert_array_equal(store.vector("bank%1:17:01::"), before)


def test_build_with_propagation_covers_all_senses_of_corpus_lemmas(base, dev, embedder):
    store = build_from_embeddings(base, BuildConfig(propagate=True), show_progress_bar=False)
    targets = propagation_targets(base.lemma_pos)
    assert set(wnu.candidate_keys("bank", "NOUN")) <= set(targets)
    covered_lexnames = {wnu.lexname(wnu.synset_of(k)) for k in base.store.keys}
    # every target gets a vector unless no corpus sense shares its lexicographer file (tiny corpus)
    assert all(k in store or wnu.lexname(wnu.synset_of(k)) not in covered_lexnames for k in targets)
    assert store.origins()["corpus"] == 13 and sum(store.origins().values()) == len(store)
    assert store.metadata["build"]["propagated"] == {"synset": 0, "hypernym": 1, "lexname": 36}
    preds = Disambiguator(store, embedder).predict_corpus(dev, show_progress_bar=False)
    assert preds["d000.s000.t000"].n_scored == 7  # bank senses: 2 from the corpus, 5 propagated
    assert preds["d000.s003.t000"].backed_off  # glade is not a corpus lemma


def test_standardize_uses_corpus_word_statistics(train, base, embedder):
    store = build_from_embeddings(base, BuildConfig(standardize=True), show_progress_bar=False)
    sents = [s for s in train.sentences() if s.instances]
    allvecs = np.concatenate(embedder.embed_words([embedder_words(s.words) for s in sents], show_progress_bar=False))
    mu, sigma = allvecs.astype(np.float64).mean(0), allvecs.astype(np.float64).std(0)
    raw = base.store.vector("bank%1:17:01::")
    np.testing.assert_allclose(store.vector("bank%1:17:01::"), (raw - mu) / sigma, rtol=1e-4, atol=1e-4)
    qt = store.query_transform
    np.testing.assert_allclose(qt.mean, mu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(qt.scale, sigma, rtol=1e-6, atol=1e-6)
    q = allvecs[0]
    np.testing.assert_allclose(store.prepare_queries(q[None])[0], (q - mu) / sigma, rtol=1e-4, atol=1e-4)
    assert store.metadata["post_processing"]["standardize"] is True


@pytest.mark.parametrize("mode", ["concat", "average"])
def test_gloss_combination(base, embedder, mode):
    store = build_from_embeddings(base, BuildConfig(gloss=mode), embedder=embedder, show_progress_bar=False)
    h = base.store.dim
    key = "bank%1:17:01::"
    words = gloss_text(key).replace("(", " ( ").replace(")", " ) ").split()
    assert gloss_text(key).startswith("bank - sloping land")
    c = base.store.vector(key).astype(np.float64)
    from ctxemb.wsd.corpus import regex_tokenize

    g = embedder.embed_words([regex_tokenize(gloss_text(key))], show_progress_bar=False)[0].mean(0)
    cu, gu = c / np.linalg.norm(c), g / np.linalg.norm(g)
    q = np.random.default_rng(0).standard_normal(h)
    qu = q / np.linalg.norm(q)
    if mode == "concat":
        assert store.dim == 2 * h and store.query_transform.n_copies == 2
        got = store.score(store.prepare_queries(q[None])[0], [key])[0]
        assert got == pytest.approx((qu @ cu + qu @ gu) / 2, abs=1e-5)
    else:
        assert store.dim == h and store.query_transform is None
        avg = (cu + gu) / 2
        assert store.score(q, [key])[0] == pytest.approx(qu @ avg / np.linalg.norm(avg), abs=1e-5)
    # glosses give the unseen senses of corpus lemmas a vector (origin "gloss")
    assert store.origin("bank%1:06:00::") == "gloss" and store.count(key) == 2
    assert words  # (the gloss has words)


def test_build_config_validation_and_names():
    assert BuildConfig().name == "1nn+prior0.03"  # the default: the best configuration on the dev sets
    assert BuildConfig.from_name("1nn").name == "1nn"
    assert BuildConfig(standardize=True, propagate=True, gloss="concat", prior_weight=0).name == \
        "1nn+std+prop+gloss-concat"
    assert BuildConfig.from_dict(BuildConfig(gloss="average").to_dict()) == BuildConfig(gloss="average")
    for cfg in (BuildConfig(), BuildConfig(standardize=True, propagate=True, propagation_scope="all", gloss="average"),
                BuildConfig(back_off="none")):
        assert BuildConfig.from_name(cfg.name) == cfg
    assert BuildConfig.from_name("1nn+std", batch_size=8).batch_size == 8
    with pytest.raises(ValueError, match="unknown part"):
        BuildConfig.from_name("1nn+magic")
    with pytest.raises(ValueError, match="gloss must be one of"):
        BuildConfig(gloss="sum")
    with pytest.raises(ValueError, match="unknown BuildConfig fields"):
        BuildConfig.from_dict({"nope": 1})
    with pytest.raises(ValueError, match="max_sentences"):
        BuildConfig(max_sentences=0)


def test_save_load_then_disambiguate_identically(train, dev, embedder, tmp_path):
    store = build_sense_store(train, embedder, BuildConfig(standardize=True, gloss="concat"), show_progress_bar=False)
    path = store.save(tmp_path / "store")
    loaded = SenseStore.load(path)
    a = Disambiguator(store, embedder).predict_corpus(dev, show_progress_bar=False)
    b = Disambiguator(loaded, embedder).predict_corpus(dev, show_progress_bar=False)
    assert a == b


def test_max_sentences_and_empty_corpus(train, embedder):
    store = build_sense_store(train, embedder, BuildConfig(max_sentences=1), show_progress_bar=False)
    assert set(store.keys) == {"sit%2:35:00::", "bank%1:17:01::", "river%1:17:00::"}
    with pytest.raises(ValueError, match="no instances with gold keys"):
        embed_corpus(train.head(0), embedder, show_progress_bar=False)


def test_extending_a_pass_equals_one_pass_over_everything():
    from ctxemb.wsd.corpus_pass import extend_corpus_embeddings

    corpus = read_dataset(FIXTURES / "tiny_train")
    sentences = [s for s in corpus.sentences() if s.instances]
    emb = FakeEmbedder()
    whole = embed_corpus(sentences, emb, show_progress_bar=False)
    first = embed_corpus(sentences[:-1], emb, show_progress_bar=False)
    rest = emb.embed_words([embedder_words(s.words) for s in sentences[-1:]], show_progress_bar=False)
    both = extend_corpus_embeddings(first, sentences[-1:], rest)
    assert sorted(both.store.keys) == sorted(whole.store.keys)
    keys = list(whole.store.keys)
    np.testing.assert_allclose(both.store.vectors(keys), whole.store.vectors(keys), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(both.store.counts(keys), whole.store.counts(keys))
    np.testing.assert_allclose(both.standardizer.mean_, whole.standardizer.mean_, rtol=1e-6)
    np.testing.assert_allclose(both.standardizer.scale_, whole.standardizer.scale_, rtol=1e-5)
    assert len(first.store.keys) <= len(whole.store.keys)  # the first pass is left as it was


def test_prior_weight_adds_the_log_sense_frequency_to_the_cosine(base, dev, embedder):
    """Brute force: argmax_k cos(q, v_k) + w log((c_k + 1) / (sum_j c_j + K)) over the scored candidates."""
    store = build_from_embeddings(base, BuildConfig(prior_weight=0.5), show_progress_bar=False)
    assert store.metadata["prior_weight"] == 0.5
    dis = Disambiguator(store, embedder)
    assert dis.prior_weight == 0.5 and Disambiguator(store, embedder, prior_weight=0).prior_weight == 0
    sentences = [s for s in dev.sentences() if s.instances]
    vectors = embedder.embed_words([embedder_words(s.words) for s in sentences], show_progress_bar=False)
    preds = {p.instance_id: p for ps in dis.disambiguate_sentences(sentences, embeddings=vectors,
                                                                   show_progress_bar=False) for p in ps}
    n_checked = 0
    for s, vecs in zip(sentences, vectors):
        for inst in s.instances:
            cands = [k for k in wnu.candidate_keys(inst.lemma, inst.pos) if k in store]
            p = preds[inst.id]
            if not cands:
                assert p.score is None
                continue
            q = vecs[inst.position] / np.linalg.norm(vecs[inst.position])
            v = store.vectors(cands) / np.linalg.norm(store.vectors(cands), axis=1, keepdims=True)
            c = store.counts(cands).astype(float)
            expect = v @ q + 0.5 * np.log((c + 1) / (c.sum() + len(c)))
            assert p.sense_key == cands[int(np.argmax(expect))]
            assert p.score == pytest.approx(expect.max(), abs=1e-5)
            n_checked += 1
    assert n_checked >= 3
    # a heavy prior turns the plain nearest sense into the corpus's most frequent sense
    heavy = Disambiguator(store, embedder, prior_weight=100.0).disambiguate_sentences(
        sentences, embeddings=vectors, show_progress_bar=False)
    for s, ps in zip(sentences, heavy):
        for inst, p in zip(s.instances, ps):
            cands = [k for k in wnu.candidate_keys(inst.lemma, inst.pos) if k in store]
            if cands:
                assert store.count(p.sense_key) == store.counts(cands).max()
    with pytest.raises(ValueError, match="prior_weight"):
        Disambiguator(store, embedder, prior_weight=-1)
    with pytest.raises(ValueError, match="prior_weight"):
        BuildConfig(prior_weight=float("nan"))


def test_prior_names_round_trip():
    cfg = BuildConfig(standardize=True, prior_weight=0.05)
    assert cfg.name == "1nn+std+prior0.05" and BuildConfig.from_name(cfg.name) == cfg
    assert BuildConfig.from_name("1nn") == BuildConfig(standardize=False, prior_weight=0.0)


def test_corpus_pass_save_load_round_trip(base, dev, embedder, tmp_path):
    from ctxemb.wsd.corpus_pass import CorpusEmbeddings

    path = base.save(tmp_path / "pass")
    loaded = CorpusEmbeddings.load(path)
    keys = list(base.store.keys)
    assert list(loaded.store.keys) == keys and loaded.lemma_pos == base.lemma_pos
    np.testing.assert_allclose(loaded.store.vectors(keys), base.store.vectors(keys), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(loaded.store.counts(keys), base.store.counts(keys))
    np.testing.assert_array_equal(loaded.standardizer.scale_, base.standardizer.scale_)
    assert loaded.multiword == base.multiword and loaded.stats == base.stats
    cfg = BuildConfig(standardize=True, propagate=True, prior_weight=0.1)
    a = Disambiguator(build_from_embeddings(base, cfg, show_progress_bar=False), embedder)
    b = Disambiguator(build_from_embeddings(loaded, cfg, show_progress_bar=False), embedder)
    assert a.predict_corpus(dev, show_progress_bar=False) == b.predict_corpus(dev, show_progress_bar=False)
    base.save(path)  # overwriting an existing pass works
    with pytest.raises(FileNotFoundError, match="corpus.json"):
        CorpusEmbeddings.load(tmp_path)
