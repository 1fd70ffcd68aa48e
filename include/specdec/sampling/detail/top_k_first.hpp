// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief FlashInfer's `top_k_top_p_sampling_from_probs` in its `"top_k_first"` order on one host row,
/// from the row's top k alone: the token that top_k_renorm, then top_p_renorm, then row_sample give,
/// without writing either filtered row.
///
/// After the top-k cut only the kept entries (those >= the k-th largest) are nonzero, and every later
/// step reads nothing else: zeros add +0 to the canonical lane sums (which change nothing), and the
/// sampler's walk skips them. So the steps run over the kept entries, in index order:
///
/// 1. the check pass and the k-th largest of filter_host.hpp (the filter's own functions), the kept
///    entries gathered from the blocks that reach it, their canonical mass (canonical_masses, as the
///    filter weighs it) and y = narrow<E>(float(double(x) / mass)), the filter's output entries;
/// 2. top_p_renorm of that row: its canonical total (to accept it, as the filter does), the cut K* (the
///    smallest order key whose mass above is below p: the key of a kept value d, found from the kept
///    values' masses, or 0 when the total is below p), and z = narrow<E>(float(double(y) / M)) for
///    y >= d, M the canonical mass of those;
/// 3. row_sample of that row with the uniform u: chunk masses of z in the canonical order, the chunk
///    and then the entry of u * total (locate_sample, the sampler's own search).
///
/// Every sum is the one the full rows give, bit for bit; a row the sparse form does not serve (k >= V,
/// more kept entries than `sparse_limit`, a row a step refuses) is left to the composed path, which
/// gives the same token or the step's error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/half.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/filter_host.hpp>
#include <specdec/sampling/detail/filter_rows.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

#if SPECDEC_FILTER_HOST_PASSES
namespace top_k_first {

/// Kept entries past this many go to the composed path (the cut's masses cost kept^2 / 2 adds here).
inline constexpr index_t sparse_limit = 512;

struct entry {
  index_t j;
  float v;
};

/// The canonical mass (chunks of sample_chunk, lane j % 8, lanes combined, chunks in order) of the
/// entries of `kept` (index order) whose value passes `take`.
template <class Take>
inline double canonical_mass(const std::vector<entry>& kept, const Take& take) noexcept {
  double total = 0.0;
  std::size_t i = 0;
  while (i < kept.size()) {
    const index_t chunk = kept[i].j / specdec::detail::sample_chunk;
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (; i < kept.size() && kept[i].j / specdec::detail::sample_chunk == chunk; ++i)
      if (take(kept[i].v)) lane[kept[i].j % 8] += static_cast<double>(kept[i].v);
    total += specdec::detail::combine_lanes(lane);
  }
  return total;
}

/// The scratch of token(): the filter's (block maxima, gathered entries) for rows of n entries.
inline std::size_t scratch_floats(index_t n) { return filter_passes::scratch_bytes(n) / sizeof(float) + 1; }

/// The token of the file comment, or -1 where the composed path must decide (see there). `scratch`:
/// scratch_floats(n) floats; `kept`, `masses`: reused buffers.
/// `joint`: FlashInfer's "joint" order instead (one filter, top-k and top-p both judged on the row as
/// given): the top-p cut is taken over the kept entries' own values (every entry above a candidate cut
/// at or above the k-th largest is a kept one; a cut below it keeps the top k, as the filter's
/// max(k-th largest, cut) does), and the kept entries are renormalised once.
template <class E>
inline std::int32_t token(const E* x, index_t n, std::int64_t k, float p, float u, float* scratch, std::vector<entry>& kept,
                          std::vector<double>& masses, bool joint = false) {
  if (k < 1 || k >= n || !(p > 0.0f && p <= 1.0f) || !(u >= 0.0f && u < 1.0f)) return -1;
  float* maxima = scratch;
  float* buffer = maxima + specdec::detail::maxima_blocks(n) + filter_passes::maxima_padding;
  // 1. top_k_renorm's decisions, with its functions.
  const auto q = filter_passes::check_row_quick<true>(x, n, maxima);
  if (q.check.bad || !(std::abs(q.check.total - 1.0) + q.total_error <= renorm_tolerance<E>(n))) return -1;
  const float tau = filter_passes::kth_largest(x, n, static_cast<index_t>(k), q.check.max, maxima, buffer);
  kept.clear();
  const index_t blocks = specdec::detail::maxima_blocks(n);
  const filter_passes::f8 threshold = filter_passes::f8{} + tau;
  for (index_t b = 0; b < blocks; ++b) {
    if (maxima[b] < tau) continue;
    const index_t end = std::min(n, (b + 1) * filter_passes::block);
    index_t j = b * filter_passes::block;
    for (; j + 8 <= end; j += 8) {  // a vector at a time: few of a block's entries reach the k-th largest
      filter_passes::f8 v;
      filter_passes::load8(x + j, v);
      for (auto bits = specdec::detail::lane_bits(v >= threshold); bits != 0; bits &= bits - 1) {
        if (static_cast<index_t>(kept.size()) == sparse_limit) return -1;
        const int l = __builtin_ctzll(bits);
        kept.push_back({j + l, v[l]});
      }
    }
    for (; j < end; ++j) {
      const float v = widen(x[j]);
      if (v >= tau) {
        if (static_cast<index_t>(kept.size()) == sparse_limit) return -1;
        kept.push_back({j, v});
      }
    }
  }
  const double mass_k = filter_passes::canonical_masses(x, n, tau, maxima).at_or_above;
  double total_y = mass_k;  // joint: the cut is judged on the row as given (a total below p keeps the top k)
  if (!joint) {
    for (entry& e : kept) e.v = widen(narrow<E>(static_cast<float>(static_cast<double>(e.v) / mass_k)));
    // 2. top_p_renorm of that row: accepted as the filter accepts it, then its cut.
    total_y = canonical_mass(kept, [](float) { return true; });
    if (!(std::abs(total_y - 1.0) <= renorm_tolerance<E>(n))) return -1;
    for (const entry& e : kept)
      if (!(e.v >= 0.0f && e.v <= 1.0f)) return -1;
  }
  float d = specdec::detail::negative_infinity<float>();  // K* = 0: every entry kept
  double mass_p = total_y;
  if (joint || !(total_y < static_cast<double>(p))) {
    // The largest kept value whose mass above is below p is the smallest with that property walking
    // down: the mass above a value grows as the value falls.
    std::vector<float> values;
    values.reserve(kept.size());
    for (const entry& e : kept)
      if (e.v > 0.0f) values.push_back(e.v);
    std::sort(values.begin(), values.end(), std::greater<float>());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    // The mass above a value falls as the value rises (a subset of the same canonical sums): the first
    // value, walking up from the smallest, whose mass above is below p, by bisection. The largest
    // value qualifies (nothing above it; p > 0).
    std::size_t lo = 0, hi = values.size() - 1;  // values[lo] qualifies; values[hi + 1], if any, does not
    while (lo < hi) {
      const std::size_t mid = (lo + hi + 1) / 2;
      const float c = values[mid];
      if (canonical_mass(kept, [c](float v) { return v > c; }) < static_cast<double>(p))
        lo = mid;
      else
        hi = mid - 1;
    }
    d = values[lo];
    mass_p = canonical_mass(kept, [d](float v) { return v >= d; });
  }
  for (entry& e : kept) e.v = e.v >= d ? widen(narrow<E>(static_cast<float>(static_cast<double>(e.v) / mass_p))) : 0.0f;
  // 3. row_sample of that row.
  const index_t chunks = (n + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  masses.assign(static_cast<std::size_t>(chunks), 0.0);
  double total = 0.0;
  for (std::size_t i = 0; i < kept.size();) {
    const index_t chunk = kept[i].j / specdec::detail::sample_chunk;
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (; i < kept.size() && kept[i].j / specdec::detail::sample_chunk == chunk; ++i) lane[kept[i].j % 8] += static_cast<double>(kept[i].v);
    masses[static_cast<std::size_t>(chunk)] = specdec::detail::combine_lanes(lane);
  }
  for (const double m : masses) total += m;
  if (specdec::detail::probability_fault(false, false, total, specdec::detail::probability_tolerance<E>(n)) != specdec::detail::fault::none)
    return -1;
  // locate_sample's two steps, the chosen chunk's entries laid out for its walk.
  const double target = static_cast<double>(u) * total;
  const specdec::detail::chunk_choice c = specdec::detail::choose_chunk(masses.data(), n, target);
  const index_t begin = c.chunk * specdec::detail::sample_chunk;
  const index_t end = std::min(n, begin + specdec::detail::sample_chunk);
  float dense[specdec::detail::sample_chunk] = {};
  for (const entry& e : kept)
    if (e.j >= begin && e.j < end) dense[e.j - begin] = e.v;
  return specdec::detail::walk_chunk([&](index_t j) { return dense[j - begin]; }, begin, end, c.before, target);
}

}  // namespace top_k_first
#endif

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
