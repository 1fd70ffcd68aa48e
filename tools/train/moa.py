"""The Mixture of Attentions drafter for the target, in the layout examples/moa.cpp loads.

    python moa.py --model M.gguf --data DIR --out FILE.safetensors [--epochs 2]

The drafter (specdec::blocks::moa, shared/specs/blocks.md section 2, Target Layer Inference off):
- key/value stream, per verified token t: the target's post-RoPE K and V of every layer packed
  head-interleaved into L rows of E_kv = 2 x 3 x 64 = 384, Layer Self-Attention (one Llama decoder
  layer of width 384 across the L = 30 layers, 6 heads of 64, 3 kv heads, RoPE over the layer index,
  no mask), the mean over layers, then Ekv2E (384 -> 576 with bias): S_t;
- self-attention: one causal Llama decoder layer over the target's token embeddings at token
  positions (the target's own shape: 9 heads, 3 kv heads, intermediate 1536);
- cross-attention: queries from the self-attention rows, keys and values from the stream, one
  RMSNorm shared by both, RoPE at the query's and the source's positions, then the MLP (intermediate
  864); its output, read by the target's tied LM head without a norm, gives the next token.

At inference the stream holds the tokens the target has verified (its KV cache), so the query of the
bonus token x_n at position n sees S_0 .. S_{n-1}, and the query of the draft at depth d (position
n + d - 1) sees the same rows. Training therefore shows row i the stream rows j <= i - d, one pass per
depth d = 1, 2, 3 (the self-attention rows are shared), and scores row i against the target's
distribution of token i + 1. The released MoA trains with verification points every 6-14 tokens
where a verified row sees its own K/V, which the inference never offers (blocks.md 2.4, 2.7.6);
these masks are the inference's.

Training: the self-attention layer starts as the target's layer 0 (it reads the same embeddings the
same way); every other residual branch starts at zero (output projections) so the drafter starts as
that layer; Layer Self-Attention starts as the identity, i.e. the mean of the packed K/V. Loss per
depth: soft cross-entropy against the target's top-32 distribution, on the draft vocabulary's rows of
the frozen LM head, plus 0.1 x SmoothL1 to the target's final hidden state at that row (MoA's feature
loss: the head reads the output without a norm); depths weigh 1, 0.8, 0.64. The target's K/V are
computed on the fly in bf16 (30 layers x 384 per token do not fit a cache of the whole set).

Writes fp16 safetensors, HEBO's module names with Hugging Face Llama names inside each layer:
`layer_self_attention.*`, `Ekv2E.{weight,bias}`, `self_attention.*`, `cross_attention.*`, each layer
`input_layernorm.weight`, `post_attention_layernorm.weight`, `self_attn.{q,k,v,o}_proj.weight`,
`mlp.{gate,up,down}_proj.weight`; metadata {"format": "specdec-moa-1", ...}. Prints the held-out
top-1 / top-3 per depth against the target's greedy token, over the full vocabulary.
"""
from __future__ import annotations

import dataclasses
import time

import torch
import torch.nn.functional as F

from amphista import Layer
from common import autocast, native_bf16, optimizer_step, parser, save_fp16, setup
from eagle import batches
from target import Target

DEPTH_WEIGHTS = (1.0, 0.8, 0.64)
LSA_HEADS, LSA_KV_HEADS = 6, 3  # 384 / 64: the target's 9 heads do not divide E_kv (examples/moa.cpp)


@torch.no_grad()
def target_kv(t: Target, tokens: torch.Tensor) -> torch.Tensor:
    """The target's post-RoPE keys and values of every layer for `tokens` [B x T] (causal; right
    padding never reaches real rows), packed as pack_kv does: [B x T x L x 2 kv_heads head_dim], kv
    head h's K then its V."""
    c = t.config
    B, T = tokens.shape
    x = t.embed[tokens]
    cos, sin = t.rope(torch.arange(T), x.dtype)
    packed = []
    for b in t.blocks:
        h = t.rms(x, b["attn_norm"])
        q = (h @ b["q"].T).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = (h @ b["k"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = (h @ b["v"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = t.rotate(q, cos, sin), t.rotate(k, cos, sin)
        packed.append(torch.stack([k, v], 2).permute(0, 3, 1, 2, 4).reshape(B, T, -1))  # [B, T, kv, 2, d]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ b["o"].T
        h = t.rms(x, b["ffn_norm"])
        x = x + (F.silu(h @ b["gate"].T) * (h @ b["up"].T)) @ b["down"].T
    return torch.stack(packed, 2)


class MoA(torch.nn.Module):
    def __init__(self, t: Target, ca_intermediate: int):
        super().__init__()
        c = t.config
        e, kv = c.hidden, 2 * c.kv_heads * c.head_dim
        self.c = c
        lsa_c = dataclasses.replace(c, hidden=kv, heads=LSA_HEADS, kv_heads=LSA_KV_HEADS, head_dim=kv // LSA_HEADS)
        self.lsa = Layer(lsa_c, kv * 3 // 2, rope=True)
        self.ekv2e_w = torch.nn.Parameter(torch.randn(e, kv) * 0.02)
        self.ekv2e_b = torch.nn.Parameter(torch.zeros(e))
        self.sa = Layer(c, c.intermediate, rope=True)
        first = t.blocks[0]
        with torch.no_grad():
            for mine, theirs in ((self.sa.input_norm, "attn_norm"), (self.sa.post_norm, "ffn_norm"), (self.sa.q, "q"),
                                 (self.sa.k, "k"), (self.sa.v, "v"), (self.sa.o, "o"), (self.sa.gate, "gate"),
                                 (self.sa.up, "up"), (self.sa.down, "down")):
                mine.copy_(first[theirs].float())
        self.ca = Layer(c, ca_intermediate, rope=True)
        self.embed = t.embed  # frozen, the target's
        self.rope = t.rope

    def stream(self, packed):
        """packed [B x T x L x E_kv] -> the cross-attention's key/value stream [B x T x E]."""
        B, T, L, kv = packed.shape
        cos, sin = self.rope(torch.arange(L), torch.float32)
        x = self.lsa(packed.reshape(B * T, L, kv).float(), None, cos, sin)
        return x.mean(1).view(B, T, kv) @ self.ekv2e_w.T + self.ekv2e_b

    def cross(self, query, source, mask, query_rope, source_rope):
        """The cross-attention layer (blocks::moa::cross_attention): one input norm for both streams,
        RoPE at the query's and the source's own positions ((cos, sin) each), `mask` [Tq x S] or None
        (inference: every verified token)."""
        ca, c = self.ca, self.c
        B, T, _ = query.shape
        S = source.shape[1]
        nq, ns = ca.rms(query, ca.input_norm), ca.rms(source, ca.input_norm)
        q = (nq @ ca.q.T).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = (ns @ ca.k.T).view(B, S, c.kv_heads, c.head_dim).transpose(1, 2)
        v = (ns @ ca.v.T).view(B, S, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = Target.rotate(q, *query_rope), Target.rotate(k, *source_rope)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = query + a.transpose(1, 2).reshape(B, T, -1) @ ca.o.T
        h = ca.rms(x, ca.post_norm)
        return x + (F.silu(h @ ca.gate.T) * (h @ ca.up.T)) @ ca.down.T

    def forward(self, tokens, packed, depths: int):
        """tokens [B x T], packed K/V [B x T x L x E_kv]. Returns one output [B x T x E] per depth d:
        row i having seen stream rows j <= i - d (row 0's row stands in where there is none; such
        rows never train)."""
        T = tokens.shape[1]
        s = self.stream(packed)
        cos, sin = self.rope(torch.arange(T), torch.float32)
        query = self.sa(self.embed[tokens].float(), None if T == 1 else torch.ones(T, T, dtype=torch.bool).tril(), cos, sin)
        outs = []
        for d in range(1, depths + 1):
            mask = torch.ones(T, T, dtype=torch.bool).tril(-d)
            mask[:, 0] = True
            outs.append(self.cross(query, s, mask, (cos, sin), (cos, sin)))
        return outs

    def tensors(self) -> dict:
        out = {"Ekv2E.weight": self.ekv2e_w, "Ekv2E.bias": self.ekv2e_b}
        out.update(self.lsa.tensors("layer_self_attention."))
        out.update(self.sa.tensors("self_attention."))
        out.update(self.ca.tensors("cross_attention."))
        return out


def gather(split, seqs, depths: int):
    """Padded rows i = 0 .. T - 1 of each sequence: token i, the target's final hidden state at i
    (the feature loss's target), its top-K distribution of token i + 1, the greedy token, and per depth
    which rows train (token i + 1 is in the answer and stream row i - d exists)."""
    off = split["offsets"]
    T = max(int(off[s + 1] - off[s]) for s in seqs)
    B, E, K = len(seqs), split["h"].shape[1], split["top_ids"].shape[1]
    tokens = torch.zeros(B, T, dtype=torch.long)
    h = torch.zeros(B, T, E)
    ids = torch.zeros(B, T, K, dtype=torch.long)
    lp = torch.full((B, T, K), -1e4)
    train = torch.zeros(depths, B, T, dtype=torch.bool)
    for i, s in enumerate(seqs):
        a, b = int(off[s]), int(off[s + 1])
        n = b - a
        tokens[i, :n] = split["tokens"][a:b].long()
        h[i, :n] = split["h"][a:b].float()
        ids[i, :n] = split["top_ids"][a:b].long()
        lp[i, :n] = split["top_lp"][a:b].float()
        for d in range(depths):
            train[d, i, max(int(split["answer"][s]) - 1, d + 1):n - 1] = True
    return tokens, h, ids, lp, train


def main():
    ap = parser(epochs=2, lr=1e-3, tokens=4096)
    ap.add_argument("--depths", type=int, default=3)
    ap.add_argument("--ca-intermediate", type=int, default=864, help="1.5 E, MoA's ratio")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (a smoke run)")
    a = ap.parse_args()
    run = setup(a)
    target, train, held, draft_ids, start = run.target, run.train, run.held, run.draft_ids, run.start
    kv_target = Target(a.model, torch.bfloat16 if native_bf16() else torch.float32)  # the K/V source: bf16 2x where native
    head = target.lm_head[draft_ids].float()
    model = MoA(target, a.ca_intermediate)
    params = [p for n, p in model.named_parameters() if p.requires_grad and n != "embed"]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed)
    per_epoch = len(batches(train, a.tokens))
    steps = a.steps or int(a.epochs * per_epoch)
    print(f"moa: {steps} steps ({per_epoch} per epoch), draft vocabulary covers {run.coverage:.4f}, "
          f"{sum(p.numel() for p in params) / 1e6:.2f} M parameters")
    step = 0
    while step < steps:
        for seqs in batches(train, a.tokens, gen):
            if step == steps:
                break
            tokens, h, ids, lp, rows = gather(train, seqs, a.depths)
            packed = target_kv(kv_target, tokens)
            with autocast():
                outs = model(tokens, packed, a.depths)
                loss = 0.0
                for d, g in enumerate(outs):
                    m = rows[d]
                    d_ids = run.t2d[ids[m]]
                    p = torch.softmax(torch.where(d_ids >= 0, lp[m], torch.tensor(-1e4)), -1)
                    logq = torch.log_softmax((g[m] @ head.T).float(), -1).gather(-1, d_ids.clamp(min=0))
                    loss = loss + DEPTH_WEIGHTS[d] * (-(p * logq).sum(-1).mean() + 0.1 * F.smooth_l1_loss(g[m].float(), h[m]))
            optimizer_step(opt, params, loss, step, steps, a.lr)
            if step % 10 == 0:
                print(f"  step {step}/{steps} loss {loss.item():.3f} ({time.time() - start:.0f} s)", flush=True)
            step += 1
    # Held-out accuracy per depth against the target's greedy token, over the full LM head.
    model.eval()
    hits = [[0, 0] for _ in range(a.depths)]
    n = [0] * a.depths
    with torch.no_grad():
        for seqs in batches(held, a.tokens):
            tokens, h, ids, lp, rows = gather(held, seqs, a.depths)
            with autocast():
                outs = model(tokens, target_kv(kv_target, tokens), a.depths)
            for d, g in enumerate(outs):
                lab = ids[rows[d]][:, 0]
                top3 = (g[rows[d]].float() @ target.lm_head.T).topk(3, -1).indices
                hits[d][0] += int((top3[:, 0] == lab).sum())
                hits[d][1] += int((top3 == lab[:, None]).any(-1).sum())
                n[d] += len(lab)
    acc = [(h1 / max(1, k), h3 / max(1, k)) for (h1, h3), k in zip(hits, n)]
    for d, (t1, t3) in enumerate(acc):
        print(f"RESULT drafter=moa depth={d + 1} top1={t1:.3f} top3={t3:.3f}")
    save_fp16(model.tensors(), a.out, {"format": "specdec-moa-1", "target": "SmolLM2-135M-Instruct Q4_1",
                                       "ca_intermediate": str(a.ca_intermediate),
                                       "heldout_top1": ",".join(f"{t1:.3f}" for t1, _ in acc)})
    print(f"moa: {a.out}, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
