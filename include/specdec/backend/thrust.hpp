// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief `specdec::thrust_backend<System>`: the Thrust backend, the GPU path, which also runs on the CPU.
///
/// Systems: specdec/backend/thrust_system.hpp. The per-(row, chunk) work items it launches:
/// specdec/backend/detail/thrust_functors.hpp.
///
/// On the host systems every primitive launches the shared kernels of row_kernels.hpp over (row,
/// chunk) work items and then combines each row's chunks in chunk order; on CUDA the row primitives
/// are one launch each (detail/cuda_rows.cuh), whose blocks produce the same partials and whose last
/// block per row combines them with the same functions. Either way integer outputs (argmax, top-k,
/// sampled tokens) are identical to the Eigen backend's and do not depend on the thread count or GPU.
///
/// Scratch memory comes from the backend object: an arena in the system's memory that grows on
/// demand, or a caller-provided workspace (`use_workspace`), sized with `workspace_bytes`, in which
/// case the backend never allocates. Errors found in the data are collected per row on the device;
/// on CUDA reading them back is the one synchronisation of a call, unless `defer_faults(true)` leaves
/// them on the device until `check_faults()`. CUDA work goes to the stream of `set_stream`.
/// Requires Thrust (link the CMake target `specdec::thrust`).
#pragma once

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_ptr.h>

#include <specdec/backend/detail/cuda_rows.cuh>
#include <specdec/backend/detail/cuda_sample.cuh>
#include <specdec/backend/detail/cuda_teams.cuh>
#include <specdec/backend/detail/cuda_topk.cuh>
#if defined(SPECDEC_USE_CUBLAS)
#include <cublas_v2.h>
#endif
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/backend/concept.hpp>
#include <specdec/backend/detail/checks.hpp>
#include <specdec/backend/detail/dense_checks.hpp>
#include <specdec/backend/detail/dense_kernels.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/backend/detail/thrust_functors.hpp>
#include <specdec/backend/thrust_system.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/workspace.hpp>

namespace specdec::inline SPECDEC_ISA {

/// The Thrust backend on `System` (see thrust_system). Models specdec::backend with
/// `memory_space = System::memory_space`.
template <class System = thrust_system::device>
class thrust_backend {
  static_assert(!std::is_same_v<System, thrust_system::configured_system_unavailable_in_this_translation_unit>,
                "thrust_system::device is the configured SPECDEC_THRUST_DEVICE_SYSTEM (CUDA or OMP), which this "
                "translation unit cannot run (not compiled by nvcc / without OpenMP); name thrust_system::cpp explicitly");

 public:
  using system = System;
  using memory_space = typename System::memory_space;

  /// Owning buffer in the system's memory; see specdec::backend.
  template <class T>
  class buffer {
   public:
    buffer() = default;
    explicit buffer(index_t n)
        : data_(detail::checked_count("specdec::thrust_backend::buffer", {n}, "a buffer of n = ", n, " elements")) {}
    vector_view<T, memory_space> view() { return {raw(), size()}; }
    matrix_view<T, memory_space> matrix(index_t rows, index_t cols) {
      SPECDEC_EXPECTS(rows >= 0 && cols >= 0 && (cols == 0 ? size() == 0 : rows == size() / cols && size() % cols == 0),
                      "specdec::thrust_backend::buffer::matrix", "a buffer of ", size(), " elements cannot be viewed as [", rows, " x ",
                      cols, "]");
      return {raw(), rows, cols};
    }
    index_t size() const noexcept { return static_cast<index_t>(data_.size()); }
    typename detail::system_storage<System, T>::type& storage() { return data_; }

   private:
    T* raw() { return detail::system_storage<System, T>::raw(data_); }
    typename detail::system_storage<System, T>::type data_;
  };

  thrust_backend() = default;

  /// Makes the backend carve all scratch memory out of `bytes` bytes at `base` (memory of the
  /// system's space, at least `workspace_bytes(...)` for the largest problem it will see); the
  /// backend then never allocates. Pass nullptr to return to the growing internal arena.
  void use_workspace(void* base, std::size_t bytes) {
    external_ = base;
    external_bytes_ = bytes;
  }

  /// Data faults (NaN, +inf, unnormalised rows, bad uniforms or indices) are raised by the call that
  /// finds them (default), which on CUDA costs one host synchronisation per call. With
  /// `defer_faults(true)` a CUDA backend never synchronises inside a call: the first fault is recorded
  /// on the device and raised by the next `check_faults()` (one synchronisation), so calls can be
  /// captured in a CUDA graph. Outputs of a faulted row are unspecified. Host systems always raise at
  /// once (they have nothing to wait for); `check_faults()` is then a no-op.
  void defer_faults(bool deferred) {
    deferred_ = deferred && is_cuda;
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      if (deferred_) cuda_record();  // allocated here, never inside a call (which may be under graph capture)
    }
#endif
  }
  bool faults_deferred() const noexcept { return deferred_; }
  /// Raises the first fault recorded since the last check (deferred mode) and clears it.
  /// \throws invalid_argument naming the primitive, the argument and the row.
  void check_faults() {
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      if (!record_) return;
      auto* host = static_cast<detail::cuda_rows::fault_record*>(record_host_.get());
      cuda_check("specdec::thrust_backend::check_faults", cudaMemcpyAsync(host, record_.get(), sizeof *host,
                                                                  cudaMemcpyDeviceToHost, stream()));
      cuda_check("specdec::thrust_backend::check_faults", cudaStreamSynchronize(stream()));
      if (host->code == 0) return;
      const detail::cuda_rows::fault_record got = *host;
      cuda_check("specdec::thrust_backend::check_faults", cudaMemsetAsync(record_.get(), 0, sizeof got, stream()));
      if (got.code >= 64)  // a team job's (backend/detail/team.hpp)
        detail::throw_team_fault(reinterpret_cast<const char*>(got.where), reinterpret_cast<const char*>(got.name),
                                 detail::team_fault{got.code, 0, got.row, got.column, got.limit, got.value});
      detail::throw_fault(reinterpret_cast<const char*>(got.where), reinterpret_cast<const char*>(got.name), got.row,
                          static_cast<detail::fault>(got.code));
    }
#endif
  }

#if defined(__CUDACC__)
  /// CUDA: every kernel and copy of this backend goes to `stream` (default 0, the legacy default
  /// stream). Thrust runs with `par_nosync.on(stream)`.
  void set_stream(cudaStream_t stream)
    requires std::is_same_v<System, thrust_system::cuda>
  {
    stream_ = stream;
  }
  cudaStream_t stream() const
    requires std::is_same_v<System, thrust_system::cuda>
  {
    return static_cast<cudaStream_t>(stream_);
  }
#endif

  /// Scratch bytes any primitive needs for `rows` rows of `cols` entries and top-k size `k`: the
  /// maximum over the primitives, computed by running their layouts in count-only mode.
  std::size_t workspace_bytes(index_t rows, index_t cols, index_t k = 1) const {
    constexpr const char* where = "specdec::thrust_backend::workspace_bytes";
    SPECDEC_EXPECTS(rows >= 0 && rows <= max_elements, where, "rows = ", rows, "; expected 0 <= rows <= 2^40");
    SPECDEC_EXPECTS(cols >= 1 && cols <= INT32_MAX, where, "cols = ", cols, "; expected 1 <= cols <= 2^31 - 1");
    detail::check_k(where, k, cols);
    std::size_t bytes = 0;
    for (int op = 0; op < layout_kinds; ++op) {
      workspace_carver count;
      scratch_layout s{};
      lay_out(count, static_cast<layout_kind>(op), rows, cols, k, s);
      bytes = std::max(bytes, count.bytes_used());
    }
    return bytes;
  }

  template <class T>
  buffer<T> allocate(index_t n) const {
    SPECDEC_EXPECTS(n >= 0 && n <= max_elements, "specdec::thrust_backend::allocate", "n = ", n,
                    "; expected 0 <= n <= 2^40 (specdec's largest buffer)");
    return buffer<T>(n);
  }
  template <class T>
  buffer<std::remove_const_t<T>> upload(std::span<T> host) const {
    buffer<std::remove_const_t<T>> b(static_cast<index_t>(host.size()));
    copy_from_host(host.data(), host.size(), b.view().data());
    return b;
  }
  /// Copies `host` into the caller's contiguous `dst`. \throws invalid_argument on a length mismatch or
  /// a strided `dst`.
  template <class T>
  void upload(std::span<const T> host, vector_view<T, memory_space> dst) const {
    SPECDEC_EXPECTS(static_cast<index_t>(host.size()) == dst.rows(), "specdec::thrust_backend::upload", "host has ", host.size(),
                    " entries; dst has ", dst.rows());
    detail::check_view("specdec::thrust_backend::upload", "dst", dst, detail::packed);
    copy_from_host(host.data(), host.size(), dst.data());
  }
  template <class T>
  std::vector<std::remove_const_t<T>> download(vector_view<T, memory_space> v) const {
    detail::check_view("specdec::thrust_backend::download", "v", v, detail::packed);
    std::vector<std::remove_const_t<T>> out(static_cast<std::size_t>(v.rows()));
    copy_to_host(v.data(), out.size(), out.data());
    return out;
  }

  /// See eigen::row_max. All buffers in `memory_space`. On CUDA, synchronises to read the fault flags
  /// (not with deferred faults); so does every primitive below.
  template <class T>
  void row_max(matrix_view<T, memory_space> logits, vector_view<std::remove_const_t<T>, memory_space> max) {
    argmax_impl<std::remove_const_t<T>>("specdec::thrust_backend::row_max", logits, nullptr, max.data(), &max);
  }

  /// See eigen::row_argmax.
  template <class T>
  void row_argmax(matrix_view<T, memory_space> logits, vector_view<std::int32_t, memory_space> index,
                  vector_view<std::remove_const_t<T>, memory_space> value = {}) {
    constexpr const char* where = "specdec::thrust_backend::row_argmax";
    detail::check_row_reduction(where, logits, index, "index");
    const bool with_value = value.data() != nullptr || !value.empty();
    if (with_value) {
      detail::check_length(where, "value", value, logits.rows(), "one per row");
      detail::check_apart(where, "value", value, "logits", logits);
      detail::check_apart(where, "value", value, "index", index);
    }
    argmax_impl<std::remove_const_t<T>>(where, logits, index.data(), value.data(), nullptr);
  }

  /// See eigen::row_topk.
  template <class T>
  void row_topk(matrix_view<T, memory_space> logits, index_t k,
                matrix_view<std::remove_const_t<T>, memory_space> values,
                matrix_view<std::int32_t, memory_space> indices) {
    constexpr const char* where = "specdec::thrust_backend::row_topk";
    detail::check_topk(where, logits, k, values, indices);
    topk_impl<std::remove_const_t<T>>(where, logits, k, values, indices, nullptr, std::remove_const_t<T>(0));
  }

  /// See eigen::row_topk_logsumexp.
  template <class T>
  void row_topk_logsumexp(matrix_view<T, memory_space> logits, index_t k, std::remove_const_t<T> temperature,
                          matrix_view<std::remove_const_t<T>, memory_space> values,
                          matrix_view<std::int32_t, memory_space> indices,
                          vector_view<std::remove_const_t<T>, memory_space> lse) {
    constexpr const char* where = "specdec::thrust_backend::row_topk_logsumexp";
    detail::check_topk(where, logits, k, values, indices);
    detail::check_length(where, "lse", lse, logits.rows(), "one entry per row of logits");
    detail::check_apart(where, "lse", lse, "logits", logits);
    detail::check_apart(where, "lse", lse, "values", values);
    detail::check_apart(where, "lse", lse, "indices", indices);
    detail::check_temperature(where, temperature, false);
    topk_impl<std::remove_const_t<T>>(where, logits, k, values, indices, lse.data(),
                                      std::remove_const_t<T>(1) / temperature);
  }

  /// See eigen::row_logsumexp.
  template <class T>
  void row_logsumexp(matrix_view<T, memory_space> logits, std::remove_const_t<T> temperature,
                     vector_view<std::remove_const_t<T>, memory_space> lse) {
    using V = std::remove_const_t<T>;
    constexpr const char* where = "specdec::thrust_backend::row_logsumexp";
    detail::check_row_reduction(where, logits, lse, "lse");
    detail::check_temperature(where, temperature, false);
    lse_impl<V>(where, logits, V(1) / temperature, lse.data(), true);
  }

  /// See eigen::row_softmax.
  template <class T>
  void row_softmax(matrix_view<T, memory_space> logits, std::remove_const_t<T> temperature,
                   matrix_view<std::remove_const_t<T>, memory_space> out) {
    normalise<false, std::remove_const_t<T>>("specdec::thrust_backend::row_softmax", logits, temperature, out);
  }

  /// See eigen::row_softmax_stats (host memory spaces only: a device caller downloads whole rows).
  template <class T>
    requires std::is_same_v<typename System::memory_space, host_space>
  detail::softmax_stats<T> row_softmax_stats(matrix_view<const T, memory_space> logits, T temperature) {
    constexpr const char* where = "specdec::thrust_backend::row_softmax";
    SPECDEC_EXPECTS(logits.rows() == 1, where, "row_softmax_stats takes one row; got ", logits.rows(), " rows");
    detail::check_row_matrix(where, "logits", logits);
    detail::check_temperature(where, temperature, false);
    lse_impl<T>(where, logits, T(1) / temperature, nullptr, false);
    const auto stats = static_cast<const detail::lse_partial<T>*>(last_stats_.row_stats)[0];
    return {stats.max, stats.sum};
  }

  /// See eigen::row_log_softmax.
  template <class T>
  void row_log_softmax(matrix_view<T, memory_space> logits, std::remove_const_t<T> temperature,
                       matrix_view<std::remove_const_t<T>, memory_space> out) {
    normalise<true, std::remove_const_t<T>>("specdec::thrust_backend::row_log_softmax", logits, temperature, out);
  }

  /// See eigen::row_sample. Same canonical order, hence the same tokens as every other backend.
  template <class T>
  void row_sample(matrix_view<T, memory_space> probs, vector_view<const float, memory_space> uniforms,
                  vector_view<std::int32_t, memory_space> tokens) {
    using V = std::remove_const_t<T>;
    constexpr const char* where = "specdec::thrust_backend::row_sample";
    detail::check_sample(where, probs, uniforms, tokens);
    const detail::row_chunks rc{probs.rows(), probs.cols(), detail::sample_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::sample, rc.rows, rc.cols, 1);
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      if (cuda_fits(rc.count(), 1536)) {  // the last block keeps 24 bytes per chunk in shared memory
        namespace cr = detail::cuda_rows;
        const index_t groups = (rc.count() + cr::sample_chunks_per_block - 1) / cr::sample_chunks_per_block;
        const std::size_t shared =
            static_cast<std::size_t>(rc.count()) * (sizeof(detail::chunk_mass) + sizeof(double)) + cr::shared_slack;
        cr::sample_kernel<V><<<cuda_grid(groups, rc.rows), cr::sample_threads, shared, stream()>>>(
            cuda_rows_of(matrix_view<const V, memory_space>(probs)), uniforms.data(), s.masses, cuda_tickets(rc.rows),
            tokens.data(), cuda_sink(where, "probs", s.faults));
        cuda_launched(where);
        if (!deferred_) raise_faults(where, "probs", probs, s.faults, rc.rows, uniforms);
        return;
      }
    }
#endif
    const auto p = detail::untagged(matrix_view<const V, memory_space>(probs));
    for_each(rc.items(), detail::mass_partial_fn<V>{p, rc, s.masses});
    for_each(rc.rows, detail::sample_fn<V>{p, rc, s.masses, s.doubles, uniforms.data(), tokens.data(), s.faults});
    raise_faults(where, "probs", probs, s.faults, rc.rows, uniforms);
  }

  /// See eigen::row_sample_residual.
  template <class T>
  void row_sample_residual(matrix_view<T, memory_space> p, std::type_identity_t<matrix_view<T, memory_space>> q,
                           vector_view<const float, memory_space> uniforms,
                           vector_view<std::int32_t, memory_space> tokens,
                           empty_residual fallback = empty_residual::sample_target) {
    using V = std::remove_const_t<T>;
    constexpr const char* where = "specdec::thrust_backend::row_sample_residual";
    detail::check_sample_residual(where, p, q, uniforms, tokens);
    const detail::row_chunks rc{p.rows(), p.cols(), detail::sample_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::sample_residual, rc.rows, rc.cols, 1);
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      if (cuda_fits(rc.count(), 512)) {  // the last block keeps 56 bytes per chunk in shared memory
        namespace cr = detail::cuda_rows;
        const index_t groups = (rc.count() + cr::sample_chunks_per_block - 1) / cr::sample_chunks_per_block;
        const std::size_t shared = static_cast<std::size_t>(rc.count()) *
                                       (sizeof(detail::residual_chunk_mass) + 2 * sizeof(double)) +
                                   cr::shared_slack;
        cr::sample_residual_kernel<V><<<cuda_grid(groups, rc.rows), cr::sample_threads, shared, stream()>>>(
            cuda_rows_of(matrix_view<const V, memory_space>(p)), cuda_rows_of(matrix_view<const V, memory_space>(q)),
            uniforms.data(), s.residual_masses, cuda_tickets(rc.rows), tokens.data(), fallback,
            cuda_sink(where, "p", s.faults, "q"));
        cuda_launched(where);
        if (!deferred_) raise_residual_faults(where, p, q, s.faults, rc.rows, uniforms);
        return;
      }
    }
#endif
    const auto pv = detail::untagged(matrix_view<const V, memory_space>(p));
    const auto qv = detail::untagged(matrix_view<const V, memory_space>(q));
    for_each(rc.items(), detail::residual_partial_fn<V>{pv, qv, rc, s.residual_masses});
    for_each(rc.rows, detail::sample_residual_fn<V>{pv, qv, rc, s.residual_masses, s.doubles, uniforms.data(),
                                                    tokens.data(), fallback, s.faults});
    raise_residual_faults(where, p, q, s.faults, rc.rows, uniforms);
  }

  /// See eigen::gather_rows.
  template <class T>
  void gather_rows(matrix_view<T, memory_space> x, vector_view<const std::int32_t, memory_space> row_ids,
                   matrix_view<std::remove_const_t<T>, memory_space> out) {
    using V = std::remove_const_t<T>;
    constexpr const char* where = "specdec::thrust_backend::gather_rows";
    detail::check_gather_rows(where, x, row_ids, out);
    const index_t n = row_ids.rows();
    if (n == 0) return;
    scratch_layout s = scratch(layout_kind::gather, n, 1, 1);
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      const index_t blocks = std::min<index_t>((x.cols() + 4 * detail::cuda_rows::threads - 1) / (4 * detail::cuda_rows::threads), 64);
      detail::cuda_rows::gather_rows_kernel<V><<<cuda_grid(std::max<index_t>(blocks, 1), n), detail::cuda_rows::threads, 0, stream()>>>(
          cuda_rows_of(matrix_view<const V, memory_space>(x)), row_ids.data(), n, out.data(), out.stride(0),
          cuda_sink(where, "row_ids", s.faults));
      cuda_launched(where);
      if (!deferred_) raise_index_faults(where, "row_ids", s.faults, n);
      return;
    }
#endif
    for_each(n, detail::gather_rows_fn<V>{detail::untagged(matrix_view<const V, memory_space>(x)), row_ids.data(),
                                          detail::untagged(out), s.faults});
    raise_index_faults(where, "row_ids", s.faults, n);
  }

  /// See eigen::gather_elements.
  template <class T>
  void gather_elements(matrix_view<T, memory_space> x, matrix_view<const std::int32_t, memory_space> column_ids,
                       matrix_view<std::remove_const_t<T>, memory_space> out) {
    using V = std::remove_const_t<T>;
    constexpr const char* where = "specdec::thrust_backend::gather_elements";
    detail::check_gather_elements(where, x, column_ids, out);
    if (x.rows() == 0) return;
    scratch_layout s = scratch(layout_kind::gather, x.rows(), 1, 1);
    for_each(x.rows(), detail::gather_elements_fn<V>{detail::untagged(matrix_view<const V, memory_space>(x)),
                                                     detail::untagged(column_ids), detail::untagged(out), s.faults});
    raise_index_faults(where, "column_ids", s.faults, x.rows());
  }

  /// See eigen::run_teams. Host systems run the teams in order on the calling thread; CUDA runs one
  /// block of 256 threads per team, all teams in one launch on the backend's stream (a team's scratch in
  /// shared memory when it fits in 48 KiB, else in the workspace), and reads the teams' faults back (one
  /// synchronisation) unless faults are deferred. Scratch: `team_workspace_bytes`.
  template <class Job>
  void run_teams(index_t count, const Job& job) {
    constexpr const char* where = "specdec::thrust_backend::run_teams";
    SPECDEC_EXPECTS(count >= 0 && count <= INT32_MAX, where, "count = ", count, "; expected 0 <= count <= 2^31 - 1");
    if (count == 0) return;
    const std::size_t stride = detail::team_scratch_stride(job.scratch_bytes());
    if constexpr (!is_cuda) {
      std::byte* scratch = team_scratch(1, stride).scratch;
      detail::serial_team team;
      for (index_t t = 0; t < count; ++t) {
        const detail::team_fault f = job(team, t, scratch);
        if (f.code != 0) detail::throw_team_fault(job.where, job.names[f.arg], f);
      }
    } else {
#if defined(__CUDACC__)
      const bool shared = stride <= detail::cuda_rows::team_shared_limit;
      const team_layout s = team_scratch(count, shared ? 0 : stride);
      detail::cuda_rows::team_kernel<Job>
          <<<static_cast<unsigned>(count), detail::cuda_rows::team_threads, shared ? stride : 0, stream()>>>(
              job, 0, shared ? nullptr : s.scratch, stride, s.faults, deferred_ ? cuda_record() : nullptr);
      cuda_launched(where);
      if (deferred_) return;
      std::vector<detail::team_fault> host(static_cast<std::size_t>(count));
      copy_to_host(s.faults, host.size(), host.data());
      for (const detail::team_fault& f : host)
        if (f.code != 0) detail::throw_team_fault(job.where, job.names[f.arg], f);
#endif
    }
  }
  /// Scratch bytes `run_teams` needs for `teams` teams of a job whose scratch_bytes() is `bytes_per_team`
  /// (a caller workspace must hold this besides what the primitives need).
  std::size_t team_workspace_bytes(index_t teams, std::size_t bytes_per_team) const {
    workspace_carver count;
    team_layout s{};
    std::size_t stride = detail::team_scratch_stride(bytes_per_team);
#if defined(__CUDACC__)
    if (is_cuda && stride <= detail::cuda_rows::team_shared_limit) stride = 0;  // in shared memory
#endif
    lay_out_teams(count, is_cuda ? teams : 1, stride, s);
    return count.bytes_used();
  }

  // ---- dense primitives of the drafter blocks (see specdec::dense_backend); eigen:: documents each ----
  // Plain kernels over for_each work items (a GEMM row tile, a row, a query-head pair): correct on
  // every system. On CUDA with SPECDEC_USE_CUBLAS (set by CMake's SPECDEC_ENABLE_CUDA, which links
  // cuBLAS) the GEMM goes to cublasSgemm; a tuned attention kernel is not built in.

  /// See eigen::gemm. One work item per (row, 64-column tile) of c; cublasSgemm on CUDA with
  /// SPECDEC_USE_CUBLAS when all three matrices have unit column stride.
  void gemm(matrix_view<const float, memory_space> a, transpose ta, matrix_view<const float, memory_space> b,
            transpose tb, matrix_view<float, memory_space> c, float alpha = 1.0f, float beta = 0.0f) {
    detail::check_gemm("specdec::thrust_backend::gemm", a, ta, b, tb, c);
    if (c.size() == 0) return;
#if defined(__CUDACC__) && defined(SPECDEC_USE_CUBLAS)
    if constexpr (std::is_same_v<System, thrust_system::cuda>) {
      if (a.stride(1) == 1 && b.stride(1) == 1 && c.stride(1) == 1 && a.size() > 0 && b.size() > 0) {
        cublas_gemm(a, ta, b, tb, c, alpha, beta);
        return;
      }
    }
#endif
    constexpr index_t tile = 64;
    const index_t tiles = (c.cols() + tile - 1) / tile;
    const index_t inner = ta == transpose::yes ? a.rows() : a.cols();
    for_each(c.rows() * tiles, detail::gemm_tile_fn<float>{detail::untagged(a), detail::untagged(b), detail::untagged(c),
                                                            ta == transpose::yes, tb == transpose::yes, inner, tiles,
                                                            tile, alpha, beta});
  }

  /// See eigen::rms_norm.
  void rms_norm(matrix_view<const float, memory_space> x, vector_view<const float, memory_space> weight, float eps,
                matrix_view<float, memory_space> out) {
    detail::check_rms_norm("specdec::thrust_backend::rms_norm", x, weight, eps, out);
    for_each(x.rows(), detail::rms_norm_fn<float>{detail::untagged(x), weight.data(), eps, detail::untagged(out)});
  }

  /// See eigen::rope.
  void rope(matrix_view<float, memory_space> x, vector_view<const std::int64_t, memory_space> positions, index_t head_dim,
            double theta) {
    detail::check_rope("specdec::thrust_backend::rope", x, positions, head_dim, theta);
    for_each(x.rows(), detail::rope_fn<float>{detail::untagged(x), positions.data(), head_dim, theta});
  }

  /// See eigen::silu_mul.
  void silu_mul(matrix_view<const float, memory_space> gate, matrix_view<const float, memory_space> up,
                matrix_view<float, memory_space> out) {
    detail::check_silu_mul("specdec::thrust_backend::silu_mul", gate, up, out);
    for_each(gate.rows(), detail::silu_mul_fn<float>{detail::untagged(gate), detail::untagged(up), detail::untagged(out)});
  }

  /// See eigen::add_rows.
  void add_rows(matrix_view<float, memory_space> y, matrix_view<const float, memory_space> x) {
    detail::check_add_rows("specdec::thrust_backend::add_rows", y, x);
    for_each(y.rows(), detail::add_rows_fn<float>{detail::untagged(y), detail::untagged(x)});
  }

  /// See eigen::add_rows (per-row weights).
  void add_rows(matrix_view<float, memory_space> y, matrix_view<const float, memory_space> x,
                vector_view<const float, memory_space> scale) {
    detail::check_add_rows("specdec::thrust_backend::add_rows", y, x);
    detail::check_length("specdec::thrust_backend::add_rows", "scale", scale, y.rows(), "one weight per row of y");
    for_each(y.rows(), detail::add_rows_fn<float>{detail::untagged(y), detail::untagged(x), scale.data()});
  }

  /// See eigen::attention (boolean mask). One work item per (query, head); the fault flags are read
  /// back once (the call's one synchronisation on CUDA).
  void attention(matrix_view<const float, memory_space> q, matrix_view<const float, memory_space> k,
                 matrix_view<const float, memory_space> v, const attention_heads& heads,
                 matrix_view<const std::uint8_t, memory_space> allowed, matrix_view<float, memory_space> out) {
    constexpr const char* where = "specdec::thrust_backend::attention";
    detail::check_attention(where, q, k, v, heads, allowed, "allowed", out);
    run_attention(where, detail::attention_fn<float>{detail::untagged(q), detail::untagged(k), detail::untagged(v),
                                                      heads, detail::untagged(allowed), {}, detail::untagged(out), nullptr});
  }

  /// See eigen::attention (additive mask).
  void attention(matrix_view<const float, memory_space> q, matrix_view<const float, memory_space> k,
                 matrix_view<const float, memory_space> v, const attention_heads& heads,
                 matrix_view<const float, memory_space> additive_mask, matrix_view<float, memory_space> out) {
    constexpr const char* where = "specdec::thrust_backend::attention";
    detail::check_attention(where, q, k, v, heads, additive_mask, "additive_mask", out);
    run_attention(where, detail::attention_fn<float>{detail::untagged(q), detail::untagged(k), detail::untagged(v),
                                                      heads, {}, detail::untagged(additive_mask), detail::untagged(out),
                                                      nullptr});
  }

 private:
  void run_attention(const char* where, detail::attention_fn<float> f) {
    const index_t items = f.q.rows() * f.shape.heads;
    if (items == 0) return;
    scratch_layout s = scratch(layout_kind::gather, items, 1, 1);
    f.faults = s.faults;
    for_each(items, f);
    if (fold_deferred(where, "q", s.faults, items)) return;
    const std::vector<detail::fault> host = fetch_faults(s.faults, items);
    for (index_t item = 0; item < items; ++item)
      if (host[static_cast<std::size_t>(item)] != detail::fault::none)
        detail::throw_attention_fault(where, item / f.shape.heads, host[static_cast<std::size_t>(item)]);
  }
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

  /// Team jobs' scratch: each team's fault, and `stride` bytes per team.
  struct team_layout {
    detail::team_fault* faults;
    std::byte* scratch;
  };
  static void lay_out_teams(workspace_carver& w, index_t teams, std::size_t stride, team_layout& s) {
    s.faults = w.take<detail::team_fault>(static_cast<std::size_t>(teams), "team faults");
    s.scratch = w.take<std::byte>(static_cast<std::size_t>(teams) * stride, "team scratch");
  }
  team_layout team_scratch(index_t teams, std::size_t stride) {
    workspace_carver count;
    team_layout s{};
    lay_out_teams(count, teams, stride, s);
    workspace_carver carve = memory_for(count.bytes_used());
    lay_out_teams(carve, teams, stride, s);
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

  template <class V, class T>
  void argmax_impl(const char* where, const matrix_view<T, memory_space>& logits, std::int32_t* index, V* value,
                   const vector_view<V, memory_space>* max_out) {
    if (max_out != nullptr) detail::check_row_reduction(where, logits, *max_out, "max");
    const detail::row_chunks rc{logits.rows(), logits.cols(), reduce_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::argmax, rc.rows, rc.cols, 1);
    auto* partial = static_cast<detail::argmax_result<V>*>(s.argmax);
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
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
    const auto x = detail::untagged(matrix_view<const V, memory_space>(logits));
    for_each(rc.items(), detail::argmax_partial_fn<V>{x, rc, partial});
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
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
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
    const auto x = detail::untagged(matrix_view<const V, memory_space>(logits));
    for_each(rc.items(), detail::lse_partial_fn<V>{x, rc, inv_t, partial});
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
    const auto x = detail::untagged(matrix_view<const V, memory_space>(logits));
    if (temperature == V(0)) {
      scratch_layout s = scratch(layout_kind::logsumexp, rc.rows, rc.cols, 1);
      auto* partial = static_cast<detail::argmax_result<V>*>(s.argmax);
      for_each(rc.items(), detail::argmax_partial_fn<V>{x, rc, partial});
      for_each(rc.rows, detail::argmax_combine_fn<V>{rc, partial, s.topk_indices, nullptr, s.faults});
      raise_faults(where, "logits", logits, s.faults, rc.rows);
      for_each(rc.items(), detail::one_hot_fn<V, Log>{detail::untagged(out), rc, s.topk_indices});
      return;
    }
    const V inv_t = V(1) / temperature;
    lse_impl<V>(where, logits, inv_t, nullptr, false);
#if defined(__CUDACC__)
    if constexpr (is_cuda) {
      if (cuda_fits(rc.count(), 2048)) {
        detail::cuda_rows::normalise_kernel<V, Log><<<cuda_grid(rc.count(), rc.rows), detail::cuda_rows::threads, 0, stream()>>>(
            cuda_rows_of(matrix_view<const V, memory_space>(logits)), out.data(), out.stride(0), inv_t,
            static_cast<const detail::lse_partial<V>*>(last_stats_.row_stats), last_stats_.faults);
        cuda_launched(where);
        return;
      }
    }
#endif
    for_each(rc.items(), detail::normalise_fn<V, Log>{x, detail::untagged(out), rc, inv_t,
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
#if defined(__CUDACC__)
    if constexpr (is_cuda && std::is_same_v<V, float>) {
      if (k <= detail::cuda_rows::max_topk && cuda_fits(rc.count(), detail::cuda_rows::max_topk_slices)) {
        detail::cuda_rows::topk_kernel<float><<<cuda_grid(rc.count(), rc.rows), detail::cuda_rows::threads,
                                         static_cast<std::size_t>(rc.count()) * sizeof(detail::lse_partial<float>) + detail::cuda_rows::shared_slack,
                                         stream()>>>(
            cuda_rows_of(matrix_view<const V, memory_space>(logits)), k, k, inv_t, cand_values, s.topk_indices, stats,
            cuda_tickets(rc.rows), values.data(), values.stride(0), indices.data(), indices.stride(0), lse,
            cuda_sink(where, "logits", s.faults));
        cuda_launched(where);
        if (!deferred_) raise_faults(where, "logits", logits, s.faults, rc.rows);
        return;
      }
    }
#endif
    const auto x = detail::untagged(matrix_view<const V, memory_space>(logits));
    for_each(rc.items(), detail::topk_partial_fn<V>{x, rc, k, slot, small_k, inv_t, cand_values, s.topk_indices, stats});
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

static_assert(backend<thrust_backend<thrust_system::cpp>>);
static_assert(team_backend<thrust_backend<thrust_system::cpp>>);

}  // namespace specdec::inline SPECDEC_ISA
