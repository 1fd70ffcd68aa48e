#!/usr/bin/env bash
# Builds and runs the demo: the row primitives on a realistic problem (V = 128256) on every backend.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo --target specdec_primitives_demo -j"$(nproc)"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" build/demo/examples/specdec_primitives_demo "$@"
