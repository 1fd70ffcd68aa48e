// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The shared main of the per-drafter examples: loads the model, runs one prompt greedily
/// (checking the output against vanilla greedy decoding) and once sampled, and reports what it
/// measured. Each example only says how to build its drafting method.
#pragma once

#include <charconv>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <specdec/tree/eagle2.hpp>

#include "decoding.hpp"
#include "gguf.hpp"
#include "llama.hpp"
#include "prompts.hpp"
#include "tokenizer.hpp"

namespace engine {

/// The dynamic-tree examples' (EAGLE, Jakiro, MoA) `--tree K,DEPTH,NODES`: the EAGLE-2 tree's top-k
/// per expansion, expansions, and nodes kept (root included); `fallback` when absent. Scores are
/// log-probabilities. \throws specdec::invalid_argument on a value that is not three integers (the
/// builder checks their ranges when the drafter is built).
inline specdec::dynamic_tree_config tree_option(int argc, char** argv, specdec::dynamic_tree_config fallback) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) != "--tree") continue;
    const std::string v = argv[i + 1];
    long k = 0, depth = 0, nodes = 0;
    char tail = 0;
    SPECDEC_EXPECTS(std::sscanf(v.c_str(), "%ld,%ld,%ld%c", &k, &depth, &nodes, &tail) == 3, "--tree", "\"", v,
                    "\"; expected K,DEPTH,NODES (three integers, e.g. 3,4,10)");
    fallback.top_k = k;
    fallback.depth = depth;
    fallback.total_tokens = nodes;
  }
  return fallback;
}

/// `text` as a number in [lowest, highest], the whole of it (no trailing characters); false otherwise.
template <class T>
bool parse_number(const std::string& text, T& out, T lowest, T highest) {
  T value{};
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(text.data(), last, value);
  if (text.empty() || error != std::errc() || end != last || !(value >= lowest && value <= highest)) return false;
  out = value;
  return true;
}

/// `make` builds a fresh drafting method per generation from the model and the weights file (--weights, else
/// `default_weights`; empty for drafters without weights). Arguments: --model PATH [--prompt TEXT |
/// --prompts FILE] [--max-new N] [--temperature T] [--weights PATH] (and what `make` reads itself,
/// e.g. tree_option's --tree). Each prompt (FILE: one per line,
/// engine::read_prompts) is generated greedily by vanilla decoding and with the drafter, token for
/// token compared; then the first prompt once sampled at T. Prints the totals over the prompts and
/// `RESULT drafter=<name> prompts=<n> tau=<x> target_forwards=<n> tok_s=<x> vanilla_tok_s=<x>
/// speedup=<x> projected=<x> identical=<yes|no>` (projected: the speed-up where a forward over a small
/// tree costs one forward, as on a memory-bound accelerator). Returns the process exit code (1 when a
/// greedy output differs from vanilla, or a file cannot be loaded).
int example_main(int argc, char** argv, const std::string& title, const std::string& default_weights,
                 const std::function<std::unique_ptr<method>(const llama_model&, const std::string&)>& make);

/// For drafters without weights.
int example_main(int argc, char** argv, const std::string& title,
                 const std::function<std::unique_ptr<method>(const llama_model&)>& make);

}  // namespace engine
