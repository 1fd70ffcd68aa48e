// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The fault codes of the peers' team jobs (SGLang's link-encoded trees, vLLM's rejection sampler)
/// and their messages: codes 208-255 (backend/detail/team.hpp); a job of this layer describes the
/// sampling, grammar, mask and tree layers' codes too.
#pragma once

#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>
#include <specdec/mask/detail/faults.hpp>
#include <specdec/sampling/detail/faults.hpp>

namespace specdec::detail {

enum class interop_fault : std::int32_t {
  link_node = 208,         ///< row = request, column = the node a link points at, limit = nodes per request
  sibling_cycle = 209,     ///< row = request, column = the node whose child list cycles
  path_cycle = 210,        ///< row = request, column = the last accepted node, value = the node revisited
  link_index = 211,        ///< row = request, column = the slot, value = the node, limit = N (own slots [row N, (row + 1) N))
  predicted_token = 212,   ///< row = entry, column = the token (an int32 output must hold it)
  link_value = 213,        ///< row = request, column = node, limit = the link, value = nodes per request
  candidate_token = 214,   ///< row = request, column = node, limit = the token, value = V
  link_twice = 215,        ///< row = request, column = the node two links point at
  link_unreached = 216,    ///< row = request, column = nodes the links reach, limit = nodes per request
  link_order = 217,        ///< row = request, column = node, limit = the node it is linked under
  draft_count = 218,       ///< row = request, column = its drafts, limit = the most allowed
  missing_argument = 219,  ///< row = request (the argument, empty, is one the request reads)
};

/// Throws the error of an interop_fault or of any layer below (a fault_describer); returns for any other
/// code.
inline void describe_interop_fault(const char* where, const char* name, const team_fault& f) {
  const auto i = fault_integer;
  switch (static_cast<interop_fault>(f.code)) {
    case interop_fault::link_node:
      throw_invalid_argument(where, "a link of request ", f.row, " points at node ", f.column, "; expected [0, ", f.limit, ")");
    case interop_fault::sibling_cycle:
      throw_invalid_argument(where, "the sibling links of request ", f.row, " under node ", f.column,
                             " cycle; expected each child list to end with -1");
    case interop_fault::path_cycle:
      throw_invalid_argument(where, "the links of request ", f.row, " lead from node ", f.column, " back to node ", i(f.value),
                             " on the accepted path; expected a tree (the links cycle)");
    case interop_fault::link_index:
      throw_invalid_argument(where, name, "(", f.row, ", ", i(f.value), ") = ", f.column, "; expected [", f.row * f.limit, ", ",
                             (f.row + 1) * f.limit, "), request ", f.row, "'s own slots");
    case interop_fault::predicted_token:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.column, "; expected a token id in [0, 2^31 - 1]");
    case interop_fault::link_value:
      throw_invalid_argument(where, name, "(", f.row, ", ", f.column, ") = ", f.limit, "; expected -1 or a node in [0, ",
                             i(f.value), ")");
    case interop_fault::candidate_token:
      throw_invalid_argument(where, name, "(", f.row, ", ", f.column, ") = ", f.limit, "; expected a token in [0, V = ",
                             i(f.value), ")");
    case interop_fault::link_twice:
      throw_invalid_argument(where, "the links of request ", f.row, " reach node ", f.column,
                             " twice; expected a tree (each node linked once)");
    case interop_fault::link_unreached:
      throw_invalid_argument(where, "the links of request ", f.row, " reach ", f.column, " of its ", f.limit,
                             " nodes; expected every node under the root");
    case interop_fault::link_order:
      throw_invalid_argument(where, "the links of request ", f.row, " put node ", f.column, " under node ", f.limit,
                             "; expected parents numbered before their children (as build_tree_kernel_efficient does)");
    case interop_fault::draft_count:
      throw_invalid_argument(where, name, " gives request ", f.row, " ", f.column, " drafts; expected at most ", f.limit,
                             " (max_spec_len)");
    case interop_fault::missing_argument:
      throw_invalid_argument(where, "request ", f.row, " is random (not greedy) and reads ", name, "; got an empty one");
  }
  describe_sampling_fault(where, name, f);
  describe_mask_fault(where, name, f);
}

}  // namespace specdec::detail
