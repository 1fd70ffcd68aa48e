// SPDX-License-Identifier: Apache-2.0
// Statistical tests of the stochastic verifiers, on every backend: the emitted tokens are distributed as
// the target (chi-square against the 1e-4 quantile, fixed seeds), the acceptance matches the theory
// within 3 standard errors, a 1 % error in the rule is detected (power), lenience reproduces its closed
// form; plus the verifiers' errors on bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/static_tree.hpp>

#include "backend_conformance.hpp"
#include "statistics.hpp"

#define SPECDEC_SAMPLER_BACKENDS SPECDEC_ALL_BACKENDS

using specdec::index_t;
namespace sampling = specdec::sampling;

namespace {

using conformance::error_of;

/// Inverse-CDF draw from a host row (the test's own drafter).
std::int32_t draw(const std::vector<float>& p, index_t row, index_t v, double u) {
  double run = 0.0;
  std::int32_t last = 0;
  for (index_t j = 0; j < v; ++j) {
    const double x = p[static_cast<std::size_t>(row * v + j)];
    if (x <= 0.0) continue;
    run += x;
    last = static_cast<std::int32_t>(j);
    if (run > u) return last;
  }
  return last;
}

std::vector<double> row_of(const std::vector<float>& m, index_t row, index_t v) {
  return std::vector<double>(m.begin() + row * v, m.begin() + (row + 1) * v);
}

/// Per-position counts of emitted tokens and the tokens emitted per step, from `n` chain steps with
/// drafts drawn from q. Target rows [gamma + 1 x V], draft rows [gamma x V] (host, uploaded here).
struct chain_run {
  std::vector<std::vector<double>> counts;  // [gamma + 1][V]: token at emitted position j, when emitted
  double mean_tokens = 0.0, sd_tokens = 0.0;
};
template <class B>
chain_run run_chain(B& b, const std::vector<float>& p, const std::vector<float>& q, index_t gamma, index_t v, index_t n,
                    std::uint64_t seed, float lenience = 1.0f) {
  auto target = b.upload(std::span<const float>(p));
  auto draft = b.upload(std::span<const float>(q));
  std::vector<specdec::draft_tree> trees;
  trees.reserve(static_cast<std::size_t>(n));
  const specdec::philox_stream drafter{seed, 1};
  for (index_t s = 0; s < n; ++s) {
    std::vector<std::int32_t> tokens;
    for (index_t i = 0; i < gamma; ++i)
      tokens.push_back(draw(q, i, v, drafter.uniform_double(static_cast<std::uint64_t>(s * gamma + i))));
    trees.push_back(sampling::make_chain(0, tokens));
  }
  std::vector<index_t> rows = {-1};
  for (index_t i = 0; i < gamma; ++i) rows.push_back(i);
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(n));
  for (index_t s = 0; s < n; ++s) {
    auto& r = requests[static_cast<std::size_t>(s)];
    r.tree = trees[static_cast<std::size_t>(s)];
    r.draft_rows = rows;
    r.uniforms = sampling::uniform_stream::philox({seed, 2 + static_cast<std::uint64_t>(s)});
  }
  sampling::speculative_options options;
  options.lenience = lenience;
  const auto results = sampling::verify_speculative(b, {specdec::matrix_view<const float, typename B::memory_space>(target.view().data(), gamma + 1, v), specdec::matrix_view<const float, typename B::memory_space>(draft.view().data(), gamma, v)}, requests, options);
  chain_run out;
  out.counts.assign(static_cast<std::size_t>(gamma + 1), std::vector<double>(static_cast<std::size_t>(v), 0.0));
  double sum = 0.0, sum2 = 0.0;
  for (const auto& r : results) {
    for (std::size_t j = 0; j < r.tokens.size(); ++j) out.counts[j][static_cast<std::size_t>(r.tokens[j])] += 1.0;
    const double t = static_cast<double>(r.tokens.size());
    sum += t;
    sum2 += t * t;
  }
  out.mean_tokens = sum / static_cast<double>(n);
  out.sd_tokens = std::sqrt(sum2 / static_cast<double>(n) - out.mean_tokens * out.mean_tokens);
  return out;
}

/// Chi-square of a position's counts against p, or 0 when too few steps reached it (expected count < 5
/// in some cell with mass): such positions are not tested.
bool position_matches(const std::vector<double>& counts, const std::vector<double>& p, double& statistic) {
  double n = 0.0;
  for (double c : counts) n += c;
  for (double x : p)
    if (x > 0.0 && n * x < 5.0) return true;
  statistic = specdec::testing::chi_square(counts, p);
  index_t cells = 0;
  for (double x : p) cells += x > 0.0 ? 1 : 0;
  return statistic < specdec::testing::chi_square_quantile(static_cast<double>(cells - 1));
}

}  // namespace

// gamma = 1..5, V = 6, 40 000 steps each. Each emitted position (when reached) must be distributed as
// its target row: chi-square with V - 1 dof against the 1e-4 quantile (about 25.7). Tokens per step:
// with position-varying alphas E[N] = 1 + sum_j prod_{i<=j} alpha_i, within 3 standard errors.
TEST_CASE_TEMPLATE("chain speculative sampling is lossless and accepts at the theoretical rate", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 6, n = 40000;
  for (index_t gamma = 1; gamma <= 5; ++gamma) {
    CAPTURE(gamma);
    const auto p = conformance::random_probs(300 + static_cast<std::uint64_t>(gamma), gamma + 1, v, 1.5f).data;
    const auto q = conformance::random_probs(400 + static_cast<std::uint64_t>(gamma), gamma, v, 1.5f).data;
    const chain_run run = run_chain(h.b, p, q, gamma, v, n, 7000 + static_cast<std::uint64_t>(gamma));
    for (index_t j = 0; j <= gamma; ++j) {
      CAPTURE(j);
      double statistic = 0.0;
      CHECK(position_matches(run.counts[static_cast<std::size_t>(j)], row_of(p, j, v), statistic));
    }
    double expected = 1.0, prefix = 1.0;
    for (index_t i = 0; i < gamma; ++i) {
      prefix *= sampling::lenient_acceptance_rate(row_of(p, i, v), row_of(q, i, v));
      expected += prefix;
    }
    CHECK(std::abs(run.mean_tokens - expected) < 3.0 * run.sd_tokens / std::sqrt(static_cast<double>(n)));
  }
}

// i.i.d. positions: E[N] = (1 - alpha^(gamma+1)) / (1 - alpha).
TEST_CASE_TEMPLATE("tokens per step match (1 - alpha^(g+1)) / (1 - alpha) for i.i.d. positions", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 8, n = 40000, gamma = 4;
  const auto p1 = conformance::random_probs(11, 1, v, 1.5f).data;
  const auto q1 = conformance::random_probs(12, 1, v, 1.5f).data;
  std::vector<float> p, q;
  for (index_t i = 0; i <= gamma; ++i) p.insert(p.end(), p1.begin(), p1.end());
  for (index_t i = 0; i < gamma; ++i) q.insert(q.end(), q1.begin(), q1.end());
  const chain_run run = run_chain(h.b, p, q, gamma, v, n, 99);
  const double alpha = sampling::lenient_acceptance_rate(row_of(p1, 0, v), row_of(q1, 0, v));
  CHECK(std::abs(run.mean_tokens - sampling::expected_tokens_per_step(alpha, gamma)) <
        3.0 * run.sd_tokens / std::sqrt(static_cast<double>(n)));
}

// Power: the distribution test must reject a rule that is 1 % wrong. Accepting with min(1, p / (0.99 q))
// instead of min(1, p / q) moves mass onto the tokens with p < q: for these rows P_0.99 - p =
// (+0.00505, -0.00253, -0.00126, -0.00126), so at N = 700 000 single-position steps the wrong rule's
// expected statistic is dof + N sum (P_0.99 - p)^2 / p = 3 + 71, asserted to exceed three times the
// 1e-4 threshold (21.8); the sampled statistic of the wrong rule must exceed the threshold and the
// correct rule's must not. The power is a property of the test, so it runs on one backend.
TEST_CASE("a 1 % error in the acceptance rule fails the distribution test") {
  specdec::eigen b;
  const index_t v = 4, n = 700000;
  const std::vector<float> p = {0.5f, 0.25f, 0.125f, 0.125f, 0.25f, 0.25f, 0.25f, 0.25f};  // row 1: bonus
  const std::vector<float> q = {0.75f, 0.125f, 0.0625f, 0.0625f};
  const std::vector<double> p0 = row_of(p, 0, v), q0 = row_of(q, 0, v);
  const auto wrong = sampling::lenient_output_distribution(p0, q0, 0.99);
  double lambda = 0.0;
  for (index_t j = 0; j < v; ++j) lambda += (wrong[j] - p0[j]) * (wrong[j] - p0[j]) / p0[j];
  lambda *= static_cast<double>(n);
  const double threshold = specdec::testing::chi_square_quantile(3);
  CHECK(3.0 + lambda > 3.0 * threshold);
  const chain_run right = run_chain(b, p, q, 1, v, n, 5);
  const chain_run off = run_chain(b, p, q, 1, v, n, 5, 0.99f);
  CHECK(specdec::testing::chi_square(right.counts[0], p0) < threshold);
  CHECK(specdec::testing::chi_square(off.counts[0], p0) > threshold);
  // And the lenient output follows its own closed form.
  CHECK(specdec::testing::chi_square(off.counts[0], wrong) < threshold);
}

// Lenience reproduces its closed form: P(x) = min(q, p / l) + (1 - alpha_l) residual.
TEST_CASE_TEMPLATE("lenience reproduces its analytic output distribution and acceptance", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 5, n = 60000;
  const std::vector<float> p = {0.05f, 0.15f, 0.4f, 0.3f, 0.1f, 0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  const std::vector<float> q = {0.3f, 0.3f, 0.2f, 0.1f, 0.1f};
  for (const float l : {0.5f, 0.25f}) {
    CAPTURE(l);
    const chain_run run = run_chain(h.b, p, q, 1, v, n, 17, l);
    const auto expected = sampling::lenient_output_distribution(row_of(p, 0, v), row_of(q, 0, v), l);
    CHECK(specdec::testing::chi_square(run.counts[0], expected) < specdec::testing::chi_square_quantile(4));
    const double alpha = sampling::lenient_acceptance_rate(row_of(p, 0, v), row_of(q, 0, v), l);
    CHECK(std::abs(run.mean_tokens - (1.0 + alpha)) < 3.0 * run.sd_tokens / std::sqrt(static_cast<double>(n)));
  }
}

namespace {

/// Tree experiment with deterministic candidates: the root's first emitted token must follow p_root, and
/// the second, given the first is candidate c, must follow c's row. Also P(accept at root) = the
/// candidates' target mass.
template <class B>
void check_tree(B& b, const specdec::draft_tree& tree, index_t v, const std::vector<float>& p, index_t n,
                bool coin_rule, std::uint64_t seed) {
  auto target = b.upload(std::span<const float>(p));
  const specdec::matrix_view<const float, typename B::memory_space> rows(target.view().data(), tree.size(), v);
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(n));
  for (index_t s = 0; s < n; ++s) {
    requests[static_cast<std::size_t>(s)].tree = tree;
    requests[static_cast<std::size_t>(s)].uniforms = sampling::uniform_stream::philox({seed, static_cast<std::uint64_t>(s)});
  }
  const auto results = coin_rule ? sampling::verify_coin_tree(b, rows, requests)
                                 : sampling::verify_speculative(b, {rows}, requests);
  std::vector<double> first(static_cast<std::size_t>(v), 0.0);
  std::vector<std::vector<double>> second(static_cast<std::size_t>(tree.size()), std::vector<double>(static_cast<std::size_t>(v), 0.0));
  double accepted_root = 0.0;
  for (const auto& r : results) {
    first[static_cast<std::size_t>(r.tokens[0])] += 1.0;
    if (!r.accepted_nodes.empty()) {
      accepted_root += 1.0;
      second[static_cast<std::size_t>(r.accepted_nodes[0])][static_cast<std::size_t>(r.tokens[1])] += 1.0;
    }
  }
  double statistic = 0.0;
  CHECK(position_matches(first, row_of(p, 0, v), statistic));
  double candidate_mass = 0.0;
  for (index_t c = 1; c < tree.size(); ++c)
    if (tree.parent[static_cast<std::size_t>(c)] == 0) {
      candidate_mass += p[static_cast<std::size_t>(tree.token[static_cast<std::size_t>(c)])];
      CAPTURE(c);
      CHECK(position_matches(second[static_cast<std::size_t>(c)], row_of(p, c, v), statistic));
    }
  const double rate = accepted_root / static_cast<double>(n);
  CHECK(std::abs(rate - candidate_mass) < 3.0 * std::sqrt(candidate_mass * (1.0 - candidate_mass) / static_cast<double>(n)));
}

/// Medusa's 63-choice tree with each node's token = its rank (distinct among siblings).
specdec::draft_tree medusa_tree() {
  const auto s = specdec::make_static_tree(specdec::choices::medusa_mc_sim_7b_63());
  specdec::draft_tree t = s.tree;
  for (index_t i = 1; i < t.size(); ++i) t.token[static_cast<std::size_t>(i)] = s.rank[static_cast<std::size_t>(i)];
  return t;
}

/// An EAGLE-2-shaped tree: top-3 at the root, 2 children under each of the first two, a chain below.
specdec::draft_tree eagle2_tree() {
  return specdec::make_tree({0, 2, 0, 5, 1, 3, 4, 0, 6}, {-1, 0, 0, 0, 1, 1, 2, 2, 4});
}

}  // namespace

TEST_CASE_TEMPLATE("tree verification is lossless: Medusa's 63-node tree and an EAGLE-2 shape, both rules", B,
                   SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t n = 40000;
  for (const bool coin : {false, true}) {
    CAPTURE(coin);
    const auto medusa = medusa_tree();
    check_tree(h.b, medusa, 12, conformance::random_probs(21, medusa.size(), 12, 1.0f).data, n, coin, 31);
    const auto eagle = eagle2_tree();
    check_tree(h.b, eagle, 8, conformance::random_probs(22, eagle.size(), 8, 1.5f).data, n, coin, 32);
  }
}

// Target and draft both processed with top-k = 3 and top-p = 0.8 from logits: tokens outside the
// target's support must never appear (chi-square is infinite otherwise) and the distribution must match.
TEST_CASE_TEMPLATE("chain verification with top-k / top-p processed distributions", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 8, gamma = 3, n = 40000;
  for (const sampling::sampling_params params : {sampling::sampling_params{1.0f, 3, 1.0f, 0.0f},
                                                 sampling::sampling_params{1.0f, 0, 0.8f, 0.0f},
                                                 sampling::sampling_params{0.7f, 5, 0.9f, 0.0f}}) {
    CAPTURE(params.top_k);
    CAPTURE(params.top_p);
    const auto target_logits = conformance::random_logits(50, gamma + 1, v, 2.0f);
    const auto draft_logits = conformance::random_logits(51, gamma, v, 2.0f);
    std::vector<float> p(target_logits.data.size()), q(draft_logits.data.size());
    sampling::target_probabilities(specdec::as_matrix(std::as_const(target_logits.data), gamma + 1, v), std::span(&params, 1),
                                   specdec::as_matrix(p, gamma + 1, v));
    sampling::target_probabilities(specdec::as_matrix(std::as_const(draft_logits.data), gamma, v), std::span(&params, 1),
                                   specdec::as_matrix(q, gamma, v));
    const chain_run run = run_chain(h.b, p, q, gamma, v, n, 61);
    for (index_t j = 0; j <= gamma; ++j) {
      CAPTURE(j);
      double statistic = 0.0;
      CHECK(position_matches(run.counts[static_cast<std::size_t>(j)], row_of(p, j, v), statistic));
    }
  }
}

TEST_CASE("distribution processing: vLLM's order and rules against a scalar reading") {
  // Logits 4, 3, 3, 2, 1, 0: top-k 2 keeps the tie at the 2nd (3 tokens); top-p 0.5 on the remaining
  // renormalised distribution drops the ascending-cumsum prefix <= 0.5.
  const std::vector<float> logits = {4, 3, 3, 2, 1, 0};
  std::vector<float> probs(6);
  const auto run = [&](sampling::sampling_params s) {
    sampling::target_probabilities(specdec::as_matrix(logits, 1, 6), std::span(&s, 1), specdec::as_matrix(probs, 1, 6));
    return probs;
  };
  auto r = run({1.0f, 2, 1.0f, 0.0f});
  const double z = std::exp(4.0) + 2 * std::exp(3.0);
  CHECK(r[0] == doctest::Approx(std::exp(4.0) / z));
  CHECK(r[1] == doctest::Approx(std::exp(3.0) / z));
  CHECK(r[2] == doctest::Approx(std::exp(3.0) / z));
  CHECK(r[3] == 0.0f);
  // top-p 0.5 after top-k 2: ascending order 1 (0.212), 2 (0.212), 0 (0.576): cumsums 0.212, 0.424 <= 0.5
  // are dropped; token 0 alone remains.
  r = run({1.0f, 2, 0.5f, 0.0f});
  CHECK(r == std::vector<float>{1, 0, 0, 0, 0, 0});
  // min-p 0.3 keeps p >= 0.3 max p: e^-1 = 0.37 passes, e^-2 = 0.135 does not.
  r = run({1.0f, 0, 1.0f, 0.3f});
  CHECK(r[3] == 0.0f);
  CHECK(r[2] > 0.0f);
  // Temperature 0: one-hot at the argmax.
  r = run({0.0f, 0, 1.0f, 0.0f});
  CHECK(r == std::vector<float>{1, 0, 0, 0, 0, 0});
  // Per-row parameters and bad input.
  const sampling::sampling_params bad_t{-1.0f, 0, 1.0f, 0.0f}, bad_k{1.0f, 7, 1.0f, 0.0f}, bad_p{1.0f, 0, 0.0f, 0.0f};
  CHECK(error_of([&] { run(bad_t); }).find("temperature = -1") != std::string::npos);
  CHECK(error_of([&] { run(bad_k); }).find("top_k = 7") != std::string::npos);
  CHECK(error_of([&] { run(bad_p); }).find("top_p = 0") != std::string::npos);
  const std::vector<float> nan_logits = {0, NAN, 1, 2, 3, 4};
  const sampling::sampling_params plain{};
  CHECK(error_of([&] {
          sampling::target_probabilities(specdec::as_matrix(nan_logits, 1, 6), std::span(&plain, 1), specdec::as_matrix(probs, 1, 6));
        }).find("logits[0, 1] = nan") != std::string::npos);
}

TEST_CASE_TEMPLATE("verifiers reject bad input with a clear error; no draft consumes nothing", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 4;
  std::vector<float> p = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
  auto target = h.up(p);
  const auto rows = target.matrix(2, v);
  const specdec::draft_tree chain = sampling::make_chain(0, std::vector<std::int32_t>{1});
  const std::vector<double> u = {0.5, 0.5};
  sampling::speculative_request request{chain, 0, {}, sampling::uniform_stream::values(u)};
  const auto verify = [&](sampling::speculative_options o = {}) {
    return sampling::verify_speculative(h.b, {rows}, std::span(&request, 1), o);
  };
  sampling::speculative_options lenient;
  lenient.lenience = 1.5f;
  CHECK(error_of([&] { verify(lenient); }).find("lenience = 1.5") != std::string::npos);
  const std::vector<double> bad_u = {1.0, 0.5};
  request.uniforms = sampling::uniform_stream::values(bad_u);
  CHECK(error_of([&] { verify(); }).find("requests[].uniforms[0, 0] = 1; expected a value in [0, 1)") != std::string::npos);
  const std::vector<double> short_u = {};
  request.uniforms = sampling::uniform_stream::values(short_u);
  CHECK(error_of([&] { verify(); }).find("request 0 needs uniform 0 but requests[].uniforms has 0 columns") != std::string::npos);
  request.uniforms = sampling::uniform_stream::values(u);
  const specdec::draft_tree wide = sampling::make_chain(0, std::vector<std::int32_t>{7});
  request.tree = wide;
  CHECK(error_of([&] { verify(); }).find("node 1 has token 7; expected a token id in [0, V = 4)") != std::string::npos);
  const specdec::draft_tree longer = sampling::make_chain(0, std::vector<std::int32_t>{1, 2});
  request.tree = longer;
  CHECK(error_of([&] { verify(); }).find("needs target rows [0, 3) but the target has 2 rows") != std::string::npos);
  // A target row that is not a distribution is caught where it is read in full.
  std::vector<float> unnormalised = {0.5f, 0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 0.25f};
  auto bad_rows = h.up(unnormalised);
  const std::vector<double> reject = {0.9, 0.5};
  const specdec::draft_tree root_only = specdec::make_tree({0}, {-1});
  request.tree = root_only;
  request.uniforms = sampling::uniform_stream::values(reject);
  CHECK(error_of([&] { sampling::verify_speculative(h.b, {bad_rows.matrix(2, v)}, std::span(&request, 1)); })
            .find("sums to 2") != std::string::npos);
  // A request without drafts and with a caller bonus consumes no uniform.
  request.bonus_token = 3;
  const auto r = verify().at(0);
  CHECK(r.uniforms_consumed == 0);
  CHECK(r.tokens == std::vector<std::int32_t>{3});
  // The same Philox seed gives the same decisions (and the backends agree: the draws are host code over
  // the canonical order, checked in the conformance suite).
  request.tree = chain;
  request.bonus_token = std::nullopt;
  request.uniforms = sampling::uniform_stream::philox({123, 4});
  CHECK(verify().at(0).tokens == verify().at(0).tokens);
}

TEST_CASE_TEMPLATE("the final draw picks the token row_sample and row_sample_residual pick", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 3000;  // three sampling chunks
  const auto p = conformance::random_probs(71, 2, v).data;
  const auto q = conformance::random_probs(72, 1, v).data;
  auto target = h.up(p);
  auto draft = h.up(q);
  for (const double u : {0.0, 0.125, 0.5, 0.90625, 0.99609375}) {  // exact in float: the backends take float uniforms
    CAPTURE(u);
    // Bonus draw from row 0 (a root-only tree) against row_sample.
    const specdec::draft_tree root_only = specdec::make_tree({0}, {-1});
    const std::vector<double> stream = {u};
    sampling::speculative_request bonus{root_only, 0, {}, sampling::uniform_stream::values(stream)};
    const auto got = sampling::verify_speculative(h.b, {target.matrix(2, v)}, std::span(&bonus, 1)).at(0).tokens.at(0);
    const std::vector<float> uf = {static_cast<float>(u)};
    auto ub = h.up(uf);
    auto token = h.b.template allocate<std::int32_t>(1);
    const specdec::matrix_view<const float, typename B::memory_space> row0(target.view().data(), 1, v);
    h.b.row_sample(row0, specdec::vector_view<const float, typename B::memory_space>(ub.view().data(), 1), token.view());
    CHECK(got == h.down(token).at(0));
    // Residual draw after a rejection (p(x) / q(x) < u forced by u close to 1) against row_sample_residual.
    std::int32_t x = 0;
    for (index_t j = 0; j < v; ++j)
      if (p[static_cast<std::size_t>(j)] < q[static_cast<std::size_t>(j)]) x = static_cast<std::int32_t>(j);
    const specdec::draft_tree chain = sampling::make_chain(0, std::vector<std::int32_t>{x});
    const std::vector<index_t> draft_rows = {-1, 0};
    const std::vector<double> residual_stream = {0.9999999, u};
    sampling::speculative_request rejected{chain, 0, draft_rows, sampling::uniform_stream::values(residual_stream)};
    const auto res = sampling::verify_speculative(h.b, {target.matrix(2, v), draft.matrix(1, v)}, std::span(&rejected, 1)).at(0);
    REQUIRE(res.accepted_nodes.empty());
    h.b.row_sample_residual(row0, specdec::matrix_view<const float, typename B::memory_space>(draft.view().data(), 1, v),
                            specdec::vector_view<const float, typename B::memory_space>(ub.view().data(), 1), token.view());
    CHECK(res.tokens.at(0) == h.down(token).at(0));
  }
}

// The logits form softens only the rows its walk reads; its decisions must be those of the
// probability form over the whole softmaxed matrix, with and without draft rows.
TEST_CASE_TEMPLATE("verify_speculative_logits decides as verify_speculative over row_softmax", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 50;
  const auto tree = specdec::make_tree({0, 1, 2, 3, 1, 4, 5, 2}, {-1, 0, 0, 0, 1, 1, 2, 4});
  const index_t n = tree.size();
  const auto logits = conformance::random_logits(81, n, v, 3.0f).data;
  const auto q = conformance::random_probs(82, n, v).data;
  auto target_logits = h.up(logits);
  auto draft = h.up(q);
  for (const float temperature : {0.5f, 1.0f, 1.7f}) {
    CAPTURE(temperature);
    auto probs = h.b.template allocate<float>(n * v);
    h.b.row_softmax(target_logits.matrix(n, v), temperature,
                    specdec::matrix_view<float, typename B::memory_space>(probs.view().data(), n, v));
    const specdec::matrix_view<const float, typename B::memory_space> prob_rows(probs.view().data(), n, v);
    for (const bool with_drafts : {false, true}) {
      std::vector<index_t> rows;
      if (with_drafts)
        for (index_t i = 0; i < n; ++i) rows.push_back(i == 0 ? -1 : i);
      std::vector<sampling::speculative_request> requests;
      for (std::uint64_t seed = 0; seed < 200; ++seed)
        requests.push_back({tree, 0, rows, sampling::uniform_stream::philox({seed, 9}), temperature});
      const auto draft_rows = with_drafts ? draft.matrix(n, v) : decltype(draft.matrix(n, v)){};
      const auto want = sampling::verify_speculative(h.b, {prob_rows, draft_rows}, requests);
      const auto got = sampling::verify_speculative_logits(h.b, {target_logits.matrix(n, v), draft_rows}, requests);
      REQUIRE(got.size() == want.size());
      index_t accepted = 0;
      for (std::size_t r = 0; r < got.size(); ++r) {
        CHECK(got[r].tokens == want[r].tokens);
        CHECK(got[r].accepted_nodes == want[r].accepted_nodes);
        CHECK(got[r].uniforms_consumed == want[r].uniforms_consumed);
        accepted += static_cast<index_t>(want[r].accepted_nodes.size());
      }
      CHECK(accepted > 0);  // the comparison covers descents, not only root rejections
    }
  }
  const std::vector<double> u = {0.5, 0.5};
  sampling::speculative_request one{tree, 0, {}, sampling::uniform_stream::values(u), 0.0f};
  CHECK(error_of([&] { sampling::verify_speculative_logits(h.b, {target_logits.matrix(n, v)}, std::span(&one, 1)); })
            .find("request 0 has temperature 0; expected a finite temperature > 0") != std::string::npos);
  one.temperature = 1.0f;
  auto with_nan = logits;
  with_nan[3] = std::nanf("");
  auto nan_rows = h.up(with_nan);
  CHECK(error_of([&] { sampling::verify_speculative_logits(h.b, {nan_rows.matrix(n, v)}, std::span(&one, 1)); })
            .find("NaN") != std::string::npos);
}

// bf16 / fp16 logits are softened as row_softmax softens them (entries widened, exact): every decision
// must be the float logits' of the same values, with float or 16-bit draft rows, greedy requests mixed
// in, and under a grammar bitmask (masked argmax and masked softmax of a widened row).
template <class B, class L, class D>
void check_half_logits(index_t v, std::uint64_t seed, index_t& accepted, index_t& compared) {
  conformance::harness<B> h;
  const auto tree = specdec::make_tree({0, 1, 2, 3, 1, 4, 5, 2}, {-1, 0, 0, 0, 1, 1, 2, 4});
  const index_t n = tree.size();
  auto logits = conformance::random_logits(seed, n, v, 3.0f).data;
  const auto q = conformance::random_probs(seed + 1, n, v).data;
  for (std::size_t j = 5; j < logits.size(); j += 11) logits[j] = -std::numeric_limits<float>::infinity();
  for (std::size_t j = 3; j < logits.size(); j += 7) logits[j] = std::round(logits[j]);  // ties
  // The tree's tokens likely under the target, so walks descend.
  for (index_t i = 1; i < n; ++i)
    logits[static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(i)] * v + tree.token[static_cast<std::size_t>(i)])] = 4.0f;
  std::vector<L> half(logits.size());
  std::vector<float> widened(logits.size());
  for (std::size_t j = 0; j < logits.size(); ++j) {
    half[j] = specdec::narrow<L>(logits[j]);
    widened[j] = specdec::widen(half[j]);
  }
  std::vector<D> q_half(q.size());
  std::vector<float> q_widened(q.size());
  for (std::size_t j = 0; j < q.size(); ++j) {
    q_half[j] = specdec::narrow<D>(q[j]);
    q_widened[j] = specdec::widen(q_half[j]);
  }
  const index_t words = (v + 31) / 32;
  std::vector<std::int32_t> mask(static_cast<std::size_t>(n * words));
  for (std::size_t w = 0; w < mask.size(); ++w) mask[w] = static_cast<std::int32_t>(0x9e3779b9u * static_cast<std::uint32_t>(w + seed) | 1u);
  for (index_t i = 1; i < n; ++i) {  // the drafted tokens allowed
    const auto parent = static_cast<index_t>(tree.parent[static_cast<std::size_t>(i)]);
    const auto token = tree.token[static_cast<std::size_t>(i)];
    mask[static_cast<std::size_t>(parent * words + token / 32)] |= static_cast<std::int32_t>(1u << (token % 32));
  }
  auto half_d = h.up(half);
  auto float_d = h.up(widened);
  auto q_half_d = h.up(q_half);
  auto q_float_d = h.up(q_widened);
  std::vector<index_t> rows;
  for (index_t i = 0; i < n; ++i) rows.push_back(i == 0 ? -1 : i);
  for (const bool masked : {false, true})
    for (const bool with_drafts : {false, true}) {
      std::vector<sampling::speculative_request> requests;
      for (std::uint64_t s = 0; s < 40; ++s) {
        sampling::speculative_request req{tree, 0, {}, sampling::uniform_stream::philox({s, seed}), s % 3 == 0 ? 0.6f : 1.3f};
        if (with_drafts) req.draft_rows = rows;  // a span: `rows` outlives the requests
        req.greedy = s % 5 == 0;
        requests.push_back(req);
      }
      sampling::speculative_rows<typename B::memory_space, L, D> half_rows;
      half_rows.target = half_d.matrix(n, v);
      if (with_drafts) half_rows.draft = q_half_d.matrix(n, v);
      sampling::speculative_rows<typename B::memory_space> float_rows;
      float_rows.target = float_d.matrix(n, v);
      if (with_drafts) float_rows.draft = q_float_d.matrix(n, v);
      if (masked) {
        half_rows.target_bitmask = specdec::matrix_view<const std::int32_t>(mask.data(), n, words);
        float_rows.target_bitmask = half_rows.target_bitmask;
      }
      CAPTURE(v);
      CAPTURE(masked);
      CAPTURE(with_drafts);
      const auto got = sampling::verify_speculative_logits(h.b, half_rows, requests);
      const auto want = sampling::verify_speculative_logits(h.b, float_rows, requests);
      REQUIRE(got.size() == want.size());
      for (std::size_t r = 0; r < got.size(); ++r) {
        CHECK(got[r].tokens == want[r].tokens);
        CHECK(got[r].accepted_nodes == want[r].accepted_nodes);
        CHECK(got[r].uniforms_consumed == want[r].uniforms_consumed);
        accepted += static_cast<index_t>(want[r].accepted_nodes.size());
        ++compared;
      }
    }
}

TEST_CASE_TEMPLATE("verify_speculative_logits over bf16 / fp16 logits decides as over the float logits of the same values", B,
                   SPECDEC_SAMPLER_BACKENDS) {
  index_t accepted = 0, compared = 0;
  for (const index_t v : {index_t{50}, index_t{2048 + 333}})
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      check_half_logits<B, specdec::bfloat16, specdec::bfloat16>(v, seed * 10, accepted, compared);
      check_half_logits<B, specdec::float16, float>(v, seed * 10 + 3, accepted, compared);
      check_half_logits<B, specdec::bfloat16, float>(v, seed * 10 + 5, accepted, compared);
    }
  CHECK(compared == 2 * 2 * 3 * 4 * 40);
  CHECK(accepted > compared / 2);  // the walks descend: the comparison covers acceptance, not only rejections
}

// vLLM's mixed batches: greedy requests (temperature 0) beside sampled ones in one call. Each greedy
// request decides exactly as verify_greedy alone and reads no uniform; each sampled request decides
// exactly as it would alone, whatever sits beside it.
TEST_CASE_TEMPLATE("a batch mixes greedy and sampled requests, each deciding as it would alone", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 40;
  const auto tree = specdec::make_tree({0, 3, 4, 5, 3, 6, 7}, {-1, 0, 0, 0, 1, 1, 4});
  const index_t n = tree.size();
  const index_t requests_count = 12;
  auto logits = conformance::random_logits(95, requests_count * n, v, 2.0f).data;
  for (index_t row = 0; row < requests_count * n; row += 2) logits[static_cast<std::size_t>(row * v + 3 + row % 5)] = 6.0f;  // descents
  const auto q = conformance::random_probs(96, n, v).data;
  auto target = h.up(logits);
  auto draft = h.up(q);
  const auto target_rows = target.matrix(requests_count * n, v);
  std::vector<index_t> draft_rows;
  for (index_t i = 0; i < n; ++i) draft_rows.push_back(i == 0 ? -1 : i);
  std::vector<sampling::speculative_request> mixed;
  for (index_t r = 0; r < requests_count; ++r) {
    sampling::speculative_request one{tree, r * n, draft_rows, sampling::uniform_stream::philox({static_cast<std::uint64_t>(r), 4}), 0.8f};
    one.greedy = r % 3 == 1;
    if (one.greedy) one.uniforms = {};  // a greedy request needs no randomness at all
    mixed.push_back(one);
  }
  for (const bool from_logits : {true, false}) {
    CAPTURE(from_logits);
    auto probs = h.b.template allocate<float>(requests_count * n * v);
    h.b.row_softmax(target_rows, 0.8f,
                    specdec::matrix_view<float, typename B::memory_space>(probs.view().data(), requests_count * n, v));
    const specdec::matrix_view<const float, typename B::memory_space> prob_rows(probs.view().data(), requests_count * n, v);
    const auto verify = [&](std::span<const sampling::speculative_request> requests) {
      return from_logits ? sampling::verify_speculative_logits(h.b, {target_rows, draft.matrix(n, v)}, requests)
                         : sampling::verify_speculative(h.b, {prob_rows, draft.matrix(n, v)}, requests);
    };
    const auto got = verify(mixed);
    REQUIRE(got.size() == mixed.size());
    index_t greedy_accepted = 0;
    for (std::size_t r = 0; r < mixed.size(); ++r) {
      CAPTURE(r);
      const auto alone = mixed[r].greedy ? sampling::verify_greedy(h.b, from_logits ? target_rows : prob_rows, std::span(&mixed[r], 1))
                                         : verify(std::span(&mixed[r], 1));
      CHECK(got[r].tokens == alone.at(0).tokens);
      CHECK(got[r].accepted_nodes == alone.at(0).accepted_nodes);
      CHECK(got[r].uniforms_consumed == alone.at(0).uniforms_consumed);
      if (mixed[r].greedy) {
        CHECK(got[r].uniforms_consumed == 0);
        greedy_accepted += static_cast<index_t>(got[r].accepted_nodes.size());
      }
    }
    CHECK(greedy_accepted > 0);  // the greedy walks descend, not only stop at the root
  }
  // Errors name the request by its place in the batch.
  auto broken = mixed;
  broken[4].target_row = requests_count * n;
  CHECK(error_of([&] { sampling::verify_speculative_logits(h.b, {target_rows, draft.matrix(n, v)}, broken); })
            .find("request 4 needs target rows") != std::string::npos);
}

// Greedy on the backend (lazy per visited row on host backends) against a scalar walk over the
// scalar argmax of every row; planted maxima make walks descend, ties go to the lower index.
TEST_CASE_TEMPLATE("verify_greedy on the backend matches a scalar greedy walk", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 300;
  const auto tree = specdec::make_tree({0, 5, 6, 7, 5, 8, 9, 6, 7}, {-1, 0, 0, 0, 1, 1, 2, 4, 4});
  const index_t n = tree.size();
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    CAPTURE(seed);
    auto logits = conformance::random_logits(90 + seed, 2 * n, v, 2.0f).data;
    const specdec::philox_stream plant{seed, 3};
    for (index_t row = 0; row < 2 * n; ++row) {
      const auto token = static_cast<index_t>(5 + plant.uniform(static_cast<std::uint64_t>(row)) * 5.0f);  // 5..9
      logits[static_cast<std::size_t>(row * v + token)] = 10.0f;
      if (row % 3 == 0) logits[static_cast<std::size_t>(row * v + 2)] = 10.0f;  // a tie the lower index wins
    }
    auto rows = h.up(logits);
    std::vector<sampling::speculative_request> requests(2);
    requests[0] = {tree, 0};
    requests[1] = {tree, n};
    requests[1].max_accepted = 1;
    const auto got = sampling::verify_greedy(h.b, rows.matrix(2 * n, v), requests);
    for (std::size_t r = 0; r < 2; ++r) {
      std::vector<std::int32_t> want;
      index_t node = 0;
      for (;;) {
        const float* x = logits.data() + (requests[r].target_row + node) * v;
        const auto best = static_cast<std::int32_t>(std::max_element(x, x + v) - x);
        want.push_back(best);
        const bool capped = requests[r].max_accepted >= 0 && static_cast<index_t>(want.size()) > requests[r].max_accepted;
        index_t next = -1;
        for (index_t c = 1; c < n && !capped; ++c)
          if (tree.parent[static_cast<std::size_t>(c)] == node && tree.token[static_cast<std::size_t>(c)] == best) {
            next = c;
            break;
          }
        if (next < 0) break;
        node = next;
      }
      CHECK(got.at(r).tokens == want);
    }
  }
}

namespace {
/// vLLM v0's TypicalAcceptanceSampler for one chain, transcribed from its tensor code: the predicate
/// in fp32 per position (entropy with 1e-5 inside the log), `limits` = first rejected position (k when
/// none), drafts before it, the recovered token (target argmax) at it, and the bonus token at k when
/// nothing was rejected (-1 when bonus tokens are disabled). Output `[k + 1]`, -1 padded.
std::vector<std::int32_t> vllm_v0_typical(const std::vector<float>& probs, index_t v, const std::vector<std::int32_t>& drafts,
                                          std::int32_t bonus, bool disable_bonus, float threshold, float alpha) {
  const auto k = static_cast<index_t>(drafts.size());
  index_t limit = k;
  for (index_t i = 0; i < k && limit == k; ++i) {
    const float* p = probs.data() + i * v;
    float entropy = 0.0f;
    for (index_t j = 0; j < v; ++j) entropy -= p[j] * std::log(p[j] + 1e-5f);
    const float bar = std::min(threshold, std::exp(-entropy) * alpha);
    if (!(p[drafts[static_cast<std::size_t>(i)]] > bar)) limit = i;
  }
  std::vector<std::int32_t> out(static_cast<std::size_t>(k + 1), -1);
  for (index_t i = 0; i < limit; ++i) out[static_cast<std::size_t>(i)] = drafts[static_cast<std::size_t>(i)];
  if (limit < k) {
    const float* p = probs.data() + limit * v;
    out[static_cast<std::size_t>(limit)] = static_cast<std::int32_t>(std::max_element(p, p + v) - p);
  } else if (!disable_bonus) {
    out[static_cast<std::size_t>(k)] = bonus;
  }
  return out;
}
}  // namespace

TEST_CASE_TEMPLATE("typical acceptance: vLLM v0's convention (k rows, caller's bonus token) beside Medusa's", B,
                   SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  using space = typename B::memory_space;
  const index_t v = 24, k = 4;
  // vLLM's own test scenarios: a flat target accepts everything (then the bonus token); a one-hot
  // target with drafts that miss emits only its argmax at position 0; and random targets whose drafts
  // are partly their argmax give partial acceptance, over a batch, at non-default posteriors.
  std::vector<float> flat(static_cast<std::size_t>(k * v), 1.0f / static_cast<float>(v));
  std::vector<float> one_hot(static_cast<std::size_t>(k * v), 0.0f);
  for (index_t i = 0; i < k; ++i) one_hot[static_cast<std::size_t>(i * v + 5 + i)] = 1.0f;
  struct scenario {
    std::vector<float> probs;
    std::vector<std::int32_t> drafts;
  };
  std::vector<scenario> batch = {{flat, {3, 7, 11, 0}}, {one_hot, {4, 6, 7, 8}}};
  for (std::uint64_t s = 0; s < 6; ++s) {
    const auto m = conformance::random_probs(900 + s, k, v, 3.0f);
    std::vector<std::int32_t> drafts;
    for (index_t i = 0; i < k; ++i) {
      const float* row = m.data.data() + i * v;
      const auto top = static_cast<std::int32_t>(std::max_element(row, row + v) - row);
      drafts.push_back(i < static_cast<index_t>(s % 5) ? top : static_cast<std::int32_t>((top + 1 + i) % v));
    }
    batch.push_back({m.data, drafts});
  }
  std::vector<float> all;
  std::vector<specdec::draft_tree> trees;
  for (const auto& sc : batch) {
    all.insert(all.end(), sc.probs.begin(), sc.probs.end());
    trees.push_back(sampling::make_chain(1, sc.drafts));
  }
  auto rows = h.up(all);
  const auto n_requests = static_cast<index_t>(batch.size());
  for (const bool disable_bonus : {false, true}) {
    for (const auto& [threshold, alpha] : {std::pair{0.09f, 0.3f}, std::pair{0.3f, 0.09f}}) {
      std::vector<sampling::speculative_request> requests(batch.size());
      for (std::size_t r = 0; r < batch.size(); ++r) {
        requests[r].tree = trees[r];
        requests[r].target_row = static_cast<index_t>(r) * k;  // k rows per request: vLLM's layout
        requests[r].bonus_token = static_cast<std::int32_t>(20 + r % 4);
      }
      sampling::typical_options options;
      options.epsilon = threshold;
      options.delta = alpha;
      options.convention = sampling::typical_convention::vllm_v0;
      options.emit_bonus = !disable_bonus;
      const auto got = sampling::verify_typical(h.b, specdec::matrix_view<const float, space>(rows.view().data(), n_requests * k, v),
                                                requests, options);
      const auto padded = sampling::padded_tokens(got, k + 1);
      for (std::size_t r = 0; r < batch.size(); ++r) {
        CAPTURE(r);
        const auto want = vllm_v0_typical(batch[r].probs, v, batch[r].drafts, *requests[r].bonus_token, disable_bonus, threshold, alpha);
        CHECK(std::vector<std::int32_t>(padded.begin() + static_cast<std::ptrdiff_t>(r) * (k + 1),
                                        padded.begin() + static_cast<std::ptrdiff_t>(r + 1) * (k + 1)) == want);
        CHECK(got[r].bonus == (got[r].accepted_nodes.size() == static_cast<std::size_t>(k)));
      }
      // The scenarios cover what they claim: the flat row accepts all, the one-hot one nothing.
      CHECK(got[0].accepted_nodes.size() == static_cast<std::size_t>(k));
      CHECK(got[1].tokens == std::vector<std::int32_t>{5});
    }
  }
  // Medusa's convention on the same chains reads a row per node (k + 1) and ends with the argmax of
  // the last accepted node's row, never a caller's token.
  std::vector<float> with_leaf_rows;
  for (const auto& sc : batch) {
    with_leaf_rows.insert(with_leaf_rows.end(), sc.probs.begin(), sc.probs.end());
    with_leaf_rows.insert(with_leaf_rows.end(), one_hot.begin(), one_hot.begin() + v);  // leaf row: argmax 5
  }
  auto medusa_rows = h.up(with_leaf_rows);
  std::vector<sampling::speculative_request> requests(batch.size());
  for (std::size_t r = 0; r < batch.size(); ++r) {
    requests[r].tree = trees[r];
    requests[r].target_row = static_cast<index_t>(r) * (k + 1);
    requests[r].bonus_token = 23;
  }
  const auto medusa = sampling::verify_typical(
      h.b, specdec::matrix_view<const float, space>(medusa_rows.view().data(), n_requests * (k + 1), v), requests);
  CHECK(medusa[0].tokens == std::vector<std::int32_t>{3, 7, 11, 0, 5});
  // Errors: vLLM's convention needs the bonus token when everything is accepted; and k rows suffice
  // for it where Medusa's needs k + 1.
  requests[0].bonus_token.reset();
  requests[0].target_row = 0;
  sampling::typical_options vllm;
  vllm.convention = sampling::typical_convention::vllm_v0;
  CHECK(error_of([&] {
          (void)sampling::verify_typical(h.b, specdec::matrix_view<const float, space>(rows.view().data(), k, v),
                                         std::span(requests.data(), 1), vllm);
        }).find("request 0 has no bonus_token") != std::string::npos);
  CHECK(error_of([&] {
          (void)sampling::verify_typical(h.b, specdec::matrix_view<const float, space>(rows.view().data(), k, v),
                                         std::span(requests.data(), 1));
        }).find("needs target rows [0, 5) but the target has 4 rows") != std::string::npos);
}

// The output forms write, into caller buffers in the backend's memory space, exactly what the
// returning forms return: tokens padded with -1, accepted counts, accepted nodes, uniforms consumed,
// re-test counts, final distributions; strided rows (a wider caller matrix) leave the columns past the
// view alone; a buffer too small for the deepest path fails before any work.
TEST_CASE_TEMPLATE("every verifier's output form writes what its returning form returns", B, SPECDEC_SAMPLER_BACKENDS) {
  conformance::harness<B> h;
  using space = typename B::memory_space;
  const index_t v = 24;
  // Engine-owned arrays, viewed (no draft_tree): a 7-node tree, and a chain beside it.
  const std::vector<std::int32_t> tokens = {0, 3, 4, 5, 3, 6, 7}, parents = {-1, 0, 0, 0, 1, 1, 4}, depths = {0, 1, 1, 1, 2, 2, 3};
  const specdec::tree_view tree(tokens, parents, depths);
  const specdec::draft_tree chain = sampling::make_chain(1, std::vector<std::int32_t>{3, 3, 3});
  static_assert(!std::is_constructible_v<specdec::tree_view, specdec::draft_tree&&>, "a temporary tree would dangle");
  const index_t batch = 9, n = tree.size();
  auto logits = conformance::random_logits(123, batch * n, v, 2.0f).data;
  for (index_t row = 0; row < batch * n; row += 2) logits[static_cast<std::size_t>(row * v + 3 + row % 5)] = 5.0f;  // descents
  auto logit_rows = h.up(logits);
  auto probs = h.b.template allocate<float>(batch * n * v);
  h.b.row_softmax(logit_rows.matrix(batch * n, v), 1.0f, specdec::matrix_view<float, space>(probs.view().data(), batch * n, v));
  const specdec::matrix_view<const float, space> prob_rows(probs.view().data(), batch * n, v);
  std::vector<sampling::speculative_request> requests;
  for (index_t r = 0; r < batch; ++r) {
    sampling::speculative_request q;
    q.tree = r % 3 == 2 ? specdec::tree_view(chain) : tree;
    q.target_row = r * n;
    q.uniforms = sampling::uniform_stream::philox({static_cast<std::uint64_t>(r), 77});
    q.greedy = r == 4;
    q.max_accepted = r == 5 ? 1 : -1;
    requests.push_back(q);
  }
  const index_t width = 5, stride = 7;  // wider than the deepest path + 1 (4), rows 7 apart
  const auto check = [&](const std::vector<sampling::speculative_result>& want, auto&& write, bool has_final) {
    auto out_tokens = h.up(std::vector<std::int32_t>(static_cast<std::size_t>(batch * stride), 99));
    auto out_accepted = h.up(std::vector<std::int32_t>(static_cast<std::size_t>(batch), 99));
    auto out_nodes = h.up(std::vector<std::int32_t>(static_cast<std::size_t>(batch * (width - 1)), 99));
    auto out_uniforms = h.up(std::vector<std::int32_t>(static_cast<std::size_t>(batch), 99));
    auto out_final = h.up(std::vector<float>(static_cast<std::size_t>(batch * v), 99.0f));
    sampling::verify_outputs<space> out;
    out.tokens = specdec::matrix_view<std::int32_t, space>(out_tokens.view().data(), batch, width, stride, 1);
    out.accepted = out_accepted.view();
    out.accepted_nodes = out_nodes.matrix(batch, width - 1);
    out.uniforms_consumed = out_uniforms.view();
    if (has_final) out.final_distributions = out_final.matrix(batch, v);
    write(out);
    const auto got_tokens = h.down(out_tokens), got_accepted = h.down(out_accepted), got_nodes = h.down(out_nodes),
               got_uniforms = h.down(out_uniforms);
    const auto got_final = h.down(out_final);
    REQUIRE(want.size() == static_cast<std::size_t>(batch));
    for (std::size_t r = 0; r < want.size(); ++r) {
      CAPTURE(r);
      for (index_t c = 0; c < stride; ++c) {
        const auto k = static_cast<std::size_t>(c);
        CHECK(got_tokens[r * stride + k] == (c >= width ? 99 : k < want[r].tokens.size() ? want[r].tokens[k] : -1));
      }
      for (std::size_t c = 0; c + 1 < static_cast<std::size_t>(width); ++c)
        CHECK(got_nodes[r * (width - 1) + c] == (c < want[r].accepted_nodes.size() ? want[r].accepted_nodes[c] : -1));
      CHECK(got_accepted[r] == static_cast<std::int32_t>(want[r].accepted_nodes.size()));
      CHECK(got_uniforms[r] == want[r].uniforms_consumed);
      for (std::size_t j = 0; j < static_cast<std::size_t>(v); ++j)
        CHECK(got_final[r * v + j] == (!has_final ? 99.0f : want[r].final_distribution.empty() ? 0.0f : want[r].final_distribution[j]));
    }
  };
  sampling::speculative_options options;
  options.keep_final_distribution = true;
  const auto sampled = sampling::verify_speculative(h.b, {prob_rows}, requests, options);
  check(sampled, [&](const auto& out) { sampling::verify_speculative(h.b, {prob_rows}, requests, {}, out); }, true);
  auto at_temperature = requests;
  for (auto& q : at_temperature) q.temperature = 0.7f;
  check(sampling::verify_speculative_logits(h.b, {logit_rows.matrix(batch * n, v)}, at_temperature, options),
        [&](const auto& out) { sampling::verify_speculative_logits(h.b, {logit_rows.matrix(batch * n, v)}, at_temperature, {}, out); },
        true);
  check(sampling::verify_greedy(h.b, prob_rows, requests),
        [&](const auto& out) { sampling::verify_greedy(h.b, prob_rows, requests, out); }, false);
  check(sampling::verify_coin_tree(h.b, prob_rows, requests, {.keep_final_distribution = true}),
        [&](const auto& out) { sampling::verify_coin_tree(h.b, prob_rows, requests, {}, out); }, true);
  check(sampling::verify_typical(h.b, prob_rows, requests, {.epsilon = 0.05f}),
        [&](const auto& out) { sampling::verify_typical(h.b, prob_rows, requests, {.epsilon = 0.05f}, out); }, false);
  index_t accepted = 0;
  for (const auto& r : sampled) accepted += static_cast<index_t>(r.accepted_nodes.size());
  CHECK(accepted > 0);  // the walks descend

  // Too narrow for the deepest path (depth 3: 4 tokens), or the wrong batch: named, before any work.
  auto small = h.up(std::vector<std::int32_t>(static_cast<std::size_t>(batch * 3), 0));
  sampling::verify_outputs<space> narrow;
  narrow.tokens = small.matrix(batch, 3);
  CHECK(error_of([&] { sampling::verify_speculative(h.b, {prob_rows}, requests, {}, narrow); })
            .find("outputs.tokens is 9 x 3; expected 9 rows (one per request) and at least 4 columns") != std::string::npos);
  CHECK(h.down(small) == std::vector<std::int32_t>(static_cast<std::size_t>(batch * 3), 0));
  narrow.tokens = small.matrix(3, 9);
  CHECK(error_of([&] { sampling::verify_greedy(h.b, prob_rows, requests, narrow); }).find("expected 9 rows") != std::string::npos);
  // A depth cap narrows what a request can emit: capped at 2, a width of 3 is enough.
  auto capped = requests;
  for (auto& q : capped) q.max_accepted = 2;
  narrow.tokens = small.matrix(batch, 3);
  sampling::verify_coin_tree(h.b, prob_rows, capped, {}, narrow);
  const auto want = sampling::verify_coin_tree(h.b, prob_rows, capped);
  const auto got = h.down(small);
  for (std::size_t r = 0; r < want.size(); ++r) CHECK(got[r * 3] == want[r].tokens.at(0));
}

// A multi-row softmax prefetches the next row under each row's exponentials and, from 1 MiB of output,
// streams its stores past the caches (where the output is aligned for them): neither may change a bit.
// Each row of a 7-row call, into an aligned buffer, a misaligned one and in place, must equal that
// row softmaxed alone and the entries of its normaliser, in the wide-vector body, the narrow-vector
// block after it (V = 45021: 13 entries past the last 16-entry block) and the scalar tail.
TEST_CASE_TEMPLATE("a multi-row softmax writes each row's own entries, bit for bit, aligned or not and in place", B,
                   specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  B b;
  constexpr index_t rows = 7;
  for (const index_t v : {index_t{40000}, index_t{45021}}) {
    CAPTURE(v);
    static_assert(rows * 40000 * sizeof(float) >= specdec::detail::streaming_softmax_bytes);
    const auto logits = conformance::random_logits(static_cast<std::uint64_t>(v) + 5, rows, v, 6.0f).data;
    const specdec::matrix_view<const float> all(logits.data(), rows, v);
    std::vector<float> alone(static_cast<std::size_t>(rows * v));
    for (index_t r = 0; r < rows; ++r)
      b.row_softmax(specdec::matrix_view<const float>(logits.data() + r * v, 1, v), 0.7f,
                    specdec::matrix_view<float>(alone.data() + r * v, 1, v));
    for (index_t r = 0; r < rows; ++r) {
      const auto stats = b.row_softmax_stats(specdec::matrix_view<const float>(logits.data() + r * v, 1, v), 0.7f);
      index_t differ = 0;
      for (index_t j = 0; j < v; ++j)
        differ += specdec::detail::exp_shifted_at(logits.data() + r * v, v, j, stats.max, 1.0f / 0.7f, 1.0f / stats.sum) !=
                  alone[static_cast<std::size_t>(r * v + j)];
      CHECK(differ == 0);
    }
    // Output at a 64-byte boundary (aligned for any vector), one float past it (aligned for none: the
    // streamed stores start after a partial vector) and four floats past it (16 bytes, numpy's and
    // malloc's alignment).
    std::vector<float> buffer(static_cast<std::size_t>(rows * v + 32));
    std::size_t aligned = 0;
    while (reinterpret_cast<std::uintptr_t>(buffer.data() + aligned) % 64 != 0) ++aligned;
    for (const std::size_t offset : {aligned, aligned + 1, aligned + 4}) {
      CAPTURE(offset - aligned);
      std::fill(buffer.begin(), buffer.end(), -1.0f);
      b.row_softmax(all, 0.7f, specdec::matrix_view<float>(buffer.data() + offset, rows, v));
      CHECK(std::equal(alone.begin(), alone.end(), buffer.begin() + static_cast<std::ptrdiff_t>(offset)));
    }
    std::vector<float> in_place = logits;
    b.row_softmax(specdec::matrix_view<const float>(in_place.data(), rows, v), 0.7f,
                  specdec::matrix_view<float>(in_place.data(), rows, v));
    CHECK(in_place == alone);
  }
}

// Stochastic verification from logits tests a child from its row's softmax normaliser alone
// (row_softmax_stats + exp_shifted_at): every entry must be bit for bit the entry row_softmax writes,
// on every host backend, in the vector body and the scalar tail of the row, at any temperature.
TEST_CASE_TEMPLATE("a softmax entry from the row's normaliser is the row_softmax entry, bit for bit", B, specdec::eigen,
                   specdec::thrust_backend<specdec::thrust_system::cpp>, specdec::thrust_backend<specdec::thrust_system::omp>) {
  B b;
  for (const index_t v : {index_t{1}, index_t{7}, index_t{33}, index_t{4095}, index_t{4097}, index_t{12345}}) {
    const auto logits = conformance::random_logits(static_cast<std::uint64_t>(v), 1, v, 6.0f).data;
    const specdec::matrix_view<const float> row(logits.data(), 1, v);
    for (const float temperature : {0.3f, 1.0f, 2.5f}) {
      CAPTURE(v);
      CAPTURE(temperature);
      std::vector<float> soft(static_cast<std::size_t>(v));
      b.row_softmax(row, temperature, specdec::matrix_view<float>(soft.data(), 1, v));
      const auto stats = b.row_softmax_stats(row, temperature);
      index_t differ = 0;
      for (index_t j = 0; j < v; ++j)
        differ += specdec::detail::exp_shifted_at(logits.data(), v, j, stats.max, 1.0f / temperature, 1.0f / stats.sum) !=
                  soft[static_cast<std::size_t>(j)];
      CHECK(differ == 0);
    }
  }
  std::vector<float> bad = {0.0f, std::nanf(""), 1.0f};
  CHECK(error_of([&] { b.row_softmax_stats(specdec::matrix_view<const float>(bad.data(), 1, 3), 1.0f); }).find("NaN") != std::string::npos);
  CHECK(error_of([&] { b.row_softmax_stats(specdec::matrix_view<const float>(bad.data(), 1, 3), 0.0f); }).find("temperature = 0") !=
        std::string::npos);
}

// An output larger than the caches is written with non-temporal stores (from an aligned address on;
// the entries before it, and the scalar tail, are stored as usual): the values are the ones a
// cache-sized call writes, bit for bit, whatever the output's alignment.
TEST_CASE_TEMPLATE("row_log_softmax writes the same values with streaming stores", B, specdec::eigen,
                   specdec::thrust_backend<specdec::thrust_system::cpp>) {
  B b;
  const index_t rows = 3, v = (specdec::detail::streaming_output_bytes / 4) / rows + 37;  // >= the threshold, odd
  const auto logits = conformance::random_logits(5, rows, v, 4.0f).data;
  std::vector<float> big(static_cast<std::size_t>(rows * v + 1)), one(static_cast<std::size_t>(v));
  b.row_log_softmax(specdec::matrix_view<const float>(logits.data(), rows, v), 0.9f,
                    specdec::matrix_view<float>(big.data() + 1, rows, v));  // misaligned by one float
  for (index_t r = 0; r < rows; ++r) {
    b.row_log_softmax(specdec::matrix_view<const float>(logits.data() + r * v, 1, v), 0.9f,
                      specdec::matrix_view<float>(one.data(), 1, v));
    CHECK(std::equal(one.begin(), one.end(), big.begin() + 1 + r * v));
  }
}

TEST_CASE("top_k_mask_logits keeps the k largest of each row, ties with the k-th, and masks the rest") {
  const index_t rows = 4, v = 300;
  auto logits = conformance::random_logits(71, rows, v).data;
  logits[5] = logits[9] = 50.0f;                               // row 0: a tie at the top
  logits[static_cast<std::size_t>(v + 7)] = -std::numeric_limits<float>::infinity();  // row 1: a masked entry
  for (const index_t k : {index_t{1}, index_t{2}, index_t{17}, v}) {
    std::vector<float> got = logits;
    specdec::sampling::top_k_mask_logits(specdec::matrix_view<float>(got.data(), rows, v), k);
    for (index_t r = 0; r < rows; ++r) {
      std::vector<float> sorted(logits.begin() + r * v, logits.begin() + (r + 1) * v);
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      const float kth = sorted[static_cast<std::size_t>(k - 1)];
      for (index_t j = 0; j < v; ++j) {
        const float x = logits[static_cast<std::size_t>(r * v + j)];
        CHECK(got[static_cast<std::size_t>(r * v + j)] == (x >= kth ? x : -std::numeric_limits<float>::infinity()));
      }
    }
  }
  std::vector<float> bad = logits;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK(conformance::error_of([&] { specdec::sampling::top_k_mask_logits(specdec::matrix_view<float>(bad.data(), rows, v), 3); }) ==
        "specdec::sampling::top_k_mask_logits: logits[0, 3] = nan; expected finite values or -inf");
  CHECK(conformance::error_of([&] { specdec::sampling::top_k_mask_logits(specdec::matrix_view<float>(bad.data(), rows, v), 301); }) ==
        "specdec::sampling::top_k_mask_logits: k = 301; expected 1 <= k <= V = 300");
}

/// vLLM's top-k / top-p from their definitions, O(V^2): top-k keeps the logits >= the k-th largest; top-p
/// masks every entry but the largest whose probability mass at or below it (ascending order, ties by
/// index), rounded to float32, is at most 1 - p.
std::vector<float> vllm_top_k_top_p_reference(std::vector<float> row, index_t k, float p) {
  const auto v = static_cast<index_t>(row.size());
  const float inf = std::numeric_limits<float>::infinity();
  if (k < v) {
    std::vector<float> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<std::size_t>(k - 1)];
    for (float& x : row) x = x < kth ? -inf : x;
  }
  if (p >= 1.0f) return row;
  const float top = *std::max_element(row.begin(), row.end());
  double total = 0.0;
  for (const float x : row) total += static_cast<double>(std::exp(x - top));
  std::vector<double> prob(row.size());
  for (std::size_t i = 0; i < row.size(); ++i) prob[i] = static_cast<double>(std::exp(row[i] - top) / static_cast<float>(total));
  const auto below = [&](std::size_t a, std::size_t b) { return row[a] < row[b] || (row[a] == row[b] && a < b); };
  std::size_t largest = 0;
  for (std::size_t i = 1; i < row.size(); ++i) largest = below(largest, i) ? i : largest;
  std::vector<float> out = row;
  for (std::size_t i = 0; i < row.size(); ++i) {
    double mass = 0.0;
    for (std::size_t j = 0; j < row.size(); ++j) mass += (j == i || below(j, i)) ? prob[j] : 0.0;
    if (i != largest && static_cast<float>(mass) <= 1.0f - p) out[i] = -inf;
  }
  return out;
}

TEST_CASE("vllm::apply_top_k_top_p is vLLM's top-k then top-p, ties with the k-th kept") {
  specdec::philox_stream rng{2024, 1};
  std::uint64_t at = 0;
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 400; ++trial) {
    const index_t v = 1 + static_cast<index_t>(rng.uniform(at++) * 64);
    std::vector<float> row(static_cast<std::size_t>(v));
    for (float& x : row) {
      const float u = rng.uniform(at++);
      x = u < 0.1f ? -inf : std::round(u * 24.0f) / 4.0f - 3.0f;  // coarse values: ties at every threshold
    }
    const index_t k = 1 + static_cast<index_t>(rng.uniform(at++) * static_cast<float>(v + 2));
    const float p = trial % 4 == 0 ? 1.0f : 0.05f + 0.9f * rng.uniform(at++);
    std::vector<float> got = row;
    specdec::vllm::apply_top_k_top_p(got, k, p);
    const std::vector<float> want = vllm_top_k_top_p_reference(row, k, p);
    INFO("trial ", trial, " V = ", v, " k = ", k, " p = ", p);
    for (std::size_t i = 0; i < row.size(); ++i) CHECK(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]));
  }
  std::vector<float> row = {1.0f, 3.0f, 2.0f, 3.0f, 0.5f};
  specdec::vllm::apply_top_k_top_p(row, 2, 1.0f);  // the two 3s
  CHECK(row == std::vector<float>{-inf, 3.0f, -inf, 3.0f, -inf});
  std::vector<float> peaked = {0.0f, 10.0f, 0.0f};
  specdec::vllm::apply_top_k_top_p(peaked, 3, 0.9f);  // the peak holds > 0.9 alone
  CHECK(peaked == std::vector<float>{-inf, 10.0f, -inf});
  std::vector<float> bad = {0.0f, std::nanf("")};
  CHECK(conformance::error_of([&] { specdec::vllm::apply_top_k_top_p(bad, 1, 0.5f); }) ==
        "specdec::vllm::apply_top_k_top_p: logit 1 is nan; expected a finite logit or -inf");
  CHECK(conformance::error_of([&] { specdec::vllm::apply_top_k_top_p(row, 0, 0.5f); }) ==
        "specdec::vllm::apply_top_k_top_p: k = 0; expected >= 1 (k >= V: no top-k)");
  CHECK(conformance::error_of([&] { specdec::vllm::apply_top_k_top_p(row, 1, 0.0f); }) ==
        "specdec::vllm::apply_top_k_top_p: p = 0; expected 0 < p <= 1 (1: no top-p)");
}

TEST_CASE("vllm::apply_sampling_constraints divides each request's rows by its temperature, then filters them") {
  // Three requests: 2 rows at temperature 0.5 with top-k 2, 1 greedy row (vLLM's 0: temperature 1) with
  // top-k 1, 1 greedy row of older vLLM (-1: temperature 1) with top-k 2.
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f,  4.0f, 3.0f, 2.0f, 1.0f,  0.5f, 1.5f, 1.0f, 0.0f,  2.0f, 0.5f, 1.0f, 3.0f};
  const std::vector<std::int64_t> cu = {2, 3, 4};
  const std::vector<float> temperature = {0.5f, specdec::vllm::greedy_temperature, specdec::vllm::legacy_greedy_temperature};
  CHECK(specdec::vllm::greedy_temperature == 0.0f);  // vLLM's GREEDY_TEMPERATURE (rejection_sampler.py)
  const std::vector<std::int64_t> top_k = {2, 1, 2};
  specdec::vllm::apply_sampling_constraints(specdec::matrix_view<float>(logits.data(), 4, 4), cu, temperature, top_k, {});
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(logits == std::vector<float>{-inf, -inf, 6.0f, 8.0f, 8.0f, 6.0f, -inf, -inf, -inf, 1.5f, -inf, -inf, 2.0f, -inf, -inf, 3.0f});
  const std::vector<float> negative = {0.5f, -0.5f, 1.0f};
  CHECK(conformance::error_of([&] {
          specdec::vllm::apply_sampling_constraints(specdec::matrix_view<float>(logits.data(), 4, 4), cu, negative, {}, {});
        }) == "specdec::vllm::apply_sampling_constraints: temperature[1] = -0.5; expected a finite value > 0, or 0 (older vLLM: -1) "
              "for a greedy request");
  const std::vector<std::int64_t> short_cu = {2, 2, 3};
  CHECK(conformance::error_of([&] {
          specdec::vllm::apply_sampling_constraints(specdec::matrix_view<float>(logits.data(), 4, 4), short_cu, temperature, {}, {});
        }) == "specdec::vllm::apply_sampling_constraints: logits has 4 rows; expected one per draft token (cu_num_draft_tokens ends at 3)");
}

TEST_CASE("top_k_top_p_joint_renorm keeps the tokens both filters keep on the original row (FlashInfer's joint order)") {
  specdec::philox_stream rng{77, 3};
  std::uint64_t at = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const index_t v = 1 + static_cast<index_t>(rng.uniform(at++) * 40);
    std::vector<float> row(static_cast<std::size_t>(v));
    double sum = 0.0;
    for (float& x : row) sum += x = std::round(rng.uniform(at++) * 6.0f);  // coarse: ties everywhere
    if (sum == 0.0) row[0] = 1.0f, sum = 1.0;
    for (float& x : row) x = static_cast<float>(x / sum);
    const index_t k = 1 + static_cast<index_t>(rng.uniform(at++) * static_cast<float>(v));
    const float p = 0.05f + 0.95f * rng.uniform(at++);
    // The definition: count and mass of the strictly larger probabilities, on the row as given.
    std::vector<char> keep(row.size());
    double total = 0.0;
    for (std::size_t i = 0; i < row.size(); ++i) {
      index_t count = 0;
      double mass = 0.0;
      for (const float y : row)
        if (y > row[i]) ++count, mass += static_cast<double>(y);
      keep[i] = count < k && mass < static_cast<double>(p);
      total += keep[i] ? static_cast<double>(row[i]) : 0.0;
    }
    std::vector<float> got = row;
    specdec::sampling::top_k_top_p_joint_renorm(specdec::matrix_view<float>(got.data(), 1, v), k, p);
    INFO("trial ", trial, " V = ", v, " k = ", k, " p = ", p);
    for (std::size_t i = 0; i < row.size(); ++i)
      CHECK(got[i] == (keep[i] ? static_cast<float>(static_cast<double>(row[i]) / total) : 0.0f));
  }
  // Top-k first renormalises the top k before the top-p cut, which then counts more mass above each
  // token: 0.3 has 0.4 above it in the row (kept jointly at p = 0.5) but 4/7 after the top-2 renormalisation.
  std::vector<float> joint = {0.4f, 0.3f, 0.2f, 0.1f}, sequential = joint;
  specdec::sampling::top_k_top_p_joint_renorm(specdec::matrix_view<float>(joint.data(), 1, 4), 2, 0.5f);
  specdec::sampling::top_k_renorm(specdec::matrix_view<float>(sequential.data(), 1, 4), 2);
  specdec::sampling::top_p_renorm(specdec::matrix_view<float>(sequential.data(), 1, 4), 0.5f);
  const double kept = static_cast<double>(0.4f) + static_cast<double>(0.3f);
  CHECK(joint == std::vector<float>{static_cast<float>(static_cast<double>(0.4f) / kept), static_cast<float>(static_cast<double>(0.3f) / kept),
                                    0.0f, 0.0f});
  CHECK(sequential == std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f});
  CHECK(conformance::error_of([&] { specdec::sampling::top_k_top_p_joint_renorm(specdec::matrix_view<float>(joint.data(), 1, 4), 5, 0.5f); }) ==
        "specdec::sampling::top_k_top_p_joint_renorm: k = 5; expected 1 <= k <= V = 4");
}
