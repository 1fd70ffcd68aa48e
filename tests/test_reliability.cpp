// SPDX-License-Identifier: Apache-2.0
// Bad input at every public entry point: each case here was once accepted (or crashed, or leaked a
// standard exception) and now throws specdec::invalid_argument naming the argument; or it is valid
// input that was once rejected. Every case was run against the code before its fix and failed there.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/eagle2.hpp>

#include "backend_conformance.hpp"
#include "engine/gguf.hpp"

using specdec::index_t;
namespace sampling = specdec::sampling;
using conformance::error_of;
using conformance::contains;
using conformance::inf_value;
using conformance::nan_value;

TEST_CASE("target_probabilities: an empty vocabulary is rejected; -inf masks a token; a row with no finite logit is rejected") {
  std::vector<float> none;
  const std::vector<sampling::sampling_params> params(1);
  // [2 x 0] read logits(r, 0) through a null pointer.
  CHECK(contains(error_of([&] {
                   sampling::target_probabilities(specdec::matrix_view<const float>(none.data(), 2, 0), params,
                                                  specdec::matrix_view<float>(none.data(), 2, 0));
                 }),
                 "logits has 0 columns; expected a vocabulary of at least one token"));
  // -inf is how vLLM's top-k / top-p and engines' grammar masks remove a token: probability 0.
  const std::vector<float> logits = {-inf_value, 1.0f, -inf_value, 1.0f};
  std::vector<float> probs(4, -1.0f);
  sampling::target_probabilities(specdec::matrix_view<const float>(logits.data(), 1, 4), params,
                                 specdec::matrix_view<float>(probs.data(), 1, 4));
  CHECK(probs == std::vector<float>{0.0f, 0.5f, 0.0f, 0.5f});
  sampling::sampling_params greedy;
  greedy.temperature = 0.0f;
  const std::vector<float> masked_first = {-inf_value, -3.0f, -2.0f, -inf_value};
  sampling::target_probabilities(specdec::matrix_view<const float>(masked_first.data(), 1, 4),
                                 std::span<const sampling::sampling_params>(&greedy, 1), specdec::matrix_view<float>(probs.data(), 1, 4));
  CHECK(probs == std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f});
  sampling::sampling_params top;
  top.top_k = 1;
  top.top_p = 0.6f;
  top.min_p = 0.1f;
  sampling::target_probabilities(specdec::matrix_view<const float>(logits.data(), 1, 4),
                                 std::span<const sampling::sampling_params>(&top, 1), specdec::matrix_view<float>(probs.data(), 1, 4));
  CHECK(probs == std::vector<float>{0.0f, 0.5f, 0.0f, 0.5f});  // ties at the k-th are kept, as vLLM
  const std::vector<float> all_masked = {-inf_value, -inf_value, -inf_value, -inf_value};
  CHECK(contains(error_of([&] {
                   sampling::target_probabilities(specdec::matrix_view<const float>(all_masked.data(), 1, 4), params,
                                                  specdec::matrix_view<float>(probs.data(), 1, 4));
                 }),
                 "logits row 0 has no finite entry"));
  for (const float bad : {nan_value, inf_value}) {
    const std::vector<float> row = {0.0f, bad, 1.0f, 2.0f};
    CHECK(contains(error_of([&] {
                     sampling::target_probabilities(specdec::matrix_view<const float>(row.data(), 1, 4), params,
                                                    specdec::matrix_view<float>(probs.data(), 1, 4));
                   }),
                   "logits[0, 1] = "));
  }
}

TEST_CASE("top_p_renorm / top_k_renorm check every entry and the row sum") {
  std::vector<float> nan_row = {0.5f, nan_value, 0.5f};
  CHECK(contains(error_of([&] { sampling::top_p_renorm(specdec::matrix_view<float>(nan_row.data(), 1, 3), 0.9f); }),
                 "probs[0, 1] = nan; expected a probability in [0, 1]"));
  std::vector<float> heavy = {1.0f, 1.0f, 1.0f};
  CHECK(contains(error_of([&] { sampling::top_p_renorm(specdec::matrix_view<float>(heavy.data(), 1, 3), 0.9f); }),
                 "probs row 0 sums to 3"));
  std::vector<float> heavy_k = {1.0f, 1.0f, 1.0f};
  CHECK(contains(error_of([&] { sampling::top_k_renorm(specdec::matrix_view<float>(heavy_k.data(), 1, 3), 2); }),
                 "probs row 0 sums to 3"));
  std::vector<float> fine = {0.25f, 0.5f, 0.25f};
  sampling::top_p_renorm(specdec::matrix_view<float>(fine.data(), 1, 3), 0.5f);
  CHECK(fine == std::vector<float>{0.0f, 1.0f, 0.0f});
}

TEST_CASE("make_chain / make_tree reject negative tokens") {
  const std::vector<std::int32_t> drafts = {3, -5};
  CHECK(contains(error_of([&] { (void)sampling::make_chain(1, drafts); }), "node 2 has token -5; expected a token id >= 0"));
  CHECK(contains(error_of([&] { (void)sampling::make_chain(-1, std::span<const std::int32_t>()); }),
                 "node 0 has token -1; expected a token id >= 0"));
  CHECK(contains(error_of([&] { (void)specdec::make_tree({0, 1, -7}, {-1, 0, 0}); }), "node 2 has token -7"));
  const auto ok = sampling::make_chain(0, std::span<const std::int32_t>());
  CHECK(ok.size() == 1);
}

TEST_CASE_TEMPLATE("stochastic verification validates every target row it forms a residual from", B, specdec::eigen,
                   specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  using space = typename B::memory_space;
  const index_t v = 4;
  // Node 0's row: the draft token 2 is tested with p(2) = 0.05 (fine) and rejected (u = 0.9), so the
  // residual is formed from the whole row: NaN / negative / heavy rows must not pass silently.
  const std::vector<std::vector<float>> bad_rows = {
      {nan_value, 0.45f, 0.05f, 0.5f}, {-0.2f, 0.65f, 0.05f, 0.5f}, {0.9f, 1.0f, 0.05f, 1.0f}};
  const std::vector<std::string> expected = {"target_probs[0, 0] = nan", "target_probs[0, 0] = -0.2", "target_probs row 0 sums to 2.95"};
  const auto tree = sampling::make_chain(0, std::vector<std::int32_t>{2});
  const std::vector<double> uniforms = {0.9, 0.5};
  for (std::size_t i = 0; i < bad_rows.size(); ++i) {
    std::vector<float> p = bad_rows[i];
    p.insert(p.end(), {0.25f, 0.25f, 0.25f, 0.25f});
    auto target = h.up(p);
    sampling::speculative_request q;
    q.tree = tree;
    q.uniforms = sampling::uniform_stream::values(uniforms);
    const specdec::matrix_view<const float, space> rows(target.view().data(), 2, v);
    CHECK(contains(error_of([&] {
                     (void)sampling::verify_speculative(h.b, {rows}, std::span<const sampling::speculative_request>(&q, 1));
                   }),
                   expected[i]));
    // The lenient path subtracts a point mass from the same row.
    sampling::speculative_options lenient;
    lenient.lenience = 0.5f;
    CHECK(contains(error_of([&] {
                     (void)sampling::verify_speculative(h.b, {rows}, std::span<const sampling::speculative_request>(&q, 1), lenient);
                   }),
                   expected[i]));
  }
}

TEST_CASE_TEMPLATE("verify_typical checks the row of its final argmax", B, specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  using space = typename B::memory_space;
  // Node 1 is accepted (p(1) = 0.9 at the root), so the final token is the argmax of node 1's row.
  const auto tree = sampling::make_chain(0, std::vector<std::int32_t>{1});
  for (const float fill : {nan_value, 0.0f}) {
    std::vector<float> p = {0.05f, 0.9f, 0.05f, fill, fill, fill};
    auto target = h.up(p);
    sampling::speculative_request q;
    q.tree = tree;
    CHECK(contains(error_of([&] {
                     (void)sampling::verify_typical(h.b, specdec::matrix_view<const float, space>(target.view().data(), 2, 3),
                                                    std::span<const sampling::speculative_request>(&q, 1));
                   }),
                   "target_probs"));
  }
}

TEST_CASE("the greedy walk checks the caller's bonus token against the vocabulary") {
  const auto tree = sampling::make_chain(0, std::vector<std::int32_t>{1});
  const std::vector<std::int32_t> argmax = {1, 2};  // node 1 accepted, then the leaf: bonus
  for (const std::int32_t bonus : {47, -80}) {
    sampling::speculative_request q;
    q.tree = tree;
    q.bonus_token = bonus;
    CHECK(contains(error_of([&] { (void)sampling::verify_greedy(argmax, 4, std::span<const sampling::speculative_request>(&q, 1)); }),
                   "bonus_token = " + std::to_string(bonus) + "; expected a token in [0, 4)"));
    // ... and inside a sampled batch, for a greedy request.
    specdec::eigen b;
    const std::vector<float> logits = {0, 5, 0, 0, 0, 0, 5, 0};
    q.greedy = true;
    CHECK(contains(error_of([&] {
                     (void)sampling::verify_speculative_logits(b, {specdec::matrix_view<const float>(logits.data(), 2, 4)}, std::span<const sampling::speculative_request>(&q, 1));
                   }),
                   "bonus_token = " + std::to_string(bonus)));
  }
}

TEST_CASE("tree_mask_flashinfer_packed: byte counts beyond int32 are rejected, not narrowed") {
  const std::vector<specdec::draft_tree> root = {specdec::make_tree({5}, {-1})};
  const std::vector<index_t> huge = {index_t{1} << 35};
  std::vector<std::int32_t> indptr;
  CHECK(contains(error_of([&] { (void)specdec::tree_mask_flashinfer_packed(root, huge, indptr); }),
                 "prefix_lengths[0] = 34359738368; expected a length in [0, 2147483647]"));
  std::vector<std::int32_t> chain_tokens(16, 5), chain_parents(16);
  for (std::int32_t i = 0; i < 16; ++i) chain_parents[static_cast<std::size_t>(i)] = i - 1;
  const std::vector<specdec::draft_tree> chain = {specdec::make_tree(chain_tokens, chain_parents)};
  const std::vector<index_t> longest = {std::numeric_limits<std::int32_t>::max()};  // 16 x (2^31 + 15) bits
  CHECK(contains(error_of([&] { (void)specdec::tree_mask_flashinfer_packed(chain, longest, indptr); }),
                 "bytes; expected at most 2147483647 (indptr is int32)"));
  const std::vector<index_t> overflow = {std::numeric_limits<index_t>::max()};
  CHECK(contains(error_of([&] { (void)specdec::tree_mask_flashinfer_packed(root, overflow, indptr); }), "prefix_lengths[0]"));
}

TEST_CASE("eagle2_tree_builder validates its configuration before allocating") {
  specdec::eigen b;
  specdec::dynamic_tree_config huge_k;
  huge_k.top_k = 62929;  // batch x k^2 floats = 31.7 GB were allocated before the check
  huge_k.depth = 1;
  huge_k.total_tokens = index_t{62929} * 62929 * 2;
  CHECK(contains(error_of([&] { specdec::eagle2_tree_builder<specdec::eigen> t(b, huge_k); }), "top_k = 62929"));
  specdec::dynamic_tree_config deep;
  deep.top_k = 8;
  deep.depth = std::numeric_limits<index_t>::max() / 2;  // k + depth k^2 overflowed and passed
  deep.total_tokens = 60;
  CHECK(contains(error_of([&] { specdec::eagle2_tree_builder<specdec::eigen> t(b, deep); }), "depth = "));
}

TEST_CASE("the example engine's GGUF reader checks element and byte counts for overflow") {
  engine::gguf_writer w;
  w.add_tensor("t", {std::uint64_t{1} << 40, std::uint64_t{1} << 22}, engine::ggml_type::f32, {});
  bool rejected = false;
  try {
    (void)engine::gguf_file::parse(w.bytes());
  } catch (const engine::gguf_error& e) {
    rejected = contains(e.what(), "tensor 't' has");
  }
  CHECK(rejected);
}

TEST_CASE_TEMPLATE("a root-only request inside a batch: every verifier emits exactly its one final token", B, specdec::eigen,
                   specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  using space = typename B::memory_space;
  const index_t v = 4;
  const auto root_only = sampling::make_chain(2, std::span<const std::int32_t>());
  const auto chain = sampling::make_chain(2, std::vector<std::int32_t>{1});
  // Rows: the root-only request's one row (argmax 3), then the chain's two rows (argmax 1, then 0).
  const std::vector<float> p = {0.1f, 0.1f, 0.1f, 0.7f, 0.05f, 0.85f, 0.05f, 0.05f, 0.7f, 0.1f, 0.1f, 0.1f};
  auto rows = h.up(p);
  const specdec::matrix_view<const float, space> target(rows.view().data(), 3, v);
  const std::vector<double> u = {0.5, 0.5, 0.5};
  std::vector<sampling::speculative_request> requests(2);
  requests[0].tree = root_only;
  requests[0].target_row = 0;
  requests[1].tree = chain;
  requests[1].target_row = 1;
  for (auto& q : requests) q.uniforms = sampling::uniform_stream::values(u);
  const auto greedy = sampling::verify_greedy(h.b, target, requests);
  CHECK(greedy[0].tokens == std::vector<std::int32_t>{3});
  CHECK(greedy[0].accepted_nodes.empty());
  CHECK(greedy[0].bonus);
  CHECK(greedy[1].tokens == std::vector<std::int32_t>{1, 0});
  const auto sampled = sampling::verify_speculative(h.b, {target}, requests);
  CHECK(sampled[0].tokens.size() == 1);
  CHECK(sampled[0].acceptance_tests == 0);
  CHECK(sampled[0].uniforms_consumed == 1);  // the bonus draw only
  CHECK(sampled[0].tokens[0] == 3);          // u = 0.5 falls in token 3's 0.7 of mass
  const auto typical = sampling::verify_typical(h.b, target, requests);
  CHECK(typical[0].tokens == std::vector<std::int32_t>{3});
  const auto coin = sampling::verify_coin_tree(h.b, target, requests);
  CHECK(coin[0].tokens.size() == 1);
  // vLLM's convention: a root-only request needs no row at all and emits its bonus token.
  sampling::typical_options vllm;
  vllm.convention = sampling::typical_convention::vllm_v0;
  requests[0].bonus_token = 1;
  requests[1].bonus_token = 2;
  requests[0].target_row = 0;
  requests[1].target_row = 0;  // the chain's one row (node 0's)
  const auto v0 = sampling::verify_typical(h.b, specdec::matrix_view<const float, space>(rows.view().data() + v, 1, v),
                                           requests, vllm);
  CHECK(v0[0].tokens == std::vector<std::int32_t>{1});
  CHECK(v0[0].bonus);
  CHECK(v0[1].tokens == std::vector<std::int32_t>{1, 2});
}

TEST_CASE_TEMPLATE("row primitives reject a temperature whose reciprocal scale overflows (found by fuzz_primitives)", B,
                   specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  conformance::harness<B> h;
  using space = typename B::memory_space;
  // T = 1.4e-45 made 1 / T infinite, T = 3.3e-39 made (1 / T) log2(e) infinite: softmax rows of NaN
  // came back without an error. Now both are out of range; 1.2e-38 and above work.
  const std::vector<float> x = {0.0607f, 0.0607f, 0.3765f, 0.0607f};
  auto in = h.up(x);
  auto out = h.b.template allocate<float>(4);
  const specdec::matrix_view<const float, space> rows(in.view().data(), 1, 4);
  const specdec::matrix_view<float, space> probs(out.view().data(), 1, 4);
  for (const float t : {std::numeric_limits<float>::denorm_min(), 3.31904e-39f}) {
    CHECK(contains(error_of([&] { h.b.row_softmax(rows, t, probs); }), "is out of range"));
    CHECK(contains(error_of([&] { h.b.row_log_softmax(rows, t, probs); }), "is out of range"));
  }
  h.b.row_softmax(rows, 1.2e-38f, probs);
  CHECK(h.down(out) == std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f});
}

TEST_CASE("the lenience helpers check that p and q are distributions") {
  const std::vector<double> p = {0.5, 0.5}, heavy = {1.0, 1.0}, nan_row = {std::nan(""), 1.0};
  CHECK(contains(error_of([&] { (void)sampling::lenient_acceptance_rate(heavy, p); }), "p sums to 2"));
  CHECK(contains(error_of([&] { (void)sampling::lenient_acceptance_rate(p, nan_row); }), "q[0] = nan"));
  CHECK(contains(error_of([&] { (void)sampling::lenient_output_distribution(p, heavy, 0.5); }), "q sums to 2"));
  const std::vector<float> bad = {0.7f, -0.1f, 0.4f};
  CHECK(contains(error_of([&] { (void)sampling::lenient_greedy_accepts(bad, 0, 1.0f); }), "target_probs[1] = -0.1"));
  CHECK(sampling::lenient_acceptance_rate(p, p) == doctest::Approx(1.0));
}

TEST_CASE("tree buffers validate a hand-filled draft_tree instead of indexing through its parents") {
  // A draft_tree is a plain struct an engine may fill itself; a parent index past the end made
  // retrieve_paths, child_links and the masks read and write out of bounds.
  specdec::draft_tree bad{{5, 6, 7}, {-1, 0, 9}, {0, 1, 2}, {0, 0, 0}};
  std::vector<std::int32_t> links(3);
  std::vector<std::uint8_t> dense(9);
  std::vector<std::int32_t> packed(3);
  std::vector<std::uint8_t> bits(3);
  std::vector<std::int64_t> positions(3);
  const std::string expected = "node 2 has parent 9";
  CHECK(contains(error_of([&] { (void)specdec::retrieve_paths(bad); }), expected));
  CHECK(contains(error_of([&] { (void)specdec::leaf_flags(bad); }), expected));
  CHECK(contains(error_of([&] { (void)specdec::depth_offsets(bad); }), expected));
  CHECK(contains(error_of([&] {
                   specdec::child_links(bad, specdec::vector_view<std::int32_t>(links.data(), 3),
                                        specdec::vector_view<std::int32_t>(links.data(), 3));
                 }),
                 expected));
  CHECK(contains(error_of([&] { specdec::tree_mask_dense(bad, 0, specdec::matrix_view<std::uint8_t>(dense.data(), 3, 3)); }), expected));
  CHECK(contains(error_of([&] { specdec::tree_mask_packed_int32(bad, specdec::matrix_view<std::int32_t>(packed.data(), 3, 1)); }), expected));
  CHECK(contains(error_of([&] { specdec::tree_mask_bitpacked_rows(bad, specdec::vector_view<std::uint8_t>(bits.data(), 3)); }), expected));
  CHECK(contains(error_of([&] { specdec::tree_positions(bad, 0, specdec::vector_view<std::int64_t>(positions.data(), 3)); }), expected));
  const auto chain = sampling::make_chain(1, std::vector<std::int32_t>{2});
  CHECK(contains(error_of([&] { specdec::tree_positions(chain, -4, specdec::vector_view<std::int64_t>(positions.data(), 2)); }),
                 "prefix_length = -4"));
  CHECK(contains(error_of([&] { (void)sampling::padded_tokens({}, -1); }), "width = -1"));
}
