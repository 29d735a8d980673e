"""DocumentIndex: documents scored by their whole text and their best passage, against a brute-force computation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxemb.search import CorruptFileError
from ctxemb.search.documents import DocumentIndex, build_document_index, split_passages
from ctxemb.search.fusion import rrf_fuse
from tests.test_search import FakeEmbedder

DOCS = [
    "The river bank was muddy after the flood. Fish swim near the grassy bank of the stream. Dr. Smith saw them.",
    "She opened an account at the bank downtown. The bank raised its interest rates again this year.",
    "We had a picnic on the bank of the river. The children played football until dark.",
    "Interest rates rose sharply in March. Inflation followed two months later across the region.",
    "A single sentence about apples and pears without any break",
]
QUERIES = ["muddy river flood", "interest rates bank", "children football", "apples pears", "fish in the stream"]


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def brute_force(emb, docs, queries, w):
    """(Q, N) scores and (Q, N) best-passage texts by the module docstring's formula, from scratch."""
    q = unit(emb.embed_sentences(queries))
    whole = unit(emb.embed_sentences(docs)) @ q.T  # (N, Q)
    scores, best = np.empty((len(queries), len(docs))), []
    for r in range(len(queries)):
        row = []
        for d, doc in enumerate(docs):
            parts = split_passages(doc)
            sims = unit(emb.embed_sentences(parts)) @ q[r]
            scores[r, d] = w * whole[d, r] + (1 - w) * sims.max()
            row.append(parts[int(sims.argmax())])
        best.append(row)
    return scores, best


def test_split_passages():
    assert split_passages("One two three four. Five six seven eight! Nine ten eleven twelve?") == [
        "One two three four.", "Five six seven eight!", "Nine ten eleven twelve?"]
    # a piece under min_words (an abbreviation's cut, a heading) joins the next one; the last one joins the previous
    assert split_passages("Dr. Smith met the new mayor today. He left.") == [
        "Dr. Smith met the new mayor today. He left."]
    assert split_passages("no sentence break here at all") == ["no sentence break here at all"]
    assert split_passages("Short. Tiny.", min_words=4) == ["Short. Tiny."]
    assert split_passages("   ") == []


@pytest.mark.parametrize("w", [0.0, 0.3, 1.0])
def test_scores_and_best_passages_equal_brute_force(w):
    emb = FakeEmbedder()
    index = build_document_index(emb, DOCS, passage_weight=w, show_progress_bar=False)
    assert len(index) == 5 and len(index.passages) == sum(len(split_passages(d)) for d in DOCS)
    ref, best = brute_force(emb, DOCS, QUERIES, w)
    hits = index.search(emb, QUERIES, k=5, mode="vector")
    for r, row in enumerate(hits):
        assert [h.id for h in row] == [str(i) for i in np.argsort(-ref[r], kind="stable")]
        np.testing.assert_allclose([h.score for h in row], np.sort(ref[r])[::-1], atol=1e-5)
        assert [h.passage for h in row] == [best[r][int(h.id)] for h in row]
        assert row[0].metadata == {"text": DOCS[int(row[0].id)]}
    # a per-call weight equals an index built with it
    other = build_document_index(emb, DOCS, passage_weight=0.7, show_progress_bar=False)
    assert ([[h.id for h in row] for row in index.search(emb, QUERIES, k=3, passage_weight=0.7)]
            == [[h.id for h in row] for row in other.search(emb, QUERIES, k=3)])


def test_candidates_come_from_the_nearest_passages_and_whole_texts():
    emb = FakeEmbedder()
    index = build_document_index(emb, DOCS, candidates=1, show_progress_bar=False)
    q = emb.embed_sentences(QUERIES)
    for r, row in enumerate(index.search_vectors(q, k=5)):
        _, passage = index.passages.search_array(q[r], 1, mode="vector")
        _, whole = index.documents.search_array(q[r], 1, mode="vector")
        allowed = {int(passage[0].partition(":")[0]), int(whole[0])}
        assert {d for d, _, _ in row} == allowed


def test_hybrid_fuses_the_document_ranking_with_bm25_over_whole_texts():
    pytest.importorskip("bm25s")
    emb = FakeEmbedder()
    index = build_document_index(emb, DOCS, hybrid=True, show_progress_bar=False)
    for query in QUERIES:
        hits = index.search(emb, query, k=3, fusion="rrf", rrf_k=10)
        dense = [h.id for h in index.search(emb, query, k=5, mode="vector")]
        lexical = [h.id for h in index.search(emb, query, k=5, mode="bm25")]
        assert all(h.passage is None for h in index.search(emb, query, k=5, mode="bm25"))
        _, labels = rrf_fuse([np.array([int(i) for i in dense]), np.array([int(i) for i in lexical])], 10)
        assert [h.id for h in hits] == [str(i) for i in labels[:3]]


def test_save_and_load_give_the_same_results(tmp_path):
    pytest.importorskip("bm25s")
    emb = FakeEmbedder()
    index = build_document_index(emb, DOCS, ["a", "b", "c", "d", "e"], hybrid=True, passage_weight=0.4,
                                 show_progress_bar=False)
    index.save(tmp_path / "docs")
    loaded = DocumentIndex.load(tmp_path / "docs", expected_config=emb.config.to_dict())
    assert loaded.passage_weight == 0.4 and len(loaded) == 5
    for mode in ("vector", "bm25", "hybrid"):
        assert index.search(emb, QUERIES, k=3, mode=mode) == loaded.search(emb, QUERIES, k=3, mode=mode)
    with pytest.raises(ValueError, match="configuration"):
        loaded.search(FakeEmbedder(model="other"), "x")
    with pytest.raises(ValueError):
        DocumentIndex.load(tmp_path / "docs", expected_config=FakeEmbedder(model="other").config.to_dict())
    with pytest.raises(FileNotFoundError, match="not a saved DocumentIndex"):
        DocumentIndex.load(tmp_path)
    settings = tmp_path / "docs" / "document_index.json"
    data = json.loads(settings.read_text())
    settings.write_text(json.dumps({**data, "passage_counts": data["passage_counts"][:-1]}))
    with pytest.raises(CorruptFileError, match="document_index.json"):
        DocumentIndex.load(tmp_path / "docs")


def test_bad_arguments_get_clear_errors_before_embedding():
    emb = FakeEmbedder()
    with pytest.raises(ValueError, match="passage_weight"):
        build_document_index(emb, DOCS, passage_weight=1.5)
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        build_document_index(emb, ["some text here", "  "])
    with pytest.raises(ValueError, match="candidates"):
        build_document_index(emb, DOCS, candidates=0)
    with pytest.raises(ValueError, match="metric must be 'cosine'"):
        build_document_index(emb, DOCS, metric="inner_product")
    assert emb.calls == []
    index = build_document_index(emb, DOCS, show_progress_bar=False)
    with pytest.raises(ValueError, match="needs a hybrid index"):
        index.search(emb, "x", mode="bm25")
    with pytest.raises(ValueError, match="shape"):
        index.search_vectors(np.ones((2, 3)))
    assert index.search(emb, [], k=3) == []


def test_cli_builds_and_queries_a_document_index(tmp_path, monkeypatch, capsys):
    import argparse

    from ctxemb.cli import index as search_cli

    emb = FakeEmbedder()
    monkeypatch.setattr(search_cli, "load_embedder", lambda model, device, config=None: emb)
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n\n".join(DOCS) + "\n", encoding="utf-8")  # blank lines are skipped: ids 0, 1, ...
    parser = argparse.ArgumentParser()
    search_cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "docs_index"
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(out), "--documents", "--passage-weight",
                              "0.2", "--no-progress"])
    assert args.func(args) == 0
    loaded = DocumentIndex.load(out)
    assert len(loaded) == 5 and loaded.passage_weight == 0.2
    reference = build_document_index(emb, DOCS, passage_weight=0.2,
                                     layers=[-1], show_progress_bar=False)
    args = parser.parse_args(["index", "query", str(out), QUERIES[0], QUERIES[4], "-k", "3", "--json"])
    assert args.func(args) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()[-2:]]
    expected = reference.search(emb, [QUERIES[0], QUERIES[4]], k=3)
    assert [[h["id"] for h in row] for row in printed] == [[h.id for h in row] for row in expected]
    assert [[h["passage"] for h in row] for row in printed] == [[h.passage for h in row] for row in expected]
    args = parser.parse_args(["index", "query", str(out), "x", "--ef-search", "8"])
    with pytest.raises(ValueError, match="--ef-search do not apply to a document index"):
        args.func(args)
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "w"), "--passage-weight", "0.5"])
    with pytest.raises(ValueError, match="add --documents"):
        args.func(args)
