// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Lossy verification by lenience (Leviathan et al., Appendix A.5) and its closed forms.
///
/// Stochastic lenient verification is `verify_speculative` with `speculative_options::lenience = l`:
/// a draft x ~ q is accepted with probability min(1, p(x) / (l q(x))) and a rejection draws from
/// norm(max(0, p - l q)) (the paper leaves the residual implicit; substituting l q for q throughout
/// Algorithm 1 gives this one, under which no token is emitted with probability above p(x) / l). The
/// greedy variant accepts x iff p(x) >= l max p (the paper's text has the inequality reversed, a typo:
/// with l = 1 it would accept everything).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/checks.hpp>

namespace specdec::sampling {

namespace detail {
inline void check_lenience(const char* where, double lenience) {
  SPECDEC_EXPECTS(lenience > 0.0 && lenience <= 1.0, where, "lenience = ", lenience, "; expected a value in (0, 1]");
}
inline void check_same_length(const char* where, std::size_t p, std::size_t q) {
  SPECDEC_EXPECTS(p == q, where, "target has ", p, " entries and draft ", q, "; expected equal lengths");
}
/// A host distribution these helpers read: every entry in [0, 1] (NaN fails), summing to 1 within 1e-4.
template <class T>
void check_distribution(const char* where, const char* name, std::span<const T> p) {
  sampling::detail::check_distribution(where, name, -1, [p](index_t x) { return p[static_cast<std::size_t>(x)]; },
                                       static_cast<index_t>(p.size()), 1e-4);
}
}  // namespace detail

/// Lenient greedy test: accept x iff p(x) >= l * max_y p(y); l = 1 is the exact argmax match (ties
/// included). \param target_probs host `[V]`. \throws invalid_argument on l outside (0, 1], x outside [0, V),
/// or target_probs not a distribution.
inline bool lenient_greedy_accepts(std::span<const float> target_probs, std::int32_t x, float lenience) {
  constexpr const char* where = "specdec::sampling::lenient_greedy_accepts";
  detail::check_lenience(where, lenience);
  SPECDEC_EXPECTS(x >= 0 && static_cast<std::size_t>(x) < target_probs.size(), where, "token ", x,
                  " is outside the vocabulary of ", target_probs.size());
  detail::check_distribution(where, "target_probs", target_probs);
  const float best = *std::max_element(target_probs.begin(), target_probs.end());
  return target_probs[static_cast<std::size_t>(x)] >= lenience * best;
}

/// Acceptance rate of one lenient position: alpha_l = sum_x q(x) min(1, p(x) / (l q(x))) = sum_x
/// min(p(x) / l, q(x)); l = 1 gives sum min(p, q) = 1 - TV(p, q). \param p, q host `[V]` distributions.
/// \throws invalid_argument on l outside (0, 1], lengths that differ, or p / q not distributions.
inline double lenient_acceptance_rate(std::span<const double> p, std::span<const double> q, double lenience = 1.0) {
  constexpr const char* where = "specdec::sampling::lenient_acceptance_rate";
  detail::check_lenience(where, lenience);
  detail::check_same_length(where, p.size(), q.size());
  detail::check_distribution(where, "p", p);
  detail::check_distribution(where, "q", q);
  double alpha = 0.0;
  for (std::size_t x = 0; x < p.size(); ++x) alpha += std::min(p[x] / lenience, q[x]);
  return alpha;
}

/// Distribution of the token one lenient position emits (accepted draft or residual draw):
/// P(x) = min(q(x), p(x) / l) + (1 - alpha_l) norm(max(0, p - l q))(x). Equals p when l = 1.
/// \throws invalid_argument as lenient_acceptance_rate.
inline std::vector<double> lenient_output_distribution(std::span<const double> p, std::span<const double> q,
                                                       double lenience) {
  constexpr const char* where = "specdec::sampling::lenient_output_distribution";
  detail::check_lenience(where, lenience);
  detail::check_same_length(where, p.size(), q.size());
  const double alpha = lenient_acceptance_rate(p, q, lenience);
  double residual_mass = 0.0;
  for (std::size_t x = 0; x < p.size(); ++x) residual_mass += std::max(0.0, p[x] - lenience * q[x]);
  std::vector<double> out(p.size());
  for (std::size_t x = 0; x < p.size(); ++x) {
    const double residual = residual_mass > 0.0 ? std::max(0.0, p[x] - lenience * q[x]) / residual_mass : 0.0;
    out[x] = std::min(q[x], p[x] / lenience) + (1.0 - alpha) * residual;
  }
  return out;
}

/// The largest draft length (gamma) the closed forms below take: 2^20, far beyond any chain an engine
/// drafts, and small enough that tokens_per_step_distribution's gamma + 1 entries stay at 8 MiB.
inline constexpr index_t max_gamma = index_t{1} << 20;

/// Expected tokens emitted per chain step with i.i.d. positions of acceptance rate alpha and gamma
/// drafts (accepted drafts plus the corrected or bonus token): (1 - alpha^(gamma+1)) / (1 - alpha),
/// gamma + 1 when alpha = 1 (Leviathan et al., Sec. 3). O(min(gamma, the power's underflow)).
/// \throws invalid_argument on alpha outside [0, 1] or gamma outside [0, max_gamma] (2^20).
inline double expected_tokens_per_step(double alpha, index_t gamma) {
  constexpr const char* where = "specdec::sampling::expected_tokens_per_step";
  SPECDEC_EXPECTS(alpha >= 0.0 && alpha <= 1.0, where, "alpha = ", alpha, "; expected a value in [0, 1]");
  SPECDEC_EXPECTS(gamma >= 0 && gamma <= max_gamma, where, "gamma = ", gamma, "; expected 0 <= gamma <= ", max_gamma,
                  " (sampling::max_gamma)");
  if (alpha == 1.0) return static_cast<double>(gamma) + 1.0;
  // alpha^(gamma+1) by repeated products (std::pow would round differently); once the power underflows
  // to 0 every later product is 0, so stopping there changes nothing.
  double power = 1.0;
  for (index_t i = 0; i <= gamma && power != 0.0; ++i) power *= alpha;
  return (1.0 - power) / (1.0 - alpha);
}

/// P(N = n) for n = 1..gamma+1 tokens emitted per step (a capped geometric): alpha^(n-1) (1 - alpha)
/// for n <= gamma, alpha^gamma for n = gamma + 1. \throws as expected_tokens_per_step.
inline std::vector<double> tokens_per_step_distribution(double alpha, index_t gamma) {
  (void)expected_tokens_per_step(alpha, gamma);  // validates
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(gamma) + 1);
  double power = 1.0;
  for (index_t n = 1; n <= gamma; ++n) {
    out.push_back(power * (1.0 - alpha));
    power *= alpha;
  }
  out.push_back(power);
  return out;
}

}  // namespace specdec::sampling
