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
/// Blocks of topk_kernel an SM must hold at once (its register budget: 65536 / (256 x this)). The
/// kernel's latency-bound stages leave the memory system idle unless enough blocks overlap them.
#ifndef SPECDEC_CUDA_TOPK_MIN_BLOCKS
#define SPECDEC_CUDA_TOPK_MIN_BLOCKS 4
#endif
inline constexpr index_t max_topk_slices = 256;    ///< rows up to 1M entries take the one-launch top-k
static_assert(filter_capacity <= max_sort && max_topk <= max_sort);

/// Most slices one block of topk_kernel takes (topk_group chooses how many).
inline constexpr index_t max_topk_group = 8;

/// Slices per block of topk_kernel for a rows x cols call: the largest of 1, 2, 4, 8 (4 for k > 32, 1
/// for k > 64) that still leaves 512 blocks or more. The first slice of a block costs a bound and two
/// sorts; each further slice a comparison per entry against the block's k-th key so far, so a block
/// that takes several slices spends most of its instructions where the memory traffic is. A function
/// of the shape and k alone (never of the GPU), like every other partition here.
SPECDEC_HOST_DEVICE inline index_t topk_group(index_t rows, index_t cols, index_t k) {
  const index_t slices = (cols + slice - 1) / slice;
  const index_t most = k <= 32 ? 8 : k <= 64 ? 4 : 1;
  index_t g = 1;
  while (2 * g <= most && rows * ((slices + 2 * g - 1) / (2 * g)) >= 512) g *= 2;
  return g;
}

/// Shared memory of topk_kernel's per-block stage.
struct topk_shared {
  select_scratch sel;
  unsigned long long keys[filter_capacity];  // thread maxima, then the keys at or above the bound
  float reduce_scratch[threads / 32];
  int flag_scratch[threads / 32];
  unsigned warp_totals[32];
  unsigned long long bound_scratch[threads / 32];
};

/// The `kc` largest keys of one slice (entries `in`, columns begin + offset), sorted descending into
/// sh.keys[0, kc). First a bound on the kc-th key from below with kc keys known to exist (for kc <= 32
/// the largest over warps of each warp's kc-th largest thread maximum, a warp sort and no block
/// barrier; for kc <= 64 the kc-th largest thread maximum; beyond, the kc-th largest of the threads'
/// two best keys: 512 keys, about kc of them above it even for kc = 256, where the maxima alone would
/// leave over a thousand), then the keys at or above it (typically little more than kc) sorted. Where
/// the bound leaves more than filter_capacity keys (adversarial rows), radix selection decides.
__device__ inline void slice_topk(const slice_entries<float>& in, const float* row, index_t begin, index_t len, unsigned kc,
                                  topk_shared& sh) {
  // The thread's best entry (and second best, for kc > 64) by ranks_before, as floats: keys are built
  // only for the few entries that survive the bound.
  const bool two = kc > 64;
  float v1 = negative_infinity<float>(), v2 = negative_infinity<float>();
  std::int32_t c1 = -1, c2 = -1;
#pragma unroll
  for (int e = 0; e < per_thread; ++e) {
    const index_t j = slice_entries<float>::offset(e);
    const float v = in.v[e];
    if (j < len) {
      const std::int32_t c = static_cast<std::int32_t>(begin + j);
      if (c1 < 0 || ranks_before(v, c, v1, c1)) {
        if (two) {
          v2 = v1;
          c2 = c1;
        }
        v1 = v;
        c1 = c;
      } else if (two && (c2 < 0 || ranks_before(v, c, v2, c2))) {
        v2 = v;
        c2 = c;
      }
    }
  }
  const unsigned long long top = c1 < 0 ? 0ull : rank_key(v1, c1);
  unsigned long long bound;  // 0 where too few keys exist
  if (kc <= 32) {
    bound = block_reduce(warp_kth_largest(top, kc), max_op{}, sh.bound_scratch);
  } else if (kc <= 64) {
    sh.keys[threadIdx.x] = top;
    __syncthreads();
    sort_descending(sh.keys, threads);
    bound = sh.keys[kc - 1];
    __syncthreads();
  } else {
    sh.keys[2 * threadIdx.x] = top;
    sh.keys[2 * threadIdx.x + 1] = c2 < 0 ? 0ull : rank_key(v2, c2);
    __syncthreads();
    sort_descending(sh.keys, 2 * threads);
    bound = sh.keys[kc - 1];
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
  unsigned at = block_exclusive_scan(count, sh.warp_totals, total);
  if (total <= filter_capacity) {
#pragma unroll
    for (int e = 0; e < per_thread; ++e) {
      const index_t j = slice_entries<float>::offset(e);
      if (above(in.v[e], j)) sh.keys[at++] = rank_key(in.v[e], static_cast<std::int32_t>(begin + j));
    }
    const unsigned n = sort_length(total);
    for (unsigned i = total + threadIdx.x; i < n; i += blockDim.x) sh.keys[i] = 0ull;
    __syncthreads();
    sort_descending(sh.keys, n);
  } else {
    // Adversarial rows only (ties above the bound): the selection rereads the slice from L2, so the
    // common path keeps no copy of it in shared memory.
    const float* slice_in = row + begin;
    block_select([&](index_t i) { return rank_key(slice_in[i], static_cast<std::int32_t>(begin + i)); }, len, kc, sh.sel);
    for (unsigned i = threadIdx.x; i < kc; i += blockDim.x) sh.keys[i] = sh.sel.chosen[i];
    __syncthreads();
  }
}

/// A further slice of a block's group: appends its keys above `bound` (the kc-th largest key held, from
/// earlier slices, so a key equal in value ranks after it: the test is v > its value alone, and the
/// -inf padding past a row's end never passes) to sh.keys[n, ...) and returns the new count. Where they
/// would overflow the buffer, the keys held are first cut to their top kc (a tighter bound); where the
/// slice alone still holds too many (ties, rising values), its own top kc by radix selection are
/// appended instead. Every thread calls it; n and the bound are the same in every thread.
__device__ inline unsigned append_above(const slice_entries<float>& in, const float* row, index_t begin, index_t len,
                                        unsigned kc, unsigned n, unsigned long long& bound, topk_shared& sh) {
  for (int attempt = 0;; ++attempt) {
    const float bound_value = in_value(bound);
    unsigned count = 0;
#pragma unroll
    for (int e = 0; e < per_thread; ++e) count += in.v[e] > bound_value;
    unsigned total = 0;
    unsigned at = block_exclusive_scan(count, sh.warp_totals, total);
    if (n + total <= filter_capacity) {
      if (count > 0) {
#pragma unroll
        for (int e = 0; e < per_thread; ++e)
          if (in.v[e] > bound_value)
            sh.keys[n + at++] = rank_key(in.v[e], static_cast<std::int32_t>(begin + slice_entries<float>::offset(e)));
      }
      __syncthreads();
      return n + total;
    }
    if (attempt == 0 && n > kc) {
      const unsigned m = sort_length(n);
      for (unsigned i = n + threadIdx.x; i < m; i += blockDim.x) sh.keys[i] = 0ull;
      __syncthreads();
      sort_descending(sh.keys, m);
      n = kc;
      bound = sh.keys[kc - 1];
      continue;
    }
    const unsigned take = static_cast<index_t>(kc) < len ? kc : static_cast<unsigned>(len);
    const float* slice_in = row + begin;
    block_select([&](index_t i) { return rank_key(slice_in[i], static_cast<std::int32_t>(begin + i)); }, len, take, sh.sel);
    for (unsigned i = threadIdx.x; i < take; i += blockDim.x) sh.keys[n + i] = sh.sel.chosen[i];
    __syncthreads();
    return n + take;
  }
}

/// Per-block top-k lists, then the row's merge in the block that finishes the row last. A block takes
/// `group` consecutive slices (topk_group): the first slice's top kc by slice_topk, the others' keys
/// above the kc-th key held by append_above, then one sort. The merge first bounds the row's k-th key
/// with the k-th largest of every list's first ceil(k / lists) entries, keeps the keys at or above it
/// and sorts those (radix selection where they are too many). Keys order (value, column) exactly as
/// ranks_before does, so the result is the host backends'; the log-sum-exp partials are the per-slice
/// ones of every other row kernel, combined as topk_merge_fn does, whatever the group.
template <class T>
__global__ void __launch_bounds__(threads, SPECDEC_CUDA_TOPK_MIN_BLOCKS)
    topk_kernel(rows_view<T> x, index_t k, index_t slot, index_t group, float inv_t, float* cand_values,
                std::int32_t* cand_indices, lse_partial<float>* stats, unsigned* tickets, float* out_values,
                index_t out_values_stride, std::int32_t* out_indices, index_t out_indices_stride, float* out_lse,
                fault_sink sink) {
  static_assert(std::is_same_v<T, float>, "the one-launch top-k keys float rows");
  __shared__ topk_shared sh;
  __shared__ lse_partial<float> row_stat;
  __shared__ fault row_fault;
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  const index_t slices = slices_of(x.cols);
  const index_t lists = (slices + group - 1) / group;
  const index_t list = blockIdx.x;
  const index_t first = list * group, last = first + group < slices ? first + group : slices;
  // Entries list l covers, and hence how many candidates it gives (the last list may give fewer than k).
  const auto listed = [&](index_t l) {
    const index_t covered = (l == lists - 1 ? x.cols : (l + 1) * group * slice) - l * group * slice;
    return k < covered ? k : covered;
  };
  const unsigned kc = static_cast<unsigned>(listed(list));
  for (index_t r = blockIdx.y; r < x.rows; r += gridDim.y) {
    const float* row = x.row(r);
    bool faulted = false;  // a NaN in the group: the row faults, its candidates are never read
    unsigned n = 0;        // keys held in sh.keys[0, n)
    unsigned long long bound = 0;
    for (index_t s = first; s < last; ++s) {
      const index_t begin = s * slice, len = slice_length(x.cols, begin);
      slice_entries<float> in;
      in.load(row + begin, len);
      const lse_partial<float> slice_stats = slice_statistics(in, inv_t, sh.reduce_scratch, sh.flag_scratch);
      if (threadIdx.x == 0) stats[r * slices + s] = slice_stats;
      faulted = faulted || slice_stats.has_nan;
      if (faulted) continue;
      if (s == first) {
        slice_topk(in, row, begin, len, kc, sh);
        n = kc;
        bound = sh.keys[kc - 1];
      } else {
        n = append_above(in, row, begin, len, kc, n, bound, sh);
      }
    }
    if (!faulted) {
      if (n > kc) {  // keys appended after the first slice's sorted ones
        const unsigned m = sort_length(n);
        for (unsigned i = n + threadIdx.x; i < m; i += blockDim.x) sh.keys[i] = 0ull;
        __syncthreads();
        sort_descending(sh.keys, m);
      }
      for (unsigned i = threadIdx.x; i < kc; i += blockDim.x) {
        const std::int32_t c = key_column(sh.keys[i]);
        cand_values[(r * lists + list) * slot + i] = row[c];
        cand_indices[(r * lists + list) * slot + i] = c;
      }
    }
    if (last_block_of_row(tickets, r, static_cast<unsigned>(lists))) {
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
        // Candidate (list l, entry e) of the row is at l * slot + e. Indices are 32-bit here (at most
        // 256 lists of 256): a 64-bit division by the runtime slot would cost dozens of instructions
        // per candidate.
        const float* cv = cand_values + r * lists * slot;
        const std::int32_t* ci = cand_indices + r * lists * slot;
        const unsigned slot_u = static_cast<unsigned>(slot), lists_u = static_cast<unsigned>(lists);
        const unsigned k_u = static_cast<unsigned>(k), last_listed = static_cast<unsigned>(listed(lists - 1));
        const auto listed_u = [&](unsigned l) { return l == lists_u - 1 ? last_listed : k_u; };
        const auto key_of = [&](unsigned i) { return rank_key(__ldcg(cv + i), __ldcg(ci + i)); };
        const auto is_candidate = [&](unsigned i) { return i % slot_u < listed_u(i / slot_u); };
        // Bound: the k-th largest of the lists' first `head` entries (at least k keys unless lists are short).
        const unsigned head = (k_u + lists_u - 1) / lists_u;
        const unsigned preset = lists_u * head;  // <= k + lists <= 512
        for (unsigned i = threadIdx.x; i < sort_length(preset); i += blockDim.x) {
          const unsigned l = i / head, e = i % head;
          sh.keys[i] = i < preset && e < listed_u(l) ? key_of(l * slot_u + e) : 0ull;
        }
        __syncthreads();
        sort_descending(sh.keys, sort_length(preset));
        const unsigned long long row_bound = sh.keys[k - 1 < static_cast<index_t>(preset) ? k - 1 : preset - 1];
        __syncthreads();
        const unsigned candidates = lists_u * slot_u;
        unsigned count = 0;
        for (unsigned i = threadIdx.x; i < candidates; i += blockDim.x)
          if (is_candidate(i)) count += key_of(i) >= row_bound;
        unsigned total = 0;
        unsigned at = block_exclusive_scan(count, sh.warp_totals, total);
        const unsigned long long* chosen = sh.keys;
        if (total <= filter_capacity) {
          for (unsigned i = threadIdx.x; i < candidates; i += blockDim.x) {
            if (!is_candidate(i)) continue;
            const unsigned long long key = key_of(i);
            if (key >= row_bound) sh.keys[at++] = key;
          }
          const unsigned n_sort = sort_length(total);
          for (unsigned i = total + threadIdx.x; i < n_sort; i += blockDim.x) sh.keys[i] = 0ull;
          __syncthreads();
          sort_descending(sh.keys, n_sort);
        } else {
          block_select(
              [&](index_t i) -> unsigned long long {
                const unsigned u = static_cast<unsigned>(i);
                return is_candidate(u) ? key_of(u) : 0ull;
              },
              candidates, k_u, sh.sel);
          chosen = sh.sel.chosen;
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
