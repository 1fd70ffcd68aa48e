// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The dense kernels of the drafter blocks, written once as host-device functions over one
/// row (or one query-head pair) and shared by every backend: RMSNorm, rotate-half RoPE, SwiGLU's
/// `silu(gate) * up`, masked softmax attention with GQA (one pass, online softmax), and a plain GEMM
/// dot product for backends without a BLAS. Semantics are Hugging Face Llama's (transformers < 4.46),
/// (huggingface/transformers `models/llama/modeling_llama.py`; docs/blocks.md states the conventions);
/// the precision choices are noted per kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// y = w * x / sqrt(mean(x^2) + eps) over one row; the mean of squares is accumulated in double
/// (the reference accumulates in fp32 after upcasting; double is closer to its exact value).
template <class T>
SPECDEC_HOST_DEVICE inline void rms_norm_row(const T* x, const T* w, index_t n, T eps, T* y) noexcept {
  double squares = 0.0;
  for (index_t j = 0; j < n; ++j) squares += static_cast<double>(x[j]) * static_cast<double>(x[j]);
  const double inv = 1.0 / sqrt_(squares / static_cast<double>(n) + static_cast<double>(eps));
  for (index_t j = 0; j < n; ++j) y[j] = static_cast<T>(static_cast<double>(w[j]) * (static_cast<double>(x[j]) * inv));
}

/// Rotate-half RoPE of every head of one row at position `position`: for i < d/2 with angle
/// position * theta^(-2i/d), (x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin).
/// The angle and its cosine / sine are computed in double (exact for positions far beyond fp32's
/// 2^24), then rounded once.
template <class T>
SPECDEC_HOST_DEVICE inline void rope_row(T* x, index_t heads, index_t head_dim, std::int64_t position,
                                         double theta) noexcept {
  const index_t half = head_dim / 2;
  for (index_t i = 0; i < half; ++i) {
    const double inv_freq = pow_(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(position) * inv_freq;
    const double c = cos_(angle), s = sin_(angle);
    for (index_t h = 0; h < heads; ++h) {
      T* head = x + h * head_dim;
      const double a = static_cast<double>(head[i]), b = static_cast<double>(head[i + half]);
      head[i] = static_cast<T>(a * c - b * s);
      head[i + half] = static_cast<T>(b * c + a * s);
    }
  }
}

/// silu(g) * u = g / (1 + exp(-g)) * u, elementwise.
template <class T>
SPECDEC_HOST_DEVICE inline T silu_mul_one(T g, T u) noexcept {
  return g / (T(1) + exp_(-g)) * u;
}

/// One query row and one head of masked softmax attention, in one pass over the keys (online
/// softmax: the running maximum rescales the accumulator when it rises). Scores and weights are in
/// float, the normaliser in double. `allowed` (nullptr: every key) and `additive` (nullptr: none) are
/// the query's mask rows over the Tk keys; a key is skipped when not allowed or its score is -inf.
/// Writes head_dim outputs to `out`; returns fault::all_masked when no key is left, fault::nan when a
/// score is NaN.
template <class T>
SPECDEC_HOST_DEVICE inline fault attention_query_head(const T* q, matrix_view<const T, host_space> k,
                                                      matrix_view<const T, host_space> v, index_t kv_offset,
                                                      index_t head_dim, T scale, const std::uint8_t* allowed,
                                                      const T* additive, T* out) noexcept {
  for (index_t c = 0; c < head_dim; ++c) out[c] = T(0);
  T running_max = negative_infinity<T>();
  double normaliser = 0.0;
  for (index_t j = 0; j < k.rows(); ++j) {
    if (allowed != nullptr && allowed[j] == 0) continue;
    const T* key = k.row(j) + kv_offset;
    // Eight partial sums in a fixed order: vectorisable (one float chain was latency-bound), and a
    // query's result still depends on nothing but its own row.
    T part[8] = {T(0), T(0), T(0), T(0), T(0), T(0), T(0), T(0)};
    const index_t main = head_dim / 8 * 8;
    for (index_t c = 0; c < main; c += 8)
      for (index_t l = 0; l < 8; ++l) part[l] += q[c + l] * key[c + l];
    for (index_t c = main; c < head_dim; ++c) part[c - main] += q[c] * key[c];
    T score = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    score *= scale;
    if (additive != nullptr) score += additive[j];
    if (score != score) return fault::nan;
    if (score == negative_infinity<T>()) continue;
    if (score > running_max) {
      const T rescale = running_max == negative_infinity<T>() ? T(0) : exp_(running_max - score);
      normaliser *= static_cast<double>(rescale);
      for (index_t c = 0; c < head_dim; ++c) out[c] *= rescale;
      running_max = score;
    }
    const T weight = exp_(score - running_max);
    normaliser += static_cast<double>(weight);
    const T* value = v.row(j) + kv_offset;
    for (index_t c = 0; c < head_dim; ++c) out[c] += weight * value[c];
  }
  if (normaliser == 0.0) return fault::all_masked;
  const T inv = static_cast<T>(1.0 / normaliser);
  for (index_t c = 0; c < head_dim; ++c) out[c] *= inv;
  return fault::none;
}

/// Element (i, j) of op(A) op(B): the plain dot product over the shared extent (float accumulation,
/// index order) of GEMM on backends without a BLAS.
template <class T>
SPECDEC_HOST_DEVICE inline T gemm_dot(matrix_view<const T, host_space> a, bool ta, matrix_view<const T, host_space> b,
                                      bool tb, index_t i, index_t j, index_t inner) noexcept {
  T sum = T(0);
  for (index_t p = 0; p < inner; ++p) sum += (ta ? a(p, i) : a(i, p)) * (tb ? b(j, p) : b(p, j));
  return sum;
}

// Work items for for_each-style backends (one call per index).

/// C(i, j0..j0+tile) = alpha op(A) op(B) + beta C, one row-tile per item.
template <class T>
struct gemm_tile_fn {
  matrix_view<const T, host_space> a, b;
  matrix_view<T, host_space> c;
  bool ta, tb;
  index_t inner, tiles_per_row, tile;
  T alpha, beta;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t i = item / tiles_per_row;
    const index_t j0 = (item % tiles_per_row) * tile;
    const index_t j1 = j0 + tile < c.cols() ? j0 + tile : c.cols();
    for (index_t j = j0; j < j1; ++j) {
      const T dot = alpha * gemm_dot(a, ta, b, tb, i, j, inner);
      c(i, j) = beta == T(0) ? dot : dot + beta * c(i, j);  // beta 0 ignores C, even NaN (BLAS)
    }
  }
};

template <class T>
struct rms_norm_fn {
  matrix_view<const T, host_space> x;
  const T* weight;
  T eps;
  matrix_view<T, host_space> out;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const { rms_norm_row(x.row(r), weight, x.cols(), eps, out.row(r)); }
};

template <class T>
struct rope_fn {
  matrix_view<T, host_space> x;
  const std::int64_t* positions;
  index_t head_dim;
  double theta;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    rope_row(x.row(r), x.cols() / head_dim, head_dim, positions[r], theta);
  }
};

template <class T>
struct silu_mul_fn {
  matrix_view<const T, host_space> gate, up;
  matrix_view<T, host_space> out;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    for (index_t j = 0; j < gate.cols(); ++j) out(r, j) = silu_mul_one(gate(r, j), up(r, j));
  }
};

/// y(r, :) += v (bias), y += x (residual) or y(r, :) += scale[r] x(r, :), one row per item.
template <class T>
struct add_rows_fn {
  matrix_view<T, host_space> y;
  matrix_view<const T, host_space> x;  // rows 1: broadcast
  const T* scale = nullptr;            // nullptr: 1
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    const T* add = x.row(x.rows() == 1 ? 0 : r);
    const T s = scale ? scale[r] : T(1);
    for (index_t j = 0; j < y.cols(); ++j) y(r, j) += s * add[j];
  }
};

/// One (query, head) pair per item: item = query * heads + head.
template <class T>
struct attention_fn {
  matrix_view<const T, host_space> q, k, v;
  attention_heads shape;
  matrix_view<const std::uint8_t, host_space> allowed;  // empty: no boolean mask
  matrix_view<const T, host_space> additive;            // empty: no additive mask
  matrix_view<T, host_space> out;
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t i = item / shape.heads, h = item % shape.heads;
    const index_t group = shape.heads / shape.kv_heads;
    const index_t kv_offset = (h / group) * shape.head_dim;
    faults[item] = attention_query_head(q.row(i) + h * shape.head_dim, k, v, kv_offset, shape.head_dim,
                                        static_cast<T>(shape.scale), allowed.size() ? allowed.row(i) : nullptr,
                                        additive.size() ? additive.row(i) : nullptr, out.row(i) + h * shape.head_dim);
  }
};

}  // namespace specdec::detail::inline SPECDEC_ISA
