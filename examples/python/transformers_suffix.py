# SPDX-License-Identifier: Apache-2.0
"""Hugging Face transformers' greedy generation driven by specdec: the suffix drafter (SuffixDecoding,
Arctic Inference's interface) proposes a draft tree from the request's own tokens and from earlier
responses, the target scores the whole tree in one forward under specdec's tree-attention mask, and
specdec's greedy verifier keeps the longest path the target agrees with. Compared on the same prompts
with plain greedy decoding and transformers' own prompt lookup (``prompt_lookup_num_tokens``): the
outputs must be identical, token for token; tokens per second and tau (tokens per target forward) are
printed side by side.

    scripts/python_example.sh                 # installs what it needs, then runs this file
    python transformers_suffix.py --model M.gguf [--max-new-tokens 128] [--csv out.csv]

transformers and torch are this example's dependencies, never the package's.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

import specdec

# Prompts where text repeats (code, edits of a given text, lists): where suffix drafts pay. Each request
# drafts from its own tokens and from the responses to the prompts before it (the global tree).
PROMPTS = [
    "Write a Python function that returns the factorial of a number, then the same function with a loop.",
    "Rewrite this sentence in the past tense, twice: The cat sits on the mat and looks at the bird.",
    "List the planets of the solar system in order from the sun, with one fact about each.",
    "Write a Python class Stack with push, pop, peek and is_empty methods, with docstrings.",
    "Explain in three sentences why the sky is blue.",
    "Translate to French: Good morning. How are you? I am fine, thank you. Good morning.",
]


class CountingModel:
    """Counts the target's forward passes (tau = generated tokens / forwards)."""

    def __init__(self, model):
        self.model, self.forwards = model, 0
        original = model.forward

        def counted(*args, **kwargs):
            self.forwards += 1
            return original(*args, **kwargs)

        model.forward = counted


def keep_cache_rows(cache: DynamicCache, prefix: int, kept: list[int]) -> None:
    """Keeps the KV rows of the committed prefix and of the tree nodes `kept` (the root and the accepted
    path), dropping the rejected branches: the rows the next forward attends."""
    index = torch.tensor([prefix + k for k in kept], dtype=torch.long)
    for layer in cache.layers:
        layer.keys = torch.cat([layer.keys[:, :, :prefix], layer.keys.index_select(2, index)], dim=2)
        layer.values = torch.cat([layer.values[:, :, :prefix], layer.values.index_select(2, index)], dim=2)


@torch.inference_mode()
def specdec_generate(model, prompt: list[int], max_new_tokens: int, eos: int | None, cache: specdec.SuffixDecodingCache,
                     request: int, tree: bool, policy: specdec.DraftLengthPolicy | None = None) -> tuple[list[int], int]:
    """Greedy generation with suffix drafts verified by specdec; returns the new tokens and the number
    of target forwards. With a policy (chains only), each draft is cut to the length the policy expects
    to pay off, from the forwards' measured cost and the acceptance measured so far."""
    past = DynamicCache()
    out = model(input_ids=torch.tensor([prompt]), cache=past, use_cache=True)
    tokens = list(prompt) + [int(torch.argmax(out.logits[0, -1]))]
    forwards = 1
    cache.start_request(request, prompt)
    cache.add_active_response(request, tokens[-1:])
    while len(tokens) - len(prompt) < max_new_tokens and tokens[-1] != eos:
        committed = past.get_seq_length()  # every token but the last has its KV rows
        draft = cache.speculate(request, tokens, max_spec_tokens=min(32, max_new_tokens - (len(tokens) - len(prompt))),
                                use_tree_spec=tree)
        if policy is not None:
            keep = policy.choose(available=len(draft.token_ids))
            draft = specdec.SuffixDecodingDraft(draft.token_ids[:keep], draft.parents[:keep], draft.probs[:keep])
        candidates = draft.tree(root=tokens[-1])
        start = time.perf_counter()
        mask = torch.from_numpy(candidates.mask(prefix_length=committed, additive=True))[None, None]
        positions = torch.from_numpy(candidates.positions(committed))[None]
        out = model(input_ids=torch.from_numpy(candidates.token.astype(np.int64))[None], position_ids=positions,
                    attention_mask=mask, cache=past, use_cache=True)
        forwards += 1
        (result,) = specdec.verify_greedy(out.logits[0].float().contiguous(), candidates)
        if policy is not None:
            policy.target_forward_timed(candidates.size, time.perf_counter() - start)
            policy.verified(len(result.accepted_nodes), candidates.max_depth)
        keep_cache_rows(past, committed, [0] + result.accepted_nodes)
        emitted = result.tokens
        if eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        emitted = emitted[: max_new_tokens - (len(tokens) - len(prompt))]
        tokens += emitted
        cache.add_active_response(request, emitted)
    cache.stop_request(request)
    return tokens[len(prompt):], forwards


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="SmolLM2-135M-Instruct GGUF (scripts/fetch_model.sh)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--lookup-tokens", type=int, default=10, help="transformers' prompt_lookup_num_tokens")
    parser.add_argument("--passes", type=int, default=1,
                        help="times the prompt set runs (later passes draft from the cached responses of earlier ones)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--csv", help="write the per-prompt figures here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    directory, name = os.path.split(os.path.abspath(args.model))
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    counter = CountingModel(model)
    eos = tokenizer.eos_token_id
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"specdec {specdec.__version__}, {name}, greedy, {args.max_new_tokens} new tokens")

    methods = ("plain", "prompt_lookup", "specdec_suffix", "specdec_suffix_tree", "specdec_suffix_policy")
    policy = specdec.DraftLengthPolicy(32)  # learns across requests, as an engine's would
    totals = {m: [0, 0, 0.0] for m in methods}  # tokens, forwards, seconds
    # One cache per specdec method: a method must not draft from the other's response to the same prompt.
    caches = {m: specdec.SuffixDecodingCache(max_tree_depth=64) for m in methods if m.startswith("specdec")}
    rows, mismatches, request = [], 0, 0
    for run in range(args.passes):
        for p, text in enumerate(PROMPTS):
            chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
            prompt = tokenizer(chat, return_tensors="pt").input_ids
            results = {}
            for method in methods:
                counter.forwards = 0
                start = time.perf_counter()
                if method in ("plain", "prompt_lookup"):
                    extra = {"prompt_lookup_num_tokens": args.lookup_tokens} if method == "prompt_lookup" else {}
                    with torch.inference_mode():
                        out = model.generate(prompt, max_new_tokens=args.max_new_tokens, do_sample=False, num_beams=1,
                                             pad_token_id=eos, **extra)
                    new = out[0, prompt.shape[1]:].tolist()
                    forwards = counter.forwards
                else:
                    request += 1
                    new, forwards = specdec_generate(model, prompt[0].tolist(), args.max_new_tokens, eos, caches[method], request,
                                                     tree=method.endswith("tree"),
                                                     policy=policy if method.endswith("policy") else None)
                seconds = time.perf_counter() - start
                results[method] = new
                totals[method][0] += len(new)
                totals[method][1] += forwards
                totals[method][2] += seconds
                rows.append({"pass": run, "prompt": p, "method": method, "tokens": len(new), "forwards": forwards,
                             "seconds": f"{seconds:.4f}", "identical": new == results["plain"]})
                if new != results["plain"]:
                    mismatches += 1
                    print(f"MISMATCH pass {run} prompt {p} {method}: {tokenizer.decode(new)!r} vs "
                          f"{tokenizer.decode(results['plain'])!r}", file=sys.stderr)
            print(f"pass {run} prompt {p}: " + ", ".join(
                f"{m} {len(results[m])} tok" for m in methods) + f"; {tokenizer.decode(results['plain'][:12])!r}...")

    print(f"{'method':<22}{'tokens':>8}{'forwards':>10}{'tau':>7}{'tok/s':>9}{'speedup':>9}")
    base = totals["plain"][0] / totals["plain"][2]
    for m in methods:
        tokens, forwards, seconds = totals[m]
        print(f"{m:<22}{tokens:>8}{forwards:>10}{tokens / forwards:>7.2f}{tokens / seconds:>9.1f}{tokens / seconds / base:>8.2f}x")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if mismatches:
        print(f"FAILED: {mismatches} outputs differ from plain greedy decoding", file=sys.stderr)
        return 1
    print("every output identical to plain greedy decoding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
