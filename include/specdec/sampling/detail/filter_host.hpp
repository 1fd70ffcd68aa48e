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
///   is the key of a positive entry: M changes only at entries' keys, and M(key(+0)) is the total. Vector
///   passes of approximate masses (double sums in any order, within n 2^-52 of the total of the
///   canonical ones) at seven thresholds narrow the values the cut can lie between, gathering the
///   entries between them, until few remain; those are sorted, and the approximate masses name the
///   candidate d. Then one exact pass: K* = key(d) iff M(key(d)) < p <= M(key(d) - 1), both canonical
///   masses (the entries > d, and >= d); else the next value up or down is tried. Only a candidate the
///   approximations missed entirely falls back to the radix search itself.
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
inline float horizontal_max(const f8& m) noexcept {
  float r = m[0];
  for (int l = 1; l < 8; ++l) r = r < m[l] ? m[l] : r;
  return r;
}

/// What the check pass found: the canonical total (probabilities), whether an entry is bad (outside
/// [0, 1] or NaN for probabilities; NaN or +inf for logits), and the largest entry.
struct row_check {
  double total;
  bool bad;
  float max;
};

/// One pass over x[0, n): the check, the row's canonical total (probabilities only: `sum`) and, unless
/// `maxima` is null, the maximum of each 64-entry block (the last may be partial) followed by
/// maxima_padding -inf.
template <bool Probabilities>
inline row_check check_row(const float* x, index_t n, float* maxima) noexcept {
  d8 lanes{};
  double total = 0.0;
  i8 good = i8{} - 1;
  f8 row_max = f8{} + negative_infinity<float>();
  const f8 zero{}, one = f8{} + 1.0f, inf = f8{} - negative_infinity<float>();
  index_t j = 0;
  const auto vector_at = [&](index_t at, f8& m) {
    f8 v;
    std::memcpy(&v, x + at, sizeof v);
    if constexpr (Probabilities) {
      good &= (v >= zero) & (v <= one);
      lanes += __builtin_convertvector(v, d8);
    } else {
      good &= v < inf;
    }
    m = m < v ? v : m;  // a NaN never replaces the maximum; `good` reports it
  };
  const index_t full_blocks = n / block;
  for (index_t b = 0; b < full_blocks; ++b) {
    f8 m = f8{} + negative_infinity<float>();
    for (index_t i = 0; i < block; i += 8) vector_at(b * block + i, m);
    if (maxima != nullptr) maxima[b] = horizontal_max(m);
    row_max = row_max < m ? m : row_max;
    j = (b + 1) * block;
    if constexpr (Probabilities)
      if (j % chunk == 0) {
        total += combine(lanes);
        lanes = d8{};
      }
  }
  // The partial last block: whole vectors, then one entry at a time into its lane.
  f8 m = f8{} + negative_infinity<float>();
  for (; j + 8 <= n; j += 8) vector_at(j, m);
  float tail_max = horizontal_max(m);
  bool tail_good = true;
  for (; j < n; ++j) {
    const float v = x[j];
    if constexpr (Probabilities) {
      tail_good = tail_good && v >= 0.0f && v <= 1.0f;
      lanes[j % 8] += static_cast<double>(v);
    } else {
      tail_good = tail_good && v < -negative_infinity<float>();
    }
    tail_max = tail_max < v ? v : tail_max;
  }
  if (maxima != nullptr) {
    index_t b = full_blocks;
    if (full_blocks * block < n) maxima[b++] = tail_max;
    for (index_t p = 0; p < maxima_padding; ++p) maxima[b + p] = negative_infinity<float>();
  }
  if constexpr (Probabilities)
    if (n % chunk != 0) total += combine(lanes);
  const float largest = std::max(horizontal_max(row_max), tail_max);
  return row_check{total, specdec::detail::any_lane(~good) || !tail_good, largest};
}

/// The first bad entry (the check found one): as filter_rows_job::weigh reports it.
template <bool Probabilities>
inline index_t first_bad(const float* x, index_t n) noexcept {
  for (index_t j = 0; j < n; ++j) {
    const float v = x[j];
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
inline mass_pair canonical_masses(const float* x, index_t n, float t, const float* maxima) noexcept {
  d8 above{}, at{};
  mass_pair total{0.0, 0.0};
  const d8 threshold = d8{} + static_cast<double>(t);  // compared as doubles: the same answers, no mask widening
  const index_t full_blocks = n / block;
  for (index_t b = 0; b < full_blocks; ++b) {
    if (maxima == nullptr || !(maxima[b] < t))
      for (index_t j = b * block; j < (b + 1) * block; j += 8) {
        f8 v;
        std::memcpy(&v, x + j, sizeof v);
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
    const float v = x[j];
    if (v > t) above[j % 8] += static_cast<double>(v);
    if (v >= t) at[j % 8] += static_cast<double>(v);
  }
  if (full_blocks * block % chunk != 0 || full_blocks * block < n) {
    total.above += combine(above);
    total.at_or_above += combine(at);
  }
  return total;
}

/// Writes y[j] = keep(x[j]) ? kept(x[j]) : dropped over [0, n), where keep(v) is v >= tau: blocks whose
/// maximum (`maxima`, or null) is below tau are filled without being read. y may be x.
template <class Kept>
inline void write_kept(const float* x, index_t n, float tau, const float* maxima, float dropped, const Kept& kept, float* y) noexcept {
  const f8 threshold = f8{} + tau, fill = f8{} + dropped;
  const index_t full_blocks = n / block;
  for (index_t b = 0; b < full_blocks; ++b) {
    const index_t j0 = b * block;
    if (maxima != nullptr && maxima[b] < tau) {
      for (index_t j = j0; j < j0 + block; j += 8) std::memcpy(y + j, &fill, sizeof fill);
      continue;
    }
    for (index_t j = j0; j < j0 + block; j += 8) {
      f8 v, out;
      std::memcpy(&v, x + j, sizeof v);
      kept(v, out);
      out = v >= threshold ? out : fill;
      std::memcpy(y + j, &out, sizeof out);
    }
  }
  for (index_t j = full_blocks * block; j < n; ++j) {
    const float v = x[j];
    if (v >= tau) {
      const f8 one = {v, v, v, v, v, v, v, v};  // not f8{} + v: +0 + -0 would lose the sign
      f8 out;
      kept(one, out);
      y[j] = out[0];
    } else {
      y[j] = dropped;
    }
  }
}

/// y[j] = x[j] >= tau ? x[j] : -inf (y may be x).
inline void write_masked(const float* x, index_t n, float tau, const float* maxima, float* y) noexcept {
  write_kept(x, n, tau, maxima, negative_infinity<float>(), [](const f8& v, f8& out) { out = v; }, y);
}

/// y[j] = x[j] >= tau ? float(double(x[j]) / mass) : 0 (y may be x): the quotient in double, rounded
/// once, as filter_rows_job writes it.
inline void write_renormalised(const float* x, index_t n, float tau, double mass, const float* maxima, float* y) noexcept {
  const d8 divisor = d8{} + mass;
  write_kept(x, n, tau, maxima, 0.0f,
             [&](const f8& v, f8& out) { out = __builtin_convertvector(__builtin_convertvector(v, d8) / divisor, f8); }, y);
}

/// The k-th largest of values[0, c) (1 <= k <= c), reordering them.
inline float select_kth(float* values, index_t c, index_t k) noexcept {
  std::nth_element(values, values + (k - 1), values + c, std::greater<float>());
  return values[k - 1];
}

/// The k-th largest entry of x[0, n) (1 <= k < n; no NaN, no +inf), exactly. `maxima`: check_row's
/// block maxima; `largest`: the row's maximum; `buffer`: n floats.
inline float kth_largest(const float* x, index_t n, index_t k, float largest, const float* maxima, float* buffer) noexcept {
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
        std::memcpy(&v, x + j, sizeof v);
        for (std::uint64_t bits = specdec::detail::lane_bits(v >= f); bits != 0; bits &= bits - 1)
          if (c < capacity + 1) buffer[c++] = v[__builtin_ctzll(bits)];
      }
      for (; j < end; ++j)
        if (x[j] >= floor && c < capacity + 1) buffer[c++] = x[j];
    }
    if (c <= capacity) return select_kth(buffer, c, k);
  }
  if (n <= 4096) {
    std::memcpy(buffer, x, static_cast<std::size_t>(n) * sizeof(float));
    return select_kth(buffer, n, k);
  }
  // A strided sample brackets the k-th largest: [lo, hi] around the sample's quantile, with room for
  // its spread; then one pass counts the entries above hi and gathers those in [lo, hi].
  constexpr index_t samples = 1024;
  float sample[samples];
  for (index_t i = 0; i < samples; ++i) sample[i] = x[i * n / samples];
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
    std::memcpy(&v, x + j, sizeof v);
    above += static_cast<index_t>(__builtin_popcountll(specdec::detail::lane_bits(v > vhi)));
    for (std::uint64_t bits = specdec::detail::lane_bits((v >= vlo) & (v <= vhi)); bits != 0; bits &= bits - 1)
      buffer[c++] = v[__builtin_ctzll(bits)];
  }
  for (; j < n; ++j) {
    above += x[j] > hi;
    if (x[j] >= lo && x[j] <= hi) buffer[c++] = x[j];
  }
  if (above < k && k <= above + c) return select_kth(buffer, c, k - above);
  std::memcpy(buffer, x, static_cast<std::size_t>(n) * sizeof(float));  // the sample misled: every entry
  return select_kth(buffer, n, k);
}

/// The top-p cut's value: the positive entry d with K* = order_key(d), or -inf where K* = 0 (the
/// canonical total is below p: every entry kept), and the canonical mass of the entries >= d (of all
/// entries for -inf). `found` false: the search could not settle it (the caller runs the radix search).
struct cut_value {
  float d;
  double kept_mass;
  bool found;
};

/// Approximate masses of the entries of w[0, c) above each of `thresholds` (ascending), plus `base`:
/// double sums in vector lanes, within (entries) 2^-53 of the sum of everything counted.
inline void masses_above(const float* w, index_t c, const float (&thresholds)[7], double base, double (&out)[7]) noexcept {
  d8 acc[7] = {};
  d8 t[7];
  for (int i = 0; i < 7; ++i) t[i] = d8{} + static_cast<double>(thresholds[i]);
  index_t j = 0;
  for (; j + 8 <= c; j += 8) {
    f8 v;
    std::memcpy(&v, w + j, sizeof v);
    const d8 d = __builtin_convertvector(v, d8);
    SPECDEC_UNROLL
    for (int i = 0; i < 7; ++i) acc[i] = d > t[i] ? acc[i] + d : acc[i];
  }
  for (int i = 0; i < 7; ++i) {
    double s = base;
    for (int l = 0; l < 8; ++l) s += acc[i][l];
    for (index_t r = j; r < c; ++r)
      if (w[r] > thresholds[i]) s += static_cast<double>(w[r]);
    out[i] = s;
  }
}

/// Moves the entries of w[0, c) in (lo, hi] to the front of `into` (which may be w), in order; their count.
inline index_t gather_between(const float* w, index_t c, float lo, float hi, float* into) noexcept {
  const f8 vlo = f8{} + lo, vhi = f8{} + hi;
  index_t m = 0, j = 0;
  for (; j + 8 <= c; j += 8) {
    f8 v;
    std::memcpy(&v, w + j, sizeof v);
    for (std::uint64_t bits = specdec::detail::lane_bits((v > vlo) & (v <= vhi)); bits != 0; bits &= bits - 1)
      into[m++] = v[__builtin_ctzll(bits)];
  }
  for (; j < c; ++j)
    if (w[j] > lo && w[j] <= hi) into[m++] = w[j];
  return m;
}

/// A float's bits as an integer (the order of positive floats) and back.
inline std::int32_t float_bits(float f) noexcept {
  std::int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
inline float bits_float(std::int32_t b) noexcept {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

/// Candidates for the cut among the entries w[0, c) (those in (lo, hi]; `base` approximates the mass
/// above hi): their distinct values in descending order around the first whose approximate mass above
/// (`base` plus the entries of w above it) is not below `target` (the candidate is the value before
/// it), at most `most` of them, into values / above. Returns how many, and the candidate's index in
/// `at`. w is reordered.
inline index_t crossing_window(float* w, index_t c, double base, double target, float* values, double* above, index_t most,
                               index_t& at) noexcept {
  constexpr index_t before = 4;  // values kept above the candidate (the exact test may step up)
  index_t m = 0;
  at = 0;
  double running = base;
  index_t past = 0;  // values offered after the crossing
  const auto offer = [&](float v, double mass_above) {
    if (mass_above < target) {  // a later candidate, last in the window: `before` values above it
      if (m == before + 1) {
        std::memmove(values, values + 1, static_cast<std::size_t>(before) * sizeof(float));
        std::memmove(above, above + 1, static_cast<std::size_t>(before) * sizeof(double));
        --m;
      }
      at = m;
    } else {
      if (past == 3 || m == most) return false;
      ++past;
    }
    values[m] = v;
    above[m++] = mass_above;
    return true;
  };
  if (c <= 4096) {
    std::sort(w, w + c, std::greater<float>());
    for (index_t i = 0; i < c;) {
      const float v = w[i];
      if (!offer(v, running)) break;
      for (; i < c && w[i] == v; ++i) running += static_cast<double>(v);
    }
    return m;
  }
  // Many entries in few values (ties: the narrowing stopped on a range of a few floats): one pass per
  // distinct value, largest first.
  float previous = -negative_infinity<float>();
  for (int values_seen = 0; values_seen < 64; ++values_seen) {
    float v = negative_infinity<float>();
    for (index_t i = 0; i < c; ++i)
      if (w[i] < previous && w[i] > v) v = w[i];
    if (v == negative_infinity<float>() || !offer(v, running)) break;
    for (index_t i = 0; i < c; ++i)
      if (w[i] == v) running += static_cast<double>(v);
    previous = v;
  }
  return m;
}

/// The top-p cut of probability row x[0, n) (checked: entries in [0, 1] or -0) whose canonical total
/// is `total` and largest entry `largest`; `maxima`: check_row's block maxima; `buffer`: n floats.
inline cut_value top_p_cut(const float* x, index_t n, float p, double total, float largest, const float* maxima, float* buffer) noexcept {
  const double target = static_cast<double>(p);
  if (total < target) return cut_value{negative_infinity<float>(), total, true};
  // Approximate masses are within n 2^-53 (their sum) of the exact ones, and so are the canonical
  // ones: a mass this far from p is on the same side of p in both.
  const double margin = static_cast<double>(n + 64) * 0x1p-51 * total;
  // K* lies in (key(lo), key(hi)]: M(hi) < p (at first hi is the largest entry: nothing is above it),
  // M(lo) >= p (at first lo = 0: M(key(+0)) is the total). `base` approximates M(hi); w[0, c) holds
  // the entries in (lo, hi] once gathered (at first, the row itself).
  float lo = 0.0f, hi = largest;
  double base = 0.0;
  const float* w = x;
  index_t c = n;
  bool gathered = false;
  for (int pass = 0; pass < 32 && (!gathered || c > 256); ++pass) {
    // Seven thresholds evenly spaced in the bits of the floats in (lo, hi) (the first pass: four
    // binades apart below the largest entry, where a row's mass lies).
    const std::int32_t top = float_bits(hi), bottom = float_bits(lo);
    const std::int64_t step = pass == 0 ? std::int64_t{4} << 23 : (static_cast<std::int64_t>(top) - bottom) / 8;
    if (step == 0) break;  // (lo, hi) holds too few floats to split
    float t[7];
    for (int i = 0; i < 7; ++i)
      t[6 - i] = bits_float(static_cast<std::int32_t>(std::max<std::int64_t>(bottom + 1, top - (i + 1) * step)));
    double m[7];
    masses_above(w, c, t, base, m);
    // The new (lo, hi]: the largest threshold whose mass is surely >= p, the smallest above it surely < p.
    float new_lo = lo, new_hi = hi;
    double new_base = base;
    for (int i = 0; i < 7; ++i)
      if (m[i] >= target + margin && t[i] > new_lo) new_lo = t[i];
    for (int i = 6; i >= 0; --i)
      if (m[i] < target - margin && t[i] < new_hi && t[i] > new_lo) new_hi = t[i], new_base = m[i];
    if (new_lo == lo && new_hi == hi) break;  // p is within the margin of every threshold's mass
    lo = new_lo;
    hi = new_hi;
    base = new_base;
    c = gather_between(w, c, lo, hi, buffer);
    w = buffer;
    gathered = true;
  }
  if (!gathered) c = gather_between(x, n, lo, hi, buffer);
  // The candidates: (lo, hi]'s distinct values, and the approximate mass above each. K* is the key of
  // the smallest d whose mass above is below p.
  constexpr index_t most = 8;  // crossing_window's 4 above the candidate, it, 3 below
  float values[most];
  double above[most];
  index_t a = 0;
  const index_t m = crossing_window(buffer, c, base, target, values, above, most, a);
  if (m == 0) return cut_value{0.0f, 0.0, false};
  // The exact test, stepping to the next value up or down while it fails.
  for (int tries = 0; tries < 8; ++tries) {
    const mass_pair exact = canonical_masses(x, n, values[a], maxima);
    if (exact.above < target && target <= exact.at_or_above) return cut_value{values[a], exact.at_or_above, true};
    if (exact.above >= target) {  // the cut is above values[a]
      if (a == 0) break;
      --a;
    } else {  // the entries >= values[a] hold less than p: the cut is below
      if (a + 1 >= m) break;
      ++a;
    }
  }
  return cut_value{0.0f, 0.0, false};
}

}  // namespace filter_passes
#endif

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
