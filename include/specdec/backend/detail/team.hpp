// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Team jobs: work written once for a cooperating group of threads (a CUDA block on the GPU,
/// one thread on the host) that every backend runs through `run_teams`. The batched verifiers
/// (specdec/sampling/batch.hpp) are team jobs: one team per request walks its tree.
///
/// **A team** exposes `rank()`, `size()`, `sync()` (a barrier of the whole team) and `wide_scratch()`. Every thread of a
/// team runs the job's code with the same control flow: decisions are computed redundantly from the
/// same data, and only passes over long rows are split between the threads (`rank() + k * size()`),
/// each writing its own scratch entries, followed by `sync()`. Combining those entries happens in a
/// fixed order, so results do not depend on the team size: the host's one-thread team and a
/// 256-thread CUDA block give bit-identical outputs.
///
/// **A job** is a trivially copyable struct with
/// - `std::size_t scratch_bytes() const`: scratch one team needs (the backend carves it, 16-byte
///   aligned, from its arena or the caller's workspace; on CUDA in shared memory when it fits);
/// - optionally `std::size_t wide_scratch_bytes() const`: further scratch per team for whole rows,
///   always in the backend's memory (never CUDA shared memory, whose small tables it would push out),
///   reached through `team.wide_scratch()` (16-byte aligned; null when the job asks for none);
/// - optionally `index_t row_pass_items() const`: how many items its passes over a row split between
///   the team's threads (CUDA gives jobs with many a wider block; the results do not change);
/// - `template <class Team> team_fault operator()(Team&, index_t team, std::byte* scratch) const`,
///   host-device: does team `team`'s work and returns what went wrong (code 0: nothing);
/// - `const char* where` and `const char* names[team_job_names]`: the function and argument names
///   faults are reported with (host string literals; device code copies the addresses, never reads them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <specdec/config.hpp>
#include <specdec/core/view.hpp>

namespace specdec::detail {

/// Argument names a job can report faults against.
inline constexpr int team_job_names = 16;

/// Fault codes of team jobs. Codes below 64 are the backends' row faults (`fault`, backend/detail/
/// row_simd.hpp, found in row `row` of argument `arg`), described by the backend. Codes from 64 on
/// belong to the module whose jobs report them, which describes them (a job's static `describe`, see
/// below): 64-95 tree (tree/detail/faults.hpp), 96-127 mask (mask/detail/faults.hpp), 128-143 grammar
/// (grammar/detail/faults.hpp), 144-207 sampling (sampling/detail/faults.hpp), 208-255 interop
/// (interop/detail/faults.hpp). A new code goes into its module's range; the backends never change.
inline constexpr std::int32_t first_team_fault_code = 64;

/// What a team job returns: `code` 0 when the team's work is done.
struct team_fault {
  std::int32_t code = 0;
  std::int32_t arg = 0;     ///< index into the job's `names`
  std::int64_t row = 0;
  std::int64_t column = 0;
  std::int64_t limit = 0;
  double value = 0.0;
};

/// A fault of module code `e` (an enumerator of a module's fault enum).
template <class Code>
SPECDEC_HOST_DEVICE inline team_fault make_team_fault(Code e, int arg, std::int64_t row, std::int64_t column, double value,
                                                      std::int64_t limit = 0) noexcept {
  return team_fault{static_cast<std::int32_t>(e), arg, row, column, limit, value};
}

/// How a module turns its fault codes into errors: throws `invalid_argument` for a code it owns (naming
/// `where` and the argument `name`), returns for any other. A job names its module's describer as a
/// static member `describe` with this signature; the backends call it, host side, before their own
/// description of the row faults.
using fault_describer = void (*)(const char* where, const char* name, const team_fault& f);

/// An integer a fault carries as a double, for a message: NaN as 0, values past the int64 range
/// (an int64 rounded up to 2^63) saturated rather than converted out of range.
inline long long fault_integer(double v) noexcept {
  constexpr double limit = 9223372036854775808.0;  // 2^63
  if (!(v == v)) return 0;
  if (v >= limit) return 9223372036854775807LL;
  if (v < -limit) return -9223372036854775807LL - 1;
  return static_cast<long long>(v);
}

/// The host's team: one thread, barriers are no-ops.
struct serial_team {
  std::byte* wide = nullptr;
  SPECDEC_HOST_DEVICE index_t rank() const noexcept { return 0; }
  SPECDEC_HOST_DEVICE index_t size() const noexcept { return 1; }
  SPECDEC_HOST_DEVICE void sync() const noexcept {}
  SPECDEC_HOST_DEVICE std::byte* wide_scratch() const noexcept { return wide; }
};

/// An argument a team job's faults can name: its index into the job's `names`, and the name.
struct job_argument {
  int index;
  const char* name;
};

/// Sets `job.where` and the names of the arguments its faults report (every other name empty).
template <class Job>
void name_job(Job& job, const char* where, std::initializer_list<job_argument> arguments) {
  job.where = where;
  for (const char*& name : job.names) name = "";
  for (const job_argument& a : arguments) job.names[a.index] = a.name;
}

/// Scratch a team gets, rounded up so that consecutive teams' scratch stays 16-byte aligned.
inline std::size_t team_scratch_stride(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

/// A job's wide scratch per team (0 for jobs that declare none), rounded as team_scratch_stride.
template <class Job>
std::size_t team_wide_stride(const Job& job) {
  if constexpr (requires { job.wide_scratch_bytes(); })
    return team_scratch_stride(job.wide_scratch_bytes());
  else
    return 0;
}

/// The shape of a team job, for the backend concept's check of `run_teams`.
struct team_job_archetype {
  const char* where = "";
  const char* names[team_job_names] = {};
  std::size_t scratch_bytes() const { return 0; }
  template <class Team>
  SPECDEC_HOST_DEVICE team_fault operator()(Team&, index_t, std::byte*) const {
    return {};
  }
};

}  // namespace specdec::detail
