// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief vLLM v1's rejection sampler in vLLM's own layout (`vllm/v1/sample/rejection_sampler.py`,
/// `rejection_sample`): the drafts of every request back to back with cumulative counts, one target row
/// per draft position (no row for the bonus position: the bonus token is sampled outside), per-request
/// greedy or random verification, the exponential race for the recovered token, `-1` padding. Over
/// specdec's `verify_speculative` with vLLM's conventions (sampling/speculative.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/speculative.hpp>

namespace specdec::vllm {

/// vLLM v1's `rejection_sample`. Request r's drafts are `draft_token_ids[start_r, end_r)` with
/// `end_r = cu_num_draft_tokens[r]` and `start_r` the previous end (0 for r = 0); their target rows are
/// the same rows of `target_probs` (and of `draft_probs`). A greedy request (`is_greedy[r]`) emits the
/// target's argmax at each position until the first that differs from the draft (that argmax included);
/// a random one accepts draft x at position i iff `q(x) > 0 and p(x) / q(x) >= uniforms[start_r + i]`
/// (q = 1 without draft probabilities: vLLM's n-gram case) and, at the first rejection, emits
/// `argmax_v max(p - q, 0)(v) / exponentials[r, v]` (the all-zero case: token 0). A request that
/// accepts every draft emits `bonus_token_ids[r]`. Row r of `output` gets the emitted tokens, then -1.
/// \param draft_probs backend `[num_tokens x V]`, or empty (every draft deterministic).
/// \param target_probs backend `[num_tokens x V]` probabilities (greedy requests read their argmax).
/// \param is_greedy host `[batch]` (nonzero: greedy), or empty: every request random.
/// \param uniforms host `[num_tokens]` in [0, 1) (vLLM's `uniform_probs`; greedy requests read none).
/// \param exponentials backend `[batch x V]` Exp(1) samples (vLLM's `q`), or empty when every request is
///   greedy.
/// \param output host `[batch x (max_spec_len + 1)]` int32.
/// \throws invalid_argument on counts that decrease, exceed the drafts or `max_spec_len`, shapes that
///   do not match, and as verify_speculative (tokens, probabilities, uniforms, noise).
template <backend B>
void rejection_sample(B& b, std::span<const std::int32_t> draft_token_ids, std::span<const std::int64_t> cu_num_draft_tokens,
                      index_t max_spec_len, matrix_view<const float, typename B::memory_space> draft_probs,
                      matrix_view<const float, typename B::memory_space> target_probs,
                      std::span<const std::int32_t> bonus_token_ids, std::span<const std::uint8_t> is_greedy,
                      std::span<const double> uniforms, matrix_view<const float, typename B::memory_space> exponentials,
                      matrix_view<std::int32_t> output) {
  constexpr const char* where = "specdec::vllm::rejection_sample";
  const auto batch = static_cast<index_t>(cu_num_draft_tokens.size());
  const auto tokens = static_cast<index_t>(draft_token_ids.size());
  SPECDEC_EXPECTS(max_spec_len >= 0, where, "max_spec_len = ", max_spec_len, "; expected >= 0");
  SPECDEC_EXPECTS(output.rows() == batch && output.cols() == max_spec_len + 1, where, "output is ", output.rows(), " x ",
                  output.cols(), "; expected ", batch, " x ", max_spec_len + 1, " (batch x max_spec_len + 1)");
  SPECDEC_EXPECTS(static_cast<index_t>(bonus_token_ids.size()) == batch, where, "bonus_token_ids has ", bonus_token_ids.size(),
                  " entries; expected one per request (", batch, ")");
  SPECDEC_EXPECTS(is_greedy.empty() || static_cast<index_t>(is_greedy.size()) == batch, where, "is_greedy has ",
                  is_greedy.size(), " entries; expected one per request (", batch, ") or none");
  SPECDEC_EXPECTS(target_probs.rows() == tokens, where, "target_probs has ", target_probs.rows(),
                  " rows; expected one per draft token (", tokens, ")");
  SPECDEC_EXPECTS(draft_probs.rows() == 0 || (draft_probs.rows() == tokens && draft_probs.cols() == target_probs.cols()), where,
                  "draft_probs is ", draft_probs.rows(), " x ", draft_probs.cols(), "; expected ", tokens, " x ",
                  target_probs.cols(), " like target_probs, or none");
  std::vector<draft_tree> trees;
  trees.reserve(static_cast<std::size_t>(batch));
  std::vector<std::vector<index_t>> draft_rows(static_cast<std::size_t>(batch));
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(batch));
  std::int64_t start = 0;
  for (index_t r = 0; r < batch; ++r) {
    const std::int64_t end = cu_num_draft_tokens[static_cast<std::size_t>(r)];
    SPECDEC_EXPECTS(end >= start && end <= tokens && end - start <= max_spec_len, where, "cu_num_draft_tokens[", r, "] = ", end,
                    " after ", start, "; expected non-decreasing ends within the ", tokens, " drafts, at most max_spec_len = ",
                    max_spec_len, " per request");
    const auto k = static_cast<std::size_t>(end - start);
    trees.push_back(sampling::make_chain(0, draft_token_ids.subspan(static_cast<std::size_t>(start), k)));
    auto& q = requests[static_cast<std::size_t>(r)];
    q.tree = trees.back();
    q.target_row = start;
    if (draft_probs.rows() > 0) {
      auto& rows = draft_rows[static_cast<std::size_t>(r)];
      rows.push_back(-1);
      for (std::int64_t i = start; i < end; ++i) rows.push_back(i);
      q.draft_rows = rows;
    }
    const bool greedy = !is_greedy.empty() && is_greedy[static_cast<std::size_t>(r)] != 0;
    q.greedy = greedy;
    if (!greedy) {
      SPECDEC_EXPECTS(static_cast<index_t>(uniforms.size()) == tokens, where, "uniforms has ", uniforms.size(),
                      " entries; expected one per draft token (", tokens, ")");
      q.uniforms = sampling::uniform_stream::values(uniforms.subspan(static_cast<std::size_t>(start), k));
      SPECDEC_EXPECTS(exponentials.rows() == batch, where, "exponentials has ", exponentials.rows(),
                      " rows; expected one per request (", batch, ") where a request is random");
      q.noise_row = r;
    }
    q.bonus_token = bonus_token_ids[static_cast<std::size_t>(r)];
    start = end;
  }
  sampling::speculative_rows<typename B::memory_space> rows;
  rows.target = target_probs;
  rows.draft = draft_probs;
  rows.exponential_noise = exponentials;
  sampling::speculative_options options;
  options.test = sampling::acceptance_test::ratio;
  options.draw = sampling::final_draw::exponential_race;
  options.fallback = empty_residual::token_zero;
  const auto results = sampling::verify_speculative(b, rows, requests, options);
  const std::vector<std::int32_t> padded = sampling::padded_tokens(results, max_spec_len + 1);
  for (index_t r = 0; r < batch; ++r)
    for (index_t c = 0; c <= max_spec_len; ++c) output(r, c) = padded[static_cast<std::size_t>(r * (max_spec_len + 1) + c)];
}

}  // namespace specdec::vllm
