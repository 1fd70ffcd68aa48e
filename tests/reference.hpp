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

// ---- dense references (double accumulation, Hugging Face Llama semantics) ----

/// op(A) op(B) with A [ar x ac], B [br x bc] row-major doubles.
inline std::vector<double> gemm(const std::vector<double>& a, std::int64_t ar, std::int64_t ac, bool ta,
                                const std::vector<double>& b, std::int64_t br, std::int64_t bc, bool tb) {
  const std::int64_t m = ta ? ac : ar, inner = ta ? ar : ac, n = tb ? br : bc;
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < inner; ++p)
        s += (ta ? a[static_cast<std::size_t>(p * ac + i)] : a[static_cast<std::size_t>(i * ac + p)]) *
             (tb ? b[static_cast<std::size_t>(j * bc + p)] : b[static_cast<std::size_t>(p * bc + j)]);
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}

inline std::vector<double> rms_norm(const std::vector<double>& x, std::int64_t cols, const std::vector<double>& w, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / static_cast<std::size_t>(cols); ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < cols; ++j) ss += x[r * cols + j] * x[r * cols + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (std::int64_t j = 0; j < cols; ++j) y[r * cols + j] = w[static_cast<std::size_t>(j)] * x[r * cols + j] * inv;
  }
  return y;
}

/// Rotate-half RoPE written as the complex rotation of pairs (i, i + d/2) by position * theta^(-2i/d).
inline std::vector<double> rope(std::vector<double> x, std::int64_t cols, const std::vector<std::int64_t>& positions,
                                std::int64_t d, double theta) {
  for (std::size_t r = 0; r < positions.size(); ++r)
    for (std::int64_t h = 0; h < cols / d; ++h)
      for (std::int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(positions[r]) / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(d));
        double& a = x[r * cols + h * d + i];
        double& b = x[r * cols + h * d + i + d / 2];
        const double na = a * std::cos(angle) - b * std::sin(angle), nb = a * std::sin(angle) + b * std::cos(angle);
        a = na;
        b = nb;
      }
  return x;
}

/// Two-pass masked softmax attention with GQA; mask entries: allowed (bool) and additive (double).
inline std::vector<double> attention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                                     std::int64_t tq, std::int64_t tk, std::int64_t heads, std::int64_t kv_heads, std::int64_t d,
                                     double scale, const std::vector<std::uint8_t>& allowed, const std::vector<double>& additive) {
  std::vector<double> out(static_cast<std::size_t>(tq * heads * d), 0.0);
  for (std::int64_t i = 0; i < tq; ++i)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = h / (heads / kv_heads);
      std::vector<double> s(static_cast<std::size_t>(tk), -INFINITY);
      double m = -INFINITY;
      for (std::int64_t j = 0; j < tk; ++j) {
        if (!allowed.empty() && !allowed[static_cast<std::size_t>(i * tk + j)]) continue;
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += q[static_cast<std::size_t>(i * heads * d + h * d + c)] * k[static_cast<std::size_t>(j * kv_heads * d + g * d + c)];
        s[static_cast<std::size_t>(j)] = dot * scale + (additive.empty() ? 0.0 : additive[static_cast<std::size_t>(i * tk + j)]);
        m = std::max(m, s[static_cast<std::size_t>(j)]);
      }
      double z = 0;
      for (std::int64_t j = 0; j < tk; ++j) z += s[static_cast<std::size_t>(j)] == -INFINITY ? 0.0 : std::exp(s[static_cast<std::size_t>(j)] - m);
      for (std::int64_t j = 0; j < tk; ++j) {
        if (s[static_cast<std::size_t>(j)] == -INFINITY) continue;
        const double p = std::exp(s[static_cast<std::size_t>(j)] - m) / z;
        for (std::int64_t c = 0; c < d; ++c) out[static_cast<std::size_t>(i * heads * d + h * d + c)] += p * v[static_cast<std::size_t>(j * kv_heads * d + g * d + c)];
      }
    }
  return out;
}

}  // namespace specdec::reference
