"""MkDocs hooks for the ctxemb site (``hooks:`` in mkdocs.yml). Everything generated here is made at build time from
the source of truth, so nothing in docs/ is a copy that can go stale:

- ``<!-- results: NAME.md -->`` in a page is replaced by ``benchmarks/results/NAME.md`` (its headings moved down two
  levels, so that the file's title sits under the page's section); ``<!-- results: NAME.md shift=1 -->`` moves them
  one level. A missing or unreadable file fails the build. ``<!-- all-results -->`` includes every results file.
- ``<!-- cli-reference -->`` is replaced by the ``--help`` of every command, taken from ``ctxemb.cli.build_parser()``.
- ``reference/api/*.md``: one API reference page per package of ``ctxemb`` (and one for its top-level modules), each a
  list of mkdocstrings ``::: module`` blocks, found by walking the source tree; the nav's "API reference" section is
  filled in from the same walk, so a module that moves or appears needs no edit here.
- ``changelog.md`` and ``examples.md`` are ``CHANGELOG.md`` and ``examples/README.md``.
- The PNG plots under ``benchmarks/results/`` are published at the same path in the site, for pages that show them.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PACKAGE = ROOT / "ctxemb"

_RESULTS_MARK = re.compile(r"<!--\s*results:\s*(?P<name>[\w.\-]+\.md)(?:\s+shift=(?P<shift>\d))?\s*-->")
_ALL_RESULTS_MARK = "<!-- all-results -->"
_CLI_MARK = "<!-- cli-reference -->"
_FENCE = re.compile(r"^(```|~~~)")


# ---- benchmark results ------------------------------------------------------------------------------------------
def _shift_headings(text: str, shift: int) -> str:
    """Move every ATX heading of ``text`` down ``shift`` levels (at most to h6), leaving fenced code alone."""
    out, in_fence = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        if not in_fence and re.match(r"#{1,6} ", line):
            level = len(line) - len(line.lstrip("#"))
            line = "#" * min(6, level + shift) + line[level:]
        out.append(line)
    return "\n".join(out)


def results_markdown(name: str, shift: int = 2) -> str:
    """The markdown of ``benchmarks/results/<name>``, headings shifted, with a line that says where it comes from."""
    path = RESULTS / name
    if not path.is_file():
        raise PluginError(f"<!-- results: {name} -->: no file {path} (expected one of benchmarks/results/*.md)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PluginError(f"<!-- results: {name} -->: cannot read {path}: {e}") from e
    return (f"\n_Included at build time from `benchmarks/results/{name}` (written by the benchmark script; "
            f"JSON beside it)._\n\n" + _shift_headings(text, shift) + "\n")


def all_results_markdown() -> str:
    """Every results file, one section each, in name order."""
    parts = []
    for path in sorted(RESULTS.glob("*.md")):
        parts.append(f"## {path.stem}\n" + results_markdown(path.name, shift=2))
    return "\n".join(parts)


# ---- the command line -------------------------------------------------------------------------------------------
def _command_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for the top-level parser and every sub-command, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _command_parsers(sub, path + (name,))


def cli_reference_markdown() -> str:
    """The ``--help`` of ``ctxemb`` and of every command, each under its own heading."""
    from ctxemb.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "110"  # argparse wraps at the terminal width: fix it so the page does not depend on it
    try:
        parts = []
        for path, parser in _command_parsers(build_parser()):
            title = " ".join(("ctxemb",) + path)
            parser.prog = title
            level = "#" * min(6, 2 + max(0, len(path) - 1))
            parts.append(f"{level} `{title}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


# ---- the API reference ------------------------------------------------------------------------------------------
def _public(name: str) -> bool:
    return not name.startswith("_")


def reference_pages() -> dict[str, list[str]]:
    """Page name -> the dotted modules it documents: one page per sub-package of ctxemb (its ``__init__`` and every
    public module below it), and ``ctxemb`` for the top-level public modules."""
    pages: dict[str, list[str]] = {"ctxemb": ["ctxemb"]}
    for item in sorted(PACKAGE.iterdir()):
        if item.is_file() and item.suffix == ".py" and _public(item.stem):
            pages["ctxemb"].append(f"ctxemb.{item.stem}")
        elif item.is_dir() and (item / "__init__.py").is_file() and _public(item.name):
            modules = [f"ctxemb.{item.name}"]
            for sub in sorted(item.rglob("*.py")):
                rel = sub.relative_to(PACKAGE).with_suffix("")
                if sub.name == "__init__.py":
                    rel = rel.parent
                    if rel == Path(item.name):
                        continue
                if all(_public(part) for part in rel.parts):
                    modules.append("ctxemb." + ".".join(rel.parts))
            pages[item.name] = modules
    return pages


def _reference_page_markdown(page: str, modules: list[str]) -> str:
    title = "ctxemb (top-level modules)" if page == "ctxemb" else f"ctxemb.{page}"
    lines = [f"# {title}", "",
             "Generated at build time from the docstrings (mkdocstrings); private names (a leading `_`) are left out.",
             ""]
    for module in modules:
        lines += [f"::: {module}", "    options:", "      heading_level: 2", "      show_submodules: false", ""]
    return "\n".join(lines)


def _fill_reference_nav(nav, entries) -> bool:
    found = False
    for entry in nav or []:
        if isinstance(entry, dict):
            for key, value in entry.items():
                if key == "API reference":
                    entry[key] = entries
                    found = True
                elif isinstance(value, list):
                    found = _fill_reference_nav(value, entries) or found
    return found


def on_config(config, **kwargs):
    """Fill the nav's "API reference" entry (an empty list in mkdocs.yml) with one page per package."""
    entries = [{("ctxemb" if p == "ctxemb" else f"ctxemb.{p}"): f"reference/api/{p}.md"} for p in reference_pages()]
    if not _fill_reference_nav(config["nav"], entries):
        raise PluginError('mkdocs.yml: the nav has no "API reference" entry for the generated reference pages')
    return config


def on_files(files, config, **kwargs):
    for page, modules in reference_pages().items():
        files.append(File.generated(config, f"reference/api/{page}.md", content=_reference_page_markdown(page, modules)))
    # The changelog and the examples' overview live beside the code (CHANGELOG.md, examples/README.md): published as is.
    for page, source in (("changelog.md", ROOT / "CHANGELOG.md"), ("examples.md", ROOT / "examples" / "README.md")):
        if not source.is_file():
            raise PluginError(f"{source} is missing: it is published as {page}")
        files.append(File.generated(config, page, abs_src_path=str(source)))
    for png in sorted(RESULTS.rglob("*.png")):
        files.append(File.generated(config, png.relative_to(ROOT).as_posix(), abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page, config, files, **kwargs):
    if _CLI_MARK in markdown:
        markdown = markdown.replace(_CLI_MARK, cli_reference_markdown())
    if _ALL_RESULTS_MARK in markdown:
        markdown = markdown.replace(_ALL_RESULTS_MARK, all_results_markdown())
    return _RESULTS_MARK.sub(lambda m: results_markdown(m.group("name"), int(m.group("shift") or 2)), markdown)
