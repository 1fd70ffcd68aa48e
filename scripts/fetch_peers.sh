#!/usr/bin/env bash
# Prints a directory holding the peers' own source files that specdec's Python package follows (the
# functions it offers under their names): vLLM's rejection sampler, FlashInfer's sampling and packbits
# (with the CUDA headers and bindings that define them), sgl-kernel's and SGLang's speculative wrappers
# and kernels, and Arctic Inference's SuffixDecoding. Test oracles and references, never dependencies;
# nothing of theirs is copied into the repository. First use: each pinned distribution is downloaded
# from PyPI (the file URLs the simple index https://pypi.org/simple/<name>/ lists; `pip download` of an
# sdist would try to build it), its SHA-256 checked against the pin (the index's #sha256= fragment),
# and only the files listed below are extracted, under their paths in the distribution. The sgl-kernel
# wheel (~536 MB, nearly all compiled kernels) is deleted once its .py files are out; the other archives
# stay in the cache. Nothing is built or imported. Cache: $SPECDEC_CACHE, else ~/.cache/specdec
# (archives in sdist/ and wheel/, the files in peers/<name>-<version>/).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

# ---- The pins, in one place ------------------------------------------------------------------------
vllm_version=0.33.0
vllm_sha256=f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112
vllm_url="https://files.pythonhosted.org/packages/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-$vllm_version.tar.gz"

flashinfer_version=0.7.2.post1
flashinfer_sha256=af60319898dcfd552ba12a34165b9dd46c0bbd83d48ce665b1df6bd6ae77e9f1
flashinfer_url="https://files.pythonhosted.org/packages/05/76/1a42eafe2a3cd26924e485fb85bc635a2a41fcb14f453a8c037214b32940/flashinfer_python-$flashinfer_version.tar.gz"

# No sdist on PyPI: the x86_64 wheel (a zip), of which only .py files are taken.
sgl_kernel_version=0.3.21
sgl_kernel_sha256=57dfb3a2a3cd759f499c32e2bad5f6489b7c58f7f9a84ee00c53ec92d303aaab
sgl_kernel_url="https://files.pythonhosted.org/packages/36/9f/f836e126002c7cfcfe35418f6cff5a63fe3f529c609b334ca4775354b4d5/sgl_kernel-$sgl_kernel_version-cp310-abi3-manylinux2014_x86_64.whl"

# SGLang's newest release when pinned. No sdist: the CPython 3.12 x86_64 wheel (its Python and CUDA
# source files are the same in every wheel of the release). SGLang now builds its speculative kernels
# just in time from sources it ships (sglang/kernels/jit), so the wheel holds them.
sglang_version=0.5.23
sglang_sha256=8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6
sglang_url="https://files.pythonhosted.org/packages/ca/5f/fb9c2417fc4c650f62ef98ddee2cc25988456c94e8a6ca8661ef0cbe0b09/sglang-$sglang_version-cp312-cp312-manylinux_2_34_x86_64.whl"

# Arctic Inference: the pin of scripts/fetch_suffix_oracle.sh (version, sha256, url), read from it, and
# the sdist it downloads (the same cache file, so either script fetches it once).
mapfile -t arctic_pin < <(bash -c 'source <(grep -E "^(version|sha256|url)=" "$1"); printf "%s\n" "$version" "$sha256" "$url"' \
  _ "$root/scripts/fetch_suffix_oracle.sh")
arctic_version=${arctic_pin[0]}
arctic_sha256=${arctic_pin[1]}
arctic_url=${arctic_pin[2]}

# ---- The files taken from each distribution (paths inside it, without an sdist's top folder) ----------
vllm_files=(
  vllm/v1/sample/rejection_sampler.py    # rejection_sample, apply_sampling_constraints, GREEDY_TEMPERATURE
  vllm/v1/sample/metadata.py             # SamplingMetadata
  vllm/v1/sample/ops/topk_topp_sampler.py  # apply_top_k_top_p (dispatches to the Triton file below)
  vllm/v1/sample/ops/topk_topp_triton.py
  vllm/v1/spec_decode/metadata.py        # SpecDecodeMetadata (the layout rejection_sample takes)
)
flashinfer_files=(
  flashinfer/sampling.py
  flashinfer/quantization/packbits.py    # packbits, segment_packbits (flashinfer/quantization.py before 0.6)
  flashinfer/topk.py                     # the radix top_k of top_k_first's fast path
  include/flashinfer/sampling.cuh
  include/flashinfer/topk.cuh
  include/flashinfer/topk_common.cuh
  include/flashinfer/air_top_p.cuh
  include/flashinfer/quantization.cuh
  csrc/sampling.cu                       # the bindings: argument checks and casts
  csrc/sampling_utils.h
  csrc/renorm.cu
  csrc/quantization.cu
)
sgl_kernel_files=(
  sgl_kernel/__init__.py
  sgl_kernel/speculative.py
  sgl_kernel/sampling.py
)
sglang_files=(
  'sglang/srt/speculative/*.py'          # one level: eagle_utils.py, spec_utils.py, ngram_worker.py, ...
  sglang/kernels/ops/speculative/tree.py
  sglang/kernels/ops/speculative/sampling.py
  sglang/kernels/ops/speculative/verify_sampling.py
  sglang/kernels/ops/speculative/reject_sampling.py
  sglang/kernels/ops/speculative/reconstruct_tree.py
  sglang/kernels/ops/speculative/spec_tree.py
  sglang/kernels/jit/csrc/speculative/tree.cuh
  sglang/kernels/jit/csrc/speculative/sampling.cuh
  sglang/kernels/jit/include/sgl_kernel/speculative/eagle.cuh
  sglang/kernels/jit/include/sgl_kernel/speculative/ngram.cuh
  sglang/kernels/jit/include/sgl_kernel/speculative/sampling.cuh
)
arctic_files=(
  csrc/suffix_decoding/bindings.cc       # the nanobind module _C: SuffixTree's Python methods
  csrc/suffix_decoding/suffix_tree.h
  csrc/suffix_decoding/suffix_tree.cc
  csrc/suffix_decoding/int32_map.h
  arctic_inference/suffix_decoding/__init__.py
  arctic_inference/suffix_decoding/cache.py
)

cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
peers="$cache/peers"

# fetch URL SHA256 FILE SIZE: FILE holds the pinned bytes afterwards (downloaded unless already there).
fetch() {
  local url=$1 sha=$2 file=$3 size=$4
  if [ -s "$file" ] && echo "$sha  $file" | sha256sum --check --status; then
    return
  fi
  mkdir -p "$(dirname "$file")"
  echo "specdec: fetching $(basename "$file") (PyPI, $size)" >&2
  python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$file.part"
  mv "$file.part" "$file"
  echo "$sha  $file" | sha256sum --check --status || { echo "specdec: $file does not have SHA-256 $sha" >&2; exit 1; }
}

# take NAME VERSION SHA256 URL ARCHIVE SIZE KEEP FILES...: the FILES of the archive (a .tar.gz sdist,
# whose top folder is dropped, or a wheel) into $peers/NAME-VERSION, once per pinned archive (a stamp
# holds its SHA-256). KEEP=no deletes the archive afterwards. A listed file that is missing is an error.
take() {
  local name=$1 version=$2 sha=$3 url=$4 archive=$5 size=$6 keep=$7
  shift 7
  local out="$peers/$name-$version"
  if [ "$(cat "$out/.sha256" 2>/dev/null)" = "$sha" ]; then
    return
  fi
  fetch "$url" "$sha" "$archive" "$size"
  rm -rf "$out.part" && mkdir -p "$out.part"
  python3 - "$archive" "$out.part" "$@" <<'PY'
import fnmatch, os, sys, tarfile, zipfile
archive, out, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
if archive.endswith(".tar.gz"):
    src = tarfile.open(archive)
    members = {m.name.split("/", 1)[1]: m for m in src.getmembers() if m.isfile() and "/" in m.name}
    read = lambda m: src.extractfile(m).read()
else:
    src = zipfile.ZipFile(archive)
    members = {n: n for n in src.namelist() if not n.endswith("/")}
    read = src.read
for pattern in patterns:
    # '*' stays within one folder (fnmatch's would cross '/').
    depth = pattern.count("/")
    hits = sorted(n for n in members if n.count("/") == depth and fnmatch.fnmatchcase(n, pattern))
    if not hits:
        sys.exit(f"specdec: {archive} has no {pattern}")
    for path in hits:
        dest = os.path.join(out, path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(read(members[path]))
PY
  echo "$sha" > "$out.part/.sha256"
  rm -rf "$out" && mv "$out.part" "$out"
  if [ "$keep" = no ]; then
    rm -f "$archive"
  fi
}

take vllm "$vllm_version" "$vllm_sha256" "$vllm_url" "$cache/sdist/vllm-$vllm_version.tar.gz" "47 MB" yes \
  "${vllm_files[@]}"
take flashinfer-python "$flashinfer_version" "$flashinfer_sha256" "$flashinfer_url" \
  "$cache/sdist/flashinfer_python-$flashinfer_version.tar.gz" "51 MB" yes "${flashinfer_files[@]}"
take sgl-kernel "$sgl_kernel_version" "$sgl_kernel_sha256" "$sgl_kernel_url" "$cache/wheel/$(basename "$sgl_kernel_url")" \
  "536 MB, deleted once its .py files are out" no "${sgl_kernel_files[@]}"
take sglang "$sglang_version" "$sglang_sha256" "$sglang_url" "$cache/wheel/$(basename "$sglang_url")" "39 MB" yes \
  "${sglang_files[@]}"
take arctic-inference "$arctic_version" "$arctic_sha256" "$arctic_url" "$cache/sdist/arctic_inference-$arctic_version.tar.gz" \
  "226 kB" yes "${arctic_files[@]}"
echo "$peers"
