// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Sampling in the canonical accumulation order: chunk masses of probability and residual rows, the token search, row faults.
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
  SPECDEC_HOST_DEVICE compute_t<T> operator()(index_t j) const noexcept { return widen(p[j]); }
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

/// `current - scale * q` rounded as two fp32 operations, never fused into one FMA (compilers contract
/// `a - b * c` where the target has FMA, nvcc always): a lenient residual then has the same entries on
/// every backend and build.
SPECDEC_HOST_DEVICE inline float scaled_difference(float current, float scale, float q) noexcept {
#if SPECDEC_DEVICE_CODE
  return __fsub_rn(current, __fmul_rn(scale, q));
#else
  float product = scale * q;
#if defined(__GNUC__) || defined(__clang__)
  __asm__("" : "+m"(product));  // the product is rounded to fp32 before the subtraction sees it
#endif
  return current - product;
#endif
}

SPECDEC_HOST_DEVICE inline double combine_lanes(const double (&lane)[8]) noexcept {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/// Canonical mass of x[0, n) (n <= sample_chunk) with NaN / negative flags.
template <class E>
SPECDEC_HOST_DEVICE inline chunk_mass probability_chunk_mass(const E* x, index_t n) noexcept {
  using T = compute_t<E>;
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int32_t nan[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int32_t neg[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const T v = widen(x[i + l]);
      lane[l] += static_cast<double>(v);
      nan[l] |= static_cast<std::int32_t>(v != v);
      neg[l] |= static_cast<std::int32_t>(v < T(0));
    }
  }
  for (int l = 0; i + l < n; ++l) {
    const T v = widen(x[i + l]);
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
// half conversions and an insert on some tunings). The builtin is GCC's; Clang already emits the one
// vcvtps2pd for __builtin_convertvector.
#if defined(__AVX__) && !defined(__clang__)
#define SPECDEC_WIDEN4(v) __builtin_ia32_cvtps2pd256(v)
#else
#define SPECDEC_WIDEN4(v) __builtin_convertvector(v, d4)
#endif
inline double combine(const d4& lo, const d4& hi) noexcept {
  const double lane[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
  return combine_lanes(lane);
}
}  // namespace simd_mass

/// Canonical masses of every chunk of a row `x[0, n)` (float, or a 16-bit type widened in the register)
/// into `out[chunks]`.
template <class E>
inline void probability_chunk_masses(const E* x, index_t n, chunk_mass* out) noexcept {
  using namespace simd_mass;
  const index_t chunks = (n + sample_chunk - 1) / sample_chunk;
  index_t c = 0;
  for (; c + 1 < chunks && (c + 2) * sample_chunk <= n; c += 2) {  // two full chunks side by side
    const E* a = x + c * sample_chunk;
    const E* b = a + sample_chunk;
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
      if constexpr (std::is_same_v<E, float>) {
        std::memcpy(&av, a + i, sizeof av);
        std::memcpy(&bv, b + i, sizeof bv);
        a_lo += SPECDEC_WIDEN4(load4(a + i));
        a_hi += SPECDEC_WIDEN4(load4(a + i + 4));
        b_lo += SPECDEC_WIDEN4(load4(b + i));
        b_hi += SPECDEC_WIDEN4(load4(b + i + 4));
      } else {  // eight widened entries, their halves into the same lanes
        if constexpr (simd_bytes == 32) {
          av = simd_load(a + i);
          bv = simd_load(b + i);
        } else {
          for (int l = 0; l < 8; ++l) av[l] = widen(a[i + l]), bv[l] = widen(b[i + l]);
        }
        const f4 a0 = __builtin_shufflevector(av, av, 0, 1, 2, 3), a1 = __builtin_shufflevector(av, av, 4, 5, 6, 7);
        const f4 b0 = __builtin_shufflevector(bv, bv, 0, 1, 2, 3), b1 = __builtin_shufflevector(bv, bv, 4, 5, 6, 7);
        a_lo += SPECDEC_WIDEN4(a0);
        a_hi += SPECDEC_WIDEN4(a1);
        b_lo += SPECDEC_WIDEN4(b0);
        b_hi += SPECDEC_WIDEN4(b1);
      }
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

/// The chunk a draw lands in: the first chunk whose running total (chunk order) exceeds `target` and
/// whose mass is positive, with the total of the chunks before it; if rounding pushed the target past
/// every chunk, the last chunk with mass.
struct chunk_choice {
  index_t chunk;
  double before;
};

SPECDEC_HOST_DEVICE inline chunk_choice choose_chunk(const double* chunk_masses, index_t n, double target) noexcept {
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
  if (c == chunks) {
    c = last_positive_chunk < 0 ? 0 : last_positive_chunk;
    before = 0.0;
    for (index_t d = 0; d < c; ++d) before += chunk_masses[d];
  }
  return {c, before};
}

/// The walk inside the chosen chunk [begin, end): entries in index order added to `before` in
/// double; the first entry with positive mass whose running total exceeds `target`, else the last
/// entry with positive mass (else `begin`). Entries are read eight at a time before they are added,
/// so a device walking shared memory keeps its loads in flight (the sums are the same).
template <class Source>
SPECDEC_HOST_DEVICE inline std::int32_t walk_chunk(const Source& entry, index_t begin, index_t end, double before,
                                                   double target) noexcept {
  double running = before;
  index_t last_positive = -1;
  index_t j = begin;
  for (; j + 8 <= end; j += 8) {
    double v[8];
    for (int l = 0; l < 8; ++l) v[l] = static_cast<double>(entry(j + l));
    for (int l = 0; l < 8; ++l) {
      if (v[l] > 0.0) {
        running += v[l];
        last_positive = j + l;
        if (running > target) return static_cast<std::int32_t>(j + l);
      }
    }
  }
  for (; j < end; ++j) {
    const double v = static_cast<double>(entry(j));
    if (v > 0.0) {
      running += v;
      last_positive = j;
      if (running > target) return static_cast<std::int32_t>(j);
    }
  }
  return static_cast<std::int32_t>(last_positive < 0 ? begin : last_positive);
}

/// Picks the token for `target` (= u * total) given the chunk masses of the row (in chunk order)
/// and the entries. Implements the canonical search described above.
template <class Source>
SPECDEC_HOST_DEVICE inline std::int32_t locate_sample(const double* chunk_masses, index_t n,
                                                      const Source& entry, double target) noexcept {
  const chunk_choice c = choose_chunk(chunk_masses, n, target);
  const index_t begin = c.chunk * sample_chunk;
  const index_t end = begin + sample_chunk < n ? begin + sample_chunk : n;
  return walk_chunk(entry, begin, end, c.before, target);
}

/// Fault of a probability row given the flags and the total mass of its chunks.
/// `tolerance`: probability_tolerance<E>(n) for rows of n entries of element type E.
SPECDEC_HOST_DEVICE inline fault probability_fault(bool has_nan, bool has_negative, double total,
                                                   double tolerance = probability_sum_tolerance) noexcept {
  if (has_nan) return fault::nan;
  if (has_negative) return fault::negative_probability;
  const double error = total - 1.0;
  if (!(error <= tolerance && error >= -tolerance)) return fault::not_normalised;
  return fault::none;
}

/// A probability row after folding its chunk partials in chunk order (the canonical total).
struct folded_row {
  double total;
  bool has_nan;
  bool has_negative;
  SPECDEC_HOST_DEVICE fault error(double tolerance = probability_sum_tolerance) const noexcept {
    return probability_fault(has_nan, has_negative, total, tolerance);
  }
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

/// What a residual draw samples from: the residual (entries max(0, p - q)), p itself (the
/// empty-residual fallback sample_target), or a fixed token (the other fallbacks).
struct residual_draw {
  enum kind_t : std::int32_t { from_residual, from_target, fixed_token } kind;
  const double* masses;  // residual or p chunk masses; null for fixed
  double target;         // u times the chosen total
  std::int32_t token;    // for fixed
};

SPECDEC_HOST_DEVICE inline residual_draw plan_residual_draw(index_t n, const double* residual_masses,
                                                            const double* p_masses, const folded_residual_row& row,
                                                            double u, empty_residual fallback) noexcept {
  if (row.residual > 0.0) return {residual_draw::from_residual, residual_masses, u * row.residual, 0};
  switch (fallback) {
    case empty_residual::sample_target: return {residual_draw::from_target, p_masses, u * row.p.total, 0};
    case empty_residual::token_zero: return {residual_draw::fixed_token, nullptr, 0.0, 0};
    case empty_residual::last_token: break;
  }
  return {residual_draw::fixed_token, nullptr, 0.0, static_cast<std::int32_t>(n - 1)};
}

/// The token a residual draw emits for uniform u, with the empty-residual fallback; the one
/// definition every backend calls, so the fallback cannot differ between them.
template <class T>
SPECDEC_HOST_DEVICE inline std::int32_t pick_residual_token(const T* p, const T* q, index_t n,
                                                            const double* residual_masses, const double* p_masses,
                                                            const folded_residual_row& row, double u,
                                                            empty_residual fallback) noexcept {
  const residual_draw d = plan_residual_draw(n, residual_masses, p_masses, row, u, fallback);
  switch (d.kind) {
    case residual_draw::from_residual: return locate_sample(d.masses, n, residual_source<T>{p, q}, d.target);
    case residual_draw::from_target: return locate_sample(d.masses, n, probability_source<T>{p}, d.target);
    case residual_draw::fixed_token: break;
  }
  return d.token;
}

template <class T>
SPECDEC_HOST_DEVICE inline bool is_unit_uniform(T u) noexcept {
  return u >= T(0) && u < T(1);
}

}  // namespace specdec::detail::inline SPECDEC_ISA
