"""A multi-token-prediction module for the target (DeepSeek-V3's MTP layout; specdec::blocks::mtp), in the
layout examples/mtp.cpp loads.

    python mtp.py --model M.gguf --data DIR --out FILE.safetensors [--draft-vocab 8192] [--epochs 6]

The module: row p (at position p) projects `x = eh_proj([enorm(embed(x_{p+1})) ; hnorm(h_p)])` (2E -> E,
no bias, embedding first) from the target's final hidden state h_p after its final norm, runs one
pre-norm decoder layer of the target's shape on x, and its output o, through `shared_head.norm` and the
target's LM head (shared, frozen), gives token p + 2. The next step feeds o back in place of h. vLLM
zeroes the embedding at position 0; so does the training here.

Training, at eagle.py's data, batch size, steps and learning rate: eh_proj starts as [0 | I], the layer
as the target's last layer with its output projections zeroed, shared_head.norm as the target's final
norm; soft labels of token p + 2 (the target's top-32), scored on the draft vocabulary's rows of the
shared head (the `draft_vocab` most frequent answer tokens: the full 49152-row head per row would cost
six times as much here; the example drafts over the full head); three chained passes (the module fed
its own o, as a k-step draft is), weighing 1, 0.8, 0.64.

Writes fp16 safetensors under DeepSeek-V3's names for module 0 of a 30-layer target,
`model.layers.30.{enorm,hnorm,eh_proj}.weight`, `model.layers.30.{input_layernorm,post_attention_layernorm}.weight`,
`model.layers.30.self_attn.{q,k,v,o}_proj.weight`, `model.layers.30.mlp.{gate,up,down}_proj.weight`,
`model.layers.30.shared_head.norm.weight` (the embedding and `shared_head.head` are the target's).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from common import parser, setup
from eagle import train_chained, ttt_mask
from target import Target


class MTP(torch.nn.Module):
    def __init__(self, t: Target, draft_ids: torch.Tensor):
        super().__init__()
        c = self.c = t.config
        e = c.hidden
        last = t.blocks[-1]
        P = lambda x: torch.nn.Parameter(x.detach().clone().float())
        self.enorm, self.hnorm = P(torch.ones(e)), P(torch.ones(e))
        eh = torch.zeros(e, 2 * e)
        eh[:, e:] = torch.eye(e)
        self.eh_proj = P(eh)
        self.attn_norm, self.q, self.k, self.v = P(last["attn_norm"]), P(last["q"]), P(last["k"]), P(last["v"])
        self.o = P(torch.zeros_like(last["o"]))
        self.ffn_norm, self.gate, self.up = P(last["ffn_norm"]), P(last["gate"]), P(last["up"])
        self.down = P(torch.zeros_like(last["down"]))
        self.head_norm = P(t.norm)
        self.head = torch.nn.Parameter(t.lm_head[draft_ids].detach().clone().float(), requires_grad=False)
        self.embed = t.embed  # frozen, the target's
        self.rope, self.rotate, self.rms = t.rope, t.rotate, t.rms

    def tensors(self, layer: int) -> dict:
        m = f"model.layers.{layer}."
        return {m + "enorm.weight": self.enorm, m + "hnorm.weight": self.hnorm, m + "eh_proj.weight": self.eh_proj,
                m + "input_layernorm.weight": self.attn_norm, m + "self_attn.q_proj.weight": self.q,
                m + "self_attn.k_proj.weight": self.k, m + "self_attn.v_proj.weight": self.v,
                m + "self_attn.o_proj.weight": self.o, m + "post_attention_layernorm.weight": self.ffn_norm,
                m + "mlp.gate_proj.weight": self.gate, m + "mlp.up_proj.weight": self.up,
                m + "mlp.down_proj.weight": self.down, m + "shared_head.norm.weight": self.head_norm}

    def step(self, tokens, h, keys, values, mask):
        c = self.c
        B, T = tokens.shape
        e = self.embed[tokens] * (torch.arange(T) > 0)[None, :, None]  # vLLM: no embedding at position 0
        x = torch.cat([self.rms(e, self.enorm), self.rms(h, self.hnorm)], -1) @ self.eh_proj.T
        y = self.rms(x, self.attn_norm)
        cos, sin = self.rope(torch.arange(T), x.dtype)
        q = self.rotate((y @ self.q.T).view(B, T, c.heads, c.head_dim).transpose(1, 2), cos, sin)
        keys.append(self.rotate((y @ self.k.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2), cos, sin))
        values.append((y @ self.v.T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2))
        a = F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=mask, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.o.T
        y = self.rms(x, self.ffn_norm)
        return x + (F.silu(y @ self.gate.T) * (y @ self.up.T)) @ self.down.T

    def forward(self, tokens, feats, valid, passes: int):
        keys, values, outs = [], [], []
        h = feats
        for d in range(passes):
            o = self.step(tokens, h, keys, values, ttt_mask(valid, d))
            outs.append(o)
            h = torch.cat([feats[:, :1], o[:, :-1]], 1)  # row p's state: the module's own o from row p - 1
        return outs

    def logits(self, o):
        return self.rms(o, self.head_norm) @ self.head.T


def main():
    ap = parser(epochs=6, lr=3e-4, tokens=4096)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.05, help="uniform feature noise, relative to the features' RMS")
    a = ap.parse_args()
    run = setup(a)
    model = MTP(run.target, run.draft_ids)
    rms = float(run.train["h"][:100000].float().pow(2).mean().sqrt())
    print(f"mtp: feature RMS {rms:.3f}")

    def inputs(split, seqs, tokens, f, gen):
        return f if gen is None else f + (torch.rand(f.shape, generator=gen) * 2 - 1) * a.noise * rms

    hits, n = train_chained("mtp", model, a, run, inputs)
    from safetensors.torch import save_file

    layer = len(run.target.blocks)
    out = {k: v.detach().to(torch.float16).contiguous() for k, v in model.tensors(layer).items()}
    save_file(out, a.out, metadata={"format": "specdec-mtp-1", "module_layer": str(layer),
                                    "target": "SmolLM2-135M-Instruct Q4_1",
                                    "heldout_top1": ",".join(f"{h1 / n:.3f}" for h1, _ in hits)})
    print(f"mtp: {a.out}, {time.time() - run.start:.0f} s")


if __name__ == "__main__":
    main()
