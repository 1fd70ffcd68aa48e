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
  constexpr const char* where = "specdec::sampling::verify_greedy";
  std::vector<speculative_result> results;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const speculative_request& q = requests[r];
    SPECDEC_EXPECTS(q.tree != nullptr, where, "request ", r, " has no tree");
    const draft_tree& tree = *q.tree;
    detail::check_tree(where, tree, vocab_size, r);
    const index_t n = tree.size();
    SPECDEC_EXPECTS(q.target_row >= 0 && q.target_row + n <= static_cast<index_t>(target_argmax.size()), where,
                    "request ", r, " needs argmax rows [", q.target_row, ", ", q.target_row + n, ") but target_argmax has ",
                    target_argmax.size());
    const auto children = detail::children_of(where, q, r);
    speculative_result out;
    index_t node = 0;
    for (;;) {
      const std::int32_t best = target_argmax[static_cast<std::size_t>(q.target_row + node)];
      SPECDEC_EXPECTS(best >= 0 && best < vocab_size, where, "target_argmax[", q.target_row + node, "] = ", best,
                      "; expected a token in [0, ", vocab_size, ")");
      const bool capped = q.max_accepted >= 0 && static_cast<index_t>(out.accepted_nodes.size()) >= q.max_accepted;
      std::int32_t accepted = -1;
      if (!capped)
        for (const std::int32_t c : children[static_cast<std::size_t>(node)])
          if (tree.token[static_cast<std::size_t>(c)] == best) {
            accepted = c;
            break;
          }
      if (accepted >= 0) {
        out.accepted_nodes.push_back(accepted);
        out.tokens.push_back(best);
        node = accepted;
        continue;
      }
      out.bonus = children[static_cast<std::size_t>(node)].empty() || capped;
      out.tokens.push_back(out.bonus && q.bonus_token ? *q.bonus_token : best);
      break;
    }
    out.retest_accepted = static_cast<index_t>(out.accepted_nodes.size());
    results.push_back(std::move(out));
  }
  return results;
}

/// Greedy verification on the backend: `row_argmax` over every target row, then verify_greedy.
/// \param target_logits backend `[rows x V]` logits (or probabilities: the argmax is the same).
template <backend B>
std::vector<speculative_result> verify_greedy(B& b, matrix_view<const float, typename B::memory_space> target_logits,
                                              std::span<const speculative_request> requests) {
  auto argmax = b.template allocate<std::int32_t>(target_logits.rows());
  b.row_argmax(target_logits, argmax.view());
  const std::vector<std::int32_t> host = b.download(vector_view<const std::int32_t, typename B::memory_space>(
      argmax.view().data(), target_logits.rows()));
  return verify_greedy(host, target_logits.cols(), requests);
}

}  // namespace specdec::sampling
