#!/usr/bin/env bash
# The test suite with the CPU kernels of an AVX2-only machine (no AVX-512, no VNNI) forced on this one: oneDNN limited
# to AVX2 (ONEDNN_MAX_CPU_ISA) and ATen's vectorised kernels to AVX2 (ATEN_CPU_CAPABILITY), with an Inductor cache of
# its own (kernels compiled for one ISA must not be reused under the other); ctxemb's native AVX512-VNNI int8 kernel
# honours these limits and stays off. It catches what differs by CPU (int8
# products, rounding) before a CI machine of the other kind does. Not emulated: ONNX Runtime (it reads the CPU
# itself) and /proc/cpuinfo (code that reads the CPU's flags still sees this CPU's). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$(mktemp -d "${TMPDIR:-/tmp}/ctxemb-avx2-inductor.XXXXXX")"
trap 'rm -rf "$cache"' EXIT
ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 TORCHINDUCTOR_CACHE_DIR="$cache" bash "$here/scripts/test.sh" "$@"
