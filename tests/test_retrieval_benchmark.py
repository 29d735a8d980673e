"""``python -m benchmarks.retrieval`` end to end on a tiny random model (the XQuAD split, BM25 check, fusion choice,
files)."""

import json

import pytest

from tests.helpers import write_tiny_model

pytest.importorskip("bm25s")


@pytest.fixture(scope="module")
def bench():
    from benchmarks import retrieval

    return retrieval


def test_retrieval_benchmark_on_a_tiny_model(bench, shared_data, tmp_path):
    tiny = write_tiny_model(tmp_path / "tiny", max_position_embeddings=128, num_hidden_layers=4)
    out = tmp_path / "results"
    payload = bench.main(["--no-baseline", "--model", str(tiny), "--max-seq-length", "128", "--out", str(out),
                          "--name", "tiny"])
    assert sorted(p.name for p in out.iterdir()) == ["tiny.json", "tiny.md"]
    assert payload["n_questions"] == {"heldout": 351, "dev": 126, "all": 1190}
    saved = json.loads((out / "tiny.json").read_text())
    rows = {(r["retriever"], r["setting"]): r for r in saved["rows"]}
    bm25 = next(r for r in saved["rows"] if r["retriever"].startswith("BM25"))
    # The index's BM25 reproduces bm25s used directly (up to the order of tied scores: the index breaks ties by
    # insertion order, bm25s's top-k selection arbitrarily), and the numbers (R@1 91.8, MRR@10 94.8).
    assert bm25["all"] == pytest.approx(saved["bm25s_direct_all"], abs=0.05)
    assert round(bm25["all"]["recall@1"], 1) == 91.8 and round(bm25["all"]["mrr@10"], 1) == 94.8
    chosen = saved["embedders"][0]["chosen"]
    grid = saved["embedders"][0]["dev_grid"]
    best = max(v["mrr@10"] for v in grid["rrf"].values())
    assert grid["rrf"][str(chosen["rrf_k"])]["mrr@10"] == best  # chosen on dev
    assert ("hybrid RRF (tiny)", "k=%g (dev)" % chosen["rrf_k"]) in rows
    assert all(0 <= r[s][m] <= 100 for r in saved["rows"] for s in ("heldout", "dev", "all")
               for m in ("recall@1", "mrr@10", "ndcg@10"))
    assert saved["machine"]["cpu"] and "max_seq_length" in saved
    assert "## Held-out articles (the report): 351 questions" in (out / "tiny.md").read_text()
