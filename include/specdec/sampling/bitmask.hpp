// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Greedy verification under token bitmasks (structured output), reading the masks instead of a
/// masked copy of the logits. Layout and application: specdec/grammar/token_bitmask.hpp; the stochastic
/// verifiers take masks through `speculative_rows::target_bitmask` (specdec/sampling/speculative.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/request.hpp>

namespace specdec::sampling {

/// Greedy verification under token bitmasks (structured output): exactly verify_greedy over the logits
/// with every disallowed entry at -inf, without writing them. A child is accepted iff its token is the
/// largest *allowed* entry of its parent's target row (lowest index on ties); the final token is the
/// largest allowed entry after the last accepted node (or `bonus_token`, not checked against the mask:
/// the caller sampled it). A walk that reaches a node whose row allows no token (the grammar
/// terminated there: fill_tree_bitmasks zeroes the rows of nodes that accepted a stop token) ends
/// there without a final token, since nothing may follow. Rows are read only where the walk visits them
/// (device rows are downloaded one by one, as the stochastic verifiers read them).
/// \param target_logits backend `[rows x V]`. \param bitmask host `[rows x ceil(V / 32)]` int32, one row
///   per target row (the layout above; rows filled by a grammar matcher, e.g. with fill_tree_bitmasks).
/// \throws invalid_argument as verify_greedy, on a bitmask of the wrong shape, on NaN / +inf among a
///   visited row's allowed entries, where node 0's row allows no token (nothing could be emitted), and
///   where a visited row allows tokens but none above -inf (each naming the request and node).
template <backend B>
std::vector<speculative_result> verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                                              std::span<const speculative_request> requests,
                                              matrix_view<const std::int32_t> bitmask) {
  constexpr const char* where = "specdec::sampling::verify_greedy";
  detail::check_input_rows(where, "target_logits", target_logits);
  const index_t vocab = target_logits.cols();
  specdec::detail::check_bitmask(where, "bitmask", bitmask, vocab);
  SPECDEC_EXPECTS(bitmask.rows() == target_logits.rows(), where, "bitmask has ", bitmask.rows(), " rows; expected one per target row (",
                  target_logits.rows(), ")");
  detail::row_reader<B> rows(b, target_logits);
  std::vector<speculative_result> out = detail::for_each_request(
      where, requests, vocab, target_logits.rows(), [&](const speculative_request& q, std::size_t r, tree_view tree) {
        auto argmax_of = [&](index_t row) {
          index_t bad = -1;
          const std::int32_t best = specdec::detail::masked_argmax(rows.row(row), vocab, bitmask.row(row), bad);
          SPECDEC_EXPECTS(bad < 0, where, "target_logits row ", row, " holds ", rows.row(row)[bad < 0 ? 0 : bad],
                          " at allowed column ", bad, "; expected finite values or -inf");
          SPECDEC_EXPECTS(best != -2 || row != q.target_row, where, "request ", r, " node 0: bitmask row ", row,
                          " allows no token; expected at least one (node 0's row constrains the first token emitted)");
          SPECDEC_EXPECTS(best != -1, where, "request ", r, " node ", row - q.target_row, ": bitmask row ", row,
                          " allows tokens but every one has logit -inf; expected at least one finite");
          return best;  // -2: the grammar terminated at this node
        };
        speculative_result res = detail::greedy_walk_one(where, vocab, q, r, tree, argmax_of, /*end_without_token=*/-2);
        rows.recycle();
        return res;
      });
  return out;
}

}  // namespace specdec::sampling
