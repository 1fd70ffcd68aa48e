#!/usr/bin/env python3
"""Records SuffixDecoding cases from Arctic Inference's own implementation (the oracle of
include/specdec/tree/suffix.hpp): random scenarios of appends, removals, request starts and stops,
evictions and speculations, each speculation with the oracle's draft (token ids, parents, float32
probabilities, score, match length), one JSON object per line. tests/test_suffix.cpp replays them
on specdec's suffix_tree / suffix_cache and asserts equality.

    PYTHONPATH="$(scripts/fetch_suffix_oracle.sh)" python3 scripts/suffix_oracle.py \
        --scenarios 3000 --seed 1 --out build/suffix_cases.jsonl

Scenario kinds: `tree` (one SuffixTree: extend / remove of several sequences, unknown ids and empty
extends included), `cache` (SuffixDecodingCache: start / add / stop / evict under 0, 1, 2, 3 or
unlimited cached requests, calls the oracle rejects recorded as errors) and `text` (the cache over
real token sequences: the words of the repository's own documents and headers, several requests
editing, repeating and continuing them). Token streams mix uniform tokens over small vocabularies,
copies of earlier stretches (what suffix trees are for) and periodic runs.
"""
import argparse
import json
import pathlib
import random
import re

from arctic_inference.suffix_decoding import SuffixDecodingCache
from arctic_inference.suffix_decoding._C import SuffixTree

DEPTHS = [1, 2, 3, 4, 5, 8, 16, 24, 64]
SPEC_TOKENS = [0, 1, 2, 4, 8, 16, 64]
FACTORS = [0.0, 0.5, 1.0, 1.5, 2.25, 4.0, 0.1]
OFFSETS = [-2.0, 0.0, 0.0, 0.5, 1.0, 3.0, 0.3]
MIN_PROBS = [0.0, 0.05, 0.1, 0.1, 0.3, 0.5, 0.999, 1.0, 1.5]


def stream(rng, history, vocab, n):
    """n tokens: uniform, a copy of an earlier stretch, or a periodic run."""
    out = []
    while len(out) < n:
        kind = rng.random()
        if kind < 0.45 or not history:
            out.append(rng.randrange(vocab))
        elif kind < 0.85:
            src = rng.choice(history)
            if src:
                a = rng.randrange(len(src))
                out.extend(src[a:a + rng.randint(1, 12)])
        else:
            period = [rng.randrange(vocab) for _ in range(rng.randint(1, 3))]
            out.extend((period * 6)[:rng.randint(1, 10)])
    return out[:n]


def options(rng):
    """Mostly the options engines use; one call in four from the edges (no tokens, zero factor,
    negative offset, thresholds at and above 1)."""
    if rng.random() < 0.75:
        return [rng.choice([4, 8, 16, 64]), rng.choice([1.0, 1.5, 2.25, 4.0]), rng.choice([0.0, 0.5, 1.0, 3.0]),
                rng.choice([0.0, 0.05, 0.1, 0.3]), rng.random() < 0.5]
    return [rng.choice(SPEC_TOKENS), rng.choice(FACTORS), rng.choice(OFFSETS), rng.choice(MIN_PROBS),
            rng.random() < 0.5]


def context(rng, history, vocab):
    """A context: a suffix of a stored sequence (maybe with a changed token) or random tokens."""
    seqs = [s for s in history if s]
    if seqs and rng.random() < 0.8:
        s = rng.choice(seqs)
        end = rng.randint(1, len(s))
        ctx = list(s[max(0, end - rng.randint(0, 30)):end])
        if ctx and rng.random() < 0.2:
            ctx[rng.randrange(len(ctx))] = rng.randrange(vocab)
        return ctx
    return [rng.randrange(vocab) for _ in range(rng.randint(0, 6))]


def draft_json(d):
    return {"token": list(d.token_ids), "parent": list(d.parents), "prob": [float(p) for p in d.probs],
            "score": float(d.score), "match_length": int(d.match_len)}


def tree_scenario(rng):
    depth = rng.choice(DEPTHS)
    vocab = rng.choice([1, 2, 3, 5, 50, 1 << 20])
    tree = SuffixTree(depth)
    seqs = {}
    ops = []
    for _ in range(rng.randint(1, 40)):
        r = rng.random()
        if r < 0.5:
            sid = rng.randrange(6)
            toks = stream(rng, list(seqs.values()), vocab, rng.choice([0, 1, 2, 5, 10, 30]))
            tree.extend(sid, toks)
            if toks:
                seqs.setdefault(sid, []).extend(toks)
            ops.append(["extend", sid, toks])
        elif r < 0.62:
            sid = rng.randrange(8)
            tree.remove(sid)
            seqs.pop(sid, None)
            ops.append(["remove", sid])
        else:
            ctx = context(rng, list(seqs.values()), vocab)
            opt = options(rng)
            ops.append(["speculate", ctx, *opt, draft_json(tree.speculate(ctx, *opt))])
    assert tree.check_integrity() == ""
    return {"kind": "tree", "max_depth": depth, "ops": ops}


def cache_ops(rng, cache, vocab, n_ops, source=None):
    """Random cache calls; `source` (a token list) feeds prompts and responses from real text."""
    ops = []
    history = []

    def tokens(n):
        if source is not None:
            a = rng.randrange(max(1, len(source) - n))
            base = source[a:a + n]
            return base if rng.random() < 0.8 else stream(rng, history + [base], vocab, n)
        return stream(rng, history, vocab, n)

    for _ in range(n_ops):
        r = rng.random()
        active = list(cache.active_requests)
        # Starts name any request (an active one is an error); other calls mostly an active one.
        req = rng.choice(active) if active and r >= 0.2 and rng.random() < 0.85 else rng.randrange(6)
        try:
            if r < 0.2:
                prompt = tokens(rng.choice([0, 1, 4, 12, 40]))
                history.append(prompt)
                ops.append(["start", req, prompt])
                cache.start_request(req, prompt)
            elif r < 0.5:
                toks = tokens(rng.choice([0, 1, 1, 3, 8, 20]))
                history.append(toks)
                ops.append(["add", req, toks])
                cache.add_active_response(req, toks)
            elif r < 0.58:
                ops.append(["stop", req])
                cache.stop_request(req)
            elif r < 0.63:
                ops.append(["evict", req])
                cache.evict_cached_response(req)
            else:
                ctx = context(rng, history, vocab)
                opt = options(rng)
                ops.append(["speculate", req, ctx, *opt])
                ops[-1].append(draft_json(cache.speculate(req, ctx, *opt)))
        except ValueError:
            ops[-1].append("error")
    return ops


def cache_scenario(rng):
    depth = rng.choice(DEPTHS)
    limit = rng.choice([-1, 0, 1, 2, 3])
    vocab = rng.choice([2, 3, 5, 50])
    cache = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=limit)
    return {"kind": "cache", "max_depth": depth, "max_cached_requests": limit,
            "ops": cache_ops(rng, cache, vocab, rng.randint(1, 60))}


def words(root):
    """The repository's own text as token ids: every word and punctuation mark, ids by first use."""
    ids, out = {}, []
    for path in sorted(list((root / "docs").glob("*.md")) + list((root / "include/specdec/tree").glob("*.hpp"))):
        for w in re.findall(r"\w+|[^\w\s]", path.read_text()):
            out.append(ids.setdefault(w, len(ids)))
    return out


def text_scenario(rng, source):
    depth = rng.choice([8, 16, 24, 64])
    limit = rng.choice([-1, 1, 2, 3])
    cache = SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=limit)
    return {"kind": "cache", "max_depth": depth, "max_cached_requests": limit,
            "ops": cache_ops(rng, cache, 1 << 16, rng.randint(10, 60), source)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    source = words(pathlib.Path(__file__).resolve().parent.parent)
    counts = {"tree": 0, "cache": 0, "text": 0, "speculate": 0}
    with open(args.out, "w") as f:
        for i in range(args.scenarios):
            kind = ["tree", "cache", "text"][i % 3]
            s = tree_scenario(rng) if kind == "tree" else cache_scenario(rng) if kind == "cache" else text_scenario(rng, source)
            counts[kind] += 1
            counts["speculate"] += sum(1 for op in s["ops"] if op[0] == "speculate")
            f.write(json.dumps(s, separators=(",", ":")) + "\n")
    print(f"suffix oracle: {args.scenarios} scenarios ({counts['tree']} tree, {counts['cache']} cache, "
          f"{counts['text']} text), {counts['speculate']} speculations -> {args.out}")


if __name__ == "__main__":
    main()
