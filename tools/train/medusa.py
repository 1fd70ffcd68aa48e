"""Medusa heads for the target, in the layout examples/medusa.cpp loads.

    python medusa.py --model M.gguf --data DIR --out FILE.safetensors [--heads 3] [--epochs 8]

Head k (0-based) maps the target's final hidden state h_p (after the final norm) of row p to a
distribution of token p + k + 2, one place further than the target's own next token:
    z = h + SiLU(W_k h + b_k),   logits = z @ E^T
where E is the target's LM head (its tied embedding), shared rather than copied: a 49152 x 576 matrix
per head would be 57 MB each in fp16, and the shared head is what the C++ example runs.

Training: W_k = 0, b_k = 0 at the start (each head begins as the target's own next-token head, the
ResBlock initialisation Medusa uses); soft labels, the target's top-32 distribution of token p + k + 2
(Medusa-2's self-distillation loss), on answer tokens only, scored on the rows of the LM head of the
8192 most frequent answer tokens (a truncated vocabulary: 6x less work per step; the C++ example reads
every row, and the held-out accuracy below is measured over every row); AdamW, cosine schedule.

Writes fp16 safetensors: `medusa_head.{k}.0.linear.weight` [E x E] and `medusa_head.{k}.0.linear.bias`
[E] for k < heads (Medusa's own names for a ResBlock's linear; no `medusa_head.{k}.1.weight`, the LM
head is the target's), metadata {"format": "specdec-medusa-1", "heads", "hidden", "target"}, and
prints per-head top-1 / top-3 accuracy on the held-out split against the target's greedy token.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from common import autocast, native_bf16, optimizer_step, parser, positions, save_fp16, setup, soft_cross_entropy


class Heads(torch.nn.Module):
    def __init__(self, heads: int, hidden: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(heads, hidden, hidden))
        self.bias = torch.nn.Parameter(torch.zeros(heads, hidden))

    def forward(self, h: torch.Tensor, k: int) -> torch.Tensor:
        return h + F.silu(h @ self.weight[k].T + self.bias[k])

    def tensors(self) -> dict:
        """The checkpoint's tensors by name (Medusa's names for each head's ResBlock linear)."""
        out = {}
        for k in range(self.weight.shape[0]):
            out[f"medusa_head.{k}.0.linear.weight"] = self.weight[k]
            out[f"medusa_head.{k}.0.linear.bias"] = self.bias[k]
        return out


def head_logits(heads: Heads, lm_head: torch.Tensor, h: torch.Tensor, k: int) -> torch.Tensor:
    z = heads(h, k)
    with autocast():
        return z @ lm_head.T


@torch.no_grad()
def evaluate(heads: Heads, lm_head, split: dict, n_heads: int, limit: int = 20000) -> list[tuple[float, float]]:
    out = []
    for k in range(n_heads):
        rows = positions(split, k + 2)[:limit]
        h = split["h"][rows].float()
        label = split["top_ids"][rows + k + 1, 0].long()  # the target's greedy token p + k + 2
        top3 = head_logits(heads, lm_head, h, k).float().topk(3, -1).indices
        out.append(((top3[:, 0] == label).float().mean().item(), (top3 == label[:, None]).any(-1).float().mean().item()))
    return out


def main():
    ap = parser(epochs=8, lr=1e-3)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1024, help="rows per batch")
    a = ap.parse_args()
    run = setup(a)
    target, train, held, draft_ids, t2d, start = run.target, run.train, run.held, run.draft_ids, run.t2d, run.start
    lm_head = target.lm_head.detach().to(torch.bfloat16 if native_bf16() else torch.float32)
    e = target.config.hidden
    sub_head = lm_head[draft_ids]
    heads = Heads(a.heads, e)
    opt = torch.optim.AdamW(heads.parameters(), lr=a.lr, weight_decay=0.0)
    rows_all = positions(train, 2)
    ends = train["offsets"][1:]
    seq_end = ends[torch.searchsorted(ends, rows_all, right=True)]  # each row's sequence end
    steps = int(a.epochs * len(rows_all) / a.batch)
    print(f"medusa: {len(rows_all)} training rows, {steps} steps of {a.batch}")
    gen = torch.Generator().manual_seed(a.seed)
    step = 0
    while step < steps:
        perm = torch.randperm(len(rows_all), generator=gen)
        for s in range(0, len(perm) - a.batch + 1, a.batch):
            if step == steps:
                break
            idx = perm[s:s + a.batch]
            rows, end = rows_all[idx], seq_end[idx]
            h = train["h"][rows].float()
            loss = 0.0
            for k in range(a.heads):
                ok = rows + k + 2 < end  # token p + k + 2 exists
                if not bool(ok.any()):
                    continue
                lab = rows[ok] + k + 1
                d = t2d[train["top_ids"][lab].long()]
                lp = torch.where(d >= 0, train["top_lp"][lab].float(), torch.tensor(-1e4))
                keep = d[:, 0] >= 0  # the greedy token is in the draft vocabulary
                loss = loss + soft_cross_entropy(head_logits(heads, sub_head, h[ok][keep], k), d[keep].clamp(min=0), lp[keep])
            optimizer_step(opt, heads.parameters(), loss, step, steps, a.lr, clip=None)
            if step % 50 == 0:
                print(f"  step {step}/{steps} loss {loss.item() / a.heads:.3f} ({time.time() - start:.0f} s)", flush=True)
            step += 1
    acc = evaluate(heads, lm_head, held, a.heads)
    for k, (t1, t3) in enumerate(acc):
        print(f"RESULT drafter=medusa head={k} top1={t1:.3f} top3={t3:.3f}")
    tensors = heads.tensors()
    save_fp16(tensors, a.out, {"format": "specdec-medusa-1", "heads": str(a.heads), "hidden": str(e),
                                "target": "SmolLM2-135M-Instruct Q4_1",
                                "heldout_top1": ",".join(f"{t1:.3f}" for t1, _ in acc)})
    print(f"medusa: {a.out}, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
