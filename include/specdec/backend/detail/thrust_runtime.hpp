// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `thrust_backend<System>`'s machinery, below its primitives: the scratch layouts and the
/// arena or caller workspace they are carved from, work items over Thrust's `for_each`, host copies on
/// the backend's stream, the CUDA launch helpers (grids, per-row tickets, the deferred fault record,
/// cuBLAS) and the raising of the faults kernels record per row. thrust_backend derives from it.
#pragma once

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <specdec/backend/detail/cuda_rows.cuh>
#if defined(SPECDEC_USE_CUBLAS)
#include <cublas_v2.h>
#endif
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/backend/detail/thrust_functors.hpp>
#include <specdec/backend/thrust_system.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/workspace.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// The state and helpers every thrust_backend<System> primitive uses (protected: not API).
template <class System>
class thrust_runtime {
 protected:
  using memory_space = typename System::memory_space;

  /// Work-item chunk of the reductions: long enough to amortise a launch per item on the CPU,
  /// short enough to give a GPU rows x chunks items in flight.
  static constexpr index_t reduce_chunk = 4096;
  static constexpr index_t small_k = 64;

  enum class layout_kind : int { argmax, logsumexp, topk, sample, sample_residual, gather };
  static constexpr int layout_kinds = 6;

  /// Every scratch buffer a primitive may use; lay_out fills the ones its kind needs.
  struct scratch_layout {
    detail::fault* faults;
    void* argmax;  // detail::argmax_result<T>[items], typed at use (T-independent upper bound size)
    void* lse;     // detail::lse_partial<T>[items] and [rows]
    void* row_stats;
    void* topk_values;
    std::int32_t* topk_indices;
    index_t* heads;
    detail::chunk_mass* masses;
    detail::residual_chunk_mass* residual_masses;
    double* doubles;
  };

  static index_t topk_slot(index_t k, index_t chunk) { return k <= small_k ? k : chunk; }

  /// The one place that decides scratch layouts: run in count-only mode for workspace_bytes and
  /// over real memory for the call, so the two cannot disagree. Sized for T = double (the widest).
  static void lay_out(workspace_carver& w, layout_kind kind, index_t rows, index_t cols, index_t k,
                      scratch_layout& s) {
    const auto n = [](index_t v) { return static_cast<std::size_t>(v); };
    s.faults = w.take<detail::fault>(n(rows), "faults");
    switch (kind) {
      case layout_kind::argmax: {
        const detail::row_chunks rc{rows, cols, reduce_chunk};
        s.argmax = w.take<detail::argmax_result<double>>(n(rc.items()), "argmax partials");
        break;
      }
      case layout_kind::logsumexp: {
        const detail::row_chunks rc{rows, cols, reduce_chunk};
        s.lse = w.take<detail::lse_partial<double>>(n(rc.items()), "log-sum-exp partials");
        s.row_stats = w.take<detail::lse_partial<double>>(n(rows), "row statistics");
        s.argmax = w.take<detail::argmax_result<double>>(n(rc.items()), "argmax partials");
        s.topk_indices = w.take<std::int32_t>(n(rows), "argmax indices");
        break;
      }
      case layout_kind::topk: {
        const detail::row_chunks rc{rows, cols, reduce_chunk};
        const index_t slot = topk_slot(k, reduce_chunk);
        s.topk_values = w.take<double>(n(rc.items() * slot), "top-k candidate values");
        s.topk_indices = w.take<std::int32_t>(n(rc.items() * slot), "top-k candidate indices");
        s.heads = w.take<index_t>(n(rc.items()), "top-k merge cursors");
        s.lse = w.take<detail::lse_partial<double>>(n(rc.items()), "log-sum-exp partials");
        break;
      }
      case layout_kind::sample: {
        const detail::row_chunks rc{rows, cols, detail::sample_chunk};
        s.masses = w.take<detail::chunk_mass>(n(rc.items()), "chunk masses");
        s.doubles = w.take<double>(n(rc.items()), "chunk mass table");
        break;
      }
      case layout_kind::sample_residual: {
        const detail::row_chunks rc{rows, cols, detail::sample_chunk};
        s.residual_masses = w.take<detail::residual_chunk_mass>(n(rc.items()), "residual chunk masses");
        s.doubles = w.take<double>(n(2 * rc.items()), "chunk mass tables");
        break;
      }
      case layout_kind::gather: break;
    }
  }

  scratch_layout scratch(layout_kind kind, index_t rows, index_t cols, index_t k) {
    workspace_carver count;
    scratch_layout s{};
    lay_out(count, kind, rows, cols, k, s);
    workspace_carver carve = memory_for(count.bytes_used());
    lay_out(carve, kind, rows, cols, k, s);
    return s;
  }

  /// A carver over the caller's workspace, or over the arena grown to at least `bytes`.
  workspace_carver memory_for(std::size_t bytes) {
    if (external_ != nullptr) return workspace_carver(external_, external_bytes_);
    if (arena_.size() < bytes) arena_.resize(bytes);
    return workspace_carver(detail::system_storage<System, std::byte>::raw(arena_), arena_.size());
  }

  /// Team jobs' scratch: each team's fault, `stride` bytes per team and `wide_stride` more (the wide
  /// scratch, never in CUDA shared memory).
  struct team_layout {
    detail::team_fault* faults;
    std::byte* scratch;
    std::byte* wide;
  };
  static void lay_out_teams(workspace_carver& w, index_t teams, std::size_t stride, std::size_t wide_stride,
                            team_layout& s) {
    s.faults = w.take<detail::team_fault>(static_cast<std::size_t>(teams), "team faults");
    s.scratch = w.take<std::byte>(static_cast<std::size_t>(teams) * stride, "team scratch");
    s.wide = wide_stride == 0 ? nullptr : w.take<std::byte>(static_cast<std::size_t>(teams) * wide_stride, "team wide scratch");
  }
  team_layout team_scratch(index_t teams, std::size_t stride, std::size_t wide_stride) {
    workspace_carver count;
    team_layout s{};
    lay_out_teams(count, teams, stride, wide_stride, s);
    workspace_carver carve = memory_for(count.bytes_used());
    lay_out_teams(carve, teams, stride, wide_stride, s);
    return s;
  }

  template <class F>
  void for_each(index_t n, F f) const {
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      ::thrust::for_each(::thrust::cuda::par_nosync.on(stream()), ::thrust::counting_iterator<index_t>(0),
                         ::thrust::counting_iterator<index_t>(n), f);
      return;
    }
#endif
    ::thrust::for_each(System::policy(), ::thrust::counting_iterator<index_t>(0),
                       ::thrust::counting_iterator<index_t>(n), f);
  }

  static constexpr bool is_cuda = std::is_same_v<memory_space, device_space>;

#if defined(__CUDACC__)
  static void cuda_check(const char* where, cudaError_t e) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string(where) + ": CUDA error " + cudaGetErrorName(e) + " (" +
                               cudaGetErrorString(e) + ")");
  }

  /// The one-launch kernels take a row of up to `limit` slices / chunks (their partials live in shared
  /// memory); longer rows use the generic work items.
  static bool cuda_fits(index_t count, index_t limit) { return count >= 1 && count <= limit; }

  static dim3 cuda_grid(index_t slices, index_t rows) {
    return dim3(static_cast<unsigned>(slices),
                static_cast<unsigned>(std::min<index_t>(rows, detail::cuda_rows::max_grid_rows)));
  }

  template <class V>
  static detail::cuda_rows::rows_view<V> cuda_rows_of(const matrix_view<const V, memory_space>& m) {
    return {m.data(), m.rows(), m.cols(), m.stride(0)};
  }

  /// Zeroed tickets, one per row; every kernel leaves them zero again. Grows (and synchronises) only
  /// when a call has more rows than any before.
  unsigned* cuda_tickets(index_t rows) {
    if (static_cast<index_t>(tickets_.size()) < rows) {
      tickets_.clear();
      tickets_.resize(static_cast<std::size_t>(rows), 0u);
    }
    return detail::system_storage<System, unsigned>::raw(tickets_);
  }

  detail::cuda_rows::fault_record* cuda_record() {
    if (!record_) {
      void* d = nullptr;
      void* h = nullptr;
      cuda_check("specdec::thrust_backend::defer_faults", cudaMalloc(&d, sizeof(detail::cuda_rows::fault_record)));
      record_ = std::shared_ptr<void>(d, [](void* p) { cudaFree(p); });
      cuda_check("specdec::thrust_backend::defer_faults", cudaMallocHost(&h, sizeof(detail::cuda_rows::fault_record)));
      record_host_ = std::shared_ptr<void>(h, [](void* p) { cudaFreeHost(p); });
      cuda_check("specdec::thrust_backend::defer_faults",
                 cudaMemsetAsync(d, 0, sizeof(detail::cuda_rows::fault_record), stream()));
    }
    return static_cast<detail::cuda_rows::fault_record*>(record_.get());
  }

  detail::cuda_rows::fault_sink cuda_sink(const char* where, const char* name, detail::fault* faults,
                                          const char* second = nullptr) {
    const auto at = [](const char* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
    return {faults, deferred_ ? cuda_record() : nullptr, at(where), at(name), at(second != nullptr ? second : name),
            at("uniforms")};
  }

  void cuda_launched(const char* where) const { cuda_check(where, cudaGetLastError()); }
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_); }
#endif

#if defined(__CUDACC__) && defined(SPECDEC_USE_CUBLAS)
  /// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: a row-major matrix with row
  /// stride s is its transpose in column-major with leading dimension s, so the operands swap and
  /// keep their own transpose flags.
  void cublas_gemm(matrix_view<const float, memory_space> a, transpose ta, matrix_view<const float, memory_space> b,
                   transpose tb, matrix_view<float, memory_space> c, float alpha, float beta) {
    if (!cublas_) {
      cublasHandle_t h = nullptr;
      SPECDEC_EXPECTS(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "specdec::thrust_backend::gemm", "cublasCreate failed");
      cublas_ = std::shared_ptr<void>(h, [](void* p) { cublasDestroy(static_cast<cublasHandle_t>(p)); });
    }
    const auto op = [](transpose t) { return t == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    const index_t inner = ta == transpose::yes ? a.rows() : a.cols();
    const auto ld = [](const auto& m) { return static_cast<int>(std::max<index_t>(m.stride(0), std::max<index_t>(m.cols(), 1))); };
    const cublasStatus_t status =
        cublasSgemm(static_cast<cublasHandle_t>(cublas_.get()), op(tb), op(ta), static_cast<int>(c.cols()), static_cast<int>(c.rows()), static_cast<int>(inner),
                    &alpha, b.data(), ld(b), a.data(), ld(a), &beta, c.data(), ld(c));
    SPECDEC_EXPECTS(status == CUBLAS_STATUS_SUCCESS, "specdec::thrust_backend::gemm", "cublasSgemm failed with status ",
                    static_cast<int>(status));
  }
#endif
  // The cuBLAS handle (cublasHandle_t) when a CUDA gemm has run; type-erased and always present, so
  // the class has one layout whether or not this translation unit sees cuBLAS.
  std::shared_ptr<void> cublas_;

  // On CUDA both copies are ordered on the backend's stream; a download waits for it.
  template <class T>
  void copy_from_host(const T* src, std::size_t n, T* dst) const {
    if constexpr (std::is_same_v<memory_space, host_space>) {
      std::copy_n(src, n, dst);
    } else {
#if defined(__CUDACC__)
      if (n == 0) return;
      cuda_check("specdec::thrust_backend::upload", cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, stream()));
#endif
    }
  }
  template <class T>
  void copy_to_host(const T* src, std::size_t n, T* dst) const {
    if constexpr (std::is_same_v<memory_space, host_space>) {
      std::copy_n(src, n, dst);
    } else {
#if defined(__CUDACC__)
      if (n == 0) return;
      cuda_check("specdec::thrust_backend::download", cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream()));
      cuda_check("specdec::thrust_backend::download", cudaStreamSynchronize(stream()));
#endif
    }
  }

  std::vector<detail::fault> fetch_faults(const detail::fault* faults, index_t rows) const {
    std::vector<detail::fault> host(static_cast<std::size_t>(rows));
    copy_to_host(faults, host.size(), host.data());
    return host;
  }

  template <class T>
  static void raise_row(const char* where, const char* name, const matrix_view<T, memory_space>& m, index_t r,
                        detail::fault f) {
    if constexpr (std::is_same_v<memory_space, host_space>) {
      detail::throw_fault(where, name, r, f, m.row(r), m.cols());
    } else {
      detail::throw_fault(where, name, r, f);
    }
  }
  void raise_uniform(const char* where, vector_view<const float, memory_space> uniforms, index_t r) const {
    float u = 0;
    copy_to_host(uniforms.data() + r, 1, &u);
    detail::throw_invalid_argument(where, "uniforms[", r, "] = ", u, " is outside [0, 1)");
  }

  /// Deferred mode: folds a generic primitive's per-row faults into the device record (one launch).
  /// Returns whether it did, i.e. whether the caller must not read the faults back now.
  bool fold_deferred(const char* where, const char* name, const detail::fault* faults, index_t rows,
                     const char* second = nullptr) {
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      if (!deferred_) return false;
      const unsigned blocks = static_cast<unsigned>(std::min<index_t>((rows + 255) / 256, 1024));
      detail::cuda_rows::fold_faults_kernel<><<<blocks, 256, 0, stream()>>>(
          faults, rows, cuda_sink(where, name, const_cast<detail::fault*>(faults), second));
      cuda_launched(where);
      return true;
    }
#endif
    (void)where, (void)name, (void)faults, (void)rows, (void)second;
    return false;
  }

  template <class T>
  void raise_residual_faults(const char* where, const matrix_view<T, memory_space>& p, const matrix_view<T, memory_space>& q,
                             const detail::fault* fault_rows, index_t rows, vector_view<const float, memory_space> uniforms) {
    if (fold_deferred(where, "p", fault_rows, rows, "q")) return;
    const std::vector<detail::fault> faults = fetch_faults(fault_rows, rows);
    for (index_t r = 0; r < rows; ++r) {
      const auto f = faults[static_cast<std::size_t>(r)];
      if (f == detail::fault::none) continue;
      if (static_cast<std::int32_t>(f) >= 256)
        raise_row(where, "q", q, r, static_cast<detail::fault>(static_cast<std::int32_t>(f) - 256));
      if (f == detail::fault::uniform_out_of_range) raise_uniform(where, uniforms, r);
      raise_row(where, "p", p, r, f);
    }
  }

  template <class T>
  void raise_faults(const char* where, const char* name, const matrix_view<T, memory_space>& m,
                    const detail::fault* faults, index_t rows, vector_view<const float, memory_space> uniforms = {}) {
    if (fold_deferred(where, name, faults, rows)) return;
    const std::vector<detail::fault> host = fetch_faults(faults, rows);
    for (index_t r = 0; r < rows; ++r) {
      const auto f = host[static_cast<std::size_t>(r)];
      if (f == detail::fault::none) continue;
      if (f == detail::fault::uniform_out_of_range) raise_uniform(where, uniforms, r);
      raise_row(where, name, m, r, f);
    }
  }
  void raise_index_faults(const char* where, const char* name, const detail::fault* faults, index_t rows) {
    if (fold_deferred(where, name, faults, rows)) return;
    const std::vector<detail::fault> host = fetch_faults(faults, rows);
    for (index_t r = 0; r < rows; ++r)
      if (host[static_cast<std::size_t>(r)] != detail::fault::none)
        detail::throw_invalid_argument(where, name, " has an entry out of range in row ", r,
                                       "; expected indices inside the gathered extent");
  }

  // ---- the row reductions' launches: one kernel on CUDA where it fits, else work items ----
  template <class V, class T>
  void argmax_impl(const char* where, const matrix_view<T, memory_space>& logits, std::int32_t* index, V* value,
                   const vector_view<V, memory_space>* max_out) {
    if (max_out != nullptr) detail::check_row_reduction(where, logits, *max_out, "max");
    const detail::row_chunks rc{logits.rows(), logits.cols(), reduce_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::argmax, rc.rows, rc.cols, 1);
    auto* partial = static_cast<detail::argmax_result<V>*>(s.argmax);
    using E = std::remove_const_t<T>;  // the rows' element type (V, or a 16-bit type widened to V)
#if defined(__CUDACC__)
    if constexpr (is_cuda && std::is_same_v<E, V>) {  // the dedicated kernels read float rows; 16-bit rows take the items below
      static_assert(reduce_chunk == detail::cuda_rows::slice);
      if (cuda_fits(rc.count(), 2048)) {
        detail::cuda_rows::argmax_kernel<V>
            <<<cuda_grid(rc.count(), rc.rows), detail::cuda_rows::threads,
               static_cast<std::size_t>(rc.count()) * sizeof(detail::argmax_result<V>) + detail::cuda_rows::shared_slack, stream()>>>(
                cuda_rows_of(matrix_view<const V, memory_space>(logits)), partial, cuda_tickets(rc.rows), index, value,
                cuda_sink(where, "logits", s.faults));
        cuda_launched(where);
        if (!deferred_) raise_faults(where, "logits", logits, s.faults, rc.rows);
        return;
      }
    }
#endif
    const auto x = detail::untagged(matrix_view<const E, memory_space>(logits));
    for_each(rc.items(), detail::argmax_partial_fn<V, E>{x, rc, partial});
    for_each(rc.rows, detail::argmax_combine_fn<V>{rc, partial, index, value, s.faults});
    raise_faults(where, "logits", logits, s.faults, rc.rows);
  }

  template <class V, class T>
  void lse_impl(const char* where, const matrix_view<T, memory_space>& logits, V inv_t, V* lse,
                bool masked_rows_allowed) {
    const detail::row_chunks rc{logits.rows(), logits.cols(), reduce_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::logsumexp, rc.rows, rc.cols, 1);
    auto* partial = static_cast<detail::lse_partial<V>*>(s.lse);
    using E = std::remove_const_t<T>;
#if defined(__CUDACC__)
    if constexpr (is_cuda && std::is_same_v<E, V>) {
      if (cuda_fits(rc.count(), 2048)) {
        detail::cuda_rows::logsumexp_kernel<V>
            <<<cuda_grid(rc.count(), rc.rows), detail::cuda_rows::threads,
               static_cast<std::size_t>(rc.count()) * sizeof(detail::lse_partial<V>) + detail::cuda_rows::shared_slack, stream()>>>(
                cuda_rows_of(matrix_view<const V, memory_space>(logits)), inv_t, partial, cuda_tickets(rc.rows),
                static_cast<detail::lse_partial<V>*>(s.row_stats), lse, masked_rows_allowed,
                cuda_sink(where, "logits", s.faults));
        cuda_launched(where);
        if (!deferred_) raise_faults(where, "logits", logits, s.faults, rc.rows);
        last_stats_ = s;
        return;
      }
    }
#endif
    const auto x = detail::untagged(matrix_view<const E, memory_space>(logits));
    for_each(rc.items(), detail::lse_partial_fn<V, E>{x, rc, inv_t, partial});
    for_each(rc.rows, detail::lse_combine_fn<V>{rc, partial, inv_t, static_cast<detail::lse_partial<V>*>(s.row_stats),
                                                lse, masked_rows_allowed, s.faults});
    raise_faults(where, "logits", logits, s.faults, rc.rows);
    last_stats_ = s;
  }

  template <bool Log, class V, class T>
  void normalise(const char* where, const matrix_view<T, memory_space>& logits, V temperature,
                 const matrix_view<V, memory_space>& out) {
    detail::check_elementwise(where, logits, out);
    detail::check_temperature(where, temperature, true);
    const detail::row_chunks rc{logits.rows(), logits.cols(), reduce_chunk};
    if (rc.rows == 0) return;
    using E = std::remove_const_t<T>;
    const auto x = detail::untagged(matrix_view<const E, memory_space>(logits));
    if (temperature == V(0)) {
      scratch_layout s = scratch(layout_kind::logsumexp, rc.rows, rc.cols, 1);
      auto* partial = static_cast<detail::argmax_result<V>*>(s.argmax);
      for_each(rc.items(), detail::argmax_partial_fn<V, E>{x, rc, partial});
      for_each(rc.rows, detail::argmax_combine_fn<V>{rc, partial, s.topk_indices, nullptr, s.faults});
      raise_faults(where, "logits", logits, s.faults, rc.rows);
      for_each(rc.items(), detail::one_hot_fn<V, Log>{detail::untagged(out), rc, s.topk_indices});
      return;
    }
    const V inv_t = V(1) / temperature;
    lse_impl<V>(where, logits, inv_t, nullptr, false);
#if defined(__CUDACC__)
    if constexpr (is_cuda && std::is_same_v<E, V>) {
      if (cuda_fits(rc.count(), 2048)) {
        detail::cuda_rows::normalise_kernel<V, Log><<<cuda_grid(rc.count(), rc.rows), detail::cuda_rows::threads, 0, stream()>>>(
            cuda_rows_of(matrix_view<const V, memory_space>(logits)), out.data(), out.stride(0), inv_t,
            static_cast<const detail::lse_partial<V>*>(last_stats_.row_stats), last_stats_.faults);
        cuda_launched(where);
        return;
      }
    }
#endif
    for_each(rc.items(), detail::normalise_fn<V, Log, E>{x, detail::untagged(out), rc, inv_t,
                                                     static_cast<const detail::lse_partial<V>*>(last_stats_.row_stats),
                                                     rc.rows * rc.cols * index_t{sizeof(V)} >= detail::streaming_output_bytes});
  }

  template <class V, class T>
  void topk_impl(const char* where, const matrix_view<T, memory_space>& logits, index_t k,
                 const matrix_view<V, memory_space>& values, const matrix_view<std::int32_t, memory_space>& indices,
                 V* lse, V inv_t) {
    const detail::row_chunks rc{logits.rows(), logits.cols(), reduce_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::topk, rc.rows, rc.cols, k);
    const index_t slot = topk_slot(k, reduce_chunk);
    auto* cand_values = static_cast<V*>(s.topk_values);
    auto* stats = static_cast<detail::lse_partial<V>*>(s.lse);
    using E = std::remove_const_t<T>;
#if defined(__CUDACC__)
    if constexpr (is_cuda && std::is_same_v<V, float> && std::is_same_v<E, V>) {
      if (k <= detail::cuda_rows::max_topk && cuda_fits(rc.count(), detail::cuda_rows::max_topk_slices)) {
        // A block per `group` slices of a row: its candidate list, then the row's merge.
        const index_t group = detail::cuda_rows::topk_group(rc.rows, rc.cols, k);
        detail::cuda_rows::topk_kernel<float><<<cuda_grid((rc.count() + group - 1) / group, rc.rows), detail::cuda_rows::threads,
                                         static_cast<std::size_t>(rc.count()) * sizeof(detail::lse_partial<float>) + detail::cuda_rows::shared_slack,
                                         stream()>>>(
            cuda_rows_of(matrix_view<const V, memory_space>(logits)), k, k, group, inv_t, cand_values, s.topk_indices, stats,
            cuda_tickets(rc.rows), values.data(), values.stride(0), indices.data(), indices.stride(0), lse,
            cuda_sink(where, "logits", s.faults));
        cuda_launched(where);
        if (!deferred_) raise_faults(where, "logits", logits, s.faults, rc.rows);
        return;
      }
    }
#endif
    const auto x = detail::untagged(matrix_view<const E, memory_space>(logits));
    for_each(rc.items(), detail::topk_partial_fn<V, E>{x, rc, k, slot, small_k, inv_t, cand_values, s.topk_indices, stats});
    for_each(rc.rows, detail::topk_merge_fn<V>{rc, k, slot, cand_values, s.topk_indices, stats, inv_t, s.heads,
                                               detail::untagged(values), detail::untagged(indices), lse, s.faults});
    raise_faults(where, "logits", logits, s.faults, rc.rows);
  }

  typename detail::system_storage<System, std::byte>::type arena_;
  typename detail::system_storage<System, unsigned>::type tickets_;  // CUDA: per-row tickets, zero between calls
  void* stream_ = nullptr;                                          // CUDA: cudaStream_t
  bool deferred_ = false;
  std::shared_ptr<void> record_, record_host_;  // CUDA: the device fault record and its pinned host copy
  void* external_ = nullptr;
  std::size_t external_bytes_ = 0;
  scratch_layout last_stats_{};
};

}  // namespace specdec::detail::inline SPECDEC_ISA
