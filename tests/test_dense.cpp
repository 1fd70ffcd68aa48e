// SPDX-License-Identifier: Apache-2.0
// Dense primitives of every backend against the double-precision scalar references of reference.hpp:
// GEMM in all four transpose combinations with alpha / beta, RMSNorm, RoPE (positions up to 2^20),
// SwiGLU's activation, row additions, masked GQA attention (boolean and additive masks, a tree mask).
// Tolerance: float results within 2e-5 absolute + 2e-5 relative of the double reference (the
// kernels accumulate in float over at most a few hundred terms of magnitude <= 1).
#include "backend_conformance.hpp"

#include <cstring>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>

#define SPECDEC_DENSE_BACKENDS SPECDEC_ALL_BACKENDS

using namespace conformance;
namespace ref = specdec::reference;
using specdec::transpose;

namespace {

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void check_dense_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  check_close(got, want, 2e-5, 2e-5, what);
}

template <class B>
using cview = specdec::matrix_view<const float, typename B::memory_space>;

}  // namespace

static_assert(specdec::dense_backend<specdec::eigen>);
static_assert(specdec::dense_backend<specdec::thrust_backend<specdec::thrust_system::cpp>>);

TEST_CASE_TEMPLATE("gemm matches the reference in every transpose combination, with alpha and beta", B,
                   SPECDEC_DENSE_BACKENDS) {
  harness<B> h;
  const index_t m = 7, inner = 33, n = 70;  // n spans two 64-column tiles of the plain kernel
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const auto a = uniform_floats(1, static_cast<std::size_t>(m * inner), -1.0f, 1.0f);
      const auto b = uniform_floats(2, static_cast<std::size_t>(inner * n), -1.0f, 1.0f);
      const auto c0 = uniform_floats(3, static_cast<std::size_t>(m * n), -1.0f, 1.0f);
      auto da = h.up(a);
      auto db = h.up(b);
      auto dc = h.up(c0);
      const index_t ar = ta ? inner : m, ac = ta ? m : inner, br = tb ? n : inner, bc = tb ? inner : n;
      h.b.gemm(cview<B>(da.view().data(), ar, ac), ta ? transpose::yes : transpose::no, cview<B>(db.view().data(), br, bc),
               tb ? transpose::yes : transpose::no, dc.matrix(m, n), 0.5f, 2.0f);
      auto want = ref::gemm(widen(a), ar, ac, ta, widen(b), br, bc, tb);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * c0[i];
      check_dense_close(h.down(dc), want, "gemm");
    }
  // beta = 0 ignores c entirely (NaN included), as BLAS does.
  std::vector<float> nan_c(4, std::nanf(""));
  auto dc = h.up(nan_c);
  const std::vector<float> eye = {1, 0, 0, 1}, x = {1, 2, 3, 4};
  auto de = h.up(eye);
  auto dx = h.up(x);
  h.b.gemm(cview<B>(de.view().data(), 2, 2), transpose::no, cview<B>(dx.view().data(), 2, 2), transpose::yes, dc.matrix(2, 2));
  CHECK(h.down(dc) == std::vector<float>{1, 3, 2, 4});
  CHECK(error_of([&] {
          h.b.gemm(cview<B>(de.view().data(), 2, 2), transpose::no, cview<B>(dx.view().data(), 1, 4), transpose::no,
                   dc.matrix(2, 2));
        }).find("op(a) is [2 x 2] and op(b) is [1 x 4]; expected equal inner extents") != std::string::npos);
  CHECK(error_of([&] {
          h.b.gemm(cview<B>(dc.view().data(), 2, 2), transpose::no, cview<B>(dx.view().data(), 2, 2), transpose::no,
                   dc.matrix(2, 2));
        }).find("c aliases an input") != std::string::npos);
}

// The engine's greedy speculative decoding relies on this: x W^T for up to 16 rows gives each row the
// same bits whatever the number of rows beside it (every register tile and the column remainder sum an
// entry in the same order), so a tree node's logits equal the ones vanilla decoding computes.
TEST_CASE("eigen::gemm gives a row the same bits alone and among up to 16 rows") {
  specdec::eigen backend;
  for (const index_t inner : {index_t{1}, index_t{8}, index_t{37}, index_t{576}}) {
    const index_t n = 29;  // three 8-column groups and a remainder of 5
    const auto w = uniform_floats(5, static_cast<std::size_t>(n * inner), -1.0f, 1.0f);
    const auto x = uniform_floats(6, static_cast<std::size_t>(16 * inner), -1.0f, 1.0f);
    std::vector<float> alone(static_cast<std::size_t>(16 * n));
    for (index_t r = 0; r < 16; ++r)
      backend.gemm(specdec::matrix_view<const float>(x.data() + r * inner, 1, inner), transpose::no,
                   specdec::matrix_view<const float>(w.data(), n, inner), transpose::yes,
                   specdec::matrix_view<float>(alone.data() + r * n, 1, n));
    for (index_t m = 2; m <= 16; ++m) {
      CAPTURE(inner);
      CAPTURE(m);
      std::vector<float> together(static_cast<std::size_t>(m * n));
      backend.gemm(specdec::matrix_view<const float>(x.data(), m, inner), transpose::no,
                   specdec::matrix_view<const float>(w.data(), n, inner), transpose::yes,
                   specdec::matrix_view<float>(together.data(), m, n));
      CHECK(std::memcmp(together.data(), alone.data(), together.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE_TEMPLATE("rms_norm, silu_mul and add_rows match the reference", B, SPECDEC_DENSE_BACKENDS) {
  harness<B> h;
  const index_t rows = 5, cols = 48;
  const auto x = uniform_floats(4, static_cast<std::size_t>(rows * cols), -3.0f, 3.0f);
  const auto w = uniform_floats(5, static_cast<std::size_t>(cols), 0.5f, 1.5f);
  auto dx = h.up(x);
  auto dw = h.up(w);
  auto out = h.b.template allocate<float>(rows * cols);
  h.b.rms_norm(cview<B>(dx.view().data(), rows, cols), specdec::vector_view<const float, typename B::memory_space>(dw.view()),
               1e-5f, out.matrix(rows, cols));
  check_dense_close(h.down(out), ref::rms_norm(widen(x), cols, widen(w), 1e-5), "rms_norm");
  CHECK(error_of([&] {
          h.b.rms_norm(cview<B>(dx.view().data(), rows, cols),
                       specdec::vector_view<const float, typename B::memory_space>(dw.view().data(), cols - 1), 1e-5f,
                       out.matrix(rows, cols));
        }).find("weight has length 47; expected 48") != std::string::npos);

  const auto up = uniform_floats(6, static_cast<std::size_t>(rows * cols), -2.0f, 2.0f);
  auto du = h.up(up);
  h.b.silu_mul(cview<B>(dx.view().data(), rows, cols), cview<B>(du.view().data(), rows, cols), out.matrix(rows, cols));
  std::vector<double> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))) * up[i];
  check_dense_close(h.down(out), want, "silu_mul");

  auto y = h.up(x);
  h.b.add_rows(y.matrix(rows, cols), cview<B>(du.view().data(), rows, cols));  // residual
  h.b.add_rows(y.matrix(rows, cols), cview<B>(dw.view().data(), 1, cols));     // bias
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = static_cast<double>(x[i]) + up[i] + w[i % static_cast<std::size_t>(cols)];
  check_dense_close(h.down(y), want, "add_rows");
  h.b.add_rows(y.matrix(rows, cols), cview<B>(du.view().data(), rows, cols),
               specdec::vector_view<const float, typename B::memory_space>(dw.view().data(), rows));  // weighted
  for (std::size_t i = 0; i < x.size(); ++i) want[i] += static_cast<double>(w[i / static_cast<std::size_t>(cols)]) * up[i];
  check_dense_close(h.down(y), want, "add_rows (per-row weights)");
}

TEST_CASE_TEMPLATE("rope rotates every head at its row's position (rotate-half)", B, SPECDEC_DENSE_BACKENDS) {
  harness<B> h;
  const index_t heads = 3, d = 16, cols = heads * d;
  const std::vector<std::int64_t> positions = {0, 1, 7, 4095, 1 << 20};
  const auto rows = static_cast<index_t>(positions.size());
  const auto x = uniform_floats(7, static_cast<std::size_t>(rows * cols), -1.0f, 1.0f);
  auto dx = h.up(x);
  auto dp = h.up(positions);
  h.b.rope(dx.matrix(rows, cols), specdec::vector_view<const std::int64_t, typename B::memory_space>(dp.view()), d, 500000.0);
  check_dense_close(h.down(dx), ref::rope(widen(x), cols, positions, d, 500000.0), "rope");
  CHECK(error_of([&] {
          h.b.rope(dx.matrix(rows, cols), specdec::vector_view<const std::int64_t, typename B::memory_space>(dp.view()), 5,
                   10000.0);
        }).find("head_dim = 5; expected an even head_dim") != std::string::npos);
}

TEST_CASE_TEMPLATE("attention with GQA under boolean and additive masks matches the reference", B, SPECDEC_DENSE_BACKENDS) {
  harness<B> h;
  const index_t tq = 6, tk = 11, heads = 4, kv_heads = 2, d = 8;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto q = uniform_floats(8, static_cast<std::size_t>(tq * heads * d), -2.0f, 2.0f);
  const auto k = uniform_floats(9, static_cast<std::size_t>(tk * kv_heads * d), -2.0f, 2.0f);
  const auto v = uniform_floats(10, static_cast<std::size_t>(tk * kv_heads * d), -2.0f, 2.0f);
  // A prefix of 5 keys every query sees, then a tree over the 6 queries (parents -1, 0, 0, 1, 1, 3).
  const std::vector<int> parent = {-1, 0, 0, 1, 1, 3};
  std::vector<std::uint8_t> allowed(static_cast<std::size_t>(tq * tk), 0);
  std::vector<float> additive(static_cast<std::size_t>(tq * tk), -INFINITY);
  for (index_t i = 0; i < tq; ++i) {
    for (index_t j = 0; j < 5; ++j) allowed[static_cast<std::size_t>(i * tk + j)] = 1;
    for (int a = static_cast<int>(i); a >= 0; a = parent[static_cast<std::size_t>(a)]) allowed[static_cast<std::size_t>(i * tk + 5 + a)] = 1;
    for (index_t j = 0; j < tk; ++j)
      if (allowed[static_cast<std::size_t>(i * tk + j)]) additive[static_cast<std::size_t>(i * tk + j)] = 0.25f * static_cast<float>(j % 3);
  }
  auto dq = h.up(q);
  auto dk = h.up(k);
  auto dv = h.up(v);
  auto dm = h.up(allowed);
  auto da = h.up(additive);
  auto out = h.b.template allocate<float>(tq * heads * d);
  const specdec::attention_heads shape{heads, kv_heads, d, scale};
  const auto qv = cview<B>(dq.view().data(), tq, heads * d);
  const auto kv = cview<B>(dk.view().data(), tk, kv_heads * d);
  const auto vv = cview<B>(dv.view().data(), tk, kv_heads * d);
  h.b.attention(qv, kv, vv, shape, specdec::matrix_view<const std::uint8_t, typename B::memory_space>(dm.view().data(), tq, tk),
                out.matrix(tq, heads * d));
  check_dense_close(h.down(out), ref::attention(widen(q), widen(k), widen(v), tq, tk, heads, kv_heads, d, scale, allowed, {}),
                    "attention (boolean mask)");
  h.b.attention(qv, kv, vv, shape, cview<B>(da.view().data(), tq, tk), out.matrix(tq, heads * d));
  check_dense_close(h.down(out), ref::attention(widen(q), widen(k), widen(v), tq, tk, heads, kv_heads, d, scale, {}, widen(additive)),
                    "attention (additive mask)");
  h.b.attention(qv, kv, vv, shape, specdec::matrix_view<const std::uint8_t, typename B::memory_space>(), out.matrix(tq, heads * d));
  check_dense_close(h.down(out), ref::attention(widen(q), widen(k), widen(v), tq, tk, heads, kv_heads, d, scale, {}, {}),
                    "attention (no mask)");

  std::vector<std::uint8_t> none(static_cast<std::size_t>(tq * tk), 1);
  for (index_t j = 0; j < tk; ++j) none[static_cast<std::size_t>(3 * tk + j)] = 0;
  auto dn = h.up(none);
  CHECK(error_of([&] {
          h.b.attention(qv, kv, vv, shape, specdec::matrix_view<const std::uint8_t, typename B::memory_space>(dn.view().data(), tq, tk),
                        out.matrix(tq, heads * d));
        }).find("query 3 has no key left by the mask") != std::string::npos);
  CHECK(error_of([&] {
          h.b.attention(qv, kv, vv, specdec::attention_heads{3, 2, d, scale},
                        specdec::matrix_view<const std::uint8_t, typename B::memory_space>(), out.matrix(tq, heads * d));
        }).find("heads = 3 is not a multiple of kv_heads = 2") != std::string::npos);
}
