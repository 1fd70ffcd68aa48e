#!/usr/bin/env bash
# Installs what specdec's build, tests, examples and benchmarks need on Debian, skipping what is there.
set -euo pipefail
# clang with its sanitizer / libFuzzer runtimes and OpenMP: the second compiler of the tests and the fuzzers;
# python3-dev: the headers the SuffixDecoding test oracle (a Python module, scripts/fetch_suffix_oracle.sh) and the
# Python package (python/) build against; python3-venv: the environment scripts/test_python.sh tests that package in.
packages=(cmake g++ make libeigen3-dev doctest-dev libbenchmark-dev libthrust-dev libcub-dev nlohmann-json3-dev
          python3 python3-pip python3-dev python3-venv clang libclang-rt-dev libomp-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "specdec: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
