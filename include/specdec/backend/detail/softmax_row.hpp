// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The host's softmax of one row: its (max, sum) and its written row. The eigen backend's
/// row_softmax / row_logsumexp / row_softmax_stats and the host sampler from logits
/// (sampling::top_k_top_p_sample with row_input::logits) share it, so a row softened by either is
/// the same bits.
#pragma once

#include <algorithm>

#include <specdec/backend/detail/block_topk.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/config.hpp>
#include <specdec/core/half.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// Chunk length of the host's streaming row kernels: 8 KiB of fp32 stays in L1 for the second look.
inline constexpr index_t host_row_chunk = 2048;

/// Running (max, sum of exp((x - max) / T)) of a row, updated one chunk at a time.
template <class V>
struct online_logsumexp {
  V max;
  V sum;
  V inv_t;
  bool has_nan = false;

  template <class E>
  void add(const E* x, index_t len, V chunk_max, const E* next = nullptr, index_t next_len = 0) {
    if (chunk_max > max) {
      sum *= exp_((max - chunk_max) * inv_t);  // 0 while max is still -inf
      max = chunk_max;
    }
    if (max == negative_infinity<V>() || max == -negative_infinity<V>()) return;
    sum += sum_exp_shifted(x, len, max, inv_t, next, next_len);
  }
  detail::fault fault() const {
    if (has_nan) return detail::fault::nan;
    if (max == -negative_infinity<V>()) return detail::fault::positive_infinity;
    if (max == negative_infinity<V>()) return detail::fault::all_masked;
    return detail::fault::none;
  }
};

/// The (max, sum) of host row `x` `[n]` at 1 / T = `inv_t`, and its fault (NaN, +inf, all -inf).
template <class E, class V = compute_t<E>>
online_logsumexp<V> logsumexp_row(const E* x, index_t n, V inv_t) {
  online_logsumexp<V> acc{negative_infinity<V>(), V(0), inv_t};
#if SPECDEC_HOST_SIMD
  // One read for the maximum and the sum (the fused top-k's pass, without block maxima). A row of
  // one chunk gains nothing from it and keeps the two-step form below, which the Thrust backend's
  // chunks share: such rows soften to the same bits on both backends.
  if constexpr (std::is_same_v<V, float>) {
    if (n > host_row_chunk) {
      const block_sum_exp s = block_maxima_sum_exp(x, n, inv_t, nullptr);
      if (s.done) {
        acc.max = s.scan.max;
        acc.sum = s.sum;
        acc.has_nan = s.scan.has_nan;
        return acc;
      }
    }
  }
#endif
  for (index_t c0 = 0; c0 < n; c0 += host_row_chunk) {
    const index_t len = std::min(host_row_chunk, n - c0);
    const auto s = scan_max(x + c0, len);
    acc.has_nan = acc.has_nan || s.has_nan;
    acc.add(x + c0, len, s.max);
  }
  return acc;
}

/// Host row `x` `[n]` softened at 1 / T = `inv_t` (T > 0) into `y` `[n]`; `next` (the row read next,
/// or null) is prefetched under the exponentials, `streaming` stores past the caches. Returns the
/// row's fault; `y` is written only when there is none.
template <class E, class V = compute_t<E>>
fault softmax_row(const E* x, index_t n, V inv_t, V* y, const E* next, bool streaming) {
  const auto acc = logsumexp_row(x, n, inv_t);
  if (const fault f = acc.fault(); f != fault::none) return f;
  write_exp_shifted(x, n, acc.max, inv_t, V(1) / acc.sum, y, next, n, streaming);
  return fault::none;
}

}  // namespace specdec::detail::inline SPECDEC_ISA
