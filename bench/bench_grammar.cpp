// SPDX-License-Identifier: Apache-2.0
// Structured output and penalties in trees, one core: what reading a row under a token bitmask and
// penalising a tree's rows cost against one streaming pass over the same rows (x_stream, paired per call:
// bench/paired.hpp), beside the straightforward forms (a masked copy of the row then its argmax; a
// [V] count array per row and every entry penalised), xgrammar's in-place mask application, and the
// host bookkeeping of a 64-node tree (bitmask_fill_order, prune_tree).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/grammar/token_bitmask.hpp>
#include <specdec/sampling/constrained.hpp>
#include <specdec/sampling/penalties.hpp>
#include <specdec/grammar/tree_grammar.hpp>

#include "paired.hpp"

namespace {

using specdec::index_t;

using pool = bench::row_pool;

/// A bitmask row allowing about `percent` % of the tokens (a JSON string state allows most, a number
/// state few).
std::vector<std::int32_t> mask_row(index_t v, int percent) {
  std::vector<std::int32_t> m(static_cast<std::size_t>(specdec::bitmask_words(v)), 0);
  const specdec::philox_stream s{9, 1};
  for (index_t j = 0; j < v; ++j)
    if (s.uniform(static_cast<std::uint64_t>(j)) * 100.0 < percent) specdec::bitmask_set(m.data(), static_cast<std::int32_t>(j), true);
  return m;
}

/// Times `body(rows)` on `count` fresh rows of a V-column pool per call, each call paired with one
/// streaming pass over other rows of the pool: the `x_stream` counter.
template <class Body>
void against_stream(benchmark::State& state, index_t v, index_t count, Body&& body) {
  pool p(v);
  bench::paired_ratio ratio;
  for (auto _ : state) ratio.measure(state, [&] { body(p.take(count)); }, [&] { bench::stream_pass(p.take(count)); });
  state.counters["x_stream"] = ratio.x_stream();
}

/// The largest allowed logit of a row: what masked greedy verification reads per visited row.
void BM_masked_argmax(benchmark::State& state) {
  const index_t v = state.range(0);
  const auto m = mask_row(v, static_cast<int>(state.range(1)));
  against_stream(state, v, 1, [&](specdec::matrix_view<float> rows) {
    index_t bad = -1;
    benchmark::DoNotOptimize(specdec::detail::masked_argmax(rows.row(0), v, m.data(), bad));
  });
}

/// The straightforward form: a masked copy of the row (xgrammar's apply on a copy), then its argmax.
void BM_masked_argmax_baseline(benchmark::State& state) {
  const index_t v = state.range(0);
  const auto m = mask_row(v, static_cast<int>(state.range(1)));
  std::vector<float> copy(static_cast<std::size_t>(v));
  specdec::eigen b;
  against_stream(state, v, 1, [&](specdec::matrix_view<float> rows) {
    std::copy(rows.row(0), rows.row(0) + v, copy.begin());
    specdec::apply_token_bitmask(specdec::matrix_view<float>(copy.data(), 1, v),
                                 specdec::matrix_view<const std::int32_t>(m.data(), 1, static_cast<index_t>(m.size())));
    std::int32_t best = 0;
    b.row_argmax(specdec::matrix_view<const float>(copy.data(), 1, v), specdec::vector_view<std::int32_t>(&best, 1));
    benchmark::DoNotOptimize(best);
  });
}

/// xgrammar's apply_token_bitmask_inplace on one row (read and written in place; x_stream against one
/// read pass).
void BM_apply_token_bitmask(benchmark::State& state) {
  const index_t v = state.range(0);
  const auto m = mask_row(v, static_cast<int>(state.range(1)));
  against_stream(state, v, 1, [&](specdec::matrix_view<float> rows) {
    specdec::apply_token_bitmask(rows, specdec::matrix_view<const std::int32_t>(m.data(), 1, static_cast<index_t>(m.size())));
  });
}

specdec::draft_tree tree_of(index_t nodes, index_t v) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(nodes)), parents(static_cast<std::size_t>(nodes));
  for (index_t i = 0; i < nodes; ++i) {
    tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7919) % v);
    parents[static_cast<std::size_t>(i)] = i == 0 ? -1 : static_cast<std::int32_t>((i - 1) / 4);  // 4-ary, depth 3
  }
  return specdec::make_tree(tokens, parents, v);
}

/// A request's history of `prompt` prompt tokens and a fifth as many output tokens (distinct tokens
/// spread over the vocabulary, as a long prompt's are).
std::vector<std::int32_t> prompt_of(index_t v, std::size_t n) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>((i * 104729) % static_cast<std::size_t>(v));
  return t;
}
std::vector<std::int32_t> output_of(index_t v, std::size_t n) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>((i * 7727) % static_cast<std::size_t>(v));
  return t;
}
specdec::sampling::penalty_history history_of(index_t v, std::size_t prompt_tokens) {
  return {prompt_of(v, prompt_tokens), output_of(v, prompt_tokens / 5)};
}

/// Penalties on a 60-node tree's rows (prompt of 1000 tokens, 200 output), x_stream against one pass
/// over the 60 rows.
void BM_tree_penalties(benchmark::State& state) {
  const index_t v = state.range(0), nodes = 60;
  const auto tree = tree_of(nodes, v);
  const auto h = history_of(v, 1000);
  against_stream(state, v, nodes, [&](specdec::matrix_view<float> rows) {
    specdec::sampling::apply_tree_penalties(rows, tree, 0, h, {1.1f, 0.3f, 0.2f});
  });
}

/// The straightforward form: per row, a [V] count array from the node's history, every entry penalised.
void BM_tree_penalties_baseline(benchmark::State& state) {
  const index_t v = state.range(0), nodes = 60;
  const auto tree = tree_of(nodes, v);
  const std::vector<std::int32_t> prompt = prompt_of(v, 1000), output = output_of(v, 200);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(v));
  std::vector<std::uint8_t> in_prompt(static_cast<std::size_t>(v));
  against_stream(state, v, nodes, [&](specdec::matrix_view<float> rows) {
    for (index_t i = 0; i < nodes; ++i) {
      std::fill(counts.begin(), counts.end(), 0);
      std::fill(in_prompt.begin(), in_prompt.end(), 0);
      for (const auto t : prompt) in_prompt[static_cast<std::size_t>(t)] = 1;
      for (const auto t : output) ++counts[static_cast<std::size_t>(t)];
      for (index_t c = i; c > 0; c = tree.parent[static_cast<std::size_t>(c)]) ++counts[static_cast<std::size_t>(tree.token[static_cast<std::size_t>(c)])];
      float* x = rows.row(i);
      for (index_t j = 0; j < v; ++j) {
        float e = x[j];
        if (in_prompt[static_cast<std::size_t>(j)] || counts[static_cast<std::size_t>(j)] > 0) e = e > 0.0f ? e / 1.1f : e * 1.1f;
        e -= 0.3f * static_cast<float>(counts[static_cast<std::size_t>(j)]);
        e -= 0.2f * (counts[static_cast<std::size_t>(j)] > 0 ? 1.0f : 0.0f);
        x[j] = e;
      }
    }
  });
}

/// One visited row read under a bitmask and penalties (a history of range(2) prompt tokens and a fifth
/// as many output ones, a 3-token path), as verify_greedy_constrained reads it (penalised_argmax: the
/// row never written), x_stream against one read pass of the row. range(2) = 0: the mask alone.
void BM_constrained_row(benchmark::State& state) {
  const index_t v = state.range(0);
  const auto m = mask_row(v, static_cast<int>(state.range(1)));
  const auto h = history_of(v, static_cast<std::size_t>(state.range(2)));
  const std::vector<std::int32_t> path = {7, 11, 13};
  specdec::sampling::detail::penalised_argmax argmax(v, state.range(2) > 0 ? &h : nullptr, {1.1f, 0.3f, 0.2f}, {});
  against_stream(state, v, 1, [&](specdec::matrix_view<float> rows) {
    index_t bad = -1;
    benchmark::DoNotOptimize(argmax(rows.row(0), m.data(), path, bad));
  });
}

/// The straightforward form: a copy of the row penalised (penalise_row), then its masked argmax.
void BM_constrained_row_baseline(benchmark::State& state) {
  const index_t v = state.range(0);
  const auto m = mask_row(v, static_cast<int>(state.range(1)));
  const auto h = history_of(v, static_cast<std::size_t>(state.range(2)));
  const auto touched = h.touched();
  const std::vector<std::int32_t> path = {7, 11, 13};
  const specdec::sampling::penalty_params params{1.1f, 0.3f, 0.2f};
  std::vector<float> copy(static_cast<std::size_t>(v));
  against_stream(state, v, 1, [&](specdec::matrix_view<float> rows) {
    std::copy(rows.row(0), rows.row(0) + v, copy.begin());
    specdec::sampling::detail::penalise_row(copy.data(), v, touched, h, path, params, {});
    index_t bad = -1;
    benchmark::DoNotOptimize(specdec::detail::masked_argmax(copy.data(), v, m.data(), bad));
  });
}

/// A 64-node tree's bookkeeping: the fill order, and pruning against its masks (V = 128256).
void BM_grammar_bookkeeping_64(benchmark::State& state) {
  const index_t v = 128256, nodes = 64, words = specdec::bitmask_words(v);
  const auto tree = tree_of(nodes, v);
  std::vector<std::int32_t> masks(static_cast<std::size_t>(nodes * words), -1);
  for (index_t i = 0; i < nodes; i += 5) std::fill_n(masks.begin() + i * words, words, 0);  // some nodes forbid all
  const bool order = state.range(0) == 0;
  for (auto _ : state) {
    if (order) benchmark::DoNotOptimize(specdec::bitmask_fill_order(tree));
    else benchmark::DoNotOptimize(specdec::prune_tree(tree, v, specdec::matrix_view<const std::int32_t>(masks.data(), nodes, words)));
  }
}

}  // namespace

BENCHMARK(BM_masked_argmax)->ArgsProduct({{32000, 128256}, {5, 50, 95}})->ArgNames({"V", "allowed%"})->UseManualTime();
BENCHMARK(BM_masked_argmax_baseline)->ArgsProduct({{32000, 128256}, {5, 50, 95}})->ArgNames({"V", "allowed%"})->UseManualTime();
BENCHMARK(BM_apply_token_bitmask)->ArgsProduct({{32000, 128256}, {5, 50, 95}})->ArgNames({"V", "allowed%"})->UseManualTime();
BENCHMARK(BM_tree_penalties)->Arg(32000)->Arg(128256)->ArgName("V")->UseManualTime();
BENCHMARK(BM_tree_penalties_baseline)->Arg(32000)->Arg(128256)->ArgName("V")->UseManualTime();
BENCHMARK(BM_constrained_row)->ArgsProduct({{32000, 128256}, {50}, {0, 64, 1000}})->ArgNames({"V", "allowed%", "prompt"})->UseManualTime();
BENCHMARK(BM_constrained_row_baseline)->ArgsProduct({{32000, 128256}, {50}, {0, 64, 1000}})->ArgNames({"V", "allowed%", "prompt"})->UseManualTime();
BENCHMARK(BM_grammar_bookkeeping_64)->Arg(0)->Arg(1)->ArgName("prune");
BENCHMARK_MAIN();
