"""Hybrid search: BM25 (bm25s) beside the vectors in one SemanticIndex, ids shared, rankings fused, saved with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

bm25s = pytest.importorskip("bm25s")

from ctxemb.search import CorruptFileError, HNSWParams, HybridParams, SemanticIndex  # noqa: E402
from ctxemb.search.fusion import minmax, rrf_fuse, weighted_fuse  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

TEXTS = [
    "the river bank was muddy after the flood",
    "she opened an account at the bank downtown",
    "fish swim near the grassy bank of the stream",
    "the central bank raised its interest rates again",
    "we had a picnic on the bank of the river",
    "interest rates and inflation worry the markets",
    "a heron waited in the reeds of the stream",
    "markets fell when the rates rose",
    "the flood washed the picnic tables downstream",
    "an old boat drifted past the muddy reeds",
    "",  # no token at all
    "the of and",  # stopwords only
]
QUERIES = ["muddy river bank", "interest rates at the central bank", "picnic by the stream", "zebra"]
IDS = ["doc%02d" % i for i in range(len(TEXTS))]


def vectors(n: int, d: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def hybrid_index(**kwargs) -> SemanticIndex:
    return SemanticIndex(8, hybrid=HybridParams(**kwargs)).add(IDS, vectors(len(IDS)), texts=TEXTS)


def bm25s_reference(texts: list[str], queries: list[str], **params) -> np.ndarray:
    """(Q, N) BM25 scores from bm25s used directly on the whole collection (its tokenizer, English stopwords)."""
    retriever = bm25s.BM25(**params)
    retriever.index(bm25s.tokenize(texts, show_progress=False), show_progress=False)
    out = np.zeros((len(queries), len(texts)))
    for q, tokens in enumerate(bm25s.tokenize(queries, show_progress=False, return_ids=False)):
        ids = retriever.get_tokens_ids(tokens)
        if ids:
            out[q] = retriever.get_scores_from_ids(ids)
    return out


def shares_a_term(text: str, query: str) -> bool:
    a, b = bm25s.tokenize([text, query], show_progress=False, return_ids=False)
    return bool(set(a) & set(b))


# ------------------------------------------------------------------------------------------------- BM25


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_bm25_scores_agree_with_bm25s_used_directly(method):
    index = hybrid_index(method=method, k1=1.2, b=0.7)
    ref = bm25s_reference(TEXTS, QUERIES, method=method, k1=1.2, b=0.7)
    results = index.search(None, len(TEXTS), texts=QUERIES, mode="bm25")
    for q, hits in enumerate(results):
        matches = [i for i, t in enumerate(TEXTS) if shares_a_term(t, QUERIES[q])]
        assert sorted(h.id for h in hits) == sorted(IDS[i] for i in matches)  # non-matches are not returned
        for h in hits:
            assert h.score == pytest.approx(ref[q, IDS.index(h.id)], rel=1e-6)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    assert results[3] == []  # "zebra" is in no text


def test_bm25_follows_removals_upserts_and_compaction():
    index = SemanticIndex(8, kind="hnsw", params=HNSWParams(m=8), hybrid=True)
    index.add(IDS, vectors(len(IDS)), texts=TEXTS)
    index.remove(["doc00", "doc04"])
    index.upsert(["doc03"], vectors(1, seed=5), texts=["a zebra crossed the river"])
    live = [i for i in IDS if i not in ("doc00", "doc04")]
    texts = [dict(zip(IDS, TEXTS), doc03="a zebra crossed the river")[i] for i in live]
    for compacted in (False, True):
        if compacted:
            assert index.n_tombstones == 3
            index.compact(show_progress_bar=False)
            assert index.n_tombstones == 0
        ref = bm25s_reference(texts, QUERIES)  # the statistics of the remaining collection
        for q, hits in enumerate(index.search(None, len(TEXTS), texts=QUERIES, mode="bm25")):
            got = {h.id: h.score for h in hits}
            want = {live[i]: ref[q, i] for i in range(len(live)) if shares_a_term(texts[i], QUERIES[q])}
            assert got.keys() == want.keys()
            for i in got:
                assert got[i] == pytest.approx(want[i], rel=1e-6)
        assert [h.id for h in index.search(None, 3, texts="zebra", mode="bm25")] == ["doc03"]


# ------------------------------------------------------------------------------------------------- fusion


def test_rrf_fuse_and_weighted_fuse_by_hand():
    s, lab = rrf_fuse([np.array([3, 1, 2]), np.array([1, 4, -1])], rrf_k=10)
    # 1: 1/12 + 1/11; 3: 1/11; 4: 1/12; 2: 1/13
    np.testing.assert_allclose(s, [1 / 12 + 1 / 11, 1 / 11, 1 / 12, 1 / 13])
    assert lab.tolist() == [1, 3, 4, 2]
    s, lab = rrf_fuse([np.array([5, 6]), np.array([6, 5])], rrf_k=60)  # a tie keeps the first-met order
    assert lab.tolist() == [5, 6] and s[0] == s[1]
    np.testing.assert_allclose(minmax(np.array([4.0, 2.0, 1.0])), [1.0, 1 / 3, 0.0])
    assert minmax(np.array([7.0])).tolist() == [1.0] and minmax(np.array([2.0, 2.0])).tolist() == [1.0, 1.0]
    s, lab = weighted_fuse([(np.array([0.9, 0.5, 0.1]), np.array([1, 2, 3])),
                            (np.array([8.0, 4.0, -np.inf]), np.array([3, 4, -1]))], [0.25, 0.75])
    # 1: .25; 2: .25 * .5; 3: .75; 4: 0
    np.testing.assert_allclose(s, [0.75, 0.25, 0.125, 0.0])
    assert lab.tolist() == [3, 1, 2, 4]


def test_hybrid_search_equals_a_hand_computed_fusion_of_the_two_rankings():
    index = hybrid_index(candidates=len(TEXTS))
    q = vectors(len(QUERIES), seed=1)
    v_scores, v_ids = index.search_array(q, len(TEXTS), mode="vector")
    b_scores, b_ids = index.search_array(None, len(TEXTS), texts=QUERIES, mode="bm25")
    for rrf_k in (1.0, 60.0):
        scores, ids = index.search_array(q, 5, texts=QUERIES, rrf_k=rrf_k)  # mode "hybrid" is the default
        for r in range(len(QUERIES)):
            fused = {}
            for ranking in (v_ids[r], b_ids[r]):
                for rank, i in enumerate([i for i in ranking if i is not None], start=1):
                    fused[i] = fused.get(i, 0.0) + 1.0 / (rrf_k + rank)
            want = sorted(fused.items(), key=lambda kv: -kv[1])[:5]
            np.testing.assert_allclose(scores[r], [s for _, s in want], rtol=1e-6)
            np.testing.assert_allclose([fused[i] for i in ids[r]], [s for _, s in want], rtol=1e-6)
    for alpha in (0.0, 0.3, 1.0):
        scores, ids = index.search_array(q, 5, texts=QUERIES, fusion="weighted", alpha=alpha)
        for r in range(len(QUERIES)):
            fused = {}
            for weight, s_row, i_row in ((alpha, v_scores[r], v_ids[r]), (1 - alpha, b_scores[r], b_ids[r])):
                ok = [j for j, i in enumerate(i_row) if i is not None]
                if not ok:
                    continue
                s = np.array([s_row[j] for j in ok], np.float64)
                norm = (s - s.min()) / (s.max() - s.min()) if s.max() > s.min() else np.ones_like(s)
                for j, n in zip(ok, norm):
                    fused[i_row[j]] = fused.get(i_row[j], 0.0) + weight * n
            want = sorted(fused.values(), reverse=True)[:5]
            np.testing.assert_allclose(scores[r], want, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose([fused[i] for i in ids[r]], want, rtol=1e-5, atol=1e-7)


def test_candidates_limit_the_depth_each_ranking_contributes():
    index = hybrid_index(candidates=1)
    q = vectors(1, seed=1)[0]
    hits = index.search(q, 1, texts="muddy river bank")
    v = index.search(q, 1, mode="vector")[0].id
    b = index.search(None, 1, texts="muddy river bank", mode="bm25")[0].id
    assert hits[0].id in {v, b}
    assert len(index.search(q, 4, texts="muddy river bank")) == 4  # at least k are read from each ranking


# ------------------------------------------------------------------------------------------------- persistence


def test_save_load_round_trip_in_every_mode(tmp_path):
    index = hybrid_index(fusion="weighted", alpha=0.4, stopwords=None, method="bm25+")
    index.remove(["doc05"])
    index.save(tmp_path / "idx")
    loaded = SemanticIndex.load(tmp_path / "idx")
    assert loaded.hybrid == index.hybrid and loaded.ids == index.ids
    q = vectors(len(QUERIES), seed=2)
    for mode, qv in (("vector", q), ("bm25", None), ("hybrid", q)):
        texts = None if mode == "vector" else QUERIES
        for a, b in zip(loaded.search_array(qv, 6, texts=texts, mode=mode),
                        index.search_array(qv, 6, texts=texts, mode=mode)):
            np.testing.assert_array_equal(a, b)
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["format_version"] == 2 and manifest["hybrid"]["alpha"] == 0.4
    assert manifest["files"]["lexical"].startswith("lexical.000001-")
    loaded.add(["new"], vectors(1, seed=9), texts=["a zebra on the bank"])
    loaded.save()
    names = sorted(os.listdir(tmp_path / "idx"))
    assert [n for n in names if n.startswith("lexical.")] == [json.loads(
        (tmp_path / "idx" / "manifest.json").read_text())["files"]["lexical"]]  # the previous generation's is gone
    assert SemanticIndex.load(tmp_path / "idx").search(None, 1, texts="zebra", mode="bm25")[0].id == "new"


def test_a_plain_index_saves_as_before(tmp_path):
    SemanticIndex(8).add(IDS[:3], vectors(3)).save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and "hybrid" not in manifest and "lexical" not in manifest["files"]
    assert SemanticIndex.load(tmp_path).hybrid is None


def test_a_loaded_index_refuses_a_bm25_file_that_does_not_match(tmp_path):
    d = tmp_path / "idx"
    hybrid_index().save(d)
    manifest = json.loads((d / "manifest.json").read_text())
    lexical = d / manifest["files"]["lexical"]
    good = lexical.read_bytes()
    with np.load(lexical) as z:
        arrays = {k: z[k] for k in z.files}
    bad_present = dict(arrays, present=np.concatenate([arrays["present"][:-1], [False]]))
    with open(lexical, "wb") as f:
        np.savez(f, **bad_present)
    with pytest.raises(CorruptFileError, match="label 11 is removed there but present in the items file"):
        SemanticIndex.load(d)
    with open(lexical, "wb") as f:
        np.savez(f, **dict(arrays, offsets=arrays["offsets"][:-1]))
    with pytest.raises(CorruptFileError, match="the items file has 12 labels"):
        SemanticIndex.load(d)
    lexical.write_bytes(good[: len(good) // 2])
    with pytest.raises(CorruptFileError, match="index BM25 file .* cannot be read"):
        SemanticIndex.load(d)
    lexical.unlink()
    with pytest.raises(FileNotFoundError, match="index BM25 file not found"):
        SemanticIndex.load(d)
    lexical.write_bytes(good)
    SemanticIndex.load(d)
    (d / "manifest.json").write_text(json.dumps(dict(manifest, hybrid={"fusion": "max"})))
    with pytest.raises(CorruptFileError, match="hybrid: HybridParams.fusion must be one of"):
        SemanticIndex.load(d)
    (d / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "hybrid"}))
    with pytest.raises(CorruptFileError, match="format_version 2 needs a 'hybrid' object"):
        SemanticIndex.load(d)


CHILD = textwrap.dedent("""
    import json, os, signal, sys
    import numpy as np
    from ctxemb.search import SemanticIndex

    spec = json.loads(sys.argv[1])
    ops = []
    for name in ("rename", "replace", "fsync"):
        real = getattr(os, name)
        def hooked(*a, _real=real, _name=name, **k):
            ops.append(_name)
            if spec["kill_at"] == len(ops):
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*a, **k)
        setattr(os, name, hooked)
    texts, version = spec["texts"], spec["version"]
    ids = ["v%d_%d" % (version, i) for i in range(len(texts))]
    vecs = np.random.default_rng(version).standard_normal((len(texts), 8)).astype(np.float32)
    index = SemanticIndex(8, hybrid=True).add(ids, vecs, texts=texts[::version])
    index.save(spec["target"])
    json.dump(ops, open(spec["log"], "w"))
""")


def _save_in_child(tmp_path, target, version, kill_at):
    log = tmp_path / "ops.json"
    spec = dict(texts=TEXTS[:6], version=version, target=str(target), kill_at=kill_at, log=str(log))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env, capture_output=True, text=True,
                       timeout=120)
    if kill_at is None:
        assert p.returncode == 0, p.stderr
        return json.loads(log.read_text())
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr)


def test_a_hybrid_index_save_killed_at_each_step_loads_old_or_new(tmp_path):
    """A save killed before each file lands (and after the manifest) leaves the previous save or the new one, both
    halves intact and in step."""
    old = SemanticIndex(8, hybrid=True).add(["old%d" % i for i in range(4)], vectors(4, seed=3), texts=TEXTS[6:10])
    steps = _save_in_child(tmp_path, tmp_path / "dry", 1, None)
    assert steps.count("replace") == 4  # the FAISS file, the BM25 tokens, the items, the manifest
    new = SemanticIndex.load(tmp_path / "dry")
    q = vectors(2, seed=4)
    seen = []
    replaces = [i for i, s in enumerate(steps, start=1) if s == "replace"]
    for i in replaces + [len(steps)]:  # killed before each file lands, and before the last step
        d = tmp_path / ("kill-%02d" % i)
        old.save(d)
        _save_in_child(tmp_path, d, 1, i)
        loaded = SemanticIndex.load(d)
        ref = new if loaded.ids == new.ids else old
        assert loaded.ids == ref.ids, "killed at step %d" % i
        for mode, qv in (("bm25", None), ("hybrid", q)):
            for a, b in zip(loaded.search_array(qv, 4, texts=QUERIES[:2], mode=mode),
                            ref.search_array(qv, 4, texts=QUERIES[:2], mode=mode)):
                np.testing.assert_array_equal(a, b)
        seen.append("new" if ref is new else "old")
    assert seen == ["old"] * len(replaces) + ["new"] * (len(steps) > replaces[-1])
    assert len(steps) > replaces[-1]  # the last replace (the manifest) is followed by the folder's fsync


# ------------------------------------------------------------------------------------------------- errors


def test_bad_options_get_clear_errors():
    with pytest.raises(ValueError, match="HybridParams.fusion must be one of 'rrf', 'weighted'; got 'max'"):
        HybridParams(fusion="max")
    with pytest.raises(ValueError, match=r"HybridParams.alpha must lie in \[0, 1\]"):
        HybridParams(alpha=1.5)
    with pytest.raises(ValueError, match="HybridParams.rrf_k must be > 0"):
        HybridParams(rrf_k=0)
    with pytest.raises(ValueError, match="HybridParams.method must be one of"):
        HybridParams(method="bm42")
    with pytest.raises(TypeError, match="HybridParams.candidates must be an integer|candidates"):
        HybridParams(candidates=2.5)
    with pytest.raises(ValueError, match="HybridParams.stopwords='klingon'"):
        SemanticIndex(8, hybrid=HybridParams(stopwords="klingon"))
    with pytest.raises(TypeError, match="hybrid must be a HybridParams, True"):
        SemanticIndex(8, hybrid="bm25")

    plain = SemanticIndex(8).add(IDS[:3], vectors(3))
    with pytest.raises(ValueError, match="mode='bm25' needs a hybrid index"):
        plain.search(None, 2, texts="bank", mode="bm25")
    with pytest.raises(ValueError, match="texts= is for hybrid indexes"):
        plain.add(["x"], vectors(1), texts=["x"])
    with pytest.raises(ValueError, match="texts are used by mode='bm25' or 'hybrid'"):
        plain.search(vectors(1)[0], 2, texts="bank")
    with pytest.raises(ValueError, match="rrf_k only apply to mode='hybrid'; this search has mode='vector'"):
        plain.search(vectors(1)[0], 2, rrf_k=10)

    index = hybrid_index()
    q = vectors(2, seed=1)
    with pytest.raises(ValueError, match="this index is hybrid .* pass texts="):
        index.add(["x"], vectors(1))
    with pytest.raises(ValueError, match="texts has 2 entries but there are 1 ids"):
        index.add(["x"], vectors(1), texts=["a", "b"])
    with pytest.raises(ValueError, match="mode='hybrid' ranks by the query texts: pass texts="):
        index.search(q, 2)
    with pytest.raises(ValueError, match="there are 2 query vectors but 1 texts"):
        index.search(q, 2, texts=["bank"])
    with pytest.raises(ValueError, match="a single query vector needs a single text"):
        index.search(q[0], 2, texts=["bank"])
    with pytest.raises(ValueError, match="mode must be one of 'vector', 'bm25', 'hybrid'"):
        index.search(q, 2, texts=["a", "b"], mode="lexical")
    with pytest.raises(ValueError, match="alpha only apply to mode='hybrid'; this search has mode='vector'"):
        index.search(q, 2, mode="vector", alpha=0.3)
    with pytest.raises(ValueError, match="mode='bm25' ranks by the texts alone: pass queries=None"):
        index.search(q, 2, texts=["a", "b"], mode="bm25")
    with pytest.raises(ValueError, match="ef_search apply to the vector search"):
        index.search(None, 2, texts=["a", "b"], mode="bm25", ef_search=10)
    with pytest.raises(ValueError, match="queries .* are needed for mode='hybrid'"):
        index.search(None, 2, texts=["a", "b"])
    with pytest.raises(ValueError, match=r"HybridParams.alpha must lie in \[0, 1\]"):
        index.search(q, 2, texts=["a", "b"], fusion="weighted", alpha=2.0)
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        index.search(q, 2, texts=["a", 3])
    with pytest.raises(ValueError, match="the index is empty"):
        SemanticIndex(8, hybrid=True).search(None, 2, texts="a", mode="bm25")


def test_a_missing_bm25s_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ImportError, match=r"pip install 'ctxemb\[hybrid\]'"):
        SemanticIndex(8, hybrid=True)
    SemanticIndex(8)  # a plain index does not need it


# ------------------------------------------------------------------------------------------------- helpers, CLI


def test_build_sentence_index_hybrid_and_query_sentences_in_every_mode(tmp_path):
    from ctxemb.search import build_sentence_index, query_sentences
    from tests.test_search import FakeEmbedder

    emb = FakeEmbedder()
    texts = [t for t in TEXTS if t.split()]
    index = build_sentence_index(emb, texts, hybrid=True, show_progress_bar=False)
    assert index.hybrid == HybridParams()
    calls = len(emb.calls)
    bm25_hits = query_sentences(index, emb, "interest rates", k=3, mode="bm25")
    assert len(emb.calls) == calls  # nothing embedded for BM25 alone
    ids = [str(i) for i in range(len(texts))]
    ref = bm25s_reference(texts, ["interest rates"])[0]
    assert [h.id for h in bm25_hits] == [ids[i] for i in np.argsort(-ref, kind="stable") if ref[i] > 0][:3]
    assert len(bm25_hits) == 3
    hybrid = query_sentences(index, emb, ["interest rates", "muddy flood"], k=3, fusion="rrf", rrf_k=5)
    q = emb.embed_sentences(["interest rates", "muddy flood"])
    direct = index.search(q, 3, texts=["interest rates", "muddy flood"], rrf_k=5)
    assert [[h.id for h in r] for r in hybrid] == [[h.id for h in r] for r in direct]
    vector = query_sentences(index, emb, "muddy flood", k=3, mode="vector")
    assert [h.id for h in vector] == [h.id for h in index.search(q[1], 3, mode="vector")]
    with pytest.raises(ValueError, match="mode='bm25' needs a hybrid index"):
        query_sentences(build_sentence_index(emb, texts, show_progress_bar=False), emb, "x", mode="bm25")


def test_cli_build_hybrid_and_query_each_mode(tmp_path, monkeypatch, capsys):
    import argparse

    from ctxemb.cli import index as search_cli
    from tests.test_search import FakeEmbedder

    emb = FakeEmbedder()
    monkeypatch.setattr(search_cli, "load_embedder", lambda model, device, config=None: emb)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(t for t in TEXTS if t.split()) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    search_cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "idx"
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(out), "--hybrid", "--fusion", "weighted",
                              "--alpha", "0.3", "--no-progress"])
    assert args.func(args) == 0
    assert SemanticIndex.load(out).hybrid == HybridParams(fusion="weighted", alpha=0.3)
    for mode in ("bm25", "hybrid", "vector"):
        args = parser.parse_args(["index", "query", str(out), "central bank interest", "-k", "2", "--json",
                                  "--mode", mode])
        assert args.func(args) == 0
        hits = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert len(hits) == 2
        if mode == "bm25":
            assert hits[0]["id"] == "3"  # line 4, "the central bank raised its interest rates again"
    args = parser.parse_args(["index", "query", str(out), "bank", "--fusion", "rrf", "--rrf-k", "10"])
    assert args.func(args) == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["index", "query", str(out), "bank", "--alpha", "1.5"])
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "w"), "--words", "bank",
                              "--hybrid"])
    with pytest.raises(ValueError, match="--hybrid indexes whole lines"):
        args.func(args)
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "p"), "--alpha", "0.2"])
    with pytest.raises(ValueError, match="--alpha sets hybrid search settings: add --hybrid"):
        args.func(args)


def test_threads_adding_while_others_search_in_bm25_and_hybrid_mode():
    """Searches rebuild the BM25 matrix lazily after a change; concurrent searches and adds stay consistent."""
    import threading

    index = SemanticIndex(8, hybrid=True).add(["seed"], vectors(1), texts=["zebra seed"])
    errors, n_added = [], 60

    def adder():
        try:
            for i in range(n_added):
                index.add(["a%d" % i], vectors(1, seed=100 + i), texts=["zebra number %d" % i])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def searcher(mode):
        try:
            for _ in range(80):
                hits = index.search(None if mode == "bm25" else vectors(1, seed=7)[0], 5, texts="zebra", mode=mode)
                assert hits and all(h.id in index for h in hits) and len({h.id for h in hits}) == len(hits)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=adder)] + [threading.Thread(target=searcher, args=(m,))
                                                   for m in ("bm25", "hybrid", "bm25")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    got = {h.id for h in index.search(None, 100, texts="zebra", mode="bm25")}
    assert got == {"seed"} | {"a%d" % i for i in range(n_added)}


@pytest.mark.parametrize("on_disk", [False, True])
def test_hybrid_ivfpq_saves_and_loads_both_halves(tmp_path, on_disk):
    from ctxemb.search import IVFPQParams

    n, d = 80, 32
    texts = ["topic%d item%d shared" % (i % 7, i) for i in range(n)]
    ids = ["t%d" % i for i in range(n)]
    params = IVFPQParams(nlist=4, pq_m=8, nbits=6, nprobe=4, k_factor=20, on_disk=on_disk)
    index = SemanticIndex(d, params=params, hybrid=True, directory=tmp_path / "idx" if on_disk else None)
    index.add(ids, vectors(n, d), texts=texts, show_progress_bar=False)
    index.remove(["t3"])
    index.save(tmp_path / "idx")
    loaded = SemanticIndex.load(tmp_path / "idx")
    got = [h.id for h in loaded.search(None, 20, texts="topic3", mode="bm25")]
    assert sorted(got) == sorted("t%d" % i for i in range(n) if i % 7 == 3 and i != 3)
    q = vectors(2, d, seed=5)
    for a, b in zip(loaded.search_array(q, 5, texts=["topic1", "item7"]),
                    index.search_array(q, 5, texts=["topic1", "item7"])):
        np.testing.assert_array_equal(a, b)
    loaded.close()
    index.close()
