"""Replays what a C++ drafter example does with greedy verification, in PyTorch, from the same weights:
the target forwards and accepted drafts it must report. Equal counts mean the C++ drafter computes what
the trainer trained (a wiring difference shows up as other drafts, so other counts).

    python parity.py --model M.gguf --drafter moa --weights FILE.safetensors --prompts FILE [--max-new 64] [--tree K,DEPTH,NODES]

Each step of generate() (examples/engine/decoding.hpp) verifies the root x_n (the last committed
token, not in the target's cache: n tokens are) and the drafted nodes, and greedy verification accepts
the longest path matching the target's greedy continuation. The replay knows that continuation, so it
needs the drafter's proposal at each step only:
- eagle, jakiro, moa (examples/eagle.cpp, jakiro.cpp, moa.cpp): the EAGLE-2 tree
  specdec::eagle2_tree_builder grows (eagle2_accepted below: the same candidates, scores, ties and
  final rerank; Jakiro's last two steps as expand_dual), with the example's --tree (default its
  own: eagle 3,4,10, jakiro 2,2,6, moa 3,4,10). A tree node's draft forward sees the committed rows
  and its ancestors, so the replay runs each node as a causal sequence: the context and its path.
  EAGLE and Jakiro: row p fuses token p + 1 with the target's feature f_p, a path row with its
  parent's draft output; MoA: the tokens 0 .. n and the path, with the key/value stream of tokens
  0 .. n - 1.
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
    def drafter(sequence: list[int], n: int):
        """The MoA node evaluator for the root x_n = sequence[n]: the stream of tokens 0 .. n - 1."""
        stream = model.stream(target_kv(t, torch.tensor([sequence[:n]])).float())
        source_rope = model.rope(torch.arange(n), torch.float32)

        def logits(path: tuple) -> torch.Tensor:
            toks = list(sequence[:n + 1]) + list(path)
            T = len(toks)
            cos, sin = model.rope(torch.arange(T), torch.float32)
            query = model.sa(model.embed[torch.tensor([toks])].float(), torch.ones(T, T, dtype=torch.bool).tril(), cos, sin)
            # the last row's cross-attention over every verified token (no mask at inference)
            out = model.cross(query[:, -1:], stream, None, (cos[-1:], sin[-1:]), source_rope)
            return out[0, -1] @ t.lm_head.T

        return logits(()), lambda paths, dual: (torch.stack([logits(p) for p in paths]), None), lambda i: i

    return drafter


def load_eagle(t: Target, drafter: str, path: str):
    """The EAGLE (or Jakiro) node evaluator: drafter(sequence, n, h) -> (root logits, expand, to_target)."""
    from eagle import Draft

    w = load_file(path)
    jakiro = drafter == "jakiro"
    # EAGLE's head covers the draft vocabulary (d2t); Jakiro's is the target's whole LM head.
    draft_ids = torch.arange(t.lm_head.shape[0]) if jakiro else torch.arange(w["d2t"].shape[0]) + w["d2t"]
    model = Draft(t, draft_ids, jakiro)
    names = model.tensors()
    assert set(names) | ({"d2t"} if not jakiro else set()) == set(w), f"{path}: tensors differ: {sorted(set(names) ^ set(w))}"
    with torch.no_grad():
        for k, p in names.items():
            p.copy_(w[k].float())
    model.eval()

    @torch.no_grad()
    def evaluate(sequence: list[int], n: int, h: torch.Tensor):
        memo = {}

        def out(path: tuple):
            """The draft outputs (left, right) of the row of `path`'s last node; () is the root's row."""
            if path not in memo:
                tokens = list(sequence[1:n + 1]) + list(path)
                feats = torch.cat([h[:n]] + [out(path[:j])[0][None] for j in range(len(path))])
                T = len(tokens)
                x, q, k, v = model.qkv(torch.tensor([tokens]), feats[None], torch.arange(T))
                left, right = model.finish(x, q, k, v, torch.ones(T, T, dtype=torch.bool).tril()[None, None])
                memo[path] = (left[0, -1], None if right is None else right[0, -1])
            return memo[path]

        def expand(paths, dual):
            left = torch.stack([out(p)[0] for p in paths]) @ model.head.T
            right = torch.stack([out(p)[1] for p in paths]) @ model.head.T if dual else None
            return left, right

        return out(())[0] @ model.head.T, expand, lambda i: int(draft_ids[i])

    return evaluate


def topk_ids(scores: torch.Tensor, k: int) -> list[int]:
    """The k largest entries' indices, equal scores by the lower index (row_topk's order)."""
    return torch.sort(scores, descending=True, stable=True).indices[:k].tolist()


def eagle2_accepted(root_logits, expand, to_target, tree, truth: list[int], dual: bool) -> int:
    """Greedy verification of the tree specdec::eagle2_tree_builder grows (begin, `depth` expansions,
    the last two as Jakiro's expand_dual when `dual`, finish_single) against the true continuation: the
    accepted path's length. Flat candidate indices as the builder's (f < k: the root's children; k +
    i k^2 + r k + c: child c of frontier slot r at expansion i); scores are float32 sums of log-softmax
    as the builder's. expand(paths, dual) -> the frontier's (left, right or None) logits [k x V']."""
    k, depth, total = tree
    cand = {}  # flat index -> (score, target token, parent flat index or -1)

    def add(flat, parent, logits_row):
        lp = torch.log_softmax(logits_row.float(), -1)
        base = torch.tensor(cand[parent][0] if parent >= 0 else 0.0, dtype=torch.float32)
        for c, i in enumerate(topk_ids(lp, k)):
            cand[flat + c] = (float(base + lp[i]) if parent >= 0 else float(lp[i]), to_target(i), parent)
        return [flat + c for c in range(k)]

    def path(f):
        return (path(cand[f][2]) if cand[f][2] >= 0 else ()) + (cand[f][1],)

    frontier = add(0, -1, root_logits)
    for s in range(depth):
        last_two = dual and s + 2 == depth
        left, right = expand([path(f) for f in frontier], last_two)
        children = [f for r, parent in enumerate(frontier) for f in add(k + s * k * k + r * k, parent, left[r])]
        frontier = sorted(children, key=lambda f: (-cand[f][0], f))[:k]
        if last_two:  # the right head's children hang under the new frontier, slot for slot
            for j, parent in enumerate(frontier):
                add(k + (s + 1) * k * k + j * k, parent, right[j])
            break
    chosen = sorted(cand, key=lambda f: (-cand[f][0], f))[:total - 1]
    return max([0] + [len(p) for p in map(path, chosen) if list(p) == truth[:len(p)]])


# The examples' default dynamic trees (--tree K,DEPTH,NODES), as their main() passes them.
DYNAMIC_TREES = {"eagle": (3, 4, 10), "jakiro": (2, 2, 6), "moa": (3, 4, 10)}

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
    ap.add_argument("--drafter", choices=["eagle", "jakiro", "moa", "medusa", "amphista"], required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--tree", help="K,DEPTH,NODES for eagle, jakiro, moa (default: the example's)")
    a = ap.parse_args()
    torch.set_grad_enabled(False)  # the node evaluators run after their builders return
    dynamic = a.drafter in DYNAMIC_TREES
    tree = tuple(int(x) for x in a.tree.split(",")) if a.tree else DYNAMIC_TREES.get(a.drafter)
    t = Target(a.model, torch.float32)
    tok = tokenizer(t)
    stop = {tok.token_to_id("<|im_end|>"), t.eos}
    if a.drafter == "moa":
        moa = load_moa(t, a.weights)
    elif dynamic:
        eagle = load_eagle(t, a.drafter, a.weights)
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
        logits = heads(sequence) if not dynamic else None
        h = t(torch.tensor([sequence]))[0][0] if a.drafter in ("eagle", "jakiro") else None
        n, new, f, acc = len(prompt) - 1, 0, 0, 0
        while new < len(greedy):
            if dynamic:
                root, expand, to_target = moa(sequence, n) if a.drafter == "moa" else eagle(sequence, n, h)
                k = eagle2_accepted(root, expand, to_target, tree, sequence[n + 1:], a.drafter == "jakiro")
                drafted += tree[2] - 1
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
