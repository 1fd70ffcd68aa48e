// SPDX-License-Identifier: Apache-2.0
// The example engine's BPE tokenizer on arbitrary text, with a vocabulary that holds every byte
// symbol, a few merges and two control tokens: every id is in the vocabulary and decoding gives the
// text back byte for byte (byte-level BPE is lossless).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf.hpp"
#include "engine/tokenizer.hpp"
#include "fuzz_input.hpp"

namespace {

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xc0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3f));
  return s;
}

const engine::bpe_tokenizer& tokenizer() {
  static const engine::bpe_tokenizer tok = [] {
    // GPT-2's byte symbols (printable Latin-1 as themselves, the rest from U+0100 on).
    std::vector<std::string> tokens = {"<|endoftext|>", "<|im_end|>"};
    std::vector<std::int32_t> types = {3, 3};
    std::string symbol[256];
    for (int b = 0, next = 256; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      symbol[b] = utf8(static_cast<std::uint32_t>(printable ? b : next++));
      tokens.push_back(symbol[b]);
      types.push_back(1);
    }
    std::vector<std::string> merges;
    // Merges whose results are (and, for "lo w", are not) tokens: both code paths of the merge loop.
    for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
             {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {symbol[static_cast<unsigned char>(' ')], "w"}, {"o", "r"}, {"lo", "w"}, {"l", "o"}}) {
      merges.push_back(a + " " + b);
      if (a != "lo") tokens.push_back(a + b), types.push_back(1);
    }
    engine::gguf_writer w;
    w.add("tokenizer.ggml.model", std::string("gpt2"));
    w.add("tokenizer.ggml.tokens", tokens);
    w.add("tokenizer.ggml.merges", merges);
    w.add("tokenizer.ggml.token_type", types);
    w.add("tokenizer.ggml.eos_token_id", std::uint32_t{0});
    return engine::bpe_tokenizer(engine::gguf_file::parse(w.bytes()));
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  const auto ids = tok.encode(text);
  for (const auto id : ids) fuzz::require(id >= 0 && id < tok.vocab_size(), "encoded id outside the vocabulary", id);
  fuzz::require(tok.decode(ids) == text, "decode(encode(text)) != text", static_cast<long long>(size));
  return 0;
}
