// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief vLLM's exponential race over a noise row that is never written: the Philox uniforms are drawn
/// where the race reads them and the exponentials computed only for the entries that could win.
///
/// The race picks argmax_j float(r[j] / e[j]) (lowest index on ties; token 0 when every score is NaN),
/// e[j] = float(-log1p(-u[j])) with u[j] = rng.uniform_double(offset + j): the row that
/// `sampling::philox_exponentials(rng, offset, ...)` fills. Every e[j] >= u[j] (1 - 2^-23):
/// -log1p(-u) >= u, the C library's log1p is within an ulp of it, and rounding to float loses at most
/// 2^-24. So an entry with r[j] < best u[j] (1 - 2^-20), best the largest score so far, scores below
/// best even after rounding and cannot win (a later entry wins only with a strictly larger score): its
/// logarithm is never taken. Past the first few entries almost every entry is settled by that one
/// comparison; the uniforms cost ~1.2 ns per entry, where drawing and storing the whole noise row cost
/// ~2.6 ns and the race then read it again.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <specdec/backend/detail/philox_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

/// The race described above over entries [0, n): `residual(j0, len, r)` writes the len residual entries
/// from j0 into r (floats >= 0; NaN and negative entries are raced as they are, never skipped wrongly).
template <class Residual>
inline std::int32_t philox_race(index_t n, const philox_stream& rng, std::uint64_t offset, const Residual& residual) {
  constexpr index_t span = 1024;
  double u[span];
  float r[span];
  float best_score = -1.0f;
  index_t best = 0;
  for (index_t j0 = 0; j0 < n; j0 += span) {
    const index_t len = std::min(span, n - j0);
    specdec::detail::philox_fill_uniforms(rng, offset + static_cast<std::uint64_t>(j0), u, static_cast<std::uint64_t>(len));
    residual(j0, len, r);
    for (index_t i = 0; i < len; ++i) {
      const double bound = static_cast<double>(best_score) * (1.0 - 0x1p-20);
      // Eight entries at a time: settled when each is below the bound (the compare is all most cost).
      if (best_score > 0.0f && i + 8 <= len) {
        bool settled = true;
        SPECDEC_UNROLL
        for (int l = 0; l < 8; ++l) settled &= static_cast<double>(r[i + l]) < bound * u[i + l];
        if (settled) {
          i += 7;
          continue;
        }
      }
      const float ri = r[i];
      if (best_score > 0.0f && static_cast<double>(ri) < bound * u[i]) continue;
      if (ri == 0.0f) {  // scores +-0 (NaN where u = 0): wins only over no score at all
        if (best_score < 0.0f && u[i] != 0.0) {
          best_score = 0.0f;
          best = j0 + i;
        }
        continue;
      }
      const float e = static_cast<float>(-std::log1p(-u[i]));
      const float score = ri / e;
      if (score > best_score) {
        best_score = score;
        best = j0 + i;
      }
    }
  }
  return static_cast<std::int32_t>(best);
}

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
