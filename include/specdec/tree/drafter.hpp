// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The drafting protocol every specdec drafter models (`specdec::drafter`), and the loop that
/// runs one (`run_drafter`). A drafter never runs a model: it tells the engine which rows it needs
/// the draft model's logits for, one request at a time, and turns the logits into a draft tree.
///
/// One speculation step, for one request:
/// 1. `begin(context)`: the committed tokens (the last is the root, which the target has not run
///    yet). Returns the first `draft_request`, or null when the drafter needs no model (n-gram,
///    suffix) or drafts nothing this step (its draft-length policy chose 0).
/// 2. While a request is pending: the engine runs its draft model on the request's rows (tokens at
///    `positions(root_position)`, attending its cached prefix and the request's `attention_mask`,
///    each row continuing the state of `parent_row` in the previous request) and hands the logits to
///    `advance(logits)`, which returns the next request or null.
/// 3. `finish()`: the draft tree (root at 0, the committed root token), and for sampled drafts the
///    distributions the lossless verifier needs (`drafted::probs`, `draft_rows`). Masks, positions and
///    retrieve paths in any layout come from the tree (`tree_mask_*`, `tree_positions`, `interop/`).
/// 4. After verification, `feedback(...)`: the accepted path and the measured costs (target forward,
///    draft forwards), which the drafter's draft-length policy consumes to size its next drafts.
///
/// Rows a draft runs are numbered in request order across the step (request 0's rows first); masks
/// are over them. The engine owns the draft model's KV cache: rows a draft appended are dropped
/// (cropped back) after finish(), as the drafter cannot.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec {

/// What one step drafts for: the committed tokens of one request, host. The last is the root: the
/// token the target committed last and has not run yet (the verify forward runs it, at position
/// `root_position() = committed.size() - 1`). `temperature` is the request's (0: greedy); a drafter
/// that samples its draft at it reads uniform i of the step as `rng.uniform_double(i)` (give each step
/// its own subsequence).
struct draft_context {
  std::span<const std::int32_t> committed = {};
  float temperature = 0.0f;
  philox_stream rng = {};

  index_t root_position() const noexcept { return static_cast<index_t>(committed.size()) - 1; }
  std::int32_t root() const { return committed.back(); }
};

/// A draft-model forward the drafter needs, host (R rows):
/// - `tokens` `[R]`: the tokens to run (target ids);
/// - `depth` `[R]`: each row's depth in the draft tree (the root 0); its position is
///   `root_position + depth` (positions());
/// - `parent_row` `[R]`: the row of the *previous* request whose state this row continues (EAGLE's
///   `out_ids`: EAGLE-3 / MTP feed back that row's hidden state), -1 for none (the first request);
/// - `mask` `[R x mask_cols]`: row r attends draft row c (the rows of this step's requests so far,
///   these included, in request order) iff set; attention_mask() puts the engine's cached prefix
///   before it;
/// - `logits_per_row`: logits rows the engine returns per row (1; Medusa's heads: one per head).
struct draft_request {
  std::vector<std::int32_t> tokens = {};
  std::vector<std::int32_t> depth = {};
  std::vector<std::int32_t> parent_row = {};
  std::vector<std::uint8_t> mask = {};
  index_t mask_cols = 0;
  index_t logits_per_row = 1;

  index_t rows() const noexcept { return static_cast<index_t>(tokens.size()); }
  /// Logits rows advance() expects: rows() x logits_per_row, row-major (row r's heads together).
  index_t logits_rows() const noexcept { return rows() * logits_per_row; }

  /// Positions `root_position + depth[r]`. \param out host `[R]`.
  /// \throws invalid_argument on root_position < 0, a length mismatch, or a position that does not fit Int.
  template <class Int>
  void positions(index_t root_position, vector_view<Int> out) const {
    constexpr const char* where = "specdec::draft_request::positions";
    SPECDEC_EXPECTS(root_position >= 0, where, "root_position = ", root_position, "; expected >= 0");
    SPECDEC_EXPECTS(out.rows() == rows(), where, "out has ", out.rows(), " entries; expected one per row (", rows(), ")");
    // A request is a public struct a caller may fill by hand: its arrays must agree before they are read.
    SPECDEC_EXPECTS(static_cast<index_t>(depth.size()) == rows(), where, "depth has ", depth.size(),
                    " entries; expected one per row (", rows(), ")");
    detail::check_arguments(where, detail::output("out", out), detail::input("depth", std::span<const std::int32_t>(depth)));
    for (index_t r = 0; r < rows(); ++r)
      out(r) = detail::checked_narrow<Int>(where, detail::checked_add(where, root_position, depth[static_cast<std::size_t>(r)], "position"),
                                           "a row's position");
  }
  /// positions() as a new host int64 buffer. \throws invalid_argument as the view form.
  std::vector<std::int64_t> positions(index_t root_position) const {
    std::vector<std::int64_t> out(static_cast<std::size_t>(rows()));
    positions(root_position, vector_view<std::int64_t>(out.data(), rows()));
    return out;
  }
  /// The draft forward's mask `[R x (prefix_length + mask_cols)]`: every row attends the
  /// `prefix_length` rows the draft model has cached before this step's first row, then `mask`.
  /// `M` is any type constructible from 0 and 1 (bool, uint8_t, float). \param out host.
  /// \throws invalid_argument on prefix_length < 0 or a shape mismatch.
  template <class M>
  void attention_mask(index_t prefix_length, matrix_view<M> out) const {
    constexpr const char* where = "specdec::draft_request::attention_mask";
    SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
    const index_t cols = detail::checked_add(where, prefix_length, mask_cols, "prefix_length + mask_cols");
    SPECDEC_EXPECTS(out.rows() == rows() && out.cols() == cols, where, "out is ", out.rows(), " x ", out.cols(), "; expected ",
                    rows(), " x ", cols, " (rows x (prefix_length + mask_cols))");
    SPECDEC_EXPECTS(mask_cols >= 0 && static_cast<index_t>(mask.size()) / (mask_cols > 0 ? mask_cols : 1) == rows() &&
                        static_cast<index_t>(mask.size()) == (mask_cols > 0 ? rows() * mask_cols : 0),
                    where, "mask has ", mask.size(), " entries with mask_cols = ", mask_cols, "; expected rows x mask_cols = ",
                    rows(), " x ", mask_cols);
    detail::check_view(where, "out", out, detail::indexed_output);
    for (index_t r = 0; r < rows(); ++r) {
      for (index_t j = 0; j < prefix_length; ++j) out(r, j) = M(1);
      for (index_t j = 0; j < mask_cols; ++j) out(r, prefix_length + j) = mask[static_cast<std::size_t>(r * mask_cols + j)] ? M(1) : M(0);
    }
  }
  /// attention_mask() as a new host uint8 buffer. \throws invalid_argument as the view form, and when
  /// the mask would exceed specdec::max_elements.
  std::vector<std::uint8_t> attention_mask(index_t prefix_length) const {
    constexpr const char* where = "specdec::draft_request::attention_mask";
    SPECDEC_EXPECTS(prefix_length >= 0, where, "prefix_length = ", prefix_length, "; expected >= 0");
    const index_t cols = detail::checked_add(where, prefix_length, mask_cols, "prefix_length + mask_cols");
    std::vector<std::uint8_t> out(detail::checked_count(where, {rows(), cols}, "the mask [rows x (prefix_length + mask_cols)]"));
    attention_mask(prefix_length, matrix_view<std::uint8_t>(out.data(), rows(), cols));
    return out;
  }
};

/// A finished draft, host: the tree, and for drafts sampled from a distribution q the rows of q the
/// lossless verifier reads (`sampling::speculative_request::draft_rows`: node i was drawn from row
/// `draft_rows[i]` of `probs` `[rows x V]`, -1 for deterministic nodes; both empty for deterministic
/// drafts).
struct drafted {
  draft_tree tree = {};
  std::vector<float> probs = {};
  std::vector<index_t> draft_rows = {};
};

/// What verification told, host: `accepted_nodes` the accepted path (node indices, root excluded, as
/// `speculative_result::accepted_nodes`); the measured wall times of the target forward that verified
/// the tree and of this draft's draft-model forwards (0: not measured; rows the engine runs to catch up
/// the committed context are not a draft's price and are best left out); `target_rows` the rows that
/// target forward decoded when the engine decoded fewer than the draft's nodes (a grammar pruned it:
/// prune_tree), so that the time prices the rows it paid for (0: the draft's own node count).
struct draft_feedback {
  std::span<const std::int32_t> accepted_nodes = {};
  double target_seconds = 0;
  double draft_seconds = 0;
  index_t target_rows = 0;
};

/// The drafting protocol. begin() returns null when no forward is pending; the pointer stays valid
/// until the next call. finish() may be called once per begin(); feedback() once per finished draft,
/// after its verification. A drafter that runs no model (n-gram, suffix) is this alone: its begin()
/// always returns null.
template <class D>
concept drafter = requires(D& d, const draft_context& context, const draft_feedback& feedback) {
  typename D::memory_space;
  { d.begin(context) } -> std::same_as<const draft_request*>;
  { d.finish() } -> std::same_as<drafted>;
  d.feedback(feedback);
};

/// A drafter that runs a draft model: `advance(logits)` takes the model's logits for the pending
/// request (`[logits_rows x V]` in `D::memory_space`, the draft vocabulary) and returns the next
/// request, or null when the draft is complete.
template <class D>
concept model_drafter = drafter<D> && requires(D& d, matrix_view<const float, typename D::memory_space> logits) {
  { d.advance(logits) } -> std::same_as<const draft_request*>;
};

/// One step of `d`: begin, then, for a model_drafter, `run(request)` for each pending request (it runs
/// the draft model and returns the logits, `matrix_view<const float, D::memory_space>`
/// `[request.logits_rows() x V]`, valid until it is called again), then finish. `run` is never called
/// for a drafter that runs no model. \throws what the drafter and `run` throw, and invalid_argument
/// when a drafter without advance() returns a request.
template <drafter D, class Run>
drafted run_drafter(D& d, const draft_context& context, Run&& run) {
  const draft_request* request = d.begin(context);
  if constexpr (model_drafter<D>) {
    while (request != nullptr) request = d.advance(run(*request));
  } else {
    SPECDEC_EXPECTS(request == nullptr, "specdec::run_drafter", "a drafter without advance() returned a draft request");
  }
  return d.finish();
}

}  // namespace specdec
