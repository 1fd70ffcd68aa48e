#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs everything the GPU path has to prove on a machine with an NVIDIA GPU, in one go:
#   1. bench/gpu_check.cu: the device, its measured read bandwidth, every row primitive against
#      thrust_backend<cpp> (shapes and adversarial rows), deferred faults, a CUDA graph, and the timing table;
#   2. bench/gpu_check_torch.py: PyTorch's own operations at the same shapes (the baseline);
#   3. the CUDA conformance suite (specdec_tests_cuda), when built (cmake -DSPECDEC_ENABLE_CUDA=ON);
#   4. compute-sanitizer memcheck and racecheck on gpu_check --quick;
#   5. the Python package's CUDA side: `pip install ./python` for this GPU (offline, into build/gpu, built
#      while phase 1 runs), then its whole pytest suite, test_cuda.py first (skipped with SPECDEC_GPU_PYTHON=0).
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

# The Python package builds on the CPUs while the GPU phases run (host work only; it starts before
# gpu_check so that its minutes overlap the timing runs). The GPU machines have no package index: the
# build uses the scikit-build-core and nanobind installed beside PyTorch (no build isolation) and
# installs into build/gpu/python-site, not the system's environment. Eigen's headers come from
# SPECDEC_EIGEN_INCLUDE_DIR (default: the system's, else a copy the caller placed in .eigen/).
python_on=${SPECDEC_GPU_PYTHON:-1}
site=$PWD/build/gpu/python-site
if [ "$python_on" != 0 ]; then
  eigen=${SPECDEC_EIGEN_INCLUDE_DIR:-}
  if [ -z "$eigen" ] && [ ! -f /usr/include/eigen3/Eigen/Core ] && [ -f .eigen/Eigen/Core ]; then eigen=$PWD/.eigen; fi
  rm -rf "$site"
  (CMAKE_BUILD_PARALLEL_LEVEL=4 timeout 400 nice python3 -m pip install -v --no-build-isolation --no-deps \
    --target "$site" ./python -C build.verbose=true -C cmake.define.SPECDEC_PYTHON_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=native \
    -C cmake.define.CMAKE_CUDA_COMPILER="$nvcc" ${eigen:+-C cmake.define.SPECDEC_EIGEN_INCLUDE_DIR="$eigen"} \
    > "$out/python_build.log" 2>&1) &
  python_build=$!
fi

phase "gpu_check"
timeout 180 "$bin" --csv "$out/gpu_check.csv" 2>&1 | tee "$out/gpu_check.log"
check_rc=${PIPESTATUS[0]}
read_gbps=$(sed -n 's/^measured streaming read bandwidth: \([0-9.]*\) GB\/s$/\1/p' "$out/gpu_check.log")

python_rc=0
if [ "$python_on" != 0 ]; then
  phase "Python package, CUDA side (the whole pytest suite, test_cuda.py first; the build started with gpu_check)"
  wait "$python_build"
  build_rc=$?
  {
    echo "compilers: $(c++ --version | head -1); $("$nvcc" --version | tail -1)"
    grep -m1 -o "nvcc .*cuda_ops.cu" "$out/python_build.log" | cut -c1-400
    so=$(ls "$site"/specdec/_specdec*.so 2>/dev/null)
    [ -n "$so" ] && echo "module exports $(nm -D --defined-only "$so" | wc -l) symbols, $(nm -D --defined-only "$so" |
      grep -c '_ZNS[oi]9_M_insert\|_ZNSt7codecvt') of them iostream / codecvt members; $(ldd "$so" | grep -o 'libstdc++[^ ]* => [^ ]*')"
    [ "$build_rc" = 0 ] && echo "built" &&
      (cd build/gpu && PYTHONPATH="$site" timeout 150 python3 -m pytest -q -p no:cacheprovider \
        ../../python/tests/test_cuda.py ../../python/tests)
  } 2>&1 | tail -40 | tee "$out/python_cuda.log"
  python_rc=${PIPESTATUS[0]}
  [ "$python_rc" = 0 ] || tail -30 "$out/python_build.log"
fi

phase "PyTorch baseline"
timeout 80 python3 bench/gpu_check_torch.py --csv "$out/torch.csv" --read-gbps "${read_gbps:-0}" 2>&1 |
  tee "$out/torch.log" | tail -3

if [ -x build/cuda/tests/specdec_tests_cuda ]; then
  phase "conformance suite (specdec_tests_cuda)"
  # The suite reads tests/data through the absolute path it was built with.
  data_dir=$(strings build/cuda/tests/specdec_tests_cuda | grep -m1 '/tests/data$' || true)
  if [ -n "$data_dir" ] && [ ! -d "$data_dir" ]; then mkdir -p "$(dirname "$(dirname "$data_dir")")" &&
    ln -sfn "$PWD" "$(dirname "$(dirname "$data_dir")")"; fi
  # The CUDA backend's cases only (the CPU backends' run in CI); 200 s: the statistical tests of the
  # trees, samplers and blocks suites make many eager (synchronising) calls.
  timeout 200 build/cuda/tests/specdec_tests_cuda -tc='*thrust_system::cuda*' 2>&1 | tail -40 | tee "$out/conformance.log"
  conformance_rc=${PIPESTATUS[0]}
else
  conformance_rc=0
fi

phase "compute-sanitizer memcheck + racecheck (gpu_check --quick)"
{
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin" --quick --no-timing 2>&1 | grep -v "Host Frame" | tail -30
  echo "memcheck rc=${PIPESTATUS[0]}"
  timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 "$bin" --quick --no-timing 2>&1 | grep -v "Host Frame" | tail -30
  echo "racecheck rc=${PIPESTATUS[0]}"
} 2>&1 | tee "$out/sanitizer.log"

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
