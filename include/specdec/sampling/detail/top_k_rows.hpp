// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief FlashInfer's top-k filters as a team job (backend/detail/team.hpp), one team per row:
/// `top_k_renorm_probs` (keep the k largest probabilities, ties with the k-th kept, renormalise) and
/// `top_k_mask_logits` (every logit below the k-th largest to -inf). The host forms in
/// sampling/distribution.hpp run the same job on one thread, so a CUDA block and the host give the same
/// bits.
///
/// The k-th largest value is found exactly by a radix select over the floats' order-preserving 32-bit
/// keys, 4 bits per pass (8 passes over the row, each counting the entries under the prefix found so
/// far into 16 digit buckets): integer counts, so no order of summation can change it. The
/// renormalisation's sum is taken in the canonical order (per (1024-entry chunk, lane) item in index
/// order, lanes combined per chunk, chunks in order), as the samplers' masses are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

using specdec::detail::make_team_fault;
using specdec::detail::team_error;
using specdec::detail::team_fault;

/// A key whose unsigned order is the floats' order (-0 just below +0; NaN is never keyed).
SPECDEC_HOST_DEVICE inline std::uint32_t order_key(float x) noexcept {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

/// The float of an order_key.
SPECDEC_HOST_DEVICE inline float from_order_key(std::uint32_t key) noexcept {
  const std::uint32_t b = (key & 0x80000000u) != 0 ? (key & 0x7FFFFFFFu) : ~key;
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

/// Row sums the renormalisers accept. They rescale their output, so the input's mass matters only as
/// far as it moves the top-p cut; 1e-3 admits rows rounded for display (FlashInfer's own docstring
/// examples, 4 decimals, sum to 1 +- 2.5e-4) and rejects rows that are not distributions at all.
inline constexpr double renorm_sum_tolerance = 1e-3;

/// Argument indices of top_k_rows_job's fault names.
enum top_k_arg : int { top_k_arg_rows, top_k_arg_k };

/// One row per team: checks the row, finds its k-th largest entry, and writes the filtered row.
template <class Space>
struct top_k_rows_job {
  matrix_view<const float, Space> in;
  matrix_view<float, Space> out;                  // may be `in` itself: each entry is written last, by its reader
  vector_view<const std::int64_t, Space> top_k;  // one entry, or one per row
  bool renormalise;                               // probabilities (renormalised) or logits (masked)
  const char* where;
  const char* names[specdec::detail::team_job_names];

  static constexpr index_t lanes = 8;    ///< items per chunk (the canonical lanes)
  static constexpr index_t digits = 16;  ///< buckets of a radix pass (4 bits)

  SPECDEC_HOST_DEVICE index_t vocab() const noexcept { return in.cols(); }
  SPECDEC_HOST_DEVICE index_t chunks() const noexcept {
    return (in.cols() + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  }
  SPECDEC_HOST_DEVICE index_t row_pass_items() const noexcept { return chunks() * lanes; }

  /// Scratch: per item a double sum, a first bad column and 16 digit counts; 16 bucket totals.
  struct layout {
    double* sums;
    std::int64_t* bad;
    std::int32_t* counts;
    std::int64_t* totals;
  };
  SPECDEC_HOST_DEVICE layout carve(std::byte* base) const {
    const auto items = static_cast<std::size_t>(row_pass_items());
    layout l;
    l.sums = reinterpret_cast<double*>(base);
    l.bad = reinterpret_cast<std::int64_t*>(base + items * sizeof(double));
    l.totals = reinterpret_cast<std::int64_t*>(base + items * (sizeof(double) + sizeof(std::int64_t)));
    l.counts = reinterpret_cast<std::int32_t*>(base + items * (sizeof(double) + sizeof(std::int64_t)) + digits * sizeof(std::int64_t));
    return l;
  }
  std::size_t scratch_bytes() const {
    const auto items = static_cast<std::size_t>(row_pass_items());
    return items * (sizeof(double) + sizeof(std::int64_t) + digits * sizeof(std::int32_t)) + digits * sizeof(std::int64_t);
  }

  /// The canonical sum of `keep(x) ? x : 0` over row x (and, with `check`, the first entry that is bad
  /// for this job: outside [0, 1] for probabilities, NaN or +inf for logits).
  struct weighed {
    double total;
    std::int64_t first_bad;
  };
  template <class Team, class Keep>
  SPECDEC_HOST_DEVICE weighed weigh(Team& team, const layout& l, const float* x, const Keep& keep) const {
    const index_t n = vocab(), items = row_pass_items();
    team.sync();  // earlier readers of the scratch are done
    for (index_t item = team.rank(); item < items; item += team.size()) {
      const index_t begin = (item / lanes) * specdec::detail::sample_chunk;
      const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
      double sum = 0.0;
      std::int64_t first = -1;
      for (index_t j = begin + item % lanes; j < end; j += lanes) {
        const float v = x[j];
        const bool bad = renormalise ? !(v >= 0.0f && v <= 1.0f) : !(v < -specdec::detail::negative_infinity<float>());
        if (bad) {
          if (first < 0) first = j;
          continue;
        }
        if (renormalise && keep(v)) sum += static_cast<double>(v);
      }
      l.sums[item] = sum;
      l.bad[item] = first;
    }
    team.sync();
    weighed w{0.0, -1};
    for (index_t c = 0; c < chunks(); ++c) {
      double lane[lanes];
      for (index_t k = 0; k < lanes; ++k) {
        lane[k] = l.sums[c * lanes + k];
        const std::int64_t f = l.bad[c * lanes + k];
        if (f >= 0 && (w.first_bad < 0 || f < w.first_bad)) w.first_bad = f;
      }
      w.total += specdec::detail::combine_lanes(lane);
    }
    return w;
  }

  /// The k-th largest entry of row x (ties counted), exactly: a radix select over order_key.
  template <class Team>
  SPECDEC_HOST_DEVICE float kth_largest(Team& team, const layout& l, const float* x, std::int64_t k) const {
    const index_t n = vocab(), items = row_pass_items();
    std::uint32_t prefix = 0;  // the key's digits found so far
    std::int64_t above = 0;    // entries whose key is above every key with that prefix
    for (int shift = 28; shift >= 0; shift -= 4) {
      team.sync();  // earlier readers of the counts are done
      for (index_t item = team.rank(); item < items; item += team.size()) {
        const index_t begin = (item / lanes) * specdec::detail::sample_chunk;
        const index_t end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
        std::int32_t* count = l.counts + item * digits;
        for (index_t d = 0; d < digits; ++d) count[d] = 0;
        for (index_t j = begin + item % lanes; j < end; j += lanes) {
          const std::uint32_t key = order_key(x[j]);
          if (shift == 28 || (key >> (shift + 4)) == prefix) ++count[(key >> shift) & 15u];
        }
      }
      team.sync();
      for (index_t d = team.rank(); d < digits; d += team.size()) {
        std::int64_t total = 0;
        for (index_t item = 0; item < items; ++item) total += l.counts[item * digits + d];
        l.totals[d] = total;
      }
      team.sync();
      // The largest digit whose bucket, with everything above it, holds at least k entries.
      std::uint32_t digit = 0;
      for (int d = digits - 1; d >= 0; --d) {
        if (above + l.totals[d] >= k) {
          digit = static_cast<std::uint32_t>(d);
          break;
        }
        above += l.totals[d];
      }
      prefix = (prefix << 4) | digit;
    }
    return from_order_key(prefix);
  }

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const layout l = carve(scratch);
    const index_t n = vocab();
    const std::int64_t k = top_k(top_k.rows() == 1 ? 0 : r);
    if (k < 1 || k > n) return make_team_fault(team_error::top_k_value, top_k_arg_k, r, 0, static_cast<double>(n), k);
    const float* x = in.row(r);
    const weighed checked = weigh(team, l, x, [](float) { return true; });
    if (checked.first_bad >= 0) {
      const float v = x[checked.first_bad];
      return make_team_fault(renormalise ? team_error::distribution_entry : team_error::logit_value, top_k_arg_rows, r,
                             checked.first_bad, v);
    }
    const double error = checked.total - 1.0;
    if (renormalise && !(error <= renorm_sum_tolerance && error >= -renorm_sum_tolerance))
      return make_team_fault(team_error::renorm_sum, top_k_arg_rows, r, 0, checked.total);
    const float kth = kth_largest(team, l, x, k);
    float* y = out.row(r);
    if (!renormalise) {
      team.sync();  // every thread is past its reads of the row
      for (index_t j = team.rank(); j < n; j += team.size()) {
        const float v = x[j];
        y[j] = v < kth ? specdec::detail::negative_infinity<float>() : v;
      }
      return {};
    }
    const double kept = weigh(team, l, x, [kth](float v) { return v >= kth; }).total;
    // Each entry below is read and written by one thread (in place included), after every read of the
    // passes above.
    for (index_t j = team.rank(); j < n; j += team.size()) {
      const float v = x[j];
      y[j] = v >= kth ? static_cast<float>(static_cast<double>(v) / kept) : 0.0f;
    }
    return {};
  }
};

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
