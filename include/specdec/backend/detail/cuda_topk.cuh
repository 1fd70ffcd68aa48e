// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief One-launch top-k and fused top-k + log-sum-exp of `thrust_backend<cuda>`: a bound on the k-th key, the few keys above it sorted, radix selection where the bound leaves too many.
/// Part of the CUDA row kernels (cuda_rows.cuh says how they are laid out and why). nvcc only.
#pragma once

#include <specdec/backend/detail/cuda_rows.cuh>

namespace specdec::detail::inline SPECDEC_ISA::cuda_rows {

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

/// Sorts the 32 keys of a warp, one per lane, descending by shuffles (a bitonic network): lane i ends
/// with the i-th largest.
__device__ inline unsigned long long warp_sort_descending(unsigned long long key) {
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
  return key;
}

/// The kc-th largest (kc <= 32) of the 32 keys of a warp, in every lane.
__device__ inline unsigned long long warp_kth_largest(unsigned long long key, unsigned kc) {
  return __shfl_sync(0xffffffffu, warp_sort_descending(key), static_cast<int>(kc - 1));
}

/// Keys of a descending run of 32 that are greater than `key` (`or_equal`: greater or equal).
__device__ inline unsigned count_before(const unsigned long long* run, unsigned long long key, bool or_equal) {
  const auto before = [&](unsigned long long x) { return x > key || (or_equal && x == key); };
  if (before(run[31])) return 32;
  unsigned c = 0;
#pragma unroll
  for (unsigned step = 16; step > 0; step /= 2)
    if (before(run[c + step - 1])) c += step;
  return c;
}

inline constexpr unsigned max_sort = 1024;  ///< most keys sort_descending takes

/// Sorts n keys of shared memory in descending order; n a multiple of 32 and at most max_sort
/// (callers pad with key 0). Each warp sorts runs of 32 by shuffles; then each key's place is its
/// place in its run plus, in every other run, the keys before it (a binary search; equal keys of an
/// earlier run count as before it, so the places are a permutation). Three barriers, where a bitonic
/// network over shared memory needs one per stage. The caller synchronises before (the keys are
/// written); the function synchronises before it returns.
__device__ inline void sort_descending(unsigned long long* a, unsigned n) {
  __shared__ unsigned long long sorted[max_sort];  // out of place: keys held in registers would spill
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const unsigned runs = n / 32;
  for (unsigned r = warp; r < runs; r += warps) a[r * 32 + lane] = warp_sort_descending(a[r * 32 + lane]);
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned long long key = a[i];
    const unsigned own = i / 32;
    unsigned at = i % 32;
    for (unsigned r = 0; r < runs; ++r)
      if (r != own) at += count_before(a + r * 32, key, r < own);
    sorted[at] = key;
  }
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) a[i] = sorted[i];
  __syncthreads();
}

/// n rounded up to a whole number of sort_descending's runs.
__device__ inline unsigned sort_length(unsigned n) { return (n + 31) / 32 * 32; }

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
/// the boundary digit holds exactly the keys still wanted; then a sort of the chosen keys.
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
  sort_descending(s.chosen, max_topk);
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
static_assert(filter_capacity <= max_sort && max_topk <= max_sort);

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
    const index_t begin = s * slice, len = slice_length(x.cols, begin);
    const float* row = x.row(r);
    slice_entries<float> in;
    in.load(row + begin, len);
    // The thread's two best entries by ranks_before (value descending, column ascending), as floats:
    // keys are built only for the few entries that survive the bound.
    float v1 = negative_infinity<float>(), v2 = negative_infinity<float>();
    std::int32_t c1 = -1, c2 = -1;
#pragma unroll
    for (int e = 0; e < per_thread; ++e) {
      const index_t j = slice_entries<float>::offset(e);
      const float v = in.v[e];
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
    const lse_partial<float> slice_stats = slice_statistics(in, inv_t, reduce_scratch, flag_scratch);
    if (threadIdx.x == 0) stats[r * slices + s] = slice_stats;
    const unsigned kc = static_cast<unsigned>(k < len ? k : len);
    if (!slice_stats.has_nan) {
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
        sort_descending(keys, threads);
        bound = keys[kc - 1];
        __syncthreads();
      } else {
        keys[2 * threadIdx.x] = top;
        keys[2 * threadIdx.x + 1] = second;
        __syncthreads();
        sort_descending(keys, 2 * threads);
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
        const unsigned n = sort_length(total);
        for (unsigned i = total + threadIdx.x; i < n; i += blockDim.x) keys[i] = 0ull;
        __syncthreads();
        sort_descending(keys, n);
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
        for (unsigned i = threadIdx.x; i < sort_length(preset); i += blockDim.x) {
          const index_t l = i / head, e = i % head;
          keys[i] = i < preset && e < listed(l) ? key_of(l, e) : 0ull;
        }
        __syncthreads();
        sort_descending(keys, sort_length(preset));
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
          const unsigned n = sort_length(total);
          for (unsigned i = total + threadIdx.x; i < n; i += blockDim.x) keys[i] = 0ull;
          __syncthreads();
          sort_descending(keys, n);
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

}  // namespace specdec::detail::inline SPECDEC_ISA::cuda_rows
