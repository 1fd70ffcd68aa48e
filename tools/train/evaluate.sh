#!/usr/bin/env bash
# Every drafter example on evaluation prompts in neither training split, through the C++ example
# engine, with the weights in examples/weights: one RESULT line each (tau, target forwards, tokens/s
# and vanilla's, speed-up, projected memory-bound speed-up, greedy identical to vanilla).
#   tools/train/evaluate.sh [--max-new 64] [--prompts FILE] [drafter ...]   (default: medusa eagle jakiro amphista moa)
# FILE: tools/train/eval_prompts.txt (default; 16 written by hand: out of the training distribution) or
# tools/train/heldout_prompts.txt (16 of the held-out split's: the distribution the drafters learned).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
max_new=64
prompts=tools/train/eval_prompts.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --max-new) max_new="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    *) break ;;
  esac
done
drafters=("$@")
[ ${#drafters[@]} -gt 0 ] || drafters=(medusa eagle eagle3 mtp jakiro amphista moa)
model="$(scripts/fetch_model.sh)"
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo --target $(printf 'specdec_%s ' "${drafters[@]}") -j"$(nproc)" >/dev/null
echo "prompts: $prompts; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
for d in "${drafters[@]}"; do
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" build/demo/examples/specdec_"$d" --model "$model" \
    --prompts "$prompts" --max-new "$max_new" | grep '^RESULT'
done
