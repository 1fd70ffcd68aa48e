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
/// Only translation units compiled by nvcc include this (thrust.hpp does so for the CUDA system).
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
struct fault_record {
  std::int32_t code;
  std::int32_t pad;
  std::int64_t row;
  std::uint64_t where;
  std::uint64_t name;
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
    const index_t begin = s * slice;
    const index_t len = x.cols - begin < slice ? x.cols - begin : slice;
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
    const index_t begin = s * slice;
    const index_t len = x.cols - begin < slice ? x.cols - begin : slice;
    slice_entries<T> in;
    in.load(x.row(r) + begin, len);
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
    if (m != negative_infinity<T>() && m != -negative_infinity<T>() && !nan) {
#pragma unroll
      for (int e = 0; e < per_thread; ++e) sum += exp_((in.v[e] - m) * inv_t);
      sum = block_reduce(sum, sum_op{}, reduce_scratch);
    }
    if (threadIdx.x == 0) partials[r * slices + s] = lse_partial<T>{m, sum, nan != 0};
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
    const index_t begin = s * slice;
    const index_t len = x.cols - begin < slice ? x.cols - begin : slice;
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
      o[e] = Log ? (in.v[e] - st.max) * inv_t - shift : exp_((in.v[e] - st.max) * inv_t) * shift;
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

// ---- top-k ---------------------------------------------------------------------------------------------
/// A total order of (value, column) pairs as one unsigned 64-bit key: larger key = ranks before
/// (value descending, then column ascending), exactly ranks_before's order for non-NaN floats
/// (-0 and +0 compare equal there, so both map to +0's key). Key 0 is below every real entry.
__device__ inline std::uint64_t rank_key(float v, std::int32_t column) {
  std::uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (std::uint64_t(u) << 32) | std::uint64_t(0x7fffffffu - static_cast<std::uint32_t>(column));
}
__device__ inline float in_value(std::uint64_t key) {
  std::uint32_t u = static_cast<std::uint32_t>(key >> 32);
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  return __uint_as_float(u);
}
__device__ inline std::int32_t key_column(std::uint64_t key) {
  return static_cast<std::int32_t>(0x7fffffffu - static_cast<std::uint32_t>(key & 0xffffffffu));
}

/// Shared memory of one block-wide selection.
struct select_scratch {
  unsigned hist[256];
  unsigned long long chosen[max_topk];
  unsigned count;
  unsigned long long prefix;
  unsigned long long mask;
  unsigned remaining;
  int done;
};

/// The `kc` largest of the n unique keys that `key(i)` yields for i in [0, n), written sorted
/// (descending) to s.chosen[0, kc). Radix selection on 8-bit digits from the top, stopping as soon as
/// the boundary digit holds exactly the keys still wanted; then a bitonic sort of the chosen keys.
/// Every thread of the block calls it.
template <class Key>
__device__ void block_select(Key key, index_t n, unsigned kc, select_scratch& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.mask = 0;
    s.remaining = kc;
    s.done = kc == 0 || static_cast<index_t>(kc) >= n;
    s.count = 0;
  }
  __syncthreads();
  for (int shift = 56; shift >= 0 && !s.done; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s.hist[b] = 0;
    __syncthreads();
    const unsigned long long prefix = s.prefix, mask = s.mask;
    for (index_t i0 = 0; i0 < n; i0 += blockDim.x) {
      const index_t i = i0 + threadIdx.x;
      const bool active = i < n;
      const unsigned long long k = active ? key(i) : 0ull;
      const bool match = active && (k & mask) == prefix;
      const unsigned digit = match ? unsigned((k >> shift) & 255u) : 256u + (threadIdx.x & 31);
      const unsigned peers = __match_any_sync(__activemask(), digit);
      if (match && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&s.hist[digit], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns digits 255 - 8l down to 248 - 8l; counts from the top decide the boundary digit.
      const int lane = threadIdx.x;
      unsigned local = 0;
      for (int d = 0; d < 8; ++d) local += s.hist[255 - 8 * lane - d];
      unsigned above = local;
      for (int d = 1; d < 32; d *= 2) {
        const unsigned o = __shfl_up_sync(0xffffffffu, above, d);
        if (lane >= d) above += o;
      }
      above -= local;  // keys in digits above this lane's
      const unsigned want = s.remaining;
      __syncwarp();  // every lane has read `remaining` before the boundary lane rewrites it
      if (above < want && want <= above + local) {
        unsigned cum = above;
        for (int d = 0; d < 8; ++d) {
          const unsigned digit = 255 - 8 * lane - d;
          const unsigned h = s.hist[digit];
          if (cum + h >= want) {
            s.remaining = want - cum;
            s.prefix = prefix | (static_cast<unsigned long long>(digit) << shift);
            s.mask = mask | (255ull << shift);
            s.done = h == want - cum;
            break;
          }
          cum += h;
        }
      }
    }
    __syncthreads();
  }
  // Every key whose masked top digits reach the prefix is in, and there are exactly kc of them.
  const unsigned long long prefix = s.prefix, mask = s.mask;
  for (index_t i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned long long k = key(i);
    if ((k & mask) >= prefix && k != 0ull) {
      const unsigned at = atomicAdd(&s.count, 1u);
      if (at < max_topk) s.chosen[at] = k;
    }
  }
  __syncthreads();
  const unsigned chosen = s.count < kc ? s.count : kc;
  for (unsigned i = chosen + threadIdx.x; i < max_topk; i += blockDim.x) s.chosen[i] = 0ull;
  __syncthreads();
  // Bitonic sort, descending, of the 256 slots.
  for (unsigned size = 2; size <= max_topk; size *= 2) {
    for (unsigned stride = size / 2; stride > 0; stride /= 2) {
      for (unsigned i = threadIdx.x; i < max_topk; i += blockDim.x) {
        const unsigned j = i ^ stride;
        if (j > i) {
          const bool descending = (i & size) == 0;
          const unsigned long long a = s.chosen[i], b = s.chosen[j];
          if (descending ? a < b : a > b) {
            s.chosen[i] = b;
            s.chosen[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

/// Sorts n (a power of two, <= 4096) keys of shared memory in descending order (bitonic network). The
/// caller synchronises before (the keys are written) and the function synchronises after each step.
__device__ inline void bitonic_descending(unsigned long long* a, unsigned n) {
  for (unsigned size = 2; size <= n; size *= 2) {
    for (unsigned stride = size / 2; stride > 0; stride /= 2) {
      for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
        const unsigned j = i ^ stride;
        if (j > i) {
          const bool descending = (i & size) == 0;
          const unsigned long long x = a[i], y = a[j];
          if (descending ? x < y : x > y) {
            a[i] = y;
            a[j] = x;
          }
        }
      }
      __syncthreads();
    }
  }
}

/// The kc-th largest (kc <= 32) of the 32 keys of a warp, in every lane: a bitonic sort by shuffles.
__device__ inline unsigned long long warp_kth_largest(unsigned long long key, unsigned kc) {
  const unsigned lane = threadIdx.x & 31;
#pragma unroll
  for (unsigned size = 2; size <= 32; size *= 2) {
#pragma unroll
    for (unsigned stride = size / 2; stride > 0; stride /= 2) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, stride);
      const bool descending = (lane & size) == 0;  // the final stage (size 32) sorts everything descending
      const bool lower = (lane & stride) == 0;
      // In a descending pair the lower lane keeps the larger key; in an ascending pair, the smaller.
      const bool keep_larger = descending == lower;
      key = keep_larger ? (key > other ? key : other) : (key < other ? key : other);
    }
  }
  return __shfl_sync(0xffffffffu, key, static_cast<int>(kc - 1));
}

/// Exclusive prefix sum of one count per thread over the block; `total` is the block's sum.
__device__ inline unsigned block_exclusive_scan(unsigned v, unsigned* warp_totals /* [32] */, unsigned& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  unsigned x = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const unsigned o = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += o;
  }
  __syncthreads();
  if (lane == 31) warp_totals[warp] = x;
  __syncthreads();
  unsigned before = 0, all = 0;
  for (int w = 0; w < warps; ++w) {
    const unsigned t = warp_totals[w];
    if (w < warp) before += t;
    all += t;
  }
  total = all;
  return before + x - v;
}

inline constexpr unsigned filter_capacity = 1024;  ///< candidates a threshold pass may leave for the sort
inline constexpr index_t max_topk_slices = 256;    ///< rows up to 1M entries take the one-launch top-k

__device__ inline unsigned next_power_of_two(unsigned n) {
  unsigned p = 1;
  while (p < n) p *= 2;
  return p;
}

/// Per-slice top-k lists, then the row's merge in the block that finishes the row last. Both stages
/// first bound the k-th key from below with k keys that are known to exist (the slice: the k-th largest
/// of its threads' maxima; the merge: the k-th largest of every list's first ceil(k / slices) entries),
/// keep the keys at or above the bound (typically little more than k), and sort those. Where the bound
/// leaves more than filter_capacity keys (adversarial rows), radix selection (block_select) decides.
/// Keys order (value, column) exactly as ranks_before does, so the result, and the fused log-sum-exp
/// from the same combine as topk_merge_fn, are the host backends'.
template <class T>
__global__ void __launch_bounds__(threads, 4) topk_kernel(rows_view<T> x, index_t k, index_t slot, float inv_t,
                                                       float* cand_values, std::int32_t* cand_indices,
                                                       lse_partial<float>* stats, unsigned* tickets,
                                                       float* out_values, index_t out_values_stride,
                                                       std::int32_t* out_indices, index_t out_indices_stride,
                                                       float* out_lse, fault_sink sink) {
  static_assert(std::is_same_v<T, float>, "the one-launch top-k keys float rows");
  __shared__ select_scratch sel;
  __shared__ unsigned long long keys[filter_capacity];  // thread maxima, then the keys above the bound
  __shared__ float values[slice];                        // the slice, only when the bound leaves too many
  __shared__ float reduce_scratch[threads / 32];
  __shared__ int flag_scratch[threads / 32];
  __shared__ unsigned warp_totals[32];
  __shared__ unsigned long long bound_scratch[threads / 32];
  __shared__ lse_partial<float> row_stat;
  __shared__ fault row_fault;
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  const index_t slices = slices_of(x.cols);
  const index_t s = blockIdx.x;
  for (index_t r = blockIdx.y; r < x.rows; r += gridDim.y) {
    const index_t begin = s * slice;
    const index_t len = x.cols - begin < slice ? x.cols - begin : slice;
    const float* row = x.row(r);
    slice_entries<float> in;
    in.load(row + begin, len);
    float m = negative_infinity<float>();
    int nan = 0;
    // The thread's two best entries by ranks_before (value descending, column ascending), as floats:
    // keys are built only for the few entries that survive the bound.
    float v1 = negative_infinity<float>(), v2 = negative_infinity<float>();
    std::int32_t c1 = -1, c2 = -1;
#pragma unroll
    for (int e = 0; e < per_thread; ++e) {
      const index_t j = slice_entries<float>::offset(e);
      const float v = in.v[e];
      nan |= v != v;
      m = v > m ? v : m;
      if (j < len) {
        const std::int32_t c = static_cast<std::int32_t>(begin + j);
        if (c1 < 0 || ranks_before(v, c, v1, c1)) {
          v2 = v1;
          c2 = c1;
          v1 = v;
          c1 = c;
        } else if (c2 < 0 || ranks_before(v, c, v2, c2)) {
          v2 = v;
          c2 = c;
        }
      }
    }
    m = block_reduce(m, max_op{}, reduce_scratch);
    nan = block_reduce(nan, or_op{}, flag_scratch);
    float sum = 0.0f;
    if (inv_t != 0.0f && m != negative_infinity<float>() && m != -negative_infinity<float>() && !nan) {
#pragma unroll
      for (int e = 0; e < per_thread; ++e) sum += exp_((in.v[e] - m) * inv_t);
      sum = block_reduce(sum, sum_op{}, reduce_scratch);
    }
    if (threadIdx.x == 0) stats[r * slices + s] = lse_partial<float>{m, sum, nan != 0};
    const unsigned kc = static_cast<unsigned>(k < len ? k : len);
    if (!nan) {
      const unsigned long long top = c1 < 0 ? 0ull : rank_key(v1, c1);
      const unsigned long long second = c2 < 0 ? 0ull : rank_key(v2, c2);
      // Bound: for kc <= 32 the largest over warps of each warp's kc-th largest thread maximum (a warp
      // sort, no block barrier); for kc <= 64 the kc-th largest thread maximum; beyond, the kc-th
      // largest of the threads' two best keys (512 keys: about kc keys stay above it even for
      // kc = 256, where the threads' maxima alone would leave over a thousand). 0 where too few exist.
      unsigned long long bound;
      if (kc <= 32) {
        bound = block_reduce(warp_kth_largest(top, kc), max_op{}, bound_scratch);
      } else if (kc <= 64) {
        keys[threadIdx.x] = top;
        __syncthreads();
        bitonic_descending(keys, threads);
        bound = keys[kc - 1];
        __syncthreads();
      } else {
        keys[2 * threadIdx.x] = top;
        keys[2 * threadIdx.x + 1] = second;
        __syncthreads();
        bitonic_descending(keys, 2 * threads);
        bound = keys[kc - 1];
        __syncthreads();
      }
      // key(v, c) >= bound  <=>  v > bound's value, or v equal to it and c <= its column (float tests).
      const float bound_value = bound == 0ull ? negative_infinity<float>() : in_value(bound);
      const std::int32_t bound_column = bound == 0ull ? INT32_MAX : key_column(bound);
      const auto above = [&](float v, index_t j) {
        return j < len && (v > bound_value || (v == bound_value && begin + j <= bound_column));
      };
      unsigned count = 0;
#pragma unroll
      for (int e = 0; e < per_thread; ++e) count += above(in.v[e], slice_entries<float>::offset(e));
      unsigned total = 0;
      unsigned at = block_exclusive_scan(count, warp_totals, total);
      const unsigned long long* chosen = keys;
      if (total <= filter_capacity) {
#pragma unroll
        for (int e = 0; e < per_thread; ++e) {
          const index_t j = slice_entries<float>::offset(e);
          if (above(in.v[e], j)) keys[at++] = rank_key(in.v[e], static_cast<std::int32_t>(begin + j));
        }
        const unsigned n = next_power_of_two(total);
        for (unsigned i = total + threadIdx.x; i < n; i += blockDim.x) keys[i] = 0ull;
        __syncthreads();
        bitonic_descending(keys, n);
      } else {
#pragma unroll
        for (int e = 0; e < per_thread; ++e) {
          const index_t j = slice_entries<float>::offset(e);
          if (j < len) values[j] = in.v[e];
        }
        __syncthreads();
        block_select([&](index_t i) { return rank_key(values[i], static_cast<std::int32_t>(begin + i)); }, len, kc,
                     sel);
        chosen = sel.chosen;
      }
      for (unsigned i = threadIdx.x; i < kc; i += blockDim.x) {
        const std::int32_t c = key_column(chosen[i]);
        cand_values[(r * slices + s) * slot + i] = row[c];
        cand_indices[(r * slices + s) * slot + i] = c;
      }
    }
    if (last_block_of_row(tickets, r, static_cast<unsigned>(slices))) {
      auto* p = reinterpret_cast<lse_partial<float>*>(dynamic_shared);
      copy_partials(stats + r * slices, slices, p);
      if (threadIdx.x == 0) {
        fault f = fault::none;
        const bool fused = inv_t != 0.0f;
        row_stat = combine_logsumexp(p, slices, fused ? inv_t : 1.0f, f);
        if (f == fault::all_masked && !fused) f = fault::none;  // top-k of an all -inf row is well defined
        row_fault = f;
        sink.put(r, f);
      }
      __syncthreads();
      if (row_fault == fault::none) {
        // Candidate (list l, entry e) of the row is at l * slot + e; the last list may be shorter than k.
        const float* cv = cand_values + r * slices * slot;
        const std::int32_t* ci = cand_indices + r * slices * slot;
        const index_t last_len = x.cols - (slices - 1) * slice;
        const index_t last_kc = k < last_len ? k : last_len;
        const auto listed = [&](index_t l) { return l == slices - 1 ? last_kc : k; };
        const auto key_of = [&](index_t l, index_t e) { return rank_key(__ldcg(cv + l * slot + e), __ldcg(ci + l * slot + e)); };
        // Bound: the k-th largest of the lists' first `head` entries (at least k keys unless lists are short).
        const index_t head = (k + slices - 1) / slices;
        const unsigned preset = static_cast<unsigned>(slices * head);  // <= k + slices <= 512
        for (unsigned i = threadIdx.x; i < next_power_of_two(preset); i += blockDim.x) {
          const index_t l = i / head, e = i % head;
          keys[i] = i < preset && e < listed(l) ? key_of(l, e) : 0ull;
        }
        __syncthreads();
        bitonic_descending(keys, next_power_of_two(preset));
        const unsigned long long bound = keys[k - 1 < static_cast<index_t>(preset) ? k - 1 : preset - 1];
        __syncthreads();
        const index_t candidates = slices * slot;
        unsigned count = 0;
        for (index_t i = threadIdx.x; i < candidates; i += blockDim.x)
          if (i % slot < listed(i / slot)) count += key_of(i / slot, i % slot) >= bound;
        unsigned total = 0;
        unsigned at = block_exclusive_scan(count, warp_totals, total);
        const unsigned long long* chosen = keys;
        if (total <= filter_capacity) {
          for (index_t i = threadIdx.x; i < candidates; i += blockDim.x) {
            if (i % slot >= listed(i / slot)) continue;
            const unsigned long long key = key_of(i / slot, i % slot);
            if (key >= bound) keys[at++] = key;
          }
          const unsigned n = next_power_of_two(total);
          for (unsigned i = total + threadIdx.x; i < n; i += blockDim.x) keys[i] = 0ull;
          __syncthreads();
          bitonic_descending(keys, n);
        } else {
          block_select(
              [&](index_t i) -> unsigned long long {
                return i % slot < listed(i / slot) ? key_of(i / slot, i % slot) : 0ull;
              },
              candidates, static_cast<unsigned>(k), sel);
          chosen = sel.chosen;
        }
        const lse_partial<float> st = row_stat;
        for (unsigned i = threadIdx.x; i < k; i += blockDim.x) {
          const std::int32_t c = key_column(chosen[i]);
          const float v = row[c];
          out_indices[r * out_indices_stride + i] = c;
          out_values[r * out_values_stride + i] = inv_t != 0.0f ? (v - st.max) * inv_t - log_(st.sum) : v;
        }
        if (out_lse != nullptr && threadIdx.x == 0) out_lse[r] = st.max * inv_t + log_(st.sum);
      }
      __syncthreads();
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

// ---- sampling ------------------------------------------------------------------------------------------
/// Canonical mass of chunk entries j = lane, lane + 8, ... < n, combined over the 8 threads of a
/// group exactly as combine_lanes does: ((0+1)+(2+3))+((4+5)+(6+7)). Valid in the group's thread 0.
template <class Source>
__device__ inline double lane_mass(const Source& source, index_t n, int lane, int& flags, int bit_nan,
                                   int bit_negative) {
  // Loads are issued 16 at a time before they are added: one load in flight per thread would leave
  // the block waiting on memory latency 128 times per chunk.
  constexpr int batch = 16;
  double sum = 0.0;
  index_t j = lane;
  using value = decltype(source(j));
  for (; j + 8 * (batch - 1) < n; j += 8 * batch) {
    value v[batch];
#pragma unroll
    for (int u = 0; u < batch; ++u) v[u] = source(j + 8 * u);
#pragma unroll
    for (int u = 0; u < batch; ++u) {
      sum += static_cast<double>(v[u]);
      flags |= (v[u] != v[u] ? bit_nan : 0) | (v[u] < value(0) ? bit_negative : 0);
    }
  }
  for (; j < n; j += 8) {
    const auto v = source(j);
    sum += static_cast<double>(v);
    flags |= (v != v ? bit_nan : 0) | (v < value(0) ? bit_negative : 0);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  sum += __shfl_xor_sync(0xffffffffu, sum, 4);
  return sum;
}

template <class T>
struct offset_source {
  const T* p;
  __device__ T operator()(index_t j) const { return p[j]; }
};
template <class T>
struct offset_residual_source {
  const T* p;
  const T* q;
  __device__ T operator()(index_t j) const {
    const T d = p[j] - q[j];
    return d > T(0) ? d : T(0);
  }
};

/// Entries of one chunk held in shared memory, indexed by their column.
template <class T>
struct shared_chunk {
  const T* values;
  index_t begin;
  __device__ T operator()(index_t j) const { return values[j - begin]; }
};

/// Exclusive prefix sum over the block in double (an approximation: the draw uses it only where its
/// error bound decides, see draw_staged).
__device__ inline double block_exclusive_scan(double v, double* warp_sums /* [32] */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double x = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const double o = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += o;
  }
  __syncthreads();
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  double before = 0.0;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  return before + (x - v);
}

/// Shared memory of draw_staged.
struct draw_shared {
  double warp_sums[32];
  index_t reduce[32];
  chunk_choice choice;
  std::int32_t token;
};

/// locate_sample on the device, with locate_sample's token, without its serial walk in the common case.
///
/// The canonical search compares running totals, summed one entry after another in double, with the
/// target. A parallel prefix sum gives each of those totals to within 2^-40 of the row total (the
/// serial sum and the parallel one each err by under 3e-13 of it: at most 2560 additions of
/// non-negative terms), so an entry whose parallel total clears the target by more than that bound is
/// decided, and so is one that falls short by more. The first entry that may cross and the first that
/// surely crosses are found in parallel; when they coincide (or nothing may cross) that is the answer
/// the serial search gives. Otherwise (a target within ~1e-12 of a running total) thread 0 runs the
/// serial choose_chunk / walk_chunk themselves. The same holds for the choice of the chunk. `total` is
/// the row's canonical total and `target` = u * total. Every thread calls it; `*token` is written by
/// thread 0.
template <class T, class Stage>
__device__ void draw_staged(const double* table, index_t cols, double total, double target, Stage stage, T* staged,
                            draw_shared& w, std::int32_t* token) {
  constexpr index_t none = INT64_MAX;
  const double slack = ldexp(total + target, -40);
  const index_t chunks = (cols + sample_chunk - 1) / sample_chunk;
  // The chunk: each thread takes a run of chunks.
  {
    const index_t per = (chunks + blockDim.x - 1) / blockDim.x;
    const index_t c0 = threadIdx.x * per, c1 = c0 + per < chunks ? c0 + per : chunks;
    double local = 0.0;
    for (index_t c = c0; c < c1; ++c) local += table[c];
    double reach = block_exclusive_scan(local, w.warp_sums);
    index_t sure = none, maybe = none, last = -1;
    for (index_t c = c0; c < c1; ++c) {
      const double m = table[c];
      reach += m;
      if (m > 0.0) {
        last = c;
        if (maybe == none && reach > target - slack) maybe = c;
        if (sure == none && reach > target + slack) sure = c;
      }
    }
    sure = block_reduce(sure, min_op{}, w.reduce);
    maybe = block_reduce(maybe, min_op{}, w.reduce);
    last = block_reduce(last, max_op{}, w.reduce);
    if (threadIdx.x == 0) {
      if (maybe == none || maybe == sure) {
        const index_t c = maybe == none ? (last < 0 ? 0 : last) : sure;
        double before = 0.0;  // the canonical total of the chunks before c
        for (index_t d = 0; d < c; ++d) before += table[d];
        w.choice = chunk_choice{c, before};
      } else {
        w.choice = choose_chunk(table, cols, target);
      }
    }
    __syncthreads();
  }
  const index_t begin = w.choice.chunk * sample_chunk;
  const index_t end = begin + sample_chunk < cols ? begin + sample_chunk : cols;
  const index_t len = end - begin;
  for (index_t i = threadIdx.x; i < len; i += blockDim.x) staged[i] = stage(begin + i);
  __syncthreads();
  // The entry: each thread takes a run of entries.
  const index_t per = (len + blockDim.x - 1) / blockDim.x;
  const index_t i0 = threadIdx.x * per, i1 = i0 + per < len ? i0 + per : len;
  double local = 0.0;
  for (index_t i = i0; i < i1; ++i) local += staged[i] > T(0) ? static_cast<double>(staged[i]) : 0.0;
  double reach = w.choice.before + block_exclusive_scan(local, w.warp_sums);
  index_t sure = none, maybe = none, last = -1;
  for (index_t i = i0; i < i1; ++i) {
    const T v = staged[i];
    if (v > T(0)) {
      reach += static_cast<double>(v);
      last = i;
      if (maybe == none && reach > target - slack) maybe = i;
      if (sure == none && reach > target + slack) sure = i;
    }
  }
  sure = block_reduce(sure, min_op{}, w.reduce);
  maybe = block_reduce(maybe, min_op{}, w.reduce);
  last = block_reduce(last, max_op{}, w.reduce);
  if (threadIdx.x == 0) {
    if (maybe == none)
      *token = static_cast<std::int32_t>(begin + (last < 0 ? 0 : last));
    else if (maybe == sure)
      *token = static_cast<std::int32_t>(begin + sure);
    else
      *token = walk_chunk(shared_chunk<T>{staged, begin}, begin, end, w.choice.before, target);
  }
}

/// Chunks whose masses one sampling block computes: 8 threads per chunk (one per canonical lane).
inline constexpr int sample_chunks_per_block = sample_threads / 8;

/// Sampling over (chunk group, row) blocks: each block computes the canonical masses of its chunks
/// into `partials` (chunk_mass per (row, chunk)); the block that completes a row last folds them in
/// chunk order and draws (sample_fn's steps, on a copy of the masses in shared memory).
template <class T>
__global__ void __launch_bounds__(sample_threads) sample_kernel(rows_view<T> p, const float* uniforms,
                                                                chunk_mass* partials, unsigned* tickets,
                                                                std::int32_t* tokens, fault_sink sink) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  __shared__ T staged[sample_chunk];
  __shared__ draw_shared w;
  __shared__ double target, total;
  __shared__ int skip;
  const index_t chunks = (p.cols + sample_chunk - 1) / sample_chunk;
  const index_t blocks_per_row = (chunks + sample_chunks_per_block - 1) / sample_chunks_per_block;
  const int lane = threadIdx.x % 8;
  const index_t c = blockIdx.x * index_t(sample_chunks_per_block) + threadIdx.x / 8;
  for (index_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const T* row = p.row(r);
    const bool live = c < chunks;
    const index_t begin = c * sample_chunk;
    const index_t n = live ? (p.cols - begin < sample_chunk ? p.cols - begin : sample_chunk) : 0;
    int flags = 0;
    const double m = lane_mass(offset_source<T>{row + begin}, n, lane, flags, 1, 2);
    flags |= __shfl_xor_sync(0xffffffffu, flags, 1);
    flags |= __shfl_xor_sync(0xffffffffu, flags, 2);
    flags |= __shfl_xor_sync(0xffffffffu, flags, 4);
    if (live && lane == 0) partials[r * chunks + c] = chunk_mass{m, (flags & 1) != 0, (flags & 2) != 0};
    if (!last_block_of_row(tickets, r, static_cast<unsigned>(blocks_per_row))) continue;
    auto* masses = reinterpret_cast<chunk_mass*>(dynamic_shared);
    auto* table = reinterpret_cast<double*>(masses + chunks);
    copy_partials(partials + r * chunks, chunks, masses);
    if (threadIdx.x == 0) {
      const folded_row folded = fold_chunks(masses, chunks, table);
      fault f = folded.error();
      if (f == fault::none && !is_unit_uniform(uniforms[r])) f = fault::uniform_out_of_range;
      sink.put(r, f);
      skip = f != fault::none;
      total = folded.total;
      if (!skip) target = static_cast<double>(uniforms[r]) * folded.total;
    }
    __syncthreads();
    if (!skip) draw_staged(table, p.cols, total, target, offset_source<T>{row}, staged, w, tokens + r);
    __syncthreads();
  }
}

/// Residual sampling: as sample_kernel, with the residual, p and q masses of each chunk and the
/// empty-residual fallback of plan_residual_draw (sample_residual_fn's steps).
template <class T>
__global__ void __launch_bounds__(sample_threads) sample_residual_kernel(rows_view<T> p, rows_view<T> q,
                                                                         const float* uniforms,
                                                                         residual_chunk_mass* partials,
                                                                         unsigned* tickets, std::int32_t* tokens,
                                                                         empty_residual fallback, fault_sink sink) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  __shared__ T staged[sample_chunk];
  __shared__ draw_shared w;
  __shared__ double target, total;
  __shared__ int mode;  // 0: skip (fault or fixed token), 1: draw from the residual, 2: draw from p
  const index_t chunks = (p.cols + sample_chunk - 1) / sample_chunk;
  const index_t blocks_per_row = (chunks + sample_chunks_per_block - 1) / sample_chunks_per_block;
  const int lane = threadIdx.x % 8;
  const index_t c = blockIdx.x * index_t(sample_chunks_per_block) + threadIdx.x / 8;
  for (index_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const T* pr = p.row(r);
    const T* qr = q.row(r);
    const bool live = c < chunks;
    const index_t begin = c * sample_chunk;
    const index_t n = live ? (p.cols - begin < sample_chunk ? p.cols - begin : sample_chunk) : 0;
    int flags = 0;
    const double res = lane_mass(offset_residual_source<T>{pr + begin, qr + begin}, n, lane, flags, 0, 0);
    const double pm = lane_mass(offset_source<T>{pr + begin}, n, lane, flags, 1, 2);
    const double qm = lane_mass(offset_source<T>{qr + begin}, n, lane, flags, 4, 8);
    flags |= __shfl_xor_sync(0xffffffffu, flags, 1);
    flags |= __shfl_xor_sync(0xffffffffu, flags, 2);
    flags |= __shfl_xor_sync(0xffffffffu, flags, 4);
    if (live && lane == 0)
      partials[r * chunks + c] = residual_chunk_mass{res, chunk_mass{pm, (flags & 1) != 0, (flags & 2) != 0},
                                                     chunk_mass{qm, (flags & 4) != 0, (flags & 8) != 0}};
    if (!last_block_of_row(tickets, r, static_cast<unsigned>(blocks_per_row))) continue;
    auto* masses = reinterpret_cast<residual_chunk_mass*>(dynamic_shared);
    auto* table = reinterpret_cast<double*>(masses + chunks);  // residual masses, then p masses
    copy_partials(partials + r * chunks, chunks, masses);
    if (threadIdx.x == 0) {
      const folded_residual_row folded = fold_residual_chunks(masses, chunks, table, table + chunks);
      fault f = folded.p.error();
      if (f == fault::none && folded.q.error() != fault::none)
        f = static_cast<fault>(static_cast<std::int32_t>(folded.q.error()) + 256);
      if (f == fault::none && !is_unit_uniform(uniforms[r])) f = fault::uniform_out_of_range;
      sink.put(r, f);
      mode = 0;
      if (f == fault::none) {
        const residual_draw d =
            plan_residual_draw(p.cols, table, table + chunks, folded, static_cast<double>(uniforms[r]), fallback);
        if (d.kind == residual_draw::fixed_token) {
          tokens[r] = d.token;
        } else {
          mode = d.kind == residual_draw::from_residual ? 1 : 2;
          target = d.target;
          total = d.kind == residual_draw::from_residual ? folded.residual : folded.p.total;
        }
      }
    }
    __syncthreads();
    if (mode == 1) draw_staged(table, p.cols, total, target, offset_residual_source<T>{pr, qr}, staged, w, tokens + r);
    if (mode == 2) draw_staged(table + chunks, p.cols, total, target, offset_source<T>{pr}, staged, w, tokens + r);
    __syncthreads();
  }
}

}  // namespace specdec::detail::inline SPECDEC_ISA::cuda_rows
