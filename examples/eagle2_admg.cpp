// SPDX-License-Identifier: Apache-2.0
// EAGLE-2 dynamic draft trees, drafted by the ADMG self-draft: specdec's tree builder only needs
// draft logits per frontier node, wherever they come from.
#include "engine/example_main.hpp"

int main(int argc, char** argv) {
  return engine::example_main(argc, argv, "EAGLE-2 trees drafted by the ADMG self-draft", [](const engine::llama_model& model) {
    specdec::policy::admg::rules rules;
    rules.alpha = 0.995;
    rules.m = 4;
    return std::make_unique<engine::eagle2_admg_drafter>(
        model, rules, specdec::dynamic_tree_config{2, 3, 6, specdec::tree_score::log_probability, {}});
  });
}
