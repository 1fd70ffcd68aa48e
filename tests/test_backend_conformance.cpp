// SPDX-License-Identifier: Apache-2.0
#include "backend_conformance.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>

#define SPECDEC_TEST_BACKENDS SPECDEC_ALL_BACKENDS

using namespace conformance;
using specdec::empty_residual;
namespace ref = specdec::reference;

namespace {

/// Adversarial logits: ties everywhere, -inf masks, the maximum in the first and the last entry.
matrix adversarial_logits(index_t cols) {
  const float ninf = -INFINITY;
  matrix m{6, cols, std::vector<float>(static_cast<std::size_t>(6 * cols), 0.0f)};
  auto at = [&](index_t r, index_t j) -> float& { return m.data[static_cast<std::size_t>(r * cols + j)]; };
  for (index_t j = 0; j < cols; ++j) {
    at(0, j) = 1.0f;                                     // all tied
    at(1, j) = static_cast<float>(j % 3);                // repeated maxima, earliest wins
    at(2, j) = j % 2 == 0 ? ninf : static_cast<float>(-j);  // half masked
    at(3, j) = ninf;                                     // fully masked (argmax/top-k only)
    at(4, j) = static_cast<float>(j % 7) - 3.0f;
    at(5, j) = static_cast<float>(j % 5);
  }
  at(4, cols - 1) = 100.0f;  // unique maximum in the last entry
  at(5, 0) = 100.0f;         // and in the first
  return m;
}

/// Logits whose magnitude stresses the exponential's range reduction: a large positive or negative
/// offset (at temperature 0.01 the scaled maximum is ~1.4e6 in row 0 and ~5e6 in row 1, beyond
/// the vector path's range), most terms far below 2^-125 of the maximum (row 3), and -inf masks.
matrix extreme_logits(std::uint64_t seed, index_t cols) {
  matrix m = random_logits(seed, 5, cols);
  auto at = [&](index_t r, index_t j) -> float& { return m.data[static_cast<std::size_t>(r * cols + j)]; };
  for (index_t j = 0; j < cols; ++j) {
    at(0, j) += 1.0e4f;
    at(1, j) += 3.5e4f;
    at(2, j) -= 1.0e5f;
    at(3, j) = j % 10 == 0 ? at(3, j) : -1.0e4f - static_cast<float>(j);
    if (j % 3 == 1) at(4, j) = -INFINITY;
  }
  return m;
}

template <class B>
void check_argmax(harness<B>& h, const matrix& x) {
  auto in = h.up(x.data);
  auto idx = h.b.template allocate<std::int32_t>(x.rows);
  auto val = h.b.template allocate<float>(x.rows);
  auto mx = h.b.template allocate<float>(x.rows);
  h.b.row_argmax(in.matrix(x.rows, x.cols), idx.view(), val.view());
  h.b.row_max(in.matrix(x.rows, x.cols), mx.view());
  const auto got_idx = h.down(idx);
  const auto got_val = h.down(val);
  const auto got_max = h.down(mx);
  for (index_t r = 0; r < x.rows; ++r) {
    const auto want = ref::argmax(x.row(r), x.cols);
    INFO("row ", r, " V ", x.cols);
    CHECK(got_idx[static_cast<std::size_t>(r)] == want);
    // Bit for bit: a zero maximum has the sign of the entry at the argmax.
    CHECK(std::bit_cast<std::uint32_t>(got_val[static_cast<std::size_t>(r)]) == std::bit_cast<std::uint32_t>(x(r, want)));
    CHECK(std::bit_cast<std::uint32_t>(got_max[static_cast<std::size_t>(r)]) == std::bit_cast<std::uint32_t>(x(r, want)));
  }
}

template <class B>
void check_topk(harness<B>& h, const matrix& x, index_t k) {
  auto in = h.up(x.data);
  auto vals = h.b.template allocate<float>(x.rows * k);
  auto ids = h.b.template allocate<std::int32_t>(x.rows * k);
  h.b.row_topk(in.matrix(x.rows, x.cols), k, vals.matrix(x.rows, k), ids.matrix(x.rows, k));
  const auto got_vals = h.down(vals);
  const auto got_ids = h.down(ids);
  for (index_t r = 0; r < x.rows; ++r) {
    const auto want = ref::topk(x.row(r), x.cols, k);
    for (index_t i = 0; i < k; ++i) {
      const auto at = static_cast<std::size_t>(r * k + i);
      if (got_ids[at] != want[static_cast<std::size_t>(i)]) {
        INFO("row ", r, " rank ", i, " V ", x.cols, " k ", k);
        REQUIRE(got_ids[at] == want[static_cast<std::size_t>(i)]);
      }
      REQUIRE(got_vals[at] == x(r, want[static_cast<std::size_t>(i)]));
    }
  }
}

template <class B>
void check_normalisers(harness<B>& h, const matrix& x, float t) {
  auto in = h.up(x.data);
  const index_t n = x.rows * x.cols;
  auto lse = h.b.template allocate<float>(x.rows);
  auto sm = h.b.template allocate<float>(n);
  auto lsm = h.b.template allocate<float>(n);
  h.b.row_logsumexp(in.matrix(x.rows, x.cols), t, lse.view());
  h.b.row_softmax(in.matrix(x.rows, x.cols), t, sm.matrix(x.rows, x.cols));
  h.b.row_log_softmax(in.matrix(x.rows, x.cols), t, lsm.matrix(x.rows, x.cols));
  std::vector<double> want_lse, want_sm, want_lsm;
  for (index_t r = 0; r < x.rows; ++r) {
    const double l = ref::logsumexp(x.row(r), x.cols, t);
    want_lse.push_back(l);
    for (index_t j = 0; j < x.cols; ++j) {
      want_lsm.push_back(static_cast<double>(x(r, j)) / t - l);
      want_sm.push_back(std::exp(static_cast<double>(x(r, j)) / t - l));
    }
  }
  // fp32 arithmetic over up to 2^18 terms: 2e-6 relative on the log-sum-exp, and the softmax is
  // exp of an fp32 value of magnitude <= ~40, whose rounding error is ~4e-6 relative.
  check_close(h.down(lse), want_lse, 1e-6, 2e-6, "lse");
  check_close(h.down(lsm), want_lsm, 1e-5, 2e-6, "log_softmax");
  check_close(h.down(sm), want_sm, 1e-9, 1e-5, "softmax");
}


template <class B>
void check_fused(harness<B>& h, const matrix& x, index_t k, float t) {
  auto in = h.up(x.data);
  auto vals = h.b.template allocate<float>(x.rows * k);
  auto ids = h.b.template allocate<std::int32_t>(x.rows * k);
  auto lse = h.b.template allocate<float>(x.rows);
  h.b.row_topk_logsumexp(in.matrix(x.rows, x.cols), k, t, vals.matrix(x.rows, k), ids.matrix(x.rows, k), lse.view());
  const auto got_ids = h.down(ids);
  std::vector<double> want_vals, want_lse;
  for (index_t r = 0; r < x.rows; ++r) {
    const double l = ref::logsumexp(x.row(r), x.cols, t);
    want_lse.push_back(l);
    const auto want = ref::topk(x.row(r), x.cols, k);
    for (index_t i = 0; i < k; ++i) {
      REQUIRE(got_ids[static_cast<std::size_t>(r * k + i)] == want[static_cast<std::size_t>(i)]);
      want_vals.push_back(static_cast<double>(x(r, want[static_cast<std::size_t>(i)])) / t - l);
    }
  }
  check_close(h.down(lse), want_lse, 1e-6, 2e-6, "lse");
  check_close(h.down(vals), want_vals, 1e-5, 2e-6, "log-probabilities");
}

/// Drops row 3 (the fully masked one) of adversarial_logits: it has no log-softmax.
matrix without_masked_row(const matrix& x) {
  matrix y{x.rows - 1, x.cols, {}};
  for (index_t r = 0; r < x.rows; ++r)
    if (r != 3) y.data.insert(y.data.end(), x.row(r), x.row(r) + x.cols);
  return y;
}

template <class B>
std::vector<std::int32_t> run_sample(harness<B>& h, const matrix& p, const std::vector<float>& u) {
  auto in = h.up(p.data);
  auto uni = h.up(u);
  auto tok = h.b.template allocate<std::int32_t>(p.rows);
  h.b.row_sample(in.matrix(p.rows, p.cols), specdec::vector_view<const float, typename B::memory_space>(uni.view()),
                 tok.view());
  return h.down(tok);
}

template <class B>
std::vector<std::int32_t> run_residual(harness<B>& h, const matrix& p, const matrix& q, const std::vector<float>& u,
                                       empty_residual fallback = empty_residual::sample_target) {
  auto pin = h.up(p.data);
  auto qin = h.up(q.data);
  auto uni = h.up(u);
  auto tok = h.b.template allocate<std::int32_t>(p.rows);
  h.b.row_sample_residual(pin.matrix(p.rows, p.cols), qin.matrix(q.rows, q.cols),
                          specdec::vector_view<const float, typename B::memory_space>(uni.view()), tok.view(), fallback);
  return h.down(tok);
}

std::vector<double> row_as_double(const matrix& m, index_t r) { return std::vector<double>(m.row(r), m.row(r) + m.cols); }

}  // namespace

TEST_CASE_TEMPLATE("row_argmax and row_max match the reference", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  for (index_t v : {1, 2, 7, 100, 4097, 32000}) check_argmax(h, random_logits(10 + v, 5, v));
  for (index_t v : {1, 3, 64, 2049, 262144}) check_argmax(h, adversarial_logits(v));
  SUBCASE("a zero maximum: +0 first, then -0 and +0 across lanes and chunks") {
    for (index_t v : {9, 70, 5000}) {
      matrix x = random_logits(4, 2, v);
      for (index_t j = 0; j < v; ++j) {
        x.data[static_cast<std::size_t>(j)] = j == 0 ? -1.0f : (j % 2 == 0 ? -0.0f : 0.0f);
        x.data[static_cast<std::size_t>(v + j)] = j == 0 ? -1.0f : (j % 2 == 0 ? 0.0f : -0.0f);
      }
      check_argmax(h, x);
    }
  }
  SUBCASE("V = 262144, max at the very end and tied at the start") {
    matrix x = random_logits(3, 2, 262144);
    x.data[262143] = 9.0f;
    x.data[262144] = 9.0f;
    x.data[2 * 262144 - 1] = 9.0f;
    check_argmax(h, x);
  }
}

TEST_CASE_TEMPLATE("row_topk matches the reference, ties to the lower index", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  for (index_t k : {1, 8, 64}) check_topk(h, random_logits(20 + k, 4, 32000), k);
  for (index_t k : {1, 5, 32, 33, 64, 65, 300}) check_topk(h, adversarial_logits(5000), k);
  SUBCASE("k = V") {
    for (index_t v : {1, 2, 17, 300}) check_topk(h, adversarial_logits(v), v);
    check_topk(h, random_logits(5, 2, 5000), 5000);
  }
  SUBCASE("V = 262144") {
    check_topk(h, random_logits(6, 2, 262144), 8);
    check_topk(h, adversarial_logits(262144), 64);
  }
  SUBCASE("k = V = 262144") { check_topk(h, random_logits(7, 1, 262144), 262144); }
  SUBCASE("few distinct values: many exact ties straddle the k-th place") {
    matrix x = random_logits(8, 3, 20000);
    for (float& v : x.data) v = std::round(v);
    for (index_t k : {1, 8, 64, 500}) check_topk(h, x, k);
  }
}


/// Rows that stress the block-maxima top-k (k > 32 with at least 2k blocks of 64 on the host):
/// a partial last block holding the maximum, a floor that many entries tie with, a floor of -inf,
/// negative values only, signed zeros, and candidates far beyond the ranking buffer.
matrix block_topk_logits(index_t cols) {
  matrix m = random_logits(90, 7, cols);
  auto at = [&](index_t r, index_t j) -> float& { return m.data[static_cast<std::size_t>(r * cols + j)]; };
  for (index_t j = 0; j < cols; ++j) {
    at(1, j) = std::round(at(1, j) * 4.0f) / 4.0f;        // 65 distinct values: ties at the floor
    at(2, j) = j % 997 == 0 ? at(2, j) : -INFINITY;       // 33 finite: a floor of -inf for k > 33
    at(3, j) = -100.0f - std::fabs(at(3, j));             // negative only
    at(4, j) = j % 3 == 0 ? -0.0f : (j % 3 == 1 ? 0.0f : -1.0f);  // +-0 tie with one another
    at(5, j) = j % 64 == 5 ? 3.0f : at(5, j) - 10.0f;     // one equal maximum per block
    at(6, j) = static_cast<float>((j * 7919) % 1000) / 100.0f;  // every value repeated cols / 1000 times
  }
  at(0, cols - 1) = 50.0f;  // the maximum in the partial last block
  at(0, cols - 2) = 40.0f;
  return m;
}

TEST_CASE_TEMPLATE("row_topk by block maxima: ties at the floor, masks, signed zeros, partial blocks", B,
                   SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  const matrix x = block_topk_logits(32000 + 37);
  for (index_t k : {33, 64, 100, 256}) check_topk(h, x, k);
  check_fused(h, x, 64, 1.0f);  // row 2's top-k holds -inf log-probabilities
  check_fused(h, x, 256, 0.5f);
  SUBCASE("the fused scan's running reference: rising rows, a masked prefix, the maximum in the tail") {
    const index_t cols = 32000 + 37;
    matrix y = random_logits(92, 4, cols);
    for (index_t j = 0; j < cols; ++j) {
      y.data[static_cast<std::size_t>(j)] = 0.01f * static_cast<float>(j) - 100.0f;  // raised every few chunks
      if (j < 5000) y.data[static_cast<std::size_t>(cols + j)] = -INFINITY;
      y.data[static_cast<std::size_t>(3 * cols + j)] -= 200.0f;
    }
    y.data[static_cast<std::size_t>(3 * cols + cols - 3)] = 100.0f;  // 300 above the rest, in the last partial block
    for (const float t : {1.0f, 0.05f}) {
      check_fused(h, y, 8, t);
      check_fused(h, y, 64, t);
    }
  }
  SUBCASE("NaN or +inf anywhere in the row is reported") {
    for (const index_t at : {index_t{0}, index_t{8}, index_t{63}, index_t{64 * 100 + 17}, index_t{32000 + 36}}) {
      // NaNs with payloads too: the fused scan finds a NaN by its NaN sum, and an exponent added to
      // a NaN's bits as an integer once turned some payloads into finite numbers.
      for (const float bad : {NAN, INFINITY, std::bit_cast<float>(0x7FC00155u), std::bit_cast<float>(0xFF8001FFu)}) {
        matrix y = random_logits(91, 2, 32000 + 37);
        y.data[static_cast<std::size_t>(32000 + 37 + at)] = bad;
        auto in = h.up(y.data);
        auto vals = h.b.template allocate<float>(2 * 64);
        auto ids = h.b.template allocate<std::int32_t>(2 * 64);
        auto lse = h.b.template allocate<float>(2);
        INFO("at ", at, " value ", bad);
        CHECK_THROWS_AS(h.b.row_topk(in.matrix(2, y.cols), 64, vals.matrix(2, 64), ids.matrix(2, 64)),
                        specdec::invalid_argument);
        CHECK_THROWS_AS(h.b.row_topk_logsumexp(in.matrix(2, y.cols), 64, 1.0f, vals.matrix(2, 64), ids.matrix(2, 64),
                                               lse.view()),
                        specdec::invalid_argument);
      }
    }
  }
}

#if SPECDEC_HOST_SIMD
TEST_CASE("kth_largest_floor is at most the k-th largest, and at most 7 values above it are not among the k") {
  const auto check = [](std::vector<float> v, index_t k) {
    const auto m = static_cast<index_t>(v.size());
    const float largest = *std::max_element(v.begin(), v.end());
    v.resize(v.size() + 8, -INFINITY);  // the padding kth_largest_floor reads
    const float floor = specdec::detail::kth_largest_floor(v.data(), m, k, largest);
    v.resize(static_cast<std::size_t>(m));
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const float kth = sorted[static_cast<std::size_t>(k - 1)];
    INFO("size ", v.size(), " k ", k, " k-th ", kth, " floor ", floor);
    REQUIRE(floor <= kth);
    const auto reaching = std::count_if(v.begin(), v.end(), [&](float e) { return e >= floor; });
    CHECK((floor == kth || reaching <= k + 7));
  };
  for (index_t k : {1, 8, 64, 500}) {
    check(uniform_floats(1, 500, -4.0f, 4.0f), k);
    check(uniform_floats(2, 500, 3.9f, 4.0f), k);       // close values: deep in the mantissa
    check(uniform_floats(3, 500, -1e6f, -1e5f), k);     // negative keys
    check(uniform_floats(4, 500, -1e-30f, 1e-30f), k);  // both signs around 0
    std::vector<float> masked = uniform_floats(5, 500, -4.0f, 4.0f);
    for (std::size_t i = 0; i < masked.size(); ++i)
      if (i % 5 != 0) masked[i] = -INFINITY;
    check(masked, k);  // k beyond the finite values: the floor is -inf
    check(std::vector<float>(500, 2.5f), k);
    std::vector<float> zeros(500, 0.0f);
    for (std::size_t i = 0; i < zeros.size(); i += 2) zeros[i] = -0.0f;
    check(zeros, k);
  }
}
#endif

TEST_CASE_TEMPLATE("row_topk_logsumexp equals top-k of log-softmax and the log-sum-exp", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  for (const float t : {1.0f, 0.7f, 2.0f}) {
    for (index_t k : {1, 8, 64}) check_fused(h, random_logits(30 + k, 3, 70000), k, t);
    check_fused(h, without_masked_row(adversarial_logits(3000)), 100, t);
    check_fused(h, without_masked_row(adversarial_logits(300)), 300, t);
  }
  for (const float t : {1.0f, 0.01f}) check_fused(h, extreme_logits(46, 4999), 8, t);
}

TEST_CASE_TEMPLATE("row_logsumexp, row_softmax, row_log_softmax match the reference", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  for (const float t : {1.0f, 0.5f, 1.7f}) {
    for (index_t v : {1, 5, 4096, 4097, 32000}) check_normalisers(h, random_logits(40 + v, 3, v), t);
    check_normalisers(h, without_masked_row(adversarial_logits(9000)), t);
  }
  check_normalisers(h, random_logits(41, 2, 262144), 1.0f);
  for (const float t : {1.0f, 0.01f}) {
    for (index_t v : {7, 4999}) check_normalisers(h, extreme_logits(45 + v, v), t);
  }

  SUBCASE("temperature 0 is the greedy limit: one-hot at the lowest argmax") {
    const matrix x = without_masked_row(adversarial_logits(50));
    auto in = h.up(x.data);
    auto sm = h.b.template allocate<float>(x.rows * x.cols);
    auto lsm = h.b.template allocate<float>(x.rows * x.cols);
    h.b.row_softmax(in.matrix(x.rows, x.cols), 0.0f, sm.matrix(x.rows, x.cols));
    h.b.row_log_softmax(in.matrix(x.rows, x.cols), 0.0f, lsm.matrix(x.rows, x.cols));
    const auto got_sm = h.down(sm);
    const auto got_lsm = h.down(lsm);
    for (index_t r = 0; r < x.rows; ++r) {
      const auto best = ref::argmax(x.row(r), x.cols);
      for (index_t j = 0; j < x.cols; ++j) {
        const auto at = static_cast<std::size_t>(r * x.cols + j);
        CHECK(got_sm[at] == (j == best ? 1.0f : 0.0f));
        CHECK(got_lsm[at] == (j == best ? 0.0f : -INFINITY));
      }
    }
  }
  SUBCASE("an all -inf row has log-sum-exp -inf, and no softmax") {
    const matrix x{1, 10, std::vector<float>(10, -INFINITY)};
    auto in = h.up(x.data);
    auto lse = h.b.template allocate<float>(1);
    h.b.row_logsumexp(in.matrix(1, 10), 1.0f, lse.view());
    CHECK(h.down(lse)[0] == -INFINITY);
    auto sm = h.b.template allocate<float>(10);
    CHECK_THROWS_WITH_AS(h.b.row_softmax(in.matrix(1, 10), 1.0f, sm.matrix(1, 10)),
                         doctest::Contains("logits row 0 is entirely -inf"), specdec::invalid_argument);
  }
  SUBCASE("softmax in place") {
    matrix x = random_logits(44, 2, 3000);
    auto buf = h.up(x.data);
    h.b.row_softmax(buf.matrix(2, 3000), 1.0f, buf.matrix(2, 3000));
    std::vector<double> want;
    for (index_t r = 0; r < 2; ++r) {
      const double l = ref::logsumexp(x.row(r), 3000, 1.0);
      for (index_t j = 0; j < 3000; ++j) want.push_back(std::exp(x(r, j) - l));
    }
    check_close(h.down(buf), want, 1e-9, 1e-5, "in-place softmax");
  }
}

TEST_CASE_TEMPLATE("row_sample is the inverse CDF of the reference, token for token", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  for (index_t v : {1, 2, 1000, 1025, 32000, 262144}) {
    const index_t rows = v > 100000 ? 4 : 64;
    const matrix p = random_probs(50 + v, rows, v);
    const auto u = uniform_floats(60 + v, static_cast<std::size_t>(rows), 0.0f, 1.0f);
    const auto got = run_sample(h, p, u);
    for (index_t r = 0; r < rows; ++r)
      CHECK(got[static_cast<std::size_t>(r)] == ref::sample(row_as_double(p, r), u[static_cast<std::size_t>(r)]));
  }
  SUBCASE("dyadic boundaries, zeros and the extremes of u") {
    // Exact in binary: the running sums hit 0.25, 0.5, 0.75 exactly, so the strict ">" decides.
    const matrix p{6, 8, {0, 0.25f, 0, 0.25f, 0.25f, 0, 0.25f, 0,  //
                          0, 0.25f, 0, 0.25f, 0.25f, 0, 0.25f, 0,  //
                          0, 0.25f, 0, 0.25f, 0.25f, 0, 0.25f, 0,  //
                          0, 0.25f, 0, 0.25f, 0.25f, 0, 0.25f, 0,  //
                          0, 0, 0, 0, 0, 0, 0, 1,                  //
                          1, 0, 0, 0, 0, 0, 0, 0}};
    const std::vector<float> u = {0.0f, 0.25f, 0.5f, 1.0f - 0x1p-24f, 0.3f, 1.0f - 0x1p-24f};
    CHECK(run_sample(h, p, u) == std::vector<std::int32_t>{1, 3, 4, 6, 7, 0});
  }
  SUBCASE("a large row: the boundary between chunks") {
    matrix p{1, 4096, std::vector<float>(4096, 0.0f)};
    p.data[1023] = 0.5f;  // last entry of chunk 0
    p.data[1024] = 0.5f;  // first entry of chunk 1
    CHECK(run_sample(h, p, {0.49f}) == std::vector<std::int32_t>{1023});
    CHECK(run_sample(h, p, {0.5f}) == std::vector<std::int32_t>{1024});
  }
}

TEST_CASE_TEMPLATE("row_sample draws from the distribution (chi-square)", B, SPECDEC_TEST_BACKENDS) {
  // 40 000 draws from a 10-token distribution with Philox uniforms. Under the null hypothesis the
  // statistic is chi-square with 9 degrees of freedom: P(X > 27.88) = 0.001.
  harness<B> h;
  const std::vector<float> probs = {0.3f, 0.2f, 0.15f, 0.1f, 0.08f, 0.07f, 0.05f, 0.03f, 0.015f, 0.005f};
  const index_t n = 40000;
  matrix p{n, 10, {}};
  for (index_t r = 0; r < n; ++r) p.data.insert(p.data.end(), probs.begin(), probs.end());
  std::vector<float> u(static_cast<std::size_t>(n));
  specdec::philox_stream{2024, 0}.fill_uniforms(0, u.size(), u.begin());
  const auto tokens = run_sample(h, p, u);
  std::vector<double> counts(10, 0.0);
  for (auto t : tokens) counts[static_cast<std::size_t>(t)] += 1;
  double chi2 = 0;
  for (std::size_t j = 0; j < 10; ++j) {
    const double expected = n * static_cast<double>(probs[j]);
    chi2 += (counts[j] - expected) * (counts[j] - expected) / expected;
  }
  CHECK(chi2 < 27.88);
}

TEST_CASE_TEMPLATE("row_sample_residual samples norm(max(0, p - q))", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  for (index_t v : {1, 3, 1000, 1025, 32000, 262144}) {
    const index_t rows = v > 100000 ? 4 : 32;
    const matrix p = random_probs(70 + v, rows, v);
    const matrix q = random_probs(80 + v, rows, v);
    const auto u = uniform_floats(90 + v, static_cast<std::size_t>(rows), 0.0f, 1.0f);
    const auto got = run_residual(h, p, q, u);
    for (index_t r = 0; r < rows; ++r) {
      auto res = ref::residual(p.row(r), q.row(r), v);
      double total = 0;
      for (double x : res) total += x;
      const auto want = total > 0 ? ref::sample(res, u[static_cast<std::size_t>(r)])
                                  : ref::sample(row_as_double(p, r), u[static_cast<std::size_t>(r)]);
      CHECK(got[static_cast<std::size_t>(r)] == want);
    }
  }
  SUBCASE("the residual excludes what q already covers") {
    const matrix p{1, 4, {0.5f, 0.25f, 0.25f, 0.0f}};
    const matrix q{1, 4, {0.5f, 0.0f, 0.25f, 0.25f}};  // residual = {0, 0.25, 0, 0}
    for (float u : {0.0f, 0.5f, 0.999f}) CHECK(run_residual(h, p, q, {u}) == std::vector<std::int32_t>{1});
  }
  SUBCASE("p == q: the empty residual falls back as asked") {
    const matrix p{1, 4, {0.0f, 0.5f, 0.5f, 0.0f}};
    CHECK(run_residual(h, p, p, {0.75f}, empty_residual::sample_target) == std::vector<std::int32_t>{2});
    CHECK(run_residual(h, p, p, {0.75f}, empty_residual::token_zero) == std::vector<std::int32_t>{0});
    CHECK(run_residual(h, p, p, {0.75f}, empty_residual::last_token) == std::vector<std::int32_t>{3});
  }
}

TEST_CASE_TEMPLATE("gather_rows and gather_elements", B, SPECDEC_TEST_BACKENDS) {
  harness<B> h;
  const matrix x = random_logits(100, 5, 7);
  auto in = h.up(x.data);
  const std::vector<std::int32_t> row_ids = {4, 0, 4, 2};
  auto ids = h.up(row_ids);
  auto rows_out = h.b.template allocate<float>(4 * 7);
  h.b.gather_rows(in.matrix(5, 7), specdec::vector_view<const std::int32_t, typename B::memory_space>(ids.view()),
                  rows_out.matrix(4, 7));
  const auto got_rows = h.down(rows_out);
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 7; ++j) CHECK(got_rows[static_cast<std::size_t>(i * 7 + j)] == x(row_ids[static_cast<std::size_t>(i)], j));

  const std::vector<std::int32_t> cols = {6, 0, 3, 3, 1, 2, 0, 0, 5, 6};  // [5 x 2]
  auto col_ids = h.up(cols);
  auto el_out = h.b.template allocate<float>(10);
  h.b.gather_elements(in.matrix(5, 7), col_ids.matrix(5, 2), el_out.matrix(5, 2));
  const auto got_el = h.down(el_out);
  for (index_t r = 0; r < 5; ++r)
    for (index_t j = 0; j < 2; ++j) CHECK(got_el[static_cast<std::size_t>(r * 2 + j)] == x(r, cols[static_cast<std::size_t>(r * 2 + j)]));

  const std::vector<std::int32_t> bad = {0, 5};
  auto bad_ids = h.up(bad);
  auto out2 = h.b.template allocate<float>(2 * 7);
  CHECK_THROWS_WITH_AS(h.b.gather_rows(in.matrix(5, 7),
                                       specdec::vector_view<const std::int32_t, typename B::memory_space>(bad_ids.view()),
                                       out2.matrix(2, 7)),
                       doctest::Contains("row_ids"), specdec::invalid_argument);
}

TEST_CASE_TEMPLATE("bad input throws invalid_argument naming the argument", B, SPECDEC_TEST_BACKENDS) {
  using specdec::invalid_argument;
  harness<B> h;
  matrix x = random_logits(110, 2, 10);
  auto in = h.up(x.data);
  auto m = in.matrix(2, 10);
  auto vals = h.b.template allocate<float>(2 * 11);
  auto ids = h.b.template allocate<std::int32_t>(2 * 11);
  auto per_row = h.b.template allocate<float>(2);
  auto tok = h.b.template allocate<std::int32_t>(2);

  CHECK_THROWS_WITH_AS(h.b.row_topk(m, 11, vals.matrix(2, 11), ids.matrix(2, 11)),
                       doctest::Contains("k = 11 is out of range; expected 1 <= k <= V = 10"), invalid_argument);
  using S = typename B::memory_space;
  CHECK_THROWS_WITH_AS(h.b.row_topk(m, 0, specdec::matrix_view<float, S>(vals.view().data(), 2, 0),
                                    specdec::matrix_view<std::int32_t, S>(ids.view().data(), 2, 0)),
                       doctest::Contains("k = 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(h.b.row_topk(m, 2, vals.matrix(1, 22), ids.matrix(2, 11)),
                       doctest::Contains("values has shape [1 x 22]; expected [2 x 2]"), invalid_argument);
  CHECK_THROWS_WITH_AS(h.b.row_logsumexp(m, -1.0f, per_row.view()), doctest::Contains("temperature = -1"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(h.b.row_logsumexp(m, 0.0f, per_row.view()), doctest::Contains("temperature = 0"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(h.b.row_softmax(m, -0.5f, vals.matrix(2, 11)), doctest::Contains("out has shape"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(h.b.row_max(m, vals.view()), doctest::Contains("max has length 22; expected 2"),
                       invalid_argument);

  for (const float poison : {NAN, INFINITY}) {
    x.data[13] = poison;  // row 1, column 3
    auto bad = h.up(x.data);
    const char* what = std::isnan(poison) ? "logits row 1 contains NaN" : "logits row 1 contains +inf";
    CHECK_THROWS_WITH_AS(h.b.row_argmax(bad.matrix(2, 10), tok.view()), doctest::Contains(what), invalid_argument);
    auto top_vals = h.b.template allocate<float>(2 * 3);
    auto top_ids = h.b.template allocate<std::int32_t>(2 * 3);
    CHECK_THROWS_WITH_AS(h.b.row_topk(bad.matrix(2, 10), 3, top_vals.matrix(2, 3), top_ids.matrix(2, 3)),
                         doctest::Contains(what), invalid_argument);
    CHECK_THROWS_WITH_AS(h.b.row_logsumexp(bad.matrix(2, 10), 1.0f, per_row.view()), doctest::Contains(what),
                         invalid_argument);
    auto probs = h.b.template allocate<float>(2 * 10);
    CHECK_THROWS_WITH_AS(h.b.row_softmax(bad.matrix(2, 10), 1.0f, probs.matrix(2, 10)), doctest::Contains(what),
                         invalid_argument);
  }

  const matrix p = random_probs(120, 2, 10);
  const std::vector<float> u = {0.5f, 0.5f};
  CHECK_NOTHROW(run_sample(h, p, u));
  matrix negative = p;
  negative.data[12] = -0.01f;
  CHECK_THROWS_WITH_AS(run_sample(h, negative, u), doctest::Contains("probs row 1 contains a negative probability"),
                       invalid_argument);
  matrix unnormalised = p;
  unnormalised.data[12] += 0.001f;
  CHECK_THROWS_WITH_AS(run_sample(h, unnormalised, u), doctest::Contains("probs row 1 does not sum to 1"),
                       invalid_argument);
  matrix slightly_off = p;
  slightly_off.data[12] += 0.00005f;  // inside the 1e-4 tolerance
  CHECK_NOTHROW(run_sample(h, slightly_off, u));
  matrix nan_probs = p;
  nan_probs.data[3] = NAN;
  CHECK_THROWS_WITH_AS(run_sample(h, nan_probs, u), doctest::Contains("probs row 0 contains NaN"), invalid_argument);
  CHECK_THROWS_WITH_AS(run_sample(h, p, {0.5f, 1.0f}), doctest::Contains("uniforms[1] = 1 is outside [0, 1)"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(run_sample(h, p, {-0.1f, 0.5f}), doctest::Contains("uniforms[0]"), invalid_argument);
  CHECK_THROWS_WITH_AS(run_sample(h, p, {0.5f}), doctest::Contains("uniforms has length 1; expected 2"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(run_residual(h, p, unnormalised, u), doctest::Contains("q row 1 does not sum to 1"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(run_residual(h, negative, p, u), doctest::Contains("p row 1 contains a negative"),
                       invalid_argument);
  const matrix q3{2, 3, std::vector<float>(6, 1.0f / 3)};
  CHECK_THROWS_WITH_AS(run_residual(h, p, q3, u), doctest::Contains("q has shape [2 x 3]; expected the shape of p"),
                       invalid_argument);
}

#if SPECDEC_HOST_SIMD
TEST_CASE("the vectorised chunk masses of the samplers are bit-identical to the canonical scalar lanes") {
  // Two chunks at a time and six chains per residual chunk: the throughput changes, the lane sums may
  // not (a sampled token depends on every bit of them).
  for (const index_t n : {index_t{1}, index_t{7}, index_t{1024}, index_t{2048}, index_t{3000}, index_t{32000}, index_t{5 * 1024 + 3}}) {
    CAPTURE(n);
    auto p = conformance::uniform_floats(40 + static_cast<std::uint64_t>(n), static_cast<std::size_t>(n), 0.0f, 1.0f);
    auto q = conformance::uniform_floats(41 + static_cast<std::uint64_t>(n), static_cast<std::size_t>(n), 0.0f, 1.0f);
    for (std::size_t i = 0; i < p.size(); i += 97) p[i] = 0.0f;      // exact zeros
    for (std::size_t i = 3; i < p.size(); i += 1001) p[i] = 1e-30f;  // tiny entries
    if (n > 100) {
      p[50] = -0.25f;                                            // flagged, not summed differently
      q[60] = std::numeric_limits<float>::quiet_NaN();
    }
    const index_t chunks = (n + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
    std::vector<specdec::detail::chunk_mass> fast(static_cast<std::size_t>(chunks));
    std::vector<specdec::detail::residual_chunk_mass> fast_r(static_cast<std::size_t>(chunks));
    specdec::detail::probability_chunk_masses(p.data(), n, fast.data());
    specdec::detail::residual_chunk_masses(p.data(), q.data(), n, fast_r.data());
    for (index_t c = 0; c < chunks; ++c) {
      const index_t c0 = c * specdec::detail::sample_chunk, len = std::min(specdec::detail::sample_chunk, n - c0);
      const auto slow = specdec::detail::probability_chunk_mass(p.data() + c0, len);
      const auto slow_r = specdec::detail::residual_mass(p.data() + c0, q.data() + c0, len);
      const auto& f = fast[static_cast<std::size_t>(c)];
      const auto& fr = fast_r[static_cast<std::size_t>(c)];
      CHECK(std::memcmp(&f.mass, &slow.mass, sizeof(double)) == 0);
      CHECK(f.has_nan == slow.has_nan);
      CHECK(f.has_negative == slow.has_negative);
      CHECK(std::memcmp(&fr.residual, &slow_r.residual, sizeof(double)) == 0);
      CHECK(std::memcmp(&fr.p.mass, &slow_r.p.mass, sizeof(double)) == 0);
      CHECK(std::memcmp(&fr.q.mass, &slow_r.q.mass, sizeof(double)) == 0);
      CHECK(fr.p.has_negative == slow_r.p.has_negative);
      CHECK(fr.q.has_nan == slow_r.q.has_nan);
    }
  }
}
#endif

// The Eigen backend's log-sum-exp reads a row once: each chunk's terms are taken against the largest
// maximum seen before it, and a chunk whose maximum rises more than 2^64 above that is summed again
// against its own. Rows built to take every branch (rising chunk maxima, a masked first chunk, a far
// larger maximum late in the row, low temperatures) against a double-precision reference.
TEST_CASE_TEMPLATE("row_logsumexp: rising chunk maxima, masked chunks and late maxima against a double reference", B,
                   specdec::eigen, specdec::thrust_backend<specdec::thrust_system::cpp>) {
  B b;
  const float inf = std::numeric_limits<float>::infinity();
  const index_t v = 5 * 2048 + 77;  // five whole chunks and a partial one
  std::vector<std::vector<float>> rows;
  auto base = conformance::random_logits(31, 1, v, 2.0f).data;
  rows.push_back(base);
  auto rising = base;  // each chunk's maximum 60 above the last: a new reference from every chunk on
  for (index_t j = 0; j < v; ++j) rising[static_cast<std::size_t>(j)] += 60.0f * static_cast<float>(j / 2048);
  rows.push_back(rising);
  auto masked = base;  // the first chunk masked: the two-step form decides
  for (index_t j = 0; j < 2048; ++j) masked[static_cast<std::size_t>(j)] = -inf;
  rows.push_back(masked);
  auto late = base;  // one far larger maximum in the partial last chunk, in its scalar tail
  late[static_cast<std::size_t>(v - 3)] = 500.0f;
  rows.push_back(late);
  auto gentle = base;  // maxima rising by less than the margin: terms above 1 kept as they are
  for (index_t j = 0; j < v; ++j) gentle[static_cast<std::size_t>(j)] += 20.0f * static_cast<float>(j / 2048);
  rows.push_back(gentle);
  for (std::size_t k = 0; k < rows.size(); ++k)
    for (const float temperature : {1.0f, 0.05f, 3.0f}) {
      CAPTURE(k);
      CAPTURE(temperature);
      const auto& x = rows[k];
      double max = -inf;
      for (const float e : x) max = std::max(max, static_cast<double>(e));
      double total = 0.0;
      for (const float e : x) total += std::exp((static_cast<double>(e) - max) / temperature);
      const double want = max / temperature + std::log(total);
      float lse = 0.0f;
      b.row_logsumexp(specdec::matrix_view<const float>(x.data(), 1, v), temperature, specdec::vector_view<float>(&lse, 1));
      CHECK(std::fabs(static_cast<double>(lse) - want) <= 2e-6 * std::fabs(want) + 1e-6);
      std::vector<float> soft(static_cast<std::size_t>(v));
      b.row_softmax(specdec::matrix_view<const float>(x.data(), 1, v), temperature, specdec::matrix_view<float>(soft.data(), 1, v));
      double mass = 0.0;
      for (const float e : soft) mass += e;
      CHECK(std::fabs(mass - 1.0) <= 1e-5);
    }
  std::vector<float> with_nan = base;
  with_nan[static_cast<std::size_t>(3 * 2048 + 5)] = std::nanf("");
  float lse = 0.0f;
  CHECK(conformance::error_of([&] { b.row_logsumexp(specdec::matrix_view<const float>(with_nan.data(), 1, v), 1.0f, specdec::vector_view<float>(&lse, 1)); })
            .find("NaN") != std::string::npos);
  std::vector<float> with_inf = base;
  with_inf[static_cast<std::size_t>(4 * 2048 + 1)] = inf;
  CHECK(conformance::error_of([&] { b.row_logsumexp(specdec::matrix_view<const float>(with_inf.data(), 1, v), 1.0f, specdec::vector_view<float>(&lse, 1)); })
            .find("inf") != std::string::npos);
}
