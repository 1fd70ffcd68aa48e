// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The top-p cut of the host's one-thread filters (filter_host.hpp says how the cut is found and
/// why it is the radix search's): approximate masses narrow the values the cut can lie between, then
/// one exact pass confirms the candidate. A file of its own beside the check, k-th largest and write
/// passes it builds on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>

#include <specdec/sampling/detail/filter_host.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

#if SPECDEC_FILTER_HOST_PASSES
namespace filter_passes {

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

/// Moves the entries of w[0, c) in (lo, hi] to the front of `into` (which may be w), in order; their
/// count. With `above`, also the mass of the entries above hi (double sums in 8 lanes).
template <class E>
inline index_t gather_between(const E* w, index_t c, float lo, float hi, float* into, double* above = nullptr) noexcept {
  const f8 vlo = f8{} + lo, vhi = f8{} + hi;
  d8 mass{};
  const d8 dhi = d8{} + static_cast<double>(hi);
  index_t m = 0, j = 0;
  for (; j + 8 <= c; j += 8) {
    f8 v;
    load8(w + j, v);
    if (above != nullptr) {
      const d8 d = __builtin_convertvector(v, d8);
      mass = d > dhi ? mass + d : mass;
    }
    m += compress(v, (v > vlo) & (v <= vhi), into + m);
  }
  double tail = 0.0;
  for (; j < c; ++j) {
    const float v = widen(w[j]);
    if (v > lo && v <= hi) into[m++] = v;
    if (v > hi) tail += static_cast<double>(v);
  }
  if (above != nullptr) {
    for (int l = 0; l < 8; ++l) tail += mass[l];
    *above = tail;
  }
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

/// The top-p cut of probability row x[0, n) (checked: entries in [0, 1] or -0) from its check pass
/// (check_row<true, true>: the canonical total, the largest entry and the masses above the binade
/// thresholds); `maxima`: its block maxima; `buffer`: n floats.
template <class E>
inline cut_value top_p_cut(const E* x, index_t n, float p, const row_check& checked, const float* maxima, float* buffer) noexcept {
  const double target = static_cast<double>(p), total = checked.total;
  if (total < target) return cut_value{negative_infinity<float>(), total, true};
  // Approximate masses in double are within n 2^-53 (their sum) of the exact ones, and so are the
  // canonical ones: a mass this far from p is on the same side of p in both. The check pass's float
  // masses are within (n / 8) 2^-24.
  const double margin = static_cast<double>(n + 64) * 0x1p-51 * total;
  const double float_margin = (static_cast<double>(n) / 8.0 + 64.0) * 0x1p-23 * total;
  // K* lies in (key(lo), key(hi)]: M(hi) < p (at first hi is the largest entry: nothing is above it),
  // M(lo) >= p (at first lo = 0: M(key(+0)) is the total). `base` approximates M(hi); w[0, c) holds
  // the entries in (lo, hi] once gathered.
  float lo = 0.0f, hi = checked.max;
  double base = 0.0;
  // The first narrowing, from the check pass's masses; the gather weighs the mass above hi in double.
  for (int i = 0; i < binades; ++i) {
    const float t = binade_threshold(i);
    if (checked.above[i] >= target + float_margin && t > lo && t < hi) lo = t;
  }
  for (int i = binades - 1; i >= 0; --i) {
    const float t = binade_threshold(i);
    if (checked.above[i] < target - float_margin && t < hi && t > lo) hi = t;
  }
  float* w = buffer;
  index_t c = gather_between(x, n, lo, hi, buffer, &base);
  for (int pass = 0; pass < 32 && c > 256; ++pass) {
    // Seven thresholds evenly spaced in the bits of the floats in (lo, hi).
    const std::int32_t top = float_bits(hi), bottom = float_bits(lo);
    const std::int64_t step = (static_cast<std::int64_t>(top) - bottom) / 8;
    if (step == 0) break;  // (lo, hi) holds too few floats to split
    float t[7];
    for (int i = 0; i < 7; ++i) t[6 - i] = bits_float(static_cast<std::int32_t>(top - (i + 1) * step));
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
  }
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
