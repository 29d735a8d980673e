"""One home per helper: grep ctxemb/ for second copies of helpers that have one home.

- JSON files are read by :func:`ctxemb.core.validation.read_json_file` only: no other reader definition and no
  ``json.load(f)`` / ``json.loads(path.read_text())`` on a file elsewhere (``json.loads`` of a string that is not a
  whole file, such as one JSONL line, is fine).
- Integers are checked by ``core.validation.is_int`` / ``check_int``: no ``def _is_int`` copies.
- Choices are checked by ``core.validation.check_choice``: no inline "must be one of" messages.
- No ``max_steps=1`` placeholder in a training configuration (the run skeleton resolves the steps).
- One ``CheckpointError`` class (one error per meaning).
"""

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ctxemb"

CHECKS = {
    # name: (pattern, the files where it belongs)
    "JSON reader definition": (
        re.compile(r"^\s*def\s+_?read_json\w*\s*\("),
        {"core/validation.py"},
    ),
    "JSON file read outside read_json_file": (
        re.compile(r"json\.load\(|json\.loads\(.*\.read(_text)?\("),
        {"core/validation.py"},
    ),
    "_is_int copy": (
        re.compile(r"^\s*def\s+_is_int\b"),
        set(),
    ),
    "inline 'must be one of' check": (
        re.compile(r"must be one of"),
        {"core/validation.py"},
    ),
    "max_steps=1 placeholder": (
        re.compile(r"max_steps\s*=\s*1\b"),
        set(),
    ),
    "CheckpointError class": (
        re.compile(r"^\s*class\s+CheckpointError\b"),
        {"modeling/checkpoint.py"},
    ),
}


def _matches(pattern: re.Pattern) -> dict[str, list[int]]:
    """{module path relative to ctxemb/: [line numbers]} of the lines that match."""
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.setdefault(path.relative_to(PACKAGE).as_posix(), []).append(i)
    return found


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_one_home(check):
    pattern, home = CHECKS[check]
    found = _matches(pattern)
    extra = {m: lines for m, lines in found.items() if m not in home}
    assert not extra, f"{check}: " + ", ".join(f"ctxemb/{m}:{','.join(map(str, ls))}" for m, ls in sorted(extra.items()))


def test_the_one_json_reader_is_where_it_says():
    text = (PACKAGE / "core" / "validation.py").read_text(encoding="utf-8")
    assert len(re.findall(r"^def read_json_file\(", text, flags=re.M)) == 1
