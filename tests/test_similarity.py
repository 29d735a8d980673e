"""Similarity harnesses: metrics against scipy / scikit-learn, threshold selection against brute force, result
rows, and every harness end to end with a fake embedder on the tiny fixtures."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import cosine as cosine_distance
from sklearn.metrics import accuracy_score
from sklearn.metrics.pairwise import cosine_similarity
from sklearn.preprocessing import StandardScaler

from ctxemb.evaluation import similarity as sim
from ctxemb.evaluation.similarity import data as sd
from ctxemb.evaluation.similarity import SimilarityResult
from ctxemb.cli import main as cli_main
from ctxemb.cli.similarity import add_parser as add_similarity_subparser

FIX = Path(__file__).parent / "fixtures" / "similarity"


class FakeConfig:
    def to_dict(self):
        return {"model": "fake-hash", "layers": [-4, -3, -2, -1], "layer_pooling": "mean"}


class FakeEmbedder:
    """Deterministic stand-in: hidden state k of word w is base(w) + (k / L) * mean(base of the sentence's words).

    Layer 0 is therefore context-free; higher layers mix in more context. Records the sentences it embeds.
    """

    def __init__(self, num_layers: int = 3, dim: int = 8):
        self.num_layers, self.dim, self.config = num_layers, dim, FakeConfig()
        self.embedded: list[tuple[str, ...]] = []

    def base(self, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(word.lower().encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim) + 0.5

    def stack(self, words) -> np.ndarray:  # (W, L + 1, H)
        base = np.stack([self.base(w) for w in words])
        return np.stack([base + (k / self.num_layers) * base.mean(0) for k in range(self.num_layers + 1)],
                        1).astype(np.float32)

    def embed_words(self, sentences, *, batch_size=32, show_progress_bar=True, layers=None, layer_pooling=None):
        out = []
        for s in sentences:
            self.embedded.append(tuple(s))
            st = self.stack(list(s))
            if layer_pooling == "stack":
                out.append(st[:, list(layers)])
            else:
                out.append(st[:, -4:].mean(1))  # the "configuration": mean of the last four
        return out

    def embed_sentences(self, texts, *, pooling="mean", batch_size=32, show_progress_bar=True, layers=None,
                        layer_pooling=None, normalize=None):
        assert list(layers) == [-1] and normalize is False  # the harness asks for the raw last layer
        rows = [self.stack(t.split())[:, -1] for t in texts]
        return np.stack([r[0] if pooling == "cls" else r.mean(0) for r in rows]).astype(np.float32)


@pytest.fixture
def fake():
    return FakeEmbedder()


def _cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---- metrics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlations_match_scipy(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, 40).astype(float)  # many ties
    y = x + rng.normal(0, 2, 40)
    y[::5] = y[0]
    assert sim.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert sim.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    np.testing.assert_allclose(sim.rankdata(y), stats.rankdata(y, method="average"))
    assert sim.uncentered_pearson(x - 2, y) == pytest.approx(1 - cosine_distance(x - 2, y), abs=1e-12)
    assert sim.harmonic_mean(0.4, 0.7) == pytest.approx(stats.hmean([0.4, 0.7]))


def test_metric_edge_cases():
    assert math.isnan(sim.pearson([1, 1, 1], [1, 2, 3]))
    assert math.isnan(sim.spearman([1, 2, 3], [5, 5, 5]))
    assert math.isnan(sim.uncentered_pearson([0, 0], [1, 2]))
    assert math.isnan(sim.harmonic_mean(0.5, float("nan"))) and math.isnan(sim.harmonic_mean(0.3, -0.3))
    # uncentered differs from Pearson when the mean is not 0: the sign of a change counts
    assert sim.uncentered_pearson([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert sim.uncentered_pearson([1, 2], [-1, -2]) == pytest.approx(-1.0)


def test_accuracy_and_paired_cosine_match_sklearn():
    rng = np.random.default_rng(0)
    t, p = rng.integers(0, 2, 50).astype(bool), rng.integers(0, 2, 50).astype(bool)
    assert sim.accuracy(t, p) == pytest.approx(accuracy_score(t, p))
    a, b = rng.normal(size=(20, 7)), rng.normal(size=(20, 7))
    np.testing.assert_allclose(sim.paired_cosine(a, b), np.diag(cosine_similarity(a, b)), atol=1e-12)
    a[3] = 0
    assert sim.paired_cosine(a, b)[3] == 0.0


def test_metric_bad_input():
    with pytest.raises(ValueError, match="same length; got 3 and 2"):
        sim.pearson([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="x contains NaN"):
        sim.spearman([1, float("nan")], [1, 2])
    with pytest.raises(ValueError, match="at least 2 values"):
        sim.pearson([1], [1])
    with pytest.raises(ValueError, match="must be 1-D"):
        sim.spearman([[1, 2]], [[1, 2]])
    with pytest.raises(ValueError, match="labels must be booleans or 0/1"):
        sim.best_threshold([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError, match="same shape as scores"):
        sim.best_threshold([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="same length"):
        sim.accuracy([True], [True, False])
    with pytest.raises(ValueError, match="same shape"):
        sim.paired_cosine(np.ones((2, 3)), np.ones((3, 3)))


def _brute_force(scores, labels):
    u = np.unique(scores)
    cands = np.r_[-np.inf, (u[1:] + u[:-1]) / 2, np.inf]
    return max(np.mean((scores >= t) == labels) for t in cands)


@pytest.mark.parametrize("seed", range(6))
def test_best_threshold_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    scores = np.round(rng.normal(size=n), 1)  # ties
    labels = rng.random(n) < 1 / (1 + np.exp(-2 * scores))
    t, acc = sim.best_threshold(scores, labels)
    assert acc == pytest.approx(_brute_force(scores, labels))
    assert np.mean((scores >= t) == labels) == pytest.approx(acc)  # the returned threshold achieves it


def test_best_threshold_extremes():
    assert sim.best_threshold([0.1, 0.5, 0.9], [True, True, True]) == (-np.inf, 1.0)
    assert sim.best_threshold([0.1, 0.5, 0.9], [0, 0, 0]) == (np.inf, 1.0)
    assert sim.best_threshold([0.1, 0.5, 0.9], [0, 1, 1]) == (pytest.approx(0.3), 1.0)


# ---- results -------------------------------------------------------------------------------------------------


def _rows():
    return [
        SimilarityResult("wic", "train", "accuracy", 60.0, 10, "0", "target", "none", "-", "m", {"threshold": 0.5}),
        SimilarityResult("wic", "train", "accuracy", 70.0, 10, "1", "target", "none", "-", "m"),
        SimilarityResult("wic", "dev", "accuracy", 65.0, 5, "0", "target", "none", "-", "m", {"threshold": -math.inf}),
        SimilarityResult("wic", "dev", "accuracy", 55.0, 5, "1", "target", "none", "-", "m"),
        SimilarityResult("wic", "dev", "accuracy", float("nan"), 5, "all", "target", "none", "-", "m"),
    ]


def test_results_json_round_trip(tmp_path):
    path = tmp_path / "r.json"
    sim.save_results_json(_rows(), path, metadata={"model": "m", "x": np.float32(1.5)})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    rows, meta = sim.load_results_json(path)
    assert meta == {"model": "m", "x": 1.5}
    assert rows[:4] == _rows()[:4] and math.isnan(rows[4].value)
    assert rows[0].extra == {"threshold": 0.5} and rows[2].extra == {"threshold": None}
    assert not list(tmp_path.glob(".*tmp"))  # atomic write left no temporary file
    with pytest.raises(ValueError, match="unknown SimilarityResult fields"):
        SimilarityResult.from_dict({**rows[0].to_dict(), "bogus": 1})


def test_results_to_markdown():
    md = sim.results_to_markdown(_rows(), columns=("task", "split", "value", "layer"))
    lines = md.strip().split("\n")
    assert lines[0] == "| task | split | value | layer |" and lines[1] == "|---|---|---:|---|"
    assert lines[2] == "| wic | train | 60.0 | 0 |" and "| nan |" in lines[-1]
    assert len(lines) == 2 + len(_rows())
    with pytest.raises(ValueError, match="unknown column"):
        sim.results_to_markdown(_rows(), columns=("task", "score"))


def test_select_best_layer_uses_selection_split_only():
    best = sim.select_best_layer(_rows(), task="wic", metric="accuracy", report_split="dev", select_split="train")
    # layer 1 wins on train (70 > 60) although layer 0 is better on dev
    assert best == {"layer": "1", "value": 55.0, "selected_on": "wic/train", "selection_value": 70.0}
    assert sim.select_best_layer(_rows(), task="wic", metric="accuracy", report_split="dev",
                                 select_split="test") is None


# ---- harnesses -----------------------------------------------------------------------------------------------


def _by(rows, **kw):
    return [r for r in rows if all(getattr(r, k) == v for k, v in kw.items())]


def test_wic_end_to_end(fake):
    train, dev = sd.load_wic("train", FIX), sd.load_wic("dev", FIX)
    rows = sim.evaluate_wic(fake, train, dev, show_progress_bar=False)
    layers = ["0", "1", "2", "3", "last4"]
    assert [r.layer for r in _by(rows, split="dev", metric="accuracy")] == layers
    assert len(_by(rows, split="train", metric="accuracy")) == 5 and len(_by(rows, metric="accuracy_logreg")) == 1
    assert all(r.model == "fake-hash" and r.postprocess == "none" and r.fitted_on == "-" for r in rows)
    # recompute layer 2 by hand: threshold best on train, accuracy on dev
    def cos(e, k):
        a, b = fake.stack(e.first.tokens)[e.first.start, k], fake.stack(e.second.tokens)[e.second.start, k]
        return _cos(a, b)
    t, train_acc = sim.best_threshold([cos(e, 2) for e in train], [e.label for e in train])
    dev_acc = np.mean([(cos(e, 2) >= t) == e.label for e in dev])
    row = _by(rows, split="dev", metric="accuracy", layer="2")[0]
    assert row.value == pytest.approx(100 * dev_acc) and row.n == 4 and row.extra["threshold"] == pytest.approx(t)
    assert _by(rows, split="train", layer="2")[0].value == pytest.approx(100 * train_acc)
    # every sentence went through the encoder once
    assert len(fake.embedded) == len(set(fake.embedded))


def test_wic_postprocessing_options(fake):
    train, dev = sd.load_wic("train", FIX), sd.load_wic("dev", FIX)
    rows = sim.evaluate_wic(fake, train, dev, postprocess=["none", "standardize", StandardScaler()], logreg=False,
                            show_progress_bar=False, max_fit_tokens=50)
    assert {r.postprocess for r in rows} == {"none", "standardize", "StandardScaler"}
    assert {r.fitted_on for r in rows if r.postprocess != "none"} == {"wic/train (50 words)"}
    # ctxemb's Standardizer and sklearn's StandardScaler give the same numbers
    ours = [r.value for r in rows if r.postprocess == "standardize"]
    theirs = [r.value for r in rows if r.postprocess == "StandardScaler"]
    assert ours == pytest.approx(theirs)
    # a fit corpus can be named
    rows = sim.evaluate_wic(fake, train, dev, postprocess="center", fit_corpus=[["the", "river", "bank"]] * 3,
                            fit_corpus_name="tiny", logreg=False, show_progress_bar=False)
    assert {r.fitted_on for r in rows} == {"tiny (9 words)"}


def test_wic_default_layers(fake):
    rows = sim.evaluate_wic(fake, sd.load_wic("train", FIX), sd.load_wic("dev", FIX), layers="default",
                            show_progress_bar=False)
    assert {r.layer for r in rows if r.metric == "accuracy"} == {"default(-4,-3,-2,-1 mean)"}


def test_wic_bad_input(fake):
    train, dev = sd.load_wic("train", FIX), sd.load_wic("dev", FIX)
    with pytest.raises(ValueError, match="WiC dev is empty"):
        sim.evaluate_wic(fake, train, [])
    unlabelled = sd.read_wic(FIX / "wic/dev/dev.data.txt")
    with pytest.raises(ValueError, match="unlabelled"):
        sim.evaluate_wic(fake, train, unlabelled)
    with pytest.raises(ValueError,
                       match="postprocess must be one of 'none', 'standardize', 'center', 'abtt', 'whiten'; got 'pca'"):
        sim.evaluate_wic(fake, train, dev, postprocess="pca")
    with pytest.raises(ValueError, match="layers must be one of 'sweep', 'default'; got 'all'"):
        sim.evaluate_wic(fake, train, dev, layers="all")
    with pytest.raises(TypeError, match="names .* or estimators"):
        sim.evaluate_wic(fake, train, dev, postprocess=[3])
    with pytest.raises(ValueError, match="fit_corpus_name must name"):
        sim.evaluate_wic(fake, train, dev, postprocess="center", fit_corpus=[["a"]])
    with pytest.raises(ValueError, match=r"fitting post-processing 'abtt\(k=6\)' on 5 vectors .*wic, layer 0"):
        sim.evaluate_wic(fake, train, dev, postprocess="abtt", n_components=6, max_fit_tokens=5,
                         show_progress_bar=False)


def test_cosimlex_end_to_end(fake):
    data = sd.load_cosimlex("en", FIX)
    rows = sim.evaluate_cosimlex(fake, data, show_progress_bar=False)
    metrics = ["subtask1_uncentered_pearson", "subtask1_pearson", "subtask2_spearman", "subtask2_pearson",
               "subtask2_harmonic_mean"]
    assert [r.metric for r in rows[:5]] == metrics and len(rows) == 5 * 5
    k = 3
    def c(a, b):
        return _cos(fake.stack(a.tokens)[a.start, k], fake.stack(b.tokens)[b.start, k])
    p1 = np.array([c(e.context1_word1, e.context1_word2) for e in data])
    p2 = np.array([c(e.context2_word1, e.context2_word2) for e in data])
    g1, g2 = np.array([e.sim1 for e in data]), np.array([e.sim2 for e in data])
    got = {r.metric: r.value / 100 for r in _by(rows, layer="3")}
    close = dict(abs=1e-5)  # the embeddings are float32
    d_pred, d_gold = p2 - p1, g2 - g1
    uncentered = d_pred @ d_gold / np.linalg.norm(d_pred) / np.linalg.norm(d_gold)
    assert got["subtask1_uncentered_pearson"] == pytest.approx(uncentered, **close)
    assert got["subtask1_pearson"] == pytest.approx(stats.pearsonr(p2 - p1, g2 - g1)[0], **close)
    sp, pe = stats.spearmanr(np.r_[p1, p2], np.r_[g1, g2])[0], stats.pearsonr(np.r_[p1, p2], np.r_[g1, g2])[0]
    assert got["subtask2_spearman"] == pytest.approx(sp, **close)
    assert got["subtask2_pearson"] == pytest.approx(pe, **close)
    assert got["subtask2_harmonic_mean"] == pytest.approx(2 * sp * pe / (sp + pe), **close)
    assert {r.n for r in rows if r.metric.startswith("subtask2")} == {8}
    with pytest.raises(ValueError, match="CoSimLex has no train split"):
        sim.evaluate_cosimlex(fake, data, postprocess="center")
    with pytest.raises(ValueError, match="need gold"):
        sim.evaluate_cosimlex(fake, sd.read_cosimlex(FIX / "cosimlex/evaluation_kit_final/data/data_en.tsv"))


def test_graded_pairs_usim_and_scws(fake):
    splits = {"train": sd.load_coinco_usim("train", FIX), "test": sd.load_coinco_usim("test", FIX)}
    rows = sim.evaluate_graded_pairs(fake, splits, task="usim", postprocess=["none", "center"], show_progress_bar=False)
    assert {(r.split, r.n) for r in rows} == {("train", 3), ("test", 3)}
    assert {r.fitted_on for r in rows if r.postprocess == "center"} == {"usim/train (38 words)"}
    test = splits["test"]
    cos = [_cos(fake.stack(e.first.tokens)[e.first.start, 3], fake.stack(e.second.tokens)[e.second.start, 3])
           for e in test]
    row = _by(rows, split="test", layer="3", postprocess="none")[0]
    assert row.value == pytest.approx(100 * stats.spearmanr(cos, [e.score for e in test])[0])
    scws = sim.evaluate_graded_pairs(fake, {"all": sd.load_scws(FIX / "scws/ratings.txt")}, task="scws",
                                     show_progress_bar=False)
    assert {(r.task, r.split, r.n) for r in scws} == {("scws", "all", 4)}
    with pytest.raises(ValueError, match="usim split 'test' is empty"):
        sim.evaluate_graded_pairs(fake, {"test": []}, task="usim")
    with pytest.raises(ValueError, match="no train split"):
        sim.evaluate_graded_pairs(fake, {"test": test}, task="usim", postprocess="center")


def test_sentence_similarity_end_to_end(fake):
    splits = {"train": sd.load_stsb("train", FIX), "dev": sd.load_stsb("dev", FIX)}
    rows = sim.evaluate_sentence_similarity(fake, splits, task="stsb", postprocess=["none", "center"],
                                            show_progress_bar=False)
    assert {r.pooling for r in rows} == {"cls", "mean", "word-mean"}
    assert {r.layer for r in rows if r.pooling == "word-mean"} == {"0", "1", "2", "3", "last4", "first-last"}
    assert {r.fitted_on for r in rows if r.postprocess == "center"} == {"stsb/train (12 sentences)"}
    dev = splits["dev"]
    v = fake.embed_sentences([p.sentence1 for p in dev] + [p.sentence2 for p in dev], pooling="mean", layers=[-1],
                           normalize=False)
    cos = sim.paired_cosine(v[: len(dev)], v[len(dev) :])
    row = _by(rows, split="dev", pooling="mean", metric="spearman", postprocess="none")[0]
    assert row.layer == "last" and row.value == pytest.approx(100 * stats.spearmanr(cos, [p.score for p in dev])[0])
    # first-last = mean of hidden states 1 and L of each word, averaged over the words
    def fl(t):
        st = fake.stack(t.split())
        return ((st[:, 1] + st[:, 3]) / 2).mean(0)
    cos = [_cos(fl(p.sentence1), fl(p.sentence2)) for p in dev]
    row = _by(rows, split="dev", pooling="word-mean", layer="first-last", metric="pearson", postprocess="none")[0]
    assert row.value == pytest.approx(100 * stats.pearsonr(cos, [p.score for p in dev])[0], abs=1e-4)
    # fit texts of one's own
    rows = sim.evaluate_sentence_similarity(fake, {"dev": dev}, task="stsb", poolings=["cls"], postprocess="center",
                                            fit_texts=["a b c", "d e f", "a b c"], fit_name="mine",
                                            show_progress_bar=False)
    assert {r.fitted_on for r in rows} == {"mine (2 sentences)"}
    with pytest.raises(ValueError, match="pooling must be one of 'cls', 'mean', 'layers'; got 'max'"):
        sim.evaluate_sentence_similarity(fake, {"dev": dev}, task="stsb", poolings=["max"])
    with pytest.raises(ValueError, match="no 'train' split"):
        sim.evaluate_sentence_similarity(fake, {"dev": dev}, task="stsb", postprocess="whiten")


def test_decontextualized_vectors(fake):
    corpus = sd.load_corpus_sentences(data_dir=FIX)
    dv, extra = sim.decontextualized_word_vectors(fake, ["River", "bank", "zebra", "old bank"], corpus,
                                                  max_occurrences=2, show_progress_bar=False)
    assert dv.words == ["river", "bank", "zebra", "old bank"] and extra.shape == (0, 4, 8)
    idx = dv.index()
    # "river" occurs in 3 sentences, capped at 2; "bank" in 2; "zebra" and the two-word entry never (embedded alone)
    assert list(dv.counts) == [2, 2, 0, 0]
    bank_sents = [s for s in corpus if "bank" in s]
    expected = np.mean([fake.stack(s)[s.index("bank")] for s in bank_sents], axis=0)
    np.testing.assert_allclose(dv.vectors[idx["bank"]], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dv.vectors[idx["zebra"]], fake.stack(["zebra"])[0], rtol=1e-6)
    np.testing.assert_allclose(dv.vectors[idx["old bank"]], fake.stack(["old", "bank"]).mean(0), rtol=1e-5)
    with pytest.raises(ValueError, match="max_occurrences must be >= 1"):
        sim.decontextualized_word_vectors(fake, ["a"], corpus, max_occurrences=0)


def test_word_similarity_end_to_end(fake):
    corpus = sd.load_corpus_sentences(data_dir=FIX)
    datasets = {"simlex999": {"all": sd.load_word_similarity("simlex999", FIX)},
                "simverb3500": {"all": sd.load_word_similarity("simverb3500", FIX),
                                "dev": sd.load_word_similarity("simverb500-dev", FIX)}}
    rows = sim.evaluate_word_similarity(fake, datasets, corpus, corpus_name="fixture-wiki", max_occurrences=5,
                                        postprocess=["none", "abtt"], n_components=1, show_progress_bar=False)
    assert {(r.task, r.split) for r in rows} == {("simlex999", "all"), ("simverb3500", "all"), ("simverb3500", "dev")}
    assert {r.postprocess for r in rows} == {"none", "abtt(k=1)"}
    assert {r.fitted_on for r in rows if r.postprocess != "none"} == {"fixture-wiki (115 words)"}
    r = _by(rows, task="simlex999", layer="0", postprocess="none")[0]
    # simlex fixture words: river stream bank money plant tree run walk cell phone old new; unseen: new
    assert r.extra["n_words"] == 12 and r.extra["n_isolated"] == 1 and r.extra["corpus"] == "fixture-wiki"
    # layer 0 is context-free in the fake, so the vectors are the base vectors
    pairs = datasets["simlex999"]["all"]
    cos = [_cos(fake.base(p.word1), fake.base(p.word2)) for p in pairs]
    assert r.value == pytest.approx(100 * stats.spearmanr(cos, [p.score for p in pairs])[0])
    with pytest.raises(ValueError, match="has an empty split"):
        sim.evaluate_word_similarity(fake, {"rg65": {"all": []}}, corpus, corpus_name="x")


def test_run_similarity_tasks_on_fixtures(fake):
    seen = []
    rows = sim.run_similarity_tasks(fake, sim.TASKS, root=FIX, data_dir=FIX, postprocess=["none", "center"],
                                    include_train=True, scws_path=FIX / "scws/ratings.txt", show_progress_bar=False,
                                    on_task_done=lambda task, out: seen.append((task, len(out))))
    assert [t for t, _ in seen] == list(sim.TASKS) and sum(n for _, n in seen) == len(rows)
    tasks = {r.task for r in rows}
    assert tasks == {"wic", "cosimlex", "usim", "stsb", "sick", "scws", "simlex999", "wordsim353", "men", "rg65",
                     "simverb3500"}
    assert {r.split for r in rows if r.task == "sick"} == {"train", "dev"}
    fitted = {r.fitted_on for r in rows if r.task == "cosimlex" and r.postprocess == "center"}
    assert fitted == {"wikitext-2/valid (71 words)"}
    assert all(r.value is not None for r in rows)
    json.dumps([r.to_dict() for r in rows], allow_nan=False)
    limited = sim.run_similarity_tasks(fake, ["wic"], root=FIX, limit=2, show_progress_bar=False)
    assert {r.n for r in limited if r.metric == "accuracy"} == {2}


def test_run_similarity_tasks_bad_input(fake):
    with pytest.raises(ValueError, match="task must be one of"):
        sim.run_similarity_tasks(fake, ["wic", "sts"], root=FIX)
    with pytest.raises(ValueError, match="needs scws_path"):
        sim.run_similarity_tasks(fake, ["scws"], root=FIX)
    with pytest.raises(ValueError, match="fit_on must be one of 'task', 'wikitext-2'"):
        sim.run_similarity_tasks(fake, ["wic"], root=FIX, fit_on="wiki")
    with pytest.raises(ValueError, match="limit must be >= 1"):
        sim.run_similarity_tasks(fake, ["wic"], root=FIX, limit=0)


def test_run_similarity_tasks_with_an_options_object(fake):
    options = sim.SimilarityOptions(root=FIX, limit=2, postprocess=["none", "center"], show_progress_bar=False)
    rows = sim.run_similarity_tasks(fake, ["wic"], options)
    again = sim.run_similarity_tasks(FakeEmbedder(), ["wic"], root=FIX, limit=2, postprocess=["none", "center"],
                                     show_progress_bar=False)
    assert [r.to_dict() for r in rows] == [r.to_dict() for r in again]
    # keyword overrides replace fields of the options object
    layered = sim.run_similarity_tasks(fake, ["wic"], options, layers="default", postprocess="none")
    assert {r.layer for r in layered if r.metric == "accuracy"} == {"default(-4,-3,-2,-1 mean)"}
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['limt'\]"):
        sim.run_similarity_tasks(fake, ["wic"], options, limt=3)
    with pytest.raises(ValueError, match="sentence_poolings entry must be one of 'cls', 'mean', 'layers'; got 'max'"):
        sim.SimilarityOptions(sentence_poolings=["mean", "max"])


# ---- command line --------------------------------------------------------------------------------------------


def _parser():
    parser = argparse.ArgumentParser(prog="ctxemb")
    add_similarity_subparser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_parses_and_runs(monkeypatch, tmp_path, capsys):
    import ctxemb.embedding.embedder

    fake = FakeEmbedder()
    monkeypatch.setattr(ctxemb.embedding.embedder.Embedder, "from_pretrained", classmethod(lambda cls, *a, **k: fake))
    out = tmp_path / "sim.json"
    args = _parser().parse_args(["similarity", "eval", "--tasks", "wic,stsb", "--postprocess", "none,center",
                                 "--data", str(FIX), "--json", str(out), "--markdown", str(tmp_path / "sim.md"),
                                 "--no-progress"])
    assert args.tasks == ["wic", "stsb"] and args.postprocess == ["none", "center"]
    assert args.func(args) == 0
    rows, meta = sim.load_results_json(out)
    assert {r.task for r in rows} == {"wic", "stsb"} and meta["postprocess"] == ["none", "center"]
    assert (tmp_path / "sim.md").read_text().startswith("| model | task |")
    printed = capsys.readouterr().out
    assert "| fake-hash | wic | dev | accuracy |" in printed and "| 0 |" not in printed  # only last4/all/last rows


def test_cli_rejects_bad_values(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["similarity", "eval", "--tasks", "wic,sts"])
    assert "unknown value(s) sts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parser().parse_args(["similarity", "eval", "--postprocess", "pca"])
    with pytest.raises(SystemExit):
        _parser().parse_args(["similarity", "eval", "--limit", "0"])
    assert cli_main(["similarity", "eval", "--tasks", "scws"]) == 2
    assert "needs --scws" in capsys.readouterr().err


# ---- the real model (slow) -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parity
def test_stsb_mean_pooling_matches_sentence_transformers(shared_data):
    st_module = pytest.importorskip("sentence_transformers")
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.models.hub import resolve_model_dir

    pairs = sd.load_stsb("dev", shared_data / "similarity")[:300]
    emb = Embedder.from_pretrained("all-MiniLM-L6-v2")
    rows = sim.evaluate_sentence_similarity(emb, {"dev": pairs}, task="stsb", poolings=["mean"],
                                            show_progress_bar=False)
    ours = _by(rows, metric="spearman")[0].value
    st = st_module.SentenceTransformer(str(resolve_model_dir("all-MiniLM-L6-v2")), device="cpu")
    a = st.encode([p.sentence1 for p in pairs], show_progress_bar=False)
    b = st.encode([p.sentence2 for p in pairs], show_progress_bar=False)
    theirs = 100 * sim.spearman(sim.paired_cosine(a, b), [p.score for p in pairs])
    assert abs(ours - theirs) < 0.1
