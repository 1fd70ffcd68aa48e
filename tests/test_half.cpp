// SPDX-License-Identifier: Apache-2.0
// The 16-bit element types (core/half.hpp) and the row primitives over them. Conversions against plain
// definitions over every bit pattern (widening) and against a nearest-value search (narrowing); the
// Eigen backend's row primitives over bf16 / fp16 rows against the same primitives over the float rows
// holding the same values, bit for bit (the contract: a half row gives the float row's decisions).
// Built for the portable target (specdec_tests) and for this CPU (specdec_tests_native): the
// widening vector loads differ by instruction set (F16C or not).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/core/half.hpp>
#include <specdec/interop/sglang_sampling.hpp>
#include <specdec/interop/vllm.hpp>
#include <specdec/sampling/detail/filter_rows.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/sampling/tree_coin.hpp>
#include <specdec/sampling/typical.hpp>

using specdec::bfloat16;
using specdec::float16;
using specdec::index_t;

// Named, not anonymous: the unity build joins this file with others that have helpers of these names.
namespace test_half {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// fp16 by its definition: (-1)^s 2^(e-15) (1 + m / 1024), subnormals 2^-14 (m / 1024).
double fp16_value(std::uint16_t bits) {
  const int e = (bits >> 10) & 31;
  const int m = bits & 1023;
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (e == 31) return m == 0 ? sign * HUGE_VAL : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// Round-to-nearest-even onto a grid given as the sorted non-negative finite values with their bit
// patterns; `overflow` is where +inf starts (halfway past the largest finite value, ties to inf).
std::uint16_t nearest_even(double x, const std::vector<std::pair<double, std::uint16_t>>& grid, std::uint16_t infinity_bits) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const double top = grid.back().first;
  const double ulp = top - grid[grid.size() - 2].first;
  if (a >= top + ulp / 2) return static_cast<std::uint16_t>(sign | infinity_bits);
  auto hi = std::lower_bound(grid.begin(), grid.end(), std::make_pair(a, std::uint16_t{0}));
  if (hi == grid.end()) return static_cast<std::uint16_t>(sign | grid.back().second);
  if (hi->first == a || hi == grid.begin()) return static_cast<std::uint16_t>(sign | hi->second);
  const auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return static_cast<std::uint16_t>(sign | lo->second);
  if (dh < dl) return static_cast<std::uint16_t>(sign | hi->second);
  return static_cast<std::uint16_t>(sign | ((lo->second & 1) == 0 ? lo->second : hi->second));
}

std::vector<float> interesting_floats() {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e30f, -1e30f, 3.0e38f,
                           std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.5f, -25),
                           std::ldexp(1.0f, -26), std::ldexp(1.0f, -126), std::ldexp(1.0f, -149), 0.1f, 1.0f / 3.0f};
  std::mt19937 g(7);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t b = g();
    if ((b & 0x7F800000u) == 0x7F800000u) continue;  // NaN and inf separately
    float f;
    std::memcpy(&f, &b, sizeof f);
    xs.push_back(f);
  }
  // The halfway points between neighbouring fp16 and bf16 values and one float ulp either side.
  for (int i = 0; i < 0x7C00; i += 37) {
    const float mid = static_cast<float>((fp16_value(static_cast<std::uint16_t>(i)) + fp16_value(static_cast<std::uint16_t>(i + 1))) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid});
  }
  for (std::uint32_t i = 0; i < 0x7F80; i += 29) {
    float lo, hi;
    const std::uint32_t lb = i << 16, hb = (i + 1) << 16;
    std::memcpy(&lo, &lb, 4);
    std::memcpy(&hi, &hb, 4);
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 3e38f), -mid});
  }
  return xs;
}

}  // namespace test_half

TEST_CASE("half: widening is exact for every bit pattern, and narrowing a widened value gives it back") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    CAPTURE(b);
    const float h = specdec::widen(float16{bits});
    const double want = test_half::fp16_value(bits);
    if (want != want) {
      REQUIRE(h != h);
      REQUIRE(std::signbit(h) == ((bits & 0x8000) != 0));
      REQUIRE(std::isnan(specdec::widen(specdec::to_float16(h))));
    } else {
      REQUIRE(static_cast<double>(h) == want);
      REQUIRE(std::signbit(h) == ((bits & 0x8000) != 0));
      REQUIRE(specdec::to_float16(h).bits == bits);
    }
    const float f = specdec::widen(bfloat16{bits});
    const std::uint32_t fb = b << 16;
    float expect;
    std::memcpy(&expect, &fb, 4);
    REQUIRE(test_half::same_bits(f, expect));
    if (f == f) REQUIRE(specdec::to_bfloat16(f).bits == bits);
    else REQUIRE(std::isnan(specdec::widen(specdec::to_bfloat16(f))));
  }
}

TEST_CASE("half: narrowing rounds to the nearest value, ties to even, overflow to infinity") {
  std::vector<std::pair<double, std::uint16_t>> fp16, bf16;
  for (std::uint32_t b = 0; b < 0x7C00; ++b) fp16.emplace_back(test_half::fp16_value(static_cast<std::uint16_t>(b)), static_cast<std::uint16_t>(b));
  for (std::uint32_t b = 0; b < 0x7F80; ++b) bf16.emplace_back(specdec::widen(bfloat16{static_cast<std::uint16_t>(b)}), static_cast<std::uint16_t>(b));
  int checked = 0;
  for (const float x : test_half::interesting_floats()) {
    CAPTURE(x);
    REQUIRE(specdec::to_float16(x).bits == test_half::nearest_even(x, fp16, 0x7C00));
    REQUIRE(specdec::to_bfloat16(x).bits == test_half::nearest_even(x, bf16, 0x7F80));
    ++checked;
  }
  CHECK(checked > 200000);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(specdec::to_float16(inf).bits == 0x7C00);
  CHECK(specdec::to_float16(-inf).bits == 0xFC00);
  CHECK(specdec::to_bfloat16(-inf).bits == 0xFF80);
  CHECK(std::isnan(specdec::widen(specdec::to_float16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(specdec::widen(specdec::to_bfloat16(-std::numeric_limits<float>::quiet_NaN()))));
}

namespace test_half {

// Rows of logits-like values drawn in float and rounded to the half type (so they are exact in both),
// with ties, -inf masks and a few very large and very small values.
template <class H>
std::vector<H> half_rows(index_t rows, index_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  std::vector<H> out(static_cast<std::size_t>(rows * n));
  for (auto& h : out) {
    const std::uint32_t kind = g() % 64;
    float v = logit(g);
    if (kind == 0) v = -std::numeric_limits<float>::infinity();
    if (kind == 1) v = 3.0f;  // ties across the row
    if (kind == 2) v = std::is_same_v<H, bfloat16> ? 1e30f : 6e4f;
    if (kind == 3) v = -0.0f;
    h = specdec::narrow<H>(v);
  }
  return out;
}

template <class H>
std::vector<float> widened(const std::vector<H>& h) {
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) f[i] = specdec::widen(h[i]);
  return f;
}

template <class H, class B = specdec::eigen>
void check_rows_match(index_t rows, index_t n, std::uint32_t seed) {
  CAPTURE(n);
  CAPTURE(rows);
  CAPTURE(specdec::element_name<H>);
  const std::vector<H> h = half_rows<H>(rows, n, seed);
  const std::vector<float> f = widened(h);
  B be;
  const specdec::matrix_view<const H> hv(h.data(), rows, n);
  const specdec::matrix_view<const float> fv(f.data(), rows, n);
  const auto rs = static_cast<std::size_t>(rows);
  {  // argmax with values, max
    std::vector<std::int32_t> hi(rs), fi(rs);
    std::vector<float> hval(rs), fval(rs), hmax(rs), fmax(rs);
    be.row_argmax(hv, specdec::vector_view<std::int32_t>(hi.data(), rows), specdec::vector_view<float>(hval.data(), rows));
    be.row_argmax(fv, specdec::vector_view<std::int32_t>(fi.data(), rows), specdec::vector_view<float>(fval.data(), rows));
    be.row_max(hv, specdec::vector_view<float>(hmax.data(), rows));
    be.row_max(fv, specdec::vector_view<float>(fmax.data(), rows));
    for (std::size_t r = 0; r < rs; ++r) {
      REQUIRE(hi[r] == fi[r]);
      REQUIRE(same_bits(hval[r], fval[r]));
      REQUIRE(same_bits(hmax[r], fmax[r]));
    }
  }
  for (const index_t k : {index_t{1}, index_t{8}, index_t{50}, index_t{300}}) {
    if (k > n) continue;
    CAPTURE(k);
    const auto ks = static_cast<std::size_t>(k);
    std::vector<float> hvals(rs * ks), fvals(rs * ks), hl(rs * ks), fl(rs * ks), hlse(rs), flse(rs);
    std::vector<std::int32_t> hidx(rs * ks), fidx(rs * ks), hli(rs * ks), fli(rs * ks);
    be.row_topk(hv, k, specdec::matrix_view<float>(hvals.data(), rows, k), specdec::matrix_view<std::int32_t>(hidx.data(), rows, k));
    be.row_topk(fv, k, specdec::matrix_view<float>(fvals.data(), rows, k), specdec::matrix_view<std::int32_t>(fidx.data(), rows, k));
    be.row_topk_logsumexp(hv, k, 0.7f, specdec::matrix_view<float>(hl.data(), rows, k), specdec::matrix_view<std::int32_t>(hli.data(), rows, k),
                          specdec::vector_view<float>(hlse.data(), rows));
    be.row_topk_logsumexp(fv, k, 0.7f, specdec::matrix_view<float>(fl.data(), rows, k), specdec::matrix_view<std::int32_t>(fli.data(), rows, k),
                          specdec::vector_view<float>(flse.data(), rows));
    for (std::size_t i = 0; i < rs * ks; ++i) {
      REQUIRE(hidx[i] == fidx[i]);
      REQUIRE(same_bits(hvals[i], fvals[i]));
      REQUIRE(hli[i] == fli[i]);
      REQUIRE(same_bits(hl[i], fl[i]));
    }
    for (std::size_t r = 0; r < rs; ++r) REQUIRE(same_bits(hlse[r], flse[r]));
  }
  for (const float t : {1.0f, 0.6f, 0.0f}) {
    CAPTURE(t);
    std::vector<float> hs(rs * static_cast<std::size_t>(n)), fs(hs.size()), hls(hs.size()), fls(hs.size()), hlse(rs), flse(rs);
    be.row_softmax(hv, t, specdec::matrix_view<float>(hs.data(), rows, n));
    be.row_softmax(fv, t, specdec::matrix_view<float>(fs.data(), rows, n));
    be.row_log_softmax(hv, t, specdec::matrix_view<float>(hls.data(), rows, n));
    be.row_log_softmax(fv, t, specdec::matrix_view<float>(fls.data(), rows, n));
    for (std::size_t i = 0; i < hs.size(); ++i) {
      REQUIRE(same_bits(hs[i], fs[i]));
      REQUIRE(same_bits(hls[i], fls[i]));
    }
    if (t > 0) {
      be.row_logsumexp(hv, t, specdec::vector_view<float>(hlse.data(), rows));
      be.row_logsumexp(fv, t, specdec::vector_view<float>(flse.data(), rows));
      for (std::size_t r = 0; r < rs; ++r) REQUIRE(same_bits(hlse[r], flse[r]));
    }
  }
}

}  // namespace test_half

TEST_CASE("half: the Eigen row primitives over bf16 and fp16 rows give the float rows' results bit for bit") {
  std::uint32_t seed = 1;
  for (const index_t n : {index_t{1}, index_t{7}, index_t{64}, index_t{300}, index_t{2048 + 13}, index_t{4096}, index_t{32000}, index_t{128256}}) {
    const index_t rows = n >= 32000 ? 2 : 5;
    test_half::check_rows_match<bfloat16>(rows, n, seed++);
    test_half::check_rows_match<float16>(rows, n, seed++);
  }
}

TEST_CASE("half: the Thrust host systems' row primitives over bf16 / fp16 rows give their float rows' results bit for bit") {
  using cpp = specdec::thrust_backend<specdec::thrust_system::cpp>;
  using omp = specdec::thrust_backend<specdec::thrust_system::omp>;
  std::uint32_t seed = 101;
  for (const index_t n : {index_t{7}, index_t{300}, index_t{2048 + 13}, index_t{32000}}) {  // no all -inf rows
    test_half::check_rows_match<bfloat16, cpp>(3, n, seed++);
    test_half::check_rows_match<float16, cpp>(3, n, seed++);
    test_half::check_rows_match<bfloat16, omp>(3, n, seed++);
    test_half::check_rows_match<float16, omp>(3, n, seed++);
  }
  // Integer outputs agree across backends: the Eigen backend's argmax and top-k of the same 16-bit rows.
  const auto h = test_half::half_rows<bfloat16>(4, 5000, 7);
  const specdec::matrix_view<const bfloat16> hv(h.data(), 4, 5000);
  std::vector<std::int32_t> a(4), b(4), ia(4 * 60), ib(4 * 60);
  std::vector<float> va(4 * 60), vb(4 * 60);
  specdec::eigen e;
  cpp t;
  e.row_argmax(hv, specdec::vector_view<std::int32_t>(a.data(), 4));
  t.row_argmax(hv, specdec::vector_view<std::int32_t>(b.data(), 4));
  CHECK(a == b);
  e.row_topk(hv, 60, specdec::matrix_view<float>(va.data(), 4, 60), specdec::matrix_view<std::int32_t>(ia.data(), 4, 60));
  t.row_topk(hv, 60, specdec::matrix_view<float>(vb.data(), 4, 60), specdec::matrix_view<std::int32_t>(ib.data(), 4, 60));
  CHECK(ia == ib);
  CHECK(va == vb);
}

TEST_CASE("half: a NaN or +inf in a bf16 / fp16 row is refused as in a float row, naming the row and column") {
  specdec::eigen be;
  std::vector<bfloat16> b(3 * 40, specdec::to_bfloat16(0.5f));
  b[2 * 40 + 17] = specdec::to_bfloat16(std::numeric_limits<float>::quiet_NaN());
  std::vector<std::int32_t> idx(3);
  const auto call = [&] {
    be.row_argmax(specdec::matrix_view<const bfloat16>(b.data(), 3, 40), specdec::vector_view<std::int32_t>(idx.data(), 3));
  };
  CHECK_THROWS_WITH_AS(call(), doctest::Contains("logits row 2"), specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(call(), doctest::Contains("column 17"), specdec::invalid_argument);
  std::vector<float16> h(2 * 40, specdec::to_float16(0.5f));
  h[1 * 40 + 3] = specdec::to_float16(std::numeric_limits<float>::infinity());
  std::vector<float> out(2 * 40);
  CHECK_THROWS_WITH_AS(be.row_softmax(specdec::matrix_view<const float16>(h.data(), 2, 40), 1.0f, specdec::matrix_view<float>(out.data(), 2, 40)),
                       doctest::Contains("column 3"), specdec::invalid_argument);
}

namespace test_half {

/// A one-thread team of its own type: filter_rows_job runs the device's radix search on it.
struct radix_team {
  index_t rank() const noexcept { return 0; }
  index_t size() const noexcept { return 1; }
  void sync() const noexcept {}
  std::byte* wide_scratch() const noexcept { return nullptr; }
};

/// FlashInfer's filters on rows of element type E (k = 0 / p = 0: that filter off), three ways that must
/// agree: the Eigen backend's form out of place and in place (the host's vector passes), and the job on a
/// radix team (the device's search).
template <class E>
std::vector<E> filtered(const std::vector<E>& x, index_t rows, index_t v, std::int64_t k, float p, bool renormalise) {
  namespace sampling = specdec::sampling;
  specdec::eigen b;
  const std::int64_t ks[1] = {k};
  const float ps[1] = {p};
  const specdec::vector_view<const std::int64_t> kv(ks, k > 0 ? 1 : 0);
  const specdec::vector_view<const float> pv(ps, p > 0.0f ? 1 : 0);
  const auto run = [&](specdec::matrix_view<const E> in, specdec::matrix_view<E> out) {
    if (!renormalise) sampling::top_k_mask_logits(b, in, kv, out);
    else if (k > 0 && p > 0.0f) sampling::top_k_top_p_joint_renorm(b, in, kv, pv, out);
    else if (p > 0.0f) sampling::top_p_renorm(b, in, pv, out);
    else sampling::top_k_renorm(b, in, kv, out);
  };
  std::vector<E> out(x.size()), in_place = x, radix(x.size());
  run(specdec::matrix_view<const E>(x.data(), rows, v), specdec::matrix_view<E>(out.data(), rows, v));
  run(specdec::matrix_view<const E>(in_place.data(), rows, v), specdec::matrix_view<E>(in_place.data(), rows, v));
  REQUIRE(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(E)) == 0);
  sampling::detail::filter_rows_job<specdec::host_space, E> job{specdec::matrix_view<const E>(x.data(), rows, v),
                                                                specdec::matrix_view<E>(radix.data(), rows, v), kv, pv, renormalise, "radix", {}};
  std::vector<std::byte> scratch(job.scratch_bytes() + 16);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 15) / 16 * 16);
  radix_team team;
  for (index_t r = 0; r < rows; ++r) REQUIRE(job(team, r, base).code == 0);
  REQUIRE(std::memcmp(radix.data(), out.data(), out.size() * sizeof(E)) == 0);
  return out;
}

/// Probability rows (a long tail, ties, zeros and -0) or logit rows, rounded to E.
template <class E>
std::vector<E> filter_rows_of(index_t rows, index_t v, int kind, bool probabilities, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<E> out(static_cast<std::size_t>(rows * v));
  for (index_t r = 0; r < rows; ++r) {
    std::vector<double> e(static_cast<std::size_t>(v));
    double total = 0.0;
    // A probability row is redrawn until its rounding to E sums to 1 within the float rows' tolerances
    // (the samplers' 1e-4), so that the float row of the same values is accepted too (E's own wider tolerance is tested apart).
    for (double rounded = 0.0; probabilities ? !(std::fabs(rounded - 1.0) <= 5e-5) : rounded == 0.0;) {  // NaN: redraw
      total = 0.0;
      for (auto& x : e) {
        x = kind == 0 ? std::exp(12.0 * (u(g) - 1.0)) : kind == 1 ? std::floor(u(g) * 4.0) + 1.0 : (u(g) < 0.3 ? 0.0 : u(g));
        total += x;
      }
      rounded = 0.0;
      for (const double x : e) rounded += static_cast<double>(specdec::widen(specdec::narrow<E>(static_cast<float>(x / total))));
    }
    for (index_t j = 0; j < v; ++j) {
      const double x = e[static_cast<std::size_t>(j)];
      float f = probabilities ? static_cast<float>(x / total) : static_cast<float>(std::log(x + 1e-30) * 3.0);
      if (probabilities && f == 0.0f && j % 2 == 0) f = -0.0f;
      if (!probabilities && x == 0.0) f = -std::numeric_limits<float>::infinity();
      out[static_cast<std::size_t>(r * v + j)] = specdec::narrow<E>(f);
    }
  }
  return out;
}

template <class E>
void check_filters(index_t rows, index_t v, std::uint32_t seed) {
  for (int kind = 0; kind < 3; ++kind) {
    CAPTURE(kind);
    CAPTURE(v);
    CAPTURE(specdec::element_name<E>);
    const std::vector<E> probs = filter_rows_of<E>(rows, v, kind, true, seed + static_cast<std::uint32_t>(kind));
    const std::vector<E> logits = filter_rows_of<E>(rows, v, kind, false, seed + 7 + static_cast<std::uint32_t>(kind));
    const std::vector<float> fprobs = widened(probs), flogits = widened(logits);
    const std::int64_t ks[] = {1, 10, v / 3 + 1, v};
    const float ps[] = {0.3f, 0.9f};
    const auto expect_narrowed = [&](const std::vector<E>& h, const std::vector<float>& f) {
      for (std::size_t i = 0; i < h.size(); ++i) REQUIRE(h[i].bits == specdec::narrow<E>(f[i]).bits);
    };
    for (const std::int64_t k : ks) {
      if (k > v) continue;
      CAPTURE(k);
      expect_narrowed(filtered(probs, rows, v, k, 0.0f, true), filtered(fprobs, rows, v, k, 0.0f, true));
      expect_narrowed(filtered(logits, rows, v, k, 0.0f, false), filtered(flogits, rows, v, k, 0.0f, false));
      for (const float p : ps) {
        CAPTURE(p);
        expect_narrowed(filtered(probs, rows, v, k, p, true), filtered(fprobs, rows, v, k, p, true));
      }
    }
    for (const float p : ps) expect_narrowed(filtered(probs, rows, v, 0, p, true), filtered(fprobs, rows, v, 0, p, true));
    // The host forms (one k or p for every row, in place) give the backend form's bits.
    std::vector<E> host = probs;
    const index_t k10 = std::min<index_t>(10, v);
    specdec::sampling::top_k_top_p_joint_renorm(specdec::matrix_view<E>(host.data(), rows, v), k10, 0.9f);
    const std::vector<E> backend = filtered(probs, rows, v, k10, 0.9f, true);
    REQUIRE(std::memcmp(host.data(), backend.data(), host.size() * sizeof(E)) == 0);
  }
}

}  // namespace test_half

TEST_CASE("half: FlashInfer's filters over bf16 / fp16 rows are the float rows' outputs rounded to the row's type") {
  for (const index_t v : {index_t{5}, index_t{100}, index_t{2048 + 5}, index_t{32000}}) {
    test_half::check_filters<bfloat16>(3, v, 11);
    test_half::check_filters<float16>(3, v, 23);
  }
}

TEST_CASE("half: the renormalisers' sum tolerance includes a 16-bit row's rounding, and says so when exceeded") {
  // {0.5, 0.25, 0.25 + 2^-9} (exact in bf16) sums to 1 + 2^-9: outside 1e-3 as a float row, inside
  // 1e-3 + 2^-8 as a bf16 row.
  std::vector<bfloat16> h = {specdec::to_bfloat16(0.5f), specdec::to_bfloat16(0.25f), specdec::to_bfloat16(0.25f + 0x1p-9f)};
  REQUIRE(specdec::widen(h[2]) == 0.25f + 0x1p-9f);
  std::vector<float> f = test_half::widened(h);
  CHECK_THROWS_WITH_AS(specdec::sampling::top_k_renorm(specdec::matrix_view<float>(f.data(), 1, 3), 1),
                       "specdec::sampling::top_k_renorm: probs row 0 sums to 1.00195; expected 1 within 0.001", specdec::invalid_argument);
  specdec::sampling::top_k_renorm(specdec::matrix_view<bfloat16>(h.data(), 1, 3), 1);
  CHECK(specdec::widen(h[0]) == 1.0f);
  CHECK(specdec::widen(h[1]) == 0.0f);
  CHECK(specdec::widen(h[2]) == 0.0f);
  std::vector<bfloat16> off = {specdec::to_bfloat16(0.5f), specdec::to_bfloat16(0.5078125f)};  // 1 + 2^-7
  CHECK_THROWS_WITH_AS(specdec::sampling::top_p_renorm(specdec::matrix_view<bfloat16>(off.data(), 1, 2), 0.5f),
                       doctest::Contains("expected 1 within 0.001 plus the rounding of its bfloat16 entries (2^-8 of the sum)"), specdec::invalid_argument);
  std::vector<float16> off16 = {specdec::to_float16(0.5f), specdec::to_float16(0.5f + 5 * 0x1p-11f)};  // 1 + 2.4e-3
  CHECK_THROWS_WITH_AS(specdec::sampling::top_p_renorm(specdec::matrix_view<float16>(off16.data(), 1, 2), 0.5f),
                       doctest::Contains("expected 1 within 0.001 plus the rounding of its float16 entries (2^-11 of the sum and 2^-25 per entry)"), specdec::invalid_argument);
}

TEST_CASE("half: a bf16 row whose entries all round down by almost half an ulp is still a distribution") {
  // 254 probabilities of 2^-8 (1 + 0.499 / 128) and one of the rest (0.003936) sum to 1; rounded to bf16
  // (8 significant bits) the 254 become 2^-8, and the row sums to 0.99612: 1 - 3.9e-3, beyond the
  // 2^-9 that half an ulp is relative to the top of a binade, within the 2^-8 it is at the bottom.
  const index_t v = 255;
  std::vector<bfloat16> row(static_cast<std::size_t>(v), specdec::to_bfloat16(0x1p-8f * (1.0f + 0.499f / 128.0f)));
  row.back() = specdec::to_bfloat16(0.003936f);
  REQUIRE(specdec::widen(row[0]) == 0x1p-8f);
  double total = 0.0;
  for (const bfloat16 e : row) total += static_cast<double>(specdec::widen(e));
  REQUIRE(total < 1.0 - 0x1p-9 - 1e-3);
  std::vector<bfloat16> filtered = row;
  specdec::sampling::top_k_renorm(specdec::matrix_view<bfloat16>(filtered.data(), index_t{1}, v), index_t{10});
  std::vector<bfloat16> nucleus = row;
  specdec::sampling::top_p_renorm(specdec::matrix_view<bfloat16>(nucleus.data(), index_t{1}, v), 0.5f);
  CHECK(specdec::widen(nucleus[0]) > 0.0f);
  specdec::eigen b;
  const float u = 0.9999f;
  std::int32_t t = -1;
  b.row_sample(specdec::matrix_view<const bfloat16>(static_cast<const bfloat16*>(row.data()), index_t{1}, v),
               specdec::vector_view<const float>(&u, 1), specdec::vector_view<std::int32_t>(&t, 1));
  CHECK(t == 254);
}

TEST_CASE("half: row_sample over bf16 / fp16 rows draws the float rows' tokens; the sum tolerance adds the rounding") {
  specdec::eigen be;
  std::mt19937 g(5);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (const index_t v : {index_t{3}, index_t{1000}, index_t{2048 * 3 + 7}}) {
    const index_t rows = 6;
    const auto bf = test_half::filter_rows_of<bfloat16>(rows, v, 0, true, 41);
    const auto fp = test_half::filter_rows_of<float16>(rows, v, 2, true, 43);
    std::vector<float> u(static_cast<std::size_t>(rows));
    for (int draw = 0; draw < 20; ++draw) {
      for (auto& x : u) x = uniform(g);
      u[0] = 0.0f;
      u[1] = 1.0f - 0x1p-24f;
      const auto tokens = [&](auto view) {
        std::vector<std::int32_t> t(static_cast<std::size_t>(rows));
        be.row_sample(view, specdec::vector_view<const float>(u.data(), rows), specdec::vector_view<std::int32_t>(t.data(), rows));
        return t;
      };
      const auto fbf = test_half::widened(bf), ffp = test_half::widened(fp);
      REQUIRE(tokens(specdec::matrix_view<const bfloat16>(bf.data(), rows, v)) == tokens(specdec::matrix_view<const float>(fbf.data(), rows, v)));
      {  // the Thrust host system draws the same tokens from the 16-bit rows
        specdec::thrust_backend<specdec::thrust_system::cpp> t;
        std::vector<std::int32_t> tt(static_cast<std::size_t>(rows));
        t.row_sample(specdec::matrix_view<const bfloat16>(bf.data(), rows, v), specdec::vector_view<const float>(u.data(), rows),
                     specdec::vector_view<std::int32_t>(tt.data(), rows));
        REQUIRE(tt == tokens(specdec::matrix_view<const bfloat16>(bf.data(), rows, v)));
      }
      REQUIRE(tokens(specdec::matrix_view<const float16>(fp.data(), rows, v)) == tokens(specdec::matrix_view<const float>(ffp.data(), rows, v)));
    }
  }
  // {0.5, 0.25, 0.25 + 2^-9}: 1 + 2^-9 is inside bf16's 1e-4 + 2^-8, not float's 1e-4.
  std::vector<bfloat16> h = {specdec::to_bfloat16(0.5f), specdec::to_bfloat16(0.25f), specdec::to_bfloat16(0.25f + 0x1p-9f)};
  const std::vector<float> f = test_half::widened(h);
  const float u = 0.9f;
  std::int32_t t = -1;
  be.row_sample(specdec::matrix_view<const bfloat16>(h.data(), 1, 3), specdec::vector_view<const float>(&u, 1), specdec::vector_view<std::int32_t>(&t, 1));
  CHECK(t == 2);
  CHECK_THROWS_WITH_AS(be.row_sample(specdec::matrix_view<const float>(f.data(), 1, 3), specdec::vector_view<const float>(&u, 1),
                                     specdec::vector_view<std::int32_t>(&t, 1)),
                       doctest::Contains("probs row 0"), specdec::invalid_argument);
}

TEST_CASE("half: verify_greedy over bf16 / fp16 target logits accepts what the float logits accept") {
  specdec::eigen be;
  const index_t v = 500;
  // A chain of 4 drafted tokens: node i's row decides token i + 1. Rows built so that the argmax of row i
  // is the drafted token i + 1 for the first two rows, not for the third.
  const auto h = test_half::half_rows<bfloat16>(5, v, 3);
  std::vector<bfloat16> rows = h;
  const std::vector<float> f0 = test_half::widened(rows);
  std::vector<std::int32_t> argmax(5);
  be.row_argmax(specdec::matrix_view<const float>(f0.data(), 5, v), specdec::vector_view<std::int32_t>(argmax.data(), 5));
  const std::int32_t tokens[5] = {7, argmax[0], argmax[1], (argmax[2] + 1) % static_cast<std::int32_t>(v), 3};
  const std::int32_t parents[5] = {-1, 0, 1, 2, 3}, depths[5] = {0, 1, 2, 3, 4};
  specdec::sampling::speculative_request q;
  q.tree = specdec::tree_view{std::span<const std::int32_t>(tokens, 5), std::span<const std::int32_t>(parents, 5),
                              std::span<const std::int32_t>(depths, 5)};
  q.target_row = 0;
  const auto half = specdec::sampling::verify_greedy(be, specdec::matrix_view<const bfloat16>(rows.data(), 5, v),
                                                     std::span<const specdec::sampling::speculative_request>(&q, 1));
  const auto full = specdec::sampling::verify_greedy(be, specdec::matrix_view<const float>(f0.data(), 5, v),
                                                     std::span<const specdec::sampling::speculative_request>(&q, 1));
  REQUIRE(half.size() == 1);
  CHECK(half[0].accepted_nodes == full[0].accepted_nodes);
  CHECK(half[0].tokens == full[0].tokens);
  CHECK(half[0].accepted_nodes == std::vector<std::int32_t>{1, 2});  // two drafted tokens (the root excluded)
  CHECK(half[0].tokens == std::vector<std::int32_t>{argmax[0], argmax[1], argmax[2]});
}

// ---- the stochastic verifiers over bf16 / fp16 probability rows ----------------------------------------

namespace test_half {

/// Distributions of V entries rounded to E (kinds: long tail, ties, zeros and -0; filter_rows_of), and
/// drafts drawn from `draft` rows so that some are accepted and some rejected.
template <class E>
std::vector<E> distributions(index_t rows, index_t v, std::uint32_t seed) {
  return filter_rows_of<E>(rows, v, static_cast<int>(seed % 3), true, seed);
}

/// Token i of a chain over `rows`: a draw from row i (its widened values) by inverse CDF, or, every
/// fifth, token 0 (often a zero entry: tests q = 0 and p = 0).
template <class E>
std::vector<std::int32_t> drawn_tokens(const std::vector<E>& rows, index_t count, index_t v, std::mt19937& g) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::int32_t> t(static_cast<std::size_t>(count));
  for (index_t i = 0; i < count; ++i) {
    const double target = u(g);
    double run = 0.0;
    std::int32_t pick = static_cast<std::int32_t>(v - 1);
    for (index_t j = 0; j < v; ++j) {
      run += static_cast<double>(specdec::widen(rows[static_cast<std::size_t>(i * v + j)]));
      if (run > target) {
        pick = static_cast<std::int32_t>(j);
        break;
      }
    }
    t[static_cast<std::size_t>(i)] = i % 5 == 4 ? 0 : pick;
  }
  return t;
}

void check_same_results(const std::vector<specdec::sampling::speculative_result>& a,
                        const std::vector<specdec::sampling::speculative_result>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t r = 0; r < a.size(); ++r) {
    CAPTURE(r);
    CHECK(a[r].tokens == b[r].tokens);
    CHECK(a[r].accepted_nodes == b[r].accepted_nodes);
    CHECK(a[r].bonus == b[r].bonus);
    CHECK(a[r].uniforms_consumed == b[r].uniforms_consumed);
    CHECK(a[r].retest_accepted == b[r].retest_accepted);
    CHECK(a[r].acceptance_tests == b[r].acceptance_tests);
    REQUIRE(a[r].final_distribution.size() == b[r].final_distribution.size());
    if (!a[r].final_distribution.empty())  // (memcmp of two empty vectors' null data is undefined)
      CHECK(std::memcmp(a[r].final_distribution.data(), b[r].final_distribution.data(), a[r].final_distribution.size() * sizeof(float)) == 0);
  }
}

/// verify_speculative over chains of k drafts per request (FlashInfer's conventions and specdec's
/// defaults, exponential race included) and a branching tree of deterministic drafts: T / D rows against
/// the float rows holding their values.
template <class T, class D>
void check_verify_speculative(index_t v, std::uint32_t seed, std::size_t& accepted_total, index_t& tests_total) {
  namespace sampling = specdec::sampling;
  CAPTURE(v);
  CAPTURE(seed);
  CAPTURE(specdec::element_name<T>);
  CAPTURE(specdec::element_name<D>);
  specdec::eigen be;
  const index_t batch = 4, k = 3;
  const auto target = distributions<T>(batch * (k + 1), v, seed);
  const auto draft = distributions<D>(batch * k, v, seed + 1);
  const auto target_f = widened(target), draft_f = widened(draft);
  std::mt19937 g(seed);
  const auto drafts = drawn_tokens(draft, batch * k, v, g);
  std::vector<float> noise(static_cast<std::size_t>(batch * v));
  std::exponential_distribution<float> expo(1.0f);
  for (auto& x : noise) x = expo(g);
  std::vector<specdec::draft_tree> chains;
  std::vector<std::vector<index_t>> rows(static_cast<std::size_t>(batch));
  std::vector<sampling::speculative_request> requests(static_cast<std::size_t>(batch));
  chains.reserve(static_cast<std::size_t>(batch));
  for (index_t r = 0; r < batch; ++r) {
    chains.push_back(sampling::make_chain(0, std::span<const std::int32_t>(drafts.data() + r * k, static_cast<std::size_t>(k))));
    auto& dr = rows[static_cast<std::size_t>(r)];
    dr = {-1};
    for (index_t i = 0; i < k; ++i) dr.push_back(r * k + i);
    auto& q = requests[static_cast<std::size_t>(r)];
    q.tree = chains.back();
    q.target_row = r * (k + 1);
    q.draft_rows = dr;
    q.noise_row = r;
    q.uniforms = sampling::uniform_stream::philox({seed, static_cast<std::uint64_t>(r)}, 3);
  }
  sampling::speculative_rows<specdec::host_space, T, D> half{specdec::matrix_view<const T>(target.data(), batch * (k + 1), v),
                                                             specdec::matrix_view<const D>(draft.data(), batch * k, v),
                                                             specdec::matrix_view<const float>(noise.data(), batch, v)};
  sampling::speculative_rows<> full{specdec::matrix_view<const float>(target_f.data(), batch * (k + 1), v),
                                    specdec::matrix_view<const float>(draft_f.data(), batch * k, v),
                                    specdec::matrix_view<const float>(noise.data(), batch, v)};
  sampling::speculative_options flashinfer;
  flashinfer.test = sampling::acceptance_test::strict_product;
  flashinfer.range = sampling::uniform_range::open_closed;
  flashinfer.flashinfer_retest = true;
  flashinfer.fallback = specdec::empty_residual::last_token;
  flashinfer.keep_final_distribution = true;
  sampling::speculative_options race;
  race.draw = sampling::final_draw::exponential_race;
  race.fallback = specdec::empty_residual::token_zero;
  sampling::speculative_options lenient;
  lenient.lenience = 0.5f;
  lenient.keep_final_distribution = true;
  for (const auto& options : {sampling::speculative_options{}, flashinfer, race, lenient}) {
    const auto got = sampling::verify_speculative(be, half, requests, options);
    for (const auto& r : got) {
      accepted_total += r.accepted_nodes.size();
      tests_total += r.acceptance_tests;
    }
    check_same_results(got, sampling::verify_speculative(be, full, requests, options));
    // The output form writes what the returning form returns.
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch * (k + 1))), accepted(static_cast<std::size_t>(batch));
    sampling::verify_outputs<> o;
    o.tokens = specdec::matrix_view<std::int32_t>(tokens.data(), batch, k + 1);
    o.accepted = specdec::vector_view<std::int32_t>(accepted.data(), batch);
    sampling::verify_speculative(be, half, requests, options, o);
    for (index_t r = 0; r < batch; ++r) {
      CHECK(accepted[static_cast<std::size_t>(r)] == static_cast<std::int32_t>(got[static_cast<std::size_t>(r)].accepted_nodes.size()));
      CHECK(tokens[static_cast<std::size_t>(r * (k + 1))] == got[static_cast<std::size_t>(r)].tokens.front());
    }
  }
  // A tree of deterministic drafts with duplicate siblings (EAGLE's form): node 0 has children 1, 2, 3
  // (3 repeating 1's token), node 1 has 4 and 5. Rows 0..5 of the target.
  const std::int32_t top = drafts[0];
  const std::vector<std::int32_t> tokens = {0, top, drafts[1], top, drafts[2], static_cast<std::int32_t>((drafts[2] + 1) % v)};
  const specdec::draft_tree tree = specdec::make_tree(tokens, std::vector<std::int32_t>{-1, 0, 0, 0, 1, 1});
  sampling::speculative_request q;
  q.tree = tree;
  q.uniforms = sampling::uniform_stream::philox({seed, 99}, 0);
  for (std::uint64_t offset = 0; offset < 6; ++offset) {
    q.uniforms = sampling::uniform_stream::philox({seed, 99}, offset);
    sampling::speculative_options keep;
    keep.keep_final_distribution = true;
    check_same_results(sampling::verify_speculative(be, sampling::speculative_rows<specdec::host_space, T, D>{half.target}, std::span(&q, 1), keep),
                       sampling::verify_speculative(be, sampling::speculative_rows<>{full.target}, std::span(&q, 1), keep));
  }
}

/// SGLang's tree_speculative_sampling_target_only (host form, and the backend form on the Thrust host
/// system) over T rows against the float rows: a 5-node tree 0 -> {1, 2}, 1 -> {3}, 2 -> {4} per
/// request, candidates drawn from the target rows (siblings sometimes equal), several threshold pairs.
template <class T>
void check_sglang(index_t v, std::uint32_t seed) {
  CAPTURE(v);
  CAPTURE(seed);
  CAPTURE(specdec::element_name<T>);
  specdec::eigen be;
  const index_t bs = 3, n = 5;
  const auto target = distributions<T>(bs * n, v, seed);
  const auto target_f = widened(target);
  std::mt19937 g(seed + 7);
  const auto drawn = drawn_tokens(target, bs * n, v, g);
  std::vector<std::int64_t> candidates(static_cast<std::size_t>(bs * n)), index(static_cast<std::size_t>(bs * n)),
      next_token(static_cast<std::size_t>(bs * n)), next_sibling(static_cast<std::size_t>(bs * n));
  const std::int64_t first[5] = {1, 3, 4, -1, -1}, sibling[5] = {-1, 2, -1, -1, -1}, parent[5] = {-1, 0, 0, 1, 2};
  for (index_t b = 0; b < bs; ++b)
    for (index_t i = 0; i < n; ++i) {
      const auto at = static_cast<std::size_t>(b * n + i);
      // Node i's token is drawn from its parent's row; node 2 repeats node 1's token in request 1.
      candidates[at] = i == 0 ? 0 : drawn[static_cast<std::size_t>(b * n + parent[i])];
      if (b == 1 && i == 2) candidates[at] = candidates[at - 1];
      index[at] = b * n + i;
      next_token[at] = first[i];
      next_sibling[at] = sibling[i];
    }
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> coins(static_cast<std::size_t>(bs * n)), finals(static_cast<std::size_t>(bs));
  const auto m = [&](const std::vector<std::int64_t>& x) { return specdec::matrix_view<const std::int64_t>(x.data(), bs, n); };
  for (const auto& [single, acc] : {std::pair{1.0f, 1.0f}, std::pair{0.3f, 1.0f}, std::pair{1.0f, 0.5f}}) {
    for (int round = 0; round < 4; ++round) {
      for (auto& c : coins) c = u(g);
      for (auto& c : finals) c = u(g);
      const auto half = specdec::sglang::tree_speculative_sampling_target_only(
          be, m(candidates), m(index), m(next_token), m(next_sibling), specdec::matrix_view<const float>(coins.data(), bs, n),
          std::span<const float>(finals), specdec::matrix_view<const T>(target.data(), bs * n, v), n, single, acc);
      const auto full = specdec::sglang::tree_speculative_sampling_target_only(
          be, m(candidates), m(index), m(next_token), m(next_sibling), specdec::matrix_view<const float>(coins.data(), bs, n),
          std::span<const float>(finals), specdec::matrix_view<const float>(target_f.data(), bs * n, v), n, single, acc);
      CHECK(half.predicts == full.predicts);
      CHECK(half.accept_index == full.accept_index);
      CHECK(half.accept_token_num == full.accept_token_num);
      // The backend form on another team backend writes the same.
      specdec::thrust_backend<specdec::thrust_system::cpp> t;
      std::vector<std::int32_t> predicts(static_cast<std::size_t>(bs * n), -1), accept(static_cast<std::size_t>(bs * n), -1),
          count(static_cast<std::size_t>(bs), 0);
      specdec::sglang::tree_speculative_sampling_target_only(
          t, m(candidates), m(index), m(next_token), m(next_sibling), specdec::matrix_view<const float>(coins.data(), bs, n),
          specdec::vector_view<const float>(finals.data(), bs), specdec::matrix_view<const T>(target.data(), bs * n, v),
          specdec::vector_view<std::int32_t>(predicts.data(), bs * n), specdec::matrix_view<std::int32_t>(accept.data(), bs, n),
          specdec::vector_view<std::int32_t>(count.data(), bs), single, acc);
      CHECK(predicts == full.predicts);
      CHECK(accept == full.accept_index);
      CHECK(count == full.accept_token_num);
    }
  }
}

/// vLLM's rejection_sample (host and backend forms) over T target rows and D draft rows (or none)
/// against the float rows: chains of 0..3 drafts, greedy and random requests mixed.
template <class T, class D>
void check_rejection_sample(index_t v, std::uint32_t seed, bool with_draft) {
  CAPTURE(v);
  CAPTURE(seed);
  CAPTURE(with_draft);
  CAPTURE(specdec::element_name<T>);
  CAPTURE(specdec::element_name<D>);
  specdec::eigen be;
  const std::vector<std::int64_t> cu = {3, 3, 5, 8, 9};
  const index_t batch = 5, tokens = 9, width = 4;
  const auto target = distributions<T>(tokens, v, seed);
  const auto draft = distributions<D>(tokens, v, seed + 5);
  const auto target_f = widened(target), draft_f = widened(draft);
  std::mt19937 g(seed);
  const auto ids = drawn_tokens(draft, tokens, v, g);
  const std::vector<std::int32_t> bonus = {1, 2, 0, static_cast<std::int32_t>(v - 1), 0};
  const std::vector<std::uint8_t> greedy = {0, 0, 1, 0, 0};
  std::vector<double> uniforms(static_cast<std::size_t>(tokens));
  std::vector<float> noise(static_cast<std::size_t>(batch * v));
  std::exponential_distribution<float> expo(1.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int round = 0; round < 6; ++round) {
    for (auto& x : uniforms) x = u(g);
    for (auto& x : noise) x = expo(g);
    const specdec::matrix_view<const float> e(noise.data(), batch, v);
    const auto run = [&](auto target_view, auto draft_view) {
      std::vector<std::int32_t> out(static_cast<std::size_t>(batch * width));
      specdec::vllm::rejection_sample(be, std::span<const std::int32_t>(ids), std::span<const std::int64_t>(cu), width - 1, draft_view,
                                      target_view, std::span<const std::int32_t>(bonus), std::span<const std::uint8_t>(greedy),
                                      std::span<const double>(uniforms), e, specdec::matrix_view<std::int32_t>(out.data(), batch, width));
      std::vector<std::int32_t> team(static_cast<std::size_t>(batch * width));
      specdec::vllm::rejection_sample(be, specdec::vector_view<const std::int32_t>(ids.data(), tokens),
                                      specdec::vector_view<const std::int64_t>(cu.data(), batch), draft_view, target_view,
                                      specdec::vector_view<const std::int32_t>(bonus.data(), batch),
                                      specdec::vector_view<const std::uint8_t>(greedy.data(), batch),
                                      specdec::vector_view<const double>(uniforms.data(), tokens), e,
                                      specdec::matrix_view<std::int32_t>(team.data(), batch, width));
      CHECK(team == out);
      return out;
    };
    const auto half = run(specdec::matrix_view<const T>(target.data(), tokens, v),
                          with_draft ? specdec::matrix_view<const D>(draft.data(), tokens, v) : specdec::matrix_view<const D>{});
    const auto full = run(specdec::matrix_view<const float>(target_f.data(), tokens, v),
                          with_draft ? specdec::matrix_view<const float>(draft_f.data(), tokens, v) : specdec::matrix_view<const float>{});
    CHECK(half == full);
  }
}

}  // namespace test_half

TEST_CASE("half: verify_speculative over bf16 / fp16 target and draft rows gives the float rows' results bit for bit") {
  std::size_t accepted = 0;
  index_t tests = 0;
  for (const index_t v : {index_t{7}, index_t{1000}, index_t{2048 * 3 + 5}})
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      test_half::check_verify_speculative<bfloat16, bfloat16>(v, seed, accepted, tests);
      test_half::check_verify_speculative<float16, float16>(v, seed + 10, accepted, tests);
      test_half::check_verify_speculative<float, bfloat16>(v, seed + 20, accepted, tests);
      test_half::check_verify_speculative<float16, float>(v, seed + 30, accepted, tests);
    }
  // Both outcomes occur often: drafts accepted and drafts rejected.
  CHECK(accepted > 50);
  CHECK(static_cast<index_t>(accepted) + 50 < tests);
}

TEST_CASE("half: SGLang's tree_speculative_sampling_target_only over bf16 / fp16 rows gives the float rows' outputs") {
  for (const index_t v : {index_t{5}, index_t{999}, index_t{1024 * 2 + 17}})
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      test_half::check_sglang<bfloat16>(v, seed);
      test_half::check_sglang<float16>(v, seed + 10);
    }
}

TEST_CASE("half: vLLM's rejection_sample over bf16 / fp16 rows gives the float rows' tokens") {
  for (const index_t v : {index_t{6}, index_t{1001}, index_t{1024 * 3 + 9}})
    for (std::uint32_t seed = 1; seed <= 2; ++seed)
      for (const bool with_draft : {true, false}) {
        test_half::check_rejection_sample<bfloat16, bfloat16>(v, seed, with_draft);
        test_half::check_rejection_sample<float16, float16>(v, seed + 10, with_draft);
        test_half::check_rejection_sample<float, bfloat16>(v, seed + 20, with_draft);
        test_half::check_rejection_sample<float, float16>(v, seed + 30, with_draft);
      }
}

TEST_CASE("half: a 16-bit row read whole may miss 1 by its rounding; beyond it the error says so") {
  namespace sampling = specdec::sampling;
  specdec::eigen be;
  // {0.5, 0.25, 0.25 + 2^-9} sums to 1 + 2^-9: inside bf16's 1e-4 + 2^-8, outside float's 1e-4. The
  // draft token 0 is rejected (p = 0 at node 0's row), so the row is read whole.
  const std::vector<bfloat16> ok = {specdec::to_bfloat16(0.0f), specdec::to_bfloat16(0.5f), specdec::to_bfloat16(0.25f),
                                    specdec::to_bfloat16(0.25f + 0x1p-9f)};
  const std::vector<bfloat16> bad = {specdec::to_bfloat16(0.0f), specdec::to_bfloat16(0.5f), specdec::to_bfloat16(0.25f),
                                     specdec::to_bfloat16(0.2578125f)};  // sums to 1.0078125
  const std::int32_t d[1] = {0};
  const specdec::draft_tree chain = sampling::make_chain(0, d);
  sampling::speculative_request q;
  q.tree = chain;
  q.uniforms = sampling::uniform_stream::philox({1, 0}, 0);
  const std::vector<bfloat16> two_ok = [&] { auto x = ok; x.insert(x.end(), ok.begin(), ok.end()); return x; }();
  const std::vector<bfloat16> two_bad = [&] { auto x = bad; x.insert(x.end(), bad.begin(), bad.end()); return x; }();
  const auto two = [](const std::vector<bfloat16>& x) {
    return sampling::speculative_rows<specdec::host_space, bfloat16>{specdec::matrix_view<const bfloat16>(x.data(), 2, 4)};
  };
  CHECK_NOTHROW(sampling::verify_speculative(be, two(two_ok), std::span(&q, 1)));
  CHECK_THROWS_WITH_AS(sampling::verify_speculative(be, two(two_bad), std::span(&q, 1)),
                       doctest::Contains("target_probs row 0 sums to 1.00781; expected 1 within 0.0001 plus the rounding of its bfloat16 entries"),
                       specdec::invalid_argument);
  const std::vector<float> f = test_half::widened(two_ok);
  CHECK_THROWS_WITH_AS(sampling::verify_speculative(be, sampling::speculative_rows<>{specdec::matrix_view<const float>(f.data(), 2, 4)},
                                                    std::span(&q, 1)),
                       doctest::Contains("target_probs row 0 sums to"), specdec::invalid_argument);
}

namespace test_half {

/// Requests over random trees of n nodes, request r's node i on target row r * n + i: a node's parent
/// is the node before it half the time (deep paths), else any earlier node (wide levels); its token is
/// drawn from its parent's row (widened values, inverse CDF), or every sixth node token 0 (often a zero
/// entry), or a copy of an earlier sibling's token (a repeated candidate). The last request is capped at
/// one accepted draft; every request has a bonus token (vLLM v0's convention reads it).
struct random_requests {
  std::vector<specdec::draft_tree> trees;
  std::vector<specdec::sampling::speculative_request> requests;
};

template <class E>
random_requests random_trees(const std::vector<E>& rows, index_t batch, index_t n, index_t v, std::uint32_t seed) {
  namespace sampling = specdec::sampling;
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  random_requests out;
  out.trees.reserve(static_cast<std::size_t>(batch));  // requests point into the trees
  for (index_t r = 0; r < batch; ++r) {
    std::vector<std::int32_t> tokens = {0}, parents = {-1};
    for (index_t i = 1; i < n; ++i) {
      const auto parent = static_cast<std::int32_t>(g() % 2 == 0 ? i - 1 : static_cast<index_t>(g() % static_cast<std::uint32_t>(i)));
      const E* p = rows.data() + (r * n + parent) * v;
      std::int32_t token = static_cast<std::int32_t>(v - 1);
      double run = 0.0;
      const double target = u(g);
      for (index_t j = 0; j < v; ++j) {
        run += static_cast<double>(specdec::widen(p[j]));
        if (run > target) {
          token = static_cast<std::int32_t>(j);
          break;
        }
      }
      if (i % 6 == 5) token = 0;
      for (index_t s = 1; s < i && i % 4 == 3; ++s)
        if (parents[static_cast<std::size_t>(s)] == parent) token = tokens[static_cast<std::size_t>(s)];
      tokens.push_back(token);
      parents.push_back(parent);
    }
    out.trees.push_back(specdec::make_tree(std::move(tokens), parents));
    sampling::speculative_request q;
    q.tree = out.trees.back();
    q.target_row = r * n;
    q.max_accepted = r == batch - 1 ? 1 : -1;
    q.bonus_token = static_cast<std::int32_t>((r * 7 + 1) % v);
    q.uniforms = sampling::uniform_stream::philox({seed, static_cast<std::uint64_t>(r)}, static_cast<std::uint64_t>(r));
    out.requests.push_back(q);
  }
  return out;
}

/// The output form of a verifier (`run(outputs)`) over rows of one type against another's: every
/// output the same, bit for bit.
template <class Run16, class Run32>
void check_same_outputs(index_t batch, index_t width, index_t v, const Run16& run16, const Run32& run32) {
  struct buffers {
    std::vector<std::int32_t> tokens, accepted, nodes, uniforms, retest;
    std::vector<float> finals;
    specdec::sampling::verify_outputs<> o;
    buffers(index_t batch, index_t width, index_t v)
        : tokens(static_cast<std::size_t>(batch * width)), accepted(static_cast<std::size_t>(batch)),
          nodes(static_cast<std::size_t>(batch * (width - 1))), uniforms(static_cast<std::size_t>(batch)),
          retest(static_cast<std::size_t>(batch)), finals(static_cast<std::size_t>(batch * v), -1.0f) {
      o.tokens = specdec::matrix_view<std::int32_t>(tokens.data(), batch, width);
      o.accepted = specdec::vector_view<std::int32_t>(accepted.data(), batch);
      o.accepted_nodes = specdec::matrix_view<std::int32_t>(nodes.data(), batch, width - 1);
      o.uniforms_consumed = specdec::vector_view<std::int32_t>(uniforms.data(), batch);
      o.retest_accepted = specdec::vector_view<std::int32_t>(retest.data(), batch);
      o.final_distributions = specdec::matrix_view<float>(finals.data(), batch, v);
    }
  };
  buffers half(batch, width, v), full(batch, width, v);
  run16(half.o);
  run32(full.o);
  CHECK(half.tokens == full.tokens);
  CHECK(half.accepted == full.accepted);
  CHECK(half.nodes == full.nodes);
  CHECK(half.uniforms == full.uniforms);
  CHECK(half.retest == full.retest);
  CHECK(std::memcmp(half.finals.data(), full.finals.data(), half.finals.size() * sizeof(float)) == 0);
}

/// verify_coin_tree over E rows (on backend B) against the float rows holding their values: random
/// trees, lossless and lossy thresholds, Philox streams and supplied uniforms, both forms.
template <class E, class B>
void check_coin_tree(index_t v, std::uint32_t seed, std::size_t& accepted_total, index_t& tests_total) {
  namespace sampling = specdec::sampling;
  CAPTURE(v);
  CAPTURE(seed);
  CAPTURE(specdec::element_name<E>);
  B be;
  const index_t batch = 4, n = 7;
  const auto target = distributions<E>(batch * n, v, seed);
  const auto target_f = widened(target);
  random_requests rq = random_trees(target, batch, n, v, seed + 3);
  // One request reads supplied uniforms (n coins and the final draw's).
  std::vector<double> supplied(static_cast<std::size_t>(n + 1));
  std::mt19937 g(seed + 5);
  for (auto& x : supplied) x = std::uniform_real_distribution<double>(0.0, 1.0)(g);
  rq.requests[1].uniforms = sampling::uniform_stream::values(supplied);
  const specdec::matrix_view<const E> half(target.data(), batch * n, v);
  const specdec::matrix_view<const float> full(target_f.data(), batch * n, v);
  sampling::coin_options lossy_single{0.3f, 1.0f, specdec::empty_residual::token_zero, true};
  sampling::coin_options lossy_acc{1.0f, 0.5f, specdec::empty_residual::last_token, true};
  const sampling::coin_options keep{.keep_final_distribution = true};
  for (const auto& options : {keep, sampling::coin_options{}, lossy_single, lossy_acc}) {
    const auto got = sampling::verify_coin_tree(be, half, rq.requests, options);
    for (const auto& r : got) {
      accepted_total += r.accepted_nodes.size();
      tests_total += r.acceptance_tests;
    }
    check_same_results(got, sampling::verify_coin_tree(be, full, rq.requests, options));
    check_same_outputs(
        batch, n, v, [&](const sampling::verify_outputs<>& o) { sampling::verify_coin_tree(be, half, rq.requests, options, o); },
        [&](const sampling::verify_outputs<>& o) { sampling::verify_coin_tree(be, full, rq.requests, options, o); });
  }
  // Coins on the decision boundary: node i's coin is its first child's target probability (accepted,
  // c <= m) or the next double above it (rejected), so an entry read one float ulp off flips a decision.
  const specdec::draft_tree& t = rq.trees[0];
  std::vector<double> edge(static_cast<std::size_t>(n + 1), 0.5);
  for (index_t i = 0; i < n; ++i)
    for (index_t c = i + 1; c < n; ++c)
      if (t.parent[static_cast<std::size_t>(c)] == i) {
        const auto p = static_cast<double>(specdec::widen(target[static_cast<std::size_t>(i * v + t.token[static_cast<std::size_t>(c)])]));
        const double coin = i % 2 == 0 ? p : std::nextafter(p, 2.0);
        if (coin < 1.0) edge[static_cast<std::size_t>(i)] = coin;
        break;
      }
  sampling::speculative_request on_edge = rq.requests[0];
  on_edge.uniforms = sampling::uniform_stream::values(edge);
  for (const auto& options : {keep, lossy_single}) {
    const auto got = sampling::verify_coin_tree(be, half, std::span(&on_edge, 1), options);
    accepted_total += got[0].accepted_nodes.size();
    tests_total += got[0].acceptance_tests;
    check_same_results(got, sampling::verify_coin_tree(be, full, std::span(&on_edge, 1), options));
  }
  // A mutable 16-bit view is taken as it is.
  std::vector<E> mutable_rows = target;
  check_same_results(sampling::verify_coin_tree(be, specdec::matrix_view<E>(mutable_rows.data(), batch * n, v), rq.requests),
                     sampling::verify_coin_tree(be, full, rq.requests));
}

/// verify_typical over E rows (on backend B) against the float rows holding their values: random trees
/// under Medusa's and vLLM v0's conventions, several thresholds, both forms.
template <class E, class B>
void check_typical(index_t v, std::uint32_t seed, std::size_t& accepted_total, std::size_t& rejected_total) {
  namespace sampling = specdec::sampling;
  CAPTURE(v);
  CAPTURE(seed);
  CAPTURE(specdec::element_name<E>);
  B be;
  const index_t batch = 4, n = 7;
  const auto target = distributions<E>(batch * n, v, seed);
  const auto target_f = widened(target);
  const random_requests rq = random_trees(target, batch, n, v, seed + 3);
  const specdec::matrix_view<const E> half(target.data(), batch * n, v);
  const specdec::matrix_view<const float> full(target_f.data(), batch * n, v);
  sampling::typical_options strict{.epsilon = 0.09f, .delta = 3.0f};
  sampling::typical_options loose{.epsilon = 0.01f, .delta = 0.3f};
  sampling::typical_options vllm{.convention = sampling::typical_convention::vllm_v0};
  sampling::typical_options vllm_no_bonus{.epsilon = 0.05f, .convention = sampling::typical_convention::vllm_v0, .emit_bonus = false};
  for (const auto& options : {sampling::typical_options{}, strict, loose, vllm, vllm_no_bonus}) {
    CAPTURE(options.epsilon);
    CAPTURE(options.delta);
    CAPTURE(static_cast<int>(options.convention));
    const auto got = sampling::verify_typical(be, half, rq.requests, options);
    for (std::size_t r = 0; r < got.size(); ++r) {
      accepted_total += got[r].accepted_nodes.size();
      rejected_total += static_cast<std::size_t>(n - 1) - got[r].accepted_nodes.size();
    }
    check_same_results(got, sampling::verify_typical(be, full, rq.requests, options));
    check_same_outputs(
        batch, n, v, [&](const sampling::verify_outputs<>& o) { sampling::verify_typical(be, half, rq.requests, options, o); },
        [&](const sampling::verify_outputs<>& o) { sampling::verify_typical(be, full, rq.requests, options, o); });
  }
  // Thresholds on the decision boundary: with delta huge the threshold is epsilon, set to a root child's
  // probability (rejected: p > epsilon fails) or the float below it (accepted), so an entry read one
  // float ulp off flips a decision.
  for (const auto& q : rq.requests) {
    const index_t child = std::find(q.tree.parent.begin() + 1, q.tree.parent.end(), 0) - q.tree.parent.begin();
    const float p = specdec::widen(target[static_cast<std::size_t>(q.target_row * v + q.tree.token[static_cast<std::size_t>(child)])]);
    if (!(p > 0.0f)) continue;
    for (const float epsilon : {p, std::nextafter(p, 0.0f)}) {
      const sampling::typical_options edge{.epsilon = epsilon, .delta = 3e38f};
      const auto got = sampling::verify_typical(be, half, std::span(&q, 1), edge);
      check_same_results(got, sampling::verify_typical(be, full, std::span(&q, 1), edge));
    }
  }
  // The thresholds themselves: each row's, from the 16-bit entries and from the widened ones.
  for (index_t r = 0; r < batch * n; ++r) {
    const auto a = sampling::typical_row_threshold(target.data() + r * v, v, {});
    const auto b = sampling::typical_row_threshold(target_f.data() + r * v, v, {});
    REQUIRE(std::memcmp(&a.threshold, &b.threshold, sizeof(double)) == 0);
    REQUIRE(std::memcmp(&a.entropy, &b.entropy, sizeof(double)) == 0);
  }
}

/// target_probabilities over E logits against the float logits holding their values: per-row
/// temperatures (greedy included), min-p, top-k and top-p, rows with -inf masks, ties and large values.
template <class E>
void check_target_probabilities(index_t v, std::uint32_t seed) {
  namespace sampling = specdec::sampling;
  CAPTURE(v);
  CAPTURE(seed);
  CAPTURE(specdec::element_name<E>);
  const index_t rows = 6;
  std::vector<E> logits = half_rows<E>(rows, v, seed);
  // Finite maxima of moderate size: exp of a 1e30 bf16 logit's gaps would make every row one-hot.
  for (auto& x : logits)
    if (std::isfinite(specdec::widen(x)) && std::fabs(specdec::widen(x)) > 50.0f) x = specdec::narrow<E>(3.0f);
  logits[static_cast<std::size_t>(v)] = specdec::narrow<E>(40.0f);  // row 1: one dominant token
  const std::vector<float> logits_f = widened(logits);
  const std::vector<sampling::sampling_params> params = {
      {1.0f, 0, 1.0f, 0.0f}, {0.7f, 5, 1.0f, 0.0f}, {0.0f, 0, 1.0f, 0.0f},
      {1.3f, 0, 0.9f, 0.0f}, {1.0f, 0, 1.0f, 0.05f}, {0.9f, std::min<index_t>(v, 40), 0.8f, 0.01f}};
  std::vector<float> half(static_cast<std::size_t>(rows * v), -1.0f), full(half.size(), -2.0f);
  sampling::target_probabilities(specdec::matrix_view<const E>(logits.data(), rows, v), params,
                                 specdec::matrix_view<float>(half.data(), rows, v));
  sampling::target_probabilities(specdec::matrix_view<const float>(logits_f.data(), rows, v), params,
                                 specdec::matrix_view<float>(full.data(), rows, v));
  for (std::size_t i = 0; i < half.size(); ++i) {
    CAPTURE(i);
    REQUIRE(same_bits(half[i], full[i]));
  }
  // One parameter set for every row, from a mutable 16-bit view.
  const sampling::sampling_params one{0.8f, 0, 0.95f, 0.0f};
  sampling::target_probabilities(specdec::matrix_view<E>(logits.data(), rows, v), std::span(&one, 1),
                                 specdec::matrix_view<float>(half.data(), rows, v));
  sampling::target_probabilities(specdec::matrix_view<const float>(logits_f.data(), rows, v), std::span(&one, 1),
                                 specdec::matrix_view<float>(full.data(), rows, v));
  CHECK(std::memcmp(half.data(), full.data(), half.size() * sizeof(float)) == 0);
}

}  // namespace test_half

TEST_CASE("half: verify_coin_tree over bf16 / fp16 target rows gives the float rows' results bit for bit") {
  std::size_t accepted = 0;
  index_t tests = 0;
  for (const index_t v : {index_t{7}, index_t{1001}, index_t{2048 + 13}})
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      test_half::check_coin_tree<bfloat16, specdec::eigen>(v, seed, accepted, tests);
      test_half::check_coin_tree<float16, specdec::eigen>(v, seed + 10, accepted, tests);
      test_half::check_coin_tree<bfloat16, specdec::thrust_backend<specdec::thrust_system::cpp>>(v, seed + 20, accepted, tests);
      test_half::check_coin_tree<float16, specdec::thrust_backend<specdec::thrust_system::cpp>>(v, seed + 30, accepted, tests);
    }
  // Both outcomes occur often: candidates accepted and candidates rejected.
  CHECK(accepted > 50);
  CHECK(static_cast<index_t>(accepted) + 50 < tests);
}

TEST_CASE("half: verify_typical over bf16 / fp16 target rows gives the float rows' results bit for bit") {
  std::size_t accepted = 0, rejected = 0;
  for (const index_t v : {index_t{7}, index_t{1001}, index_t{2048 + 13}})
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      test_half::check_typical<bfloat16, specdec::eigen>(v, seed, accepted, rejected);
      test_half::check_typical<float16, specdec::eigen>(v, seed + 10, accepted, rejected);
      test_half::check_typical<bfloat16, specdec::thrust_backend<specdec::thrust_system::cpp>>(v, seed + 20, accepted, rejected);
      test_half::check_typical<float16, specdec::thrust_backend<specdec::thrust_system::cpp>>(v, seed + 30, accepted, rejected);
    }
  CHECK(accepted > 50);
  CHECK(rejected > 50);
}

TEST_CASE("half: target_probabilities over bf16 / fp16 logits gives the float logits' probabilities bit for bit") {
  for (const index_t v : {index_t{5}, index_t{999}, index_t{4096 + 3}})
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      test_half::check_target_probabilities<bfloat16>(v, seed);
      test_half::check_target_probabilities<float16>(v, seed + 10);
    }
}

TEST_CASE("half: verify_coin_tree and verify_typical refuse a 16-bit row that is not a distribution, naming it and the rounding") {
  namespace sampling = specdec::sampling;
  specdec::eigen be;
  // {0, 0.5, 0.25, 0.25 + 2^-9} sums to 1 + 2^-9: inside bf16's 1e-4 + 2^-8, outside float's 1e-4; the
  // bad row sums to 1.0078125, outside both. Token 0 has p = 0: the coin walk rejects it and reads the
  // row whole; the typical walk rejects it after checking the row whole.
  const auto row = [](float last) {
    std::vector<bfloat16> x = {specdec::to_bfloat16(0.0f), specdec::to_bfloat16(0.5f), specdec::to_bfloat16(0.25f),
                               specdec::to_bfloat16(last)};
    x.insert(x.end(), x.begin(), x.end());
    return x;
  };
  const std::vector<bfloat16> ok = row(0.25f + 0x1p-9f), bad = row(0.2578125f);
  const std::int32_t d[1] = {0};
  const specdec::draft_tree chain = sampling::make_chain(0, d);
  sampling::speculative_request q;
  q.tree = chain;
  q.uniforms = sampling::uniform_stream::philox({1, 0}, 0);
  const auto view = [](const std::vector<bfloat16>& x) { return specdec::matrix_view<const bfloat16>(x.data(), 2, 4); };
  CHECK_NOTHROW(sampling::verify_coin_tree(be, view(ok), std::span(&q, 1)));
  CHECK_NOTHROW(sampling::verify_typical(be, view(ok), std::span(&q, 1)));
  const char* message = "target_probs row 0 sums to 1.00781; expected 1 within 0.0001 plus the rounding of its bfloat16 entries";
  CHECK_THROWS_WITH_AS(sampling::verify_coin_tree(be, view(bad), std::span(&q, 1)), doctest::Contains(message),
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::verify_typical(be, view(bad), std::span(&q, 1)), doctest::Contains(message),
                       specdec::invalid_argument);
  // The float rows of the accepted bf16 values miss 1 by more than float's tolerance.
  const std::vector<float> f = test_half::widened(ok);
  const specdec::matrix_view<const float> fv(f.data(), 2, 4);
  CHECK_THROWS_WITH_AS(sampling::verify_typical(be, fv, std::span(&q, 1)), doctest::Contains("target_probs row 0 sums to"),
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::verify_coin_tree(be, fv, std::span(&q, 1)), doctest::Contains("target_probs row 0 sums to"),
                       specdec::invalid_argument);
  // fp16: an entry above 1, named by row and column; a row summing to 1.5, with fp16's rounding named.
  const std::vector<float16> above = {specdec::narrow<float16>(0.0f), specdec::narrow<float16>(1.5f), specdec::narrow<float16>(0.0f),
                                      specdec::narrow<float16>(0.0f)};
  const std::vector<float16> heavy = {specdec::narrow<float16>(0.0f), specdec::narrow<float16>(0.75f), specdec::narrow<float16>(0.75f),
                                      specdec::narrow<float16>(0.0f)};
  const auto h = [](const std::vector<float16>& x) { return specdec::matrix_view<const float16>(x.data(), 1, 4); };
  const specdec::draft_tree root = specdec::make_tree(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{-1});
  sampling::speculative_request leaf;
  leaf.tree = root;
  leaf.uniforms = sampling::uniform_stream::philox({2, 0}, 0);
  CHECK_THROWS_WITH_AS(sampling::verify_typical(be, h(above), std::span(&leaf, 1)), doctest::Contains("target_probs[0, 1] = 1.5"),
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::verify_coin_tree(be, h(above), std::span(&leaf, 1)), doctest::Contains("target_probs[0, 1] = 1.5"),
                       specdec::invalid_argument);
  const char* fp16_message = "target_probs row 0 sums to 1.5; expected 1 within 0.0001 plus the rounding of its float16 entries";
  CHECK_THROWS_WITH_AS(sampling::verify_typical(be, h(heavy), std::span(&leaf, 1)), doctest::Contains(fp16_message),
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::verify_coin_tree(be, h(heavy), std::span(&leaf, 1)), doctest::Contains(fp16_message),
                       specdec::invalid_argument);
  // target_probabilities: a NaN or +inf 16-bit logit is refused, naming the logit.
  const std::vector<bfloat16> nan_logits = {specdec::to_bfloat16(1.0f), specdec::to_bfloat16(std::numeric_limits<float>::quiet_NaN())};
  const std::vector<float16> inf_logits = {specdec::narrow<float16>(std::numeric_limits<float>::infinity()),
                                           specdec::narrow<float16>(1.0f)};
  std::vector<float> probs(2);
  const sampling::sampling_params plain;
  CHECK_THROWS_WITH_AS(sampling::target_probabilities(specdec::matrix_view<const bfloat16>(nan_logits.data(), 1, 2), std::span(&plain, 1),
                                                      specdec::matrix_view<float>(probs.data(), 1, 2)),
                       doctest::Contains("logits[0, 1] = nan"), specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::target_probabilities(specdec::matrix_view<const float16>(inf_logits.data(), 1, 2), std::span(&plain, 1),
                                                      specdec::matrix_view<float>(probs.data(), 1, 2)),
                       doctest::Contains("logits[0, 0] = inf"), specdec::invalid_argument);
}

TEST_CASE("half: vLLM's apply_sampling_constraints over bf16 / fp16 logits is the float path on the rounded quotients") {
  const auto check = [](auto tag) {
    using E = decltype(tag);
    CAPTURE(specdec::element_name<E>);
    for (const index_t v : {index_t{5}, index_t{300}, index_t{4099}}) {
      const std::vector<std::int64_t> cu = {2, 2, 5, 6};
      const index_t tokens = 6;
      auto h = test_half::half_rows<E>(tokens, v, static_cast<std::uint32_t>(v));
      // Finite logits of moderate size: fp16's 6e4 divided by 0.7 overflows to +inf, which the filter
      // refuses (as a float +inf logit).
      for (auto& x : h)
        if (!(std::fabs(specdec::widen(x)) < 1e4f)) x = specdec::narrow<E>(-5.0f);
      const std::vector<float> temperature = {0.7f, 1.3f, 0.0f, 2.0f};
      const std::vector<std::int64_t> top_k = {3, 1, v, 7};
      const std::vector<float> top_p = {0.9f, 1.0f, 0.5f, 0.95f};
      // The float reference: the rows divided by their temperature and rounded to E, as the 16-bit path
      // stores them, then filtered at temperature 1.
      std::vector<float> ref(h.size());
      for (index_t i = 0; i < tokens; ++i) {
        const index_t r = i < 2 ? 0 : i < 5 ? 2 : 3;
        const float t = temperature[static_cast<std::size_t>(r)] == 0.0f ? 1.0f : temperature[static_cast<std::size_t>(r)];
        for (index_t j = 0; j < v; ++j)
          ref[static_cast<std::size_t>(i * v + j)] = specdec::widen(specdec::narrow<E>(specdec::widen(h[static_cast<std::size_t>(i * v + j)]) / t));
      }
      const std::vector<float> ones(4, 1.0f);
      specdec::vllm::apply_sampling_constraints(specdec::matrix_view<float>(ref.data(), tokens, v), cu, ones, top_k, top_p);
      specdec::vllm::apply_sampling_constraints(specdec::matrix_view<E>(h.data(), tokens, v), cu, temperature, top_k, top_p);
      const auto got = test_half::widened(h);
      for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(test_half::same_bits(got[i], ref[i]));
    }
    std::vector<E> nan_row = {specdec::narrow<E>(1.0f), specdec::narrow<E>(std::numeric_limits<float>::quiet_NaN())};
    CHECK_THROWS_WITH_AS(specdec::vllm::apply_top_k_top_p(std::span<E>(nan_row), 1, 0.5f), doctest::Contains("logit 1 is nan"),
                         specdec::invalid_argument);
  };
  check(bfloat16{});
  check(float16{});
}
