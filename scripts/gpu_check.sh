#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs everything the GPU path has to prove on a machine with an NVIDIA GPU, in one go:
#   1. bench/gpu_check.cu: the device, its measured read bandwidth, every row primitive against
#      thrust_backend<cpp> (shapes and adversarial rows), deferred faults, a CUDA graph, and the timing table;
#   2. bench/gpu_check_torch.py: PyTorch's own operations at the same shapes (the baseline);
#   3. the CUDA conformance suite (specdec_tests_cuda), when built (cmake -DSPECDEC_ENABLE_CUDA=ON);
#   4. compute-sanitizer memcheck and racecheck on gpu_check --quick;
#   5. the Python package's CUDA side: `pip install ./python` for this GPU (a venv over the system's torch),
#      then python/tests/test_cuda.py (skipped with SPECDEC_GPU_PYTHON=0).
# Usage: scripts/gpu_check.sh [OUT_DIR]   (default build/gpu-check; logs and CSVs land there)
# Binaries: build/gpu/gpu_check is used when it runs here, else built with nvcc (SPECDEC_CUDA_ARCH,
# default: the GPU's own compute capability).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu-check}
mkdir -p "$out" build/gpu
export LD_LIBRARY_PATH="$PWD/build/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
start=$(date +%s)
phase() { echo "== $1 [$(($(date +%s) - start)) s]"; }

phase "device"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  "$nvcc" --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null
} 2>&1 | tee "$out/device.txt"

bin=build/gpu/gpu_check
if [ ! -x "$bin" ] || ldd "$bin" | grep -q "not found"; then
  arch=${SPECDEC_CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
  phase "building gpu_check for sm_$arch"
  "$nvcc" -std=c++20 -O3 -lineinfo -arch="sm_$arch" -Iinclude -I"$(dirname "$nvcc")/../include/cccl" bench/gpu_check.cu \
    -o "$bin" || exit 1
fi

phase "gpu_check"
timeout 180 "$bin" --csv "$out/gpu_check.csv" 2>&1 | tee "$out/gpu_check.log"
check_rc=${PIPESTATUS[0]}
read_gbps=$(sed -n 's/^measured streaming read bandwidth: \([0-9.]*\) GB\/s$/\1/p' "$out/gpu_check.log")

phase "PyTorch baseline"
timeout 80 python3 bench/gpu_check_torch.py --csv "$out/torch.csv" --read-gbps "${read_gbps:-0}" 2>&1 |
  tee "$out/torch.log" | tail -3

if [ -x build/cuda/tests/specdec_tests_cuda ]; then
  phase "conformance suite (specdec_tests_cuda)"
  # The suite reads tests/data through the absolute path it was built with.
  data_dir=$(strings build/cuda/tests/specdec_tests_cuda | grep -m1 '/tests/data$' || true)
  if [ -n "$data_dir" ] && [ ! -d "$data_dir" ]; then mkdir -p "$(dirname "$(dirname "$data_dir")")" &&
    ln -sfn "$PWD" "$(dirname "$(dirname "$data_dir")")"; fi
  # The CUDA backend's cases only (the CPU backends' run in CI); 240 s: the statistical tests of the
  # trees, samplers and blocks suites make many eager (synchronising) calls.
  timeout 240 build/cuda/tests/specdec_tests_cuda -tc='*thrust_system::cuda*' 2>&1 | tail -40 | tee "$out/conformance.log"
  conformance_rc=${PIPESTATUS[0]}
else
  conformance_rc=0
fi

phase "compute-sanitizer memcheck + racecheck (gpu_check --quick)"
{
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin" --quick --no-timing 2>&1 | grep -v "Host Frame" | tail -30
  echo "memcheck rc=${PIPESTATUS[0]}"
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 "$bin" --quick --no-timing 2>&1 | grep -v "Host Frame" | tail -30
  echo "racecheck rc=${PIPESTATUS[0]}"
} 2>&1 | tee "$out/sanitizer.log"

python_rc=0
if [ "${SPECDEC_GPU_PYTHON:-1}" != 0 ]; then
  phase "Python package, CUDA side (pip install ./python for this GPU, then test_cuda.py)"
  {
    python3 -m venv --system-site-packages build/gpu/python-venv &&
      timeout 240 build/gpu/python-venv/bin/python -m pip install --quiet ./python \
        -C cmake.define.SPECDEC_PYTHON_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=native &&
      (cd build/gpu && timeout 120 python-venv/bin/python -m pytest -q ../../python/tests/test_cuda.py \
        ../../python/tests/test_torch.py)
  } 2>&1 | tail -30 | tee "$out/python_cuda.log"
  python_rc=${PIPESTATUS[0]}
fi

phase "summary"
python3 - "$out/gpu_check.csv" "$out/torch.csv" <<'EOF' | tee "$out/summary.txt"
import csv, sys
rows = {}
for path in sys.argv[1:]:
    try:
        for r in csv.DictReader(open(path)):
            rows[(r["impl"], r["op"], int(r["rows"]), int(r["V"]))] = r
    except FileNotFoundError:
        pass
print(f"{'op':18s} {'rows':>4s} {'V':>7s} {'specdec us':>10s} {'%bw':>6s} {'launch':>6s} {'torch us':>9s} {'speed-up':>8s}")
for (impl, op, r, v), s in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][3], kv[0][2])):
    if impl != "specdec":
        continue
    t = rows.get(("torch", op, r, v))
    tus = float(t["median_us"]) if t else float("nan")
    bw = f"{float(s['pct_read_bw']):5.1f}%" if s["pct_read_bw"] else "     -"  # tree operations: no byte count
    print(f"{op:18s} {r:4d} {v:7d} {float(s['median_us']):10.2f} {bw} {s['launches']:>6s} "
          f"{tus:9.2f} {tus / float(s['median_us']):7.2f}x")
EOF
phase "done: gpu_check rc=$check_rc, conformance rc=$conformance_rc, Python CUDA rc=$python_rc"
[ "$check_rc" = 0 ] && [ "$conformance_rc" = 0 ] && [ "$python_rc" = 0 ]
