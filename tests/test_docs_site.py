"""The documentation machinery: the build hooks (benchmark includes, the CLI and API references) and the link
checker. CI builds the whole site with `mkdocs build --strict`; these tests check the parts without a build."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install '.[docs]')")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


hooks = _load("ctxemb_mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
links = _load("ctxemb_check_site_links", ROOT / "scripts" / "check_site_links.py")


def test_results_are_included_with_their_headings_moved_down():
    text = hooks.results_markdown("finetune.md")
    assert "benchmarks/results/finetune.md" in text
    source = (ROOT / "benchmarks" / "results" / "finetune.md").read_text(encoding="utf-8")
    assert source.splitlines()[0].startswith("# ") and "\n### " + source.splitlines()[0][2:] in text
    assert "\n# " not in text


def test_a_missing_results_file_fails_the_build():
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="no_such_table.md"):
        hooks.on_page_markdown("before\n<!-- results: no_such_table.md -->\n", None, None, None)


def test_every_results_marker_in_docs_names_a_file():
    for page in (ROOT / "docs").rglob("*.md"):
        for name in re.findall(r"<!--\s*results:\s*([\w.\-]+\.md)", page.read_text(encoding="utf-8")):
            assert (ROOT / "benchmarks" / "results" / name).is_file(), (page, name)


def test_cli_reference_has_every_command():
    text = hooks.cli_reference_markdown()
    for command in ("ctxemb", "ctxemb demo", "ctxemb analyze", "ctxemb wsd build", "ctxemb wsd train",
                    "ctxemb index query", "ctxemb finetune", "ctxemb predict", "ctxemb pretrain", "ctxemb fill-mask"):
        assert f"`{command}`\n" in text, command
    assert "--version" in text


def test_api_reference_covers_every_public_package():
    pages = hooks.reference_pages()
    packages = {p.name for p in (ROOT / "ctxemb").iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("_")}
    assert set(pages) == packages | {"ctxemb"}
    assert "ctxemb.embedding.embedder" in pages["ctxemb"] or "embedding" in pages  # a module or (after a split) a package
    assert all(not part.startswith("_") for modules in pages.values() for m in modules for part in m.split("."))


def test_nav_pages_exist():
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)

    def pages(nav):
        for entry in nav:
            for value in (entry.values() if isinstance(entry, dict) else [entry]):
                if isinstance(value, list):
                    yield from pages(value)
                else:
                    yield value

    generated = {"changelog.md"}
    for page in pages(config["nav"]):
        assert page in generated or (ROOT / "docs" / page).is_file(), page


def test_links_out_of_docs_are_rewritten_for_the_site():
    page = "guide/geometry.md"
    assert hooks.site_target(page, "../../benchmarks/results/search.md") == "../benchmarks.md#results-search"
    assert hooks.site_target(page, "../../benchmarks/results/geometry_all-MiniLM-L6-v2/anisotropy_by_layer.png") \
        == "../benchmarks/results/geometry_all-MiniLM-L6-v2/anisotropy_by_layer.png"
    assert hooks.site_target(page, "../../CHANGELOG.md") == "../changelog.md"
    assert hooks.site_target(page, "../../ctxemb/search/index.py") == "../reference/api/search.md#ctxemb.search.index"
    assert hooks.site_target(page, "../../ctxemb/embedding/embedder.py") == "../reference/api/embedding.md#ctxemb.embedding.embedder"
    assert hooks.site_target(page, "../../examples/README.md") is None  # not published: the link keeps its text
    assert hooks.site_target(page, "search.md#measured") == "search.md#measured"  # inside docs/: mkdocs checks it
    assert hooks.site_target(page, "https://example.org/") == "https://example.org/"
    # a results file's own links, relative to benchmarks/results/, included into the page
    assert hooks.site_target(page, "search.md", base=hooks.RESULTS) == "../benchmarks.md#results-search"
    assert hooks.site_target(page, "../../docs/guide/wsd.md", base=hooks.RESULTS) == "wsd.md"


def test_a_link_out_of_docs_to_nothing_fails_the_build():
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="does not exist"):
        hooks.site_target("guide/geometry.md", "../../benchmarks/results/no_such_table.md")
    with pytest.raises(PluginError, match="leaves the repository"):
        hooks.site_target("index.md", "../../../elsewhere.md")


def test_link_rewriting_leaves_code_alone():
    text = ("See [the table](../../benchmarks/results/search.md), `[not](../../nowhere.md)` and "
            "[`ctxemb.search`](../../ctxemb/search/__init__.py).\n```\n[x](../../nowhere.md)\n```")
    out = hooks.rewrite_repository_links(text, "guide/search.md")
    assert "[the table](../benchmarks.md#results-search)" in out
    assert "`[not](../../nowhere.md)`" in out and "\n[x](../../nowhere.md)\n" in out
    assert "[`ctxemb.search`](../reference/api/search.md#ctxemb.search)" in out


def test_the_api_overview_lists_every_reference_page():
    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    for name, modules in hooks.reference_pages().items():
        if name == "ctxemb":
            for module in modules[1:]:
                assert f"](../../ctxemb/{module.split('.')[1]}.py)" in page, \
                    f"docs/reference/api.md has no row for the module {module}: add one"
        else:
            assert f"](../../ctxemb/{name}/__init__.py)" in page, \
                f"docs/reference/api.md has no row for the package ctxemb.{name}: add one"


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    for name, html in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"<html><body>{html}</body></html>", encoding="utf-8")
    return tmp_path


def test_link_checker_passes_a_good_site(tmp_path):
    site = _site(tmp_path, {"index.html": '<a href="guide/">g</a> <a href="guide/#part">p</a> <a href="https://x.org/">x</a>',
                            "guide/index.html": '<h2 id="part">Part</h2><a href="../index.html">home</a><img src="../a.png">',
                            "a.png": ""})
    assert links.check_site(site) == []


def test_link_checker_finds_missing_pages_and_anchors(tmp_path):
    site = _site(tmp_path, {"index.html": '<a href="missing/">m</a> <a href="guide/#nowhere">n</a> <a href="#top">t</a>',
                            "guide/index.html": '<h2 id="part">Part</h2>'})
    broken = links.check_site(site)
    assert len(broken) == 3
    assert any("missing/" in b for b in broken) and any("nowhere" in b for b in broken) and any("#top" in b for b in broken)
    assert links.main([str(site)]) == 1
