// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Faults, host SIMD vectors (GCC / Clang vector extensions) and the row maximum scan.
/// Part of the row kernels (row_kernels.hpp says what they share and why).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/config.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// What a kernel found wrong with its row. Ordered so that the smallest non-zero code of a row is
/// the one reported.
enum class fault : std::int32_t {
  none = 0,
  nan = 1,                    ///< a NaN logit or probability
  positive_infinity = 2,      ///< a +inf logit (-inf is a legal mask value)
  all_masked = 3,             ///< every logit is -inf: no distribution exists
  negative_probability = 4,   ///< a probability below 0
  not_normalised = 5,         ///< a probability row whose sum is not 1 within tolerance
  uniform_out_of_range = 6,   ///< a uniform outside [0, 1)
  index_out_of_range = 7,     ///< a gather index outside the gathered extent
};

/// Probability rows must sum to 1 within this absolute tolerance (fp32 softmax rows of 262144
/// entries sum to 1 within ~1e-6; 1e-4 leaves room for a caller's own renormalisation).
inline constexpr double probability_sum_tolerance = 1e-4;
/// The same for rows of n entries of element type E: what rounding a distribution to a 16-bit type can
/// move its sum by (core/half.hpp's rounding_tolerance) is added.
template <class E>
SPECDEC_HOST_DEVICE constexpr double probability_tolerance(index_t n) noexcept {
  return probability_sum_tolerance + rounding_tolerance<E>(n);
}

/// Maximum of a span and whether it holds a NaN. NaNs are skipped by the maximum (the comparison
/// `acc < v` is false for them) and reported through `has_nan`; +inf shows up as the maximum.
template <class T>
struct max_scan {
  T max;
  bool has_nan;
};

#if !SPECDEC_DEVICE_CODE && (defined(__GNUC__) || defined(__clang__))
#define SPECDEC_HOST_SIMD 1
/// Host SIMD through GCC / Clang vector extensions: portable across x86 SIMD levels and ARM, and
/// unlike auto-vectorisation it does not depend on optimisation flags (measured: the scalar lane
/// loop varied 5x between -O2 and -O3).
#if defined(__AVX__)
inline constexpr int simd_bytes = 32;
#else
inline constexpr int simd_bytes = 16;
#endif
template <class T>
struct simd;
template <>
struct simd<float> {
  typedef float vec __attribute__((vector_size(simd_bytes)));
  typedef std::int32_t mask __attribute__((vector_size(simd_bytes)));
};
template <>
struct simd<double> {
  typedef double vec __attribute__((vector_size(simd_bytes)));
  typedef std::int64_t mask __attribute__((vector_size(simd_bytes)));
};
template <class T>
inline typename simd<T>::vec simd_load(const T* p) noexcept {
  typename simd<T>::vec v;
  std::memcpy(&v, p, sizeof v);  // an unaligned load; compiles to one vmovups
  return v;
}
/// The 16-bit element types load as float vectors of simd<float>'s width: widened in the register,
/// so a bf16 / fp16 row is read once at two bytes per entry and every kernel computes as on floats.
template <>
struct simd<bfloat16> : simd<float> {};
template <>
struct simd<float16> : simd<float> {};
inline simd<float>::vec simd_load(const bfloat16* p) noexcept {
  typedef std::uint32_t words __attribute__((vector_size(simd_bytes)));
#if defined(__AVX2__) && !defined(__clang__)
  // GCC 12 splits the generic widening below into two 128-bit halves and an insert (3 extra uops per
  // vector, measured ~1.3x slower on a memory-bound scan); one vpmovzxwd does it.
  typedef short halves __attribute__((vector_size(16)));
  halves h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<simd<float>::vec>(reinterpret_cast<words>(__builtin_ia32_pmovzxwd256(h)) << 16);
#else
  typedef std::uint16_t halves __attribute__((vector_size(simd_bytes / 2)));
  halves h;
  std::memcpy(&h, p, sizeof h);
  return reinterpret_cast<simd<float>::vec>(__builtin_convertvector(h, words) << 16);
#endif
}
inline simd<float>::vec simd_load(const float16* p) noexcept {
#if defined(__F16C__)
  typedef short halves __attribute__((vector_size(16)));
  static_assert(simd_bytes == 32);
  halves h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_ia32_vcvtph2ps256(h);
#else
  simd<float>::vec v;
  for (int l = 0; l < simd_bytes / 4; ++l) v[l] = widen(p[l]);
  return v;
#endif
}
/// Whether any lane of a comparison mask is set: two 64-bit ORs per 256 bits, then one test, in
/// place of a lane-by-lane reduction.
template <class M>
inline bool any_lane(const M& m) noexcept {
  std::uint64_t words[sizeof(M) / 8];
  std::memcpy(words, &m, sizeof m);
  std::uint64_t any = 0;
  for (std::uint64_t word : words) any |= word;
  return any != 0;
}
/// The lanes of a comparison mask as the low bits of an integer (lane l is bit l).
template <class M>
inline std::uint64_t lane_bits(const M& m) noexcept {
  constexpr int lanes = static_cast<int>(sizeof(M) / sizeof(m[0]));
#if defined(__AVX__)
  if constexpr (sizeof(M) == 32 && sizeof(m[0]) == 4) {
    typedef float vf __attribute__((vector_size(32)));
    return static_cast<std::uint32_t>(__builtin_ia32_movmskps256(reinterpret_cast<vf>(m)));
  }
#endif
  std::uint64_t bits = 0;
  for (int l = 0; l < lanes; ++l) bits |= static_cast<std::uint64_t>(m[l] != 0) << l;
  return bits;
}
#else
#define SPECDEC_HOST_SIMD 0
#endif

/// Entries of element type T per host vector (the 16-bit types widen to float lanes).
#if SPECDEC_HOST_SIMD
template <class T>
inline constexpr int simd_lanes = simd_bytes / static_cast<int>(sizeof(compute_t<T>));
#endif

/// One pass over x[0, n): the maximum (exact in any order, so vector lanes change no result) and
/// whether a NaN was seen. On the host it runs 4 independent vector accumulators; in device code
/// 16 scalar lanes.
template <class E, class T = compute_t<E>>
SPECDEC_HOST_DEVICE inline max_scan<T> scan_max(const E* x, index_t n) noexcept {
#if SPECDEC_HOST_SIMD
  using vec = typename simd<T>::vec;
  using mask = typename simd<T>::mask;
  constexpr int w = simd_lanes<E>;
  vec a0, a1, a2, a3;
  for (int l = 0; l < w; ++l) a0[l] = a1[l] = a2[l] = a3[l] = negative_infinity<T>();
  mask n0{}, n1{}, n2{}, n3{};
  index_t i = 0;
  for (; i + 4 * w <= n; i += 4 * w) {
    const vec v0 = simd_load(x + i), v1 = simd_load(x + i + w), v2 = simd_load(x + i + 2 * w),
              v3 = simd_load(x + i + 3 * w);
    a0 = a0 < v0 ? v0 : a0;
    a1 = a1 < v1 ? v1 : a1;
    a2 = a2 < v2 ? v2 : a2;
    a3 = a3 < v3 ? v3 : a3;
    n0 |= (v0 != v0);
    n1 |= (v1 != v1);
    n2 |= (v2 != v2);
    n3 |= (v3 != v3);
  }
  a0 = a0 < a1 ? a1 : a0;
  a2 = a2 < a3 ? a3 : a2;
  a0 = a0 < a2 ? a2 : a0;
  n0 = (n0 | n1) | (n2 | n3);
  max_scan<T> result{negative_infinity<T>(), false};
  for (int l = 0; l < w; ++l) {
    result.max = result.max < a0[l] ? a0[l] : result.max;
    result.has_nan = result.has_nan || n0[l] != 0;
  }
  // Bounded by a pointer: GCC 12 at -O2, with n known at the call site, misreads the index form after
  // the vector loop as running 2^62 times (-Waggressive-loop-optimizations), as in write_exp_shifted.
  for (const E* end = x + n; x + i < end; ++i) {
    const T v = widen(x[i]);
    result.max = result.max < v ? v : result.max;
    result.has_nan = result.has_nan || v != v;
  }
  return result;
#else
  constexpr int lanes = 16;
  T acc[lanes];
  bool nan = false;
  for (int l = 0; l < lanes; ++l) acc[l] = negative_infinity<T>();
  index_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (int l = 0; l < lanes; ++l) {
      const T v = widen(x[i + l]);
      acc[l] = acc[l] < v ? v : acc[l];
      nan = nan || v != v;
    }
  }
  max_scan<T> result{negative_infinity<T>(), nan};
  for (; i < n; ++i) {
    const T v = widen(x[i]);
    result.max = result.max < v ? v : result.max;
    result.has_nan = result.has_nan || v != v;
  }
  for (int l = 0; l < lanes; ++l) result.max = result.max < acc[l] ? acc[l] : result.max;
  return result;
#endif
}

}  // namespace specdec::detail::inline SPECDEC_ISA
