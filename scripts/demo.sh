#!/usr/bin/env bash
# The main job on the default model (installs into .venv first).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
source "$here/scripts/env.sh"
exec "$here/.venv/bin/ctxemb" demo "$@"
