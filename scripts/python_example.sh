#!/usr/bin/env bash
# Hugging Face transformers' greedy generation with specdec's suffix drafter and verifier, beside plain
# greedy decoding and transformers' own prompt lookup, on SmolLM2-135M-Instruct (the GGUF the project
# already uses, loaded by transformers). Fails unless every output is identical to plain greedy decoding.
#
#   scripts/python_example.sh [--max-new-tokens 128] [--csv out.csv] [--passes 2] [--threads N]
#
# Installs what it needs, once: a virtual environment with torch, transformers, gguf and accelerate
# (PyPI; torch's wheel is ~5 GB with its CUDA libraries, used on the CPU), then specdec's package from
# ./python. The environment is tools/train's when that exists (same torch), else its own; override with
# SPECDEC_TORCH_VENV. torch and transformers are this example's dependencies only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
venv="${SPECDEC_TORCH_VENV:-$cache/train-venv}"
model="$("$root/scripts/fetch_model.sh")"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, transformers, gguf, accelerate" 2>/dev/null; then
  echo "specdec: installing torch, transformers, gguf and accelerate into $venv (once; several GB)" >&2
  "$venv/bin/python" -m pip install --quiet torch==2.15.0 transformers==5.24.0 gguf==0.19.0 accelerate==1.15.0 numpy
fi
"$venv/bin/python" -m pip install --quiet "$root/python"
# Outside the repository, so that `import specdec` is the installed package.
cd "$(mktemp -d)"
exec "$venv/bin/python" "$root/examples/python/transformers_suffix.py" --model "$model" "$@"
