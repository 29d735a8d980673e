"""The package's shape and import graph, checked from the source alone (nothing of ctxemb is imported).

- Imports point one way: down the layers of :data:`LAYERS`, which ``docs/architecture.md`` lists too.
- No cycle, between modules or between packages (a task family under ``ctxemb/tasks/`` counts as a package).
- Every ``import ctxemb...`` names a module that exists.
- The top level of ``ctxemb/`` holds packages and the entry modules; every package's ``__init__.py`` opens with a
  docstring that states its idea; no module is over 600 lines.
- Library code neither prints, exits nor parses arguments (the CLI does).

Every ``import ctxemb...`` / ``from ctxemb... import`` counts, including lazy imports inside functions: a lazy
import hides a cycle from Python, not from a reader.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ctxemb"
ARCHITECTURE_PAGE = ROOT / "docs" / "architecture.md"

# Lower layers never import higher ones; a layer may import its own layer (no cycles, checked separately).
# docs/architecture.md lists the same layers (test_the_architecture_page_lists_these_layers).
LAYERS: list[tuple[str, ...]] = [
    ("ctxemb.core", "ctxemb._version"),
    ("ctxemb.io", "ctxemb.metrics"),
    ("ctxemb.models",),
    ("ctxemb.modeling",),
    ("ctxemb.runtime",),
    ("ctxemb.embedding",),
    ("ctxemb.training",),
    ("ctxemb.geometry", "ctxemb.search"),
    ("ctxemb.wsd",),
    ("ctxemb.tasks",),
    ("ctxemb.evaluation",),
    # the old module names lead to every layer, so their aliases sit on top (ctxemb/__init__.py installs them)
    ("ctxemb.cli", "ctxemb.__main__", "ctxemb._compat"),
]

# The only modules at the top level of ctxemb/; everything else lives in a package.
ENTRY_MODULES = {"__init__.py", "__main__.py", "_version.py", "_compat.py"}
# The command line: the only modules that may print, exit and parse arguments.
CLI = ("ctxemb.cli", "ctxemb.__main__")
MAX_LINES = 600


# ---- the source -------------------------------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


_WATCHED = (ast.Import, ast.ImportFrom, ast.Call, ast.Raise)


@cache
def _sources() -> dict[str, tuple[Path, str, ast.Module, list[ast.AST]]]:
    """Module name -> (path, text, syntax tree, its import, call and raise nodes) of every module of ctxemb, each
    file read, parsed and walked once."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        out[_module_name(path)] = (path, text, tree, [n for n in ast.walk(tree) if isinstance(n, _WATCHED)])
    return out


def _layer(module: str) -> int | None:
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                best = rank
    return best


def _imports(path: Path, module: str, nodes: list[ast.AST]) -> set[str]:
    """The dotted names of ctxemb that the module imports (a submodule where ``from package import sub`` names one)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "ctxemb")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.split(".")[0] == "ctxemb":
                # `from ctxemb.wsd import wordnet` imports the submodule ctxemb.wsd.wordnet (and runs the package's
                # __init__, which the package's own layer covers)
                base = PACKAGE.parent / name.replace(".", "/")
                subs = [a.name for a in node.names
                        if (base / (a.name + ".py")).is_file() or (base / a.name / "__init__.py").is_file()]
                found.update(name + "." + sub for sub in subs)
                if len(subs) < len(node.names):
                    found.add(name)
    return found


@cache
def _all_imports() -> dict[str, frozenset[str]]:
    """Module -> every ctxemb name it imports, whether or not a module of that name exists."""
    return {name: frozenset(_imports(path, name, nodes)) for name, (path, _, _, nodes) in _sources().items()}


@cache
def _graph() -> dict[str, frozenset[str]]:
    """Module -> the modules of ctxemb it imports (itself left out)."""
    modules = _sources()
    return {name: frozenset(m for m in deps if m in modules and m != name) for name, deps in _all_imports().items()}


def _edges() -> dict[str, set[str]]:
    """The graph without the edges into a module's own enclosing packages: a package's ``__init__`` re-exporting its
    submodules (which then import the package) is not a cycle of ideas."""
    return {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in _graph().items()}


def _package_of(module: str) -> str:
    """The package a module belongs to: its first two dotted components (``ctxemb.search``), and for the task
    families the family (``ctxemb.tasks.sequence``; a module directly under ``ctxemb/tasks/`` is its own)."""
    parts = module.split(".")
    if parts[:2] == ["ctxemb", "tasks"] and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
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
    return cycles


# ---- imports ----------------------------------------------------------------------------------------------------
def test_every_module_has_a_layer():
    unplaced = sorted(m for m in _graph() if m != "ctxemb" and _layer(m) is None)
    assert not unplaced, f"modules missing from LAYERS in {__file__}: {unplaced}"


def test_every_import_of_ctxemb_names_a_module():
    # an import of a name that is no module would fall out of the graph unseen, and fails when it runs
    modules = _sources()
    missing = sorted(f"{mod} imports {name}" for mod, names in _all_imports().items()
                     for name in names if name not in modules)
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def test_imports_point_down():
    upward = []
    for mod, deps in _graph().items():
        if mod == "ctxemb":  # the top-level package re-exports lazily from every layer
            continue
        for dep in deps:
            if dep == "ctxemb":
                upward.append(f"{mod} imports the top-level package")
            elif _layer(dep) is not None and _layer(mod) is not None and _layer(dep) > _layer(mod):
                upward.append(f"{mod} (layer {_layer(mod) + 1}) imports {dep} (layer {_layer(dep) + 1})")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_no_import_cycles():
    cycles = _cycles(_edges())
    assert not cycles, f"import cycles: {cycles}"


def test_no_import_cycles_between_packages():
    # every module collapsed to its package (a task family counts as one): two packages that import each other, even
    # through different modules, are one idea split in two or two ideas tangled
    through: dict[tuple[str, str], list[str]] = {}
    for mod, deps in _edges().items():
        for dep in deps:
            a, b = _package_of(mod), _package_of(dep)
            if a != b:
                through.setdefault((a, b), []).append(f"{mod} -> {dep}")
    edges: dict[str, set[str]] = {}
    for a, b in through:
        edges.setdefault(a, set()).add(b)
    problems = []
    for comp in _cycles(edges):
        lines = [f"cycle between {', '.join(comp)}:"]
        for (a, b), via in sorted(through.items()):
            if a in comp and b in comp:
                more = f" (+{len(via) - 3} more)" if len(via) > 3 else ""
                lines.append(f"  {a} -> {b}: {'; '.join(sorted(via)[:3])}{more}")
        problems.append("\n".join(lines))
    assert not problems, "import cycles between packages:\n" + "\n".join(problems)


def test_library_modules_do_not_print_or_exit():
    offenders = []
    for mod, (_, _, _, nodes) in _sources().items():
        if any(mod == c or mod.startswith(c + ".") for c in CLI):
            continue
        for node in nodes:
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


# ---- the shape of the tree --------------------------------------------------------------------------------------
def test_the_top_level_holds_packages_and_the_entry_modules():
    problems = []
    for item in sorted(PACKAGE.iterdir()):
        if item.is_file() and item.suffix == ".py" and item.name not in ENTRY_MODULES:
            problems.append(f"ctxemb/{item.name}: a module at the top level (put it in the package of its idea)")
        elif item.is_dir() and not (item / "__init__.py").is_file() and any(item.rglob("*.py")):
            problems.append(f"ctxemb/{item.name}/: Python modules in a folder without __init__.py")
    assert not problems, "\n".join(problems)


def test_every_package_opens_with_a_docstring_that_states_its_idea():
    problems = []
    for path, _, tree, _ in _sources().values():
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(tree)
        if not doc or not doc.strip():
            problems.append(f"{path.relative_to(ROOT)}: no docstring as its first statement")
        elif tree.body[0].lineno != 1:
            problems.append(f"{path.relative_to(ROOT)}: the docstring does not open the file (line "
                            f"{tree.body[0].lineno})")
        elif len(doc.split()) < 4:
            problems.append(f"{path.relative_to(ROOT)}: the docstring {doc!r} does not state an idea")
    assert not problems, "packages without their idea:\n" + "\n".join(problems)


def test_no_module_is_over_the_line_limit():
    too_long = sorted((len(text.splitlines()), path.relative_to(ROOT).as_posix())
                      for path, text, _, _ in _sources().values() if len(text.splitlines()) > MAX_LINES)
    assert not too_long, (f"modules over {MAX_LINES} lines (split them by idea): "
                          + ", ".join(f"{p} ({n})" for n, p in too_long))


# ---- the documentation ------------------------------------------------------------------------------------------
def _documented_layers() -> list[tuple[int, set[str]]]:
    """(number, packages) of each line of the first fenced block under "## Import layers" in docs/architecture.md:
    a line is a layer's number and its packages, named without ``ctxemb.``, separated by spaces."""
    text = ARCHITECTURE_PAGE.read_text(encoding="utf-8")
    section = re.search(r"^## Import layers\s*$(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert section, f"{ARCHITECTURE_PAGE}: no section '## Import layers'"
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), flags=re.MULTILINE | re.DOTALL)
    assert block, f"{ARCHITECTURE_PAGE}: the section '## Import layers' has no fenced block of layers"
    layers = []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        m = re.fullmatch(r"\s*(\d+)\s+(\S.*?)\s*", line)
        assert m, f"{ARCHITECTURE_PAGE}: {line!r} is not '<number>  <package> <package> ...'"
        layers.append((int(m.group(1)), {"ctxemb." + name for name in m.group(2).split()}))
    return layers


def test_the_architecture_page_maps_every_module():
    # the page's module tables (first column: the dotted name in backticks) and package headings are its map
    text = ARCHITECTURE_PAGE.read_text(encoding="utf-8")
    mapped = set()
    for line in text.splitlines():
        if line.startswith("#"):
            mapped.update(re.findall(r"`(ctxemb(?:\.\w+)*)`", line))
        else:
            m = re.match(r"\|\s*`(ctxemb(?:\.\w+)*)`\s*\|", line)
            if m:
                mapped.add(m.group(1))
    modules = set(_sources())
    unmapped, gone = sorted(modules - mapped), sorted(mapped - modules)
    assert not unmapped and not gone, (f"{ARCHITECTURE_PAGE}: modules missing from the map: {unmapped}; "
                                       f"entries for modules that do not exist: {gone}")


def test_the_architecture_page_lists_these_layers():
    documented = _documented_layers()
    assert [n for n, _ in documented] == list(range(1, len(documented) + 1)), \
        f"{ARCHITECTURE_PAGE}: the layers are not numbered 1, 2, ... from the bottom"
    assert [packages for _, packages in documented] == [set(layer) for layer in LAYERS], (
        f"{ARCHITECTURE_PAGE} lists the layers\n"
        + "\n".join(f"  {n}: {sorted(p)}" for n, p in documented)
        + f"\nbut LAYERS in {__file__} is\n"
        + "\n".join(f"  {n}: {sorted(layer)}" for n, layer in enumerate(LAYERS, 1)))
