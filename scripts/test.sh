#!/usr/bin/env bash
# The test suite (installs into .venv first). Extra arguments go to pytest, e.g. -m slow.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
source "$here/scripts/env.sh"
cd "$here"
exec .venv/bin/python -m pytest -q "$@"
