// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Per-row and per-chunk kernels shared by every backend (host and device code).
///
/// The backends differ in how they schedule work (a loop on one core, a Thrust launch over rows or
/// over (row, chunk) pairs); the arithmetic that decides an integer output lives here, once. That is
/// what makes argmax, top-k and sampling give the same token ids on every backend: comparisons are
/// exact, and every floating-point accumulation that feeds a decision follows the canonical order
/// documented next to it, whichever backend runs it.
///
/// Input validation (NaN, +inf, negative or unnormalised probabilities, uniforms outside [0, 1)) is
/// fused into the same pass as the arithmetic and reported as a `fault`, so checking the data costs no
/// extra pass over memory. The backend turns the first fault into a specdec::invalid_argument.
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

/// One pass over x[0, n): the maximum (exact in any order, so vector lanes change no result) and
/// whether a NaN was seen. On the host it runs 4 independent vector accumulators; in device code
/// 16 scalar lanes.
template <class T>
SPECDEC_HOST_DEVICE inline max_scan<T> scan_max(const T* x, index_t n) noexcept {
#if SPECDEC_HOST_SIMD
  using vec = typename simd<T>::vec;
  using mask = typename simd<T>::mask;
  constexpr int w = simd_bytes / static_cast<int>(sizeof(T));
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
  for (; i < n; ++i) {
    const T v = x[i];
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
      const T v = x[i + l];
      acc[l] = acc[l] < v ? v : acc[l];
      nan = nan || v != v;
    }
  }
  max_scan<T> result{negative_infinity<T>(), nan};
  for (; i < n; ++i) {
    const T v = x[i];
    result.max = result.max < v ? v : result.max;
    result.has_nan = result.has_nan || v != v;
  }
  for (int l = 0; l < lanes; ++l) result.max = result.max < acc[l] ? acc[l] : result.max;
  return result;
#endif
}

#if SPECDEC_HOST_SIMD
/// exp over a float vector: Cephes' expf polynomial (relative error ~1 ulp on [-87.3, 88.7]).
/// Inputs below -87.3 (including -inf, the mask value) give exactly 0, so a masked token has
/// probability exactly 0; inputs are <= 0 wherever it is used (x - max), so overflow cannot occur.
inline simd<float>::vec simd_exp(simd<float>::vec x) noexcept {
  using vec = simd<float>::vec;
  using mask = simd<float>::mask;
  const mask underflow = x < -87.3f;
  x = underflow ? vec{} - 87.3f : x;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick: the integer lands in the low mantissa bits.
  const vec big = x * 1.44269504088896341f + 12582912.0f;
  const vec fn = big - 12582912.0f;
  mask n;
  std::memcpy(&n, &big, sizeof n);
  n -= 0x4B400000;
  const vec r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;  // x - n ln 2 in two steps
  // exp(r) = 1 + r + r^2 q(r), q evaluated by Estrin's scheme: three short chains instead of one
  // six deep, which is what bounds this loop (measured 1.7x faster than Horner here).
  const vec r2 = r * r;
  const vec q = (r * 1.6666665459e-1f + 5.0000001201e-1f) + r2 * (r * 8.3334519073e-3f + 4.1665795894e-2f) +
                (r2 * r2) * (r * 1.9875691500e-4f + 1.3981999507e-3f);
  const vec p = r2 * q + r + 1.0f;
  const mask scale_bits = (n + 127) << 23;
  vec scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const vec result = p * scale;
  return underflow ? vec{} : result;
}
#endif

#if SPECDEC_HOST_SIMD
/// a * b + c with one rounding where the CPU has FMA, spelled out so that it does not depend on the
/// compiler contracting a * b + c (GCC does under -std=gnu++20, not under -std=c++20).
inline simd<float>::vec simd_fma(const simd<float>::vec& a, const simd<float>::vec& b,
                                 const simd<float>::vec& c) noexcept {
#if defined(__FMA__) && defined(__AVX__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#elif defined(__FMA__)
  return __builtin_ia32_vfmaddps(a, b, c);
#else
  return a * b + c;
#endif
}

/// Sum over x[0, n) (rounded down to a multiple of 2 vectors) of term(vector of x), two independent
/// accumulators; `next` as in sum_exp_shifted.
template <class Term>
inline simd<float>::vec simd_sum_terms(const float* x, index_t n, const float* next, index_t next_n,
                                       const Term& term) noexcept {
  using vec = simd<float>::vec;
  constexpr int w = simd_bytes / 4;
  constexpr index_t line = 64 / sizeof(float);
  vec s0{}, s1{};
  for (index_t i = 0; i + 2 * w <= n; i += 2 * w) {
    if (next != nullptr) {
      for (index_t l = i; l < i + 2 * w && l < next_n; l += line) __builtin_prefetch(next + l);
    }
    s0 += term(simd_load(x + i));
    s1 += term(simd_load(x + i + w));
  }
  return s0 + s1;
}

/// 2^n * p where `big` holds n + 127 in its low mantissa bits (big = 1.5 * 2^23 + 127 + n, see
/// round_to_exponent_shift) and -126 <= n <= 127: big's bits shifted up by 23 are the float 2^n (the
/// high bits of 1.5 * 2^23 shift out), and p is multiplied by it, exactly for a normal result.
/// A multiply, not an integer add of n to p's exponent bits: a NaN p then stays NaN whatever its
/// payload (the add carried some payloads into finite numbers, and block_maxima_sum_exp finds a NaN
/// logit by its NaN sum). Unsigned lanes: a term whose exponent leaves the range (which
/// block_maxima_sum_exp computes and then discards) wraps instead of overflowing a signed integer.
inline simd<float>::vec simd_scale_by_exponent(const simd<float>::vec& p, const simd<float>::vec& big) noexcept {
  typedef std::uint32_t mask __attribute__((vector_size(simd_bytes)));
  mask bits;
  std::memcpy(&bits, &big, sizeof bits);
  bits <<= 23;
  simd<float>::vec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/// 2^f for |f| <= 1/2 (a little beyond is fine): degree-5 minimax polynomial, relative error
/// <= 2.4e-7 in fp32.
inline simd<float>::vec simd_exp2_reduced(const simd<float>::vec& f) noexcept {
  using vec = simd<float>::vec;
  vec p = simd_fma(f, vec{} + 1.3276472e-3f, vec{} + 9.6755419e-3f);
  p = simd_fma(p, f, vec{} + 5.5507131e-2f);
  p = simd_fma(p, f, vec{} + 2.4022120e-1f);
  p = simd_fma(p, f, vec{} + 6.9314694e-1f);
  return simd_fma(p, f, vec{} + 1.0000001f);
}

inline constexpr float round_to_int_shift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
/// round_to_int_shift plus the float exponent bias: big = y + this rounds y to an integer n and holds
/// n + 127 in its low bits, the form simd_scale_by_exponent reads.
inline constexpr float round_to_exponent_shift = round_to_int_shift + 127.0f;

#if defined(__FMA__)
/// The terms 2^(x * c - ref) for an integer ref = ceil(m * c) with |ref| < 2^22 - 128, built from a
/// reference value m: what sum_exp_shifted spends its time in when the CPU has FMA.
///
/// Each term is 2^(n + f) with n = round(x * c) - ref and f = x * c - round(x * c). The rounding is
/// the 1.5 * 2^23 trick folded into FMAs: big = x * c + (1.5 * 2^23 + 127 - ref) holds n + 127 in
/// its low mantissa bits, and f = x * c + ((1.5 * 2^23 + 127 - ref) - big) is exact up to the FMA's
/// one rounding, because 1.5 * 2^23 + 127 - ref is an integer (below 2^24) (with ref = m * c itself the constant would not be
/// exact; without a fused multiply-add, x * c would be rounded at the magnitude of x * c). x is
/// first raised to the value whose exponent is -125, so -inf (the mask value) needs no special case:
/// a term below 2^-125 reads as about 2^-125, which moves a sum that holds a term >= 1/2 by less
/// than V * 2^-124 relative.
///
/// Measured on the CI machine's CPU: 0.20-0.25 ns per float from L1, against 0.29-0.32 for the
/// (x - m) * c form below; one instruction fewer and a shorter chain from the load to the
/// polynomial.
struct integer_reference_terms {
  using vec = simd<float>::vec;
  float c, ref;
  vec scale, shift, lowest;
  /// Whether the integer reference for m exists (|ceil(m c)| < 2^22 - 128).
  static bool representable(float m, float c) noexcept {
    const float r = std::ceil(m * c);
    return r > -4194000.0f && r < 4194000.0f;
  }
  integer_reference_terms(float c_, float m) noexcept
      : c(c_), ref(std::ceil(m * c_)), scale(vec{} + c_), shift(vec{} + (round_to_exponent_shift - ref)),
        lowest(vec{} + (ref - 125.0f) / c_) {}
  vec operator()(vec v) const noexcept {
    v = lowest > v ? lowest : v;
    const vec big = simd_fma(v, scale, shift);
    return simd_scale_by_exponent(simd_exp2_reduced(simd_fma(v, scale, shift - big)), big);
  }
  /// One term in double (for the few entries outside whole vectors).
  double scalar(float x) const noexcept { return std::exp2(std::fma(static_cast<double>(x), c, -static_cast<double>(ref))); }
  /// log2(2^ref / 2^(max c)), with max c taken exactly (its FMA residual): a sum of terms times
  /// 2^this is the sum of 2^((x - max) c).
  double log2_reference_over(float max) const noexcept {
    const float max_c = max * c;
    return (static_cast<double>(ref) - max_c) - std::fma(max, c, -max_c);
  }
};
#endif

/// The terms 2^((x - m) * c) for a reference value m: the form that needs no FMA. (x - m) * c is
/// clamped at -126, so -inf and far-below terms read as about 2^-126. Same interface as
/// integer_reference_terms.
struct shifted_reference_terms {
  using vec = simd<float>::vec;
  float c, ref;
  static bool representable(float, float) noexcept { return true; }
  shifted_reference_terms(float c_, float m) noexcept : c(c_), ref(m) {}
  vec operator()(vec v) const noexcept {
    vec t = (v - ref) * c;
    t = (vec{} - 126.0f) > t ? vec{} - 126.0f : t;
    const vec big = t + round_to_exponent_shift;
    return simd_scale_by_exponent(simd_exp2_reduced(t - (big - round_to_exponent_shift)), big);
  }
  double scalar(float x) const noexcept { return std::exp2((static_cast<double>(x) - ref) * c); }
  double log2_reference_over(float max) const noexcept { return (static_cast<double>(ref) - max) * c; }
};

/// The fastest term form this build has.
#if defined(__FMA__)
using reference_terms = integer_reference_terms;
#else
using reference_terms = shifted_reference_terms;
#endif
#endif

/// sum_j exp((x[j] - max) * inv_t) over x[0, n) with max > -inf finite (exp is exactly 0 at -inf).
/// `next`, when given, is the chunk the caller reads after this one: on the host its cache lines are
/// prefetched while this chunk's exponentials are computed, so the memory stream keeps running under
/// the arithmetic instead of pausing for it (the exp pass reads x from L1).
template <class T>
SPECDEC_HOST_DEVICE inline T sum_exp_shifted(const T* x, index_t n, T max, T inv_t,
                                             const T* next = nullptr, index_t next_n = 0) noexcept {
  index_t i = 0;
  T sum = T(0);
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    constexpr int w = simd_bytes / 4;
    const float c = inv_t * 1.44269504088896341f;
    simd<float>::vec s;
    double factor = 1.0;
    if (reference_terms::representable(max, c)) {
      const reference_terms terms(c, max);
      s = simd_sum_terms(x, n, next, next_n, terms);
      factor = std::exp2(terms.log2_reference_over(max));  // 1 for the shifted form
    } else {  // logits near 2^22 / c: the integer reference would not be exact
      s = simd_sum_terms(x, n, next, next_n, shifted_reference_terms(c, max));
    }
    for (int l = 0; l < w; ++l) sum += s[l];
    sum = static_cast<float>(static_cast<double>(sum) * factor);
    i = n / (2 * w) * (2 * w);
  }
#endif
  for (; i < n; ++i) sum += exp_((x[i] - max) * inv_t);
  return sum;
}

/// out[j] = exp((x[j] - max) * inv_t) * scale over [0, n); out may alias x.
template <class T>
SPECDEC_HOST_DEVICE inline void write_exp_shifted(const T* x, index_t n, T max, T inv_t, T scale, T* out) noexcept {
  index_t i = 0;
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    using vec = simd<float>::vec;
    constexpr int w = simd_bytes / 4;
    for (; i + w <= n; i += w) {
      const vec y = simd_exp((simd_load(x + i) - max) * inv_t) * scale;
      std::memcpy(out + i, &y, sizeof y);
    }
  }
#endif
  // Bounded by a pointer, not `i < n`: GCC 12 at -O2, with n known at the call site, misreads the
  // index form after the SIMD loop as running 2^62 times (-Waggressive-loop-optimizations).
  for (const T* end = x + n; x + i < end; ++i) out[i] = exp_((x[i] - max) * inv_t) * scale;
}

#if SPECDEC_HOST_SIMD && (defined(__x86_64__) || defined(__i386__))
#define SPECDEC_HOST_STREAM_STORES 1
/// Stores a vector to 32- (AVX) or 16-byte aligned `p` without reading its cache line first and
/// without keeping it in cache (movntps): an output larger than the caches then costs one write of
/// memory instead of a read and a write.
/// Compiler builtins rather than <immintrin.h>, whose AVX-512 parts GCC 12 warns about wherever they
/// are included outside backend/eigen.hpp's guard.
inline void stream_store(float* p, simd<float>::vec v) noexcept {
#if defined(__clang__)
  __builtin_nontemporal_store(v, reinterpret_cast<simd<float>::vec*>(p));
#elif defined(__AVX__)
  __builtin_ia32_movntps256(p, v);
#else
  __builtin_ia32_movntps(p, v);
#endif
}
inline void stream_fence() noexcept { __builtin_ia32_sfence(); }
#endif

/// out[j] = (x[j] - max) * inv_t - log_sum over [0, n) (a log-softmax row); out may alias x. Every
/// entry is the same expression whether a vector or the scalar tail computes it. `streaming`: write
/// with non-temporal stores (for outputs larger than the caches; the caller's next read of `out`
/// then comes from memory).
template <class T>
SPECDEC_HOST_DEVICE inline void write_log_shifted(const T* x, index_t n, T max, T inv_t, T log_sum, T* out, bool streaming) noexcept {
  index_t i = 0;
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    using vec = simd<float>::vec;
    constexpr int w = simd_bytes / 4;
#if SPECDEC_HOST_STREAM_STORES
    if (streaming) {
      for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % simd_bytes != 0; ++i) out[i] = (x[i] - max) * inv_t - log_sum;
      for (; i + w <= n; i += w) stream_store(out + i, (simd_load(x + i) - max) * inv_t - log_sum);
      stream_fence();  // the streamed lines are visible before the caller reads them
    }
#else
    (void)streaming;
#endif
    for (; i + w <= n; i += w) {
      const vec y = (simd_load(x + i) - max) * inv_t - log_sum;
      std::memcpy(out + i, &y, sizeof y);
    }
  }
#else
  (void)streaming;
#endif
  for (const T* end = x + n; x + i < end; ++i) out[i] = (x[i] - max) * inv_t - log_sum;
}

/// Bytes of output above which row_log_softmax streams its stores past the caches.
inline constexpr index_t streaming_output_bytes = index_t{1} << 25;

/// What a softmax normalises a row with: its maximum and sum exp((x - max) / T).
template <class T>
struct softmax_stats {
  T max;
  T sum;
};

/// Entry j of what write_exp_shifted writes over [0, n), computed alone (bit for bit the same: the
/// same vector block, or the same scalar tail). What a softmax entry costs once the row's
/// (max, sum) are known, without writing the row.
template <class T>
SPECDEC_HOST_DEVICE inline T exp_shifted_at(const T* x, index_t n, index_t j, T max, T inv_t, T scale) noexcept {
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    constexpr int w = simd_bytes / 4;
    if (j < n / w * w) {
      const index_t base = j / w * w;
      const simd<float>::vec y = simd_exp((simd_load(x + base) - max) * inv_t) * scale;
      return y[j - base];
    }
  }
#endif
  return exp_((x[j] - max) * inv_t) * scale;
}

/// Fault of a logits row given its maximum and NaN flag.
template <class T>
SPECDEC_HOST_DEVICE inline fault logits_fault(const max_scan<T>& s) noexcept {
  if (s.has_nan) return fault::nan;
  if (s.max == -negative_infinity<T>()) return fault::positive_infinity;
  return fault::none;
}

/// First index of `value` in x[0, n) (the caller knows it is there).
template <class T>
SPECDEC_HOST_DEVICE inline index_t find_first(const T* x, index_t n, T value) noexcept {
  for (index_t j = 0; j < n; ++j)
    if (x[j] == value) return j;
  return 0;
}

/// Argmax over a row: the maximum and its lowest index. One pass of chunked max-reductions remembers
/// the first chunk that holds the row's maximum (a chunk must beat the running maximum strictly, so an
/// equal maximum later in the row keeps the earlier chunk); one second look at that chunk alone finds
/// the index. Looking again at every chunk that raised the maximum (about ln(V / chunk) + 0.6 of them
/// on a random row) cost up to a quarter of a pass at V = 32000.
template <class T>
struct argmax_result {
  T value;
  index_t index;
  fault error;
};

inline constexpr index_t argmax_chunk = 2048;

template <class T>
SPECDEC_HOST_DEVICE inline argmax_result<T> argmax_row(const T* x, index_t n) noexcept {
  argmax_result<T> best{negative_infinity<T>(), 0, fault::none};
  bool has_nan = false;
  index_t best_chunk = -1;
  for (index_t c0 = 0; c0 < n; c0 += argmax_chunk) {
    const index_t len = n - c0 < argmax_chunk ? n - c0 : argmax_chunk;
    const max_scan<T> s = scan_max(x + c0, len);
    has_nan = has_nan || s.has_nan;
    if (s.max > best.value) {  // strict: an equal maximum later in the row keeps the lower index
      best.value = s.max;
      best_chunk = c0;
    }
  }
  if (best_chunk >= 0) {
    const index_t len = n - best_chunk < argmax_chunk ? n - best_chunk : argmax_chunk;
    best.index = best_chunk + find_first(x + best_chunk, len, best.value);
  }
  best.error = logits_fault(max_scan<T>{best.value, has_nan});
  return best;
}

/// A running top-k: `count` entries sorted by value descending, ties by index ascending, in caller
/// memory (k values, k indices). Candidates must be offered in increasing index order *within one
/// accumulator*, which is what makes "ties to the lower index" a plain strict comparison: a later
/// candidate equal to the current k-th value loses.
template <class T>
struct topk_accumulator {
  T* values;
  std::int32_t* indices;
  index_t k;
  index_t count;

  SPECDEC_HOST_DEVICE bool full() const noexcept { return count == k; }
  /// The value a new candidate must beat (strictly) once the accumulator is full.
  SPECDEC_HOST_DEVICE T threshold() const noexcept { return values[k - 1]; }
  /// The largest value offered so far (count > 0).
  SPECDEC_HOST_DEVICE T best() const noexcept { return values[0]; }

  /// Offers candidate (v, i) whose index is larger than every index offered before.
  SPECDEC_HOST_DEVICE void offer(T v, std::int32_t i) noexcept {
    if (count == k && !(v > values[k - 1])) return;
    const index_t last = count < k ? count : k - 1;  // the slot that is overwritten or filled
    // The first entry the candidate beats (an equal value stays ahead: it has the lower index), by a
    // binary search whose steps are conditional moves, not branches: candidates arrive in no
    // predictable order, and a mispredicted step cost more than the whole search.
    // The step sizes depend on `last` only, so the loop's own branch is predictable too.
    index_t pos = 0;
    if (last > 0) {
      for (index_t len = last; len > 1; len -= len / 2) pos = v > values[pos + len / 2] ? pos : pos + len / 2;
      pos += v > values[pos] ? 0 : 1;
    }
#if SPECDEC_DEVICE_CODE
    for (index_t j = last; j > pos; --j) {
      values[j] = values[j - 1];
      indices[j] = indices[j - 1];
    }
#else
    std::memmove(values + pos + 1, values + pos, static_cast<std::size_t>(last - pos) * sizeof(T));
    std::memmove(indices + pos + 1, indices + pos, static_cast<std::size_t>(last - pos) * sizeof(std::int32_t));
#endif
    values[pos] = v;
    indices[pos] = i;
    if (count < k) ++count;
  }
};

/// Total order of (value, index) candidates used by every top-k: larger value first, then lower
/// index. NaN never reaches it (rows with NaN are rejected).
template <class T>
SPECDEC_HOST_DEVICE inline bool ranks_before(T va, std::int32_t ia, T vb, std::int32_t ib) noexcept {
  return va > vb || (va == vb && ia < ib);
}

/// Top-k of x[0, n) in blocks: a block none of whose entries can beat the current k-th value is
/// passed after one vectorised compare per entry, so for typical logits almost every block costs
/// that compare only; inside a block that holds a candidate, only the vectors that hold one are
/// looked at entry by entry. `Accumulator` is topk_accumulator or anything with its interface
/// (`k`, `count`, `full`, `threshold`, `offer`, `best`); offers come in increasing index order.
/// `offset` is added to reported indices.
///
/// Returns whether a NaN was seen and the maximum of everything the accumulator was offered, this
/// span included: once the accumulator is full, the maximum is its best entry (a new maximum beats
/// the threshold, so it is offered), which is what spares the block loop a max-reduction.
inline constexpr index_t topk_block = 64;

/// Blocks whose maxima seed an empty top-k (see topk_scan).
inline constexpr index_t topk_seed_blocks = 32;

#if SPECDEC_HOST_SIMD
/// A floor under the top-k of x[0, topk_seed_blocks * topk_block):
/// the k-th largest of the blocks' maxima (k <= topk_seed_blocks). k distinct entries reach it, so an
/// entry below it cannot be among the k best. NaNs are passed over (the caller's scan reports them).
template <class T>
inline T topk_seed_floor(const T* x, index_t k) noexcept {
  using vec = typename simd<T>::vec;
  constexpr int w = simd_bytes / static_cast<int>(sizeof(T));
  T maxima[topk_seed_blocks];
  for (index_t b = 0; b < topk_seed_blocks; ++b) {
    vec m = simd_load(x + b * topk_block);
    for (index_t j = w; j < topk_block; j += w) {
      const vec v = simd_load(x + b * topk_block + j);
      m = m < v ? v : m;
    }
    T block_max = m[0];
    for (int l = 1; l < w; ++l) block_max = block_max < m[l] ? m[l] : block_max;
    maxima[b] = block_max != block_max ? negative_infinity<T>() : block_max;
  }
  // The k-th largest by a partial selection sort: k <= 32 passes over 32 values.
  for (index_t i = 0; i < k; ++i) {
    index_t best = i;
    for (index_t j = i + 1; j < topk_seed_blocks; ++j) best = maxima[j] > maxima[best] ? j : best;
    const T v = maxima[best];
    maxima[best] = maxima[i];
    maxima[i] = v;
  }
  return maxima[k - 1];
}
#endif

template <class T, class Accumulator>
SPECDEC_HOST_DEVICE inline max_scan<T> topk_scan(const T* x, index_t n, index_t offset, Accumulator& acc) noexcept {
  max_scan<T> total{negative_infinity<T>(), false};
  index_t b0 = 0;
#if SPECDEC_HOST_SIMD
  // Filling an empty accumulator with every entry until it is full, and then raising its threshold
  // one insertion at a time, costs k ln(span / k) insertions over the first span; on a row of
  // 32000 that was two thirds of all of them. A floor from the first 32 blocks' maxima lets only
  // the entries that reach it in (about k for random logits); the accumulator is full after them.
  if (acc.count == 0 && acc.k <= topk_seed_blocks && n >= topk_seed_blocks * topk_block) {
    using vec = typename simd<T>::vec;
    constexpr int w = simd_bytes / static_cast<int>(sizeof(T));
    const T floor = topk_seed_floor(x, acc.k);
    for (; b0 < topk_seed_blocks * topk_block; b0 += w) {
      const vec v = simd_load(x + b0);
      if (!any_lane(!(v < floor))) continue;  // "not below the floor": at or above it, or NaN
      for (int l = 0; l < w; ++l) {
        const T e = v[l];
        total.has_nan = total.has_nan || e != e;
        if (e >= floor && (!acc.full() || e > acc.threshold())) acc.offer(e, static_cast<std::int32_t>(offset + b0 + l));
      }
    }
  }
#endif
  // Until the accumulator is full every entry is a candidate.
  for (; b0 < n && !acc.full(); ++b0) {
    const T v = x[b0];
    total.max = total.max < v ? v : total.max;
    total.has_nan = total.has_nan || v != v;
    acc.offer(v, static_cast<std::int32_t>(offset + b0));
  }
  // An entry is looked at one by one only when it is "not <= threshold": above it, or NaN. Folding
  // the NaN test into the candidate test keeps the common path at one compare per entry; the rare
  // slow path sorts out which it was. The threshold only rises, so a later look can only drop
  // candidates an earlier one found.
  const auto offer_entry = [&](T v, index_t i) {
    total.has_nan = total.has_nan || v != v;
    if (v > acc.threshold()) acc.offer(v, static_cast<std::int32_t>(offset + i));
  };
#if SPECDEC_HOST_SIMD
  {
    using mask = typename simd<T>::mask;
    constexpr int w = simd_bytes / static_cast<int>(sizeof(T));
    static_assert(topk_block % w == 0);
    for (; b0 + topk_block <= n; b0 += topk_block) {
      const T threshold = acc.threshold();
      mask candidate{};
      for (index_t j = 0; j < topk_block; j += w) candidate |= !(simd_load(x + b0 + j) <= threshold);
      if (!any_lane(candidate)) continue;
      // One bit per entry of the block that was "not <= threshold", then a walk over the set bits:
      // one loop whose exit is the only unpredictable branch, where a test per vector and per lane
      // cost a misprediction each on the way to every candidate.
      std::uint64_t bits = 0;
      for (index_t j = 0; j < topk_block; j += w) bits |= lane_bits(!(simd_load(x + b0 + j) <= threshold)) << j;
      for (; bits != 0; bits &= bits - 1) {
        const index_t i = b0 + __builtin_ctzll(bits);
        offer_entry(x[i], i);
      }
    }
  }
#endif
  for (; b0 < n; ++b0) {
    const T v = x[b0];
    if (!(v <= acc.threshold())) offer_entry(v, b0);
  }
  if (acc.full() && total.max < acc.best()) total.max = acc.best();
  return total;
}

// ---------------------------------------------------------------------------------------------------
// Sampling: the canonical accumulation order.
//
// A row of V probabilities is cut into chunks of `sample_chunk` entries. The mass of a chunk is
// accumulated in double over 8 lanes (lane l takes the entries whose offset in the chunk is
// congruent to l mod 8, in index order) and the lanes are combined as ((0+1)+(2+3))+((4+5)+(6+7)).
// The row total is the sum of chunk masses in chunk order. Given a uniform u, the target is
// u * total; the chosen chunk is the first whose running total (chunk order) exceeds the target and
// whose mass is positive; inside it the entries are walked in index order, adding to the running
// total in double, and the token is the first entry with positive mass whose running total exceeds
// the target. Rounding may leave the walk short of the target by an ulp, in which case the last
// entry of the chunk with positive mass is taken. Every backend follows exactly this order, so the
// same uniform gives the same token everywhere.
// ---------------------------------------------------------------------------------------------------

inline constexpr index_t sample_chunk = 1024;

/// Mass of one chunk of a probability row plus what was wrong with it.
struct chunk_mass {
  double mass;
  bool has_nan;
  bool has_negative;
};

/// The entries a sampler draws from: plain probabilities p, or the residual max(0, p - q).
template <class T>
struct probability_source {
  const T* p;
  SPECDEC_HOST_DEVICE T operator()(index_t j) const noexcept { return p[j]; }
};
template <class T>
struct residual_source {
  const T* p;
  const T* q;
  SPECDEC_HOST_DEVICE T operator()(index_t j) const noexcept {
    const T r = p[j] - q[j];
    return r > T(0) ? r : T(0);
  }
};

SPECDEC_HOST_DEVICE inline double combine_lanes(const double (&lane)[8]) noexcept {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/// Canonical mass of x[0, n) (n <= sample_chunk) with NaN / negative flags.
template <class T>
SPECDEC_HOST_DEVICE inline chunk_mass probability_chunk_mass(const T* x, index_t n) noexcept {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int32_t nan[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int32_t neg[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const T v = x[i + l];
      lane[l] += static_cast<double>(v);
      nan[l] |= static_cast<std::int32_t>(v != v);
      neg[l] |= static_cast<std::int32_t>(v < T(0));
    }
  }
  for (int l = 0; i + l < n; ++l) {
    const T v = x[i + l];
    lane[l] += static_cast<double>(v);
    nan[l] |= static_cast<std::int32_t>(v != v);
    neg[l] |= static_cast<std::int32_t>(v < T(0));
  }
  chunk_mass result{combine_lanes(lane), false, false};
  for (int l = 0; l < 8; ++l) {
    result.has_nan = result.has_nan || nan[l] != 0;
    result.has_negative = result.has_negative || neg[l] != 0;
  }
  return result;
}

/// Canonical mass of the residual max(0, p - q) over a chunk, plus the masses of p and q themselves
/// (to check both are distributions) and their NaN / negative flags.
struct residual_chunk_mass {
  double residual;
  chunk_mass p;
  chunk_mass q;
};

template <class T>
SPECDEC_HOST_DEVICE inline residual_chunk_mass residual_mass(const T* p, const T* q, index_t n) noexcept {
  // One pass: residual, p and q masses, each over the same 8 canonical lanes.
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, p_lane[8] = {0, 0, 0, 0, 0, 0, 0, 0},
         q_lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int32_t flags[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // bit 0: NaN in p, 1: negative p, 2: NaN in q, 3: negative q
  const auto step = [&](int l, T pv, T qv) {
    const T r = pv - qv;
    lane[l] += static_cast<double>(r > T(0) ? r : T(0));
    p_lane[l] += static_cast<double>(pv);
    q_lane[l] += static_cast<double>(qv);
    flags[l] |= static_cast<std::int32_t>(pv != pv) | (static_cast<std::int32_t>(pv < T(0)) << 1) |
                (static_cast<std::int32_t>(qv != qv) << 2) | (static_cast<std::int32_t>(qv < T(0)) << 3);
  };
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) step(l, p[i + l], q[i + l]);
  for (int l = 0; i + l < n; ++l) step(l, p[i + l], q[i + l]);
  std::int32_t all = 0;
  for (int l = 0; l < 8; ++l) all |= flags[l];
  return residual_chunk_mass{combine_lanes(lane), chunk_mass{combine_lanes(p_lane), (all & 1) != 0, (all & 2) != 0},
                             chunk_mass{combine_lanes(q_lane), (all & 4) != 0, (all & 8) != 0}};
}

#if SPECDEC_HOST_SIMD
/// Host fp32 forms of probability_chunk_mass / residual_mass with the same 8 canonical lanes: lanes
/// 0-3 and 4-7 of each 8 entries are two vectors of 4 doubles, and each lane still adds its entries
/// one at a time in index order, so every mass is bit-identical to the scalar form. What changes is
/// throughput: a chunk's lane sums are two dependency chains of double adds, which alone run slower
/// than memory, so probability masses are taken two chunks at a time (four independent chains), and
/// the residual's three sums give six chains within one chunk.
namespace simd_mass {
typedef float f4 __attribute__((vector_size(16)));
typedef double d4 __attribute__((vector_size(32)));
typedef std::int32_t i4 __attribute__((vector_size(16)));
typedef float f8 __attribute__((vector_size(32)));
typedef std::int32_t i8 __attribute__((vector_size(32)));

inline f4 load4(const float* p) noexcept {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Vectors of 4 doubles are 32 bytes: taking or returning one by value would change the ABI of builds
// without AVX (GCC's -Wpsabi), so conversions are written inline and vectors pass by reference. With
// AVX the conversion is the one-instruction vcvtps2pd (GCC splits __builtin_convertvector into two
// half conversions and an insert on some tunings).
#if defined(__AVX__)
#define SPECDEC_WIDEN4(v) __builtin_ia32_cvtps2pd256(v)
#else
#define SPECDEC_WIDEN4(v) __builtin_convertvector(v, d4)
#endif
inline double combine(const d4& lo, const d4& hi) noexcept {
  const double lane[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
  return combine_lanes(lane);
}
}  // namespace simd_mass

/// Canonical masses of every chunk of a float row `x[0, n)` into `out[chunks]`.
inline void probability_chunk_masses(const float* x, index_t n, chunk_mass* out) noexcept {
  using namespace simd_mass;
  const index_t chunks = (n + sample_chunk - 1) / sample_chunk;
  index_t c = 0;
  for (; c + 1 < chunks && (c + 2) * sample_chunk <= n; c += 2) {  // two full chunks side by side
    const float* a = x + c * sample_chunk;
    const float* b = a + sample_chunk;
    d4 a_lo = {0, 0, 0, 0}, a_hi = a_lo, b_lo = a_lo, b_hi = a_lo;
    // The flags take one compare and one minimum per 8 entries: NaN through v != v, negatives
    // through the running minimum (a NaN never replaces it: the comparison is false).
    f8 a_min = {0, 0, 0, 0, 0, 0, 0, 0}, b_min = a_min;
    i8 a_nan = {0, 0, 0, 0, 0, 0, 0, 0}, b_nan = a_nan;
    // Two streams 4 KiB apart defeat the hardware prefetcher on rows read from DRAM: both are
    // prefetched 8 KiB ahead (the next pair of chunks; measured best of 1.5-16 KiB), and only inside
    // the row, so no pointer past it is ever formed.
    const index_t ahead = n - (c + 2) * sample_chunk;  // entries of the row from the next pair on
    for (index_t i = 0; i < sample_chunk; i += 8) {
      if (i < ahead) __builtin_prefetch(a + 2 * sample_chunk + i);
      if (i + sample_chunk < ahead) __builtin_prefetch(b + 2 * sample_chunk + i);
      f8 av, bv;  // 32-byte vectors stay in the function (no by-value ABI crossing)
      std::memcpy(&av, a + i, sizeof av);
      std::memcpy(&bv, b + i, sizeof bv);
      a_lo += SPECDEC_WIDEN4(load4(a + i));
      a_hi += SPECDEC_WIDEN4(load4(a + i + 4));
      b_lo += SPECDEC_WIDEN4(load4(b + i));
      b_hi += SPECDEC_WIDEN4(load4(b + i + 4));
      a_nan |= av != av;
      b_nan |= bv != bv;
      a_min = av < a_min ? av : a_min;
      b_min = bv < b_min ? bv : b_min;
    }
    const f8 zero = {0, 0, 0, 0, 0, 0, 0, 0};
    out[c] = chunk_mass{combine(a_lo, a_hi), any_lane(a_nan), any_lane(a_min < zero)};
    out[c + 1] = chunk_mass{combine(b_lo, b_hi), any_lane(b_nan), any_lane(b_min < zero)};
  }
  for (; c < chunks; ++c) out[c] = probability_chunk_mass(x + c * sample_chunk, std::min(sample_chunk, n - c * sample_chunk));
}

/// Canonical residual, p and q masses of every chunk of float rows `p, q [0, n)` into `out[chunks]`.
inline void residual_chunk_masses(const float* p, const float* q, index_t n, residual_chunk_mass* out) noexcept {
  using namespace simd_mass;
  const index_t chunks = (n + sample_chunk - 1) / sample_chunk;
  for (index_t c = 0; c < chunks; ++c) {
    const index_t c0 = c * sample_chunk, len = std::min(sample_chunk, n - c0);
    if (len < sample_chunk) {
      out[c] = residual_mass(p + c0, q + c0, len);
      continue;
    }
    d4 r_lo = {0, 0, 0, 0}, r_hi = r_lo, p_lo = r_lo, p_hi = r_lo, q_lo = r_lo, q_hi = r_lo;
    i4 p_nan = {0, 0, 0, 0}, p_neg = p_nan, q_nan = p_nan, q_neg = p_nan;
    const f4 zero = {0, 0, 0, 0};
    for (index_t i = c0; i < c0 + sample_chunk; i += 8) {
      const f4 p0 = load4(p + i), p1 = load4(p + i + 4), q0 = load4(q + i), q1 = load4(q + i + 4);
      const f4 d0 = p0 - q0, d1 = p1 - q1;
      // max(0, p - q) as the scalar form takes it: the difference where it is > 0, else 0 (NaN -> 0).
      const f4 r0 = d0 > zero ? d0 : zero, r1 = d1 > zero ? d1 : zero;
      r_lo += SPECDEC_WIDEN4(r0);
      r_hi += SPECDEC_WIDEN4(r1);
      p_lo += SPECDEC_WIDEN4(p0);
      p_hi += SPECDEC_WIDEN4(p1);
      q_lo += SPECDEC_WIDEN4(q0);
      q_hi += SPECDEC_WIDEN4(q1);
      p_nan |= (p0 != p0) | (p1 != p1);
      p_neg |= (p0 < zero) | (p1 < zero);
      q_nan |= (q0 != q0) | (q1 != q1);
      q_neg |= (q0 < zero) | (q1 < zero);
    }
    out[c] = residual_chunk_mass{combine(r_lo, r_hi), chunk_mass{combine(p_lo, p_hi), any_lane(p_nan), any_lane(p_neg)},
                                 chunk_mass{combine(q_lo, q_hi), any_lane(q_nan), any_lane(q_neg)}};
  }
}
#undef SPECDEC_WIDEN4
#endif  // SPECDEC_HOST_SIMD

/// Picks the token for `target` (= u * total) given the chunk masses of the row (in chunk order)
/// and the entries. Implements the canonical search described above.
template <class Source>
SPECDEC_HOST_DEVICE inline std::int32_t locate_sample(const double* chunk_masses, index_t n,
                                                      const Source& entry, double target) noexcept {
  const index_t chunks = (n + sample_chunk - 1) / sample_chunk;
  double before = 0.0;  // running total of the chunks before c
  index_t c = 0;
  index_t last_positive_chunk = -1;
  for (; c < chunks; ++c) {
    const double m = chunk_masses[c];
    if (m > 0.0) {
      last_positive_chunk = c;
      if (before + m > target) break;
    }
    before += m;
  }
  if (c == chunks) {  // rounding pushed the target past every chunk: take the last chunk with mass
    c = last_positive_chunk < 0 ? 0 : last_positive_chunk;
    before = 0.0;
    for (index_t d = 0; d < c; ++d) before += chunk_masses[d];
  }
  const index_t begin = c * sample_chunk;
  const index_t end = begin + sample_chunk < n ? begin + sample_chunk : n;
  double running = before;
  index_t last_positive = -1;
  for (index_t j = begin; j < end; ++j) {
    const double v = static_cast<double>(entry(j));
    if (v > 0.0) {
      running += v;
      last_positive = j;
      if (running > target) return static_cast<std::int32_t>(j);
    }
  }
  return static_cast<std::int32_t>(last_positive < 0 ? begin : last_positive);
}

/// Fault of a probability row given the flags and the total mass of its chunks.
SPECDEC_HOST_DEVICE inline fault probability_fault(bool has_nan, bool has_negative, double total) noexcept {
  if (has_nan) return fault::nan;
  if (has_negative) return fault::negative_probability;
  const double error = total - 1.0;
  if (!(error <= probability_sum_tolerance && error >= -probability_sum_tolerance)) return fault::not_normalised;
  return fault::none;
}

/// A probability row after folding its chunk partials in chunk order (the canonical total).
struct folded_row {
  double total;
  bool has_nan;
  bool has_negative;
  SPECDEC_HOST_DEVICE fault error() const noexcept { return probability_fault(has_nan, has_negative, total); }
};

/// Folds a row's chunk masses in chunk order and copies them into the mass table `masses`.
SPECDEC_HOST_DEVICE inline folded_row fold_chunks(const chunk_mass* partial, index_t chunks, double* masses) noexcept {
  folded_row row{0.0, false, false};
  for (index_t c = 0; c < chunks; ++c) {
    masses[c] = partial[c].mass;
    row.total += partial[c].mass;
    row.has_nan = row.has_nan || partial[c].has_nan;
    row.has_negative = row.has_negative || partial[c].has_negative;
  }
  return row;
}

/// The residual, p and q of one row, folded in chunk order.
struct folded_residual_row {
  double residual;
  folded_row p;
  folded_row q;
};

/// Folds a row's residual partials; fills `residual_masses` and `p_masses` (chunks entries each).
SPECDEC_HOST_DEVICE inline folded_residual_row fold_residual_chunks(const residual_chunk_mass* partial, index_t chunks,
                                                                    double* residual_masses, double* p_masses) noexcept {
  folded_residual_row row{0.0, {0.0, false, false}, {0.0, false, false}};
  for (index_t c = 0; c < chunks; ++c) {
    const residual_chunk_mass& m = partial[c];
    residual_masses[c] = m.residual;
    p_masses[c] = m.p.mass;
    row.residual += m.residual;
    row.p.total += m.p.mass;
    row.q.total += m.q.mass;
    row.p.has_nan = row.p.has_nan || m.p.has_nan;
    row.p.has_negative = row.p.has_negative || m.p.has_negative;
    row.q.has_nan = row.q.has_nan || m.q.has_nan;
    row.q.has_negative = row.q.has_negative || m.q.has_negative;
  }
  return row;
}

/// The token a residual draw emits for uniform u, with the empty-residual fallback; the one
/// definition every backend calls, so the fallback cannot differ between them.
template <class T>
SPECDEC_HOST_DEVICE inline std::int32_t pick_residual_token(const T* p, const T* q, index_t n,
                                                            const double* residual_masses, const double* p_masses,
                                                            const folded_residual_row& row, double u,
                                                            empty_residual fallback) noexcept {
  if (row.residual > 0.0) return locate_sample(residual_masses, n, residual_source<T>{p, q}, u * row.residual);
  switch (fallback) {
    case empty_residual::sample_target: return locate_sample(p_masses, n, probability_source<T>{p}, u * row.p.total);
    case empty_residual::token_zero: return 0;
    case empty_residual::last_token: break;
  }
  return static_cast<std::int32_t>(n - 1);
}

template <class T>
SPECDEC_HOST_DEVICE inline bool is_unit_uniform(T u) noexcept {
  return u >= T(0) && u < T(1);
}

}  // namespace specdec::detail::inline SPECDEC_ISA
