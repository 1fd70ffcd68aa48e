#!/usr/bin/env bash
# specdec inside llama.cpp, side by side with llama.cpp's own speculative decoding, in one command:
#
#   scripts/compare_llama_cpp.sh [--prompts FILE] [--quant Q4_1|Q4_0|F16] [--tokens 128] [--threads 2]
#                                [--repeats 3] [--temperature 0]
#
# Fetches the pinned llama.cpp (cmake/llama_cpp.pin) and SmolLM2-135M-Instruct once, builds libllama,
# llama.cpp's own programs (llama-completion, llama-lookup, llama-speculative-simple, llama-quantize)
# and examples/llama_cpp from that one source tree into build/llama-compare (~8 minutes on 2 cores the
# first time), makes the quantisation asked for from the shipped Q4_1 with llama-quantize, then runs
# scripts/compare_llama_cpp.py: per prompt and method a `RESULT engine=llama.cpp quant=... prompt=...
# method=... tok_s=... speedup=... tau=... identical=...` line, then a table. Prompts: one JSON string
# per line (default examples/llama_cpp/prompts.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
prompts="examples/llama_cpp/prompts.txt" quant="Q4_1" tokens=128 threads=2 repeats=3 temperature=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts) prompts="$2" ;;
    --quant) quant="$2" ;;
    --tokens) tokens="$2" ;;
    --threads) threads="$2" ;;
    --repeats) repeats="$2" ;;
    --temperature) temperature="$2" ;;
    *) echo "usage: $0 [--prompts FILE] [--quant Q4_1|Q4_0|F16] [--tokens N] [--threads N] [--repeats N] [--temperature T]" >&2
       exit 2 ;;
  esac
  shift 2
done
case "$quant" in Q4_1|Q4_0|F16) ;; *) echo "--quant: $quant; expected Q4_1, Q4_0 or F16" >&2; exit 2 ;; esac

scripts/install-deps.sh >&2
shipped="$(scripts/fetch_model.sh)"
build="build/llama-compare"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_LLAMA_CPP=ON -DSPECDEC_BUILD_LLAMA_CPP_TOOLS=ON \
  -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF >&2
cmake --build "$build" -j"$(nproc)" --target specdec_llama_cpp llama-completion llama-lookup \
  llama-speculative-simple llama-quantize >&2

model="$shipped"
if [ "$quant" != Q4_1 ]; then
  model="${shipped%.Q4_1.gguf}.$quant.gguf"
  if [ ! -s "$model" ]; then
    "$build/bin/llama-quantize" --allow-requantize "$shipped" "$model.part" "$quant" >&2
    mv "$model.part" "$model"
  fi
fi

echo "llama.cpp $(grep -E '^LLAMA_CPP_COMMIT=' cmake/llama_cpp.pin | cut -d= -f2 | cut -c1-12)," \
  "$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cores, $(date -u +%F)"
python3 scripts/compare_llama_cpp.py --bin "$build/bin" --specdec "$build/examples/specdec_llama_cpp" \
  --model "$model" --quant "$quant" --prompts "$prompts" --warmup examples/llama_cpp/warmup.txt \
  --tokens "$tokens" --threads "$threads" \
  --repeats "$repeats" --temperature "$temperature"
