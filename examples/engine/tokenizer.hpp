// SPDX-License-Identifier: Apache-2.0
/// \file
/// \brief The byte-level BPE tokenizer stored in a GGUF (`tokenizer.ggml.model = gpt2`): vocabulary
/// `tokenizer.ggml.tokens`, merge ranks `tokenizer.ggml.merges`, control tokens from
/// `tokenizer.ggml.token_type` (3 = control, 4 = user-defined) matched verbatim in the text.
///
/// Pre-tokenisation follows SmolLM2's (`tokenizer.ggml.pre = smollm`): every digit is its own piece,
/// then GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
/// Letters are ASCII letters and every non-ASCII code point (no Unicode tables here), so non-English
/// text may split differently from the reference tokenizer. encode/decode round-trips every string
/// made of bytes the vocabulary has a symbol for (all of valid UTF-8 text but a few control
/// characters, for SmolLM2); other bytes encode to the unknown token.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf.hpp"

namespace engine {

class bpe_tokenizer {
 public:
  /// \throws gguf_error when the tokenizer metadata is missing or malformed.
  explicit bpe_tokenizer(const gguf_file& f) {
    const auto& model = f.get<std::string>("tokenizer.ggml.model");
    if (model != "gpt2") throw gguf_error("tokenizer.ggml.model is '" + model + "'; only byte-level BPE ('gpt2') is supported");
    tokens_ = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
    for (std::size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<std::int32_t>(i));
    const auto& merges = f.get<std::vector<std::string>>("tokenizer.ggml.merges");
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto space = merges[r].find(' ', 1);
      if (space == std::string::npos) throw gguf_error("tokenizer merge " + std::to_string(r) + " ('" + merges[r] + "') has no space");
      ranks_.emplace(merges[r], static_cast<int>(r));
    }
    if (f.metadata().count("tokenizer.ggml.token_type")) {
      const auto& types = f.get<std::vector<std::int64_t>>("tokenizer.ggml.token_type");
      for (std::size_t i = 0; i < types.size() && i < tokens_.size(); ++i)
        if (types[i] == 3 || types[i] == 4) special_.emplace_back(tokens_[i], static_cast<std::int32_t>(i));
    }
    if (tokens_.empty() || tokens_.size() > static_cast<std::size_t>(INT32_MAX))
      throw gguf_error("tokenizer.ggml.tokens has " + std::to_string(tokens_.size()) + " entries; expected 1 to 2^31 - 1");
    const auto id_or = [&](const char* key, std::int64_t fallback, std::int64_t lowest) {
      const std::int64_t id = f.get_or<std::int64_t>(key, fallback);
      if (id < lowest || id >= static_cast<std::int64_t>(tokens_.size()))
        throw gguf_error(std::string(key) + " = " + std::to_string(id) + "; expected an id in [" + std::to_string(lowest) +
                         ", " + std::to_string(tokens_.size()) + ")");
      return static_cast<std::int32_t>(id);
    };
    eos_ = id_or("tokenizer.ggml.eos_token_id", -1, -1);
    unknown_ = id_or("tokenizer.ggml.unknown_token_id", 0, 0);
    build_byte_maps();
  }

  std::int32_t vocab_size() const noexcept { return static_cast<std::int32_t>(tokens_.size()); }
  std::int32_t eos() const noexcept { return eos_; }
  /// The id of a control token such as "<|im_end|>", or -1.
  std::int32_t special(const std::string& text) const {
    for (const auto& [t, id] : special_)
      if (t == text) return id;
    return -1;
  }

  /// Token ids of `text`: control tokens matched first (longest at each position), the rest
  /// pre-tokenised and merged by rank.
  std::vector<std::int32_t> encode(const std::string& text) const {
    std::vector<std::int32_t> out;
    std::size_t start = 0, i = 0;
    while (i < text.size()) {
      std::size_t best = 0;
      std::int32_t best_id = -1;
      for (const auto& [t, id] : special_)
        if (t.size() > best && text.compare(i, t.size(), t) == 0) best = t.size(), best_id = id;
      if (best_id < 0) {
        ++i;
        continue;
      }
      encode_plain(text.substr(start, i - start), out);
      out.push_back(best_id);
      i += best;
      start = i;
    }
    encode_plain(text.substr(start), out);
    return out;
  }

  /// The bytes of `ids` (control tokens as their text). \throws std::out_of_range on an id outside the vocabulary.
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (auto id : ids) out += token_bytes(id);
    return out;
  }
  std::string token_bytes(std::int32_t id) const {
    if (id < 0 || id >= vocab_size()) throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary");
    const std::string& t = tokens_[static_cast<std::size_t>(id)];
    for (const auto& [s, sid] : special_)
      if (sid == id) return s;
    std::string out;
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t n = utf8_length(static_cast<unsigned char>(t[i]));
      const auto it = symbol_byte_.find(t.substr(i, n));
      out += it == symbol_byte_.end() ? t.substr(i, n) : std::string(1, static_cast<char>(it->second));
      i += n;
    }
    return out;
  }

 private:
  static std::size_t utf8_length(unsigned char c) { return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4; }
  static std::string utf8(std::uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else if (cp < 0x800) s += static_cast<char>(0xc0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3f));
    else s += static_cast<char>(0xe0 | (cp >> 12)), s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f)), s += static_cast<char>(0x80 | (cp & 0x3f));
    return s;
  }
  /// GPT-2's reversible byte -> printable code point map: printable Latin-1 bytes map to
  /// themselves, the other 68 to 256, 257, ... in byte order.
  void build_byte_maps() {
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_symbol_[b] = utf8(static_cast<std::uint32_t>(printable ? b : next++));
      symbol_byte_.emplace(byte_symbol_[b], static_cast<unsigned char>(b));
    }
  }

  static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
  static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
  static bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }

  /// GPT-2's pattern over one digit-free segment (or a single digit).
  static void split_gpt2(const std::string& s, std::vector<std::string>& pieces) {
    std::size_t i = 0;
    const std::size_t n = s.size();
    const auto run = [&](std::size_t j, auto pred) {
      while (j < n && pred(static_cast<unsigned char>(s[j]))) ++j;
      return j;
    };
    while (i < n) {
      const auto c = static_cast<unsigned char>(s[i]);
      std::size_t j = i;
      if (c == '\'') {
        for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"})
          if (s.compare(i + 1, std::char_traits<char>::length(suffix), suffix) == 0) {
            j = i + 1 + std::char_traits<char>::length(suffix);
            break;
          }
      }
      if (j == i) {
        const std::size_t k = (c == ' ' && i + 1 < n) ? i + 1 : i;  // optional leading space
        const auto ck = static_cast<unsigned char>(s[k]);
        const auto other = [](unsigned char x) { return !is_space(x) && !is_letter(x) && !is_digit(x); };
        if (is_letter(ck)) j = run(k, is_letter);
        else if (is_digit(ck)) j = run(k, is_digit);
        else if (other(ck)) j = run(k, other);
        else {
          // \s+(?!\S): a whitespace run leaves its last character to the next piece when one follows.
          j = run(i, is_space);
          if (j < n && j - i > 1) --j;
        }
      }
      pieces.push_back(s.substr(i, j - i));
      i = j;
    }
  }

  void encode_plain(const std::string& text, std::vector<std::int32_t>& out) const {
    std::vector<std::string> pieces;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i)
      if (i == text.size() || is_digit(static_cast<unsigned char>(text[i]))) {
        split_gpt2(text.substr(start, i - start), pieces);
        if (i < text.size()) pieces.push_back(text.substr(i, 1));
        start = i + 1;
      }
    for (const auto& p : pieces) bpe(p, out);
  }

  /// Merges the byte symbols of one piece, lowest rank first and, among equal ranks (one merge
  /// applying at several places, as "a a" in "aaa"), leftmost first. O(m log m) for a piece of m bytes:
  /// the symbols form a linked list over their first byte's position, and a heap holds every adjacent
  /// pair that has a rank, ordered by (rank, position); an entry whose symbols have changed since it
  /// was pushed is stale and skipped, so the first live entry is the pair a full rescan would pick.
  void bpe(const std::string& piece, std::vector<std::int32_t>& out) const {
    if (piece.empty()) return;
    const auto cached = cache_.find(piece);
    if (cached != cache_.end()) {
      out.insert(out.end(), cached->second.begin(), cached->second.end());
      return;
    }
    const std::size_t m = piece.size();
    std::vector<std::string> text(m);
    std::vector<std::size_t> next(m), prev(m), version(m, 0);
    std::vector<bool> alive(m, true);
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    for (std::size_t i = 0; i < m; ++i) {
      text[i] = byte_symbol_[static_cast<unsigned char>(piece[i])];
      next[i] = i + 1 < m ? i + 1 : none;
      prev[i] = i > 0 ? i - 1 : none;
    }
    struct pair_entry {
      int rank;
      std::size_t left, right, left_version, right_version;
      bool operator>(const pair_entry& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<pair_entry, std::vector<pair_entry>, std::greater<>> heap;
    const auto push = [&](std::size_t l, std::size_t r) {
      if (l == none || r == none) return;
      const auto it = ranks_.find(text[l] + " " + text[r]);
      if (it != ranks_.end()) heap.push({it->second, l, r, version[l], version[r]});
    };
    for (std::size_t i = 0; i + 1 < m; ++i) push(i, i + 1);
    while (!heap.empty()) {
      const pair_entry e = heap.top();
      heap.pop();
      if (!alive[e.left] || !alive[e.right] || next[e.left] != e.right || version[e.left] != e.left_version ||
          version[e.right] != e.right_version)
        continue;
      text[e.left] += text[e.right];
      text[e.right].clear();
      alive[e.right] = false;
      ++version[e.left];
      next[e.left] = next[e.right];
      if (next[e.left] != none) prev[next[e.left]] = e.left;
      push(prev[e.left], e.left);
      push(e.left, next[e.left]);
    }
    std::vector<std::string> symbols;
    for (std::size_t i = 0; i != none; i = next[i]) symbols.push_back(std::move(text[i]));
    std::vector<std::int32_t> ids;
    for (const auto& s : symbols) {
      const auto it = ids_.find(s);
      if (it != ids_.end()) {
        ids.push_back(it->second);
        continue;
      }
      // A merged symbol missing from the vocabulary: fall back to its bytes, and bytes the vocabulary
      // lacks (SmolLM2 has no symbol for bytes that never occur in UTF-8 text, nor for a few control
      // characters) to the unknown token.
      for (std::size_t i = 0; i < s.size();) {
        const std::size_t n = utf8_length(static_cast<unsigned char>(s[i]));
        const auto byte = ids_.find(s.substr(i, n));
        ids.push_back(byte == ids_.end() ? unknown_ : byte->second);
        i += n;
      }
    }
    out.insert(out.end(), ids.begin(), ids.end());
    cache_.emplace(piece, std::move(ids));
  }

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::unordered_map<std::string, int> ranks_;
  std::vector<std::pair<std::string, std::int32_t>> special_;
  std::string byte_symbol_[256];
  std::unordered_map<std::string, unsigned char> symbol_byte_;
  std::int32_t eos_ = -1, unknown_ = 0;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

}  // namespace engine
