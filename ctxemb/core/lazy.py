"""Names of a package imported on first use (PEP 562), so that importing the package stays cheap (no torch for a
``--help`` or a process that only searches an index).

    _EXPORTS = {"SemanticIndex": "ctxemb.search.index", ...}
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps a public name to the module defining it.

    Raises:
        ValueError: a public name that is also a submodule of the package (importing the submodule would bind its
            name to the module, shadowing the function or class of that name).
    """
    module = sys.modules[package]
    here = Path(module.__file__).parent
    clashes = [n for n in exports if (here / f"{n}.py").exists() or (here / n / "__init__.py").exists()]
    if clashes:
        raise ValueError(f"{package}: the public names {clashes} are also submodules; rename one of them")

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(module, name, value)  # the next lookup is an ordinary attribute
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__
