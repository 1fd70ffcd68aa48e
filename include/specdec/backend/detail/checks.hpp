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
    double v;
    if constexpr (is_half_v<T>)
      v = widen(row[j]);
    else
      v = static_cast<double>(row[j]);
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

/// Throws the error of a row fault a team job reported (a code below 64: a row of argument `name`
/// holds NaN, +inf, ...); the modules describe their own codes (team.hpp) before this is reached.
[[noreturn]] inline void throw_team_fault(const char* where, const char* name, const team_fault& f) {
  if (f.code >= first_team_fault_code)
    throw_invalid_argument(where, name, ": fault ", f.code, " (row ", f.row, ", column ", f.column, ", value ", f.value,
                           ") that no module describes");
  const fault rf = static_cast<fault>(f.code);
  throw_invalid_argument(where, name, " row ", f.row, " ", describe(rf), "; ", expectation(rf));
}

/// The error of fault `f` of `job` (host): the job's module describes its codes (Job::describe), the
/// backend the row faults.
template <class Job>
[[noreturn]] void throw_job_fault(const Job& job, const team_fault& f) {
  const char* name = f.arg >= 0 && f.arg < team_job_names ? job.names[f.arg] : "";
  if constexpr (requires { Job::describe(job.where, name, f); }) Job::describe(job.where, name, f);
  throw_team_fault(job.where, name, f);
}

/// Job::describe as an integer a device record can hold (0 for a job without one).
template <class Job>
std::uint64_t describer_of() noexcept {
  if constexpr (requires { static_cast<fault_describer>(&Job::describe); })
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(static_cast<fault_describer>(&Job::describe)));
  else
    return 0;
}

/// A team job's host form: teams 0 .. teams - 1 one after another on the host's one-thread team (the
/// same decisions a backend's `run_teams` makes), the first fault thrown as its error.
template <class Job>
void run_serial(const Job& job, index_t teams) {
  std::vector<std::byte> scratch(job.scratch_bytes());
  const serial_team team;
  for (index_t t = 0; t < teams; ++t)
    if (const team_fault f = job(team, t, scratch.data()); f.code != 0) throw_job_fault(job, f);
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
