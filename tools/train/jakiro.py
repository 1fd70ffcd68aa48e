"""Jakiro's MoE draft layer for the target, in the layout examples/jakiro.cpp loads.

    python jakiro.py --model M.gguf --data DIR --out FILE.safetensors [--epochs 6]

The EAGLE layer of eagle.py with its MLP replaced by Jakiro's two-expert MoE (specdec::blocks::moe,
routing jakiro_two_experts; experts of intermediate E, each started from a slice of the target's last
MLP) and the target's own LM head, frozen (the C++ example reads the target's head; training scores
the draft vocabulary's rows of it, inference all of them). The contrastive right output, which the C++
tree builder uses at the penultimate expansion (expand_dual), learns the same soft labels at half
weight. Training otherwise as eagle.py (training-time test, soft labels, feature noise).

Writes fp16 safetensors: `fc.{weight,bias}`, `layers.0.self_attn.{q,k,v,o}_proj.weight`,
`layers.0.post_attention_layernorm.weight`, `layers.0.mlp_moe.gate.weight` [4 x E],
`layers.0.mlp_moe.experts.{0,1}.{gate,up,down}_proj.weight` (haiduo/Jakiro's names).
"""
from eagle import main

if __name__ == "__main__":
    main(jakiro=True)
