// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief One-launch CUDA kernels of the row primitives of `specdec::thrust_backend<thrust_system::cuda>`.
///
/// Layout of every reduction: a grid of (slice, row) blocks, each slice `slice` = 4096 entries of one
/// row read with 16-byte loads by `threads` threads. A block reduces its slice to the same partial the
/// host systems compute per chunk (argmax_result, lse_partial, a sorted top-k list), and the block
/// that finishes a row last (a ticket per row) combines the row's partials with the shared combine
/// functors of thrust_functors.hpp. One launch, no host synchronisation, and a slice size that does not
/// depend on the GPU model, so integer outputs never do either.
///
/// Sampling uses the same ticket over (16-chunk group, row) blocks: the chunk masses are the canonical
/// ones of sample_kernels.hpp, lane l of a chunk summed by thread l of an 8-thread group and the lanes
/// combined in the canonical tree, so the masses, and hence the tokens the row's last block draws, are
/// bit-identical to every host backend's.
///
/// This header holds what the kernels share and the reductions (argmax, log-sum-exp, softmax, gathers);
/// cuda_topk.cuh and cuda_sample.cuh the rest. Only translation units compiled by nvcc include them
/// (thrust.hpp does so for the CUDA system).
#pragma once

#if !defined(__CUDACC__)
#error "specdec/backend/detail/cuda_rows.cuh is CUDA code: include it from translation units nvcc compiles"
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/backend/detail/thrust_functors.hpp>
#include <specdec/config.hpp>

namespace specdec::detail::inline SPECDEC_ISA::cuda_rows {

inline constexpr int threads = 256;               ///< threads of a reduction block
inline constexpr index_t slice = 4096;            ///< entries of a row per reduction block
inline constexpr int per_thread = slice / threads;  // 16
inline constexpr int sample_threads = 128;        ///< threads of a sampling block (16 chunks, 8 lanes each)
inline constexpr index_t max_topk = 256;          ///< largest k of the one-launch top-k
/// Dynamic shared memory is requested with this many spare bytes: the compiler may read a small struct
/// of partials (12 bytes) with one 16-byte load.
inline constexpr std::size_t shared_slack = 16;
inline constexpr int max_grid_rows = 65535;       ///< grid.y limit; larger batches loop

static_assert(per_thread * threads == slice);

/// A device-side record of the first data fault a deferred-mode call found: which primitive
/// (`where`, `name` are the host addresses of string literals, stored as integers), which row, which
/// fault. Zero means none. Read by thrust_backend<cuda>::check_faults().
/// Team jobs' faults (codes >= 64, backend/detail/team.hpp) also fill `column`, `limit`, `value`.
struct fault_record {
  std::int32_t code;
  std::int32_t pad;
  std::int64_t row;
  std::uint64_t where;
  std::uint64_t name;
  std::int64_t column;
  std::int64_t limit;
  double value;
  std::uint64_t describe;  ///< a team job's fault_describer (its module's messages), 0 for a row fault
};

/// Where a kernel's per-row faults go: `faults[r]` always; in deferred mode also the sticky record.
/// A fault code of 256 + f (residual sampling) is fault f of the second operand, `second`.
struct fault_sink {
  fault* faults;
  fault_record* record;  // null in eager mode
  std::uint64_t where;
  std::uint64_t name;
  std::uint64_t second;
  std::uint64_t uniforms;
  __device__ void put(index_t r, fault f) const {
    faults[r] = f;
    if (record == nullptr || f == fault::none) return;
    std::int32_t code = static_cast<std::int32_t>(f);
    std::uint64_t named = name;
    if (code >= 256) {
      code -= 256;
      named = second;
    } else if (f == fault::uniform_out_of_range) {
      named = uniforms;
    }
    if (atomicCAS(&record->code, 0, code) == 0) {
      record->row = r;
      record->where = where;
      record->name = named;
    }
  }
};

/// Folds per-row faults written by a generic (for_each) primitive into the sticky record. (Kernels
/// here are templates so that a header included by several translation units defines them once.)
template <int = 0>
__global__ void fold_faults_kernel(const fault* faults, index_t rows, fault_sink sink) {
  for (index_t r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
    if (faults[r] != fault::none) sink.put(r, faults[r]);
}

// ---- loads ------------------------------------------------------------------------------------------
/// The entries a thread of a reduction block holds: entry e of thread t is at offset
/// (e / w * threads + t) * w + e % w of the slice (w = 16 / sizeof(T)): each load instruction of a warp
/// reads 512 contiguous bytes. Entries past the row's end read as -inf.
template <class T>
struct slice_entries {
  static constexpr int w = 16 / static_cast<int>(sizeof(T));
  T v[per_thread];
  __device__ static index_t offset(int e) { return (index_t(e / w) * threads + threadIdx.x) * w + e % w; }
  __device__ void load(const T* row_slice, index_t len) {
    struct alignas(16) pack {
      T x[w];
    };
    if (len == slice && reinterpret_cast<std::uintptr_t>(row_slice) % 16 == 0) {
      const pack* p = reinterpret_cast<const pack*>(row_slice);
#pragma unroll
      for (int i = 0; i < per_thread / w; ++i) {
        const pack q = p[i * threads + threadIdx.x];
#pragma unroll
        for (int e = 0; e < w; ++e) v[i * w + e] = q.x[e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < per_thread; ++e) {
        const index_t j = offset(e);
        v[e] = j < len ? row_slice[j] : negative_infinity<T>();
      }
    }
  }
};

// ---- block reductions -------------------------------------------------------------------------------
template <class T, class Op>
__device__ T block_reduce(T x, Op op, T* shared /* [threads / 32] */) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, d));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = shared[0];
  for (int i = 1; i < static_cast<int>(blockDim.x / 32); ++i) x = op(x, shared[i]);
  return x;
}

struct max_op {
  template <class T>
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};
struct min_op {
  template <class T>
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct sum_op {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct or_op {
  __device__ int operator()(int a, int b) const { return a | b; }
};

/// True in every thread of the block that completes row r's last slice. The partials the other
/// blocks wrote are then visible to it; the ticket is reset, so the next launch (or graph replay)
/// starts from zero without a memset.
__device__ inline bool last_block_of_row(unsigned* tickets, index_t r, unsigned blocks_per_row) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned t = atomicAdd(tickets + r, 1u);
    last = t == blocks_per_row - 1;
    if (last) tickets[r] = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

/// Copies `count` partials of another block into shared memory through L2 (never a stale L1 line).
template <class P>
__device__ void copy_partials(const P* src, index_t count, P* dst) {
  static_assert(sizeof(P) % 4 == 0);
  const auto* s = reinterpret_cast<const unsigned*>(src);
  auto* d = reinterpret_cast<unsigned*>(dst);
  const index_t words = count * index_t(sizeof(P) / 4);
  for (index_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = __ldcg(s + i);
  __syncthreads();
}

/// Row-major rows as the kernels see them.
template <class T>
struct rows_view {
  const T* data;
  index_t rows;
  index_t cols;
  index_t stride;
  __device__ const T* row(index_t r) const { return data + r * stride; }
};

__device__ inline index_t slices_of(index_t cols) { return (cols + slice - 1) / slice; }
/// Entries of the slice that starts at column `begin` (the last slice of a row may be short).
__device__ inline index_t slice_length(index_t cols, index_t begin) { return cols - begin < slice ? cols - begin : slice; }

/// A slice's (max, sum of exp((x - max) * inv_t), NaN seen) over the block, as chunk_logsumexp gives a
/// chunk's; the sum is 0 when inv_t is 0 (not wanted) or the maximum is not finite.
template <class T>
__device__ lse_partial<T> slice_statistics(const slice_entries<T>& in, T inv_t, T* reduce_scratch /* [threads / 32] */,
                                           int* flag_scratch /* [threads / 32] */) {
  T m = negative_infinity<T>();
  int nan = 0;
#pragma unroll
  for (int e = 0; e < per_thread; ++e) {
    nan |= in.v[e] != in.v[e];
    m = in.v[e] > m ? in.v[e] : m;
  }
  m = block_reduce(m, max_op{}, reduce_scratch);
  nan = block_reduce(nan, or_op{}, flag_scratch);
  T sum = T(0);
  if (inv_t != T(0) && m != negative_infinity<T>() && m != -negative_infinity<T>() && !nan) {
#pragma unroll
    for (int e = 0; e < per_thread; ++e) sum += exp_((in.v[e] - m) * inv_t);
    sum = block_reduce(sum, sum_op{}, reduce_scratch);
  }
  return {m, sum, nan != 0};
}

// ---- argmax / max -------------------------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(threads) argmax_kernel(rows_view<T> x, argmax_result<T>* partials,
                                                         unsigned* tickets, std::int32_t* index, T* value,
                                                         fault_sink sink) {
  __shared__ T best_value[threads / 32];
  __shared__ index_t best_index[threads / 32];
  __shared__ int nan_seen[threads / 32];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  const index_t slices = slices_of(x.cols);
  const index_t s = blockIdx.x;
  for (index_t r = blockIdx.y; r < x.rows; r += gridDim.y) {
    const index_t begin = s * slice, len = slice_length(x.cols, begin);
    slice_entries<T> in;
    in.load(x.row(r) + begin, len);
    T bv = negative_infinity<T>();
    index_t bi = begin;  // an all -inf slice reports its first entry, as argmax_row does
    int nan = 0;
#pragma unroll
    for (int e = 0; e < per_thread; ++e) {
      const T v = in.v[e];
      const index_t j = begin + slice_entries<T>::offset(e);
      nan |= v != v;
      if (v > bv || (v == bv && j < bi && v != negative_infinity<T>())) {
        bv = v;
        bi = j;
      }
    }
    // Warp then block: (value descending, index ascending), exact whatever the order.
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
      const T ov = __shfl_xor_sync(0xffffffffu, bv, d);
      const index_t oi = __shfl_xor_sync(0xffffffffu, bi, d);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    nan = __any_sync(0xffffffffu, nan);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) {
      best_value[warp] = bv;
      best_index[warp] = bi;
      nan_seen[warp] = nan;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 1; i < threads / 32; ++i) {
        if (best_value[i] > bv || (best_value[i] == bv && best_index[i] < bi)) {
          bv = best_value[i];
          bi = best_index[i];
        }
        nan |= nan_seen[i];
      }
      partials[r * slices + s] = argmax_result<T>{bv, bi, nan ? fault::nan : fault::none};
    }
    if (last_block_of_row(tickets, r, static_cast<unsigned>(slices))) {
      auto* p = reinterpret_cast<argmax_result<T>*>(dynamic_shared);
      copy_partials(partials + r * slices, slices, p);
      if (threadIdx.x == 0) {
        fault f = fault::none;
        argmax_combine_fn<T>{row_chunks{1, x.cols, slice}, p, index != nullptr ? index + r : nullptr,
                             value != nullptr ? value + r : nullptr, &f}(0);
        sink.put(r, f);
      }
    }
  }
}

// ---- log-sum-exp (also the statistics of softmax) ------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(threads) logsumexp_kernel(rows_view<T> x, T inv_t, lse_partial<T>* partials,
                                                            unsigned* tickets, lse_partial<T>* row_stats, T* lse,
                                                            bool masked_rows_allowed, fault_sink sink) {
  __shared__ T reduce_scratch[threads / 32];
  __shared__ int flag_scratch[threads / 32];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  const index_t slices = slices_of(x.cols);
  const index_t s = blockIdx.x;
  for (index_t r = blockIdx.y; r < x.rows; r += gridDim.y) {
    const index_t begin = s * slice, len = slice_length(x.cols, begin);
    slice_entries<T> in;
    in.load(x.row(r) + begin, len);
    const lse_partial<T> stats = slice_statistics(in, inv_t, reduce_scratch, flag_scratch);
    if (threadIdx.x == 0) partials[r * slices + s] = stats;
    if (last_block_of_row(tickets, r, static_cast<unsigned>(slices))) {
      auto* p = reinterpret_cast<lse_partial<T>*>(dynamic_shared);
      copy_partials(partials + r * slices, slices, p);
      if (threadIdx.x == 0) {
        fault f = fault::none;
        lse_combine_fn<T>{row_chunks{1, x.cols, slice}, p,
                          inv_t,
                          row_stats != nullptr ? row_stats + r : nullptr,
                          lse != nullptr ? lse + r : nullptr,
                          masked_rows_allowed,
                          &f}(0);
        sink.put(r, f);
      }
    }
  }
}

/// softmax / log-softmax once the row statistics are known: one thread per 16 bytes.
template <class T, bool Log>
__global__ void __launch_bounds__(threads) normalise_kernel(rows_view<T> x, T* out, index_t out_stride, T inv_t,
                                                            const lse_partial<T>* row_stats, const fault* faults) {
  const index_t slices = slices_of(x.cols);
  const index_t s = blockIdx.x;
  for (index_t r = blockIdx.y; r < x.rows; r += gridDim.y) {
    if (faults[r] != fault::none) continue;  // the call raises; nothing meaningful to write
    const lse_partial<T> st = row_stats[r];
    const T shift = Log ? log_(st.sum) : T(1) / st.sum;
    const index_t begin = s * slice, len = slice_length(x.cols, begin);
    slice_entries<T> in;
    in.load(x.row(r) + begin, len);
    T* y = out + r * out_stride + begin;
    constexpr int w = slice_entries<T>::w;
    struct alignas(16) pack {
      T x[w];
    };
    T o[per_thread];
#pragma unroll
    for (int e = 0; e < per_thread; ++e)
      o[e] = Log ? (in.v[e] - st.max) * inv_t - shift : at_most_one(exp_((in.v[e] - st.max) * inv_t) * shift);
    if (len == slice && reinterpret_cast<std::uintptr_t>(y) % 16 == 0) {
#pragma unroll
      for (int i = 0; i < per_thread / w; ++i) {
        pack q;
#pragma unroll
        for (int e = 0; e < w; ++e) q.x[e] = o[i * w + e];
        __stcs(reinterpret_cast<float4*>(y) + (i * threads + threadIdx.x) * (16 / sizeof(float4)),
               *reinterpret_cast<const float4*>(&q));
      }
    } else {
#pragma unroll
      for (int e = 0; e < per_thread; ++e) {
        const index_t j = slice_entries<T>::offset(e);
        if (j < len) y[j] = o[e];
      }
    }
  }
}

// ---- gathers -------------------------------------------------------------------------------------------
/// out[i] = x[row_ids[i]]: a grid of (column block, output row) blocks, coalesced copies.
template <class T>
__global__ void __launch_bounds__(threads) gather_rows_kernel(rows_view<T> x, const std::int32_t* row_ids, index_t n,
                                                              T* out, index_t out_stride, fault_sink sink) {
  for (index_t i = blockIdx.y; i < n; i += gridDim.y) {
    const std::int32_t id = row_ids[i];
    const bool ok = id >= 0 && id < x.rows;
    if (blockIdx.x == 0 && threadIdx.x == 0) sink.put(i, ok ? fault::none : fault::index_out_of_range);
    if (!ok) continue;
    const T* src = x.row(id);
    T* dst = out + i * out_stride;
    for (index_t j = blockIdx.x * index_t(blockDim.x) + threadIdx.x; j < x.cols; j += index_t(gridDim.x) * blockDim.x)
      dst[j] = src[j];
  }
}

}  // namespace specdec::detail::inline SPECDEC_ISA::cuda_rows
