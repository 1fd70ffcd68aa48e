// SPDX-License-Identifier: Apache-2.0
// EAGLE-2 dynamic draft trees from a trained EAGLE-3 drafter (engine/eagle3_drafter.hpp): the drafter
// fuses the target's states entering three of its layers (specdec::blocks::eagle3::tap_layers), runs
// EAGLE-3's layer over [embedding ; state] with its own KV cache and feeds its own output back to the
// rows that continue it; a reduced-vocabulary head (d2t) gives the draft logits, and
// specdec::eagle2_drafter asks for the rows and builds the tree.
//
// Weights: examples/weights/eagle3_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/eagle3.py.
#include "engine/eagle3_drafter.hpp"
#include "engine/example_main.hpp"

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "EAGLE-2 trees from a trained EAGLE-3 drafter (tools/train/eagle3.py)",
                              engine::default_weights("eagle3_smollm2_135m.safetensors"),
                              [&](const engine::llama_model& model, const std::string& weights) {
                                return std::make_unique<engine::eagle3_drafter>(
                                    model, engine::tree_option(argc, argv, specdec::dynamic_tree_config{3, 4, 10, specdec::tree_score::log_probability, {}}), weights);
                              });
}
