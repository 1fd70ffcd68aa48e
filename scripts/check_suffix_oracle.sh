#!/usr/bin/env bash
# specdec's suffix drafts against Arctic Inference 0.3.0's own code, afresh: builds the oracle
# (scripts/fetch_suffix_oracle.sh, cached), records N random scenarios with it (scripts/suffix_oracle.py:
# trees, caches with evictions, real text; seed S) and replays them with specdec_tests_suffix, which
# fails on the first draft that differs in a token, parent, float32 probability, score or match length.
#
#   scripts/check_suffix_oracle.sh BUILD_DIR [--scenarios 3000] [--seed 1]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$1"; shift
scenarios=3000 seed=1
while [ $# -gt 0 ]; do
  case "$1" in
    --scenarios) scenarios="$2" ;;
    --seed) seed="$2" ;;
    *) echo "usage: $0 BUILD_DIR [--scenarios N] [--seed S]" >&2; exit 2 ;;
  esac
  shift 2
done
pythonpath="$("$root/scripts/fetch_suffix_oracle.sh")"
mkdir -p "$build/suffix-oracle"
cases="$build/suffix-oracle/cases-$seed.jsonl"
PYTHONPATH="$pythonpath" python3 "$root/scripts/suffix_oracle.py" --scenarios "$scenarios" --seed "$seed" --out "$cases"
SPECDEC_SUFFIX_CASES="$cases" "$build/tests/specdec_tests_suffix" -tc='*Arctic Inference*' | grep -E 'suffix oracle|Status'
