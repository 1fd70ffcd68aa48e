// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The fault codes of the grammar layer's team jobs (token bitmasks on a backend) and their
/// messages: codes 128-143 (backend/detail/team.hpp); a job of this layer describes the tree layer's
/// codes too.
#pragma once

#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>
#include <specdec/tree/detail/faults.hpp>

namespace specdec::detail {

enum class grammar_fault : std::int32_t {
  bitmask_index = 128,  ///< row = entry, value = the row index, limit = rows of logits and bitmask
};

/// Throws the error of a grammar_fault or a tree_fault (a fault_describer); returns for any other code.
inline void describe_grammar_fault(const char* where, const char* name, const team_fault& f) {
  if (static_cast<grammar_fault>(f.code) == grammar_fault::bitmask_index)
    throw_invalid_argument(where, name, "[", f.row, "] = ", fault_integer(f.value), "; expected a row in [0, ", f.limit,
                           ") (rows of both logits and bitmask)");
  describe_tree_fault(where, name, f);
}

}  // namespace specdec::detail
