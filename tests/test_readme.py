"""The README stays short, its links resolve, and its headline numbers are the ones in benchmarks/results/*.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = ROOT / "benchmarks" / "results"


def _json(name: str):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _row(rows, **match):
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (match, len(found))
    return found[0]


def _throughput():
    rows = _json("encode_throughput_all-MiniLM-L6-v2.json")["rows"]
    int8 = _row(rows, implementation="ctxemb int8")
    return [f"{int8['x_transformers_fp32']:.2f}x", f"cosine {int8['cosine_mean']:.3f}"]


def _wsd(model: str):
    datasets = _json(f"wsd_{model}.json")["configs"]["1nn+prior0.03"]["datasets"]
    return [f"SemEval-2007 {datasets['semeval2007']['F1']:.1f}", f"held-out SemCor {datasets['semcor_heldout']['F1']:.1f}"]


def _wsd_trained():
    results = _json("wsd_train_all-MiniLM-L6-v2_perpos.json")
    datasets = results["encoders"]["supcon"]["wsd"]["configs"]["1nn+prior-n0.015-v0.02-a0.04-r0.025"]["datasets"]
    minutes = results["training"]["supcon"]["training"]["train_seconds"] / 60
    return [f"SemEval-2007 {datasets['semeval2007']['F1']:.1f}",
            f"held-out SemCor {datasets['semcor_heldout']['F1']:.1f}", f"{minutes:.0f} min here"]


def _similarity():
    row = _row(_json("similarity.json")["results"], task="stsb", split="dev", metric="spearman", pooling="mean",
               layer="last", postprocess="none", model="all-MiniLM-L6-v2")
    return [f"{row['value']:.2f}"]


def _search():
    best = _json("search.json")["best"]
    row = _row(best, n=1_000_000, kind="ivfpq")
    return [f"recall@10 {row['recall_at_10']:.3f}", f"{row['speedup_vs_flat']:.1f}x"]


def _pretrain_speed():
    rows = _json("pretrain_speed.json")["rows"]
    return [f"{_row(rows, objective='nsp')['speed-up']:.1f}x (BERT with NSP)",
            f"{_row(rows, objective='full_sentences')['speed-up']:.1f}x (MLM)"]


def _ner():
    rows = _json("finetune.json")["token_rows"]
    crf = _row(rows, task="conll2003-ner", head="crf")
    softmax = _row(rows, task="conll2003-ner", head="softmax")
    return [f"CRF {crf['f1']:.1f}", f"softmax {softmax['f1']:.1f}"]


def _retrieval():
    rows = _json("retrieval_documents.json")["rows"]

    def dev_chosen(retriever):  # the row of ``retriever`` at its settings chosen on dev
        found = [r for r in rows if r["retriever"] == retriever and r["setting"].endswith("(dev)")]
        assert len(found) == 1, (retriever, len(found))
        return found[0]["heldout"]["mrr@10"]

    documents = "%s, whole text + best sentence (DocumentIndex)"
    bm25 = _row(rows, retriever="BM25 (bm25s, through the index)")["heldout"]["mrr@10"]
    whole = _row(rows, retriever="all-MiniLM-L6-v2 zero-shot", setting="cosine, max_seq_length 512")
    return [f"trained, whole text + best sentence {dev_chosen(documents % 'xquad-retrieval-lr5e-05-scale40'):.1f}",
            f"zero-shot: the same scoring {dev_chosen(documents % 'all-MiniLM-L6-v2 zero-shot'):.1f}",
            "fused with BM25 %.1f" % dev_chosen(
                "hybrid weighted (all-MiniLM-L6-v2 zero-shot, whole text + best sentence)"),
            f"whole text alone {whole['heldout']['mrr@10']:.1f}", f"BM25 {bm25:.1f}"]


def _scifact():
    rows = _json("beir_scifact.json")["rows"]

    def ndcg(key):
        return f"{_row(rows, key=key)['ndcg@10']:.2f}"

    return [f"no training) {ndcg('maxsim-zero-shot-truncate-256')}", f"one vector {ndcg('hybrid')}",
            f"BM25 {ndcg('bm25')}", f"one vector {ndcg('dense')}"]


def _late_vs_pylate():
    rows = _json("late_vs_pylate.json")["rows"]
    ours, peer = rows[0], rows[-1]
    assert ours["system"].startswith("ctxemb: index") and peer["system"].startswith("PyLate")
    return [f"build {ours['index_s']:.0f} s vs {peer['index_s']:.0f} s",
            f"{ours['bytes_per_token']:.0f} vs {peer['bytes_per_token']:,.0f} bytes per token",
            f"p50 {ours['latency_ms_p50']:.1f} ms vs {peer['latency_ms_p50']:.1f} ms",
            f"nDCG@10 {ours['ndcg@10']:.2f} vs {peer['ndcg@10']:.2f}"]


# results file (the README row links it) -> the strings that row must hold, computed from the JSON beside it
HEADLINES = {
    "encode_throughput_all-MiniLM-L6-v2.md": _throughput,
    "wsd_all-MiniLM-L6-v2.md": lambda: _wsd("all-MiniLM-L6-v2"),
    "wsd_all-mpnet-base-v2.md": lambda: _wsd("all-mpnet-base-v2"),
    "wsd_train_all-MiniLM-L6-v2_perpos.md": _wsd_trained,
    "similarity.md": _similarity,
    "search.md": _search,
    "pretrain_speed.md": _pretrain_speed,
    "finetune.md": _ner,
    "retrieval_documents.md": _retrieval,
    "beir_scifact.md": _scifact,
    "late_vs_pylate.md": _late_vs_pylate,
}


def _headline_rows() -> dict[str, str]:
    rows = {}
    for line in README.splitlines():
        m = re.search(r"\]\(benchmarks/results/([\w.\-]+\.md)\) \|$", line)
        if line.startswith("|") and m:
            rows[m.group(1)] = line
    return rows


def test_readme_is_short():
    assert len(README.splitlines()) <= 200


def test_every_headline_row_is_checked():
    assert set(_headline_rows()) == set(HEADLINES)


@pytest.mark.parametrize("name", sorted(HEADLINES))
def test_headline_number_matches_the_results_json(name):
    row = _headline_rows()[name]
    for expected in HEADLINES[name]():
        assert expected in row, f"README row for {name} should say {expected!r}: {row}"


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if re.match(r"[a-z]+:", target):
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_set_up_commands_exist():
    for script in ("scripts/demo.sh", "scripts/test.sh", ".ci/run"):
        assert f"{script}" in README and (ROOT / script).is_file(), script
