"""What commit 10c8c74 (before the package restructure) trained and saved still holds with this code.

The fixtures in ``tests/fixtures/legacy/10c8c74/`` were made by ``tests/fixtures/legacy/make_fixtures.py`` run with
10c8c74's code (see its docstring); this file checks them with the code under test:

- the tiny runs of ``runs.json`` (pretraining from scratch and continued, SupCon and BEM sense training, sequence and
  token fine-tuning: a few steps each, fp32, CPU, torch on one thread) rerun through ``ctxemb.cli.main`` with the same
  command lines and give the recorded weights (``weights.json``): the same tensor names, dtypes and shapes, and

  * on a machine like the one that recorded them (the same CPU flags avx2, avx512f, avx512_vnni, avx512_bf16 and
    AMX, the same torch CPU capability, torch version and thread count), byte-identical tensors (sha256 of every
    tensor and of the whole state);
  * elsewhere, each tensor's float64 sum and sum of absolute values within a relative 1e-4 (the sum measured against
    the sum of absolute values, which a sum near zero needs). Bytes cannot be asked for there: the matmul, softmax
    and reduction kernels that torch (oneDNN, MKL, its own vectorised code) picks depend on the CPU's instruction set
    (AVX2, AVX-512, AMX) and the torch version, and they round floats in a different order, so the last bits of the
    weights differ after one step, without any change of ctxemb's. The attention key biases are left out of the
    sums: their gradient is zero in exact arithmetic (a softmax over the keys does not change when the same q.b_k is
    added to every score), so what they get is rounding noise, which Adam scales up to steps of the learning
    rate's size; their sums differ by up to 11% (pretraining from scratch, where they stay near 1e-8) and 1.4e-4
    (fine-tuning) between two runs of 10c8c74 on this machine that differ only in torch's thread count, while every
    other tensor stays within 4e-7. ``CTXEMB_LEGACY_THREADS=2`` runs this file on two threads, which takes the sums
    path on the recording machine too;

- the saved fine-tuned models (a [CLS] classifier, a softmax tagger) predict what they predicted at 10c8c74, through
  ``ctxemb predict`` on texts, a JSONL file and a CoNLL file (the old flag spellings ``--no-progress-bar`` and
  ``--out`` included);
- the run directories killed (SIGKILL) after a checkpoint resume with ``--resume`` to their end, with no warning of
  changed settings, and give the weights the uninterrupted run recorded;
- the sense store predicts the recorded senses (``ctxemb predict STORE`` into a key file, ``ctxemb wsd tag``) and
  scores and searches as recorded through ``SenseStore``; the sentence index answers ``ctxemb index query`` as
  recorded; the flat, HNSW and sharded IVF-PQ indexes of given vectors return the recorded hits.

Where a later commit changed a default on purpose, SINCE_10C8C74 adds the flags that ask for 10c8c74's behaviour.
Scores compare exactly on a machine like the recording one (and the same faiss and numpy versions), else within
1e-5. Every test works on copies (the fixtures are copied to a temporary folder once; runs that write into a
fixture's directory copy it again), and the last test checks the fixture folder was not changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "legacy" / "10c8c74"
_spec = importlib.util.spec_from_file_location("legacy_make_fixtures", FIXTURE.parent / "make_fixtures.py")
make_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_fixtures)  # its hash and machine records (its ctxemb imports are inside its functions)

# What must match for bytes to: the CPU's instruction sets, torch's kernels, the thread count of the reductions.
WEIGHT_MACHINE = ("cpu_flags", "cpu_capability", "torch", "threads", "machine")
SEARCH_MACHINE = WEIGHT_MACHINE + ("faiss", "numpy")
SCORE_TOLERANCE = 1e-5
SUM_TOLERANCE = 1e-4
# Tensors whose gradient is zero in exact arithmetic: rounding noise moves them (see the module docstring).
NOISE_DRIVEN = ("attention.self.key.bias",)


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


FIXTURE_DIGEST = _digest(FIXTURE) if FIXTURE.is_dir() else None
pytestmark = pytest.mark.skipif(FIXTURE_DIGEST is None, reason="the legacy fixtures are not there")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """torch on one thread, as the fixtures were recorded (the reductions' split depends on the thread count);
    CTXEMB_LEGACY_THREADS=N for another count (the weights are then compared by their sums)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("CTXEMB_LEGACY_THREADS", "1")))
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> Path:
    """A copy of the fixture folder."""
    d = tmp_path_factory.mktemp("legacy") / "10c8c74"
    shutil.copytree(FIXTURE, d)
    return d


@pytest.fixture(scope="module")
def recorded(legacy, one_thread):
    runs = json.loads((legacy / "runs.json").read_text())
    weights = json.loads((legacy / "weights.json").read_text())
    predictions = json.loads((legacy / "predictions.json").read_text())
    here = make_fixtures.machine()
    there = weights["machine"]
    return {"runs": runs, "weights": weights, "predictions": predictions, "here": here, "there": there,
            "exact_weights": all(here.get(k) == there.get(k) for k in WEIGHT_MACHINE),
            "exact_search": all(here.get(k) == there.get(k) for k in SEARCH_MACHINE)}


@pytest.fixture(scope="module")
def wordnet_found():
    from ctxemb.wsd import wordnet

    try:
        wordnet.get_wordnet()
    except wordnet.WordNetNotFoundError as e:
        pytest.skip(str(e))


def _cli(argv, capsys=None) -> str:
    from ctxemb.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr().out if capsys is not None else ""
    assert code == 0, "ctxemb %s exited with %s" % (" ".join(map(str, argv)), code)
    return out


def _jsonl(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _same(got, want, exact: bool, where: str = "") -> None:
    """Equal structures; floats equal (exact) or within SCORE_TOLERANCE."""
    if isinstance(want, float) or isinstance(got, float):
        if exact or want is None or got is None:
            assert got == want, "%s: %r != %r" % (where, got, want)
        else:
            assert math.isclose(got, want, rel_tol=SCORE_TOLERANCE, abs_tol=SCORE_TOLERANCE), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), "%s: keys %s != %s" % (
            where, sorted(got) if isinstance(got, dict) else got, sorted(want))
        for k in want:
            _same(got[k], want[k], exact, "%s.%s" % (where, k))
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), "%s: %r != %r" % (where, got, want)
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, exact, "%s[%d]" % (where, i))
    else:
        assert got == want, "%s: %r != %r" % (where, got, want)


def _check_weights(path: Path, want: dict, exact: bool) -> None:
    got = make_fixtures.weight_record(path)
    assert sorted(got["tensors"]) == sorted(want["tensors"]), "tensor names differ"
    for name, w in want["tensors"].items():
        g = got["tensors"][name]
        assert (g["dtype"], g["shape"]) == (w["dtype"], w["shape"]), name
    if exact:
        differ = [n for n, w in want["tensors"].items() if got["tensors"][n]["sha256"] != w["sha256"]]
        assert not differ, "%d of %d tensors are not byte-identical: %s" % (len(differ), len(want["tensors"]),
                                                                           differ[:8])
        assert got["state_sha256"] == want["state_sha256"]
        return
    far = []
    for name, w in want["tensors"].items():
        g = got["tensors"][name]
        if name.endswith(NOISE_DRIVEN):
            continue
        scale = max(w["abs_sum"], 1e-30)
        if abs(g["abs_sum"] - w["abs_sum"]) > SUM_TOLERANCE * scale or abs(g["sum"] - w["sum"]) > SUM_TOLERANCE * scale:
            far.append((name, g["sum"], w["sum"], g["abs_sum"], w["abs_sum"]))
    assert not far, "tensors whose sums are beyond a relative %g: %s" % (SUM_TOLERANCE, far[:8])


# Flags added to a recorded command line to ask for 10c8c74's behaviour where a later commit changed a default on
# purpose. 454c613 gave 'finetune custom' a recipe chosen by the training set's size: below 1,000 rows
# finetune-custom-small.toml (batch 8, 20 epochs, lr 1e-4, the mean head, keep_best), else finetune-custom.toml
# (keep_best too). The recorded command line sets the batch, epochs, learning rate and head, but keep_best has no
# flag to turn it off, so the run would keep the best dev epoch's weights instead of the last ones (10c8c74 had no
# custom preset: the bare defaults, keep_best off). '--preset none' (accepted by 10c8c74 too) asks for the bare
# defaults.
# torch's dropout and the dense AdamW update (the defaults became the fused ops and the update by rows, which take
# another random path and round differently); the sequence run also computes its last layer whole (--full-last-layer:
# the default computes [CLS] alone there while training, with fewer dropout draws)
_TORCH_OPS = ["--fused-training", "off", "--embedding-update", "dense"]
SINCE_10C8C74 = {name: _TORCH_OPS for name in ("pretrain_scratch", "pretrain_continued", "wsd_supcon", "wsd_bem",
                                               "finetune_token")}
SINCE_10C8C74["finetune_sequence"] = ["--preset", "none", *_TORCH_OPS, "--full-last-layer"]


def _argv(recorded, name: str, inputs: Path | str, out: Path | str) -> list[str]:
    return make_fixtures.fill(recorded["runs"]["runs"][name] + SINCE_10C8C74.get(name, []), inputs, out)


def test_the_fixtures_record_what_this_test_needs(recorded):
    runs = recorded["runs"]["runs"]
    assert sorted(runs) == sorted(recorded["weights"]["runs"]) == sorted(
        ["pretrain_scratch", "pretrain_continued", "wsd_supcon", "wsd_bem", "finetune_sequence", "finetune_token"])
    assert recorded["weights"]["commit"].startswith("10c8c74")
    print("recorded on %s\nthis machine %s\nbytes compared: %s" % (recorded["there"], recorded["here"],
                                                                    recorded["exact_weights"]))


# ---- (a) the tiny runs give the recorded weights ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["pretrain_scratch", "pretrain_continued", "wsd_supcon", "wsd_bem",
                                  "finetune_sequence", "finetune_token"])
def test_a_tiny_run_gives_the_recorded_weights(name, legacy, recorded, tmp_path, request):
    if name.startswith("wsd_"):
        request.getfixturevalue("wordnet_found")
    out = tmp_path / name
    _cli(_argv(recorded, name, legacy / "inputs", out))
    want = recorded["weights"]["runs"][name]
    _check_weights(out / want["model"], want, recorded["exact_weights"])


# ---- (b) the saved models predict as recorded ------------------------------------------------------------------
def test_the_saved_sequence_model_predicts_as_recorded(legacy, recorded, tmp_path, capsys):
    want = recorded["predictions"]["sequence"]
    model = tmp_path / "sequence"
    shutil.copytree(legacy / "models" / "sequence", model)
    capsys.readouterr()
    _same(_jsonl(_cli(["predict", model, *want["texts"], "--json"], capsys)), want["json"], recorded["exact_weights"],
          "predict --json")
    out = tmp_path / "out.jsonl"
    _cli(["predict", model, "--input", legacy / "inputs" / "seq" / "predict.jsonl", "--output", out,
          "--no-progress-bar"])
    _same(_jsonl(out.read_text()), want["file"], recorded["exact_weights"], "predict --input")


def test_the_saved_tagger_predicts_as_recorded(legacy, recorded, tmp_path, capsys):
    want = recorded["predictions"]["token"]
    model = tmp_path / "token"
    shutil.copytree(legacy / "models" / "token", model)
    capsys.readouterr()
    _same(_jsonl(_cli(["predict", model, *want["texts"], "--json"], capsys)), want["json"], recorded["exact_weights"],
          "predict --json")
    out = tmp_path / "tagged.conll"
    _cli(["predict", model, "--conll", legacy / "inputs" / "tok" / "dev.conll", "--out", out])
    assert out.read_text() == want["conll"]


# ---- (c) a killed run resumes to the uninterrupted run's weights -----------------------------------------------
@pytest.mark.parametrize("name", ["pretrain_scratch", "finetune_sequence"])
def test_a_killed_run_resumes_to_the_uninterrupted_weights(name, legacy, recorded, tmp_path, caplog, monkeypatch):
    """The run was started in the fixture folder with relative paths (inputs/..., runs/NAME): resumed from a copy of
    the folder with the same command line, no setting differs from the checkpoint's."""
    folder = tmp_path / "10c8c74"
    shutil.copytree(legacy, folder)
    monkeypatch.chdir(folder)
    run = folder / "runs" / name
    (checkpoint,) = recorded["weights"]["runs"][name]["checkpoints"]
    assert [p.name for p in run.glob("checkpoint-*")] == [checkpoint] and not (run / "model").exists()
    with caplog.at_level(logging.INFO, logger="ctxemb"):
        _cli(_argv(recorded, name, "inputs", "runs/" + name) + ["--resume"])
    assert "resuming from" in caplog.text and checkpoint in caplog.text, caplog.text[-2000:]
    changed = [r.getMessage() for r in caplog.records if "changed" in r.getMessage()]
    assert not changed, changed
    want = recorded["weights"]["runs"][name]
    _check_weights(run / want["model"], want, recorded["exact_weights"])


# ---- (d) the sense store and the indexes answer as recorded ----------------------------------------------------
def test_the_sense_store_predicts_as_recorded(legacy, recorded, tmp_path, capsys, monkeypatch, wordnet_found):
    """The store records the model's relative path (inputs/base), as it was built in the fixture folder."""
    want = recorded["predictions"]["store"]
    folder = tmp_path / "10c8c74"
    shutil.copytree(legacy, folder)
    monkeypatch.chdir(folder)
    key = tmp_path / "eval.key"
    _cli(["predict", "store", "--input", "inputs/wsd/tiny_eval", "--output", key, "--format", "key",
          "--no-progress-bar"])
    assert key.read_text() == want["key"]
    if make_fixtures.nltk_resources() != recorded["there"]["nltk_data"]:
        pytest.skip("nltk's punkt / POS tagger data differ from the recording machine's: `wsd tag` tokenises "
                    "otherwise (%s, recorded %s)" % (make_fixtures.nltk_resources(), recorded["there"]["nltk_data"]))
    capsys.readouterr()
    got = _jsonl(_cli(["wsd", "tag", "--store", "store", "--json", "the river bank and the plant"], capsys))
    _same(got, want["tag"], recorded["exact_weights"], "wsd tag")


def test_the_sense_store_scores_and_searches_as_recorded(legacy, recorded):
    from ctxemb.wsd.sense_store import SenseStore

    want = recorded["predictions"]["store"]
    store = SenseStore.load(legacy / "store")
    assert len(store) == want["size"]
    queries = store.prepare_queries(np.load(legacy / "inputs" / "index" / "sense_queries.npy"))
    exact = recorded["exact_search"]
    _same([store.score(q, want["score_keys"]).tolist() for q in queries], want["scores"], exact, "score")
    scores, keys = store.search(queries, k=3)
    assert keys == want["search"]["keys"]
    _same(np.asarray(scores).tolist(), want["search"]["scores"], exact, "search")


def test_the_sentence_index_answers_queries_as_recorded(legacy, recorded, tmp_path, capsys, monkeypatch):
    """The index records the model's relative path (inputs/base), as it was built in the fixture folder."""
    want = recorded["predictions"]["indexes"]
    folder = tmp_path / "10c8c74"
    shutil.copytree(legacy, folder)
    monkeypatch.chdir(folder)
    capsys.readouterr()
    got = _cli(["index", "query", "indexes/text", *want["texts"], "-k", "3", "--json"], capsys)
    _same(_jsonl(got), want["text"], recorded["exact_search"], "index query")


@pytest.mark.parametrize("kind", ["flat", "hnsw", "sharded"])
def test_an_index_of_vectors_returns_the_recorded_hits(kind, legacy, recorded, tmp_path):
    from ctxemb.search import SemanticIndex

    shutil.copytree(legacy / "indexes" / kind, tmp_path / kind)
    index = SemanticIndex.load(tmp_path / kind)
    queries = np.load(legacy / "inputs" / "index" / "queries.npy")
    got = make_fixtures.hits(index.search(queries, k=5))
    want = recorded["predictions"]["indexes"][kind]
    assert [[h["id"] for h in row] for row in got] == [[h["id"] for h in row] for row in want]
    _same(got, want, recorded["exact_search"], kind)


def test_the_fixtures_were_not_changed():
    """Last: every test above worked on copies."""
    assert _digest(FIXTURE) == FIXTURE_DIGEST
