// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Typical acceptance (Medusa's `evaluate_posterior` with `sampling='typical'`, fast mode, and
/// vLLM v0's TypicalAcceptanceSampler for chains): lossy, deterministic, no draft probabilities.
///
/// A candidate x under the target distribution p of its parent is accepted iff p(x) > min(epsilon,
/// delta exp(-H(p))), H(p) = -sum p log(p + 1e-5) (natural log). The accepted path is the deepest node
/// whose every ancestor is accepted; among equally deep ones, the largest sum of log p along the path
/// (Medusa's likelihood tie-break), then the lowest node index. The token after it is the target argmax
/// at the last accepted node (Medusa fast mode; vLLM v0's recovered token), except under vLLM v0's
/// convention when that node is a leaf: then it is the bonus token the caller sampled.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/half.hpp>
#include <specdec/sampling/detail/rows.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/tree/tree.hpp>

namespace specdec::sampling {

/// Whose conventions decide the final token and the rows a request needs.
enum class typical_convention {
  /// Medusa (`evaluate_posterior`, fast mode): every node has a target row (a request of n nodes
  /// needs n rows); the final token is always the target argmax at the last accepted node, including
  /// after a fully accepted path (the last node's own row).
  medusa,
  /// vLLM v0's TypicalAcceptanceSampler: only nodes with children have rows (a chain of k drafts needs
  /// k rows: n - 1 for a tree of n nodes, the last node being a leaf); at a rejection the final token
  /// is the target argmax there (vLLM's recovered token); when the walk accepts down to a leaf the
  /// final token is the request's `bonus_token`, sampled by the caller, or nothing when
  /// `emit_bonus` is false (vLLM's `disable_bonus_tokens`).
  vllm_v0,
};

/// Medusa's defaults in `medusa_generate`: posterior_threshold 0.09, posterior_alpha 0.3.
struct typical_options {
  float epsilon = 0.09f;  ///< posterior_threshold: the hard threshold
  float delta = 0.3f;     ///< posterior_alpha: scale of exp(-entropy)
  typical_convention convention = typical_convention::medusa;
  /// vllm_v0 only: emit the caller's bonus token after a fully accepted path (vLLM's
  /// `not disable_bonus_tokens`). Ignored by medusa, which always emits the last node's argmax.
  bool emit_bonus = true;
};

/// Entropy and threshold of one target row, as Medusa computes them.
struct typical_threshold {
  double entropy = {};
  double threshold = {};
};

/// H(p) = -sum p log(p + 1e-5) and min(epsilon, delta exp(-H)). \param p host `[V]`, float, bfloat16 or
/// float16 (entries widened, so a 16-bit row's threshold is the float row's of the same values).
template <class E>
  requires(std::is_same_v<E, float> || is_half_v<E>)
typical_threshold typical_row_threshold(const E* p, index_t n, typical_options options) {
  double entropy = 0.0;
  for (index_t j = 0; j < n; ++j) {
    const auto x = static_cast<double>(widen(p[j]));
    entropy -= x * std::log(x + 1e-5);
  }
  return {entropy, std::min(static_cast<double>(options.epsilon), static_cast<double>(options.delta) * std::exp(-entropy))};
}

namespace detail {

/// verify_typical over target rows of element type T (float, bfloat16, float16; entries widened where
/// read): one body for every row type, so a 16-bit row decides as the float row holding its values.
template <backend B, class T>
std::vector<speculative_result> typical_walk(B& b, matrix_view<const T, typename B::memory_space> target_probs,
                                             std::span<const speculative_request> requests, const typical_options& options) {
  constexpr const char* where = "specdec::sampling::verify_typical";
  SPECDEC_EXPECTS(options.epsilon > 0.0f && std::isfinite(options.epsilon), where, "epsilon = ", options.epsilon,
                  "; expected a finite value > 0");
  SPECDEC_EXPECTS(options.delta > 0.0f && std::isfinite(options.delta), where, "delta = ", options.delta,
                  "; expected a finite value > 0");
  check_input_rows(where, "target_probs", target_probs);
  const index_t vocab = target_probs.cols();
  SPECDEC_EXPECTS(options.convention == typical_convention::medusa || options.convention == typical_convention::vllm_v0,
                  where, "options.convention = ", static_cast<int>(options.convention),
                  "; expected a typical_convention enumerator");
  const bool vllm = options.convention == typical_convention::vllm_v0;
  sampling::detail::row_reader<B, T> target(b, target_probs);
  // vLLM's last node, a leaf, has no row.
  return for_each_request(where, requests, vocab, target_probs.rows(), [&](const speculative_request& q, std::size_t r,
                                                                          tree_view tree) {
    const index_t n = tree.size();
    const std::vector<bool> leaf = leaf_flags(tree);
    // Accepted flags and path likelihoods in node order (parents come first).
    std::vector<char> accepted(static_cast<std::size_t>(n), 0);
    std::vector<double> likelihood(static_cast<std::size_t>(n), 0.0);
    std::vector<double> threshold(static_cast<std::size_t>(n), -1.0);  // of each node's row, once read
    accepted[0] = 1;
    index_t best = 0;
    for (index_t i = 1; i < n; ++i) {
      const auto parent = static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(i)]);
      if (!accepted[parent]) continue;
      if (q.max_accepted >= 0 && tree.depth[static_cast<std::size_t>(i)] > q.max_accepted) continue;
      const index_t row = q.target_row + static_cast<index_t>(parent);
      const T* p = target.row(row);
      if (threshold[parent] < 0.0) {
        sampling::detail::check_probability_row(where, "target_probs", row, p, vocab);
        threshold[parent] = typical_row_threshold(p, vocab, options).threshold;
      }
      const float p_x = widen(p[tree.token[static_cast<std::size_t>(i)]]);
      if (!(static_cast<double>(p_x) > threshold[parent])) continue;
      accepted[static_cast<std::size_t>(i)] = 1;
      likelihood[static_cast<std::size_t>(i)] = likelihood[parent] + std::log(static_cast<double>(p_x));
      const auto depth = [&](index_t k) { return tree.depth[static_cast<std::size_t>(k)]; };
      if (depth(i) > depth(best) ||
          (depth(i) == depth(best) && likelihood[static_cast<std::size_t>(i)] > likelihood[static_cast<std::size_t>(best)]))
        best = i;
    }
    speculative_result out;
    for (index_t k = best; k > 0; k = tree.parent[static_cast<std::size_t>(k)])
      out.accepted_nodes.push_back(static_cast<std::int32_t>(k));
    std::reverse(out.accepted_nodes.begin(), out.accepted_nodes.end());  // root first, in O(depth)
    for (const std::int32_t k : out.accepted_nodes) out.tokens.push_back(tree.token[static_cast<std::size_t>(k)]);
    out.retest_accepted = static_cast<index_t>(out.accepted_nodes.size());
    if (vllm && leaf[static_cast<std::size_t>(best)]) {
      out.bonus = true;
      if (options.emit_bonus) out.tokens.push_back(checked_bonus_token(where, q, r, vocab));
      return out;
    }
    const T* last = target.row(q.target_row + best);
    if (threshold[static_cast<std::size_t>(best)] < 0.0)  // not yet checked as a parent row
      sampling::detail::check_probability_row(where, "target_probs", q.target_row + best, last, vocab);
    std::int32_t argmax = 0;
    float top = widen(last[0]);
    for (index_t j = 1; j < vocab; ++j)
      if (const float x = widen(last[j]); x > top) {
        argmax = static_cast<std::int32_t>(j);
        top = x;
      }
    out.tokens.push_back(argmax);
    return out;
  }, !vllm);
}

/// The output form's body over rows of element type T.
template <backend B, class T>
void typical_into(B& b, matrix_view<const T, typename B::memory_space> target_probs,
                  std::span<const speculative_request> requests, const typical_options& options,
                  const verify_outputs<typename B::memory_space>& outputs) {
  constexpr const char* where = "specdec::sampling::verify_typical";
  verify_into(
      b, where, requests, target_probs.cols(), outputs, [&] { return typical_walk(b, target_probs, requests, options); },
      {specdec::detail::extent_of(where, "target_probs", target_probs)});
}

}  // namespace detail

/// Typical acceptance over a batch of trees (chains included), as the file comment says. Consumes no
/// randomness; reads the target rows of the root and of accepted nodes only.
///
/// Conventions (typical_options::convention): Medusa's final token is the argmax at the last accepted
/// node, and every node has a row; vLLM v0's is the caller's `bonus_token` when the walk accepts down
/// to a leaf (nothing with `emit_bonus = false`), and leaves have no rows. `speculative_result::bonus`
/// says whether the final token is that bonus token.
/// \param target_probs backend `[rows x V]` float probabilities (softmax(logits / T); the 16-bit overload
///   below takes bfloat16 / float16 rows); node i uses row `target_row + i`.
/// \throws invalid_argument on a malformed tree, rows out of range (n rows per request under medusa,
///   n - 1 under vllm_v0), a row that is read and is not a distribution (its final argmax row included),
///   epsilon or delta that are not positive and finite, and under vllm_v0 with `emit_bonus` a fully
///   accepted request without a `bonus_token` in [0, V).
template <backend B>
std::vector<speculative_result> verify_typical(B& b, matrix_view<const float, typename B::memory_space> target_probs,
                                               std::span<const speculative_request> requests, typical_options options = {}) {
  return detail::typical_walk(b, target_probs, requests, options);
}

/// verify_typical over bfloat16 / float16 target rows (an engine's 16-bit softmax; `[rows x V]` in the
/// backend's memory space, const or not; a device backend downloads the rows read as they are): each
/// entry widened (exact) where read, so thresholds, accepted nodes and tokens are those of the float rows
/// holding the same values, bit for bit. A row read whole may sum to 1 within 1e-4 plus what rounding to
/// its type moves a sum by (core/half.hpp's rounding_tolerance; the message names it).
/// \throws invalid_argument as the float form.
template <backend B, class T>
  requires is_half_v<T>
std::vector<speculative_result> verify_typical(B& b, matrix_view<T, typename B::memory_space> target_probs,
                                               std::span<const speculative_request> requests, typical_options options = {}) {
  return detail::typical_walk(b, matrix_view<const std::remove_cv_t<T>, typename B::memory_space>(target_probs), requests,
                              options);
}

/// verify_typical into caller buffers in the backend's memory space (verify_outputs; no uniforms are
/// consumed and no final distribution is drawn from, so those outputs are zeros). Same decisions.
/// \param target_probs as the returning form: float rows (bfloat16 / float16 in the overload below).
/// \throws invalid_argument as the returning form, and on output shapes that do not fit the batch.
template <backend B>
void verify_typical(B& b, matrix_view<const float, typename B::memory_space> target_probs,
                    std::span<const speculative_request> requests, typical_options options,
                    const verify_outputs<typename B::memory_space>& outputs) {
  detail::typical_into(b, target_probs, requests, options, outputs);
}

/// verify_typical over bfloat16 / float16 target rows into caller buffers: the 16-bit returning form's
/// decisions, written as the float output form writes them. \throws invalid_argument as that form.
template <backend B, class T>
  requires is_half_v<T>
void verify_typical(B& b, matrix_view<T, typename B::memory_space> target_probs, std::span<const speculative_request> requests,
                    typical_options options, const verify_outputs<typename B::memory_space>& outputs) {
  detail::typical_into(b, matrix_view<const std::remove_cv_t<T>, typename B::memory_space>(target_probs), requests, options,
                       outputs);
}

}  // namespace specdec::sampling
