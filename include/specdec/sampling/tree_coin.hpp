// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's target-only tree verification (`tree_speculative_sampling_target_only`, the EAGLE
/// sampling path of sgl-kernel): one coin per level compared with the running target mass of the
/// candidates, for deterministic (top-k) drafts.
///
/// At the current node, with coin c, the children are visited in node-index order; each adds its target
/// probability to a running mass m, and is accepted iff `c <= m / threshold_acc` or its own probability
/// is `>= threshold_single`. On acceptance the walk descends and takes the child's coin. With thresholds
/// (1, 1) this is an inverse-CDF draw from the target that happens to land on a candidate, so the
/// acceptance probability at a node is the candidates' target mass and the output is lossless; smaller
/// thresholds are lossy (SGLang's `--speculative-accept-threshold-single/acc`). When no child is accepted,
/// or at a leaf, or at the depth cap, the final token is drawn from the node's target row minus the
/// rejected candidates (FlashInfer's inverse CDF on the unnormalised residual).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/speculative.hpp>

namespace specdec::sampling {

/// Options of SGLang's tree rule. The thresholds (1, 1) are lossless; `threshold_single` = 0 accepts
/// every first child; `threshold_accumulated` must be positive (SGLang's launcher clamps it to >= 1e-9).
struct coin_options {
  float threshold_single = 1.0f;       ///< SGLang's threshold_single
  float threshold_accumulated = 1.0f;  ///< SGLang's threshold_acc
  /// Token for an all-zero final distribution (SGLang: V - 1).
  empty_residual fallback = empty_residual::last_token;
  /// Fill `speculative_result::final_distribution` (the returning form).
  bool keep_final_distribution = false;
};

/// Verifies a batch of trees with SGLang's one-coin-per-level rule (file comment).
///
/// Uniform positions (not a sequential stream, as SGLang indexes its `uniform_samples [b, n]` by node):
/// the coin used at node i is position i of the request's stream; the final draw uses position n
/// (= tree size, SGLang's `uniform_samples_for_final_sampling`). `acceptance_tests` counts candidates
/// tested; `uniforms_consumed` counts distinct positions read. `speculative_request::draft_rows`,
/// `noise_row` and `bonus_token` are ignored (drafts are deterministic by construction).
/// \param target_probs backend `[rows x V]`; node i of a request uses row `target_row + i`.
/// \throws invalid_argument as verify_speculative, and on thresholds out of range (single >= 0,
///   accumulated > 0, both finite).
template <backend B>
std::vector<speculative_result> verify_coin_tree(B& b, matrix_view<const float, typename B::memory_space> target_probs,
                                                 std::span<const speculative_request> requests,
                                                 const coin_options& options = {}) {
  constexpr const char* where = "specdec::sampling::verify_coin_tree";
  SPECDEC_EXPECTS(options.threshold_single >= 0.0f && std::isfinite(options.threshold_single), where,
                  "threshold_single = ", options.threshold_single, "; expected a finite value >= 0");
  SPECDEC_EXPECTS(options.threshold_accumulated > 0.0f && std::isfinite(options.threshold_accumulated), where,
                  "threshold_acc = ", options.threshold_accumulated, "; expected a finite value > 0");
  detail::check_input_rows(where, "target_probs", target_probs);
  const index_t vocab = target_probs.cols();
  sampling::detail::row_reader<B> target(b, target_probs);
  return detail::for_each_request(where, requests, vocab, target_probs.rows(), [&](const speculative_request& q,
                                                                                  std::size_t r, tree_view tree) {
    const index_t n = tree.size();
    const auto children = detail::children_of(where, q, r);
    speculative_result out;
    index_t node = 0;
    for (;;) {
      const index_t row = q.target_row + node;
      const float* p = target.row(row);
      sampling::detail::working_distribution dist(p, vocab);
      const bool capped = q.max_accepted >= 0 && static_cast<index_t>(out.accepted_nodes.size()) >= q.max_accepted;
      std::int32_t accepted = -1;
      if (!capped && !children[static_cast<std::size_t>(node)].empty()) {
        const double coin = q.uniforms.at(static_cast<std::uint64_t>(node));
        ++out.uniforms_consumed;
        float mass = 0.0f;
        for (const std::int32_t c : children[static_cast<std::size_t>(node)]) {
          const std::int32_t x = tree.token[static_cast<std::size_t>(c)];
          const float p_x = p[x];
          sampling::detail::check_probability(where, "target_probs", row, x, p_x);
          mass += p_x;
          ++out.acceptance_tests;
          if (coin <= static_cast<double>(mass / options.threshold_accumulated) || p_x >= options.threshold_single) {
            accepted = c;
            break;
          }
          if (dist.entry(x) > 0.0f) dist.remove(x);
        }
      }
      if (accepted >= 0) {
        out.accepted_nodes.push_back(accepted);
        out.tokens.push_back(tree.token[static_cast<std::size_t>(accepted)]);
        node = accepted;
        continue;
      }
      out.bonus = !dist.modified();
      sampling::detail::check_weighed_row(where, "target_probs", row, dist, p, vocab);
      if (options.keep_final_distribution) out.final_distribution = dist.entries();
      const double u = q.uniforms.at(static_cast<std::uint64_t>(n));
      ++out.uniforms_consumed;
      out.tokens.push_back(dist.draw(u, options.fallback));
      break;
    }
    out.retest_accepted = static_cast<index_t>(out.accepted_nodes.size());
    return out;
  });
}

/// verify_coin_tree into caller buffers in the backend's memory space (verify_outputs). Same decisions.
/// \throws invalid_argument as the returning form, and on output shapes that do not fit the batch.
template <backend B>
void verify_coin_tree(B& b, matrix_view<const float, typename B::memory_space> target_probs,
                      std::span<const speculative_request> requests, coin_options options,
                      const verify_outputs<typename B::memory_space>& outputs) {
  options.keep_final_distribution = !outputs.final_distributions.empty();
  constexpr const char* where = "specdec::sampling::verify_coin_tree";
  detail::verify_into(
      b, where, requests, target_probs.cols(), outputs, [&] { return verify_coin_tree(b, target_probs, requests, options); },
      {specdec::detail::extent_of(where, "target_probs", target_probs)});
}

}  // namespace specdec::sampling
