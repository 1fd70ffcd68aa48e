// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The one check every sampler applies to a probability row it reads in full: each entry in
/// [0, 1] (NaN fails) and the row summing to 1 within a tolerance. Host code, no backend.
#pragma once

#include <cmath>
#include <cstdint>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec::sampling::detail {

/// Checks entries `entry(0..n)` of a distribution named `name`. `row` is the row's index in the
/// caller's matrix, or -1 for a lone distribution; the messages read `name[row, j] = v` / `name row R
/// sums to S`, or `name[j] = v` / `name sums to S`. A row rounded to a 16-bit type may miss 1 by
/// `rounding` more, which the message then names (`rounding_of`: "bfloat16 entries (2^-8 of the sum)").
template <class Entry>
void check_distribution(const char* where, const char* name, index_t row, const Entry& entry, index_t n,
                        double tolerance, double rounding = 0.0, const char* rounding_of = nullptr) {
  double total = 0.0;
  for (index_t j = 0; j < n; ++j) {
    const auto v = entry(j);
    if (!(v >= 0 && v <= 1)) {
      if (row >= 0)
        specdec::detail::throw_invalid_argument(where, name, "[", row, ", ", j, "] = ", v, "; expected a probability in [0, 1]");
      specdec::detail::throw_invalid_argument(where, name, "[", j, "] = ", v, "; expected a probability in [0, 1]");
    }
    total += static_cast<double>(v);
  }
  if (!(std::fabs(total - 1.0) <= tolerance + rounding)) {
    const char* plus = rounding_of != nullptr ? " plus the rounding of its " : "";
    if (rounding_of == nullptr) rounding_of = "";
    if (row >= 0)
      specdec::detail::throw_invalid_argument(where, name, " row ", row, " sums to ", total, "; expected 1 within ", tolerance,
                                              plus, rounding_of);
    specdec::detail::throw_invalid_argument(where, name, " sums to ", total, "; expected 1 within ", tolerance, plus,
                                            rounding_of);
  }
}

}  // namespace specdec::sampling::detail
