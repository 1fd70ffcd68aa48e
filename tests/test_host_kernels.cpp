// SPDX-License-Identifier: Apache-2.0
// The host's vector forms against their plain definitions, bit for bit: Philox fills (uniform floats,
// doubles, exponentials) against philox_stream's scalar values. Built for the portable target
// (specdec_tests) and for this CPU (specdec_tests_native), so each instruction set's path is run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/eigen.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/sampling/distribution.hpp>
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

