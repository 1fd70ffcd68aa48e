#!/usr/bin/env python3
"""specdec inside llama.cpp against llama.cpp's own speculative decoding, side by side.

Run by scripts/compare_llama_cpp.sh, which builds the programs and makes the model; see there. It runs:

  llama.cpp                 llama-completion, plain greedy decoding: the reference output and speed
  llama.cpp_lookup          llama-lookup (prompt-lookup drafting, its defaults; its dynamic n-gram
                            cache kept across the prompts in file order with --shared-cache)
  llama.cpp_lookup_static   llama-lookup with a static n-gram cache that llama-lookup-create built from
                            the corpus docs/*.md (--corpus)
  llama.cpp_<type>          llama-speculative-simple --spec-type <type>, every type that needs no draft
                            model: ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache
  specdec_plain/chain/tree/suffix/suffix_tree
                            examples/llama_cpp (one process per round runs every prompt, the methods
                            interleaved, each method's draft-length policy kept across the prompts after
                            a warm-up on other prompts, as an engine keeps it; --shared-cache: one suffix
                            cache per method across the prompts in file order)

with the same model, prompt (the chat template applied, as specdec's example applies it), threads and
number of new tokens. Rounds interleave the programs, so that drift hits them alike. Every program is
timed the same way: new tokens over the seconds from the end of the prompt's decode to the last token (llama-completion's own `eval time`, llama-lookup's and
llama-speculative-simple's own `decoded ... in ... seconds`; the first token comes from the prompt's
last row in each, except that llama-speculative-simple decodes the prompt's last token again with its
first draft). Per (prompt, method): the median tokens/s over rounds; the speed-up, the median over rounds
of the ratio to the plain decoding run beside it (llama-completion on the same prompt just before, for
llama.cpp's programs; specdec_plain in the same process, for specdec's methods); `identical`, whether
the greedy output equals llama-completion's token for token (as text: its first N tokens' pieces).

--json-schema FILE / --grammar FILE and the penalty options constrain every program alike: llama.cpp's
programs take them as their own options (--json-schema-file, --grammar-file, --repeat-penalty, ...;
their common_sampler then checks each sampled token against the grammar), specdec's example through
llama.cpp's grammar engine and specdec's penalties in llama.cpp's convention.
"""
import argparse
import json
import math
import os
import re
import statistics
import os
import subprocess
import sys
import tempfile

END_OF_TURN = "<|im_end|>"

# ggml's tiled K-quant product (8 rows and more) sums in another order than its one-row dot product;
# every program compared here runs without it, so that a decode's rows do not depend on its row count
# (specdec's example turns it off itself; llama.cpp's programs read the same variable).
os.environ.setdefault("GGML_CPU_TILED_MM", "0")


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)
    if p.returncode != 0:
        sys.stderr.write(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}\n")
        raise SystemExit(1)
    return p.stdout, p.stderr


def threads(a):
    # llama.cpp's -t is its one-token decodes' threads, -tb its batches'; specdec's --decode-threads and
    # --threads are the same two. --no-repack is the same flag in both.
    return ["-t", str(a.decode_threads or a.threads), "-tb", str(a.threads)] + (["--no-repack"] if a.no_repack else [])


def sampling(a):
    # Sampled runs: temperature alone, as specdec's example samples (llama.cpp's defaults add top-k 40,
    # top-p 0.95 and min-p 0.05).
    return ["--temp", str(a.temperature)] + (["--top-k", "0", "--top-p", "1", "--min-p", "0"] if a.temperature > 0 else [])


def constraints(a, specdec_names=False):
    """The grammar and penalties, in llama.cpp's option names or specdec's example's."""
    args = []
    if a.json_schema:
        args += ["--json-schema" if specdec_names else "--json-schema-file", a.json_schema]
    if a.grammar:
        args += ["--grammar" if specdec_names else "--grammar-file", a.grammar]
    for name in ("repeat_penalty", "frequency_penalty", "presence_penalty", "repeat_last_n"):
        if getattr(a, name) is not None:
            args += ["--" + name.replace("_", "-"), str(getattr(a, name))]
    return args


def completion(a, chat_file):
    out, err = run([a.bin + "/llama-completion", "-m", a.model, "-f", chat_file, "-n", str(a.tokens),
                    *threads(a), "--seed", str(a.seed), "-no-cnv", "--no-display-prompt", "--no-escape",
                    "--no-warmup", "-c", "4096"] + sampling(a) + constraints(a))
    m = re.search(r"eval time =\s*([\d.]+) ms /\s*(\d+) runs", err.replace("prompt eval time", "prompt_eval"))
    seconds, runs = float(m.group(1)) / 1e3, int(m.group(2))
    if runs == 0 or seconds == 0:  # the model ended its turn at once: nothing to time
        return None
    text = out.split(" [end of text]")[0].rstrip("\n")
    # A run is one decode of the last token chosen; the first token comes from the prompt's decode.
    return {"tok_s": (runs + 1) / seconds, "tau": 1.0, "text": text}


SPEC_TYPES = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


def speculative_tool(a, chat_file, program, extra):
    out, err = run([a.bin + "/" + program, "-m", a.model, "-f", chat_file, "-n", str(a.tokens),
                    *threads(a), "--seed", str(a.seed), "--no-escape", "-c", "4096"] + sampling(a)
                   + constraints(a) + extra)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", err)
    n_predict, seconds = int(m.group(1)), float(m.group(2))
    n_accept = int(re.search(r"n_accept\s*=\s*(\d+)", err).group(1))
    # llama-lookup's first token comes from the prompt's decode; llama-speculative-simple's from its
    # first draft's decode. Each decode gives one token plus the drafts it accepted.
    free = 1 if program == "llama-lookup" else 0
    decodes = max(n_predict - n_accept - free, 1)
    return {"tok_s": n_predict / seconds, "tau": (n_predict - free) / decodes, "text": out}


def specdec(a):
    """One run of every prompt through specdec's example: {prompt: {method: result}}. Its draft-length
    policies are kept across the prompts, as an engine keeps them across requests, after the warm-up
    prompts (other text than the measured prompts; untimed)."""
    cmd = [a.specdec, "--model", a.model, "--prompts", a.prompts, "--tokens", str(a.tokens), "--threads",
           str(a.threads), "--decode-threads", str(a.decode_threads or a.threads), "--temperature", str(a.temperature),
           *(["--no-repack"] if a.no_repack else []),
           "--seed", str(a.seed), "--quant", a.quant,
           "--warmup", a.warmup, "--methods", "plain,chain,tree,suffix,suffix_tree"] + (["--shared-cache"] if a.shared_cache else []) \
        + (["--chat-template", a.chat_template] if a.chat_template else []) + constraints(a, specdec_names=True)
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if p.returncode not in (0, 1):  # 1: a greedy output differed from specdec_plain (reported below)
        sys.stderr.write(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}\n")
        raise SystemExit(1)
    results = {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
            results.setdefault(int(fields["prompt"]), {})[fields["method"]] = {
                "tok_s": float(fields["tok_s"]), "tau": float(fields["tau"])}
        elif line.startswith("TEXT "):
            _, prompt, method, text = line.split(" ", 3)
            results[int(prompt.split("=", 1)[1])][method.split("=", 1)[1]]["text"] = json.loads(text)
        elif line.startswith("COST ") and a.verbose:
            print(line)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="folder of llama.cpp's programs")
    ap.add_argument("--specdec", required=True, help="the specdec_llama_cpp program")
    ap.add_argument("--model", required=True)
    ap.add_argument("--quant", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--warmup", required=True, help="prompts specdec's example runs first, untimed")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-threads", type=int, default=0,
                    help="threads of one-token decodes (0: --threads); 1 makes every program's tree and one-token rows agree")
    ap.add_argument("--no-repack", action="store_true",
                    help="no CPU_REPACK weights in any program (their 4-row product is not the one-row product)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--shared-cache", action="store_true",
                    help="caches kept across the prompts in file order (specdec's suffix caches, llama-lookup's dynamic one)")
    ap.add_argument("--chat-template", default="", help="a template llama.cpp knows by name, for a GGUF without one")
    ap.add_argument("--static-cache", required=True, help="llama-lookup-create's static n-gram cache (-lcs)")
    ap.add_argument("--json-schema", help="a JSON schema every program's output follows (llama.cpp's converter in each)")
    ap.add_argument("--grammar", help="a GBNF grammar every program's output follows")
    ap.add_argument("--repeat-penalty", type=float)
    ap.add_argument("--frequency-penalty", type=float)
    ap.add_argument("--presence-penalty", type=float)
    ap.add_argument("--repeat-last-n", type=int)
    ap.add_argument("--llama-methods", default=",".join(["lookup", "lookup_static"] + SPEC_TYPES),
                    help="llama.cpp's speculative methods to run (default: all that need no draft model)")
    a = ap.parse_args()
    greedy = a.temperature == 0.0

    chats, _ = run([a.specdec, "--model", a.model, "--prompts", a.prompts, "--print-chat"]
                   + (["--chat-template", a.chat_template] if a.chat_template else []))
    chat_texts = [json.loads(l.split(" ", 2)[2]) for l in chats.splitlines() if l.startswith("CHAT ")]
    llama_methods = ["llama.cpp_" + m for m in a.llama_methods.split(",") if m]
    methods = ["llama.cpp"] + llama_methods + ["specdec_plain", "specdec_chain", "specdec_tree", "specdec_suffix",
                                               "specdec_suffix_tree"]
    workdir = tempfile.mkdtemp(prefix="specdec-compare-")
    chat_files = []
    for p, chat in enumerate(chat_texts):
        chat_files.append(os.path.join(workdir, f"chat{p}.txt"))
        with open(chat_files[-1], "w", encoding="utf-8") as f:
            f.write(chat + "\n")  # -f drops one final newline; the template's own must stay
    # Rounds interleave the programs: each round runs llama.cpp's three on every prompt, then specdec's
    # example on every prompt (its three methods interleaved inside).
    runs = {p: {m: [] for m in methods} for p in range(len(chat_texts))}
    # llama-lookup's dynamic cache with --shared-cache: every round of prompt p starts from the file the
    # prompts before it left (round 0's), so no round drafts from its own earlier answer.
    dynamic = [os.path.join(workdir, f"dynamic{p}.bin") for p in range(len(chat_texts) + 1)]
    skipped = set()
    for r in range(a.repeats):
        for p, chat_file in enumerate(chat_files):
            if p in skipped:
                continue
            plain = completion(a, chat_file)
            if plain is None:
                print(f"prompt {p}: skipped (llama-completion generated no token: the model ended its turn at once)",
                      flush=True)
                skipped.add(p)
                continue
            runs[p]["llama.cpp"].append(plain)
            for m in llama_methods:
                kind = m[len("llama.cpp_"):]
                if kind == "lookup":
                    extra = []
                    if a.shared_cache:
                        scratch = os.path.join(workdir, "dynamic.bin")
                        if os.path.exists(dynamic[p]):
                            with open(dynamic[p], "rb") as src, open(scratch, "wb") as dst:
                                dst.write(src.read())
                        elif os.path.exists(scratch):
                            os.remove(scratch)
                        extra = ["-lcd", scratch]
                    runs[p][m].append(speculative_tool(a, chat_file, "llama-lookup", extra))
                    if a.shared_cache and r == 0:
                        os.replace(scratch, dynamic[p + 1])
                elif kind == "lookup_static":
                    runs[p][m].append(speculative_tool(a, chat_file, "llama-lookup", ["-lcs", a.static_cache]))
                else:
                    runs[p][m].append(speculative_tool(a, chat_file, "llama-speculative-simple", ["--spec-type", kind]))
        for p, by_method in specdec(a).items():
            for method, r in by_method.items():
                if p not in skipped:
                    runs[p][method].append(r)
    # Speed-ups are medians of per-round ratios to the plain decoding run beside each method: llama.cpp's
    # programs against llama-completion on the same prompt seconds before, specdec's methods against
    # specdec_plain in the same process (this machine's speed drifts by up to a quarter within seconds,
    # more than most of the differences measured). specdec_plain's own is against llama-completion.
    beside = {m: ("specdec_plain" if m.startswith("specdec_") and m != "specdec_plain" else "llama.cpp")
              for m in methods}
    rows = []
    measured = [p for p in range(len(chat_texts)) if p not in skipped]
    for p in measured:
        reference = runs[p]["llama.cpp"][-1]["text"]
        for m in methods:
            last = runs[p][m][-1]
            tok_s = statistics.median(r["tok_s"] for r in runs[p][m])
            speedup = statistics.median(r["tok_s"] / b["tok_s"] for r, b in zip(runs[p][m], runs[p][beside[m]]))
            if not greedy:
                identical = "n/a"
            elif m.startswith("specdec"):
                identical = "yes" if last["text"] == reference else "no"
            else:  # llama.cpp's programs print the prompt first and may run past N tokens
                identical = "yes" if reference in last["text"].replace(END_OF_TURN, "") else "no"
            tau = statistics.median(r["tau"] for r in runs[p][m])
            rows.append((p, m, tok_s, speedup, tau, identical))
            print(f"RESULT engine=llama.cpp quant={a.quant} prompt={p} method={m} tok_s={tok_s:.1f} "
                  f"speedup={speedup:.2f} tau={tau:.2f} identical={identical}", flush=True)

    if constraints(a):
        print("\nconstrained: " + " ".join(constraints(a, specdec_names=True)))
    print(f"\nquant {a.quant}, {a.threads} thread(s), {a.tokens} new tokens, temperature {a.temperature}, "
          f"median of {a.repeats}; speed-up against the plain decoding beside each method (specdec_plain's: against\n"
          f"llama-completion, a different process)")
    print("prompt  " + "  ".join(f"{m.replace('llama.cpp_', 'l.').replace('specdec_', 's.'):>17}" for m in methods))
    for p in measured:
        cells = [r for r in rows if r[0] == p]
        print(f"{p:>6}  " + "  ".join(f"{r[3]:5.2f}x {r[4]:4.2f} {r[5]:>4}" for r in cells))
    print("(l.: llama.cpp's programs, s.: specdec's methods)")
    print("(each cell: speedup, tokens per target forward, greedy output identical to llama.cpp plain)")
    best_specdec = [max(r[3] for r in rows if r[0] == p and r[1] != "specdec_plain" and r[1].startswith("specdec"))
                    for p in measured]
    best_llama = [max(r[3] for r in rows if r[0] == p and r[1].startswith("llama.cpp_")) for p in measured]
    print("best specdec method per prompt: " + " ".join(f"{x:.2f}" for x in best_specdec))
    print("best llama.cpp method per prompt: " + " ".join(f"{x:.2f}" for x in best_llama))
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print(f"geometric mean: specdec best {geo(best_specdec):.3f}, llama.cpp best {geo(best_llama):.3f}")
    if greedy and any(r[5] == "no" for r in rows if r[1].startswith("specdec")):
        print("some specdec greedy output differs from llama.cpp plain decoding (see docs/performance.md: "
              "llama.cpp's kernels are not batch-invariant at every thread count)")


if __name__ == "__main__":
    main()
