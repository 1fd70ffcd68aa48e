// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The shared main of the per-drafter examples: loads the model, runs one prompt greedily
/// (checking the output against vanilla greedy decoding) and once sampled, and reports what it
/// measured. Each example only says how to build its drafter.
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

/// `make` builds a fresh drafter per generation from the model and the weights file (--weights, else
/// `default_weights`; empty for drafters without weights). Arguments: --model PATH [--prompt TEXT |
/// --prompts FILE] [--max-new N] [--temperature T] [--weights PATH] (and what `make` reads itself,
/// e.g. tree_option's --tree). Each prompt (FILE: one per line,
/// engine::read_prompts) is generated greedily by vanilla decoding and with the drafter, token for
/// token compared; then the first prompt once sampled at T. Prints the totals over the prompts and
/// `RESULT drafter=<name> prompts=<n> tau=<x> target_forwards=<n> tok_s=<x> vanilla_tok_s=<x>
/// speedup=<x> projected=<x> identical=<yes|no>` (projected: the speed-up where a forward over a small
/// tree costs one forward, as on a memory-bound accelerator). Returns the process exit code (1 when a
/// greedy output differs from vanilla, or a file cannot be loaded).
inline int example_main(int argc, char** argv, const std::string& title, const std::string& default_weights,
                        const std::function<std::unique_ptr<drafter>(const llama_model&, const std::string&)>& make) {
  std::string model_path, prompts_file, weights = default_weights;
  std::vector<std::string> prompts;
  index_t max_new = 48;
  float temperature = 0.8f;
  std::string bad_value;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model_path = v;
    else if (a == "--prompt") prompts.push_back(v);
    else if (a == "--prompts") prompts_file = v;
    else if (a == "--max-new" && !parse_number(v, max_new, index_t{1}, index_t{1} << 20))
      bad_value = "--max-new " + v + ": expected an integer in [1, 2^20]";
    else if (a == "--temperature" && !parse_number(v, temperature, 0.0f, 100.0f))
      bad_value = "--temperature " + v + ": expected a number in [0, 100]";
    else if (a == "--weights") weights = v;
  }
  if (model_path.empty() || !bad_value.empty()) {
    if (!bad_value.empty()) std::cerr << argv[0] << ": " << bad_value << "\n";
    std::cerr << "usage: " << argv[0]
              << " --model PATH.gguf [--prompt TEXT | --prompts FILE] [--max-new N] [--temperature T] [--weights PATH]"
                 " [--tree K,DEPTH,NODES (EAGLE, Jakiro, MoA)]\n"
              << "(scripts/fetch_model.sh prints the path of SmolLM2-135M-Instruct, fetching it once)\n";
    return 2;
  }
  try {
    if (!prompts_file.empty()) prompts = read_prompts(prompts_file);
    if (prompts.empty())
      prompts.push_back("Summarize: The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs into the forest, where "
                        "the fox meets another fox.");
    const auto file = gguf_file::read(model_path);
    const bpe_tokenizer tokenizer(file);
    const auto model = llama_model::load(file);
    const auto chat = [&](const std::string& prompt) {
      return tokenizer.encode("<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n");
    };
    generation_options options;
    options.max_new_tokens = max_new;
    options.stop_tokens = {tokenizer.special("<|im_end|>"), tokenizer.eos()};
    std::printf("%s\n", title.c_str());
    if (!weights.empty()) std::printf("drafter weights: %s\n", weights.c_str());
    const std::string name = make(model, weights)->name();  // before the timed runs: a bad checkpoint fails at once
    const auto report = [](const char* mode, const generation_stats& s) {
      std::printf("%-8s tau %.2f (accepted %ld of %ld drafted), %ld target forwards, %ld draft forwards, %.1f tok/s\n", mode, s.tau(),
                  static_cast<long>(s.accepted), static_cast<long>(s.drafted), static_cast<long>(s.target_calls),
                  static_cast<long>(s.draft_calls), s.tokens_per_second());
    };
    generation_stats vanilla_total, greedy_total;
    bool identical = true;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const auto ids = chat(prompts[p]);
      const auto vanilla = generate(model, ids, nullptr, options);
      auto d = make(model, weights);
      const auto greedy = generate(model, ids, d.get(), options);
      const bool same = greedy.tokens == vanilla.tokens;
      identical = identical && same;
      vanilla_total += vanilla.stats;
      greedy_total += greedy.stats;
      if (prompts.size() == 1) {
        report("vanilla", vanilla.stats);
        report("greedy", greedy.stats);
        std::printf("greedy output identical to vanilla greedy: %s\n%s\n", same ? "yes" : "NO", tokenizer.decode(greedy.tokens).c_str());
      } else {
        std::printf("prompt %zu: tau %.2f, %.1f tok/s (vanilla %.1f), identical %s\n", p, greedy.stats.tau(),
                    greedy.stats.tokens_per_second(), vanilla.stats.tokens_per_second(), same ? "yes" : "NO");
      }
    }
    if (prompts.size() > 1) {
      report("vanilla", vanilla_total);
      report("greedy", greedy_total);
    }
    const double vanilla_tok_s = vanilla_total.tokens_per_second(), tok_s = greedy_total.tokens_per_second();
    std::printf("RESULT drafter=%s prompts=%zu tau=%.3f target_forwards=%ld tok_s=%.2f vanilla_tok_s=%.2f speedup=%.3f projected=%.3f "
                "identical=%s\n",
                name.c_str(), prompts.size(), greedy_total.tau(), static_cast<long>(greedy_total.target_calls), tok_s, vanilla_tok_s,
                vanilla_tok_s > 0 ? tok_s / vanilla_tok_s : 0.0, greedy_total.projected_speedup(), identical ? "yes" : "no");
    options.temperature = temperature;
    options.seed = 7;
    auto sampled_drafter = make(model, weights);
    const auto sampled = generate(model, chat(prompts.front()), sampled_drafter.get(), options);
    report("sampled", sampled.stats);
    std::printf("(T = %.2f) %s\n", static_cast<double>(temperature), tokenizer.decode(sampled.tokens).c_str());
    return identical ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
}

/// For drafters without weights.
inline int example_main(int argc, char** argv, const std::string& title,
                        const std::function<std::unique_ptr<drafter>(const llama_model&)>& make) {
  return example_main(argc, argv, title, "", [&](const llama_model& model, const std::string&) { return make(model); });
}

}  // namespace engine
