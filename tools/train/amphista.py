"""Amphista's drafter for the target, in the layout examples/amphista.cpp loads.

    python amphista.py --model M.gguf --data DIR --out FILE.safetensors [--heads 4] [--epochs 4]

The drafter (specdec::blocks::amphista): two staged adaptation layers, h1 = S1(fuse1([f_p; e(x_{p+1})]))
and h2 = S2(fuse2([h1; e(x_{p+1})])) (fuse: Linear 2E -> E with bias, feature first; S: a causal Llama
decoder layer of intermediate 2E at token positions), the K heads' inputs z_k = ResBlock_k(h1) for
k < K / 2 and ResBlock_k(h2) for the rest (x + SiLU(W x + b)), the auto-embedding block (u = z + P,
one bi-directional Llama layer across the K slots, no RoPE) and the target's LM head on each slot:
slot k at row p gives token p + k + 2, as Medusa's head k does.

Training: every residual branch starts at zero (attention and MLP output projections, ResBlocks, the
position embedding) and each fuse as [I | 0], so the drafter starts as the target's own next-token
head on f_p; soft labels, the target's top-32 distribution, scored on the draft vocabulary's rows of
the frozen LM head (the C++ example reads all of them); AdamW, cosine schedule.

Writes fp16 safetensors (Hugging Face Llama names inside each layer): `stage{1,2}.fuse.{weight,bias}`,
`stage{1,2}.layer.{input_layernorm,post_attention_layernorm}.weight`,
`stage{1,2}.layer.self_attn.{q,k,v,o}_proj.weight`, `stage{1,2}.layer.mlp.{gate,up,down}_proj.weight`,
`head_mlps.{k}.{weight,bias}`, `position_embedding` [K x E], `auto_embedding.*` (a layer as above).
"""
from __future__ import annotations

import time


import torch
import torch.nn.functional as F

from common import autocast, optimizer_step, parser, save_fp16, setup, soft_cross_entropy
from eagle import batches
from target import Target


class Layer(torch.nn.Module):
    """A Llama decoder layer with both norms; output projections start at zero (identity layer)."""

    def __init__(self, c, intermediate: int, rope: bool):
        super().__init__()
        e, q, kv = c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim
        init = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
        self.c, self.rope_on = c, rope
        self.input_norm = torch.nn.Parameter(torch.ones(e))
        self.post_norm = torch.nn.Parameter(torch.ones(e))
        self.q, self.k, self.v = init(q, e), init(kv, e), init(kv, e)
        self.o = torch.nn.Parameter(torch.zeros(e, q))
        self.gate, self.up = init(intermediate, e), init(intermediate, e)
        self.down = torch.nn.Parameter(torch.zeros(e, intermediate))

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.rms_eps) * w

    def forward(self, x, mask, cos=None, sin=None):
        c = self.c
        B, T, _ = x.shape
        h = self.rms(x, self.input_norm)
        q = (h @ self.q.T).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = (h @ self.k.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = (h @ self.v.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        if self.rope_on:
            q, k = Target.rotate(q, cos, sin), Target.rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.o.T
        h = self.rms(x, self.post_norm)
        return x + (F.silu(h @ self.gate.T) * (h @ self.up.T)) @ self.down.T

    def tensors(self, prefix: str) -> dict:
        return {prefix + "input_layernorm.weight": self.input_norm, prefix + "post_attention_layernorm.weight": self.post_norm,
                prefix + "self_attn.q_proj.weight": self.q, prefix + "self_attn.k_proj.weight": self.k,
                prefix + "self_attn.v_proj.weight": self.v, prefix + "self_attn.o_proj.weight": self.o,
                prefix + "mlp.gate_proj.weight": self.gate, prefix + "mlp.up_proj.weight": self.up,
                prefix + "mlp.down_proj.weight": self.down}


class Amphista(torch.nn.Module):
    def __init__(self, t: Target, heads: int):
        super().__init__()
        c = t.config
        e = c.hidden
        self.t, self.heads, self.stage1_heads = t, heads, heads // 2
        fuse = torch.zeros(e, 2 * e)
        fuse[:, :e] = torch.eye(e)  # feature first: [I | 0] passes it through
        self.fuse_w = torch.nn.ParameterList([torch.nn.Parameter(fuse.clone()) for _ in range(2)])
        self.fuse_b = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(e)) for _ in range(2)])
        self.stages = torch.nn.ModuleList([Layer(c, 2 * e, True) for _ in range(2)])
        self.mlp_w = torch.nn.Parameter(torch.zeros(heads, e, e))
        self.mlp_b = torch.nn.Parameter(torch.zeros(heads, e))
        self.position = torch.nn.Parameter(torch.zeros(heads, e))
        self.slots = Layer(c, 2 * e, False)

    def forward(self, tokens, feats, valid):
        """tokens [B x T] (x_{p+1}), feats [B x T x E] (f_p): slot outputs o [B x T x K x E]."""
        B, T = tokens.shape
        emb = self.t.embed[tokens]
        cos, sin = self.t.rope(torch.arange(T), feats.dtype)
        mask = (torch.ones(T, T, dtype=torch.bool).tril()[None] & valid[:, None, :])[:, None] | torch.eye(T, dtype=torch.bool)
        h, hs = feats, []
        for s in range(2):
            h = self.stages[s](torch.cat([h, emb], -1) @ self.fuse_w[s].T + self.fuse_b[s], mask, cos, sin)
            hs.append(h)
        src = torch.stack([hs[0] if k < self.stage1_heads else hs[1] for k in range(self.heads)], 2)  # [B x T x K x E]
        z = src + F.silu(torch.einsum("btke,kfe->btkf", src, self.mlp_w) + self.mlp_b)
        u = (z + self.position).reshape(B * T, self.heads, -1)
        return self.slots(u, None).reshape(B, T, self.heads, -1)

    def tensors(self) -> dict:
        """The checkpoint's tensors by name (examples/amphista.cpp's layout)."""
        out = {}
        for s in range(2):
            out[f"stage{s + 1}.fuse.weight"] = self.fuse_w[s]
            out[f"stage{s + 1}.fuse.bias"] = self.fuse_b[s]
            out.update(self.stages[s].tensors(f"stage{s + 1}.layer."))
        for k in range(self.heads):
            out[f"head_mlps.{k}.weight"] = self.mlp_w[k]
            out[f"head_mlps.{k}.bias"] = self.mlp_b[k]
        out["position_embedding"] = self.position
        out.update(self.slots.tensors("auto_embedding."))
        return out


def gather(split, seqs, t2d, heads):
    """Rows p of each sequence (padded): token p + 1, feature p, and for slot k the draft-vocabulary
    soft labels of token p + k + 2 (row p + k + 1's distribution), its greedy token, and whether it
    trains (exists, lies in the answer, greedy token in the draft vocabulary)."""
    off = split["offsets"]
    T = max(int(off[s + 1] - off[s]) for s in seqs) - 1
    B, E, K = len(seqs), split["h"].shape[1], split["top_ids"].shape[1]
    tokens = torch.zeros(B, T, dtype=torch.long)
    feats = torch.zeros(B, T, E)
    valid = torch.zeros(B, T, dtype=torch.bool)
    ids = torch.zeros(B, T, heads, K, dtype=torch.long)
    lp = torch.full((B, T, heads, K), -1e4)
    greedy = torch.full((B, T, heads), -1, dtype=torch.long)
    train = torch.zeros(B, T, heads, dtype=torch.bool)
    for i, s in enumerate(seqs):
        a, b = int(off[s]), int(off[s + 1])
        n = b - a - 1
        tokens[i, :n] = split["tokens"][a + 1:b].long()
        feats[i, :n] = split["h"][a:b - 1].float()
        valid[i, :n] = True
        for k in range(heads):
            m = n - k - 1  # rows p with p + k + 2 <= length - 1
            if m <= 0:
                continue
            tid = split["top_ids"][a + k + 1:a + k + 1 + m].long()
            d = t2d[tid]
            ids[i, :m, k] = d.clamp(min=0)
            lp[i, :m, k] = torch.where(d >= 0, split["top_lp"][a + k + 1:a + k + 1 + m].float(), torch.tensor(-1e4))
            greedy[i, :m, k] = tid[:, 0]
            first = max(0, int(split["answer"][s]) - k - 2)
            train[i, first:m, k] = d[first:, 0] >= 0
    return tokens, feats, valid, ids, lp, greedy, train


def main():
    ap = parser(epochs=4, lr=5e-4, tokens=2048)
    ap.add_argument("--heads", type=int, default=4)
    a = ap.parse_args()
    run = setup(a)
    target, train, held, t2d, start = run.target, run.train, run.held, run.t2d, run.start
    head = target.lm_head[run.draft_ids].detach()
    model = Amphista(target, a.heads)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed)
    per_epoch = len(batches(train, a.tokens))
    steps = int(a.epochs * per_epoch)
    print(f"amphista: {steps} steps ({per_epoch} per epoch), {a.heads} heads")
    step = 0
    while step < steps:
        for seqs in batches(train, a.tokens, gen):
            if step == steps:
                break
            tokens, f, valid, ids, lp, greedy, mask = gather(train, seqs, t2d, a.heads)
            with autocast():  # bf16 matmuls where native (2x); losses in fp32
                o = model(tokens, f, valid)
                loss = sum(soft_cross_entropy(o[:, :, k][mask[:, :, k]] @ head.T, ids[:, :, k][mask[:, :, k]],
                                              lp[:, :, k][mask[:, :, k]]) for k in range(a.heads) if bool(mask[:, :, k].any()))
            optimizer_step(opt, params, loss, step, steps, a.lr)
            if step % 25 == 0:
                print(f"  step {step}/{steps} loss {loss.item() / a.heads:.3f} ({time.time() - start:.0f} s)", flush=True)
            step += 1
    # Held-out top-1 / top-3 per head against the target's greedy token, over the full LM head.
    hits = torch.zeros(a.heads, 2)
    n = torch.zeros(a.heads)
    with torch.no_grad():
        for seqs in batches(held, a.tokens):
            tokens, f, valid, ids, lp, greedy, mask = gather(held, seqs, t2d, a.heads)
            o = model(tokens, f, valid)
            for k in range(a.heads):
                m = mask[:, :, k]
                top3 = (o[:, :, k][m] @ target.lm_head.T).topk(3, -1).indices
                lab = greedy[:, :, k][m]
                hits[k, 0] += (top3[:, 0] == lab).sum()
                hits[k, 1] += (top3 == lab[:, None]).any(-1).sum()
                n[k] += len(lab)
    acc = hits / n[:, None]
    for k in range(a.heads):
        print(f"RESULT drafter=amphista head={k} top1={acc[k, 0]:.3f} top3={acc[k, 1]:.3f}")
    tensors = model.tensors()
    save_fp16(tensors, a.out, {"format": "specdec-amphista-1", "heads": str(a.heads), "target": "SmolLM2-135M-Instruct Q4_1",
                               "heldout_top1": ",".join(f"{float(x):.3f}" for x in acc[:, 0])})
    print(f"amphista: {a.out}, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
