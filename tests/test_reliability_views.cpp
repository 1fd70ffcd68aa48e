// SPDX-License-Identifier: Apache-2.0
// Reliability, third round: the entry points added since the second round (logprobs, token bitmasks,
// grammars, penalties, the batch verifiers and masks, the batch EAGLE-2 builder, vLLM's constraints)
// against the classes the second round fixed in the older code. Every case here was accepted (a write
// through a null or overlapping view, a strided view read as packed, arithmetic that wrapped, a value
// that reached the output) or cost more than linear in the path before its fix; each now throws
// specdec::invalid_argument naming the argument, or gives what a plain reference gives.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/blocks/eagle.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/blocks/mtp.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/mask/packbits.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/batch_penalties.hpp>
#include <specdec/sampling/bitmask.hpp>
#include <specdec/sampling/logprobs.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/tree/drafters.hpp>
#include <specdec/grammar/tree_grammar.hpp>
#include <specdec/tree/tree.hpp>

#include "backend_conformance.hpp"

using specdec::index_t;
using specdec::matrix_view;
using specdec::vector_view;
namespace sampling = specdec::sampling;
using conformance::error_of;

namespace {

bool names(const std::string& message, const std::string& part) {
  const bool found = message.find(part) != std::string::npos;
  if (!found) MESSAGE("expected \"", part, "\" in: \"", message, "\"");
  return found;
}

/// A small logprobs call: one request over a 3-node chain (tokens 5, 6, 7), its result accepting node 1
/// then emitting token 2; V = 16, rows = 3.
struct logprob_case {
  specdec::draft_tree tree = specdec::make_tree({5, 6, 7}, {-1, 0, 1});
  std::vector<float> rows = std::vector<float>(48, 0.0f);
  std::vector<sampling::speculative_request> requests;
  std::vector<sampling::speculative_result> results;
  std::vector<float> temperatures = {1.0f};
  std::vector<std::int32_t> ids = std::vector<std::int32_t>(2 * 3, -1), ranks = std::vector<std::int32_t>(2, -1);
  std::vector<float> lps = std::vector<float>(2 * 3, 0.0f);
  logprob_case() {
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 7);
    sampling::speculative_request q;
    q.tree = tree;
    requests.push_back(q);
    sampling::speculative_result r;
    r.accepted_nodes = {1};
    r.tokens = {6, 2};
    results.push_back(r);
  }
  sampling::logprob_outputs outputs() {
    return {matrix_view<std::int32_t>(ids.data(), 2, 3), matrix_view<float>(lps.data(), 2, 3), vector_view<std::int32_t>(ranks.data(), 2)};
  }
  std::string call(const sampling::logprob_outputs& out, matrix_view<const float> x) {
    specdec::eigen b;
    return error_of([&] { sampling::emitted_logprobs(b, x, requests, results, temperatures, 2, out); });
  }
  matrix_view<const float> packed() const { return matrix_view<const float>(rows.data(), 3, 16); }
};

}  // namespace

TEST_CASE("check_arguments: every output apart from every other argument, exact aliases only where named") {
  std::vector<float> buffer(64);
  const matrix_view<float> a(buffer.data(), 4, 8), b(buffer.data() + 32, 4, 8), c(buffer.data() + 4, 4, 8);
  using specdec::detail::check_arguments;
  using specdec::detail::in_place;
  using specdec::detail::input;
  using specdec::detail::output;
  CHECK(error_of([&] { check_arguments("f", output("a", a), input("b", matrix_view<const float>(b))); }).empty());
  CHECK(names(error_of([&] { check_arguments("f", output("a", a), input("c", matrix_view<const float>(c))); }), "a overlaps c"));
  CHECK(names(error_of([&] { check_arguments("f", input("c", matrix_view<const float>(c)), output("a", a)); }), "a overlaps c"));
  CHECK(names(error_of([&] { check_arguments("f", output("a", a), output("c", c)); }), "overlaps"));
  // Inputs may share memory.
  CHECK(error_of([&] { check_arguments("f", input("a", matrix_view<const float>(a)), input("c", matrix_view<const float>(c))); }).empty());
  // The documented in-place form: exactly the named input, nothing else.
  CHECK(error_of([&] { check_arguments("f", input("x", matrix_view<const float>(a)), in_place("out", a, 0, "x")); }).empty());
  CHECK(names(error_of([&] { check_arguments("f", input("y", matrix_view<const float>(a)), in_place("out", a, 0, "x")); }),
              "is the same memory as y"));
  // Each view by its rules as it is taken: null with a shape, a row stride shorter than the row.
  CHECK(names(error_of([&] { check_arguments("f", output("n", matrix_view<float>(nullptr, 2, 2))); }), "n is a null view"));
  CHECK(names(error_of([&] { check_arguments("f", output("s", matrix_view<float>(buffer.data(), 2, 8, 4, 1))); }),
              "s has row stride 4"));
}

TEST_CASE("emitted_logprobs checks every view, the results' paths and its row ranges") {
  logprob_case c;
  REQUIRE(c.call(c.outputs(), c.packed()).empty());
  CHECK(c.ids[0] == 6);
  CHECK(c.ids[3] == 2);
  {  // a null token_ids with a shape was written through
    sampling::logprob_outputs out = c.outputs();
    out.token_ids = matrix_view<std::int32_t>(nullptr, 2, 3);
    CHECK(names(c.call(out, c.packed()), "token_ids is a null view"));
  }
  {  // ranks laid over token_ids replaced the emitted token
    sampling::logprob_outputs out = c.outputs();
    out.ranks = vector_view<std::int32_t>(c.ids.data(), 2);
    CHECK(names(c.call(out, c.packed()), "overlaps"));
  }
  {  // an output over the tree it reads
    sampling::logprob_outputs out = c.outputs();
    out.ranks = vector_view<std::int32_t>(const_cast<std::int32_t*>(c.tree.parent.data()), 2);
    CHECK(names(c.call(out, c.packed()), "ranks overlaps requests[].tree.parent"));
  }
  // A strided rows view was read as packed.
  CHECK(names(c.call(c.outputs(), matrix_view<const float>(c.rows.data(), 3, 8, 16, 2)), "rows has column stride 2"));
  {  // accepted nodes that are not a root path
    c.results[0].accepted_nodes = {2};
    c.results[0].tokens = {7, 2};
    CHECK(names(c.call(c.outputs(), c.packed()), "expected a child of node 0"));
  }
  {  // an accepted token that is not its node's
    c.results[0].accepted_nodes = {1};
    c.results[0].tokens = {3, 2};
    CHECK(names(c.call(c.outputs(), c.packed()), "expected node 1's token 6"));
  }
  {  // a target row whose sum with the node count passes int64
    c.results[0].tokens = {6, 2};
    c.requests[0].target_row = std::numeric_limits<index_t>::max() - 1;
    CHECK(names(c.call(c.outputs(), c.packed()), "target_row"));
  }
}

TEST_CASE("vLLM's apply_sampling_constraints: strided or overlapping logits, and every count checked before a row is written") {
  std::vector<float> x(32, 1.0f);
  const std::vector<std::int64_t> cu = {2};
  const std::vector<float> t = {0.5f};
  // A negative column stride wrote outside the view.
  CHECK(names(error_of([&] {
                specdec::vllm::apply_sampling_constraints(matrix_view<float>(x.data() + 15, 2, 8, 16, -1), cu, t, {}, {});
              }),
              "logits has column stride -1"));
  // Counts that fall back: the first request's rows ran past the logits before the second count was read.
  const std::vector<std::int64_t> falling = {5, 3};
  const std::vector<float> t2 = {0.5f, 0.5f};
  const std::vector<float> before = x;
  CHECK(names(error_of([&] {
                specdec::vllm::apply_sampling_constraints(matrix_view<float>(x.data(), 3, 8), falling, t2, {}, {});
              }),
              "cu_num_draft_tokens[1] = 3 after 5"));
  CHECK(x == before);
  // top_k checked before any row is divided by its temperature.
  const std::vector<std::int64_t> k0 = {0};
  CHECK(names(error_of([&] { specdec::vllm::apply_sampling_constraints(matrix_view<float>(x.data(), 2, 8), cu, t, k0, {}); }),
              "top_k[0] = 0"));
  CHECK(x == before);
  CHECK(names(error_of([&] {
                const std::vector<float> inf = {std::numeric_limits<float>::infinity()};
                specdec::vllm::apply_sampling_constraints(matrix_view<float>(x.data(), 2, 8), cu, inf, {}, {});
              }),
              "temperature[0] = inf"));
}

TEST_CASE("a one-row token bitmask's words are contiguous: masked greedy verification reads no strided mask as packed") {
  specdec::eigen b;
  const specdec::draft_tree root = specdec::make_tree({0}, {-1});
  std::vector<float> logits(64, 0.0f);
  logits[40] = 5.0f;  // the argmax, forbidden by the mask's second word
  std::vector<std::int32_t> words = {-1, -1, 0, 0};
  sampling::speculative_request q;
  q.tree = root;
  // Words 0 and 2 (stride 2): token 40 is forbidden. Read as packed, words 0 and 1 allowed it.
  CHECK(names(error_of([&] {
                sampling::verify_greedy(b, matrix_view<const float>(logits.data(), 1, 64), std::span(&q, 1),
                                        matrix_view<const std::int32_t>(words.data(), 1, 2, 4, 2));
              }),
              "bitmask has column stride 2"));
  const std::vector<std::int32_t> packed = {-1, 0};
  const auto res = sampling::verify_greedy(b, matrix_view<const float>(logits.data(), 1, 64), std::span(&q, 1),
                                           matrix_view<const std::int32_t>(packed.data(), 1, 2));
  CHECK(res[0].tokens == std::vector<std::int32_t>{0});  // the allowed argmax (all allowed logits 0: the lowest index)
}

TEST_CASE("fill_tree_bitmasks and prune_tree: vocabulary, row strides, overlaps and row ranges") {
  const specdec::draft_tree tree = specdec::make_tree({1, 2, 3}, {-1, 0, 1});
  specdec::any_token_matcher matcher{40};
  std::vector<std::int32_t> bm(2 * 3, 0);
  // V = 0 switched the token check off and allowed zero-word rows that were then read.
  CHECK(names(error_of([&] { specdec::fill_tree_bitmasks(tree, 0, matcher, matrix_view<std::int32_t>(bm.data(), 3, 0)); }),
              "vocab = 0"));
  CHECK(names(error_of([&] { (void)specdec::prune_tree(tree, 0, matrix_view<const std::int32_t>(bm.data(), 3, 0)); }), "vocab = 0"));
  // Row stride 0: every node's row was its parent's.
  CHECK(names(error_of([&] { specdec::fill_tree_bitmasks(tree, 40, matcher, matrix_view<std::int32_t>(bm.data(), 3, 2, 0, 1)); }),
              "bitmask has row stride 0"));
  // first_row + nodes overflowed.
  CHECK(names(error_of([&] {
                specdec::fill_tree_bitmasks(tree, 40, matcher, matrix_view<std::int32_t>(bm.data(), 3, 2),
                                            std::numeric_limits<index_t>::max() - 1);
              }),
              "first_row"));
  // Rows laid over the tree's own parents.
  CHECK(names(error_of([&] {
                specdec::fill_tree_bitmasks(tree, 40, matcher,
                                            matrix_view<std::int32_t>(const_cast<std::int32_t*>(tree.parent.data()), 1, 2));
              }),
              "bitmask overlaps tree.parent"));
  // The valid call fills every row.
  CHECK(specdec::fill_tree_bitmasks(tree, 40, matcher, matrix_view<std::int32_t>(bm.data(), 3, 2)) ==
        std::vector<std::uint8_t>{1, 1, 1});
  CHECK(bm[0] == -1);
  CHECK(bm[1] == 0xff);
}

TEST_CASE("any_token_matcher never writes past the row it is given") {
  std::vector<std::int32_t> row(3, 7);
  const specdec::any_token_matcher wide{1000};
  wide.fill_next_token_bitmask(std::span<std::int32_t>(row.data(), 2));
  CHECK(row == std::vector<std::int32_t>{-1, -1, 7});
}

TEST_CASE("tree buffers and masks: an output laid over the tree is refused") {
  const specdec::draft_tree tree = specdec::make_tree({1, 2, 3, 4}, {-1, 0, 0, 1});
  auto* parents = const_cast<std::int32_t*>(tree.parent.data());
  auto* depths = const_cast<std::int32_t*>(tree.depth.data());
  // tree_mask_dense over the parents overflowed the heap (zeros, then a walk of zeroed parents).
  CHECK(names(error_of([&] { specdec::tree_mask_dense(tree, 0, matrix_view<std::int32_t>(parents, 4, 4, 0, 1)); }), "out"));
  CHECK(names(error_of([&] { specdec::tree_mask_dense(tree, 0, matrix_view<std::int32_t>(parents, 1, 4)); }), "out"));
  std::vector<std::int32_t> big(64);
  const specdec::draft_tree in_big = [&] {
    specdec::draft_tree t = tree;
    return t;
  }();
  CHECK(names(error_of([&] { specdec::tree_mask_bitpacked_rows(tree, vector_view<std::int32_t>(parents, 4)); }),
              "out is the same memory as tree.parent"));
  CHECK(names(error_of([&] { specdec::tree_positions(tree, 0, vector_view<std::int32_t>(depths, 4)); }),
              "positions is the same memory as tree.depth"));
  CHECK(names(error_of([&] {
                specdec::child_links(tree, vector_view<std::int32_t>(parents, 4), vector_view<std::int32_t>(big.data(), 4));
              }),
              "first_child"));
  // FlashInfer's host form: a tree viewing indptr's own memory is read before indptr is replaced, and a
  // rejected call leaves indptr as it was.
  std::vector<std::int32_t> indptr = {-1, 0, 0, 1, 0, 1, 2, 3};  // parents then tokens of a 4-node tree
  const specdec::tree_view aliased(std::span<const std::int32_t>(indptr.data() + 4, 4), std::span<const std::int32_t>(indptr.data(), 4),
                                   tree.depth);
  const std::vector<index_t> prefix = {3};
  const std::vector<std::uint8_t> expect = [&] {
    std::vector<std::int32_t> fresh;
    return specdec::tree_mask_flashinfer_packed(std::span<const specdec::tree_view>(&aliased, 1), prefix, fresh);
  }();
  std::vector<std::int32_t> fresh_indptr;
  const specdec::draft_tree copy = specdec::make_tree({0, 1, 2, 3}, {-1, 0, 0, 1});
  CHECK(specdec::tree_mask_flashinfer_packed(std::span<const specdec::draft_tree>(&copy, 1), prefix, fresh_indptr) == expect);
  CHECK(specdec::tree_mask_flashinfer_packed(std::span<const specdec::tree_view>(&aliased, 1), prefix, indptr) == expect);
  CHECK(indptr == fresh_indptr);
  std::vector<std::int32_t> kept = {9, 9};
  const std::vector<index_t> negative = {-1};
  CHECK(!error_of([&] { (void)specdec::tree_mask_flashinfer_packed(std::span<const specdec::draft_tree>(&copy, 1), negative, kept); }).empty());
  CHECK(kept == std::vector<std::int32_t>{9, 9});
  (void)in_big;
}

TEST_CASE("segment_packbits: the host output apart from its inputs, and no bytes without a segment") {
  std::vector<std::uint8_t> x = {1, 0, 1, 1, 0, 0, 0, 1, 1};
  const std::vector<std::int32_t> indptr = {0, 9};
  CHECK(names(error_of([&] {
                specdec::segment_packbits(x, indptr, specdec::bit_order::little, std::span<std::uint8_t>(x.data() + 1, 2));
              }),
              "out overlaps x"));
  std::vector<std::uint8_t> out(2);
  specdec::segment_packbits(x, indptr, specdec::bit_order::little, out);
  CHECK(out == std::vector<std::uint8_t>{0x8d, 0x01});
  using thrust_cpp = specdec::thrust_backend<specdec::thrust_system::cpp>;
  thrust_cpp b;
  const std::vector<std::int32_t> one = {0};
  std::vector<std::uint8_t> three(3);
  CHECK(names(error_of([&] {
                specdec::segment_packbits(b, vector_view<const std::uint8_t>(x.data(), 9), vector_view<const std::int32_t>(one.data(), 1),
                                          vector_view<const std::int32_t>(one.data(), 1), specdec::bit_order::little,
                                          vector_view<std::uint8_t>(three.data(), 3));
              }),
              "with no segment"));
}

TEST_CASE("apply_token_bitmask: vocab_size and logits rows checked, the mask's width compared without a product") {
  std::vector<float> x(64, 1.0f);
  const std::vector<std::int32_t> mask = {0, 0, 0, 0};
  CHECK(names(error_of([&] {
                specdec::apply_token_bitmask(matrix_view<float>(x.data(), 2, 32), matrix_view<const std::int32_t>(mask.data(), 2, 1), -5);
              }),
              "vocab_size = -5"));
  // Row stride 0: both rows one memory, each masked by the other's row.
  CHECK(names(error_of([&] {
                specdec::apply_token_bitmask(matrix_view<float>(x.data(), 2, 32, 0, 1), matrix_view<const std::int32_t>(mask.data(), 2, 1));
              }),
              "logits has row stride 0"));
  // Found by fuzz_views: indices laid over the logits they index changed as the rows were masked (a
  // row index read after its check, past the logits).
  std::vector<float> both(64, 1.0f);
  const index_t one = 1;
  std::memcpy(both.data() + 40, &one, sizeof one);
  CHECK(names(error_of([&] {
                specdec::apply_token_bitmask(matrix_view<float>(both.data(), 2, 32), matrix_view<const std::int32_t>(mask.data(), 2, 1), 32,
                                             std::span<const index_t>(reinterpret_cast<const index_t*>(both.data() + 40), 1));
              }),
              "logits overlaps indices"));
  // A mask of 2^60 words per row and no rows: 32 x words passed int64.
  CHECK(error_of([&] {
          specdec::apply_token_bitmask(matrix_view<float>(x.data(), 0, 32), matrix_view<const std::int32_t>(nullptr, 0, index_t{1} << 60));
        }).empty());
}

TEST_CASE("apply_tree_penalties: V, rows, overlaps and first_row checked; a deep path costs linear work and matches a plain count") {
  const sampling::penalty_history history(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{3, 3, 4});
  const sampling::penalty_params p{1.3f, 0.25f, 0.5f};
  const specdec::draft_tree chain = specdec::make_tree({0, 3, 5, 3, 6}, {-1, 0, 1, 2, 3});
  std::vector<float> x(5 * 8, 1.0f);
  CHECK(names(error_of([&] { sampling::apply_tree_penalties(matrix_view<float>(x.data(), 5, 0), chain, 0, history, p); }), "V = 0"));
  CHECK(names(error_of([&] {
                sampling::apply_tree_penalties(matrix_view<float>(x.data(), 5, 8), chain, std::numeric_limits<index_t>::max() - 2, history, p);
              }),
              "first_row"));
  CHECK(names(error_of([&] { sampling::apply_tree_penalties(matrix_view<float>(x.data(), 5, 8, 0, 1), chain, 0, history, p); }),
              "logits has row stride 0"));
  // Logits laid over the tree's parents (one row of 5 floats over its 5 int32 entries).
  const specdec::draft_tree small = specdec::make_tree({0, 3, 1, 3, 2}, {-1, 0, 1, 2, 3});
  CHECK(names(error_of([&] {
                sampling::apply_tree_penalties(matrix_view<float>(reinterpret_cast<float*>(const_cast<std::int32_t*>(small.parent.data())), 1, 5),
                                               small, 0, history, p);
              }),
              "logits overlaps tree.parent"));
  // A 300-node chain of repeated tokens: each row against a plain count of its path.
  std::vector<std::int32_t> tokens(300), parents(300);
  for (std::int32_t i = 0; i < 300; ++i) {
    tokens[static_cast<std::size_t>(i)] = (i * 7) % 11;
    parents[static_cast<std::size_t>(i)] = i - 1;
  }
  const specdec::draft_tree deep = specdec::make_tree(tokens, parents, 16);
  std::vector<float> rows(300 * 16);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.5f;
  const std::vector<float> raw = rows;
  sampling::apply_tree_penalties(matrix_view<float>(rows.data(), 300, 16), deep, 0, history, p);
  for (std::int32_t node = 0; node < 300; ++node)
    for (std::int32_t t = 0; t < 16; ++t) {
      std::int32_t count = history.output_count(t);
      for (std::int32_t c = node; c > 0; c = parents[static_cast<std::size_t>(c)]) count += tokens[static_cast<std::size_t>(c)] == t;
      const float v = raw[static_cast<std::size_t>(node * 16 + t)];
      const float want = count == 0 && !history.in_prompt(t)
                             ? v
                             : sampling::detail::vllm_penalised(v, history.in_prompt(t), count, p, 1.0f / p.repetition);
      INFO("node ", node, " token ", t);
      CHECK(rows[static_cast<std::size_t>(node * 16 + t)] == want);
    }
}

TEST_CASE_TEMPLATE("batch penalties: a count near INT32_MAX plus a path token stays a penalty; logits apart from every input", B,
                   specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  if constexpr (specdec::team_backend<B>) {
    const std::vector<std::int32_t> tokens = {0, 3, 3}, parents = {-1, 0, 1};
    sampling::penalty_batch_host pen;
    pen.add(sampling::penalty_history(), sampling::penalty_params{1.0f, 0.5f, 0.0f});
    pen.tokens = {3};
    pen.output_counts = {std::numeric_limits<std::int32_t>::max()};
    pen.in_prompt = {0};
    pen.offsets = {0, 1};
    std::vector<float> x(3 * 8, 2.0f);
    sampling::tree_batch<specdec::host_space> batch;
    batch.tokens = matrix_view<const std::int32_t>(tokens.data(), 1, 3);
    batch.parents = matrix_view<const std::int32_t>(parents.data(), 1, 3);
    sampling::apply_tree_penalties(h.b, matrix_view<float>(x.data(), 3, 8), batch, pen.view());
    const double count = double{std::numeric_limits<std::int32_t>::max()} + 2.0;
    CHECK(x[2 * 8 + 3] < -1.0e9f);  // 2 - 0.5 x (2^31 + 1): wrapped, it was a bonus of ~1e9
    CHECK(x[2 * 8 + 3] == 2.0f - static_cast<float>(0.5 * static_cast<double>(static_cast<float>(count))));
    CHECK(x[2 * 8 + 2] == 2.0f);
    // Logits laid over the batch's parents rewrote the trees the teams walk.
    CHECK(names(error_of([&] {
                  sampling::apply_tree_penalties(h.b, matrix_view<float>(reinterpret_cast<float*>(const_cast<std::int32_t*>(parents.data())), 1, 3),
                                                 batch, pen.view());
                }),
                "logits is the same memory as batch.parents"));
  }
}

TEST_CASE_TEMPLATE("batch penalties: two requests placed over the same rows are refused (each row is penalised once)", B,
                   specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  if constexpr (specdec::team_backend<B>) {
    const std::vector<std::int32_t> tokens = {0, 3, 3, 0, 3, 3}, parents = {-1, 0, 1, -1, 0, 1}, counts = {3, 2};
    sampling::penalty_batch_host pen;
    for (int r = 0; r < 2; ++r) pen.add(sampling::penalty_history(), sampling::penalty_params{1.0f, 0.5f, 0.0f});
    std::vector<index_t> first = {0, 2};  // request 0 on rows 0..2, request 1 on rows 2..3: row 2 twice
    sampling::tree_batch<specdec::host_space> batch;
    batch.tokens = matrix_view<const std::int32_t>(tokens.data(), 2, 3);
    batch.parents = matrix_view<const std::int32_t>(parents.data(), 2, 3);
    batch.node_counts = specdec::vector_view<const std::int32_t>(counts.data(), 2);
    batch.target_rows = specdec::vector_view<const index_t>(first.data(), 2);
    std::vector<float> x(6 * 8, 2.0f);
    const auto run = [&] { sampling::apply_tree_penalties(h.b, matrix_view<float>(x.data(), 6, 8), batch, pen.view()); };
    CHECK(error_of(run) == "specdec::sampling::apply_tree_penalties: requests 0 and 1 both write logits row 2; expected "
                           "disjoint row ranges [target_rows(r), target_rows(r) + node_counts(r))");
    first = {3, 1};  // request 1 on rows 1..2, request 0 on rows 3..5: apart
    CHECK(error_of(run) == "");
    CHECK(x[5 * 8 + 3] == 2.0f - 0.5f * 2.0f);  // request 0's node 2 saw token 3 twice on its path
    CHECK(x[2 * 8 + 3] == 2.0f - 0.5f * 1.0f);  // request 1's node 1 once
  }
}

TEST_CASE_TEMPLATE("batch verifiers: outputs apart from every per-request input, the argmax checked before it is written", B,
                   specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  if constexpr (specdec::team_backend<B>) {
    const std::vector<std::int32_t> tokens = {0, 1, 2, 3}, parents = {-1, 0, -1, 0};
    std::vector<std::int32_t> bonus = {5, 6}, counts = {2, 2};
    std::vector<float> logits(4 * 8, 0.0f);
    logits[1] = 1.0f;      // request 0, node 0: token 1 (its child)
    logits[2 * 8 + 3] = 1;  // request 1, node 0: token 3 (its child)
    sampling::tree_batch<specdec::host_space> batch;
    batch.tokens = matrix_view<const std::int32_t>(tokens.data(), 2, 2);
    batch.parents = matrix_view<const std::int32_t>(parents.data(), 2, 2);
    batch.bonus_tokens = vector_view<const std::int32_t>(bonus.data(), 2);
    batch.node_counts = vector_view<const std::int32_t>(counts.data(), 2);
    std::vector<std::int32_t> out(2 * 2, -9), argmax(4, -9);
    sampling::verify_outputs<specdec::host_space> o;
    o.tokens = matrix_view<std::int32_t>(out.data(), 2, 2);
    // The outputs laid over the bonus tokens: request 1 lost its bonus token.
    sampling::verify_outputs<specdec::host_space> over = o;
    over.tokens = matrix_view<std::int32_t>(bonus.data(), 2, 1);
    CHECK(names(error_of([&] { sampling::verify_greedy(h.b, matrix_view<const float>(logits.data(), 4, 8), batch, over); }),
                "outputs.tokens overlaps batch.bonus_tokens"));
    over.tokens = matrix_view<std::int32_t>(counts.data(), 2, 1);
    CHECK(names(error_of([&] { sampling::verify_greedy(h.b, matrix_view<const float>(logits.data(), 4, 8), batch, over); }),
                "outputs.tokens overlaps batch.node_counts"));
    // The argmax written over the parents before anything was checked.
    const std::vector<std::int32_t> parents_before = parents;
    CHECK(names(error_of([&] {
                  sampling::verify_greedy(h.b, matrix_view<const float>(logits.data(), 4, 8), batch, o,
                                          vector_view<std::int32_t>(const_cast<std::int32_t*>(parents.data()), 4));
                }),
                "target_argmax overlaps batch.parents"));
    CHECK(parents == parents_before);
    sampling::verify_greedy(h.b, matrix_view<const float>(logits.data(), 4, 8), batch, o, vector_view<std::int32_t>(argmax.data(), 4));
    CHECK(out == std::vector<std::int32_t>{1, 5, 3, 6});
    // A bitmask given to the batched stochastic verifier was ignored.
    const std::vector<std::int32_t> mask = {1, 1, 1, 1};
    sampling::speculative_rows<specdec::host_space> rows;
    rows.target = matrix_view<const float>(logits.data(), 4, 8);
    rows.target_bitmask = matrix_view<const std::int32_t>(mask.data(), 4, 1);
    CHECK(names(error_of([&] { sampling::verify_speculative(h.b, rows, batch, sampling::speculative_options{}, o); }),
                "rows.target_bitmask"));
  }
}

TEST_CASE("vLLM's host rejection_sample: max_spec_len bounded before max_spec_len + 1, the output view checked") {
  specdec::eigen b;
  const std::vector<std::int32_t> drafts = {}, bonus = {1};
  const std::vector<std::int64_t> cu = {0};
  std::vector<std::int32_t> out(1, -9);
  const std::vector<float> probs;
  CHECK(names(error_of([&] {
                specdec::vllm::rejection_sample(b, drafts, cu, std::numeric_limits<index_t>::max(), matrix_view<const float>(),
                                                matrix_view<const float>(probs.data(), 0, 4), bonus, {}, {}, matrix_view<const float>(),
                                                matrix_view<std::int32_t>(out.data(), 1, 1));
              }),
              "max_spec_len"));
  CHECK(names(error_of([&] {
                specdec::vllm::rejection_sample(b, drafts, cu, 0, matrix_view<const float>(), matrix_view<const float>(probs.data(), 0, 4),
                                                bonus, {}, {}, matrix_view<const float>(), matrix_view<std::int32_t>(nullptr, 1, 1));
              }),
              "output is a null view"));
  CHECK(names(error_of([&] {
                specdec::vllm::rejection_sample(b, drafts, cu, 0, matrix_view<const float>(), matrix_view<const float>(probs.data(), 0, 4),
                                                bonus, {}, {}, matrix_view<const float>(),
                                                matrix_view<std::int32_t>(const_cast<std::int32_t*>(bonus.data()), 1, 1));
              }),
              "output overlaps bonus_token_ids"));
  const std::vector<std::uint8_t> greedy = {1};
  specdec::vllm::rejection_sample(b, drafts, cu, 0, matrix_view<const float>(), matrix_view<const float>(probs.data(), 0, 4), bonus,
                                  greedy, {}, matrix_view<const float>(), matrix_view<std::int32_t>(out.data(), 1, 1));
  CHECK(out[0] == 1);
}

TEST_CASE("heads_drafter: top_k checked at construction and against V before its buffers are sized") {
  specdec::eigen b;
  const specdec::static_tree shape = specdec::make_static_tree({{0}, {0, 0}});
  CHECK(names(error_of([&] { specdec::heads_drafter<specdec::eigen> d(b, shape, 0); }), "top_k = 0"));
  CHECK(names(error_of([&] { specdec::heads_drafter<specdec::eigen> d(b, shape, index_t{1} << 40); }), "top_k"));
}

TEST_CASE_TEMPLATE("add_rows with per-row weights: weights laid over y are refused (found by fuzz_views)", B, specdec::eigen,
                   specdec::thrust_backend<specdec::thrust_system::cpp>) {
  B b;
  std::vector<float> y(3 * 8, 1.0f), x(3 * 8, 2.0f), w = {0.5f, -1.0f, 2.0f};
  // The weights were y's first three entries: row 0's write changed rows 1 and 2's weights.
  CHECK(error_of([&] {
          b.add_rows(matrix_view<float>(y.data(), 3, 8), matrix_view<const float>(x.data(), 3, 8), vector_view<const float>(y.data(), 3));
        }).find("y overlaps scale") != std::string::npos);
  b.add_rows(matrix_view<float>(y.data(), 3, 8), matrix_view<const float>(x.data(), 3, 8), vector_view<const float>(w.data(), 3));
  CHECK(y[0] == 2.0f);
  CHECK(y[8] == -1.0f);
  CHECK(y[16] == 5.0f);
}

TEST_CASE("a strided bias is refused, not read as packed (EAGLE's fuse, found by fuzz_views; every Linear's apply)") {
  specdec::eigen b;
  std::vector<float> embed(8 * 4, 0.25f), fc(4 * 8, 0.5f), bias(8, 1.0f), feature(3 * 4, 1.0f), out(3 * 4);
  const std::vector<std::int32_t> tokens = {1, 2, 3};
  specdec::blocks::eagle::weights<specdec::host_space> w;
  w.embed = matrix_view<const float>(embed.data(), 8, 4);
  w.fc.weight = matrix_view<const float>(fc.data(), 4, 8);
  w.fc.bias = vector_view<const float>(bias.data(), 4, 2);  // every other entry
  const auto fuse = [&] {
    specdec::blocks::eagle::fuse(b, w, vector_view<const std::int32_t>(tokens.data(), 3), matrix_view<const float>(feature.data(), 3, 4),
                                 matrix_view<float>(out.data(), 3, 4));
  };
  CHECK(error_of(fuse).find("fc.bias") != std::string::npos);
  w.fc.bias = vector_view<const float>(bias.data(), 4);
  CHECK(error_of(fuse).empty());
  CHECK(out[0] == 0.25f * 0.5f * 4 + 1.0f * 0.5f * 4 + 1.0f);
  specdec::blocks::linear<specdec::host_space> layer;
  layer.weight = matrix_view<const float>(fc.data(), 4, 8);
  layer.bias = vector_view<const float>(bias.data(), 4, -1);
  std::vector<float> x(3 * 8, 1.0f);
  CHECK(error_of([&] { specdec::blocks::apply(b, layer, matrix_view<const float>(x.data(), 3, 8), matrix_view<float>(out.data(), 3, 4)); })
            .find("bias") != std::string::npos);
}

namespace {
/// A decoder layer of E = 8 (two query heads over one kv head of 4, an MLP of 6) over one buffer.
struct small_layer {
  std::vector<float> buffer = std::vector<float>(8 + 8 + 64 + 32 + 32 + 64 + 48 + 48 + 48, 0.125f);
  specdec::blocks::layer_config config() const {
    specdec::blocks::layer_config c;
    c.attention.hidden = 8;
    c.attention.heads = 2;
    c.attention.kv_heads = 1;
    c.attention.head_dim = 4;
    c.intermediate = 6;
    return c;
  }
  specdec::blocks::layer_weights<specdec::host_space> weights() const {
    specdec::blocks::layer_weights<specdec::host_space> w;
    const float* p = buffer.data();
    const auto next = [&](index_t rows, index_t cols) {
      const matrix_view<const float> m(p, rows, cols);
      p += rows * cols;
      return m;
    };
    w.input_norm = vector_view<const float>(next(8, 1).data(), 8);
    w.post_norm = vector_view<const float>(next(8, 1).data(), 8);
    w.attention.q.weight = next(8, 8);
    w.attention.k.weight = next(4, 8);
    w.attention.v.weight = next(4, 8);
    w.attention.o.weight = next(8, 8);
    w.mlp.gate.weight = next(6, 8);
    w.mlp.up.weight = next(6, 8);
    w.mlp.down.weight = next(8, 6);
    return w;
  }
};
}  // namespace

TEST_CASE("the drafter blocks' forwards refuse an output laid over a weight (MTP's, found by fuzz_views' new entries)") {
  // MTP's project wrote its rows over the decoder layer's weights before the layer read them.
  specdec::eigen b;
  small_layer layer;
  std::vector<float> embed(8 * 8, 0.5f), norms(16, 1.0f), eh_proj(8 * 16, 0.25f), hidden(3 * 8, 1.0f), out(3 * 8);
  const std::vector<std::int32_t> tokens = {1, 2, 3};
  const std::vector<std::int64_t> positions = {1, 2, 3};
  specdec::blocks::mtp::config c;
  c.layer = layer.config();
  c.vocab = 8;
  specdec::blocks::mtp::weights<specdec::host_space> w;
  w.embed = matrix_view<const float>(embed.data(), 8, 8);
  w.enorm = vector_view<const float>(norms.data(), 8);
  w.hnorm = vector_view<const float>(norms.data() + 8, 8);
  w.eh_proj.weight = matrix_view<const float>(eh_proj.data(), 8, 16);
  w.layer = layer.weights();
  const auto forward = [&](float* into) {
    specdec::blocks::mtp::forward(b, c, w, vector_view<const std::int32_t>(tokens.data(), 3), matrix_view<const float>(hidden.data(), 3, 8),
                                  vector_view<const std::int64_t>(positions.data(), 3), nullptr, {}, matrix_view<float>(into, 3, 8));
  };
  const std::string over_weight = error_of([&] { forward(layer.buffer.data() + 8); });  // over post_attention_layernorm
  CHECK(over_weight.find("out") != std::string::npos);
  CHECK(over_weight.find("post_attention_layernorm.weight") != std::string::npos);
  CHECK(error_of([&] { forward(out.data()); }).empty());
}

TEST_CASE("a refused layer forward leaves its KV cache as it was") {
  // The attention appends its rows before the MLP's shapes are checked: the cache is cropped back.
  specdec::eigen b;
  small_layer layer;
  auto w = layer.weights();
  w.mlp.down.weight = matrix_view<const float>(w.mlp.down.weight.data(), 8, 5);  // not [E x intermediate]
  std::vector<float> x(3 * 8, 1.0f);
  const std::vector<std::int64_t> positions = {0, 1, 2};
  specdec::blocks::kv_cache<specdec::eigen> cache(b, 8, 4);
  CHECK_FALSE(error_of([&] {
                specdec::blocks::decoder_layer_forward(b, layer.config(), w, matrix_view<float>(x.data(), 3, 8),
                                                       vector_view<const std::int64_t>(positions.data(), 3), &cache);
              }).empty());
  CHECK(cache.size() == 0);
  w = layer.weights();
  specdec::blocks::decoder_layer_forward(b, layer.config(), w, matrix_view<float>(x.data(), 3, 8),
                                         vector_view<const std::int64_t>(positions.data(), 3), &cache);
  CHECK(cache.size() == 3);
}
