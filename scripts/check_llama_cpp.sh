#!/usr/bin/env bash
# specdec inside llama.cpp, checked (scripts/test.sh runs this; no speed is asserted):
#   1. examples/llama_cpp builds against the pinned llama.cpp (fetched once; libllama + ggml-cpu built
#      in build/llama-check, ~3 minutes on 2 cores);
#   2. no-amx: llama.cpp's AMX path, which segfaults in this pin, can never be taken: ggml-cpu's compile
#      flags define no AMX macro even for an AMX CPU, no AMX instruction is in the programs, and no AMX
#      buffer type is offered or used at run time (scripts/llama_cpp_no_amx.py);
#   3. tree_kv_check: a tree decoded through sequence ids gives every node its chain's logits (with
#      flash attention; without it, the nodes whose path fills consecutive cells), and the decode after
#      keeping any path is bit for bit a chain's, flash attention on and off;
#   4. specdec's plain decoding gives llama.cpp's own plain greedy program (examples/simple/simple.cpp,
#      unmodified, at its fixed 4 threads) token for token: the same text after the same prompt;
#   5. specdec's prompt-lookup chains and trees give the plain output token for token (the example exits
#      1 otherwise). One thread: llama.cpp's kernels are batch-invariant there; and with two threads past
#      256 cells, one-token decodes on one thread (--decode-threads 1; docs/engine.md, step 9, says why);
#   6. sampler-check: specdec's penalties in llama.cpp's convention equal llama.cpp's own penalties
#      sampler bit for bit on every node of random trees (examples/llama_cpp/sampler_check.cpp);
#   7. constrained: under a JSON schema (llama.cpp's converter) and under a GBNF grammar, each with
#      penalties, every drafting method gives, token for token, what llama.cpp's own sampler chain gives
#      with one token per decode (grammar and penalties samplers called as common_sampler_sample calls
#      them).
# Each program's output goes to build/llama-check/logs/<step>.{out,err}. When a step fails, the report
# names the step and the program, says whether it crashed (a signal: the stack the program printed,
# and whether its innermost frames are llama.cpp's or specdec's) or found a difference (status 1),
# and gives llama.cpp's system info line.
# `--libraries-only` configures the same build and compiles llama.cpp's own libraries (llama, ggml), no
# specdec program, and runs nothing: scripts/test.sh starts that early in the background.
# Usage: scripts/check_llama_cpp.sh [--prompts FILE] [--tokens N] | --libraries-only
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
prompts="tests/data/llama_cpp/prompts.txt" tokens=48 libraries_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prompts) prompts="$2" ;;
    --tokens) tokens="$2" ;;
    --libraries-only) libraries_only=1; shift; continue ;;
    *) echo "usage: $0 [--prompts FILE] [--tokens N] | --libraries-only" >&2; exit 2 ;;
  esac
  shift 2
done
build="build/llama-check"
logs="$build/logs"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_LLAMA_CPP=ON -DSPECDEC_BUILD_TESTS=OFF \
  -DSPECDEC_BUILD_BENCH=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
if [ "$libraries_only" = 1 ]; then
  exec cmake --build "$build" -j"$(nproc)" --target llama ggml
fi
model="${SPECDEC_MODEL:-$(scripts/fetch_model.sh)}"
# llama.cpp's own sources warn under GCC; its build log is shown only when the build fails.
mkdir -p "$logs"
if ! cmake --build "$build" -j"$(nproc)" --target specdec_llama_cpp specdec_llama_cpp_tree_kv_check \
  specdec_llama_cpp_sampler_check specdec_llama_cpp_simple specdec_llama_cpp_batch_invariance_check >"$logs/build.log" 2>&1; then
  tail -n 60 "$logs/build.log"
  echo "check_llama_cpp.sh: FAILED at step 'build' (log: $logs/build.log)"
  exit 1
fi
examples="$build/examples"
system_info="(not known: the system-info step has not run)"

# resolve_frames: crash_report.cpp's frames ("binary(symbol+0x1f) [0x...]", or "binary(+0x4a2c0)" for a
# function the dynamic symbol table lacks) as "function  (binary)", the function demangled, or looked
# up in the binary's full symbol table.
resolve_frames() {
  local frame function
  while IFS= read -r frame; do
    function="??"
    if [[ $frame =~ ^([^\(]+)\(\+(0x[0-9a-f]+)\) ]]; then
      function="$(addr2line -f -C -e "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" 2>/dev/null | head -1)"
    elif [[ $frame =~ ^([^\(]+)\(([^+\)]+)\+0x[0-9a-f]+\) ]]; then
      function="$(c++filt "${BASH_REMATCH[2]}")"
    fi
    echo "${function:-??}  (${frame%%(*})"
  done
}

# report STEP STATUS PROGRAM ARGS...: why STEP failed, read from its logs.
report() {
  local step="$1" status="$2" program="$3"
  shift 3
  echo "check_llama_cpp.sh: FAILED at step '$step': $(basename "$program") exited with status $status"
  echo "  command: $program $*"
  if [ "$status" -gt 128 ]; then
    echo "  a crash (signal $((status - 128)), SIG$(kill -l "$((status - 128))" 2>/dev/null || echo '?')), not a difference found by a check (those exit with status 1)"
    # crash_report.cpp's frames, innermost first. Whose code crashed: the innermost frame that names
    # specdec's code or llama.cpp's (past the handler, libc, and helpers that name neither, such as
    # ggml's anonymous tinyBLAS templates).
    local frames
    frames="$(grep -E '^FRAME ' "$logs/$step.err" | sed 's/^FRAME //' | resolve_frames || true)"
    if [ -n "$frames" ]; then
      local frame function owner=""
      while IFS= read -r frame; do
        function="${frame%%  (*}"
        # main is specdec's in its two programs, llama.cpp's in simple.cpp.
        if grep -qE 'on_fatal_signal' <<<"$function"; then
          continue
        elif grep -qE 'specdec::|llama_example::|engine::' <<<"$function" ||
             grep -qE '^main  \(.*/specdec_llama_cpp(_tree_kv_check|_sampler_check)?\)$' <<<"$frame"; then
          owner="in specdec's code"
        elif grep -qE 'ggml|gguf|llama' <<<"$function" ||
             grep -qE '^main  \(.*/specdec_llama_cpp_simple\)$' <<<"$frame"; then
          owner="in llama.cpp's code (ggml / libllama), not specdec's"
        else
          continue
        fi
        echo "  $owner: $frame"
        break
      done <<<"$frames"
      [ -n "$owner" ] || echo "  innermost frames name neither specdec nor llama.cpp (see the stack)"
      echo "  stack (innermost first):"
      head -n 12 <<<"$frames" | sed 's/^/    /'
    else
      echo "  (no stack printed: the program died before crash_report.cpp could run)"
    fi
  elif [ "$status" -eq 1 ]; then
    echo "  a check failed (status 1), not a crash: its output below says what differed"
  fi
  echo "  llama.cpp system info: $system_info"
  echo "  last lines of its output ($logs/$step.out, .err):"
  tail -n 15 "$logs/$step.out" | sed 's/^/    | /'
  grep -vE '^(FRAME|CRASH) ' "$logs/$step.err" | tail -n 15 | sed 's/^/    ! /' || true
}

# step NAME PROGRAM ARGS...: runs it, its output in $logs/NAME.{out,err}; stops the check on failure.
step() {
  local name="$1" status=0
  shift
  "$@" >"$logs/$name.out" 2>"$logs/$name.err" || status=$?
  if [ "$status" -ne 0 ]; then
    report "$name" "$status" "$@"
    exit 1
  fi
}

step system-info "$examples/specdec_llama_cpp" --model "$model" --system-info
system_info="$(sed -n 's/^SYSTEM //p' "$logs/system-info.out")"
echo "llama.cpp system info: $system_info"

step no-amx python3 scripts/llama_cpp_no_amx.py --build "$build" --system-info "$logs/system-info.out" \
  "$examples/specdec_llama_cpp" "$examples/specdec_llama_cpp_tree_kv_check" "$examples/specdec_llama_cpp_sampler_check" \
  "$examples/specdec_llama_cpp_simple"
cat "$logs/no-amx.out"

step tree-kv-check "$examples/specdec_llama_cpp_tree_kv_check" --model "$model"
tail -1 "$logs/tree-kv-check.out"

# llama.cpp's simple.cpp decodes with llama.cpp's default thread count (4); specdec's plain decoding
# runs at the same count, so the same kernels decide.
step plain "$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --tokens "$tokens" --threads 4 \
  --methods plain
step chat "$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --print-chat
# Each prompt in the chat template, in a file of its own (the template ends in a newline, which a
# command substitution would drop), then through llama.cpp's simple.cpp.
rm -f "$logs"/chat-*.txt "$logs"/simple-*.out "$logs"/simple-*.err
python3 - "$logs/chat.out" "$logs" <<'PY'
import json, sys
chats = [json.loads(l.split(" ", 2)[2]) for l in open(sys.argv[1], encoding="utf-8") if l.startswith("CHAT ")]
for i, chat in enumerate(chats):
    open(f"{sys.argv[2]}/chat-{i}.txt", "w", encoding="utf-8").write(chat)
PY
for chat_file in "$logs"/chat-*.txt; do
  IFS= read -r -d '' chat <"$chat_file" || true
  i="${chat_file##*/chat-}" && i="${i%.txt}"
  step "simple-$i" "$examples/specdec_llama_cpp_simple" -m "$model" -n "$tokens" "$chat"
done
status=0
python3 - "$logs" "$tokens" <<'PY' || status=$?
import glob, json, sys
logs, tokens = sys.argv[1:]
chats = [json.loads(l.split(" ", 2)[2]) for l in open(f"{logs}/chat.out", encoding="utf-8") if l.startswith("CHAT ")]
ours = [json.loads(l.split(" ", 3)[3]) for l in open(f"{logs}/plain.out", encoding="utf-8") if l.startswith("TEXT ")]
assert len(chats) == len(ours) == len(glob.glob(f"{logs}/simple-*.out")) > 0, (len(chats), len(ours))
for i, (chat, text) in enumerate(zip(chats, ours)):
    out = open(f"{logs}/simple-{i}.out", encoding="utf-8", errors="replace").read()
    # simple.cpp prints the prompt's pieces, then each generated token's, then a newline.
    if out != chat + text + "\n":
        print(f"prompt {i}: specdec's plain decoding differs from llama.cpp's simple.cpp")
        print("  llama.cpp:", json.dumps(out[len(chat):]))
        print("  specdec:  ", json.dumps(text))
        sys.exit(1)
print(f"plain decoding: {len(chats)} prompts, {tokens} tokens, identical to llama.cpp's simple.cpp")
PY
if [ "$status" -ne 0 ]; then
  echo "check_llama_cpp.sh: FAILED at step 'plain-vs-simple': specdec's plain decoding differs from llama.cpp's (not a crash)"
  echo "  llama.cpp system info: $system_info"
  exit 1
fi

# The two one-thread steps run side by side (nothing here is timed; one thread each keeps llama.cpp's
# kernels batch-invariant): the speculative methods, and the suffix drafters with one cache across the
# requests (later ones draft from earlier answers).
step speculative "$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --tokens "$tokens" --threads 1 \
  --methods plain,chain,tree,suffix,suffix_tree &
speculative=$!
step shared-cache "$examples/specdec_llama_cpp" --model "$model" --prompts examples/llama_cpp/shared_cache.txt \
  --tokens "$tokens" --threads 1 --methods plain,suffix,suffix_tree --shared-cache &
shared_cache=$!
# step reports its own failure; each is waited for so neither is left running.
status=0
wait "$speculative" || status=1
wait "$shared_cache" || status=1
[ "$status" -eq 0 ] || exit 1
grep -E '^RESULT' "$logs/speculative.out"
echo "chain, tree, suffix and suffix_tree: greedy outputs identical to plain decoding"
grep -E '^RESULT' "$logs/shared-cache.out"
echo "suffix and suffix_tree with --shared-cache: greedy outputs identical to plain decoding"

# Batch invariance itself (docs/engine.md, step 9): 48 tokens decoded one per llama_decode, then again
# as chains of 2..33 tokens per decode, every row bit for bit, two threads with one-token decodes on one;
# SmolLM2 (Q4_1) as it loads, Gemma-3 (Q4_K_M, fetched once, ~242 MB) with --no-repack: its repacked
# Q4_K product of 4 rows and more is not its one-row product.
# The long summary's prompt: past 256 cells, where flash attention splits one-token decodes.
long_prompt="$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline()))' tests/data/llama_cpp/long.txt)"
step batch-invariance "$examples/specdec_llama_cpp_batch_invariance_check" --model "$model" --prompt "$long_prompt" \
  --tokens 48 --threads 2 --decode-threads 1
tail -1 "$logs/batch-invariance.out"
gemma="$(scripts/fetch_gemma.sh)"
step batch-invariance-gemma "$examples/specdec_llama_cpp_batch_invariance_check" --model "$gemma" --chat-template gemma \
  --prompt "$long_prompt" --tokens 48 --threads 2 --decode-threads 1 --no-repack
tail -1 "$logs/batch-invariance-gemma.out"

# Two threads, past 256 cells (the long summary, 128 tokens): llama.cpp's flash attention splits a
# one-token decode's keys across threads there and never a tree's, so one-token decodes run on one
# thread (--decode-threads 1) and trees on two; every method must still equal plain decoding token for
# token (without --decode-threads 1 all four differ on this prompt on a 2-core machine).
step two-threads "$examples/specdec_llama_cpp" --model "$model" --prompts tests/data/llama_cpp/long.txt --tokens 128 \
  --threads 2 --decode-threads 1 --methods plain,chain,tree,suffix,suffix_tree
grep -E '^RESULT' "$logs/two-threads.out"
echo "two threads past 256 cells (one-token decodes on one): greedy outputs identical to plain decoding"

step sampler-check "$examples/specdec_llama_cpp_sampler_check" --cases 400
tail -1 "$logs/sampler-check.out"

# Constrained generation, the two runs side by side (one thread each): a JSON schema with penalties on
# the structured prompts, a GBNF grammar with penalties on the check's prompts.
step json-schema "$examples/specdec_llama_cpp" --model "$model" --prompts tests/data/llama_cpp/structured.txt \
  --json-schema examples/llama_cpp/records.schema.json --repeat-penalty 1.1 --frequency-penalty 0.05 \
  --tokens 64 --threads 1 --methods plain,chain,tree,suffix,suffix_tree &
schema=$!
step grammar "$examples/specdec_llama_cpp" --model "$model" --prompts "$prompts" --grammar examples/llama_cpp/bullets.gbnf \
  --repeat-penalty 1.15 --presence-penalty 0.2 --repeat-last-n 32 --tokens "$tokens" --threads 1 \
  --methods plain,chain,tree,suffix,suffix_tree &
grammar=$!
status=0
wait "$schema" || status=1
wait "$grammar" || status=1
[ "$status" -eq 0 ] || exit 1
grep -E '^RESULT' "$logs/json-schema.out" "$logs/grammar.out" | sed 's/^[^:]*://'
echo "under a JSON schema and a GBNF grammar with penalties: greedy outputs identical to llama.cpp's sampler chain"
