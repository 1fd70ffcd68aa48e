// SPDX-License-Identifier: Apache-2.0
// Grammar bitmasks, penalties and logprobs with hostile inputs: random small vocabularies, trees,
// bitmask words, logits (NaN, inf, -0 included), penalty parameters, bias entries and matcher answers.
// Each call either throws specdec::invalid_argument or keeps its invariants: apply_token_bitmask sets
// exactly the masked columns to -inf; fill_tree_bitmasks never makes the matcher accept a token its
// own row forbids nor roll back more than it holds, and returns it to node 0's state; prune_tree keeps
// a valid tree of allowed nodes; masked greedy and stochastic verification emit only allowed tokens and
// agree on the Eigen and Thrust (CPP) backends; penalties touch only the prompt, output, path and bias
// tokens (and zeros); an emitted token's logprob is at most 0 and never NaN, its rank in [1, V]; the
// constrained walk (verify_greedy_constrained, penalties in either convention) gives what masks on every
// node, penalties on every row and the masked verify_greedy give, and leaves the matcher holding what it
// emitted; prune_tree with a matcher returns it to node 0; the batched masked greedy walk (tree_batch)
// emits what the request form emits, and the batched penalties write the request form's bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/backend/thrust.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/batch.hpp>
#include <specdec/sampling/batch_penalties.hpp>
#include <specdec/sampling/constrained.hpp>
#include <specdec/sampling/sampling.hpp>
#include <specdec/grammar/tree_grammar.hpp>

#include "fuzz_input.hpp"

namespace {
using specdec::index_t;
namespace sampling = specdec::sampling;

/// A matcher whose answers come from the fuzz input; it tracks how many tokens it holds.
struct fuzz_matcher {
  fuzz::input* in;
  index_t words;
  std::vector<std::int32_t> rows;  // what fill writes: a fuzz row, kept for the accept check
  std::vector<std::int32_t> held;  // the row in force at each depth
  std::int32_t depth = 0;
  bool accept_token(std::int32_t t) {
    const std::int32_t* row = held.data() + static_cast<std::size_t>(depth) * static_cast<std::size_t>(words);
    fuzz::require(specdec::bitmask_allows(row, t), "the matcher was asked to accept a token its row forbids", t);
    if (in->byte() < 16) return false;  // a matcher may still refuse
    ++depth;
    return true;
  }
  void rollback(std::int32_t n) {
    fuzz::require(n >= 1 && n <= depth, "rollback outside the tokens held", n, depth);
    depth -= n;
  }
  bool is_terminated() { return in->byte() < 8; }
  void fill_next_token_bitmask(std::span<std::int32_t> row) {
    for (auto& w : row) w = in->byte() < 128 ? -1 : static_cast<std::int32_t>(in->u32());
    const std::size_t need = static_cast<std::size_t>(depth + 1) * static_cast<std::size_t>(words);
    if (held.size() < need) held.resize(need);
    std::copy(row.begin(), row.end(), held.begin() + static_cast<std::ptrdiff_t>(need - static_cast<std::size_t>(words)));
  }
};

/// A grammar whose answers are a hash of (last token, tokens held, token): accept and mask agree, a
/// state after `max_len` tokens allows only the stop token V - 1, which terminates it.
struct hash_matcher {
  index_t vocab;
  std::uint32_t seed;
  int forbid, max_len;
  std::vector<std::int32_t> held;
  bool allows(std::int32_t t) const {
    if (is_terminated()) return false;
    if (static_cast<int>(held.size()) > max_len) return t == static_cast<std::int32_t>(vocab - 1);
    std::uint32_t x = seed ^ (static_cast<std::uint32_t>(held.back()) * 2654435761u) ^ (static_cast<std::uint32_t>(held.size()) << 20) ^
                      (static_cast<std::uint32_t>(t) * 40503u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return x % static_cast<std::uint32_t>(forbid) != 0;
  }
  bool accept_token(std::int32_t t) {
    if (!allows(t)) return false;
    held.push_back(t);
    return true;
  }
  void rollback(std::int32_t n) {
    fuzz::require(n >= 1 && static_cast<std::size_t>(n) < held.size(), "rollback past node 0", n, held.size());
    held.resize(held.size() - static_cast<std::size_t>(n));
  }
  bool is_terminated() const { return held.back() == static_cast<std::int32_t>(vocab - 1) && held.size() > 1; }
  void fill_next_token_bitmask(std::span<std::int32_t> row) const {
    std::fill(row.begin(), row.end(), 0);
    for (std::int32_t t = 0; t < static_cast<std::int32_t>(vocab); ++t)
      if (allows(t)) specdec::bitmask_set(row.data(), t, true);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in(data, size);
  const index_t v = in.range(1, 80), words = specdec::bitmask_words(v);
  const auto n = static_cast<std::size_t>(in.range(1, 8));
  std::vector<std::int32_t> tokens(n), parents(n);
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(in.range(0, v - 1));
    parents[i] = i == 0 ? -1 : static_cast<std::int32_t>(in.range(0, static_cast<std::int64_t>(i) - 1));
  }
  const specdec::draft_tree tree = specdec::make_tree(tokens, parents, v);
  const index_t rows = static_cast<index_t>(n);
  std::vector<float> logits(static_cast<std::size_t>(rows * v));
  for (auto& x : logits) x = in.byte() < 230 ? static_cast<float>(static_cast<int>(in.byte()) - 128) / 16.0f : in.value();
  const index_t mask_words = in.byte() < 240 ? words : in.range(0, words + 1);
  std::vector<std::int32_t> bm(static_cast<std::size_t>(rows * std::max<index_t>(mask_words, 1)), -1);
  const bool fill_with_matcher = in.flag();
  fuzz_matcher matcher{&in, words, {}, {}};
  try {
    if (fill_with_matcher && mask_words == words) {
      const auto valid = specdec::fill_tree_bitmasks(specdec::tree_view(tree), v, matcher,
                                                     specdec::matrix_view<std::int32_t>(bm.data(), rows, words));
      fuzz::require(matcher.depth == 0, "the matcher is back at node 0", matcher.depth);
      fuzz::require(valid[0] == 1, "node 0 is valid");
    } else {
      for (auto& w : bm) w = in.byte() < 64 ? -1 : static_cast<std::int32_t>(in.u32());
    }
  } catch (const specdec::invalid_argument&) {
    return 0;
  }
  const specdec::matrix_view<const std::int32_t> mask(bm.data(), rows, mask_words);

  switch (in.byte() % 6) {
    case 0: {  // apply_token_bitmask
      std::vector<float> x = logits;
      const index_t vocab_size = in.byte() < 200 ? -1 : in.range(-1, v + 1);
      std::vector<index_t> indices;
      if (in.flag())
        for (index_t k = in.range(0, 3); k > 0; --k) indices.push_back(in.range(-1, rows));
      try {
        specdec::apply_token_bitmask(specdec::matrix_view<float>(x.data(), rows, v), mask, vocab_size, indices);
      } catch (const specdec::invalid_argument&) {
        return 0;
      }
      const index_t limit = vocab_size < 0 ? std::min(v, 32 * mask_words) : vocab_size;
      for (index_t r = 0; r < rows; ++r) {
        const bool listed = indices.empty() || std::find(indices.begin(), indices.end(), r) != indices.end();
        for (index_t j = 0; j < v; ++j) {
          const float before = logits[static_cast<std::size_t>(r * v + j)], after = x[static_cast<std::size_t>(r * v + j)];
          const bool masked = listed && j < limit && !specdec::bitmask_allows(bm.data() + r * mask_words, static_cast<std::int32_t>(j));
          fuzz::require(masked ? after == -std::numeric_limits<float>::infinity()
                               : (after == before || (std::isnan(after) && std::isnan(before))),
                        "apply_token_bitmask changed what it must not", r, j);
        }
      }
      break;
    }
    case 1: {  // prune_tree
      try {
        const specdec::pruned_tree p = specdec::prune_tree(tree, v, mask);
        specdec::validate(p.tree, v);
        for (std::size_t i = 1; i < p.kept.size(); ++i) {
          const auto old = static_cast<std::size_t>(p.kept[i]);
          fuzz::require(specdec::bitmask_allows(bm.data() + tree.parent[old] * mask_words, tree.token[old]), "kept a forbidden node");
        }
      } catch (const specdec::invalid_argument&) {
      }
      break;
    }
    case 2: {  // masked verification on both backends
      sampling::speculative_request q;
      q.tree = tree;
      q.uniforms = sampling::uniform_stream::philox({in.u32(), in.u32()});
      q.temperature = in.byte() < 240 ? 0.5f + static_cast<float>(in.byte()) / 128.0f : in.value();
      q.greedy = in.flag();
      const std::vector<sampling::speculative_request> requests = {q};
      const bool greedy_form = in.flag();
      const auto run = [&](auto& be) -> std::optional<std::vector<sampling::speculative_result>> {
        try {
          auto t = be.upload(std::span<const float>(logits));
          using space = typename std::remove_reference_t<decltype(be)>::memory_space;
          const specdec::matrix_view<const float, space> tv(t.view().data(), rows, v);
          if (greedy_form) return sampling::verify_greedy(be, tv, requests, mask);
          sampling::speculative_rows<space> r;
          r.target = tv;
          r.target_bitmask = mask;
          return sampling::verify_speculative_logits(be, r, requests);
        } catch (const specdec::invalid_argument&) {
          return std::nullopt;
        }
      };
      specdec::eigen e;
      specdec::thrust_backend<specdec::thrust_system::cpp> t;
      const auto a = run(e), b = run(t);
      fuzz::require(a.has_value() == b.has_value(), "one backend threw, the other did not");
      if (!a) break;
      fuzz::require((*a)[0].tokens == (*b)[0].tokens && (*a)[0].accepted_nodes == (*b)[0].accepted_nodes, "backends disagree");
      if (greedy_form) {  // the batched masked walk (one team per request) decides the same
        const auto n = static_cast<index_t>(tree.size());
        std::vector<std::int32_t> tokens(tree.token.begin(), tree.token.end()), parents(tree.parent.begin(), tree.parent.end());
        std::vector<std::int32_t> out_tokens(static_cast<std::size_t>(n + 1)), out_nodes(static_cast<std::size_t>(n));
        sampling::tree_batch<> batch;
        batch.tokens = specdec::matrix_view<const std::int32_t>(tokens.data(), 1, n);
        batch.parents = specdec::matrix_view<const std::int32_t>(parents.data(), 1, n);
        sampling::verify_outputs<> out;
        out.tokens = specdec::matrix_view<std::int32_t>(out_tokens.data(), 1, n + 1);
        out.accepted_nodes = specdec::matrix_view<std::int32_t>(out_nodes.data(), 1, n);
        try {
          sampling::verify_greedy(e, specdec::matrix_view<const float>(logits.data(), rows, v), mask, batch, out);
        } catch (const specdec::invalid_argument&) {
          fuzz::require(false, "the batched masked greedy walk threw where the request form did not");
        }
        const auto& want = (*a)[0];
        for (std::size_t k = 0; k < out_tokens.size(); ++k)
          fuzz::require(out_tokens[k] == (k < want.tokens.size() ? want.tokens[k] : -1), "the batched walk emitted otherwise", k);
        for (std::size_t k = 0; k < out_nodes.size(); ++k)
          fuzz::require(out_nodes[k] == (k < want.accepted_nodes.size() ? want.accepted_nodes[k] : -1), "the batched walk accepted otherwise", k);
      }
      std::int32_t at = 0;
      for (std::size_t k = 0; k < (*a)[0].tokens.size(); ++k) {
        fuzz::require(specdec::bitmask_allows(bm.data() + at * mask_words, (*a)[0].tokens[k]), "emitted a forbidden token", k);
        if (k < (*a)[0].accepted_nodes.size()) at = (*a)[0].accepted_nodes[k];
      }
      // Logprobs of what was emitted.
      const auto total = sampling::emitted_token_count(*a);
      const index_t top_n = in.range(0, 3);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(total * (top_n + 1))), ranks(static_cast<std::size_t>(total));
      std::vector<float> lps(ids.size());
      const std::vector<float> temps = {in.byte() < 240 ? 1.0f : in.value()};
      try {
        sampling::emitted_logprobs(e, specdec::matrix_view<const float>(logits.data(), rows, v), requests, *a, temps, top_n,
                                   {specdec::matrix_view<std::int32_t>(ids.data(), total, top_n + 1),
                                    specdec::matrix_view<float>(lps.data(), total, top_n + 1),
                                    specdec::vector_view<std::int32_t>(ranks.data(), total)},
                                   mask);
        for (index_t k = 0; k < total; ++k) {
          // At most 0, never NaN (it may underflow to -inf: a token whose logit is ~1e38 below the maximum).
          const float own = lps[static_cast<std::size_t>(k * (top_n + 1))];
          fuzz::require(!std::isnan(own) && own <= 1e-6f, "an emitted token's logprob is NaN or positive");
          fuzz::require(ranks[static_cast<std::size_t>(k)] >= 1 && ranks[static_cast<std::size_t>(k)] <= v, "rank outside [1, V]");
        }
      } catch (const specdec::invalid_argument&) {
      }
      break;
    }
    case 5: {  // the constrained walk and matcher pruning against the mask path, penalties in either convention
      hash_matcher lazy{v, in.u32(), static_cast<int>(in.range(2, 4)), static_cast<int>(in.range(1, 8)), {tree.token[0]}};
      hash_matcher eager = lazy, pruner = lazy;
      std::vector<std::int32_t> context;
      for (index_t k = in.range(0, 6); k > 0; --k) context.push_back(static_cast<std::int32_t>(in.range(0, v - 1)));
      const bool llama = in.flag(), penalised = in.flag();
      sampling::penalty_params p;
      p.repetition = in.byte() < 220 ? 0.5f + static_cast<float>(in.byte()) / 64.0f : in.value();
      p.frequency = in.byte() < 220 ? static_cast<float>(static_cast<int>(in.byte()) - 128) / 64.0f : in.value();
      p.presence = in.byte() < 220 ? static_cast<float>(static_cast<int>(in.byte()) - 128) / 64.0f : in.value();
      p.convention = llama ? sampling::penalty_convention::llama_cpp : sampling::penalty_convention::vllm;
      std::optional<sampling::penalty_history> h;
      try {
        h = llama ? sampling::penalty_history::last_n(context, static_cast<std::int32_t>(in.range(-1, 8)))
                  : sampling::penalty_history(context, context);
      } catch (const specdec::invalid_argument&) {
        break;
      }
      const sampling::walk_penalties walk{penalised ? &*h : nullptr, p};
      sampling::speculative_request q;
      q.tree = specdec::tree_view(tree);
      specdec::eigen eb;
      std::optional<sampling::speculative_result> got, want;
      try {
        got = sampling::verify_greedy_constrained(eb, specdec::matrix_view<const float>(logits.data(), rows, v), q, lazy, walk);
      } catch (const specdec::invalid_argument&) {
      }
      try {
        std::vector<std::int32_t> masks(static_cast<std::size_t>(rows * words));
        (void)specdec::fill_tree_bitmasks(specdec::tree_view(tree), v, eager, specdec::matrix_view<std::int32_t>(masks.data(), rows, words));
        std::vector<float> x = logits;
        if (penalised) sampling::apply_tree_penalties(specdec::matrix_view<float>(x.data(), rows, v), tree, 0, *h, p);
        const std::vector<sampling::speculative_request> one = {q};
        want = sampling::verify_greedy(eb, specdec::matrix_view<const float>(x.data(), rows, v), one,
                                       specdec::matrix_view<const std::int32_t>(masks.data(), rows, words))[0];
      } catch (const specdec::invalid_argument&) {
      }
      if (got && want) {
        fuzz::require(got->tokens == want->tokens && got->accepted_nodes == want->accepted_nodes,
                      "the constrained walk differs from the mask path");
        fuzz::require(lazy.held.size() == 1 + got->tokens.size(), "the matcher holds every emitted token", lazy.held.size());
      }
      const specdec::pruned_tree by_matcher = specdec::prune_tree(tree, v, pruner);
      fuzz::require(pruner.held.size() == 1, "prune_tree returns the matcher to node 0", pruner.held.size());
      for (std::size_t i = 1; i < by_matcher.kept.size(); ++i)
        fuzz::require(by_matcher.tree.parent[i] >= 0 && by_matcher.tree.parent[i] < static_cast<std::int32_t>(i), "a kept node's parent is kept first");
      break;
    }
    default: {  // penalties
      std::vector<std::int32_t> prompt, output;
      for (index_t k = in.range(0, 6); k > 0; --k) prompt.push_back(static_cast<std::int32_t>(in.range(-1, v)));
      for (index_t k = in.range(0, 6); k > 0; --k) output.push_back(static_cast<std::int32_t>(in.range(0, v)));
      std::vector<sampling::logit_bias> bias;
      for (index_t k = in.range(0, 2); k > 0; --k) bias.push_back({static_cast<std::int32_t>(in.range(-1, v)), in.value()});
      sampling::penalty_params p;
      p.repetition = in.byte() < 200 ? 0.5f + static_cast<float>(in.byte()) / 64.0f : in.value();
      p.frequency = in.byte() < 200 ? static_cast<float>(static_cast<int>(in.byte()) - 128) / 64.0f : in.value();
      p.presence = in.byte() < 200 ? static_cast<float>(static_cast<int>(in.byte()) - 128) / 64.0f : in.value();
      p.rule = in.flag() ? sampling::repetition_rule::divide : sampling::repetition_rule::multiply_reciprocal;
      std::vector<float> x = logits;
      std::optional<sampling::penalty_history> h;
      try {
        h.emplace(prompt, output);
      } catch (const specdec::invalid_argument&) {
        break;
      }
      bool host_threw = false;
      try {
        sampling::apply_tree_penalties(specdec::matrix_view<float>(x.data(), rows, v), tree, 0, *h, p, bias);
      } catch (const specdec::invalid_argument&) {
        host_threw = true;
      }
      {  // the batched form (one team per request) throws alike or writes the same bits
        sampling::penalty_batch_host packed;
        packed.add(*h, p, bias);
        std::vector<std::int32_t> tokens(tree.token.begin(), tree.token.end()), parents(tree.parent.begin(), tree.parent.end());
        sampling::tree_batch<> batch;
        batch.tokens = specdec::matrix_view<const std::int32_t>(tokens.data(), 1, rows);
        batch.parents = specdec::matrix_view<const std::int32_t>(parents.data(), 1, rows);
        std::vector<float> y = logits;
        specdec::eigen eb;
        bool batch_threw = false;
        try {
          sampling::apply_tree_penalties(eb, specdec::matrix_view<float>(y.data(), rows, v), batch, packed.view());
        } catch (const specdec::invalid_argument&) {
          batch_threw = true;
        }
        fuzz::require(batch_threw == host_threw, "the batched penalties threw where the request form did not, or the reverse");
        if (!host_threw)
          fuzz::require(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0, "the batched penalties wrote other bits");
      }
      if (host_threw) break;
      for (index_t r = 0; r < rows; ++r)
        for (index_t j = 0; j < v; ++j) {
          const auto t = static_cast<std::int32_t>(j);
          bool touched = std::find(prompt.begin(), prompt.end(), t) != prompt.end() ||
                         std::find(output.begin(), output.end(), t) != output.end();
          for (const auto& b : bias) touched = touched || b.token == t;
          for (index_t c = r; c > 0; c = tree.parent[static_cast<std::size_t>(c)]) touched = touched || tree.token[static_cast<std::size_t>(c)] == t;
          const float before = logits[static_cast<std::size_t>(r * v + j)], after = x[static_cast<std::size_t>(r * v + j)];
          if (!touched)
            fuzz::require(after == before || (std::isnan(after) && std::isnan(before)), "an untouched entry changed", r, j);
        }
      break;
    }
  }
  return 0;
}
