// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief specdec::eigen's GEMM for decoding shapes (a few token rows against a Linear weight): each
/// entry one dot product in a fixed order, so a token's row is bit-identical alone or among a tree's.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

// GCC's unroll pragma for the host-only tile loops below; nvcc's front end does not know it (warning
// #1675-D) when a CUDA translation unit includes the host backend.
#define SPECDEC_PRAGMA(x) _Pragma(#x)
#if defined(__CUDACC__)
#define SPECDEC_GCC_UNROLL(n)
#else
#define SPECDEC_GCC_UNROLL(n) SPECDEC_PRAGMA(GCC unroll n)
#endif

namespace specdec::detail::inline SPECDEC_ISA {

/// Rows up to which `x W^T` (a few token rows times a Linear weight) takes the row-dot kernel.
inline constexpr index_t skinny_gemm_rows = 16;

/// Columns of c per unit of parallel work (every tile width divides it).
inline constexpr index_t skinny_group = 8;

/// `acc += x * w`, rounded once where the target has FMA (scalar and vector alike, so the tail and
/// the body of a dot product use the same operation on every path), twice otherwise. By reference:
/// passing 256-bit vectors by value changes the ABI between builds with and without AVX.
template <class T>
inline void skinny_madd(T& acc, const T& x, const T& w) noexcept {
#if defined(__FMA__) && defined(__GNUC__)
  if constexpr (std::is_same_v<T, float>) acc = __builtin_fmaf(x, w, acc);
  else acc = __builtin_ia32_vfmaddps256(x, w, acc);
#else
  acc += x * w;
#endif
}

/// Rows [t0, t0 + R) and columns [j0, j0 + C) of c. R and C are compile-time constants so that the
/// R x C accumulators of 8 lanes live in vector registers.
template <int R, int C>
void skinny_tile(matrix_view<const float> a, matrix_view<const float> b, matrix_view<float> c, index_t t0, index_t j0,
                 float alpha, float beta) {
  constexpr index_t lanes = 8;
  const index_t k = a.cols(), k_main = k / lanes * lanes;
  const float* x[R];
  const float* w[C];
  for (int t = 0; t < R; ++t) x[t] = a.data() + (t0 + t) * a.stride(0);
  for (int u = 0; u < C; ++u) w[u] = b.data() + (j0 + u) * b.stride(0);
  // The next tile's weight rows (this thread's next work under the static schedule); the last tile
  // prefetches its own rows rather than form a pointer past the weight.
  const float* next[C];
  for (int u = 0; u < C; ++u) next[u] = j0 + C + u < b.rows() ? w[u] + C * b.stride(0) : w[u];
  float acc[R][C][lanes];
#if defined(__GNUC__)
  // GCC / Clang vector types keep the accumulators in registers (plain arrays were spilled); lane l
  // of `sum[t][u]` is acc[t][u][l], the same order as the portable loop below.
  using v8 = float __attribute__((vector_size(32)));
  // The tile loops must be unrolled for the accumulators to stay in registers.
  v8 sum[R][C];  // zeroed element by element: `= {}` became a call to memset per tile
SPECDEC_GCC_UNROLL(4)
  for (int t = 0; t < R; ++t)
SPECDEC_GCC_UNROLL(8)
    for (int u = 0; u < C; ++u) sum[t][u] = v8{};
  for (index_t i = 0; i < k_main; i += lanes) {
    v8 wv[C];
SPECDEC_GCC_UNROLL(8)
    for (int u = 0; u < C; ++u) {
      std::memcpy(&wv[u], w[u] + i, sizeof(v8));
      __builtin_prefetch(next[u] + i);
    }
SPECDEC_GCC_UNROLL(4)
    for (int t = 0; t < R; ++t) {
      v8 xv;
      std::memcpy(&xv, x[t] + i, sizeof(v8));
SPECDEC_GCC_UNROLL(8)
      for (int u = 0; u < C; ++u) skinny_madd(sum[t][u], xv, wv[u]);
    }
  }
  for (int t = 0; t < R; ++t)
    for (int u = 0; u < C; ++u) std::memcpy(acc[t][u], &sum[t][u], sizeof(v8));
#else
  for (int t = 0; t < R; ++t)
    for (int u = 0; u < C; ++u)
      for (index_t l = 0; l < lanes; ++l) acc[t][u][l] = 0.0f;
  for (index_t i = 0; i < k_main; i += lanes)
    for (int t = 0; t < R; ++t)
      for (int u = 0; u < C; ++u)
        for (index_t l = 0; l < lanes; ++l) skinny_madd(acc[t][u][l], x[t][i + l], w[u][i + l]);
#endif
  for (int t = 0; t < R; ++t)
    for (int u = 0; u < C; ++u) {
      float* lane = acc[t][u];
      for (index_t i = k_main; i < k; ++i) skinny_madd(lane[i - k_main], x[t][i], w[u][i]);
      const float dot = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
      float& out = c.data()[(t0 + t) * c.stride(0) + j0 + u];
      out = beta == 0.0f ? alpha * dot : alpha * dot + beta * out;
    }
}

/// `c = alpha a b^T + beta c` for a few rows of `a`: each weight row is read once from memory while
/// the rows of `a` stay in cache. Eigen's blocked GEMM packs the whole weight on every call, which
/// for decoding shapes (a chain or a small tree against a large weight) costs several passes over it.
///
/// Every entry is one dot product summed in a fixed order: 8 lanes (lane l takes the products at
/// offsets congruent to l mod 8, in index order, each a fused multiply-add when the target has FMA),
/// then the lanes combined as ((0+4)+(2+6))+((1+5)+(3+7)). The order depends on neither the number
/// of rows, nor the register tile an entry falls in, nor alignment: a token's row comes out
/// bit-identical whether it is computed alone or among the rows of a draft tree, so a verifier's
/// logits for a node equal what vanilla decoding computes for that token. The tiles (rows x columns
/// of c per inner loop: 4 x 2, 3 x 2, 2 x 4, 1 x 8) keep 6 to 8 accumulator chains in flight, and
/// each tile prefetches the next tile's weight rows so that memory keeps streaming under the FMAs.
inline void skinny_gemm(matrix_view<const float> a, matrix_view<const float> b, matrix_view<float> c, float alpha, float beta) {
  const index_t m = c.rows(), n = c.cols();
  const index_t groups = (n + skinny_group - 1) / skinny_group;
  // Column groups are independent and each entry is summed in a fixed order: threads (when the
  // translation unit is built with OpenMP) change the speed, never the result.
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n * a.cols() * m >= (index_t{1} << 18))
#endif
  for (index_t g = 0; g < groups; ++g) {
    const index_t j0 = g * skinny_group;
    const bool full = j0 + skinny_group <= n;
    for (index_t t0 = 0; t0 < m; t0 += 4) {
      const index_t rows = std::min<index_t>(4, m - t0);
      if (!full) {
        for (index_t j = j0; j < n; ++j) switch (rows) {
            case 1: skinny_tile<1, 1>(a, b, c, t0, j, alpha, beta); break;
            case 2: skinny_tile<2, 1>(a, b, c, t0, j, alpha, beta); break;
            case 3: skinny_tile<3, 1>(a, b, c, t0, j, alpha, beta); break;
            default: skinny_tile<4, 1>(a, b, c, t0, j, alpha, beta); break;
          }
        continue;
      }
      switch (rows) {
        case 1: skinny_tile<1, 8>(a, b, c, t0, j0, alpha, beta); break;
        case 2:
          for (index_t j = j0; j < j0 + skinny_group; j += 4) skinny_tile<2, 4>(a, b, c, t0, j, alpha, beta);
          break;
        case 3:
          for (index_t j = j0; j < j0 + skinny_group; j += 2) skinny_tile<3, 2>(a, b, c, t0, j, alpha, beta);
          break;
        default:
          for (index_t j = j0; j < j0 + skinny_group; j += 2) skinny_tile<4, 2>(a, b, c, t0, j, alpha, beta);
          break;
      }
    }
  }
}

}  // namespace specdec::detail::inline SPECDEC_ISA
