// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief Checked size, offset and index arithmetic on caller values: every sum, product or narrowing
/// that a caller's argument (a view extent, a prefix length, a count, a value read from a file) can
/// drive past its type goes through these, so that it throws specdec::invalid_argument instead of
/// overflowing (undefined behaviour for signed types, a silently wrong size for unsigned ones).
///
/// Each function takes `where` (the public function) and message parts naming the quantity, like
/// SPECDEC_EXPECTS: `checked_add(where, prefix_length, n, "prefix_length + nodes")` throws
/// "where: prefix_length + nodes = 9223372036854775807 + 4 overflows int64". Host code; O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>

#include <specdec/core/error.hpp>
#include <specdec/core/view.hpp>

namespace specdec {

/// The largest element count specdec allocates for one buffer (2^40 elements: 4 TiB of floats), far
/// above any engine's need and far below where byte counts overflow. A size argument that would make
/// a buffer larger is rejected before anything is allocated.
inline constexpr index_t max_elements = index_t{1} << 40;

namespace detail {

/// a + b, or throws naming `what...` when the sum leaves index_t.
template <class... What>
index_t checked_add(const char* where, index_t a, index_t b, What&&... what) {
  index_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    throw_invalid_argument(where, std::forward<What>(what)..., " = ", a, " + ", b, " overflows int64");
  return sum;
}

/// a * b, or throws naming `what...` when the product leaves index_t.
template <class... What>
index_t checked_mul(const char* where, index_t a, index_t b, What&&... what) {
  index_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    throw_invalid_argument(where, std::forward<What>(what)..., " = ", a, " * ", b, " overflows int64");
  return product;
}

/// `value` as `To` (int32 token ids, positions, offsets), or throws naming `what...` and To's range.
template <class To, class From, class... What>
To checked_narrow(const char* where, From value, What&&... what) {
  static_assert(std::is_integral_v<To> && std::is_integral_v<From>);
  if (!std::in_range<To>(value))
    throw_invalid_argument(where, std::forward<What>(what)..., " = ", +value, " does not fit ",
                           std::numeric_limits<To>::digits + (std::is_signed_v<To> ? 1 : 0), "-bit ",
                           std::is_signed_v<To> ? "signed" : "unsigned", " integers [",
                           +std::numeric_limits<To>::min(), ", ", +std::numeric_limits<To>::max(), "]");
  return static_cast<To>(value);
}

/// Whether `[first, first + count)` lies inside `[0, size)`, decided without forming the sum (the
/// "rows in range" test of every verifier). All three may be any index_t.
constexpr bool range_fits(index_t first, index_t count, index_t size) noexcept {
  return first >= 0 && count >= 0 && count <= size && first <= size - count;
}

/// The element count of a new buffer whose extents are `extents` (each >= 0), or throws naming
/// `what...` when an extent is negative or the count exceeds specdec::max_elements.
template <class... What>
std::size_t checked_count(const char* where, std::initializer_list<index_t> extents, What&&... what) {
  index_t count = 1;
  bool zero = false;
  for (const index_t e : extents) {
    if (e < 0) throw_invalid_argument(where, std::forward<What>(what)..., " has a negative extent ", e);
    zero = zero || e == 0;
  }
  if (zero) return 0;
  for (const index_t e : extents) {
    if (e > max_elements / count)
      throw_invalid_argument(where, std::forward<What>(what)..., " would need more than ", max_elements,
                             " elements (2^40, specdec's largest buffer)");
    count *= e;
  }
  return static_cast<std::size_t>(count);
}

/// A vocabulary size that int32 token ids can index: 1 <= V <= 2^31 - 1.
inline void check_vocabulary(const char* where, const char* name, index_t vocab) {
  SPECDEC_EXPECTS(vocab >= 1 && vocab <= std::numeric_limits<std::int32_t>::max(), where, name, " = ", vocab,
                  "; expected a vocabulary of 1 to 2^31 - 1 tokens (token ids are int32)");
}

}  // namespace detail
}  // namespace specdec
