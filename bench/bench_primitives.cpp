// SPDX-License-Identifier: Apache-2.0
// Row primitives of the Eigen backend (one CPU core) against the hardware limit measured in the same
// process: `x_stream` = time / time of one streaming pass (a plain max-reduction) over the same
// bytes. Rows come from a pool larger than the last-level cache, so nothing is cache-resident. Every
// call is paired with a streaming pass over other rows of the pool right after it (paired.hpp).
// Beside each: the straightforward baseline (copy + std::partial_sort, what llama.cpp does; or a
// two-pass scalar loop), reported as `x_stream` too.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include <specdec/backend/eigen.hpp>
#include <specdec/core/rng.hpp>

#include "paired.hpp"

namespace {

using specdec::index_t;

/// A pool of logits (or probabilities) larger than the LLC; each iteration takes the next rows.
struct pool {
  index_t rows, cols, slices;
  std::vector<float> data;
  index_t next = 0;
  pool(index_t r, index_t v, bool probabilities) : rows(r), cols(v) {
    slices = std::max<index_t>(2, static_cast<index_t>(bench::pool_bytes() / (sizeof(float) * r * v)));
    data.resize(static_cast<std::size_t>(slices * r * v));
    const specdec::philox_stream s{1, 0};
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 8.0f * s.uniform(i) - 4.0f;
    if (probabilities) {
      for (index_t row = 0; row < slices * r; ++row) {
        float* x = data.data() + row * v;
        double sum = 0;
        for (index_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(x[j]));
        for (index_t j = 0; j < v; ++j) x[j] = static_cast<float>(std::exp(static_cast<double>(x[j])) / sum);
      }
    }
  }
  specdec::matrix_view<const float> take() {
    const float* p = data.data() + (next++ % slices) * rows * cols;
    return {p, rows, cols};
  }
};

using bench::stream_pass;

/// Runs `body` on the next `pool_rows` rows of a pool per iteration, each call paired with a streaming
/// pass over the pool's next rows (bench/paired.hpp).
template <class F>
void run_rows(benchmark::State& state, bool probabilities, index_t pool_rows, F&& body) {
  const index_t cols = state.range(1);
  pool p(pool_rows, cols, probabilities);
  bench::paired_ratio ratio;
  for (auto _ : state) {
    const auto x = p.take();
    ratio.measure(state, [&] { body(x); }, [&] { stream_pass(p.take()); });
  }
  state.counters["x_stream"] = ratio.x_stream();
  state.SetBytesProcessed(state.iterations() * pool_rows * cols * static_cast<std::int64_t>(sizeof(float)));
}

template <class F>
void run(benchmark::State& state, bool probabilities, F&& body) {
  run_rows(state, probabilities, state.range(0), std::forward<F>(body));
}

specdec::eigen backend;

void BM_stream_max(benchmark::State& state) {  // the limit against itself: x_stream ~ 1 (a sanity check)
  run(state, false, stream_pass);
}

void BM_argmax(benchmark::State& state) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(state.range(0)));
  run(state, false, [&](specdec::matrix_view<const float> x) { backend.row_argmax(x, specdec::vector_view<std::int32_t>(idx)); });
}

void BM_argmax_baseline(benchmark::State& state) {  // std::max_element per row
  std::vector<std::int32_t> idx(static_cast<std::size_t>(state.range(0)));
  run(state, false, [&](specdec::matrix_view<const float> x) {
    for (index_t r = 0; r < x.rows(); ++r)
      idx[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(std::max_element(x.row(r), x.row(r) + x.cols()) - x.row(r));
    benchmark::DoNotOptimize(idx.data());
  });
}

void BM_topk(benchmark::State& state) {
  const index_t k = state.range(2);
  std::vector<float> vals(static_cast<std::size_t>(state.range(0) * k));
  std::vector<std::int32_t> ids(vals.size());
  run(state, false, [&](specdec::matrix_view<const float> x) {
    backend.row_topk(x, k, specdec::matrix_view<float>(vals.data(), x.rows(), k),
                     specdec::matrix_view<std::int32_t>(ids.data(), x.rows(), k));
  });
}

/// The straightforward top-k: copy (value, index) pairs, std::partial_sort (llama.cpp's sampler).
void BM_topk_baseline(benchmark::State& state) {
  const index_t k = state.range(2);
  std::vector<std::pair<float, std::int32_t>> cand(static_cast<std::size_t>(state.range(1)));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(state.range(0) * k));
  run(state, false, [&](specdec::matrix_view<const float> x) {
    for (index_t r = 0; r < x.rows(); ++r) {
      for (index_t j = 0; j < x.cols(); ++j) cand[static_cast<std::size_t>(j)] = {x(r, j), static_cast<std::int32_t>(j)};
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      for (index_t i = 0; i < k; ++i) ids[static_cast<std::size_t>(r * k + i)] = cand[static_cast<std::size_t>(i)].second;
    }
    benchmark::DoNotOptimize(ids.data());
  });
}

void BM_topk_logsumexp(benchmark::State& state) {
  const index_t k = state.range(2);
  std::vector<float> vals(static_cast<std::size_t>(state.range(0) * k)), lse(static_cast<std::size_t>(state.range(0)));
  std::vector<std::int32_t> ids(vals.size());
  run(state, false, [&](specdec::matrix_view<const float> x) {
    backend.row_topk_logsumexp(x, k, 1.0f, specdec::matrix_view<float>(vals.data(), x.rows(), k),
                               specdec::matrix_view<std::int32_t>(ids.data(), x.rows(), k), specdec::vector_view<float>(lse));
  });
}

void BM_log_softmax(benchmark::State& state) {
  std::vector<float> out(static_cast<std::size_t>(state.range(0) * state.range(1)));
  run(state, false, [&](specdec::matrix_view<const float> x) {
    backend.row_log_softmax(x, 1.0f, specdec::matrix_view<float>(out.data(), x.rows(), x.cols()));
  });
}

void BM_softmax(benchmark::State& state) {
  std::vector<float> out(static_cast<std::size_t>(state.range(0) * state.range(1)));
  run(state, false, [&](specdec::matrix_view<const float> x) {
    backend.row_softmax(x, 1.0f, specdec::matrix_view<float>(out.data(), x.rows(), x.cols()));
  });
}

void BM_logsumexp(benchmark::State& state) {
  std::vector<float> out(static_cast<std::size_t>(state.range(0)));
  run(state, false, [&](specdec::matrix_view<const float> x) {
    backend.row_logsumexp(x, 1.0f, specdec::vector_view<float>(out.data(), x.rows()));
  });
}

/// The straightforward log-softmax: max pass, std::exp sum pass, write pass.
void BM_log_softmax_baseline(benchmark::State& state) {
  std::vector<float> out(static_cast<std::size_t>(state.range(0) * state.range(1)));
  run(state, false, [&](specdec::matrix_view<const float> x) {
    for (index_t r = 0; r < x.rows(); ++r) {
      const float* in = x.row(r);
      const float m = *std::max_element(in, in + x.cols());
      double s = 0;
      for (index_t j = 0; j < x.cols(); ++j) s += std::exp(in[j] - m);
      const float ls = static_cast<float>(std::log(s));
      for (index_t j = 0; j < x.cols(); ++j) out[static_cast<std::size_t>(r * x.cols() + j)] = in[j] - m - ls;
    }
    benchmark::DoNotOptimize(out.data());
  });
}

void BM_sample(benchmark::State& state) {
  std::vector<float> u(static_cast<std::size_t>(state.range(0)), 0.6180339f);
  std::vector<std::int32_t> tok(u.size());
  run(state, true, [&](specdec::matrix_view<const float> p) {
    backend.row_sample(p, specdec::vector_view<const float>(u), specdec::vector_view<std::int32_t>(tok));
  });
}

/// The straightforward sampler: a cumulative sum (std::partial_sum into a copy), then a search.
void BM_sample_baseline(benchmark::State& state) {
  std::vector<float> cdf(static_cast<std::size_t>(state.range(1)));
  std::vector<std::int32_t> tok(static_cast<std::size_t>(state.range(0)));
  run(state, true, [&](specdec::matrix_view<const float> p) {
    for (index_t r = 0; r < p.rows(); ++r) {
      std::partial_sum(p.row(r), p.row(r) + p.cols(), cdf.begin());
      tok[static_cast<std::size_t>(r)] =
          static_cast<std::int32_t>(std::upper_bound(cdf.begin(), cdf.end(), 0.6180339f * cdf.back()) - cdf.begin());
    }
    benchmark::DoNotOptimize(tok.data());
  });
}

void BM_sample_residual(benchmark::State& state) {
  // p and q are consecutive rows of one pool slice: the streaming pass for this one reads 2x the bytes.
  const index_t rows = state.range(0), cols = state.range(1);
  std::vector<float> u(static_cast<std::size_t>(rows), 0.6180339f);
  std::vector<std::int32_t> tok(u.size());
  run_rows(state, true, 2 * rows, [&](specdec::matrix_view<const float> both) {
    backend.row_sample_residual(specdec::matrix_view<const float>(both.row(0), rows, cols),
                                specdec::matrix_view<const float>(both.row(rows), rows, cols),
                                specdec::vector_view<const float>(u), specdec::vector_view<std::int32_t>(tok));
  });
}

void shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t v : {32000, 128256, 262144})
    for (std::int64_t rows : {1, 8, 64}) b->Args({rows, v});
}
void topk_shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t v : {32000, 128256, 262144})
    for (std::int64_t rows : {1, 8, 64})
      for (std::int64_t k : {1, 8, 64}) b->Args({rows, v, k});
}

}  // namespace

BENCHMARK(BM_stream_max)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_argmax)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_argmax_baseline)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_topk)->Apply(topk_shapes)->ArgNames({"rows", "V", "k"})->UseManualTime();
BENCHMARK(BM_topk_baseline)->Apply(topk_shapes)->ArgNames({"rows", "V", "k"})->UseManualTime();
BENCHMARK(BM_topk_logsumexp)->Apply(topk_shapes)->ArgNames({"rows", "V", "k"})->UseManualTime();
BENCHMARK(BM_log_softmax)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_log_softmax_baseline)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_softmax)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_logsumexp)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_sample)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_sample_baseline)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();
BENCHMARK(BM_sample_residual)->Apply(shapes)->ArgNames({"rows", "V"})->UseManualTime();

BENCHMARK_MAIN();
