#!/usr/bin/env bash
# specdec inside llama.cpp, checked (scripts/test.sh runs this; no speed is asserted):
#   1. examples/llama_cpp builds against the pinned llama.cpp (fetched once; libllama + ggml-cpu built
#      in build/llama-check, ~3 minutes on 2 cores);
#   2. tree_kv_check: a tree decoded through sequence ids gives every node its chain's logits, and the
#      decode after keeping any path is bit for bit a chain's, flash attention on and off;
#   3. specdec's plain decoding gives llama.cpp's own plain greedy program (examples/simple/simple.cpp,
#      unmodified, at its fixed 4 threads) token for token: the same text after the same prompt;
#   4. specdec's prompt-lookup chains and trees give the plain output token for token (the example exits
#      1 otherwise). One thread: llama.cpp's kernels are batch-invariant there (docs/performance.md says
#      where they are not).
# Usage: scripts/check_llama_cpp.sh [--prompts FILE] [--tokens N]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
prompts="tests/data/llama_cpp/prompts.txt" tokens=48
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts) prompts="$2" ;;
    --tokens) tokens="$2" ;;
    *) echo "usage: $0 [--prompts FILE] [--tokens N]" >&2; exit 2 ;;
  esac
  shift 2
done
model="${SPECDEC_MODEL:-$(scripts/fetch_model.sh)}"
build="build/llama-check"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_LLAMA_CPP=ON -DSPECDEC_BUILD_TESTS=OFF \
  -DSPECDEC_BUILD_BENCH=OFF >/dev/null
# llama.cpp's own sources warn under GCC; its build log is shown only when the build fails.
if ! cmake --build "$build" -j"$(nproc)" --target specdec_llama_cpp specdec_llama_cpp_tree_kv_check \
  specdec_llama_cpp_simple >"$build/build.log" 2>&1; then
  tail -n 60 "$build/build.log"
  exit 1
fi
examples="$build/examples"

"$examples/specdec_llama_cpp_tree_kv_check" --model "$model" | tail -1

# llama.cpp's simple.cpp decodes with llama.cpp's default thread count (4); specdec's plain decoding
# runs at the same count, so the same kernels decide.
"$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --tokens "$tokens" --threads 4 \
  --methods plain >"$build/plain.txt" 2>/dev/null
"$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --print-chat >"$build/chat.txt" 2>/dev/null
python3 - "$examples/specdec_llama_cpp_simple" "$model" "$tokens" "$build/chat.txt" "$build/plain.txt" <<'PY'
import json, subprocess, sys
simple, model, tokens, chat_file, plain_file = sys.argv[1:]
chats = [json.loads(l.split(" ", 2)[2]) for l in open(chat_file, encoding="utf-8") if l.startswith("CHAT ")]
ours = [json.loads(l.split(" ", 3)[3]) for l in open(plain_file, encoding="utf-8") if l.startswith("TEXT ")]
assert len(chats) == len(ours) > 0, (len(chats), len(ours))
for i, (chat, text) in enumerate(zip(chats, ours)):
    out = subprocess.run([simple, "-m", model, "-n", tokens, chat], capture_output=True, text=True,
                         errors="replace", check=True).stdout
    # simple.cpp prints the prompt's pieces, then each generated token's, then a newline.
    if out != chat + text + "\n":
        print(f"prompt {i}: specdec's plain decoding differs from llama.cpp's simple.cpp")
        print("  llama.cpp:", json.dumps(out[len(chat):]))
        print("  specdec:  ", json.dumps(text))
        sys.exit(1)
print(f"plain decoding: {len(chats)} prompts, {tokens} tokens, identical to llama.cpp's simple.cpp")
PY

"$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --tokens "$tokens" --threads 1 \
  --methods plain,chain,tree 2>/dev/null | grep -E '^RESULT'
echo "chain and tree: greedy outputs identical to plain decoding"
