// SPDX-License-Identifier: Apache-2.0
// eagle2_batch_builder (the device-resident EAGLE-2 / Jakiro build) against eagle2_tree_builder on the
// same backend (and with 4-thread teams): every step's frontier, parent slots, input ids and draft mask, and the finished trees
// (tokens, parents, depths, scores, selected candidates), bit for bit, with and without d2t and Jakiro's
// dual step; then the finished trees verified on the device by the batched greedy verifier, equal to
// verify_greedy over the host builder's trees; and the errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/eagle2_batch.hpp>

#include "backend_conformance.hpp"
#include "team_backends.hpp"

using specdec::index_t;

namespace {

struct build_case {
  const char* name;
  specdec::dynamic_tree_config config;
  index_t batch;
  index_t vocab;
  bool dual = false;
};

std::vector<build_case> build_cases() {
  std::vector<std::int32_t> d2t(40);
  for (std::size_t t = 0; t < d2t.size(); ++t) d2t[t] = static_cast<std::int32_t>(3 * t + 1) - static_cast<std::int32_t>(t);  // t -> 3t + 1
  return {
      {"k 3, depth 3, 10 nodes", {.top_k = 3, .depth = 3, .total_tokens = 10}, 3, 50},
      {"k 4, depth 2, 21 nodes", {.top_k = 4, .depth = 2, .total_tokens = 21}, 2, 64},
      {"every candidate", {.top_k = 2, .depth = 3, .total_tokens = 15}, 2, 30},
      {"no expansion", {.top_k = 5, .depth = 0, .total_tokens = 4}, 3, 20},
      {"EAGLE-3 d2t", {.top_k = 3, .depth = 2, .total_tokens = 9, .d2t = d2t}, 2, 40},
      {"Jakiro dual step", {.top_k = 3, .depth = 4, .total_tokens = 16}, 2, 50, true},
  };
}

template <class B, class T>
std::vector<T> down(B& b, specdec::matrix_view<const T, typename B::memory_space> m) {
  return b.download(specdec::vector_view<const T, typename B::memory_space>(m.data(), m.rows() * m.cols()));
}

}  // namespace

TEST_CASE_TEMPLATE("eagle2_batch_builder builds eagle2_tree_builder's trees on the backend", B, SPECDEC_TEAM_BACKENDS) {
  std::uint64_t seed = 300;
  for (const build_case& c : build_cases()) {
    const std::string name = c.name;
    CAPTURE(name);
    const index_t k = c.config.top_k, batch = c.batch, v = c.vocab;
    B b;
    specdec::eagle2_tree_builder<B> host(b, c.config, batch);
    specdec::eagle2_batch_builder<B> device(b, c.config, batch);
    const conformance::matrix root = conformance::random_logits(seed++, batch, v, 6.0f);
    std::vector<std::int32_t> roots;
    for (index_t r = 0; r < batch; ++r) roots.push_back(static_cast<std::int32_t>(7 * r + 2));
    auto root_logits = b.upload(std::span<const float>(root.data));
    auto root_tokens = b.upload(std::span<const std::int32_t>(roots));
    const index_t target_vocab = c.config.d2t.empty() ? v : 3 * v + 2;
    specdec::draft_step want = host.begin(root_logits.matrix(batch, v), roots, target_vocab);
    auto got = device.begin(root_logits.matrix(batch, v), root_tokens.view(), target_vocab);
    const auto compare = [&](const specdec::draft_step& w, const typename specdec::eagle2_batch_builder<B>::step_views& g) {
      CHECK(g.step == w.step);
      CHECK(down(b, g.input_ids) == w.input_ids);
      CHECK(down(b, g.frontier) == w.frontier);
      CHECK(down(b, g.parent_slot) == w.parent_slot);
      CHECK(g.draft_mask.cols() == w.mask_cols);
      CHECK(down(b, g.draft_mask) == w.draft_mask);
    };
    compare(want, got);
    while (!host.expansions_complete()) {
      const bool dual = c.dual && host.steps_done() + 2 == c.config.depth;
      const conformance::matrix left = conformance::random_logits(seed++, batch * k, v, 6.0f);
      auto left_rows = b.upload(std::span<const float>(left.data));
      if (dual) {
        const conformance::matrix right = conformance::random_logits(seed++, batch * k, v, 6.0f);
        auto right_rows = b.upload(std::span<const float>(right.data));
        want = host.expand_dual(left_rows.matrix(batch * k, v), right_rows.matrix(batch * k, v));
        got = device.expand_dual(left_rows.matrix(batch * k, v), right_rows.matrix(batch * k, v));
      } else {
        want = host.expand(left_rows.matrix(batch * k, v));
        got = device.expand(left_rows.matrix(batch * k, v));
      }
      compare(want, got);
    }
    CHECK(device.expansions_complete());
    const index_t t = c.config.total_tokens;
    auto tokens = b.template allocate<std::int32_t>(batch * t);
    auto parents = b.template allocate<std::int32_t>(batch * t);
    auto depths = b.template allocate<std::int32_t>(batch * t);
    auto scores = b.template allocate<float>(batch * t);
    auto selected = b.template allocate<std::int32_t>(batch * (t - 1));
    device.finish({tokens.matrix(batch, t), parents.matrix(batch, t), depths.matrix(batch, t), scores.matrix(batch, t),
                   selected.matrix(batch, t - 1)});
    const auto results = host.finish();
    std::vector<std::int32_t> w_tokens, w_parents, w_depths, w_selected;
    std::vector<float> w_scores;
    for (const auto& r : results) {
      w_tokens.insert(w_tokens.end(), r.tree.token.begin(), r.tree.token.end());
      w_parents.insert(w_parents.end(), r.tree.parent.begin(), r.tree.parent.end());
      w_depths.insert(w_depths.end(), r.tree.depth.begin(), r.tree.depth.end());
      w_scores.insert(w_scores.end(), r.tree.score.begin(), r.tree.score.end());
      w_selected.insert(w_selected.end(), r.selected.begin(), r.selected.end());
    }
    CHECK(b.download(tokens.view()) == w_tokens);
    CHECK(b.download(parents.view()) == w_parents);
    CHECK(b.download(depths.view()) == w_depths);
    CHECK(b.download(scores.view()) == w_scores);
    CHECK(b.download(selected.view()) == w_selected);

    // The trees as they are, verified on the backend: the batched greedy verifier over random target
    // rows equals verify_greedy over the host builder's trees.
    const conformance::matrix target = conformance::random_logits(seed++, batch * t, target_vocab, 3.0f);
    auto target_rows = b.upload(std::span<const float>(target.data));
    specdec::sampling::tree_batch<typename B::memory_space> trees;
    trees.tokens = tokens.matrix(batch, t);
    trees.parents = parents.matrix(batch, t);
    auto out_tokens = b.template allocate<std::int32_t>(batch * t);
    auto argmax = b.template allocate<std::int32_t>(batch * t);
    specdec::sampling::verify_greedy(b, target_rows.matrix(batch * t, target_vocab), trees, {.tokens = out_tokens.matrix(batch, t)},
                                     argmax.view());
    std::vector<specdec::sampling::speculative_request> requests;
    for (index_t r = 0; r < batch; ++r) requests.push_back({.tree = results[static_cast<std::size_t>(r)].tree, .target_row = r * t});
    const auto verified = specdec::sampling::verify_greedy(b, target_rows.matrix(batch * t, target_vocab), requests);
    CHECK(b.download(out_tokens.view()) == specdec::sampling::padded_tokens(verified, t));
  }
}

TEST_CASE_TEMPLATE("eagle2_batch_builder names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  B b;
  const index_t v = 30;
  const conformance::matrix root = conformance::random_logits(5, 2, v, 4.0f);
  auto logits = b.upload(std::span<const float>(root.data));
  {
    const std::vector<std::int32_t> roots = {3, 30};
    auto root_tokens = b.upload(std::span<const std::int32_t>(roots));
    specdec::eagle2_batch_builder<B> builder(b, {.top_k = 2, .depth = 1, .total_tokens = 4}, 2);
    CHECK(conformance::error_of([&] { builder.begin(logits.matrix(2, v), root_tokens.view(), v); }) ==
          "specdec::eagle2_batch_builder::begin: root_tokens[1] = 30; expected a token id in [0, 30)");
  }
  {
    std::vector<std::int32_t> d2t(static_cast<std::size_t>(v), 0);
    d2t[static_cast<std::size_t>(v - 1)] = 5;  // maps the last draft token past a target vocabulary of V
    const conformance::matrix peaked = [&] {
      conformance::matrix m = conformance::random_logits(6, 1, v, 1.0f);
      m.data[static_cast<std::size_t>(v - 1)] = 50.0f;
      return m;
    }();
    auto peaked_logits = b.upload(std::span<const float>(peaked.data));
    const std::vector<std::int32_t> roots = {3};
    auto root_tokens = b.upload(std::span<const std::int32_t>(roots));
    specdec::eagle2_batch_builder<B> builder(b, {.top_k = 2, .depth = 1, .total_tokens = 4, .d2t = d2t}, 1);
    CHECK(conformance::error_of([&] { builder.begin(peaked_logits.matrix(1, v), root_tokens.view(), v); }) ==
          "specdec::eagle2_batch_builder::begin: request 0: d2t maps draft token 29 to 34; expected a target id in [0, 30)");
  }
  {
    // The same fault found in an expansion, in the second request only (each thread of a team maps its
    // own candidates; the first flagged one is reported).
    std::vector<std::int32_t> d2t(static_cast<std::size_t>(v), 0);
    d2t[static_cast<std::size_t>(v - 1)] = 5;
    conformance::matrix first = conformance::random_logits(7, 2, v, 1.0f);
    first.data[static_cast<std::size_t>(v - 1)] = first.data[static_cast<std::size_t>(2 * v - 1)] = -50.0f;
    conformance::matrix second = conformance::random_logits(8, 4, v, 1.0f);
    second.data[static_cast<std::size_t>(3 * v - 1)] = 50.0f;  // request 1, frontier slot 0
    auto first_logits = b.upload(std::span<const float>(first.data));
    auto second_logits = b.upload(std::span<const float>(second.data));
    const std::vector<std::int32_t> roots = {3, 4};
    auto root_tokens = b.upload(std::span<const std::int32_t>(roots));
    specdec::eagle2_batch_builder<B> builder(b, {.top_k = 2, .depth = 1, .total_tokens = 4, .d2t = d2t}, 2);
    builder.begin(first_logits.matrix(2, v), root_tokens.view(), v);
    CHECK(conformance::error_of([&] { builder.expand(second_logits.matrix(4, v)); }) ==
          "specdec::eagle2_batch_builder::expand: request 1: d2t maps draft token 29 to 34; expected a target id in [0, 30)");
  }
  CHECK(conformance::error_of([&] {
          specdec::eagle2_batch_builder<B> builder(b, {.top_k = 2, .depth = 1, .total_tokens = 4, .score = specdec::tree_score::probability});
        }).find("tree_score::probability is not offered") != std::string::npos);
  CHECK(conformance::error_of([&] { specdec::eagle2_batch_builder<B> builder(b, {.top_k = 2, .depth = 1, .total_tokens = 8}); })
            .find("total_tokens = 8; expected 1 <= total_tokens <= 1 + top_k + depth * top_k^2 = 7") != std::string::npos);
  {
    specdec::eagle2_batch_builder<B> builder(b, {.top_k = 2, .depth = 1, .total_tokens = 4}, 2);
    CHECK(conformance::error_of([&] { builder.expand(logits.matrix(2, v)); }) ==
          "specdec::eagle2_batch_builder::expand: called before begin()");
    auto out = b.template allocate<std::int32_t>(8);
    CHECK(conformance::error_of([&] { builder.finish({out.matrix(2, 4), out.matrix(2, 4)}); }) ==
          "specdec::eagle2_batch_builder::finish: called before begin()");
  }
}
