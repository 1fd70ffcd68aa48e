// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Greedy verification of draft chains and trees: keep the longest path whose every token is the
/// target's argmax at its parent, then emit the target's argmax after the last accepted node (vLLM's
/// greedy kernel for chains, SGLang's `verify_tree_greedy` and EAGLE's `evaluate_posterior` for trees:
/// all three agree on the accepted path when siblings are distinct, since at most one child can match).
/// The lenient greedy variant is in specdec/sampling/lenient.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/greedy_walk.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/request.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sampling {

namespace detail {

/// The greedy walk of one request (checked by checked_tree) on the host: walk_greedy over the
/// request's sibling order; `argmax_of(row)` gives the target argmax of a node row and is called only
/// for the rows the walk visits. `request` is the request's index in its batch, for error messages (a
/// greedy request inside a sampled batch keeps its place). Where `argmax_of` returns
/// `end_without_token` (a value below 0; masked verification's terminated grammar) the walk ends at
/// that node without a final token, and every row the walk ends at is read.
template <class ArgmaxOf>
speculative_result greedy_walk_one(const char* where, index_t vocab_size, const speculative_request& q, std::size_t request,
                                   tree_view tree, ArgmaxOf& argmax_of, std::int32_t end_without_token = 0) {
  const std::vector<std::vector<std::int32_t>> children = children_of(where, q, request);
  std::vector<std::int32_t> first_child(children.size(), -1), next_sibling(children.size(), -1);
  for (std::size_t i = 0; i < children.size(); ++i)
    for (std::size_t c = 0; c < children[i].size(); ++c) {
      if (c == 0) first_child[i] = children[i][0];
      else next_sibling[static_cast<std::size_t>(children[i][c - 1])] = children[i][c];
    }
  struct sink {
    const char* where;
    const speculative_request& q;
    std::size_t request;
    index_t vocab;
    speculative_result out = {};
    std::int32_t accepted() const { return static_cast<std::int32_t>(out.accepted_nodes.size()); }
    std::int32_t bonus() const { return checked_bonus_token(where, q, request, vocab); }
    void accept(const specdec::detail::serial_team&, std::int32_t node, std::int32_t token) {
      out.accepted_nodes.push_back(node);
      out.tokens.push_back(token);
    }
    void finish(const specdec::detail::serial_team&, std::int32_t token, bool ended) {
      if (token < 0) return;  // a terminated grammar: nothing follows
      out.bonus = ended;
      out.tokens.push_back(token);
    }
  } path{where, q, request, vocab_size};
  const auto argmax = [&](std::int32_t node, std::int32_t& best) -> specdec::detail::team_fault {
    const index_t row = q.target_row + node;
    best = argmax_of(row);
    if (end_without_token < 0 && best == end_without_token) {
      best = -1;
      return {};
    }
    SPECDEC_EXPECTS(best >= 0 && best < vocab_size, where, "target argmax of row ", row, " = ", best,
                    "; expected a token in [0, ", vocab_size, ")");
    return {};
  };
  const specdec::detail::serial_team team;
  (void)walk_greedy(team, {first_child.data(), next_sibling.data()}, tree.token.data(),
                    q.max_accepted >= 0 ? static_cast<std::int32_t>(std::min<index_t>(q.max_accepted, INT32_MAX)) : -1,
                    q.bonus_token.has_value(), end_without_token < 0, argmax, path);
  path.out.retest_accepted = static_cast<index_t>(path.out.accepted_nodes.size());
  return std::move(path.out);
}

/// The greedy walk over a batch; `argmax_of(row)` gives the target argmax of a node row and is called
/// only for the rows the walk visits.
template <class ArgmaxOf>
std::vector<speculative_result> greedy_walk(const char* where, index_t vocab_size, index_t rows,
                                            std::span<const speculative_request> requests, ArgmaxOf&& argmax_of) {
  return for_each_request(where, requests, vocab_size, rows,
                          [&](const speculative_request& q, std::size_t r, tree_view tree) {
                            return greedy_walk_one(where, vocab_size, q, r, tree, argmax_of);
                          });
}

/// Target argmaxes of the rows a greedy walk visits, from the rows as given (verify_greedy, and the
/// greedy requests of a sampled batch). Host backends take a row's argmax when the walk visits it;
/// device backends run one batched `row_argmax` over all rows and download it once (one
/// synchronisation instead of one per visited row), when `needed`.
template <backend B, class E = float>
class greedy_rows {
 public:
  greedy_rows(B& b, matrix_view<const E, typename B::memory_space> rows, bool needed = true) : backend_(&b), rows_(rows) {
    if constexpr (!std::is_same_v<typename B::memory_space, host_space>) {
      if (needed) {
        auto argmax = b.template allocate<std::int32_t>(rows.rows());
        b.row_argmax(rows, argmax.view());
        all_ = b.download(vector_view<const std::int32_t, typename B::memory_space>(argmax.view().data(), rows.rows()));
      }
    }
  }
  std::int32_t operator()(index_t row) {
    if constexpr (std::is_same_v<typename B::memory_space, host_space>) {
      std::int32_t best = 0;
      backend_->row_argmax(matrix_view<const E>(rows_.row(row), 1, rows_.cols()), vector_view<std::int32_t>(&best, 1));
      return best;
    } else {
      // Rows come from checked_tree's range; an error, not std::out_of_range, if that ever breaks.
      SPECDEC_EXPECTS(row >= 0 && row < static_cast<index_t>(all_.size()), "specdec::sampling::verify_greedy",
                      "target row ", row, " is outside the ", all_.size(), " rows");
      return all_[static_cast<std::size_t>(row)];
    }
  }

 private:
  B* backend_;
  matrix_view<const E, typename B::memory_space> rows_;
  std::vector<std::int32_t> all_;
};

/// verify_greedy's body for rows of any element type the backend's row_argmax reads.
template <backend B, class E>
std::vector<speculative_result> verify_greedy_rows(B& b, matrix_view<const E, typename B::memory_space> target_logits,
                                                   std::span<const speculative_request> requests) {
  check_input_rows("specdec::sampling::verify_greedy", "target_logits", target_logits);
  greedy_rows<B, E> argmax(b, target_logits);
  return greedy_walk("specdec::sampling::verify_greedy", target_logits.cols(), target_logits.rows(), requests,
                     [&](index_t row) { return argmax(row); });
}

}  // namespace detail

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
  return detail::verify_greedy_rows(b, target_logits, requests);
}

/// verify_greedy from bf16 / fp16 target logits (core/half.hpp), on a backend whose row_argmax reads
/// them (specdec::eigen): each row read as it is, the float rows' results for the same values.
template <backend B, class E>
  requires is_half_v<E>
std::vector<speculative_result> verify_greedy(B& b, matrix_view<const E, typename B::memory_space> target_logits,
                                              std::span<const speculative_request> requests) {
  return detail::verify_greedy_rows(b, target_logits, requests);
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
