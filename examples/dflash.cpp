// SPDX-License-Identifier: Apache-2.0
// Block drafting from a trained DFlash drafter (engine/dflash_drafter.hpp): the target's layer outputs
// at the checkpoint's target_layer_ids, condensed by fc + hidden_norm, enter the drafter's keys and
// values; one forward over [root, mask, ...] drafts every position of the block at once, and
// specdec::block_drafter drafts the chain of per-position argmaxes, sized per step by its policy.
//
// Weights: examples/weights/dflash_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/dflash.py.
#include "engine/dflash_drafter.hpp"
#include "engine/example_main.hpp"

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "Block drafting from a trained DFlash drafter (tools/train/dflash.py)",
                              engine::default_weights("dflash_smollm2_135m.safetensors"),
                              [&](const engine::llama_model& model, const std::string& weights) {
                                return std::make_unique<engine::dflash_drafter>(model, weights, /*adaptive=*/false);
                              });
}
