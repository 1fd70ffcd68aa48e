#!/usr/bin/env python3
"""Grammar bitmask goldens computed by xgrammar 0.2.8 (PyPI) over SmolLM2-135M's vocabulary.

Writes tests/data/grammar/xgrammar_masks.json:
- `apply`: small cases of `xgrammar.apply_token_bitmask_inplace` (CPU) with their full outputs: a last
  word whose bits past V are set, a narrower `vocab_size`, `indices`, a bitmask narrower than the logits.
- `grammars`: for a JSON schema, a regex and an EBNF grammar, a draft tree grown from the matcher
  (mostly allowed tokens, some forbidden ones, a stop token where the grammar may end; depth 6), the per-node
  masks xgrammar's own `GrammarMatcher.traverse_draft_tree` fills for it (rows of forbidden and
  terminated nodes all zero), whether each node's path leaves the matcher terminated, and for rows of
  deterministic logits (`logit(r, j) = ((r * 7919 + j * 104729) % 2039 - 1019) / 1024`, exact in
  float32) the CRC-32 of `apply_token_bitmask_inplace`'s float32 output per row.
Masks are stored run-length encoded: a row is [[word, count], ...] (int32 words as signed values).

xgrammar is a test oracle only (never a dependency of the headers). The vocabulary comes from the GGUF
the tests already use (scripts/fetch_model.sh). Needs xgrammar==0.2.8, torch and gguf:
  python -m pip install xgrammar==0.2.8 gguf torch
Usage: tools/goldens/xgrammar_masks.py MODEL.gguf [--out tests/data/grammar]
"""
import argparse
import json
import os
import random
import zlib

import gguf
import torch
import xgrammar as xgr

GRAMMARS = [
    ("json_schema", json.dumps({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                       "tags": {"type": "array", "items": {"enum": ["a", "bc", "def"]}, "maxItems": 3}},
        "required": ["name", "age", "tags"], "additionalProperties": False})),
    ("regex", r"(yes|no|[0-9]{2,4}-[a-z]{1,6})\."),
    ("ebnf", 'root ::= greeting " " name ("!" | ".")\ngreeting ::= "hello" | "hi" | "hey there"\n'
             'name ::= [A-Z] [a-z]+'),
]


def vocabulary(path):
    reader = gguf.GGUFReader(path)
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    eos = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    return tokens, eos


def rle(words):
    out = []
    for w in words:
        w = int(w)
        if out and out[-1][0] == w:
            out[-1][1] += 1
        else:
            out.append([w, 1])
    return out


def logits_rows(n, v):
    j = torch.arange(v, dtype=torch.int64)
    rows = [((r * 7919 + j * 104729) % 2039 - 1019).to(torch.float32) / 1024.0 for r in range(n)]
    return torch.stack(rows)


def allowed_tokens(mask_row, v):
    bits = []
    for w, word in enumerate(mask_row.tolist()):
        u = word & 0xFFFFFFFF
        while u:
            b = (u & -u).bit_length() - 1
            u &= u - 1
            t = w * 32 + b
            if t < v:
                bits.append(t)
    return bits


def grow_tree(matcher, v, words, rng, eos, depth, branch):
    """A draft tree grown depth-first from the matcher's state (restored afterwards): children are
    allowed tokens (a stop token first where allowed) and, at about one child in seven, a forbidden
    token; at most about 30 nodes."""
    tokens, parents = [0], [-1]
    mask = torch.zeros((1, words), dtype=torch.int32)

    def expand(node, d):
        if d == depth or matcher.is_terminated() or len(tokens) >= 30:
            return
        matcher.fill_next_token_bitmask(mask)
        allowed = allowed_tokens(mask[0], v)
        picks = []
        if eos in allowed and rng.random() < 0.5:
            picks.append(eos)
        for _ in range(branch):
            if rng.random() < 0.15 or not allowed:
                t = rng.randrange(v)
                picks.append(t)
            else:
                picks.append(rng.choice(allowed))
        for t in picks:
            tokens.append(t)
            parents.append(node)
            me = len(tokens) - 1
            if matcher.accept_token(t):
                expand(me, d + 1)
                matcher.rollback(1)
    expand(0, 0)
    # Breadth-first renumbering (parents first), children kept in creation order.
    order, depth_of = [0], {0: 0}
    children = {}
    for i in range(1, len(tokens)):
        children.setdefault(parents[i], []).append(i)
    q = 0
    while q < len(order):
        for c in children.get(order[q], []):
            order.append(c)
        q += 1
    index = {old: new for new, old in enumerate(order)}
    return [tokens[o] for o in order], [-1 if o == 0 else index[parents[o]] for o in order]


def terminated_flags(matcher, tokens, parents):
    """Whether the matcher is terminated after the path to each node (False for forbidden paths)."""
    n = len(tokens)
    flags = [False] * n
    for i in range(1, n):
        path, p = [], i
        while p > 0:
            path.append(tokens[p])
            p = parents[p]
        path.reverse()
        ok = 0
        for t in path:
            if not matcher.accept_token(t):
                break
            ok += 1
        if ok == len(path):
            flags[i] = bool(matcher.is_terminated())
        if ok:
            matcher.rollback(ok)
    return flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/grammar"))
    args = ap.parse_args()
    vocab, eos = vocabulary(args.model)
    v = len(vocab)
    words = xgr.get_bitmask_shape(1, v)[1]
    info = xgr.TokenizerInfo(vocab, xgr.VocabType.BYTE_LEVEL, vocab_size=v, stop_token_ids=[eos])
    compiler = xgr.GrammarCompiler(info)
    out = {"source": "xgrammar 0.2.8 (PyPI wheel) run by tools/goldens/xgrammar_masks.py; vocabulary "
                     "of SmolLM2-135M-Instruct (GGUF tokenizer.ggml.tokens, byte-level BPE)",
           "vocab": v, "words": words, "eos": eos, "apply": [], "grammars": []}

    # apply_token_bitmask_inplace on small synthetic cases, full outputs.
    def apply_case(name, logits, bitmask, **kw):
        x = logits.clone()
        xgr.apply_token_bitmask_inplace(x, bitmask, backend="cpu", **kw)
        out["apply"].append({"name": name, "cols": logits.shape[1], "logits": logits.tolist(),
                             "bitmask": bitmask.tolist(), "vocab_size": kw.get("vocab_size", -1),
                             "indices": kw.get("indices", []),
                             "out": [[("-inf" if f == float("-inf") else f) for f in row] for row in x.tolist()]})
    rng = random.Random(7)
    lg = logits_rows(4, 70)
    bm = torch.tensor([[rng.randrange(-2**31, 2**31) for _ in range(3)] for _ in range(4)], dtype=torch.int32)
    bm[1, 2] = -1  # bits past V = 70 set in the last word
    apply_case("V 70, random words, tail bits set", lg, bm)
    apply_case("vocab_size 40", lg, bm, vocab_size=40)
    apply_case("indices [2, 0]", lg, bm, indices=[2, 0])
    apply_case("logits wider than the bitmask (100 columns, 3 words)", logits_rows(4, 100), bm)

    for kind, text in GRAMMARS:
        if kind == "json_schema":
            compiled = compiler.compile_json_schema(text)
        elif kind == "regex":
            compiled = compiler.compile_regex(text)
        else:
            compiled = compiler.compile_grammar(text)
        matcher = xgr.GrammarMatcher(compiled)
        rng = random.Random(len(text))
        # A committed prefix (node 0's state): a few allowed tokens.
        prefix = []
        mask = torch.zeros((1, words), dtype=torch.int32)
        for _ in range(2):
            matcher.fill_next_token_bitmask(mask)
            allowed = [t for t in allowed_tokens(mask[0], v) if t != eos]
            t = rng.choice(allowed)
            assert matcher.accept_token(t)
            prefix.append(t)
        tokens, parents = grow_tree(matcher, v, words, rng, eos, depth=6, branch=3)
        n = len(tokens)
        first = [-1] * n
        sibling = [-1] * n
        last = {}
        for i in range(1, n):
            p = parents[i]
            if first[p] < 0:
                first[p] = i
            else:
                sibling[last[p]] = i
            last[p] = i
        bitmask = xgr.allocate_token_bitmask(n, v)
        matcher.traverse_draft_tree(torch.tensor(first, dtype=torch.int64), torch.tensor(sibling, dtype=torch.int64),
                                    torch.tensor(tokens, dtype=torch.int64), bitmask)
        terminated = terminated_flags(matcher, tokens, parents)
        lg = logits_rows(n, v)
        applied = lg.clone()
        xgr.apply_token_bitmask_inplace(applied, bitmask, backend="cpu")
        crcs = [zlib.crc32(row.numpy().tobytes()) for row in applied]
        out["grammars"].append({"kind": kind, "grammar": text, "prefix": prefix, "tokens": tokens, "parents": parents,
                                "terminated": terminated, "masks": [rle(row.tolist()) for row in bitmask],
                                "applied_crc32": crcs,
                                "applied_neg_inf": [int(torch.isneginf(row).sum()) for row in applied]})
        print(kind, "nodes", n, "valid rows", sum(1 for row in bitmask if bool(row.any())))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "xgrammar_masks.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
