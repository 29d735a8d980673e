"""The command line documents itself: every option has help text, and ``ctxemb --version`` is the package's version."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import ctxemb
from ctxemb._version import __version__
from ctxemb.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent



def walk_options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (command path, action) of the argparse tree below ``parser``, sub-commands included; ``-h`` left out."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk_options(sub, path + (name,))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path), action


def _key(path: str, action: argparse.Action) -> tuple[str, str]:
    return path, action.option_strings[0] if action.option_strings else action.dest


@pytest.fixture(scope="module")
def options():
    return list(walk_options(build_parser()))


def test_the_tree_is_complete(options):
    paths = {p for p, _ in options}
    for command in ("demo", "analyze", "wsd build", "wsd eval", "wsd tag", "wsd train", "similarity eval", "embed",
                    "index build", "index query", "vocab", "pretrain", "fill-mask", "finetune", "predict"):
        assert command in paths, command
    assert len(options) > 200


def test_every_option_has_help(options):
    missing = sorted(_key(p, a) for p, a in options
                     if (not a.help or not a.help.strip() or a.help == argparse.SUPPRESS))
    assert not missing, "options without help text (add help=...): %s" % missing


def test_help_texts_format(options):
    """A help string with a bad %-placeholder only fails when --help is printed: format every one now."""
    for path, action in options:
        if action.help and action.help != argparse.SUPPRESS:
            params = dict(vars(action), prog="ctxemb")
            action.help % params  # raises on a broken placeholder


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ctxemb {ctxemb.__version__}"
    assert ctxemb.__version__ == __version__


def test_version_flag_as_a_program():
    out = subprocess.run([sys.executable, "-m", "ctxemb", "--version"], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.strip() == f"ctxemb {ctxemb.__version__}"


def test_pyproject_takes_its_version_from_the_package():
    """One place holds the version: pyproject.toml reads it from ctxemb/_version.py."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ctxemb._version.__version__"}
