// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief thrust_backend<cuda>'s `run_teams`: one CUDA block per team (backend/detail/team.hpp), one
/// launch for the whole batch. nvcc only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <specdec/backend/detail/cuda_rows.cuh>
#include <specdec/backend/detail/team.hpp>
#include <specdec/config.hpp>

namespace specdec::detail::inline SPECDEC_ISA::cuda_rows {

/// Threads of a team's block. Results never depend on them (team.hpp); they set how many loads a
/// team's row pass keeps in flight: its items (8 lanes per 1024-entry chunk) are shared out over the
/// threads. Jobs whose passes have `wide_team_items` items or more get `wide_team_threads` (measured on
/// an H200 at V = 128256: 1.8-2.2x faster tree verification than 256; at V = 32000 the wide team is
/// 10-20 % slower, so those keep 256).
inline constexpr int team_threads = 256;
inline constexpr int wide_team_threads = 1024;
inline constexpr index_t wide_team_items = 768;
/// A team whose scratch fits gets it in shared memory (the default dynamic limit, no opt-in needed):
/// the jobs' row passes, tables and staged chunks then stay on the SM.
inline constexpr std::size_t team_shared_limit = 48 * 1024;

/// A CUDA block as a team.
struct block_team {
  std::byte* wide;
  __device__ index_t rank() const noexcept { return threadIdx.x; }
  __device__ index_t size() const noexcept { return blockDim.x; }
  __device__ void sync() const noexcept { __syncthreads(); }
  __device__ std::byte* wide_scratch() const noexcept { return wide; }
};

/// Team `first + blockIdx.x` runs `job` with its scratch (dynamic shared memory when `scratch` is null,
/// else `stride` bytes of it per block) and `wide_stride` bytes of `wide`; thread 0 stores the team's fault and, in deferred mode, claims
/// the sticky record for the first fault.
template <class Job, int Threads>
__global__ void __launch_bounds__(Threads)
    team_kernel(Job job, index_t first, std::byte* scratch, std::size_t stride, std::byte* wide, std::size_t wide_stride,
                team_fault* faults, fault_record* record, std::uint64_t describe) {
  extern __shared__ float4 team_shared_words[];  // float4: 16-byte aligned, as the jobs' carving expects
  block_team team{wide == nullptr ? nullptr : wide + static_cast<std::size_t>(blockIdx.x) * wide_stride};
  const index_t t = first + blockIdx.x;
  std::byte* mine = scratch == nullptr ? reinterpret_cast<std::byte*>(team_shared_words)
                                       : scratch + static_cast<std::size_t>(blockIdx.x) * stride;
  const team_fault f = job(team, t, mine);
  if (threadIdx.x != 0) return;
  faults[blockIdx.x] = f;
  if (record == nullptr || f.code == 0) return;
  if (atomicCAS(&record->code, 0, f.code) == 0) {
    record->row = f.row;
    record->where = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(job.where));
    record->name = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(job.names[f.arg]));
    record->column = f.column;
    record->limit = f.limit;
    record->value = f.value;
    record->describe = describe;
  }
}

}  // namespace specdec::detail::inline SPECDEC_ISA::cuda_rows
