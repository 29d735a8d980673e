"""PyLate parity: a late-interaction model saved by ctxemb, loaded by PyLate, gives ctxemb's MaxSim scores.

Two steps in two environments, run from the repository root:

1. ctxemb's venv: builds the models (or takes ``--model DIR``, a saved late-interaction model with its tokenizer),
   encodes a handful of queries and documents with ``LateInteractionEncoder.from_pretrained(DIR,
   precision="fp32")``, scores every pair by exact MaxSim (``ctxemb.search.late.maxsim``, what ``MaxSimReranker``
   computes) and writes ``OUT/scores.json`` (and the token vectors, ``OUT/CASE/vectors.npz``)::

       python -m benchmarks.peers.pylate_parity --out /tmp/pylate_parity

   Without ``--model`` it saves two models from the local all-MiniLM-L6-v2 with a fresh, seeded 128-dimension
   projection (``EncoderForLateInteraction(...).save_pretrained`` and the tokenizer's files), one per set of
   conventions: ``colbert`` (BERT's ``[unused0]``/``[unused1]`` markers, queries [MASK]-expanded to 32 tokens,
   documents cut at 180, punctuation not scored) and ``plain`` (no markers, no expansion, documents cut at 64,
   punctuation scored).

2. PyLate's venv (``/work/peers/pylate-venv``, see ``pylate_scifact.py`` for how it was built)::

       /work/peers/pylate-venv/bin/python -m benchmarks.peers.pylate_parity --pylate --scores /tmp/pylate_parity/scores.json

   loads each directory with ``pylate.models.ColBERT(model_name_or_path=DIR, local_files_only=True,
   device="cpu")``, encodes the same texts (``is_query`` True and False), scores every (query, document) pair with
   ``pylate.scores.colbert_scores`` on the document's own tokens (no padding, so no zero similarity stands in for a
   masked token), and compares: the number of token vectors of every text, the vectors, the scores, the ranking.
   It exits 1, naming the case and the pair, when a score differs by more than ``--tolerance`` (relative, 1e-4)
   or a text gets another number of vectors; else it writes ``benchmarks/results/pylate_parity.{json,md}``.

This step imports nothing of ctxemb's but the harness's writer (``ctxemb.core``'s standard-library modules, which
the PyLate venv imports from this checkout).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

from benchmarks import harness

NAME = "pylate_parity"
QUERIES = [
    "what does the bank do with my money?",
    "Who discovered penicillin, and when?",
    "naïve Bayes classifier",
    "how do bats find their way in the dark",
    "a very long question that goes on and on about rivers, banks, boats, houses, floods, money, interest rates, "
    "savers, penicillin, bats, echoes and classifiers, far beyond thirty-two tokens of query length",
]
DOCUMENTS = [
    "The bank raised its interest rates, and savers moved their money.",
    "Penicillin was discovered by Alexander Fleming in 1928 at St Mary's Hospital, London.",
    "A naïve Bayes classifier assumes the features are independent given the class!",
    "Bats navigate by echolocation: they emit calls and listen for the echoes.",
    "THE RIVER BANK FLOODED; boats drifted past the old houses...",
    "Hmm... (really?) -- yes!!! \"quoted\" 'single' {braces} [brackets] <angles> a@b #c $d %e ^f &g *h _i `j ~k |l",
    " ".join(["The flood reached the bank of the river, and the money in the bank's vault stayed dry."] * 12),
    "e = mc^2",
]
CASES = {
    "colbert": {"query_length": 32, "document_length": 180, "markers": ["[unused0]", "[unused1]"]},
    "plain": {"query_length": 32, "document_length": 64, "markers": None, "query_augmentation": False,
              "skip_punctuation": False},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pylate", action="store_true", help="step 2: score with PyLate and compare (PyLate's venv)")
    p.add_argument("--out", type=Path, default=Path("/tmp/pylate_parity"), help="step 1: where the models, the "
                   "vectors and scores.json go")
    p.add_argument("--model", type=Path, default=None, help="step 1: a saved late-interaction model to check "
                   "instead of building the two from all-MiniLM-L6-v2")
    p.add_argument("--seed", type=int, default=0, help="step 1: the fresh projection's seed")
    p.add_argument("--scores", type=Path, default=None, help="step 2: the scores.json step 1 wrote")
    p.add_argument("--tolerance", type=float, default=1e-4, help="step 2: largest relative score difference")
    p.add_argument("--results-dir", type=Path, default=None, help="step 2: where pylate_parity.{json,md} go "
                   "(default benchmarks/results)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (the machine is shared)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------- step 1: ctxemb's venv
def build_models(out: Path, seed: int) -> dict[str, Path]:
    """One saved model per case: all-MiniLM-L6-v2 with a fresh seeded projection and the case's conventions."""
    import torch

    from ctxemb.modeling.late_interaction import EncoderForLateInteraction
    from ctxemb.modeling.loading import load_tokenizer
    from ctxemb.models.head_options import LateInteractionConfig
    from ctxemb.models.hub import DEFAULT_MODEL, resolve_model_dir
    from ctxemb.models.tokenization import copy_tokenizer_files

    source = resolve_model_dir(DEFAULT_MODEL)
    tokenizer = load_tokenizer(source)
    dirs = {}
    for name, conventions in CASES.items():
        torch.manual_seed(seed)
        model = EncoderForLateInteraction.from_pretrained(source, dim=128)
        model.conventions = LateInteractionConfig.from_dict(conventions).to_dict()
        dirs[name] = model.save_pretrained(out / name / "model", tokenizer=tokenizer)
        copy_tokenizer_files(source, dirs[name], tokenizer)
    return dirs


def ctxemb_scores(model_dir: Path, vectors_file: Path) -> dict:
    """ctxemb's token vectors (saved to ``vectors_file``) and MaxSim scores of QUERIES x DOCUMENTS."""
    from ctxemb.search.late import LateInteractionEncoder, maxsim

    encoder = LateInteractionEncoder.from_pretrained(model_dir, precision="fp32", device="cpu")
    queries = list(encoder.encode_queries(QUERIES))
    documents = encoder.encode_documents(DOCUMENTS, show_progress_bar=False)
    scores = np.stack([maxsim(q, documents) for q in queries])  # (Q, N)
    np.savez(vectors_file, queries=np.concatenate(queries), query_offsets=_offsets(queries),
             documents=np.concatenate(documents), document_offsets=_offsets(documents))
    return {"model": str(model_dir), "conventions": encoder.config.to_dict(), "vectors": str(vectors_file),
            "scores": scores.tolist()}


def step_ctxemb(args) -> int:
    import torch

    import ctxemb

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    dirs = {"given": args.model} if args.model else build_models(args.out, args.seed)
    cases = {}
    for name, model_dir in dirs.items():
        (args.out / name).mkdir(parents=True, exist_ok=True)
        cases[name] = ctxemb_scores(Path(model_dir), args.out / name / "vectors.npz")
    payload = {"queries": QUERIES, "documents": DOCUMENTS, "cases": cases, "seed": None if args.model else args.seed,
               "ctxemb": {"version": ctxemb.__version__, "torch": torch.__version__, "threads": args.threads}}
    path = harness.write_json(args.out / "scores.json", payload)
    print(f"wrote {path}; next, in PyLate's venv: /work/peers/pylate-venv/bin/python -m benchmarks.peers."
          f"pylate_parity --pylate --scores {path}")
    return 0


# ---------------------------------------------------------------------------------------- step 2: PyLate's venv
def pylate_case(case: dict, queries: list[str], documents: list[str], tolerance: float) -> tuple[dict, list[str]]:
    """PyLate's vectors and scores of one case against ctxemb's: the row of the results table and the failures."""
    import torch
    from pylate import models, scores as pylate_scores

    model = models.ColBERT(model_name_or_path=case["model"], local_files_only=True, device="cpu")
    q = [torch.as_tensor(v) for v in model.encode(queries, is_query=True, show_progress_bar=False)]
    d = [torch.as_tensor(v) for v in model.encode(documents, is_query=False, show_progress_bar=False)]
    theirs = np.array([[float(pylate_scores.colbert_scores(qi[None], dj[None])[0, 0]) for dj in d] for qi in q])
    ours = np.asarray(case["scores"], dtype=np.float64)
    saved = np.load(case["vectors"])
    our_q = np.split(saved["queries"], saved["query_offsets"][1:-1])
    our_d = np.split(saved["documents"], saved["document_offsets"][1:-1])
    failures = [f"query {i}: ctxemb {len(a)} vectors, PyLate {len(b)}" for i, (a, b) in enumerate(zip(our_q, q))
                if len(a) != len(b)]
    failures += [f"document {j}: ctxemb {len(a)} vectors, PyLate {len(b)}" for j, (a, b) in enumerate(zip(our_d, d))
                 if len(a) != len(b)]
    same_shape = [(a, b.numpy()) for a, b in zip(our_q + our_d, q + d) if len(a) == len(b)]
    vector_diff = max(float(np.abs(a - b).max()) for a, b in same_shape) if same_shape else float("nan")
    abs_diff = np.abs(ours - theirs)
    rel_diff = abs_diff / np.maximum(np.maximum(np.abs(ours), np.abs(theirs)), 1e-12)
    for i, j in zip(*np.nonzero(rel_diff > tolerance)):
        failures.append(f"query {i} x document {j}: ctxemb {ours[i, j]:.6f}, PyLate {theirs[i, j]:.6f} (relative "
                        f"difference {rel_diff[i, j]:.2e} > {tolerance:g})")
    row = {"case": "", "pairs": f"{len(queries)} x {len(documents)}", "max_abs_diff": float(abs_diff.max()),
           "max_rel_diff": float(rel_diff.max()), "max_vector_diff": vector_diff,
           "vectors_per_text_equal": not any("vectors" in f for f in failures),
           "ranking_equal": bool((np.argsort(-ours, axis=1, kind="stable")
                                  == np.argsort(-theirs, axis=1, kind="stable")).all()),
           "score_range": [float(ours.min()), float(ours.max())], "passed": not failures,
           "pylate_read": {"query_prefix": model.query_prefix, "document_prefix": model.document_prefix,
                           "query_length": model.query_length, "document_length": model.document_length,
                           "do_query_expansion": model.do_query_expansion,
                           "attend_to_expansion_tokens": model.attend_to_expansion_tokens,
                           "skiplist_words": len(model.skiplist_words)},
           "ctxemb_conventions": case["conventions"], "scores_ctxemb": ours.tolist(), "scores_pylate": theirs.tolist()}
    return row, failures


def step_pylate(args) -> int:
    import torch

    if args.scores is None:
        raise SystemExit("--pylate needs --scores (the scores.json of step 1)")
    torch.set_num_threads(args.threads)
    data = json.loads(args.scores.read_text(encoding="utf-8"))
    rows, failures = [], []
    for name, case in data["cases"].items():
        row, failed = pylate_case(case, data["queries"], data["documents"], args.tolerance)
        rows.append({**row, "case": name})
        failures += [f"{name}: {f}" for f in failed]
    versions = {p: metadata.version(p) for p in ("pylate", "sentence-transformers", "transformers", "torch")}
    columns = ["case", "pairs", "max_abs_diff", "max_rel_diff", "max_vector_diff", "vectors_per_text_equal",
               "ranking_equal", "passed"]
    table = harness.markdown_table([{**r, **{k: f"{r[k]:.2e}" for k in columns[2:5]}} for r in rows], columns)
    print(table)
    if failures:
        print("PyLate differs from ctxemb:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    payload = {"name": NAME, "tolerance": args.tolerance, "queries": data["queries"], "documents": data["documents"],
               "rows": rows, "ctxemb_env": data.get("ctxemb"), "pylate_env": versions, "seed": data.get("seed"),
               "command": " ".join([sys.executable, *sys.argv])}
    markdown = "\n".join([
        "# PyLate parity", "",
        "A late-interaction model saved by ctxemb (`EncoderForLateInteraction.save_pretrained`: all-MiniLM-L6-v2 with "
        "a fresh, seeded 128-dimension projection), loaded by `pylate.models.ColBERT` from the directory alone. "
        f"{len(data['queries'])} queries x {len(data['documents'])} documents (punctuation, capitals, an accent, a "
        "query past the query length, a document past the document length), scored by exact MaxSim in ctxemb "
        "(`LateInteractionEncoder`, fp32) and by `pylate.scores.colbert_scores` on each document's own tokens. "
        "`colbert`: markers, [MASK] expansion to 32, documents cut at 180, punctuation not scored; `plain`: no "
        "markers, no expansion, documents cut at 64, punctuation scored.", "",
        table, "",
        f"Scores are sums of 32 cosines or fewer (ctxemb's range: {min(r['score_range'][0] for r in rows):.2f} to "
        f"{max(r['score_range'][1] for r in rows):.2f}); the check fails above a relative difference of "
        f"{args.tolerance:g} or on any text whose number of token vectors differs.", "",
        "Command: `python -m benchmarks.peers.pylate_parity` (ctxemb's venv), then "
        "`/work/peers/pylate-venv/bin/python -m benchmarks.peers.pylate_parity --pylate --scores scores.json`. "
        f"ctxemb {data['ctxemb']['version']} with torch {data['ctxemb']['torch']}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."])
    print(harness.write_results(NAME, payload, markdown, out_dir=args.results_dir))
    return 0


def _offsets(arrays) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)


def main(argv=None) -> int:
    args = parse_args(argv)
    return step_pylate(args) if args.pylate else step_ctxemb(args)


if __name__ == "__main__":
    sys.exit(main())
