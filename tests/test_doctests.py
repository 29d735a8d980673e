"""The examples in public docstrings run (``>>>`` lines), as ``pytest --doctest-modules`` would run them.

Every module of ``ctxemb`` whose source holds a ``>>>`` is imported and its doctests are run with ELLIPSIS and
NORMALIZE_WHITESPACE. Examples that need data or a trained model carry ``# doctest: +SKIP`` in the docstring itself.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ctxemb"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            rel = path.relative_to(PACKAGE.parent).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            names.append(".".join(parts))
    return names


MODULES = _modules_with_examples()


def test_some_docstrings_have_examples():
    assert MODULES, "no docstring example found: the collection is broken"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module) if t.examples]
    assert tests, f"{name} has '>>>' in its source but no doctest was collected"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"
