// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The team walk of a staged chunk: the canonical search's last step (walk_chunk of
/// backend/detail/sample_kernels.hpp) split over a team, for the batched stochastic verifier.
#pragma once

#include <cstdint>

#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// A staged chunk as walk_chunk reads it: entry j is stage[j - begin].
struct staged_source {
  const float* stage;
  index_t begin;
  SPECDEC_HOST_DEVICE float operator()(index_t j) const noexcept { return stage[j - begin]; }
};

/// walk_chunk's answer over the staged chunk [begin, end) (`stage[i]` is entry begin + i), found by the
/// team with `segment_sums [segments]` and `segment_marks [3 x segments]` of scratch. walk_chunk adds the
/// positive entries one after another in double and stops at the first running total above
/// `target`: a chain of up to 1024 dependent additions. Here each of `segments` segments is summed,
/// each segment's thread starts from the sum of the segments before it and walks its entries. Those
/// running totals are walk_chunk's up to rounding: both add at most 1024 + 64 non-negative terms to
/// `before`, so each errs by under 2^-42 of before + chunk mass, and `slack` (2^-40 of that plus the
/// target) covers both. An entry whose total clears target + slack surely crosses, one below
/// target - slack surely does not; when the first entry that may cross is also the first that surely
/// does (or none may), that is walk_chunk's answer. Otherwise (a running total within ~1e-12 of the
/// target) walk_chunk itself decides.
template <index_t segments, class Team>
SPECDEC_HOST_DEVICE std::int32_t walk_staged_chunk(Team& team, const float* stage, double* segment_sums,
                                                 std::int64_t* segment_marks, index_t begin, index_t end, double before,
                                                 double chunk_mass, double target) {
  constexpr index_t length = specdec::detail::sample_chunk / segments;
  const index_t n = end - begin;
  const double slack = (before + chunk_mass + target) * 0x1p-40;
  for (index_t g = team.rank(); g < segments; g += team.size()) {
    double sum = 0.0;
    for (index_t i = g * length; i < (g + 1) * length && i < n; ++i) {
      const double v = static_cast<double>(stage[i]);
      if (v > 0.0) sum += v;
    }
    segment_sums[g] = sum;
  }
  team.sync();
  for (index_t g = team.rank(); g < segments; g += team.size()) {
    double running = before;
    for (index_t h = 0; h < g; ++h) running += segment_sums[h];
    std::int64_t maybe = -1, sure = -1, last = -1;
    for (index_t i = g * length; i < (g + 1) * length && i < n; ++i) {
      const double v = static_cast<double>(stage[i]);
      if (!(v > 0.0)) continue;
      running += v;
      last = i;
      if (maybe < 0 && running > target - slack) maybe = i;
      if (sure < 0 && running > target + slack) sure = i;
    }
    segment_marks[g] = maybe;
    segment_marks[segments + g] = sure;
    segment_marks[2 * segments + g] = last;
  }
  team.sync();
  std::int64_t maybe = -1, sure = -1, last = -1;
  for (index_t g = 0; g < segments; ++g) {  // segments in index order: the first marks are the row's first
    if (maybe < 0) maybe = segment_marks[g];
    if (sure < 0) sure = segment_marks[segments + g];
    if (segment_marks[2 * segments + g] >= 0) last = segment_marks[2 * segments + g];
  }
  if (maybe < 0) return static_cast<std::int32_t>(begin + (last < 0 ? 0 : last));
  if (maybe == sure) return static_cast<std::int32_t>(begin + sure);
  return specdec::detail::walk_chunk(staged_source{stage, begin}, begin, end, before, target);
}

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
