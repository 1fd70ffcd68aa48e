"""The target's view of the self-distillation set, computed once for every drafter's training.

    python features.py --model M.gguf --data DIR

Reads DIR/data.pt, runs the target in float32 (the precision the C++ engine runs it in, so a drafter
trains on the features it will be given) over every sequence, and writes DIR/features.pt:

    {"train" | "heldout": {
        "tokens":  [N] int32,       every sequence's tokens, concatenated
        "offsets": [S + 1] int64,   sequence s is rows offsets[s] .. offsets[s + 1]
        "answer":  [S] int64,       index (within its sequence) of the answer's first token
        "h":       [N x E] float16, the target's final hidden state (after the final norm) at each row
        "taps":    [N x 3E] float16, the residual stream entering layers 2, L / 2 and L - 3 (EAGLE-3's
                   low, mid and high features: specdec::blocks::eagle3::tap_layers)
        "top_ids": [N x K] int32,   the target's K most likely next tokens at each row (K = 32),
        "top_lp":  [N x K] float16  and their log-probabilities: the soft labels
    }}

Row p's label distribution is the target's distribution of token p + 1; its argmax is what greedy
verification accepts there.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from target import Target

TOP_K = 32


def tap_layers(layers: int) -> list[int]:
    """EAGLE-3's taps: the inputs of layers 2, L // 2 and L - 3 (vLLM's default; eagle3::tap_layers)."""
    return [2, layers // 2, layers - 3]


@torch.no_grad()
def split_features(t: Target, rows: list[dict], max_tokens: int = 4096) -> dict:
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["ids"]))
    lengths = torch.tensor([len(r["ids"]) for r in rows])
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    n, e = int(offsets[-1]), t.config.hidden
    out = {
        "tokens": torch.cat([torch.tensor(r["ids"], dtype=torch.int32) for r in rows]),
        "offsets": offsets,
        "answer": torch.tensor([r["answer"] for r in rows], dtype=torch.int64),
        "h": torch.empty(n, e, dtype=torch.float16),
        "taps": torch.empty(n, 3 * e, dtype=torch.float16),
        "top_ids": torch.empty(n, TOP_K, dtype=torch.int32),
        "top_lp": torch.empty(n, TOP_K, dtype=torch.float16),
    }
    i = 0
    while i < len(order):
        longest = len(rows[order[i]]["ids"])
        batch = [order[i]]
        while i + len(batch) < len(order) and (len(batch) + 1) * len(rows[order[i + len(batch)]]["ids"]) <= max_tokens:
            batch.append(order[i + len(batch)])
        longest = max(len(rows[b]["ids"]) for b in batch)
        toks = torch.zeros(len(batch), longest, dtype=torch.long)
        for j, b in enumerate(batch):
            toks[j, :len(rows[b]["ids"])] = torch.tensor(rows[b]["ids"])
        h, logits, layers = t(toks, layers_out=True)  # causal, right padding never reaches the real rows
        # The stream entering layer i is layer i - 1's output (i >= 1).
        taps = torch.cat([layers[i - 1] for i in tap_layers(len(t.blocks))], -1)
        lp = torch.log_softmax(logits.float(), -1)
        top_lp, top_ids = lp.topk(TOP_K, -1)
        for j, b in enumerate(batch):
            s, m = int(offsets[b]), len(rows[b]["ids"])
            out["h"][s:s + m] = h[j, :m].half()
            out["taps"][s:s + m] = taps[j, :m].half()
            out["top_ids"][s:s + m] = top_ids[j, :m].int()
            out["top_lp"][s:s + m] = top_lp[j, :m].half()
        i += len(batch)
        print(f"  {i}/{len(order)} sequences", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    start = time.time()
    data = torch.load(os.path.join(a.data, "data.pt"))
    t = Target(a.model, torch.float32)
    feats = {split: split_features(t, data[split]) for split in ("train", "heldout")}
    torch.save(feats, os.path.join(a.data, "features.pt"))
    print(f"features: {sum(len(f['tokens']) for f in feats.values())} rows, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
