"""The package's import graph: imports point one way (down the layers below) and no module cycle exists.

Every ``import ctxemb...`` / ``from ctxemb... import`` counts, including lazy imports inside functions: a lazy
import hides a cycle from Python, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ctxemb"

# Lower layers never import higher ones; a layer may import its own layer (no cycles, checked separately).
LAYERS: list[tuple[str, ...]] = [
    ("ctxemb.core", "ctxemb._version", "ctxemb._compat"),
    ("ctxemb.io", "ctxemb.metrics"),
    ("ctxemb.models",),
    ("ctxemb.modeling",),
    ("ctxemb.runtime",),
    ("ctxemb.embedding.embedder",),
    ("ctxemb.training",),
    ("ctxemb.geometry", "ctxemb.search"),
    ("ctxemb.wsd",),
    ("ctxemb.tasks",),
    ("ctxemb.evaluation",),
    ("ctxemb.cli", "ctxemb.__main__"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int | None:
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                best = rank
    return best


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ctxemb"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("ctxemb"):
                # `from ctxemb.wsd import wordnet` imports the submodule ctxemb.wsd.wordnet (and runs the package's
                # __init__, which the package's own layer covers)
                base = PACKAGE.parent / name.replace(".", "/")
                subs = [a.name for a in node.names
                        if (base / (a.name + ".py")).is_file() or (base / a.name / "__init__.py").is_file()]
                found.update(name + "." + sub for sub in subs)
                if len(subs) < len(node.names):
                    found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in _imports(path, name) if m in modules and m != name}
    return graph


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in _graph() if m != "ctxemb" and _layer(m) is None)
    assert not unplaced, f"modules missing from LAYERS in {__file__}: {unplaced}"


def test_imports_point_down():
    upward = []
    for mod, deps in _graph().items():
        if mod == "ctxemb":  # the top-level package re-exports lazily from every layer
            continue
        for dep in deps:
            if dep == "ctxemb":
                upward.append(f"{mod} imports the top-level package")
            elif _layer(dep) > _layer(mod):
                upward.append(f"{mod} (layer {_layer(mod)}) imports {dep} (layer {_layer(dep)})")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_no_import_cycles():
    graph = _graph()
    # a package's __init__ re-exporting its own submodules is not a cycle of ideas: leave those edges out
    edges = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_library_modules_do_not_print_or_exit():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        mod = _module_name(path)
        if _layer(mod) == len(LAYERS) - 1:  # the CLI may print and exit
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{mod}:{node.lineno} print()")
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                    offenders.append(f"{mod}:{node.lineno} raise SystemExit")
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.name == "argparse" for a in node.names) \
                    or isinstance(node, ast.ImportFrom) and node.module == "argparse":
                offenders.append(f"{mod}:{node.lineno} imports argparse")
    assert not offenders, "library code that prints, exits or parses arguments:\n" + "\n".join(sorted(offenders))
