// SPDX-License-Identifier: Apache-2.0
// Untrusted inputs and their cost: the n-gram proposer against its former quadratic algorithm (kept
// here as the reference, outputs identical) and on inputs that once took seconds; the safetensors
// reader's strict JSON and file checks; the example engine's GGUF reader, tokenizer (BPE against its
// former quadratic algorithm), model loader, prompt files and argument parsing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <specdec/io/safetensors.hpp>
#include <specdec/tree/ngram.hpp>

#include "backend_conformance.hpp"
#include "engine/decoding.hpp"
#include "engine/eagle_drafter.hpp"
#include "engine/example_main.hpp"
#include "engine/gguf.hpp"
#include "engine/llama.hpp"
#include "engine/prompts.hpp"
#include "engine/tokenizer.hpp"

using specdec::index_t;
using conformance::error_of;
using conformance::contains;

namespace {

/// The n-gram proposer as it was before it became linear: a backward scan per end position for the
/// match, a copy and a comparison with every kept continuation per occurrence, a scan of every node
/// per trie step and a stable sort by depth. Quadratic, but plainly right: the reference.
namespace quadratic_ngram {
std::span<const std::int32_t> window(std::span<const std::int32_t> history, const specdec::ngram_options& o) {
  if (o.max_history > 0 && static_cast<index_t>(history.size()) > o.max_history)
    history = history.subspan(history.size() - static_cast<std::size_t>(o.max_history));
  return history;
}
bool suffix_at(std::span<const std::int32_t> history, index_t start, index_t g) {
  const auto n = static_cast<index_t>(history.size());
  for (index_t i = 0; i < g; ++i)
    if (history[static_cast<std::size_t>(start + i)] != history[static_cast<std::size_t>(n - g + i)]) return false;
  return true;
}
index_t longest_match(std::span<const std::int32_t> w, const specdec::ngram_options& o) {
  const auto n = static_cast<index_t>(w.size());
  const auto at = [&](index_t i) { return w[static_cast<std::size_t>(i)]; };
  index_t best = 0;
  for (index_t end = n - 2; end >= 0 && best < o.max_ngram; --end) {
    index_t g = 0;
    while (g < o.max_ngram && end - g >= 0 && at(end - g) == at(n - 1 - g)) ++g;
    best = std::max(best, g);
  }
  return best >= o.min_ngram ? best : 0;
}
std::vector<std::vector<std::int32_t>> continuations(std::span<const std::int32_t> history, index_t length,
                                                     const specdec::ngram_options& o) {
  history = window(history, o);
  std::vector<std::vector<std::int32_t>> out;
  const index_t g = length == 0 ? 0 : longest_match(history, o);
  if (g == 0) return out;
  const auto n = static_cast<index_t>(history.size());
  for (index_t start = n - g - 1; start >= 0 && static_cast<index_t>(out.size()) < o.branches; --start) {
    if (!suffix_at(history, start, g)) continue;
    const index_t end = std::min(n, start + g + length);  // lengths here stay far from overflow
    std::vector<std::int32_t> c(history.begin() + start + g, history.begin() + end);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
  }
  return out;
}
specdec::draft_tree tree(std::int32_t root, const std::vector<std::vector<std::int32_t>>& continuations) {
  std::vector<std::int32_t> tokens = {root}, parents = {-1}, depth = {0};
  for (const auto& c : continuations) {
    std::int32_t node = 0;
    for (const std::int32_t token : c) {
      std::int32_t child = -1;
      for (std::size_t i = 1; i < tokens.size() && child < 0; ++i)
        if (parents[i] == node && tokens[i] == token) child = static_cast<std::int32_t>(i);
      if (child < 0) {
        tokens.push_back(token);
        parents.push_back(node);
        depth.push_back(depth[static_cast<std::size_t>(node)] + 1);
        child = static_cast<std::int32_t>(tokens.size() - 1);
      }
      node = child;
    }
  }
  std::vector<std::int32_t> order(tokens.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return depth[static_cast<std::size_t>(a)] < depth[static_cast<std::size_t>(b)];
  });
  std::vector<std::int32_t> position(tokens.size()), level_tokens, level_parents;
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
  for (const std::int32_t o : order) {
    level_tokens.push_back(tokens[static_cast<std::size_t>(o)]);
    level_parents.push_back(o == 0 ? -1 : position[static_cast<std::size_t>(parents[static_cast<std::size_t>(o)])]);
  }
  return specdec::make_tree(std::move(level_tokens), level_parents);
}
}  // namespace quadratic_ngram

bool same_tree(const specdec::draft_tree& a, const specdec::draft_tree& b) {
  return a.token == b.token && a.parent == b.parent && a.depth == b.depth && a.score == b.score;
}

}  // namespace

TEST_CASE("ngram proposer: identical to the former quadratic algorithm on random, periodic and constant histories") {
  std::mt19937_64 rng(20240611);
  const auto below = [&](std::uint64_t n) { return static_cast<index_t>(rng() % n); };
  constexpr index_t huge = std::numeric_limits<index_t>::max();
  for (int trial = 0; trial < 20000; ++trial) {
    CAPTURE(trial);
    const index_t n = 1 + below(70);
    const auto alphabet = static_cast<std::int32_t>(1 + below(5));
    std::vector<std::int32_t> h(static_cast<std::size_t>(n));
    if (trial % 3 == 0) {  // periodic with a few changed tokens: many equal full-length continuations
      const index_t period = 1 + below(6);
      for (index_t i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i < period ? below(static_cast<std::uint64_t>(alphabet)) : h[static_cast<std::size_t>(i - period)]);
      for (index_t m = below(3); m > 0; --m) h[static_cast<std::size_t>(below(static_cast<std::uint64_t>(n)))] = static_cast<std::int32_t>(below(static_cast<std::uint64_t>(alphabet)));
    } else {
      for (auto& t : h) t = static_cast<std::int32_t>(below(static_cast<std::uint64_t>(alphabet)));
    }
    specdec::ngram_options o;
    o.min_ngram = 1 + below(4);
    o.max_ngram = below(4) == 0 ? huge : o.min_ngram + below(5);
    o.branches = below(5) == 0 ? 1000 : 1 + below(8);
    o.max_history = below(3) == 0 ? 1 + below(static_cast<std::uint64_t>(n) + 4) : 0;
    const index_t length = below(5) == 0 ? 1000 : below(25);
    CAPTURE(n);
    CAPTURE(o.max_ngram);
    CAPTURE(o.min_ngram);
    CAPTURE(o.branches);
    CAPTURE(length);
    const auto expected = quadratic_ngram::continuations(h, length, o);
    REQUIRE(specdec::ngram_continuations(h, length, o) == expected);
    CHECK(specdec::ngram_match_length(h, o) == quadratic_ngram::longest_match(quadratic_ngram::window(h, o), o));
    CHECK(same_tree(specdec::propose_ngram(h, length, o), quadratic_ngram::tree(h.back(), expected)));
  }
  // continuation_tree on arbitrary lists: shared prefixes, repeats, empty continuations, interleaved depths.
  for (int trial = 0; trial < 5000; ++trial) {
    CAPTURE(trial);
    std::vector<std::vector<std::int32_t>> lists(static_cast<std::size_t>(below(7)));
    for (auto& c : lists) {
      c.resize(static_cast<std::size_t>(below(9)));
      for (auto& t : c) t = static_cast<std::int32_t>(below(3));
    }
    const auto root = static_cast<std::int32_t>(below(3));
    CHECK(same_tree(specdec::continuation_tree(root, lists), quadratic_ngram::tree(root, lists)));
  }
  CHECK(contains(error_of([] { (void)specdec::continuation_tree(1, std::vector<std::vector<std::int32_t>>{{2, -3}}); }), "has token -3"));
}

TEST_CASE("ngram proposer: a huge length no longer overflows; copied documents of 80k tokens are linear") {
  // start + g + length overflowed int64 (a reversed copy range) whenever the history matched.
  constexpr index_t huge = std::numeric_limits<index_t>::max();
  const std::vector<std::int32_t> h = {5, 6, 7, 5, 6};
  CHECK(specdec::ngram_continuations(h, huge) == std::vector<std::vector<std::int32_t>>{{7, 5, 6}});
  CHECK(specdec::propose_ngram(h, huge).token == std::vector<std::int32_t>{6, 7, 5, 6});
  CHECK(specdec::propose_ngram(h, huge, {huge, 1, huge, 0}).token == std::vector<std::int32_t>{6, 7, 5, 6});

  // A document copied into its own continuation: the suffix matches at the document's start and the
  // continuation is the whole document. The trie scanned every node per token (80k^2 / 2 steps).
  std::mt19937 rng(3);
  std::vector<std::int32_t> doc(80000);
  for (auto& t : doc) t = static_cast<std::int32_t>(rng() % 50000);
  std::vector<std::int32_t> history = doc;
  history.insert(history.end(), doc.begin(), doc.begin() + 10);
  const auto chain = specdec::propose_ngram(history, 80000);
  REQUIRE(chain.size() == 80001);
  CHECK(chain.max_depth() == 80000);
  CHECK(std::equal(doc.begin() + 10, doc.end(), chain.token.begin() + 1));
  CHECK(std::equal(doc.begin(), doc.begin() + 10, chain.token.end() - 10));
  specdec::ngram_options wide;
  wide.branches = 64;
  CHECK(specdec::propose_ngram(history, 80000, wide).size() == 80001);

  // The match scan walked back to the start at every position when max_ngram is unbounded.
  const std::vector<std::int32_t> constant(80000, 4);
  specdec::ngram_options unbounded;
  unbounded.max_ngram = huge;
  CHECK(specdec::ngram_match_length(constant, unbounded) == 79999);
  // A periodic history: the occurrences nearest the end give the truncated continuations of 10, 20, ...,
  // 90 tokens, then one of the full 100, and every earlier one repeats it; each repeat was copied and
  // compared with every kept continuation.
  std::vector<std::int32_t> periodic(80000);
  for (std::size_t i = 0; i < periodic.size(); ++i) periodic[i] = static_cast<std::int32_t>(i % 10);
  specdec::ngram_options many;
  many.branches = 5000;
  const auto distinct = specdec::ngram_continuations(periodic, 100, many);
  REQUIRE(distinct.size() == 10);
  CHECK(distinct.front().size() == 10);
  CHECK(distinct.back().size() == 100);
  CHECK(specdec::propose_ngram(periodic, 100, many).size() == 101);  // each a prefix of the next: one chain
}

// ---------------------------------------------------------------------------------------------------
// io::safetensors

namespace {

std::vector<std::byte> safetensors_bytes(const std::string& header, std::size_t data_bytes = 16) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((header.size() >> (8 * i)) & 0xff));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  out.resize(out.size() + data_bytes, std::byte{0});
  return out;
}
std::string safetensors_error(const std::string& header) {
  return error_of([&] { (void)specdec::io::safetensors::parse(safetensors_bytes(header)); });
}
/// A header of one F32 tensor `t` of 4 values with `extra` members in its entry and `metadata` as
/// the metadata's JSON value (none when empty).
std::string one_tensor(const std::string& extra, const std::string& metadata = "") {
  return (metadata.empty() ? std::string("{") : R"({"__metadata__":)" + metadata + ",") +
         R"("t":{"dtype":"F32","shape":[4],"data_offsets":[0,16])" + extra + "}}";
}
std::filesystem::path scratch_file(const std::string& name, const std::string& contents) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

}  // namespace

TEST_CASE("safetensors: nesting deeper than 64 levels is an error, not a stack overflow") {
  // 20 000 nested arrays (40 KB) recursed once per level in the parser and again in the destructor.
  for (const std::string& open : {std::string("["), std::string(R"({"a":)")}) {
    std::string deep;
    for (int i = 0; i < 20000; ++i) deep += open;
    CHECK(contains(safetensors_error(deep), "nesting deeper than 64 levels"));
  }
  CHECK(contains(safetensors_error(one_tensor("", std::string(20000, '[') + std::string(20000, ']'))), "nesting deeper than 64"));
  // 64 levels are JSON this reader accepts (then not a header); 65 are not.
  CHECK(contains(safetensors_error(std::string(64, '[') + std::string(64, ']')), "the header is not a JSON object"));
  CHECK(contains(safetensors_error(std::string(65, '[') + std::string(65, ']')), "nesting deeper than 64"));
}

TEST_CASE("safetensors: strict JSON: numbers, literals, strings, duplicate members, metadata") {
  // Accepted before wherever a value was not an integer field: anything spelled with +-.0-9eE and
  // the letters of true / false / null.
  for (const std::string bad : {"nan", "tru", "nul", "+1", "--", "1e", ".5", "5.", "1.2.3", "eee", "truefalse", "-", "01", "-01",
                                "1e+", "0x10", "True"}) {
    CAPTURE(bad);
    CHECK(contains(safetensors_error(one_tensor(R"(,"x":)" + bad)), "malformed JSON header"));
  }
  for (const std::string good : {"0", "-0", "10", "-0.5e+3", "1E5", "2.25", "true", "false", "null", R"("s")", "[]", "{}", "[1,[2]]"})
    CHECK_NOTHROW(specdec::io::safetensors::parse(safetensors_bytes(one_tensor(R"(,"x":)" + good))));
  // Leading zeros in the integer fields read as decimal before (007 = 7); JSON has no such number.
  CHECK(contains(safetensors_error(R"({"t":{"dtype":"F32","shape":[04],"data_offsets":[0,16]}})"), "a leading zero"));
  CHECK(contains(safetensors_error(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[00,016]}})"), "a leading zero"));
  // Raw control characters must be escaped; an escaped one is fine.
  CHECK(contains(safetensors_error("{\"a\x01" "b\":{}}"), "a raw control character (0x1)"));
  CHECK(contains(safetensors_error("{\"a\tb\":{}}"), "a raw control character (0x9)"));
  // A surrogate pair is one character, four bytes of UTF-8 (the key Python and Rust write).
  const auto emoji = specdec::io::safetensors::parse(
      safetensors_bytes(R"({"w\uD83D\uDE00":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"));
  CHECK(emoji.contains("w\xF0\x9F\x98\x80"));
  CHECK(contains(safetensors_error(R"({"w\uD83D":{}})"), "a lone high surrogate \\ud83d"));
  CHECK(contains(safetensors_error(R"({"w\uDE00x":{}})"), "a lone low surrogate \\ude00"));
  CHECK(contains(safetensors_error(R"({"w\uD83D\u0041":{}})"), "expected a low surrogate"));
  // Raw UTF-8: valid text is kept as it is; overlong forms, encoded surrogates, stray bytes are not UTF-8.
  CHECK(specdec::io::safetensors::parse(safetensors_bytes("{\"caf\xC3\xA9\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}"))
            .contains("caf\xC3\xA9"));
  for (const std::string bad : {"\xC0\x80", "\xED\xA0\x80", "\xFF", "\x80", "\xF4\x90\x80\x80", "\xE2\x82"}) {
    CAPTURE(bad);
    CHECK(contains(safetensors_error("{\"a" + bad + "\":{}}"), "UTF-8"));
  }
  // A member twice: Python's json takes the last, serde rejects, specdec took the first.
  CHECK(contains(safetensors_error(R"({"t":{"dtype":"F32","dtype":"I64","shape":[4],"data_offsets":[0,16]}})"),
                 "member 'dtype' appears twice in one object"));
  CHECK(contains(safetensors_error(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"t":{}})"), "member 't' appears twice"));
  CHECK(contains(safetensors_error(one_tensor("", R"({"a":"1","a":"2"})")), "member 'a' appears twice"));
  CHECK(contains(safetensors_error(one_tensor("", R"({"format":"pt"},"__metadata__":{})")), "member '__metadata__' appears twice"));
  // __metadata__ is a map of strings to strings.
  CHECK_NOTHROW(specdec::io::safetensors::parse(safetensors_bytes(one_tensor("", R"({"format":"pt"})"))));
  CHECK(contains(safetensors_error(one_tensor("", R"({"format":1})")), "__metadata__ member 'format' is not a string"));
  CHECK(contains(safetensors_error(one_tensor("", R"(["pt"])")), "__metadata__ is not a JSON object"));
}

TEST_CASE("safetensors: the header length is capped at 100 MB; open() refuses directories and devices") {
  std::vector<std::byte> claims(16, std::byte{0});
  const std::uint64_t length = 100'000'001;
  for (int i = 0; i < 8; ++i) claims[static_cast<std::size_t>(i)] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
  CHECK(contains(error_of([&] { (void)specdec::io::safetensors::parse(claims); }),
                 "the header length is 100000001 bytes; expected at most 100000000"));
  // A directory's stream threw std::ios_base::failure from the read; /dev/zero never ended.
  const auto dir = std::filesystem::temp_directory_path() / "specdec_reliability_dir.safetensors";
  std::filesystem::create_directories(dir);
  CHECK(contains(error_of([&] { (void)specdec::io::safetensors::open(dir); }), "not a regular file"));
  std::filesystem::remove(dir);
  if (std::filesystem::exists("/dev/zero"))
    CHECK(contains(error_of([] { (void)specdec::io::safetensors::open("/dev/zero"); }), "/dev/zero: not a regular file"));
  CHECK(contains(error_of([] { (void)specdec::io::safetensors::open("/nonexistent/x.safetensors"); }), "cannot open the file"));
  std::string file;
  const std::string header = one_tensor("");
  for (int i = 0; i < 8; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header + std::string(16, '\0');
  const auto path = scratch_file("specdec_reliability.safetensors", file);
  CHECK(specdec::io::safetensors::open(path).at("t").values.size() == 4);
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------------------------------------------
// The example engine (examples/engine)

namespace {

/// GPT-2's printable symbol of byte b (the tokenizer's byte map).
std::string byte_symbol(int b) {
  int next = 256, cp = 0;
  for (int x = 0; x <= b; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    cp = printable ? x : next++;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xc0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3f));
  return s;
}

/// The model's shape as written to the file (the test's tiny Llama: 2 layers, width 32, 4 heads of
/// 8, 2 kv heads, MLP 48, a vocabulary of 3 control tokens and the 256 byte symbols).
struct tiny_shape {
  std::uint32_t layers = 2, hidden = 32, heads = 4, kv_heads = 2, ff = 48;
  bool flat_embedding = false;  ///< token_embd.weight written 1-D
};
constexpr std::uint64_t tiny_vocab = 259;

engine::gguf_writer tiny_llama(const tiny_shape& s = {}) {
  engine::gguf_writer w;
  w.add("general.architecture", std::string("llama"));
  w.add("llama.block_count", s.layers);
  w.add("llama.embedding_length", s.hidden);
  w.add("llama.feed_forward_length", s.ff);
  w.add("llama.attention.head_count", s.heads);
  w.add("llama.attention.head_count_kv", s.kv_heads);
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<std::int32_t> types = {3, 3, 3};
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_symbol(b)), types.push_back(1);
  w.add("tokenizer.ggml.model", std::string("gpt2"));
  w.add("tokenizer.ggml.tokens", tokens);
  w.add("tokenizer.ggml.merges", std::vector<std::string>{});
  w.add("tokenizer.ggml.token_type", types);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const auto random = [&](std::uint64_t n, float offset = 0.0f) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = offset + u(rng);
    return x;
  };
  const std::uint64_t e = 32, kv = 16, ff = 48;  // the tensors keep the valid shape whatever the metadata says
  if (s.flat_embedding) w.add_tensor("token_embd.weight", {e * tiny_vocab}, random(e * tiny_vocab));
  else w.add_tensor("token_embd.weight", {e, tiny_vocab}, random(e * tiny_vocab));
  w.add_tensor("output_norm.weight", {e}, random(e, 1.0f));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", {e}, random(e, 1.0f));
    w.add_tensor(p + "ffn_norm.weight", {e}, random(e, 1.0f));
    w.add_tensor(p + "attn_q.weight", {e, e}, random(e * e));
    w.add_tensor(p + "attn_k.weight", {e, kv}, random(e * kv));
    w.add_tensor(p + "attn_v.weight", {e, kv}, random(e * kv));
    w.add_tensor(p + "attn_output.weight", {e, e}, random(e * e));
    w.add_tensor(p + "ffn_gate.weight", {e, ff}, random(e * ff));
    w.add_tensor(p + "ffn_up.weight", {e, ff}, random(e * ff));
    w.add_tensor(p + "ffn_down.weight", {ff, e}, random(e * ff));
  }
  return w;
}

/// `bytes` with the u32 metadata value of `key` rewritten as an i32 of `value` (the writer has no
/// signed integers).
std::vector<unsigned char> with_i32(std::vector<unsigned char> bytes, const std::string& key, std::int32_t value) {
  const auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  REQUIRE(at != bytes.end());
  auto type = at + static_cast<std::ptrdiff_t>(key.size());
  REQUIRE(*type == 4);  // u32
  *type = 5;            // i32
  std::memcpy(&*(type + 4), &value, 4);
  return bytes;
}

std::string gguf_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const engine::gguf_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a gguf_error: ") + e.what();
  }
  return "no exception";
}

/// The byte-level BPE merge loop as it was before it became O(m log m): every adjacent pair rescanned
/// after each merge, the lowest rank taken, the leftmost among equals; then ids as the tokenizer maps
/// them. The reference for one pre-tokenised piece.
struct quadratic_bpe {
  std::unordered_map<std::string, std::int32_t> ids;
  std::unordered_map<std::string, int> ranks;
  std::int32_t unknown = 0;
  quadratic_bpe(const std::vector<std::string>& tokens, const std::vector<std::string>& merges, std::int32_t unknown_id)
      : unknown(unknown_id) {
    for (std::size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], static_cast<std::int32_t>(i));
    for (std::size_t r = 0; r < merges.size(); ++r) ranks.emplace(merges[r], static_cast<int>(r));
  }
  std::vector<std::int32_t> operator()(const std::string& piece) const {
    std::vector<std::string> symbols;
    for (const unsigned char c : piece) symbols.push_back(byte_symbol(c));
    while (symbols.size() > 1) {
      int best_rank = -1;
      std::size_t best = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = ranks.find(symbols[i] + " " + symbols[i + 1]);
        if (it != ranks.end() && (best_rank < 0 || it->second < best_rank)) best_rank = it->second, best = i;
      }
      if (best_rank < 0) break;
      symbols[best] += symbols[best + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    std::vector<std::int32_t> out;
    for (const auto& s : symbols) {
      const auto it = ids.find(s);
      if (it != ids.end()) {
        out.push_back(it->second);
        continue;
      }
      for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        const auto byte = ids.find(s.substr(i, n));
        out.push_back(byte == ids.end() ? unknown : byte->second);
        i += n;
      }
    }
    return out;
  }
};

/// A random string of `n` "letters" (the pre-tokeniser's: ASCII letters and every byte >= 0x80), so
/// that the whole text is one piece; valid UTF-8 when `utf8`.
std::string random_word(std::mt19937& rng, std::size_t n, const std::string& letters, bool utf8) {
  static const std::vector<std::string> wide = {"\xC3\xA9", "\xD0\xB4", "\xE4\xB8\xAD", "\xE6\x96\x87", "\xF0\x9F\x98\x80"};
  std::string s;
  while (s.size() < n) {
    if (utf8 && rng() % 4 == 0) s += wide[rng() % wide.size()];
    else s += letters[rng() % letters.size()];
  }
  return s;
}

}  // namespace

TEST_CASE("example engine: GGUF files: a directory, a repeated key, bad counts and a flat embedding give gguf_error") {
  // A directory made the stream throw std::ios_base::failure.
  const auto dir = std::filesystem::temp_directory_path() / "specdec_reliability_dir.gguf";
  std::filesystem::create_directories(dir);
  CHECK(contains(gguf_message([&] { (void)engine::gguf_file::read(dir.string()); }), "not a regular file"));
  std::filesystem::remove(dir);
  CHECK(contains(gguf_message([] { (void)engine::gguf_file::read("/nonexistent/m.gguf"); }), "cannot open GGUF file"));
  engine::gguf_writer twice = tiny_llama();
  twice.add("llama.block_count", std::uint32_t{3});
  CHECK(contains(gguf_message([&] { (void)engine::gguf_file::parse(twice.bytes()); }), "metadata key 'llama.block_count' appears twice"));

  const auto load = [](const std::vector<unsigned char>& bytes) {
    return gguf_message([&] { (void)engine::llama_model::load(engine::gguf_file::parse(bytes)); });
  };
  CHECK(load(tiny_llama().bytes()) == "no exception");
  tiny_shape s;
  s.heads = 0;  // hidden / heads: SIGFPE
  CHECK(contains(load(tiny_llama(s).bytes()), "llama.attention.head_count = 0; expected 1 to 32"));
  s = {};
  s.kv_heads = 0;
  CHECK(contains(load(tiny_llama(s).bytes()), "llama.attention.head_count_kv = 0; expected 1 to 4"));
  s = {};
  s.heads = 5;
  CHECK(contains(load(tiny_llama(s).bytes()), "expected the heads to divide the width"));
  s = {};
  s.kv_heads = 3;
  CHECK(contains(load(tiny_llama(s).bytes()), "and the kv heads the heads"));
  s = {};
  s.layers = 0;
  CHECK(contains(load(tiny_llama(s).bytes()), "llama.block_count = 0; expected 1 to 65536"));
  // A negative block count loaded (the layer loop did not run) and the session reserved SIZE_MAX.
  CHECK(contains(load(with_i32(tiny_llama().bytes(), "llama.block_count", -1)), "llama.block_count = -1"));
  CHECK(contains(load(with_i32(tiny_llama().bytes(), "llama.embedding_length", -32)), "llama.embedding_length = -32"));
  s = {};
  s.flat_embedding = true;  // dims.at(1): std::out_of_range
  CHECK(contains(load(tiny_llama(s).bytes()), "tensor 'token_embd.weight' has rank 1; expected 2"));
}

TEST_CASE("example engine: BPE merges are those of the former quadratic loop, and a 100 KB word is fast") {
  // Random merge lists over a few letters, built as BPE training builds them (each merge joins two
  // symbols that exist), with repeated merges, merges whose result is not a token, and ties.
  std::mt19937 rng(17);
  for (int vocabulary = 0; vocabulary < 30; ++vocabulary) {
    CAPTURE(vocabulary);
    const std::string letters = vocabulary % 2 ? "ab" : "abcd";
    std::vector<std::string> tokens = {"<unk>"}, symbols;
    for (int b = 0; b < 256; ++b) tokens.push_back(byte_symbol(b));
    for (const char c : letters) symbols.push_back(byte_symbol(static_cast<unsigned char>(c)));
    for (const char* w : {"\xC3\xA9", "\xE4\xB8\xAD"})
      for (const unsigned char c : std::string(w)) symbols.push_back(byte_symbol(c));
    std::vector<std::string> merges;
    for (int m = 0; m < 40; ++m) {
      const std::string a = symbols[rng() % symbols.size()], b = symbols[rng() % symbols.size()];
      merges.push_back(a + " " + b);
      if (rng() % 5 != 0) tokens.push_back(a + b);  // some merge results are missing from the vocabulary
      symbols.push_back(a + b);
      if (rng() % 7 == 0) merges.push_back(merges[rng() % merges.size()]);  // a repeated merge keeps its first rank
    }
    engine::gguf_writer w;
    w.add("tokenizer.ggml.model", std::string("gpt2"));
    w.add("tokenizer.ggml.tokens", tokens);
    w.add("tokenizer.ggml.merges", merges);
    const auto file = engine::gguf_file::parse(w.bytes());
    const engine::bpe_tokenizer tok(file);
    const quadratic_bpe reference(tokens, merges, 0);
    for (int text = 0; text < 60; ++text) {
      const std::string word = random_word(rng, 1 + rng() % 120, letters, text % 3 == 0);
      CAPTURE(word);
      CHECK(tok.encode(word) == reference(word));
    }
  }
  // One piece of 100 000 letters: the rescan after every merge was quadratic (about 10^10 steps).
  engine::gguf_writer w;
  std::vector<std::string> tokens = {"<unk>"}, merges;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_symbol(b));
  for (std::string s = "a"; s.size() < 64; s += s) merges.push_back(s + " " + s), tokens.push_back(s + s);
  w.add("tokenizer.ggml.model", std::string("gpt2"));
  w.add("tokenizer.ggml.tokens", tokens);
  w.add("tokenizer.ggml.merges", merges);
  const engine::bpe_tokenizer tok(engine::gguf_file::parse(w.bytes()));
  const std::string long_word(100000, 'a');
  const auto ids = tok.encode(long_word);
  CHECK(ids.size() == 1563);  // 100000 = 1562 x 64 + 32
  CHECK(tok.decode(ids) == long_word);
}

TEST_CASE("example engine: SmolLM2's tokenizer, when present, merges as the former quadratic loop") {
  const char* env = std::getenv("SPECDEC_MODEL");
  const char* home = std::getenv("HOME");
  const std::string path = env ? env : home ? std::string(home) + "/.cache/specdec/SmolLM2-135M-Instruct.Q4_1.gguf" : "";
  if (path.empty() || !std::filesystem::exists(path)) {
    MESSAGE("SmolLM2-135M-Instruct not found (scripts/fetch_model.sh); BPE compared on synthetic merges only");
    return;
  }
  const auto file = engine::gguf_file::read(path);
  const engine::bpe_tokenizer tok(file);
  const quadratic_bpe reference(file.get<std::vector<std::string>>("tokenizer.ggml.tokens"),
                                file.get<std::vector<std::string>>("tokenizer.ggml.merges"),
                                static_cast<std::int32_t>(file.get_or<std::int64_t>("tokenizer.ggml.unknown_token_id", 0)));
  std::mt19937 rng(23);
  for (int text = 0; text < 400; ++text) {
    // A word with its leading space is one piece too.
    std::string word = text % 2 ? " " : "";
    word += random_word(rng, 1 + rng() % 40, "etaoinshrdlucmfwypvbgkqjxzETAOINS", text % 4 == 0);
    CAPTURE(word);
    CHECK(tok.encode(word) == reference(word));
  }
  for (const std::string word : {"internationalization", " antidisestablishmentarianism", " Paris", "hello"})
    CHECK(tok.encode(word) == reference(word));
}

TEST_CASE("example engine: prompt files: \\u takes exactly four hexadecimal digits; surrogate pairs; directories") {
  const auto prompts = [](const std::string& line) {
    const auto path = scratch_file("specdec_reliability_prompts.txt", line + "\n");
    std::string out;
    try {
      const auto p = engine::read_prompts(path.string());
      out = p.empty() ? "<none>" : p.front();
    } catch (const std::runtime_error& e) {
      out = std::string("error: ") + e.what();
    }
    std::filesystem::remove(path);
    return out;
  };
  CHECK(prompts(R"("A\u00e9\u4E2D")") == "A\xC3\xA9\xE4\xB8\xAD");
  CHECK(prompts(R"("\uD83D\uDE00!")") == "\xF0\x9F\x98\x80!");
  // std::stoul leaked std::invalid_argument for "ZZZZ" and read "-001" as ULONG_MAX.
  CHECK(contains(prompts(R"("\u-001")"), "error: "));
  CHECK(contains(prompts(R"("\u-001")"), ":1: \\u-001 is not four hexadecimal digits"));
  CHECK(contains(prompts(R"("\uZZZZ")"), "\\uZZZZ is not four hexadecimal digits"));
  CHECK(contains(prompts(R"("\u12")"), "is not four hexadecimal digits"));
  CHECK(contains(prompts(R"("\u 123")"), "is not four hexadecimal digits"));
  CHECK(contains(prompts(R"("\uD83Dx")"), "a lone high surrogate"));
  CHECK(contains(prompts(R"("\uDE00")"), "a lone low surrogate"));
  CHECK(contains(prompts(R"("\uD83D\u0041")"), "is not followed by a low surrogate"));
  // A directory read as no prompts at all (getline swallowed the failure).
  const auto dir = std::filesystem::temp_directory_path() / "specdec_reliability_prompts_dir";
  std::filesystem::create_directories(dir);
  CHECK_THROWS_AS(engine::read_prompts(dir.string()), std::runtime_error);
  std::filesystem::remove(dir);
}

TEST_CASE("example engine: a bad --max-new or --temperature is a usage error, not std::terminate") {
  int made = 0;
  std::ostringstream errors;
  const auto run = [&](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::streambuf* const cerr = std::cerr.rdbuf(errors.rdbuf());
    const int code = engine::example_main(static_cast<int>(argv.size()), argv.data(), "test", [&](const engine::llama_model&) {
      ++made;
      return std::unique_ptr<engine::method>();
    });
    std::cerr.rdbuf(cerr);
    return code;
  };
  // std::stol / std::stof threw outside the try block.
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--max-new", "abc"}) == 2);
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--max-new", "12x"}) == 2);
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--max-new", "0"}) == 2);
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--max-new", "99999999999999999999"}) == 2);
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--temperature", "warm"}) == 2);
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--temperature", "nan"}) == 2);
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--temperature", "-1"}) == 2);
  // Good values get as far as loading the model.
  CHECK(run({"x", "--model", "/nonexistent.gguf", "--max-new", "8", "--temperature", "0.5"}) == 1);
  CHECK(made == 0);
  CHECK(contains(errors.str(), "x: --max-new abc: expected an integer in [1, 2^20]\nusage: x --model PATH.gguf"));
  CHECK(contains(errors.str(), "x: --temperature nan: expected a number in [0, 100]"));
  CHECK(contains(errors.str(), "x: cannot open GGUF file '/nonexistent.gguf'"));
}

TEST_CASE("example engine: ADMG drafts after a one-token prompt; a layer plan of the wrong size is rejected") {
  const auto file = engine::gguf_file::parse(tiny_llama().bytes());
  const auto model = engine::llama_model::load(file);
  // A one-token prompt has no prefill, so nothing was planned and the draft forward read the empty
  // plan's vector<bool> out of bounds.
  const std::vector<std::int32_t> prompt = {40};
  engine::generation_options options;
  options.max_new_tokens = 12;
  const auto vanilla = engine::generate(model, prompt, nullptr, options);
  specdec::policy::admg::rules rules;
  rules.alpha = 0.9;
  engine::admg_drafter admg(model, rules, {0.0, 3}, /*cost_aware=*/false);
  const auto drafted = engine::generate(model, prompt, &admg, options);
  CHECK(drafted.tokens == vanilla.tokens);
  CHECK(drafted.stats.drafted > 0);  // planned from the first verify forward
  engine::eagle2_admg_drafter eagle(model, rules, specdec::dynamic_tree_config{2, 2, 5, specdec::tree_score::log_probability, {}});
  const auto tree = engine::generate(model, prompt, &eagle, options);
  CHECK(tree.tokens == vanilla.tokens);
  CHECK(tree.stats.drafted > 0);

  engine::llama_session session(model, 16);
  std::vector<float> logits;
  const std::int32_t token[1] = {40};
  const std::int64_t position[1] = {0};
  const specdec::policy::admg::layer_plan empty;
  CHECK(contains(error_of([&] { session.forward(token, position, {}, logits, &empty); }),
                 "the layer plan covers 0 attention and 0 MLP sub-layers; expected one of each per layer (2)"));
}

namespace {
/// An EAGLE checkpoint for tiny_llama, all weights zero, with the draft vocabulary's d2t as given.
std::filesystem::path eagle_checkpoint(const std::vector<std::int64_t>& d2t) {
  const auto v = static_cast<std::int64_t>(d2t.size());
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> f16 = {
      {"fc.weight", {32, 64}}, {"fc.bias", {32}}, {"layers.0.self_attn.q_proj.weight", {32, 32}},
      {"layers.0.self_attn.k_proj.weight", {16, 32}}, {"layers.0.self_attn.v_proj.weight", {16, 32}},
      {"layers.0.self_attn.o_proj.weight", {32, 32}}, {"layers.0.post_attention_layernorm.weight", {32}},
      {"layers.0.mlp.gate_proj.weight", {48, 32}}, {"layers.0.mlp.up_proj.weight", {48, 32}},
      {"layers.0.mlp.down_proj.weight", {32, 48}}, {"lm_head.weight", {v, 32}}};
  // Appends only: g++ 12 warns (-Wrestrict, falsely) on chains of std::string operator+.
  std::string header = "{", data;
  const auto entry = [&](const std::string& name, const char* dtype, const std::vector<std::int64_t>& shape, std::size_t bytes) {
    if (header.size() > 1) header += ',';
    header += '"';
    header += name;
    header += R"(":{"dtype":")";
    header += dtype;
    header += R"(","shape":[)";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(shape[i]);
    }
    header += R"(],"data_offsets":[)";
    header += std::to_string(data.size());
    header += ',';
    header += std::to_string(data.size() + bytes);
    header += "]}";
  };
  for (const auto& [name, shape] : f16) {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    entry(name, "F16", shape, 2 * static_cast<std::size_t>(n));
    data.append(2 * static_cast<std::size_t>(n), '\0');
  }
  entry("d2t", "I64", {v}, 8 * d2t.size());
  header += '}';
  for (const std::int64_t x : d2t)
    for (int i = 0; i < 8; ++i) data += static_cast<char>((static_cast<std::uint64_t>(x) >> (8 * i)) & 0xff);
  std::string file;
  for (int i = 0; i < 8; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  file += data;
  return scratch_file("specdec_reliability_eagle.safetensors", file);
}
}  // namespace

TEST_CASE("example engine: an EAGLE d2t entry near INT64_MAX is rejected without overflowing") {
  const auto file = engine::gguf_file::parse(tiny_llama().bytes());
  const auto model = engine::llama_model::load(file);
  const specdec::dynamic_tree_config tree{2, 2, 5, specdec::tree_score::log_probability, {}};
  const auto failure = [&](const std::vector<std::int64_t>& d2t) {
    const auto path = eagle_checkpoint(d2t);
    const std::string e = error_of([&] { engine::eagle_drafter(model, tree, path.string()); });
    std::filesystem::remove(path);
    return e;
  };
  constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max(), bottom = std::numeric_limits<std::int64_t>::min();
  // i + d2t[i] overflowed int64 (undefined) before the range check.
  CHECK(contains(failure({0, top, 0, 0}), "d2t[1] = 9223372036854775807 maps draft id 1 to an id beyond int64; expected a target id in [0, 259)"));
  CHECK(contains(failure({0, 0, bottom, 0}), "d2t[2] = -9223372036854775808 maps draft id 2 to -9223372036854775806"));
  CHECK(contains(failure({0, 0, 0, 256}), "d2t[3] = 256 maps draft id 3 to 259; expected a target id in [0, 259)"));
  CHECK(failure({0, -1, 0, 255}).empty());  // ids 0, 0, 2 and 258
}
