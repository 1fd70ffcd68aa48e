// SPDX-License-Identifier: Apache-2.0
// SuffixDecoding (include/specdec/tree/suffix.hpp): drafts equal Arctic Inference 0.3.0's, replayed
// from cases its own code recorded (tests/data/suffix, or $SPECDEC_SUFFIX_CASES: thousands more,
// recorded afresh by scripts/check_suffix_oracle.sh); counts and probabilities against a brute-force
// count of occurrences; bounds, copies, token types and bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/tree/suffix.hpp>

using specdec::index_t;
using json = nlohmann::json;

namespace {

specdec::suffix_options options_of(const json& op, std::size_t at) {
  return {.max_spec_tokens = op[at].get<index_t>(),
          .max_spec_factor = static_cast<float>(op[at + 1].get<double>()),
          .max_spec_offset = static_cast<float>(op[at + 2].get<double>()),
          .min_token_prob = static_cast<float>(op[at + 3].get<double>()),
          .tree = op[at + 4].get<bool>()};
}

/// Bit-for-bit equality with the oracle's draft (its float32 values are exact in JSON's doubles).
void check_draft(const specdec::suffix_draft<std::int32_t>& got, const json& want, const std::string& where) {
  INFO(where);
  CHECK(got.token == want["token"].get<std::vector<std::int32_t>>());
  CHECK(got.parent == want["parent"].get<std::vector<std::int32_t>>());
  CHECK(got.match_length == want["match_length"].get<index_t>());
  CHECK(std::bit_cast<std::uint32_t>(got.score) == std::bit_cast<std::uint32_t>(static_cast<float>(want["score"].get<double>())));
  const auto probs = want["prob"].get<std::vector<double>>();
  REQUIRE(got.prob.size() == probs.size());
  for (std::size_t i = 0; i < probs.size(); ++i)
    CHECK(std::bit_cast<std::uint32_t>(got.prob[i]) == std::bit_cast<std::uint32_t>(static_cast<float>(probs[i])));
}

/// Replays one recorded scenario; returns the number of speculations compared.
std::size_t replay(const json& scenario, std::size_t line) {
  const std::string kind = scenario["kind"];
  const auto depth = scenario["max_depth"].get<index_t>();
  std::size_t compared = 0;
  if (kind == "tree") {
    specdec::suffix_tree<std::int32_t> tree(depth);
    for (std::size_t k = 0; k < scenario["ops"].size(); ++k) {
      const json& op = scenario["ops"][k];
      const std::string where = "case line " + std::to_string(line) + " op " + std::to_string(k);
      if (op[0] == "extend") tree.extend(op[1].get<std::int32_t>(), op[2].get<std::vector<std::int32_t>>());
      else if (op[0] == "remove") tree.remove(op[1].get<std::int32_t>());
      else {
        check_draft(tree.speculate(op[1].get<std::vector<std::int32_t>>(), options_of(op, 2)), op[7], where);
        ++compared;
      }
      const std::string integrity = tree.check_integrity();
      INFO(where);
      REQUIRE(integrity.empty());
    }
    return compared;
  }
  // Arctic Inference's cache has no token bound.
  specdec::suffix_cache<std::int32_t, int> cache({.max_depth = depth,
                                                  .max_cached_requests = scenario["max_cached_requests"].get<index_t>(),
                                                  .max_cached_tokens = -1});
  for (std::size_t k = 0; k < scenario["ops"].size(); ++k) {
    const json& op = scenario["ops"][k];
    const std::string where = "case line " + std::to_string(line) + " op " + std::to_string(k);
    INFO(where);
    const bool error = op.back().is_string() && op.back() == "error";
    const int request = op[1].get<int>();
    const auto call = [&] {
      if (op[0] == "start") cache.start_request(request, op[2].get<std::vector<std::int32_t>>());
      else if (op[0] == "add") cache.add_active_response(request, op[2].get<std::vector<std::int32_t>>());
      else if (op[0] == "stop") cache.stop_request(request);
      else if (op[0] == "evict") cache.evict_cached_response(request);
      else if (!error) {
        check_draft(cache.speculate(request, op[2].get<std::vector<std::int32_t>>(), options_of(op, 3)), op[8], where);
        ++compared;
      } else {
        (void)cache.speculate(request, op[2].get<std::vector<std::int32_t>>(), options_of(op, 3));
      }
    };
    if (error) CHECK_THROWS_AS(call(), specdec::invalid_argument);
    else call();
    REQUIRE(cache.global_tree().check_integrity().empty());
  }
  return compared;
}

/// Occurrences of `s` in the sequences (every occurrence is counted by a depth-bounded tree when
/// |s| <= max_depth).
std::int64_t occurrences(const std::vector<std::vector<std::int32_t>>& seqs, const std::vector<std::int32_t>& s) {
  std::int64_t n = 0;
  for (const auto& q : seqs)
    for (std::size_t i = 0; i + s.size() <= q.size(); ++i)
      n += std::equal(s.begin(), s.end(), q.begin() + static_cast<std::ptrdiff_t>(i));
  return n;
}

}  // namespace

TEST_CASE("suffix drafts equal Arctic Inference 0.3.0's on its recorded cases") {
  const char* env = std::getenv("SPECDEC_SUFFIX_CASES");
  const std::string path = env != nullptr && *env != '\0' ? env : SPECDEC_TEST_DATA_DIR "/suffix/arctic_inference_0.3.0.jsonl";
  std::ifstream file(path);
  REQUIRE_MESSAGE(file.good(), "cannot read ", path);
  std::size_t scenarios = 0, compared = 0, line = 0;
  for (std::string text; std::getline(file, text);) {
    ++line;
    if (text.empty()) continue;
    compared += replay(json::parse(text), line);
    ++scenarios;
  }
  MESSAGE("suffix oracle: ", scenarios, " scenarios, ", compared, " drafts compared from ", path);
  CHECK(scenarios >= 300);
  CHECK(compared >= 2000);
}

TEST_CASE("suffix tree counts and path probabilities against brute-force occurrence counts") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const index_t depth = 1 + static_cast<index_t>(rng() % 10);
    const int vocab = 1 + static_cast<int>(rng() % 4);
    specdec::suffix_tree<std::int32_t> tree(depth);
    std::vector<std::vector<std::int32_t>> seqs(3);
    for (int op = 0; op < 12; ++op) {
      const std::size_t s = rng() % 3;
      if (rng() % 5 == 0) {
        tree.remove(static_cast<std::int32_t>(s));
        seqs[s].clear();
      } else {
        std::vector<std::int32_t> add(rng() % 8);
        for (auto& t : add) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
        tree.extend(static_cast<std::int32_t>(s), add);
        seqs[s].insert(seqs[s].end(), add.begin(), add.end());
      }
      REQUIRE(tree.check_integrity().empty());
      std::int64_t total = 0;
      for (const auto& q : seqs) total += static_cast<std::int64_t>(q.size());
      CHECK(tree.tokens() == total);
      std::vector<std::int32_t> context(1 + rng() % 5);
      for (auto& t : context) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
      const auto draft = tree.speculate(context, {.max_spec_tokens = 16, .max_spec_factor = 8.0f, .min_token_prob = 0.0f});
      if (draft.match_length == 0) {
        CHECK(draft.token.empty());
        continue;
      }
      // The draft follows the match; token j's probability is count(match + draft[..j]) / count(match),
      // and each token is a most frequent continuation of what precedes it.
      std::vector<std::int32_t> path(context.end() - draft.match_length, context.end());
      const std::int64_t base = occurrences(seqs, path);
      REQUIRE(base > 0);
      for (std::size_t j = 0; j < draft.token.size(); ++j) {
        CHECK(draft.parent[j] == static_cast<std::int32_t>(j) - 1);
        std::int64_t best = 0;
        for (int t = 0; t < vocab; ++t) {
          path.push_back(t);
          if (static_cast<index_t>(path.size()) <= depth) best = std::max(best, occurrences(seqs, path));
          path.pop_back();
        }
        path.push_back(draft.token[j]);
        REQUIRE(static_cast<index_t>(path.size()) <= depth);
        const std::int64_t n = occurrences(seqs, path);
        CHECK(n == best);
        CHECK(draft.prob[j] == doctest::Approx(static_cast<double>(n) / static_cast<double>(base)).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("suffix tree: copies are independent, token types agree, memory is released") {
  std::mt19937 rng(3);
  specdec::suffix_tree<std::int32_t> a(8);
  specdec::suffix_tree<std::uint16_t> b(8);
  specdec::suffix_tree<std::int64_t> c(8);
  std::vector<std::int32_t> tokens(400);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 6);
  a.extend(0, tokens);
  b.extend(0, std::vector<std::uint16_t>(tokens.begin(), tokens.end()));
  c.extend(0, std::vector<std::int64_t>(tokens.begin(), tokens.end()));
  const std::vector<std::int32_t> context(tokens.end() - 5, tokens.end());
  const specdec::suffix_options tree_mode{.max_spec_tokens = 12, .max_spec_factor = 4.0f, .min_token_prob = 0.05f, .tree = true};
  const auto da = a.speculate(context, tree_mode);
  const auto db = b.speculate(std::vector<std::uint16_t>(context.begin(), context.end()), tree_mode);
  const auto dc = c.speculate(std::vector<std::int64_t>(context.begin(), context.end()), tree_mode);
  REQUIRE(da.size() > 0);
  CHECK(std::vector<std::int32_t>(db.token.begin(), db.token.end()) == da.token);
  CHECK(std::vector<std::int32_t>(dc.token.begin(), dc.token.end()) == da.token);
  CHECK(db.prob == da.prob);
  CHECK(dc.parent == da.parent);

  specdec::suffix_tree<std::int32_t> copy = a;
  copy.extend(1, tokens);
  copy.remove(0);
  CHECK(copy.check_integrity().empty());
  const auto again = a.speculate(context, tree_mode);
  CHECK(again.token == da.token);
  CHECK(again.prob == da.prob);
  // Removing every sequence leaves the root alone; node, run and endpoint storage is reused.
  copy.remove(1);
  CHECK(copy.nodes() == 1);
  CHECK(copy.tokens() == 0);
  CHECK(copy.sequences() == 0);
  const std::size_t bytes = copy.memory_bytes();
  copy.extend(2, tokens);
  copy.remove(2);
  CHECK(copy.memory_bytes() == bytes);
}

TEST_CASE("suffix cache: the token bound evicts oldest responses first, the request being extended last") {
  specdec::suffix_cache<std::int32_t, int> cache({.max_depth = 4, .max_cached_requests = -1, .max_cached_tokens = 10});
  const std::vector<std::int32_t> six{1, 2, 3, 4, 5, 6};
  for (int r = 0; r < 3; ++r) {
    cache.start_request(r, six);
    cache.add_active_response(r, std::span(six).first(4));
    cache.stop_request(r);
    CHECK(cache.global_tree().tokens() <= 10);
  }
  CHECK(cache.cached_requests() == 2);  // 4 + 4 tokens; the first went when the third came
  CHECK_FALSE(cache.cached(0));
  CHECK(cache.cached(1));
  cache.start_request(9, six);
  cache.add_active_response(9, six);
  cache.add_active_response(9, six);  // 12 tokens alone: every other response goes, then this one
  CHECK(cache.cached_requests() == 0);
  CHECK(cache.global_tree().tokens() == 0);
  // Its own tree still drafts from them.
  const std::vector<std::int32_t> context{5, 6};
  CHECK(cache.speculate(9, context, {.max_spec_tokens = 2, .max_spec_factor = 2.0f}).token == std::vector<std::int32_t>{1, 2});
  CHECK(cache.memory_bytes() > 0);
}

TEST_CASE("suffix drafts as specdec draft trees") {
  specdec::suffix_draft<std::int32_t> draft;
  // Best-first order: 7 (child of the root), 8 (child of 7), 9 (child of the root), 10 (child of 9).
  draft.token = {7, 8, 9, 10};
  draft.parent = {-1, 0, -1, 2};
  draft.prob = {0.6f, 0.6f, 0.3f, 0.2f};
  const specdec::draft_tree tree = specdec::suffix_draft_tree(5, draft);
  CHECK(tree.token == std::vector<std::int32_t>{5, 7, 9, 8, 10});
  CHECK(tree.parent == std::vector<std::int32_t>{-1, 0, 0, 1, 2});
  CHECK(tree.depth == std::vector<std::int32_t>{0, 1, 1, 2, 2});
  CHECK(tree.score == std::vector<float>{0.0f, 0.6f, 0.3f, 0.6f, 0.2f});
  CHECK(specdec::suffix_draft_tree(5, specdec::suffix_draft<std::int32_t>{}).size() == 1);
  draft.parent[1] = 3;
  CHECK_THROWS_AS(specdec::suffix_draft_tree(5, draft), specdec::invalid_argument);
}

TEST_CASE("suffix tree and cache reject bad input by name") {
  CHECK_THROWS_WITH_AS(specdec::suffix_tree<std::int32_t>(0), doctest::Contains("max_depth = 0"), specdec::invalid_argument);
  CHECK_THROWS_AS(specdec::suffix_tree<std::int32_t>(index_t{1} << 17), specdec::invalid_argument);
  specdec::suffix_tree<std::int32_t> tree(4);
  const std::vector<std::int32_t> tokens{1, 2, 3};
  CHECK_THROWS_WITH_AS(tree.extend(-1, tokens), doctest::Contains("sequence id -1"), specdec::invalid_argument);
  tree.extend(0, tokens);
  CHECK_THROWS_WITH_AS((void)tree.speculate(tokens, {.max_spec_tokens = -1}), doctest::Contains("max_spec_tokens = -1"),
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS((void)tree.speculate(tokens, {.min_token_prob = std::nanf("")}), doctest::Contains("min_token_prob"),
                       specdec::invalid_argument);
  CHECK_THROWS_AS((void)tree.speculate(tokens, {.max_spec_factor = INFINITY}), specdec::invalid_argument);
  tree.remove(12345);  // unknown: nothing, as the reference
  CHECK(tree.check_integrity().empty());
  CHECK_THROWS_WITH_AS((specdec::suffix_cache<std::int32_t>({.max_cached_requests = -2})),
                       doctest::Contains("max_cached_requests = -2"), specdec::invalid_argument);
  CHECK_THROWS_AS((specdec::suffix_cache<std::int32_t>({.max_cached_tokens = -5})), specdec::invalid_argument);
  CHECK_THROWS_AS((specdec::suffix_cache<std::int32_t>({.max_depth = 0})), specdec::invalid_argument);
  specdec::suffix_cache<std::int32_t> cache;
  CHECK_THROWS_WITH_AS(cache.add_active_response(3, tokens), doctest::Contains("not active"), specdec::invalid_argument);
  cache.start_request(3, tokens);
  CHECK_THROWS_WITH_AS(cache.start_request(3, tokens), doctest::Contains("already active"), specdec::invalid_argument);
  CHECK_THROWS_AS(cache.evict_cached_response(4), specdec::invalid_argument);
}

TEST_CASE("suffix tree: strings many sequences end with (indexed endpoint lists), removed in any order") {
  std::mt19937 rng(11);
  specdec::suffix_tree<std::int32_t> tree(6);
  std::vector<std::vector<std::int32_t>> seqs(40);
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    seqs[s] = {1, 2, 3, 4};  // every sequence starts and ends alike: dozens of endpoints on one node
    for (std::size_t k = rng() % 5; k > 0; --k) seqs[s].push_back(static_cast<std::int32_t>(rng() % 3));
    seqs[s].insert(seqs[s].end(), {1, 2, 3, 4});
    tree.extend(static_cast<std::int32_t>(s), seqs[s]);
  }
  REQUIRE(tree.check_integrity().empty());
  std::vector<std::int32_t> order(seqs.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = static_cast<std::int32_t>(s);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::size_t k = 0; k < order.size(); ++k) {
    tree.remove(order[k]);
    REQUIRE(tree.check_integrity().empty());
    if (k % 8 != 7) continue;
    // The same strings stored afresh make the same nodes (the compressed trie of a set is unique).
    specdec::suffix_tree<std::int32_t> fresh(6);
    std::int64_t total = 0;
    for (std::size_t j = k + 1; j < order.size(); ++j) {
      fresh.extend(order[j], seqs[static_cast<std::size_t>(order[j])]);
      total += static_cast<std::int64_t>(seqs[static_cast<std::size_t>(order[j])].size());
    }
    CHECK(tree.nodes() == fresh.nodes());
    CHECK(tree.tokens() == total);
  }
  CHECK(tree.nodes() == 1);
}
