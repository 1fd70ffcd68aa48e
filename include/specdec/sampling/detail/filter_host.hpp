// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The host's one-thread form of FlashInfer's row filters (filter_rows.hpp's job): the same
/// outputs, bit for bit, from vector passes in place of the device's sixteen-way radix search.
///
/// What decides the output is defined once, in filter_rows.hpp: the k-th largest entry (ties counted),
/// the top-p cut K* (the smallest order_key K whose mass above, M(K), is below p, every mass a double sum
/// in the canonical order) and the renormalising mass. Both searches find the same values because those
/// values are unique; only the way to them differs:
///
/// - **k-th largest**: the maxima of 64-entry blocks (taken in the pass that checks the row) give a
///   floor that at least k entries reach (the top-k of backend/detail/block_topk.hpp); the few entries at
///   or above it are selected by std::nth_element. Where k is too large for the floor to be selective,
///   a strided sample of the row brackets the k-th largest, one pass counts the entries above the
///   bracket and gathers those inside it, and nth_element selects among them. Comparisons are exact, so
///   the value is the radix search's (as a float: -0 and +0 compare equal, as the kept test compares).
/// - **top-p cut**: where the row's canonical total is at least p (else K* = 0, every entry kept), K*
///   is the key of a positive entry: M changes only at entries' keys, and M(key(+0)) is the total.
///   Approximate masses narrow the values the cut can lie between: first float masses above seven
///   fixed binades, taken in the check pass; then double masses (sums in any order, within n 2^-52 of
///   the total of the canonical ones) at seven thresholds over the entries gathered between the bounds,
///   until few remain. Every bound is kept only where its mass is farther from p than its error. The
///   few are sorted and their approximate masses name the candidate d; then one exact pass: K* = key(d)
///   iff M(key(d)) < p <= M(key(d) - 1), both canonical masses (the entries > d, and >= d); else the
///   next value up or down is tried. Only a candidate the approximations missed entirely falls back to
///   the radix search itself.
///
/// The kept set is then {v >= tau} for one float tau (-inf: every entry): kth for top-k, d for top-p,
/// the larger for both (as K* > key(+0), key(v) >= key(d) is v >= d); the masses and the writes are
/// vector passes over the canonical lanes (entry j of a 1024-entry chunk in lane j % 8, each lane
/// summed in index order: lane l of an 8-float vector is lane l of its chunk).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#if defined(__SSE2__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#include <specdec/backend/detail/block_topk.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

#if SPECDEC_HOST_SIMD && !defined(__CUDACC__)
#define SPECDEC_FILTER_HOST_PASSES 1
namespace filter_passes {

using specdec::detail::negative_infinity;
typedef float f8 __attribute__((vector_size(32)));
typedef double d8 __attribute__((vector_size(64)));
typedef std::int32_t i8 __attribute__((vector_size(32)));
typedef std::int64_t l8 __attribute__((vector_size(64)));

/// Eight entries of a row as floats (the 16-bit types widened, exactly), and eight floats stored as
/// entries (rounded to nearest even for the 16-bit types: the device's conversion).
/// (An output argument, not a returned vector: without AVX, GCC warns that a returned 32-byte vector
/// changes the ABI.)
template <class E>
inline void load8(const E* p, f8& v) noexcept {
  if constexpr (std::is_same_v<E, float>) {
    std::memcpy(&v, p, sizeof v);
  } else if constexpr (specdec::detail::simd_bytes == 32) {
    v = specdec::detail::simd_load(p);
  } else {
    for (int l = 0; l < 8; ++l) v[l] = widen(p[l]);
  }
}
template <class E>
inline void store8(E* p, const f8& v) noexcept {
  if constexpr (std::is_same_v<E, float>) {
    std::memcpy(p, &v, sizeof v);
  } else if constexpr (std::is_same_v<E, bfloat16>) {
    // to_bfloat16 on eight lanes at once (the scalar form's branches cost more than the row's reads).
    typedef std::uint32_t u8 __attribute__((vector_size(32)));
    typedef std::uint16_t h8 __attribute__((vector_size(16)));
    u8 b;
    std::memcpy(&b, &v, sizeof b);
    const u8 rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    const u8 quiet = (b >> 16) | 0x40u;
    const h8 out = __builtin_convertvector((b & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded, h8);
    std::memcpy(p, &out, sizeof out);
  } else {
#if defined(__F16C__)
    const auto out = __builtin_ia32_vcvtps2ph256(v, 0);  // round to nearest even, as to_float16
    std::memcpy(p, &out, sizeof out);
#else
    for (int l = 0; l < 8; ++l) p[l] = narrow<E>(v[l]);
#endif
  }
}
/// buffer[0, n) = x[0, n) as floats.
template <class E>
inline void widen_into(float* buffer, const E* x, index_t n) noexcept {
  if constexpr (std::is_same_v<E, float>) {
    std::memcpy(buffer, x, static_cast<std::size_t>(n) * sizeof(float));
  } else {
    for (index_t j = 0; j < n; ++j) buffer[j] = widen(x[j]);
  }
}

/// Entries of a 64-entry block (the block maxima's), and of a canonical chunk.
inline constexpr index_t block = specdec::detail::maxima_block;
inline constexpr index_t chunk = specdec::detail::sample_chunk;
/// Floats of padding after the block maxima (-inf, whole vectors for kth_largest_floor's counts).
inline constexpr index_t maxima_padding = 16;

/// Scratch of the host form for rows of n entries: the block maxima, then n floats of gathered entries.
inline std::size_t scratch_bytes(index_t n) {
  return static_cast<std::size_t>(specdec::detail::maxima_blocks(n) + maxima_padding + n + 16) * sizeof(float);
}

/// The canonical sum of one chunk's lanes (combine_lanes' order).
inline double combine(const d8& lanes) noexcept {
  const double l[8] = {lanes[0], lanes[1], lanes[2], lanes[3], lanes[4], lanes[5], lanes[6], lanes[7]};
  return specdec::detail::combine_lanes(l);
}

/// Largest lane.
/// (Halves folded onto each other: the lane-by-lane chain of seven selects took a sixth of a top-k
/// row's check pass. The running maxima it is given hold no NaN, so the order does not matter.)
inline float horizontal_max(const f8& m) noexcept {
  typedef float f4 __attribute__((vector_size(16)));
  f4 a = __builtin_shufflevector(m, m, 0, 1, 2, 3), b = __builtin_shufflevector(m, m, 4, 5, 6, 7);
  a = a < b ? b : a;
  b = __builtin_shufflevector(a, a, 2, 3, 0, 1);
  a = a < b ? b : a;
  b = __builtin_shufflevector(a, a, 1, 0, 3, 2);
  a = a < b ? b : a;
  return a[0];
}

/// Appends the lanes of v selected by `keep` (a comparison mask) to out[0, ...) in lane order and
/// returns how many: without a branch per lane (a gather whose lanes pass at random mispredicted one
/// per vector, most of its time). Writes 8 floats at out (the unselected after the selected): `out`
/// needs 8 floats of room, and may be at or before the vector's own place in the same array.
inline index_t compress(const f8& v, const i8& keep, float* out) noexcept {
  const auto bits = static_cast<unsigned>(specdec::detail::lane_bits(keep));
#if defined(__AVX512F__) && defined(__AVX512VL__)
  const f8 packed = __builtin_ia32_compresssf256_mask(v, v, static_cast<unsigned char>(bits));
#elif defined(__AVX2__)
  // The selected lanes' indices, packed low: lane l of the permutation for mask b.
  static constexpr auto table = [] {
    struct lut {
      std::int32_t index[256][8];
    } t{};
    for (int b = 0; b < 256; ++b) {
      int m = 0;
      for (int l = 0; l < 8; ++l)
        if ((b >> l) & 1) t.index[b][m++] = l;
    }
    return t;
  }();
  i8 order;
  std::memcpy(&order, table.index[bits], sizeof order);
  const f8 packed = __builtin_ia32_permvarsf256(v, order);
#else
  f8 packed = v;
  int m = 0;
  for (int l = 0; l < 8; ++l)
    if ((bits >> l) & 1) packed[m++] = v[l];
#endif
  std::memcpy(out, &packed, sizeof packed);
  return static_cast<index_t>(__builtin_popcount(bits));
}

/// Thresholds at which the check pass of a top-p row also weighs the entries above (ascending): 2^-21,
/// 2^-18, ..., 2^-3, where a probability row's mass lies (its largest entry is not known yet).
inline constexpr int binades = 7;
inline float binade_threshold(int i) noexcept { return std::ldexp(1.0f, -21 + 3 * i); }

/// What the check pass found: the canonical total (probabilities), whether an entry is bad (outside
/// [0, 1] or NaN for probabilities; NaN or +inf for logits), the largest entry, and (when asked) the
/// approximate mass above each binade_threshold: float sums in 8 lanes (n / 8 terms each: within
/// (n / 8) 2^-24 of the total), then in double.
struct row_check {
  double total;
  bool bad;
  float max;
  double above[binades];
};

/// One pass over x[0, n): the check, the row's canonical total (probabilities only) and, unless
/// `maxima` is null, the maximum of each 64-entry block (the last may be partial) followed by
/// maxima_padding -inf; with Binades, the masses above the binade thresholds too. Their masked float
/// adds are independent of the total's chain of double adds, so they fill its latency rather than
/// adding a pass of their own.
template <bool Probabilities, bool Binades = false, class E>
inline row_check check_row(const E* x, index_t n, float* maxima) noexcept {
  double total = 0.0;
  i8 good = i8{} - 1;
  f8 row_max = f8{} + negative_infinity<float>();
  const f8 zero{}, one = f8{} + 1.0f, inf = f8{} - negative_infinity<float>();
  f8 binade[binades] = {}, binade_t[binades];
  for (int i = 0; i < binades; ++i) binade_t[i] = f8{} + binade_threshold(i);
  // One vector: its checks, its lanes into `lanes` (a chunk's canonical lanes), its maximum into m.
  const auto vector_at = [&](index_t at, f8& m, d8& lanes) {
    f8 v;
    load8(x + at, v);
    if constexpr (Probabilities) {
      good &= (v >= zero) & (v <= one);
      lanes += __builtin_convertvector(v, d8);
      if constexpr (Binades) {
        SPECDEC_UNROLL
        for (int i = 0; i < binades; ++i) binade[i] = v > binade_t[i] ? binade[i] + v : binade[i];
      }
    } else {
      good &= v < inf;
    }
    m = m < v ? v : m;  // a NaN never replaces the maximum; `good` reports it
  };
  // Whole chunks two at a time: each chunk's lane sums are a chain of dependent double adds, which
  // alone run slower than the loads; two chunks side by side are two chains. Rows past L2 are
  // prefetched 8 KiB ahead (the hardware prefetcher left the adds waiting on memory).
  constexpr index_t blocks_per_chunk = chunk / block;
  const index_t chunks_whole = n / chunk;
  index_t c = 0;
  for (; c + 2 <= chunks_whole; c += 2) {
    d8 lanes_a{}, lanes_b{};
    for (index_t i = 0; i < blocks_per_chunk; ++i) {
      const index_t a0 = c * chunk + i * block, b0 = a0 + chunk;
      if (b0 + chunk + 2048 <= n)
        for (index_t l = 0; l < block; l += 16) {
          __builtin_prefetch(x + a0 + 2048 + l);
          __builtin_prefetch(x + b0 + 2048 + l);
        }
      f8 ma = f8{} + negative_infinity<float>(), mb = ma;
      for (index_t j = 0; j < block; j += 8) {
        vector_at(a0 + j, ma, lanes_a);
        vector_at(b0 + j, mb, lanes_b);
      }
      if (maxima != nullptr) {
        maxima[a0 / block] = horizontal_max(ma);
        maxima[b0 / block] = horizontal_max(mb);
      }
      row_max = row_max < ma ? ma : row_max;
      row_max = row_max < mb ? mb : row_max;
    }
    if constexpr (Probabilities) total = (total + combine(lanes_a)) + combine(lanes_b);
  }
  // The rest one block at a time (the last may be partial: whole vectors, then entries into their lanes).
  d8 lanes{};
  row_check result{0.0, false, 0.0f, {}};
  bool tail_good = true;
  for (index_t b0 = c * chunk; b0 < n; b0 += block) {
    const index_t end = std::min(n, b0 + block);
    f8 m = f8{} + negative_infinity<float>();
    index_t j = b0;
    for (; j + 8 <= end; j += 8) vector_at(j, m, lanes);
    float block_max = horizontal_max(m);
    for (; j < end; ++j) {
      const float v = widen(x[j]);
      if constexpr (Probabilities) {
        tail_good = tail_good && v >= 0.0f && v <= 1.0f;
        lanes[j % 8] += static_cast<double>(v);
        for (int i = 0; i < binades; ++i)
          if (Binades && v > binade_threshold(i)) result.above[i] += static_cast<double>(v);
      } else {
        tail_good = tail_good && v < -negative_infinity<float>();
      }
      block_max = block_max < v ? v : block_max;
    }
    if (maxima != nullptr) maxima[b0 / block] = block_max;
    row_max = row_max < m ? m : row_max;
    row_max = row_max < block_max ? f8{} + block_max : row_max;
    if constexpr (Probabilities)
      if (end % chunk == 0 || end == n) {
        total += combine(lanes);
        lanes = d8{};
      }
  }
  if (maxima != nullptr)
    for (index_t p = 0; p < maxima_padding; ++p) maxima[specdec::detail::maxima_blocks(n) + p] = negative_infinity<float>();
  for (int i = 0; i < binades; ++i)
    for (int l = 0; l < 8; ++l) result.above[i] += static_cast<double>(binade[i][l]);
  result.total = total;
  result.bad = specdec::detail::any_lane(~good) || !tail_good;
  result.max = horizontal_max(row_max);
  return result;
}

/// The check pass of a row that is only cut at its k-th largest: check_row's checks and block maxima,
/// without the canonical total, which such a row needs only to be accepted. A logit row is
/// block_maxima's pass (+inf shows as the maximum); a probability row adds each 64-entry block in
/// float lanes (8 terms at most per lane: within 7 2^-24 of the block's mass) and the blocks in double,
/// and reports that approximate total with `total_error`, a bound on its distance from the canonical
/// total. The double chain of the canonical lanes bound check_row's pass (~2x block_maxima's time);
/// here one float add per vector hides behind the loads.
struct quick_check {
  row_check check;
  double total_error;  // 0 for logits
};
template <bool Probabilities, class E>
inline quick_check check_row_quick(const E* x, index_t n, float* maxima) noexcept {
  using specdec::detail::simd_load;
  quick_check result{{0.0, false, 0.0f, {}}, 0.0};
  const index_t blocks = specdec::detail::maxima_blocks(n);
  if constexpr (!Probabilities) {
    const auto scan = specdec::detail::block_maxima(x, n, maxima);
    result.check.bad = scan.has_nan || scan.max == -negative_infinity<float>();
    result.check.max = scan.max;
  } else {
    // The range check as a running minimum beside the maxima (an entry outside [0, 1] moves one of
    // them past its bound); a NaN, which neither selects, makes the sum NaN.
    f8 row_max = f8{} + negative_infinity<float>(), row_min = f8{} - negative_infinity<float>();
    d8 total{};
    const index_t full = n / block;
    for (index_t b = 0; b < full; ++b) {
      const E* p = x + b * block;
      f8 m = f8{} + negative_infinity<float>(), s{};
      SPECDEC_UNROLL
      for (index_t j = 0; j < block; j += 8) {
        f8 v;
        load8(p + j, v);
        row_min = v < row_min ? v : row_min;
        m = m < v ? v : m;
        s += v;
      }
      maxima[b] = horizontal_max(m);
      row_max = row_max < m ? m : row_max;
      total += __builtin_convertvector(s, d8);
    }
    double sum = 0.0;
    for (int l = 0; l < 8; ++l) sum += total[l];
    const bool good = !specdec::detail::any_lane(row_min < f8{}) && !specdec::detail::any_lane(row_max > f8{} + 1.0f) && sum == sum;
    float tail_max = negative_infinity<float>();
    bool tail_good = true;
    for (index_t j = full * block; j < n; ++j) {
      const float v = widen(x[j]);
      tail_good = tail_good && v >= 0.0f && v <= 1.0f;
      tail_max = tail_max < v ? v : tail_max;
      sum += static_cast<double>(v);
    }
    if (full < blocks) maxima[full] = tail_max;
    result.check.bad = !good || !tail_good;
    result.check.max = std::max(horizontal_max(row_max), tail_max);
    result.check.total = sum;
    // Every entry is >= 0 (or the row is bad): the float lanes err by at most 7 2^-24 of the mass, the
    // double adds here and the canonical total's by at most (n + 64) 2^-53 of it each.
    result.total_error = sum * (8.0 * 0x1p-24 + static_cast<double>(2 * n + 256) * 0x1p-53);
  }
  for (index_t p = 0; p < maxima_padding; ++p) maxima[blocks + p] = negative_infinity<float>();
  return result;
}

/// The first bad entry (the check found one): as filter_rows_job::weigh reports it.
template <bool Probabilities, class E>
inline index_t first_bad(const E* x, index_t n) noexcept {
  for (index_t j = 0; j < n; ++j) {
    const float v = widen(x[j]);
    if (Probabilities ? !(v >= 0.0f && v <= 1.0f) : !(v < -negative_infinity<float>())) return j;
  }
  return 0;
}

/// The canonical masses of the entries above t and of those at or above it (float comparisons; every
/// entry >= 0 or -0). Lane l of each 8-entry vector is lane l of its chunk; each lane adds its entries
/// in index order, skipping the others (adding +0 to a sum that is never -0 changes nothing), so a
/// 64-entry block whose maximum (`maxima`, check_row's, or null) is below t is skipped whole.
struct mass_pair {
  double above;
  double at_or_above;
};
template <class E>
inline mass_pair canonical_masses(const E* x, index_t n, float t, const float* maxima) noexcept {
  d8 above{}, at{};
  mass_pair total{0.0, 0.0};
  const d8 threshold = d8{} + static_cast<double>(t);  // compared as doubles: the same answers, no mask widening
  const index_t full_blocks = n / block;
  constexpr index_t blocks_per_chunk = chunk / block;
  for (index_t b = 0; b < full_blocks; ++b) {
    // A whole chunk below t adds nothing to either mass (its combine would add +0): skipped at once.
    if (maxima != nullptr && b % blocks_per_chunk == 0 && b + blocks_per_chunk <= full_blocks) {
      i8 reach{};
      for (index_t i = 0; i < blocks_per_chunk; i += 8) {
        f8 m;
        std::memcpy(&m, maxima + b + i, sizeof m);
        reach |= m >= t;
      }
      if (!specdec::detail::any_lane(reach)) {
        b += blocks_per_chunk - 1;
        continue;
      }
    }
    if (maxima == nullptr || !(maxima[b] < t))
      for (index_t j = b * block; j < (b + 1) * block; j += 8) {
        f8 v;
        load8(x + j, v);
        const d8 d = __builtin_convertvector(v, d8);
        above = d > threshold ? above + d : above;
        at = d >= threshold ? at + d : at;
      }
    if ((b + 1) * block % chunk == 0) {
      total.above += combine(above);
      total.at_or_above += combine(at);
      above = d8{};
      at = d8{};
    }
  }
  for (index_t j = full_blocks * block; j < n; ++j) {
    const float v = widen(x[j]);
    if (v > t) above[j % 8] += static_cast<double>(v);
    if (v >= t) at[j % 8] += static_cast<double>(v);
  }
  if (full_blocks * block % chunk != 0 || full_blocks * block < n) {
    total.above += combine(above);
    total.at_or_above += combine(at);
  }
  return total;
}

/// Stores eight entries as store8 does, bypassing the caches (non-temporal: no read of the line before
/// it is written, which a filter's output larger than the caches otherwise pays). `p` is 16-byte aligned.
template <class E>
inline void stream8(E* p, const f8& v) noexcept {
#if defined(__SSE2__)
  if constexpr (std::is_same_v<E, float>) {
    typedef float f4 __attribute__((vector_size(16)));
    _mm_stream_ps(p, f4{v[0], v[1], v[2], v[3]});
    _mm_stream_ps(p + 4, f4{v[4], v[5], v[6], v[7]});
  } else {
    E packed[8];
    store8(packed, v);
    __m128i bits;
    std::memcpy(&bits, packed, sizeof bits);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), bits);
  }
#else
  store8(p, v);
#endif
}

/// Rows whose filter output passes this many bytes in all are written with non-temporal stores: they
/// leave the caches before anything reads them (measured at 64 x 128256 floats, 33 MB: the stores'
/// reads of the lines took a third of the filter's time).
inline constexpr std::size_t streaming_bytes = std::size_t{16} << 20;

/// y[j] = keep(x[j]) ? kept(x[j]) : dropped over [0, n) (write_kept), each whole vector stored by `put`.
template <class E, class Kept, class Put>
inline void write_kept_to(const E* x, index_t n, float tau, const float* maxima, float dropped, const Kept& kept, E* y, bool sparse,
                          const Put& put) noexcept {
  const f8 threshold = f8{} + tau, fill = f8{} + dropped;
  const index_t full_blocks = n / block;
  for (index_t b = 0; b < full_blocks; ++b) {
    const index_t j0 = b * block;
    if (maxima != nullptr && maxima[b] < tau) {
      for (index_t j = j0; j < j0 + block; j += 8) put(y + j, fill);
      continue;
    }
    for (index_t j = j0; j < j0 + block; j += 8) {
      f8 v;
      load8(x + j, v);
      const i8 keep = v >= threshold;
      if (sparse && !specdec::detail::any_lane(keep)) {  // most vectors of a block a top-k cut reaches: kept() is a division
        put(y + j, fill);
        continue;
      }
      f8 out;
      kept(v, out);
      out = keep ? out : fill;
      put(y + j, out);
    }
  }
  for (index_t j = full_blocks * block; j < n; ++j) {
    const float v = widen(x[j]);
    if (v >= tau) {
      const f8 one = {v, v, v, v, v, v, v, v};  // not f8{} + v: +0 + -0 would lose the sign
      f8 out;
      kept(one, out);
      y[j] = narrow<E>(out[0]);
    } else {
      y[j] = narrow<E>(dropped);
    }
  }
}

/// Writes y[j] = keep(x[j]) ? kept(x[j]) : dropped over [0, n), where keep(v) is v >= tau: blocks whose
/// maximum (`maxima`, or null) is below tau are filled without being read. y may be x. `stream`: the
/// whole vectors are written past the caches (where y is 16-byte aligned). `sparse`: few entries are
/// kept (a top-k cut), so a vector with none is filled without kept() (a branch a top-p cut, whose kept
/// entries are many and scattered, mispredicts: measured 1.3x its time).
template <class E, class Kept>
inline void write_kept(const E* x, index_t n, float tau, const float* maxima, float dropped, const Kept& kept, E* y, bool stream,
                       bool sparse) noexcept {
#if defined(__SSE2__)
  if (stream && reinterpret_cast<std::uintptr_t>(y) % 16 == 0) {
    write_kept_to(x, n, tau, maxima, dropped, kept, y, sparse, [](E* p, const f8& v) { stream8(p, v); });
    _mm_sfence();  // the streamed lines reach memory before any later store (other threads read y)
    return;
  }
#endif
  (void)stream;
  write_kept_to(x, n, tau, maxima, dropped, kept, y, sparse, [](E* p, const f8& v) { store8(p, v); });
}

/// y[j] = x[j] >= tau ? x[j] : -inf (y may be x).
template <class E>
inline void write_masked(const E* x, index_t n, float tau, const float* maxima, E* y, bool stream = false, bool sparse = false) noexcept {
  write_kept(x, n, tau, maxima, negative_infinity<float>(), [](const f8& v, f8& out) { out = v; }, y, stream, sparse);
}

/// y[j] = x[j] >= tau ? float(double(x[j]) / mass) : 0 (y may be x): the quotient in double, rounded
/// once, as filter_rows_job writes it. (A product with 1 / mass, checked for the rare quotients it could
/// round differently, measured slower than the division: its checks cost more than the divider.)
template <class E>
inline void write_renormalised(const E* x, index_t n, float tau, double mass, const float* maxima, E* y, bool stream = false,
                               bool sparse = false) noexcept {
  const d8 divisor = d8{} + mass;
  write_kept(x, n, tau, maxima, 0.0f,
             [&](const f8& v, f8& out) { out = __builtin_convertvector(__builtin_convertvector(v, d8) / divisor, f8); }, y, stream,
             sparse);
}

/// The k-th largest of values[0, c) (1 <= k <= c), reordering them.
inline float select_kth(float* values, index_t c, index_t k) noexcept {
  std::nth_element(values, values + (k - 1), values + c, std::greater<float>());
  return values[k - 1];
}

/// The k-th largest entry of x[0, n) (1 <= k < n; no NaN, no +inf), exactly. `maxima`: check_row's
/// block maxima; `largest`: the row's maximum; `buffer`: n floats.
template <class E>
inline float kth_largest(const E* x, index_t n, index_t k, float largest, const float* maxima, float* buffer) noexcept {
  if (specdec::detail::use_block_topk(n, k)) {
    // Entries at or above the k-th largest block maximum, from the blocks that reach it.
    const index_t blocks = specdec::detail::maxima_blocks(n);
    const float floor = specdec::detail::kth_largest_floor(maxima, blocks, k, largest);
    const index_t capacity = std::min<index_t>(n, 8 * k + 1024);  // ties at the floor can make many
    const f8 f = f8{} + floor;
    index_t c = 0;
    for (index_t b = 0; b < blocks && c <= capacity; ++b) {
      if (maxima[b] < floor) continue;
      const index_t begin = b * block, end = std::min(n, begin + block);
      index_t j = begin;
      for (; j + 8 <= end; j += 8) {
        f8 v;
        load8(x + j, v);
        c += compress(v, v >= f, buffer + c);
      }
      for (; j < end; ++j)
        if (widen(x[j]) >= floor) buffer[c++] = widen(x[j]);
    }
    if (c <= capacity) return select_kth(buffer, c, k);
  }
  if (n <= 4096) {
    widen_into(buffer, x, n);
    return select_kth(buffer, n, k);
  }
  // A strided sample brackets the k-th largest: [lo, hi] around the sample's quantile, with room for
  // its spread; then one pass counts the entries above hi and gathers those in [lo, hi].
  constexpr index_t samples = 1024;
  float sample[samples];
  for (index_t i = 0; i < samples; ++i) sample[i] = widen(x[i * n / samples]);
  const double rank = static_cast<double>(k - 1) * samples / static_cast<double>(n);
  const double spread = 4.0 * std::sqrt(rank + 1.0) + 16.0;
  const auto hi_rank = static_cast<index_t>(std::max(0.0, rank - spread));
  const auto lo_rank = static_cast<index_t>(std::min(static_cast<double>(samples - 1), rank + spread));
  std::nth_element(sample, sample + hi_rank, sample + samples, std::greater<float>());
  const float hi = hi_rank == 0 ? -negative_infinity<float>() : sample[hi_rank];
  std::nth_element(sample + hi_rank, sample + lo_rank, sample + samples, std::greater<float>());
  const float lo = lo_rank == samples - 1 ? negative_infinity<float>() : sample[lo_rank];
  const f8 vhi = f8{} + hi, vlo = f8{} + lo;
  index_t above = 0, c = 0;
  index_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f8 v;
    load8(x + j, v);
    above += static_cast<index_t>(__builtin_popcountll(specdec::detail::lane_bits(v > vhi)));
    c += compress(v, (v >= vlo) & (v <= vhi), buffer + c);
  }
  for (; j < n; ++j) {
    const float v = widen(x[j]);
    above += v > hi;
    if (v >= lo && v <= hi) buffer[c++] = v;
  }
  if (above < k && k <= above + c) return select_kth(buffer, c, k - above);
  widen_into(buffer, x, n);  // the sample misled: every entry
  return select_kth(buffer, n, k);
}

}  // namespace filter_passes
#endif

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
