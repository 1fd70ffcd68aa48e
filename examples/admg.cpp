// SPDX-License-Identifier: Apache-2.0
// ADMG self-speculative decoding (training-free): the prompt's prefill measures how much each
// attention sub-layer changes the residual stream, Algorithm 1 removes the sub-layers that barely do,
// and the resulting shallower model drafts a chain that Draft & Verify's exit rule stops.
#include "engine/example_main.hpp"

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "ADMG self-speculative decoding", [](const engine::llama_model& model) {
    specdec::policy::admg::rules rules;
    rules.alpha = 0.995;
    rules.m = 4;
    specdec::policy::admg::draft_exit::parameters exit;
    exit.max_draft = 4;
    return std::make_unique<engine::admg_drafter>(model, rules, exit);
  });
}
