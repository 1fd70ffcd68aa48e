// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief FlashInfer's row filters as a team job (backend/detail/team.hpp), one team per row:
/// `top_k_renorm_probs` (keep the k largest probabilities, ties with the k-th kept, renormalise),
/// `top_p_renorm_probs` (keep a probability iff the mass strictly above it is below p, renormalise),
/// their `"joint"` order (both judged on the row as given) and `top_k_mask_logits` (every logit below the
/// k-th largest to -inf). The host forms in sampling/distribution.hpp run the same job on one thread,
/// so a CUDA block and the host give the same bits.
///
/// The k-th largest value is found exactly by a radix select over the floats' order-preserving 32-bit
/// keys, 4 bits per pass (8 passes over the row, each counting the entries under the prefix found so
/// far into 16 digit buckets): integer counts, so no order of summation can change it. The top-p cut is
/// the smallest key K whose mass above, M(K) = the sum of the entries with a larger key, is below p: the
/// same 8-pass search, each pass weighing M at the 15 digit boundaries of the prefix. Every mass (the
/// M(K), the row check, the renormalising sum) is a double sum in the canonical order (per (1024-entry
/// chunk, lane) item in index order, lanes combined per chunk, chunks in order), as the samplers'
/// masses are; M is then monotone in K (rounding is monotone and the entries are >= 0), so the kept set
/// is exactly {x : M(key(x)) < p}.
///
/// Those definitions are the job's output. On the host's one-thread team (`serial_team` over host memory)
/// the row goes to `host_row`, which reaches the same k-th largest entry and cut through vector passes
/// (filter_host.hpp says how, and why the bits cannot differ); other teams (CUDA blocks, the tests'
/// 4-thread host teams) search as above.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/backend/detail/sample_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>
#include <specdec/core/memory_space.hpp>
#include <specdec/core/view.hpp>
#include <specdec/sampling/detail/faults.hpp>
#include <specdec/sampling/detail/filter_host.hpp>
#include <specdec/sampling/detail/filter_top_p.hpp>

namespace specdec::sampling::detail::inline SPECDEC_ISA {

using specdec::detail::make_team_fault;
using specdec::detail::sampling_fault;
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

/// Rows of a 16-bit type also carry their rounding (a bf16 softmax row with one token at 0.9 sums to
/// 1 +- 1.8e-3): the tolerance of n-entry rows adds it (core/half.hpp's rounding_tolerance).
template <class E>
SPECDEC_HOST_DEVICE constexpr double renorm_tolerance(index_t n) noexcept {
  return renorm_sum_tolerance + rounding_tolerance<E>(n);
}

/// Argument indices of filter_rows_job's fault names.
enum filter_arg : int { filter_arg_rows, filter_arg_k, filter_arg_p };

/// One row per team: checks the row, finds its k-th largest entry and / or its top-p cut, and writes the
/// filtered row. Rows of element type E (float, specdec::bfloat16 or specdec::float16): every decision is
/// made on the widened values (so a 16-bit row is filtered as the float row of the same values), and the
/// output is written in E (a renormalised entry rounded once to float, then to E).
template <class Space, class E = float>
struct filter_rows_job {
  matrix_view<const E, Space> in;
  matrix_view<E, Space> out;                      // may be `in` itself: each entry is written last, by its reader
  vector_view<const std::int64_t, Space> top_k;  // one entry, one per row, or empty: no top-k
  vector_view<const float, Space> top_p;          // one entry, one per row, or empty: no top-p
  bool renormalise;                               // probabilities (renormalised) or logits (masked; top-k only)
  const char* where;
  const char* names[specdec::detail::team_job_names];
  static void describe(const char* where, const char* name, const specdec::detail::team_fault& f) {
    specdec::detail::describe_sampling_fault(where, name, f);
  }

  static constexpr index_t lanes = 8;    ///< items per chunk (the canonical lanes)
  static constexpr index_t digits = 16;  ///< buckets of a radix pass (4 bits)

  SPECDEC_HOST_DEVICE index_t vocab() const noexcept { return in.cols(); }
  SPECDEC_HOST_DEVICE index_t chunks() const noexcept {
    return (in.cols() + specdec::detail::sample_chunk - 1) / specdec::detail::sample_chunk;
  }
  SPECDEC_HOST_DEVICE index_t row_pass_items() const noexcept { return chunks() * lanes; }

  /// Scratch: per item a double sum, a first bad column, 16 digit counts and 15 boundary masses; the
  /// 16 bucket totals and 15 boundary masses of a pass.
  struct layout {
    double* sums;
    std::int64_t* bad;
    std::int64_t* totals;
    double* masses;
    std::int32_t* counts;
    double* item_masses;
  };
  SPECDEC_HOST_DEVICE layout carve(std::byte* base) const {
    const auto items = static_cast<std::size_t>(row_pass_items());
    layout l;
    l.sums = reinterpret_cast<double*>(base);
    base += items * sizeof(double);
    l.bad = reinterpret_cast<std::int64_t*>(base);
    base += items * sizeof(std::int64_t);
    l.totals = reinterpret_cast<std::int64_t*>(base);
    base += digits * sizeof(std::int64_t);
    l.masses = reinterpret_cast<double*>(base);
    base += digits * sizeof(double);
    l.item_masses = reinterpret_cast<double*>(base);
    base += items * (digits - 1) * sizeof(double);
    l.counts = reinterpret_cast<std::int32_t*>(base);
    return l;
  }
  std::size_t scratch_bytes() const {
    const auto items = static_cast<std::size_t>(row_pass_items());
    const std::size_t radix = items * (sizeof(double) + sizeof(std::int64_t) + (digits - 1) * sizeof(double) + digits * sizeof(std::int32_t)) +
                              digits * (sizeof(std::int64_t) + sizeof(double));
#if SPECDEC_FILTER_HOST_PASSES
    if constexpr (std::is_same_v<Space, host_space>) return std::max(radix, filter_passes::scratch_bytes(vocab()));
#endif
    return radix;
  }

  /// The item's entries: [begin, end) with stride `lanes`, from begin + item % lanes.
  SPECDEC_HOST_DEVICE void item_range(index_t item, index_t& first, index_t& end) const {
    const index_t n = vocab();
    const index_t begin = (item / lanes) * specdec::detail::sample_chunk;
    end = begin + specdec::detail::sample_chunk < n ? begin + specdec::detail::sample_chunk : n;
    first = begin + item % lanes;
  }

  /// The canonical double sum of the per-item values `at(item)` (8 lanes per chunk, chunks in order).
  template <class At>
  SPECDEC_HOST_DEVICE double canonical_total(const At& at) const {
    double total = 0.0;
    for (index_t c = 0; c < chunks(); ++c) {
      double lane[lanes];
      for (index_t k = 0; k < lanes; ++k) lane[k] = at(c * lanes + k);
      total += specdec::detail::combine_lanes(lane);
    }
    return total;
  }

  /// The canonical sum of `keep(x) ? x : 0` over row x, and the first entry that is bad for this job
  /// (outside [0, 1] for probabilities, NaN or +inf for logits).
  struct weighed {
    double total;
    std::int64_t first_bad;
  };
  template <class Team, class Keep>
  SPECDEC_HOST_DEVICE weighed weigh(Team& team, const layout& l, const E* x, const Keep& keep) const {
    const index_t items = row_pass_items();
    team.sync();  // earlier readers of the scratch are done
    for (index_t item = team.rank(); item < items; item += team.size()) {
      index_t j, end;
      item_range(item, j, end);
      double sum = 0.0;
      std::int64_t first = -1;
      for (; j < end; j += lanes) {
        const float v = widen(x[j]);
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
    weighed w{canonical_total([&](index_t item) { return l.sums[item]; }), -1};
    for (index_t item = 0; item < items; ++item)
      if (l.bad[item] >= 0 && (w.first_bad < 0 || l.bad[item] < w.first_bad)) w.first_bad = l.bad[item];
    return w;
  }

  /// The k-th largest entry of row x (ties counted), exactly: a radix select over order_key.
  template <class Team>
  SPECDEC_HOST_DEVICE float kth_largest(Team& team, const layout& l, const E* x, std::int64_t k) const {
    const index_t items = row_pass_items();
    std::uint32_t prefix = 0;  // the key's digits found so far
    std::int64_t above = 0;    // entries whose key is above every key with that prefix
    for (int shift = 28; shift >= 0; shift -= 4) {
      team.sync();  // earlier readers of the counts are done
      for (index_t item = team.rank(); item < items; item += team.size()) {
        index_t j, end;
        item_range(item, j, end);
        std::int32_t* count = l.counts + item * digits;
        for (index_t d = 0; d < digits; ++d) count[d] = 0;
        for (; j < end; j += lanes) {
          const std::uint32_t key = order_key(widen(x[j]));
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

  /// The top-p cut of row x: the smallest key K with M(K) < p, M(K) the canonical mass of the entries
  /// whose key is larger. Each pass weighs M at the largest key of each of the prefix's first 15 digit
  /// ranges (the 16th range's largest is the whole range's, where M < p holds already).
  template <class Team>
  SPECDEC_HOST_DEVICE std::uint32_t top_p_cut(Team& team, const layout& l, const E* x, float p) const {
    const index_t items = row_pass_items();
    constexpr index_t boundaries = digits - 1;
    std::uint32_t prefix = 0;
    for (int shift = 28; shift >= 0; shift -= 4) {
      team.sync();  // earlier readers of the masses are done
      for (index_t item = team.rank(); item < items; item += team.size()) {
        index_t j, end;
        item_range(item, j, end);
        double mass[boundaries];
        for (index_t d = 0; d < boundaries; ++d) mass[d] = 0.0;
        for (; j < end; j += lanes) {
          const float v = widen(x[j]);
          const std::uint32_t key = order_key(v);
          // Entry v is above boundary d (the largest key with the prefix and digit d) for d < c.
          index_t c = 0;
          if (shift == 28) {
            c = static_cast<index_t>(key >> 28);
          } else {
            const std::uint32_t high = key >> (shift + 4);
            c = high > prefix ? boundaries : high < prefix ? 0 : static_cast<index_t>((key >> shift) & 15u);
          }
          for (index_t d = 0; d < c; ++d) mass[d] += static_cast<double>(v);
        }
        for (index_t d = 0; d < boundaries; ++d) l.item_masses[item * boundaries + d] = mass[d];
      }
      team.sync();
      for (index_t d = team.rank(); d < boundaries; d += team.size())
        l.masses[d] = canonical_total([&](index_t item) { return l.item_masses[item * boundaries + d]; });
      team.sync();
      std::uint32_t digit = boundaries;  // the smallest digit whose range's largest key has M < p
      for (index_t d = 0; d < boundaries; ++d)
        if (l.masses[d] < static_cast<double>(p)) {
          digit = static_cast<std::uint32_t>(d);
          break;
        }
      prefix = (prefix << 4) | digit;
    }
    return prefix;
  }

#if SPECDEC_FILTER_HOST_PASSES
  /// Row r on the host's one-thread team: filter_host.hpp's vector passes, this job's bits (k and p
  /// checked). A top-p cut they cannot settle is searched as the device searches it.
  team_fault host_row(const specdec::detail::serial_team& team, index_t r, std::int64_t k, float p, std::byte* scratch) const {
    const index_t n = vocab();
    const E* x = in.row(r);
    float* maxima = reinterpret_cast<float*>(scratch);
    float* buffer = maxima + specdec::detail::maxima_blocks(n) + filter_passes::maxima_padding;
    const bool cuts_k = k < n;
    // A row cut at its k-th largest alone needs its total only to be accepted: the quick pass
    // approximates it, and the canonical total is taken only where the approximation cannot decide.
    const bool quick = cuts_k && top_p.empty();
    filter_passes::row_check checked;
    double total_error = 0.0;
    if (quick) {
      const auto q = renormalise ? filter_passes::check_row_quick<true>(x, n, maxima) : filter_passes::check_row_quick<false>(x, n, maxima);
      checked = q.check;
      total_error = q.total_error;
    } else {
      checked = !renormalise    ? filter_passes::check_row<false>(x, n, maxima)
                : top_p.empty() ? filter_passes::check_row<true>(x, n, maxima)
                                : filter_passes::check_row<true, true>(x, n, maxima);
    }
    if (checked.bad) {
      const index_t j = renormalise ? filter_passes::first_bad<true>(x, n) : filter_passes::first_bad<false>(x, n);
      return make_team_fault(renormalise ? sampling_fault::distribution_entry : sampling_fault::logit_value, filter_arg_rows, r, j,
                             widen(x[j]));
    }
    const double tolerance = renorm_tolerance<E>(n);
    if (renormalise && !(std::abs(checked.total - 1.0) + total_error <= tolerance)) {
      if (total_error > 0.0) checked.total = filter_passes::check_row<true>(x, n, nullptr).total;
      const double error = checked.total - 1.0;
      if (!(error <= tolerance && error >= -tolerance))
        return make_team_fault(sampling_fault::renorm_sum, filter_arg_rows, r, rounding_bits<E>, checked.total);
    }
    // Every kept entry is >= tau (filter_host.hpp: the kept set is one threshold's).
    float tau = cuts_k ? filter_passes::kth_largest(x, n, static_cast<index_t>(k), checked.max, maxima, buffer)
                       : specdec::detail::negative_infinity<float>();
    double mass = checked.total;  // of the entries >= tau, once tau is final
    bool weighed_tau = !cuts_k;
    if (!top_p.empty()) {
      filter_passes::cut_value cut = filter_passes::top_p_cut(x, n, p, checked, maxima, buffer);
      if (!cut.found) {
        const std::uint32_t key = top_p_cut(team, carve(scratch), x, p);
        cut.d = key == 0 ? specdec::detail::negative_infinity<float>() : from_order_key(key);
        cut.kept_mass = key == 0 ? checked.total : filter_passes::canonical_masses(x, n, cut.d, maxima).at_or_above;
      }
      if (cut.d >= tau) {
        tau = cut.d;
        mass = cut.kept_mass;
        weighed_tau = true;
      }
    }
    E* y = out.row(r);
    const bool stream = static_cast<std::size_t>(out.rows()) * static_cast<std::size_t>(n) * sizeof(E) >= filter_passes::streaming_bytes;
    if (!renormalise) {
      filter_passes::write_masked(x, n, tau, maxima, y, stream, quick);
      return {};
    }
    if (!weighed_tau) mass = filter_passes::canonical_masses(x, n, tau, maxima).at_or_above;
    filter_passes::write_renormalised(x, n, tau, mass, maxima, y, stream, quick);
    return {};
  }
#endif

  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team& team, index_t r, std::byte* scratch) const {
    const layout l = carve(scratch);
    const index_t n = vocab();
    const std::int64_t k = top_k.empty() ? n : top_k(top_k.rows() == 1 ? 0 : r);
    if (k < 1 || k > n) return make_team_fault(sampling_fault::top_k_value, filter_arg_k, r, 0, static_cast<double>(n), k);
    const float p = top_p.empty() ? 1.0f : top_p(top_p.rows() == 1 ? 0 : r);
    if (!(p > 0.0f && p <= 1.0f)) return make_team_fault(sampling_fault::top_p_value, filter_arg_p, r, 0, static_cast<double>(p));
#if SPECDEC_FILTER_HOST_PASSES
    // (std::remove_const_t: run_serial's team is const; the host forms took the radix search without it.)
    if constexpr (std::is_same_v<Space, host_space> && std::is_same_v<std::remove_const_t<Team>, specdec::detail::serial_team>)
      return host_row(team, r, k, p, scratch);
#endif
    const E* x = in.row(r);
    const weighed checked = weigh(team, l, x, [](float) { return true; });
    if (checked.first_bad >= 0)
      return make_team_fault(renormalise ? sampling_fault::distribution_entry : sampling_fault::logit_value, filter_arg_rows, r,
                             checked.first_bad, widen(x[checked.first_bad]));
    const double error = checked.total - 1.0;
    if (renormalise && !(error <= renorm_tolerance<E>(n) && error >= -renorm_tolerance<E>(n)))
      return make_team_fault(sampling_fault::renorm_sum, filter_arg_rows, r, rounding_bits<E>, checked.total);
    // k = V cuts nothing; without top-p the cut is key 0, below every entry.
    const float kth = k < n ? kth_largest(team, l, x, k) : 0.0f;  // not read when k = V (nothing cut)
    const std::uint32_t cut = top_p.empty() ? 0u : top_p_cut(team, l, x, p);
    const auto kept = [kth, cut, k, n](float v) { return (k == n || v >= kth) && order_key(v) >= cut; };
    E* y = out.row(r);
    if (!renormalise) {
      team.sync();  // every thread is past its reads of the row
      for (index_t j = team.rank(); j < n; j += team.size()) {
        const float v = widen(x[j]);
        y[j] = narrow<E>(kept(v) ? v : specdec::detail::negative_infinity<float>());
      }
      return {};
    }
    const double mass = weigh(team, l, x, kept).total;
    // Each entry below is read and written by one thread (in place included), after every read of the
    // passes above.
    for (index_t j = team.rank(); j < n; j += team.size()) {
      const float v = widen(x[j]);
      y[j] = narrow<E>(kept(v) ? static_cast<float>(static_cast<double>(v) / mass) : 0.0f);
    }
    return {};
  }
};

}  // namespace specdec::sampling::detail::inline SPECDEC_ISA
