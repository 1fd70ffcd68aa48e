// SPDX-License-Identifier: Apache-2.0
// EAGLE-2 dynamic draft trees from a trained EAGLE draft layer (engine/eagle_drafter.hpp): the layer
// reads the target's final hidden states and its own KV cache, a reduced-vocabulary draft head with
// EAGLE-3's d2t table gives the draft logits, specdec::eagle2_tree_builder grows the tree, and the loop
// verifies it in one forward.
//
// Weights: examples/weights/eagle_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/eagle.py.
#include "engine/eagle_drafter.hpp"
#include "engine/example_main.hpp"

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "EAGLE-2 trees from a trained EAGLE draft layer (tools/train/eagle.py)",
                              engine::default_weights("eagle_smollm2_135m.safetensors"),
                              [&](const engine::llama_model& model, const std::string& weights) {
                                return std::make_unique<engine::eagle_drafter>(
                                    model, engine::tree_option(argc, argv, specdec::dynamic_tree_config{3, 4, 10, specdec::tree_score::log_probability, {}}), weights);
                              });
}
