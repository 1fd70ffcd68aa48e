// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Argument checks of the dense primitives, shared by every backend so that the same mistake
/// gives the same message everywhere. Names in messages are the parameter names of the concept.
#pragma once

#include <cstdint>

#include <specdec/config.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/dense_kernels.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// A dense operand: contiguous rows that do not overlap (any shape, including empty), not null unless
/// empty.
template <class T, class Space>
void check_dense(const char* where, const char* name, const matrix_view<T, Space>& m) {
  check_view(where, name, m, packed);
}

template <class A, class B, class C>
void check_gemm(const char* where, const A& a, transpose ta, const B& b, transpose tb, const C& c) {
  check_dense(where, "a", a);
  check_dense(where, "b", b);
  check_dense(where, "c", c);
  const index_t m = ta == transpose::yes ? a.cols() : a.rows();
  const index_t inner = ta == transpose::yes ? a.rows() : a.cols();
  const index_t inner_b = tb == transpose::yes ? b.cols() : b.rows();
  const index_t n = tb == transpose::yes ? b.rows() : b.cols();
  SPECDEC_EXPECTS(inner == inner_b, where, "op(a) is [", m, " x ", inner, "] and op(b) is [", inner_b, " x ", n,
                  "]; expected equal inner extents");
  SPECDEC_EXPECTS(c.rows() == m && c.cols() == n, where, "c has shape [", c.rows(), " x ", c.cols(), "]; expected [",
                  m, " x ", n, "] (op(a) op(b))");
  // c is zeroed before the product reads a and b, so it may share no element with either.
  const auto same = [&](const auto& in) {
    return !has_zero_extent(in) && static_cast<const void*>(c.data()) == static_cast<const void*>(in.data());
  };
  SPECDEC_EXPECTS(has_zero_extent(c) || (!same(a) && !same(b)),
                  where, "c aliases an input; GEMM needs a separate output");
  check_apart(where, "c", c, "a", a);
  check_apart(where, "c", c, "b", b);
}

template <class X, class W, class Out>
void check_rms_norm(const char* where, const X& x, const W& weight, double eps, const Out& out) {
  check_dense(where, "x", x);
  check_length(where, "weight", weight, x.cols(), "one entry per column of x");
  check_shape(where, "out", out, x.rows(), x.cols(), "the shape of x");
  check_apart(where, "out", out, "x", x, true);
  check_apart(where, "out", out, "weight", weight);
  SPECDEC_EXPECTS(eps > 0.0 && std::isfinite(eps), where, "eps = ", eps, "; expected a finite eps > 0");
}

template <class X, class P>
void check_rope(const char* where, const X& x, const P& positions, index_t head_dim, double theta) {
  check_dense(where, "x", x);
  SPECDEC_EXPECTS(head_dim >= 2 && head_dim % 2 == 0, where, "head_dim = ", head_dim,
                  "; expected an even head_dim >= 2 (rotate-half pairs i with i + head_dim / 2)");
  SPECDEC_EXPECTS(x.cols() % head_dim == 0, where, "x has ", x.cols(), " columns; expected a multiple of head_dim = ",
                  head_dim, " (heads x head_dim)");
  check_length(where, "positions", positions, x.rows(), "one position per row of x");
  check_apart(where, "x", x, "positions", positions);
  SPECDEC_EXPECTS(theta > 1.0 && std::isfinite(theta), where, "theta = ", theta, "; expected a finite base > 1");
}

template <class G, class U, class Out>
void check_silu_mul(const char* where, const G& gate, const U& up, const Out& out) {
  check_dense(where, "gate", gate);
  check_shape(where, "up", up, gate.rows(), gate.cols(), "the shape of gate");
  check_shape(where, "out", out, gate.rows(), gate.cols(), "the shape of gate");
  check_apart(where, "out", out, "gate", gate, true);
  check_apart(where, "out", out, "up", up, true);
}

template <class Y, class X>
void check_add_rows(const char* where, const Y& y, const X& x) {
  check_dense(where, "y", y);
  check_dense(where, "x", x);
  SPECDEC_EXPECTS(x.cols() == y.cols() && (x.rows() == y.rows() || x.rows() == 1), where, "x has shape [", x.rows(),
                  " x ", x.cols(), "]; expected [", y.rows(), " x ", y.cols(), "] or one row of ", y.cols(),
                  " to broadcast");
  // y += y is elementwise and exact; a broadcast row inside y would change while it is added.
  check_apart(where, "y", y, "x", x, x.rows() == y.rows());
}

/// add_rows with per-row weights: as above, one weight per row of y, and the weights apart from y (a
/// weight laid over y would change while the rows before it are written).
template <class Y, class X, class S>
void check_add_rows(const char* where, const Y& y, const X& x, const S& scale) {
  check_add_rows(where, y, x);
  check_length(where, "scale", scale, y.rows(), "one weight per row of y");
  check_apart(where, "y", y, "scale", scale);
}

template <class Q, class K, class V, class Mask, class Out>
void check_attention(const char* where, const Q& q, const K& k, const V& v, const attention_heads& shape,
                     const Mask& mask, const char* mask_name, const Out& out) {
  check_dense(where, "q", q);
  check_dense(where, "k", k);
  check_dense(where, "v", v);
  SPECDEC_EXPECTS(shape.heads >= 1 && shape.kv_heads >= 1 && shape.head_dim >= 1, where, "heads = ", shape.heads,
                  ", kv_heads = ", shape.kv_heads, ", head_dim = ", shape.head_dim, "; expected each >= 1");
  SPECDEC_EXPECTS(shape.heads % shape.kv_heads == 0, where, "heads = ", shape.heads,
                  " is not a multiple of kv_heads = ", shape.kv_heads, " (grouped-query attention)");
  SPECDEC_EXPECTS(std::isfinite(shape.scale), where, "scale = ", shape.scale, "; expected a finite scale");
  const index_t q_width = checked_mul(where, shape.heads, shape.head_dim, "heads x head_dim");
  const index_t kv_width = checked_mul(where, shape.kv_heads, shape.head_dim, "kv_heads x head_dim");
  SPECDEC_EXPECTS(q.cols() == q_width, where, "q has ", q.cols(), " columns; expected heads x head_dim = ", q_width);
  SPECDEC_EXPECTS(k.cols() == kv_width, where, "k has ", k.cols(), " columns; expected kv_heads x head_dim = ", kv_width);
  check_shape(where, "v", v, k.rows(), k.cols(), "the shape of k");
  if (!has_zero_extent(mask)) check_shape(where, mask_name, mask, q.rows(), k.rows(), "[queries x keys]");
  check_shape(where, "out", out, q.rows(), q.cols(), "the shape of q");
  check_apart(where, "out", out, "q", q);
  check_apart(where, "out", out, "k", k);
  check_apart(where, "out", out, "v", v);
  check_apart(where, "out", out, mask_name, mask);
  SPECDEC_EXPECTS(q.rows() == 0 || k.rows() >= 1, where, "there are ", q.rows(), " queries and no keys");
}

/// The error for a fault of attention_query_head at query row `query`.
[[noreturn]] inline void throw_attention_fault(const char* where, index_t query, fault f) {
  if (f == fault::all_masked)
    throw_invalid_argument(where, "query ", query, " has no key left by the mask; expected at least one allowed key "
                           "with a finite mask value per query");
  throw_invalid_argument(where, "query ", query, " has a NaN attention score; expected finite q, k and mask values");
}

}  // namespace specdec::detail::inline SPECDEC_ISA
