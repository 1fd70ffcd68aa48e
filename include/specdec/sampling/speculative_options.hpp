// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The options and rows of the stochastic verifiers (speculative.hpp, the batched form in
/// batch.hpp and the team job both run, detail/speculative_walk.hpp): the peers' conventions as
/// enumerators, and the acceptance test they select.
#pragma once

#include <cstdint>

#include <specdec/backend/concept.hpp>
#include <specdec/config.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/randomness.hpp>

namespace specdec::sampling {

/// The per-candidate acceptance test, given the current target probability p = P(x), the draft
/// probability q = Q(x) (1 for deterministic drafts) and a uniform u. Peers differ at the boundary.
enum class acceptance_test {
  ratio,           ///< accept iff q > 0 and fp32(p / (l q)) >= u (vLLM v1, Leviathan's r <= p/q). Default.
  strict_product,  ///< accept iff u l q < p in fp32 (FlashInfer, SGLang's classic chain): q = 0 < p accepts.
};

/// How the corrected / bonus token is drawn from the final distribution.
enum class final_draw {
  inverse_cdf,       ///< one uniform, canonical inverse CDF on the unnormalised entries (FlashInfer, SGLang). Default.
  exponential_race,  ///< argmax of entry / E with E the request's Exp(1) noise row (vLLM); consumes no uniform.
};

/// Options shared by every request of a call.
struct speculative_options {
  acceptance_test test = acceptance_test::ratio;
  uniform_range range = uniform_range::closed_open;
  final_draw draw = final_draw::inverse_cdf;
  /// What the final draw does when the distribution left is all zero (reachable only through rounding or
  /// through q(x) = 0 rejections): draw from the node's target row (default), token 0 (vLLM), V - 1 (SGLang).
  empty_residual fallback = empty_residual::sample_target;
  /// Leviathan et al.'s lenience l in (0, 1]: accept with min(1, p / (l q)), residual max(0, p - l q).
  /// 1 is lossless; smaller values trade fidelity for acceptance (no token is emitted with probability
  /// above p(x) / l).
  float lenience = 1.0f;
  /// FlashInfer's `accepted_token_num`: after a rejection at chain position i, positions i..k-1 of the
  /// chain are re-tested with fresh uniforms (i included) and the passes counted (consumes k - i
  /// uniforms before the final draw). Chains only.
  bool flashinfer_retest = false;
  /// Fill `speculative_result::final_distribution` (the returning forms; the output forms fill
  /// `verify_outputs::final_distributions` when that view is given).
  bool keep_final_distribution = false;
};

/// The rows a stochastic verifier reads, in the backend's memory space. T and D are the element types
/// of the target and draft rows: float, or for verify_speculative's probability rows also bfloat16 /
/// float16 (core/half.hpp), read as they are and widened entry by entry, so the decisions are those of
/// the float rows holding the same values (verify_speculative_logits reads float logits).
template <class Space = host_space, class T = float, class D = T>
struct speculative_rows {
  /// `[rows x V]`: target probabilities (verify_speculative) or raw logits (verify_speculative_logits).
  matrix_view<const T, Space> target = {};
  /// `[rows' x V]` draft probabilities that `speculative_request::draft_rows` index; empty when every
  /// node is deterministic.
  matrix_view<const D, Space> draft = {};
  /// `[rows'' x V]` Exp(1) noise that `speculative_request::noise_row` indexes (final_draw::exponential_race).
  matrix_view<const float, Space> exponential_noise = {};
  /// Optional token bitmasks of the target rows (structured output; verify_speculative_logits only):
  /// host `[rows x ceil(V / 32)]` int32 in xgrammar's layout (specdec/grammar/token_bitmask.hpp), row i
  /// constraining target row i. The walk then reads each target row as the softmax of the row with its
  /// disallowed logits at -inf (computed only for the rows it reads; the logits are not written), and
  /// greedy requests take the largest allowed logit. A walk that reaches a node whose row allows no
  /// token (a terminated grammar) ends there without a final token. Empty: unconstrained.
  matrix_view<const std::int32_t> target_bitmask = {};
};

namespace detail {

/// The walk's conventions, one function each; a new convention is an enumerator and a case here.

/// Whether a child passes its acceptance test (acceptance_test) given the current target probability
/// p = P(x), the draft probability q = Q(x) (1 for a deterministic draft), the lenience and a uniform.
SPECDEC_HOST_DEVICE inline bool passes(acceptance_test test, float p, float q, float lenience, double u) {
  const float lq = lenience * q;
  if (test == acceptance_test::ratio) return lq > 0.0f && static_cast<double>(p / lq) >= u;
  return static_cast<float>(u) * lq < p;
}

/// Checks the options every stochastic verifier takes (an enumerator outside its values would
/// silently select another convention).
inline void check_options(const char* where, const speculative_options& options) {
  SPECDEC_EXPECTS(options.lenience > 0.0f && options.lenience <= 1.0f, where, "lenience = ", options.lenience,
                  "; expected a value in (0, 1]");
  SPECDEC_EXPECTS(options.test == acceptance_test::ratio || options.test == acceptance_test::strict_product, where,
                  "options.test = ", static_cast<int>(options.test), "; expected an acceptance_test enumerator");
  SPECDEC_EXPECTS(options.draw == final_draw::inverse_cdf || options.draw == final_draw::exponential_race, where,
                  "options.draw = ", static_cast<int>(options.draw), "; expected a final_draw enumerator");
  SPECDEC_EXPECTS(options.fallback == empty_residual::sample_target || options.fallback == empty_residual::token_zero ||
                      options.fallback == empty_residual::last_token,
                  where, "options.fallback = ", static_cast<int>(options.fallback), "; expected an empty_residual enumerator");
  SPECDEC_EXPECTS(options.range == uniform_range::closed_open || options.range == uniform_range::open_closed, where,
                  "options.range = ", static_cast<int>(options.range), "; expected a uniform_range enumerator");
}

}  // namespace detail

}  // namespace specdec::sampling
