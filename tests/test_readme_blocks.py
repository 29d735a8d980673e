"""Every code block of README.md and docs/getting-started.md runs, in order, as a reader would run it.

Python blocks run in one namespace per file (a later block uses what an earlier one defined); bash blocks run in
bash, with ``ctxemb`` as ``python -m ctxemb`` of this interpreter. The working directory is a temporary folder laid
out like the repository root: links to the checkout's ``benchmarks/``, ``ctxemb/``, ``examples/`` and ``scripts/``,
and ``../shared/data`` (the shared data folder), so the paths the blocks name resolve, and what they write stays in
the temporary folder.

A block whose command takes minutes says how CI runs it, in HTML comments on the lines just before it (a code host
and the site show nothing of them):

- ``<!-- ci: skip REASON -->``: not run; the test is reported as skipped with REASON.
- ``<!-- ci: smoke [COMMAND... |] OPTIONS -->``: OPTIONS are appended to each ``ctxemb COMMAND...`` of the block (the
  longest matching COMMAND wins; without ``|``, to every ``ctxemb`` command): a smoke-size run of the same command.
- ``<!-- ci: replace OLD => NEW -->``: OLD is replaced by NEW in the block before it runs; NEW is small data that
  this module prepares (``SMALL_DATA``).

A block that needs the shared data folder is skipped without it (with the reason), as the other data tests are.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ctxemb.core.paths import shared_data_dir

ROOT = Path(__file__).resolve().parent.parent
FILES = ("README.md", "docs/getting-started.md")
LINKED = ("benchmarks", "ctxemb", "examples", "scripts")  # the checkout's inputs the blocks may name
BLOCK_TIMEOUT = 900  # seconds for one bash block

_FENCE_OPEN = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*ci:\s*(?P<kind>skip|smoke|replace)\b\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass
class Block:
    path: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None = None
    smoke: dict[tuple[str, ...], list[str]] = field(default_factory=dict)
    replace: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}:{self.lang}"


def extract_blocks(path: str, text: str) -> list[Block]:
    """The fenced ```python and ```bash blocks of ``text``, with the ci directives of the lines just before each."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group("lang")
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if lang in ("python", "bash"):
            block = Block(path, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n")
            k = start - 1
            while k >= 0 and lines[k].startswith("<!--"):
                d = _DIRECTIVE.match(lines[k])
                if d is None:
                    raise ValueError(f"{path}:{k + 1}: not a ci directive: {lines[k]!r}")
                _apply_directive(block, d.group("kind"), d.group("arg"), f"{path}:{k + 1}")
                k -= 1
            blocks.append(block)
        i = j + 1
    return blocks


def _apply_directive(block: Block, kind: str, arg: str, where: str) -> None:
    if kind == "skip":
        if not arg:
            raise ValueError(f"{where}: a ci skip must give its reason")
        block.skip = arg.strip("() ")
    elif kind == "smoke":
        command, _, options = arg.rpartition("|")
        if not options.strip():
            raise ValueError(f"{where}: a ci smoke directive needs options")
        block.smoke[tuple(command.split())] = shlex.split(options)
    else:
        old, sep, new = arg.partition("=>")
        if not sep or not old.strip() or not new.strip():
            raise ValueError(f"{where}: write a ci replace directive as OLD => NEW")
        block.replace.append((old.strip(), new.strip()))


def _bash_script(block: Block) -> str:
    """The block as a bash script: strict mode, ``ctxemb`` as a function that appends the smoke options."""
    code = block.code
    for old, new in block.replace:
        if old not in code:
            raise AssertionError(f"{block.name}: the ci replace directive's {old!r} is not in the block")
        code = code.replace(old, new)
    cases = []
    for command in sorted(block.smoke, key=len, reverse=True):  # the longest prefix first: bash takes the first match
        pattern = " " + " ".join(command) + " " if command else " "
        cases.append(f"    {shlex.quote(pattern)}*) extra=({shlex.join(block.smoke[command])}) ;;")
    function = ["ctxemb() {", "  local extra=()"]
    if cases:
        function += ['  case " $* " in', *cases, "  esac"]
    function += ['  "$CTXEMB_CI_PYTHON" -m ctxemb "$@" "${extra[@]}"', "}"]
    return "set -euo pipefail\n" + "\n".join(function) + "\n" + code


def _all_blocks() -> list[Block]:
    return [b for path in FILES for b in extract_blocks(path, (ROOT / path).read_text(encoding="utf-8"))]


BLOCKS = _all_blocks()


# ---- small data for the ci replace directives ---------------------------------------------------------------------
def _small_scifact(data: Path, out: Path) -> None:
    """A BEIR folder holding SciFact's documents judged for the first 20 dev queries of the README's command (and 50
    more), its queries, the train qrels of those documents, and the 20 query ids (``dev_query_ids.txt``): the same
    command, minutes shorter."""
    source = data / "retrieval" / "scifact"
    dev_ids = (ROOT / "benchmarks/results/scifact_dev_query_ids.txt").read_text(encoding="utf-8").split()[:20]
    out.mkdir()
    (out / "dev_query_ids.txt").write_text("\n".join(dev_ids) + "\n", encoding="utf-8")
    dev_ids = set(dev_ids)
    qrels = (source / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = qrels[0], [r.split("\t") for r in qrels[1:] if r.strip()]
    keep = {doc for query, doc, *_ in rows if query in dev_ids}
    corpus, others = [], 0
    for line in (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        doc_id = json.loads(line)["_id"]
        if doc_id in keep or others < 50:
            others += doc_id not in keep
            corpus.append(line)
    kept = {json.loads(line)["_id"] for line in corpus}
    (out / "qrels").mkdir(parents=True)
    (out / "corpus.jsonl").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    (out / "queries.jsonl").write_text((source / "queries.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (out / "qrels" / "train.tsv").write_text(
        "\n".join([header] + ["\t".join(r) for r in rows if r[1] in kept]) + "\n", encoding="utf-8")


SMALL_DATA = {"small-scifact": _small_scifact}


# ---- running ----------------------------------------------------------------------------------------------------
class Workspace:
    """The temporary folder the blocks of one file run in, and their Python namespace."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "checkout"
        self.cwd.mkdir()
        for name in LINKED:
            (self.cwd / name).symlink_to(ROOT / name, target_is_directory=True)
        self.data = shared_data_dir(required=False)
        if self.data is not None:
            (root / "shared").mkdir()
            (root / "shared" / "data").symlink_to(self.data, target_is_directory=True)
        self.namespace: dict = {"__name__": "__main__"}
        self.failed: str | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ, CTXEMB_CI_PYTHON=sys.executable, TOKENIZERS_PARALLELISM="false",
                   MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        if self.data is not None:
            env["CTXEMB_DATA"] = str(self.root / "shared" / "data")
            env.setdefault("NLTK_DATA", str(self.data / "nltk_data"))
        return env

    def prepare(self, block: Block) -> None:
        for _, new in block.replace:
            if new in SMALL_DATA and not (self.cwd / new).exists():
                if self.data is None:
                    pytest.skip("shared data folder not found (set CTXEMB_DATA)")
                SMALL_DATA[new](self.data, self.cwd / new)

    def run(self, block: Block) -> None:
        self.prepare(block)
        if block.lang == "python":
            old = os.getcwd()
            os.chdir(self.cwd)
            try:
                exec(compile(block.code, block.name, "exec"), self.namespace)
            finally:
                os.chdir(old)
        else:
            proc = subprocess.run(["bash", "-c", _bash_script(block)], cwd=self.cwd, env=self.env(), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT)
            assert proc.returncode == 0, f"{block.name} exited with {proc.returncode}:\n{proc.stdout[-6000:]}"


_WORKSPACES: dict[str, Workspace] = {}


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory):
    yield _WORKSPACES
    _WORKSPACES.clear()


def _needs_data(block: Block) -> bool:
    return "CTXEMB_DATA" in block.code or "../shared/data" in block.code or "SenseStore.load" in block.code


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block_runs(block: Block, workspaces, tmp_path_factory):
    if block.skip:
        pytest.skip(f"ci: skip ({block.skip})")
    if block.path not in workspaces:
        workspaces[block.path] = Workspace(tmp_path_factory.mktemp(Path(block.path).stem))
    ws = workspaces[block.path]
    if ws.failed:
        pytest.fail(f"an earlier block of {block.path} failed ({ws.failed}), and this one may depend on it")
    if _needs_data(block) and ws.data is None:
        pytest.skip("shared data folder not found (set CTXEMB_DATA)")
    try:
        ws.run(block)
    except BaseException:
        ws.failed = block.name
        raise


def test_the_files_have_blocks_and_every_directive_parses():
    assert {b.path for b in BLOCKS} == set(FILES)
    assert any(b.lang == "python" for b in BLOCKS) and any(b.lang == "bash" for b in BLOCKS)
    for block in BLOCKS:
        if block.lang == "bash" and not block.skip:
            _bash_script(block)  # a replace directive whose text is not in its block fails here


def test_the_directives_do_what_they_say():
    text = ("<!-- ci: smoke finetune | --epochs 1 -->\n<!-- ci: smoke finetune rte | --preset none -->\n"
            "<!-- ci: replace big => small -->\n```bash\nctxemb finetune rte big\n```\n"
            "<!-- ci: skip (takes an hour) -->\n```python\nx = 1\n```\n```text\nnot a block\n```\n")
    smoke, skipped = extract_blocks("x.md", text)
    assert skipped.skip == "takes an hour" and skipped.line == 8
    assert smoke.smoke == {("finetune",): ["--epochs", "1"], ("finetune", "rte"): ["--preset", "none"]}
    script = _bash_script(smoke)
    assert "ctxemb finetune rte small" in script and script.index("' finetune rte '") < script.index("' finetune '")
    with pytest.raises(ValueError, match="reason"):
        extract_blocks("x.md", "<!-- ci: skip -->\n```bash\nls\n```\n")
    with pytest.raises(ValueError, match="not a ci directive"):
        extract_blocks("x.md", "<!-- something else -->\n```bash\nls\n```\n")
