// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The fault codes of the mask layer's team jobs (batch tree masks, FlashInfer's packed masks,
/// segment_packbits) and their messages: codes 96-127 (backend/detail/team.hpp); a job of this layer
/// describes the tree layer's codes too.
#pragma once

#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>
#include <specdec/tree/detail/faults.hpp>

namespace specdec::detail {

enum class mask_fault : std::int32_t {
  sequence_length = 96,  ///< row = request, value = its length, limit = the longest allowed
  mask_entries = 97,     ///< row = request, column = entries requests 0..row need, limit = entries given, value = 1: the total
  segment_range = 98,    ///< row = segment, column = its start, value = its end, limit = elements
  packed_offset = 99,    ///< row = offset index, column = the offset, limit = the offset expected
  packed_size = 100,     ///< row = request, column = bytes requests 0..row need, limit = the most an int32 offset addresses
};

/// Throws the error of a mask_fault or a tree_fault (a fault_describer); returns for any other code.
inline void describe_mask_fault(const char* where, const char* name, const team_fault& f) {
  const auto i = fault_integer;
  switch (static_cast<mask_fault>(f.code)) {
    case mask_fault::sequence_length:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a length in [0, ", f.limit, "]");
    case mask_fault::mask_entries:
      throw_invalid_argument(where, name, " has ", f.limit, " entries; the masks of requests 0..", f.row, " need ", f.column,
                             f.value != 0.0 ? " (the whole batch's); expected exactly that" : "; expected at least that");
    case mask_fault::segment_range:
      throw_invalid_argument(where, name, " gives segment ", f.row, " elements [", f.column, ", ", i(f.value),
                             "); expected a non-decreasing range within [0, ", f.limit, "]");
    case mask_fault::packed_offset:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.column, "; expected ", f.limit,
                             " (offsets[0] = 0, each the previous plus the previous segment's bytes, the last the output's size)");
    case mask_fault::packed_size:
      throw_invalid_argument(where, "the packed masks of requests 0..", f.row, " need ", f.column, " bytes; expected at most ", f.limit,
                             " (", name, " is int32)");
  }
  describe_tree_fault(where, name, f);
}

}  // namespace specdec::detail
