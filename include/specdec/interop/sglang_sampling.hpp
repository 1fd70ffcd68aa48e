// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's sampled tree verification in SGLang's own layout: `tree_speculative_sampling_target_only`
/// (sgl-kernel), its link-encoded trees and outputs, over specdec's `verify_coin_tree` (the rule itself,
/// with its conventions, is documented there: sampling/tree_coin.hpp). A header of its own because it
/// is built on the tree samplers, which sglang.hpp's bookkeeping and greedy walk do not need.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/checked.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>
#include <specdec/interop/sglang.hpp>
#include <specdec/sampling/tree_coin.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sglang {

/// SGLang's `tree_speculative_sampling_target_only`: per request, the tree given by first-child /
/// next-sibling links is verified against the target alone with SGLang's coin rule (verify_coin_tree:
/// one coin per level, `threshold_single` / `threshold_acc`; 1 / 1 is lossless sampling), at most
/// `num_spec_step - 1` drafts accepted. Outputs in SGLang's layout (greedy_verification): the emitted
/// token at the `retrive_index` slot of each node on the accepted path (the final token at the last),
/// -1 elsewhere; `accept_index` the path's slots, root first, -1 padded; `accept_token_num`.
/// \param candidates host `[bs x N]` token ids (node 0 the root). \param retrive_index,
///   next_token, next_sibling host `[bs x N]` (build_tree's). \param uniform_samples host `[bs x N]`: the
///   coin at node i is entry i. \param uniform_final host `[bs]`: the final draw's uniform.
/// \param target_probs backend `[bs * N x V]`: request b's node i reads row `b * N + i`.
/// \param threshold_acc clamped to >= 1e-9, as SGLang's launcher does.
/// \throws invalid_argument on shapes that do not match, links out of range or cycling, a node linked
///   under two parents or unreachable from the root, a parent after its child (SGLang numbers nodes so
///   that parents come first), tokens outside [0, V), and as verify_coin_tree
///   (probabilities, uniforms).
template <backend B>
greedy_verification tree_speculative_sampling_target_only(B& b, matrix_view<const std::int64_t> candidates,
                                                          matrix_view<const std::int64_t> retrive_index,
                                                          matrix_view<const std::int64_t> next_token,
                                                          matrix_view<const std::int64_t> next_sibling,
                                                          matrix_view<const float> uniform_samples,
                                                          std::span<const float> uniform_final,
                                                          matrix_view<const float, typename B::memory_space> target_probs,
                                                          index_t num_spec_step, float threshold_single, float threshold_acc) {
  constexpr const char* where = "specdec::sglang::tree_speculative_sampling_target_only";
  const index_t bs = candidates.rows(), n = candidates.cols(), vocab = target_probs.cols();
  for (const auto* m : {&retrive_index, &next_token, &next_sibling})
    SPECDEC_EXPECTS(m->rows() == bs && m->cols() == n, where, "a link matrix is ", m->rows(), " x ", m->cols(), "; expected ",
                    bs, " x ", n, " like candidates");
  SPECDEC_EXPECTS(uniform_samples.rows() == bs && uniform_samples.cols() >= n, where, "uniform_samples is ",
                  uniform_samples.rows(), " x ", uniform_samples.cols(), "; expected ", bs, " x ", n, " (a coin per node)");
  SPECDEC_EXPECTS(static_cast<index_t>(uniform_final.size()) == bs, where, "uniform_samples_for_final_sampling has ",
                  uniform_final.size(), " entries; expected ", bs);
  const index_t nodes = specdec::detail::checked_mul(where, bs, n, "bs * N");
  SPECDEC_EXPECTS(target_probs.rows() == nodes, where, "target_probs has ", target_probs.rows(), " rows; expected bs * N = ", nodes);
  SPECDEC_EXPECTS(num_spec_step >= 1, where, "num_spec_step = ", num_spec_step, "; expected >= 1");
  std::vector<draft_tree> trees;
  std::vector<std::vector<std::int32_t>> first_child(static_cast<std::size_t>(bs)), sibling(static_cast<std::size_t>(bs));
  std::vector<std::vector<double>> coins(static_cast<std::size_t>(bs));
  for (index_t r = 0; r < bs; ++r) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n)), parent(static_cast<std::size_t>(n), -2);
    auto& fc = first_child[static_cast<std::size_t>(r)];
    auto& ns = sibling[static_cast<std::size_t>(r)];
    const auto link = [&](std::int64_t v, index_t i, const char* name) {
      SPECDEC_EXPECTS(v >= -1 && v < n, where, name, "(", r, ", ", i, ") = ", v, "; expected -1 or a node in [0, ", n, ")");
      return static_cast<std::int32_t>(v);
    };
    for (index_t i = 0; i < n; ++i) {
      const std::int64_t t = candidates(r, i);
      SPECDEC_EXPECTS(t >= 0 && t < vocab, where, "candidates(", r, ", ", i, ") = ", t, "; expected a token in [0, V = ", vocab, ")");
      tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(t);
      fc.push_back(link(next_token(r, i), i, "retrive_next_token"));
      ns.push_back(link(next_sibling(r, i), i, "retrive_next_sibling"));
    }
    parent[0] = -1;
    // Parents from the links, in visiting order: each node reached once, from a node already reached.
    std::vector<std::int32_t> queue = {0};
    for (std::size_t q = 0; q < queue.size(); ++q)
      for (std::int32_t c = fc[static_cast<std::size_t>(queue[q])]; c >= 0; c = ns[static_cast<std::size_t>(c)]) {
        SPECDEC_EXPECTS(parent[static_cast<std::size_t>(c)] == -2, where, "the links of request ", r, " reach node ", c,
                        " twice; expected a tree (each node linked once)");
        parent[static_cast<std::size_t>(c)] = queue[q];
        queue.push_back(c);
      }
    SPECDEC_EXPECTS(static_cast<index_t>(queue.size()) == n, where, "the links of request ", r, " reach ", queue.size(),
                    " of its ", n, " nodes; expected every node under the root");
    trees.push_back(make_tree(std::move(tokens), parent, vocab));
    auto& u = coins[static_cast<std::size_t>(r)];
    for (index_t i = 0; i < n; ++i) u.push_back(uniform_samples(r, i));
    u.push_back(uniform_final[static_cast<std::size_t>(r)]);
  }
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(bs));
  for (index_t r = 0; r < bs; ++r) {
    auto& q = requests[static_cast<std::size_t>(r)];
    q.tree = trees[static_cast<std::size_t>(r)];
    q.target_row = r * n;
    q.uniforms = sampling::uniform_stream::values(coins[static_cast<std::size_t>(r)]);
    q.max_accepted = num_spec_step - 1;
    q.first_child = first_child[static_cast<std::size_t>(r)];
    q.next_sibling = sibling[static_cast<std::size_t>(r)];
  }
  const sampling::coin_options options{threshold_single, std::max(threshold_acc, 1e-9f)};
  const auto results = sampling::verify_coin_tree(b, target_probs, requests, options);
  greedy_verification out{std::vector<std::int32_t>(static_cast<std::size_t>(nodes), -1),
                          std::vector<std::int32_t>(specdec::detail::checked_count(where, {bs, num_spec_step},
                                                                                   "accept_index [bs x num_spec_step]"),
                                                    -1),
                          std::vector<std::int32_t>(static_cast<std::size_t>(bs), 0)};
  for (index_t r = 0; r < bs; ++r) {
    const auto& res = results[static_cast<std::size_t>(r)];
    std::vector<std::int32_t> path = {0};
    path.insert(path.end(), res.accepted_nodes.begin(), res.accepted_nodes.end());
    for (std::size_t i = 0; i < path.size(); ++i) {
      const std::int64_t slot = retrive_index(r, path[i]);
      SPECDEC_EXPECTS(slot >= 0 && slot < nodes, where, "retrive_index(", r, ", ", path[i], ") = ", slot, "; expected [0, ", nodes, ")");
      if (i < res.tokens.size()) out.predicts[static_cast<std::size_t>(slot)] = res.tokens[i];
      if (static_cast<index_t>(i) < num_spec_step) out.accept_index[static_cast<std::size_t>(r * num_spec_step) + i] = static_cast<std::int32_t>(slot);
    }
    out.accept_token_num[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(res.accepted_nodes.size());
  }
  return out;
}

}  // namespace specdec::sglang
