// SPDX-License-Identifier: Apache-2.0
// The example engine's GGUF reader and BPE tokenizer on arbitrary bytes: the reader either throws
// engine::gguf_error or returns tensors whose data lies inside the file and loads; a tokenizer built
// from the file's metadata either throws gguf_error or encodes into ids its decoder accepts.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gguf.hpp"
#include "engine/tokenizer.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  engine::gguf_file f;
  try {
    f = engine::gguf_file::parse(std::vector<unsigned char>(data, data + size));
  } catch (const engine::gguf_error&) {
    return 0;
  }
  for (const auto& [name, t] : f.tensors()) {
    fuzz::require(t.bytes <= size, "tensor bytes beyond the file", static_cast<long long>(t.bytes));
    const std::vector<float> values = f.load(name);
    fuzz::require(values.size() == t.values(), "loaded count", static_cast<long long>(values.size()));
  }
  try {
    const engine::bpe_tokenizer tok(f);
    const std::string text = "Hello, world! 123 <|im_end|>\n\xc3\xa9";
    const auto ids = tok.encode(text);
    for (const auto id : ids) fuzz::require(id >= 0 && id < tok.vocab_size(), "encoded id outside the vocabulary", id);
    (void)tok.decode(ids);
  } catch (const engine::gguf_error&) {
  }
  return 0;
}
