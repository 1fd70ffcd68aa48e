"""The DFlash block drafter for the target, in the layout examples/dflash.cpp loads (z-lab/dflash's
checkpoint names; specdec::blocks::dflash).

    python dflash.py --model M.gguf --data DIR --out FILE.safetensors [--block 4] [--layers 1] [--epochs 6]

The drafter (arXiv 2602.06036; z-lab/dflash `dflash/model.py`): the target's layer outputs at
`target_layer_ids` = 1, L / 2 - 1, L - 4 (features.py's `taps`: the streams entering EAGLE-3's layers 2,
L / 2 and L - 3, so that the two drafters train on the same features) at each context position p are
condensed, `ctx_p = hidden_norm(fc([h_1 ; h_14 ; h_26]))`, and enter every drafter layer as keys and
values only. A block `[x_a, mask, ..., mask]` at positions a .. a + block - 1 runs through the Qwen3-shaped
layers (q_norm / k_norm, SwiGLU), attending the context before a and the whole block, no causal mask;
`norm` and the target's LM head give slot k's distribution of token a + k.

Training, at the data, batch size, steps and learning rate of eagle3.py (so that the two compare):
- every position a >= 1 of a sequence is an anchor (SpecForge samples up to 512 per sequence; these
  sequences are shorter); slot k (1 <= k < block) is trained where token a + k lies in the answer, on
  the target's top-32 distribution of that token (soft labels over the draft vocabulary), weighted
  exp(-(k - 1) / gamma) (SpecForge's decay, gamma 7);
- the training mask (SpecForge's `create_dflash_sdpa_mask`): block n's queries see context rows < a_n
  and their own block, nothing else;
- the layers start as the target's last layer with the output projections zeroed (q_norm / k_norm at 1),
  fc as [0 | 0 | I] (the highest tap), hidden_norm and norm as the target's final norm: the drafter
  starts with every slot reading the target's head through its own embedding, and learns from there.
  z-lab trains from random initialisation on far more data.
- the embedding and the LM head are the target's, frozen (DFlash has no vocabulary weights); the loss and
  the draft read the LM head rows of the `draft_vocab` most frequent answer tokens (`d2t`: the engine
  scores those rows of the target's head only).

Writes fp16 safetensors (I64 index tensors): `fc.weight` [E x 3E], `hidden_norm.weight`, `norm.weight`,
`layers.{i}.{input_layernorm,post_attention_layernorm}.weight`, `layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
`layers.{i}.self_attn.{q,k}_norm.weight`, `layers.{i}.mlp.{gate,up,down}_proj.weight`, and
`dflash.target_layer_ids` [3], `dflash.mask_token_id` [1], `dflash.block_size` [1], `d2t` [draft_vocab]
(target id of draft id i: i + d2t[i], as EAGLE-3's). Prints the held-out top-1 accuracy of each slot
against the target's greedy token and the chain's offline tau (1 + the expected accepted prefix).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from common import autocast, optimizer_step, parser, setup
from eagle import batches
from target import Target

GAMMA = 7.0


def mask_token(split: dict, vocab: int) -> int:
    """The mask id: the lowest id in 3 .. 16 (SmolLM2's special tokens after <|endoftext|>, <|im_start|>
    and <|im_end|>) that the training data never holds, as DFlash's mask is a vocabulary row no text
    uses."""
    counts = torch.bincount(split["tokens"].long(), minlength=vocab)
    for t in range(3, 17):
        if counts[t] == 0:
            return t
    raise SystemExit("no unused special token in 3..16 for the mask")


class DFlash(torch.nn.Module):
    def __init__(self, t: Target, draft_ids: torch.Tensor, layers: int, mask: int):
        super().__init__()
        c = self.c = t.config
        e = c.hidden
        last = t.blocks[-1]
        P = lambda x: torch.nn.Parameter(x.detach().clone().float())
        fc = torch.zeros(e, 3 * e)
        fc[:, 2 * e:] = torch.eye(e)
        self.fc = P(fc)
        self.hidden_norm, self.norm = P(t.norm), P(t.norm)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            self.layers.append(torch.nn.ParameterDict({
                "input_norm": P(last["attn_norm"]), "post_norm": P(last["ffn_norm"]),
                "q": P(last["q"]), "k": P(last["k"]), "v": P(last["v"]), "o": P(torch.zeros_like(last["o"])),
                "q_norm": P(torch.ones(c.head_dim)), "k_norm": P(torch.ones(c.head_dim)),
                "gate": P(last["gate"]), "up": P(last["up"]), "down": P(torch.zeros_like(last["down"]))}))
        self.head = torch.nn.Parameter(t.lm_head[draft_ids].detach().clone().float(), requires_grad=False)
        self.embed = t.embed  # frozen, the target's
        self.mask = mask
        self.rope, self.rotate, self.rms = t.rope, t.rotate, t.rms

    def tensors(self) -> dict:
        out = {"fc.weight": self.fc, "hidden_norm.weight": self.hidden_norm, "norm.weight": self.norm}
        names = {"input_norm": "input_layernorm.weight", "post_norm": "post_attention_layernorm.weight",
                 "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
                 "o": "self_attn.o_proj.weight", "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
                 "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight"}
        for i, l in enumerate(self.layers):
            for k, name in names.items():
                out[f"layers.{i}.{name}"] = l[k]
        return out

    def head_norm(self, x, w):
        """Qwen3's per-head RMSNorm over head_dim (x [B x heads x T x d])."""
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.rms_eps) * w

    def forward(self, taps, tokens, block: int, valid):
        """taps [B x T x 3E] (position p), tokens [B x T]; every position a is an anchor: block a is
        [tokens[a], mask, ...] at positions a .. a + block - 1. Returns norm(h) [B x T x block x E]."""
        c = self.c
        B, T, _ = taps.shape
        n = T * block
        ctx = self.rms(taps @ self.fc.T, self.hidden_norm)
        ids = torch.full((B, T, block), self.mask, dtype=torch.long)
        ids[:, :, 0] = tokens
        h = self.embed[ids].reshape(B, n, -1).float()
        ctx_pos = torch.arange(T)
        blk_pos = (torch.arange(T)[:, None] + torch.arange(block)[None, :]).reshape(-1)
        cos_c, sin_c = self.rope(ctx_pos, h.dtype)
        cos_b, sin_b = self.rope(blk_pos, h.dtype)
        # Block a's queries: context rows j < a (and valid), and block a's own rows.
        anchor = torch.arange(T).repeat_interleave(block)
        sees_ctx = (ctx_pos[None, :] < anchor[:, None])[None] & valid[:, None, :]
        sees_blk = (anchor[:, None] == anchor[None, :])[None].expand(B, n, n)
        mask = torch.cat([sees_ctx, sees_blk], -1)[:, None]
        for l in self.layers:
            hn = self.rms(h, l["input_norm"])
            q = self.head_norm((hn @ l["q"].T).view(B, n, c.heads, c.head_dim).transpose(1, 2), l["q_norm"])
            kc = self.head_norm((ctx @ l["k"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2), l["k_norm"])
            kb = self.head_norm((hn @ l["k"].T).view(B, n, c.kv_heads, c.head_dim).transpose(1, 2), l["k_norm"])
            vc = (ctx @ l["v"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
            vb = (hn @ l["v"].T).view(B, n, c.kv_heads, c.head_dim).transpose(1, 2)
            q = self.rotate(q, cos_b, sin_b)
            k = torch.cat([self.rotate(kc, cos_c, sin_c), self.rotate(kb, cos_b, sin_b)], 2)
            a = F.scaled_dot_product_attention(q, k, torch.cat([vc, vb], 2), attn_mask=mask, enable_gqa=True)
            h = h + a.transpose(1, 2).reshape(B, n, -1) @ l["o"].T
            y = self.rms(h, l["post_norm"])
            h = h + (F.silu(y @ l["gate"].T) * (y @ l["up"].T)) @ l["down"].T
        return self.rms(h, self.norm).view(B, T, block, -1)

    def logits(self, x):
        return x @ self.head.T


def gather(split, seqs, t2d, block):
    """Padded rows of each sequence: taps [B x T x 3E], tokens [B x T], valid [B x T]; per anchor a and
    slot k >= 1: the draft-vocabulary soft labels of token a + k (row a + k - 1's distribution), the
    greedy label, and whether the slot trains (a >= 1, a + k < length, token a + k in the answer)."""
    off = split["offsets"]
    T = max(int(off[s + 1] - off[s]) for s in seqs)
    B, K = len(seqs), split["top_ids"].shape[1]
    taps = torch.zeros(B, T, split["taps"].shape[1])
    tokens = torch.zeros(B, T, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    ids = torch.zeros(B, T, block - 1, K, dtype=torch.long)
    lp = torch.full((B, T, block - 1, K), -1e4)
    greedy = torch.full((B, T, block - 1), -1, dtype=torch.long)
    train = torch.zeros(B, T, block - 1, dtype=torch.bool)
    for i, s in enumerate(seqs):
        a, b = int(off[s]), int(off[s + 1])
        n = b - a
        taps[i, :n] = split["taps"][a:b].float()
        tokens[i, :n] = split["tokens"][a:b].long()
        valid[i, :n] = True
        answer = int(split["answer"][s])
        for k in range(1, block):
            last = n - k  # anchors 1 .. n - 1 - k: token a + k exists
            if last <= 1:
                continue
            rows = slice(1, last)
            tid = split["top_ids"][a + k:a + last + k - 1].long()  # row a + k - 1 for anchors 1 .. last - 1
            d = t2d[tid]
            ids[i, rows, k - 1] = d.clamp(min=0)
            lp[i, rows, k - 1] = torch.where(d >= 0, split["top_lp"][a + k:a + last + k - 1].float(), torch.tensor(-1e4))
            greedy[i, rows, k - 1] = tid[:, 0]
            anchors = torch.arange(1, last)
            train[i, rows, k - 1] = (anchors + k >= answer) & (d[:, 0] >= 0)
    return taps, tokens, valid, ids, lp, greedy, train


def main():
    ap = parser(epochs=6, lr=3e-4, tokens=4096)
    ap.add_argument("--block", type=int, default=4, help="block size: the last committed token and block - 1 masks")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.05, help="uniform tap noise, relative to the taps' RMS")
    a = ap.parse_args()
    run = setup(a)
    c = run.target.config
    mask = mask_token(run.train, c.vocab)
    print(f"dflash: block {a.block}, {a.layers} layer(s), mask token {mask}; draft vocabulary {a.draft_vocab} covers "
          f"{run.coverage:.4f} of answer tokens")
    model = DFlash(run.target, run.draft_ids, a.layers, mask)
    rms = float(run.train["taps"][:100000].float().pow(2).mean().sqrt())
    params = [p for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed)
    per_epoch = len(batches(run.train, a.tokens))
    steps = int(a.epochs * per_epoch)
    weights = torch.exp(-torch.arange(a.block - 1, dtype=torch.float32) / GAMMA)
    print(f"dflash: {steps} steps ({per_epoch} per epoch)")
    step = 0
    while step < steps:
        for seqs in batches(run.train, a.tokens, gen):
            if step == steps:
                break
            taps, tokens, valid, ids, lp, _, train = gather(run.train, seqs, run.t2d, a.block)
            taps = taps + (torch.rand(taps.shape, generator=gen) * 2 - 1) * a.noise * rms
            with autocast():
                out = model(taps, tokens, a.block, valid)[:, :, 1:][train]
                logq = torch.log_softmax(model.logits(out).float(), -1).gather(-1, ids[train])
                ce = -(torch.softmax(lp[train], -1) * logq).sum(-1)
                w = weights.expand(train.shape)[train]
                loss = (w * ce).sum() / w.sum()
            optimizer_step(opt, params, loss, step, steps, a.lr)
            if step % 25 == 0:
                print(f"  step {step}/{steps} loss {loss.item():.3f} ({time.time() - run.start:.0f} s)", flush=True)
            step += 1
    model.eval()
    hits = torch.zeros(a.block - 1)
    chain = torch.zeros(a.block)  # anchors whose first k drafts are all right, k = 0 .. block - 1
    n = 0
    with torch.no_grad():
        for seqs in batches(run.held, a.tokens):
            taps, tokens, valid, ids, lp, greedy, train = gather(run.held, seqs, run.t2d, a.block)
            out = model(taps, tokens, a.block, valid)[:, :, 1:]
            top = run.draft_ids[model.logits(out).argmax(-1)]
            # Anchors whose every slot is scored (the offline chain's acceptance needs all of them).
            full = train.all(-1)
            right = (top == greedy)[full]
            n += int(full.sum())
            hits += right.float().sum(0)
            prefix = right.long().cumprod(-1)
            chain[0] += right.shape[0]
            chain[1:] += prefix.sum(0).float()
    for k in range(a.block - 1):
        print(f"RESULT drafter=dflash slot={k + 1} top1={hits[k] / n:.3f}")
    tau = float(chain.sum() / n)
    print(f"RESULT drafter=dflash offline_tau={tau:.3f} (chain of {a.block - 1}, {n} held-out anchors)")
    from safetensors.torch import save_file

    out = {k: v.detach().to(torch.float16).contiguous() for k, v in model.tensors().items()}
    layers = c.layers
    out["dflash.target_layer_ids"] = torch.tensor([1, layers // 2 - 1, layers - 4], dtype=torch.int64)
    out["dflash.mask_token_id"] = torch.tensor([mask], dtype=torch.int64)
    out["dflash.block_size"] = torch.tensor([a.block], dtype=torch.int64)
    out["d2t"] = (run.draft_ids - torch.arange(a.draft_vocab)).to(torch.int64)
    save_file(out, a.out, metadata={"format": "specdec-dflash-1", "draft_vocab": str(a.draft_vocab),
                                    "target": "SmolLM2-135M-Instruct Q4_1", "block_size": str(a.block),
                                    "heldout_top1": ",".join(f"{float(h) / n:.3f}" for h in hits),
                                    "offline_tau": f"{tau:.3f}"})
    print(f"dflash: {a.out}, {time.time() - run.start:.0f} s")


if __name__ == "__main__":
    main()
