// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The fault codes of the sampling layer's team jobs (the batch verifiers, filters, penalties) and
/// their messages: codes 144-207 (backend/detail/team.hpp); a job of this layer describes the grammar
/// and tree layers' codes too.
#pragma once

#include <cstdint>

#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>
#include <specdec/backend/detail/row_simd.hpp>
#include <specdec/grammar/detail/faults.hpp>

namespace specdec::detail {

enum class sampling_fault : std::int32_t {
  draft_row = 144,           ///< row = request, column = node, value = draft row, limit = rows
  noise_row = 145,           ///< row = request, value = noise row, limit = rows
  max_accepted = 146,        ///< row = request, value = the cap
  output_width = 147,        ///< row = request, value = tokens it may emit, limit = columns (arg: the output)
  probability_entry = 148,   ///< row = matrix row, column = token, value = the entry
  uniform_value = 149,       ///< row = request, column = position (-1: one per request), value = the uniform, limit = 0 [0,1) / 1 (0,1]
  too_few_uniforms = 150,    ///< row = request, column = position needed, limit = columns supplied
  argmax_range = 151,        ///< row = target row, value = the argmax, limit = V
  bonus_range = 152,         ///< row = request, value = the bonus token, limit = V
  noise_entry = 153,         ///< row = noise row, column = token, value = the entry
  distribution_entry = 154,  ///< row = matrix row, column = token, value = the entry (a draft row's entry outside [0, 1])
  distribution_sum = 155,    ///< row = matrix row, value = the row's sum, column = the row's rounding bits (0: float; core/half.hpp)
  not_chain = 156,           ///< row = request, column = a node with several children (FlashInfer's re-tests)
  mask_allows_none = 157,    ///< row = request, value = the bitmask row (node 0's: nothing could be emitted)
  mask_all_neg_inf = 158,    ///< row = request, column = node, value = the bitmask row (allowed entries all -inf)
  repetition_value = 159,    ///< row = request, value = the repetition penalty
  finite_value = 160,        ///< row = entry, value = the entry (a penalty or bias that must be finite)
  entry_range = 161,         ///< row = request, column = first entry, value = end, limit = entries
  history_token = 162,       ///< row = entry, column = request, value = the token, limit = V
  history_count = 163,       ///< row = entry, column = request, value = the count
  top_k_value = 164,         ///< row = matrix row, limit = its k, value = V
  renorm_sum = 165,          ///< row = matrix row, value = the row's sum, column = the rows' rounding bits (renormalisers' tolerance, 1e-3 + 2^-column)
  logit_value = 166,         ///< row = matrix row, column = token, value = the logit (NaN or +inf)
  top_p_value = 167,         ///< row = matrix row, value = its p
  shared_row = 168,          ///< row = request, column = another request, value = a row both write
};

/// Throws the error of a sampling_fault, a grammar_fault or a tree_fault (a fault_describer); returns
/// for any other code.
inline void describe_sampling_fault(const char* where, const char* name, const team_fault& f) {
  const auto i = fault_integer;
  switch (static_cast<sampling_fault>(f.code)) {
    case sampling_fault::draft_row:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", i(f.value), "; expected -1 (deterministic) or a row in [0, ",
                             f.limit, ")");
    case sampling_fault::noise_row:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a row in [0, ", f.limit, ")");
    case sampling_fault::max_accepted:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected -1 (no cap) or a cap >= 0");
    case sampling_fault::output_width:
      throw_invalid_argument(where, name, " has ", f.limit, " columns; request ", f.row, " may emit ", i(f.value),
                             " tokens (its deepest path, capped by max_accepted, plus the final token)");
    case sampling_fault::probability_entry:
    case sampling_fault::distribution_entry:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value, "; expected a probability in [0, 1]");
    case sampling_fault::uniform_value:
      if (f.column < 0)
        throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a value in ", f.limit == 0 ? "[0, 1)" : "(0, 1]");
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value, "; expected a value in ",
                             f.limit == 0 ? "[0, 1)" : "(0, 1]");
    case sampling_fault::too_few_uniforms:
      throw_invalid_argument(where, "request ", f.row, " needs uniform ", f.column, " but ", name, " has ", f.limit,
                             " columns");
    case sampling_fault::argmax_range:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a token in [0, V = ", f.limit, ")");
    case sampling_fault::bonus_range:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected -1 (none) or a token in [0, V = ",
                             f.limit, ")");
    case sampling_fault::noise_entry:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value,
                             "; expected a finite value >= 0 (an Exp(1) sample)");
    case sampling_fault::distribution_sum:
      if (f.column > 0)  // a 16-bit row: the tolerance includes its rounding (residual_rows::check_row, core/half.hpp)
        throw_invalid_argument(where, name, " row ", f.row, " sums to ", f.value, "; expected 1 within ", probability_sum_tolerance,
                               " plus the rounding of its ",
                               f.column == 8 ? "bfloat16 entries (2^-8 of the sum)" : "float16 entries (2^-11 of the sum and 2^-25 per entry)");
      throw_invalid_argument(where, name, " row ", f.row, " sums to ", f.value, "; expected 1 within ",
                             probability_sum_tolerance);
    case sampling_fault::not_chain:
      throw_invalid_argument(where, "request ", f.row, ": flashinfer_retest applies to chains; node ", f.column,
                             " of this tree has several children");
    case sampling_fault::mask_allows_none:
      throw_invalid_argument(where, "request ", f.row, " node 0: ", name, " row ", i(f.value),
                             " allows no token; expected at least one (node 0's row constrains the first token emitted)");
    case sampling_fault::mask_all_neg_inf:
      throw_invalid_argument(where, "request ", f.row, " node ", f.column, ": ", name, " row ", i(f.value),
                             " allows tokens but every one has logit -inf; expected at least one finite");
    case sampling_fault::repetition_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a finite value > 0 (1: none)");
    case sampling_fault::finite_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a finite value");
    case sampling_fault::entry_range:
      throw_invalid_argument(where, name, " gives request ", f.row, " entries [", f.column, ", ", i(f.value),
                             "); expected a non-decreasing range within [0, ", f.limit, "]");
    case sampling_fault::history_token:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), " (request ", f.column,
                             "); expected token ids in [0, V = ", f.limit, "), sorted and distinct per request");
    case sampling_fault::history_count:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), " (request ", f.column, "); expected a count >= 0");
    case sampling_fault::top_k_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.limit, "; expected 1 <= k <= V = ", i(f.value));
    case sampling_fault::renorm_sum:
      if (f.column > 0)  // a 16-bit row: the tolerance includes its rounding (filter_rows.hpp, core/half.hpp)
        throw_invalid_argument(where, name, " row ", f.row, " sums to ", f.value, "; expected 1 within 0.001 plus the rounding of its ",
                               f.column == 8 ? "bfloat16 entries (2^-8 of the sum)" : "float16 entries (2^-11 of the sum and 2^-25 per entry)");
      throw_invalid_argument(where, name, " row ", f.row, " sums to ", f.value, "; expected 1 within 0.001");
    case sampling_fault::logit_value:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value, "; expected finite values or -inf");
    case sampling_fault::top_p_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a value in (0, 1]");
    case sampling_fault::shared_row:
      throw_invalid_argument(where, "requests ", f.row, " and ", f.column, " both write ", name, " row ", i(f.value),
                             "; expected disjoint row ranges [target_rows(r), target_rows(r) + node_counts(r))");
  }
  describe_grammar_fault(where, name, f);
}

}  // namespace specdec::detail
