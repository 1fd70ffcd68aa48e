// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Greedy verification of draft chains and trees: keep the longest path whose every token is the
/// target's argmax at its parent, then emit the target's argmax after the last accepted node (vLLM's
/// greedy kernel for chains, SGLang's `verify_tree_greedy` and EAGLE's `evaluate_posterior` for trees:
/// all three agree on the accepted path when siblings are distinct, since at most one child can match).
/// The lenient greedy variant is in specdec/sampling/lenient.hpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/speculative.hpp>

namespace specdec::sampling {

/// Greedy verification of a batch of trees, from the target's argmax per node.
///
/// Children are tested in node-index order and the first whose token equals `target_argmax[target_row
/// + node]` is accepted (SGLang's sibling order). The final token is the argmax after the last accepted
/// node, or the caller's `bonus_token` when the walk ended at a leaf or the depth cap without a mismatch
/// (vLLM samples the bonus outside). Consumes no randomness; `draft_rows`, `uniforms`, `noise_row` are
/// ignored. \param target_argmax host `[rows]`, e.g. from the backend's `row_argmax` over the target
/// logits of every node (the only pass over vocabulary rows greedy verification needs).
/// \throws invalid_argument on a malformed tree, rows out of range, argmax tokens outside [0, vocab_size).
inline std::vector<speculative_result> verify_greedy(std::span<const std::int32_t> target_argmax, index_t vocab_size,
                                                     std::span<const speculative_request> requests) {
  return detail::greedy_walk("specdec::sampling::verify_greedy", vocab_size, static_cast<index_t>(target_argmax.size()),
                             requests, [&](index_t row) { return target_argmax[static_cast<std::size_t>(row)]; });
}

/// Greedy verification on the backend from the target's logits. Host-space backends take the argmax
/// of a node row only when the walk visits it (a 60-node tree whose walk accepts two tokens reads three
/// rows); device backends run one batched `row_argmax` over every row and download the argmaxes once
/// (one synchronisation instead of one per visited row). Same results either way.
/// \param target_logits backend `[rows x V]` logits (or probabilities: the argmax is the same).
/// \throws invalid_argument as the host overload, and on NaN / +inf in a row whose argmax is taken.
template <backend B>
std::vector<speculative_result> verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                                              std::span<const speculative_request> requests) {
  detail::check_input_rows("specdec::sampling::verify_greedy", "target_logits", target_logits);
  detail::greedy_rows<B> argmax(b, target_logits);
  return detail::greedy_walk("specdec::sampling::verify_greedy", target_logits.cols(), target_logits.rows(), requests,
                             [&](index_t row) { return argmax(row); });
}

/// verify_greedy of one request (an engine decoding one sequence).
template <backend B>
speculative_result verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                                 const speculative_request& request) {
  return verify_greedy(b, target_logits, std::span<const speculative_request>(&request, 1)).front();
}

/// verify_greedy into caller buffers in the backend's memory space (verify_outputs: `[batch x width]`
/// tokens padded with -1, accepted counts, accepted nodes; `uniforms_consumed` is all zeros and
/// `final_distributions` zeros). Same decisions as the returning form.
/// \throws invalid_argument as that form, and on output shapes that do not fit the batch (checked
///   before any work).
template <backend B>
void verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                   std::span<const speculative_request> requests, const verify_outputs<typename B::memory_space>& outputs) {
  constexpr const char* where = "specdec::sampling::verify_greedy";
  detail::verify_into(
      b, where, requests, target_logits.cols(), outputs, [&] { return verify_greedy(b, target_logits, requests); },
      {specdec::detail::extent_of(where, "target_logits", target_logits)});
}

}  // namespace specdec::sampling
