// SPDX-License-Identifier: Apache-2.0
// A JSON schema as llama.cpp's programs turn it into a GBNF grammar (llama-completion --json-schema):
// common/json-schema-to-grammar.cpp of the pinned tree, compiled into this example (json_schema.cpp).
#pragma once

#include <string>

namespace llama_example {

/// The GBNF grammar llama.cpp's json_schema_to_grammar gives for `schema` (JSON text).
/// \throws std::exception (llama.cpp's) on text that is not JSON or a schema it cannot convert.
std::string json_schema_to_gbnf(const std::string& schema);

}  // namespace llama_example
