"""Check the internal links of a built MkDocs site: every relative href/src of every HTML page must name a file of
the site, and every #fragment an id (or name) in the page it points to. External links (a scheme such as https: or
mailto:) are not followed.

Usage: python scripts/check_site_links.py [SITE_DIR]   (default: site). Exits 1 and lists the broken links if any.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    """The links (href, src) and the anchors (id, name) of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.anchors.add(value)
            elif name in ("href", "src"):
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _target(site: Path, page: Path, link: str) -> tuple[Path | None, str]:
    """The file a relative link points to (None for an external one) and its fragment."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith("//"):
        return None, ""
    if not parts.path:
        return page, unquote(parts.fragment)
    base = site if parts.path.startswith("/") else page.parent
    target = (base / unquote(parts.path).lstrip("/")).resolve()
    if target.is_dir() or parts.path.endswith("/"):
        target = target / "index.html"
    return target, unquote(parts.fragment)


def check_site(site: Path) -> list[str]:
    """Every broken internal link of the site, as 'page: link (why)'."""
    site = site.resolve()
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"{site} holds no index.html: build the site first (mkdocs build)")
    pages = {p.resolve(): _parse(p) for p in sorted(site.rglob("*.html"))}
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            target, fragment = _target(site, page, link)
            if target is None:
                continue
            where = f"{page.relative_to(site)}: {link}"
            if not target.is_relative_to(site):
                broken.append(f"{where} (points outside the site)")
            elif not target.exists():
                broken.append(f"{where} (no file {target.relative_to(site)})")
            elif fragment and target.suffix == ".html":
                anchors = pages[target].anchors if target in pages else _parse(target).anchors
                if fragment not in anchors:
                    broken.append(f"{where} (no id {fragment!r} in {target.relative_to(site)})")
    return broken


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else Path("site")
    broken = check_site(site)
    n_pages = sum(1 for _ in site.rglob("*.html"))
    if broken:
        print(f"{len(broken)} broken internal links in {site} ({n_pages} pages):", file=sys.stderr)
        for line in broken:
            print("  " + line, file=sys.stderr)
        return 1
    print(f"{site}: {n_pages} pages, no broken internal link")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
