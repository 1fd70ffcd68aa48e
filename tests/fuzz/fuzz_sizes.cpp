// SPDX-License-Identifier: Apache-2.0
// The size arguments of every tree builder and buffer, as a hostile caller passes them: negative,
// at the int32 and int64 limits, powers of two just past them. Each call either throws
// specdec::invalid_argument or succeeds with buffers of the documented size; signed overflow, a
// standard exception (length_error, bad_alloc from a wrapped size) or an out-of-bounds write is a
// finding (UBSan and ASan). Sizes that would legitimately allocate gigabytes are never drawn where
// a call allocates in proportion to them: the edges drawn are either small or past every limit.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/blocks/layers.hpp>
#include <specdec/interop/eagle1.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/interop/trtllm.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/tree/eagle2.hpp>
#include <specdec/tree/ngram.hpp>
#include <specdec/tree/static_tree.hpp>

#include "entry_points.hpp"
#include "fuzz_input.hpp"

namespace {

using specdec::index_t;

/// A size for an argument that buffers are sized by: small, or beyond specdec::max_elements (never a
/// valid size whose allocation would exhaust the machine).
index_t allocation_size(fuzz::input& in) {
  const index_t v = in.extreme();
  return v > (index_t{1} << 20) && v <= specdec::max_elements ? specdec::max_elements + 1 : v;
}

specdec::draft_tree small_tree(fuzz::input& in) {
  const index_t n = in.range(1, 6);
  std::vector<std::int32_t> tokens, parents;
  for (index_t i = 0; i < n; ++i) {
    tokens.push_back(static_cast<std::int32_t>(in.range(0, 9)));
    parents.push_back(i == 0 ? -1 : static_cast<std::int32_t>(in.range(0, i - 1)));
  }
  return specdec::make_tree(tokens, parents);
}

template <class F>
void expect_defined(F&& f) {
  try {
    f();
  } catch (const specdec::invalid_argument&) {
  }
  // Any other exception escapes to libFuzzer: a finding.
}

void positions_and_masks(fuzz::input& in) {
  const specdec::draft_tree t = small_tree(in);
  const index_t prefix = in.extreme();
  expect_defined([&] {
    std::vector<std::int64_t> p64(static_cast<std::size_t>(t.size()));
    specdec::tree_positions(t, prefix, specdec::vector_view<std::int64_t>(p64));
    for (index_t i = 0; i < t.size(); ++i)
      fuzz::require(p64[static_cast<std::size_t>(i)] == prefix + t.depth[static_cast<std::size_t>(i)], "position", i, prefix);
  });
  expect_defined([&] {
    std::vector<std::int32_t> p32(static_cast<std::size_t>(t.size()));
    specdec::tree_positions(t, prefix, specdec::vector_view<std::int32_t>(p32));
    fuzz::require(prefix + t.max_depth() <= std::numeric_limits<std::int32_t>::max(), "int32 positions accepted", prefix);
  });
  const index_t mask_prefix = allocation_size(in);
  expect_defined([&] {
    const auto m = specdec::tree_mask_dense(t, mask_prefix);
    fuzz::require(m.size() == static_cast<std::size_t>(t.size() * (mask_prefix + t.size())), "dense mask size", mask_prefix);
  });
  // The view form with a caller's (wrong or wrapped) column count over a small buffer.
  std::vector<std::uint8_t> small(64);
  const index_t cols = in.extreme();
  // A view past the caller's memory is the caller's bug, which no library can see: skip the one column
  // count the call would accept (prefix + nodes, exactly) when the buffer cannot hold it. Every other
  // count, negative or near int64's limit included, must be rejected without a write.
  const bool accepted = prefix >= 0 && prefix <= std::numeric_limits<index_t>::max() - t.size() && cols == prefix + t.size();
  if (accepted && cols > 64 / t.size()) return;
  expect_defined([&] { specdec::tree_mask_dense(t, prefix, specdec::matrix_view<std::uint8_t>(small.data(), t.size(), cols)); });
}

void eagle2_sizes(fuzz::input& in) {
  specdec::eigen b;
  specdec::dynamic_tree_config c;
  c.top_k = in.flag() ? in.extreme() : in.range(1, 3);
  c.depth = in.flag() ? in.extreme() : in.range(0, 2);
  c.total_tokens = in.flag() ? in.extreme() : in.range(1, 8);
  if (in.flag()) {
    const index_t entries = in.range(0, 4);
    for (index_t i = 0; i < entries; ++i) c.d2t.push_back(static_cast<std::int32_t>(in.extreme()));
  }
  const index_t batch = in.flag() ? in.extreme() : 1;
  expect_defined([&] {
    specdec::eagle2_tree_builder<specdec::eigen> builder(b, c, batch);
    const index_t vocab = c.d2t.empty() ? 4 : static_cast<index_t>(c.d2t.size());
    std::vector<float> logits(static_cast<std::size_t>(vocab * batch));
    for (float& x : logits) x = static_cast<float>(in.range(-8, 8));
    std::vector<std::int32_t> roots(static_cast<std::size_t>(batch));
    for (auto& r : roots) r = static_cast<std::int32_t>(in.range(-2, 5));
    const index_t target_vocab = in.flag() ? in.extreme() : 0;
    specdec::draft_step step = builder.begin(specdec::matrix_view<const float>(logits.data(), batch, vocab), roots, target_vocab);
    const index_t mask_prefix = allocation_size(in);
    expect_defined([&] { (void)step.attention_mask(mask_prefix); });
    expect_defined([&] { (void)step.positions(in.extreme()); });
    if (builder.expansions_complete()) {
      for (const auto& r : builder.finish()) {
        specdec::validate(r.tree);
        fuzz::require(r.tree.token[0] >= 0, "negative root token", r.tree.token[0]);
        for (const std::int32_t token : r.tree.token)
          fuzz::require(target_vocab <= 0 || token < target_vocab, "token beyond the target vocabulary", token, target_vocab);
      }
    }
    expect_defined([&] { (void)builder.candidate_scores(in.extreme()); });
  });
}

void static_sizes(fuzz::input& in) {
  std::vector<specdec::choice> choices;
  const index_t n = in.range(1, 4);
  for (index_t i = 0; i < n; ++i) {
    specdec::choice c;
    const index_t depth = in.range(1, 3);
    for (index_t d = 0; d < depth; ++d) c.push_back(static_cast<std::int32_t>(in.flag() ? in.extreme() : in.range(0, 2)));
    choices.push_back(c);
  }
  const index_t top_k = in.flag() ? in.extreme() : in.range(1, 4);
  expect_defined([&] { (void)specdec::medusa::make_buffers(choices, top_k); });
  expect_defined([&] { (void)specdec::eagle1::make_buffers(choices, top_k); });
  expect_defined([&] { (void)specdec::trtllm::make_medusa_setup(choices, top_k); });
  expect_defined([&] {
    specdec::eigen b;
    const auto buffers = specdec::eagle1::make_buffers(choices, top_k);
    specdec::eagle1::static_drafter<specdec::eigen> d(b, buffers, static_cast<std::int32_t>(in.range(-2, 5)), in.extreme());
    std::vector<float> logits(4, 1.0f);
    (void)d.begin(specdec::matrix_view<const float>(logits.data(), 1, 4));
  });
}

void sglang_sizes(fuzz::input& in) {
  const index_t n = in.flag() ? allocation_size(in) : in.range(1, 4);
  const index_t steps = in.flag() ? in.extreme() : in.range(1, 4);
  const index_t top_k = in.flag() ? in.extreme() : in.range(1, 3);
  std::vector<std::int64_t> parents = {-1, 0}, selected = {0, 1, 2}, tokens = {1, 2, 3}, verified = {7};
  std::vector<std::int64_t> seq = {in.flag() ? allocation_size(in) : in.range(0, 9)};
  const index_t cols = n >= 1 && n <= 4 ? n - 1 : 2;  // the buffers hold 3; a larger n must be rejected first
  expect_defined([&] {
    (void)specdec::sglang::build_tree(specdec::matrix_view<const std::int64_t>(parents.data(), 1, 2),
                                      specdec::matrix_view<const std::int64_t>(selected.data(), 1, cols),
                                      specdec::matrix_view<const std::int64_t>(tokens.data(), 1, cols), verified, seq, top_k,
                                      steps, n, specdec::sglang::tree_mask_mode::full_mask);
  });
  std::vector<std::int64_t> m(9, 0);
  for (auto& x : m) x = in.flag() ? in.extreme() : in.range(-1, 2);
  const index_t rows = in.flag() ? in.extreme() : 1, link_cols = in.flag() ? in.extreme() : 3;
  std::vector<std::int64_t> predict(3);
  for (auto& x : predict) x = in.flag() ? in.extreme() : in.range(0, 3);
  const index_t spec_steps = in.flag() ? allocation_size(in) : in.range(1, 5);
  expect_defined([&] {
    const specdec::matrix_view<const std::int64_t> v(m.data(), rows, link_cols);
    const auto out = specdec::sglang::verify_tree_greedy(v, v, v, v, predict, spec_steps);
    for (const std::int32_t p : out.predicts) fuzz::require(p >= -1, "negative predicted token", p);
  });
}

void ngram_and_padding(fuzz::input& in) {
  std::vector<std::int32_t> history;
  const index_t n = in.range(0, 12);
  for (index_t i = 0; i < n; ++i) history.push_back(static_cast<std::int32_t>(in.range(0, 2)));
  const index_t length = in.extreme();
  specdec::ngram_options options;
  options.max_ngram = in.flag() ? in.extreme() : 3;
  options.min_ngram = in.flag() ? in.extreme() : 1;
  options.branches = in.flag() ? in.range(1, 3) : 1;
  options.max_history = in.flag() ? in.extreme() : 0;
  expect_defined([&] {
    const auto tree = specdec::propose_ngram(history, length, options);
    specdec::validate(tree);
  });
  std::vector<specdec::sampling::speculative_result> results(static_cast<std::size_t>(in.range(0, 3)));
  for (auto& r : results) r.tokens.assign(static_cast<std::size_t>(in.range(0, 3)), 1);
  const index_t width = allocation_size(in);
  expect_defined([&] {
    const auto padded = specdec::sampling::padded_tokens(results, width);
    fuzz::require(padded.size() == results.size() * static_cast<std::size_t>(width), "padded size", width);
  });
  expect_defined([&] {
    specdec::eigen b;
    specdec::blocks::kv_cache<specdec::eigen> cache(b, allocation_size(in), in.range(-1, 64));
    (void)cache.extend(in.extreme());
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  // Half the inputs go to the list of every entry point that takes sizes (entry_points.hpp).
  if (in.flag()) {
    fuzz::entry::run_one(in, /*sizes=*/true);
    return 0;
  }
  switch (in.byte() % 5) {
    case 0: positions_and_masks(in); break;
    case 1: eagle2_sizes(in); break;
    case 2: static_sizes(in); break;
    case 3: sglang_sizes(in); break;
    default: ngram_and_padding(in); break;
  }
  return 0;
}
