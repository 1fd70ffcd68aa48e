// SPDX-License-Identifier: Apache-2.0
// Verification driven by a grammar matcher (sampling/constrained.hpp) and pruning by one (grammar/tree_grammar.hpp)
// against the mask-based path they shortcut: fill_tree_bitmasks + apply_tree_penalties + the masked
// verify_greedy, and prune_tree over those masks, on random trees, logits and grammars, every backend.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/bitmask.hpp>
#include <specdec/sampling/constrained.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/grammar/tree_grammar.hpp>

#include "backend_conformance.hpp"

namespace {

using specdec::index_t;

/// A grammar over [0, V): whether token t may follow depends on the last token held and how many are
/// held (a hash keeps about `1 / forbid` of the tokens out), the stop token `V - 1` terminates it, and a
/// state after `max_len` tokens allows only the stop token. Counts its calls.
struct hash_matcher {
  hash_matcher(index_t v, std::uint64_t s, int f = 3, int m = 1000, std::vector<std::int32_t> h = {})
      : vocab(v), seed(s), forbid(f), max_len(m), held(std::move(h)) {}
  index_t vocab;
  std::uint64_t seed;
  int forbid;
  int max_len;
  std::vector<std::int32_t> held;  // the tokens accepted, node 0's first
  int fills = 0, accepts = 0;
  bool allows(std::int32_t t) const {
    if (is_terminated()) return false;
    const std::int32_t stop = static_cast<std::int32_t>(vocab - 1);
    if (static_cast<int>(held.size()) >= max_len) return t == stop;
    std::uint64_t h = seed ^ (static_cast<std::uint64_t>(held.back() + 1) * 0x9e3779b97f4a7c15ull) ^
                      (static_cast<std::uint64_t>(held.size()) << 40) ^ static_cast<std::uint64_t>(t) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    return h % static_cast<std::uint64_t>(forbid) != 0;
  }
  bool accept_token(std::int32_t t) {
    ++accepts;
    if (!allows(t)) return false;
    held.push_back(t);
    return true;
  }
  void rollback(std::int32_t n) {
    REQUIRE(n >= 1);
    REQUIRE(static_cast<std::size_t>(n) < held.size());  // node 0's token is never rolled back
    held.resize(held.size() - static_cast<std::size_t>(n));
  }
  bool is_terminated() const { return held.back() == static_cast<std::int32_t>(vocab - 1); }
  void fill_next_token_bitmask(std::span<std::int32_t> row) {
    ++fills;
    std::fill(row.begin(), row.end(), 0);
    for (std::int32_t t = 0; t < static_cast<std::int32_t>(vocab); ++t)
      if (allows(t)) specdec::bitmask_set(row.data(), t, true);
  }
};
static_assert(specdec::grammar_matcher<hash_matcher>);

/// A random tree whose nodes mostly follow the raised entries of `logits` (so walks go deep), with
/// siblings distinct.
specdec::draft_tree random_tree(std::mt19937& rng, index_t nodes, index_t vocab, std::int32_t root) {
  std::vector<std::int32_t> tokens = {root}, parents = {-1};
  std::vector<std::vector<std::int32_t>> child_tokens(static_cast<std::size_t>(nodes));
  for (index_t i = 1; i < nodes; ++i) {
    const auto p = static_cast<std::int32_t>(rng() % 2 ? i - 1 : static_cast<index_t>(rng() % static_cast<std::uint32_t>(i)));
    std::int32_t t;
    do t = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
    while (std::find(child_tokens[static_cast<std::size_t>(p)].begin(), child_tokens[static_cast<std::size_t>(p)].end(), t) !=
           child_tokens[static_cast<std::size_t>(p)].end());
    child_tokens[static_cast<std::size_t>(p)].push_back(t);
    tokens.push_back(t);
    parents.push_back(p);
  }
  return specdec::make_tree(tokens, parents, vocab);
}

}  // namespace

TEST_CASE_TEMPLATE("constrained greedy verification equals masks on every node, penalties on every row, masked verify_greedy",
                   B, SPECDEC_ALL_BACKENDS) {
  conformance::harness<B> h;
  const index_t v = 300, words = specdec::bitmask_words(v);
  std::mt19937 rng(20261127);
  int cases = 0, deep = 0, shortcut = 0, terminated_walks = 0, repeated = 0;
  for (int round = 0; round < 120; ++round) {
    INFO("round ", round);
    const index_t n = 2 + static_cast<index_t>(rng() % 30);
    const specdec::draft_tree tree = random_tree(rng, n, v, static_cast<std::int32_t>(rng() % (v - 1)));
    // Logits: random, with each node's first child's token raised in the node's row (walks go deep
    // where the grammar allows them), some rows' raised entry forbidden, stop tokens now and then.
    std::vector<float> x(static_cast<std::size_t>(n * v));
    for (auto& e : x) e = static_cast<float>(static_cast<int>(rng() % 4096) - 2048) / 256.0f;
    for (index_t c = 1; c < n; ++c)
      if (rng() % 4 != 0) x[static_cast<std::size_t>(tree.parent[static_cast<std::size_t>(c)] * v + tree.token[static_cast<std::size_t>(c)])] = 9.0f;
    // A node's own token (on its path) above its children's: only the penalties make the walk go on.
    const int kind = round % 3;
    if (kind != 0)
      for (index_t r = 0; r < n; ++r)
        if (rng() % 2 != 0) x[static_cast<std::size_t>(r * v + tree.token[static_cast<std::size_t>(r)])] = 9.5f;
    if (round % 5 == 0) x[static_cast<std::size_t>((n - 1) * v + v - 1)] = 12.0f;  // a stop token chosen
    if (round % 7 == 0) x[static_cast<std::size_t>(rng() % static_cast<std::uint32_t>(n * v))] = -std::numeric_limits<float>::infinity();
    const std::vector<std::int32_t> context = {5, 17, 17, tree.token[0]};
    hash_matcher lazy(v, rng(), 2 + static_cast<int>(round % 3), 4 + static_cast<int>(rng() % 8), context);
    hash_matcher eager = lazy;
    // Penalties in either convention, or none.
    const specdec::sampling::penalty_history history =
        kind == 2 ? specdec::sampling::penalty_history::last_n(context, 3) : specdec::sampling::penalty_history(std::vector<std::int32_t>{5, 17}, std::vector<std::int32_t>{17});
    specdec::sampling::walk_penalties pen;
    if (kind != 0) {
      pen.history = &history;
      pen.params = {1.3f, 0.25f, 0.5f, specdec::sampling::repetition_rule::divide,
                    kind == 2 ? specdec::sampling::penalty_convention::llama_cpp : specdec::sampling::penalty_convention::vllm};
    }
    // The reference: every mask, every row penalised, the masked verify_greedy.
    std::vector<std::int32_t> masks(static_cast<std::size_t>(n * words));
    (void)specdec::fill_tree_bitmasks(tree, v, eager, specdec::matrix_view<std::int32_t>(masks.data(), n, words));
    std::vector<float> penalised = x;
    if (kind != 0) specdec::sampling::apply_tree_penalties(specdec::matrix_view<float>(penalised.data(), n, v), tree, 0, history, pen.params);
    specdec::sampling::speculative_request q;
    q.tree = specdec::tree_view(tree);
    const std::vector<specdec::sampling::speculative_request> requests = {q};
    auto raw = h.up(x);
    auto ref_rows = h.up(penalised);
    const auto want = specdec::sampling::verify_greedy(h.b, ref_rows.matrix(n, v), requests,
                                                       specdec::matrix_view<const std::int32_t>(masks.data(), n, words));
    const auto got = specdec::sampling::verify_greedy_constrained(h.b, raw.matrix(n, v), q, lazy, pen);
    CHECK(got.accepted_nodes == want[0].accepted_nodes);
    CHECK(got.tokens == want[0].tokens);
    CHECK(got.bonus == want[0].bonus);
    // The matcher holds every emitted token.
    std::vector<std::int32_t> emitted = context;
    emitted.insert(emitted.end(), got.tokens.begin(), got.tokens.end());
    CHECK(lazy.held == emitted);
    ++cases;
    for (std::size_t i = 0; i < got.accepted_nodes.size(); ++i) {
      const auto node = static_cast<std::size_t>(got.accepted_nodes[i]);
      const auto parent = static_cast<std::size_t>(tree.parent[node]);
      repeated += kind != 0 && x[parent * static_cast<std::size_t>(v) + static_cast<std::size_t>(tree.token[parent])] == 9.5f;
    }
    deep += got.accepted_nodes.size() >= 2;
    terminated_walks += !got.tokens.empty() && got.tokens.back() == static_cast<std::int32_t>(v - 1);
    shortcut += lazy.fills < static_cast<int>(got.accepted_nodes.size()) + 1;
  }
  CHECK(cases == 120);
  CHECK(deep > 20);              // the walks go past the first node
  CHECK(shortcut > 20);          // and mostly without a mask per visited node
  CHECK(terminated_walks > 5);   // stop tokens are emitted
  CHECK(repeated > 10);          // penalties changed the walk
}

TEST_CASE("prune_tree with a matcher keeps the nodes prune_tree keeps with the masks fill_tree_bitmasks fills") {
  const index_t v = 120, words = specdec::bitmask_words(v);
  std::mt19937 rng(7);
  int dropped = 0;
  for (int round = 0; round < 200; ++round) {
    const index_t n = 1 + static_cast<index_t>(rng() % 40);
    const specdec::draft_tree tree = random_tree(rng, n, v, static_cast<std::int32_t>(rng() % v));
    hash_matcher m(v, rng(), 2 + static_cast<int>(round % 4), 3 + static_cast<int>(rng() % 6), {1, 2, tree.token[0]});
    hash_matcher eager = m;
    std::vector<std::int32_t> masks(static_cast<std::size_t>(n * words));
    (void)specdec::fill_tree_bitmasks(tree, v, eager, specdec::matrix_view<std::int32_t>(masks.data(), n, words));
    const specdec::pruned_tree want = specdec::prune_tree(tree, v, specdec::matrix_view<const std::int32_t>(masks.data(), n, words));
    const specdec::pruned_tree got = specdec::prune_tree(tree, v, m);
    CHECK(got.kept == want.kept);
    CHECK(got.tree.token == want.tree.token);
    CHECK(got.tree.parent == want.tree.parent);
    CHECK(m.held == std::vector<std::int32_t>{1, 2, tree.token[0]});  // back at node 0's state
    CHECK(m.fills == 0);
    dropped += static_cast<int>(want.kept.size()) < n;
  }
  CHECK(dropped > 100);
}

TEST_CASE("constrained greedy verification names a terminated node 0, a forbidden bonus token and a matcher that contradicts itself") {
  specdec::eigen b;
  const index_t v = 40;
  std::vector<float> x(static_cast<std::size_t>(2 * v), 0.0f);
  const specdec::matrix_view<const float> lv(x.data(), 2, v);
  specdec::sampling::speculative_request q;
  const specdec::draft_tree stop = specdec::make_tree({static_cast<std::int32_t>(v - 1)}, {-1}, v);
  q.tree = specdec::tree_view(stop);
  hash_matcher m(v, 1, 3, 1000, {static_cast<std::int32_t>(v - 1)});
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_greedy_constrained(b, lv, q, m),
                       "specdec::sampling::verify_greedy_constrained: node 0: the matcher is terminated; expected a state that "
                       "can emit a token",
                       specdec::invalid_argument);
  // A bonus token the grammar forbids after the path (max_len 1: only the stop token may follow).
  const specdec::draft_tree root = specdec::make_tree({3}, {-1}, v);
  q.tree = specdec::tree_view(root);
  q.bonus_token = std::int32_t{4};
  hash_matcher one(v, 1, 3, 1, {3});
  CHECK_THROWS_WITH_AS(specdec::sampling::verify_greedy_constrained(b, lv, q, one),
                       "specdec::sampling::verify_greedy_constrained: bonus_token = 4; expected a token the grammar allows "
                       "after the accepted path",
                       specdec::invalid_argument);
  // A matcher whose mask allows what accept_token rejects.
  struct liar : hash_matcher {
    using hash_matcher::hash_matcher;
    bool accept_token(std::int32_t) { return false; }
  };
  liar l(v, 1, 3, 1000, {3});
  q.bonus_token.reset();
  CHECK_THROWS_AS(specdec::sampling::verify_greedy_constrained(b, lv, q, l), specdec::invalid_argument);
}

TEST_CASE("penalised_argmax equals penalise_row then masked_argmax: ties across penalised and untouched tokens, faults") {
  std::mt19937 rng(3);
  int touched_won = 0, untouched_won = 0, faults = 0, ties = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const index_t v = 1 + static_cast<index_t>(rng() % 300), words = specdec::bitmask_words(v);
    std::vector<float> x(static_cast<std::size_t>(v));
    for (auto& e : x) {
      const auto k = rng() % 500;
      e = k == 0 ? std::numeric_limits<float>::quiet_NaN() : k == 1 ? std::numeric_limits<float>::infinity()
          : k < 40 ? -std::numeric_limits<float>::infinity() : k < 60 ? -0.0f
                   : static_cast<float>(static_cast<int>(rng() % 13) - 6) / 2.0f;  // ties
    }
    std::vector<std::int32_t> mask(static_cast<std::size_t>(words));
    for (auto& w : mask) w = trial % 5 == 0 ? 0 : static_cast<std::int32_t>(rng() | rng());
    std::vector<std::int32_t> prompt, output, path;
    for (int i = 0; i < 6; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(v)));
    for (int i = 0; i < 4; ++i) output.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(v)));
    for (int i = 0; i < static_cast<int>(rng() % 4); ++i) path.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(v)));
    const bool llama = trial % 2 == 1;
    std::vector<std::int32_t> context = prompt;
    context.insert(context.end(), output.begin(), output.end());
    const specdec::sampling::penalty_history h = llama ? specdec::sampling::penalty_history::last_n(context, 1 + static_cast<std::int32_t>(rng() % 8))
                                                       : specdec::sampling::penalty_history(prompt, output);
    // Penalties that only lower logits (only the tokens reaching the untouched maximum are evaluated),
    // neutral ones (ties survive them), and ones that raise some.
    const float signs[] = {0.5f, -0.5f, 0.0f};
    const float repetitions[] = {0.5f, 2.0f, 1.0f};
    const specdec::sampling::penalty_params p{repetitions[trial % 3], signs[rng() % 3], signs[rng() % 3],
                                              specdec::sampling::repetition_rule::divide,
                                              llama ? specdec::sampling::penalty_convention::llama_cpp : specdec::sampling::penalty_convention::vllm};
    const std::vector<specdec::sampling::logit_bias> bias = {{static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(v)), 3.0f}};
    const auto touched = h.touched();
    const bool masked = trial % 3 != 2;
    std::vector<float> reference = x;
    specdec::sampling::detail::penalise_row(reference.data(), v, touched, h, path, p, bias);
    std::vector<std::int32_t> all(static_cast<std::size_t>(words), -1);
    index_t want_bad = -1, got_bad = -1;
    const std::int32_t want = specdec::detail::masked_argmax(reference.data(), v, masked ? mask.data() : all.data(), want_bad);
    specdec::sampling::detail::penalised_argmax argmax(v, &h, p, bias);
    const std::int32_t got = argmax(x.data(), masked ? mask.data() : nullptr, path, got_bad);
    // Twice: the path's tokens leave the reader as they came (a second row reads the same).
    index_t again_bad = -1;
    CHECK(argmax(x.data(), masked ? mask.data() : nullptr, path, again_bad) == got);
    // The tokens a penalty or the bias can change at this node.
    std::vector<std::int32_t> candidates = path;
    for (const auto& e : touched) candidates.push_back(e.token);
    for (const auto& b : bias) candidates.push_back(b.token);
    std::sort(candidates.begin(), candidates.end());
    INFO("trial ", trial, " V ", v);
    CHECK(got == want);
    CHECK((got_bad >= 0) == (want_bad >= 0));
    faults += want_bad >= 0;
    if (want >= 0) {
      const bool was_touched = std::binary_search(candidates.begin(), candidates.end(), want);
      touched_won += was_touched;
      untouched_won += !was_touched;
      for (index_t j = want + 1; j < v; ++j)
        ties += reference[static_cast<std::size_t>(j)] == reference[static_cast<std::size_t>(want)] &&
                (!masked || specdec::bitmask_allows(mask.data(), static_cast<std::int32_t>(j)));
    }
  }
  CHECK(touched_won > 100);
  CHECK(untouched_won > 100);
  CHECK(faults > 50);
  CHECK(ties > 100);
}
