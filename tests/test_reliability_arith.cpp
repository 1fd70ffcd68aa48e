// SPDX-License-Identifier: Apache-2.0
// Reliability, second round (issue 31), the classes found at the library's entry points: size and
// offset arithmetic on caller values before the check (class 1), standard exceptions escaping
// (class 2), views checked for shape only (class 4) and caller values that reached the output
// unchecked (class 5). Every case here was accepted, crashed, overflowed or threw a standard
// exception before its fix; each now throws specdec::invalid_argument naming the argument, or, where
// it is valid input, gives the right result.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/trtllm.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/jakiro.hpp>

#include "backend_conformance.hpp"

using specdec::index_t;
using specdec::matrix_view;
using specdec::vector_view;
namespace sampling = specdec::sampling;
using conformance::error_of;
using conformance::contains;
using conformance::inf_value;
using conformance::nan_value;
using conformance::int64_max;

namespace {
using thrust_cpp = specdec::thrust_backend<specdec::thrust_system::cpp>;

/// Runs `f` and reports whether it threw anything but specdec::invalid_argument (a standard exception
/// escaping is a defect of its own).
template <class F>
std::string outcome(F&& f) {
  try {
    f();
  } catch (const specdec::invalid_argument& e) {
    return std::string("invalid_argument: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("OTHER: ") + e.what();
  }
  return "none";
}
}  // namespace

// ---------------------------------------------------------------------------------------------------
// The helpers themselves.

TEST_CASE("checked arithmetic: sums, products, narrowing and element counts throw instead of overflowing") {
  namespace d = specdec::detail;
  CHECK(d::checked_add("f", 2, 3, "a + b") == 5);
  CHECK(contains(error_of([] { (void)d::checked_add("f", int64_max, 1, "prefix + n"); }),
                 "f: prefix + n = 9223372036854775807 + 1 overflows int64"));
  CHECK(contains(error_of([] { (void)d::checked_add("f", std::numeric_limits<index_t>::min(), -1, "x"); }), "overflows"));
  CHECK(d::checked_mul("f", -4, 5, "p") == -20);
  CHECK(contains(error_of([] { (void)d::checked_mul("f", index_t{1} << 32, index_t{1} << 32, "rows x cols"); }),
                 "rows x cols = 4294967296 * 4294967296 overflows"));
  CHECK(d::checked_narrow<std::int32_t>("f", index_t{2147483647}, "id") == 2147483647);
  CHECK(contains(error_of([] { (void)d::checked_narrow<std::int32_t>("f", index_t{2147483648}, "position"); }),
                 "position = 2147483648 does not fit 32-bit signed integers"));
  CHECK(contains(error_of([] { (void)d::checked_narrow<std::uint8_t>("f", -1, "byte"); }), "byte = -1"));
  CHECK(d::range_fits(2, 3, 5));
  CHECK_FALSE(d::range_fits(3, 3, 5));
  CHECK_FALSE(d::range_fits(int64_max, 2, 5));  // the sum would wrap negative and pass
  CHECK_FALSE(d::range_fits(-1, 1, 5));
  CHECK_FALSE(d::range_fits(0, -1, 5));
  CHECK(d::checked_count("f", {3, 0, int64_max}, "m") == 0);
  CHECK(d::checked_count("f", {1 << 20, 1 << 20}, "m") == std::size_t{1} << 40);
  CHECK(contains(error_of([] { (void)d::checked_count("f", {(1 << 20) + 1, 1 << 20}, "the mask"); }),
                 "the mask would need more than"));
  CHECK(contains(error_of([] { (void)d::checked_count("f", {4, -1}, "the mask"); }), "negative extent -1"));
}

TEST_CASE("view checks: null with a shape, negative extents, overlapping rows and footprints past the address space") {
  namespace d = specdec::detail;
  std::vector<float> buffer(64);
  const matrix_view<float> good(buffer.data(), 4, 8);
  CHECK(error_of([&] { d::check_view("f", "m", good, d::packed); }).empty());
  CHECK(error_of([&] { d::check_view("f", "m", matrix_view<float>(nullptr, 0, 8), d::packed); }).empty());
  CHECK(contains(error_of([&] { d::check_view("f", "m", matrix_view<float>(nullptr, 2, 8), d::packed); }),
                 "m is a null view of shape [2 x 8]"));
  CHECK(contains(error_of([&] { d::check_view("f", "m", matrix_view<float>(buffer.data(), -1, 8), d::packed); }),
                 "m has extent -1"));
  CHECK(contains(error_of([&] { d::check_view("f", "m", matrix_view<float>(buffer.data(), 4, 8, 0, 1), d::packed); }),
                 "m has row stride 0 smaller than its 8 columns"));
  CHECK(contains(error_of([&] { d::check_view("f", "v", vector_view<float>(buffer.data(), 4, 2), d::packed); }),
                 "v has stride 2; expected a packed vector"));
  CHECK(contains(error_of([&] { d::check_view("f", "v", vector_view<float>(buffer.data(), 4, 0), d::indexed_output); }),
                 "v has stride 0"));
  CHECK(contains(error_of([&] {
                   d::check_view("f", "m", matrix_view<float>(buffer.data(), index_t{1} << 40, 8, index_t{1} << 40, 1), d::packed);
                 }),
                 "overflows int64"));
  // Side-by-side columns of one buffer share no element; a one-column shift does.
  const matrix_view<float> left(buffer.data(), 8, 3, 8, 1), right(buffer.data() + 3, 8, 5, 8, 1);
  CHECK(error_of([&] { d::check_disjoint("f", d::extent_of("f", "a", left), d::extent_of("f", "b", right)); }).empty());
  const matrix_view<float> shifted(buffer.data() + 2, 8, 5, 8, 1);
  CHECK(contains(error_of([&] { d::check_disjoint("f", d::extent_of("f", "a", left), d::extent_of("f", "b", shifted)); }),
                 "a overlaps b"));
  // A matrix shifted by whole rows overlaps too (row 1 of one is row 0 of the other).
  const matrix_view<float> down(buffer.data() + 8, 4, 8);
  CHECK(contains(error_of([&] { d::check_disjoint("f", d::extent_of("f", "a", good), d::extent_of("f", "b", down)); }),
                 "overlaps"));
  CHECK(contains(error_of([&] { d::check_disjoint("f", d::extent_of("f", "a", good), d::extent_of("f", "b", good)); }),
                 "a is the same memory as b"));
  CHECK(error_of([&] { d::check_disjoint("f", d::extent_of("f", "a", good), d::extent_of("f", "b", good), true); }).empty());
}

// ---------------------------------------------------------------------------------------------------
// Class 1: arithmetic on caller values before the check.

TEST_CASE("class 1: tree positions and dense masks with a huge prefix are rejected, not wrapped") {
  const auto tree = specdec::make_tree({5, 6, 7, 8}, {-1, 0, 1, 2});
  std::vector<std::int64_t> positions(4);
  CHECK(contains(error_of([&] { specdec::tree_positions(tree, int64_max, vector_view<std::int64_t>(positions)); }),
                 "prefix_length + depth = 9223372036854775807 + 3 overflows"));
  std::vector<std::int32_t> narrow(4);
  CHECK(contains(error_of([&] { specdec::tree_positions(tree, index_t{1} << 31, vector_view<std::int32_t>(narrow)); }),
                 "does not fit 32-bit signed integers"));
  specdec::tree_positions(tree, 2147483644, vector_view<std::int32_t>(narrow));  // the largest that fits
  CHECK(narrow == std::vector<std::int32_t>{2147483644, 2147483645, 2147483646, 2147483647});
  // 4 x (2^62 - 4 + 4) wrapped to 0 bytes and the fill ran past the buffer.
  CHECK(contains(error_of([&] { (void)specdec::tree_mask_dense(tree, (index_t{1} << 62) - 4); }), "would need more than"));
  CHECK(contains(error_of([&] { (void)specdec::tree_mask_dense(tree, int64_max); }), "prefix_length + nodes"));
  CHECK(contains(error_of([&] { (void)specdec::tree_mask_dense(tree, index_t{1} << 40); }), "would need more than"));
}

TEST_CASE_TEMPLATE("class 1: every verifier's rows-in-range test survives a huge target_row", B, specdec::eigen, thrust_cpp) {
  B b;
  const std::vector<float> probs = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<std::int32_t> argmax = {0, 1};
  const auto chain = sampling::make_chain(0, std::vector<std::int32_t>{1});
  for (const index_t row : {int64_max, int64_max - 1, index_t{1} << 62}) {
    sampling::speculative_request q;
    q.tree = chain;
    q.target_row = row;
    const std::span<const sampling::speculative_request> one(&q, 1);
    const matrix_view<const float> target(probs.data(), 2, 2);
    const std::string expected = row > int64_max - 2 ? "target_row = " + std::to_string(row) : "needs target rows [" + std::to_string(row);
    CHECK(contains(error_of([&] { (void)sampling::verify_greedy(argmax, 2, one); }), expected));
    CHECK(contains(error_of([&] { (void)sampling::verify_greedy(b, target, one); }), "target rows"));
    CHECK(contains(error_of([&] { (void)sampling::verify_speculative(b, {target}, one); }), "target rows"));
    CHECK(contains(error_of([&] { (void)sampling::verify_typical(b, target, one); }), "target rows"));
    CHECK(contains(error_of([&] { (void)sampling::verify_coin_tree(b, target, one); }), "target rows"));
  }
}

TEST_CASE("class 1: the EAGLE-2 builder checks d2t from a checkpoint before adding it") {
  specdec::eigen b;
  specdec::dynamic_tree_config c;
  c.top_k = 1;
  c.depth = 0;
  c.total_tokens = 2;
  c.d2t = {0, std::numeric_limits<std::int32_t>::max()};  // 1 + INT32_MAX overflowed int32
  CHECK(contains(error_of([&] { specdec::eagle2_tree_builder<specdec::eigen> t(b, c); }),
                 "d2t[1] = 2147483647 maps draft token 1 to 2147483648"));
  c.d2t = {-1, 0};
  CHECK(contains(error_of([&] { specdec::eagle2_tree_builder<specdec::eigen> t(b, c); }), "d2t[0] = -1"));
  c.d2t = {0, 5};  // valid: draft token 1 -> target token 6
  specdec::eagle2_tree_builder<specdec::eigen> t(b, c);
  const std::vector<float> root = {0.0f, 3.0f};
  const std::vector<std::int32_t> root_token = {2};
  (void)t.begin(matrix_view<const float>(root.data(), 1, 2), root_token, 7);
  CHECK(t.finish_single().tree.token == std::vector<std::int32_t>{2, 6});
  specdec::eagle2_tree_builder<specdec::eigen> small(b, c);
  CHECK(contains(error_of([&] { (void)small.begin(matrix_view<const float>(root.data(), 1, 2), root_token, 6); }),
                 "maps draft token 1 to 6; expected a target id in [0, 6)"));
}

TEST_CASE("class 1: draft_step masks and positions reject a prefix or root position that overflows") {
  specdec::eigen b;
  specdec::dynamic_tree_config c;
  c.top_k = 2;
  c.depth = 1;
  c.total_tokens = 4;
  specdec::eagle2_tree_builder<specdec::eigen> t(b, c);
  const std::vector<float> root = {0.0f, 1.0f, 2.0f};
  const std::vector<std::int32_t> root_token = {0};
  const specdec::draft_step step = t.begin(matrix_view<const float>(root.data(), 1, 3), root_token);
  CHECK(contains(error_of([&] { (void)step.attention_mask(int64_max); }), "prefix_length + mask_cols"));
  CHECK(contains(error_of([&] { (void)step.attention_mask(index_t{1} << 62); }), "would need more than"));
  CHECK(contains(error_of([&] { (void)step.positions(int64_max); }), "root_position + 1 + step"));
  std::vector<std::int32_t> narrow(2);
  CHECK(contains(error_of([&] { step.positions(index_t{1} << 31, vector_view<std::int32_t>(narrow)); }),
                 "does not fit 32-bit signed integers"));
  specdec::draft_step edited = step;
  edited.mask_cols = 1000;  // the public fields no longer describe the mask
  CHECK(contains(error_of([&] { (void)edited.attention_mask(0); }), "draft_mask has"));
}

TEST_CASE("class 1: SGLang's build_tree and verify_tree_greedy bound their sizes before multiplying") {
  const std::vector<std::int64_t> parents = {-1}, selected = {0}, tokens = {9}, verified = {1}, seq = {4};
  const matrix_view<const std::int64_t> p(parents.data(), 1, 1), s(selected.data(), 1, 1), t(tokens.data(), 1, 1);
  CHECK(contains(error_of([&] {
                   (void)specdec::sglang::build_tree(p, s, t, verified, seq, 1, int64_max, 2, specdec::sglang::tree_mask_mode::full_mask);
                 }),
                 "num_steps = "));
  CHECK(contains(error_of([&] {
                   (void)specdec::sglang::build_tree(p, s, t, verified, seq, 1, 1, index_t{1} << 40, specdec::sglang::tree_mask_mode::full_mask);
                 }),
                 "num_draft_tokens = 1099511627776"));
  const std::vector<std::int64_t> huge_seq = {index_t{1} << 40};
  CHECK(contains(error_of([&] {
                   (void)specdec::sglang::build_tree(p, s, t, verified, huge_seq, 1, 1, 2, specdec::sglang::tree_mask_mode::full_mask);
                 }),
                 "expected at most 1099511627776 (2^40) in all"));
  const std::vector<std::int64_t> one = {5}, link = {-1};
  const matrix_view<const std::int64_t> c1(one.data(), 1, 1), l1(link.data(), 1, 1);
  const std::vector<std::int64_t> index = {0};
  CHECK(contains(error_of([&] {
                   (void)specdec::sglang::verify_tree_greedy(c1, matrix_view<const std::int64_t>(index.data(), 1, 1), l1, l1, one,
                                                             index_t{1} << 41);
                 }),
                 "accept_index [bs x num_spec_step]"));
  // Negative extents made bs * N = 1 and let a std::length_error escape.
  const matrix_view<const std::int64_t> negative(one.data(), -1, -1);
  CHECK(contains(error_of([&] { (void)specdec::sglang::verify_tree_greedy(negative, negative, negative, negative, one, 2); }),
                 "has extent -1"));
  CHECK(contains(error_of([&] { (void)specdec::sglang::organize_draft_results({}, {}, {}, std::numeric_limits<index_t>::min()); }),
                 "num_draft_tokens = "));
}

TEST_CASE("class 1: static trees bound top_k and their node count, TensorRT-LLM ids are checked into int32") {
  const std::vector<specdec::choice> choices = {{0}, {0, 2147483646}};
  CHECK(contains(error_of([&] { (void)specdec::make_static_tree(choices, int64_max); }), "top_k = "));
  const std::vector<specdec::choice> deep = {{0}, {0, 2147483646}, {0, 2147483646, 2147483646}};
  // Node 2's id, rank 2147483646 + offset 1 + 1, wrapped in int32 before.
  CHECK(contains(error_of([&] { (void)specdec::trtllm::make_medusa_setup(deep, 2147483647); }),
                 "tree id of node 2 = 2147483648 does not fit"));
  std::vector<specdec::choice> many;
  for (std::int32_t i = 0; i < 70000; ++i) many.push_back({i});
  CHECK(contains(error_of([&] { (void)specdec::make_static_tree(many, 70000); }), "the choice list has 70000 paths"));
}

TEST_CASE_TEMPLATE("class 1: buffers, allocations and caches are sized with checked arithmetic", B, specdec::eigen, thrust_cpp) {
  B b;
  CHECK(contains(outcome([&] { (void)b.template allocate<float>(index_t{1} << 50); }), "invalid_argument: "));
  CHECK(contains(outcome([&] { typename B::template buffer<float> x(-1); }), "invalid_argument: "));
  auto small = b.template allocate<float>(4);
  CHECK(contains(error_of([&] { (void)small.matrix(index_t{1} << 32, index_t{1} << 32); }), "cannot be viewed as"));
  CHECK(contains(outcome([&] { specdec::blocks::kv_cache<B> cache(b, index_t{1} << 33, index_t{1} << 31); }),
                 "invalid_argument: specdec::blocks::kv_cache"));
  CHECK(contains(outcome([&] { specdec::blocks::kv_cache<B> cache(b, -3, 8); }), "capacity = -3"));
  specdec::blocks::kv_cache<B> cache(b, 4, 2);
  (void)cache.extend(2);
  CHECK(contains(error_of([&] { (void)cache.extend(int64_max); }), "exceeds the capacity of 4"));
  CHECK(contains(outcome([&] { (void)b.download(vector_view<const float, typename B::memory_space>(small.view().data(), -1)); }),
                 "invalid_argument: "));
  std::vector<float> v(4);
  CHECK(contains(error_of([&] { (void)specdec::as_matrix(v, index_t{1} << 32, index_t{1} << 32); }), "cannot be viewed as"));
  std::vector<float> none;
  CHECK(contains(error_of([&] { (void)specdec::as_matrix(none, index_t{1} << 32, index_t{1} << 32); }), "cannot be viewed as"));
}

// ---------------------------------------------------------------------------------------------------
// Class 2: standard exceptions escaping.

TEST_CASE("class 2: padded_tokens, candidate_scores and out-of-range vocabularies throw invalid_argument") {
  std::vector<sampling::speculative_result> results(4);
  results[0].tokens = {1, 2};
  CHECK(contains(outcome([&] { (void)sampling::padded_tokens(results, index_t{1} << 62); }), "invalid_argument: "));
  CHECK(contains(outcome([&] { (void)sampling::padded_tokens(results, index_t{1} << 61); }), "would need more than"));
  CHECK(sampling::padded_tokens(results, 3) == std::vector<std::int32_t>{1, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1});
  specdec::eigen b;
  specdec::dynamic_tree_config c;
  c.top_k = 1;
  c.depth = 0;
  c.total_tokens = 2;
  specdec::eagle2_tree_builder<specdec::eigen> t(b, c);
  for (const index_t request : {index_t{-1}, index_t{1}, int64_max})
    CHECK(contains(outcome([&] { (void)t.candidate_scores(request); }), "invalid_argument: "));
  // V beyond int32 token ids, and negative: a [1 x V] view whose memory is never read.
  std::vector<float> row(4, 0.25f);
  const auto root_only = specdec::make_tree({0}, {-1});
  sampling::speculative_request q;
  q.tree = root_only;
  for (const index_t vocab : {index_t{1} << 31, index_t{-5000}})
    CHECK(contains(outcome([&] {
                     (void)sampling::verify_speculative(b, {matrix_view<const float>(row.data(), 1, vocab)},
                                                        std::span<const sampling::speculative_request>(&q, 1));
                   }),
                   "invalid_argument: "));
  CHECK(contains(outcome([&] { sampling::top_p_renorm(matrix_view<float>(row.data(), 1, -3), 0.5f); }), "invalid_argument: "));
  CHECK(contains(outcome([&] {
                   std::vector<float> out(4);
                   sampling::target_probabilities(matrix_view<const float>(row.data(), 0, index_t{1} << 40),
                                                  std::vector<sampling::sampling_params>{{}}, matrix_view<float>(out.data(), 0, index_t{1} << 40));
                 }),
                 "invalid_argument: "));
}

// ---------------------------------------------------------------------------------------------------
// Class 4: output and input views checked for shape only.

TEST_CASE_TEMPLATE("class 4: outputs with overlapping rows, null outputs and partly aliased gemm are rejected", B, specdec::eigen,
                   thrust_cpp) {
  B b;
  using space = typename B::memory_space;
  const std::vector<float> x = {1, 5, 3, 2, 7, 4, 0, 9, 8, 6, 2, 1};
  auto logits = b.upload(std::span<const float>(x));
  const matrix_view<const float, space> in(logits.view().data(), 3, 4);
  auto values = b.template allocate<float>(12);
  auto indices = b.template allocate<std::int32_t>(12);
  // Row stride 0: every row written over the first.
  CHECK(contains(error_of([&] {
                   b.row_topk(in, 2, matrix_view<float, space>(values.view().data(), 3, 2, 0, 1),
                              matrix_view<std::int32_t, space>(indices.view().data(), 3, 2));
                 }),
                 "values has row stride 0 smaller than its 2 columns"));
  CHECK(contains(error_of([&] {
                   b.row_topk(in, 2, matrix_view<float, space>(nullptr, 3, 2), matrix_view<std::int32_t, space>(indices.view().data(), 3, 2));
                 }),
                 "values is a null view"));
  // Vectors: stride 2 is not a packed output (thrust wrote contiguously past the view).
  auto maxima = b.template allocate<float>(6);
  CHECK(contains(error_of([&] { b.row_max(in, vector_view<float, space>(maxima.view().data(), 3, 2)); }),
                 "max has stride 2; expected a packed vector"));
  // An output shifted one row into its input.
  auto both = b.template allocate<float>(16);
  b.upload(std::span<const float>(std::vector<float>(16, 1.0f)), both.view());
  CHECK(contains(error_of([&] {
                   b.row_softmax(matrix_view<const float, space>(both.view().data(), 3, 4), 1.0f,
                                 matrix_view<float, space>(both.view().data() + 4, 3, 4));
                 }),
                 "out overlaps logits"));
  // In place is documented and allowed.
  b.row_softmax(matrix_view<const float, space>(both.view().data(), 3, 4), 1.0f, matrix_view<float, space>(both.view().data(), 3, 4));
  CHECK(b.download(both.view())[0] == doctest::Approx(0.25f));
  // gemm: c one row inside a.
  auto a = b.template allocate<float>(16);
  auto bm = b.template allocate<float>(16);
  CHECK(contains(error_of([&] {
                   b.gemm(matrix_view<const float, space>(a.view().data(), 2, 4), specdec::transpose::no,
                          matrix_view<const float, space>(bm.view().data(), 4, 4), specdec::transpose::no,
                          matrix_view<float, space>(a.view().data() + 4, 2, 4));
                 }),
                 "c overlaps a"));
  // gather_rows with a negative id count let std::length_error escape on thrust.
  auto ids = b.template allocate<std::int32_t>(1);
  CHECK(contains(outcome([&] {
                   b.gather_rows(in, vector_view<const std::int32_t, space>(ids.view().data(), -1),
                                 matrix_view<float, space>(values.view().data(), -1, 4));
                 }),
                 "invalid_argument: "));
}

TEST_CASE_TEMPLATE("class 4: verifier outputs that share memory or are null with a shape are rejected", B, specdec::eigen,
                   thrust_cpp) {
  B b;
  using space = typename B::memory_space;
  const std::vector<float> target = {0.0f, 1.0f, 0.0f, 1.0f};
  auto rows = b.upload(std::span<const float>(target));
  const matrix_view<const float, space> t(rows.view().data(), 2, 2);
  const auto chain = sampling::make_chain(0, std::vector<std::int32_t>{1});
  sampling::speculative_request q;
  q.tree = chain;
  const std::span<const sampling::speculative_request> one(&q, 1);
  auto buffer = b.template allocate<std::int32_t>(8);
  sampling::verify_outputs<space> out;
  out.tokens = matrix_view<std::int32_t, space>(buffer.view().data(), 1, 3);
  out.accepted = vector_view<std::int32_t, space>(buffer.view().data() + 2, 1);  // inside tokens' row
  CHECK(contains(error_of([&] { sampling::verify_greedy(b, t, one, out); }), "outputs.tokens overlaps outputs.accepted"));
  out.accepted = vector_view<std::int32_t, space>(buffer.view().data() + 3, 1);
  out.uniforms_consumed = vector_view<std::int32_t, space>(nullptr, 1);
  CHECK(contains(error_of([&] { sampling::verify_greedy(b, t, one, out); }), "outputs.uniforms_consumed is a null view"));
  out.uniforms_consumed = {};
  sampling::verify_greedy(b, t, one, out);  // tokens and accepted side by side: valid
  const std::vector<std::int32_t> written = b.download(vector_view<const std::int32_t, space>(buffer.view().data(), 4));
  CHECK(written == std::vector<std::int32_t>{1, 1, -1, 1});
  // An output inside the input rows.
  auto shared = b.template allocate<float>(8);
  b.upload(std::span<const float>(std::vector<float>{0.0f, 1.0f, 0.0f, 1.0f, 0, 0, 0, 0}), shared.view());
  sampling::verify_outputs<space> inside;
  inside.tokens = matrix_view<std::int32_t, space>(buffer.view().data(), 1, 3);
  inside.final_distributions = matrix_view<float, space>(shared.view().data() + 2, 1, 2);
  CHECK(contains(error_of([&] {
                   sampling::verify_speculative(b, {matrix_view<const float, space>(shared.view().data(), 2, 2)}, one, {}, inside);
                 }),
                 "outputs.final_distributions overlaps rows.target"));
}

TEST_CASE("class 4: host helpers reject outputs that alias or are null, blocks check outputs before writing") {
  const auto tree = specdec::make_tree({5, 6, 7}, {-1, 0, 0});
  std::vector<std::int32_t> links(3);
  CHECK(contains(error_of([&] { specdec::child_links(tree, vector_view<std::int32_t>(links), vector_view<std::int32_t>(links)); }),
                 "first_child is the same memory as next_sibling"));
  CHECK(contains(error_of([&] {
                   specdec::child_links(tree, vector_view<std::int32_t>(nullptr, 3), vector_view<std::int32_t>(links));
                 }),
                 "first_child is a null view"));
  std::vector<float> mask(9);
  CHECK(contains(error_of([&] { specdec::tree_mask_additive(tree, 0, matrix_view<float>(mask.data(), 3, 3, 0, 1)); }),
                 "out has row stride 0"));
  std::vector<float> logits = {1, 2, 3, 4};
  std::vector<float> probs(4);
  CHECK(contains(error_of([&] {
                   sampling::target_probabilities(matrix_view<const float>(logits.data(), 1, 4), std::vector<sampling::sampling_params>{{}},
                                                  matrix_view<float>(logits.data(), 1, 4));
                 }),
                 "probs is the same memory as logits"));
}

// ---------------------------------------------------------------------------------------------------
// Class 5: values that reached the output unchecked.

TEST_CASE_TEMPLATE("class 5: exponential-race noise outside [0, inf) is rejected; valid noise never picks a zero-probability token",
                   B, specdec::eigen, thrust_cpp) {
  B b;
  using space = typename B::memory_space;
  const std::vector<float> target = {0.0f, 1.0f};
  auto t = b.upload(std::span<const float>(target));
  const auto root_only = specdec::make_tree({0}, {-1});
  sampling::speculative_request q;
  q.tree = root_only;
  q.noise_row = 0;
  sampling::speculative_options options;
  options.draw = sampling::final_draw::exponential_race;
  for (const float bad : {-1.0f, nan_value, inf_value}) {
    const std::vector<float> noise = {1.0f, bad};
    auto n = b.upload(std::span<const float>(noise));
    const sampling::speculative_rows<space> rows{matrix_view<const float, space>(t.view().data(), 1, 2), {},
                                                 matrix_view<const float, space>(n.view().data(), 1, 2)};
    CHECK(contains(error_of([&] { (void)sampling::verify_speculative(b, rows, std::span<const sampling::speculative_request>(&q, 1), options); }),
                   "exponential_noise[0, 1] = "));
  }
  for (const float noise1 : {0.0f, 1e-30f, 0.5f, 30.0f}) {
    const std::vector<float> noise = {1e-30f, noise1};
    auto n = b.upload(std::span<const float>(noise));
    const sampling::speculative_rows<space> rows{matrix_view<const float, space>(t.view().data(), 1, 2), {},
                                                 matrix_view<const float, space>(n.view().data(), 1, 2)};
    CHECK(sampling::verify_speculative(b, rows, q, options).tokens == std::vector<std::int32_t>{1});
  }
}

TEST_CASE("class 5: SGLang's greedy verification rejects cycles through first-child links and ids int32 cannot hold") {
  // 0 -> 1 -> 2 -> 1 -> ...: three nodes accepted seven tokens.
  const std::vector<std::int64_t> candidates = {5, 5, 5}, index = {0, 1, 2}, next = {1, 2, 1}, sibling = {-1, -1, -1};
  const std::vector<std::int64_t> predict = {5, 5, 5};
  const auto m = [](const std::vector<std::int64_t>& v) { return matrix_view<const std::int64_t>(v.data(), 1, 3); };
  CHECK(contains(error_of([&] { (void)specdec::sglang::verify_tree_greedy(m(candidates), m(index), m(next), m(sibling), predict, 8); }),
                 "back to node 1 on the accepted path"));
  const std::vector<std::int64_t> self = {0, -1, -1};  // the root as its own child
  CHECK(contains(error_of([&] { (void)specdec::sglang::verify_tree_greedy(m(candidates), m(index), m(self), m(sibling), predict, 8); }),
                 "back to node 0"));
  // A valid chain still accepts.
  const std::vector<std::int64_t> chain = {1, 2, -1};
  const auto ok = specdec::sglang::verify_tree_greedy(m(candidates), m(index), m(chain), m(sibling), predict, 8);
  CHECK(ok.accept_token_num == std::vector<std::int32_t>{2});
  // 2^32 + 5 was emitted as 5; negative predictions as tokens.
  const std::vector<std::int64_t> wide_candidates = {5, 4294967301, 5};
  const std::vector<std::int64_t> wide = {4294967301, 5, 5};
  CHECK(contains(error_of([&] { (void)specdec::sglang::verify_tree_greedy(m(wide_candidates), m(index), m(chain), m(sibling), wide, 8); }),
                 "target_predict[0] = 4294967301"));
  const std::vector<std::int64_t> negative = {-7, -7, -7};
  CHECK(contains(error_of([&] { (void)specdec::sglang::verify_tree_greedy(m(candidates), m(index), m(chain), m(sibling), negative, 8); }),
                 "target_predict[0] = -7"));
}

TEST_CASE("class 5: NaN draft scores, negative root and draft tokens are rejected before they reach a tree") {
  const std::vector<float> scores = {nan_value, 0.5f, 0.9f, 0.1f};
  const std::vector<std::int64_t> tokens = {1, 2, 3, 4};
  CHECK(contains(error_of([&] { (void)specdec::sglang::organize_draft_results(scores, tokens, {}, 3); }), "flat_scores[0] is NaN"));
  const std::vector<float> fine = {0.2f, 0.5f, 0.9f, 0.1f};
  const std::vector<std::int64_t> negative = {1, -2, 3, 4};
  CHECK(contains(error_of([&] { (void)specdec::sglang::organize_draft_results(fine, negative, {}, 3); }), "flat_tokens[1] = -2"));
  CHECK(specdec::sglang::organize_draft_results(fine, tokens, {}, 3).selected == std::vector<std::int64_t>{1, 2});
  specdec::eigen b;
  specdec::dynamic_tree_config c;
  c.top_k = 1;
  c.depth = 0;
  c.total_tokens = 2;
  specdec::eagle2_tree_builder<specdec::eigen> t(b, c);
  const std::vector<float> root = {0.0f, 1.0f};
  const std::vector<std::int32_t> minus_one = {-1};
  CHECK(contains(error_of([&] { (void)t.begin(matrix_view<const float>(root.data(), 1, 2), minus_one); }), "root_tokens[0] = -1"));
  const std::vector<std::int32_t> beyond = {9};
  CHECK(contains(error_of([&] { (void)t.begin(matrix_view<const float>(root.data(), 1, 2), beyond, 4); }), "root_tokens[0] = 9"));
  // Draft ids past the target vocabulary without a d2t.
  const std::vector<std::int32_t> zero = {0};
  CHECK(contains(error_of([&] { (void)t.begin(matrix_view<const float>(root.data(), 1, 2), zero, 1); }), "draft token 1"));
  const auto buffers = specdec::eagle1::make_buffers(std::vector<specdec::choice>{{0}, {1}}, 2);
  CHECK(contains(error_of([&] { specdec::eagle1::static_drafter<specdec::eigen> d(b, buffers, -5, 0); }), "root_token = -5"));
  specdec::eagle1::static_drafter<specdec::eigen> d(b, buffers, 3, 0);
  const std::vector<std::int32_t> bad_row = {4, -3};
  CHECK(contains(error_of([&] { (void)d.begin_with(bad_row); }), "root_row[1] = -3"));
  // Edited buffers: a negative group or rank indexed ss_token before its start.
  auto edited = buffers;
  edited.shape.rank[1] = -1;
  CHECK(contains(error_of([&] { specdec::eagle1::static_drafter<specdec::eigen> e(b, edited, 3, 0); }),
                 "node 1 is rank -1 in its parent's group 0"));
  edited = buffers;
  edited.group[0] = -1;
  CHECK(contains(error_of([&] { specdec::eagle1::static_drafter<specdec::eigen> e(b, edited, 3, 0); }), "expected a group in [0, 0)"));
  edited = specdec::eagle1::make_buffers(std::vector<specdec::choice>{{0}, {1}, {0, 0}}, 2);  // one level to expand
  REQUIRE(!edited.levels.empty());
  edited.levels[0].nodes[0] = 7;
  CHECK(contains(error_of([&] { specdec::eagle1::static_drafter<specdec::eigen> e(b, edited, 3, 0); }), "a level expands node 7"));
}
