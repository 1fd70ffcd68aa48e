#!/usr/bin/env bash
# Every drafter example on the held-out evaluation prompts (tools/train/eval_prompts.txt, not in the
# training set) through the C++ example engine, with the weights in examples/weights: one RESULT line
# each (tau, target forwards, tokens/s and vanilla's, speed-up, projected memory-bound speed-up,
# greedy identical to vanilla).
#   tools/train/evaluate.sh [--max-new 64] [drafter ...]     (default: medusa eagle jakiro amphista moa)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
max_new=64
if [ "${1:-}" = --max-new ]; then max_new="$2"; shift 2; fi
drafters=("$@")
[ ${#drafters[@]} -gt 0 ] || drafters=(medusa eagle jakiro amphista moa)
model="$(scripts/fetch_model.sh)"
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo --target $(printf 'specdec_%s ' "${drafters[@]}") -j"$(nproc)" >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
for d in "${drafters[@]}"; do
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" build/demo/examples/specdec_"$d" --model "$model" \
    --prompts tools/train/eval_prompts.txt --max-new "$max_new" | grep '^RESULT'
done
