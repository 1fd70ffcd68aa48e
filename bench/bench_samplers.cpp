// SPDX-License-Identifier: Apache-2.0
// Verification on one CPU core (Eigen backend): a chain of gamma = 5 drafts and a 60-node EAGLE-2 tree
// (top-k 10, depth 5), batch 1 and 16, V in {32000, 128256, 151936}, temperature 0 (greedy) and 1
// (lossless speculative sampling from the target's logits). `x_stream` = time / one streaming
// max-reduction over every target row of every request (batch x nodes rows), each call paired with a
// streaming pass over another call's rows right after it (paired.hpp); rows come from a pool at
// least 8x the LLC and twice one call's rows.
//
// The target rows are random logits in which the first child of every node is planted with a high
// logit (p ~ 0.6 at T = 1), so walks descend a few levels as real drafts do; the measured mean
// accepted length is reported as `accepted`. Stochastic verification reads only the rows its walk
// visits (softened on first use), hence x_stream well below 1. Beside each: the straightforward
// implementation that softmaxes (T = 1) or argmaxes (T = 0) every row with scalar loops first.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/sampling/greedy.hpp>
#include <specdec/sampling/speculative.hpp>
#include <specdec/tree/eagle2.hpp>

#include "paired.hpp"

namespace {

using specdec::index_t;
namespace sampling = specdec::sampling;

enum shape : int { chain5 = 0, tree60 = 1 };

/// The draft of one request: its tree and, for the chain, the draft row of each node (the chain is
/// drawn from draft distributions; the tree is EAGLE's deterministic top-k).
struct draft_case {
  specdec::draft_tree tree;
  std::vector<index_t> draft_rows;
};

draft_case make_case(shape s, index_t v) {
  if (s == chain5) {
    draft_case c{sampling::make_chain(0, std::vector<std::int32_t>{11, 22, 33, 44, 55}), {-1, 0, 1, 2, 3, 4}};
    return c;
  }
  // An EAGLE-2 tree built from random draft logits: its shape is what EAGLE-2 produces.
  std::vector<float> logits(static_cast<std::size_t>(11 * v));
  const specdec::philox_stream rng{7, 0};
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = 8.0f * rng.uniform(i) - 4.0f;
  specdec::eigen b;
  specdec::eagle2_tree_builder<specdec::eigen> builder(b, {10, 5, 60, specdec::tree_score::log_probability, {}});
  const std::vector<std::int32_t> root{1};
  builder.begin(specdec::matrix_view<const float>(logits.data(), 1, v), root);
  for (int i = 0; i < 5; ++i) builder.expand(specdec::matrix_view<const float>(logits.data() + v, 10, v));
  return {builder.finish().at(0).tree, {}};
}

/// Target logits for `slices` calls of `batch` requests with `n` nodes each; row `node` of a request
/// has its first child's token planted 6 above the row's range, so p(first child) ~ 0.6 at T = 1.
struct target_pool {
  index_t rows_per_call, cols, slices;
  std::vector<float> data;
  index_t next = 0;
  target_pool(const draft_case& c, index_t batch, index_t v) : cols(v) {
    const index_t n = c.tree.size();
    rows_per_call = batch * n;
    const auto bytes_per_call = static_cast<std::size_t>(rows_per_call * v) * sizeof(float);
    slices = static_cast<index_t>(std::max<std::size_t>(2, (bench::pool_bytes() + bytes_per_call - 1) / bytes_per_call));
    data.resize(static_cast<std::size_t>(slices * rows_per_call * v));
    const specdec::philox_stream s{3, 0};
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 8.0f * s.uniform(i) - 4.0f;
    std::vector<std::int32_t> first_child(static_cast<std::size_t>(n), -1);
    for (index_t i = n - 1; i >= 1; --i) first_child[static_cast<std::size_t>(c.tree.parent[static_cast<std::size_t>(i)])] = static_cast<std::int32_t>(i);
    const float boost = 4.0f + std::log(static_cast<float>(v));
    for (index_t row = 0; row < slices * rows_per_call; ++row) {
      const std::int32_t child = first_child[static_cast<std::size_t>(row % n)];
      if (child >= 0) data[static_cast<std::size_t>(row * v + c.tree.token[static_cast<std::size_t>(child)])] = boost;
    }
  }
  specdec::matrix_view<const float> take() {
    const float* p = data.data() + (next++ % slices) * rows_per_call * cols;
    return {p, rows_per_call, cols};
  }
};

/// Draft probabilities of the chain: each row puts 0.7 on its node's token, the rest spread evenly.
std::vector<float> chain_draft_rows(const draft_case& c, index_t v) {
  std::vector<float> q(static_cast<std::size_t>(5 * v), 0.3f / static_cast<float>(v - 1));
  for (index_t i = 1; i <= 5; ++i) q[static_cast<std::size_t>((i - 1) * v + c.tree.token[static_cast<std::size_t>(i)])] = 0.7f;
  return q;
}

struct fixture {
  draft_case draft;
  std::unique_ptr<target_pool> pool;
  std::vector<float> draft_probs;
};

/// One fixture per (shape, batch, V): the pool of target rows and the draft rows.
fixture& fixture_for(shape s, index_t batch, index_t v) {
  static std::map<std::tuple<int, index_t, index_t>, std::unique_ptr<fixture>> cache;
  auto& slot = cache[{s, batch, v}];
  if (slot) return *slot;
  cache.clear();  // one pool resident at a time: the largest is 1.2 GB
  auto& f = *(cache[{s, batch, v}] = std::make_unique<fixture>());
  f.draft = make_case(s, v);
  f.pool = std::make_unique<target_pool>(f.draft, batch, v);
  if (s == chain5) f.draft_probs = chain_draft_rows(f.draft, v);
  return f;
}

std::vector<sampling::speculative_request> requests_for(const fixture& f, index_t batch, std::uint64_t step) {
  std::vector<sampling::speculative_request> out(static_cast<std::size_t>(batch));
  for (index_t r = 0; r < batch; ++r) {
    auto& q = out[static_cast<std::size_t>(r)];
    q.tree = f.draft.tree;
    q.target_row = r * f.draft.tree.size();
    q.draft_rows = f.draft.draft_rows;
    q.uniforms = sampling::uniform_stream::philox({step, static_cast<std::uint64_t>(r)});
  }
  return out;
}

/// Scalar softmax of every row at temperature 1 (std::exp, two passes + a write), what an engine does
/// when it hands the sampler probabilities.
void softmax_all(specdec::matrix_view<const float> x, std::vector<float>& out) {
  out.resize(static_cast<std::size_t>(x.rows() * x.cols()));
  for (index_t r = 0; r < x.rows(); ++r) {
    const float* row = x.row(r);
    const float m = *std::max_element(row, row + x.cols());
    double sum = 0.0;
    float* y = out.data() + r * x.cols();
    for (index_t j = 0; j < x.cols(); ++j) sum += static_cast<double>(y[j] = std::exp(row[j] - m));
    const auto inv = static_cast<float>(1.0 / sum);
    for (index_t j = 0; j < x.cols(); ++j) y[j] *= inv;
  }
}

template <bool Baseline>
void BM_verify(benchmark::State& state) {
  const auto s = static_cast<shape>(state.range(0));
  const index_t v = state.range(1), batch = state.range(2);
  const bool greedy = state.range(3) == 0;
  fixture& f = fixture_for(s, batch, v);
  specdec::eigen b;
  const specdec::matrix_view<const float> draft(f.draft_probs.data(), f.draft_probs.empty() ? 0 : 5, v);
  std::vector<float> probs;
  std::vector<std::int32_t> argmax(static_cast<std::size_t>(f.pool->rows_per_call));
  std::uint64_t step = 0;
  double accepted = 0.0;
  bench::paired_ratio ratio;
  for (auto _ : state) {
    const auto logits = f.pool->take();
    const auto requests = requests_for(f, batch, step++);
    std::vector<sampling::speculative_result> results;
    ratio.measure(
        state,
        [&] {
          if (greedy && !Baseline) {
            results = sampling::verify_greedy(b, logits, requests);
          } else if (greedy) {
            for (index_t r = 0; r < logits.rows(); ++r)
              argmax[static_cast<std::size_t>(r)] =
                  static_cast<std::int32_t>(std::max_element(logits.row(r), logits.row(r) + v) - logits.row(r));
            results = sampling::verify_greedy(argmax, v, requests);
          } else if (!Baseline) {
            results = sampling::verify_speculative_logits(b, {logits, draft}, requests);
          } else {
            softmax_all(logits, probs);
            results = sampling::verify_speculative(b, {specdec::matrix_view<const float>(probs.data(), logits.rows(), v), draft}, requests);
          }
          benchmark::DoNotOptimize(results.data());
        },
        [&] { bench::stream_pass(f.pool->take()); });  // another call's rows
    for (const auto& r : results) accepted += static_cast<double>(r.accepted_nodes.size());
  }
  state.counters["x_stream"] = ratio.x_stream();
  state.counters["accepted"] = accepted / static_cast<double>(state.iterations() * batch);
}

}  // namespace

// Each shape runs with its baseline right after it, so the pool (up to 1.2 GB) is built once.
int main(int argc, char** argv) {
  for (const int s : {chain5, tree60})
    for (const index_t v : {32000, 128256, 151936})
      for (const index_t batch : {1, 16})
        for (const index_t t : {0, 1}) {
          benchmark::RegisterBenchmark("verify", BM_verify<false>)->Args({s, v, batch, t})->ArgNames({"tree", "V", "batch", "T"})->UseManualTime();
          benchmark::RegisterBenchmark("verify_baseline", BM_verify<true>)->Args({s, v, batch, t})->ArgNames({"tree", "V", "batch", "T"})->UseManualTime();
        }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
