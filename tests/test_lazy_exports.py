"""Packages that import their public names on first use: every name resolves, none is shadowed by a submodule."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from ctxemb.core.lazy import lazy_exports

LAZY_PACKAGES = ("ctxemb", "ctxemb.search", "ctxemb.search.late", "ctxemb.geometry", "ctxemb.evaluation.similarity",
                 "ctxemb.training")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_public_name_resolves_to_what_its_module_defines(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"
        assert name in dir(module)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        getattr(module, "nothing_here")


def test_a_public_name_that_is_also_a_submodule_is_refused(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "scores.py").write_text("def scores(): return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("pkg")
    try:
        with pytest.raises(ValueError, match=r"\['scores'\] are also submodules"):
            lazy_exports("pkg", {"scores": "pkg.scores"})
    finally:
        sys.modules.pop("pkg", None)
