// SPDX-License-Identifier: Apache-2.0
// The host's vector forms against their plain definitions, bit for bit: Philox fills (uniform floats,
// doubles, exponentials) against philox_stream's scalar values, and FlashInfer's row filters on the
// host's one-thread team (filter_host.hpp's passes) against the same job run as the device runs it (the
// radix search, on a team type of its own) and against a sort-based reference. Built for the portable
// target (specdec_tests) and for this CPU (specdec_tests_native), so each instruction set's path is run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/eigen.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/sampling/distribution.hpp>
#include <specdec/sampling/detail/philox_race.hpp>
#include <specdec/sampling/detail/top_k_first.hpp>
#include <specdec/sampling/randomness.hpp>

using specdec::index_t;
namespace sampling = specdec::sampling;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("Philox fills equal the scalar stream bit for bit, at any offset and length") {
  std::vector<float> f(700), e(700);
  std::vector<double> d(700);
  int checked = 0;
  for (const std::uint64_t seed : {0ull, 1ull, 0x243f6a8885a308d3ull, ~0ull})
    for (const std::uint64_t sub : {0ull, 5ull, 0xFFFFFFFFull, 1ull << 40, ~0ull})
      // Offsets not multiple of 4 (or 2), block numbers past 2^32 and the positions' wrap at 2^64.
      for (const std::uint64_t off : {0ull, 1ull, 2ull, 3ull, 6ull, 1000003ull, (1ull << 32) - 3, (1ull << 34) + 1, (1ull << 62) - 9,
                                      (1ull << 63) - 5, ~0ull - 40, ~0ull})
        for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{31}, std::size_t{64}, std::size_t{700}}) {
          const specdec::philox_stream s{seed, sub};
          sampling::philox_uniforms(s, off, std::span<float>(f.data(), n));
          sampling::philox_uniforms(s, off, std::span<double>(d.data(), n));
          sampling::philox_exponentials(s, off, std::span<float>(e.data(), n));
          for (std::size_t i = 0; i < n; ++i) {
            const std::uint64_t at = off + i;
            CAPTURE(seed);
            CAPTURE(sub);
            CAPTURE(at);
            REQUIRE(same_bits(f[i], s.uniform(at)));
            REQUIRE(same_bits(d[i], s.uniform_double(at)));
            REQUIRE(same_bits(e[i], static_cast<float>(-std::log1p(-s.uniform_double(at)))));
            ++checked;
          }
        }
  CHECK(checked > 100000);
}

TEST_CASE("Philox fills take out through check_arguments and name it; every offset is valid") {
  const specdec::philox_stream s{21, 4};
  std::vector<float> f(8, -1.0f);
  std::vector<double> d(8, -1.0);
  const std::string uniforms = "specdec::sampling::philox_uniforms: ", exponentials = "specdec::sampling::philox_exponentials: ";
  CHECK_THROWS_WITH_AS(sampling::philox_uniforms(s, 0, std::span<float>(static_cast<float*>(nullptr), 3)),
                       (uniforms + "out is a null view of length 3").c_str(), specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::philox_uniforms(s, 0, std::span<double>(static_cast<double*>(nullptr), 3)),
                       (uniforms + "out is a null view of length 3").c_str(), specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::philox_exponentials(s, 0, std::span<float>(static_cast<float*>(nullptr), 3)),
                       (exponentials + "out is a null view of length 3").c_str(), specdec::invalid_argument);
  // Lengths no buffer can have: past int64 as an extent, and past int64 in bytes. Only the span's two
  // words are read, so these spans over 8 elements are safe to pass.
  CHECK_THROWS_WITH_AS(sampling::philox_uniforms(s, 0, std::span<double>(d.data(), std::numeric_limits<std::size_t>::max())),
                       (uniforms + "out has extent -1 in dimension 0; expected >= 0").c_str(), specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(sampling::philox_exponentials(s, 0, std::span<float>(f.data(), std::size_t{1} << 62)),
                       (exponentials + "out's byte offsets = 4611686018427387903 * 4 overflows int64").c_str(), specdec::invalid_argument);
  CHECK(std::all_of(f.begin(), f.end(), [](float x) { return x == -1.0f; }));
  CHECK(std::all_of(d.begin(), d.end(), [](double x) { return x == -1.0; }));
  // Empty, null or not, fills nothing; positions wrap at 2^64 as philox_stream's do, so no offset is refused.
  CHECK_NOTHROW(sampling::philox_uniforms(s, ~0ull, std::span<float>(static_cast<float*>(nullptr), 0)));
  CHECK_NOTHROW(sampling::philox_exponentials(s, ~0ull, std::span<float>(f.data(), 0)));
  sampling::philox_uniforms(s, ~0ull - 1, std::span<double>(d.data(), 4));
  CHECK(same_bits(d[2], s.uniform_double(0)));
  CHECK(same_bits(d[3], s.uniform_double(1)));
}

TEST_CASE("Philox exponentials equal -log1p(-u) rounded to float over millions of values") {
  // About one value in 2^17 is near a point halfway between two floats and takes the C library's path:
  // 2^23 values reach both paths many times.
  const std::size_t n = std::size_t{1} << 21;
  std::vector<float> e(n);
  std::size_t mismatches = 0;
  for (std::uint64_t seed = 11; seed < 15; ++seed) {
    const specdec::philox_stream s{seed, seed * 3};
    sampling::philox_exponentials(s, 7, e);
    for (std::size_t i = 0; i < n; ++i) mismatches += !same_bits(e[i], static_cast<float>(-std::log1p(-s.uniform_double(7 + i))));
  }
  CHECK(mismatches == 0);
  // The extremes: u = 0 (+0, not -0) and the largest uniform below 1.
  CHECK(same_bits(specdec::detail::exponential_of_uniform(0.0), 0.0f));
  CHECK(specdec::detail::exponential_of_uniform(1.0 - 0x1p-53) == static_cast<float>(53.0 * std::log(2.0)));
}

#if SPECDEC_PHILOX_SIMD
TEST_CASE("The vector logarithm behind the exponentials is within 2^-44 of -log(m), as its band assumes") {
  namespace ps = specdec::detail::philox_simd;
  const specdec::philox_stream s{99, 1};
  std::vector<double> ms = {1.0, 1.0 - 0x1p-53, 0x1p-53, 0.5, 0.75, std::sqrt(0.5), std::nextafter(std::sqrt(0.5), 0.0),
                            std::nextafter(std::sqrt(0.5), 1.0), 0.5 * std::sqrt(2.0), 1e-10, 0.9999};
  for (std::uint64_t i = 0; i < 200000; ++i) ms.push_back(1.0 - s.uniform_double(i));
  for (std::uint64_t i = 0; i < 2000; ++i) ms.push_back(std::ldexp(1.0 - s.uniform_double(i), -static_cast<int>(i % 53)));
  double worst = 0.0;
  for (std::size_t i = 0; i + ps::lanes <= ms.size(); i += ps::lanes) {
    ps::dv m;
    for (int l = 0; l < ps::lanes; ++l) m[l] = ms[i + static_cast<std::size_t>(l)];
    const ps::dv y = ps::minus_log_unit(m);
    for (int l = 0; l < ps::lanes; ++l) {
      const long double exact = -std::log(static_cast<long double>(m[l]));
      if (exact == 0.0L) {
        CHECK(same_bits(y[l], 0.0));
        continue;
      }
      worst = std::max(worst, static_cast<double>(std::fabs((static_cast<long double>(y[l]) - exact) / exact)));
    }
  }
  CHECK(worst < 0x1p-44);
}
#endif

namespace {

/// A one-thread team of its own type: filter_rows_job runs its radix search on it, as on the device.
struct radix_team {
  index_t rank() const noexcept { return 0; }
  index_t size() const noexcept { return 1; }
  void sync() const noexcept {}
  std::byte* wide_scratch() const noexcept { return nullptr; }
};

/// The job's output for rows x (`[rows x V]`), through the radix search.
std::vector<float> radix_filter(const std::vector<float>& x, index_t rows, index_t v, std::int64_t k, float p, bool renormalise) {
  std::vector<float> out(x.size());
  const std::int64_t ks[1] = {k};
  const float ps[1] = {p};
  sampling::detail::filter_rows_job<specdec::host_space> job{
      specdec::matrix_view<const float>(x.data(), rows, v), specdec::matrix_view<float>(out.data(), rows, v),
      k > 0 ? specdec::vector_view<const std::int64_t>(ks, 1) : specdec::vector_view<const std::int64_t>{},
      p > 0.0f ? specdec::vector_view<const float>(ps, 1) : specdec::vector_view<const float>{}, renormalise, "radix", {}};
  std::vector<std::byte> scratch(job.scratch_bytes() + 16);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 15) / 16 * 16);
  radix_team team;
  for (index_t r = 0; r < rows; ++r) {
    const auto f = job(team, r, base);
    REQUIRE(f.code == 0);
  }
  return out;
}

/// The host's output (specdec::eigen: the one-thread team, filter_host.hpp's passes).
std::vector<float> host_filter(const std::vector<float>& x, index_t rows, index_t v, std::int64_t k, float p, bool renormalise) {
  std::vector<float> out(x.size());
  specdec::eigen b;
  const std::int64_t ks[1] = {k};
  const float ps[1] = {p};
  const specdec::matrix_view<const float> in(x.data(), rows, v);
  const specdec::vector_view<const std::int64_t> kv(ks, 1);
  const specdec::vector_view<const float> pv(ps, 1);
  const specdec::matrix_view<float> o(out.data(), rows, v);
  if (!renormalise) sampling::top_k_mask_logits(b, in, kv, o);
  else if (k > 0 && p > 0.0f) sampling::top_k_top_p_joint_renorm(b, in, kv, pv, o);
  else if (p > 0.0f) sampling::top_p_renorm(b, in, pv, o);
  else sampling::top_k_renorm(b, in, kv, o);
  // In place too: the same bits.
  std::vector<float> again = x;
  const specdec::matrix_view<float> io(again.data(), rows, v);
  if (!renormalise) sampling::top_k_mask_logits(b, in, kv, io);
  else if (k > 0 && p > 0.0f) sampling::top_k_top_p_joint_renorm(b, specdec::matrix_view<const float>(again.data(), rows, v), kv, pv, io);
  else if (p > 0.0f) sampling::top_p_renorm(b, specdec::matrix_view<const float>(again.data(), rows, v), pv, io);
  else sampling::top_k_renorm(b, specdec::matrix_view<const float>(again.data(), rows, v), kv, io);
  REQUIRE(std::memcmp(again.data(), out.data(), out.size() * sizeof(float)) == 0);
  return out;
}

bool same_rows(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Row kinds: 0 softmax-like (a long tail), 1 ties (a few levels), 2 all equal, 3 zeros and -0 (-inf for
/// logits), 4 a range of 2^45 (so that double sums round, and their order shows).
std::vector<float> make_row(std::uint64_t seed, index_t v, int kind, bool probabilities) {
  const specdec::philox_stream rng{seed, 77};
  std::vector<float> x(static_cast<std::size_t>(v));
  double total = 0.0;
  for (index_t j = 0; j < v; ++j) {
    const double u = rng.uniform_double(static_cast<std::uint64_t>(j));
    double e = 0.0;
    switch (kind) {
      case 0: e = std::exp(6.0 * (u - 1.0) * (1.0 + 3.0 * rng.uniform_double(static_cast<std::uint64_t>(j + v)))); break;
      case 1: e = std::floor(u * 5.0); break;
      case 2: e = 1.0; break;
      case 4: e = std::ldexp(0.5 + 0.5 * u, -static_cast<int>(45.0 * rng.uniform_double(static_cast<std::uint64_t>(j + v)))); break;
      case 3: e = rng.uniform_double(static_cast<std::uint64_t>(j + v)) < 0.3 ? 0.0 : u * u; break;
    }
    float f = static_cast<float>(e);
    if (!probabilities) {
      f = static_cast<float>(std::log(e + 1e-30) * 3.0);
      if (kind == 3 && e == 0.0) f = -std::numeric_limits<float>::infinity();
      if (kind == 2) f = 1.5f;
    }
    x[static_cast<std::size_t>(j)] = f;
    total += e;
  }
  if (probabilities) {
    if (total == 0.0) x[0] = 1.0f, total = 1.0;
    for (index_t j = 0; j < v; ++j) {
      float& e = x[static_cast<std::size_t>(j)];
      e = static_cast<float>(static_cast<double>(e) / total);
      if (e == 0.0f && j % 2 == 0) e = -0.0f;
    }
  }
  return x;
}

}  // namespace

TEST_CASE("The host's top-k filters equal the radix search: ties, k = 1, k = V, all-equal rows, -inf") {
  int compared = 0;
  std::uint64_t seed = 1;
  for (const index_t v : {index_t{1}, index_t{7}, index_t{100}, index_t{1030}, index_t{5000}, index_t{40000}, index_t{140000}})
    for (int kind = 0; kind < 5; ++kind)
      for (const bool probabilities : {true, false}) {
        const std::vector<float> x = make_row(seed++, v, kind, probabilities);
        std::vector<std::int64_t> ks = {1, v};
        if (v > 1) ks.insert(ks.end(), {2, v - 1, (v + 1) / 2, std::min<std::int64_t>(50, v), std::max<std::int64_t>(1, v / 300), std::max<std::int64_t>(1, v / 40)});
        for (const std::int64_t k : ks) {
          CAPTURE(v);
          CAPTURE(kind);
          CAPTURE(probabilities);
          CAPTURE(k);
          const std::vector<float> want = radix_filter(x, 1, v, k, 0.0f, probabilities);
          CHECK(same_rows(host_filter(x, 1, v, k, 0.0f, probabilities), want));
          // The sort reference: every entry >= the k-th largest kept.
          std::vector<float> sorted = x;
          std::sort(sorted.begin(), sorted.end(), std::greater<float>());
          const float kth = sorted[static_cast<std::size_t>(k - 1)];
          for (index_t j = 0; j < v; ++j) {
            const float got = want[static_cast<std::size_t>(j)], in = x[static_cast<std::size_t>(j)];
            if (in < kth) REQUIRE(got == (probabilities ? 0.0f : -std::numeric_limits<float>::infinity()));
            else if (!probabilities) REQUIRE(same_bits(got, in));
          }
          ++compared;
        }
      }
  CHECK(compared > 300);
}

TEST_CASE("A top-k row at the edge of the sum tolerance: the host's approximate total decides as the canonical one") {
  // The host's top-k pass approximates a probability row's total and takes the canonical one only where
  // the approximation cannot decide: rows scaled to sums within 1e-6 of 1 +- 1e-3 (the band where it
  // cannot) are accepted or refused by the host forms exactly as by the radix search.
  const index_t v = 5000;
  const std::vector<float> base = make_row(91, v, 0, true);
  int accepted = 0, refused = 0;
  for (int side : {-1, 1})
    for (int step = -100; step <= 100; ++step) {
      const double target = 1.0 + side * sampling::detail::renorm_sum_tolerance + step * 1e-8;
      std::vector<float> x(base.size());
      for (std::size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(static_cast<double>(base[j]) * target);
      CAPTURE(side);
      CAPTURE(step);
      const std::int64_t ks[1] = {50};
      std::vector<float> radix(x.size()), host(x.size());
      const auto job_for = [&](std::vector<float>& out) {
        return sampling::detail::filter_rows_job<specdec::host_space>{specdec::matrix_view<const float>(x.data(), 1, v),
                                                                     specdec::matrix_view<float>(out.data(), 1, v),
                                                                     specdec::vector_view<const std::int64_t>(ks, 1),
                                                                     {}, true, "edge", {}};
      };
      const auto radix_job = job_for(radix), host_job = job_for(host);
      std::vector<std::byte> scratch(std::max(radix_job.scratch_bytes(), host_job.scratch_bytes()) + 16);
      auto* base_ptr = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 15) / 16 * 16);
      radix_team on_radix;
      specdec::detail::serial_team on_host;
      const auto radix_fault = radix_job(on_radix, 0, base_ptr);
      const auto host_fault = host_job(on_host, 0, base_ptr);
      REQUIRE(radix_fault.code == host_fault.code);
      if (radix_fault.code != 0) {
        CHECK(radix_fault.value == host_fault.value);  // the canonical total, in both messages
        ++refused;
        continue;
      }
      ++accepted;
      REQUIRE(same_rows(radix, host));
      // The public host form (run_serial's const team) takes the same passes: the same bits.
      std::vector<float> in_place = x;
      sampling::top_k_renorm(specdec::matrix_view<float>(in_place.data(), 1, v), 50);
      REQUIRE(same_rows(in_place, host));
    }
  CHECK(accepted > 150);
  CHECK(refused > 150);
}

TEST_CASE("A top-k row with a bad entry: the host's quick check pass reports what the radix search does") {
  // Entries outside [0, 1] or NaN in probability rows, NaN or +inf in logit rows, in a whole block and in
  // the partial last one: the same fault (kind, column, value) from both searches.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  int faults = 0;
  for (const bool probabilities : {true, false})
    for (const index_t v : {index_t{70}, index_t{1000}, index_t{5003}})
      for (const float bad : {nan, inf, -inf, -1e-3f, 1.5f})
        for (const index_t at : {index_t{0}, v / 2, v - 1}) {
          std::vector<float> x = make_row(static_cast<std::uint64_t>(v + at), v, 0, probabilities);
          x[static_cast<std::size_t>(at)] = bad;
          const std::int64_t ks[1] = {5};
          std::vector<float> a(x.size()), h(x.size());
          const auto job_for = [&](std::vector<float>& out) {
            return sampling::detail::filter_rows_job<specdec::host_space>{specdec::matrix_view<const float>(x.data(), 1, v),
                                                                         specdec::matrix_view<float>(out.data(), 1, v),
                                                                         specdec::vector_view<const std::int64_t>(ks, 1),
                                                                         {}, probabilities, "bad", {}};
          };
          const auto radix_job = job_for(a), host_job = job_for(h);
          std::vector<std::byte> scratch(std::max(radix_job.scratch_bytes(), host_job.scratch_bytes()) + 16);
          auto* base_ptr = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 15) / 16 * 16);
          radix_team on_radix;
          specdec::detail::serial_team on_host;
          const auto want = radix_job(on_radix, 0, base_ptr);
          const auto got = host_job(on_host, 0, base_ptr);
          CAPTURE(probabilities);
          CAPTURE(v);
          CAPTURE(bad);
          CAPTURE(at);
          REQUIRE(got.code == want.code);
          CHECK(got.column == want.column);
          CHECK(std::memcmp(&got.value, &want.value, sizeof got.value) == 0);
          faults += got.code != 0;
        }
  CHECK(faults >= 2 * 3 * 3 * 3);  // every bad value but -inf / -1e-3 / 1.5 in logit rows is a fault
}

TEST_CASE("The host's top-p and joint renormalisations equal the radix search: p near 0 and 1, ties, all-equal rows") {
  int compared = 0;
  std::uint64_t seed = 1000;
  for (const index_t v : {index_t{1}, index_t{7}, index_t{100}, index_t{1030}, index_t{5000}, index_t{40000}, index_t{140000}})
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> x = make_row(seed++, v, kind, true);
      // p just above and below partial masses of the sorted row (where the cut's test is closest), near
      // 0 and 1, and 1 itself.
      std::vector<float> sorted = x;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      double run = 0.0;
      std::vector<float> ps = {1e-9f, 1e-3f, 0.3f, 0.5f, 0.9f, 0.95f, 0.999999f, 1.0f};
      for (std::size_t i = 0; i < sorted.size() && i < 40; ++i) {
        run += static_cast<double>(sorted[i]);
        ps.push_back(static_cast<float>(run));
        ps.push_back(std::nextafter(static_cast<float>(run), 0.0f));
        ps.push_back(std::nextafter(static_cast<float>(run), 2.0f));
      }
      for (float& p : ps) p = std::min(1.0f, std::max(p, 1e-12f));
      for (const float p : ps)
        for (const std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::min<std::int64_t>(v, 20), v}) {
          CAPTURE(v);
          CAPTURE(kind);
          CAPTURE(p);
          CAPTURE(k);
          const std::vector<float> want = radix_filter(x, 1, v, k, p, true);
          REQUIRE(same_rows(host_filter(x, 1, v, k, p, true), want));
          ++compared;
        }
    }
  CHECK(compared > 1000);
}

TEST_CASE("The host's filters keep what the definitions keep, several rows at once") {
  // A plain reference of the top-p rule: a token is kept iff the mass strictly above it (summed in
  // double, any order; the rows here leave no mass within rounding of p) is below p.
  const index_t rows = 5, v = 3000;
  std::vector<float> x;
  for (index_t r = 0; r < rows; ++r) {
    const auto row = make_row(500 + static_cast<std::uint64_t>(r), v, 0, true);
    x.insert(x.end(), row.begin(), row.end());
  }
  for (const float p : {0.2f, 0.7f, 0.97f}) {
    const std::vector<float> got = host_filter(x, rows, v, 0, p, true);
    CHECK(same_rows(got, radix_filter(x, rows, v, 0, p, true)));
    for (index_t r = 0; r < rows; ++r) {
      const float* in = x.data() + r * v;
      std::vector<float> sorted(in, in + v);
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      for (index_t j = 0; j < v; j += 7) {
        double above = 0.0;
        for (const float s : sorted)
          if (s > in[j]) above += static_cast<double>(s);
        CHECK((got[static_cast<std::size_t>(r * v + j)] != 0.0f) == (above < static_cast<double>(p) && in[j] != 0.0f));
      }
    }
  }
}

#if SPECDEC_FILTER_HOST_PASSES
TEST_CASE("The host filter's passes sum in the canonical order: totals and masses equal a scalar walk of the lanes") {
  namespace fp = sampling::detail::filter_passes;
  // The canonical order written out: lane j % 8 of each 1024-entry chunk in index order, lanes combined
  // ((0+1)+(2+3))+((4+5)+(6+7)), chunks added in order.
  const auto canonical = [](const std::vector<float>& x, const auto& keep) {
    double total = 0.0;
    for (std::size_t c0 = 0; c0 < x.size(); c0 += 1024) {
      double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (std::size_t j = c0; j < std::min(x.size(), c0 + 1024); ++j)
        if (keep(x[j])) lane[(j - c0) % 8] += static_cast<double>(x[j]);
      total += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    return total;
  };
  int checked = 0;
  for (const index_t v : {index_t{1}, index_t{7}, index_t{9}, index_t{63}, index_t{65}, index_t{1023}, index_t{1025}, index_t{2100},
                          index_t{4096}, index_t{33333}})
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> x = make_row(7000 + static_cast<std::uint64_t>(v) * 5 + static_cast<std::uint64_t>(kind), v, kind, true);
      std::vector<float> maxima(static_cast<std::size_t>(specdec::detail::maxima_blocks(v) + fp::maxima_padding));
      const fp::row_check c = fp::check_row<true>(x.data(), v, maxima.data());
      CAPTURE(v);
      CAPTURE(kind);
      CHECK(!c.bad);
      CHECK(same_bits(c.total, canonical(x, [](float) { return true; })));
      CHECK(c.max == *std::max_element(x.begin(), x.end()));
      std::vector<float> sorted = x;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      for (const std::size_t at : {std::size_t{0}, sorted.size() / 3, sorted.size() - 1}) {
        const float t = sorted[at];
        for (const float* m : {static_cast<const float*>(nullptr), static_cast<const float*>(maxima.data())}) {
          const fp::mass_pair got = fp::canonical_masses(x.data(), v, t, m);
          CHECK(same_bits(got.above, canonical(x, [t](float e) { return e > t; })));
          CHECK(same_bits(got.at_or_above, canonical(x, [t](float e) { return e >= t; })));
          ++checked;
        }
      }
    }
  CHECK(checked == 300);
  // Short rows and tails, many of them: a few entries' sum rounds differently in another lane order only
  // now and then.
  for (index_t v = 1; v <= 80; ++v)
    for (std::uint64_t seed = 0; seed < 30; ++seed) {
      const std::vector<float> x = make_row(90000 + seed * 100 + static_cast<std::uint64_t>(v), v, 4, true);
      CAPTURE(v);
      CAPTURE(seed);
      std::vector<float> maxima(static_cast<std::size_t>(specdec::detail::maxima_blocks(v) + fp::maxima_padding));
      REQUIRE(same_bits(fp::check_row<true>(x.data(), v, maxima.data()).total, canonical(x, [](float) { return true; })));
      const float t = x[static_cast<std::size_t>(v / 2)];
      const fp::mass_pair got = fp::canonical_masses(x.data(), v, t, maxima.data());
      REQUIRE(same_bits(got.above, canonical(x, [t](float e) { return e > t; })));
      REQUIRE(same_bits(got.at_or_above, canonical(x, [t](float e) { return e >= t; })));
    }
}
#endif

TEST_CASE("philox_race: the race over a noise row it never writes equals the race over philox_exponentials' row") {
  // The reference: the whole noise row filled, every score computed, argmax (lowest index on ties,
  // token 0 when every score is NaN), as residual_rows::race_token computes it over a given row.
  const auto reference = [](const std::vector<float>& r, const specdec::philox_stream& rng, std::uint64_t offset) {
    std::vector<float> e(r.size());
    sampling::philox_exponentials(rng, offset, e);
    float best_score = -1.0f;
    std::int32_t best = 0;
    for (std::size_t j = 0; j < r.size(); ++j) {
      const float score = r[j] / e[j];
      if (score > best_score) {
        best_score = score;
        best = static_cast<std::int32_t>(j);
      }
    }
    return best;
  };
  int compared = 0, late_winners = 0;
  for (const index_t v : {index_t{1}, index_t{9}, index_t{1000}, index_t{1025}, index_t{32000}, index_t{70001}})
    for (int kind = 0; kind < 6; ++kind)
      for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{12345}, ~std::uint64_t{0} - 500}) {
        const specdec::philox_stream values{static_cast<std::uint64_t>(v * 7 + kind), 3};
        std::vector<float> r(static_cast<std::size_t>(v));
        for (index_t j = 0; j < v; ++j) {
          const float u = values.uniform(static_cast<std::uint64_t>(j));
          float x = 0.0f;
          switch (kind) {
            case 0: x = u < 0.5f ? 0.0f : u * 1e-4f; break;         // half zeros, like p - q's positive part
            case 1: x = 0.0f; break;                                 // nothing left: the first entry with u > 0
            case 2: x = j == v / 2 ? 3e-7f : 0.0f; break;            // one entry
            case 3: x = 0.25f * static_cast<float>(j % 3 == 0); break;  // ties
            case 4: x = std::ldexp(u, -static_cast<int>(j % 120)); break;  // 36 binades
            case 5: x = j % 2 ? -0.0f : u; break;                    // -0 entries
          }
          r[static_cast<std::size_t>(j)] = x;
        }
        const specdec::philox_stream rng{static_cast<std::uint64_t>(kind) + 99, static_cast<std::uint64_t>(v)};
        const std::int32_t want = reference(r, rng, offset);
        const std::int32_t got = sampling::detail::philox_race(v, rng, offset, [&](index_t j0, index_t len, float* out) {
          std::memcpy(out, r.data() + j0, static_cast<std::size_t>(len) * sizeof(float));
        });
        CAPTURE(v);
        CAPTURE(kind);
        CAPTURE(offset);
        REQUIRE(got == want);
        late_winners += want > 1024;
        ++compared;
      }
  CHECK(compared == 108);
  CHECK(late_winners > 20);
}

namespace top_k_first_test {

/// The composed steps: top_k_renorm, top_p_renorm, then eigen's row_sample, on a copy of the row.
template <class E>
std::int32_t composed(const std::vector<E>& x, index_t v, std::int64_t k, float p, float u, bool joint) {
  std::vector<E> row = x;
  if (joint) {
    sampling::top_k_top_p_joint_renorm(specdec::matrix_view<E>(row.data(), index_t{1}, v), static_cast<index_t>(std::min<std::int64_t>(k, v)), p);
  } else {
    sampling::top_k_renorm(specdec::matrix_view<E>(row.data(), index_t{1}, v), static_cast<index_t>(std::min<std::int64_t>(k, v)));
    sampling::top_p_renorm(specdec::matrix_view<E>(row.data(), index_t{1}, v), p);
  }
  specdec::eigen b;
  std::int32_t t = -1;
  b.row_sample(specdec::matrix_view<const E>(static_cast<const E*>(row.data()), index_t{1}, v), specdec::vector_view<const float>(&u, 1),
               specdec::vector_view<std::int32_t>(&t, 1));
  return t;
}

template <class E>
void check_rows(int& sparse, int& compared, bool joint) {
  std::uint64_t seed = 500;
  for (const index_t v : {index_t{9}, index_t{1000}, index_t{5000}, index_t{40000}})
    for (int kind = 0; kind < 5; ++kind)
      for (const std::int64_t k : {std::int64_t{1}, std::int64_t{2}, std::int64_t{50}, std::int64_t{700}, std::int64_t{v}})
        for (const float p : {1e-6f, 0.5f, 0.9f, 1.0f})
          for (const float u : {0.0f, 0.37f, 0.999999f}) {
            const std::vector<float> f = make_row(seed++, v, kind, true);
            std::vector<E> x(f.size());
            for (std::size_t j = 0; j < f.size(); ++j) x[j] = specdec::narrow<E>(f[j]);
            if constexpr (!std::is_same_v<E, float>) {  // the 16-bit row renormalised as its own distribution
              double total = 0.0;
              for (const E e : x) total += static_cast<double>(specdec::widen(e));
              if (!(std::abs(total - 1.0) < 5e-4)) continue;
            }
            CAPTURE(v);
            CAPTURE(kind);
            CAPTURE(k);
            CAPTURE(p);
            CAPTURE(u);
            CAPTURE(joint);
            const std::int32_t want = composed(x, v, k, p, u, joint);
            std::int32_t got = -1;
            const std::int64_t kk = k;
            sampling::top_k_top_p_sample(specdec::matrix_view<const E>(static_cast<const E*>(x.data()), index_t{1}, v), specdec::vector_view<const std::int64_t>(&kk, 1),
                                         specdec::vector_view<const float>(&p, 1), specdec::vector_view<const float>(&u, 1),
                                         specdec::vector_view<std::int32_t>(&got, 1),
                                         joint ? sampling::filter_order::joint : sampling::filter_order::top_k_first);
            REQUIRE(got == want);
            std::vector<float> scratch(sampling::detail::top_k_first::scratch_floats(v));
            std::vector<sampling::detail::top_k_first::entry> kept;
            std::vector<double> masses;
            const std::int32_t direct = sampling::detail::top_k_first::token(x.data(), v, std::min<std::int64_t>(k, v), p, u,
                                                                              scratch.data(), kept, masses, joint);
            // Rows of distinct values cut at a small k are the sparse form's (tied rows may exceed its limit).
            if (kind == 0 && k <= 50 && k < v) REQUIRE(direct >= 0);
            if (direct >= 0) {
              REQUIRE(direct == want);
              ++sparse;
            }
            ++compared;
          }
}

}  // namespace top_k_first_test

TEST_CASE("top_k_top_p_sample: the token of top_k_renorm, top_p_renorm (or the joint filter) and row_sample, from the top k alone") {
  for (const bool joint : {false, true}) {
    int sparse = 0, compared = 0;
    top_k_first_test::check_rows<float>(sparse, compared, joint);
    CHECK(compared == 1200);
    CHECK(sparse > 300);
    int sparse16 = 0, compared16 = 0;
    top_k_first_test::check_rows<specdec::bfloat16>(sparse16, compared16, joint);
    CHECK(compared16 > 300);
    CHECK(sparse16 > 100);
  }
  // Errors name the argument and the row.
  std::vector<float> bad = make_row(3, 100, 0, true);
  bad[7] = -0.5f;
  const std::int64_t k = 5;
  const float p = 0.9f, u = 0.5f;
  std::int32_t t = 0;
  CHECK_THROWS_AS(sampling::top_k_top_p_sample(specdec::matrix_view<const float>(bad.data(), 1, 100),
                                               specdec::vector_view<const std::int64_t>(&k, 1), specdec::vector_view<const float>(&p, 1),
                                               specdec::vector_view<const float>(&u, 1), specdec::vector_view<std::int32_t>(&t, 1)),
                  specdec::invalid_argument);
  const float u_bad = 1.0f;
  CHECK_THROWS_WITH_AS(sampling::top_k_top_p_sample(specdec::matrix_view<const float>(bad.data(), 1, 100),
                                                    specdec::vector_view<const std::int64_t>(&k, 1), specdec::vector_view<const float>(&p, 1),
                                                    specdec::vector_view<const float>(&u_bad, 1), specdec::vector_view<std::int32_t>(&t, 1)),
                       doctest::Contains("uniforms[0] = 1"), specdec::invalid_argument);
}

TEST_CASE("row_softmax never writes an entry above 1, in rows whose mass is one entry") {
  // The sum comes from a faster exponential than the entries; on AVX2 / AVX-512 a row whose mass is
  // one entry wrote 1 + 2^-23 there (found by masked verification refusing it as a probability). Also
  // exp_shifted_at, which gives a single entry, gives the capped one.
  specdec::eigen b;
  const specdec::philox_stream rng{5, 6};
  int dominant = 0;
  for (std::uint64_t t = 0; t < 4000; ++t) {
    const auto n = static_cast<index_t>(1 + rng.uniform(3 * t) * 300.0f);
    std::vector<float> x(static_cast<std::size_t>(n), -std::numeric_limits<float>::infinity()), y(x.size());
    const auto at = static_cast<std::size_t>(rng.uniform(3 * t + 1) * static_cast<float>(n)) % x.size();
    x[at] = 12.0f * rng.uniform(3 * t + 2) - 6.0f;
    if (t % 4 == 1) x[(at + 7) % x.size()] = x[at] - 30.0f;  // a second entry too small to move the sum
    const float temperature = t % 2 ? 0.9f : 1.0f;
    b.row_softmax(specdec::matrix_view<const float>(x.data(), 1, n), temperature, specdec::matrix_view<float>(y.data(), 1, n));
    const auto stats = b.row_softmax_stats(specdec::matrix_view<const float>(x.data(), 1, n), temperature);
    for (index_t j = 0; j < n; ++j) {
      CAPTURE(n);
      CAPTURE(j);
      REQUIRE(y[static_cast<std::size_t>(j)] <= 1.0f);
      REQUIRE(specdec::detail::exp_shifted_at(x.data(), n, j, stats.max, 1.0f / temperature, 1.0f / stats.sum) ==
              y[static_cast<std::size_t>(j)]);
    }
    dominant += y[at] == 1.0f;
  }
  CHECK(dominant > 100);  // the capped entries (and those whose sum came out 1) among them
}

TEST_CASE_TEMPLATE("top_k_top_p_sample_from_logits: row_softmax of the whole matrix, then top_k_top_p_sample", E, float, specdec::bfloat16) {
  // Rows of the five kinds (ties, -inf masks, a constant row), per-row k (1 .. V) and p, both orders;
  // the whole matrix's softmax is past the size where row_softmax streams its stores.
  specdec::eigen b;
  for (const index_t v : {index_t{7}, index_t{3000}, index_t{70000}}) {
    const index_t rows = v == 70000 ? 24 : 40;
    std::vector<E> logits(static_cast<std::size_t>(rows * v));
    std::vector<std::int64_t> k(static_cast<std::size_t>(rows));
    std::vector<float> p(static_cast<std::size_t>(rows)), u(static_cast<std::size_t>(rows));
    const specdec::philox_stream rng{41, static_cast<std::uint64_t>(v)};
    for (index_t r = 0; r < rows; ++r) {
      const std::vector<float> l = make_row(static_cast<std::uint64_t>(300 + r), v, static_cast<int>(r % 5), false);
      for (index_t j = 0; j < v; ++j) logits[static_cast<std::size_t>(r * v + j)] = specdec::narrow<E>(l[static_cast<std::size_t>(j)]);
      const std::int64_t ks[] = {1, 2, 20, 600, v};
      k[static_cast<std::size_t>(r)] = ks[(r / 5) % 5];
      p[static_cast<std::size_t>(r)] = r % 3 == 0 ? 1.0f : 0.05f + 0.9f * rng.uniform(static_cast<std::uint64_t>(2 * r));
      u[static_cast<std::size_t>(r)] = rng.uniform(static_cast<std::uint64_t>(2 * r + 1));
    }
    std::vector<float> soft(logits.size());
    b.row_softmax(specdec::matrix_view<const E>(logits.data(), rows, v), 1.0f, specdec::matrix_view<float>(soft.data(), rows, v));
    for (const auto order : {sampling::filter_order::top_k_first, sampling::filter_order::joint}) {
      std::vector<std::int32_t> want(static_cast<std::size_t>(rows)), got(static_cast<std::size_t>(rows), -1);
      const specdec::vector_view<const std::int64_t> kv(k.data(), rows);
      const specdec::vector_view<const float> pv(p.data(), rows), uv(u.data(), rows);
      sampling::top_k_top_p_sample(specdec::matrix_view<const float>(soft.data(), rows, v), kv, pv, uv,
                                   specdec::vector_view<std::int32_t>(want.data(), rows), order);
      sampling::top_k_top_p_sample_from_logits(specdec::matrix_view<const E>(logits.data(), rows, v), kv, pv, uv,
                                               specdec::vector_view<std::int32_t>(got.data(), rows), order);
      CAPTURE(v);
      CAPTURE(order == sampling::filter_order::joint);
      CHECK(got == want);
    }
  }
  // A NaN in row 2 is named with its row and column, as row_softmax names it.
  std::vector<E> bad(static_cast<std::size_t>(3 * 50), specdec::narrow<E>(0.5f));
  bad[2 * 50 + 9] = specdec::narrow<E>(std::numeric_limits<float>::quiet_NaN());
  const std::int64_t k = 5;
  const float p = 0.9f;
  const std::vector<float> u(3, 0.5f);
  std::vector<std::int32_t> t(3);
  CHECK_THROWS_WITH_AS(sampling::top_k_top_p_sample_from_logits(specdec::matrix_view<const E>(bad.data(), 3, 50),
                                                                specdec::vector_view<const std::int64_t>(&k, 1),
                                                                specdec::vector_view<const float>(&p, 1),
                                                                specdec::vector_view<const float>(u.data(), 3),
                                                                specdec::vector_view<std::int32_t>(t.data(), 3)),
                       doctest::Contains("logits row 2 contains NaN (first at column 9)"), specdec::invalid_argument);
}

TEST_CASE("Top-k filters whose output passes 16 MB (streamed stores) write what row-by-row calls write, in place too") {
  // 32 x 131072 floats (16.8 MB) and bf16 rows of twice as many entries: past filter_passes::streaming_bytes,
  // where the whole-matrix call writes with non-temporal stores and a one-row call does not.
  const index_t rows = 32, v = 131072;
  std::vector<float> logits(static_cast<std::size_t>(rows * v)), probs(logits.size());
  for (index_t r = 0; r < rows; ++r) {
    const std::vector<float> l = make_row(static_cast<std::uint64_t>(900 + r), v, r % 5, false);
    const std::vector<float> p = make_row(static_cast<std::uint64_t>(900 + r), v, r % 5, true);
    std::copy(l.begin(), l.end(), logits.begin() + r * v);
    std::copy(p.begin(), p.end(), probs.begin() + r * v);
  }
  REQUIRE(logits.size() * sizeof(float) >= sampling::detail::filter_passes::streaming_bytes);
  specdec::eigen b;
  const std::int64_t k = 40;
  const specdec::vector_view<const std::int64_t> kv(&k, 1);
  for (const bool renormalise : {false, true}) {
    const std::vector<float>& x = renormalise ? probs : logits;
    std::vector<float> whole(x.size()), in_place = x, by_row(x.size());
    const auto run = [&](const float* in, float* out, index_t n_rows) {
      const specdec::matrix_view<const float> i(in, n_rows, v);
      const specdec::matrix_view<float> o(out, n_rows, v);
      if (renormalise) sampling::top_k_renorm(b, i, kv, o);
      else sampling::top_k_mask_logits(b, i, kv, o);
    };
    run(x.data(), whole.data(), rows);
    run(in_place.data(), in_place.data(), rows);
    for (index_t r = 0; r < rows; ++r) run(x.data() + r * v, by_row.data() + r * v, 1);
    CAPTURE(renormalise);
    CHECK(same_rows(whole, by_row));
    CHECK(same_rows(in_place, by_row));
  }
  // bf16: the 16-bit stores streamed (64 rows of 131072: 16.8 MB).
  std::vector<specdec::bfloat16> p16(static_cast<std::size_t>(2 * rows * v)), whole16(p16.size()), row16(p16.size());
  for (std::size_t i = 0; i < p16.size(); ++i) p16[i] = specdec::to_bfloat16(probs[i % probs.size()]);
  sampling::top_k_renorm(b, specdec::matrix_view<const specdec::bfloat16>(p16.data(), 2 * rows, v), kv,
                         specdec::matrix_view<specdec::bfloat16>(whole16.data(), 2 * rows, v));
  for (index_t r = 0; r < 2 * rows; ++r)
    sampling::top_k_renorm(b, specdec::matrix_view<const specdec::bfloat16>(p16.data() + r * v, index_t{1}, v), kv,
                           specdec::matrix_view<specdec::bfloat16>(row16.data() + r * v, index_t{1}, v));
  CHECK(std::memcmp(whole16.data(), row16.data(), whole16.size() * sizeof(specdec::bfloat16)) == 0);
}
