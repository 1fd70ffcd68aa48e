// SPDX-License-Identifier: Apache-2.0
// Goodness-of-fit helpers for the statistical tests of the stochastic samplers and proposals.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace specdec::testing {

/// Pearson's chi-square of observed counts against expected probabilities (cells with zero expected
/// probability must have zero counts; one that does not makes the statistic infinite).
inline double chi_square(const std::vector<double>& counts, const std::vector<double>& probabilities) {
  double n = 0.0;
  for (const double c : counts) n += c;
  double statistic = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double expected = n * probabilities[i];
    if (expected == 0.0) {
      if (counts[i] != 0.0) return INFINITY;
      continue;
    }
    statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return statistic;
}

/// Upper quantile of the chi-square distribution with `dof` degrees of freedom at the standard-normal
/// quantile `z` (Wilson-Hilferty; within 1 % of the exact quantile for dof >= 3). z = 3.719 is the
/// 1e-4 tail: a correct sampler fails a test at that threshold once in 10 000 seeds.
inline double chi_square_quantile(double dof, double z = 3.719) {
  const double a = 2.0 / (9.0 * dof);
  const double t = 1.0 - a + z * std::sqrt(a);
  return dof * t * t * t;
}

/// Total-variation distance between an empirical histogram and a distribution.
inline double total_variation(const std::vector<double>& counts, const std::vector<double>& probabilities) {
  double n = 0.0;
  for (const double c : counts) n += c;
  double tv = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) tv += std::fabs(counts[i] / n - probabilities[i]);
  return 0.5 * tv;
}

/// Expected total-variation noise of an n-sample histogram of p: 0.5 sum sqrt(2 p (1 - p) / (pi n)).
inline double total_variation_noise(const std::vector<double>& probabilities, double n) {
  double noise = 0.0;
  for (const double p : probabilities) noise += std::sqrt(2.0 * p * (1.0 - p) / (M_PI * n));
  return 0.5 * noise;
}

}  // namespace specdec::testing
