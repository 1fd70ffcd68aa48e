// SPDX-License-Identifier: Apache-2.0
// specdec's penalties in llama.cpp's convention against llama.cpp's own penalties sampler, bit for bit:
// for random contexts, windows, parameters and draft trees, every node's row penalised by
// specdec::sampling::apply_tree_penalties (penalty_history::last_n) equals the row llama.cpp's
// llama_sampler_init_penalties gives after accepting the context and the node's path, one token at a
// time, as its sampler would have seen them. Exit status 1 on a difference.
//
//   specdec_llama_cpp_sampler_check [--cases N] [--goldens FILE]
//
// --goldens FILE also writes the cases and llama.cpp's rows as JSON (tests/data/penalties/llama_cpp.json:
// the unit tests replay them where llama.cpp is not built).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <llama.h>

#include <specdec/sampling/penalties.hpp>
#include <specdec/tree/tree.hpp>

namespace {

struct penalty_case {
  std::vector<std::int32_t> context, tokens, parents;
  int last_n;
  float repeat, frequency, presence;
  std::vector<float> logits, want;  // [nodes x V]
};

/// llama.cpp's rows: one penalties sampler per node, fed the context then the node's path.
std::vector<float> llama_rows(const penalty_case& c, const specdec::draft_tree& tree, int vocab) {
  std::vector<float> out(c.logits.size());
  std::vector<llama_token_data> cur(static_cast<std::size_t>(vocab));
  for (specdec::index_t i = 0; i < tree.size(); ++i) {
    llama_sampler* s = llama_sampler_init_penalties(vocab, c.last_n, c.repeat, c.frequency, c.presence);
    for (const std::int32_t t : c.context) llama_sampler_accept(s, t);
    std::vector<std::int32_t> path;
    for (specdec::index_t n = i; n > 0; n = tree.parent[static_cast<std::size_t>(n)]) path.insert(path.begin(), tree.token[static_cast<std::size_t>(n)]);
    for (const std::int32_t t : path) llama_sampler_accept(s, t);
    for (int j = 0; j < vocab; ++j) cur[static_cast<std::size_t>(j)] = {j, c.logits[static_cast<std::size_t>(i * vocab + j)], 0.0f};
    llama_token_data_array array{cur.data(), cur.size(), -1, false};
    llama_sampler_apply(s, &array);
    for (int j = 0; j < vocab; ++j) out[static_cast<std::size_t>(i * vocab + j)] = cur[static_cast<std::size_t>(j)].logit;
    llama_sampler_free(s);
  }
  return out;
}

std::string json_ints(const std::vector<std::int32_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string json_bits(const std::vector<float>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(std::bit_cast<std::uint32_t>(v[i]));
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  int cases = 200;
  std::string goldens;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--cases") cases = std::atoi(argv[i + 1]);
    else if (key == "--goldens") goldens = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--cases N] [--goldens FILE]\n", argv[0]);
      return 2;
    }
  }
  constexpr int vocab = 64;
  std::mt19937 rng(20261127);
  const int windows[] = {0, 1, 2, 5, 16, 64, 4096};
  const float repeats[] = {1.0f, 1.1f, 1.3f, 0.8f, 2.0f};
  const float frequencies[] = {0.0f, 0.1f, 0.35f, -0.2f, 1.7f};
  const float presences[] = {0.0f, 0.25f, 0.6f, -0.45f, 1.1f};
  std::vector<penalty_case> all;
  int differences = 0;
  for (int k = 0; k < cases; ++k) {
    penalty_case c;
    c.context.resize(rng() % 40);
    for (auto& t : c.context) t = static_cast<std::int32_t>(rng() % 20);  // few distinct tokens: many repeats
    const std::int32_t root = static_cast<std::int32_t>(rng() % 20);
    c.context.push_back(root);
    const int nodes = 1 + static_cast<int>(rng() % 12);
    c.tokens = {root};
    c.parents = {-1};
    for (int i = 1; i < nodes; ++i) {  // siblings distinct, as in a draft tree
      const auto parent = static_cast<std::int32_t>(rng() % static_cast<unsigned>(i));
      auto token = static_cast<std::int32_t>(rng() % 24);
      for (int j = 1; j < i; ++j)
        if (c.parents[static_cast<std::size_t>(j)] == parent && c.tokens[static_cast<std::size_t>(j)] == token) {
          token = (token + 1) % 24;
          j = 0;
        }
      c.tokens.push_back(token);
      c.parents.push_back(parent);
    }
    c.last_n = windows[rng() % 7];
    c.repeat = repeats[rng() % 5];
    c.frequency = frequencies[rng() % 5];
    c.presence = presences[rng() % 5];
    // Logits: multiples of 1/64, zeros of both signs among them.
    c.logits.resize(static_cast<std::size_t>(nodes * vocab));
    for (auto& x : c.logits) {
      const int r = static_cast<int>(rng() % 1031) - 515;
      x = r == 7 ? -0.0f : static_cast<float>(r) / 64.0f;
    }
    const specdec::draft_tree built = specdec::make_tree(c.tokens, c.parents);
    c.want = llama_rows(c, built, vocab);
    std::vector<float> got = c.logits;
    specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(got.data(), nodes, vocab), built, 0,
                                            specdec::sampling::penalty_history::last_n(c.context, c.last_n),
                                            {c.repeat, c.frequency, c.presence, specdec::sampling::repetition_rule::divide,
                                             specdec::sampling::penalty_convention::llama_cpp});
    for (std::size_t j = 0; j < got.size(); ++j)
      if (std::bit_cast<std::uint32_t>(got[j]) != std::bit_cast<std::uint32_t>(c.want[j])) {
        if (differences++ < 10)
          std::printf("case %d (last_n %d, repeat %g, frequency %g, presence %g): node %zu token %zu: specdec %a, llama.cpp %a\n", k,
                      c.last_n, static_cast<double>(c.repeat), static_cast<double>(c.frequency), static_cast<double>(c.presence),
                      j / vocab, j % vocab, static_cast<double>(got[j]), static_cast<double>(c.want[j]));
      }
    all.push_back(std::move(c));
  }
  if (!goldens.empty()) {
    std::ofstream f(goldens);
    f << "{\"source\": \"llama.cpp's llama_sampler_init_penalties (pinned in cmake/llama_cpp.pin), run by "
         "examples/llama_cpp/sampler_check.cpp\", \"vocab\": "
      << vocab << ", \"cases\": [\n";
    for (std::size_t k = 0; k < all.size(); ++k) {
      const penalty_case& c = all[k];
      f << (k ? ",\n" : "") << "{\"context\": " << json_ints(c.context) << ", \"tokens\": " << json_ints(c.tokens)
        << ", \"parents\": " << json_ints(c.parents) << ", \"last_n\": " << c.last_n << ", \"repeat\": " << json_bits({c.repeat})
        << ", \"frequency\": " << json_bits({c.frequency}) << ", \"presence\": " << json_bits({c.presence})
        << ", \"logits\": " << json_bits(c.logits) << ", \"llama_cpp\": " << json_bits(c.want) << "}";
    }
    f << "\n]}\n";
  }
  std::printf("SAMPLER_CHECK cases=%d differences=%d\n", cases, differences);
  return differences == 0 ? 0 : 1;
}
