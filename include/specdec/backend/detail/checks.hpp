// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Shape and range checks every backend applies at its public boundary, and the translation of
/// a kernel's `fault` into a specdec::invalid_argument that names the argument, the row and, for host
/// memory, the first offending column.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <specdec/config.hpp>
#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/backend/detail/team.hpp>
#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>
#include <specdec/core/view_checks.hpp>

namespace specdec::detail::inline SPECDEC_ISA {

/// A `[rows x V]` input: V >= 1, rows >= 0, contiguous rows that do not overlap (the kernels stream
/// each row), not null unless empty.
template <class T, class Space>
void check_row_matrix(const char* where, const char* name, const matrix_view<T, Space>& x) {
  SPECDEC_EXPECTS(x.rows() >= 0 && x.cols() >= 1, where, name, " has shape [", x.rows(), " x ", x.cols(),
                  "]; expected at least one column");
  SPECDEC_EXPECTS(x.cols() <= INT32_MAX, where, name, " has ", x.cols(),
                  " columns; token ids are int32, so at most 2^31 - 1 are supported");
  check_view(where, name, x, packed);
}

/// A vector argument of `expected` entries, packed (stride 1: the kernels take its pointer).
template <class T, class Space>
void check_length(const char* where, const char* name, const vector_view<T, Space>& v, index_t expected,
                  const char* what_expected) {
  SPECDEC_EXPECTS(v.rows() == expected, where, name, " has length ", v.rows(), "; expected ", expected, " (",
                  what_expected, ")");
  check_view(where, name, v, packed);
}

/// A matrix output of shape `[rows x cols]`: contiguous rows that do not overlap, not null unless empty.
template <class T, class Space>
void check_shape(const char* where, const char* name, const matrix_view<T, Space>& m, index_t rows, index_t cols,
                 const char* what_expected) {
  SPECDEC_EXPECTS(m.rows() == rows && m.cols() == cols, where, name, " has shape [", m.rows(), " x ", m.cols(),
                  "]; expected [", rows, " x ", cols, "] (", what_expected, ")");
  check_view(where, name, m, packed);
}

/// Throws when output `out` shares memory with argument `other` (an exact alias too, unless allowed).
template <class A, class B>
void check_apart(const char* where, const char* out_name, const A& out, const char* other_name, const B& other,
                 bool exact_alias_allowed = false) {
  check_disjoint(where, extent_of(where, out_name, out), extent_of(where, other_name, other), exact_alias_allowed);
}

inline void check_k(const char* where, index_t k, index_t cols) {
  SPECDEC_EXPECTS(k >= 1 && k <= cols, where, "k = ", k, " is out of range; expected 1 <= k <= V = ", cols);
}

/// Temperature >= 0 where 0 means greedy, or > 0 where the quantity has no greedy limit. A positive
/// temperature must be at least 4 / FLT_MAX (~1.2e-38): the kernels scale by 1 / T and by 1 / T times
/// log2(e), and a smaller T makes that scale infinite and an entry at the row maximum 0 * inf = NaN.
template <class T>
void check_temperature(const char* where, T temperature, bool zero_allowed) {
  constexpr T smallest = T(4) / std::numeric_limits<T>::max();
  SPECDEC_EXPECTS(std::isfinite(static_cast<double>(temperature)) &&
                      (zero_allowed ? temperature >= T(0) : temperature > T(0)) &&
                      (temperature == T(0) || temperature >= smallest),
                  where, "temperature = ", temperature, " is out of range; expected a finite value ",
                  zero_allowed ? ">= 0 (0 means greedy)" : "> 0", " and, when positive, >= ", smallest);
}

inline const char* describe(fault f) {
  switch (f) {
    case fault::none: return "no error";
    case fault::nan: return "contains NaN";
    case fault::positive_infinity: return "contains +inf";
    case fault::all_masked: return "is entirely -inf, so it defines no distribution";
    case fault::negative_probability: return "contains a negative probability";
    case fault::not_normalised: return "does not sum to 1 within 1e-4";
    case fault::uniform_out_of_range: return "is outside [0, 1)";
    case fault::index_out_of_range: return "is out of range";
  }
  return "is invalid";
}

inline const char* expectation(fault f) {
  switch (f) {
    case fault::nan:
    case fault::positive_infinity: return "expected finite values (-inf is allowed and masks a token)";
    case fault::all_masked: return "expected at least one finite logit per row";
    case fault::negative_probability:
    case fault::not_normalised: return "expected a probability distribution per row";
    case fault::uniform_out_of_range: return "expected uniforms in [0, 1)";
    case fault::index_out_of_range: return "expected indices inside the gathered extent";
    default: return "";
  }
}

/// First column of a host row that shows `f` (for the message; -1 when not applicable).
template <class T>
index_t first_bad_column(const T* row, index_t n, fault f) {
  for (index_t j = 0; j < n; ++j) {
    const double v = static_cast<double>(row[j]);
    if (f == fault::nan && v != v) return j;
    if (f == fault::positive_infinity && v == HUGE_VAL) return j;
    if (f == fault::negative_probability && v < 0) return j;
  }
  return -1;
}

/// Throws the error for a fault found in row `row` of argument `name`. When `host_row` is given the
/// message also names the first offending column.
template <class T = float>
[[noreturn]] void throw_fault(const char* where, const char* name, index_t row, fault f,
                              const T* host_row = nullptr, index_t n = 0) {
  std::string column;
  if (host_row != nullptr) {
    const index_t j = first_bad_column(host_row, n, f);
    if (j >= 0) column = " (first at column " + std::to_string(j) + ")";
  }
  throw_invalid_argument(where, name, " row ", row, " ", describe(f), column, "; ", expectation(f));
}

/// Throws the error of a team job's fault (host).
[[noreturn]] inline void throw_team_fault(const char* where, const char* name, const team_fault& f) {
  // A fault carries integers as doubles; those past the int64 range (an int64 value rounded up to
  // 2^63) saturate rather than convert out of range.
  const auto i = [](double v) {
    constexpr double limit = 9223372036854775808.0;  // 2^63
    if (!(v == v)) return 0LL;
    if (v >= limit) return std::numeric_limits<long long>::max();
    if (v < -limit) return std::numeric_limits<long long>::min();
    return static_cast<long long>(v);
  };
  switch (static_cast<team_error>(f.code)) {
    case team_error::node_count:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a node count in [1, ", f.limit,
                             "] (node 0 is the root)");
    case team_error::root_parent:
      throw_invalid_argument(where, name, "[", f.row, ", 0] = ", i(f.value), "; expected -1 (node 0 is the root)");
    case team_error::bad_parent:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", i(f.value), "; expected a parent in [0, ",
                             f.column, ") (parents precede their children)");
    case team_error::token_range:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", i(f.value), "; expected a token id in [0, V = ",
                             f.limit, ")");
    case team_error::target_rows:
      throw_invalid_argument(where, "request ", f.row, " needs target rows [", i(f.value), ", ", i(f.value) + f.column,
                             ") but ", name, " has ", f.limit, " rows");
    case team_error::shared_row:
      throw_invalid_argument(where, "requests ", f.row, " and ", f.column, " both write ", name, " row ", i(f.value),
                             "; expected disjoint row ranges [target_rows(r), target_rows(r) + node_counts(r))");
    case team_error::draft_row:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", i(f.value), "; expected -1 (deterministic) or a row in [0, ",
                             f.limit, ")");
    case team_error::noise_row:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a row in [0, ", f.limit, ")");
    case team_error::max_accepted:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected -1 (no cap) or a cap >= 0");
    case team_error::output_width:
      throw_invalid_argument(where, name, " has ", f.limit, " columns; request ", f.row, " may emit ", i(f.value),
                             " tokens (its deepest path, capped by max_accepted, plus the final token)");
    case team_error::probability_entry:
    case team_error::distribution_entry:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value, "; expected a probability in [0, 1]");
    case team_error::uniform_value:
      if (f.column < 0)
        throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a value in ", f.limit == 0 ? "[0, 1)" : "(0, 1]");
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value, "; expected a value in ",
                             f.limit == 0 ? "[0, 1)" : "(0, 1]");
    case team_error::too_few_uniforms:
      throw_invalid_argument(where, "request ", f.row, " needs uniform ", f.column, " but ", name, " has ", f.limit,
                             " columns");
    case team_error::argmax_range:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a token in [0, V = ", f.limit, ")");
    case team_error::bonus_range:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected -1 (none) or a token in [0, V = ",
                             f.limit, ")");
    case team_error::noise_entry:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value,
                             "; expected a finite value >= 0 (an Exp(1) sample)");
    case team_error::not_chain:
      throw_invalid_argument(where, "request ", f.row, ": flashinfer_retest applies to chains; node ", f.column,
                             " of this tree has several children");
    case team_error::unselected_parent:
      throw_invalid_argument(where, "request ", f.row, ": candidate ", f.column, " was selected without its parent ",
                             i(f.value), " (scores must not increase along a path: NaN or positive log-probabilities?)");
    case team_error::mapped_token:
      if (name[0] != '\0')
        throw_invalid_argument(where, "request ", f.row, ": ", name, " maps draft token ", f.column, " to ", i(f.value),
                               "; expected a target id in [0, ", f.limit, ")");
      throw_invalid_argument(where, "request ", f.row, ": draft token ", f.column, "; expected a target id in [0, ", f.limit, ")");
    case team_error::token_entry:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a token id in [0, ", f.limit, ")");
    case team_error::bitmask_index:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a row in [0, ", f.limit,
                             ") (rows of both logits and bitmask)");
    case team_error::mask_allows_none:
      throw_invalid_argument(where, "request ", f.row, " node 0: ", name, " row ", i(f.value),
                             " allows no token; expected at least one (node 0's row constrains the first token emitted)");
    case team_error::mask_all_neg_inf:
      throw_invalid_argument(where, "request ", f.row, " node ", f.column, ": ", name, " row ", i(f.value),
                             " allows tokens but every one has logit -inf; expected at least one finite");
    case team_error::repetition_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a finite value > 0 (1: none)");
    case team_error::finite_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a finite value");
    case team_error::entry_range:
      throw_invalid_argument(where, name, " gives request ", f.row, " entries [", f.column, ", ", i(f.value),
                             "); expected a non-decreasing range within [0, ", f.limit, "]");
    case team_error::history_token:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), " (request ", f.column,
                             "); expected token ids in [0, V = ", f.limit, "), sorted and distinct per request");
    case team_error::history_count:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), " (request ", f.column, "); expected a count >= 0");
    case team_error::link_node:
      throw_invalid_argument(where, "a link of request ", f.row, " points at node ", f.column, "; expected [0, ", f.limit, ")");
    case team_error::sibling_cycle:
      throw_invalid_argument(where, "the sibling links of request ", f.row, " under node ", f.column,
                             " cycle; expected each child list to end with -1");
    case team_error::path_cycle:
      throw_invalid_argument(where, "the links of request ", f.row, " lead from node ", f.column, " back to node ", i(f.value),
                             " on the accepted path; expected a tree (the links cycle)");
    case team_error::link_index:
      throw_invalid_argument(where, name, "(", f.row, ", ", i(f.value), ") = ", f.column, "; expected [", f.row * f.limit, ", ",
                             (f.row + 1) * f.limit, "), request ", f.row, "'s own slots");
    case team_error::predicted_token:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.column, "; expected a token id in [0, 2^31 - 1]");
    case team_error::link_value:
      throw_invalid_argument(where, name, "(", f.row, ", ", f.column, ") = ", f.limit, "; expected -1 or a node in [0, ",
                             i(f.value), ")");
    case team_error::candidate_token:
      throw_invalid_argument(where, name, "(", f.row, ", ", f.column, ") = ", f.limit, "; expected a token in [0, V = ",
                             i(f.value), ")");
    case team_error::link_twice:
      throw_invalid_argument(where, "the links of request ", f.row, " reach node ", f.column,
                             " twice; expected a tree (each node linked once)");
    case team_error::link_unreached:
      throw_invalid_argument(where, "the links of request ", f.row, " reach ", f.column, " of its ", f.limit,
                             " nodes; expected every node under the root");
    case team_error::link_order:
      throw_invalid_argument(where, "the links of request ", f.row, " put node ", f.column, " under node ", f.limit,
                             "; expected parents numbered before their children (as build_tree_kernel_efficient does)");
    case team_error::draft_count:
      throw_invalid_argument(where, name, " gives request ", f.row, " ", f.column, " drafts; expected at most ", f.limit,
                             " (max_spec_len)");
    case team_error::missing_argument:
      throw_invalid_argument(where, "request ", f.row, " is random (not greedy) and reads ", name, "; got an empty one");
    case team_error::top_k_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.limit, "; expected 1 <= k <= V = ", i(f.value));
    case team_error::renorm_sum:
      throw_invalid_argument(where, name, " row ", f.row, " sums to ", f.value, "; expected 1 within 0.001");
    case team_error::logit_value:
      throw_invalid_argument(where, name, "[", f.row, ", ", f.column, "] = ", f.value, "; expected finite values or -inf");
    case team_error::top_p_value:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.value, "; expected a value in (0, 1]");
    case team_error::sequence_length:
      throw_invalid_argument(where, name, "[", f.row, "] = ", i(f.value), "; expected a length in [0, ", f.limit, "]");
    case team_error::mask_entries:
      throw_invalid_argument(where, name, " has ", f.limit, " entries; the masks of requests 0..", f.row, " need ", f.column,
                             f.value != 0.0 ? " (the whole batch's); expected exactly that" : "; expected at least that");
    case team_error::segment_range:
      throw_invalid_argument(where, name, " gives segment ", f.row, " elements [", f.column, ", ", i(f.value),
                             "); expected a non-decreasing range within [0, ", f.limit, "]");
    case team_error::packed_offset:
      throw_invalid_argument(where, name, "[", f.row, "] = ", f.column, "; expected ", f.limit,
                             " (offsets[0] = 0, each the previous plus the previous segment's bytes, the last the output's size)");
    case team_error::packed_size:
      throw_invalid_argument(where, "the packed masks of requests 0..", f.row, " need ", f.column, " bytes; expected at most ", f.limit,
                             " (", name, " is int32)");
    case team_error::distribution_sum:
      throw_invalid_argument(where, name, " row ", f.row, " sums to ", f.value, "; expected 1 within ",
                             probability_sum_tolerance);
  }
  const fault rf = static_cast<fault>(f.code);
  throw_invalid_argument(where, name, " row ", f.row, " ", describe(rf), "; ", expectation(rf));
}

/// A team job's host form: teams 0 .. teams - 1 one after another on the host's one-thread team (the
/// same decisions a backend's `run_teams` makes), the first fault thrown as its error.
template <class Job>
void run_serial(const Job& job, index_t teams) {
  std::vector<std::byte> scratch(job.scratch_bytes());
  const serial_team team;
  for (index_t t = 0; t < teams; ++t)
    if (const team_fault f = job(team, t, scratch.data()); f.code != 0) throw_team_fault(job.where, job.names[f.arg], f);
}

}  // namespace specdec::detail::inline SPECDEC_ISA

namespace specdec::detail::inline SPECDEC_ISA {

// Argument checks of each primitive, shared by every backend so that the same mistake gives the
// same message everywhere. Names in messages are the parameter names of the concept.

template <class X, class Out>
void check_row_reduction(const char* where, const X& x, const Out& out, const char* out_name) {
  check_row_matrix(where, "logits", x);
  check_length(where, out_name, out, x.rows(), "one entry per row of logits");
  check_apart(where, out_name, out, "logits", x);
}

template <class X, class Values, class Indices>
void check_topk(const char* where, const X& x, index_t k, const Values& values, const Indices& indices) {
  check_row_matrix(where, "logits", x);
  check_k(where, k, x.cols());
  check_shape(where, "values", values, x.rows(), k, "[rows x k]");
  check_shape(where, "indices", indices, x.rows(), k, "[rows x k]");
  check_apart(where, "values", values, "logits", x);
  check_apart(where, "indices", indices, "logits", x);
  check_apart(where, "indices", indices, "values", values);
}

/// row_softmax / row_log_softmax: `out` may be `logits` itself (in place), or separate memory.
template <class X, class Out>
void check_elementwise(const char* where, const X& x, const Out& out) {
  check_row_matrix(where, "logits", x);
  check_shape(where, "out", out, x.rows(), x.cols(), "the shape of logits");
  check_apart(where, "out", out, "logits", x, true);
}

template <class P, class U, class Tokens>
void check_sample(const char* where, const P& probs, const U& uniforms, const Tokens& tokens) {
  check_row_matrix(where, "probs", probs);
  check_length(where, "uniforms", uniforms, probs.rows(), "one uniform per row");
  check_length(where, "tokens", tokens, probs.rows(), "one token per row");
  check_apart(where, "tokens", tokens, "probs", probs);
  check_apart(where, "tokens", tokens, "uniforms", uniforms);
}

template <class P, class Q, class U, class Tokens>
void check_sample_residual(const char* where, const P& p, const Q& q, const U& uniforms, const Tokens& tokens) {
  check_row_matrix(where, "p", p);
  check_row_matrix(where, "q", q);
  SPECDEC_EXPECTS(p.rows() == q.rows() && p.cols() == q.cols(), where, "q has shape [", q.rows(), " x ",
                  q.cols(), "]; expected the shape of p, [", p.rows(), " x ", p.cols(), "]");
  check_length(where, "uniforms", uniforms, p.rows(), "one uniform per row");
  check_length(where, "tokens", tokens, p.rows(), "one token per row");
  check_apart(where, "tokens", tokens, "p", p);
  check_apart(where, "tokens", tokens, "q", q);
  check_apart(where, "tokens", tokens, "uniforms", uniforms);
}

template <class X, class Ids, class Out>
void check_gather_rows(const char* where, const X& x, const Ids& row_ids, const Out& out) {
  check_row_matrix(where, "x", x);
  check_view(where, "row_ids", row_ids, packed);
  check_shape(where, "out", out, row_ids.rows(), x.cols(), "[row_ids.size() x x.cols()]");
  check_apart(where, "out", out, "x", x);
  check_apart(where, "out", out, "row_ids", row_ids);
}

template <class X, class Ids, class Out>
void check_gather_elements(const char* where, const X& x, const Ids& column_ids, const Out& out) {
  check_row_matrix(where, "x", x);
  SPECDEC_EXPECTS(column_ids.rows() == x.rows(), where, "column_ids has ", column_ids.rows(),
                  " rows; expected one per row of x (", x.rows(), ")");
  check_view(where, "column_ids", column_ids, packed);
  check_shape(where, "out", out, x.rows(), column_ids.cols(), "the shape of column_ids");
  check_apart(where, "out", out, "x", x);
  check_apart(where, "out", out, "column_ids", column_ids);
}

}  // namespace specdec::detail::inline SPECDEC_ISA
