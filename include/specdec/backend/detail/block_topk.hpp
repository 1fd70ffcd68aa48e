// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Host top-k of a whole fp32 row by its block maxima, and the one-look fused scan that feeds
/// it the row's log-sum-exp as well (used by the eigen backend).
///
/// The streaming top-k of row_kernels.hpp (detail::topk_scan) raises its threshold one sorted
/// insertion at a time: about k ln(V / k) insertions, ~460 at k = 64 and V = 32000, which cost three
/// times the row's streaming pass. Here the row is read once for the maxima of its 64-entry blocks
/// (a max-reduction, at the speed of the streaming pass). The k-th largest block maximum is a floor
/// under the row's k-th largest entry (k distinct entries reach it), so only the entries of blocks
/// whose maximum reaches the floor are looked at again: about k blocks, from cache, holding about
/// k entries at or above the floor for typical logits. Those few candidates are ranked by counting
/// (branch-free), instead of being inserted one by one.
///
/// Everything here is host code for fp32 with SIMD (SPECDEC_HOST_SIMD); the backends fall back to
/// topk_scan elsewhere. The result is the same exact top-k: values descending, ties to the lower
/// index.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/backend/detail/row_kernels.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

#if SPECDEC_HOST_SIMD

/// Entries per block of the block-maxima top-k: one 64-bit candidate mask per block.
inline constexpr index_t maxima_block = 64;

/// Blocks of x[0, n): the last one may be partial.
inline index_t maxima_blocks(index_t n) noexcept { return (n + maxima_block - 1) / maxima_block; }

/// Whether the block-maxima top-k applies: enough blocks that the k-th largest maximum exists and
/// is selective (with fewer than 2k blocks it would pass half the row).
inline bool use_block_topk(index_t n, index_t k) noexcept { return maxima_blocks(n) >= 2 * k; }

/// Order-preserving map of a float's bits to uint32: a < b as floats (neither NaN) implies
/// key(a) < key(b); -0 maps just below +0.
inline std::uint32_t ordered_key(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

/// Inverse of ordered_key.
inline float key_float(std::uint32_t key) noexcept {
  const std::uint32_t u = (key & 0x80000000u) != 0 ? (key & 0x7FFFFFFFu) : ~key;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Horizontal maximum of a float vector (NaN-free lanes).
inline float horizontal_max(simd<float>::vec m) noexcept {
  float r = m[0];
  for (int l = 1; l < simd_bytes / 4; ++l) r = r < m[l] ? m[l] : r;
  return r;
}

/// maxima[b] = max of x's block b (maxima_blocks(n) entries), and the row's maximum and NaN flag.
/// A block holding NaN reports the maximum of its other entries; the flag says the row is unusable.
template <class E>
inline max_scan<float> block_maxima(const E* x, index_t n, float* maxima) noexcept {
  using vec = simd<float>::vec;
  using mask = simd<float>::mask;
  constexpr int w = simd_bytes / 4;
  const index_t full = n / maxima_block;
  vec row_max = vec{} + negative_infinity<float>();
  mask nan{};
  for (index_t b = 0; b < full; ++b) {
    const E* p = x + b * maxima_block;
    vec m0 = simd_load(p), m1 = simd_load(p + w);
    nan |= (m0 != m0) | (m1 != m1);
    for (index_t j = 2 * w; j < maxima_block; j += 2 * w) {
      const vec v0 = simd_load(p + j), v1 = simd_load(p + j + w);
      m0 = m0 < v0 ? v0 : m0;
      m1 = m1 < v1 ? v1 : m1;
      nan |= (v0 != v0) | (v1 != v1);
    }
    m0 = m0 < m1 ? m1 : m0;
    maxima[b] = horizontal_max(m0);
    row_max = row_max < m0 ? m0 : row_max;
  }
  max_scan<float> result{horizontal_max(row_max), any_lane(nan)};
  if (full * maxima_block < n) {
    const max_scan<float> tail = scan_max(x + full * maxima_block, n - full * maxima_block);
    maxima[full] = tail.max;
    result.max = result.max < tail.max ? tail.max : result.max;
    result.has_nan = result.has_nan || tail.has_nan;
  }
  return result;
}

/// How many of values[0, m) are >= t; `values` is padded with -inf to a whole number of vectors.
inline index_t count_at_least(const float* values, index_t m, float t) noexcept {
  using mask = simd<float>::mask;
  constexpr int w = simd_bytes / 4;
  const index_t end = (m + w - 1) / w * w;
  mask c0{}, c1{};
  index_t j = 0;
  for (; j + 2 * w <= end; j += 2 * w) {  // two chains: the compare-subtract latency binds, not the work
    c0 -= simd_load(values + j) >= t;     // true lanes are -1
    c1 -= simd_load(values + j + w) >= t;
  }
  if (j < end) c0 -= simd_load(values + j) >= t;
  c0 += c1;
  index_t count = 0;
  for (int l = 0; l < w; ++l) count += c0[l];
  return count;
}

/// A floor under the k-th largest of values[0, m) (1 <= k <= m, no NaN, no +inf, padded with -inf
/// to a whole number of vectors): a value t <= the k-th largest such that at most k + 7 values
/// reach it, or the k-th largest itself. Bisection over the floats between -inf and the largest
/// value (by ordered_key), each step one vectorised count: about 20 steps of m / 8 compares, where
/// a radix selection spent longer on its histogram's store-to-load chains than on the data.
inline float kth_largest_floor(const float* values, index_t m, index_t k, float largest) noexcept {
  // Invariant: at least k values reach key_float(lo); fewer than k reach key_float(hi).
  std::uint32_t lo = ordered_key(negative_infinity<float>()), hi = ordered_key(largest) + 1;
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    const index_t reaching = count_at_least(values, m, key_float(mid));
    if (reaching < k) {
      hi = mid;
    } else {
      lo = mid;
      if (reaching <= k + 7) break;
    }
  }
  return key_float(lo);
}

/// Scratch of the block-maxima top-k, reused across rows (grown, never shrunk).
struct block_topk_workspace {
  std::vector<float> maxima;  ///< one per block, padded with -inf to whole vectors
  std::vector<float> candidate_values;
  std::vector<std::int32_t> candidate_indices;

  /// Candidates ranked by counting, at most; beyond it (ties, a floor of -inf) they are inserted.
  static index_t capacity(index_t k) noexcept { return 2 * k + 64; }

  void reserve(index_t n, index_t k) {
    const auto blocks = static_cast<std::size_t>(maxima_blocks(n));
    maxima.resize(std::max(maxima.size(), blocks + simd_bytes / 4));
    std::fill(maxima.begin() + static_cast<std::ptrdiff_t>(blocks), maxima.end(), negative_infinity<float>());
    // Padded to whole vectors with -inf for the counting loop.
    const auto slots = static_cast<std::size_t>(capacity(k) + simd_bytes / 4);
    if (candidate_values.size() < slots) candidate_values.resize(slots);
    if (candidate_indices.size() < slots) candidate_indices.resize(slots);
  }
};

/// Ranks c candidates (values cv, column ids ci, in increasing id order; both padded to a whole
/// number of vectors, cv with -inf) and writes the k best, sorted, to values / indices (c >= k).
/// The rank of candidate i is the number of candidates that come before it: larger values, and
/// equal values at lower ids, i.e. a candidate j < i comes first when cv[j] >= cv[i] and a
/// candidate j > i when cv[j] > cv[i]. Eight candidates are ranked at once against each other
/// candidate in turn: O(c^2 / 8) compares and no data-dependent branch (c is about k here).
inline void rank_candidates(const float* cv, const std::int32_t* ci, index_t c, index_t k, float* values,
                            std::int32_t* indices) noexcept {
  using vec = simd<float>::vec;
  using mask = simd<float>::mask;
  constexpr int w = simd_bytes / 4;
  mask lane{};
  for (int l = 0; l < w; ++l) lane[l] = l;
  for (index_t i0 = 0; i0 < c; i0 += w) {
    const vec v = simd_load(cv + i0);
    mask rank{};
    for (index_t j = 0; j < i0; ++j) rank -= cv[j] >= v;  // true lanes are -1
    for (index_t j = i0; j < i0 + w && j < c; ++j) {
      const mask before = lane > static_cast<std::int32_t>(j - i0);  // j is at a lower id than the lane
      rank -= (cv[j] > v) | ((cv[j] == v) & before);
    }
    for (index_t j = i0 + w; j < c; ++j) rank -= cv[j] > v;
    for (int l = 0; l < w && i0 + l < c; ++l) {
      if (rank[l] < k) {
        values[rank[l]] = v[l];
        indices[rank[l]] = ci[i0 + l];
      }
    }
  }
}

/// The exact top-k of x[0, n) given its block maxima (block_maxima into ws.maxima; the row has no
/// NaN and no +inf; `largest` is its maximum), into values[0, k), indices[0, k). Requires
/// use_block_topk(n, k) and ws.reserve(n, k).
template <class E>
inline void topk_from_block_maxima(const E* x, index_t n, index_t k, float largest, block_topk_workspace& ws,
                                   float* values, std::int32_t* indices) noexcept {
  constexpr int w = simd_bytes / 4;
  const index_t blocks = maxima_blocks(n);
  const float* maxima = ws.maxima.data();
  const float floor = kth_largest_floor(maxima, blocks, k, largest);
  float* cv = ws.candidate_values.data();
  std::int32_t* ci = ws.candidate_indices.data();
  const index_t capacity = block_topk_workspace::capacity(k);
  // Entries at or above the floor, in index order, from the blocks whose maximum reaches it: both
  // found as bit masks and walked bit by bit (about k blocks of `blocks` pass, at unpredictable places).
  const auto visit = [&](const auto& take) {
    for (index_t g = 0; g < blocks; g += 64) {
      std::uint64_t passing = 0;
      for (index_t j = 0; j < 64 && g + j < blocks; j += w)  // the padding is -inf and never passes
        passing |= lane_bits(!(simd_load(maxima + g + j) < floor)) << j;
      for (; passing != 0; passing &= passing - 1) {
        const index_t b0 = (g + __builtin_ctzll(passing)) * maxima_block;
        if (b0 + maxima_block <= n) {
          std::uint64_t bits = 0;
          for (index_t j = 0; j < maxima_block; j += w) bits |= lane_bits(!(simd_load(x + b0 + j) < floor)) << j;
          for (; bits != 0; bits &= bits - 1) take(b0 + __builtin_ctzll(bits));
        } else {
          for (index_t i = b0; i < n; ++i)
            if (widen(x[i]) >= floor) take(i);
        }
      }
    }
  };
  index_t c = 0;
  visit([&](index_t i) {
    if (c < capacity) {
      cv[c] = widen(x[i]);
      ci[c] = static_cast<std::int32_t>(i);
    }
    ++c;
  });
  if (c <= capacity) {
    for (index_t j = c; j < c + w; ++j) {
      cv[j] = negative_infinity<float>();
      ci[j] = 0;
    }
    rank_candidates(cv, ci, c, k, values, indices);
    return;
  }
  // Many entries tie at the floor (or it is -inf): a sorted insertion per candidate, in index order.
  topk_accumulator<float> acc{values, indices, k, 0};
  visit([&](index_t i) { acc.offer(widen(x[i]), static_cast<std::int32_t>(i)); });
}

// ---------------------------------------------------------------------------------------------------
// The fused top-k + log-sum-exp in one look at each entry.
//
// The sum of exponentials is compute-bound on a CPU core (a dozen vector instructions per eight
// entries), the streaming pass memory-bound. Reading each chunk twice (max first, then the sum from
// L1) left the two costs mostly added up. Here every entry is loaded once and feeds the block maximum
// and its term together, with the data prefetched 8 KiB ahead, so the arithmetic runs under the
// memory stream. The terms need a reference near the row's maximum before the maximum is known: the
// first chunk that holds a finite entry is read for its maximum first and sets it. Terms of entries
// above the reference are fine up to 2^64 (a chunk's sum stays far from overflow); a chunk whose
// maximum's term exceeds that is summed again after the reference is raised to its maximum, which
// for logits happens a few times per row at most. Accuracy is that of sum_exp_shifted.
// ---------------------------------------------------------------------------------------------------

/// What block_maxima_sum_exp found.
struct block_sum_exp {
  max_scan<float> scan;  ///< the row's maximum and NaN flag, exact
  float sum;             ///< sum_j exp((x_j - max) * inv_t); 0 for a row that is entirely -inf
  bool done;             ///< false: the logits are too large for the vector form; use sum_exp_shifted
};

/// One look at each entry of x[0, n): maxima[b] as block_maxima (unless `maxima` is null), the row's
/// maximum and NaN flag, and the sum of exponentials with temperature (inv_t = 1 / T). Each 8 KiB
/// chunk's terms are taken against the reference of the largest maximum before it, and a chunk is
/// summed again only when its maximum rises more than 2^64 above that. A row with NaN or +inf stops
/// early and reports it (maxima and sum are then meaningless). Also the row log-sum-exp of the Eigen
/// backend's softmax and log-softmax (rows longer than one chunk).
template <class Terms = reference_terms, class E>
inline block_sum_exp block_maxima_sum_exp(const E* x, index_t n, float inv_t, float* maxima) noexcept {
  using vec = simd<float>::vec;
  constexpr int w = simd_bytes / 4;
  constexpr index_t chunk_blocks = 32;                    // 8 KiB: the unit the reference is checked in
  constexpr index_t prefetch_distance = 2048;             // floats ahead: 8 KiB
  constexpr float headroom = 64.0f;                       // terms up to 2^64: chunk sums far from overflow
  const float c = inv_t * 1.44269504088896341f;
  const index_t full = n / maxima_block;
  const auto faulty = [&]() { return block_sum_exp{scan_max(x, n), 0.0f, true}; };
  block_sum_exp result{{negative_infinity<float>(), false}, 0.0f, true};
  double total = 0.0;  // sum of terms relative to `terms`
  bool referenced = false;
  Terms terms(c, 0.0f);
  const auto rebase = [&](float max) {
    const Terms next(c, max);
    total *= std::exp2(terms.log2_reference_over(max) - next.log2_reference_over(max));
    terms = next;
  };
  for (index_t b0 = 0; b0 < full; b0 += chunk_blocks) {
    const index_t b1 = b0 + chunk_blocks < full ? b0 + chunk_blocks : full;
    const E* chunk = x + b0 * maxima_block;
    const index_t len = (b1 - b0) * maxima_block;
    if (!referenced) {  // the first look at a chunk that may set the reference
      const max_scan<float> m = scan_max(chunk, len);
      if (m.has_nan || m.max == -negative_infinity<float>()) return faulty();
      if (m.max == negative_infinity<float>()) {  // all masked so far: nothing to sum
        if (maxima != nullptr) block_maxima(chunk, len, maxima + b0);
        continue;
      }
      if (!Terms::representable(m.max, c)) return {result.scan, 0.0f, false};
      terms = Terms(c, m.max);
      referenced = true;
    }
    vec s0{}, s1{}, chunk_max = vec{} + negative_infinity<float>();
    // The maximum of `count` entries at p (lane-wise), their terms added to s0 / s1.
    const auto scan = [&](const E* p, index_t count, const E* ahead) {
      vec m0 = vec{} + negative_infinity<float>(), m1 = m0;
      for (index_t j = 0; j < count; j += 2 * w) {
        if (ahead != nullptr && j % 16 == 0) __builtin_prefetch(ahead + j);
        const vec v0 = simd_load(p + j), v1 = simd_load(p + j + w);
        m0 = m0 < v0 ? v0 : m0;
        m1 = m1 < v1 ? v1 : m1;
        s0 += terms(v0);
        s1 += terms(v1);
      }
      return m0 < m1 ? m1 : m0;
    };
    // Without block maxima, one flat loop per chunk that prefetches the next 8 KiB itself: the hardware
    // prefetcher alone left the exponentials waiting on memory (measured on an AVX-512 Xeon VM: this
    // pass took 1.6x a max-reduction's time, and with the prefetch 0.9-1.0x).
    if (maxima == nullptr)
      chunk_max = scan(chunk, len, b1 * maxima_block + prefetch_distance <= n ? chunk + prefetch_distance : nullptr);
    for (index_t b = b0; b < b1 && maxima != nullptr; ++b) {
      const E* p = x + b * maxima_block;
      if (b * maxima_block + prefetch_distance + maxima_block <= n)
        for (index_t l = 0; l < maxima_block; l += 16) __builtin_prefetch(p + prefetch_distance + l);
      const vec m = scan(p, maxima_block, nullptr);
      maxima[b] = horizontal_max(m);
      chunk_max = chunk_max < m ? m : chunk_max;
    }
    const float cm = horizontal_max(chunk_max);
    // A NaN may hide from the maxima but not from the sum; +inf shows as the maximum.
    if (cm != cm || cm == -negative_infinity<float>()) return faulty();
    s0 += s1;
    if (cm > result.scan.max) result.scan.max = cm;
    if (terms.log2_reference_over(cm) < -headroom) {  // terms of this chunk may have overflowed
      if (!Terms::representable(cm, c)) return {result.scan, 0.0f, false};
      rebase(cm);
      s0 = simd_sum_terms(chunk, len, static_cast<const E*>(nullptr), 0, terms);
    }
    float chunk_sum = 0.0f;
    for (int l = 0; l < w; ++l) chunk_sum += s0[l];
    if (chunk_sum != chunk_sum) return faulty();
    total += chunk_sum;
  }
  if (full * maxima_block < n) {  // the partial last block
    const E* tail = x + full * maxima_block;
    const index_t len = n - full * maxima_block;
    const max_scan<float> m = scan_max(tail, len);
    if (m.has_nan || m.max == -negative_infinity<float>()) return faulty();
    if (maxima != nullptr) maxima[full] = m.max;
    if (m.max > result.scan.max) result.scan.max = m.max;
    if (m.max != negative_infinity<float>()) {
      if (!Terms::representable(m.max, c)) return {result.scan, 0.0f, false};
      if (!referenced || terms.log2_reference_over(m.max) < -headroom) {
        if (referenced) {
          rebase(m.max);
        } else {
          terms = Terms(c, m.max);
          referenced = true;
        }
      }
      for (index_t i = 0; i < len; ++i) total += terms.scalar(widen(tail[i]));
    }
  }
  if (referenced) result.sum = static_cast<float>(total * std::exp2(terms.log2_reference_over(result.scan.max)));
  return result;
}

#endif  // SPECDEC_HOST_SIMD

}  // namespace specdec::detail::inline SPECDEC_ISA
