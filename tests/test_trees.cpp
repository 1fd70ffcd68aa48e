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
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/interop/eagle.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/trtllm.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/tree/eagle2.hpp>

#include "backend_conformance.hpp"

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
