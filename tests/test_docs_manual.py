"""The user documentation reads as a manual, on a code host as on the site.

- **No narration of how it was made** in README.md, docs/*.md, docs/guide/*.md and docs/reference/*.md: no issue or
  pull-request numbers, no work sessions, no "tried and not kept" accounts, no goals of a ticket. A guide says what a
  feature is for, how to use it and what it costs; how a result was reached belongs in ``benchmarks/results/`` (the
  hand-written ``trials_*.md`` files there). Fenced code blocks and inline code are not read; docs/design/ is not
  checked (its notes discuss the alternatives they considered).
- **Measurements are linked**: every ``<!-- results: NAME.md -->`` include (which only the site's build fills in) has
  a plain link to ``benchmarks/results/NAME.md`` in the same section, a relative path from the page that a code host
  follows; the benchmarks page links every results file.
- **Links resolve in the repository**: every relative link of these pages names an existing file, so none points at
  a page that only the site build generates.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def manual_pages() -> list[str]:
    """The pages checked, as paths relative to the repository root."""
    pages = ["README.md"]
    for pattern in ("docs/*.md", "docs/guide/*.md", "docs/reference/*.md"):
        pages += sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern))
    return pages


# Pages that still narrate, each to be cleaned and taken off this list (a test fails once a listed page passes, so
# that the list only shrinks). Empty: keep it so.
NOT_YET_CLEAN: set[str] = set()

# (pattern, what it shows); matched case-insensitively against prose (fenced and inline code removed).
NARRATION = [
    (r"(?<![\w&/])#\d+\b", "an issue or pull-request number"),
    (r"\bissues?\b", "a reference to an issue"),
    (r"\bsessions?\b", "a work session"),
    (r"\bsittings?\b", "a work sitting"),
    (r"\bnot kept\b", "an account of what was tried and dropped"),
    (r"\bwe (?:have )?(?:not )?tried\b|\bwe did not try\b", "an account of what was tried"),
    (r"\btrial patch(?:es)?\b", "a trial patch"),
    (r"\bone-off\b", "a one-off run or script"),
    (r"\bnot shipped\b|\bshipped before\b", "the history of what shipped"),
    (r"\b(?:before|after|since) (?:this|these) changes?\b|\bthis change\b", "the history of a change"),
    (r"\bgoals?\b", "the goal of a ticket"),
    (r"\bfor now\b", "a provisional state"),
    (r"\bnow the case\b", "the history of a change"),
    (r"\b(?:was|were) not run\b", "an account of runs not made"),
    (r"\b(?:earlier|older) runs?\b|\bthat day\b", "a run's history"),
]
_NARRATION = [(re.compile(p, re.IGNORECASE), why) for p, why in NARRATION]
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+).+?\1")


def prose_lines(text: str):
    """(line number, line) of the prose of a Markdown text: fenced code blocks dropped, inline code blanked."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, _INLINE_CODE.sub("``", line)


def narration(text: str) -> list[tuple[int, str, str]]:
    """(line number, matched text, what it shows) for every narrating phrase of ``text``."""
    found = []
    for number, line in prose_lines(text):
        for pattern, why in _NARRATION:
            for m in pattern.finditer(line):
                found.append((number, m.group(0), why))
    return found


def unlinked_includes(page: str, text: str) -> list[tuple[int, str]]:
    """(line number, results file) of every results include without a link to that file in its section."""
    expected_prefix = os.path.relpath(RESULTS, (ROOT / page).parent).replace(os.sep, "/")
    missing, section = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"#{1,6} ", line):
            section = []
        section.append(line)
        m = re.search(r"<!--\s*results:\s*([\w.\-]+\.md)", line)
        if m and f"]({expected_prefix}/{m.group(1)}" not in "\n".join(section):
            missing.append((number, m.group(1)))
    return missing


def broken_links(page: str, text: str) -> list[tuple[int, str]]:
    """(line number, target) of every relative link of the page's prose that names no file of the repository."""
    broken = []
    for number, line in prose_lines(text):
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (ROOT / page).parent.joinpath(path).exists():
                broken.append((number, target))
    return broken


def _problems(page: str) -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    problems = [f"{page}:{n}: {what!r} ({why})" for n, what, why in narration(text)]
    problems += [f"{page}:{n}: the include of {name} has no link to ../../benchmarks/results/{name} (or the "
                 f"path from this page) in its section" for n, name in unlinked_includes(page, text)]
    problems += [f"{page}:{n}: the link {target!r} names no file of the repository" for n, target in
                 broken_links(page, text)]
    return problems


@pytest.mark.parametrize("page", manual_pages())
def test_the_page_reads_as_a_manual(page):
    if page in NOT_YET_CLEAN:
        pytest.skip("on the temporary list NOT_YET_CLEAN")
    problems = _problems(page)
    assert not problems, "\n".join(problems)


def test_pages_on_the_temporary_list_still_need_it():
    for page in sorted(NOT_YET_CLEAN):
        assert (ROOT / page).is_file(), f"{page} is gone: take it off NOT_YET_CLEAN"
        assert _problems(page), f"{page} reads as a manual now: take it off NOT_YET_CLEAN"


def test_the_narration_check_catches_narration():
    text = ("Set `x` (issue #28's goal).\nIn session 21, a trial patch of the loop was tried and not kept.\n"
            "```\n# session 3 in code is fine\n```\nThe `#12` code span is fine, and so is SICK's trial split.\n")
    found = narration(text)
    assert {n for n, *_ in found} == {1, 2}
    assert {what.lower() for _, what, _ in found} >= {"issue", "#28", "goal", "session", "trial patch", "not kept"}


def test_the_benchmarks_page_links_every_results_file():
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for path in sorted(RESULTS.glob("*.md")):
        assert f"](../benchmarks/results/{path.name})" in page, f"docs/benchmarks.md does not link {path.name}"


def test_the_cli_reference_lists_every_command():
    from ctxemb.cli import build_parser

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    import argparse

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                assert f"`ctxemb {name}" in page, f"docs/reference/cli.md does not list `ctxemb {name}`"
