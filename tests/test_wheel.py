"""The wheel works outside the repository: it carries what the library reads at run time (the default corpus of
``ctxemb analyze`` and the demo), its ``ctxemb`` script runs, and the version it reports is the package's.

The wheel is built with ``pip wheel --no-deps --no-build-isolation`` from a copy of the sources (so the build sees
only what a source distribution would hold and never writes into the checkout), then installed into a fresh virtual
environment in a temporary folder. That environment gets no packages of its own besides the wheel: a ``.pth`` file
puts this interpreter's site-packages after its own, so torch (pinned 2.13.0, the CPU build), numpy and FAISS come
from there instead of being downloaded (an unpinned torch would pull a multi-GB CUDA build). The commands run with
the temporary folder as working directory and without ``PYTHONPATH``, so nothing of the checkout is importable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import ctxemb
from tests.helpers import write_tiny_model

ROOT = Path(__file__).resolve().parent.parent


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "ctxemb", src / "ctxemb", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, cwd=src, env=_clean_env(), capture_output=True, text=True)
    wheels = list(out.glob("ctxemb-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed; returns its bin/ folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # This interpreter's packages (torch, numpy, faiss, ..., and the default model), after the environment's own.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "_ctxemb_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, env=_clean_env(), capture_output=True, text=True)
    return env_dir / "bin"


def test_the_wheel_carries_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ctxemb/data/analysis_corpus.txt" in names
    assert "ctxemb/py.typed" in names
    for source in ("int8_vnni.cpp", "attention.cpp", "common.h"):  # compiled on first use: the sources must travel
        assert f"ctxemb/runtime/kernels/{source}" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "examples/", "docs/")) for n in names)
    assert wheel.name.startswith(f"ctxemb-{ctxemb.__version__}-")


def _run(bin_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, env=_clean_env(), capture_output=True,
                          text=True, timeout=600)


def test_installed_package_is_the_wheel_not_the_checkout(installed, tmp_path):
    out = _run(installed, ["python", "-c", "import ctxemb; print(ctxemb.__file__)"], tmp_path)
    assert out.returncode == 0, out.stderr
    location = Path(out.stdout.strip())
    assert installed.parent in location.parents and ROOT not in location.parents


def test_version_and_demo_help(installed, tmp_path):
    version = _run(installed, ["ctxemb", "--version"], tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"ctxemb {ctxemb.__version__}", version
    demo = _run(installed, ["ctxemb", "demo", "--help"], tmp_path)
    assert demo.returncode == 0 and "usage: ctxemb demo" in demo.stdout, demo.stderr


def test_analyze_finds_its_default_corpus(installed, tmp_path):
    """``ctxemb analyze`` with its default corpus (the package data) on a tiny model, outside the checkout."""
    model = write_tiny_model(tmp_path / "tiny", num_hidden_layers=4)  # the default pools the last four
    result = _run(installed, ["ctxemb", "analyze", "--model", str(model), "--out-dir", "analysis", "--no-plots",
                              "--no-progress", "--n-pairs", "200"], tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "analysis" / "analysis.json").read_text(encoding="utf-8"))
    corpus = (ROOT / "ctxemb" / "data" / "analysis_corpus.txt").read_text(encoding="utf-8")
    n_words = sum(len(line.split()) for line in corpus.splitlines() if line.strip())
    assert report["n_vectors"] == n_words
