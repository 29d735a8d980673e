"""MkDocs hooks for the ctxemb site (``hooks:`` in mkdocs.yml). Everything generated here is made at build time from
the source of truth, so nothing in docs/ is a copy that can go stale:

- ``<!-- results: NAME.md -->`` in a page is replaced by ``benchmarks/results/NAME.md`` (its headings moved down two
  levels, so that the file's title sits under the page's section); ``<!-- results: NAME.md shift=1 -->`` moves them
  one level. A missing or unreadable file fails the build. ``<!-- all-results -->`` includes every results file, each
  under a heading with the id ``results-NAME`` (NAME without ``.md``).
- Links out of ``docs/`` are written as they work on a code host: a relative path from the page to the repository
  file (``../../benchmarks/results/NAME.md`` from ``docs/guide/``). Each must name an existing file (else the build
  fails) and is rewritten for the site: a results table to its section of the benchmarks page, a results plot to its
  published copy, ``CHANGELOG.md`` to the changelog page, a module or package of ``ctxemb`` to its API reference
  entry; any other repository file keeps its text without a link (the site does not publish it).
- ``<!-- cli-reference -->`` is replaced by the ``--help`` of every command, taken from ``ctxemb.cli.build_parser()``.
- ``reference/api/*.md``: one API reference page per package of ``ctxemb`` (and one for its top-level modules), each a
  list of mkdocstrings ``::: module`` blocks, found by walking the source tree; the nav's "API reference" section is
  filled in from the same walk (after the pages mkdocs.yml lists there: ``reference/api.md``, the overview kept in
  docs/), so a module that moves or appears needs no edit here.
- ``changelog.md`` is ``CHANGELOG.md``.
- The PNG plots under ``benchmarks/results/`` are published at the same path in the site, for pages that show them.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
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


def results_markdown(name: str, shift: int = 2, src_uri: str | None = None) -> str:
    """The markdown of ``benchmarks/results/<name>``, headings shifted, with a line that says where it comes from.
    Given the including page ``src_uri``, the file's own relative links are rewritten for that page."""
    path = RESULTS / name
    if not path.is_file():
        raise PluginError(f"<!-- results: {name} -->: no file {path} (expected one of benchmarks/results/*.md)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PluginError(f"<!-- results: {name} -->: cannot read {path}: {e}") from e
    if src_uri is not None:
        text = rewrite_repository_links(text, src_uri, base=RESULTS)
    origin = ("written by hand: settings tried and how they did" if name.startswith("trials_")
              else "written by the benchmark script; JSON beside it")
    return (f"\n_Included at build time from `benchmarks/results/{name}` ({origin})._\n\n"
            + _shift_headings(text, shift) + "\n")


def results_anchor(name: str) -> str:
    """The id of the section of the benchmarks page that includes ``benchmarks/results/<name>``."""
    return "results-" + Path(name).stem


def all_results_markdown(src_uri: str | None = None) -> str:
    """Every results file, one section each, in name order; each section's id is ``results_anchor(name)``."""
    parts = []
    for path in sorted(RESULTS.glob("*.md")):
        parts.append(f"## {path.stem} {{ #{results_anchor(path.name)} }}\n"
                     + results_markdown(path.name, shift=2, src_uri=src_uri))
    return "\n".join(parts)


# ---- links out of docs/ -----------------------------------------------------------------------------------------
# [text](target) and ![alt](target), with an optional title; targets without spaces (relative paths as written here).
_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"(`+)(?:.+?)\1")


def _api_target(path: Path) -> str | None:
    """The API reference entry ("reference/api/PAGE.md#dotted.module") of a module or package of ctxemb, or None
    when it has none (a private module, a data file)."""
    rel = path.relative_to(PACKAGE)
    if path.is_dir():
        if not (path / "__init__.py").is_file():
            return None
        parts = rel.parts
    elif path.suffix == ".py":
        parts = rel.with_suffix("").parts
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
    else:
        return None
    if not all(_public(p) for p in parts):
        return None
    module = ".".join(("ctxemb",) + parts)
    pages = reference_pages()
    page = parts[0] if parts and parts[0] in pages and parts[0] != "ctxemb" else "ctxemb"
    if module not in pages.get(page, []):
        return None
    return f"reference/api/{page}.md#{module}"


def site_target(src_uri: str, target: str, base: Path | None = None) -> str | None:
    """What a link written in the page ``src_uri`` (a path under docs/) to ``target`` becomes in the site.

    ``base`` is the folder the link is relative to: the page's own (the default), or that of a file included into
    the page (``benchmarks/results/`` for a results table). Returns ``target`` unchanged for a link of the page that
    stays inside docs/ or is not a relative path; otherwise the path (relative to the page) of what the site shows
    for the file, or None when the site has nothing for it (the link then keeps its text only).

    Raises:
        PluginError: the link leaves the repository, or names a file or folder that does not exist.
    """
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target
    path, _, fragment = target.partition("#")
    page_dir = posixpath.dirname(src_uri)
    own = base is None
    resolved = ((DOCS / page_dir) if own else base).joinpath(path).resolve()

    def rel(site_path: str) -> str:
        return posixpath.relpath(site_path, page_dir or ".")

    if resolved == DOCS or DOCS in resolved.parents:
        if own:
            return target
        return rel(resolved.relative_to(DOCS).as_posix()) + (f"#{fragment}" if fragment else "")
    if ROOT not in resolved.parents:
        raise PluginError(f"{src_uri}: the link {target!r} leaves the repository")
    if not resolved.exists():
        raise PluginError(f"{src_uri}: the link {target!r} names {resolved.relative_to(ROOT)}, which does not exist")
    if resolved.parent == RESULTS and resolved.suffix == ".md":
        return rel("benchmarks.md") + "#" + results_anchor(resolved.name)
    if RESULTS in resolved.parents and resolved.suffix == ".png":
        return rel(resolved.relative_to(ROOT).as_posix())
    if resolved == ROOT / "CHANGELOG.md":
        return rel("changelog.md") + (f"#{fragment}" if fragment else "")
    if resolved == PACKAGE or PACKAGE in resolved.parents:
        api = _api_target(resolved)
        if api is not None:
            page, _, anchor = api.partition("#")
            return rel(page) + "#" + anchor
    return None


def rewrite_repository_links(markdown: str, src_uri: str, base: Path | None = None) -> str:
    """Every link of ``markdown`` (the page ``src_uri``, or a file in ``base`` included into it) that leaves docs/,
    rewritten by ``site_target``; fenced code and inline code are left alone."""
    out, in_fence = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
            out.append(line)
            continue
        if in_fence or "](" not in line:
            out.append(line)
            continue
        out.append(_rewrite_links_in(line, src_uri, base))
    return "\n".join(out)


def _rewrite_links_in(line: str, src_uri: str, base: Path | None) -> str:
    code = [m.span() for m in _INLINE_CODE.finditer(line)]  # a link that starts inside inline code is text

    def one(m: re.Match) -> str:
        if any(start <= m.start() < end for start, end in code):
            return m.group(0)
        new = site_target(src_uri, m.group("target"), base)
        if new == m.group("target"):
            return m.group(0)
        if new is None:
            return m.group("text")
        return f"{m.group('bang')}[{m.group('text')}]({new}{m.group('title') or ''})"

    return _LINK.sub(one, line)


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
            if path == ("finetune",):  # each task takes the flags of its own settings
                from ctxemb.cli.finetune import task_parser
                from ctxemb.tasks.catalog import FINETUNE_TASKS

                for task in FINETUNE_TASKS:
                    help_text = task_parser(task).format_help().rstrip()
                    parts.append(f"### `ctxemb finetune {task}`\n\n```text\n{help_text}\n```\n")
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
                    entry[key] = list(value or []) + entries
                    found = True
                elif isinstance(value, list):
                    found = _fill_reference_nav(value, entries) or found
    return found


def on_config(config, **kwargs):
    """Fill the nav's "API reference" section: after the pages mkdocs.yml lists there (the overview kept in docs/,
    ``reference/api.md``), one generated page per package."""
    entries = [{("ctxemb" if p == "ctxemb" else f"ctxemb.{p}"): f"reference/api/{p}.md"} for p in reference_pages()]
    if not _fill_reference_nav(config["nav"], entries):
        raise PluginError('mkdocs.yml: the nav has no "API reference" entry for the generated reference pages')
    return config


def on_files(files, config, **kwargs):
    for page, modules in reference_pages().items():
        files.append(File.generated(config, f"reference/api/{page}.md", content=_reference_page_markdown(page, modules)))
    # The changelog lives beside the code (CHANGELOG.md): published as is.
    source = ROOT / "CHANGELOG.md"
    if not source.is_file():
        raise PluginError(f"{source} is missing: it is published as changelog.md")
    files.append(File.generated(config, "changelog.md", abs_src_path=str(source)))
    for png in sorted(RESULTS.rglob("*.png")):
        files.append(File.generated(config, png.relative_to(ROOT).as_posix(), abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page, config, files, **kwargs):
    src_uri = getattr(getattr(page, "file", None), "src_uri", None)
    if src_uri is not None and not getattr(page.file, "generated_by", None):
        markdown = rewrite_repository_links(markdown, src_uri)
    if _CLI_MARK in markdown:
        markdown = markdown.replace(_CLI_MARK, cli_reference_markdown())
    if _ALL_RESULTS_MARK in markdown:
        markdown = markdown.replace(_ALL_RESULTS_MARK, all_results_markdown(src_uri))
    return _RESULTS_MARK.sub(lambda m: results_markdown(m.group("name"), int(m.group("shift") or 2), src_uri),
                             markdown)
