// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief SGLang's target-only tree verification (`tree_speculative_sampling_target_only`, the EAGLE
/// sampling path of sgl-kernel): one coin per level compared with the running target mass of the
/// candidates, for deterministic (top-k) drafts.
///
/// At the current node, with coin c, the children are visited in node-index order (or the order of the
/// request's sibling links); each adds its target probability to a running mass m, and is accepted iff
/// `c <= m / threshold_acc` or its own probability is `>= threshold_single`. On acceptance the walk
/// descends and takes the child's coin. With thresholds (1, 1) this is an inverse-CDF draw from the
/// target that happens to land on a candidate, so the acceptance probability at a node is the
/// candidates' target mass and the output is lossless; smaller thresholds are lossy (SGLang's
/// `--speculative-accept-threshold-single/acc`). When no child is accepted, or at a leaf, or at the
/// depth cap, the final token is drawn from the node's target row minus the rejected candidates
/// (FlashInfer's inverse CDF on the unnormalised residual).
///
/// The walk is written once (sampling/detail/coin_walk.hpp): verify_coin_tree runs it on the host, one
/// request at a time, and SGLang's `tree_speculative_sampling_target_only` (interop/sglang_sampling.hpp)
/// runs it on any backend over SGLang's link-encoded layout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/coin_walk.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/request.hpp>
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

namespace detail {

/// verify_coin_tree's walk over target rows of element type T (float, bfloat16, float16): one body for
/// every row type, so a 16-bit row is decided by the same code as the float row holding its values.
template <backend B, class T>
std::vector<speculative_result> coin_tree_walk(B& b, matrix_view<const T, typename B::memory_space> target_probs,
                                               std::span<const speculative_request> requests, const coin_options& options) {
  constexpr const char* where = "specdec::sampling::verify_coin_tree";
  SPECDEC_EXPECTS(options.threshold_single >= 0.0f && std::isfinite(options.threshold_single), where,
                  "threshold_single = ", options.threshold_single, "; expected a finite value >= 0");
  SPECDEC_EXPECTS(options.threshold_accumulated > 0.0f && std::isfinite(options.threshold_accumulated), where,
                  "threshold_acc = ", options.threshold_accumulated, "; expected a finite value > 0");
  check_input_rows(where, "target_probs", target_probs);
  const index_t vocab = target_probs.cols();
  sampling::detail::row_reader<B, T> target(b, target_probs);
  const reader_rows<B, T> source{&target};
  return for_each_request(where, requests, vocab, target_probs.rows(), [&](const speculative_request& q, std::size_t r,
                                                                          tree_view tree) {
    const index_t n = tree.size();
    const bool linked = !q.first_child.empty() || !q.next_sibling.empty();
    if (linked) (void)children_of(where, q, r);  // the links, checked against the parents

    // The request as a batch of one (coin_request_job on the host), over host views of its spans and of
    // result buffers.
    const std::int32_t cap = q.max_accepted >= 0 ? static_cast<std::int32_t>(std::min<index_t>(q.max_accepted, INT32_MAX)) : -1;
    const philox_stream rng = q.uniforms.philox_rng();
    const std::uint64_t offset = q.uniforms.philox_offset();
    const std::span<const double> supplied = q.uniforms.supplied_values();
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n)), nodes(static_cast<std::size_t>(n));
    std::int32_t counts[5] = {};  // accepted, uniforms, re-test passes, bonus, acceptance tests
    std::vector<float> final_row(options.keep_final_distribution ? static_cast<std::size_t>(vocab) : 0);
    const auto row_of = [n](const auto* data) { return matrix_view<const std::int32_t>(data, 1, n); };
    coin_request_job<host_space, reader_rows<B, T>> job{
        {{matrix_view<const T>(target_probs.data(), target_probs.rows(), vocab), {}, options.fallback, n},
         options.threshold_single,
         options.threshold_accumulated,
         source},
        {row_of(tree.token.data()), row_of(tree.parent.data()), {}, vector_view<const index_t>(&q.target_row, 1),
         vector_view<const std::int32_t>(&cap, 1), {}, linked ? row_of(q.first_child.data()) : matrix_view<const std::int32_t>{},
         linked ? row_of(q.next_sibling.data()) : matrix_view<const std::int32_t>{}, false},
        {matrix_view<std::int32_t>(tokens.data(), 1, n), vector_view<std::int32_t>(&counts[0], 1),
         matrix_view<std::int32_t>(nodes.data(), 1, n), vector_view<std::int32_t>(&counts[1], 1),
         vector_view<std::int32_t>(&counts[2], 1),
         options.keep_final_distribution ? matrix_view<float>(final_row.data(), 1, vocab) : matrix_view<float>{},
         vector_view<std::int32_t>(&counts[3], 1), vector_view<std::int32_t>(&counts[4], 1)},
        q.uniforms.is_philox() ? matrix_view<const double>{}
                               : matrix_view<const double>(supplied.data(), 1, static_cast<index_t>(supplied.size())),
        q.uniforms.is_philox() ? vector_view<const philox_stream>(&rng, 1) : vector_view<const philox_stream>{},
        q.uniforms.is_philox() ? vector_view<const std::uint64_t>(&offset, 1) : vector_view<const std::uint64_t>{},
        where,
        {}};
    specdec::detail::name_job(job, where,
                              {{arg_parents, "requests[].tree.parent"},
                               {arg_tokens, "requests[].tree.token"},
                               {arg_target, "target_probs"},
                               {arg_max_accepted, "requests[].max_accepted"},
                               {arg_uniforms, "requests[].uniforms"}});
    run_request(job, r);
    target.recycle();  // requests rarely share rows; one that does reads them again

    speculative_result out;
    const auto accepted = static_cast<std::size_t>(counts[0]);
    out.accepted_nodes.assign(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(accepted));
    out.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(accepted + 1));
    out.bonus = counts[3] != 0;
    out.acceptance_tests = counts[4];
    out.uniforms_consumed = counts[1];
    out.retest_accepted = counts[2];
    out.final_distribution = std::move(final_row);
    return out;
  });
}

/// The output form's body over rows of element type T.
template <backend B, class T>
void coin_tree_into(B& b, matrix_view<const T, typename B::memory_space> target_probs,
                    std::span<const speculative_request> requests, coin_options options,
                    const verify_outputs<typename B::memory_space>& outputs) {
  options.keep_final_distribution = !outputs.final_distributions.empty();
  constexpr const char* where = "specdec::sampling::verify_coin_tree";
  verify_into(
      b, where, requests, target_probs.cols(), outputs, [&] { return coin_tree_walk(b, target_probs, requests, options); },
      {specdec::detail::extent_of(where, "target_probs", target_probs)});
}

}  // namespace detail

/// Verifies a batch of trees with SGLang's one-coin-per-level rule (file comment).
///
/// Uniform positions (not a sequential stream, as SGLang indexes its `uniform_samples [b, n]` by node):
/// the coin used at node i is position i of the request's stream; the final draw uses position n
/// (= tree size, SGLang's `uniform_samples_for_final_sampling`). `acceptance_tests` counts candidates
/// tested; `uniforms_consumed` counts distinct positions read. `speculative_request::draft_rows`,
/// `noise_row` and `bonus_token` are ignored (drafts are deterministic by construction). On a device
/// backend only the rows the walk visits are downloaded.
/// \param target_probs backend `[rows x V]` float probabilities (the 16-bit overload below takes
///   bfloat16 / float16 rows); node i of a request uses row `target_row + i`.
/// \throws invalid_argument as verify_speculative, and on thresholds out of range (single >= 0,
///   accumulated > 0, both finite).
template <backend B>
std::vector<speculative_result> verify_coin_tree(B& b, matrix_view<const float, typename B::memory_space> target_probs,
                                                 std::span<const speculative_request> requests,
                                                 const coin_options& options = {}) {
  return detail::coin_tree_walk(b, target_probs, requests, options);
}

/// verify_coin_tree over bfloat16 / float16 target rows (an engine's 16-bit softmax; `[rows x V]` in the
/// backend's memory space, const or not; a device backend downloads the rows the walk visits as they
/// are): each entry widened (exact) where the walk reads it, so tokens, accepted nodes, counts and final
/// distributions are those of the float rows holding the same values, bit for bit. A row read whole
/// (the final draw's) may sum to 1 within 1e-4 plus what rounding to its type moves a sum by
/// (core/half.hpp's rounding_tolerance; the message names it). \throws invalid_argument as the float form.
template <backend B, class T>
  requires is_half_v<T>
std::vector<speculative_result> verify_coin_tree(B& b, matrix_view<T, typename B::memory_space> target_probs,
                                                 std::span<const speculative_request> requests,
                                                 const coin_options& options = {}) {
  return detail::coin_tree_walk(b, matrix_view<const std::remove_cv_t<T>, typename B::memory_space>(target_probs), requests,
                                options);
}

/// verify_coin_tree into caller buffers in the backend's memory space (verify_outputs). Same decisions.
/// \param target_probs as the returning form: float rows (bfloat16 / float16 in the overload below).
/// \throws invalid_argument as the returning form, and on output shapes that do not fit the batch.
template <backend B>
void verify_coin_tree(B& b, matrix_view<const float, typename B::memory_space> target_probs,
                      std::span<const speculative_request> requests, coin_options options,
                      const verify_outputs<typename B::memory_space>& outputs) {
  detail::coin_tree_into(b, target_probs, requests, options, outputs);
}

/// verify_coin_tree over bfloat16 / float16 target rows into caller buffers: the 16-bit returning form's
/// decisions, written as the float output form writes them. \throws invalid_argument as that form.
template <backend B, class T>
  requires is_half_v<T>
void verify_coin_tree(B& b, matrix_view<T, typename B::memory_space> target_probs, std::span<const speculative_request> requests,
                      coin_options options, const verify_outputs<typename B::memory_space>& outputs) {
  detail::coin_tree_into(b, matrix_view<const std::remove_cv_t<T>, typename B::memory_space>(target_probs), requests, options,
                         outputs);
}

}  // namespace specdec::sampling
