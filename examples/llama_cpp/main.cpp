// SPDX-License-Identifier: Apache-2.0
// specdec inside llama.cpp: prompt-lookup drafting (specdec's n-gram proposer, as a chain or a tree of
// several continuations) under specdec's draft-length policy, each draft verified in one llama_decode
// (llama_adapter.hpp), greedily or by lossless speculative sampling. Every method runs on the same
// prompt; the greedy ones are checked token for token against plain decoding, which is llama.cpp
// decoding one token per call and taking the argmax, as its own greedy decoding does.
//
//   specdec_llama_cpp --model M.gguf [--prompt TEXT] [--tokens 64] [--threads 1] [--temperature 0]
//                     [--methods plain,chain,tree] [--seed 1] [--label NAME]
// `tree` drafts three continuations per step, merged into one tree.
// One line per method: `RESULT engine=llama.cpp model=<label> prompt=0 method=<name> tok_s=<x>
// speedup=<x vs plain> tau=<x> forwards=<n> identical=<yes|no|n/a>`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/ngram.hpp>

#include "llama_adapter.hpp"

namespace {

struct run_result {
  std::vector<std::int32_t> tokens;
  double seconds = 0.0;
  specdec::index_t forwards = 0;
};

/// Generates up to `new_tokens` tokens after the prompt. `branches` 0: plain decoding (root-only
/// trees); 1: prompt-lookup chains; > 1: trees of that many continuations.
run_result generate(const std::string& model, const std::vector<std::int32_t>& prompt, int threads, int new_tokens,
                    specdec::index_t branches, float temperature, std::uint64_t seed) {
  llama_example::llama_engine engine(model, threads, static_cast<int>(prompt.size()) + new_tokens + 64, 8);
  specdec::eigen backend;
  specdec::policy::draft_length_policy policy(/*longest=*/8);
  std::vector<std::int32_t> history = prompt;
  if (prompt.size() > 1) engine.prefill(std::span<const std::int32_t>(prompt).first(prompt.size() - 1));
  run_result out;
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t step = 0; static_cast<int>(out.tokens.size()) < new_tokens; ++step) {
    const specdec::index_t length = branches == 0 ? 0 : policy.choose();
    const specdec::draft_tree tree = llama_example::llama_engine::dfs_order(
        specdec::propose_ngram(history, length, {.branches = std::max<specdec::index_t>(branches, 1)}));
    const auto t0 = std::chrono::steady_clock::now();
    const specdec::matrix_view<const float> logits = engine.decode_tree(tree);
    policy.target_forward_timed(tree.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++out.forwards;
    specdec::sampling::speculative_request request{.tree = tree};
    specdec::sampling::speculative_result result;
    if (temperature == 0.0f) {
      result = specdec::sampling::verify_greedy(backend, logits, request);
    } else {
      request.uniforms = specdec::sampling::uniform_stream::philox(specdec::philox_stream{seed, step});
      request.temperature = temperature;
      result = specdec::sampling::verify_speculative_logits(backend, {logits}, request);
    }
    policy.verified(static_cast<specdec::index_t>(result.accepted_nodes.size()), tree.max_depth());
    engine.keep(result.kept_nodes());
    bool end = false;
    for (const std::int32_t token : result.tokens) {
      if (static_cast<int>(out.tokens.size()) == new_tokens || end) break;
      out.tokens.push_back(token);
      history.push_back(token);
      end = engine.is_end(token);  // nothing after the end of the turn
    }
    if (end) break;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, label = "model", methods = "plain,chain,tree";
  std::string prompt = "Repeat this list exactly, twice: apples, pears, plums, cherries, apricots, figs, dates.";
  int tokens = 64, threads = 1;
  float temperature = 0.0f;
  std::uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--model") model = value;
    else if (key == "--prompt") prompt = value;
    else if (key == "--tokens") tokens = std::atoi(value.c_str());
    else if (key == "--threads") threads = std::atoi(value.c_str());
    else if (key == "--temperature") temperature = std::strtof(value.c_str(), nullptr);
    else if (key == "--methods") methods = value;
    else if (key == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "--label") label = value;
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: %s --model M.gguf [--prompt TEXT] [--tokens N] [--threads N] [--temperature T] [--methods plain,chain,tree]\n", argv[0]);
    return 2;
  }
  std::vector<std::int32_t> chat;
  {
    llama_example::llama_engine engine(model, threads, 4096, 1);
    chat = engine.chat_tokens(prompt);
  }
  run_result plain;
  bool all_identical = true;
  std::stringstream list(methods);
  for (std::string method; std::getline(list, method, ',');) {
    const specdec::index_t branches = method == "plain" ? 0 : method == "chain" ? 1 : 3;
    const run_result r = generate(model, chat, threads, tokens, branches, temperature, seed);
    if (method == "plain") {
      plain = r;
      llama_example::llama_engine engine(model, threads, 64, 1);
      std::string text;
      for (const std::int32_t token : r.tokens) text += engine.piece(token);
      std::printf("plain output: %s\n", text.c_str());
    }
    const double tok_s = static_cast<double>(r.tokens.size()) / r.seconds;
    const double plain_tok_s = plain.tokens.empty() ? 0.0 : static_cast<double>(plain.tokens.size()) / plain.seconds;
    const bool greedy = temperature == 0.0f;
    const bool identical = greedy && !plain.tokens.empty() && r.tokens == plain.tokens;
    if (greedy && method != "plain" && !plain.tokens.empty()) all_identical = all_identical && identical;
    std::printf("RESULT engine=llama.cpp model=%s prompt=0 method=%s tok_s=%.1f speedup=%.2f tau=%.2f forwards=%lld identical=%s\n",
                label.c_str(), method.c_str(), tok_s, plain_tok_s > 0 ? tok_s / plain_tok_s : 0.0,
                static_cast<double>(r.tokens.size()) / static_cast<double>(r.forwards), static_cast<long long>(r.forwards),
                !greedy || plain.tokens.empty() ? "n/a" : identical ? "yes" : "no");
  }
  return all_identical ? 0 : 1;
}
