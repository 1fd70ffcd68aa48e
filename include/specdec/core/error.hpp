// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief specdec's error type and the precondition macro used at every public boundary.
#pragma once

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace specdec {

/// Thrown when a caller passes an argument a specdec function cannot accept: a shape that does not
/// match, a value out of range, a malformed tree, a non-finite logit. The message names the function,
/// the argument, the value found and what was expected.
class invalid_argument : public std::invalid_argument {
 public:
  explicit invalid_argument(const std::string& what) : std::invalid_argument(what) {}
};

namespace detail {

/// Appends one piece of an error message as `std::ostream <<` would print it in the classic locale:
/// numbers through std::to_chars (floating point as `%.6g`, the stream's default), text appended,
/// `char` (signed and unsigned too) as a character, `bool` as 1 / 0; any other type through its
/// `operator<<`. Numbers bypass the stream's locale, so a global locale with digit grouping does not
/// change a message, and no translation unit depends on iostreams' locale facets to report an error
/// (a Python extension whose link brought a static copy of the standard library beside the process's
/// own crashed formatting an integer through them).
template <class T>
void append_message_piece(std::string& out, const T& piece) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, bool>) {
    out += piece ? '1' : '0';
  } else if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> || std::is_same_v<U, unsigned char>) {
    out += static_cast<char>(piece);
  } else if constexpr (std::is_integral_v<U>) {
    char digits[48];
    const auto end = std::to_chars(digits, digits + sizeof digits, piece).ptr;
    out.append(digits, end);
  } else if constexpr (std::is_floating_point_v<U>) {
    char digits[64];
    const auto end = std::to_chars(digits, digits + sizeof digits, piece, std::chars_format::general, 6).ptr;
    out.append(digits, end);
  } else if constexpr (std::is_convertible_v<const T&, const char*>) {
    const char* text = piece;
    out += text != nullptr ? text : "(null)";
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(piece);
  } else {
    std::ostringstream other;
    other << piece;
    out += other.str();
  }
}

/// Builds a message from any streamable pieces; kept out of line of the check so that a passing
/// check costs one branch.
template <class... Parts>
[[noreturn]] void throw_invalid_argument(const char* where, const Parts&... parts) {
  std::string message = where;
  message += ": ";
  (append_message_piece(message, parts), ...);
  throw invalid_argument(message);
}

}  // namespace detail
}  // namespace specdec

/// Checks a precondition of a public function and throws specdec::invalid_argument when it fails.
/// `where` names the function; the remaining arguments are streamed into the message, and should
/// say which argument was wrong, its value, and what was expected, e.g.
/// `SPECDEC_EXPECTS(k <= V, "row_topk", "k = ", k, " exceeds the row length V = ", V)`.
/// The check is always on: these are O(1) checks at the API boundary, never inside hot loops.
#define SPECDEC_EXPECTS(condition, where, ...)                              \
  do {                                                                      \
    if (!(condition)) ::specdec::detail::throw_invalid_argument(where, __VA_ARGS__); \
  } while (false)
