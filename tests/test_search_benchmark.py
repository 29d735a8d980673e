"""``python -m benchmarks.search``'s real-data mode: the sentence sample and the whole run on a tiny random model."""

import json
from types import SimpleNamespace

import pytest

from tests.helpers import write_tiny_model


@pytest.fixture(scope="module")
def bench():
    from benchmarks.search import cli, real

    return SimpleNamespace(main=cli.main, sample_real=real.sample_real)


def test_sample_is_distinct_held_out_deterministic_and_counted(bench, shared_data):
    a = bench.sample_real(400, 100, seed=3, min_words=5, max_words=60)
    assert a == bench.sample_real(400, 100, seed=3, min_words=5, max_words=60)
    assert len(a["collection"]) == 400 and len(a["queries"]) == 100
    assert len(set(a["collection"])) == 400 and not set(a["queries"]) & set(a["collection"])
    assert all(5 <= len(s.split()) <= 60 and s == " ".join(s.split()) for s in a["collection"] + a["queries"])
    assert sum(s["collection"] for s in a["sources"]) == 400 and sum(s["queries"] for s in a["sources"]) == 100
    assert all(s["pool"] > 1000 for s in a["sources"])  # every source contributes
    assert a["queries"] != bench.sample_real(400, 100, seed=4, min_words=5, max_words=60)["queries"]


def test_real_mode_end_to_end_and_from_the_cache(bench, shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXEMB_CACHE", str(tmp_path / "ctxemb-cache"))  # auto's probe and exports stay here
    tiny = write_tiny_model(tmp_path / "tiny", max_position_embeddings=128)
    out = tmp_path / "results"
    argv = ["--real", "300", "--queries", "40", "--model", str(tiny), "--quick", "--threads", "1", "--pq-m", "8",
            "--nlist", "8", "--kinds", "hnsw", "ivfpq", "--out", str(out), "--embed-cache", str(tmp_path / "vectors")]
    bench.main(argv)
    assert sorted(p.name for p in out.iterdir()) == ["search_real_300_quick.json", "search_real_300_quick.md"]
    r = json.loads((out / "search_real_300_quick.json").read_text())
    assert r["n"] == 300 and r["n_queries"] == 40 and not r["embedding_from_cache"]
    emb = r["embedding"]
    assert emb["precision_requested"] == "auto" and emb["precision"] != "auto" and emb["texts"] == 340
    assert emb["tokens"] > 340 and emb["tokens_per_s"] > 0 and emb["machine"]["cpu"]
    assert {row["kind"] for row in r["rows"]} == {"flat", "hnsw", "ivfpq"}
    assert all(row["n"] == 300 and 0 <= row["recall_at_10"] <= 1 for row in r["rows"])
    cmp_ = r["synthetic_comparison"]  # against the committed synthetic run, at its size nearest 300
    assert cmp_["n"] == 10_000 and {b["kind"] for b in cmp_["best"]} == {"flat", "hnsw", "ivfpq"}
    md = (out / "search_real_300_quick.md").read_text()
    assert "## Sentences" in md and "## Embedding cost" in md and "## Real vs synthetic" in md

    # A rerun finds the vectors in the cache and never embeds.
    from ctxemb.embedding.embedder import Embedder

    def no_embedding(*args, **kwargs):
        raise AssertionError("embedded again despite the cache")

    monkeypatch.setattr(Embedder, "embed_sentences", no_embedding)
    # auto's cached choice stands: a provisional one (a close call on the tiny model) would be probed again when the
    # machine is quiet and might pick another path, whose vectors are another cache entry
    monkeypatch.setattr("ctxemb.runtime.autoprecision.MAX_PROBES", 1)
    bench.main(argv + ["--name", "again"])
    again = json.loads((out / "again.json").read_text())
    assert again["embedding_from_cache"] and again["sentences"] == r["sentences"]
    assert [row["recall_at_10"] for row in again["rows"] if row["kind"] == "flat"] == [1.0]


def test_real_mode_refuses_synthetic_options(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--real", "1000", "--sizes", "10000"])
    assert "--real replaces the synthetic data" in capsys.readouterr().err
