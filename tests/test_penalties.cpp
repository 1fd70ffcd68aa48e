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
