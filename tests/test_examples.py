"""The examples run: each script's fast form (`--fast`) in the default suite, its full size under `-m slow`.

Scripts run in this process (as ``python script.py ...`` would, through ``runpy``), which saves an interpreter and
a torch import per example; each writes only under ``tmp_path``. Examples that read the shared data folder skip
cleanly without it.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from ctxemb.core.paths import shared_data_dir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# script, needs the shared data folder, extra arguments (OUT is replaced by a temporary folder), text the output shows
CASES = {
    "embedding": ("embedding/embed_and_pool.py", False, [], "sentence cosine matrix"),
    "wsd": ("wsd/tag_senses.py", True, ["--store", "OUT/store"], "SemEval-2007 F1"),
    "search": ("search/search_sentences.py", True, ["--out", "OUT/index"], "uses of 'state'"),
    "pretraining": ("pretraining/pretrain_small.py", True, ["--out", "OUT"], "mask 1:"),
    "glue": ("finetuning/glue_sst2.py", True, ["--out", "OUT"], "Dull and far too long."),
    "own_tsv": ("finetuning/own_tsv.py", False, ["--out", "OUT"], "Cold food and a rude manager."),
    "ner": ("ner/conll_crf.py", True, ["--out", "OUT"], "tagged dev file"),
    "qa": ("qa/extractive_qa.py", True, ["--out", "OUT"], "How many points did the defense allow?"),
}


def run_example(script: str, args: list[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / script), *args])
    try:
        runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    except SystemExit as e:  # the scripts exit with a command's code when it fails
        assert not e.code, f"{script} exited with {e.code}"


def _case(name: str, tmp_path: Path, fast: bool):
    script, needs_data, extra, shows = CASES[name]
    if needs_data and shared_data_dir(required=False) is None:
        pytest.skip("shared data folder not found (set CTXEMB_DATA)")
    args = [a.replace("OUT", str(tmp_path)) for a in extra] + (["--fast"] if fast else [])
    return script, args, shows


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_fast(name, tmp_path, monkeypatch, capsys):
    script, args, shows = _case(name, tmp_path, fast=True)
    run_example(script, args, monkeypatch)
    assert shows in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_full_size(name, tmp_path, monkeypatch, capsys):
    script, args, shows = _case(name, tmp_path, fast=False)
    run_example(script, args, monkeypatch)
    assert shows in capsys.readouterr().out


def test_every_example_is_tested_and_documented():
    scripts = {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py")}
    assert scripts == {script for script, *_ in CASES.values()}
    for page in (EXAMPLES / "README.md", ROOT / "docs" / "examples.md"):
        overview = page.read_text(encoding="utf-8")
        for script in scripts:
            assert f"examples/{script}" in overview, (page, script)
        for preset in EXAMPLES.rglob("*.toml"):
            assert preset.name in overview, (page, preset)


def test_the_presets_are_valid_pretraining_configs():
    from ctxemb.tasks.pretraining.config import PretrainConfig

    for preset in sorted((EXAMPLES / "pretraining").glob("*.toml")):
        config = PretrainConfig.from_toml(preset)
        assert config.model["num_hidden_layers"] >= 1 and config.train.max_steps >= 1, preset
