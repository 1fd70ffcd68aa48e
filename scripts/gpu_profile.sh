#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Nsight Compute profiles of single gpu_check operations (gpu_check --profile OP ROWS V), on a machine
# with an NVIDIA GPU and ncu. Usage: scripts/gpu_profile.sh OUT_DIR OP:ROWS:V:KERNEL[:SKIP:COUNT] ...
# KERNEL is a regular expression naming the kernels to profile (e.g. topk_kernel, or . for all);
# COUNT launches after the first SKIP are profiled (default: the second launch). gpu_check --profile
# also takes verify_tree, verify_tree_drafts (BATCH V) and eagle2_build (BATCH, V' 32000: 13 launches
# a build). The source page is most useful from a gpu_check built with -lineinfo.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/build/gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 0; }
# The report is kept (OUT_DIR/ncu_OP_ROWSxV.ncu-rep) and printed twice: its sections, and the source page
# (SASS with each instruction's warp-stall samples) as CSV, where this ncu prints it.
for spec in "$@"; do
  IFS=: read -r op rows cols kernel skip count <<<"$spec"
  name="$out/ncu_${op}_${rows}x${cols}"
  timeout 90 "$ncu" --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section SourceCounters --import-source yes \
    -k "regex:$kernel" --launch-skip "${skip:-1}" --launch-count "${count:-1}" -f -o "$name" \
    build/gpu/gpu_check --profile "$op" "$rows" "$cols" >"$name.log" 2>&1
  rc=$?
  "$ncu" -i "$name.ncu-rep" --page details >"$name.txt" 2>&1
  "$ncu" -i "$name.ncu-rep" --page source --print-source sass --csv >"$name.sass.csv" 2>&1
  echo "$spec: rc=$rc $(grep -m1 'Duration' "$name.txt")"
done
