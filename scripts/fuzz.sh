#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (ASan + UBSan) and runs each for SECONDS
# (default 60) from its seed corpus, two at a time. Fails on any finding: the crashing input is left
# as build/fuzz/findings/<harness>/crash-* (and its log beside it); reproduce with
#   build/fuzz/tests/fuzz/fuzz_<harness> build/fuzz/findings/<harness>/crash-...
# Usage: scripts/fuzz.sh [SECONDS] [HARNESS...]   (a longer local run: scripts/fuzz.sh 3600)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
harnesses=("$@")
targets=("${harnesses[@]/#/fuzz_}")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(safetensors gguf tokenizer trees builders verifiers primitives policy views sizes suffix drafters grammar distributions)
  targets=(specdec_fuzzers)  # all of them, built in parallel
fi
# Line tables only: a finding's stack still names file and line, at a fraction of full debug information.
cmake -S . -B build/fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DSPECDEC_BUILD_TESTS=OFF \
  -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_BUILD_BENCH=OFF -DSPECDEC_BUILD_FUZZERS=ON >/dev/null
cmake --build build/fuzz -j"$(nproc)" --target "${targets[@]}"
status=0
run() {
  local h="$1" dir="build/fuzz/findings/$1" work="build/fuzz/corpus/$1"
  rm -rf "$dir" && mkdir -p "$dir" "$work"
  # A safetensors header nests as deep as its length allows: 64 KiB inputs reach a depth that would
  # overflow a recursive reader's stack.
  local max_len=4096
  [ "$h" = safetensors ] && max_len=65536
  # New inputs go to a scratch corpus; the seeds in the repository are only read.
  if build/fuzz/tests/fuzz/fuzz_"$h" "$work" "tests/fuzz/corpus/$h" -max_total_time="$seconds" -max_len="$max_len" \
       -timeout=10 -rss_limit_mb=4096 -artifact_prefix="$dir/" -print_final_stats=1 >"$dir/log" 2>&1; then
    echo "fuzz_$h: $(grep -E '^stat::number_of_executed_units' "$dir/log" | awk '{print $2}') runs in ${seconds} s, no finding"
  else
    echo "fuzz_$h: FINDING (log: $dir/log)"; tail -30 "$dir/log"; return 1
  fi
}
pids=()
for h in "${harnesses[@]}"; do
  run "$h" & pids+=($!)
  if [ ${#pids[@]} -ge "$(nproc)" ]; then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
