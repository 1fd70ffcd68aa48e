"""The EAGLE-3 drafter for the target, in the layout examples/eagle3.cpp loads (SafeAILab EAGLE's
EAGLE-3 checkpoint names; specdec::blocks::eagle3).

    python eagle3.py --model M.gguf --data DIR --out FILE.safetensors [--draft-vocab 8192] [--epochs 6]

The drafter: row p fuses the target's states entering three of its layers at position p (features.py's
`taps`: layers 2, L / 2 and L - 3), `g = fc([low ; mid ; high])` (3E -> E, no bias); one decoder layer
attends from `[input_layernorm(embed(x_{p+1})) ; hidden_norm(g)]` (2E) with the residual `g`, and its
output h2, through `norm` and a draft LM head over the `draft_vocab` most frequent answer tokens
(`d2t` maps them to target ids), gives token p + 2. The next draft step feeds h2 back in place of g.

Training, at the data, batch size, steps and learning rate of eagle.py (so that the two compare):
- fc starts as [0 | 0 | I] (the high tap), the layer as the target's last layer with its output
  projections zeroed (q / k / v reading the hidden half), `norm` as the target's final norm and the
  head as the target's LM head rows of the draft vocabulary: the drafter starts as the logit lens at
  layer L - 3;
- soft labels: the target's top-32 distribution of token p + 2, restricted to the draft vocabulary;
- training-time test (EAGLE-3): passes 2 and 3 feed the drafter its own h2 (no fc), row p of pass d
  attending to the pass-1 rows before p - d + 1 and to its own earlier passes' rows, as a node at depth
  d - 1 of a draft tree does; the passes' losses weigh 1, 0.8, 0.64. No feature regression (EAGLE-3
  predicts tokens only).

Writes fp16 safetensors (I64 d2t): `fc.weight` [E x 3E], `midlayer.{hidden_norm,input_layernorm,
post_attention_layernorm}.weight`, `midlayer.self_attn.{q,k,v}_proj.weight` [* x 2E],
`midlayer.self_attn.o_proj.weight`, `midlayer.mlp.{gate,up,down}_proj.weight`, `norm.weight`,
`lm_head.weight` [draft_vocab x E], `d2t` [draft_vocab]; the embedding is the target's. Prints the
held-out top-1 / top-3 accuracy of each pass against the target's greedy token.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from common import parser, setup
from eagle import train_chained, ttt_mask
from features import tap_layers
from target import Target


class Draft3(torch.nn.Module):
    def __init__(self, t: Target, draft_ids: torch.Tensor):
        super().__init__()
        c = self.c = t.config
        e = c.hidden
        last = t.blocks[-1]
        P = lambda x: torch.nn.Parameter(x.detach().clone().float())
        fc = torch.zeros(e, 3 * e)
        fc[:, 2 * e:] = torch.eye(e)
        self.fc = P(fc)
        self.hidden_norm, self.input_norm = P(last["attn_norm"]), P(last["attn_norm"])
        wide = lambda w: torch.cat([torch.zeros_like(w), w], 1)  # [embedding ; hidden]: the hidden half
        self.q, self.k, self.v = P(wide(last["q"])), P(wide(last["k"])), P(wide(last["v"]))
        self.o = P(torch.zeros_like(last["o"]))
        self.post_norm = P(last["ffn_norm"])
        self.gate, self.up, self.down = P(last["gate"]), P(last["up"]), P(torch.zeros_like(last["down"]))
        self.norm = P(t.norm)
        self.head = P(t.lm_head[draft_ids])
        self.embed = t.embed  # frozen, the target's
        self.rope, self.rotate, self.rms = t.rope, t.rotate, t.rms

    def tensors(self) -> dict:
        m = "midlayer."
        return {"fc.weight": self.fc, m + "hidden_norm.weight": self.hidden_norm, m + "input_layernorm.weight": self.input_norm,
                m + "self_attn.q_proj.weight": self.q, m + "self_attn.k_proj.weight": self.k,
                m + "self_attn.v_proj.weight": self.v, m + "self_attn.o_proj.weight": self.o,
                m + "post_attention_layernorm.weight": self.post_norm, m + "mlp.gate_proj.weight": self.gate,
                m + "mlp.up_proj.weight": self.up, m + "mlp.down_proj.weight": self.down, "norm.weight": self.norm,
                "lm_head.weight": self.head}

    def layer(self, tokens, h, keys, values, mask):
        c = self.c
        B, T = tokens.shape
        x = torch.cat([self.rms(self.embed[tokens], self.input_norm), self.rms(h, self.hidden_norm)], -1)
        cos, sin = self.rope(torch.arange(T), x.dtype)
        q = self.rotate((x @ self.q.T).view(B, T, c.heads, c.head_dim).transpose(1, 2), cos, sin)
        keys.append(self.rotate((x @ self.k.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2), cos, sin))
        values.append((x @ self.v.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2))
        a = F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=mask, enable_gqa=True)
        h1 = h + a.transpose(1, 2).reshape(B, T, -1) @ self.o.T
        y = self.rms(h1, self.post_norm)
        return h1 + (F.silu(y @ self.gate.T) * (y @ self.up.T)) @ self.down.T

    def forward(self, tokens, taps, valid, passes: int):
        """tokens [B x T] (x_{p+1}), taps [B x T x 3E] (position p), valid [B x T]. Returns each pass's h2."""
        keys, values, outs = [], [], []
        g = taps @ self.fc.T
        h = g
        for d in range(passes):
            h2 = self.layer(tokens, h, keys, values, ttt_mask(valid, d))
            outs.append(h2)
            h = torch.cat([g[:, :1], h2[:, :-1]], 1)  # row p's state: the draft's own, from row p - 1
        return outs

    def logits(self, h2):
        return self.rms(h2, self.norm) @ self.head.T


def taps_of(split, seqs, T):
    """Rows p = 0 .. T - 1 of each sequence's taps (position p), padded."""
    off = split["offsets"]
    out = torch.zeros(len(seqs), T, split["taps"].shape[1])
    for i, s in enumerate(seqs):
        a, b = int(off[s]), int(off[s + 1])
        out[i, :b - a - 1] = split["taps"][a:b - 1].float()
    return out


def main():
    ap = parser(epochs=6, lr=3e-4, tokens=4096)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.05, help="uniform tap noise, relative to the taps' RMS")
    a = ap.parse_args()
    run = setup(a)
    print(f"eagle3: draft vocabulary {a.draft_vocab} of {run.target.config.vocab} covers {run.coverage:.4f} of answer tokens")
    model = Draft3(run.target, run.draft_ids)
    rms = float(run.train["taps"][:100000].float().pow(2).mean().sqrt())
    print(f"eagle3: tap RMS {rms:.3f}")

    def inputs(split, seqs, tokens, f, gen):
        taps = taps_of(split, seqs, tokens.shape[1])
        return taps if gen is None else taps + (torch.rand(taps.shape, generator=gen) * 2 - 1) * a.noise * rms

    hits, n = train_chained("eagle3", model, a, run, inputs)
    from safetensors.torch import save_file

    out = {k: v.detach().to(torch.float16).contiguous() for k, v in model.tensors().items()}
    out["d2t"] = (run.draft_ids - torch.arange(a.draft_vocab)).to(torch.int64)
    save_file(out, a.out, metadata={"format": "specdec-eagle3-1", "draft_vocab": str(a.draft_vocab),
                                    "target": "SmolLM2-135M-Instruct Q4_1",
                                    "taps": ",".join(str(i) for i in tap_layers(len(run.target.blocks))),
                                    "coverage": f"{run.coverage:.4f}",
                                    "heldout_top1": ",".join(f"{h1 / n:.3f}" for h1, _ in hits)})
    print(f"eagle3: {a.out}, {time.time() - run.start:.0f} s")


if __name__ == "__main__":
    main()
