// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Selection over rows: argmax and top-k (running accumulators, block maxima floors).
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
/// Fault of a logits row given its maximum and NaN flag.
template <class T>
SPECDEC_HOST_DEVICE inline fault logits_fault(const max_scan<T>& s) noexcept {
  if (s.has_nan) return fault::nan;
  if (s.max == -negative_infinity<T>()) return fault::positive_infinity;
  return fault::none;
}

/// First index of `value` in x[0, n) (the caller knows it is there).
template <class E, class T>
SPECDEC_HOST_DEVICE inline index_t find_first(const E* x, index_t n, T value) noexcept {
  for (index_t j = 0; j < n; ++j)
    if (widen(x[j]) == value) return j;
  return 0;
}

/// Argmax over a row: the maximum (the entry at the index) and its lowest index. One pass of chunked max-reductions remembers
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

template <class E, class T = compute_t<E>>
SPECDEC_HOST_DEVICE inline argmax_result<T> argmax_row(const E* x, index_t n) noexcept {
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
    // The entry itself: a zero maximum then has the sign of its first occurrence on every backend (a
    // vector max's choice between +0 and -0 depends on the lane order).
    best.value = widen(x[best.index]);
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
template <class E, class T = compute_t<E>>
inline T topk_seed_floor(const E* x, index_t k) noexcept {
  using vec = typename simd<T>::vec;
  constexpr int w = simd_lanes<E>;
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

template <class E, class Accumulator, class T = compute_t<E>>
SPECDEC_HOST_DEVICE inline max_scan<T> topk_scan(const E* x, index_t n, index_t offset, Accumulator& acc) noexcept {
  max_scan<T> total{negative_infinity<T>(), false};
  index_t b0 = 0;
#if SPECDEC_HOST_SIMD
  // Filling an empty accumulator with every entry until it is full, and then raising its threshold
  // one insertion at a time, costs k ln(span / k) insertions over the first span; on a row of
  // 32000 that was two thirds of all of them. A floor from the first 32 blocks' maxima lets only
  // the entries that reach it in (about k for random logits); the accumulator is full after them.
  if (acc.count == 0 && acc.k <= topk_seed_blocks && n >= topk_seed_blocks * topk_block) {
    using vec = typename simd<T>::vec;
    constexpr int w = simd_lanes<E>;
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
    const T v = widen(x[b0]);
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
    constexpr int w = simd_lanes<E>;
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
        offer_entry(widen(x[i]), i);
      }
    }
  }
#endif
  for (; b0 < n; ++b0) {
    const T v = widen(x[b0]);
    if (!(v <= acc.threshold())) offer_entry(v, b0);
  }
  if (acc.full() && total.max < acc.best()) total.max = acc.best();
  return total;
}

}  // namespace specdec::detail::inline SPECDEC_ISA
