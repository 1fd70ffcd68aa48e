// SPDX-License-Identifier: Apache-2.0
// Jakiro*'s static two-expert proposals and draft run, on every backend.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/jakiro.hpp>
#include <specdec/tree/jakiro.hpp>

#include "backend_conformance.hpp"
#include "statistics.hpp"

#define SPECDEC_JAKIRO_BACKENDS \
  specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>, specdec::thrust_backend<specdec::thrust_system::omp>

using specdec::index_t;

namespace {

using conformance::error_of;

// The concatenated distribution of the statistical test: left expert 4 tokens, right expert 4 tokens.
const std::vector<double> moe_p = {8 / 32.0, 4 / 32.0, 2 / 32.0, 2 / 32.0, 6 / 32.0, 4 / 32.0, 4 / 32.0, 2 / 32.0};

std::vector<float> log_of(const std::vector<double>& p, std::size_t begin, std::size_t end, std::size_t repeat) {
  std::vector<float> out;
  for (std::size_t r = 0; r < repeat; ++r)
    for (std::size_t i = begin; i < end; ++i) out.push_back(static_cast<float>(std::log(p[i])));
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("jakiro greedy proposal is the top-k of the concatenated experts", B, SPECDEC_JAKIRO_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 37, rows = 3;
  auto left = conformance::random_logits(5, rows, v);
  auto right = conformance::random_logits(6, rows, v);
  // Ties across and within experts: they must go to the lower concatenated index.
  for (index_t r = 0; r < rows; ++r) {
    right.data[static_cast<std::size_t>(r * v + 3)] = left(r, 7);
    left.data[static_cast<std::size_t>(r * v + 9)] = left(r, 7);
  }
  auto left_buf = h.up(left.data);
  auto right_buf = h.up(right.data);
  for (const index_t k : {index_t{1}, index_t{5}, v, index_t{50}, 2 * v}) {
    CAPTURE(k);
    const auto got = specdec::propose_moe_greedy(h.b, left_buf.matrix(rows, v), right_buf.matrix(rows, v), k);
    REQUIRE(got.tokens.size() == static_cast<std::size_t>(rows * k));
    for (index_t r = 0; r < rows; ++r) {
      std::vector<int> order(static_cast<std::size_t>(2 * v));
      std::iota(order.begin(), order.end(), 0);
      const auto value = [&](int j) { return j < v ? left(r, j) : right(r, j - v); };
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return value(a) > value(b); });
      for (index_t i = 0; i < k; ++i) {
        const std::size_t at = static_cast<std::size_t>(r * k + i);
        CHECK(got.tokens[at] == order[static_cast<std::size_t>(i)] % v);
        CHECK(got.expert[at] == (order[static_cast<std::size_t>(i)] >= v ? 1 : 0));
      }
    }
    CHECK(got.probabilities.empty());
  }
  CHECK(error_of([&] {
          specdec::propose_moe_greedy(h.b, left_buf.matrix(rows, v), right_buf.matrix(rows, v), 2 * v + 1);
        }).find("k = 75") != std::string::npos);
  auto two_rows = h.up(std::vector<float>(static_cast<std::size_t>(2 * v), 0.0f));
  CHECK(error_of([&] {
          specdec::propose_moe_greedy(h.b, left_buf.matrix(rows, v), two_rows.matrix(2, v), 3);
        }).find("expected equal shapes") != std::string::npos);
}

// Pairs (first, second) drawn without replacement from the 8-entry concatenation have probability
// p_i p_j / (1 - p_i). 60 000 rows, 56 cells (smallest expected count 60000 / 1024 / (31/32) = 60):
// chi-square with 55 degrees of freedom against its 1e-4 quantile (about 100). The same counts against
// draws *with* replacement (renormalised off the diagonal), a rule that is wrong by a few percent per
// cell, must fail: that is the test's power.
TEST_CASE_TEMPLATE("jakiro sampled proposal draws without replacement from the concatenated softmax", B,
                   SPECDEC_JAKIRO_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 4, rows = 60000, k = 2;
  auto left_buf = h.up(log_of(moe_p, 0, 4, rows));
  auto right_buf = h.up(log_of(moe_p, 4, 8, rows));
  specdec::moe_sampling s;
  s.rng = specdec::philox_stream{20261122, 0};
  const auto got = specdec::propose_moe_sampled(h.b, left_buf.matrix(rows, v), right_buf.matrix(rows, v), k, s);
  REQUIRE(got.tokens.size() == static_cast<std::size_t>(rows * k));
  std::vector<double> counts(64, 0.0), expected(64, 0.0), with_replacement(64, 0.0);
  for (index_t r = 0; r < rows; ++r) {
    const auto a = static_cast<std::size_t>(2 * r);
    const int first = got.tokens[a] + v * got.expert[a], second = got.tokens[a + 1] + v * got.expert[a + 1];
    REQUIRE(first != second);
    counts[static_cast<std::size_t>(first * 8 + second)] += 1.0;
  }
  double off_diagonal = 0.0;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      if (i != j) {
        expected[static_cast<std::size_t>(i * 8 + j)] = moe_p[i] * moe_p[j] / (1.0 - moe_p[i]);
        off_diagonal += moe_p[i] * moe_p[j];
      }
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      if (i != j) with_replacement[static_cast<std::size_t>(i * 8 + j)] = moe_p[i] * moe_p[j] / off_diagonal;
  const double threshold = specdec::testing::chi_square_quantile(55);
  CHECK(specdec::testing::chi_square(counts, expected) < threshold);
  CHECK(specdec::testing::chi_square(counts, with_replacement) > threshold);
}

TEST_CASE_TEMPLATE("jakiro sampled proposal: probabilities, temperature, the reference's gather quirk", B,
                   SPECDEC_JAKIRO_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 4, rows = 200, k = 3;
  auto left_buf = h.up(log_of(moe_p, 0, 4, rows));
  auto right_buf = h.up(log_of(moe_p, 4, 8, rows));
  // Temperature 0.5 squares the distribution: p_i^2 / sum p^2.
  std::vector<double> tempered(8);
  double norm = 0.0;
  for (int i = 0; i < 8; ++i) norm += moe_p[i] * moe_p[i];
  for (int i = 0; i < 8; ++i) tempered[i] = moe_p[i] * moe_p[i] / norm;
  for (const auto source : {specdec::moe_probability_source::drafting_expert,
                            specdec::moe_probability_source::second_expert_half}) {
    specdec::moe_sampling s;
    s.temperature = 0.5f;
    s.rng = specdec::philox_stream{7, 3};
    s.offset = 1000;
    s.source = source;
    const auto got = specdec::propose_moe_sampled(h.b, left_buf.matrix(rows, v), right_buf.matrix(rows, v), k, s);
    const auto again = specdec::propose_moe_sampled(h.b, left_buf.matrix(rows, v), right_buf.matrix(rows, v), k, s);
    CHECK(got.tokens == again.tokens);  // a pure function of (seed, offset)
    for (index_t r = 0; r < rows; ++r) {
      float cumulative = 0.0f;
      for (index_t i = 0; i < k; ++i) {
        const auto at = static_cast<std::size_t>(r * k + i);
        const int drawn = got.tokens[at] + v * got.expert[at];
        const int gathered = source == specdec::moe_probability_source::drafting_expert ? drawn : got.tokens[at] + v;
        const auto g = static_cast<float>(tempered[static_cast<std::size_t>(gathered)]);
        CHECK(got.probabilities[at] == doctest::Approx(std::clamp(g / (1.0f - cumulative), 0.0f, 1.0f)).epsilon(1e-6));
        cumulative += g;
      }
    }
  }
  specdec::moe_sampling greedy;
  greedy.temperature = 0.0f;
  CHECK(error_of([&] {
          specdec::propose_moe_sampled(h.b, left_buf.matrix(rows, v), right_buf.matrix(rows, v), 2, greedy);
        }).find("temperature = 0") != std::string::npos);
  std::vector<float> bad = {0.0f, NAN, 1.0f, 2.0f};
  auto bad_buf = h.up(bad);
  CHECK(error_of([&] {
          specdec::propose_moe_sampled(h.b, bad_buf.matrix(1, v), bad_buf.matrix(1, v), 2, {});
        }).find("left_logits[0, 1] = nan") != std::string::npos);
  // A peaked row underflows to fewer positive entries than draws.
  std::vector<float> peaked = {0.0f, -2000.0f, -2000.0f, -2000.0f};
  auto peaked_buf = h.up(peaked);
  CHECK(error_of([&] {
          specdec::propose_moe_sampled(h.b, peaked_buf.matrix(1, v), peaked_buf.matrix(1, v), 3, {});
        }).find("only 2 entries of positive probability") != std::string::npos);
}

TEST_CASE_TEMPLATE("jakiro static draft run over EAGLE-1's buffers, same draws on every backend", B,
                   SPECDEC_JAKIRO_BACKENDS) {
  const auto buf = specdec::eagle1::make_buffers(specdec::choices::jakiro_mc_sim_7b_63());
  const index_t v = 64;
  // Runs the whole draft with the given drafter type; returns tokens, probabilities and the offset.
  const auto run = [&](auto& h, bool sampled) {
    using H = std::remove_reference_t<decltype(h)>;
    using BB = decltype(h.b);
    std::optional<specdec::moe_sampling> s;
    if (sampled) s = specdec::moe_sampling{1.0f, specdec::philox_stream{99, 1}, 17, {}};
    specdec::jakiro::static_drafter<BB> drafter(h.b, buf, 5, 30, s);
    auto left = h.up(conformance::random_logits(1, 1, v).data);
    auto right = h.up(conformance::random_logits(2, 1, v).data);
    auto step = drafter.begin(left.matrix(1, v), right.matrix(1, v));
    std::vector<std::int32_t> proposed;  // what the proposals themselves return, call by call
    {
      const auto p = sampled ? specdec::propose_moe_sampled(h.b, left.matrix(1, v), right.matrix(1, v), 10, *s)
                             : specdec::propose_moe_greedy(h.b, left.matrix(1, v), right.matrix(1, v), 10);
      proposed = p.tokens;
    }
    std::uint64_t offset = 17 + 10;
    for (std::uint64_t seed = 10; !drafter.done(); ++seed) {
      const auto m = static_cast<index_t>(step.input_ids.size());
      CHECK(m == static_cast<index_t>(step.buffers->nodes.size()));
      auto l = h.up(conformance::random_logits(seed, m, v).data);
      auto r = h.up(conformance::random_logits(seed + 100, m, v).data);
      if (sampled) {
        auto at = *s;
        at.offset = offset;
        const auto p = specdec::propose_moe_sampled(h.b, l.matrix(m, v), r.matrix(m, v), 10, at);
        proposed.insert(proposed.end(), p.tokens.begin(), p.tokens.end());
        offset += static_cast<std::uint64_t>(m * 10);
      } else {
        const auto p = specdec::propose_moe_greedy(h.b, l.matrix(m, v), r.matrix(m, v), 10);
        proposed.insert(proposed.end(), p.tokens.begin(), p.tokens.end());
      }
      step = drafter.expand(l.matrix(m, v), r.matrix(m, v));
    }
    CHECK(drafter.ss_token() == proposed);
    CHECK(drafter.ss_expert().size() == proposed.size());
    CHECK(drafter.ss_prob().size() == (sampled ? proposed.size() : 0u));
    if (sampled) CHECK(drafter.next_offset() == offset);
    const auto candidates = drafter.tree_candidates();
    CHECK(candidates.size() == buf.shape.tree.token.size());
    CHECK(candidates[0] == 5);
    (void)sizeof(H);
    return std::make_pair(drafter.ss_token(), drafter.ss_prob());
  };
  conformance::harness<B> h;
  conformance::harness<specdec::eigen> reference;
  for (const bool sampled : {false, true}) {
    CAPTURE(sampled);
    const auto got = run(h, sampled);
    CHECK(got == run(reference, sampled));
  }
}
