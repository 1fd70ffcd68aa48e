// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The fault codes of the tree layer's team jobs (a padded batch of trees, draft tokens, the device
/// EAGLE-2 build) and their messages: codes 64-95 (backend/detail/team.hpp).
#pragma once

#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>

namespace specdec::detail {

enum class tree_fault : std::int32_t {
  node_count = 64,         ///< row = request, value = node count, limit = nodes per request
  root_parent = 65,        ///< row = request, value = node 0's parent
  bad_parent = 66,         ///< row = request, column = node, value = its parent
  token_range = 67,        ///< row = request, column = node, value = its token, limit = V
  target_rows = 68,        ///< row = request, value = first target row, column = rows needed, limit = rows
  token_entry = 69,        ///< row = entry, value = the token, limit = V
  unselected_parent = 70,  ///< row = request, column = a selected candidate, value = its unselected parent
  mapped_token = 71,       ///< row = request, column = draft token, value = its target id, limit = V (arg: d2t or none)
};

/// Throws the error of a tree_fault (a fault_describer); returns for any other code.
inline void describe_tree_fault(const char* where, const char* name, const team_fault& f) {
  const auto i = fault_integer;
  switch (static_cast<tree_fault>(f.code)) {
    case tree_fault::node_count:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a node count in [1, ", f.limit,
                             "] (node 0 is the root)");
    case tree_fault::root_parent:
      throw_invalid_argument(where, name, "[", f.row, ", 0] = ", i(f.value), "; expected -1 (node 0 is the root)");
    case tree_fault::bad_parent:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", i(f.value), "; expected a parent in [0, ",
                             f.column, ") (parents precede their children)");
    case tree_fault::token_range:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", i(f.value), "; expected a token id in [0, V = ",
                             f.limit, ")");
    case tree_fault::target_rows:
      throw_invalid_argument(where, "request ", f.row, " needs target rows [", i(f.value), ", ", i(f.value) + f.column,
                             ") but ", name, " has ", f.limit, " rows");
    case tree_fault::token_entry:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a token id in [0, ", f.limit, ")");
    case tree_fault::unselected_parent:
      throw_invalid_argument(where, "request ", f.row, ": candidate ", f.column, " was selected without its parent ",
                             i(f.value), " (scores must not increase along a path: NaN or positive log-probabilities?)");
    case tree_fault::mapped_token:
      if (name[0] != '\0')
        throw_invalid_argument(where, "request ", f.row, ": ", name, " maps draft token ", f.column, " to ", i(f.value),
                               "; expected a target id in [0, ", f.limit, ")");
      throw_invalid_argument(where, "request ", f.row, ": draft token ", f.column, "; expected a target id in [0, ", f.limit, ")");
  }
}

}  // namespace specdec::detail
