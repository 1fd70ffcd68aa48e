// SPDX-License-Identifier: Apache-2.0
// Multi-token prediction (engine/mtp_drafter.hpp): a trained DeepSeek-V3-style MTP module
// (specdec::blocks::mtp) on the target's final hidden states drafts a chain, one module reused for
// every step and fed its own output, through specdec::chain_drafter; the loop verifies the chain in
// one forward.
//
// Weights: examples/weights/mtp_smollm2_135m.safetensors by default (or --weights FILE), trained for
// SmolLM2-135M-Instruct by tools/train/mtp.py. `--draft N`: tokens per chain (default 3).
#include <string>

#include "engine/example_main.hpp"
#include "engine/mtp_drafter.hpp"

int main(int argc, char** argv) {
  engine::index_t length = 3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--draft") length = std::stol(argv[i + 1]);
  return engine::example_main(argc, argv, "Multi-token prediction: a trained MTP module drafting chains (tools/train/mtp.py)",
                              engine::default_weights("mtp_smollm2_135m.safetensors"),
                              [&](const engine::llama_model& model, const std::string& weights) {
                                return std::make_unique<engine::mtp_drafter>(model, length, weights);
                              });
}
