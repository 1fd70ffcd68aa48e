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
#include <specdec/backend/detail/thrust_runtime.hpp>
#include <specdec/backend/thrust_system.hpp>
#include <specdec/config.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/workspace.hpp>

namespace specdec::inline SPECDEC_ISA {

/// The Thrust backend on `System` (see thrust_system). Models specdec::backend with
/// `memory_space = System::memory_space`.
template <class System = thrust_system::device>
class thrust_backend : private detail::thrust_runtime<System> {
  using runtime = detail::thrust_runtime<System>;
  // The machinery of detail/thrust_runtime.hpp, by name (a dependent base's members are not found
  // by unqualified lookup otherwise).
  using runtime::reduce_chunk, runtime::small_k, runtime::layout_kinds, runtime::topk_slot, runtime::lay_out,
      runtime::scratch, runtime::lay_out_teams, runtime::team_scratch, runtime::for_each, runtime::is_cuda,
      runtime::copy_from_host, runtime::copy_to_host, runtime::fetch_faults, runtime::raise_row, runtime::raise_uniform,
      runtime::fold_deferred, runtime::raise_residual_faults, runtime::raise_faults, runtime::raise_index_faults,
      runtime::arena_, runtime::tickets_, runtime::stream_, runtime::deferred_, runtime::record_, runtime::record_host_,
      runtime::external_, runtime::external_bytes_, runtime::last_stats_, runtime::cublas_, runtime::argmax_impl,
      runtime::lse_impl, runtime::normalise, runtime::topk_impl;
  using typename runtime::layout_kind;
  using typename runtime::scratch_layout;
  using typename runtime::team_layout;
#if defined(__CUDACC__)
  using runtime::cuda_check, runtime::cuda_fits, runtime::cuda_grid, runtime::cuda_rows_of, runtime::cuda_tickets,
      runtime::cuda_record, runtime::cuda_sink, runtime::cuda_launched;
#if defined(SPECDEC_USE_CUBLAS)
  using runtime::cublas_gemm;
#endif
#endif

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
    buffer(const buffer&) = default;
    buffer& operator=(const buffer&) = default;
    // Thrust's device vectors do not declare their moves noexcept, so a std::vector of buffers would
    // copy them when it grows and free the originals under the caller's views. A swap moves the
    // allocation itself (the allocators are stateless) and cannot throw.
    buffer(buffer&& other) noexcept { data_.swap(other.data_); }
    buffer& operator=(buffer&& other) noexcept {
      data_.swap(other.data_);
      return *this;
    }
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
      if (got.code >= detail::first_team_fault_code) {  // a team job's: its module describes it (team.hpp)
        const auto* where = reinterpret_cast<const char*>(got.where);
        const auto* name = reinterpret_cast<const char*>(got.name);
        const detail::team_fault f{got.code, 0, got.row, got.column, got.limit, got.value};
        if (got.describe != 0) reinterpret_cast<detail::fault_describer>(static_cast<std::uintptr_t>(got.describe))(where, name, f);
        detail::throw_team_fault(where, name, f);
      }
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
  void row_max(matrix_view<T, memory_space> logits, vector_view<compute_t<T>, memory_space> max) {
    this->template argmax_impl<compute_t<T>>("specdec::thrust_backend::row_max", logits, nullptr, max.data(), &max);
  }

  /// See eigen::row_argmax.
  template <class T>
  void row_argmax(matrix_view<T, memory_space> logits, vector_view<std::int32_t, memory_space> index,
                  vector_view<compute_t<T>, memory_space> value = {}) {
    constexpr const char* where = "specdec::thrust_backend::row_argmax";
    detail::check_row_reduction(where, logits, index, "index");
    const bool with_value = value.data() != nullptr || !value.empty();
    if (with_value) {
      detail::check_length(where, "value", value, logits.rows(), "one per row");
      detail::check_apart(where, "value", value, "logits", logits);
      detail::check_apart(where, "value", value, "index", index);
    }
    this->template argmax_impl<compute_t<T>>(where, logits, index.data(), value.data(), nullptr);
  }

  /// See eigen::row_topk.
  template <class T>
  void row_topk(matrix_view<T, memory_space> logits, index_t k,
                matrix_view<compute_t<T>, memory_space> values,
                matrix_view<std::int32_t, memory_space> indices) {
    constexpr const char* where = "specdec::thrust_backend::row_topk";
    detail::check_topk(where, logits, k, values, indices);
    this->template topk_impl<compute_t<T>>(where, logits, k, values, indices, nullptr, compute_t<T>(0));
  }

  /// See eigen::row_topk_logsumexp.
  template <class T>
  void row_topk_logsumexp(matrix_view<T, memory_space> logits, index_t k, compute_t<T> temperature,
                          matrix_view<compute_t<T>, memory_space> values,
                          matrix_view<std::int32_t, memory_space> indices,
                          vector_view<compute_t<T>, memory_space> lse) {
    constexpr const char* where = "specdec::thrust_backend::row_topk_logsumexp";
    detail::check_topk(where, logits, k, values, indices);
    detail::check_length(where, "lse", lse, logits.rows(), "one entry per row of logits");
    detail::check_apart(where, "lse", lse, "logits", logits);
    detail::check_apart(where, "lse", lse, "values", values);
    detail::check_apart(where, "lse", lse, "indices", indices);
    detail::check_temperature(where, temperature, false);
    this->template topk_impl<compute_t<T>>(where, logits, k, values, indices, lse.data(),
                                      compute_t<T>(1) / temperature);
  }

  /// See eigen::row_logsumexp.
  template <class T>
  void row_logsumexp(matrix_view<T, memory_space> logits, compute_t<T> temperature,
                     vector_view<compute_t<T>, memory_space> lse) {
    using V = compute_t<T>;
    constexpr const char* where = "specdec::thrust_backend::row_logsumexp";
    detail::check_row_reduction(where, logits, lse, "lse");
    detail::check_temperature(where, temperature, false);
    this->template lse_impl<V>(where, logits, V(1) / temperature, lse.data(), true);
  }

  /// See eigen::row_softmax.
  template <class T>
  void row_softmax(matrix_view<T, memory_space> logits, compute_t<T> temperature,
                   matrix_view<compute_t<T>, memory_space> out) {
    this->template normalise<false, compute_t<T>>("specdec::thrust_backend::row_softmax", logits, temperature, out);
  }

  /// See eigen::row_softmax_stats (host memory spaces only: a device caller downloads whole rows).
  template <class T>
    requires std::is_same_v<typename System::memory_space, host_space>
  detail::softmax_stats<T> row_softmax_stats(matrix_view<const T, memory_space> logits, T temperature) {
    constexpr const char* where = "specdec::thrust_backend::row_softmax";
    SPECDEC_EXPECTS(logits.rows() == 1, where, "row_softmax_stats takes one row; got ", logits.rows(), " rows");
    detail::check_row_matrix(where, "logits", logits);
    detail::check_temperature(where, temperature, false);
    this->template lse_impl<T>(where, logits, T(1) / temperature, nullptr, false);
    const auto stats = static_cast<const detail::lse_partial<T>*>(last_stats_.row_stats)[0];
    return {stats.max, stats.sum};
  }

  /// See eigen::row_log_softmax.
  template <class T>
  void row_log_softmax(matrix_view<T, memory_space> logits, compute_t<T> temperature,
                       matrix_view<compute_t<T>, memory_space> out) {
    this->template normalise<true, compute_t<T>>("specdec::thrust_backend::row_log_softmax", logits, temperature, out);
  }

  /// See eigen::row_sample. Same canonical order, hence the same tokens as every other backend.
  template <class T>
  void row_sample(matrix_view<T, memory_space> probs, vector_view<const float, memory_space> uniforms,
                  vector_view<std::int32_t, memory_space> tokens) {
    using V = std::remove_cv_t<T>;  // the element type: float, double, or a 16-bit type (the items below)
    constexpr const char* where = "specdec::thrust_backend::row_sample";
    detail::check_sample(where, probs, uniforms, tokens);
    const detail::row_chunks rc{probs.rows(), probs.cols(), detail::sample_chunk};
    if (rc.rows == 0) return;
    scratch_layout s = scratch(layout_kind::sample, rc.rows, rc.cols, 1);
#if defined(__CUDACC__)
    if constexpr (is_cuda && !is_half_v<V>) {
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
  /// block per team (256 threads, 1024 for jobs with many row-pass items: cuda_teams.cuh), all teams in
  /// one launch on the backend's stream (a team's scratch in
  /// shared memory when it fits in 48 KiB, else in the workspace; its wide scratch always in the
  /// workspace), and reads the teams' faults back (one synchronisation) unless faults are deferred.
  /// Scratch: `team_workspace_bytes`.
  template <class Job>
  void run_teams(index_t count, const Job& job) {
    constexpr const char* where = "specdec::thrust_backend::run_teams";
    SPECDEC_EXPECTS(count >= 0 && count <= INT32_MAX, where, "count = ", count, "; expected 0 <= count <= 2^31 - 1");
    if (count == 0) return;
    const std::size_t stride = detail::team_scratch_stride(job.scratch_bytes());
    const std::size_t wide_stride = detail::team_wide_stride(job);
    if constexpr (!is_cuda) {
      const team_layout s = team_scratch(1, stride, wide_stride);
      detail::serial_team team;
      team.wide = s.wide;
      for (index_t t = 0; t < count; ++t) {
        const detail::team_fault f = job(team, t, s.scratch);
        if (f.code != 0) detail::throw_job_fault(job, f);
      }
    } else {
#if defined(__CUDACC__)
      const bool shared = stride <= detail::cuda_rows::team_shared_limit;
      const team_layout s = team_scratch(count, shared ? 0 : stride, wide_stride);
      std::byte* const block_scratch = shared ? nullptr : s.scratch;
      detail::cuda_rows::fault_record* const record = deferred_ ? cuda_record() : nullptr;
      bool wide_team = false;
      if constexpr (requires { job.row_pass_items(); }) {  // only such jobs instantiate the wide kernel
        wide_team = job.row_pass_items() >= detail::cuda_rows::wide_team_items;
        if (wide_team)
          detail::cuda_rows::team_kernel<Job, detail::cuda_rows::wide_team_threads>
              <<<static_cast<unsigned>(count), detail::cuda_rows::wide_team_threads, shared ? stride : 0, stream()>>>(
                  job, 0, block_scratch, stride, s.wide, wide_stride, s.faults, record, detail::describer_of<Job>());
      }
      if (!wide_team)
        detail::cuda_rows::team_kernel<Job, detail::cuda_rows::team_threads>
            <<<static_cast<unsigned>(count), detail::cuda_rows::team_threads, shared ? stride : 0, stream()>>>(
                job, 0, block_scratch, stride, s.wide, wide_stride, s.faults, record, detail::describer_of<Job>());
      cuda_launched(where);
      if (deferred_) return;
      std::vector<detail::team_fault> host(static_cast<std::size_t>(count));
      copy_to_host(s.faults, host.size(), host.data());
      for (const detail::team_fault& f : host)
        if (f.code != 0) detail::throw_job_fault(job, f);
#endif
    }
  }
  /// Scratch bytes `run_teams` needs for `teams` teams of a job whose scratch_bytes() is `bytes_per_team`
  /// and whose wide_scratch_bytes() is `wide_bytes_per_team` (a caller workspace must hold this besides
  /// what the primitives need).
  std::size_t team_workspace_bytes(index_t teams, std::size_t bytes_per_team, std::size_t wide_bytes_per_team = 0) const {
    workspace_carver count;
    team_layout s{};
    std::size_t stride = detail::team_scratch_stride(bytes_per_team);
#if defined(__CUDACC__)
    if (is_cuda && stride <= detail::cuda_rows::team_shared_limit) stride = 0;  // in shared memory
#endif
    lay_out_teams(count, is_cuda ? teams : 1, stride, detail::team_scratch_stride(wide_bytes_per_team), s);
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
    detail::check_add_rows("specdec::thrust_backend::add_rows", y, x, scale);
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
};

static_assert(backend<thrust_backend<thrust_system::cpp>>);
static_assert(team_backend<thrust_backend<thrust_system::cpp>>);

}  // namespace specdec::inline SPECDEC_ISA
