// SPDX-License-Identifier: Apache-2.0
// The library's drafters (tree/drafters.hpp) against what they wrap, through the drafting protocol:
// eagle2_drafter's requests and tree equal eagle2_tree_builder's steps and result; heads_drafter's tree
// is Medusa's greedy candidates; chain_drafter's sampled tokens are inverse-CDF draws of its Philox
// uniforms with the distributions kept for the verifier; cut_to_depth; a drafter whose drafts do not
// pay stops drafting; block_drafter's chain is each row's argmax and its tree the best root paths by
// the product of per-position probabilities (against a brute force); misuse is rejected. (Decoding through the protocol: test_engine_loops.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/jakiro.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/tree/block_drafter.hpp>
#include <specdec/tree/drafters.hpp>

#include "backend_conformance.hpp"

using specdec::index_t;
using conformance::error_of;

#define SPECDEC_DRAFTER_BACKENDS specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>

// Model-free drafters are drafters without advance(); the others run a draft model.
static_assert(specdec::drafter<specdec::ngram_drafter> && !specdec::model_drafter<specdec::ngram_drafter>);
static_assert(specdec::drafter<specdec::suffix_drafter<>> && !specdec::model_drafter<specdec::suffix_drafter<>>);
static_assert(specdec::model_drafter<specdec::chain_drafter<specdec::eigen>>);
static_assert(specdec::model_drafter<specdec::eagle2_drafter<specdec::eigen>>);
static_assert(specdec::model_drafter<specdec::heads_drafter<specdec::thrust_backend<specdec::thrust_system::cpp>>>);
static_assert(specdec::model_drafter<specdec::eagle1::tree_drafter<specdec::eigen>>);
static_assert(specdec::model_drafter<specdec::jakiro::tree_drafter<specdec::eigen>>);
static_assert(specdec::model_drafter<specdec::block_drafter<specdec::eigen>>);

TEST_CASE("cut_to_depth keeps the shallow nodes in order and renumbers their parents") {
  // 0 -> {1, 2}, 1 -> {3}, 2 -> {4}, 3 -> {5}
  const auto t = specdec::make_tree({9, 8, 7, 6, 5, 4}, {-1, 0, 0, 1, 2, 3});
  const auto two = specdec::cut_to_depth(t, 2);
  CHECK(two.token == std::vector<std::int32_t>{9, 8, 7, 6, 5});
  CHECK(two.parent == std::vector<std::int32_t>{-1, 0, 0, 1, 2});
  CHECK(specdec::cut_to_depth(t, 0).token == std::vector<std::int32_t>{9});
  CHECK(specdec::cut_to_depth(t, 7).token == t.token);
  CHECK(error_of([&] { (void)specdec::cut_to_depth(t, -1); }).find("depth = -1") != std::string::npos);
}

TEST_CASE_TEMPLATE("eagle2_drafter asks for the builder's frontiers behind the root row and returns its tree", B, SPECDEC_DRAFTER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 200, k = 3, depth = 3;
  const specdec::dynamic_tree_config cfg{k, depth, 10, specdec::tree_score::log_probability, {}};
  specdec::eagle2_drafter<B> drafter(h.b, cfg, /*adaptive=*/false);
  specdec::eagle2_tree_builder<B> builder(h.b, cfg);
  const std::vector<std::int32_t> committed = {4, 5, 6};
  const specdec::draft_request* r = drafter.begin({committed});
  REQUIRE(r != nullptr);
  CHECK(r->tokens == std::vector<std::int32_t>{6});
  CHECK(r->positions(2) == std::vector<std::int64_t>{2});
  const auto root = conformance::random_logits(3, 1, v);
  auto root_buf = h.up(root.data);
  auto step = builder.begin(root_buf.matrix(1, v), std::vector<std::int32_t>{6});
  r = drafter.advance(root_buf.matrix(1, v));
  for (index_t s = 0; s < depth; ++s) {
    REQUIRE(r != nullptr);
    CHECK(r->tokens == step.input_ids);
    CHECK(r->depth == std::vector<std::int32_t>(static_cast<std::size_t>(k), static_cast<std::int32_t>(s + 1)));
    for (index_t i = 0; i < k; ++i)
      CHECK(r->parent_row[static_cast<std::size_t>(i)] == (s == 0 ? 0 : step.parent_slot[static_cast<std::size_t>(i)]));
    // The request's mask is the builder's behind one more cached row (the root row).
    CHECK(r->attention_mask(5) == step.attention_mask(6));
    const auto rows = conformance::random_logits(50 + static_cast<std::uint64_t>(s), k, v);
    auto buf = h.up(rows.data);
    r = drafter.advance(buf.matrix(k, v));
    if (s + 1 < depth) step = builder.expand(buf.matrix(k, v));
    else builder.expand(buf.matrix(k, v));
  }
  CHECK(r == nullptr);
  const auto want = builder.finish_single().tree;
  const auto got = drafter.finish().tree;
  CHECK(got.token == want.token);
  CHECK(got.parent == want.parent);
  CHECK(error_of([&] { drafter.advance(root_buf.matrix(1, v)); }).find("no draft forward is pending") != std::string::npos);
  const std::vector<std::int32_t> too_long(static_cast<std::size_t>(got.max_depth() + 1), 1);
  CHECK(error_of([&] { drafter.feedback({too_long}); }).find("the draft is " + std::to_string(got.max_depth()) + " deep") !=
        std::string::npos);
  CHECK(error_of([&] { drafter.feedback({{}, -1.0, 0.0}); }).find("target_seconds = -1") != std::string::npos);
}

TEST_CASE("eagle2_drafter's Jakiro last step: one forward with left and right rows per frontier row, as expand_dual") {
  specdec::eigen b;
  const index_t v = 90, k = 2, depth = 3;
  const specdec::dynamic_tree_config cfg{k, depth, 8, specdec::tree_score::log_probability, {}};
  specdec::eagle2_drafter<specdec::eigen> drafter(b, cfg, /*adaptive=*/false, /*dual_last_step=*/true);
  specdec::eagle2_tree_builder<specdec::eigen> builder(b, cfg);
  const std::vector<std::int32_t> committed = {8, 9};
  const specdec::draft_request* r = drafter.begin({committed});
  const auto root = conformance::random_logits(4, 1, v);
  builder.begin(specdec::matrix_view<const float>(root.data.data(), 1, v), std::vector<std::int32_t>{9});
  r = drafter.advance(specdec::matrix_view<const float>(root.data.data(), 1, v));
  REQUIRE(r != nullptr);
  CHECK(r->logits_per_row == 1);  // three expansions remain: a plain one first
  const auto first = conformance::random_logits(60, k, v);
  builder.expand(specdec::matrix_view<const float>(first.data.data(), k, v));
  r = drafter.advance(specdec::matrix_view<const float>(first.data.data(), k, v));
  REQUIRE(r != nullptr);
  CHECK(r->logits_per_row == 2);  // two remain: the dual forward gives both
  // Interleaved per row: row 0 left, row 0 right, row 1 left, row 1 right.
  const auto left = conformance::random_logits(61, k, v), right = conformance::random_logits(62, k, v);
  std::vector<float> both;
  for (index_t i = 0; i < k; ++i) {
    both.insert(both.end(), left.data.begin() + i * v, left.data.begin() + (i + 1) * v);
    both.insert(both.end(), right.data.begin() + i * v, right.data.begin() + (i + 1) * v);
  }
  CHECK(drafter.advance(specdec::matrix_view<const float>(both.data(), 2 * k, v)) == nullptr);
  builder.expand_dual(specdec::matrix_view<const float>(left.data.data(), k, v), specdec::matrix_view<const float>(right.data.data(), k, v));
  const auto want = builder.finish_single().tree;
  const auto got = drafter.finish().tree;
  CHECK(got.token == want.token);
  CHECK(got.parent == want.parent);
  CHECK(got.max_depth() <= depth);
}

TEST_CASE_TEMPLATE("heads_drafter fills Medusa's tree with each head's top-k, as medusa::fill_candidates", B, SPECDEC_DRAFTER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 120;
  const auto buf = specdec::medusa::make_buffers(specdec::choices::medusa_mc_sim_7b_63());
  const index_t heads = buf.shape.tree.max_depth();
  specdec::heads_drafter<B> drafter(h.b, buf.shape, 10, /*adaptive=*/false);
  const std::vector<std::int32_t> committed = {1, 2, 3};
  const specdec::draft_request* r = drafter.begin({committed});
  REQUIRE(r != nullptr);
  CHECK(r->logits_rows() == heads);
  const auto head_logits = conformance::random_logits(17, heads, v);
  auto logits = h.up(head_logits.data);
  CHECK(drafter.advance(logits.matrix(heads, v)) == nullptr);
  // Medusa's root token is the base model's argmax; give it the committed root.
  std::vector<float> base(static_cast<std::size_t>(v), 0.0f);
  base[3] = 1.0f;
  auto base_buf = h.up(base);
  const auto want = specdec::medusa::fill_candidates(h.b, buf, logits.matrix(heads, v), base_buf.matrix(1, v));
  CHECK(drafter.finish().tree.token == want.tree_candidates);
}

TEST_CASE_TEMPLATE("eagle1::tree_drafter runs EAGLE-1's levels behind the root row and returns static_drafter's tree", B, SPECDEC_DRAFTER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 80;
  const auto buf = specdec::eagle1::make_buffers(specdec::choices::eagle_mc_sim_7b_63());
  {
    specdec::eagle1::tree_drafter<B> drafter(h.b, buf, /*adaptive=*/false);
    const std::vector<std::int32_t> committed = {3, 4, 5};
    specdec::eagle1::static_drafter<B> want(h.b, buf, 5, 3);
    const specdec::draft_request* r = drafter.begin({committed});
    REQUIRE(r != nullptr);
    const auto root = conformance::random_logits(7, 1, v);
    auto root_buf = h.up(root.data);
    auto step = want.begin(root_buf.matrix(1, v));
    r = drafter.advance(root_buf.matrix(1, v));
    index_t level = 0;
    while (r != nullptr) {
      CHECK(r->tokens == step.input_ids);
      CHECK(r->positions(2) == std::vector<std::int64_t>(step.position_ids.begin(), step.position_ids.end()));
      // The request's mask is EAGLE's level mask behind the root row's column.
      const auto& lm = step.buffers->attn_mask;
      for (index_t i = 0; i < r->rows(); ++i) {
        CHECK(r->mask[static_cast<std::size_t>(i * r->mask_cols)] == 1);
        for (index_t c = 1; c < r->mask_cols; ++c)
          CHECK(r->mask[static_cast<std::size_t>(i * r->mask_cols + c)] == lm[static_cast<std::size_t>(i * step.buffers->mask_cols + c - 1)]);
      }
      const auto rows = conformance::random_logits(20 + static_cast<std::uint64_t>(level++), r->rows(), v);
      auto rows_buf = h.up(rows.data);
      r = drafter.advance(rows_buf.matrix(r->rows(), v));
      step = want.expand(rows_buf.matrix(step.input_ids.size(), v));
    }
    CHECK(level == buf.levels.size());
    CHECK(drafter.finish().tree.token == want.tree_candidates());
  }
  // Adaptive: the policy's first draft is one level deep, the root's children alone, from one forward.
  specdec::eagle1::tree_drafter<B> adaptive(h.b, buf, /*adaptive=*/true);
  const std::vector<std::int32_t> committed = {3, 4, 5};
  REQUIRE(adaptive.begin({committed}) != nullptr);
  const auto root = conformance::random_logits(7, 1, v);
  auto root_buf = h.up(root.data);
  CHECK(adaptive.advance(root_buf.matrix(1, v)) == nullptr);
  const auto tree = adaptive.finish().tree;
  CHECK(tree.max_depth() == 1);
  CHECK(tree.size() == 1 + static_cast<index_t>(std::count(buf.shape.tree.depth.begin(), buf.shape.tree.depth.end(), 1)));
}

TEST_CASE("jakiro::tree_drafter asks for left and right rows per node and returns Jakiro*'s static tree") {
  specdec::eigen b;
  const index_t v = 70;
  const auto buf = specdec::eagle1::make_buffers(specdec::choices::jakiro_mc_sim_7b_63());
  specdec::jakiro::tree_drafter<specdec::eigen> drafter(b, buf);
  specdec::jakiro::static_drafter<specdec::eigen> want(b, buf, 5, 3);
  const std::vector<std::int32_t> committed = {3, 4, 5};
  const specdec::draft_request* r = drafter.begin({committed});
  REQUIRE(r != nullptr);
  std::uint64_t seed = 30;
  bool root = true;
  while (r != nullptr) {
    CHECK(r->logits_per_row == 2);
    const index_t rows = r->rows();
    const auto left = conformance::random_logits(seed++, rows, v), right = conformance::random_logits(seed++, rows, v);
    std::vector<float> both;  // row i's left, then its right
    for (index_t i = 0; i < rows; ++i) {
      both.insert(both.end(), left.data.begin() + i * v, left.data.begin() + (i + 1) * v);
      both.insert(both.end(), right.data.begin() + i * v, right.data.begin() + (i + 1) * v);
    }
    const specdec::matrix_view<const float> l(left.data.data(), rows, v), rt(right.data.data(), rows, v);
    const auto step = root ? want.begin(l, rt) : want.expand(l, rt);
    root = false;
    r = drafter.advance(specdec::matrix_view<const float>(both.data(), 2 * rows, v));
    if (r != nullptr) CHECK(r->tokens == step.input_ids);
  }
  CHECK(want.done());
  CHECK(drafter.finish().tree.token == want.tree_candidates());
}

TEST_CASE("match_length_context buckets match lengths 2, 3, 4-7, 8-15, 16+") {
  const std::vector<std::pair<index_t, index_t>> want = {{0, 0}, {1, 0}, {2, 0}, {3, 1}, {4, 2}, {7, 2}, {8, 3}, {15, 3}, {16, 4}, {99, 4}};
  for (const auto& [match, context] : want) CHECK(specdec::match_length_context(match) == context);
}

TEST_CASE("ngram_drafter: the most recent continuation as the main branch, side branches of length / 8") {
  // "1 2 3" occurs three times before the end; each occurrence goes on differently.
  std::vector<std::int32_t> history;
  for (const std::int32_t lead : {40, 50, 60}) {
    history.insert(history.end(), {1, 2, 3});
    for (std::int32_t t = 0; t < 20; ++t) history.push_back(lead + t);
  }
  history.insert(history.end(), {1, 2, 3});
  const specdec::ngram_options options{.max_ngram = 3, .min_ngram = 2, .branches = 3};
  const auto continuations = specdec::ngram_continuations(history, 16, options);
  REQUIRE(continuations.size() == 3);
  CHECK(continuations[0].front() == 60);  // most recent first
  // Not adaptive: all 16 rows the main continuation offers, 16 - 2 x 2 of them its own, 2 per side branch.
  specdec::ngram_drafter fixed({.options = options, .longest = 16, .adaptive = false});
  CHECK(fixed.begin({history}) == nullptr);
  CHECK(fixed.match_length() == 3);
  const auto cut = [](std::vector<std::int32_t> c, std::size_t n) { return c.resize(n), c; };
  const auto want = specdec::continuation_tree(3, {cut(continuations[0], 12), cut(continuations[1], 2), cut(continuations[2], 2)});
  const specdec::draft_tree tree = fixed.finish().tree;
  CHECK(tree.token == want.token);
  CHECK(tree.parent == want.parent);
  CHECK(tree.size() == 1 + 16);
  // A chain: propose_ngram's.
  specdec::ngram_drafter chain({.options = {.max_ngram = 3, .min_ngram = 2}, .longest = 16, .adaptive = false});
  chain.begin({history});
  CHECK(chain.finish().tree.token == specdec::propose_ngram(history, 16, {.max_ngram = 3, .min_ngram = 2}).token);
  // Under 8 rows no side branch; no match, the root alone.
  specdec::ngram_drafter narrow({.options = options, .longest = 7, .adaptive = false});
  narrow.begin({history});
  CHECK(narrow.finish().tree.token == specdec::propose_ngram(history, 7, {.max_ngram = 3, .min_ngram = 2}).token);
  const std::vector<std::int32_t> fresh = {5, 6, 7, 8};
  narrow.begin({fresh});
  CHECK(narrow.match_length() == 0);
  CHECK(narrow.finish().tree.size() == 1);
  // Many branches over few rows: the main branch keeps a token.
  specdec::ngram_drafter crowded({.options = {.max_ngram = 3, .min_ngram = 2, .branches = 16}, .longest = 8, .adaptive = false});
  crowded.begin({history});
  CHECK(crowded.finish().tree.size() == 1 + 8);
}

TEST_CASE("ngram_drafter learns acceptance per bucket of match length") {
  std::vector<std::int32_t> history;
  for (std::int32_t t = 0; t < 40; ++t) history.push_back(100 + t % 20);  // period 20: a long match
  specdec::ngram_drafter lookup({.options = {.max_ngram = 16, .min_ngram = 2}, .longest = 8});
  CHECK(lookup.policy().contexts() == specdec::match_length_contexts);
  lookup.begin({history});
  CHECK(lookup.match_length() == 16);
  const specdec::draft_tree tree = lookup.finish().tree;
  CHECK(tree.max_depth() == 1);  // the first draft of all is a one-token probe
  const std::vector<std::int32_t> path = {1};
  lookup.feedback({.accepted_nodes = path, .target_seconds = 1e-3});
  CHECK(!lookup.policy().acceptance(specdec::match_length_context(16)).empty());
  CHECK(lookup.policy().acceptance(0).empty());
  specdec::ngram_drafter pooled({.options = {.max_ngram = 16, .min_ngram = 2}, .longest = 8, .by_match_length = false});
  CHECK(pooled.policy().contexts() == 1);
}

TEST_CASE("drafter feedback prices the rows the target decoded: a pruned draft's, not the proposal's") {
  std::vector<std::int32_t> history;
  for (std::int32_t t = 0; t < 40; ++t) history.push_back(100 + t % 20);
  specdec::ngram_drafter lookup({.options = {.max_ngram = 16, .min_ngram = 2}, .longest = 8, .adaptive = false});
  lookup.begin({history});
  const specdec::draft_tree tree = lookup.finish().tree;
  REQUIRE(tree.size() == 9);
  // A grammar pruned the draft to its root and two nodes before the target forward.
  lookup.feedback({.accepted_nodes = {}, .target_seconds = 2e-3, .target_rows = 3});
  CHECK(lookup.policy().target_cost()(3) == doctest::Approx(2e-3));
  CHECK(lookup.policy().target_cost()(1) == doctest::Approx(2e-3));  // below every measured count: that one's
  lookup.begin({history});
  (void)lookup.finish();
  lookup.feedback({.accepted_nodes = {}, .target_seconds = 5e-3});  // 0: the draft's own 9 rows
  CHECK(lookup.policy().target_cost()(9) == doctest::Approx(5e-3));
  lookup.begin({history});
  (void)lookup.finish();
  CHECK_THROWS_WITH_AS(lookup.feedback({.accepted_nodes = {}, .target_seconds = 1e-3, .target_rows = 10}),
                       "specdec::drafter::feedback: target_rows = 10; expected 0 (the draft's 9 nodes) or the rows decoded, "
                       "at most that",
                       specdec::invalid_argument);
}

TEST_CASE("suffix_drafter drafts suffix_cache::speculate's first nodes, as many as the policy chooses") {
  specdec::suffix_cache<> cache;
  const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3};
  cache.start_request(7, prompt);
  const specdec::suffix_options tree_options{.tree = true};
  specdec::suffix_drafter<> fixed(cache, 7, {.options = tree_options, .adaptive = false});
  CHECK(fixed.begin({prompt}) == nullptr);
  const auto found = cache.speculate(7, std::span<const std::int32_t>(prompt), tree_options);
  const auto want = specdec::suffix_draft_tree(prompt.back(), found);
  CHECK(want.size() > 2);
  CHECK(fixed.finish().tree.token == want.token);
  CHECK(fixed.match_length() == found.match_length);
  // Capped by longest: the first nodes, parents before children.
  specdec::suffix_drafter<> capped(cache, 7, {.options = tree_options, .longest = 1, .adaptive = false});
  capped.begin({prompt});
  CHECK(capped.finish().tree.token == std::vector<std::int32_t>{prompt.back(), found.token[0]});
  specdec::suffix_drafter<> adaptive(cache, 7);
  adaptive.begin({prompt});
  CHECK(adaptive.finish().tree.max_depth() == 1);  // the policy's first draft is a one-token probe
  CHECK(adaptive.policy().contexts() == specdec::suffix_drafter<>::suffix_contexts);
  const std::vector<std::int32_t> path = {1};
  adaptive.feedback({.accepted_nodes = path, .target_seconds = 1e-3});
  CHECK(!adaptive.policy().acceptance(specdec::suffix_drafter<>::suffix_match_context(found)).empty());
  // The drafter moves to another request with what its policy learned.
  cache.start_request(8, prompt);
  adaptive.bind(cache, 8);
  adaptive.begin({prompt});
  CHECK(adaptive.finish().tree.size() > 1);
  specdec::suffix_drafter<> unknown(cache, 9);
  CHECK(error_of([&] { unknown.begin({prompt}); }).find("not active") != std::string::npos);
  // A cache of 64-bit tokens drafts the same tree from the int32 context.
  specdec::suffix_cache<std::int64_t> wide_cache;
  const std::vector<std::int64_t> wide_prompt(prompt.begin(), prompt.end());
  wide_cache.start_request(7, wide_prompt);
  specdec::suffix_drafter<std::int64_t> wide(wide_cache, 7, {.options = tree_options, .adaptive = false});
  wide.begin({prompt});
  CHECK(wide.finish().tree.token == want.token);
}

TEST_CASE("chain_drafter: greedy argmax chains, sampled inverse-CDF draws with their distributions kept") {
  specdec::eigen b;
  const index_t v = 50;
  const std::vector<std::int32_t> committed = {7};
  for (const float temperature : {0.0f, 0.7f}) {
    CAPTURE(temperature);
    std::vector<double> top1s;  // what the stop rule is shown, one per drafted token
    specdec::chain_drafter<specdec::eigen> drafter(b, {.longest = 3, .adaptive = false, .stop = [&](double top1, index_t drafted) {
                                                         top1s.push_back(top1);
                                                         CHECK(drafted == ssize(top1s));
                                                         return false;
                                                       }});
    const specdec::draft_request* r = drafter.begin({committed, temperature, specdec::philox_stream{11, 1}});
    std::vector<std::vector<float>> rows;
    for (index_t i = 0; i < 3; ++i) {
      REQUIRE(r != nullptr);
      CHECK(r->depth[0] == i);
      CHECK(r->mask_cols == i + 1);
      rows.push_back(conformance::random_logits(90 + static_cast<std::uint64_t>(i), 1, v).data);
      r = drafter.advance(specdec::matrix_view<const float>(rows.back().data(), 1, v));
    }
    CHECK(r == nullptr);
    const auto d = drafter.finish();
    REQUIRE(d.tree.size() == 4);
    for (index_t i = 0; i < 3; ++i) {
      // The reference: softmax at T (1 when greedy) in double, then argmax or the inverse CDF.
      const auto& x = rows[static_cast<std::size_t>(i)];
      const double t = temperature > 0 ? temperature : 1.0;
      double m = -INFINITY, sum = 0;
      for (const float f : x) m = std::max(m, double(f));
      std::vector<double> q;
      for (const float f : x) sum += q.emplace_back(std::exp((double(f) - m) / t));
      for (auto& p : q) p /= sum;
      std::int32_t want = static_cast<std::int32_t>(std::max_element(q.begin(), q.end()) - q.begin());
      if (temperature > 0) {
        const double u = specdec::philox_stream{11, 1}.uniform_double(static_cast<std::uint64_t>(i));
        double acc = 0;
        for (std::size_t j = 0; j < q.size(); ++j)
          if ((acc += q[j]) > u) {
            want = static_cast<std::int32_t>(j);
            break;
          }
        for (index_t j = 0; j < v; ++j)
          CHECK(d.probs[static_cast<std::size_t>(i * v + j)] == doctest::Approx(q[static_cast<std::size_t>(j)]).epsilon(1e-5));
      }
      CHECK(d.tree.token[static_cast<std::size_t>(i + 1)] == want);
      // The stop rule is not asked after the last token the length allows.
      if (i < 2) CHECK(top1s.at(static_cast<std::size_t>(i)) == doctest::Approx(*std::max_element(q.begin(), q.end())).epsilon(1e-5));
    }
    CHECK(top1s.size() == 2);
    if (temperature > 0) CHECK(d.draft_rows == std::vector<index_t>{-1, 0, 1, 2});
    else CHECK((d.probs.empty() && d.draft_rows.empty()));
  }
  specdec::chain_drafter<specdec::eigen> drafter(b, {});
  CHECK(error_of([&] { drafter.begin({committed, -1.0f}); }).find("temperature = -1") != std::string::npos);
}

TEST_CASE("an adaptive drafter whose drafts are never accepted and cost a forward stops drafting") {
  specdec::eigen b;
  specdec::chain_drafter<specdec::eigen> drafter(b, {.longest = 6});
  const std::vector<std::int32_t> committed = {3, 4};
  const auto logits = conformance::random_logits(5, 1, 30);
  index_t drafted = 0, steps = 200;
  for (index_t step = 0; step < steps; ++step) {
    const auto d = specdec::run_drafter(drafter, {committed}, [&](const specdec::draft_request&) {
      return specdec::matrix_view<const float>(logits.data.data(), 1, 30);
    });
    drafted += d.tree.size() - 1;
    drafter.feedback({{}, /*target_seconds=*/1e-3, /*draft_seconds=*/1e-3 * static_cast<double>(d.tree.size() - 1)});
  }
  MESSAGE("drafted ", drafted, " tokens in ", steps, " steps");
  CHECK(drafted < steps / 10);  // probes only
}

TEST_CASE("best_block_tree: the best root paths through per-position candidates, parents first, against every path") {
  // Distinct log-probabilities: no ties, so the set of best paths is unique.
  const index_t k = 3, positions = 4;
  std::vector<float> lp;
  std::vector<std::int32_t> ids;
  for (index_t i = 0; i < positions * k; ++i) {
    lp.push_back(-0.05f - 0.173f * static_cast<float>((i * 7) % 13) - 0.011f * static_cast<float>(i));
    ids.push_back(static_cast<std::int32_t>(100 + i));
  }
  // Every root path: score = its ranks' summed log-probabilities.
  std::map<std::vector<index_t>, double> all;
  std::vector<std::vector<index_t>> frontier = {{}};
  while (!frontier.empty()) {
    const auto path = frontier.back();
    frontier.pop_back();
    if (static_cast<index_t>(path.size()) == positions) continue;
    for (index_t r = 0; r < k; ++r) {
      auto next = path;
      next.push_back(r);
      double score = 0;
      for (std::size_t d = 0; d < next.size(); ++d) score += lp[d * static_cast<std::size_t>(k) + static_cast<std::size_t>(next[d])];
      all[next] = score;
      frontier.push_back(next);
    }
  }
  for (const index_t nodes : {0, 1, 5, 17, 200}) {
    const auto tree = specdec::best_block_tree(7, ids, lp, k, positions, nodes);
    std::vector<double> scores;
    for (const auto& [path, score] : all) scores.push_back(score);
    std::sort(scores.rbegin(), scores.rend());
    const index_t expected = std::min<index_t>(nodes, static_cast<index_t>(all.size()));
    REQUIRE(tree.size() == expected + 1);
    CHECK(tree.token[0] == 7);
    // Reconstruct each node's path of ranks; it must be among the best `expected` and parents first.
    std::vector<std::vector<index_t>> path_of(static_cast<std::size_t>(tree.size()));
    for (index_t i = 1; i < tree.size(); ++i) {
      const auto parent = tree.parent[static_cast<std::size_t>(i)];
      REQUIRE(parent < i);
      auto path = path_of[static_cast<std::size_t>(parent)];
      const index_t d = static_cast<index_t>(path.size());
      const index_t rank = tree.token[static_cast<std::size_t>(i)] - 100 - d * k;
      REQUIRE((rank >= 0 && rank < k));
      path.push_back(rank);
      path_of[static_cast<std::size_t>(i)] = path;
      CHECK(tree.depth[static_cast<std::size_t>(i)] == d + 1);
      CHECK(std::abs(tree.score[static_cast<std::size_t>(i)] - all.at(path)) < 1e-5);
      CHECK(all.at(path) == scores[static_cast<std::size_t>(i - 1)]);  // node i is the i-th best path
    }
  }
  CHECK(error_of([&] { (void)specdec::best_block_tree(7, ids, lp, k + 1, positions, 4); }).find("expected positions x k") != std::string::npos);
  auto positive = lp;
  positive[5] = 0.25f;
  CHECK(error_of([&] { (void)specdec::best_block_tree(7, ids, positive, k, positions, 4); }).find("log_probs[5] = 0.25") !=
        std::string::npos);
}

TEST_CASE_TEMPLATE("block_drafter: one block request; the chain is each row's argmax, the tree best_block_tree of each row's top-k", B,
                   SPECDEC_DRAFTER_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 50, block = 5;
  const std::vector<std::int32_t> committed = {4, 8, 15, 16};
  const auto rows = conformance::random_logits(23, block, v);
  auto logits = h.up(rows.data);
  const auto row_argmax = [&](index_t r) {
    const auto* row = rows.data.data() + r * v;
    return static_cast<std::int32_t>(std::max_element(row, row + v) - row);
  };
  {
    specdec::block_drafter<B> chain(h.b, {.block_size = block, .mask_token = 49, .adaptive = false});
    const specdec::draft_request* r = chain.begin({committed});
    REQUIRE(r != nullptr);
    CHECK(r->tokens == std::vector<std::int32_t>{16, 49, 49, 49, 49});
    CHECK(r->depth == std::vector<std::int32_t>{0, 1, 2, 3, 4});
    CHECK(r->parent_row == std::vector<std::int32_t>(5, -1));
    CHECK(r->mask == std::vector<std::uint8_t>(25, 1));  // no causal mask: each row sees the whole block
    CHECK(r->positions(3) == std::vector<std::int64_t>{3, 4, 5, 6, 7});
    CHECK(chain.advance(logits.matrix(block, v)) == nullptr);
    const auto tree = chain.finish().tree;
    CHECK(tree.token == std::vector<std::int32_t>{16, row_argmax(1), row_argmax(2), row_argmax(3), row_argmax(4)});
    CHECK(tree.parent == std::vector<std::int32_t>{-1, 0, 1, 2, 3});
  }
  {
    specdec::block_drafter<B> branching(h.b, {.block_size = block, .mask_token = 49, .top_k = 3, .nodes = 9, .adaptive = false});
    REQUIRE(branching.begin({committed}) != nullptr);
    CHECK(branching.advance(logits.matrix(block, v)) == nullptr);
    const auto tree = branching.finish().tree;
    // The reference: each row's log-softmax, its top 3 by value (ties to the lower id).
    std::vector<std::int32_t> ids;
    std::vector<float> lp;
    for (index_t r = 1; r < block; ++r) {
      const auto* row = rows.data.data() + r * v;
      const double m = *std::max_element(row, row + v);
      double sum = 0;
      for (index_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(row[j]) - m);
      std::vector<std::int32_t> order(static_cast<std::size_t>(v));
      for (index_t j = 0; j < v; ++j) order[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j);
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return row[a] > row[b]; });
      for (index_t j = 0; j < 3; ++j) {
        ids.push_back(order[static_cast<std::size_t>(j)]);
        lp.push_back(static_cast<float>(static_cast<double>(row[order[static_cast<std::size_t>(j)]]) - m - std::log(sum)));
      }
    }
    const auto want = specdec::best_block_tree(16, ids, lp, 3, block - 1, 9);
    CHECK(tree.token == want.token);
    CHECK(tree.parent == want.parent);
    for (std::size_t i = 0; i < want.score.size(); ++i) CHECK(std::abs(tree.score[i] - want.score[i]) < 1e-5f);
  }
  {
    // shrink_block: a step cut to depth 2 runs three rows.
    specdec::block_drafter<B> shrink(h.b, {.block_size = block, .mask_token = 49, .nodes = 2, .adaptive = false, .shrink_block = true});
    const specdec::draft_request* r = shrink.begin({committed});
    REQUIRE(r != nullptr);
    CHECK(r->rows() == 3);
    CHECK(error_of([&] { (void)shrink.advance(logits.matrix(block, v)); }).find("logits has 5 rows; expected one per row (3)") !=
          std::string::npos);
    CHECK(shrink.advance(specdec::matrix_view<const float, typename B::memory_space>(logits.view().data(), 3, v)) == nullptr);
    CHECK(shrink.finish().tree.token == std::vector<std::int32_t>{16, row_argmax(1), row_argmax(2)});
  }
  {
    // A reduced draft vocabulary: column i is target id i + d2t[i].
    std::vector<std::int32_t> d2t(static_cast<std::size_t>(v));
    for (index_t i = 0; i < v; ++i) d2t[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(1000 + 3 * i);
    specdec::block_drafter<B> mapped(h.b, {.block_size = block, .mask_token = 7000, .adaptive = false, .d2t = d2t});
    REQUIRE(mapped.begin({committed}) != nullptr);
    CHECK(mapped.advance(logits.matrix(block, v)) == nullptr);
    const auto to_target = [](std::int32_t c) { return c + 1000 + 3 * c; };
    CHECK(mapped.finish().tree.token ==
          std::vector<std::int32_t>{16, to_target(row_argmax(1)), to_target(row_argmax(2)), to_target(row_argmax(3)), to_target(row_argmax(4))});
    d2t[3] = -10;
    CHECK(error_of([&] { specdec::block_drafter<B>(h.b, {.block_size = block, .d2t = d2t}); }).find("d2t[3] = -10 maps column 3 to -7") !=
          std::string::npos);
  }
  CHECK(error_of([&] { specdec::block_drafter<B>(h.b, {.block_size = 1}); }).find("block_size = 1") != std::string::npos);
  specdec::block_drafter<B> idle(h.b, {.block_size = block});
  CHECK(error_of([&] { (void)idle.advance(logits.matrix(block, v)); }).find("no draft forward is pending") != std::string::npos);
}

TEST_CASE("a block drafter's time is per draft, not per token: the policy drafts the whole block where one forward pays for it") {
  // Every draft token accepted; a target forward costs 1 s at any row count up to 9; the draft's
  // forward costs 1.2 s whatever its length. Per draft, depth 8 commits 9 tokens in 2.2 s, the best;
  // the same 1.2 s charged per token would make every draft cost more than it gains (9 tokens in
  // 10.6 s, 2 in 2.2 s).
  specdec::policy::acceptance_by_depth acceptance;
  for (int i = 0; i < 50; ++i) acceptance.record(8, 8);
  specdec::policy::forward_cost cost;
  for (index_t rows = 1; rows <= 9; ++rows) cost.record(rows, 1.0);
  CHECK(specdec::policy::best_draft_length(acceptance, cost, 0.0, 8, 0.5, 0.0, 1.2) == 8);
  CHECK(specdec::policy::best_draft_length(acceptance, cost, 1.2, 8, 0.5, 0.0, 0.0) == 0);
  CHECK(error_of([&] { (void)specdec::policy::best_draft_length(acceptance, cost, 0.0, 8, 0.5, 0.0, -1.0); }).find("step_seconds = -1") !=
        std::string::npos);
  // Through feedback: block_drafter reports its draft-model time as one step.
  specdec::eigen b;
  specdec::block_drafter<specdec::eigen> drafter(b, {.block_size = 9, .mask_token = 0, .adaptive = true});
  const std::vector<std::int32_t> committed = {3, 4};
  for (int step = 0; step < 40; ++step) {
    const specdec::draft_request* r = drafter.begin({committed});
    if (r == nullptr) {
      drafter.feedback({.accepted_nodes = {}, .target_seconds = 1.0});
      continue;
    }
    std::vector<float> logits(static_cast<std::size_t>(r->rows() * 10), 0.0f);
    for (index_t row = 0; row < r->rows(); ++row) logits[static_cast<std::size_t>(row * 10 + 1)] = 5.0f;
    CHECK(drafter.advance(specdec::matrix_view<const float>(logits.data(), r->rows(), 10)) == nullptr);
    const auto tree = drafter.finish().tree;
    std::vector<std::int32_t> path;
    for (index_t i = 1; i < tree.size(); ++i) path.push_back(static_cast<std::int32_t>(i));
    drafter.feedback({.accepted_nodes = path, .target_seconds = 1.0, .draft_seconds = 1.2});
  }
  const specdec::draft_request* r = drafter.begin({committed});
  REQUIRE(r != nullptr);
  CHECK(drafter.advance(specdec::matrix_view<const float>(std::vector<float>(90, 0.0f).data(), 9, 10)) == nullptr);
  CHECK(drafter.finish().tree.size() == 9);  // the whole block: 8 drafts
}
