// SPDX-License-Identifier: Apache-2.0
#include "json_schema.hpp"

#include <string>
#include <vector>

#include "json-schema-to-grammar.h"  // llama.cpp's common/, from the pinned tree

// The three string helpers of llama.cpp's common.cpp that its converter calls (declared in its
// common.h), defined here with the same behaviour so that the rest of common.cpp, and all it would
// pull in, stays out of the example: join with a separator; split at every occurrence of a delimiter,
// empty parts kept; repeat n times.
std::string string_join(const std::vector<std::string>& values, const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i > 0 ? separator : std::string()) + values[i];
  return out;
}

std::vector<std::string> string_split(const std::string& str, const std::string& delimiter) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t end = str.find(delimiter); end != std::string::npos; end = str.find(delimiter, start)) {
    parts.push_back(str.substr(start, end - start));
    start = end + delimiter.size();
  }
  parts.push_back(str.substr(start));
  return parts;
}

std::string string_repeat(const std::string& str, std::size_t n) {
  std::string out;
  out.reserve(str.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += str;
  return out;
}

namespace llama_example {

std::string json_schema_to_gbnf(const std::string& schema) { return json_schema_to_grammar(common_json::parse(schema)); }

}  // namespace llama_example
