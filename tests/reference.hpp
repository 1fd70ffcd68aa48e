// SPDX-License-Identifier: Apache-2.0
// Plain scalar reference implementations, written for clarity rather than speed: every backend is
// compared against these. Accumulations are in double, in index order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace specdec::reference {

struct matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> data;
  float operator()(std::int64_t r, std::int64_t c) const { return data[static_cast<std::size_t>(r * cols + c)]; }
  const float* row(std::int64_t r) const { return data.data() + r * cols; }
};

inline std::int32_t argmax(const float* x, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t j = 1; j < n; ++j)
    if (x[j] > x[best]) best = j;
  return static_cast<std::int32_t>(best);
}

/// Column ids of the k best entries: value descending, index ascending.
inline std::vector<std::int32_t> topk(const float* x, std::int64_t n, std::int64_t k) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [x](std::int32_t a, std::int32_t b) { return x[a] > x[b]; });
  ids.resize(static_cast<std::size_t>(k));
  return ids;
}

/// log sum exp(x / t); -inf for an all -inf row.
inline double logsumexp(const float* x, std::int64_t n, double t) {
  double m = -INFINITY;
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(x[j]) / t);
  if (m == -INFINITY) return m;
  double s = 0;
  for (std::int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(x[j]) / t - m);
  return m + std::log(s);
}

/// Inverse CDF: first j with p_j > 0 whose running sum exceeds u * total; else the last j with p_j > 0.
inline std::int32_t sample(const std::vector<double>& p, double u) {
  double total = 0;
  for (double v : p) total += v;
  const double target = u * total;
  double running = 0;
  std::int32_t last = 0;
  for (std::size_t j = 0; j < p.size(); ++j) {
    if (p[j] <= 0) continue;
    running += p[j];
    last = static_cast<std::int32_t>(j);
    if (running > target) return last;
  }
  return last;
}

inline std::vector<double> residual(const float* p, const float* q, std::int64_t n) {
  std::vector<double> r(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) r[static_cast<std::size_t>(j)] = std::max(0.0f, p[j] - q[j]);
  return r;
}

}  // namespace specdec::reference
