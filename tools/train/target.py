"""The target model in PyTorch, loaded from the GGUF the C++ examples run (SmolLM2-135M-Instruct, Q4_1).

The weights are dequantised with the `gguf` package, so training sees exactly the model the C++
engine serves (examples/engine/llama.hpp), not the original bf16 checkpoint. Q and K rows are permuted
back from llama.cpp's interleaved rotary order to the rotate-half order, as the C++ loader does.

Also here: the byte-level BPE tokenizer rebuilt from the GGUF's vocabulary and merges (`tokenizers`),
and the chat template's token ids.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float
    rms_eps: float


def _field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


def _unpermute(w: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    # GGUF row (h, i, j) holds Hugging Face row (h, j, i), i < head_dim / 2, j < 2.
    cols = w.shape[1]
    return w.reshape(heads, head_dim // 2, 2, cols).transpose(0, 2, 1, 3).reshape(heads * head_dim, cols)


class Target(torch.nn.Module):
    """A Llama decoder (RMSNorm, rotate-half RoPE, GQA, SwiGLU, tied embeddings), frozen."""

    def __init__(self, path: str, dtype=torch.float32):
        super().__init__()
        import gguf

        r = gguf.GGUFReader(path)
        arch = _field(r, "general.architecture")
        assert arch == "llama", f"general.architecture is {arch!r}; expected 'llama'"
        hidden = _field(r, "llama.embedding_length")
        heads = _field(r, "llama.attention.head_count")
        self.config = Config(
            layers=_field(r, "llama.block_count"), hidden=hidden, heads=heads,
            kv_heads=_field(r, "llama.attention.head_count_kv"), head_dim=hidden // heads,
            intermediate=_field(r, "llama.feed_forward_length"), vocab=0,
            rope_theta=float(_field(r, "llama.rope.freq_base")),
            rms_eps=float(_field(r, "llama.attention.layer_norm_rms_epsilon")))
        tensors = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            tensors[t.name] = np.ascontiguousarray(a.reshape([int(d) for d in reversed(t.shape)]), dtype=np.float32)
        c = self.config
        self.config.vocab = tensors["token_embd.weight"].shape[0]
        P = lambda a: torch.nn.Parameter(torch.from_numpy(np.array(a)).to(dtype), requires_grad=False)
        self.embed = P(tensors["token_embd.weight"])
        self.lm_head = P(tensors["output.weight"]) if "output.weight" in tensors else self.embed
        self.norm = P(tensors["output_norm.weight"])
        self.blocks = []
        for l in range(c.layers):
            p = f"blk.{l}."
            b = torch.nn.ParameterDict({
                "attn_norm": P(tensors[p + "attn_norm.weight"]), "ffn_norm": P(tensors[p + "ffn_norm.weight"]),
                "q": P(_unpermute(tensors[p + "attn_q.weight"], c.heads, c.head_dim)),
                "k": P(_unpermute(tensors[p + "attn_k.weight"], c.kv_heads, c.head_dim)),
                "v": P(tensors[p + "attn_v.weight"]), "o": P(tensors[p + "attn_output.weight"]),
                "gate": P(tensors[p + "ffn_gate.weight"]), "up": P(tensors[p + "ffn_up.weight"]),
                "down": P(tensors[p + "ffn_down.weight"])})
            self.blocks.append(b)
        self.blocks = torch.nn.ModuleList(self.blocks)
        self.tokens = [bytes(t).decode("utf-8", errors="replace") for t in
                       (r.fields["tokenizer.ggml.tokens"].parts[i] for i in r.fields["tokenizer.ggml.tokens"].data)]
        self.merges = [bytes(r.fields["tokenizer.ggml.merges"].parts[i]).decode() for i in
                       r.fields["tokenizer.ggml.merges"].data]
        self.eos = _field(r, "tokenizer.ggml.eos_token_id")

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_eps) * w

    def rope(self, positions: torch.Tensor, dtype):
        c = self.config
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim))
        ang = positions.to(torch.float64)[..., None] * inv
        ang = torch.cat([ang, ang], -1)
        return ang.cos().to(dtype), ang.sin().to(dtype)

    @staticmethod
    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def layer(self, b, x, cos, sin, mask):
        c = self.config
        B, T, _ = x.shape
        h = self.rms(x, b["attn_norm"])
        q = (h @ b["q"].T).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = (h @ b["k"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = (h @ b["v"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ b["o"].T
        h = self.rms(x, b["ffn_norm"])
        return x + (F.silu(h @ b["gate"].T) * (h @ b["up"].T)) @ b["down"].T

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None, layers_out: bool = False):
        """tokens [B x T] (causal; rows may be right-padded, or `mask` [B x 1 x T x T] boolean, True =
        attend). Returns (final hidden state after the final norm [B x T x E], logits [B x T x V]) and,
        with layers_out, the residual stream after each layer."""
        B, T = tokens.shape
        x = self.embed[tokens]
        cos, sin = self.rope(torch.arange(T), x.dtype)
        outs = []
        for b in self.blocks:
            x = self.layer(b, x, cos, sin, mask)
            if layers_out:
                outs.append(x)
        h = self.rms(x, self.norm)
        logits = h @ self.lm_head.T
        return (h, logits, outs) if layers_out else (h, logits)

    # --- generation with a KV cache (batched, left-aligned prompts of different lengths) ---
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new: int, temperature: float, stop: set[int],
                 generator: torch.Generator | None = None) -> list[list[int]]:
        """Continues every prompt by up to max_new tokens (greedy at temperature 0, else sampled from
        softmax(logits / temperature)); a row stops at a token in `stop` (kept). Prompts are
        left-padded; padding is masked out and positions count from each prompt's first token, so each
        row is what it would be alone (up to floating-point rounding)."""
        c = self.config
        B = len(prompts)
        L = max(len(p) for p in prompts)
        dt = self.embed.dtype
        toks = torch.zeros(B, L, dtype=torch.long)
        valid = torch.zeros(B, L, dtype=torch.bool)
        for i, p in enumerate(prompts):
            toks[i, L - len(p):] = torch.tensor(p)
            valid[i, L - len(p):] = True
        pos = (valid.cumsum(1) - 1).clamp(min=0)
        total = L + max_new
        kc = [torch.zeros(B, c.kv_heads, total, c.head_dim, dtype=dt) for _ in range(c.layers)]
        vc = [torch.zeros(B, c.kv_heads, total, c.head_dim, dtype=dt) for _ in range(c.layers)]
        keymask = torch.zeros(B, total, dtype=torch.bool)
        keymask[:, :L] = valid
        out = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool)
        cur, cur_pos, start = toks, pos, 0
        for step in range(max_new + 1):
            T = cur.shape[1]
            x = self.embed[cur]
            cos, sin = self.rope(cur_pos, dt)
            cos, sin = cos[:, None], sin[:, None]
            causal = torch.ones(T, start + T, dtype=torch.bool).tril(start)
            mask = (causal[None] & keymask[:, None, :start + T])[:, None]
            for l, b in enumerate(self.blocks):
                h = self.rms(x, b["attn_norm"])
                q = (h @ b["q"].T).view(B, T, c.heads, c.head_dim).transpose(1, 2)
                k = (h @ b["k"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
                v = (h @ b["v"].T).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
                q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
                kc[l][:, :, start:start + T], vc[l][:, :, start:start + T] = k, v
                a = F.scaled_dot_product_attention(q, kc[l][:, :, :start + T], vc[l][:, :, :start + T], attn_mask=mask,
                                                   enable_gqa=True)
                x = x + a.transpose(1, 2).reshape(B, T, -1) @ b["o"].T
                h = self.rms(x, b["ffn_norm"])
                x = x + (F.silu(h @ b["gate"].T) * (h @ b["up"].T)) @ b["down"].T
            logits = (self.rms(x[:, -1], self.norm) @ self.lm_head.T).float()
            if step == max_new:
                break
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
            for i in range(B):
                if not done[i]:
                    out[i].append(int(nxt[i]))
                    if int(nxt[i]) in stop:
                        done[i] = True
            if bool(done.all()):
                break
            start += T
            keymask[:, start] = True
            cur = nxt[:, None]
            cur_pos = cur_pos[:, -1:] + 1
        return out


def tokenizer(target: Target):
    """The GGUF's byte-level BPE as a `tokenizers.Tokenizer` (digits split one by one, as SmolLM2's
    pre-tokenizer does), special tokens kept whole."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

    vocab = {t: i for i, t in enumerate(target.tokens)}
    merges = [tuple(m.split(" ", 1)) for m in target.merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in target.tokens if t.startswith("<|") and t.endswith("|>")])
    return tok


def chat_prefix(tok, prompt: str) -> list[int]:
    """The chat template up to the assistant's turn, as the C++ examples build it."""
    return tok.encode("<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n").ids
