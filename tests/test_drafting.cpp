// SPDX-License-Identifier: Apache-2.0
// The engine-facing drafting primitives on their own: the prompt-lookup (n-gram) proposer against a
// plain scalar reference (every suffix length, recency, distinct continuations, the trie and its level
// order) and the cost-aware draft-length policy (its cost model, acceptance estimate, choice and probes).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/policy/draft_length.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>

#include "backend_conformance.hpp"

using specdec::index_t;
using conformance::error_of;

namespace {

/// The n-gram rule written the plain way: for g from max to min, scan every earlier start, newest
/// first; the first g with a match decides.
std::vector<std::vector<std::int32_t>> reference_continuations(const std::vector<std::int32_t>& h, index_t length, index_t max_g,
                                                               index_t min_g, index_t branches) {
  std::vector<std::vector<std::int32_t>> out;
  const auto n = static_cast<index_t>(h.size());
  if (length == 0) return out;
  for (index_t g = max_g; g >= min_g; --g) {
    if (g > n - 1) continue;
    for (index_t start = n - g - 1; start >= 0; --start) {
      bool same = true;
      for (index_t i = 0; i < g; ++i) same = same && h[static_cast<std::size_t>(start + i)] == h[static_cast<std::size_t>(n - g + i)];
      if (!same) continue;
      std::vector<std::int32_t> c;
      for (index_t i = start + g; i < n && i < start + g + length; ++i) c.push_back(h[static_cast<std::size_t>(i)]);
      if (c.empty() || std::find(out.begin(), out.end(), c) != out.end()) continue;
      if (static_cast<index_t>(out.size()) < branches) out.push_back(c);
    }
    if (!out.empty()) return out;
  }
  return out;
}

}  // namespace

TEST_CASE("ngram proposer: continuations match the scalar reference on random histories") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto n = static_cast<std::size_t>(1 + rng() % 40);
    const auto alphabet = static_cast<std::int32_t>(2 + rng() % 5);  // small alphabets repeat
    std::vector<std::int32_t> h(n);
    for (auto& t : h) t = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(alphabet));
    specdec::ngram_options o;
    o.min_ngram = static_cast<index_t>(1 + rng() % 3);
    o.max_ngram = o.min_ngram + static_cast<index_t>(rng() % 3);
    o.branches = static_cast<index_t>(1 + rng() % 4);
    const auto length = static_cast<index_t>(rng() % 6);
    CAPTURE(trial);
    const auto got = specdec::ngram_continuations(h, length, o);
    CHECK(got == reference_continuations(h, length, o.max_ngram, o.min_ngram, o.branches));
    // The match length: the longest suffix that occurred earlier, by brute force over every g.
    index_t longest = 0;
    for (index_t g = o.min_ngram; g <= o.max_ngram; ++g)
      if (!reference_continuations(h, 1, g, g, 1).empty()) longest = g;
    CHECK(specdec::ngram_match_length(h, o) == longest);
    CHECK((longest == 0) == reference_continuations(h, 1, o.max_ngram, o.min_ngram, 1).empty());
    // The tree holds exactly the continuations' paths, in level order, each node's children distinct.
    const auto tree = specdec::propose_ngram(h, length, o);
    specdec::validate(tree);
    CHECK(tree.token[0] == h.back());
    std::vector<std::vector<std::int32_t>> paths;
    for (index_t i = 1; i < tree.size(); ++i) {
      std::vector<std::int32_t> path;
      for (index_t node = i; node > 0; node = tree.parent[static_cast<std::size_t>(node)])
        path.insert(path.begin(), tree.token[static_cast<std::size_t>(node)]);
      paths.push_back(path);
    }
    for (const auto& c : got)
      for (std::size_t k = 1; k <= c.size(); ++k)
        CHECK(std::find(paths.begin(), paths.end(), std::vector<std::int32_t>(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k))) !=
              paths.end());
    auto sorted = paths;
    std::sort(sorted.begin(), sorted.end());
    CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no duplicate node
  }
}

TEST_CASE("ngram proposer: the longest suffix wins, the most recent match first, a trie for branches") {
  //                              0  1  2  3  4  5  6  7  8  9 10 11
  const std::vector<std::int32_t> h = {7, 1, 2, 3, 9, 1, 2, 4, 5, 8, 1, 2};
  // Suffix [1, 2] occurred at 5 (then 4, 5) and at 1 (then 3, 9): the most recent first.
  CHECK(specdec::ngram_continuations(h, 2, {3, 2, 2, 0}) ==
        std::vector<std::vector<std::int32_t>>{{4, 5}, {3, 9}});
  const auto chain = specdec::propose_ngram(h, 3, {3, 2, 1, 0});
  CHECK(chain.token == std::vector<std::int32_t>{2, 4, 5, 8});
  CHECK(chain.parent == std::vector<std::int32_t>{-1, 0, 1, 2});
  const auto tree = specdec::propose_ngram(h, 2, {3, 2, 2, 0});
  CHECK(tree.token == std::vector<std::int32_t>{2, 4, 3, 5, 9});  // level order: depth 1, then depth 2
  CHECK(tree.parent == std::vector<std::int32_t>{-1, 0, 0, 1, 2});
  // A longer suffix [8, 1, 2] never occurred, so g = 2 decides; with min_ngram 3 nothing matches.
  CHECK(specdec::ngram_match_length(h, {3, 2, 1, 0}) == 2);
  CHECK(specdec::ngram_match_length(h, {3, 3, 1, 0}) == 0);
  CHECK(specdec::propose_ngram(h, 4, {3, 3, 1, 0}).size() == 1);
  // max_history 6: the window 2, 4, 5, 8, 1, 2 holds no earlier [1, 2].
  CHECK(specdec::propose_ngram(h, 4, {3, 2, 1, 6}).size() == 1);
  CHECK(specdec::propose_ngram(h, 0).size() == 1);
  CHECK(specdec::propose_ngram(std::vector<std::int32_t>{5}, 4).size() == 1);
  // Shared prefixes become shared nodes.
  const std::vector<std::int32_t> shared = {1, 2, 3, 4, 0, 1, 2, 3, 5, 0, 1, 2};
  const auto trie = specdec::propose_ngram(shared, 2, {2, 2, 3, 0});
  CHECK(trie.token == std::vector<std::int32_t>{2, 3, 5, 4});
  CHECK(trie.parent == std::vector<std::int32_t>{-1, 0, 1, 1});
}

TEST_CASE("ngram proposer: bad input") {
  const std::vector<std::int32_t> h = {1, 2, 1, 2};
  CHECK(error_of([&] { (void)specdec::propose_ngram(std::vector<std::int32_t>{}, 3); }).find("history is empty") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::propose_ngram(h, -1); }).find("length = -1") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::propose_ngram(h, 2, {1, 2, 1, 0}); }).find("min_ngram = 2, max_ngram = 1") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::propose_ngram(h, 2, {2, 0, 1, 0}); }).find("min_ngram = 0") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::propose_ngram(h, 2, {2, 1, 0, 0}); }).find("branches = 0") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::propose_ngram(h, 2, {2, 1, 1, -3}); }).find("max_history = -3") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::propose_ngram(std::vector<std::int32_t>{1, -4, 1}, 2); }).find("token -4") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::ngram_match_length(h, {1, 2, 1, 0}); }).find("min_ngram = 2, max_ngram = 1") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::ngram_match_length(std::vector<std::int32_t>{-2, 1}); }).find("token -2") != std::string::npos);
}

TEST_CASE("draft-length policy: the cost-aware draft length weighs measured acceptance against measured forward cost") {
  specdec::policy::forward_cost cost;
  CHECK(cost(4) == 0.0);
  cost.record(1, 1.0);
  CHECK(cost(1) == 1.0);
  CHECK(cost(3) == 1.0);  // never measured: as cheap as the largest measured smaller row count
  for (double s : {1.2, 1.1, 9.0, 1.1, 1.0}) cost.record(2, s);  // one preempted forward (9.0) does not move the median
  CHECK(cost(2) == doctest::Approx(1.1));
  cost.record(4, 2.0);
  cost.record(3, 0.5);  // noise below a smaller row count's cost: costs stay non-decreasing
  CHECK(cost(3) == doctest::Approx(1.1));
  CHECK(cost(4) == 2.0);
  CHECK(cost(9) == 2.0);
  {
    // Between measured row counts the cost is interpolated, so that a long draft pays for the rows it
    // adds before they are measured; above the largest, that one's.
    auto longer = cost;
    longer.record(8, 4.0);
    CHECK(longer(6) == doctest::Approx(3.0));
    CHECK(longer(7) == doctest::Approx(3.5));
    CHECK(longer(12) == 4.0);
    specdec::policy::forward_cost from_three;
    from_three.record(3, 2.0);
    CHECK(from_three(1) == 2.0);  // below every measured count: that one's cost
  }

  specdec::policy::acceptance_by_depth acceptance;
  CHECK(acceptance.rate(1) == 0.5);
  for (int i = 0; i < 400; ++i) acceptance.record(i % 5 == 0 ? 0 : 3, 3);  // depth 1 accepted 4 times in 5
  {
    // By hand: verification i weighs fade^(399 - i); a draft of 3 with 3 accepted is a trial and a
    // success at depths 1-3, one with none a trial at depth 1; the pooled rate (S + 1) / (T + 2) is the
    // prior of the per-depth rates (s + 4 pooled) / (t + 4).
    double all = 0, accepted = 0;
    for (int i = 0; i < 400; ++i) {
      const double w = std::pow(specdec::policy::acceptance_by_depth::fade, 399 - i);
      all += w;
      if (i % 5 != 0) accepted += w;
    }
    const double pooled = (3 * accepted + 1) / (all + 2 * accepted + 2);
    CHECK(acceptance.rate(1) == doctest::Approx((accepted + 4 * pooled) / (all + 4)).epsilon(1e-12));
    CHECK(acceptance.rate(2) == doctest::Approx((accepted + 4 * pooled) / (accepted + 4)).epsilon(1e-12));
    CHECK(acceptance.rate(1) > 0.8);  // the last verification accepted: recent ones weigh more
    // Caution: half a standard deviation of a rate measured on t + 5 trials below it.
    const double m = acceptance.rate(1);
    CHECK(acceptance.rate(1, 0.5, 0.5) == doctest::Approx(m - 0.5 * std::sqrt(m * (1 - m) / (all + 5))).epsilon(1e-12));
  }
  // Expected tokens of a chain: 1 + a1 + a1 a2 + a1 a2 a3.
  const double a1 = acceptance.rate(1), a2 = acceptance.rate(2), a3 = acceptance.rate(3);
  CHECK(acceptance.expected_tokens(3) == doctest::Approx(1 + a1 + a1 * a2 + a1 * a2 * a3));

  // Costs 1, 1.1, 1.1, 2 for 1..4 rows: three drafts (4 rows) would double the cost for < 1 more token.
  CHECK(specdec::policy::best_draft_length(acceptance, cost, 0.0, 3) == 2);
  CHECK(specdec::policy::best_draft_length(acceptance, cost, 0.0, 1) == 1);
  specdec::policy::acceptance_by_depth hopeless;
  for (int i = 0; i < 100; ++i) hopeless.record(0, 2);
  CHECK(specdec::policy::best_draft_length(hopeless, cost, 0.0, 3) == 0);  // drafting does not pay: verify the root alone
  CHECK(specdec::policy::best_draft_length(acceptance, specdec::policy::forward_cost{}, 0.0, 5) == 5);  // nothing measured yet
  // A draft token as dear as a target forward: 1.8 tokens for 2.1 s loses to 1 token for 1 s.
  CHECK(specdec::policy::best_draft_length(acceptance, cost, 1.0, 3) == 0);

  // Where drafting does not pay the policy probes with one token, paid from 1/64 of the time spent
  // not drafting: here a probe costs 1.0 s (a 2-row forward's 0.5 s more, and a 0.5 s draft token)
  // and a step 1 s, so one probe per 64 idle steps.
  specdec::policy::draft_length_policy policy(4);
  CHECK(policy.choose() == 1);  // nothing measured: the cheapest informative draft
  policy.target_forward_timed(1, 1.0);
  policy.target_forward_timed(2, 1.5);
  policy.draft_token_timed(0.5);
  for (int i = 0; i < 50; ++i) policy.verified(0, 1);
  std::vector<int> probes;
  for (int step = 1; step <= 200; ++step)
    if (const auto length = policy.choose(); length > 0) {
      CHECK(length == 1);
      probes.push_back(step);
      policy.verified(0, 1);
    }
  CHECK(probes == std::vector<int>{64, 128, 192});
  // Evidence that drafting pays (every draft accepted) resumes drafting at the length that pays most.
  for (int i = 0; i < 100; ++i) policy.verified(4, 4);
  policy.target_forward_timed(5, 1.6);
  CHECK(policy.choose() == 4);
}

TEST_CASE("draft-length policy: acceptance is measured per context, costs are shared") {
  // Context 0 (say, long n-gram matches) is always accepted, context 1 never; context 2 is untried.
  specdec::policy::draft_length_policy policy(4, 3);
  for (const auto& [rows, seconds] : {std::pair{1, 1.0}, {2, 1.3}, {3, 1.5}, {4, 1.7}, {5, 1.9}})
    policy.target_forward_timed(rows, seconds);
  CHECK(policy.choose(0) == 1);  // a context never verified is probed at once, with one token
  CHECK(policy.choose(2) == 1);
  for (int i = 0; i < 40; ++i) {
    policy.verified(4, 4, 0);
    policy.verified(0, 1, 1);
  }
  CHECK(policy.choose(0) == 4);
  CHECK(policy.choose(1) == 0);
  // An untried context starts from every context's acceptance (context 0 accepts all four tokens,
  // context 1 none: about 0.8 pooled over the depths): three tokens pay at half a standard deviation
  // of caution, the fourth does not.
  CHECK(policy.choose(2) == 3);
  CHECK(policy.acceptance(0).rate(1) > 0.95);
  CHECK(policy.acceptance(1).rate(1) < 0.05);
  CHECK(policy.acceptance(2).empty());
  // A context with little evidence leans on every context's acceptance: the same one accepted token
  // drafts the longest where the other contexts accept everything, one token where they accept nothing.
  specdec::policy::draft_length_policy hopeless(4, 3);
  for (const auto& [rows, seconds] : {std::pair{1, 1.0}, {2, 1.3}, {3, 1.5}, {4, 1.7}, {5, 1.9}})
    hopeless.target_forward_timed(rows, seconds);
  for (int i = 0; i < 40; ++i) {
    hopeless.verified(0, 4, 0);
    hopeless.verified(0, 1, 1);
  }
  policy.verified(1, 1, 2);
  hopeless.verified(1, 1, 2);
  CHECK(policy.choose(2) == 4);
  CHECK(hopeless.choose(2) == 1);
  // The expected tokens per second decide: 5 tokens for 1.9 s beats 1 token for 1 s.
  CHECK(policy.acceptance(0).expected_tokens(4) / policy.target_cost()(5) > 1.0 / policy.target_cost()(1));
  CHECK(error_of([&] { (void)policy.choose(3); }).find("context = 3; expected 0 <= context < 3") != std::string::npos);
  CHECK(error_of([&] { policy.verified(1, 1, -1); }).find("context = -1") != std::string::npos);
  CHECK(error_of([&] { specdec::policy::draft_length_policy p(2, 0); }).find("contexts = 0") != std::string::npos);
}

TEST_CASE("draft-length policy: a drafter with fewer tokens to offer gets the best length within them") {
  // A CPU's costs (SmolLM2 in Q4_0, relative to one row): a second row costs 0.7 of a decode, nine rows
  // 4.4. Drafts are copied text or nothing: 6 of 10 accepted whole, 4 rejected at their first token.
  specdec::policy::draft_length_policy policy(8, 2);
  for (const auto& [rows, seconds] : {std::pair{1, 1.0}, {2, 1.7}, {3, 2.3}, {5, 3.3}, {9, 4.4}})
    policy.target_forward_timed(rows, seconds);
  CHECK(policy.choose(0, 0) == 0);  // nothing to offer: no probe either
  for (int round = 0; round < 10; ++round)
    for (const int accepted : {8, 0, 8, 0, 8, 8, 0, 8, 0, 8}) policy.verified(accepted, 8, 0);
  // Eight tokens pay (about 1 + 0.6 x 8 tokens for 4.4 decodes); two do not (1 + 0.6 x 2 for 2.3), nor one:
  // cutting the eight to the two on offer would pay 2.3 decodes for about 2.2 tokens.
  CHECK(policy.choose(0) == 8);
  CHECK(policy.choose(0, 8) == 8);
  CHECK(policy.choose(0, 1000) == 8);
  CHECK(policy.choose(0, 2) == 0);
  CHECK(policy.choose(0, 1) == 0);
  // Where every draft is accepted, the shorter offer is still worth drafting.
  for (int i = 0; i < 40; ++i) policy.verified(8, 8, 1);
  CHECK(policy.choose(1, 2) == 2);
  CHECK(policy.choose(1, 5) == 5);
  CHECK(error_of([&] { (void)policy.choose(0, -1); }).find("available = -1; expected available >= 0") != std::string::npos);
  CHECK(error_of([&] { (void)policy.choose(2, 1); }).find("context = 2") != std::string::npos);
}

TEST_CASE("draft-length policy: bad measurements are rejected") {
  specdec::policy::forward_cost cost;
  CHECK(error_of([&] { cost.record(0, 1.0); }).find("rows = 0") != std::string::npos);
  CHECK(error_of([&] { cost.record(2, -1.0); }).find("seconds = -1") != std::string::npos);
  CHECK(error_of([&] { cost.record(2, std::nan("")); }).find("seconds = nan") != std::string::npos);
  specdec::policy::acceptance_by_depth acceptance;
  CHECK(error_of([&] { acceptance.record(3, 2); }).find("accepted = 3, drafted = 2") != std::string::npos);
  CHECK(error_of([&] { acceptance.record(-1, 2); }).find("accepted = -1") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::policy::best_draft_length(acceptance, cost, -0.5, 3); }).find("draft_seconds = -0.5") !=
        std::string::npos);
  CHECK(error_of([&] { specdec::policy::draft_length_policy p(-1); }).find("longest = -1") != std::string::npos);
  specdec::policy::draft_length_policy none(0);
  CHECK(none.choose() == 0);  // a policy allowed no draft never drafts, not even a probe
}

TEST_CASE("configuration structs aggregate-initialise without warnings under -Wextra (designated and positional)") {
  // docs/trees.md writes the config this way; every optional member has a default member initialiser,
  // so neither compiler's -Wmissing-field-initializers fires (this file builds with -Werror).
  const specdec::dynamic_tree_config designated{.top_k = 10, .depth = 5, .total_tokens = 60};
  const specdec::dynamic_tree_config positional{4, 2, 9};
  const specdec::ngram_options lookup{.max_ngram = 4};
  CHECK(designated.d2t.empty());
  CHECK(positional.score == specdec::tree_score::log_probability);
  CHECK(lookup.min_ngram == 2);
}

TEST_CASE("EAGLE-2 draft steps give the draft forward its composed attention mask and positions") {
  specdec::eigen b;
  const index_t v = 20, k = 3, batch = 2;
  const specdec::dynamic_tree_config cfg{.top_k = k, .depth = 2, .total_tokens = 8};
  specdec::eagle2_tree_builder<specdec::eigen> builder(b, cfg, batch);
  const auto root = conformance::random_logits(5, batch, v);
  auto step = builder.begin(specdec::matrix_view<const float>(root.data.data(), batch, v), std::vector<std::int32_t>{1, 2});
  for (index_t s = 0; s < 2; ++s) {
    CAPTURE(s);
    CHECK(step.batch() == batch);
    for (index_t r = 0; r < batch; ++r) {
      const index_t prefix = 4 + r;  // requests with different cached lengths
      const auto mask = step.attention_mask(prefix, r);
      REQUIRE(static_cast<index_t>(mask.size()) == k * (prefix + step.mask_cols));
      std::vector<float> additive(mask.size());
      step.additive_attention_mask(prefix, specdec::matrix_view<float>(additive.data(), k, prefix + step.mask_cols), r);
      for (index_t row = 0; row < k; ++row)
        for (index_t j = 0; j < prefix + step.mask_cols; ++j) {
          const std::uint8_t want =
              j < prefix ? 1 : step.draft_mask[static_cast<std::size_t>((r * k + row) * step.mask_cols + (j - prefix))];
          CHECK(mask[static_cast<std::size_t>(row * (prefix + step.mask_cols) + j)] == want);
          CHECK(additive[static_cast<std::size_t>(row * (prefix + step.mask_cols) + j)] ==
                (want ? 0.0f : -std::numeric_limits<float>::infinity()));
        }
      CHECK(step.positions(10 + r, r) == std::vector<std::int64_t>(static_cast<std::size_t>(k), 10 + r + 1 + s));
    }
    const auto logits = conformance::random_logits(6 + static_cast<std::uint64_t>(s), batch * k, v);
    step = builder.expand(specdec::matrix_view<const float>(logits.data.data(), batch * k, v));
  }
  CHECK(error_of([&] { (void)step.attention_mask(-1); }).find("prefix_length = -1") != std::string::npos);
  CHECK(error_of([&] { (void)step.attention_mask(2, 2); }).find("request = 2") != std::string::npos);
  CHECK(error_of([&] { (void)step.positions(-3); }).find("root_position = -3") != std::string::npos);
  CHECK(error_of([&] { (void)builder.finish_single(); }).find("the builder has 2 requests") != std::string::npos);
  specdec::eagle2_tree_builder<specdec::eigen> one(b, cfg);
  (void)one.begin(specdec::matrix_view<const float>(root.data.data(), 1, v), std::vector<std::int32_t>{1});
  const auto rows = conformance::random_logits(8, k, v);
  (void)one.expand(specdec::matrix_view<const float>(rows.data.data(), k, v));
  (void)one.expand(specdec::matrix_view<const float>(rows.data.data(), k, v));
  CHECK(one.finish_single().tree.token == one.finish().front().tree.token);
}
