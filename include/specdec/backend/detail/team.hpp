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

/// Faults a team job reports beyond the row faults (codes below 64 are `fault` values, backend/detail/
/// row_simd.hpp, found in row `row` of argument `arg`).
enum class team_error : std::int32_t {
  node_count = 64,            ///< row = request, value = node count, limit = nodes per request
  root_parent = 65,           ///< row = request, value = node 0's parent
  bad_parent = 66,            ///< row = request, column = node, value = its parent
  token_range = 67,           ///< row = request, column = node, value = its token, limit = V
  target_rows = 68,           ///< row = request, value = first target row, column = rows needed, limit = rows
  draft_row = 69,             ///< row = request, column = node, value = draft row, limit = rows
  noise_row = 70,             ///< row = request, value = noise row, limit = rows
  max_accepted = 71,          ///< row = request, value = the cap
  output_width = 72,          ///< row = request, value = tokens it may emit, limit = columns (arg: the output)
  probability_entry = 73,     ///< row = matrix row, column = token, value = the entry
  uniform_value = 74,         ///< row = request, column = position (-1: one per request), value = the uniform, limit = 0 [0,1) / 1 (0,1]
  too_few_uniforms = 75,      ///< row = request, column = position needed, limit = columns supplied
  argmax_range = 76,          ///< row = target row, value = the argmax, limit = V
  bonus_range = 77,           ///< row = request, value = the bonus token, limit = V
  noise_entry = 78,           ///< row = noise row, column = token, value = the entry
  distribution_entry = 79,    ///< row = matrix row, column = token, value = the entry (a draft row's entry outside [0, 1])
  distribution_sum = 80,      ///< row = matrix row, value = the row's sum
  not_chain = 81,             ///< row = request, column = a node with several children (FlashInfer's re-tests)
  unselected_parent = 82,     ///< row = request, column = a selected candidate, value = its unselected parent
  mapped_token = 83,          ///< row = request, column = draft token, value = its target id, limit = V (arg: d2t or none)
  token_entry = 84,           ///< row = entry, value = the token, limit = V
  bitmask_index = 85,         ///< row = entry, value = the row index, limit = rows of logits and bitmask
  mask_allows_none = 86,      ///< row = request, value = the bitmask row (node 0's: nothing could be emitted)
  mask_all_neg_inf = 87,      ///< row = request, column = node, value = the bitmask row (allowed entries all -inf)
  repetition_value = 88,      ///< row = request, value = the repetition penalty
  finite_value = 89,          ///< row = entry, value = the entry (a penalty or bias that must be finite)
  entry_range = 90,           ///< row = request, column = first entry, value = end, limit = entries
  history_token = 91,         ///< row = entry, column = request, value = the token, limit = V
  history_count = 92,         ///< row = entry, column = request, value = the count
  link_node = 93,             ///< row = request, column = the node a link points at, limit = nodes per request
  sibling_cycle = 94,         ///< row = request, column = the node whose child list cycles
  path_cycle = 95,            ///< row = request, column = the last accepted node, value = the node revisited
  link_index = 96,            ///< row = request, column = the slot, value = the node, limit = N (own slots [row N, (row + 1) N))
  predicted_token = 97,       ///< row = entry, column = the token (an int32 output must hold it)
  link_value = 98,            ///< row = request, column = node, limit = the link, value = nodes per request
  candidate_token = 99,       ///< row = request, column = node, limit = the token, value = V
  link_twice = 100,           ///< row = request, column = the node two links point at
  link_unreached = 101,       ///< row = request, column = nodes the links reach, limit = nodes per request
  link_order = 102,           ///< row = request, column = node, limit = the node it is linked under
  draft_count = 103,          ///< row = request, column = its drafts, limit = the most allowed
  missing_argument = 104,     ///< row = request (the argument, empty, is one the request reads)
  top_k_value = 105,          ///< row = matrix row, limit = its k, value = V
  renorm_sum = 106,           ///< row = matrix row, value = the row's sum (renormalisers' tolerance, 1e-3)
  logit_value = 107,          ///< row = matrix row, column = token, value = the logit (NaN or +inf)
  top_p_value = 108,          ///< row = matrix row, value = its p
  sequence_length = 109,      ///< row = request, value = its length, limit = the longest allowed
  mask_entries = 110,         ///< row = request, column = entries requests 0..row need, limit = entries given, value = 1: the total
  segment_range = 111,        ///< row = segment, column = its start, value = its end, limit = elements
  packed_offset = 112,        ///< row = offset index, column = the offset, limit = the offset expected
  packed_size = 113,          ///< row = request, column = bytes requests 0..row need, limit = the most an int32 offset addresses
  shared_row = 114,           ///< row = request, column = another request, value = a row both write
};

/// What a team job returns: `code` 0 when the team's work is done.
struct team_fault {
  std::int32_t code = 0;
  std::int32_t arg = 0;     ///< index into the job's `names`
  std::int64_t row = 0;
  std::int64_t column = 0;
  std::int64_t limit = 0;
  double value = 0.0;
};

SPECDEC_HOST_DEVICE inline team_fault make_team_fault(team_error e, int arg, std::int64_t row, std::int64_t column,
                                                      double value, std::int64_t limit = 0) noexcept {
  return team_fault{static_cast<std::int32_t>(e), arg, row, column, limit, value};
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
