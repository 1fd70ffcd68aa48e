#!/usr/bin/env python3
"""Block goldens for EAGLE-3's draft layer and DeepSeek-V3-style multi-token prediction (MTP).

Writes tests/data/blocks/eagle3_layer_*.json and mtp_module_*.json in the schema of
../shared/goldens/blocks/README.md (float64 values; params by checkpoint name; inputs, outputs).

EAGLE-3 (`--eagle`, a clone of SafeAILab/EAGLE at cb7e0841; the script checks the git blob ids of the
files it imports): the reference `eagle.model.cnets.Model` is built from a tiny config, run as-is in
float64 through its own `topK_genrate` (prefill over the context, then `depth` tree expansions of
`top_k` rows each), and every call of its `forward` is recorded with hooks: the fc fusion of the three
target taps, the decoder layer's output h2 (pre-norm, fed back), the attention mask the reference
built (causal prefix + tree mask), positions, and the logits `lm_head(norm(h2))`. Each tree step's
fed-back rows are recorded as indices into the previous call's output rows, so a reimplementation
chains its own states.

MTP: no reference runs on a CPU without a GPU build of vLLM, so `DeepSeekMultiTokenPredictorLayer.forward`
of vLLM's `model_executor/models/deepseek_mtp.py` (4f7c1440) is transcribed below line for line
(enorm / hnorm / eh_proj, embedding first; `inputs_embeds[positions == 0] = 0`; `residual + hidden`;
SharedHead = norm then head), with transformers' `LlamaDecoderLayer` (run as-is) as the `mtp_block`:
the dense GQA layer specdec's blocks provide (DeepSeek-V3's own is MLA + MoE). Cases chain one module
for k steps (a model shipping one MTP layer) and two modules by `step mod 2`, each module with its own
KV cache, with vLLM's position-0 zeroing and without it (SGLang).

Needs torch and transformers (CPU): pip install torch==2.15.0 transformers==4.57.6. Usage:
  tools/goldens/eagle3_mtp.py --eagle DIR [--out tests/data/blocks]
"""
import argparse
import hashlib
import json
import os
import sys

import torch

EAGLE_COMMIT = "cb7e0841"
# git blob ids of the EAGLE files the reference imports (eagle/model/...).
EAGLE_BLOBS = {
    "cnets.py": "a8e13ca1688d72ef6e6c94386be2b435d3ecf740",
    "configs.py": "b355c2e7cbce1ad9e2ee146e3e3c349f52704e37",
    "utils_c.py": "c837aa639ee45fbc068ee93fcd8ba5ff729ac03f",
    "choices.py": "3dcef5853f539947d69330f10eee2f9c6a003174",
}
VLLM_MTP = "vllm-project/vllm vllm/model_executor/models/deepseek_mtp.py @ 4f7c1440"


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


# ----------------------------------------------------------------------------------------------- EAGLE-3

def eagle3_case(cnets, index, seed, dims):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    from transformers import LlamaConfig

    e, et = dims["E"], dims["E_t"]
    config = LlamaConfig(vocab_size=dims["vocab"], hidden_size=e, intermediate_size=dims["intermediate"],
                         num_attention_heads=dims["num_attention_heads"], num_key_value_heads=dims["num_key_value_heads"],
                         rms_norm_eps=dims["rms_norm_eps"], rope_theta=dims["rope_theta"], max_position_embeddings=64,
                         pretraining_tp=1, hidden_act="silu", pad_token_id=None)
    config.rope_scaling = None
    config.draft_vocab_size = dims["draft_vocab"]
    if et != e:
        config.target_hidden_size = et
    model = cnets.Model(config, load_emb=False, total_tokens=dims["total_tokens"], depth=dims["depth"], top_k=dims["top_k"])
    model = model.double().eval()
    randomise(model, gen)
    # d2t from a sorted random subset of target ids, as EAGLE-3's training builds it (d2t[i] = u[i] - i).
    used = torch.sort(torch.randperm(dims["vocab"], generator=gen)[: dims["draft_vocab"]]).values
    model.d2t.copy_(used - torch.arange(dims["draft_vocab"]))
    model.t2d.zero_()
    model.t2d[used] = True
    model.init_tree()

    t = dims["T"]
    input_ids = torch.randint(0, dims["vocab"], (1, t + 1), generator=gen)
    taps = torch.randn((1, t, 3 * et), generator=gen, dtype=torch.float64)

    calls, fc_out, masks, heads = [], [], [], []

    def model_hook(mod, args, kwargs, out):
        hidden = args[0] if args else kwargs["hidden_states"]
        calls.append({"hidden_in": hidden[0].clone(), "input_ids": kwargs["input_ids"][0].clone(),
                      "position_ids": None if kwargs.get("position_ids") is None else kwargs["position_ids"].reshape(-1).clone(),
                      "past": 0 if kwargs.get("past_key_values") is None else kwargs["past_key_values"][0][0].shape[2],
                      "out": out[0][0].clone()})

    def mid_hook(mod, args, kwargs, out):
        masks.append(kwargs["attention_mask"][0, 0].clone())

    model.register_forward_hook(model_hook, with_kwargs=True)
    model.midlayer.register_forward_hook(mid_hook, with_kwargs=True)
    model.fc.register_forward_hook(lambda m, a, o: fc_out.append(o[0].clone()))
    model.lm_head.register_forward_hook(lambda m, a, o: heads.append(o.reshape(-1, o.shape[-1]).clone()))
    with torch.no_grad():
        draft_tokens, retrieve_indices, tree_mask, tree_positions = model.topK_genrate(taps, input_ids, None, None)

    assert len(fc_out) == 1 and len(calls) == dims["depth"] + 1 == len(masks) == len(heads)
    steps = []
    for i, c in enumerate(calls):
        rows = c["input_ids"].shape[0]
        keys = c["past"] + rows
        positions = c["position_ids"] if c["position_ids"] is not None else torch.arange(c["past"], keys)
        allowed = (masks[i] == 0).to(torch.int64)
        assert allowed.shape == (rows, keys)
        step = {"input_ids": tensor(c["input_ids"]), "position_ids": tensor(positions), "allowed": tensor(allowed),
                "h2": tensor(c["out"]), "logits": tensor(heads[i])}
        # Mapped argmax of each logits row (the draft id through d2t): integer outputs to match exactly.
        arg = torch.argmax(heads[i], dim=-1)
        step["argmax_target_ids"] = tensor(arg + model.d2t[arg])
        if i == 0:
            step["fused"] = tensor(fc_out[0])
        else:
            prev = calls[i - 1]["out"]
            src = []
            for r in range(rows):
                match = [j for j in range(prev.shape[0]) if torch.equal(prev[j], c["hidden_in"][r])]
                assert match, "a fed-back row is not a row of the previous call's output"
                src.append(match[0])
            step["hidden_from_rows"] = tensor(torch.tensor(src))
        steps.append(step)

    params = {name: tensor(p) for name, p in model.state_dict().items()
              if not name.endswith("inv_freq") and "cached" not in name and name != "t2d"}
    return {
        "block": "eagle3.draft_layer",
        "case": f"public_{index}",
        "seed": seed,
        "computed_by": "reference module eagle/model/cnets.py::Model run as-is in float64 through topK_genrate "
                       "(hooks record every forward); RoPE angles in float32 as the reference computes them",
        "source": {"repo": "SafeAILab/EAGLE", "commit": EAGLE_COMMIT, "files": EAGLE_BLOBS},
        "dtype": "float64",
        "dims": dims,
        "layout": {
            "taps": "[T x 3 E_t]: the target's states entering layers (low, mid, high), concatenated",
            "input_ids": "[T + 1] target ids; the reference drops the first (row p pairs tap p with token p + 1)",
            "steps[0]": "the prefill over T rows: fused = fc(taps) [T x E], h2 [T x E], logits of the last row [1 x V_d]",
            "steps[i > 0]": "a tree expansion of top_k rows: input_ids (target ids), hidden = rows hidden_from_rows of "
                            "the previous step's h2, position_ids, allowed [rows x (cached + rows)] 1 = attend "
                            "(keys: every earlier call's rows, then these), h2 [rows x E], logits [rows x V_d]",
            "argmax_target_ids": "argmax of each logits row mapped by d2t (draft id + d2t[draft id])",
            "d2t": "int64 [V_d]; target id = draft id + d2t[draft id]",
        },
        "params": params,
        "inputs": {"taps": tensor(taps[0]), "input_ids": tensor(input_ids[0])},
        "outputs": {"steps": steps, "draft_tokens": tensor(draft_tokens[0]), "retrieve_indices": tensor(retrieve_indices)},
    }


# ---------------------------------------------------------------------------------------------------- MTP

class SharedHead(torch.nn.Module):
    def __init__(self, config, rms_norm):
        super().__init__()
        self.norm = rms_norm(config.hidden_size, eps=config.rms_norm_eps)
        self.head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, hidden_states):
        return self.norm(hidden_states)


class MultiTokenPredictorLayer(torch.nn.Module):
    """vLLM's DeepSeekMultiTokenPredictorLayer (deepseek_mtp.py @ 4f7c1440), mtp_block = transformers'
    LlamaDecoderLayer (which returns residual + block output itself)."""

    def __init__(self, config, layer_idx, zero_position_0):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm
        self.enorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.eh_proj = torch.nn.Linear(config.hidden_size * 2, config.hidden_size, bias=False)
        self.shared_head = SharedHead(config, LlamaRMSNorm)
        self.mtp_block = LlamaDecoderLayer(config, layer_idx)
        self.zero_position_0 = zero_position_0

    def forward(self, inputs_embeds, positions, previous_hidden_states, position_embeddings, cache, cache_position):
        inputs_embeds = inputs_embeds.clone()
        if self.zero_position_0:
            inputs_embeds[positions == 0] = 0
        inputs_embeds = self.enorm(inputs_embeds)
        previous_hidden_states = self.hnorm(previous_hidden_states)
        hidden_states = self.eh_proj(torch.cat([inputs_embeds, previous_hidden_states], dim=-1))
        x = hidden_states
        rows = x.shape[0]
        past = cache.get_seq_length(self.mtp_block.self_attn.layer_idx)
        mask = torch.full((rows, past + rows), torch.finfo(x.dtype).min, dtype=x.dtype)
        for i in range(rows):
            mask[i, : past + i + 1] = 0
        out = self.mtp_block(x[None], attention_mask=mask[None, None], position_ids=positions[None],
                             past_key_values=cache, use_cache=True, cache_position=cache_position,
                             position_embeddings=position_embeddings)
        out = out[0] if isinstance(out, tuple) else out
        return hidden_states, out[0]


def mtp_case(index, seed, dims):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    from transformers import LlamaConfig
    from transformers.cache_utils import DynamicCache
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    e, v, n_modules = dims["E"], dims["vocab"], dims["modules"]
    config = LlamaConfig(vocab_size=v, hidden_size=e, intermediate_size=dims["intermediate"],
                         num_attention_heads=dims["num_attention_heads"], num_key_value_heads=dims["num_key_value_heads"],
                         head_dim=dims["head_dim"], rms_norm_eps=dims["rms_norm_eps"], rope_theta=dims["rope_theta"],
                         max_position_embeddings=64, attention_bias=False, mlp_bias=False, num_hidden_layers=n_modules)
    config._attn_implementation = "eager"
    embed = torch.nn.Embedding(v, e).double()
    layers = [MultiTokenPredictorLayer(config, i, dims["zero_embedding_at_position_0"]).double().eval() for i in range(n_modules)]
    randomise(embed, gen)
    for layer in layers:
        randomise(layer, gen)
    rotary = LlamaRotaryEmbedding(config).double()

    t, k = dims["T"], dims["steps"]
    start = dims["start_position"]
    tokens = torch.randint(0, v, (t,), generator=gen)
    hidden = torch.randn((t, e), generator=gen, dtype=torch.float64)  # the target's post-norm last hidden states
    step_tokens = torch.randint(0, v, (k,), generator=gen)  # the token each chained step embeds
    cache = DynamicCache()
    steps = []
    with torch.no_grad():
        positions = torch.arange(start, start + t)
        prev_hidden, ids = hidden, tokens
        for s in range(k + 1):
            m = s % n_modules
            layer = layers[m]
            past = cache.get_seq_length(m)
            cache_position = torch.arange(past, past + ids.shape[0])
            cos_sin = rotary(prev_hidden[None], positions[None])
            x, o = layer(embed(ids), positions, prev_hidden, cos_sin, cache, cache_position)
            logits = layer.shared_head.head(layer.shared_head(o))
            steps.append({"module": m, "input_ids": tensor(ids), "position_ids": tensor(positions),
                          "hidden_in": tensor(prev_hidden), "x": tensor(x), "o": tensor(o), "logits": tensor(logits),
                          "argmax": tensor(torch.argmax(logits, dim=-1))})
            # The next step: one row, the next token, position + 1, h = this step's last o (pre-norm).
            if s < k:
                prev_hidden = o[-1:].clone()
                ids = step_tokens[s: s + 1]
                positions = positions[-1:] + 1

    params = {"embed_tokens.weight": tensor(embed.weight)}
    for m, layer in enumerate(layers):
        for name, p in layer.state_dict().items():
            if "rotary" not in name:
                params[f"layers.{m}.{name}"] = tensor(p)
    return {
        "block": "mtp.module",
        "case": f"public_{index}",
        "seed": seed,
        "computed_by": "vLLM DeepSeekMultiTokenPredictorLayer.forward transcribed (tools/goldens/eagle3_mtp.py), "
                       "mtp_block = transformers LlamaDecoderLayer run as-is (eager attention), float64",
        "source": {"vllm": VLLM_MTP, "transformers": __import__("transformers").__version__},
        "dtype": "float64",
        "dims": dims,
        "layout": {
            "steps[0]": "T rows: input_ids (the tokens after each target position), hidden_in = the target's "
                        "last hidden states after its final norm [T x E], position_ids",
            "steps[s > 0]": "one row: the next token, position + 1, hidden_in = the previous step's last o row",
            "module": "step s runs module s mod modules (params layers.{m}.*), each with its own KV cache",
            "x": "eh_proj([enorm(embed) ; hnorm(hidden_in)]) [rows x E]",
            "o": "the decoder layer's output (pre-norm) [rows x E]",
            "logits": "shared_head.head(shared_head.norm(o)) [rows x V]",
        },
        "params": params,
        "inputs": {},
        "outputs": {"steps": steps},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eagle", required=True, help="a clone of SafeAILab/EAGLE at " + EAGLE_COMMIT)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "blocks"))
    a = ap.parse_args()
    for name, want in EAGLE_BLOBS.items():
        got = blob_id(os.path.join(a.eagle, "eagle", "model", name))
        if got != want:
            sys.exit(f"eagle/model/{name} has blob {got}; expected {want} (SafeAILab/EAGLE at {EAGLE_COMMIT})")
    sys.path.insert(0, a.eagle)
    torch.set_default_dtype(torch.float64)
    from eagle.model import cnets

    eagle3 = [
        dict(E=32, E_t=48, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate=64, vocab=256,
             draft_vocab=64, rms_norm_eps=1e-5, rope_theta=10000.0, T=6, top_k=3, depth=3, total_tokens=9),
        dict(E=32, E_t=32, num_attention_heads=4, num_key_value_heads=4, head_dim=8, intermediate=48, vocab=200,
             draft_vocab=80, rms_norm_eps=1e-6, rope_theta=500000.0, T=5, top_k=2, depth=4, total_tokens=8),
        dict(E=48, E_t=24, num_attention_heads=6, num_key_value_heads=2, head_dim=8, intermediate=96, vocab=160,
             draft_vocab=40, rms_norm_eps=1e-5, rope_theta=10000.0, T=3, top_k=4, depth=2, total_tokens=10),
        dict(E=16, E_t=40, num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate=40, vocab=128,
             draft_vocab=128, rms_norm_eps=1e-5, rope_theta=10000.0, T=8, top_k=2, depth=3, total_tokens=6),
    ]
    mtp = [
        dict(E=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate=64, vocab=200,
             rms_norm_eps=1e-6, rope_theta=10000.0, T=5, steps=3, modules=1, start_position=0, zero_embedding_at_position_0=True),
        dict(E=32, num_attention_heads=4, num_key_value_heads=4, head_dim=8, intermediate=48, vocab=160,
             rms_norm_eps=1e-6, rope_theta=10000.0, T=4, steps=3, modules=1, start_position=0, zero_embedding_at_position_0=False),
        dict(E=24, num_attention_heads=2, num_key_value_heads=1, head_dim=12, intermediate=56, vocab=128,
             rms_norm_eps=1e-5, rope_theta=50000.0, T=6, steps=4, modules=2, start_position=0, zero_embedding_at_position_0=True),
        dict(E=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate=64, vocab=96,
             rms_norm_eps=1e-6, rope_theta=10000.0, T=3, steps=2, modules=1, start_position=7, zero_embedding_at_position_0=True),
    ]
    os.makedirs(a.out, exist_ok=True)
    for i, d in enumerate(eagle3):
        case = eagle3_case(cnets, i, 3300 + i, d)
        with open(os.path.join(a.out, f"eagle3_layer_{i}.json"), "w") as f:
            json.dump(case, f)
    for i, d in enumerate(mtp):
        case = mtp_case(i, 4400 + i, d)
        with open(os.path.join(a.out, f"mtp_module_{i}.json"), "w") as f:
            json.dump(case, f)
    print(f"wrote {len(eagle3)} EAGLE-3 and {len(mtp)} MTP cases to {a.out}")


if __name__ == "__main__":
    main()
