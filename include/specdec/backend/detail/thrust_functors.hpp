// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The work items of `specdec::thrust`: one host-device functor per (row, chunk) pass of a
/// primitive, each calling the shared kernels of row_kernels.hpp / dense_kernels.hpp, so every system
/// (and the Eigen backend, which calls the same kernels) computes the same values; plus the storage
/// of a system and the helpers that strip a view's memory-space tag inside device code.
#pragma once

#if defined(__CUDACC__)
#include <thrust/device_ptr.h>
#include <thrust/system/cuda/vector.h>
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

#include <specdec/backend/detail/dense_kernels.hpp>
#include <specdec/backend/detail/math.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/backend/thrust_system.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// Storage of a system: std::vector on the host, thrust::cuda::vector on a CUDA device.
template <class System, class T>
struct system_storage {
  using type = std::vector<T>;
  static T* raw(type& v) { return v.data(); }
};
#if defined(__CUDACC__)
template <class T>
struct system_storage<thrust_system::cuda, T> {
  using type = ::thrust::cuda::vector<T>;
  static T* raw(type& v) { return ::thrust::raw_pointer_cast(v.data()); }
};
#endif

/// Work items of a row primitive: item = row * chunks + chunk.
struct row_chunks {
  index_t rows;
  index_t cols;
  index_t chunk;
  SPECDEC_HOST_DEVICE index_t count() const { return (cols + chunk - 1) / chunk; }
  SPECDEC_HOST_DEVICE index_t items() const { return rows * count(); }
  SPECDEC_HOST_DEVICE index_t begin(index_t c) const { return c * chunk; }
  SPECDEC_HOST_DEVICE index_t length(index_t c) const { return cols - c * chunk < chunk ? cols - c * chunk : chunk; }
};

// --- argmax / max ----------------------------------------------------------------------------------
/// T: the compute type; E: the rows' element type (T, or a 16-bit type read through widen).
template <class T, class E = T>
struct argmax_partial_fn {
  matrix_view<const E, host_space> x;  // the space tag is irrelevant inside kernels: only pointers are used
  row_chunks rc;
  argmax_result<T>* partial;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    argmax_result<T> a = argmax_row(x.row(r) + rc.begin(c), rc.length(c));
    a.index += rc.begin(c);
    partial[item] = a;
  }
};

template <class T>
struct argmax_combine_fn {
  row_chunks rc;
  const argmax_result<T>* partial;
  std::int32_t* index;  // may be null
  T* value;             // may be null
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    argmax_result<T> best{negative_infinity<T>(), 0, fault::none};
    for (index_t c = 0; c < rc.count(); ++c) {
      const argmax_result<T>& a = partial[r * rc.count() + c];
      if (a.error == fault::nan) best.error = fault::nan;
      if (a.value > best.value) {
        best.value = a.value;
        best.index = a.index;
      }
    }
    if (best.error == fault::none && best.value == -negative_infinity<T>()) best.error = fault::positive_infinity;
    faults[r] = best.error;
    if (index != nullptr) index[r] = static_cast<std::int32_t>(best.index);
    if (value != nullptr) value[r] = best.value;
  }
};

// --- log-sum-exp -----------------------------------------------------------------------------------
/// A chunk's (max, sum exp((x - max) / T), NaN seen).
template <class T>
struct lse_partial {
  T max;
  T sum;
  bool has_nan;
};

template <class E, class T>
SPECDEC_HOST_DEVICE inline lse_partial<T> chunk_logsumexp(const E* x, index_t n, T inv_t) {
  const max_scan<T> s = scan_max(x, n);
  lse_partial<T> p{s.max, T(0), s.has_nan};
  if (s.max != negative_infinity<T>() && s.max != -negative_infinity<T>() && !s.has_nan)
    p.sum = sum_exp_shifted(x, n, s.max, inv_t);
  return p;
}

/// Combines a row's chunk partials into (max, sum) and the row's fault.
template <class T>
SPECDEC_HOST_DEVICE inline lse_partial<T> combine_logsumexp(const lse_partial<T>* p, index_t count, T inv_t,
                                                            fault& f) {
  lse_partial<T> total{negative_infinity<T>(), T(0), false};
  for (index_t c = 0; c < count; ++c) {
    total.has_nan = total.has_nan || p[c].has_nan;
    total.max = total.max < p[c].max ? p[c].max : total.max;
  }
  f = total.has_nan                                ? fault::nan
      : total.max == -negative_infinity<T>()       ? fault::positive_infinity
      : total.max == negative_infinity<T>()        ? fault::all_masked
                                                   : fault::none;
  if (f != fault::none) return total;
  for (index_t c = 0; c < count; ++c)
    if (p[c].max != negative_infinity<T>()) total.sum += p[c].sum * exp_((p[c].max - total.max) * inv_t);
  return total;
}

template <class T, class E = T>
struct lse_partial_fn {
  matrix_view<const E, host_space> x;
  row_chunks rc;
  T inv_t;
  lse_partial<T>* partial;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    partial[item] = chunk_logsumexp(x.row(r) + rc.begin(c), rc.length(c), inv_t);
  }
};

template <class T>
struct lse_combine_fn {
  row_chunks rc;
  const lse_partial<T>* partial;
  T inv_t;
  lse_partial<T>* row_stats;  // per row (max, sum)
  T* lse;                     // may be null
  bool masked_rows_allowed;   // log-sum-exp of an all -inf row is -inf; softmax of it is an error
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    fault f = fault::none;
    const lse_partial<T> t = combine_logsumexp(partial + r * rc.count(), rc.count(), inv_t, f);
    if (f == fault::all_masked && masked_rows_allowed) f = fault::none;
    faults[r] = f;
    if (row_stats != nullptr) row_stats[r] = t;
    if (lse != nullptr) lse[r] = t.max == negative_infinity<T>() ? t.max : t.max * inv_t + log_(t.sum);
  }
};

template <class T, bool Log, class E = T>
struct normalise_fn {
  matrix_view<const E, host_space> x;
  matrix_view<T, host_space> out;
  row_chunks rc;
  T inv_t;
  const lse_partial<T>* row_stats;
  bool streaming = false;  // non-temporal stores (host, outputs larger than the caches)
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    const E* in = x.row(r) + rc.begin(c);
    T* y = out.row(r) + rc.begin(c);
    const lse_partial<T> s = row_stats[r];
    if constexpr (Log) {
      write_log_shifted(in, rc.length(c), s.max, inv_t, log_(s.sum), y, streaming);
    } else {
      write_exp_shifted(in, rc.length(c), s.max, inv_t, T(1) / s.sum, y);
    }
  }
};

template <class T, bool Log>
struct one_hot_fn {
  matrix_view<T, host_space> out;
  row_chunks rc;
  const std::int32_t* argmax;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    T* y = out.row(r);
    for (index_t j = rc.begin(c); j < rc.begin(c) + rc.length(c); ++j)
      y[j] = j == argmax[r] ? (Log ? T(0) : T(1)) : (Log ? negative_infinity<T>() : T(0));
  }
};

// --- top-k -----------------------------------------------------------------------------------------
/// Orders column ids of one row by (value descending, index ascending).
template <class E>
struct ranks_before_in_row {
  const E* row;
  SPECDEC_HOST_DEVICE bool operator()(std::int32_t a, std::int32_t b) const {
    return ranks_before(widen(row[a]), a, widen(row[b]), b);
  }
};

/// Each chunk leaves its best min(k, chunk length) entries, sorted, in a slot of `slot` entries, and
/// its (max, NaN seen[, sum of exp]) in `stats`.
template <class T, class E = T>
struct topk_partial_fn {
  matrix_view<const E, host_space> x;
  row_chunks rc;
  index_t k;
  index_t slot;
  index_t small_k;
  T inv_t;  // for the fused log-sum-exp partial; 0 when not wanted
  T* values;
  std::int32_t* indices;
  lse_partial<T>* stats;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    const E* in = x.row(r) + rc.begin(c);
    const index_t len = rc.length(c);
    T* vals = values + item * slot;
    std::int32_t* ids = indices + item * slot;
    const index_t kc = k < len ? k : len;
    max_scan<T> s{negative_infinity<T>(), false};
    if (k <= small_k) {
      topk_accumulator<T> acc{vals, ids, kc, 0};
      s = topk_scan(in, len, rc.begin(c), acc);
    } else {
      s = scan_max(in, len);
      for (index_t j = 0; j < len; ++j) ids[j] = static_cast<std::int32_t>(rc.begin(c) + j);
      const E* row = x.row(r);
      heap_sort(ids, len, ranks_before_in_row<E>{row});
      for (index_t j = 0; j < kc; ++j) vals[j] = widen(row[ids[j]]);
    }
    lse_partial<T> p{s.max, T(0), s.has_nan};
    if (inv_t != T(0) && s.max != negative_infinity<T>() && s.max != -negative_infinity<T>() && !s.has_nan)
      p.sum = sum_exp_shifted(in, len, s.max, inv_t);
    stats[item] = p;
  }
};

/// Merges the sorted chunk lists of a row (k-way, by the global order) into the row's top-k.
template <class T>
struct topk_merge_fn {
  row_chunks rc;
  index_t k;
  index_t slot;
  const T* values;
  const std::int32_t* indices;
  const lse_partial<T>* stats;  // per chunk: max, NaN seen, and (fused) sum of exp
  T inv_t;                      // 0 unless fused
  index_t* heads;  // scratch: one cursor per (row, chunk)
  matrix_view<T, host_space> out_values;
  matrix_view<std::int32_t, host_space> out_indices;
  T* out_lse;
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    const index_t chunks = rc.count();
    index_t* head = heads + r * chunks;
    const bool fused = inv_t != T(0);
    fault f = fault::none;
    const lse_partial<T> row = combine_logsumexp(stats + r * chunks, chunks, fused ? inv_t : T(1), f);
    if (f == fault::all_masked && !fused) f = fault::none;  // top-k of an all -inf row is well defined
    faults[r] = f;
    if (f != fault::none) return;
    for (index_t c = 0; c < chunks; ++c) head[c] = 0;
    for (index_t i = 0; i < k; ++i) {
      index_t best = -1;
      T best_value = T(0);
      std::int32_t best_index = 0;
      for (index_t c = 0; c < chunks; ++c) {
        const index_t kc = k < rc.length(c) ? k : rc.length(c);
        if (head[c] >= kc) continue;
        const index_t at = (r * chunks + c) * slot + head[c];
        if (best < 0 || ranks_before(values[at], indices[at], best_value, best_index)) {
          best = c;
          best_value = values[at];
          best_index = indices[at];
        }
      }
      ++head[best];
      out_indices(r, i) = best_index;
      out_values(r, i) = fused ? (best_value - row.max) * inv_t - log_(row.sum) : best_value;
    }
    if (out_lse != nullptr) out_lse[r] = row.max * inv_t + log_(row.sum);
  }
};

// --- sampling --------------------------------------------------------------------------------------
template <class T>
struct mass_partial_fn {
  matrix_view<const T, host_space> p;
  row_chunks rc;
  chunk_mass* partial;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    partial[item] = probability_chunk_mass(p.row(r) + rc.begin(c), rc.length(c));
  }
};

template <class T>
struct sample_fn {
  matrix_view<const T, host_space> p;
  row_chunks rc;
  const chunk_mass* partial;
  double* masses;  // per (row, chunk)
  const float* uniforms;
  std::int32_t* tokens;
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    const index_t chunks = rc.count();
    const folded_row row = fold_chunks(partial + r * chunks, chunks, masses + r * chunks);
    fault f = row.error(probability_tolerance<T>(rc.cols));
    if (f == fault::none && !is_unit_uniform(uniforms[r])) f = fault::uniform_out_of_range;
    faults[r] = f;
    if (f != fault::none) return;
    tokens[r] = locate_sample(masses + r * chunks, rc.cols, probability_source<T>{p.row(r)},
                              static_cast<double>(uniforms[r]) * row.total);
  }
};

template <class T>
struct residual_partial_fn {
  matrix_view<const T, host_space> p, q;
  row_chunks rc;
  residual_chunk_mass* partial;
  SPECDEC_HOST_DEVICE void operator()(index_t item) const {
    const index_t r = item / rc.count(), c = item % rc.count();
    partial[item] = residual_mass(p.row(r) + rc.begin(c), q.row(r) + rc.begin(c), rc.length(c));
  }
};

template <class T>
struct sample_residual_fn {
  matrix_view<const T, host_space> p, q;
  row_chunks rc;
  const residual_chunk_mass* partial;
  double* masses;  // per row: chunks residual masses, then chunks masses of p
  const float* uniforms;
  std::int32_t* tokens;
  empty_residual fallback;
  fault* faults;  // per row: p's fault, or q's fault + 256 so the host names the right argument
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    const index_t chunks = rc.count();
    double* residual_masses = masses + r * 2 * chunks;
    double* p_masses = residual_masses + chunks;
    const folded_residual_row row = fold_residual_chunks(partial + r * chunks, chunks, residual_masses, p_masses);
    fault f = row.p.error();
    if (f == fault::none && row.q.error() != fault::none)
      f = static_cast<fault>(static_cast<std::int32_t>(row.q.error()) + 256);
    if (f == fault::none && !is_unit_uniform(uniforms[r])) f = fault::uniform_out_of_range;
    faults[r] = f;
    if (f != fault::none) return;
    tokens[r] = pick_residual_token(p.row(r), q.row(r), rc.cols, residual_masses, p_masses, row,
                                    static_cast<double>(uniforms[r]), fallback);
  }
};

// --- gathers ---------------------------------------------------------------------------------------
template <class T>
struct gather_rows_fn {
  matrix_view<const T, host_space> x;
  const std::int32_t* row_ids;
  matrix_view<T, host_space> out;
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t i) const {
    const std::int32_t id = row_ids[i];
    const bool ok = id >= 0 && id < x.rows();
    faults[i] = ok ? fault::none : fault::index_out_of_range;
    if (!ok) return;
    for (index_t j = 0; j < x.cols(); ++j) out(i, j) = x(id, j);
  }
};

template <class T>
struct gather_elements_fn {
  matrix_view<const T, host_space> x;
  matrix_view<const std::int32_t, host_space> column_ids;
  matrix_view<T, host_space> out;
  fault* faults;
  SPECDEC_HOST_DEVICE void operator()(index_t r) const {
    fault f = fault::none;
    for (index_t j = 0; j < column_ids.cols(); ++j) {
      const std::int32_t id = column_ids(r, j);
      if (id < 0 || id >= x.cols()) {
        f = fault::index_out_of_range;
        continue;
      }
      out(r, j) = x(r, id);
    }
    faults[r] = f;
  }
};

/// Views of any space as the host-tagged views the functors hold (they only use the pointers).
template <class T, int R, class S>
view<T, R, host_space> untagged(const view<T, R, S>& v) {
  if constexpr (R == 1) {
    return view<T, R, host_space>(v.data(), v.rows(), v.stride(0));
  } else {
    return view<T, R, host_space>(v.data(), v.rows(), v.cols(), v.stride(0), v.stride(1));
  }
}

}  // namespace specdec::detail::inline SPECDEC_ISA
