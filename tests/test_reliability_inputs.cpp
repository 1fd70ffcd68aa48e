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

namespace {

bool contains(const std::string& text, const std::string& part) {
  INFO("message: ", text);
  return text.find(part) != std::string::npos;
}

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
