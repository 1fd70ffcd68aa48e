// SPDX-License-Identifier: Apache-2.0
// Prompt lookup (n-gram) drafting, verified as a chain (--tree 0) or as a tree of up to three
// continuations (--tree 1): no draft model at all, so every accepted token is free.
#include <cstring>

#include "engine/example_main.hpp"

int main(int argc, char** argv) {
  bool tree = false;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--tree") == 0) tree = std::strcmp(argv[i + 1], "0") != 0;
  return engine::example_main(argc, argv, tree ? "prompt lookup, tree of 3 continuations" : "prompt lookup, chain",
                              [tree](const engine::llama_model&) {
                                return std::make_unique<engine::prompt_lookup_drafter>(
                                    engine::prompt_lookup_drafter::parameters{3, 2, 8, tree ? 3 : 1, true});
                              });
}
