// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The shared main of the per-drafter examples: loads the model, runs one prompt greedily
/// (checking the output against vanilla greedy decoding) and once sampled, and reports what it
/// measured. Each example only says how to build its drafter.
#pragma once

#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "decoding.hpp"
#include "gguf.hpp"
#include "llama.hpp"
#include "tokenizer.hpp"

namespace engine {

/// `make` builds a fresh drafter per generation. Arguments: --model PATH [--prompt TEXT] [--max-new N]
/// [--temperature T]. Returns the process exit code (1 when greedy output differs from vanilla).
inline int example_main(int argc, char** argv, const std::string& title,
                        const std::function<std::unique_ptr<drafter>(const llama_model&)>& make) {
  std::string model_path, prompt = "Summarize: The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs "
                                   "into the forest, where the fox meets another fox.";
  index_t max_new = 48;
  float temperature = 0.8f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model_path = v;
    else if (a == "--prompt") prompt = v;
    else if (a == "--max-new") max_new = std::stol(v);
    else if (a == "--temperature") temperature = std::stof(v);
  }
  if (model_path.empty()) {
    std::cerr << "usage: " << argv[0] << " --model PATH.gguf [--prompt TEXT] [--max-new N] [--temperature T]\n"
              << "(scripts/fetch_model.sh prints the path of SmolLM2-135M-Instruct, fetching it once)\n";
    return 2;
  }
  try {
    const auto file = gguf_file::read(model_path);
    const bpe_tokenizer tokenizer(file);
    const auto model = llama_model::load(file);
    const auto ids = tokenizer.encode("<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n");
    generation_options options;
    options.max_new_tokens = max_new;
    options.stop_tokens = {tokenizer.special("<|im_end|>"), tokenizer.eos()};
    std::printf("%s\n", title.c_str());
    const auto vanilla = generate(model, ids, nullptr, options);
    auto d = make(model);
    const auto greedy = generate(model, ids, d.get(), options);
    const bool identical = greedy.tokens == vanilla.tokens;
    const auto report = [](const char* mode, const generation& g) {
      const auto& s = g.stats;
      std::printf("%-8s tau %.2f (accepted %ld of %ld drafted), %ld target forwards, %ld draft forwards, %.1f tok/s\n", mode,
                  s.tau(), static_cast<long>(s.accepted), static_cast<long>(s.drafted), static_cast<long>(s.target_calls),
                  static_cast<long>(s.draft_calls), s.tokens_per_second());
    };
    report("vanilla", vanilla);
    report("greedy", greedy);
    std::printf("greedy output identical to vanilla greedy: %s\n%s\n", identical ? "yes" : "NO", tokenizer.decode(greedy.tokens).c_str());
    options.temperature = temperature;
    options.seed = 7;
    auto sampled_drafter = make(model);
    const auto sampled = generate(model, ids, sampled_drafter.get(), options);
    report("sampled", sampled);
    std::printf("(T = %.2f) %s\n", static_cast<double>(temperature), tokenizer.decode(sampled.tokens).c_str());
    return identical ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace engine
