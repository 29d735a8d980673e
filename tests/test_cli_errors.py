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
    _fails(["index", "build", str(tmp_path / "none.txt"), "--out-dir", str(tmp_path / "i"), "--model", str(tiny)], capsys,
           code=1, match="none.txt")
    _fails(["index", "build", "c.txt", "--out-dir", "i", "--kind", "lsh"], capsys, code=2, match="invalid choice")
    _fails(["index", "query", str(tmp_path / "no-index"), "text"], capsys, code=1, match="no-index")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("[]")
    _fails(["index", "query", str(broken), "text"], capsys, code=1, match="broken")
    _fails(["index", "query", "i", "text", "-k", "0"], capsys, code=2, match="positive integer")


def test_embed_errors(capsys, tmp_path, tiny):
    texts = tmp_path / "t.txt"
    texts.write_text("the bank\n\nmoney\n")
    embed = ["embed", "--model", str(tiny), "--no-progress"]
    _fails(embed + ["--input", str(tmp_path / "none.txt"), "--output", str(tmp_path / "v.npy")], capsys, code=1,
           match="none.txt")
    _fails(embed + ["--input", str(texts), "--output", str(tmp_path / "v.npy")], capsys, code=1,
           match="line 2 of")
    _fails(embed + ["--input", str(texts), "--output", str(tmp_path / "v.txt")], capsys, code=1, match=".npy")
    _fails(embed + ["--input", str(texts), "--output", str(tmp_path / "no" / "v.npy")], capsys, code=1,
           match="does not exist")
    _fails(["embed", "--input", "t.txt", "--output", "v.npy", "--batch-size", "0"], capsys, code=2,
           match="positive integer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt", "tiny"]


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
    _fails(["vocab", "--out-dir", str(tmp_path / "v")], capsys, code=2, match="either training files or --language")
    _fails(["vocab", str(tmp_path / "none.txt"), "--out-dir", str(tmp_path / "v")], capsys, code=1, match="none.txt")
    _fails(["vocab", "--language", "ga", "--out-dir", str(tmp_path / "v")], capsys, code=2, match="NAME=FILE")
    _fails(["pretrain", "--config", str(tmp_path / "none.toml")], capsys, code=1, match="none.toml")
    _fails(["pretrain", "--tokenizer", str(tiny), "--out-dir", str(tmp_path / "o"), "--masking", "random"], capsys,
           code=2, match="invalid choice")
    _fails(["pretrain", "--tokenizer", str(tiny), "--out-dir", str(tmp_path / "o"), "--model", "{hidden"], capsys,
           code=1, match="--model must be a JSON object")
    _fails(["finetune", "cola", "--out", str(tmp_path / "f")], capsys, code=2, match="invalid choice")
    _fails(["finetune", "custom", "--out", str(tmp_path / "f")], capsys, code=1,
           match="needs --train-file and --dev-file")
    _fails(["predict", str(tmp_path / "no-model"), "text"], capsys, code=1, match="not found")
    _fails(["predict", str(tiny), "a", "b", "--pair", "c"], capsys, code=2, match="one second sentence per text")


# ---- every library error class: one line, exit 1; --debug: the traceback (issue 15) ----------------------------
def _library_errors():
    import json
    import pickle
    import zipfile
    from xml.etree.ElementTree import ParseError

    from ctxemb.core.validation import CorruptFileError
    from ctxemb.modeling.checkpoint import CheckpointError

    return [
        PermissionError(13, "Permission denied", "/data/store"),
        FileExistsError(17, "File exists", "/data/out"),
        IsADirectoryError(21, "Is a directory", "/data/x.npy"),
        OSError(28, "No space left on device"),
        CorruptFileError("config file /m/config.json is not valid JSON"),
        CheckpointError("cannot read weights file /m/model.safetensors: it is empty (0 bytes)"),
        json.JSONDecodeError("Expecting value", "{", 1),
        UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte"),
        ParseError("mismatched tag: line 7, column 2"),
        pickle.UnpicklingError("invalid load key, 'g'."),
        zipfile.BadZipFile("File is not a zip file"),
        EOFError(),
        RuntimeError("Error in faiss::FileIOReader::FileIOReader(const char*) at\n/project/faiss/impl/io.cpp:67: "
                     "Error: 'f' failed: could not open x for reading"),
        KeyError("no sense key 'bank%9'"),
        TypeError("texts[1] must be a str, got NoneType"),
        ImportError("faiss is needed: pip install faiss-cpu"),
        FloatingPointError("loss is nan at step 12"),
        MemoryError(),
    ]


@pytest.mark.parametrize("error", _library_errors(), ids=lambda e: type(e).__name__)
def test_every_library_error_class_is_one_line(capsys, monkeypatch, error):
    from ctxemb.cli import demo

    def boom(args):
        raise error

    monkeypatch.setattr(demo, "run_demo", boom)
    line = _fails(["demo"], capsys, code=1, match=f"ctxemb demo: error: {type(error).__name__}: ")
    assert line.split(": ", 3)[-1].strip(), line  # never an empty message
    with pytest.raises(type(error)):
        main(["--debug", "demo"])


def test_an_error_without_a_message_shows_its_cause(capsys, monkeypatch):
    from ctxemb.cli import demo

    def boom(args):
        try:
            raise ValueError("the real reason")
        except ValueError as e:
            raise EOFError() from e

    monkeypatch.setattr(demo, "run_demo", boom)
    _fails(["demo"], capsys, code=1, match="EOFError: ValueError: the real reason")


def test_a_bug_keeps_its_traceback(monkeypatch):
    from ctxemb.cli import demo

    def boom(args):
        raise AttributeError("'NoneType' object has no attribute 'x'")

    monkeypatch.setattr(demo, "run_demo", boom)
    with pytest.raises(AttributeError):
        main(["demo"])


def test_corrupt_model_and_data_files(capsys, tmp_path, tiny):
    import shutil

    bad = shutil.copytree(tiny, tmp_path / "bad-config")
    (bad / "config.json").write_bytes(b'{"model_type": "b\xe9rt"}')
    _fails(["demo", "--model", str(bad)], capsys, code=1, match="config.json is not valid UTF-8")
    bad = shutil.copytree(tiny, tmp_path / "bad-weights")
    (bad / "model.safetensors").write_bytes((bad / "model.safetensors").read_bytes()[:100])
    _fails(["demo", "--model", str(bad)], capsys, code=1, match="CheckpointError: cannot read weights file")
    bad = shutil.copytree(tiny, tmp_path / "bad-tokenizer")
    (bad / "tokenizer.json").write_bytes(b"garbage")
    _fails(["demo", "--model", str(bad)], capsys, code=1, match="tokenizer.json is not valid JSON")
    data = tmp_path / "wsd-data"
    data.mkdir()
    (data / "x.data.xml").write_text('<corpus><text id="d0"><sentence id="d0.s0"><wf>a</wf></sentence>')
    _fails(["wsd", "build", str(data), str(tmp_path / "store"), "--model", str(tiny)], capsys, code=1,
           match="x.data.xml is not well-formed XML: no element found")
    (data / "x.data.xml").write_text('<corpus><text id="d0"><sentence id="d0.s0"><instance lemma="a" pos="NOUN">a'
                                     '</instance></sentence></text></corpus>')
    _fails(["wsd", "build", str(data), str(tmp_path / "store"), "--model", str(tiny)], capsys, code=1,
           match="sentence d0.s0: the <instance> at word 0 ('a') has no id")


def test_duplicate_layers_on_the_command_line(capsys, tmp_path, tiny):
    data = tmp_path / "wsd-data"
    data.mkdir()
    (data / "x.data.xml").write_text('<corpus><text id="d0"><sentence id="d0.s0"><instance id="d0.s0.t0" lemma="bank" '
                                     'pos="NOUN">bank</instance></sentence></text></corpus>')
    (data / "x.gold.key.txt").write_text("d0.s0.t0 bank%1:14:00::\n")
    _fails(["wsd", "build", str(data), str(tmp_path / "store"), "--model", str(tiny), "--layers", "-1", "2"], capsys,
           code=1, match="name hidden state 2 twice: as -1 and as 2")


def test_help_and_a_mistyped_command_import_no_command_module():
    """`ctxemb --help` lists every command without importing torch, scikit-learn or FAISS (0.2 s, not 5 s)."""
    import subprocess
    import sys
    code = ("import sys\nfrom ctxemb.cli import main\n"
            "for argv in (['--help'], ['nosuch']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'sklearn', 'faiss', 'ctxemb.cli.wsd') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "finetune" in out.stdout and "invalid choice: 'nosuch'" in out.stderr
