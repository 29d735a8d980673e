"""No module of ctxemb/ is over 600 lines: one idea per module (see /work/shared/STYLE.md)."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ctxemb"
MAX_LINES = 600


def _line_counts() -> dict[str, int]:
    return {p.relative_to(PACKAGE).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_over_the_limit():
    too_long = {m: n for m, n in _line_counts().items() if n > MAX_LINES}
    assert not too_long, (f"modules over {MAX_LINES} lines (split them by idea): "
                          + ", ".join(f"ctxemb/{m} ({n})" for m, n in sorted(too_long.items())))
