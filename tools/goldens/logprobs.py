#!/usr/bin/env python3
"""Logprob goldens computed by vLLM's own code: Sampler.compute_logprobs and Sampler.gather_logprobs
(vllm/v1/sample/sampler.py at vllm-project/vllm@3e342658) with batched_count_greater_than
(vllm/v1/sample/ops/logprobs.py at @a0aaf7fd), on rows with ties, grammar-masked entries and
temperatures, in both of vLLM's modes that specdec's emitted_logprobs serves: raw_logprobs (the
logits, masked) and processed_logprobs (the logits divided by the temperature, as Sampler.sample
does, then compute_logprobs).

Writes tests/data/logprobs/vllm.json: per case the logits (float32 bit patterns), the bitmask row
(xgrammar's layout; vLLM sees the masked entries as -inf, as its structured-output path writes
them), the temperature, the emitted token and n, and vLLM's LogprobsTensors row: token ids (the
emitted token, then the top n), log-probabilities (float32 bit patterns) and the rank
((logprobs >= the token's).sum(): ties counted, the token itself included). The top n of each case
are distinct values (torch.topk's order among ties is unspecified); ties sit below them and at the
emitted token.

The vLLM functions are read from files the caller saves (excerpts or whole files; nothing of vLLM is
in the repository) and executed verbatim, except that batched_count_greater_than's torch.compile
decorator is dropped (it only fuses the comparison and the sum into one kernel). Needs torch. Usage:
  tools/goldens/logprobs.py --vllm-sampler FILE --vllm-ops-logprobs FILE [--out tests/data/logprobs]
"""
import argparse
import ast
import collections
import json
import os
import random
import struct

import torch

LogprobsTensors = collections.namedtuple("LogprobsTensors", ["logprob_token_ids", "logprobs", "selected_token_ranks"])


def functions(path, names, ns):
    """The named top-level functions and methods of `path` (any class), decorators dropped."""
    tree = ast.parse(open(path).read())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.decorator_list = []
            found[node.name] = node
    missing = set(names) - set(found)
    assert not missing, f"{path} lacks {missing}"
    exec(compile(ast.Module(body=list(found.values()), type_ignores=[]), path, "exec"), ns)


def bits(values):
    return [struct.unpack("<I", struct.pack("<f", float(v)))[0] for v in values]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-sampler", required=True)
    ap.add_argument("--vllm-ops-logprobs", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/logprobs"))
    args = ap.parse_args()
    ns = {"torch": torch, "LogprobsTensors": LogprobsTensors}
    functions(args.vllm_ops_logprobs, ["batched_count_greater_than"], ns)
    functions(args.vllm_sampler, ["compute_logprobs", "gather_logprobs"], ns)

    rng = random.Random(36)
    v, words = 300, (300 + 31) // 32
    cases = []
    for c in range(24):
        n = [0, 1, 5, 20][c % 4]
        temperature = [1.0, 0.7, 1.3][c % 3]
        # Values on a grid of 1/8 below 4 (many ties), the top n + 1 distinct above it.
        x = [rng.randrange(-64, 32) / 8.0 for _ in range(v)]
        top = rng.sample(range(v), n + 1)
        for i, j in enumerate(top):
            x[j] = 6.0 + 0.375 * i
        mask = [0xFFFFFFFF] * words
        if c % 2 == 1:  # a grammar mask: about a third of the tokens, never the top ones
            mask = [rng.getrandbits(32) | rng.getrandbits(32) for _ in range(words)]
            for j in top:
                mask[j // 32] |= 1 << (j % 32)
        allowed = [(mask[j // 32] >> (j % 32)) & 1 == 1 for j in range(v)]
        for j in range(v):
            if rng.random() < 0.05 and j not in top:
                x[j] = float("-inf")  # a model's own -inf
        # The emitted token: the argmax, or one tied with others (ranks count the ties).
        if c % 3 == 0:
            token = top[0]
        else:
            support = [j for j in range(v) if allowed[j] and x[j] != float("-inf") and j not in top]
            token = rng.choice(support)
            for j in rng.sample(support, 3):
                x[j] = x[token]
        logits = torch.tensor([x], dtype=torch.float32)
        masked = logits.clone()
        masked[0, [j for j in range(v) if not allowed[j]]] = float("-inf")
        raw = ns["compute_logprobs"](masked)
        processed = ns["compute_logprobs"](masked.clone().div_(torch.tensor([temperature]).unsqueeze(dim=1)))
        out = {}
        for mode, lp in (("raw", raw), ("processed", processed)):
            t = ns["gather_logprobs"](lp, n, torch.tensor([token], dtype=torch.int64))
            out[mode] = {"token_ids": t.logprob_token_ids[0].tolist(), "logprobs": bits(t.logprobs[0].tolist()),
                         "rank": int(t.selected_token_ranks[0])}
        cases.append({"n": n, "temperature": temperature, "token": token, "logits": bits(x),
                      "mask": [m - (1 << 32) if m >= 1 << 31 else m for m in mask], **out})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "vllm.json"), "w") as f:
        json.dump({"source": "vLLM Sampler.compute_logprobs / gather_logprobs (vllm-project/vllm@3e342658), "
                             "batched_count_greater_than (@a0aaf7fd); tools/goldens/logprobs.py",
                   "vocab": v, "words": words, "cases": cases}, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
