"""Every command, given bad input, exits non-zero with one short line that names the problem, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxemb.cli import main
from tests.helpers import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures"


def _fails(argv, capsys, *, code: int, match: str) -> str:
    """Run the CLI in-process; a usage error from argparse exits via SystemExit(2), the rest returns a code."""
    try:
        got = main(argv)
    except SystemExit as e:
        got = e.code
    err = capsys.readouterr().err
    assert got == code, f"exit {got} (expected {code}) for {argv}; stderr: {err}"
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    last = lines[-1]
    assert match in last, f"{match!r} not in the last stderr line {last!r}"
    if code == 1:  # a library error: exactly one line
        assert len(lines) == 1, err
    return last


@pytest.fixture
def tiny(tmp_path):
    return write_tiny_model(tmp_path / "tiny")


def test_unknown_command_and_model(capsys, tmp_path):
    _fails(["nope"], capsys, code=2, match="invalid choice")
    _fails(["demo", "--model", str(tmp_path / "no-such-model")], capsys, code=1, match="not found")


def test_analyze_errors(capsys, tmp_path, tiny):
    _fails(["analyze", "--model", str(tiny), "--corpus", str(tmp_path / "missing.txt")], capsys, code=1,
           match="missing.txt")
    _fails(["analyze", "--projection-layer", "top"], capsys, code=2, match="--projection-layer must be an int")
    _fails(["analyze", "--n-pairs", "0"], capsys, code=2, match="expected a positive integer")
    _fails(["analyze", "--precision", "fp8"], capsys, code=2, match="invalid choice")


def test_wsd_errors(capsys, tmp_path, tiny):
    _fails(["wsd", "build", str(tmp_path / "no-corpus"), str(tmp_path / "out"), "--model", str(tiny)], capsys,
           code=1, match="no-corpus")
    _fails(["wsd", "build", "x", "y", "--held-out-fraction", "1.5"], capsys, code=2, match="fraction in [0, 1)")
    _fails(["wsd", "build", "x", "y", "--plain", "--gloss", "average"], capsys, code=1, match="--plain")
    _fails(["wsd", "eval", str(tmp_path / "no-store"), str(tmp_path)], capsys, code=1, match="no-store")
    bad = tmp_path / "bad-store"
    bad.mkdir()
    (bad / "meta.json").write_text("{not json")
    _fails(["wsd", "tag", "--store", str(bad), "the bank"], capsys, code=1, match="bad-store")
    _fails(["wsd", "eval", "store"], capsys, code=2, match="required")


def test_similarity_errors(capsys):
    _fails(["similarity", "eval", "--tasks", "wic,nope"], capsys, code=2, match="unknown value(s) nope")
    _fails(["similarity", "eval", "--tasks", "scws"], capsys, code=2, match="needs --scws")
    _fails(["similarity", "eval", "--batch-size", "-3"], capsys, code=2, match="positive integer")


def test_index_errors(capsys, tmp_path, tiny):
    _fails(["index", "build", str(tmp_path / "none.txt"), "--out", str(tmp_path / "i"), "--model", str(tiny)], capsys,
           code=1, match="none.txt")
    _fails(["index", "build", "c.txt", "--out", "i", "--kind", "lsh"], capsys, code=2, match="invalid choice")
    _fails(["index", "query", str(tmp_path / "no-index"), "text"], capsys, code=1, match="no-index")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("[]")
    _fails(["index", "query", str(broken), "text"], capsys, code=1, match="broken")
    _fails(["index", "query", "i", "text", "-k", "0"], capsys, code=2, match="positive integer")


def test_fill_mask_errors(capsys, tmp_path, tiny):
    _fails(["fill-mask", str(tmp_path / "none"), "a [MASK]"], capsys, code=1, match="not found")
    _fails(["fill-mask", str(tiny), "a [MASK] b"], capsys, code=1, match="no masked-LM head")
    _fails(["fill-mask", str(tiny), "a b", "-k", "0"], capsys, code=2, match="positive integer")


def test_debug_shows_the_traceback(capsys, tmp_path):
    with pytest.raises(FileNotFoundError):
        main(["--debug", "demo", "--model", str(tmp_path / "no-such-model")])


def test_python_dash_m_runs_the_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, "-m", "ctxemb", "index", "query", str(tmp_path / "missing"), "q"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "ctxemb index: error:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_training_commands_errors(capsys, tmp_path, tiny):
    _fails(["vocab", "--out", str(tmp_path / "v")], capsys, code=2, match="either training files or --language")
    _fails(["vocab", str(tmp_path / "none.txt"), "--out", str(tmp_path / "v")], capsys, code=1, match="none.txt")
    _fails(["vocab", "--language", "ga", "--out", str(tmp_path / "v")], capsys, code=2, match="NAME=FILE")
    _fails(["pretrain", "--config", str(tmp_path / "none.toml")], capsys, code=1, match="none.toml")
    _fails(["pretrain", "--tokenizer", str(tiny), "--out-dir", str(tmp_path / "o"), "--masking", "random"], capsys,
           code=2, match="invalid choice")
    _fails(["pretrain", "--tokenizer", str(tiny), "--out-dir", str(tmp_path / "o"), "--model", "{hidden"], capsys,
           code=1, match="--model must be a JSON object")
    _fails(["finetune", "cola", "--out", str(tmp_path / "f")], capsys, code=2, match="invalid choice")
    _fails(["finetune", "custom", "--out", str(tmp_path / "f")], capsys, code=1, match="needs train_file and dev_file")
    _fails(["predict", str(tmp_path / "no-model"), "text"], capsys, code=1, match="not found")
    _fails(["predict", str(tiny), "a", "b", "--pair", "c"], capsys, code=2, match="one second sentence per text")
