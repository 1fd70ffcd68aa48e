// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Exponentials over rows: vector exp, the sum of exp((x - max) / T), softmax and log-softmax writes, and one softmax entry alone.
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
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {
#if SPECDEC_HOST_SIMD
/// exp over a float vector (of any width: each lane is computed alone, so 8 and 16 lanes give the
/// same bits): Cephes' expf polynomial (relative error ~1 ulp on [-87.3, 88.7]).
/// Inputs below -87.3 (including -inf, the mask value) give exactly 0, so a masked token has
/// probability exactly 0; inputs are <= 0 wherever it is used (x - max), so overflow cannot occur.
template <class Vec = simd<float>::vec>
inline Vec simd_exp(Vec x) noexcept {
  using vec = Vec;
  using mask = decltype(x < x);
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
template <class E, class Term>
inline simd<float>::vec simd_sum_terms(const E* x, index_t n, const E* next, index_t next_n,
                                       const Term& term) noexcept {
  using vec = simd<float>::vec;
  constexpr int w = simd_bytes / 4;
  constexpr index_t line = 64 / sizeof(E);
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
template <class E, class T = compute_t<E>>
SPECDEC_HOST_DEVICE inline T sum_exp_shifted(const E* x, index_t n, T max, T inv_t,
                                             const E* next = nullptr, index_t next_n = 0) noexcept {
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
  for (; i < n; ++i) sum += exp_((widen(x[i]) - max) * inv_t);
  return sum;
}


#if SPECDEC_HOST_SIMD
/// The widest float vector this build has: 512 bits with AVX-512F, where an exponential pass runs
/// ~1.4x faster than on 256 bits (measured from L2). Only lane-wise work uses it: a sum's lane order
/// stays that of simd<float>, the same on every instruction set.
#if defined(__AVX512F__)
typedef float wide_float_vec __attribute__((vector_size(64)));
#else
using wide_float_vec = simd<float>::vec;
#endif
/// A wide_float_vec of entries p[0, lanes): floats as they are, the 16-bit types widened.
template <class E>
inline wide_float_vec wide_load(const E* p) noexcept {
  if constexpr (std::is_same_v<E, float>) {
    wide_float_vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
#if defined(__AVX512F__)
    // Two 8-lane halves joined (one insert), not lane by lane.
    static_assert(sizeof(wide_float_vec) == 2 * sizeof(simd<float>::vec));
    return __builtin_shufflevector(simd_load(p), simd_load(p + 8), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    return simd_load(p);
#endif
  }
}
#endif

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
#if defined(__AVX512F__)
inline void stream_store(float* p, wide_float_vec v) noexcept {
#if defined(__clang__)
  __builtin_nontemporal_store(v, reinterpret_cast<wide_float_vec*>(p));
#else
  __builtin_ia32_movntps512(p, v);
#endif
}
#endif
inline void stream_fence() noexcept { __builtin_ia32_sfence(); }
#endif

/// A softmax entry exp((x - max) / T) / sum is at most 1, but the sum comes from a faster exponential
/// than the entries (sum_exp_shifted's integer-reference terms, within 2.4e-7), so a row with one
/// dominant entry could write 1 + 2^-23: capped at 1, which every backend's softmax does (a verifier
/// refuses a probability above 1).
template <class V>
SPECDEC_HOST_DEVICE inline V at_most_one(V y) noexcept {
  return y > V(1) ? V(1) : y;
}
#if SPECDEC_HOST_SIMD
template <class Vec>
inline Vec at_most_one_lanes(Vec y) noexcept {
  const Vec one = Vec{} + 1.0f;
  return y > one ? one : y;
}
#endif

/// out[j] = min(1, exp((x[j] - max) * inv_t) * scale) over [0, n) (at_most_one); out may alias x. `next` / `next_n`: a row
/// the caller reads next; its cache lines are prefetched (into L2) while these exponentials are
/// computed, so a multi-row softmax reads its next row under this compute-bound pass (measured 1.2-1.5x
/// per row at V = 32000-128256). `streaming`: write past the caches (non-temporal stores, `out` at any
/// float alignment) for outputs larger than L2.
/// Entries [0, n / w * w) (w = simd<float> lanes) are simd_exp's, the rest the scalar exp_'s, on
/// every instruction set: exp_shifted_at reproduces each one.
template <class E, class T>
SPECDEC_HOST_DEVICE inline void write_exp_shifted(const E* x, index_t n, T max, T inv_t, T scale, T* out,
                                                  const E* next = nullptr, index_t next_n = 0,
                                                  bool streaming = false) noexcept {
  (void)next;  // the hints serve the host's float vectors only
  (void)next_n;
  (void)streaming;
  index_t i = 0;
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    using wide = wide_float_vec;
    constexpr int ww = sizeof(wide) / 4;
    constexpr index_t line = 64 / sizeof(E);
    static_assert(ww % line == 0 || line % ww == 0);
    const auto wide_at = [&](index_t j) { return at_most_one_lanes(simd_exp<wide>((wide_load(x + j) - max) * inv_t) * scale); };
    const index_t vector_end = n / (simd_bytes / 4) * (simd_bytes / 4);  // entries simd_exp computes
#if SPECDEC_HOST_STREAM_STORES
    // Streamed stores must be aligned to the vector; the entries need not be: simd_exp is lane-wise, so
    // an entry's bits do not depend on the block that computes it. The entries before the first aligned
    // address and after the last aligned block are the lanes of one whole vector, stored in part (numpy
    // and malloc give 16-byte alignment, which alone would rule streaming out).
    const auto misaligned = static_cast<index_t>(reinterpret_cast<std::uintptr_t>(out) % sizeof(wide));
    if (streaming && vector_end >= ww && misaligned % static_cast<index_t>(sizeof(float)) == 0) {
      float lanes[ww];
      const index_t head = std::min<index_t>((static_cast<index_t>(sizeof(wide)) - misaligned) % static_cast<index_t>(sizeof(wide)) /
                                                 static_cast<index_t>(sizeof(float)),
                                             vector_end);
      if (head > 0) {
        const wide y = wide_at(0);
        std::memcpy(lanes, &y, sizeof y);
        std::memcpy(out, lanes, static_cast<std::size_t>(head) * sizeof(float));
      }
      for (i = head; i + ww <= vector_end; i += ww) {
        if (next != nullptr && i < next_n) __builtin_prefetch(next + i, 0, 2);
        stream_store(out + i, wide_at(i));
      }
      stream_fence();  // the streamed lines are visible before the caller reads them
      if (i < vector_end) {
        const index_t rest = vector_end - i;
        const wide y = wide_at(vector_end - ww);
        std::memcpy(lanes, &y, sizeof y);
        std::memcpy(out + i, lanes + (ww - rest), static_cast<std::size_t>(rest) * sizeof(float));
        i = vector_end;
      }
    }
#endif
    for (; i + ww <= n; i += ww) {
      if (next != nullptr && i < next_n && i % line == 0) __builtin_prefetch(next + i, 0, 2);
      const wide y = wide_at(i);
      std::memcpy(out + i, &y, sizeof y);
    }
    // The narrower vectors' blocks after the wide ones: the vector entries stay [0, n / w * w).
    using vec = simd<float>::vec;
    constexpr int w = simd_bytes / 4;
    for (; i + w <= n; i += w) {
      const vec y = at_most_one_lanes(simd_exp((simd_load(x + i) - max) * inv_t) * scale);
      std::memcpy(out + i, &y, sizeof y);
    }
    if (next != nullptr) {
      for (index_t l = i / line * line; l < next_n; l += line) __builtin_prefetch(next + l, 0, 2);
    }
  }
#endif
  // Bounded by a pointer, not `i < n`: GCC 12 at -O2, with n known at the call site, misreads the
  // index form after the SIMD loop as running 2^62 times (-Waggressive-loop-optimizations).
  for (const E* end = x + n; x + i < end; ++i) out[i] = at_most_one(exp_((widen(x[i]) - max) * inv_t) * scale);
}

/// out[j] = (x[j] - max) * inv_t - log_sum over [0, n) (a log-softmax row); out may alias x. Every
/// entry is the same expression whether a vector or the scalar tail computes it. `streaming`: write
/// with non-temporal stores (for outputs larger than the caches; the caller's next read of `out`
/// then comes from memory).
template <class E, class T>
SPECDEC_HOST_DEVICE inline void write_log_shifted(const E* x, index_t n, T max, T inv_t, T log_sum, T* out, bool streaming) noexcept {
  index_t i = 0;
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    using vec = simd<float>::vec;
    constexpr int w = simd_bytes / 4;
#if SPECDEC_HOST_STREAM_STORES
    if (streaming) {
      for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % simd_bytes != 0; ++i) out[i] = (widen(x[i]) - max) * inv_t - log_sum;
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
  for (const E* end = x + n; x + i < end; ++i) out[i] = (widen(x[i]) - max) * inv_t - log_sum;
}

/// Bytes of output above which row_log_softmax streams its stores past the caches.
inline constexpr index_t streaming_output_bytes = index_t{1} << 23;
/// Bytes of output above which row_softmax streams its stores: lower than log-softmax's, because its
/// compute-bound write pass re-reads the row from cache, which cached output lines would evict
/// (measured on an AVX-512 Xeon with 2 MiB L2: 1.06-1.2x at 1 MiB and above, no gain below).
inline constexpr index_t streaming_softmax_bytes = index_t{1} << 20;

/// What a softmax normalises a row with: its maximum and sum exp((x - max) / T).
template <class T>
struct softmax_stats {
  T max;
  T sum;
};

/// Entry j of what write_exp_shifted writes over [0, n), computed alone (bit for bit the same: the
/// same vector block, or the same scalar tail). What a softmax entry costs once the row's
/// (max, sum) are known, without writing the row.
template <class E, class T>
SPECDEC_HOST_DEVICE inline T exp_shifted_at(const E* x, index_t n, index_t j, T max, T inv_t, T scale) noexcept {
#if SPECDEC_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    constexpr int w = simd_bytes / 4;
    if (j < n / w * w) {
      const index_t base = j / w * w;
      const simd<float>::vec y = at_most_one_lanes(simd_exp((simd_load(x + base) - max) * inv_t) * scale);
      return y[j - base];
    }
  }
#endif
  return at_most_one(exp_((widen(x[j]) - max) * inv_t) * scale);
}

}  // namespace specdec::detail::inline SPECDEC_ISA
