// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief specdec::eigen's dense primitives (specdec::dense_backend: GEMM, RMSNorm, RoPE, SwiGLU, row
/// additions, masked GQA attention), a public base class of specdec::eigen: callers write `eigen::gemm`.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/dense_checks.hpp>
#include <specdec/backend/detail/dense_kernels.hpp>
#include <specdec/backend/detail/skinny_gemm.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// The dense primitives of specdec::eigen (documented here; see specdec::dense_backend).
class eigen_dense {
 public:
  /// GEMM: `c = alpha op(a) op(b) + beta c`, row-major, through Eigen's blocked kernel. With beta = 0,
  /// c is not read. \param a host `[m x k]` (`[k x m]` when ta = yes). \param b host `[k x n]` (`[n x k]`
  /// when tb = yes: a Linear weight `[out x in]`). \param c host `[m x n]`, not aliasing a or b.
  /// \throws invalid_argument on mismatched extents, strided columns, aliasing.
  void gemm(matrix_view<const float> a, transpose ta, matrix_view<const float> b, transpose tb, matrix_view<float> c,
            float alpha = 1.0f, float beta = 0.0f) {
    detail::check_gemm("specdec::eigen::gemm", a, ta, b, tb, c);
    if (c.size() == 0) return;
    if (ta == transpose::no && tb == transpose::yes && c.rows() <= detail::skinny_gemm_rows && a.cols() > 0 &&
        a.stride(1) == 1 && b.stride(1) == 1) {
      detail::skinny_gemm(a, b, c, alpha, beta);
      return;
    }
    using stride = Eigen::OuterStride<>;
    using rows_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const auto map = [](const matrix_view<const float>& m) {
      return Eigen::Map<const rows_major, 0, stride>(m.data(), m.rows(), m.cols(), stride(std::max<index_t>(m.stride(0), m.cols())));
    };
    Eigen::Map<rows_major, 0, stride> out(c.data(), c.rows(), c.cols(), stride(std::max<index_t>(c.stride(0), c.cols())));
    const auto ma = map(a);
    const auto mb = map(b);
    if (a.cols() == 0 || b.size() == 0) {  // empty inner extent: op(a) op(b) is zero
      out = beta == 0.0f ? rows_major::Zero(c.rows(), c.cols()) : rows_major(beta * out);
      return;
    }
    if (beta == 0.0f) out.setZero();
    else if (beta != 1.0f) out *= beta;
    if (ta == transpose::no && tb == transpose::no) out.noalias() += alpha * ma * mb;
    else if (ta == transpose::no) out.noalias() += alpha * ma * mb.transpose();
    else if (tb == transpose::no) out.noalias() += alpha * ma.transpose() * mb;
    else out.noalias() += alpha * ma.transpose() * mb.transpose();
  }

  /// RMSNorm per row: `out = weight * x / sqrt(mean(x^2) + eps)` (Llama; mean of squares in double).
  /// \param x host `[rows x E]`. \param weight host `[E]`. \param out host `[rows x E]`, may be x.
  /// \throws invalid_argument on shapes or eps <= 0.
  void rms_norm(matrix_view<const float> x, vector_view<const float> weight, float eps, matrix_view<float> out) {
    detail::check_rms_norm("specdec::eigen::rms_norm", x, weight, eps, out);
    const detail::rms_norm_fn<float> f{x, weight.data(), eps, out};
    for (index_t r = 0; r < x.rows(); ++r) f(r);
  }

  /// Rotate-half RoPE, in place, of every head of every row: row r at `positions[r]` (see
  /// detail::rope_row). \param x host `[rows x heads * head_dim]`. \param positions host `[rows]`.
  /// \throws invalid_argument on shapes, an odd head_dim, theta <= 1.
  void rope(matrix_view<float> x, vector_view<const std::int64_t> positions, index_t head_dim, double theta) {
    detail::check_rope("specdec::eigen::rope", x, positions, head_dim, theta);
    const detail::rope_fn<float> f{x, positions.data(), head_dim, theta};
    for (index_t r = 0; r < x.rows(); ++r) f(r);
  }

  /// SwiGLU's activation: `out = silu(gate) * up` elementwise. All host `[rows x I]`; out may alias.
  void silu_mul(matrix_view<const float> gate, matrix_view<const float> up, matrix_view<float> out) {
    detail::check_silu_mul("specdec::eigen::silu_mul", gate, up, out);
    const detail::silu_mul_fn<float> f{gate, up, out};
    for (index_t r = 0; r < gate.rows(); ++r) f(r);
  }

  /// `y += x` (x of y's shape: a residual) or `y(r, :) += x(0, :)` (x one row: a bias).
  void add_rows(matrix_view<float> y, matrix_view<const float> x) {
    detail::check_add_rows("specdec::eigen::add_rows", y, x);
    const detail::add_rows_fn<float> f{y, x};
    for (index_t r = 0; r < y.rows(); ++r) f(r);
  }

  /// `y(r, :) += scale[r] x(r, :)`: a per-row weighted sum (MoE expert mixing). \param scale host `[rows]`.
  void add_rows(matrix_view<float> y, matrix_view<const float> x, vector_view<const float> scale) {
    detail::check_add_rows("specdec::eigen::add_rows", y, x, scale);
    const detail::add_rows_fn<float> f{y, x, scale.data()};
    for (index_t r = 0; r < y.rows(); ++r) f(r);
  }

  /// Softmax attention with GQA under a boolean mask: `out(i, head h) = sum_j softmax_j(scale q_h(i) .
  /// k_g(j)) v_g(j)` over the keys j with `allowed(i, j) != 0`, g = h / (heads / kv_heads). q, k, v are
  /// already projected (and rotated); heads are contiguous column blocks of head_dim.
  /// \param q host `[Tq x heads * head_dim]`. \param k, v host `[Tk x kv_heads * head_dim]`.
  /// \param allowed host `[Tq x Tk]` uint8 (tree / causal mask, e.g. specdec::tree_mask_dense), or an
  /// empty view for no mask. \param out host `[Tq x heads * head_dim]`.
  /// \throws invalid_argument on shapes, a query with no allowed key ("mask row r ... -inf"), NaN scores.
  void attention(matrix_view<const float> q, matrix_view<const float> k, matrix_view<const float> v,
                 const attention_heads& heads, matrix_view<const std::uint8_t> allowed, matrix_view<float> out) {
    constexpr const char* where = "specdec::eigen::attention";
    detail::check_attention(where, q, k, v, heads, allowed, "allowed", out);
    run_attention(where, detail::attention_fn<float>{q, k, v, heads, allowed, {}, out, nullptr});
  }

  /// As above with an additive float mask `[Tq x Tk]` (0 = allowed, -inf = masked) added to the scaled
  /// scores (Hugging Face's 4-D attention mask for one batch row and every head).
  void attention(matrix_view<const float> q, matrix_view<const float> k, matrix_view<const float> v,
                 const attention_heads& heads, matrix_view<const float> additive_mask, matrix_view<float> out) {
    constexpr const char* where = "specdec::eigen::attention";
    detail::check_attention(where, q, k, v, heads, additive_mask, "additive_mask", out);
    run_attention(where, detail::attention_fn<float>{q, k, v, heads, {}, additive_mask, out, nullptr});
  }

 private:
  void run_attention(const char* where, detail::attention_fn<float> f) {
    const index_t items = f.q.rows() * f.shape.heads;
    std::vector<detail::fault> faults(static_cast<std::size_t>(items), detail::fault::none);
    f.faults = faults.data();
    // (query, head) items are independent and each is computed in one fixed order, so threads (when
    // the translation unit is built with OpenMP) change the speed, never the result. A fault is
    // reported for the first faulting item in order, after the loop (nothing may throw inside it).
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (items * f.k.rows() * f.shape.head_dim >= (index_t{1} << 15))
#endif
    for (index_t item = 0; item < items; ++item) f(item);
    for (index_t item = 0; item < items; ++item)
      if (faults[static_cast<std::size_t>(item)] != detail::fault::none)
        detail::throw_attention_fault(where, item / f.shape.heads, faults[static_cast<std::size_t>(item)]);
  }
};

}  // namespace specdec::detail::inline SPECDEC_ISA
