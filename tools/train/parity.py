"""Replays what a C++ drafter example does with greedy verification, in PyTorch, from the same weights:
the target forwards and accepted drafts it must report. Equal counts mean the C++ drafter computes what
the trainer trained (a wiring difference shows up as other drafts, so other counts).

    python parity.py --model M.gguf --drafter moa --weights FILE.safetensors --prompts FILE [--max-new 64]

Each step of generate() (examples/engine/decoding.hpp) verifies the root x_n (the last committed
token, not in the target's cache: n tokens are) and the drafted nodes, and greedy verification accepts
the longest path matching the target's greedy continuation. The replay knows that continuation, so it
needs the drafter's proposal at each step only:
- moa (examples/moa.cpp run with `--tree 1,3,4`, its chain of 3; the default tree is not replayed): a
  chain, greedy from the target's full LM head, the key/value stream of
  tokens 0 .. n - 1;
- medusa, amphista (examples/medusa.cpp, amphista.cpp): the static tree the example fills from its
  heads' top-k at row n - 1 (the target's final hidden state there, and for Amphista its staged layers
  over rows 0 .. n - 1), with the example's tree shape and k.
Prints one line per prompt and `RESULT drafter=... target_forwards=... accepted=... drafted=...`, the
figures the C++ example prints (`greedy tau ... (accepted A of D drafted), F target forwards`).
"""
from __future__ import annotations

import argparse
import json

import torch
from safetensors.torch import load_file

from target import Target, chat_prefix, tokenizer


def load_moa(t: Target, path: str):
    from moa import MoA, target_kv

    w = load_file(path)
    ca_intermediate = w["cross_attention.mlp.gate_proj.weight"].shape[0]
    model = MoA(t, ca_intermediate)
    names = model.tensors()
    assert set(names) == set(w), f"{path}: tensors differ from the MoA layout: {sorted(set(names) ^ set(w))}"
    with torch.no_grad():
        for k, p in names.items():
            p.copy_(w[k].float())
    model.eval()

    @torch.no_grad()
    def chain(sequence: list[int], n: int, length: int) -> list[int]:
        """Drafts `length` tokens after sequence[: n + 1], seeing the stream of tokens 0 .. n - 1."""
        stream = model.stream(target_kv(t, torch.tensor([sequence[:n]])).float())
        toks = list(sequence[:n + 1])
        for _ in range(length):
            T = len(toks)
            cos, sin = model.rope(torch.arange(T), torch.float32)
            query = model.sa(model.embed[torch.tensor([toks])].float(), torch.ones(T, T, dtype=torch.bool).tril(), cos, sin)
            # the last row's cross-attention over every verified token (no mask at inference)
            out = model.cross(query[:, -1:], stream, None, (cos[-1:], sin[-1:]), model.rope(torch.arange(n), torch.float32))
            toks.append(int((out[0, -1] @ t.lm_head.T).argmax()))
        return toks[n + 1:]

    return chain


# The examples' static trees (choices: each node's path of ranks) and top-k.
STATIC_TREES = {
    "medusa": ([(0,), (1,), (2,), (0, 0), (0, 1), (0, 0, 0)], 4),
    "amphista": ([(0,), (1,), (0, 0), (0, 1), (0, 0, 0), (0, 0, 0, 0)], 3),
}


def load_heads(t: Target, drafter: str, path: str):
    """Returns heads(sequence) -> [rows x heads x V] logits of every row p (token p + k + 2 from slot k)."""
    w = load_file(path)
    if drafter == "medusa":
        from medusa import Heads

        k = len(STATIC_TREES["medusa"][0][-1])
        model = Heads(k, t.config.hidden)
    else:
        from amphista import Amphista

        model = Amphista(t, len(STATIC_TREES["amphista"][0][-1]))
    names = model.tensors()
    assert set(names) <= set(w), f"{path}: missing {sorted(set(names) - set(w))}"
    with torch.no_grad():
        for k, p in names.items():
            p.copy_(w[k].float())

    @torch.no_grad()
    def heads(sequence: list[int]) -> torch.Tensor:
        toks = torch.tensor([sequence])
        h = t(toks)[0][0]  # [T x E], fp32 as the engine
        if drafter == "medusa":
            z = torch.stack([model(h, k) for k in range(model.weight.shape[0])], 1)
        else:
            T = len(sequence) - 1  # row p = [f_p; e(x_{p+1})]
            z = model(toks[:, 1:], h[None, :T], torch.ones(1, T, dtype=torch.bool))[0]
        return z @ t.lm_head.T

    return heads


def tree_accepted(choices, top_k, logits: torch.Tensor, truth: list[int]) -> int:
    """Greedy verification of a static tree filled from `logits` [heads x V] (node (r1 .. rd): head
    d - 1's rd-th token) against the true continuation: the accepted path's length."""
    ids = logits.topk(top_k, -1).indices
    path = ()
    while True:
        d = len(path)
        nxt = [c for c in choices if len(c) == d + 1 and c[:d] == path and d < len(truth) and int(ids[d, c[d]]) == truth[d]]
        if not nxt:
            return d
        path = nxt[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--drafter", choices=["moa", "medusa", "amphista"], required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--length", type=int, default=3)
    a = ap.parse_args()
    t = Target(a.model, torch.float32)
    tok = tokenizer(t)
    stop = {tok.token_to_id("<|im_end|>"), t.eos}
    if a.drafter == "moa":
        chain = load_moa(t, a.weights)
    else:
        heads = load_heads(t, a.drafter, a.weights)
        choices, top_k = STATIC_TREES[a.drafter]
    forwards = accepted = drafted = 0
    for line in open(a.prompts):
        if not line.strip():
            continue
        prompt = chat_prefix(tok, json.loads(line))
        greedy = t.generate([prompt], a.max_new, 0.0, stop)[0]
        sequence = prompt + greedy
        logits = None if a.drafter == "moa" else heads(sequence)
        n, new, f, acc = len(prompt) - 1, 0, 0, 0
        while new < len(greedy):
            if a.drafter == "moa":
                draft = chain(sequence, n, a.length)
                k = 0
                while k < len(draft) and n + 1 + k < len(sequence) and draft[k] == sequence[n + 1 + k]:
                    k += 1
                drafted += len(draft)
            else:
                k = tree_accepted(choices, top_k, logits[n - 1], sequence[n + 1:])
                drafted += len(choices)
            f, acc = f + 1, acc + k
            new += k + 1
            n += k + 1
        forwards, accepted = forwards + f, accepted + acc
        print(f"prompt {line.strip()[:40]}: {len(greedy)} tokens, {f} target forwards, {acc} accepted", flush=True)
    print(f"RESULT drafter={a.drafter} target_forwards={forwards} accepted={accepted} drafted={drafted}")


if __name__ == "__main__":
    main()
