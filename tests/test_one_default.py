"""One default per setting: a shipped task's learning rate, epochs and maximum length are declared in one place,
its settings class (``TRAIN_DEFAULTS`` for the loop's, the field defaults for the rest), or its shipped recipe (the
preset) where it differs; the command line, ``--help``, the intermediate stage and Python read that one place."""

from __future__ import annotations

import ast
import dataclasses
import tomllib
from pathlib import Path

import pytest

from ctxemb.cli import build_parser
from ctxemb.cli._common import PRESETS_DIR, default_preset
from ctxemb.cli.finetune import finetune_config_from_args
from ctxemb.cli.pretrain import config_from_args as pretrain_config
from ctxemb.cli.wsd import train_config_from_args as wsd_config
from ctxemb.tasks.catalog import catalog
from ctxemb.training.config import TrainConfig

PACKAGE = Path(__file__).resolve().parent.parent / "ctxemb"
SETTINGS = ("learning_rate", "epochs", "max_length")
# where a default may be declared: the settings classes (their modules) and the loop's TrainConfig
DECLARING = {"training/config.py", "training/task_config.py"} | {
    f"tasks/{f}/config.py" for f in ("sequence", "token", "contrastive", "late_interaction", "multiple_choice",
                                     "pretraining", "sense")}
# files the finetune tasks need to build their settings (only paths; nothing is read)
NEEDS_FILES = {"custom", "conll-file", "squad-file", "late-interaction", "multiple-choice", "contrastive"}


def _class_default(cls, setting: str):
    """The settings class's own default of a setting (its field default; the loop's from ``TRAIN_DEFAULTS``)."""
    if setting == "learning_rate":
        return cls.TRAIN_DEFAULTS["learning_rate"]
    return {f.name: f.default for f in dataclasses.fields(cls)}.get(setting)


def _preset(entry) -> dict:
    recipe = {"finetune": "finetune", "pretrain": "pretrain", "wsd train": "wsd"}[entry.command]
    name = entry.name[len("wsd-"):] if entry.command == "wsd train" else entry.name
    found = default_preset(recipe, name)
    return tomllib.loads((PRESETS_DIR / f"{recipe}-{found}.toml").read_text()) if found else {}


def _built(entry, tmp_path, *extra):
    """The settings the command line builds for the task with no other flag than the run directory (and
    ``extra``)."""
    out = ["--out-dir", str(tmp_path / "run"), *extra]
    if entry.command == "pretrain":
        return pretrain_config(build_parser("pretrain").parse_args(["pretrain", *out, "--train-corpus", "c.txt", "--tokenizer", "vocab"]))
    if entry.command == "wsd train":
        recipe = entry.name[len("wsd-"):]
        return wsd_config(build_parser("wsd", "train").parse_args(["wsd", "train", "--recipe", recipe, *out]))
    files = ["--train-file", str(tmp_path / "t.jsonl"), "--dev-file", str(tmp_path / "d.jsonl")] \
        if entry.name in NEEDS_FILES else []
    return finetune_config_from_args(build_parser("finetune").parse_args(["finetune", entry.name, *out, *files]))[1]


@pytest.mark.parametrize("name", sorted(catalog()))
def test_a_shipped_task_runs_with_its_one_declared_default(name, tmp_path):
    entry = catalog()[name]
    if entry.name == "custom":
        pytest.skip("custom picks its recipe by the size of its data (tests/test_finetuning_small_data.py)")
    preset = _preset(entry)
    config = _built(entry, tmp_path)
    # the settings class's own values: the same command without the recipe
    bare = _built(entry, tmp_path, "--preset", "none") if entry.command == "finetune" and preset else config
    for setting in SETTINGS:
        read = (lambda c: c.train.learning_rate) if setting == "learning_rate" else \
            (lambda c: getattr(c, setting, None))  # noqa: E731
        table = preset.get("train", {}) if setting == "learning_rate" else preset
        expected = table.get(setting, read(bare))
        assert read(config) == expected, (f"{name}: {setting} runs as {read(config)}, declared {expected} in the "
                                          f"{'preset' if setting in table else 'settings class'}")
        if setting in table:  # a preset that restates the class's default declares it twice
            assert table[setting] != read(bare), f"{name}'s preset restates {setting} = {table[setting]}"


def test_no_preset_restates_a_default():
    for path in sorted(PRESETS_DIR.glob("*.toml")):
        d = tomllib.loads(path.read_text())
        cls = _class_of(path)
        for setting in SETTINGS:
            table = d.get("train", {}) if setting == "learning_rate" else d
            if setting in table:
                assert table[setting] != _class_default(cls, setting), f"{path.name} restates {setting}"


def _class_of(path: Path):
    kind, _, name = path.stem.partition("-")
    cat = catalog()
    if kind == "pretrain":
        return cat["mlm"].config_class
    if kind == "wsd":
        return cat[f"wsd-{name}"].config_class
    return cat[name].config_class if name in cat else cat["custom"].config_class


def test_defaults_are_declared_only_by_the_settings_classes():
    """No other module writes a number for these settings (a dict entry, a keyword, an assignment or a class
    attribute such as a task's own learning rate)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in DECLARING:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            pairs = []
            if isinstance(node, ast.Dict):
                pairs = [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
            elif isinstance(node, ast.Call):
                pairs = [(k.arg, k.value) for k in node.keywords]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                pairs = [(t.id if isinstance(t, ast.Name) else getattr(t, "attr", None), node.value) for t in targets]
            for key, value in pairs:
                if (key in SETTINGS or key == "default_learning_rate") and isinstance(value, ast.Constant) \
                        and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
                    found.append(f"{rel}:{node.lineno} {key} = {value.value}")
    assert not found, "defaults declared outside the settings classes:\n" + "\n".join(found)


def test_the_loop_defaults_come_from_the_settings_class():
    from ctxemb.training.task_config import loop_settings

    for entry in catalog().values():
        assert loop_settings(entry.config_class, {"out_dir": "x"}) == TrainConfig.from_dict(
            {**entry.config_class.TRAIN_DEFAULTS, "out_dir": "x"})
