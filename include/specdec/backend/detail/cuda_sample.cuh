// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief One-launch sampling and residual sampling of `thrust_backend<cuda>`: canonical chunk masses over (chunk group, row) blocks, the draw in the row's last block.
/// Part of the CUDA row kernels (cuda_rows.cuh says how they are laid out and why). nvcc only.
#pragma once

#include <specdec/backend/detail/cuda_rows.cuh>

namespace specdec::detail::inline SPECDEC_ISA::cuda_rows {

// ---- sampling ------------------------------------------------------------------------------------------
/// The OR of the flags of an 8-thread lane group, in each of its threads.
__device__ inline int lane_group_or(int flags) {
  flags |= __shfl_xor_sync(0xffffffffu, flags, 1);
  flags |= __shfl_xor_sync(0xffffffffu, flags, 2);
  return flags | __shfl_xor_sync(0xffffffffu, flags, 4);
}

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
    flags = lane_group_or(flags);
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
    flags = lane_group_or(flags);
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
