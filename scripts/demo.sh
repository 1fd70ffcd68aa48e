#!/usr/bin/env bash
# Builds and runs the demo: SmolLM2-135M-Instruct on the CPU with vanilla greedy decoding, ADMG
# self-speculation, prompt lookup and EAGLE-2 + ADMG (fetched on first run, see fetch_model.sh).
# Extra arguments go to the demo (e.g. --quick, --draft 4, --tree-k 2 --tree-depth 3 --tree-tokens 6).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
model="$(scripts/fetch_model.sh)"
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo --target specdec_demo -j"$(nproc)"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" build/demo/examples/specdec_demo --model "$model" "$@"
