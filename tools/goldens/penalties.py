#!/usr/bin/env python3
"""Penalty goldens computed by the peers' own code: vLLM's apply_penalties and Hugging Face's
RepetitionPenaltyLogitsProcessor, on the target rows of a draft tree.

Writes tests/data/penalties/penalties.json (not tests/data/samplers, whose every file the conformance
runner reads as a sampler golden). A request has a prompt and committed output tokens (with repeats)
and a draft tree; node i's target row is penalised with the history vLLM's rejection sampler gives
target row i: the output plus the draft tokens on the path to node i (prompt for repetition only).
For several parameter sets (negative frequency / presence included, which turn -0.0 logits into +0.0
wherever they are applied densely) every row goes through
- vLLM: `apply_penalties` of vllm/model_executor/layers/utils.py at vllm-project/vllm@00358600 with
  `apply_repetition_penalties` of vllm/_custom_ops.py at @0002bde5 (on CPU tensors its torch path:
  logits *= where(logits > 0, 1 / r, r)), after a logit bias added as vLLM's LogitBiasLogitsProcessor
  does (`logits[rows, tokens] += bias`, before the penalties in Sampler.forward);
- Hugging Face: transformers' RepetitionPenaltyLogitsProcessor (score < 0 ? score * r : score / r over
  prompt + output + path), repetition only.
Outputs are stored as float32 bit patterns. Logits are multiples of 1/64 in [-8, 8], exact zeros and
-0.0 included.

The vLLM functions are read from files the caller saves (excerpts or whole files; nothing of vLLM is in
the repository): the script extracts the named functions by their AST and executes them verbatim.
Needs torch and transformers. Usage:
  tools/goldens/penalties.py --vllm-utils FILE --vllm-custom-ops FILE [--out tests/data/penalties]
"""
import argparse
import ast
import json
import os
import random
import struct
import sys
import types

import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor


def functions(path, names):
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in keep}
    assert not missing, f"{path} lacks {missing}"
    ns = {"torch": torch}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    return ns


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", float(v)))[0] for v in t.tolist()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-utils", required=True)
    ap.add_argument("--vllm-custom-ops", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/penalties"))
    args = ap.parse_args()
    ops = functions(args.vllm_custom_ops, ["apply_repetition_penalties_torch", "apply_repetition_penalties_cuda",
                                          "apply_repetition_penalties"])
    # apply_penalties imports `from vllm._custom_ops import apply_repetition_penalties`.
    vllm = types.ModuleType("vllm")
    custom = types.ModuleType("vllm._custom_ops")
    custom.apply_repetition_penalties = ops["apply_repetition_penalties"]
    vllm._custom_ops = custom
    sys.modules["vllm"], sys.modules["vllm._custom_ops"] = vllm, custom
    utils = functions(args.vllm_utils, ["get_token_bin_counts_and_mask", "apply_penalties"])

    rng = random.Random(35)
    v = 300
    prompt = [rng.randrange(60) for _ in range(24)]
    output = [rng.randrange(40, 100) for _ in range(18)]
    # A tree of 12 nodes: tokens that repeat the prompt, the output, each other, and new ones.
    parents = [-1, 0, 0, 1, 1, 2, 3, 3, 5, 6, 8, 8]
    tokens = [output[-1]] + [rng.choice([rng.randrange(v), rng.choice(prompt), rng.choice(output), 7])
                             for _ in parents[1:]]
    n = len(tokens)

    def row(r):
        x = [rng.randrange(-512, 513) / 64.0 for _ in range(v)]
        for j in range(0, v, 37):
            x[j] = -0.0
        for j in range(5, v, 41):
            x[j] = 0.0
        return x
    logits = torch.tensor([row(r) for r in range(n)], dtype=torch.float32)
    bias = [[3, 1.5], [prompt[0], -2.25], [250, 0.75]]

    def path(i):
        p = []
        while i > 0:
            p.append(tokens[i])
            i = parents[i]
        return p[::-1]

    cases = []
    for rep, freq, pres in [(1.3, 0.4, 0.6), (0.8, -0.5, -0.25), (1.0, 0.0, 0.0), (2.0, 1.5, 0.0)]:
        out_vllm, out_hf = [], []
        for i in range(n):
            x = logits[i:i + 1].clone()
            for t, b in bias:
                x[0, t] += b
            hist = output + path(i)
            utils["apply_penalties"](x, torch.tensor([prompt]), torch.tensor([hist]), torch.tensor([pres], dtype=torch.float32),
                                     torch.tensor([freq], dtype=torch.float32), torch.tensor([rep], dtype=torch.float32))
            out_vllm.append(bits(x[0]))
            y = logits[i:i + 1].clone()
            y = RepetitionPenaltyLogitsProcessor(penalty=rep)(torch.tensor([prompt + hist]), y)
            out_hf.append(bits(y[0]))
        cases.append({"repetition": rep, "frequency": freq, "presence": pres, "vllm": out_vllm, "hf_repetition": out_hf})
    doc = {"source": "vLLM apply_penalties (vllm/model_executor/layers/utils.py @00358600, _custom_ops.py "
                     "@0002bde5, CPU torch path) after vLLM's logit-bias add; transformers "
                     "RepetitionPenaltyLogitsProcessor; run by tools/goldens/penalties.py",
           "vocab": v, "prompt": prompt, "output": output, "tokens": tokens, "parents": parents, "bias": bias,
           "logits": [bits(r) for r in logits], "cases": cases}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "penalties.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print("nodes", n, "cases", len(cases))


if __name__ == "__main__":
    main()
