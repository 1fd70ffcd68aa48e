// SPDX-License-Identifier: Apache-2.0
// Draft trees and masks: the edge cases of trees.md, malformed input, every mask layout against a
// plain reference, and the EAGLE-2 builder against a scalar reference on every backend (the peers'
// own outputs are checked by specdec-conformance on tests/data/trees).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <span>
#include <tuple>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/interop/eagle.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/trtllm.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/mask/tree_mask_batch.hpp>
#include <specdec/tree/eagle2.hpp>

#include "backend_conformance.hpp"
#include "team_backends.hpp"

#define SPECDEC_TREE_BACKENDS SPECDEC_ALL_BACKENDS

using specdec::index_t;

namespace {

using conformance::error_of;

// A tree with two branches and a chain: 0 -> {1, 2}, 1 -> {3, 4}, 3 -> {5}.
specdec::draft_tree sample_tree() { return specdec::make_tree({7, 8, 9, 10, 11, 12}, {-1, 0, 0, 1, 1, 3}); }

bool attends(const specdec::draft_tree& t, index_t i, index_t j) {
  for (index_t a = i; a >= 0; a = t.parent[static_cast<std::size_t>(a)])
    if (a == j) return true;
  return false;
}

/// Scalar EAGLE-2 reference: double-precision log-softmax, a full sort of every candidate list.
struct scalar_eagle2 {
  std::vector<double> scores;
  std::vector<int> tokens, parents;  // parent flat index, -1 root
  std::vector<int> frontier;

  static std::vector<std::pair<double, int>> ranked_log_softmax(const float* x, index_t v) {
    double m = -INFINITY, s = 0;
    for (index_t j = 0; j < v; ++j) m = std::max(m, double(x[j]));
    for (index_t j = 0; j < v; ++j) s += std::exp(double(x[j]) - m);
    std::vector<std::pair<double, int>> r;
    for (index_t j = 0; j < v; ++j) r.push_back({double(x[j]) - m - std::log(s), int(j)});
    std::stable_sort(r.begin(), r.end(), [](auto a, auto b) { return a.first > b.first; });
    return r;
  }
  void root(const float* x, index_t v, int k) {
    const auto r = ranked_log_softmax(x, v);
    for (int c = 0; c < k; ++c) {
      scores.push_back(r[c].first);
      tokens.push_back(r[c].second);
      parents.push_back(-1);
      frontier.push_back(c);
    }
  }
  void expand(const float* rows, index_t v, int k) {
    const int base = int(scores.size());
    std::vector<std::pair<double, int>> grid;
    for (int r = 0; r < k; ++r) {
      const auto ranked = ranked_log_softmax(rows + r * v, v);
      for (int c = 0; c < k; ++c) {
        const double s = scores[frontier[r]] + ranked[c].first;
        scores.push_back(s);
        tokens.push_back(ranked[c].second);
        parents.push_back(frontier[r]);
        grid.push_back({s, r * k + c});
      }
    }
    std::stable_sort(grid.begin(), grid.end(), [](auto a, auto b) { return a.first > b.first; });
    for (int s = 0; s < k; ++s) frontier[s] = base + grid[s].second;
  }
  std::vector<int> select(int keep) const {
    std::vector<int> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
    std::vector<int> sel(order.begin(), order.begin() + keep);
    std::sort(sel.begin(), sel.end());
    return sel;
  }
};

}  // namespace

TEST_CASE("draft_tree validation names the offending node") {
  specdec::draft_tree t = sample_tree();
  CHECK_NOTHROW(specdec::validate(t, 13));
  CHECK(error_of([&] { specdec::validate(t, 12); }).find("node 5 has token 12") != std::string::npos);
  auto bad = t;
  bad.parent[4] = 5;  // a parent after its child: also how a cycle would show
  CHECK(error_of([&] { specdec::validate(bad); }).find("node 4 has parent 5") != std::string::npos);
  bad = t;
  bad.depth[5] = 2;
  CHECK(error_of([&] { specdec::validate(bad); }).find("node 5 has depth 2") != std::string::npos);
  bad = t;
  bad.parent[2] = -1;  // a second root
  CHECK(error_of([&] { specdec::validate(bad); }).find("expected exactly one root") != std::string::npos);
  CHECK(error_of([] { specdec::make_tree({1, 2}, {-1, 1}); }).find("node 1 has parent 1") != std::string::npos);
  CHECK(error_of([] { specdec::validate(specdec::draft_tree{}); }).find("empty") != std::string::npos);
}

TEST_CASE("derived buffers: positions, paths in each order, links, depth offsets") {
  const auto t = sample_tree();
  std::vector<std::int64_t> pos(6);
  specdec::tree_positions(t, 100, specdec::vector_view<std::int64_t>(pos));
  CHECK(pos == std::vector<std::int64_t>{100, 101, 101, 102, 102, 103});
  const auto by_node = specdec::retrieve_paths(t);
  CHECK(by_node.paths == std::vector<std::int32_t>{0, 2, -1, -1, 0, 1, 4, -1, 0, 1, 3, 5});
  const auto lex = specdec::retrieve_paths(t, specdec::path_order::lexicographic);
  CHECK(lex.paths == std::vector<std::int32_t>{0, 1, 3, 5, 0, 1, 4, -1, 0, 2, -1, -1});
  const auto rev = specdec::retrieve_paths(t, specdec::path_order::reverse_node_index);
  CHECK(rev.paths == std::vector<std::int32_t>{0, 1, 3, 5, 0, 1, 4, -1, 0, 2, -1, -1});
  std::vector<int> first(6), next(6);
  specdec::child_links(t, specdec::vector_view<int>(first), specdec::vector_view<int>(next));
  CHECK(first == std::vector<int>{1, 3, -1, 5, -1, -1});
  CHECK(next == std::vector<int>{-1, 2, -1, 4, -1, -1});
  CHECK(specdec::depth_offsets(t) == std::vector<index_t>{0, 1, 3, 5, 6});
  // A root-only tree: one path [0].
  const auto root_only = specdec::make_tree({3}, {-1});
  CHECK(specdec::retrieve_paths(root_only).paths == std::vector<std::int32_t>{0});
}

TEST_CASE("every mask layout agrees with the ancestor relation") {
  const auto t = sample_tree();
  const index_t n = t.size(), prefix = 3;
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(n * (prefix + n)));
  specdec::tree_mask_dense(t, prefix, specdec::matrix_view<std::uint8_t>(dense.data(), n, prefix + n));
  std::vector<float> additive(dense.size());
  specdec::tree_mask_additive(t, prefix, specdec::matrix_view<float>(additive.data(), n, prefix + n));
  std::vector<std::int32_t> words(static_cast<std::size_t>(n));
  specdec::tree_mask_packed_int32(t, specdec::matrix_view<std::int32_t>(words.data(), n, 1));
  std::vector<std::uint8_t> rows8(static_cast<std::size_t>(n));
  specdec::tree_mask_bitpacked_rows(t, specdec::vector_view<std::uint8_t>(rows8));
  std::vector<std::int32_t> indptr;
  const std::vector<specdec::draft_tree> trees{t, specdec::make_tree({1, 2}, {-1, 0})};
  const std::vector<index_t> prefixes{prefix, 5};
  const auto packed = specdec::tree_mask_flashinfer_packed(trees, prefixes, indptr);
  CHECK(indptr == std::vector<std::int32_t>{0, (6 * 9 + 7) / 8, (6 * 9 + 7) / 8 + (2 * 7 + 7) / 8});
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < prefix + n; ++j) {
      const bool want = j < prefix || attends(t, i, j - prefix);
      CHECK(bool(dense[static_cast<std::size_t>(i * (prefix + n) + j)]) == want);
      CHECK(additive[static_cast<std::size_t>(i * (prefix + n) + j)] == (want ? 0.0f : -INFINITY));
      const index_t bit = i * (prefix + n) + j;
      CHECK(bool((packed[static_cast<std::size_t>(bit / 8)] >> (bit % 8)) & 1) == want);
      if (j >= prefix) {
        CHECK(bool((words[static_cast<std::size_t>(i)] >> (j - prefix)) & 1) == want);
        CHECK(bool((rows8[static_cast<std::size_t>(i)] >> (j - prefix)) & 1) == want);
      }
    }
  // Second request: two nodes, prefix 5, starts on its own byte.
  const std::uint8_t* second = packed.data() + indptr[1];
  for (index_t bit = 0; bit < 14; ++bit) {
    const index_t i = bit / 7, j = bit % 7;
    CHECK(bool((second[bit / 8] >> (bit % 8)) & 1) == (j < 5 || (j == 5) || (i == 1 && j == 6)));
  }
  // A 33-node chain: bit 31 of word 0 makes it negative, and 8-bit rows cannot hold it.
  std::vector<std::int32_t> parents(33), tokens(33, 1);
  for (int i = 0; i < 33; ++i) parents[i] = i - 1;
  const auto chain = specdec::make_tree(tokens, parents);
  std::vector<std::int32_t> chain_words(33 * 2);
  specdec::tree_mask_packed_int32(chain, specdec::matrix_view<std::int32_t>(chain_words.data(), 33, 2));
  CHECK(chain_words[32 * 2] == -1);
  CHECK(chain_words[32 * 2 + 1] == 1);
  std::vector<std::uint32_t> too_narrow(33);
  CHECK(error_of([&] { specdec::tree_mask_bitpacked_rows(chain, specdec::vector_view<std::uint32_t>(too_narrow)); })
            .find("33 nodes") != std::string::npos);
  CHECK(error_of([&] { specdec::tree_mask_dense(t, 0, specdec::matrix_view<std::uint8_t>(dense.data(), n, n + 1)); })
            .find("expected 6 x 6") != std::string::npos);
}

TEST_CASE("an engine's own arrays go through tree_view to every buffer and mask, validated as a tree") {
  // The engine keeps tokens / parents / depths in one flat array of its own (3 x n, no scores).
  const auto t = sample_tree();
  const index_t n = t.size();
  std::vector<std::int32_t> engine(static_cast<std::size_t>(3 * n));
  std::copy(t.token.begin(), t.token.end(), engine.begin());
  std::copy(t.parent.begin(), t.parent.end(), engine.begin() + n);
  std::copy(t.depth.begin(), t.depth.end(), engine.begin() + 2 * n);
  const std::span<const std::int32_t> all(engine);
  const specdec::tree_view view(all.subspan(0, static_cast<std::size_t>(n)), all.subspan(static_cast<std::size_t>(n), static_cast<std::size_t>(n)),
                                all.subspan(static_cast<std::size_t>(2 * n), static_cast<std::size_t>(n)));
  const specdec::valid_tree valid(view);
  CHECK(valid.max_depth() == 3);
  CHECK(specdec::tree_positions(view, 7) == specdec::tree_positions(t, 7));
  CHECK(specdec::retrieve_paths(valid, specdec::path_order::lexicographic).paths ==
        specdec::retrieve_paths(t, specdec::path_order::lexicographic).paths);
  CHECK(specdec::depth_offsets(view) == specdec::depth_offsets(t));
  CHECK(specdec::tree_mask_dense(valid, 2) == specdec::tree_mask_dense(t, 2));
  std::vector<std::int32_t> indptr_view, indptr_tree;
  const std::vector<specdec::tree_view> views{view};
  const std::vector<specdec::draft_tree> trees{t};
  const std::vector<index_t> prefixes{4};
  CHECK(specdec::tree_mask_flashinfer_packed(views, prefixes, indptr_view) ==
        specdec::tree_mask_flashinfer_packed(trees, prefixes, indptr_tree));
  CHECK(indptr_view == indptr_tree);
  // The shared target-side recipe: EAGLE's buffers from the engine's arrays equal the draft_tree's,
  // and the tokens, positions and paths are the tree's own.
  const auto from_view = specdec::eagle::make_buffers(valid);
  const auto from_tree = specdec::eagle::make_buffers(t);
  CHECK(from_view.tree_mask == from_tree.tree_mask);
  CHECK(from_view.retrieve_indices == from_tree.retrieve_indices);
  CHECK(from_view.draft_tokens == std::vector<std::int64_t>{7, 8, 9, 10, 11, 12});
  CHECK(from_view.position_ids == std::vector<std::int64_t>{0, 1, 1, 2, 2, 3});
  CHECK(from_view.retrieve_indices == std::vector<std::int64_t>{0, 2, -1, -1, 0, 1, 4, -1, 0, 1, 3, 5});
  CHECK((from_view.nodes == 6 && from_view.leaves == 3 && from_view.path_length == 4));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j)
      CHECK(from_view.tree_mask[static_cast<std::size_t>(i * n + j)] == (attends(t, i, j) ? 1.0f : 0.0f));
  // A malformed engine tree fails once, when it is validated, naming the node.
  engine[static_cast<std::size_t>(2 * n + 5)] = 1;  // node 5's depth
  CHECK(error_of([&] { specdec::valid_tree{view}; }).find("node 5 has depth 1") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::eagle::make_buffers(view); }).find("node 5 has depth 1") != std::string::npos);
  CHECK(error_of([&] { (void)specdec::tree_mask_dense(view, 0); }).find("node 5 has depth 1") != std::string::npos);
}

TEST_CASE("choice lists: canonical order, shipped lists, malformed lists rejected") {
  const auto medusa = specdec::make_static_tree(specdec::choices::medusa_mc_sim_7b_63());
  CHECK(medusa.size() == 64);
  CHECK(medusa.tree.max_depth() == 4);
  const auto eagle = specdec::make_static_tree(specdec::choices::eagle_mc_sim_7b_63());
  CHECK(eagle.size() == 26);
  CHECK(eagle.tree.max_depth() == 5);
  CHECK(specdec::make_static_tree(specdec::choices::jakiro_mc_sim_7b_63()).tree.max_depth() == 6);
  // Input order does not matter.
  std::vector<specdec::choice> shuffled = {{1, 0}, {0}, {0, 0}, {1}};
  const auto s = specdec::make_static_tree(shuffled);
  CHECK(s.tree.parent == std::vector<std::int32_t>{-1, 0, 0, 1, 2});
  CHECK(error_of([] { specdec::make_static_tree(std::vector<specdec::choice>{{0}, {1, 0}}); })
            .find("prefix [1] is not in the list") != std::string::npos);
  CHECK(error_of([] { specdec::make_static_tree(std::vector<specdec::choice>{{0}, {0}}); }).find("appears twice") !=
        std::string::npos);
  CHECK(error_of([] { specdec::make_static_tree(std::vector<specdec::choice>{{10}}); }).find("rank 10") !=
        std::string::npos);
  CHECK(error_of([] { specdec::make_static_tree(std::vector<specdec::choice>{}); }).find("empty") != std::string::npos);
  CHECK(error_of([] { specdec::make_static_tree(std::vector<specdec::choice>{{0}, {}}); }).find("empty") !=
        std::string::npos);
  CHECK(error_of([] { specdec::trtllm::make_medusa_setup(std::vector<specdec::choice>{{1}, {1, 0}}); })
            .find("without gaps") != std::string::npos);
}

TEST_CASE("SGLang build_tree: bit-packing bound, shapes") {
  const std::vector<std::int64_t> parents(1), selected(33), tokens(33), ids(1), lens(1);
  using mv = specdec::matrix_view<const std::int64_t>;
  CHECK(error_of([&] {
          specdec::sglang::build_tree(mv(parents.data(), 1, 1), mv(selected.data(), 1, 33), mv(tokens.data(), 1, 33), ids,
                                      lens, 4, 2, 34, specdec::sglang::tree_mask_mode::qlen_only_bitpacking);
        }).find("at most 32") != std::string::npos);
  CHECK(error_of([&] {
          specdec::sglang::build_tree(mv(parents.data(), 1, 1), mv(selected.data(), 1, 32), mv(tokens.data(), 1, 33), ids,
                                      lens, 4, 2, 34, specdec::sglang::tree_mask_mode::qlen_only);
        }).find("selected_index is 1 x 32") != std::string::npos);
}

TEST_CASE_TEMPLATE("EAGLE-2 builder matches the scalar reference on every backend", B, SPECDEC_TREE_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 300;
  for (const auto& shape : std::vector<std::tuple<int, int, int>>{{4, 3, 20}, {8, 2, 30}, {1, 4, 5}, {3, 0, 3}, {5, 2, 1}}) {
    // Plain variables, not structured bindings: CAPTURE and the checks below capture them in lambdas,
    // which clang 14 does not allow for bindings.
    const int k = std::get<0>(shape), depth = std::get<1>(shape), total = std::get<2>(shape);
    CAPTURE(k);
    CAPTURE(depth);
    const auto root = conformance::random_logits(11 + k, 1, v);
    specdec::dynamic_tree_config cfg{k, depth, total, specdec::tree_score::log_probability, {}};
    specdec::eagle2_tree_builder<B> builder(h.b, cfg);
    auto root_buf = h.up(root.data);
    builder.begin(root_buf.matrix(1, v), std::vector<std::int32_t>{42});
    scalar_eagle2 ref;
    ref.root(root.data.data(), v, k);
    for (int i = 0; i < depth; ++i) {
      const auto rows = conformance::random_logits(100 + i, k, v);
      auto buf = h.up(rows.data);
      const auto step = builder.expand(buf.matrix(k, v));
      ref.expand(rows.data.data(), v, k);
      for (int s = 0; s < k; ++s) CHECK(step.frontier[static_cast<std::size_t>(s)] == ref.frontier[static_cast<std::size_t>(s)]);
    }
    const auto result = builder.finish().at(0);
    const auto sel = ref.select(total - 1);
    REQUIRE(result.selected.size() == sel.size());
    CHECK(std::equal(sel.begin(), sel.end(), result.selected.begin()));
    CHECK(result.tree.size() == total);
    CHECK_NOTHROW(specdec::validate(result.tree, v));
    for (std::size_t i = 0; i < sel.size(); ++i) {
      CHECK(result.tree.token[i + 1] == ref.tokens[static_cast<std::size_t>(sel[i])]);
      CHECK(result.tree.score[i + 1] == doctest::Approx(ref.scores[static_cast<std::size_t>(sel[i])]).epsilon(1e-5));
    }
  }
}

TEST_CASE_TEMPLATE("EAGLE-2 builder rejects what it cannot build", B, SPECDEC_TREE_BACKENDS) {
  conformance::harness<B> h;
  CHECK(error_of([&] { specdec::eagle2_tree_builder<B>(h.b, {2, 1, 8, specdec::tree_score::log_probability, {}}); })
            .find("total_tokens = 8") != std::string::npos);
  CHECK(error_of([&] { specdec::eagle2_tree_builder<B>(h.b, {0, 1, 1, specdec::tree_score::log_probability, {}}); })
            .find("top_k = 0") != std::string::npos);
  // k larger than the vocabulary, NaN logits: the backend's errors, naming the argument.
  specdec::eagle2_tree_builder<B> wide(h.b, {8, 1, 4, specdec::tree_score::log_probability, {}});
  std::vector<float> small(4, 0.0f);
  auto small_buf = h.up(small);
  CHECK(error_of([&] { wide.begin(small_buf.matrix(1, 4), std::vector<std::int32_t>{0}); }).find("k = 8") !=
        std::string::npos);
  specdec::eagle2_tree_builder<B> builder(h.b, {2, 1, 4, specdec::tree_score::log_probability, {}});
  std::vector<float> nan_row = {0.0f, NAN, 1.0f, 2.0f};
  auto nan_buf = h.up(nan_row);
  CHECK(error_of([&] { builder.begin(nan_buf.matrix(1, 4), std::vector<std::int32_t>{0}); }).find("NaN") !=
        std::string::npos);
  std::vector<float> ok = {0.0f, 1.0f, 2.0f, 3.0f};
  auto ok_buf = h.up(ok);
  CHECK(error_of([&] { (void)builder.finish(); }).find("before begin") != std::string::npos);
  builder.begin(ok_buf.matrix(1, 4), std::vector<std::int32_t>{0});
  CHECK(error_of([&] { (void)builder.finish(); }).find("0 expansions done") != std::string::npos);
  CHECK(error_of([&] { builder.expand(ok_buf.matrix(1, 4)); }).find("expected 2 x 4") != std::string::npos);
  // Duplicate tokens across branches are normal: both rows propose token 3.
  std::vector<float> rows = {0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f};
  auto rows_buf = h.up(rows);
  builder.expand(rows_buf.matrix(2, 4));
  const auto tree = builder.finish().at(0).tree;
  CHECK(tree.token == std::vector<std::int32_t>{0, 3, 2, 3});
  CHECK(tree.parent == std::vector<std::int32_t>{-1, 0, 0, 1});
  // EAGLE-3 d2t that maps outside the target vocabulary.
  specdec::eagle2_tree_builder<B> mapped(h.b, {2, 0, 3, specdec::tree_score::log_probability, {0, 0, 0, 100}});
  CHECK(error_of([&] { mapped.begin(ok_buf.matrix(1, 4), std::vector<std::int32_t>{0}, 50); }).find("d2t maps draft token 3") !=
        std::string::npos);
}

TEST_CASE("segment_packbits packs each segment on its own bytes, in either bit order") {
  // A plain reference: segment s's bits, element i at bit i % 8 (little) or 7 - i % 8 (big) of byte i / 8.
  std::vector<std::uint8_t> x;
  for (int i = 0; i < 45; ++i) x.push_back(static_cast<std::uint8_t>((i * 7 + i / 3) % 3 == 0 ? 1 : (i % 5 == 0 ? 2 : 0)));
  const std::vector<std::int32_t> indptr = {2, 2, 11, 19, 40, 45};  // an empty segment, 9, 8, 21 and 5 elements
  const auto offsets = specdec::segment_packbits_offsets(indptr);
  CHECK(offsets == std::vector<std::int32_t>{0, 0, 2, 3, 6, 7});
  for (const auto order : {specdec::bit_order::little, specdec::bit_order::big}) {
    std::vector<std::uint8_t> out(static_cast<std::size_t>(offsets.back()), 0xAB);
    specdec::segment_packbits(x, indptr, order, out);
    std::vector<std::uint8_t> want(out.size(), 0);
    for (std::size_t s = 0; s + 1 < indptr.size(); ++s)
      for (std::int32_t i = 0; i < indptr[s + 1] - indptr[s]; ++i)
        if (x[static_cast<std::size_t>(indptr[s] + i)] != 0)
          want[static_cast<std::size_t>(offsets[s] + i / 8)] |= static_cast<std::uint8_t>(
              1u << (order == specdec::bit_order::little ? i % 8 : 7 - i % 8));
    CHECK(out == want);
  }
  std::vector<std::uint8_t> out(7);
  CHECK(conformance::error_of([&] { specdec::segment_packbits(x, std::vector<std::int32_t>{0, 5, 3}, specdec::bit_order::big, out); }) ==
        "specdec::segment_packbits: indptr[2] = 3 < indptr[1] = 5; expected non-decreasing offsets");
  CHECK(conformance::error_of([&] { specdec::segment_packbits(x, std::vector<std::int32_t>{0, 46}, specdec::bit_order::big, out); }) ==
        "specdec::segment_packbits: indptr ends at 46 but x has 45 elements");
  CHECK(conformance::error_of([&] { specdec::segment_packbits(x, indptr, specdec::bit_order::big, out); }) == "");
  CHECK(conformance::error_of([&] { specdec::segment_packbits(x, std::vector<std::int32_t>{0, 9}, specdec::bit_order::big, out); }) ==
        "specdec::segment_packbits: out has 7 bytes; expected 2");
}

namespace {

/// SGLang's build_tree_kernel_efficient written plainly (a map from flat index to node, a dense bool
/// mask per request, SGLang's newer semantics for malformed input): the reference the team job is held
/// to. Bit-packed rows are uint32 here; `mask` holds bools, or the rows when bit-packed.
struct reference_tree_buffers {
  std::vector<std::int64_t> positions, retrive_index, next_token, next_sibling;
  std::vector<std::uint32_t> mask;
};

reference_tree_buffers reference_build_tree(const std::vector<std::int64_t>& parent_list, index_t parent_cols,
                                            const std::vector<std::int64_t>& selected, const std::vector<std::int64_t>& seq_lens,
                                            index_t top_k, index_t num_steps, index_t n, specdec::sglang::tree_mask_mode mode,
                                            bool local) {
  using specdec::sglang::tree_mask_mode;
  const auto bs = static_cast<index_t>(seq_lens.size());
  reference_tree_buffers r;
  for (index_t b = 0; b < bs; ++b) {
    const index_t seq_len = seq_lens[static_cast<std::size_t>(b)];
    std::vector<index_t> parent(static_cast<std::size_t>(n), 0);
    for (index_t i = 1; i < n; ++i) {
      const std::int64_t group = selected[static_cast<std::size_t>(b * (n - 1) + i - 1)] / top_k;
      if (group == 0) continue;
      parent[static_cast<std::size_t>(i)] = -1;
      if (group < 0 || group >= parent_cols) continue;
      const std::int64_t want = parent_list[static_cast<std::size_t>(b * parent_cols + group)];
      for (index_t j = 0; j < n - 1; ++j)
        if (selected[static_cast<std::size_t>(b * (n - 1) + j)] == want) {
          parent[static_cast<std::size_t>(i)] = j + 1;
          break;
        }
    }
    std::vector<std::vector<bool>> tree(static_cast<std::size_t>(n), std::vector<bool>(static_cast<std::size_t>(n), false));
    std::vector<std::int64_t> first(static_cast<std::size_t>(n), -1), next(static_cast<std::size_t>(n), -1);
    for (index_t i = 1; i < n; ++i) {  // child lists in increasing order
      const index_t p = parent[static_cast<std::size_t>(i)];
      if (p < 0) continue;
      std::int64_t* link = &first[static_cast<std::size_t>(p)];
      while (*link != -1) link = &next[static_cast<std::size_t>(*link)];
      *link = i;
    }
    for (index_t i = 0; i < n; ++i) {
      tree[static_cast<std::size_t>(i)][0] = tree[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)] = true;
      index_t depth = 0, at = i;
      if (i > 0) {
        bool reached = false;
        for (index_t hop = 0; hop < num_steps && hop < n; ++hop) {
          const index_t p = parent[static_cast<std::size_t>(at)];
          ++depth;
          if (p <= 0) {
            reached = true;
            break;
          }
          tree[static_cast<std::size_t>(i)][static_cast<std::size_t>(p)] = true;
          at = p;
        }
        if (!reached) depth = num_steps;
      }
      r.positions.push_back(seq_len + depth);
      r.retrive_index.push_back(local ? i : b * n + i);
      r.next_token.push_back(first[static_cast<std::size_t>(i)]);
      r.next_sibling.push_back(next[static_cast<std::size_t>(i)]);
    }
    for (index_t i = 0; i < n; ++i) {
      if (mode == tree_mask_mode::qlen_only_bitpacking) {
        std::uint32_t bits = 0;
        for (index_t j = 0; j < n; ++j) bits |= tree[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] ? 1u << j : 0u;
        r.mask.push_back(bits);
        continue;
      }
      if (mode == tree_mask_mode::full_mask) r.mask.insert(r.mask.end(), static_cast<std::size_t>(seq_len), 1u);
      for (index_t j = 0; j < n; ++j) r.mask.push_back(tree[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] ? 1u : 0u);
    }
  }
  return r;
}

/// Random EAGLE-style inputs, valid or malformed: parents among or outside the selection, selections
/// sorted or not, negative indices.
struct build_case {
  index_t bs, n, k, steps, parent_cols;
  std::vector<std::int64_t> parent_list, selected, seq_lens;
};

build_case make_build_case(std::uint64_t seed, index_t bs, index_t n, index_t k, index_t steps, bool malformed) {
  const specdec::philox_stream rng{seed, 0};
  std::uint64_t at = 0;
  const auto draw = [&](index_t lo, index_t hi) { return lo + static_cast<index_t>(rng.uniform_double(at++) * double(hi - lo + 1)) % (hi - lo + 1); };
  build_case c{bs, n, k, steps, 1 + k * (steps - 1), {}, {}, {}};
  const index_t candidates = k + k * k * (steps - 1);
  for (index_t b = 0; b < bs; ++b) {
    c.parent_list.push_back(-1);
    for (index_t g = 1; g < c.parent_cols; ++g) c.parent_list.push_back(malformed ? draw(-2, candidates) : draw(0, std::max<index_t>(0, k * g - 1)));
    std::vector<std::int64_t> sel;
    for (index_t i = 0; i + 1 < n; ++i) sel.push_back(malformed ? draw(-1, candidates) : draw(0, candidates - 1));
    if (!malformed || draw(0, 1) == 0) std::sort(sel.begin(), sel.end());
    c.selected.insert(c.selected.end(), sel.begin(), sel.end());
    c.seq_lens.push_back(draw(0, 9));
  }
  return c;
}

}  // namespace

TEST_CASE_TEMPLATE("SGLang build_tree on a backend equals a plain reference in every mask mode", B, SPECDEC_TEAM_BACKENDS) {
  using specdec::sglang::tree_mask_mode;
  using space = typename B::memory_space;
  std::uint64_t seed = 5200;
  for (const auto& shape : {std::tuple<index_t, index_t, index_t, index_t>{1, 1, 1, 1}, {2, 6, 2, 3}, {3, 12, 4, 4}, {4, 8, 3, 5},
                            {2, 32, 8, 5}, {5, 17, 2, 9}}) {
    const index_t bs = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape), steps = std::get<3>(shape);
    for (const bool malformed : {false, true}) {
      for (int repeat = 0; repeat < 2; ++repeat, ++seed) {
        CAPTURE(seed);
        const build_case c = make_build_case(seed, bs, n, k, steps, malformed);
        for (const auto mode : {tree_mask_mode::full_mask, tree_mask_mode::qlen_only, tree_mask_mode::qlen_only_bitpacking}) {
          for (const index_t item : {1, 2, 4}) {
            if (mode != tree_mask_mode::qlen_only_bitpacking && item != 1) continue;
            if (n > 8 * item) continue;
            const bool local = (seed + static_cast<std::uint64_t>(item)) % 2 == 1;
            CAPTURE(static_cast<int>(mode));
            CAPTURE(item);
            const auto want = reference_build_tree(c.parent_list, c.parent_cols, c.selected, c.seq_lens, k, steps, n, mode, local);
            std::vector<std::uint8_t> want_bytes;  // the mask as the backend form lays it out
            for (const std::uint32_t m : want.mask)
              for (index_t byte = 0; byte < (mode == tree_mask_mode::qlen_only_bitpacking ? item : 1); ++byte)
                want_bytes.push_back(static_cast<std::uint8_t>(m >> (8 * byte)));
            B b;
            auto parents = b.upload(std::span<const std::int64_t>(c.parent_list));
            auto selected = b.upload(std::span<const std::int64_t>(c.selected));
            auto lens = b.upload(std::span<const std::int64_t>(c.seq_lens));
            // Outputs start as garbage: the job writes every entry.
            auto mask = b.upload(std::span<const std::uint8_t>(std::vector<std::uint8_t>(want_bytes.size(), 0x5A)));
            const std::vector<std::int64_t> junk(static_cast<std::size_t>(bs * n), -9);
            auto positions = b.upload(std::span<const std::int64_t>(junk));
            auto index = b.upload(std::span<const std::int64_t>(junk));
            auto next_token = b.upload(std::span<const std::int64_t>(junk));
            auto next_sibling = b.upload(std::span<const std::int64_t>(junk));
            specdec::sglang::build_tree(b, specdec::matrix_view<const std::int64_t, space>(parents.matrix(bs, c.parent_cols)),
                                        specdec::matrix_view<const std::int64_t, space>(selected.matrix(bs, n - 1)),
                                        specdec::vector_view<const std::int64_t, space>(lens.view()), mask.view(), positions.view(),
                                        index.matrix(bs, n), next_token.matrix(bs, n), next_sibling.matrix(bs, n), k, steps, mode,
                                        item, local ? specdec::sglang::retrieve_scope::local : specdec::sglang::retrieve_scope::global);
            CHECK(b.download(mask.view()) == want_bytes);
            CHECK(b.download(positions.view()) == want.positions);
            CHECK(b.download(index.view()) == want.retrive_index);
            CHECK(b.download(next_token.view()) == want.next_token);
            CHECK(b.download(next_sibling.view()) == want.next_sibling);
            if (item != 4 && mode == tree_mask_mode::qlen_only_bitpacking) continue;
            // The host form (4-byte items) gives the same buffers.
            const auto host = specdec::sglang::build_tree(
                specdec::matrix_view<const std::int64_t>(c.parent_list.data(), bs, c.parent_cols),
                specdec::matrix_view<const std::int64_t>(c.selected.data(), bs, n - 1),
                specdec::matrix_view<const std::int64_t>(c.selected.data(), bs, n - 1), std::vector<std::int64_t>(static_cast<std::size_t>(bs), 3),
                c.seq_lens, k, steps, n, mode, local ? specdec::sglang::retrieve_scope::local : specdec::sglang::retrieve_scope::global);
            if (mode == tree_mask_mode::qlen_only_bitpacking) CHECK(host.tree_mask_bits == want.mask);
            else CHECK(std::vector<std::uint32_t>(host.tree_mask.begin(), host.tree_mask.end()) == want.mask);
            CHECK(host.positions == want.positions);
            CHECK(host.retrive_index == want.retrive_index);
            CHECK(host.retrive_next_token == want.next_token);
            CHECK(host.retrive_next_sibling == want.next_sibling);
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("SGLang reconstruct_indices_from_tree_mask gives back build_tree's buffers and SGLang's kernel's on any bits", B,
                   SPECDEC_TEAM_BACKENDS) {
  using specdec::sglang::tree_mask_mode;
  using space = typename B::memory_space;
  std::uint64_t seed = 7300;
  for (const auto& shape : {std::tuple<index_t, index_t, index_t, index_t>{1, 1, 1, 1}, {1, 3, 2, 2}, {2, 6, 2, 3}, {3, 12, 4, 4},
                            {5, 17, 2, 9}}) {
    const index_t bs = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape), steps = std::get<3>(shape);
    for (int trial = 0; trial < 16; ++trial, ++seed) {
      CAPTURE(seed);
      const build_case c = make_build_case(seed, bs, n, k, steps, false);
      const auto built = reference_build_tree(c.parent_list, c.parent_cols, c.selected, c.seq_lens, k, steps, n, tree_mask_mode::qlen_only,
                                              false);
      std::vector<std::uint8_t> mask(built.mask.begin(), built.mask.end());
      specdec::philox_stream rng{seed, 1};
      if (trial % 2 == 1)  // arbitrary bits: the kernel's definitions hold for any mask
        for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = rng.uniform(i) < 0.4f ? 1 : 0;
      // SGLang's kernel's definitions, transcribed: depth = marked entries before the diagonal, parent
      // the last; next token the first later row marking the node; next sibling the first later row whose
      // last marked entry before its diagonal is the same parent.
      const auto marked = [&](index_t b, index_t i, index_t j) { return mask[static_cast<std::size_t>((b * n + i) * n + j)] != 0; };
      const auto parent = [&](index_t b, index_t i) {
        index_t p = -1;
        for (index_t j = 0; j < i; ++j)
          if (marked(b, i, j)) p = j;
        return p;
      };
      auto want = built;
      bool orphans = false;  // a node build_tree left unlinked (its parent not selected): not a tree
      for (index_t b = 0; b < bs; ++b)
        for (index_t i = 0; i < n; ++i) {
          const auto at = static_cast<std::size_t>(b * n + i);
          index_t depth = 0;
          for (index_t j = 0; j < i; ++j) depth += marked(b, i, j) ? 1 : 0;
          want.positions[at] = c.seq_lens[static_cast<std::size_t>(b)] + depth;
          want.retrive_index[at] = b * n + i;
          want.next_token[at] = want.next_sibling[at] = -1;
          for (index_t m = n - 1; m > i; --m) {
            if (marked(b, m, i)) want.next_token[at] = m;
            if (parent(b, i) >= 0 && parent(b, m) == parent(b, i)) want.next_sibling[at] = m;
          }
          if (i > 0) {
            const std::int64_t group = c.selected[static_cast<std::size_t>(b * (n - 1) + i - 1)] / k;
            if (group != 0) {
              const std::int64_t wanted = c.parent_list[static_cast<std::size_t>(b * c.parent_cols + group)];
              bool found = false;
              for (index_t j = 0; j + 1 < n; ++j) found = found || c.selected[static_cast<std::size_t>(b * (n - 1) + j)] == wanted;
              orphans = orphans || !found;
            }
          }
        }
      if (trial % 2 == 0 && !orphans) {  // a tree: its mask gives back build_tree's buffers
        CHECK(want.positions == built.positions);
        CHECK(want.next_token == built.next_token);
        CHECK(want.next_sibling == built.next_sibling);
      }
      B b;
      auto m = b.upload(std::span<const std::uint8_t>(mask));
      auto lens = b.upload(std::span<const std::int64_t>(c.seq_lens));
      const std::vector<std::int64_t> junk(static_cast<std::size_t>(bs * n), -9);
      auto positions = b.upload(std::span<const std::int64_t>(junk));
      auto index = b.upload(std::span<const std::int64_t>(junk));
      auto next_token = b.upload(std::span<const std::int64_t>(junk));
      auto next_sibling = b.upload(std::span<const std::int64_t>(junk));
      specdec::sglang::reconstruct_indices_from_tree_mask(b, specdec::vector_view<const std::uint8_t, space>(m.view()),
                                                          specdec::vector_view<const std::int64_t, space>(lens.view()), positions.view(),
                                                          index.matrix(bs, n), next_token.matrix(bs, n), next_sibling.matrix(bs, n));
      CHECK(b.download(positions.view()) == want.positions);
      CHECK(b.download(index.view()) == want.retrive_index);
      CHECK(b.download(next_token.view()) == want.next_token);
      CHECK(b.download(next_sibling.view()) == want.next_sibling);
    }
  }
  {
    // Two EAGLE trees (top-k 2, 3 steps, 6 nodes) whose selected candidates' parents are all selected:
    // their QLEN_ONLY masks give back build_tree's buffers, links included.
    const index_t bs = 2, n = 6, k = 2, steps = 3;
    const build_case c{bs, n, k, steps, 5, {-1, 0, 1, 2, 4, -1, 0, 1, 2, 4}, {0, 1, 2, 4, 6, 0, 1, 2, 3, 5}, {7, 3}};
    const auto built = reference_build_tree(c.parent_list, c.parent_cols, c.selected, c.seq_lens, k, steps, n, tree_mask_mode::qlen_only,
                                            false);
    CHECK(built.next_token == std::vector<std::int64_t>{1, 3, 4, 5, -1, -1, 1, 3, 5, -1, -1, -1});
    CHECK(built.next_sibling == std::vector<std::int64_t>{-1, 2, -1, -1, -1, -1, -1, 2, -1, 4, -1, -1});
    const std::vector<std::uint8_t> mask(built.mask.begin(), built.mask.end());
    B b;
    auto m = b.upload(std::span<const std::uint8_t>(mask));
    auto lens = b.upload(std::span<const std::int64_t>(c.seq_lens));
    auto positions = b.template allocate<std::int64_t>(bs * n);
    auto index = b.template allocate<std::int64_t>(bs * n);
    auto next_token = b.template allocate<std::int64_t>(bs * n);
    auto next_sibling = b.template allocate<std::int64_t>(bs * n);
    specdec::sglang::reconstruct_indices_from_tree_mask(b, specdec::vector_view<const std::uint8_t, space>(m.view()),
                                                        specdec::vector_view<const std::int64_t, space>(lens.view()), positions.view(),
                                                        index.matrix(bs, n), next_token.matrix(bs, n), next_sibling.matrix(bs, n));
    CHECK(b.download(positions.view()) == built.positions);
    CHECK(b.download(index.view()) == built.retrive_index);
    CHECK(b.download(next_token.view()) == built.next_token);
    CHECK(b.download(next_sibling.view()) == built.next_sibling);
  }
  // What is wrong, by name.
  B b;
  auto m = b.template allocate<std::uint8_t>(7);
  auto lens = b.upload(std::span<const std::int64_t>(std::vector<std::int64_t>{1, -1}));
  auto out = b.template allocate<std::int64_t>(4);
  auto i1 = b.template allocate<std::int64_t>(4), i2 = b.template allocate<std::int64_t>(4), i3 = b.template allocate<std::int64_t>(4);
  const std::string at = "specdec::sglang::reconstruct_indices_from_tree_mask: ";
  CHECK(error_of([&] {
          specdec::sglang::reconstruct_indices_from_tree_mask(b, specdec::vector_view<const std::uint8_t, space>(m.view()),
                                                              specdec::vector_view<const std::int64_t, space>(lens.view()), out.view(),
                                                              i1.matrix(2, 2), i2.matrix(2, 2), i3.matrix(2, 2));
        }) == at + "tree_mask has 7 entries; expected bs * N * N = 8");
  auto m8 = b.upload(std::span<const std::uint8_t>(std::vector<std::uint8_t>(8, 1)));
  CHECK(error_of([&] {
          specdec::sglang::reconstruct_indices_from_tree_mask(b, specdec::vector_view<const std::uint8_t, space>(m8.view()),
                                                              specdec::vector_view<const std::int64_t, space>(lens.view()), out.view(),
                                                              i1.matrix(2, 2), i2.matrix(2, 2), i3.matrix(2, 2));
          (void)b.download(out.view());
        }) == at + "verified_seq_len[1] = -1; expected a length in [0, 1099511627776]");
  // Outputs apart from each other and from the inputs (the checks build_tree's backend form shares).
  const std::string apart = "; expected an output that shares no element with another argument";
  CHECK(error_of([&] {
          specdec::sglang::reconstruct_indices_from_tree_mask(b, specdec::vector_view<const std::uint8_t, space>(m8.view()),
                                                              specdec::vector_view<const std::int64_t, space>(lens.view()), out.view(),
                                                              i1.matrix(2, 2), i2.matrix(2, 2), i1.matrix(2, 2));
        }) == at + "retrive_index is the same memory as retrive_next_sibling" + apart);
  auto lens_then_positions = b.upload(std::span<const std::int64_t>(std::vector<std::int64_t>{1, 2, 0, 0}));
  CHECK(error_of([&] {
          specdec::sglang::reconstruct_indices_from_tree_mask(
              b, specdec::vector_view<const std::uint8_t, space>(m8.view()),
              specdec::vector_view<const std::int64_t, space>(lens_then_positions.view().data(), 2), lens_then_positions.view(),
              i1.matrix(2, 2), i2.matrix(2, 2), i3.matrix(2, 2));
        }) == at + "positions overlaps verified_seq_len" + apart);
}

TEST_CASE_TEMPLATE("SGLang build_tree on a backend names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  using specdec::sglang::tree_mask_mode;
  using space = typename B::memory_space;
  const std::string at = "specdec::sglang::build_tree: ";
  const index_t bs = 2, n = 3;
  const std::vector<std::int64_t> parent_list = {-1, 0, 1, -1, 0, 1}, selected = {0, 1, 0, 2};
  const auto run = [&](std::vector<std::int64_t> lens, tree_mask_mode mode, index_t mask_bytes, index_t item = 4) {
    return error_of([&] {
      B b;
      auto parents = b.upload(std::span<const std::int64_t>(parent_list));
      auto sel = b.upload(std::span<const std::int64_t>(selected));
      auto l = b.upload(std::span<const std::int64_t>(lens));
      auto mask = b.template allocate<std::uint8_t>(mask_bytes);
      auto positions = b.template allocate<std::int64_t>(bs * n);
      auto index = b.template allocate<std::int64_t>(bs * n);
      auto next_token = b.template allocate<std::int64_t>(bs * n);
      auto next_sibling = b.template allocate<std::int64_t>(bs * n);
      specdec::sglang::build_tree(b, specdec::matrix_view<const std::int64_t, space>(parents.matrix(bs, 3)),
                                  specdec::matrix_view<const std::int64_t, space>(sel.matrix(bs, n - 1)),
                                  specdec::vector_view<const std::int64_t, space>(l.view()), mask.view(), positions.view(),
                                  index.matrix(bs, n), next_token.matrix(bs, n), next_sibling.matrix(bs, n), 2, 2, mode, item);
      (void)b.download(positions.view());
    });
  };
  CHECK(run({4, 5}, tree_mask_mode::full_mask, 3 * 7 + 3 * 8) == "");
  CHECK(run({4, 5}, tree_mask_mode::full_mask, 3 * 7 + 3 * 8 + 1) ==
        at + "tree_mask has 46 entries; the masks of requests 0..1 need 45 (the whole batch's); expected exactly that");
  CHECK(run({4, 5}, tree_mask_mode::full_mask, 3 * 7 + 3 * 8 - 1) ==
        at + "tree_mask has 44 entries; the masks of requests 0..1 need 45; expected at least that");
  CHECK(run({4, 5}, tree_mask_mode::full_mask, 20) == at + "tree_mask has 20 entries; the masks of requests 0..0 need 21; expected at least that");
  CHECK(run({4, -1}, tree_mask_mode::qlen_only, 18) == at + "verified_seq_len[1] = -1; expected a length in [0, 1099511627776]");
  CHECK(run({4, 5}, tree_mask_mode::qlen_only, 17) == at + "tree_mask has 17 bytes; expected 18 (bs * N * N)");
  CHECK(run({4, 5}, tree_mask_mode::qlen_only_bitpacking, 6, 1) == "");
  CHECK(run({4, 5}, tree_mask_mode::qlen_only_bitpacking, 6, 3) == at + "the bit-packed mask's items are 3 bytes; expected 1, 2 or 4");
  CHECK(run({4, 5}, tree_mask_mode::qlen_only_bitpacking, 12, 1) == at + "tree_mask has 12 bytes; expected 6 (bs * N items)");
  // Outputs apart from each other and from the inputs (the checks reconstruct_indices_from_tree_mask
  // shares), the mask first among the outputs.
  const std::string apart = "; expected an output that shares no element with another argument";
  const auto overlapping = [&](bool links, bool mask) {
    return error_of([&] {
      B b;
      auto parents = b.upload(std::span<const std::int64_t>(parent_list));
      auto sel = b.upload(std::span<const std::int64_t>(selected));
      // verified_seq_len's two entries, then room for positions.
      auto lens = b.upload(std::span<const std::int64_t>(std::vector<std::int64_t>{4, 5, 0, 0, 0, 0, 0, 0}));
      auto positions = b.template allocate<std::int64_t>(bs * n);
      auto mask_bytes = b.template allocate<std::uint8_t>(bs * n * n);
      auto index = b.template allocate<std::int64_t>(bs * n);
      auto next_token = b.template allocate<std::int64_t>(bs * n);
      auto next_sibling = b.template allocate<std::int64_t>(bs * n);
      specdec::sglang::build_tree(b, specdec::matrix_view<const std::int64_t, space>(parents.matrix(bs, 3)),
                                  specdec::matrix_view<const std::int64_t, space>(sel.matrix(bs, n - 1)),
                                  specdec::vector_view<const std::int64_t, space>(lens.view().data(), bs),
                                  mask ? specdec::vector_view<std::uint8_t, space>(reinterpret_cast<std::uint8_t*>(index.view().data()), bs * n * n)
                                       : mask_bytes.view(),
                                  links ? positions.view() : specdec::vector_view<std::int64_t, space>(lens.view().data(), bs * n),
                                  index.matrix(bs, n), next_token.matrix(bs, n), links ? index.matrix(bs, n) : next_sibling.matrix(bs, n),
                                  2, 2, tree_mask_mode::qlen_only);
    });
  };
  CHECK(overlapping(true, false) == at + "retrive_index is the same memory as retrive_next_sibling" + apart);
  CHECK(overlapping(false, false) == at + "positions overlaps verified_seq_len" + apart);
  CHECK(overlapping(true, true) == at + "tree_mask overlaps retrive_index" + apart);
}

TEST_CASE_TEMPLATE("segment_packbits on a backend equals the host form", B, SPECDEC_TEAM_BACKENDS) {
  using space = typename B::memory_space;
  const specdec::philox_stream stream{77, 0};
  std::uint64_t at = 0;
  const auto uniform = [&] { return stream.uniform(at++); };
  for (int repeat = 0; repeat < 6; ++repeat) {
    std::vector<std::int32_t> indptr = {static_cast<std::int32_t>(uniform() * 5)};
    const int segments = repeat * 3;
    for (int s = 0; s < segments; ++s) indptr.push_back(indptr.back() + static_cast<std::int32_t>(uniform() * (s % 4 == 0 ? 3 : 70)));
    std::vector<std::uint8_t> x(static_cast<std::size_t>(indptr.back()) + 3);
    for (auto& e : x) e = uniform() < 0.4f ? static_cast<std::uint8_t>(1 + uniform() * 200) : 0;
    const auto offsets = specdec::segment_packbits_offsets(indptr);
    for (const auto order : {specdec::bit_order::big, specdec::bit_order::little}) {
      std::vector<std::uint8_t> want(static_cast<std::size_t>(offsets.back()));
      specdec::segment_packbits(x, indptr, order, want);
      B b;
      auto x_on = b.upload(std::span<const std::uint8_t>(x));
      auto indptr_on = b.upload(std::span<const std::int32_t>(indptr));
      auto offsets_on = b.template allocate<std::int32_t>(static_cast<index_t>(indptr.size()));
      specdec::segment_packbits_offsets(b, specdec::vector_view<const std::int32_t, space>(indptr_on.view()), offsets_on.view());
      CHECK(b.download(offsets_on.view()) == offsets);
      auto out = b.upload(std::span<const std::uint8_t>(std::vector<std::uint8_t>(want.size(), 0xEE)));
      specdec::segment_packbits(b, specdec::vector_view<const std::uint8_t, space>(x_on.view()),
                                specdec::vector_view<const std::int32_t, space>(indptr_on.view()),
                                specdec::vector_view<const std::int32_t, space>(offsets_on.view()), order, out.view());
      CHECK(b.download(out.view()) == want);
    }
  }
}

TEST_CASE_TEMPLATE("segment_packbits on a backend names what is wrong", B, SPECDEC_ALL_BACKENDS) {
  using space = typename B::memory_space;
  const std::string at = "specdec::segment_packbits: ";
  const std::vector<std::uint8_t> x(20, 1);
  const auto run = [&](std::vector<std::int32_t> indptr, std::vector<std::int32_t> offsets, index_t out_bytes) {
    return error_of([&] {
      B b;
      auto x_on = b.upload(std::span<const std::uint8_t>(x));
      auto indptr_on = b.upload(std::span<const std::int32_t>(indptr));
      auto offsets_on = b.upload(std::span<const std::int32_t>(offsets));
      auto out = b.template allocate<std::uint8_t>(out_bytes);
      specdec::segment_packbits(b, specdec::vector_view<const std::uint8_t, space>(x_on.view()),
                                specdec::vector_view<const std::int32_t, space>(indptr_on.view()),
                                specdec::vector_view<const std::int32_t, space>(offsets_on.view()), specdec::bit_order::big, out.view());
      (void)b.download(out.view());
    });
  };
  const auto offsets_of = [&](std::vector<std::int32_t> indptr) {
    return error_of([&] {
      B b;
      auto indptr_on = b.upload(std::span<const std::int32_t>(indptr));
      auto offsets_on = b.template allocate<std::int32_t>(static_cast<index_t>(indptr.size()));
      specdec::segment_packbits_offsets(b, specdec::vector_view<const std::int32_t, space>(indptr_on.view()), offsets_on.view());
      (void)b.download(offsets_on.view());
    });
  };
  CHECK(run({0, 9, 20}, {0, 2, 4}, 4) == "");
  CHECK(run({0, 9, 21}, {0, 2, 4}, 4) == at + "indptr gives segment 1 elements [9, 21); expected a non-decreasing range within [0, 20]");
  CHECK(run({0, 9, 8}, {0, 2, 4}, 4) == at + "indptr gives segment 1 elements [9, 8); expected a non-decreasing range within [0, 20]");
  CHECK(run({0, 9, 20}, {1, 3, 5}, 5) == at + "offsets[0] = 1; expected 0 (offsets[0] = 0, each the previous plus the previous "
                                               "segment's bytes, the last the output's size)");
  CHECK(run({0, 9, 20}, {0, 3, 5}, 5).find(at + "offsets[1] = 3; expected 2") == 0);
  CHECK(run({0, 9, 20}, {0, 2, 4}, 5).find(at + "offsets[2] = 4; expected 5") == 0);
  CHECK(run({0, 9, 20}, {0, 2}, 4) == at + "offsets has 2 entries; expected 3 like indptr");
  CHECK(offsets_of({0, 9, 20}) == "");
  CHECK(offsets_of({0, 9, 3}) == at + "indptr gives segment 1 elements [9, 3); expected a non-decreasing range within [0, 2147483647]");
  CHECK(offsets_of({-1, 9}) == at + "indptr gives segment 0 elements [-1, 9); expected a non-decreasing range within [0, 2147483647]");
}

TEST_CASE_TEMPLATE("tree masks of a padded batch on a backend equal the host forms per tree", B, SPECDEC_TEAM_BACKENDS) {
  using space = typename B::memory_space;
  const specdec::philox_stream stream{91, 0};
  std::uint64_t at = 0;
  for (const index_t n : {1, 7, 16, 32, 45}) {
    const index_t batch = 5;
    std::vector<std::int32_t> parents(static_cast<std::size_t>(batch * n), -5), counts(static_cast<std::size_t>(batch));
    std::vector<specdec::draft_tree> trees;
    for (index_t r = 0; r < batch; ++r) {
      const auto count = static_cast<std::int32_t>(r == 0 ? n : 1 + static_cast<index_t>(stream.uniform(at++) * float(n)) % n);
      counts[static_cast<std::size_t>(r)] = count;
      std::vector<std::int32_t> tok(static_cast<std::size_t>(count), 3), par(static_cast<std::size_t>(count), -1);
      for (std::int32_t i = 1; i < count; ++i) par[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(stream.uniform(at++) * float(i)) % i;
      std::copy(par.begin(), par.end(), parents.begin() + r * n);  // padding keeps -5: never read
      trees.push_back(specdec::make_tree(tok, par));
    }
    CAPTURE(n);
    B b;
    auto parents_on = b.upload(std::span<const std::int32_t>(parents));
    auto counts_on = b.upload(std::span<const std::int32_t>(counts));
    const specdec::matrix_view<const std::int32_t, space> p(parents_on.matrix(batch, n));
    const specdec::vector_view<const std::int32_t, space> c(counts_on.view());
    // What each padded row holds: the host form's rows for the tree's nodes; padding attends the prefix and itself.
    for (const index_t prefix : {0, 3}) {
      auto dense = b.template allocate<std::uint8_t>(batch * n * (prefix + n));
      specdec::tree_mask_dense(b, p, c, prefix, dense.matrix(batch * n, prefix + n));
      auto additive = b.template allocate<float>(batch * n * (prefix + n));
      specdec::tree_mask_additive(b, p, c, prefix, additive.matrix(batch * n, prefix + n));
      std::vector<std::uint8_t> want_dense;
      std::vector<float> want_additive;
      for (index_t r = 0; r < batch; ++r) {
        const index_t count = counts[static_cast<std::size_t>(r)];
        std::vector<std::uint8_t> rows(static_cast<std::size_t>(n * (prefix + n)), 0);
        std::vector<float> add(static_cast<std::size_t>(count * (prefix + count)));
        const std::vector<std::uint8_t> host = specdec::tree_mask_dense(trees[static_cast<std::size_t>(r)], prefix);
        specdec::tree_mask_additive(trees[static_cast<std::size_t>(r)], prefix, specdec::matrix_view<float>(add.data(), count, prefix + count));
        std::vector<float> add_rows(rows.size(), -INFINITY);
        for (index_t i = 0; i < n; ++i)
          for (index_t j = 0; j < prefix + n; ++j) {
            const auto at_ij = static_cast<std::size_t>(i * (prefix + n) + j);
            const bool tree_cell = i < count && (j < prefix + count);
            const std::size_t host_ij = static_cast<std::size_t>(i * (prefix + count) + j);
            const bool set = tree_cell ? host[host_ij] != 0 : (j < prefix || j == prefix + i);
            rows[at_ij] = set ? 1 : 0;
            add_rows[at_ij] = tree_cell ? add[host_ij] : (set ? 0.0f : -INFINITY);
          }
        want_dense.insert(want_dense.end(), rows.begin(), rows.end());
        want_additive.insert(want_additive.end(), add_rows.begin(), add_rows.end());
      }
      CHECK(b.download(dense.view()) == want_dense);
      CHECK(b.download(additive.view()) == want_additive);
    }
    const index_t words = (n + 31) / 32;
    auto packed = b.template allocate<std::int32_t>(batch * n * words);
    specdec::tree_mask_packed_int32(b, p, c, packed.matrix(batch * n, words));
    std::vector<std::int32_t> want_packed;
    std::vector<std::uint32_t> want_bits;
    for (index_t r = 0; r < batch; ++r) {
      const index_t count = counts[static_cast<std::size_t>(r)];
      std::vector<std::int32_t> host(static_cast<std::size_t>(count * ((count + 31) / 32)));
      specdec::tree_mask_packed_int32(trees[static_cast<std::size_t>(r)], specdec::matrix_view<std::int32_t>(host.data(), count, (count + 31) / 32));
      for (index_t i = 0; i < n; ++i)
        for (index_t w = 0; w < words; ++w) {
          const bool has = i < count && w < (count + 31) / 32;
          const std::uint32_t pad = i >= count && i / 32 == w ? std::uint32_t(1) << (i % 32) : 0u;
          want_packed.push_back(has ? host[static_cast<std::size_t>(i * ((count + 31) / 32) + w)] : static_cast<std::int32_t>(pad));
        }
      if (n <= 32) {
        std::vector<std::uint32_t> items(static_cast<std::size_t>(count));
        specdec::tree_mask_bitpacked_rows(trees[static_cast<std::size_t>(r)], specdec::vector_view<std::uint32_t>(items.data(), count));
        for (index_t i = 0; i < n; ++i) want_bits.push_back(i < count ? items[static_cast<std::size_t>(i)] : std::uint32_t(1) << i);
      }
    }
    CHECK(b.download(packed.view()) == want_packed);
    if (n <= 32) {
      auto bits32 = b.template allocate<std::uint32_t>(batch * n);
      specdec::tree_mask_bitpacked_rows(b, p, c, bits32.view());
      CHECK(b.download(bits32.view()) == want_bits);
    }
    if (n <= 8) {
      auto bits8 = b.template allocate<std::uint8_t>(batch * n);
      specdec::tree_mask_bitpacked_rows(b, p, c, bits8.view());
      CHECK(b.download(bits8.view()) == std::vector<std::uint8_t>(want_bits.begin(), want_bits.end()));
    }
  }
}

TEST_CASE_TEMPLATE("tree masks of a padded batch name what is wrong", B, SPECDEC_ALL_BACKENDS) {
  using space = typename B::memory_space;
  const auto run = [](std::vector<std::int32_t> parents, std::vector<std::int32_t> counts, index_t n, index_t out_rows) {
    return error_of([&] {
      B b;
      auto p = b.upload(std::span<const std::int32_t>(parents));
      auto c = b.upload(std::span<const std::int32_t>(counts));
      auto out = b.template allocate<std::int32_t>(out_rows);
      specdec::tree_mask_packed_int32(b, specdec::matrix_view<const std::int32_t, space>(p.matrix(static_cast<index_t>(parents.size()) / n, n)),
                                      specdec::vector_view<const std::int32_t, space>(c.view()), out.matrix(out_rows, 1));
      (void)b.download(out.view());
    });
  };
  const std::string at = "specdec::tree_mask_packed_int32: ";
  CHECK(run({-1, 0, 0, -1, 0, 9}, {3, 2}, 3, 6) == "");
  CHECK(run({-1, 0, 0, -1, 0, 9}, {3, 3}, 3, 6) == at + "parents[1, 2] = 9; expected a parent in [0, 2) (parents precede their children)");
  CHECK(run({-1, 0, 0, 0, 0, 1}, {3, 3}, 3, 6) == at + "parents[1, 0] = 0; expected -1 (node 0 is the root)");
  CHECK(run({-1, 0, 0, -1, 0, 1}, {3, 4}, 3, 6) == at + "node_counts[1] = 4; expected a node count in [1, 3] (node 0 is the root)");
  CHECK(run({-1, 0, 0, -1, 0, 1}, {3}, 3, 6) == at + "node_counts has 1 entries; expected one per request (2) or none");
  CHECK(run({-1, 0, 0, -1, 0, 1}, {3, 3}, 3, 5) == at + "out is 5 x 1; expected 6 x 1");
}

TEST_CASE_TEMPLATE("FlashInfer's packed masks of a padded batch on a backend equal the host form", B, SPECDEC_TEAM_BACKENDS) {
  using space = typename B::memory_space;
  const specdec::philox_stream stream{92, 0};
  std::uint64_t at = 0;
  for (const index_t n : {1, 6, 19}) {
    const index_t batch = 4;
    std::vector<std::int32_t> parents(static_cast<std::size_t>(batch * n), -3), counts(static_cast<std::size_t>(batch));
    std::vector<std::int64_t> prefixes(static_cast<std::size_t>(batch));
    std::vector<specdec::draft_tree> trees;
    for (index_t r = 0; r < batch; ++r) {
      const auto count = static_cast<std::int32_t>(r == 1 ? n : 1 + static_cast<index_t>(stream.uniform(at++) * float(n)) % n);
      counts[static_cast<std::size_t>(r)] = count;
      prefixes[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(stream.uniform(at++) * 13.0f) % 13;
      std::vector<std::int32_t> tok(static_cast<std::size_t>(count), 1), par(static_cast<std::size_t>(count), -1);
      for (std::int32_t i = 1; i < count; ++i) par[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(stream.uniform(at++) * float(i)) % i;
      std::copy(par.begin(), par.end(), parents.begin() + r * n);
      trees.push_back(specdec::make_tree(tok, par));
    }
    CAPTURE(n);
    std::vector<std::int32_t> want_indptr;
    const std::vector<index_t> host_prefixes(prefixes.begin(), prefixes.end());
    const std::vector<std::uint8_t> want = specdec::tree_mask_flashinfer_packed(std::span<const specdec::draft_tree>(trees),
                                                                                std::span<const index_t>(host_prefixes), want_indptr);
    B b;
    auto p = b.upload(std::span<const std::int32_t>(parents));
    auto c = b.upload(std::span<const std::int32_t>(counts));
    auto pre = b.upload(std::span<const std::int64_t>(prefixes));
    auto indptr = b.template allocate<std::int32_t>(batch + 1);
    const specdec::matrix_view<const std::int32_t, space> pv(p.matrix(batch, n));
    const specdec::vector_view<const std::int32_t, space> cv(c.view());
    const specdec::vector_view<const std::int64_t, space> prev(pre.view());
    specdec::tree_mask_flashinfer_offsets(b, pv, cv, prev, indptr.view());
    const std::vector<std::int32_t> got_indptr = b.download(indptr.view());
    CHECK(got_indptr == want_indptr);
    auto out = b.upload(std::span<const std::uint8_t>(std::vector<std::uint8_t>(want.size(), 0xCD)));
    specdec::tree_mask_flashinfer_packed(b, pv, cv, prev, specdec::vector_view<const std::int32_t, space>(indptr.view()), out.view());
    CHECK(b.download(out.view()) == want);
  }
}

TEST_CASE_TEMPLATE("FlashInfer's packed masks of a padded batch name what is wrong", B, SPECDEC_ALL_BACKENDS) {
  using space = typename B::memory_space;
  // Request 1's node 2 has parent 5: valid only while its node count leaves node 2 out.
  const std::vector<std::int32_t> parents = {-1, 0, 0, -1, 0, 5, -1, 0, 1};
  const auto run = [&](std::vector<std::int32_t> counts, std::vector<std::int64_t> prefixes, std::vector<std::int32_t> indptr, index_t bytes) {
    return error_of([&] {
      B b;
      auto p = b.upload(std::span<const std::int32_t>(parents));
      auto c = b.upload(std::span<const std::int32_t>(counts));
      auto pre = b.upload(std::span<const std::int64_t>(prefixes));
      auto ip = b.upload(std::span<const std::int32_t>(indptr));
      auto out = b.template allocate<std::uint8_t>(bytes);
      const specdec::matrix_view<const std::int32_t, space> pv(p.matrix(3, 3));
      if (indptr.empty()) {
        auto offsets = b.template allocate<std::int32_t>(4);
        specdec::tree_mask_flashinfer_offsets(b, pv, specdec::vector_view<const std::int32_t, space>(c.view()),
                                              specdec::vector_view<const std::int64_t, space>(pre.view()), offsets.view());
        (void)b.download(offsets.view());
        return;
      }
      specdec::tree_mask_flashinfer_packed(b, pv, specdec::vector_view<const std::int32_t, space>(c.view()),
                                           specdec::vector_view<const std::int64_t, space>(pre.view()),
                                           specdec::vector_view<const std::int32_t, space>(ip.view()), out.view());
      (void)b.download(out.view());
    });
  };
  const std::string offsets = "specdec::tree_mask_flashinfer_offsets: ", packed = "specdec::tree_mask_flashinfer_packed: ";
  CHECK(run({3, 2, 1}, {5, 0, 0}, {0, 3, 4, 5}, 5) == "");  // 3 x 8 = 24 bits, 2 x 2 = 4 bits, 1 bit
  CHECK(run({3, 2, 1}, {5, 0, 0}, {}, 1) == "");
  CHECK(run({3, 4, 1}, {5, 0, 0}, {}, 1) == offsets + "node_counts[1] = 4; expected a node count in [1, 3] (node 0 is the root)");
  CHECK(run({3, 2, 1}, {-2, 0, 0}, {}, 1) == offsets + "prefix_lengths[0] = -2; expected a length in [0, 2147483647]");
  // 3 (2^31 - 1 + 3) bits each: 805306369 bytes, three of them pass int32.
  CHECK(run({3, 2, 3}, {2147483647, 2147483647, 2147483647}, {}, 1) ==
        offsets + "the packed masks of requests 0..2 need 2147483651 bytes; expected at most 2147483647 (indptr is int32)");
  CHECK(run({3, 3, 1}, {5, 0, 0}, {0, 3, 5, 6}, 6) == packed + "parents[1, 2] = 5; expected a parent in [0, 2) (parents precede their children)");
  CHECK(run({3, 2, 1}, {5, 0, 0}, {0, 2, 3, 4}, 4).find(packed + "indptr[1] = 2; expected 3") == 0);
  CHECK(run({3, 2, 1}, {5, 0, 0}, {0, 3, 4, 5}, 6).find(packed + "indptr[3] = 5; expected 6") == 0);
}
