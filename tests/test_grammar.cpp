// SPDX-License-Identifier: Apache-2.0
// Grammar bitmasks against xgrammar 0.2.8's own code (tests/data/grammar, tools/goldens/xgrammar_masks.py):
// apply_token_bitmask equals apply_token_bitmask_inplace bit for bit; one matcher driven by
// fill_tree_bitmasks fills the masks traverse_draft_tree fills, on draft trees over SmolLM2's vocabulary
// for a JSON schema, a regex and an EBNF grammar; prune_tree keeps exactly the nodes those masks allow;
// masked greedy verification equals greedy verification of the masked logits on every backend.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/bitmask.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/grammar/tree_grammar.hpp>

#include "backend_conformance.hpp"

namespace {

using json = nlohmann::json;
using specdec::index_t;

const json& goldens() {
  static const json j = [] {
    std::ifstream f(SPECDEC_TEST_DATA_DIR "/grammar/xgrammar_masks.json");
    REQUIRE(f.good());
    return json::parse(f);
  }();
  return j;
}

float logit(index_t r, index_t j) {  // the goldens' deterministic logits, exact in float32
  return static_cast<float>((r * 7919 + j * 104729) % 2039 - 1019) / 1024.0f;
}

std::uint32_t crc32(const void* data, std::size_t n) {  // zlib's CRC-32
  std::uint32_t c = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::vector<std::int32_t> unrle(const json& runs, index_t words) {
  std::vector<std::int32_t> row;
  for (const auto& run : runs)
    for (int i = 0; i < run[1].get<int>(); ++i) row.push_back(run[0].get<std::int32_t>());
  REQUIRE(static_cast<index_t>(row.size()) == words);
  return row;
}

struct grammar_case {
  std::string kind;
  specdec::draft_tree tree;
  std::vector<std::int32_t> masks;  // [nodes x words]
  std::vector<bool> terminated;
  std::vector<std::uint32_t> crc;
  std::vector<int> neg_inf;
};

std::vector<grammar_case> grammar_cases() {
  const json& g = goldens();
  const index_t words = g["words"].get<index_t>();
  std::vector<grammar_case> out;
  for (const auto& c : g["grammars"]) {
    grammar_case k;
    k.kind = c["kind"].get<std::string>();
    k.tree = specdec::make_tree(c["tokens"].get<std::vector<std::int32_t>>(), c["parents"].get<std::vector<std::int32_t>>(),
                                g["vocab"].get<index_t>());
    for (const auto& m : c["masks"]) {
      const auto row = unrle(m, words);
      k.masks.insert(k.masks.end(), row.begin(), row.end());
    }
    k.terminated = c["terminated"].get<std::vector<bool>>();
    k.crc = c["applied_crc32"].get<std::vector<std::uint32_t>>();
    k.neg_inf = c["applied_neg_inf"].get<std::vector<int>>();
    out.push_back(std::move(k));
  }
  return out;
}

/// A matcher that replays xgrammar's masks: its state is the path of accepted tokens, and it answers
/// for the tree node that path reaches (the golden's row, termination), so fill_tree_bitmasks is
/// checked against traverse_draft_tree's order-independent result and every call it makes is legal
/// (accepting only what the current row allows, rolling back no more than it holds).
struct replay_matcher {
  const grammar_case* k;
  index_t words;
  std::vector<std::int32_t> path;  // node indices past node 0
  int calls = 0;
  std::int32_t node() const { return path.empty() ? 0 : path.back(); }
  const std::int32_t* row(std::int32_t n) const { return k->masks.data() + static_cast<std::size_t>(n) * static_cast<std::size_t>(words); }
  bool accept_token(std::int32_t token) {
    ++calls;
    const std::int32_t at = node();
    if (k->terminated[static_cast<std::size_t>(at)] || !specdec::bitmask_allows(row(at), token)) return false;
    for (index_t c = 1; c < k->tree.size(); ++c)  // any child with this token: equal paths have equal rows
      if (k->tree.parent[static_cast<std::size_t>(c)] == at && k->tree.token[static_cast<std::size_t>(c)] == token) {
        path.push_back(static_cast<std::int32_t>(c));
        return true;
      }
    FAIL("accepted a token no child of node ", at, " has: ", token);
    return false;
  }
  void rollback(std::int32_t n) {
    REQUIRE(n >= 1);
    REQUIRE(n <= static_cast<std::int32_t>(path.size()));
    path.resize(path.size() - static_cast<std::size_t>(n));
  }
  bool is_terminated() const { return k->terminated[static_cast<std::size_t>(node())]; }
  void fill_next_token_bitmask(std::span<std::int32_t> out) const {
    REQUIRE(static_cast<index_t>(out.size()) == words);
    std::copy(row(node()), row(node()) + words, out.begin());
  }
};
static_assert(specdec::grammar_matcher<replay_matcher>);

}  // namespace

TEST_CASE("apply_token_bitmask equals xgrammar's apply_token_bitmask_inplace bit for bit") {
  const json& g = goldens();
  for (const auto& c : g["apply"]) {
    INFO(c["name"].get<std::string>());
    const auto cols = c["cols"].get<index_t>();
    std::vector<float> x;
    for (const auto& row : c["logits"])
      for (const auto& v : row) x.push_back(v.get<float>());
    std::vector<std::int32_t> bm;
    index_t words = 0;
    for (const auto& row : c["bitmask"]) {
      words = static_cast<index_t>(row.size());
      for (const auto& w : row) bm.push_back(w.get<std::int32_t>());
    }
    const index_t rows = static_cast<index_t>(x.size()) / cols;
    const auto indices = c["indices"].get<std::vector<index_t>>();
    specdec::apply_token_bitmask(specdec::matrix_view<float>(x.data(), rows, cols),
                                 specdec::matrix_view<const std::int32_t>(bm.data(), static_cast<index_t>(bm.size()) / words, words),
                                 c["vocab_size"].get<index_t>(), indices);
    std::size_t i = 0;
    for (const auto& row : c["out"])
      for (const auto& v : row) {
        const float want = v.is_string() ? -std::numeric_limits<float>::infinity() : v.get<float>();
        CHECK(std::bit_cast<std::uint32_t>(x[i]) == std::bit_cast<std::uint32_t>(want));
        ++i;
      }
  }
  for (const grammar_case& k : grammar_cases()) {
    INFO(k.kind);
    const index_t v = goldens()["vocab"].get<index_t>(), words = goldens()["words"].get<index_t>(), n = k.tree.size();
    std::vector<float> x(static_cast<std::size_t>(n * v));
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < v; ++j) x[static_cast<std::size_t>(r * v + j)] = logit(r, j);
    specdec::apply_token_bitmask(specdec::matrix_view<float>(x.data(), n, v),
                                 specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words));
    for (index_t r = 0; r < n; ++r) {
      const float* row = x.data() + r * v;
      int neg = 0;
      for (index_t j = 0; j < v; ++j) neg += std::isinf(row[j]) && row[j] < 0;
      CHECK(neg == k.neg_inf[static_cast<std::size_t>(r)]);
      CHECK(crc32(row, static_cast<std::size_t>(v) * sizeof(float)) == k.crc[static_cast<std::size_t>(r)]);
    }
  }
}

TEST_CASE("apply_token_bitmask names what is wrong") {
  std::vector<float> x(2 * 70, 0.0f);
  std::vector<std::int32_t> bm(2 * 3, -1);
  const specdec::matrix_view<float> lv(x.data(), 2, 70);
  CHECK_THROWS_WITH_AS(specdec::apply_token_bitmask(lv, specdec::matrix_view<const std::int32_t>(bm.data(), 2, 2), 70),
                       "specdec::apply_token_bitmask: vocab_size = 70; expected at most 32 x 2 = 64 (the bitmask's width)",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(specdec::apply_token_bitmask(lv, specdec::matrix_view<const std::int32_t>(bm.data(), 1, 3)),
                       "specdec::apply_token_bitmask: bitmask has 1 rows and logits 2; expected equal counts (or indices)",
                       specdec::invalid_argument);
  const std::vector<index_t> bad = {1, 2};
  CHECK_THROWS_WITH_AS(specdec::apply_token_bitmask(lv, specdec::matrix_view<const std::int32_t>(bm.data(), 2, 3), -1, bad),
                       "specdec::apply_token_bitmask: indices[1] = 2; expected a row in [0, 2) (rows of both logits and bitmask)",
                       specdec::invalid_argument);
}

TEST_CASE("fill_tree_bitmasks fills xgrammar's traverse_draft_tree masks with one matcher; prune_tree keeps the valid nodes") {
  const index_t v = goldens()["vocab"].get<index_t>(), words = goldens()["words"].get<index_t>();
  for (const grammar_case& k : grammar_cases()) {
    INFO(k.kind);
    const index_t n = k.tree.size();
    replay_matcher m{&k, words, {}};
    std::vector<std::int32_t> filled(static_cast<std::size_t>((n + 2) * words), 12345);
    const auto valid = specdec::fill_tree_bitmasks(specdec::tree_view(k.tree), v, m,
                                                   specdec::matrix_view<std::int32_t>(filled.data(), n + 2, words), 1);
    CHECK(m.path.empty());  // back at node 0's state
    for (index_t i = 0; i < n; ++i) {
      INFO("node ", i);
      const auto* got = filled.data() + (i + 1) * words;
      const auto* want = k.masks.data() + i * words;
      CHECK(std::equal(got, got + words, want));
    }
    CHECK(filled[0] == 12345);  // rows outside [first_row, first_row + n) untouched
    CHECK(filled[static_cast<std::size_t>((n + 1) * words)] == 12345);
    // A node is valid iff its parent is and the parent's row allows its token (traverse_draft_tree's rule).
    std::vector<std::uint8_t> expected(static_cast<std::size_t>(n), 0);
    expected[0] = 1;
    for (index_t i = 1; i < n; ++i) {
      const auto p = static_cast<std::size_t>(k.tree.parent[static_cast<std::size_t>(i)]);
      expected[static_cast<std::size_t>(i)] =
          expected[p] && specdec::bitmask_allows(k.masks.data() + static_cast<index_t>(p) * words, k.tree.token[static_cast<std::size_t>(i)]);
    }
    CHECK(valid == expected);
    const specdec::pruned_tree pruned =
        specdec::prune_tree(k.tree, v, specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words));
    std::vector<std::int32_t> kept;
    for (index_t i = 0; i < n; ++i)
      if (expected[static_cast<std::size_t>(i)]) kept.push_back(static_cast<std::int32_t>(i));
    CHECK(pruned.kept == kept);
    specdec::validate(pruned.tree, v);
    for (std::size_t i = 1; i < kept.size(); ++i) {
      CHECK(pruned.tree.token[i] == k.tree.token[static_cast<std::size_t>(kept[i])]);
      CHECK(kept[static_cast<std::size_t>(pruned.tree.parent[i])] == k.tree.parent[static_cast<std::size_t>(kept[i])]);
    }
    CHECK(kept.size() < static_cast<std::size_t>(n));  // every golden tree holds forbidden drafts
  }
}

TEST_CASE("bitmask_fill_order: depth-first, children in index order, rollbacks to the parent's state") {
  // 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5}, 3 -> {6}
  const specdec::draft_tree t = specdec::make_tree({9, 1, 2, 3, 4, 5, 6}, {-1, 0, 0, 1, 1, 2, 3});
  const auto steps = specdec::bitmask_fill_order(t);
  const std::vector<std::pair<int, int>> want = {{0, 0}, {1, 0}, {3, 0}, {6, 0}, {4, 2}, {2, 2}, {5, 0}};
  REQUIRE(steps.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(steps[i].node == want[i].first);
    CHECK(steps[i].rollback == want[i].second);
  }
}

TEST_CASE_TEMPLATE("masked greedy verification equals greedy verification of the masked logits", B, SPECDEC_ALL_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = goldens()["vocab"].get<index_t>(), words = goldens()["words"].get<index_t>();
  for (const grammar_case& k : grammar_cases()) {
    INFO(k.kind);
    const index_t n = k.tree.size();
    // Greedy verification goes deep only where drafts are the target's argmax: raise the entries along
    // the path to the deepest valid node (each ancestor's row, at the next token on the path).
    std::vector<float> x(static_cast<std::size_t>(n * v));
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < v; ++j) x[static_cast<std::size_t>(r * v + j)] = logit(r, j);
    const auto valid = specdec::prune_tree(k.tree, v, specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words)).kept;
    std::int32_t deepest = 0;
    for (const std::int32_t i : valid)
      if (k.tree.depth[static_cast<std::size_t>(i)] > k.tree.depth[static_cast<std::size_t>(deepest)]) deepest = i;
    for (std::int32_t c = deepest; c > 0; c = k.tree.parent[static_cast<std::size_t>(c)])
      x[static_cast<std::size_t>(k.tree.parent[static_cast<std::size_t>(c)]) * static_cast<std::size_t>(v) +
        static_cast<std::size_t>(k.tree.token[static_cast<std::size_t>(c)])] = 8.0f;
    // The reference: the masked logits, then plain greedy verification.
    std::vector<float> masked = x;
    specdec::apply_token_bitmask(specdec::matrix_view<float>(masked.data(), n, v),
                                 specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words));
    specdec::sampling::speculative_request q;
    q.tree = specdec::tree_view(k.tree);
    const std::vector<specdec::sampling::speculative_request> requests = {q};
    // Rows the walk can visit all allow some token (valid rows of non-terminated nodes).
    auto raw = h.up(x);
    auto ref = h.up(masked);
    const auto got = specdec::sampling::verify_greedy(h.b, raw.matrix(n, v), requests,
                                                      specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words));
    const auto want = specdec::sampling::verify_greedy(h.b, ref.matrix(n, v), requests);
    CHECK(got[0].accepted_nodes == want[0].accepted_nodes);
    // At a node whose grammar terminated (a stop token accepted: an all-zero row) the masked walk ends
    // without a final token; the reference's row is all -inf there and gives token 0.
    const bool terminated = !got[0].accepted_nodes.empty() && k.terminated[static_cast<std::size_t>(got[0].accepted_nodes.back())];
    std::vector<std::int32_t> want_tokens = want[0].tokens;
    if (terminated) want_tokens.pop_back();
    CHECK(got[0].tokens == want_tokens);
    CHECK(got[0].bonus == (!terminated && want[0].bonus));
    CHECK(got[0].accepted_nodes.size() >= 2);
    CHECK(got[0].accepted_nodes.back() == deepest);
    for (const std::int32_t node : got[0].accepted_nodes)
      CHECK(specdec::bitmask_allows(k.masks.data() + k.tree.parent[static_cast<std::size_t>(node)] * words,
                                    k.tree.token[static_cast<std::size_t>(node)]));
  }
}

TEST_CASE_TEMPLATE("masked greedy verification: a terminated node ends the walk; node 0 allowing nothing is named", B,
                   SPECDEC_ALL_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 70, words = specdec::bitmask_words(v);
  const specdec::draft_tree t = specdec::make_tree({5, 6, 7}, {-1, 0, 1});
  std::vector<float> x(static_cast<std::size_t>(3 * v), 0.0f);
  for (index_t j = 0; j < v; ++j) x[static_cast<std::size_t>(j)] = j == 6 ? 1.0f : 0.0f;  // node 0's argmax: token 6
  std::vector<std::int32_t> bm(static_cast<std::size_t>(3 * words), -1);
  std::fill(bm.begin() + words, bm.begin() + 2 * words, 0);  // node 1 allows nothing: terminated
  specdec::sampling::speculative_request q;
  q.tree = specdec::tree_view(t);
  const std::vector<specdec::sampling::speculative_request> requests = {q};
  auto in = h.up(x);
  const auto ended = specdec::sampling::verify_greedy(h.b, in.matrix(3, v), requests,
                                                      specdec::matrix_view<const std::int32_t>(bm.data(), 3, words));
  CHECK(ended[0].tokens == std::vector<std::int32_t>{6});
  CHECK(ended[0].accepted_nodes == std::vector<std::int32_t>{1});
  CHECK(!ended[0].bonus);
  std::fill(bm.begin(), bm.begin() + words, 0);  // node 0 allows nothing: nothing can be emitted
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_greedy(h.b, in.matrix(3, v), requests,
                                                        specdec::matrix_view<const std::int32_t>(bm.data(), 3, words)),
                       "specdec::sampling::verify_greedy: request 0 node 0: bitmask row 0 allows no token; expected at least "
                       "one (node 0's row constrains the first token emitted)",
                       specdec::invalid_argument);
  std::fill(bm.begin(), bm.begin() + words, 0);
  specdec::bitmask_set(bm.data(), 3, true);  // allowed, but its logit is -inf
  x[3] = -std::numeric_limits<float>::infinity();
  auto in2 = h.up(x);
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_greedy(h.b, in2.matrix(3, v), requests,
                                                        specdec::matrix_view<const std::int32_t>(bm.data(), 3, words)),
                       "specdec::sampling::verify_greedy: request 0 node 0: bitmask row 0 allows tokens but every one has "
                       "logit -inf; expected at least one finite",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_greedy(h.b, in.matrix(3, v), requests,
                                                        specdec::matrix_view<const std::int32_t>(bm.data(), 3, words - 1)),
                       "specdec::sampling::verify_greedy: bitmask has 2 words per row; expected at least ceil(V / 32) = 3 "
                       "for V = 70",
                       specdec::invalid_argument);
}

TEST_CASE_TEMPLATE("masked stochastic verification equals verification of the masked logits and emits only allowed tokens", B,
                   SPECDEC_ALL_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = goldens()["vocab"].get<index_t>(), words = goldens()["words"].get<index_t>();
  int compared = 0, ended_terminated = 0, deep = 0;
  for (const grammar_case& k : grammar_cases()) {
    INFO(k.kind);
    const index_t n = k.tree.size();
    // Logits that make the drafted path to the deepest valid node likely under the masked softmax, so
    // walks go deep (and, for the regex, into nodes whose grammar terminated); draft rows: the softmax
    // of other unmasked logits (a drafter that ignores the grammar).
    std::vector<float> x(static_cast<std::size_t>(n * v)), qx(static_cast<std::size_t>(n * v));
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < v; ++j) {
        x[static_cast<std::size_t>(r * v + j)] = logit(r, j);
        qx[static_cast<std::size_t>(r * v + j)] = logit(r + 101, j);
      }
    const auto kept = specdec::prune_tree(k.tree, v, specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words)).kept;
    for (std::size_t i = 1; i < kept.size(); ++i) {
      const auto node = static_cast<std::size_t>(kept[i]);
      x[static_cast<std::size_t>(k.tree.parent[node]) * static_cast<std::size_t>(v) + static_cast<std::size_t>(k.tree.token[node])] = 9.0f;
    }
    std::vector<float> masked = x;
    specdec::apply_token_bitmask(specdec::matrix_view<float>(masked.data(), n, v),
                                 specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words));
    std::vector<float> q(static_cast<std::size_t>(n * v));
    specdec::eigen host;
    host.row_softmax(specdec::matrix_view<const float>(qx.data(), n, v), 1.0f, specdec::matrix_view<float>(q.data(), n, v));
    auto raw_d = h.up(x);
    auto masked_d = h.up(masked);
    auto q_d = h.up(q);
    std::vector<index_t> draft_rows(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) draft_rows[static_cast<std::size_t>(i)] = i == 0 ? -1 : k.tree.parent[static_cast<std::size_t>(i)];
    for (const bool with_drafts : {false, true})
      for (std::uint64_t seed = 0; seed < 12; ++seed) {
        specdec::sampling::speculative_request req;
        req.tree = specdec::tree_view(k.tree);
        req.uniforms = specdec::sampling::uniform_stream::philox({seed, 7});
        req.temperature = 0.9f;
        if (with_drafts) req.draft_rows = draft_rows;
        const std::vector<specdec::sampling::speculative_request> requests = {req};
        specdec::sampling::speculative_rows<typename B::memory_space> rows;
        rows.target = raw_d.matrix(n, v);
        rows.draft = q_d.matrix(n, v);
        rows.target_bitmask = specdec::matrix_view<const std::int32_t>(k.masks.data(), n, words);
        const auto got = specdec::sampling::verify_speculative_logits(h.b, rows, requests)[0];
        // Every emitted token is allowed where it was emitted (after the accepted path so far).
        std::int32_t at = 0;
        for (std::size_t t = 0; t < got.tokens.size(); ++t) {
          CHECK(specdec::bitmask_allows(k.masks.data() + at * words, got.tokens[t]));
          if (t < got.accepted_nodes.size()) at = got.accepted_nodes[t];
        }
        deep += got.accepted_nodes.size() >= 2;
        const bool terminated = !got.accepted_nodes.empty() && k.terminated[static_cast<std::size_t>(got.accepted_nodes.back())];
        if (terminated) {  // the grammar ended: no final token; the reference's row is all -inf there
          ++ended_terminated;
          CHECK(got.tokens.size() == got.accepted_nodes.size());
          continue;
        }
        specdec::sampling::speculative_rows<typename B::memory_space> ref_rows;
        ref_rows.target = masked_d.matrix(n, v);
        ref_rows.draft = q_d.matrix(n, v);
        const auto want = specdec::sampling::verify_speculative_logits(h.b, ref_rows, requests)[0];
        CHECK(got.tokens == want.tokens);
        CHECK(got.accepted_nodes == want.accepted_nodes);
        CHECK(got.uniforms_consumed == want.uniforms_consumed);
        ++compared;
      }
  }
  CHECK(compared >= 40);
  CHECK(ended_terminated >= 1);
  CHECK(deep >= 20);
}

TEST_CASE("masked stochastic verification takes logits and names a node 0 that allows nothing") {
  specdec::eigen b;
  const index_t v = 70, words = specdec::bitmask_words(v);
  const specdec::draft_tree t = specdec::make_tree({5, 6}, {-1, 0});
  std::vector<float> x(static_cast<std::size_t>(2 * v), 0.0f);
  std::vector<std::int32_t> bm(static_cast<std::size_t>(2 * words), 0);
  specdec::sampling::speculative_request q;
  q.tree = specdec::tree_view(t);
  q.uniforms = specdec::sampling::uniform_stream::philox({1, 2});
  const std::vector<specdec::sampling::speculative_request> requests = {q};
  specdec::sampling::speculative_rows<> rows;
  rows.target = specdec::matrix_view<const float>(x.data(), 2, v);
  rows.target_bitmask = specdec::matrix_view<const std::int32_t>(bm.data(), 2, words);
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_speculative_logits(b, rows, requests),
                       "specdec::sampling::verify_speculative_logits: request 0 node 0: rows.target_bitmask row 0 allows no "
                       "token; expected at least one (node 0's row constrains the first token emitted)",
                       specdec::invalid_argument);
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_speculative(b, rows, requests),
                       "specdec::sampling::verify_speculative: rows.target_bitmask is given; expected logits rows "
                       "(verify_speculative_logits): a mask applies to logits before the softmax",
                       specdec::invalid_argument);
}

TEST_CASE("masked_argmax equals a scalar reference: ties, -inf, NaN and +inf among allowed or masked entries, partial words") {
  std::mt19937 rng(7);
  // Rows past 2048 entries span several of the host path's chunks (ties across chunks, the maximum in
  // any chunk); faults are rarer there, so that most rows have an answer.
  for (const index_t v : {index_t(1), index_t(31), index_t(32), index_t(70), index_t(1000), index_t(4097), index_t(9000)}) {
    const index_t words = specdec::bitmask_words(v);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<float> x(static_cast<std::size_t>(v));
      std::vector<std::int32_t> m(static_cast<std::size_t>(words));
      const std::uint32_t faults = v > 1000 ? 40000 : 40;
      for (auto& e : x) {
        const auto k = rng() % faults;
        e = k == 0 ? -std::numeric_limits<float>::infinity()
            : k == 1 ? std::numeric_limits<float>::quiet_NaN()
            : k == 2 ? std::numeric_limits<float>::infinity()
            : k == 3 ? -0.0f
            : trial % 2 == 0 ? static_cast<float>(static_cast<int>(rng() % 9) - 4)         // many ties
                             : static_cast<float>(static_cast<int>(rng() % 8001) - 4000) / 16.0f;  // the maximum anywhere
      }
      if (trial % 4 == 1 && v > 64)  // a tie of the row's maximum earlier and later (across chunks at large V)
        x[static_cast<std::size_t>(rng() % static_cast<std::uint32_t>(v))] = x[static_cast<std::size_t>(rng() % static_cast<std::uint32_t>(v))] = 251.0f;
      const auto density = rng() % 4;
      for (auto& w : m) w = density == 0 ? 0 : density == 3 ? -1 : static_cast<std::int32_t>(rng() & rng());
      index_t bad = -2;
      const std::int32_t got = specdec::detail::masked_argmax(x.data(), v, m.data(), bad);
      // Reference: the first allowed NaN / +inf is a fault; else the largest allowed (first on ties).
      index_t want_bad = -1, best = -1;
      bool any = false;
      for (index_t j = 0; j < v; ++j) {
        if (!specdec::bitmask_allows(m.data(), static_cast<std::int32_t>(j))) continue;
        any = true;
        if (std::isnan(x[static_cast<std::size_t>(j)]) || x[static_cast<std::size_t>(j)] == std::numeric_limits<float>::infinity()) {
          if (want_bad < 0) want_bad = j;
          continue;
        }
        if (x[static_cast<std::size_t>(j)] > -std::numeric_limits<float>::infinity() &&
            (best < 0 || x[static_cast<std::size_t>(j)] > x[static_cast<std::size_t>(best)]))
          best = j;
      }
      INFO("V ", v, " trial ", trial);
      if (!any) {
        CHECK(got == -2);
      } else if (want_bad >= 0) {
        CHECK(got == -1);
        CHECK(bad == want_bad);
      } else {
        CHECK(bad == -1);
        CHECK(got == (best < 0 ? -1 : best));
      }
    }
  }
}
