#!/usr/bin/env python3
"""Block goldens for DFlash's block drafter (arXiv 2602.06036).

Writes tests/data/blocks/dflash_*.json in the schema of ../shared/goldens/blocks/README.md (float64
values; params by checkpoint name; inputs, outputs).

The reference is z-lab/dflash at 44947fbf (`dflash/model.py`, the Hugging Face drafter
`DFlashDraftModel` and its decoding loop `dflash_generate`; the script checks the file's git blob id),
imported as-is and run in float64 with eager attention on a CPU. Two kinds of case:

- `loop`: a tiny random Qwen3 target (transformers' `Qwen3ForCausalLM`) and drafter run through the
  reference's own `dflash_generate` at temperature 0. Hooks record every drafter call: the context
  features it appends (the target's layer outputs at `target_layer_ids`, Hugging Face's
  `hidden_states[id + 1]`), the cache length before the call, the position ids, the block's ids (the
  target's embedding is called with them just before), `ctx = hidden_norm(fc(features))`, the output
  `norm(h)`, the draft logits (the target's lm_head over rows 1..bs-1) and their argmax; and the
  loop's final output ids (greedy: identical to the target's own greedy decoding).
- `scripted`: the same drafter call sequence as `dflash_generate` (positions from the cache's length to
  start + bs, `crop(start)` after each call), with random context features and a random number of
  accepted rows per step (1..bs), so that multi-row context appends occur (a random drafter rarely has
  its drafts accepted in the loop).

SGLang's `srt/models/dflash.py` (0.5.23) computes the same function (k_proj / v_proj of the context
written to the draft cache with k_norm and RoPE, ENCODER_ONLY attention over the prefix and the block);
it needs SGLang's GPU runtime and is not run here.

Needs torch and transformers (CPU): pip install torch==2.15.0 transformers==4.57.1 (the version
z-lab's pyproject pins). Usage:
  tools/goldens/dflash.py --dflash DIR [--out tests/data/blocks]
  (DIR: a checkout of z-lab/dflash at 44947fbf, holding dflash/model.py)
"""
import argparse
import hashlib
import json
import os
import sys

import torch

DFLASH_COMMIT = "44947fbf71114e241c96de194f4b382b5dd330d0"
MODEL_BLOB = "5a1d33ae9c3447e032707c49fd722069168abdef"  # dflash/model.py at DFLASH_COMMIT


def blob_id(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tensor(t):
    t = t.detach()
    if t.dtype in (torch.int64, torch.int32, torch.bool):
        return {"shape": list(t.shape), "data": [int(v) for v in t.reshape(-1).tolist()]}
    return {"shape": list(t.shape), "data": [float(v) for v in t.double().reshape(-1).tolist()]}


def randomise(module, gen):
    """Weights: normal(0, 1 / sqrt(in)) for matrices, 1 + 0.1 normal for norm vectors (so a missing
    norm shows), normal(0, 1) for embeddings."""
    for name, p in module.named_parameters():
        with torch.no_grad():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / p.shape[1] ** 0.5)


def qwen3_config(d, layers, hidden, **extra):
    from transformers import Qwen3Config

    c = Qwen3Config(vocab_size=d["vocab"], hidden_size=hidden, intermediate_size=d["intermediate"],
                    num_hidden_layers=layers, num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"],
                    head_dim=d["head_dim"], rms_norm_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"],
                    max_position_embeddings=256, attention_bias=False, tie_word_embeddings=False,
                    attn_implementation="eager", **extra)
    c.rope_scaling = None
    return c


def case(model_py, index, seed, d):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    from transformers import Qwen3ForCausalLM

    e, bs = d["E"], d["block_size"]
    dflash_config = {"mask_token_id": d["mask_token"]}
    if d.get("target_layer_ids") is not None:
        dflash_config["target_layer_ids"] = d["target_layer_ids"]
    dconf = qwen3_config(d, d["draft_layers"], e, block_size=bs, num_target_layers=d["target_layers"],
                         dflash_config=dflash_config)
    drafter = model_py.DFlashDraftModel(dconf).double().eval()
    randomise(drafter, gen)
    ids = list(drafter.target_layer_ids)
    k = len(ids)
    target = None
    if d["kind"] == "loop":
        target = Qwen3ForCausalLM(qwen3_config(d, d["target_layers"], e)).double().eval()
        randomise(target, gen)
        embed, head = target.model.embed_tokens.weight, target.lm_head.weight
    else:
        embed = torch.randn((d["vocab"], e), generator=gen, dtype=torch.float64)
        head = torch.randn((d["vocab"], e), generator=gen, dtype=torch.float64) / e ** 0.5

    steps = []
    pending = {}
    ctx_out = []

    def pre_hook(mod, args, kwargs):
        pending["cached_before"] = kwargs["past_key_values"].get_seq_length()

    def hook(mod, args, kwargs, out):
        steps.append({"cached_before": pending.pop("cached_before"),
                      "block_ids": pending.pop("block_ids"),
                      "context_features": kwargs["target_hidden"][0].clone(),
                      "position_ids": kwargs["position_ids"].reshape(-1).clone(),
                      "context": ctx_out.pop()[0].clone(),
                      "out": out[0].clone()})

    drafter.register_forward_pre_hook(pre_hook, with_kwargs=True)
    drafter.register_forward_hook(hook, with_kwargs=True)
    drafter.hidden_norm.register_forward_hook(lambda m, a, o: ctx_out.append(o))

    result = {}
    with torch.no_grad():
        if d["kind"] == "loop":
            def embed_hook(m, a, o):
                pending["block_ids"] = a[0].reshape(-1).clone()

            def head_hook(m, a, o):
                if steps and "logits" not in steps[-1] and "block_ids" not in pending:
                    steps[-1]["logits"] = o[0].clone()

            target.model.embed_tokens.register_forward_hook(embed_hook)
            target.lm_head.register_forward_hook(head_hook)
            prompt = torch.randint(0, d["vocab"] - 1, (1, d["prompt"]), generator=gen)
            out_ids = model_py.dflash_generate(drafter, target, prompt, max_new_tokens=d["new_tokens"],
                                               stop_token_ids=None, temperature=0.0)
            # Greedy speculative output must be the target's own greedy continuation.
            plain = prompt.clone()
            for _ in range(out_ids.shape[1] - prompt.shape[1]):
                nxt = target(plain).logits[0, -1].argmax()
                plain = torch.cat([plain, nxt.view(1, 1)], dim=1)
            assert torch.equal(plain, out_ids), "dflash_generate's greedy output differs from plain greedy decoding"
            result["prompt"] = tensor(prompt[0])
            result["output_ids"] = tensor(out_ids[0])
            # The loop also feeds the target's embedding to its own forward: keep the block ids of the
            # drafter's calls only (recorded by the embed hook right before each call).
        else:
            from transformers import DynamicCache

            cache = DynamicCache()
            start = d["prompt"]
            context = torch.randn((1, start, k * e), generator=gen, dtype=torch.float64)
            for _ in range(d["steps"]):
                blk = torch.full((1, bs), d["mask_token"], dtype=torch.long)
                blk[0, 0] = int(torch.randint(0, d["vocab"], (1,), generator=gen))
                pending["block_ids"] = blk.reshape(-1).clone()
                positions = torch.arange(cache.get_seq_length(), start + bs).unsqueeze(0)
                hidden = drafter(target_hidden=context, noise_embedding=torch.nn.functional.embedding(blk, embed),
                                 position_ids=positions, past_key_values=cache, use_cache=True, is_causal=False)
                steps[-1]["logits"] = (hidden[:, 1 - bs:, :] @ head.T)[0].clone()
                cache.crop(start)
                accepted = int(torch.randint(0, bs, (1,), generator=gen))  # drafts accepted: acc + 1 rows commit
                context = torch.randn((1, accepted + 1, k * e), generator=gen, dtype=torch.float64)
                start += accepted + 1

    for s in steps:
        s["draft"] = s["logits"].argmax(dim=-1)
        for key in list(s):
            s[key] = tensor(s[key]) if isinstance(s[key], torch.Tensor) else s[key]

    params = {"embed_tokens.weight": tensor(embed), "lm_head.weight": tensor(head)}
    for name, p in drafter.named_parameters():
        params[name] = tensor(p)
    rounding = [{"target_layers": t, "draft_layers": n, "ids": model_py.build_target_layer_ids(t, n)}
                for t, n in [(36, 5), (24, 5), (28, 4), (7, 3), (11, 5), (30, 1), (30, 3), (61, 8), (9, 6)]]
    return {
        "block": "dflash.draft",
        "case": f"{d['kind']}_{index}",
        "seed": seed,
        "computed_by": f"z-lab/dflash {DFLASH_COMMIT[:8]} dflash/model.py run as-is in float64 with eager attention"
                       + (" through its own dflash_generate (temperature 0; hooks record every drafter call)"
                          if d["kind"] == "loop" else " with dflash_generate's call sequence and random context features"),
        "source": "https://github.com/z-lab/dflash/blob/" + DFLASH_COMMIT + "/dflash/model.py",
        "dtype": "float64",
        "dims": {**{key: v for key, v in d.items() if key not in ("target_layer_ids",)}, "target_layer_ids": ids},
        "layout": {
            "params": "the drafter's state_dict (z-lab's names), plus the target's embed_tokens.weight and lm_head.weight",
            "steps[s].context_features": "[n x K E]: the rows the call appends to the drafter's cache (the target's "
                                         "layer outputs at target_layer_ids, concatenated in that order)",
            "steps[s].cached_before": "context rows in the drafter's cache before the call",
            "steps[s].position_ids": "[n + bs]: the new context rows' positions, then the block's",
            "steps[s].block_ids": "[bs]: the last committed token, then mask ids",
            "steps[s].context": "hidden_norm(fc(context_features)) [n x E]",
            "steps[s].out": "the drafter's output norm(h) [bs x E]",
            "steps[s].logits": "the target's lm_head over out's rows 1..bs-1 [bs-1 x V]",
            "steps[s].draft": "argmax of each logits row (the draft tokens)",
            "target_layer_ids": "build_target_layer_ids(target_layers, draft_layers) for several sizes",
        },
        "params": params,
        "inputs": {},
        "outputs": {"steps": steps, "target_layer_ids": rounding, **result},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dflash", required=True, help="a checkout of z-lab/dflash at " + DFLASH_COMMIT[:8])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "blocks"))
    a = ap.parse_args()
    path = os.path.join(a.dflash, "dflash", "model.py")
    got = blob_id(path)
    if got != MODEL_BLOB:
        sys.exit(f"dflash/model.py has blob {got}; expected {MODEL_BLOB} (z-lab/dflash at {DFLASH_COMMIT[:8]})")
    sys.path.insert(0, a.dflash)
    torch.set_default_dtype(torch.float64)
    from dflash import model as model_py

    common = dict(rms_norm_eps=1e-6, mask_token=0)
    cases = [
        dict(kind="loop", E=32, heads=4, kv_heads=2, head_dim=8, intermediate=64, vocab=96, rope_theta=10000.0,
             draft_layers=1, target_layers=6, target_layer_ids=None, block_size=4, prompt=7, new_tokens=12),
        dict(kind="loop", E=32, heads=4, kv_heads=4, head_dim=16, intermediate=48, vocab=80, rope_theta=1000000.0,
             draft_layers=2, target_layers=8, target_layer_ids=[1, 3, 6], block_size=8, prompt=5, new_tokens=20),
        dict(kind="scripted", E=32, heads=4, kv_heads=1, head_dim=8, intermediate=64, vocab=64, rope_theta=10000.0,
             draft_layers=3, target_layers=8, target_layer_ids=None, block_size=16, prompt=6, steps=4),
        dict(kind="scripted", E=24, heads=2, kv_heads=1, head_dim=12, intermediate=40, vocab=50, rope_theta=1000000.0,
             draft_layers=2, target_layers=12, target_layer_ids=[2, 5, 8, 9], block_size=5, prompt=3, steps=6),
    ]
    os.makedirs(a.out, exist_ok=True)
    for i, d in enumerate(cases):
        d = {**common, **d}
        d["mask_token"] = d["vocab"] - 1  # the last row, as Qwen3's <|MASK|> follows its real ids
        c = case(model_py, i, 5500 + i, d)
        with open(os.path.join(a.out, f"dflash_{i}.json"), "w") as f:
            json.dump(c, f)
    print(f"wrote {len(cases)} DFlash cases to {a.out}")


if __name__ == "__main__":
    main()
