"""WSD end to end with the real Embedder class on a tiny random model: build, save/load, evaluate, benchmark."""

import json
from pathlib import Path

import pytest

from ctxemb.evaluation.wsd import evaluate_first_sense, evaluate_wsd
from ctxemb.wsd.build import BuildConfig, build_sense_store
from ctxemb.wsd.corpus import read_dataset
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.sense_store import SenseStore
from tests.helpers import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


@pytest.fixture(scope="module", autouse=True)
def _needs_wordnet(wordnet):
    """Every test here needs WordNet (skipped cleanly without it)."""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny_bert"))


def test_real_embedder_build_save_load_evaluate(tiny_model, tmp_path):
    from ctxemb.embedding.embedder import Embedder

    emb = Embedder.from_pretrained(tiny_model, layers=(-2, -1))
    train = read_dataset(FIXTURES / "tiny_train")
    store = build_sense_store(train, emb, BuildConfig(standardize=True), show_progress_bar=False)
    assert store.dim == emb.dim and store.metadata["embedder"]["layers"] == [-2, -1]
    loaded = SenseStore.load(store.save(tmp_path / "store"))
    dev = read_dataset(FIXTURES / "tiny_eval")
    a = evaluate_wsd(Disambiguator(store, emb), dev, show_progress_bar=False)
    b = evaluate_wsd(Disambiguator(loaded, emb), dev, show_progress_bar=False)
    assert a.predictions == b.predictions
    assert a.overall.n_answered == 9  # every instance with candidates is answered
    preds = Disambiguator(loaded, emb).tag("He sat on the bank of the river.")
    assert [p.word for p in preds] == ["sat", "bank", "river"]


def test_first_sense_baseline_on_semeval2007(shared_data):
    d = shared_data / "wsd" / "WSD_Evaluation_Framework" / "Evaluation_Datasets" / "semeval2007"
    r = evaluate_first_sense(d)
    assert round(100 * r.overall.f1, 1) == 55.2  # the published WordNet first-sense baseline
    assert r.overall.n_gold == 455 and r.overall.n_answered == 455


def test_benchmark_script_end_to_end(tiny_model, tmp_path, monkeypatch):
    from benchmarks import wsd as bench

    out = tmp_path / "results"
    argv = [
        "--model", str(tiny_model), "--train", str(FIXTURES / "tiny_train"), "--datasets", str(FIXTURES / "tiny_eval"),
        "--layers", "-2", "-1", "--held-out-fraction", "0.5", "--configs", "1nn", "1nn+std+prop+gloss-concat",
        "--tag", "test", "--no-progress", "--cache", str(tmp_path / "cache"),
    ]
    assert bench.main(argv + ["--out", str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 2 and files[0].endswith("_test.json") and files[1].endswith("_test.md")
    r = json.loads((out / files[0]).read_text())
    assert set(r["configs"]) == {"1nn", "1nn+std+prop+gloss-concat"}
    assert set(r["first_sense"]) == {"tiny_eval", "tiny_train_heldout"}
    for c in r["configs"].values():
        assert set(c["datasets"]) == {"tiny_eval", "tiny_train_heldout"}
        assert 0 <= c["datasets"]["tiny_eval"]["F1"] <= 100 and c["store_bytes"] > 0
    md = (out / files[1]).read_text()
    assert "| WordNet first sense |" in md and "## Cost" in md and "Best by mean F1" in md

    # A rerun from the cache never runs the encoder and scores exactly the same.
    from ctxemb.embedding.embedder import Embedder

    def no_encoder(*args, **kwargs):
        raise AssertionError("the encoder ran although everything was cached")

    monkeypatch.setattr(Embedder, "embed_words", no_encoder)
    assert bench.main(argv + ["--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / files[0]).read_text())
    for name, c in r["configs"].items():
        assert {n: d["F1"] for n, d in again["configs"][name]["datasets"].items()} == \
            {n: d["F1"] for n, d in c["datasets"].items()}
