// SPDX-License-Identifier: Apache-2.0
// x_stream by pairing, shared by the benchmarks: every timed call is followed by the hardware limit
// (one streaming max-reduction over other rows of the same pool, so neither warms the cache for the
// other), and x_stream is the ratio of the two sums. This VM's speed wanders by +-15 % over seconds;
// a limit measured once per shape, minutes away from the calls it divides, carried that drift into
// the ratio.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <vector>

#include <specdec/backend/detail/row_kernels.hpp>
#include <specdec/core/rng.hpp>
#include <specdec/core/view.hpp>

namespace bench {

/// Bytes of input each benchmark cycles through: 256 MiB (8x a 32 MiB last-level cache), so that no
/// call finds its rows in cache. SPECDEC_BENCH_POOL_MIB overrides it; CI's smoke run shrinks it to
/// start each benchmark quickly (filling the pool is most of a 10 ms run), and its ratios then mean
/// nothing: rows may be cache-resident.
inline std::size_t pool_bytes() {
  const char* mib = std::getenv("SPECDEC_BENCH_POOL_MIB");
  const long value = mib == nullptr ? 0 : std::strtol(mib, nullptr, 10);
  return std::size_t(value > 0 ? value : 256) << 20;
}

/// The hardware limit: one streaming max-reduction over every row of x.
inline void stream_pass(specdec::matrix_view<const float> x) {
  for (specdec::index_t r = 0; r < x.rows(); ++r) benchmark::DoNotOptimize(specdec::detail::scan_max(x.row(r), x.cols()).max);
}

/// Rows of uniform logits in [-4, 4) filling pool_bytes(), handed out in turn (wrapping around), so that
/// consecutive calls read rows no cache holds.
struct row_pool {
  specdec::index_t cols;
  std::vector<float> data;
  specdec::index_t rows_total, next = 0;
  explicit row_pool(specdec::index_t v) : cols(v) {
    rows_total = static_cast<specdec::index_t>(pool_bytes() / (sizeof(float) * v));
    data.resize(static_cast<std::size_t>(rows_total * v));
    const specdec::philox_stream s{3, 0};
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 8.0f * s.uniform(i) - 4.0f;
  }
  specdec::matrix_view<float> take(specdec::index_t rows) {
    if (next + rows > rows_total) next = 0;
    float* p = data.data() + next * cols;
    next += rows;
    return {p, rows, cols};
  }
};

class paired_ratio {
 public:
  /// Times `call()`, then `limit()`; the iteration's (manual) time is the call's alone.
  template <class Call, class Limit>
  void measure(benchmark::State& state, Call&& call, Limit&& limit) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    limit();
    const auto t2 = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    call_seconds_ += seconds;
    limit_seconds_ += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(seconds);
  }
  /// Sum of call times over sum of limit times.
  double x_stream() const { return call_seconds_ / limit_seconds_; }

 private:
  double call_seconds_ = 0.0, limit_seconds_ = 0.0;
};

}  // namespace bench
