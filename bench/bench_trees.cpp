// SPDX-License-Identifier: Apache-2.0
// Tree construction on one CPU core (Eigen backend): a full EAGLE-2 build (MoA's settings: top-k 8,
// depth 6, 62 tokens; EAGLE-2's defaults: top-k 10, depth 5, 60 tokens) and Medusa's 63-node
// candidate build, reported as `x_stream` = time / one streaming max-reduction over every logits row
// the build reads, measured in the same process; rows come from a pool larger than the LLC. Beside
// each, the straightforward sort-based build (copy + std::partial_sort per row, std::sort of all
// candidates). Also the tree bookkeeping of a 64-node tree: mask + positions + retrieve paths.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/interop/medusa.hpp>
#include <specdec/mask/tree_mask.hpp>
#include <specdec/tree/eagle2.hpp>

#include "paired.hpp"

namespace {

using specdec::index_t;

using pool = bench::row_pool;

/// Runs `body` once per iteration, each call paired with a streaming pass over `stream_rows` other
/// rows of the pool (bench/paired.hpp).
template <class F>
void run_paired(benchmark::State& state, pool& p, index_t stream_rows, F&& body) {
  bench::paired_ratio ratio;
  for (auto _ : state) ratio.measure(state, body, [&] { bench::stream_pass(p.take(stream_rows)); });
  state.counters["x_stream"] = ratio.x_stream();
}

void BM_eagle2_build(benchmark::State& state) {
  const index_t v = state.range(0), k = state.range(1), depth = state.range(2), total = state.range(3);
  pool p(v);
  specdec::eigen b;
  specdec::eagle2_tree_builder<specdec::eigen> builder(b, {k, depth, total, specdec::tree_score::log_probability, {}});
  const std::vector<std::int32_t> root{1};
  run_paired(state, p, 1 + depth * k, [&] {
    builder.begin(p.take(1), root);
    for (index_t i = 0; i < depth; ++i) builder.expand(p.take(k));
    benchmark::DoNotOptimize(builder.finish());
  });
}

/// The straightforward build: log-softmax by two scalar passes, copy + partial_sort per row, a full
/// sort of every candidate at the end.
void BM_eagle2_build_baseline(benchmark::State& state) {
  const index_t v = state.range(0), k = state.range(1), depth = state.range(2), total = state.range(3);
  pool p(v);
  std::vector<index_t> ids(static_cast<std::size_t>(v));
  const auto top = [&](const float* x, std::vector<std::pair<float, int>>& out) {
    float m = *std::max_element(x, x + v);
    double s = 0;
    for (index_t j = 0; j < v; ++j) s += std::exp(x[j] - m);
    const float lse = m + static_cast<float>(std::log(s));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](index_t a, index_t b) { return x[a] > x[b]; });
    out.clear();
    for (index_t c = 0; c < k; ++c) out.push_back({x[ids[static_cast<std::size_t>(c)]] - lse, static_cast<int>(ids[static_cast<std::size_t>(c)])});
  };
  std::vector<std::pair<float, int>> row;
  run_paired(state, p, 1 + depth * k, [&] {
    std::vector<float> scores, frontier_scores;
    top(p.take(1).row(0), row);
    for (auto& [s, t] : row) scores.push_back(s), frontier_scores.push_back(s);
    for (index_t i = 0; i < depth; ++i) {
      const auto x = p.take(k);
      std::vector<float> grid;
      for (index_t r = 0; r < k; ++r) {
        top(x.row(r), row);
        for (auto& [s, t] : row) grid.push_back(s + frontier_scores[static_cast<std::size_t>(r)]);
      }
      scores.insert(scores.end(), grid.begin(), grid.end());
      std::sort(grid.begin(), grid.end(), std::greater<>());
      frontier_scores.assign(grid.begin(), grid.begin() + k);
    }
    std::vector<int> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)]; });
    order.resize(static_cast<std::size_t>(total - 1));
    std::sort(order.begin(), order.end());
    benchmark::DoNotOptimize(order.data());
  });
}

void BM_medusa_candidates(benchmark::State& state) {
  const index_t v = state.range(0);
  pool p(v);
  specdec::eigen b;
  const auto buf = specdec::medusa::make_buffers(specdec::choices::medusa_mc_sim_7b_63());
  run_paired(state, p, 5, [&] {
    const auto heads = p.take(4);
    const auto base = p.take(1);
    benchmark::DoNotOptimize(specdec::medusa::fill_candidates(b, buf, heads, base));
  });
}

/// Mask + positions + retrieve paths of Medusa's 64-node tree (no vocabulary rows: absolute time).
void BM_tree_bookkeeping_64(benchmark::State& state) {
  const auto tree = specdec::make_static_tree(specdec::choices::medusa_mc_sim_7b_63()).tree;
  std::vector<std::uint8_t> mask(64 * 64);
  std::vector<std::int64_t> positions(64);
  for (auto _ : state) {
    specdec::tree_mask_dense(tree, 0, specdec::matrix_view<std::uint8_t>(mask.data(), 64, 64));
    specdec::tree_positions(tree, 1000, specdec::vector_view<std::int64_t>(positions));
    benchmark::DoNotOptimize(specdec::retrieve_paths(tree));
    benchmark::DoNotOptimize(mask.data());
  }
}

}  // namespace

BENCHMARK(BM_eagle2_build)->Args({32000, 8, 6, 62})->Args({128256, 8, 6, 62})->Args({32000, 10, 5, 60})->Args({128256, 10, 5, 60})
    ->ArgNames({"V", "k", "depth", "T"})
    ->UseManualTime();
BENCHMARK(BM_eagle2_build_baseline)->Args({32000, 8, 6, 62})->Args({128256, 8, 6, 62})->Args({32000, 10, 5, 60})->Args({128256, 10, 5, 60})
    ->ArgNames({"V", "k", "depth", "T"})
    ->UseManualTime();
BENCHMARK(BM_medusa_candidates)->Arg(32000)->Arg(128256)->ArgName("V")->UseManualTime();
BENCHMARK(BM_tree_bookkeeping_64);
BENCHMARK_MAIN();
