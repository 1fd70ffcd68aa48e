"""The EAGLE draft layer for the target, with an EAGLE-3 reduced draft vocabulary, in the layout
examples/eagle.cpp loads.

    python eagle.py --model M.gguf --data DIR --out FILE.safetensors [--draft-vocab 8192] [--epochs 6]

The drafter (specdec::blocks::eagle): row p fuses the embedding of token p + 1 with the target's final
hidden state f_p (after the final norm), `fc([embed(x_{p+1}); f_p])` (Linear 2E -> E with bias), runs
one decoder layer of the target's shape without its input norm (causal self-attention over the
drafter's own rows), and its output g_p, read by a draft LM head over the `draft_vocab` most frequent
answer tokens, gives token p + 2; `d2t[i]` maps draft id i to target id i + d2t[i] (EAGLE-3). A draft
step reads 8192 x 576 head rows instead of the target's 49152 x 576.

Training (what makes ~200k tokens go far):
- the decoder layer starts as the target's last layer with its output projections (o_proj, down_proj)
  zeroed, fc as [0 | I]: the drafter starts as the identity on the feature (the target's own next-token
  guess) and the draft head as the target's LM head rows of the draft vocabulary;
- soft labels: the target's top-32 distribution of token p + 2, restricted to the draft vocabulary;
- training-time test (EAGLE-3): passes 2 and 3 feed the drafter its own outputs as features, row p of
  pass d attending to the true-feature rows before p - d + 1 and to its own earlier passes' rows, as a
  node at depth d - 1 of a draft tree does; the passes' losses weigh 1, 0.8, 0.64;
- a small feature-regression term on pass 1 (smooth L1 to f_{p+1}) keeps g in the target's space.

Writes fp16 safetensors (F16 weights, I64 d2t): `fc.weight` [E x 2E], `fc.bias` [E],
`layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.post_attention_layernorm.weight`,
`layers.0.mlp.{gate,up,down}_proj.weight` (Hugging Face Llama names and rotate-half Q/K order),
`lm_head.weight` [draft_vocab x E], `d2t` [draft_vocab] int64; metadata {"format": "specdec-eagle-1", ...}.
Prints the held-out top-1 / top-3 accuracy of each pass (depth) against the target's greedy token.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from common import autocast, optimizer_step, parser, setup
from target import Target

PASS_WEIGHTS = (1.0, 0.8, 0.64)


def ttt_mask(valid: torch.Tensor, d: int) -> torch.Tensor:
    """The attention mask of training-time-test pass d + 1 over the keys of passes 1 .. d + 1
    ([B x 1 x T x (d + 1) T], True = attend): row p sees pass-1 rows <= p - d and pass m + 1's row
    p - (d - m), as a node at depth d of a draft tree sees its context and its ancestors; always itself."""
    T = valid.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    blocks = [causal.tril(-d)] + [torch.eye(T, dtype=torch.bool).roll(-(d - m), 1).tril(-(d - m))
                                  if d - m > 0 else torch.eye(T, dtype=torch.bool) for m in range(1, d + 1)]
    mask = torch.cat(blocks, 1)[None, None] & torch.cat([valid] * (d + 1), 1)[:, None, None, :]
    return mask | torch.eye(T, (d + 1) * T, dtype=torch.bool).roll(d * T, 1)[None, None]


def train_chained(name: str, model, a, run, inputs):
    """The training loop and held-out accuracy eagle3.py and mtp.py share: soft cross-entropy of each
    training-time-test pass's logits (model.logits) against the target's top-32 distribution on the
    draft vocabulary, weighted by PASS_WEIGHTS; `inputs(split, seqs, tokens, f, gen)` gives the model's
    second input (gen None: held out, no noise). Returns per-pass [top1 hits, top3 hits] and the count."""
    target, train, held, draft_ids, t2d, start = run.target, run.train, run.held, run.draft_ids, run.t2d, run.start
    params = [p for n, p in model.named_parameters() if p.requires_grad and n != "embed"]
    model.embed.requires_grad_(False)
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed)
    per_epoch = len(batches(train, a.tokens))
    steps = int(a.epochs * per_epoch)
    print(f"{name}: {steps} steps ({per_epoch} per epoch)")
    step = 0
    while step < steps:
        for seqs in batches(train, a.tokens, gen):
            if step == steps:
                break
            tokens, f, _, ids, lp, _, valid, mask = gather(train, seqs, t2d)
            with autocast():
                outs = model(tokens, inputs(train, seqs, tokens, f, gen), valid, a.passes)
                p = torch.softmax(lp[mask], -1)
                loss = 0.0
                for d, o in enumerate(outs):
                    logq = torch.log_softmax(model.logits(o[mask]).float(), -1).gather(-1, ids[mask])
                    loss = loss + PASS_WEIGHTS[d] * -(p * logq).sum(-1).mean()
            optimizer_step(opt, params, loss, step, steps, a.lr)
            if step % 25 == 0:
                print(f"  step {step}/{steps} loss {loss.item():.3f} ({time.time() - start:.0f} s)", flush=True)
            step += 1
    model.eval()
    hits = [[0, 0] for _ in range(a.passes)]
    n = 0
    with torch.no_grad():
        for seqs in batches(held, a.tokens):
            tokens, f, _, ids, lp, greedy, valid, mask = gather(held, seqs, t2d)
            outs = model(tokens, inputs(held, seqs, tokens, f, None), valid, a.passes)
            lab = greedy[mask]
            n += len(lab)
            for d, o in enumerate(outs):
                top3 = draft_ids[model.logits(o[mask]).topk(3, -1).indices]
                hits[d][0] += int((top3[:, 0] == lab).sum())
                hits[d][1] += int((top3 == lab[:, None]).any(-1).sum())
    for d, (h1, h3) in enumerate(hits):
        print(f"RESULT drafter={name} depth={d + 1} top1={h1 / n:.3f} top3={h3 / n:.3f}")
    return hits, n


class Draft(torch.nn.Module):
    """The EAGLE layer; with `jakiro`, its MLP is Jakiro's two-expert MoE (specdec::blocks::moe,
    routing jakiro_two_experts: router logits (r0, r1) weigh both experts, (r2, r3) the contrastive
    right output beta f_top - alpha f_other), and the head is the target's, frozen."""

    def __init__(self, t: Target, draft_ids: torch.Tensor, jakiro: bool = False):
        super().__init__()
        self.jakiro = jakiro
        c = self.c = t.config
        e = c.hidden
        last = t.blocks[-1]
        P = lambda x: torch.nn.Parameter(x.detach().clone().float())
        fc = torch.zeros(e, 2 * e)
        fc[:, e:] = torch.eye(e)
        self.fc_w, self.fc_b = P(fc), P(torch.zeros(e))
        # The target's last layer, with its two output projections zeroed: that layer reads a normalised
        # stream and f is not one (EAGLE's layer 0 has no input norm), so left whole it would start with
        # outputs hundreds of times the features' size; zeroed, the drafter starts as the identity on f.
        self.q, self.k, self.v, self.o = P(last["q"]), P(last["k"]), P(last["v"]), P(torch.zeros_like(last["o"]))
        self.post_norm = P(last["ffn_norm"])
        if jakiro:
            # Two experts of intermediate E, each started from its own slice of the target's last MLP.
            self.router = torch.nn.Parameter(torch.zeros(4, e))
            self.experts = torch.nn.ParameterList(
                [P(m) for i in range(2) for m in (last["gate"][i * e:(i + 1) * e], last["up"][i * e:(i + 1) * e],
                                                  torch.zeros_like(last["down"][:, i * e:(i + 1) * e]))])
            self.head = torch.nn.Parameter(t.lm_head[draft_ids].detach().clone().float(), requires_grad=False)
        else:
            self.gate, self.up, self.down = P(last["gate"]), P(last["up"]), P(torch.zeros_like(last["down"]))
            self.head = P(t.lm_head[draft_ids])
        self.embed = t.embed  # frozen, the target's
        self.rope = t.rope
        self.rotate = t.rotate

    def tensors(self) -> dict:
        """The checkpoint's names (examples/eagle.cpp, jakiro.cpp) -> parameters; Jakiro's head is the
        target's and not saved, EAGLE's d2t is added by the caller."""
        tensors = {"fc.weight": self.fc_w, "fc.bias": self.fc_b, "layers.0.self_attn.q_proj.weight": self.q,
                   "layers.0.self_attn.k_proj.weight": self.k, "layers.0.self_attn.v_proj.weight": self.v,
                   "layers.0.self_attn.o_proj.weight": self.o, "layers.0.post_attention_layernorm.weight": self.post_norm}
        if self.jakiro:  # haiduo/Jakiro's names
            tensors["layers.0.mlp_moe.gate.weight"] = self.router
            for i in range(2):
                for j, proj in enumerate(("gate_proj", "up_proj", "down_proj")):
                    tensors[f"layers.0.mlp_moe.experts.{i}.{proj}.weight"] = self.experts[3 * i + j]
        else:
            tensors.update({"layers.0.mlp.gate_proj.weight": self.gate, "layers.0.mlp.up_proj.weight": self.up,
                            "layers.0.mlp.down_proj.weight": self.down, "lm_head.weight": self.head})
        return tensors

    def qkv(self, tokens, feats, positions):
        c = self.c
        B, T = tokens.shape
        x = torch.cat([self.embed[tokens], feats], -1) @ self.fc_w.T + self.fc_b
        cos, sin = self.rope(positions, x.dtype)
        q = (x @ self.q.T).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = (x @ self.k.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = (x @ self.v.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        return x, self.rotate(q, cos, sin), self.rotate(k, cos, sin), v

    def finish(self, x, q, keys, values, mask):
        B, _, T, _ = q.shape
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.o.T
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.rms_eps) * self.post_norm
        if not self.jakiro:
            return x + (F.silu(h @ self.gate.T) * (h @ self.up.T)) @ self.down.T, None
        ex = self.experts
        f = [(F.silu(h @ ex[3 * i].T) * (h @ ex[3 * i + 1].T)) @ ex[3 * i + 2].T for i in range(2)]
        r = h @ self.router.T
        p = torch.softmax(r[..., :2], -1)
        left = x + p[..., :1] * f[0] + p[..., 1:] * f[1]
        q = torch.softmax(r[..., 2:], -1)
        top = (r[..., 2] > r[..., 3]).unsqueeze(-1)  # expert 0 iff r2 > r3 (a tie goes to expert 1)
        beta, alpha = torch.where(top, q[..., :1], q[..., 1:]), torch.where(top, q[..., 1:], q[..., :1])
        right = x + torch.where(top, beta * f[0] - alpha * f[1], beta * f[1] - alpha * f[0])
        return left, right

    def forward(self, tokens, feats, valid, passes: int):
        """tokens [B x T] (x_{p+1}), feats [B x T x E] (f_p), valid [B x T] (real rows). Returns each
        pass's outputs [B x T x E], and for Jakiro each pass's right (contrastive) outputs."""
        B, T = tokens.shape
        pos = torch.arange(T)
        keys, values, outs, rights = [], [], [], []
        f = feats
        for d in range(passes):
            x, q, k, v = self.qkv(tokens, f, pos)
            keys.append(k)
            values.append(v)
            g, right = self.finish(x, q, torch.cat(keys, 2), torch.cat(values, 2), ttt_mask(valid, d))
            outs.append(g)
            rights.append(right)
            f = torch.cat([feats[:, :1], g[:, :-1]], 1)  # row p's feature: the draft's f_p, from row p - 1
        return outs, rights


def batches(split, max_tokens, gen=None):
    off = split["offsets"]
    lengths = off[1:] - off[:-1]
    order = torch.argsort(lengths)
    out, cur = [], []
    for s in order.tolist():
        if cur and (len(cur) + 1) * int(lengths[s]) > max_tokens:
            out.append(cur)
            cur = []
        cur.append(s)
    if cur:
        out.append(cur)
    if gen is not None:
        out = [out[i] for i in torch.randperm(len(out), generator=gen).tolist()]
    return out


def gather(split, seqs, t2d):
    """Padded rows p = 0 .. T - 2 of each sequence: token p + 1, feature p, next feature p + 1, the
    draft-vocabulary soft labels of token p + 2 (row p + 1's distribution), the greedy label, and which
    rows train (token p + 2 exists and is in the answer)."""
    off = split["offsets"]
    T = max(int(off[s + 1] - off[s]) for s in seqs) - 1
    B, E, K = len(seqs), split["h"].shape[1], split["top_ids"].shape[1]
    tokens = torch.zeros(B, T, dtype=torch.long)
    feats = torch.zeros(B, T, E)
    nxt = torch.zeros(B, T, E)
    ids = torch.zeros(B, T, K, dtype=torch.long)
    lp = torch.full((B, T, K), -1e4)
    greedy = torch.full((B, T), -1, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    train = torch.zeros(B, T, dtype=torch.bool)
    for i, s in enumerate(seqs):
        a, b = int(off[s]), int(off[s + 1])
        n = b - a - 1
        tokens[i, :n] = split["tokens"][a + 1:b].long()
        feats[i, :n] = split["h"][a:b - 1].float()
        nxt[i, :n] = split["h"][a + 1:b].float()
        valid[i, :n] = True
        # row p's labels: the distribution at row p + 1 (of token p + 2), for p + 2 < length
        if n > 1:
            tid = split["top_ids"][a + 1:b - 1].long()
            d = t2d[tid]
            ids[i, :n - 1] = d.clamp(min=0)
            lp[i, :n - 1] = torch.where(d >= 0, split["top_lp"][a + 1:b - 1].float(), torch.tensor(-1e4))
            greedy[i, :n - 1] = tid[:, 0]
            first = max(0, int(split["answer"][s]) - 2)
            train[i, first:n - 1] = d[first:, 0] >= 0  # the greedy token is in the draft vocabulary
    return tokens, feats, nxt, ids, lp, greedy, valid, train


def main(jakiro: bool = False):
    name = "jakiro" if jakiro else "eagle"
    ap = parser(epochs=6, lr=3e-4, tokens=4096)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.05, help="uniform feature noise, relative to the features' RMS")
    a = ap.parse_args()
    run = setup(a)
    target, train, held, draft_ids, t2d, start = run.target, run.train, run.held, run.draft_ids, run.t2d, run.start
    V = target.config.vocab
    print(f"{name}: draft vocabulary {a.draft_vocab} of {V} covers {run.coverage:.4f} of answer tokens")
    model = Draft(target, draft_ids, jakiro)
    params = [p for n, p in model.named_parameters() if p.requires_grad and n != "embed"]
    model.embed.requires_grad_(False)
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    rms = float(train["h"][:100000].float().pow(2).mean().sqrt())
    gen = torch.Generator().manual_seed(a.seed)
    per_epoch = len(batches(train, a.tokens))
    steps = int(a.epochs * per_epoch)
    print(f"{name}: {steps} steps ({per_epoch} per epoch), feature RMS {rms:.3f}")
    step = 0
    while step < steps:
        for seqs in batches(train, a.tokens, gen):
            if step == steps:
                break
            tokens, f, nxt, ids, lp, greedy, valid, mask = gather(train, seqs, t2d)
            f = f + (torch.rand(f.shape, generator=gen) * 2 - 1) * a.noise * rms
            with autocast():  # bf16 matmuls where native (2x); losses in fp32
                outs, rights = model(tokens, f, valid, a.passes)
                loss = 0.0
                p = torch.softmax(lp[mask], -1)
                for d, g in enumerate(outs):
                    logq = torch.log_softmax((g[mask] @ model.head.T).float(), -1).gather(-1, ids[mask])
                    loss = loss + PASS_WEIGHTS[d] * -(p * logq).sum(-1).mean()
                    if rights[d] is not None:  # Jakiro's contrastive output predicts the same token
                        logq = torch.log_softmax((rights[d][mask] @ model.head.T).float(), -1).gather(-1, ids[mask])
                        loss = loss + 0.5 * PASS_WEIGHTS[d] * -(p * logq).sum(-1).mean()
                loss = loss + 0.1 * F.smooth_l1_loss(outs[0][valid].float(), nxt[valid])
            optimizer_step(opt, params, loss, step, steps, a.lr)
            if step % 25 == 0:
                print(f"  step {step}/{steps} loss {loss.item():.3f} ({time.time() - start:.0f} s)", flush=True)
            step += 1
    # Held-out accuracy per pass against the target's greedy token (in the full vocabulary).
    model.eval()
    hits = [[0, 0, 0] for _ in range(a.passes)]
    n = 0
    with torch.no_grad():
        for seqs in batches(held, a.tokens):
            tokens, f, nxt, ids, lp, greedy, valid, mask = gather(held, seqs, t2d)
            outs, rights = model(tokens, f, valid, a.passes)
            lab = greedy[mask]
            n += len(lab)
            for d, g in enumerate(outs):
                top3 = draft_ids[(g[mask] @ model.head.T).topk(3, -1).indices]
                hits[d][0] += int((top3[:, 0] == lab).sum())
                hits[d][1] += int((top3 == lab[:, None]).any(-1).sum())
                if rights[d] is not None:
                    hits[d][2] += int((draft_ids[(rights[d][mask] @ model.head.T).argmax(-1)] == lab).sum())
    acc = [(h1 / n, h3 / n) for h1, h3, _ in hits]
    for d, (t1, t3) in enumerate(acc):
        right = f" right_top1={hits[d][2] / n:.3f}" if jakiro else ""
        print(f"RESULT drafter={name} depth={d + 1} top1={t1:.3f} top3={t3:.3f}{right}")
    tensors = model.tensors()
    from safetensors.torch import save_file

    out = {k: v.detach().to(torch.float16).contiguous() for k, v in tensors.items()}
    if not jakiro:
        out["d2t"] = (draft_ids - torch.arange(a.draft_vocab)).to(torch.int64)
    save_file(out, a.out, metadata={"format": f"specdec-{name}-1", "draft_vocab": str(a.draft_vocab),
                                    "target": "SmolLM2-135M-Instruct Q4_1", "coverage": f"{run.coverage:.4f}",
                                    "heldout_top1": ",".join(f"{t1:.3f}" for t1, _ in acc)})
    print(f"{name}: {a.out}, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
