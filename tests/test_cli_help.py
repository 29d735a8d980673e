"""The command line documents itself: every option has help text, and ``ctxemb --version`` is the package's version."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ctxemb
from ctxemb._version import __version__
from ctxemb.cli import build_parser, main
from ctxemb.tasks.catalog import FINETUNE_TASKS

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


def all_options():
    """Every (command path, action): the command tree, and each fine-tuning task's own flags (``ctxemb finetune
    TASK``, a parser of their own built from the task's settings)."""
    from ctxemb.cli.finetune import task_parser

    return [*walk_options(build_parser()),
            *((f"finetune {task}", a) for task in FINETUNE_TASKS for _, a in walk_options(task_parser(task)))]


@pytest.fixture(scope="module")
def options():
    return all_options()


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


# ---- --help answers at once: a parser imports only what its flags need -----------------------------------------
HELP_PATHS = ("", "demo", "analyze", "wsd", "wsd build", "wsd eval", "wsd tag", "wsd train", "similarity",
              "similarity eval", "embed", "index", "index build", "index query", "index train-quantizer",
              "index add-shard", "index merge", "retrieval", "retrieval eval", "retrieval pairs", "vocab", "pretrain",
              "fill-mask", "finetune", "predict", *(f"finetune {task}" for task in FINETUNE_TASKS))
# libraries a --help must not import (each costs from a tenth of a second to seconds)
HEAVY = ("torch", "transformers", "sklearn", "scipy", "pandas", "faiss", "nltk", "matplotlib")
# the bound asserted; --help takes about half a second on a quiet 2-core machine (interpreter start included), and
# CI machines vary
HELP_SECONDS = 3.0


def _help_cases():
    for path in HELP_PATHS:
        yield pytest.param(path, id=path or "ctxemb")


def test_the_help_cases_are_every_command(options):
    paths = {p for p, _ in options} | {" ".join(p.split()[:1]) for p, _ in options}
    assert paths == set(HELP_PATHS)


@pytest.mark.parametrize("path", list(_help_cases()))
def test_help_is_quick_and_imports_no_heavy_library(path):
    import time

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ctxemb", *path.split(), "--help"],
                          capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"usage: ctxemb {path}".rstrip())
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not [m for m in HEAVY if m in imported], f"`ctxemb {path} --help` imports {sorted(set(HEAVY) & imported)}"
    assert seconds < HELP_SECONDS, f"`ctxemb {path} --help` took {seconds:.2f} s"


def test_help_texts_are_plain_text(options):
    """argparse prints descriptions as they are: no reST markup from a docstring."""
    from ctxemb.cli.finetune import task_parser

    parser = build_parser()
    parsers = [parser, *(task_parser(task) for task in FINETUNE_TASKS)]
    for p in parsers:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    texts = [t for p in parsers for t in (p.description, p.epilog) if t]
    texts += [a.help for _, a in options if a.help]
    assert not [t for t in texts if "``" in t or re.search(r":(class|func|mod|meth|data):`", t)]


def test_index_help_lists_every_subcommand():
    parser = build_parser("index", "")
    index = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["index"]
    for name in ("build", "query", "train-quantizer", "add-shard", "merge"):
        assert name in index.description and re.search(rf"^ +{name}\b", index.format_help(), re.M)


# ---- one spelling per option; the old spellings still parse, warn, and are not shown ---------------------------
@pytest.mark.parametrize("argv, old, new, dest, value", [
    (["predict", "m", "--out", "f.conll"], "--out", "--output", "output", "f.conll"),
    (["predict", "m", "--no-progress-bar"], "--no-progress-bar", "--no-progress", "no_progress", True),
    (["index", "build", "c.txt", "--out", "i"], "--out", "--out-dir", "out", "i"),
    (["index", "merge", "--quantizer", "q", "--out", "i", "p"], "--out", "--out-dir", "out", "i"),
    (["vocab", "c.txt", "--out", "v"], "--out", "--out-dir", "out", "v"),
    (["retrieval", "pairs", "d", "--queries", "q", "--out", "r.jsonl"], "--out", "--output", "out", Path("r.jsonl")),
    (["retrieval", "eval", "d", "--k", "7"], "--k", "--top-k", "k", 7),
])
def test_old_spellings_still_work_and_warn(argv, old, new, dest, value, caplog):
    import logging

    command, subcommand = argv[0], argv[1] if argv[0] in ("index", "retrieval") else ""
    parser = build_parser(command, subcommand)
    with caplog.at_level(logging.WARNING, logger="ctxemb.cli"):
        args = parser.parse_args(argv)
    assert getattr(args, dest) == value
    assert f"{old} is deprecated" in caplog.text and f"use {new}" in caplog.text
    leaf = parser
    for word in argv[:2] if subcommand else argv[:1]:
        leaf = next(a for a in leaf._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    shown = leaf.format_help()
    assert new in shown and not re.search(rf"{re.escape(old)}\b(?!-)", shown.replace(new, ""))


def test_predict_writes_a_tagged_conll_file_to_output_only_with_conll(tmp_path, capsys):
    # --output is the one output flag of predict: the predictions of --input FILE, or a tagger's tagged --conll FILE
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["BertForSequenceClassification"]}')
    assert main(["predict", str(model), "a text", "--output", str(tmp_path / "o.conll")]) == 2
    assert "--output is where the predictions for --input FILE, or a tagger's tagged --conll FILE" \
        in capsys.readouterr().err
