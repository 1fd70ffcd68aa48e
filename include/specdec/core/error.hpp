// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief specdec's error type and the precondition macro used at every public boundary.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace specdec {

/// Thrown when a caller passes an argument a specdec function cannot accept: a shape that does not
/// match, a value out of range, a malformed tree, a non-finite logit. The message names the function,
/// the argument, the value found and what was expected.
class invalid_argument : public std::invalid_argument {
 public:
  explicit invalid_argument(const std::string& what) : std::invalid_argument(what) {}
};

namespace detail {

/// Builds a message from any streamable pieces; kept out of line of the check so that a passing
/// check costs one branch.
template <class... Parts>
[[noreturn]] void throw_invalid_argument(const char* where, Parts&&... parts) {
  std::ostringstream message;
  message << where << ": ";
  (message << ... << std::forward<Parts>(parts));
  throw invalid_argument(message.str());
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
