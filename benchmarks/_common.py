"""Shared helpers for benchmark scripts: real sentences from the shared data and result tables."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path
from typing import Sequence

import torch

from ctxemb.inference import cpu_info
from ctxemb.paths import atomic_write, shared_data_dir

RESULTS = Path(__file__).resolve().parent / "results"


def wikitext_sentences(n: int, min_words: int = 5, max_words: int = 60) -> list[str]:
    """The first ``n`` sentences of WikiText-2 (valid, then test) with ``min_words``..``max_words`` words."""
    out = []
    for split in ("valid", "test"):
        for line in (shared_data_dir() / "corpora" / "wikitext-2" / f"{split}.txt").open(encoding="utf-8"):
            line = line.strip()
            if not line or line.startswith("="):
                continue
            for sent in re.split(r"(?<= \.) ", line):
                if min_words <= len(sent.split()) <= max_words:
                    out.append(sent)
                    if len(out) == n:
                        return out
    return out


def machine() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpu": cpu_info().name, "cpu_count": os.cpu_count()}


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    def fmt(v):
        return f"{v:,.3f}" if isinstance(v, float) and abs(v) < 10 else (f"{v:,.0f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_results(name: str, payload: dict, markdown: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with atomic_write(RESULTS / f"{name}.json") as f:
        json.dump(payload, f, indent=2)
    with atomic_write(RESULTS / f"{name}.md") as f:
        f.write(markdown.rstrip() + "\n")
