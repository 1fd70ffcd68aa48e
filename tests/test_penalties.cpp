// SPDX-License-Identifier: Apache-2.0
// Penalties on a draft tree's target rows against the peers' own code (tests/data/penalties/penalties.json,
// tools/goldens/penalties.py): vLLM's apply_penalties (its CPU path, after its logit-bias add) and
// transformers' RepetitionPenaltyLogitsProcessor, every node's row penalised by its own history, bit for bit.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/sampling/penalties.hpp>

namespace {

using json = nlohmann::json;
using specdec::index_t;

const json& goldens() {
  static const json j = [] {
    std::ifstream f(SPECDEC_TEST_DATA_DIR "/penalties/penalties.json");
    REQUIRE(f.good());
    return json::parse(f);
  }();
  return j;
}

std::vector<float> floats(const json& rows) {
  std::vector<float> out;
  for (const auto& row : rows)
    for (const auto& b : row) out.push_back(std::bit_cast<float>(b.get<std::uint32_t>()));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::size_t& first) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) {
      first = i;
      return false;
    }
  return true;
}

}  // namespace

TEST_CASE("tree penalties equal vLLM's apply_penalties and transformers' repetition processor bit for bit") {
  const json& g = goldens();
  const index_t v = g["vocab"].get<index_t>();
  const auto prompt = g["prompt"].get<std::vector<std::int32_t>>();
  const auto output = g["output"].get<std::vector<std::int32_t>>();
  const specdec::draft_tree tree =
      specdec::make_tree(g["tokens"].get<std::vector<std::int32_t>>(), g["parents"].get<std::vector<std::int32_t>>(), v);
  const index_t n = tree.size();
  std::vector<specdec::sampling::logit_bias> bias;
  for (const auto& b : g["bias"]) bias.push_back({b[0].get<std::int32_t>(), b[1].get<float>()});
  const std::vector<float> logits = floats(g["logits"]);
  const specdec::sampling::penalty_history history(prompt, output);
  int negative_zeros_flipped = 0;
  for (const auto& c : g["cases"]) {
    const float rep = c["repetition"].get<float>(), freq = c["frequency"].get<float>(), pres = c["presence"].get<float>();
    INFO("repetition ", rep, " frequency ", freq, " presence ", pres);
    std::vector<float> x = logits;
    specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(x.data(), n, v), tree, 0, history,
                                            {rep, freq, pres, specdec::sampling::repetition_rule::multiply_reciprocal}, bias);
    std::size_t first = 0;
    const std::vector<float> want = floats(c["vllm"]);
    CHECK_MESSAGE(same_bits(x, want, first), "vLLM: first difference at row ", first / static_cast<std::size_t>(v), " column ",
                  first % static_cast<std::size_t>(v));
    for (std::size_t i = 0; i < x.size(); ++i)
      negative_zeros_flipped += std::signbit(logits[i]) && logits[i] == 0.0f && !std::signbit(want[i]);
    // A row without drafts (node 0's history is the committed one alone).
    std::vector<float> row0(logits.begin(), logits.begin() + v);
    specdec::sampling::apply_penalties(specdec::matrix_view<float>(row0.data(), 1, v), history,
                                       {rep, freq, pres, specdec::sampling::repetition_rule::multiply_reciprocal}, bias);
    CHECK(same_bits(row0, std::vector<float>(want.begin(), want.begin() + v), first));
    // Hugging Face: repetition only, divided.
    std::vector<float> y = logits;
    specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(y.data(), n, v), tree, 0, history, {rep, 0.0f, 0.0f});
    CHECK_MESSAGE(same_bits(y, floats(c["hf_repetition"]), first), "transformers: first difference at row ",
                  first / static_cast<std::size_t>(v), " column ", first % static_cast<std::size_t>(v));
  }
  CHECK(negative_zeros_flipped > 0);  // the goldens exercise vLLM's dense subtraction of -0.0
}

TEST_CASE("tree penalties name what is wrong") {
  const specdec::draft_tree tree = specdec::make_tree({1, 2}, {-1, 0});
  std::vector<float> x(2 * 10, 0.0f);
  const specdec::matrix_view<float> lv(x.data(), 2, 10);
  const std::vector<std::int32_t> prompt = {1, 3}, output = {4};
  const specdec::sampling::penalty_history h(prompt, output);
  using specdec::sampling::apply_tree_penalties;
  CHECK_THROWS_WITH_AS(apply_tree_penalties(lv, tree, 0, h, {0.0f, 0.0f, 0.0f}),
                       "specdec::sampling::apply_tree_penalties: repetition = 0; expected a finite value > 0 (1: none)",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(apply_tree_penalties(lv, tree, 0, h, {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f}),
                       "specdec::sampling::apply_tree_penalties: frequency = nan; expected a finite value (0: none)",
                       specdec::invalid_argument);
  const std::vector<specdec::sampling::logit_bias> bad = {{10, 1.0f}};
  CHECK_THROWS_WITH_AS(apply_tree_penalties(lv, tree, 0, h, {}, bad),
                       "specdec::sampling::apply_tree_penalties: bias[0].token = 10; expected a token in [0, 10)",
                       specdec::invalid_argument);
  const std::vector<std::int32_t> big = {12};
  CHECK_THROWS_WITH_AS(apply_tree_penalties(lv, tree, 0, specdec::sampling::penalty_history(prompt, big), {}),
                       "specdec::sampling::apply_tree_penalties: the history holds token 12; expected tokens in [0, 10)",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(apply_tree_penalties(lv, tree, 1, h, {}),
                       "specdec::sampling::apply_tree_penalties: first_row = 1 with 2 nodes; expected rows [first_row, "
                       "first_row + nodes) within the logits' 2",
                       specdec::invalid_argument);
}

TEST_CASE("llama.cpp's convention: every penalty over the last n tokens of the context, slid by the node's path") {
  // A scalar reference: node i's context is the committed one followed by its path; the last n of it are
  // counted, and the counted tokens get llama_sampler_penalties_apply's arithmetic.
  std::mt19937 rng(11);
  const index_t v = 24;
  for (const std::int32_t n : {0, 1, 3, 8, 64}) {
    for (int round = 0; round < 20; ++round) {
      INFO("last_n ", n, " round ", round);
      std::vector<std::int32_t> context(static_cast<std::size_t>(rng() % 12));
      for (auto& t : context) t = static_cast<std::int32_t>(rng() % 10);
      std::vector<std::int32_t> tokens = {static_cast<std::int32_t>(rng() % 10)}, parents = {-1};
      context.push_back(tokens[0]);
      for (std::int32_t i = 1; i < 12; ++i) {
        tokens.push_back(static_cast<std::int32_t>(i % 3 == 0 ? 10 + i : rng() % 10));
        parents.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(i)));
      }
      const specdec::draft_tree tree = specdec::make_tree(tokens, parents);
      std::vector<float> x(static_cast<std::size_t>(12 * v));
      for (auto& e : x) e = static_cast<float>(static_cast<int>(rng() % 512) - 256) / 37.0f;
      x[3] = 0.0f;
      x[4] = -0.0f;
      const specdec::sampling::penalty_params p{1.7f, 0.3f, -0.45f, specdec::sampling::repetition_rule::divide,
                                                specdec::sampling::penalty_convention::llama_cpp};
      std::vector<float> got = x;
      specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(got.data(), 12, v), tree, 0,
                                              specdec::sampling::penalty_history::last_n(context, n), p);
      for (index_t i = 0; i < 12; ++i) {
        std::vector<std::int32_t> path;
        for (index_t c = i; c > 0; c = tree.parent[static_cast<std::size_t>(c)]) path.insert(path.begin(), tree.token[static_cast<std::size_t>(c)]);
        std::vector<std::int32_t> full = context;
        full.insert(full.end(), path.begin(), path.end());
        const std::size_t keep = std::min(full.size(), static_cast<std::size_t>(n));
        std::vector<int> count(static_cast<std::size_t>(v), 0);
        for (std::size_t k = full.size() - keep; k < full.size(); ++k) ++count[static_cast<std::size_t>(full[k])];
        for (index_t j = 0; j < v; ++j) {
          float want = x[static_cast<std::size_t>(i * v + j)];
          const int c = count[static_cast<std::size_t>(j)];
          if (c > 0) {
            want = want <= 0 ? want * p.repetition : want / p.repetition;
            volatile float product = static_cast<float>(c) * p.frequency;  // rounded, as llama.cpp's x86 build
            want -= product + p.presence;
          }
          const float g = got[static_cast<std::size_t>(i * v + j)];
          CHECK_MESSAGE(std::bit_cast<std::uint32_t>(g) == std::bit_cast<std::uint32_t>(want), "node ", i, " token ", j, ": ", g,
                        " vs ", want);
        }
      }
    }
  }
  // Appending slides the window as llama.cpp's ring buffer does.
  specdec::sampling::penalty_history h = specdec::sampling::penalty_history::last_n(std::vector<std::int32_t>{1, 2, 3}, 2);
  h.append(4);
  CHECK(std::vector<std::int32_t>(h.recent().begin(), h.recent().end()) == std::vector<std::int32_t>{3, 4});
  CHECK(h.output_count(2) == 0);
  CHECK(h.output_count(3) == 1);
  // Conventions do not mix.
  std::vector<float> row(10, 1.0f);
  CHECK_THROWS_WITH_AS(specdec::sampling::apply_penalties(specdec::matrix_view<float>(row.data(), 1, 10), h, {1.1f, 0.0f, 0.0f}),
                       "specdec::sampling::apply_penalties: params.convention = vllm with a history built for llama_cpp "
                       "(penalty_history::last_n); expected the same convention",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(specdec::sampling::penalty_history::last_n(std::vector<std::int32_t>{}, -1),
                       "specdec::sampling::penalty_history::last_n: last_n = -1; expected a window length >= 0 (0: no penalties)",
                       specdec::invalid_argument);
}

TEST_CASE("llama.cpp's convention equals llama.cpp's own penalties sampler bit for bit") {
  // Cases and rows recorded by examples/llama_cpp/sampler_check.cpp from llama_sampler_init_penalties
  // (scripts/check_llama_cpp.sh runs that check live on 400 more).
  std::ifstream f(SPECDEC_TEST_DATA_DIR "/penalties/llama_cpp.json");
  REQUIRE(f.good());
  const json g = json::parse(f);
  const index_t v = g["vocab"].get<index_t>();
  int touched = 0;
  for (const auto& c : g["cases"]) {
    const auto context = c["context"].get<std::vector<std::int32_t>>();
    const specdec::draft_tree tree =
        specdec::make_tree(c["tokens"].get<std::vector<std::int32_t>>(), c["parents"].get<std::vector<std::int32_t>>());
    const auto bits = [](const json& one) { return std::bit_cast<float>(one[0].get<std::uint32_t>()); };
    const specdec::sampling::penalty_params p{bits(c["repeat"]), bits(c["frequency"]), bits(c["presence"]),
                                              specdec::sampling::repetition_rule::divide,
                                              specdec::sampling::penalty_convention::llama_cpp};
    std::vector<float> x, want;
    for (const auto& b : c["logits"]) x.push_back(std::bit_cast<float>(b.get<std::uint32_t>()));
    for (const auto& b : c["llama_cpp"]) want.push_back(std::bit_cast<float>(b.get<std::uint32_t>()));
    const std::vector<float> before = x;
    specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(x.data(), tree.size(), v), tree, 0,
                                            specdec::sampling::penalty_history::last_n(context, c["last_n"].get<std::int32_t>()), p);
    std::size_t first = 0;
    INFO("last_n ", c["last_n"].get<int>(), " repeat ", p.repetition, " frequency ", p.frequency, " presence ", p.presence);
    CHECK_MESSAGE(same_bits(x, want, first), "first difference at node ", first / static_cast<std::size_t>(v), " token ",
                  first % static_cast<std::size_t>(v));
    touched += before != want;
  }
  CHECK(touched > 10);  // the cases penalise something
}
